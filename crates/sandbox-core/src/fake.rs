//! [`FakeSandbox`]: an in-memory [`Sandbox`] for testing code written against the protocol,
//! with a dictionary filesystem, programmable exec and a record of every call.
//!
//! Its futures never wait (everything is ready on first poll), so tests can drive it with any
//! executor, or with a ten-line `block_on` over [`std::task::Waker::noop`].
//!
//! Interactive execs ([`crate::InteractiveExec`]): stdin is streamed like bytes (the fake
//! reads the input channel to its end, blocking, then runs the handler with all of it as
//! `request.stdin`, as the recorded call shows); a tty is refused with
//! [`Error::Unsupported`]: a fake that ran the command without one would lie to the test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::paths::normalize;
use crate::sandbox::{DirEntry, EntryKind, ExecRequest, PutSource, Sandbox, Service, ServiceSpec};
use crate::tar::{self, TarEntry};
use crate::{Error, Input, Interactive, InteractiveExec, OutputSink, RunOutcome, Stream};

/// Programs the answer to an exec: output chunks in order, exit code, and whether to report
/// a timeout.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FakeReply {
    /// Output chunks, delivered to the sink one call each, in this order.
    pub output: Vec<(Stream, Vec<u8>)>,
    /// The exit code to report.
    pub exit_code: i32,
    /// Whether to report that the command hit its timeout.
    pub timed_out: bool,
    /// The duration to report.
    pub duration: Duration,
}

impl FakeReply {
    /// A reply with no output and exit code `code`.
    pub fn exit(code: i32) -> FakeReply {
        FakeReply { exit_code: code, ..FakeReply::default() }
    }

    /// Appends a stdout chunk.
    pub fn stdout(self, text: &str) -> FakeReply {
        self.chunk(Stream::Stdout, text.as_bytes())
    }

    /// Appends a stderr chunk.
    pub fn stderr(self, text: &str) -> FakeReply {
        self.chunk(Stream::Stderr, text.as_bytes())
    }

    /// Appends a raw chunk, e.g. half a UTF-8 character or half a secret.
    pub fn chunk(mut self, stream: Stream, bytes: &[u8]) -> FakeReply {
        self.output.push((stream, bytes.to_vec()));
        self
    }

    /// Marks the reply as a timeout.
    pub fn timed_out(mut self) -> FakeReply {
        self.timed_out = true;
        self
    }
}

/// One recorded call on a [`FakeSandbox`], in call order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FakeCall {
    /// [`Sandbox::exec`].
    Exec(ExecRequest),
    /// [`Sandbox::read_file`].
    ReadFile(String),
    /// [`Sandbox::write_file`].
    WriteFile {
        /// The path written.
        path: String,
        /// The bytes written.
        contents: Vec<u8>,
    },
    /// [`Sandbox::list_dir`].
    ListDir(String),
    /// [`Sandbox::put`].
    Put {
        /// What was put.
        source: PutSource,
        /// Where.
        dest: String,
    },
    /// [`Sandbox::start_service`].
    StartService(ServiceSpec),
    /// [`Sandbox::stop_service`] with the service id.
    StopService(String),
    /// [`Sandbox::stop`].
    Stop,
}

/// The fake's filesystem: absolute, normalized POSIX paths mapped to contents, plus the set
/// of directories. Parents of every file are directories; `/` always exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeFs {
    files: BTreeMap<String, Vec<u8>>,
    dirs: BTreeSet<String>,
}

impl Default for FakeFs {
    fn default() -> Self {
        FakeFs { files: BTreeMap::new(), dirs: BTreeSet::from(["/".to_owned()]) }
    }
}

impl FakeFs {
    /// The contents of a regular file.
    pub fn read(&self, path: &str) -> Result<&[u8], Error> {
        let path = sandbox_path(path)?;
        if let Some(contents) = self.files.get(&path) {
            return Ok(contents);
        }
        if self.dirs.contains(&path) {
            return Err(Error::IsADirectory { path });
        }
        if self.below_a_file(&path) {
            return Err(Error::NotADirectory { path });
        }
        Err(Error::NotFound { path })
    }

    /// Whether some ancestor of `path` is a regular file (the kernel's ENOTDIR).
    fn below_a_file(&self, path: &str) -> bool {
        let mut current = path;
        while let Some(cut) = current.rfind('/').filter(|cut| *cut > 0) {
            current = &current[..cut];
            if self.files.contains_key(current) {
                return true;
            }
        }
        false
    }

    /// Creates or replaces a regular file, creating its parent directories.
    pub fn write(&mut self, path: &str, contents: &[u8]) -> Result<(), Error> {
        let path = sandbox_path(path)?;
        if self.dirs.contains(&path) {
            return Err(Error::IsADirectory { path });
        }
        if self.below_a_file(&path) {
            // Named as the caller spelled it, like every other file error of the protocol.
            return Err(Error::NotADirectory { path });
        }
        if let Some(parent) = parent(&path) {
            self.mkdir_all(&parent)?;
        }
        self.files.insert(path, contents.to_vec());
        Ok(())
    }

    /// Creates a directory and its parents; existing directories are fine.
    pub fn mkdir_all(&mut self, path: &str) -> Result<(), Error> {
        let path = sandbox_path(path)?;
        let mut current = String::new();
        for name in path.split('/').filter(|name| !name.is_empty()) {
            current.push('/');
            current.push_str(name);
            if self.files.contains_key(&current) {
                return Err(Error::NotADirectory { path: current });
            }
            self.dirs.insert(current.clone());
        }
        Ok(())
    }

    /// A directory's immediate children, sorted by name.
    pub fn list(&self, path: &str) -> Result<Vec<DirEntry>, Error> {
        let path = sandbox_path(path)?;
        if self.files.contains_key(&path) {
            return Err(Error::NotADirectory { path });
        }
        if !self.dirs.contains(&path) {
            return Err(Error::NotFound { path });
        }
        let prefix = if path == "/" { path.clone() } else { format!("{path}/") };
        let child = |candidate: &str| -> Option<String> {
            let rest = candidate.strip_prefix(&prefix)?;
            (!rest.is_empty() && !rest.contains('/')).then(|| rest.to_owned())
        };
        let mut entries: Vec<DirEntry> = self
            .files
            .iter()
            .filter_map(|(file, contents)| {
                let name = child(file)?;
                Some(DirEntry { name, kind: EntryKind::File, size: contents.len() as u64 })
            })
            .chain(self.dirs.iter().filter_map(|dir| {
                Some(DirEntry { name: child(dir)?, kind: EntryKind::Dir, size: 0 })
            }))
            .collect();
        entries.sort();
        Ok(entries)
    }

    /// Whether anything exists at `path`.
    pub fn exists(&self, path: &str) -> bool {
        sandbox_path(path)
            .is_ok_and(|path| self.files.contains_key(&path) || self.dirs.contains(&path))
    }

    /// Every regular file, path to contents, sorted by path.
    pub fn files(&self) -> &BTreeMap<String, Vec<u8>> {
        &self.files
    }
}

/// An exec handler: sees the request and may change the filesystem.
type Handler = Arc<dyn Fn(&ExecRequest, &mut FakeFs) -> FakeReply + Send + Sync>;

struct State {
    fs: FakeFs,
    handlers: Vec<(Vec<String>, Handler)>,
    calls: Vec<FakeCall>,
    services: Vec<Service>,
    published: Vec<u16>,
    next_service: u64,
    stopped: bool,
}

/// An in-memory [`Sandbox`]. Register exec handlers by argv prefix; the longest matching
/// prefix wins, and among equal prefixes the one registered last (so a test can override a
/// catch-all). A command without a handler exits 127 with a message on stderr, like a shell.
///
/// [`PutSource::Tar`] is unpacked into the filesystem; [`PutSource::HostPath`] is refused
/// because reading the host is IO, which this crate never does. Like a session, it serves
/// only the ports it publishes ([`FakeSandbox::publish`]), at `http://127.0.0.1:{port}`.
pub struct FakeSandbox {
    id: String,
    state: Mutex<State>,
}

impl std::fmt::Debug for FakeSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state();
        f.debug_struct("FakeSandbox")
            .field("id", &self.id)
            .field("fs", &state.fs)
            .field("handlers", &state.handlers.iter().map(|(prefix, _)| prefix).collect::<Vec<_>>())
            .field("calls", &state.calls)
            .field("stopped", &state.stopped)
            .finish()
    }
}

impl FakeSandbox {
    /// An empty running sandbox with only `/`.
    pub fn new(id: &str) -> FakeSandbox {
        FakeSandbox {
            id: id.to_owned(),
            state: Mutex::new(State {
                fs: FakeFs::default(),
                handlers: Vec::new(),
                calls: Vec::new(),
                services: Vec::new(),
                published: Vec::new(),
                next_service: 1,
                stopped: false,
            }),
        }
    }

    /// Publishes `port`, as `session start --publish PORT` does: a service may listen on it.
    pub fn publish(&self, port: u16) {
        self.state().published.push(port);
    }

    /// Seeds a file without recording a call.
    pub fn add_file(&self, path: &str, contents: &[u8]) -> Result<(), Error> {
        self.state().fs.write(path, contents)
    }

    /// Registers `handler` for commands whose argv starts with `prefix` (an empty prefix
    /// matches everything). The handler runs while the sandbox is locked: it changes files
    /// through the `&mut FakeFs` it gets and must not call back into the sandbox.
    pub fn on_exec(
        &self,
        prefix: &[&str],
        handler: impl Fn(&ExecRequest, &mut FakeFs) -> FakeReply + Send + Sync + 'static,
    ) {
        let prefix = prefix.iter().map(|arg| (*arg).to_owned()).collect();
        self.state().handlers.push((prefix, Arc::new(handler)));
    }

    /// Registers a fixed reply for commands whose argv starts with `prefix`.
    pub fn on_exec_reply(&self, prefix: &[&str], reply: FakeReply) {
        self.on_exec(prefix, move |_, _| reply.clone());
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<FakeCall> {
        self.state().calls.clone()
    }

    /// A copy of the filesystem.
    pub fn fs(&self) -> FakeFs {
        self.state().fs.clone()
    }

    /// The services currently running.
    pub fn services(&self) -> Vec<Service> {
        self.state().services.clone()
    }

    /// Whether [`Sandbox::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.state().stopped
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panicking handler poisons the lock; the state itself is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `call` and fails if the sandbox is stopped.
    fn begin(&self, call: FakeCall) -> Result<MutexGuard<'_, State>, Error> {
        let mut state = self.state();
        state.calls.push(call);
        if state.stopped {
            return Err(Error::Stopped { id: self.id.clone() });
        }
        Ok(state)
    }

    fn exec_now(
        &self,
        request: &ExecRequest,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome, Error> {
        let mut state = self.begin(FakeCall::Exec(request.clone()))?;
        // A working directory that is not one: the command cannot start, which the agent of a
        // session reports as a shell does (127 when it is missing, 126 otherwise), not as an
        // error of the call.
        if let Some(cwd) = &request.cwd {
            let cwd = sandbox_path(cwd)?;
            if !state.fs.dirs.contains(&cwd) {
                let program = request.argv.first().map_or("", String::as_str);
                let (code, why) = if state.fs.files.contains_key(&cwd) {
                    (126, "Not a directory")
                } else {
                    (127, "No such file or directory")
                };
                drop(state);
                output.write(Stream::Stderr, format!("{program}: {cwd}: {why}\n").as_bytes());
                return Ok(RunOutcome::exited(code, Duration::ZERO));
            }
        }
        let handler = state
            .handlers
            .iter()
            .enumerate()
            .filter(|(_, (prefix, _))| request.argv.starts_with(prefix))
            .max_by_key(|(index, (prefix, _))| (prefix.len(), *index))
            .map(|(_, (_, handler))| Arc::clone(handler));
        let reply = match handler {
            Some(handler) => handler(request, &mut state.fs),
            None => {
                let program = request.argv.first().map_or("", String::as_str);
                FakeReply::exit(127)
                    .stderr(&format!("fake-sandbox: {program}: command not found\n"))
            }
        };
        drop(state);
        for (stream, chunk) in &reply.output {
            output.write(*stream, chunk);
            // As an engine does: a reader that went away stops the command there.
            if output.closed() {
                return Ok(RunOutcome {
                    exit_code: crate::EXIT_CLOSED_PIPE,
                    duration: reply.duration,
                    timed_out: false,
                    warnings: Vec::new(),
                    net_refused: Vec::new(),
                });
            }
        }
        Ok(RunOutcome {
            exit_code: reply.exit_code,
            duration: reply.duration,
            timed_out: reply.timed_out,
            warnings: Vec::new(),
            net_refused: Vec::new(),
        })
    }

    fn put_now(&self, source: &PutSource, dest: &str) -> Result<(), Error> {
        let mut state =
            self.begin(FakeCall::Put { source: source.clone(), dest: dest.to_owned() })?;
        let dest = sandbox_path(dest)?;
        let archive = match source {
            PutSource::Tar(archive) => archive,
            PutSource::HostPath(path) => {
                return Err(Error::Unsupported {
                    what: format!("copying host path `{}`", path.display()),
                    by: "the fake sandbox".to_owned(),
                    hint: "put a `PutSource::Tar` built in the test instead".to_owned(),
                });
            }
        };
        let entries = tar::read(archive)?;
        // Unpack into a copy so a bad entry leaves the filesystem untouched.
        let mut fs = state.fs.clone();
        fs.mkdir_all(&dest)?;
        for entry in entries {
            let (relative, contents) = match &entry {
                TarEntry::File { path, contents } => (path, Some(contents)),
                TarEntry::Dir { path } => (path, None),
            };
            let target = below(&dest, relative)?;
            match contents {
                Some(contents) => fs.write(&target, contents)?,
                None => fs.mkdir_all(&target)?,
            }
        }
        state.fs = fs;
        Ok(())
    }

    fn start_service_now(&self, service: &ServiceSpec) -> Result<Service, Error> {
        let mut state = self.begin(FakeCall::StartService(service.clone()))?;
        if service.port == 0 {
            return Err(Error::InvalidPort);
        }
        if !state.published.contains(&service.port) {
            return Err(Error::Unsupported {
                what: format!("a service on port {}", service.port),
                by: format!("session `{}`", self.id),
                hint: format!("start the session with `--publish {}`", service.port),
            });
        }
        if state.services.iter().any(|running| running.port == service.port) {
            return Err(Error::PortInUse { port: service.port });
        }
        let started = Service {
            id: format!("{}-svc-{}", self.id, state.next_service),
            port: service.port,
            url: format!("http://127.0.0.1:{}", service.port),
        };
        state.next_service += 1;
        state.services.push(started.clone());
        Ok(started)
    }

    fn stop_service_now(&self, service: &Service) -> Result<(), Error> {
        let mut state = self.begin(FakeCall::StopService(service.id.clone()))?;
        let before = state.services.len();
        state.services.retain(|running| running.id != service.id);
        if state.services.len() == before {
            return Err(Error::NoSuchService { id: service.id.clone() });
        }
        Ok(())
    }

    fn stop_now(&self) {
        let mut state = self.state();
        state.calls.push(FakeCall::Stop);
        state.stopped = true;
        state.services.clear();
    }
}

impl Sandbox for FakeSandbox {
    type Error = Error;

    fn id(&self) -> &str {
        &self.id
    }

    async fn exec(
        &self,
        request: &ExecRequest,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome, Error> {
        self.exec_now(request, output)
    }

    async fn read_file(&self, path: &str) -> Result<Vec<u8>, Error> {
        let state = self.begin(FakeCall::ReadFile(path.to_owned()))?;
        state.fs.read(path).map(<[u8]>::to_vec)
    }

    async fn write_file(&self, path: &str, contents: &[u8]) -> Result<(), Error> {
        let mut state =
            self.begin(FakeCall::WriteFile { path: path.to_owned(), contents: contents.to_vec() })?;
        state.fs.write(path, contents)
    }

    async fn list_dir(&self, path: &str) -> Result<Vec<DirEntry>, Error> {
        let state = self.begin(FakeCall::ListDir(path.to_owned()))?;
        state.fs.list(path)
    }

    async fn put(&self, source: &PutSource, dest: &str) -> Result<(), Error> {
        self.put_now(source, dest)
    }

    async fn start_service(&self, service: &ServiceSpec) -> Result<Service, Error> {
        self.start_service_now(service)
    }

    async fn stop_service(&self, service: &Service) -> Result<(), Error> {
        self.stop_service_now(service)
    }

    async fn stop(&self) -> Result<(), Error> {
        self.stop_now();
        Ok(())
    }
}

impl InteractiveExec for FakeSandbox {
    async fn exec_interactive(
        &self,
        request: &ExecRequest,
        io: Interactive,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome, Error> {
        if io.tty.is_some() {
            return Err(Error::Unsupported {
                what: "a tty".to_owned(),
                by: "the fake sandbox".to_owned(),
                hint: "test a tty against a real session engine; the fake streams stdin only"
                    .to_owned(),
            });
        }
        let mut request = request.clone();
        // A closed channel is the end of input too, as for the real engines.
        while let Ok(input) = io.input.recv() {
            match input {
                Input::Stdin(bytes) => request.stdin.extend_from_slice(&bytes),
                Input::Eof => break,
                Input::Resize(_) => {}
            }
        }
        self.exec_now(&request, output)
    }
}

/// Validates and normalizes an absolute sandbox path.
fn sandbox_path(path: &str) -> Result<String, Error> {
    if !path.starts_with('/') {
        return Err(Error::RelativeSandboxPath { path: path.to_owned() });
    }
    Ok(normalize(Path::new(path)).to_string_lossy().into_owned())
}

fn parent(path: &str) -> Option<String> {
    let cut = path.rfind('/')?;
    Some(if cut == 0 { "/".to_owned() } else { path[..cut].to_owned() })
}

/// Joins an archive member path below `dest`, refusing members that climb out of it.
fn below(dest: &str, member: &str) -> Result<String, Error> {
    let relative = normalize(Path::new(member.trim_start_matches('/')));
    let relative = relative.to_string_lossy();
    if relative == ".." || relative.starts_with("../") {
        return Err(Error::InvalidTar {
            reason: format!("entry `{member}` escapes the destination `{dest}`"),
        });
    }
    sandbox_path(&format!("{dest}/{relative}"))
}
