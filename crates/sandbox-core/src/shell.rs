//! The [`Sandbox`](crate::Sandbox) file, service and script operations of a warm session,
//! built on one primitive: an exec of a small POSIX shell helper inside the session
//! ([`AgentShell::shell_exec`], which engines serve through the session's agent). Every engine
//! that has execs gets the same semantics, the same bounds on what the host reads back
//! (`CAPTURE_LIMIT`, `READ_FILE_LIMIT`; the session's code answers, so every answer is
//! untrusted input) and the same script contract: the session's own venv in its tmpfs home,
//! dependencies installed inside with the session's network, a marker per dependency set so the
//! warm path is one exec without uv.
//!
//! No IO here: the helpers only call the engine's exec.

use std::future::Future;
use std::time::Duration;

use sha2::Digest;

use crate::{
    Captured, DirEntry, EntryKind, Error, ExecRequest, OutputSink, RunOutcome, Service,
    ServiceSpec, Stream,
};

/// What a session engine provides: one exec, with output streamed to `output`.
pub trait AgentShell: Sync {
    /// The engine's error type; protocol errors arrive as [`Error`].
    type Error: From<Error> + Send;

    /// The session's id, for error messages.
    fn shell_id(&self) -> &str;

    /// Runs one command in the session (cwd `/` unless the request says otherwise is up to
    /// the engine; helpers here always set it).
    fn shell_exec(
        &self,
        request: &ExecRequest,
        output: &mut dyn OutputSink,
    ) -> impl Future<Output = Result<RunOutcome, Self::Error>> + Send;

    /// [`AgentShell::shell_exec`] with its stdin apart from the request (whose own is empty):
    /// an engine that frames stdin anyway sends the caller's bytes without a second whole
    /// copy. The default copies them into the request.
    fn shell_exec_input(
        &self,
        request: &ExecRequest,
        stdin: &[u8],
        output: &mut dyn OutputSink,
    ) -> impl Future<Output = Result<RunOutcome, Self::Error>> + Send {
        async move {
            let request = ExecRequest { stdin: stdin.to_vec(), ..request.clone() };
            self.shell_exec(&request, output).await
        }
    }
}

/// The session's own virtual environment, in its tmpfs home.
pub const SESSION_VENV: &str = "/home/sandbox/.venv";
/// uv's settings in every session of every engine: its cache in the session's home, no user or
/// project configuration, never a downloaded interpreter, the system's certificates, no progress bars.
pub const SESSION_UV_ENV: [(&str, &str); 6] = [
    ("UV_CACHE_DIR", "/home/sandbox/.cache/uv"),
    ("UV_NO_CONFIG", "1"),
    ("UV_PYTHON_DOWNLOADS", "never"),
    ("UV_SYSTEM_CERTS", "1"),
    ("UV_NATIVE_TLS", "1"),
    ("UV_NO_PROGRESS", "1"),
];
/// Markers of the dependency sets installed into [`SESSION_VENV`], one empty file per set.
const DEPS_MARKERS: &str = "/home/sandbox/.venv/.python-sandbox-deps";

/// What the host reads into memory from one helper command in a session (stderr of an
/// install, a service's start-up output, a listing): output is streamed everywhere else, and a
/// capture is bounded, because the session's code answers it.
pub const CAPTURE_LIMIT: usize = 16 << 20;
/// The largest file [`crate::Sandbox::read_file`] reads from a session.
pub const READ_FILE_LIMIT: usize = 64 << 20;

/// The warm path of a script run, in one exec. The first stdin line is a per-call nonce (read
/// from the pipe, so the script cannot learn it from argv or the environment); when the venv or
/// the dependency marker `$1` is missing, or the copy to `$2` fails, it prints the not-ready
/// line and exits before anything of the script runs. The rest of stdin is the script when `$2`
/// names where to copy it.
pub const RUN_IF_READY: &str = r#"IFS= read -r nonce
if [ ! -x /home/sandbox/.venv/bin/python ] || { [ -n "$1" ] && [ ! -e "$1" ]; }; then
  printf 'python-sandbox-not-ready-%s\n' "$nonce"; exit 0
fi
if [ -n "$2" ]; then
  { mkdir -p -- "${2%/*}" && cat > "$2"; } || { printf 'python-sandbox-not-ready-%s\n' "$nonce"; exit 0; }
fi
shift 2
exec "$@""#;

/// Pure: the marker file of a dependency set (order-insensitive, duplicates ignored); `None`
/// without dependencies.
pub fn deps_marker(dependencies: &[String]) -> Option<String> {
    let mut deps: Vec<&str> = dependencies.iter().map(|d| d.trim()).collect();
    deps.sort_unstable();
    deps.dedup();
    if deps.is_empty() {
        return None;
    }
    let mut hasher = sha2::Sha256::new();
    for dep in deps {
        hasher.update(dep.as_bytes());
        hasher.update(b"\n");
    }
    let digest: String = hasher.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect();
    Some(format!("{DEPS_MARKERS}/{digest}"))
}

/// Passes output through, except the not-ready line of [`RUN_IF_READY`]: stdout is held only
/// while it is still a prefix of that line.
pub struct NotReadyGate<'a> {
    line: Vec<u8>,
    held: Vec<u8>,
    open: bool,
    inner: &'a mut dyn OutputSink,
}

impl<'a> NotReadyGate<'a> {
    /// A gate for the not-ready line carrying `nonce`.
    pub fn new(nonce: &str, inner: &'a mut dyn OutputSink) -> Self {
        let line = format!("python-sandbox-not-ready-{nonce}\n").into_bytes();
        NotReadyGate { line, held: Vec::new(), open: false, inner }
    }

    /// True when the exec only reported "not ready"; otherwise flushes what it held.
    pub fn finish(self) -> bool {
        if !self.open && self.held == self.line {
            return true;
        }
        if !self.held.is_empty() {
            self.inner.write(Stream::Stdout, &self.held);
        }
        false
    }
}

impl OutputSink for NotReadyGate<'_> {
    fn write(&mut self, stream: Stream, chunk: &[u8]) {
        if stream != Stream::Stdout || self.open {
            return self.inner.write(stream, chunk);
        }
        self.held.extend_from_slice(chunk);
        if !self.line.starts_with(&self.held) {
            self.open = true;
            let held = std::mem::take(&mut self.held);
            self.inner.write(Stream::Stdout, &held);
        }
    }

    fn closed(&self) -> bool {
        self.inner.closed()
    }

    fn status(&mut self, line: &str) {
        self.inner.status(line);
    }
}

/// Pure: a byte count as `16 MiB`.
pub fn human_bytes(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// A [`Captured`] that takes at most `limit` bytes of both streams together; past that it
/// drops what comes and reports its reader closed, which stops the command.
pub struct Capped {
    /// What was taken.
    pub captured: Captured,
    limit: usize,
    over: bool,
}

impl Capped {
    /// An empty capture of at most `limit` bytes.
    pub fn new(limit: usize) -> Capped {
        Capped { captured: Captured::default(), limit, over: false }
    }

    /// Whether more than the limit came.
    pub fn over(&self) -> bool {
        self.over
    }
}

impl OutputSink for Capped {
    fn write(&mut self, stream: Stream, chunk: &[u8]) {
        let taken = self.captured.stdout.len() + self.captured.stderr.len();
        if self.over || taken + chunk.len() > self.limit {
            self.over = true;
            return;
        }
        self.captured.write(stream, chunk);
    }

    fn closed(&self) -> bool {
        self.over
    }
}

/// The error for a capture that went over `limit`.
pub fn too_large(id: &str, what: String, limit: usize) -> Error {
    Error::TooLarge {
        id: id.to_owned(),
        what,
        limit: human_bytes(limit),
        hint: "the host reads a session's answers into memory only up to this cap; move large data through the workspace, and if nothing there should be this large, code in the session may be misbehaving".to_owned(),
    }
}

/// Pure: parses `find -printf '%y %s %f\0'` output into sorted entries. The session's code
/// produced it, so every record must be one `find` can print: a name that is a single path
/// component (not empty, `.` or `..`, no `/`) and a size that is a number; `Err` names the
/// first record that is not.
pub fn parse_listing(bytes: &[u8]) -> Result<Vec<DirEntry>, String> {
    let mut entries = Vec::new();
    for record in bytes.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let text = String::from_utf8_lossy(record);
        let bad = || format!("a listing entry `{}`", text.chars().take(80).collect::<String>());
        let (kind, rest) = text.split_once(' ').ok_or_else(bad)?;
        let (size, name) = rest.split_once(' ').ok_or_else(bad)?;
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(bad());
        }
        let kind = match kind {
            "d" => EntryKind::Dir,
            "l" => EntryKind::Symlink,
            _ => EntryKind::File,
        };
        let size: u64 = size.parse().map_err(|_| bad())?;
        let size = if kind == EntryKind::File { size } else { 0 };
        entries.push(DirEntry { name: name.to_owned(), kind, size });
    }
    entries.sort();
    Ok(entries)
}

/// Pure: the stderr of a failed file helper as the protocol's error.
pub fn file_error(what: &str, path: &str, outcome: &RunOutcome, captured: &Captured) -> Error {
    let stderr = captured.stderr_lossy();
    if stderr.contains("No such file") || outcome.exit_code == 2 && stderr.contains("missing") {
        return Error::NotFound { path: path.to_owned() };
    }
    if stderr.contains("Is a directory") {
        return Error::IsADirectory { path: path.to_owned() };
    }
    if stderr.contains("Not a directory") || stderr.contains("notdir") {
        return Error::NotADirectory { path: path.to_owned() };
    }
    Error::SessionCommand { what: format!("{what} `{path}`"), message: stderr.trim().to_owned() }
}

/// `Ok` for an absolute sandbox path.
pub fn check_abs(path: &str) -> Result<(), Error> {
    if path.starts_with('/') {
        Ok(())
    } else {
        Err(Error::RelativeSandboxPath { path: path.to_owned() })
    }
}

fn strings(argv: &[&str]) -> Vec<String> {
    argv.iter().map(|s| (*s).to_owned()).collect()
}

/// Runs a helper command (cwd `/`) with its output captured, at most `limit` bytes; more
/// stops the command and is [`Error::TooLarge`] naming `what`.
pub async fn capture_limited<S: AgentShell>(
    shell: &S,
    argv: &[&str],
    stdin: Vec<u8>,
    limit: usize,
    what: &(dyn Fn() -> String + Sync),
) -> Result<(RunOutcome, Captured), S::Error> {
    let request =
        ExecRequest { argv: strings(argv), stdin, cwd: Some("/".to_owned()), ..Default::default() };
    let mut capped = Capped::new(limit);
    let outcome = shell.shell_exec(&request, &mut capped).await?;
    if capped.over() {
        return Err(too_large(shell.shell_id(), what(), limit).into());
    }
    Ok((outcome, capped.captured))
}

/// [`capture_limited`] at [`CAPTURE_LIMIT`].
pub async fn capture<S: AgentShell>(
    shell: &S,
    argv: &[&str],
    stdin: Vec<u8>,
) -> Result<(RunOutcome, Captured), S::Error> {
    let program = argv.first().copied().unwrap_or_default().to_owned();
    let what = move || format!("the output of a helper command (`{program}`)");
    capture_limited(shell, argv, stdin, CAPTURE_LIMIT, &what).await
}

/// [`crate::Sandbox::read_file`] through `cat`, at most [`READ_FILE_LIMIT`].
pub async fn read_file<S: AgentShell>(shell: &S, path: &str) -> Result<Vec<u8>, S::Error> {
    check_abs(path)?;
    let what = || format!("the file `{path}`");
    let (outcome, captured) =
        capture_limited(shell, &["cat", "--", path], Vec::new(), READ_FILE_LIMIT, &what).await?;
    if outcome.exit_code != 0 {
        return Err(file_error("reading", path, &outcome, &captured).into());
    }
    Ok(captured.stdout)
}

/// [`crate::Sandbox::write_file`]: parents created, contents over stdin.
pub async fn write_file<S: AgentShell>(
    shell: &S,
    path: &str,
    contents: &[u8],
) -> Result<(), S::Error> {
    check_abs(path)?;
    // The nearest existing ancestor decides "not a directory", as the kernel's ENOTDIR would,
    // rather than `mkdir`'s wording ("File exists") for a regular file in the way. A refusal
    // still reads the contents: an exec that ends before its stdin is taken makes an engine
    // API's attach fail (rootless podman) instead of reporting the refusal.
    let script = r#"d=$(dirname -- "$1"); p=$d
while [ ! -e "$p" ] && [ "$p" != / ]; do p=$(dirname -- "$p"); done
if [ -d "$1" ]; then echo "Is a directory" >&2
elif [ ! -d "$p" ]; then echo notdir >&2
elif mkdir -p -- "$d"; then exec cat > "$1"
fi
cat > /dev/null; exit 1"#;
    let request = ExecRequest {
        argv: strings(&["sh", "-c", script, "sh", path]),
        cwd: Some("/".to_owned()),
        ..Default::default()
    };
    let mut capped = Capped::new(CAPTURE_LIMIT);
    let outcome = shell.shell_exec_input(&request, contents, &mut capped).await?;
    if capped.over() {
        return Err(too_large(
            shell.shell_id(),
            format!("the output of writing `{path}`"),
            CAPTURE_LIMIT,
        )
        .into());
    }
    if outcome.exit_code != 0 {
        return Err(file_error("writing", path, &outcome, &capped.captured).into());
    }
    // An empty stdin is never attached; the file must still exist.
    if contents.is_empty() {
        let (outcome, captured) =
            capture(shell, &["sh", "-c", ": > \"$1\"", "sh", path], Vec::new()).await?;
        if outcome.exit_code != 0 {
            return Err(file_error("writing", path, &outcome, &captured).into());
        }
    }
    Ok(())
}

/// [`crate::Sandbox::list_dir`] through `find`; the listing is checked ([`parse_listing`]).
pub async fn list_dir<S: AgentShell>(shell: &S, path: &str) -> Result<Vec<DirEntry>, S::Error> {
    check_abs(path)?;
    let script = r#"if [ ! -e "$1" ]; then echo missing >&2; exit 2; fi
if [ ! -d "$1" ]; then echo notdir >&2; exit 3; fi
exec find "$1" -mindepth 1 -maxdepth 1 -printf '%y %s %f\0'"#;
    let what = || format!("the listing of `{path}`");
    let (outcome, captured) =
        capture_limited(shell, &["sh", "-c", script, "sh", path], Vec::new(), CAPTURE_LIMIT, &what)
            .await?;
    if outcome.exit_code != 0 {
        return Err(file_error("listing", path, &outcome, &captured).into());
    }
    parse_listing(&captured.stdout)
        .map_err(|problem| Error::AgentProtocol { id: shell.shell_id().to_owned(), problem }.into())
}

/// The script of [`put_tar`] (`$1` the destination, the archive on stdin), for engines that
/// stream the archive themselves. Modes as archived (`umask 0` for tar alone): a workspace
/// file the host has 0644 is 0644 in the sandbox, and comes back so, whatever the sandbox's
/// umask (077 in a pod turned every synced file 0600). tar run by a user other than root never
/// restores setuid, setgid or sticky bits.
pub const UNPACK: &str =
    r#"mkdir -p -- "$1" && umask 0 && exec tar -x -f - -C "$1" --no-same-owner"#;

/// [`crate::Sandbox::put`] of a tar archive, unpacked below `dest` (created if missing).
pub async fn put_tar<S: AgentShell>(
    shell: &S,
    archive: Vec<u8>,
    dest: &str,
) -> Result<(), S::Error> {
    check_abs(dest)?;
    let (outcome, captured) = capture(shell, &["sh", "-c", UNPACK, "sh", dest], archive).await?;
    if outcome.exit_code != 0 {
        return Err(file_error("unpacking into", dest, &outcome, &captured).into());
    }
    Ok(())
}

/// [`crate::Sandbox::start_service`] once the engine knows the host `url` of the port: starts
/// the command detached in its own session, then waits until something accepts on the port
/// inside (the host side of a published port may accept even when nothing listens).
pub async fn start_service<S: AgentShell>(
    shell: &S,
    service: &ServiceSpec,
    url: String,
) -> Result<Service, S::Error> {
    let port = service.port;
    let script = r#"port=$1; shift; mkdir -p /tmp/.services
if [ -s /tmp/.services/$port.pid ] && kill -0 "$(cat /tmp/.services/$port.pid)" 2>/dev/null; then echo inuse >&2; exit 3; fi
setsid "$@" > /tmp/.services/$port.log 2>&1 < /dev/null &
echo $! > /tmp/.services/$port.pid"#;
    let mut argv = strings(&["sh", "-c", script, "sh", &port.to_string()]);
    argv.extend(service.argv.iter().cloned());
    // The session's default working directory (its workspace): what a service serves from.
    let request = ExecRequest { argv, env: service.env.clone(), ..Default::default() };
    let mut capped = Capped::new(CAPTURE_LIMIT);
    let outcome = shell.shell_exec(&request, &mut capped).await?;
    if capped.over() {
        let what = format!("the start of the service on port {port}");
        return Err(too_large(shell.shell_id(), what, CAPTURE_LIMIT).into());
    }
    if outcome.exit_code == 3 {
        return Err(Error::PortInUse { port }.into());
    }
    if outcome.exit_code != 0 {
        return Err(Error::SessionCommand {
            what: "starting a service".to_owned(),
            message: capped.captured.stderr_lossy(),
        }
        .into());
    }
    let probe = format!(
        "import socket,sys,time\nfor _ in range(150):\n    try:\n        socket.create_connection(('127.0.0.1',{port}),0.2).close(); sys.exit(0)\n    except OSError: time.sleep(0.1)\nsys.exit(1)"
    );
    let (ready, _) = capture(shell, &["python3", "-c", &probe], Vec::new()).await?;
    if ready.exit_code != 0 {
        let tail = format!("tail -c 2000 /tmp/.services/{port}.log");
        let (_, log) = capture(shell, &["sh", "-c", &tail], Vec::new()).await?;
        return Err(Error::SessionCommand {
            what: format!("starting a service on port {port}"),
            message: format!("nothing listens after 15 s; its output:\n{}", log.stdout_lossy()),
        }
        .into());
    }
    Ok(Service { id: port.to_string(), port, url })
}

/// [`crate::Sandbox::stop_service`]: its process group gets SIGTERM, then SIGKILL. (No `--`
/// before the negative pid: dash's `kill` takes it as a pid and fails, which once left every
/// child of a service running.)
pub async fn stop_service<S: AgentShell>(shell: &S, service: &Service) -> Result<(), S::Error> {
    let script = r#"f=/tmp/.services/$1.pid; [ -s "$f" ] || { echo missing >&2; exit 2; }
pid=$(cat "$f"); kill -TERM "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "-$pid" 2>/dev/null || break; sleep 0.2; done
kill -KILL "-$pid" 2>/dev/null; rm -f "$f""#;
    let (outcome, _) = capture(shell, &["sh", "-c", script, "sh", &service.id], Vec::new()).await?;
    if outcome.exit_code == 2 {
        return Err(Error::NoSuchService { id: service.id.clone() }.into());
    }
    Ok(())
}

/// How [`run_script`] runs a script in a session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScriptOptions {
    /// Installed into the session's environment first (they stay for later scripts).
    pub dependencies: Vec<String>,
    /// The script's arguments.
    pub args: Vec<String>,
    /// Extra environment for the script, on top of the session's.
    pub env: Vec<(String, String)>,
    /// Kill the script (and its children) after this long.
    pub timeout: Option<Duration>,
}

/// Where the script of [`run_script`] is, inside the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptPlace<'a> {
    /// Its path inside the session.
    pub inside: &'a str,
    /// Its bytes, when it must be copied to `inside` first (a script outside the workspace).
    pub copy: Option<&'a [u8]>,
    /// A fresh random nonce for each call (the not-ready line, see [`RUN_IF_READY`]).
    pub nonce: &'a str,
    /// The interpreter the session's venv is created from (inside the session).
    pub python: &'a str,
}

/// Runs a script in the session's venv, installing its dependencies first when their marker
/// is missing. Warm path: one exec that checks the venv and the marker, copies the script if
/// needed (over stdin) and execs python; no uv. Only when that exec reports the session not
/// ready does the slow path create the venv, install and retry.
pub async fn run_script<S: AgentShell>(
    shell: &S,
    place: &ScriptPlace<'_>,
    options: &ScriptOptions,
    output: &mut dyn OutputSink,
) -> Result<RunOutcome, S::Error> {
    let marker = deps_marker(&options.dependencies);
    if let Some(outcome) = run_if_ready(shell, marker.as_deref(), place, options, output).await? {
        return Ok(outcome);
    }
    if let Some(line) = install_status(&options.dependencies) {
        output.status(&line);
    }
    prepare_venv(shell, place.python, &options.dependencies, marker.as_deref()).await?;
    run_if_ready(shell, marker.as_deref(), place, options, output).await?.ok_or_else(|| {
        Error::SessionCommand {
            what: "running the script".to_owned(),
            message: "the session's environment is not ready right after preparing it".to_owned(),
        }
        .into()
    })
}

/// Pure: the status line of the slow path's install, `None` when there is nothing to install
/// (a venv alone is made in a moment).
fn install_status(dependencies: &[String]) -> Option<String> {
    match dependencies.len() {
        0 => None,
        1 => Some("installing 1 dependency in the session".to_owned()),
        n => Some(format!("installing {n} dependencies in the session")),
    }
}

/// One exec: the script runs if the venv (and `marker`) exist; `None` when they do not.
async fn run_if_ready<S: AgentShell>(
    shell: &S,
    marker: Option<&str>,
    place: &ScriptPlace<'_>,
    options: &ScriptOptions,
    output: &mut dyn OutputSink,
) -> Result<Option<RunOutcome>, S::Error> {
    let mut stdin = format!("{}\n", place.nonce).into_bytes();
    stdin.extend_from_slice(place.copy.unwrap_or_default());
    let mut argv = strings(&["sh", "-c", RUN_IF_READY, "sh"]);
    argv.push(marker.unwrap_or_default().to_owned());
    argv.push(if place.copy.is_some() { place.inside.to_owned() } else { String::new() });
    argv.push(format!("{SESSION_VENV}/bin/python"));
    argv.push(place.inside.to_owned());
    argv.extend(options.args.iter().cloned());
    let request =
        ExecRequest { argv, stdin, env: options.env.clone(), timeout: options.timeout, cwd: None };
    let mut gate = NotReadyGate::new(place.nonce, output);
    let outcome = shell.shell_exec(&request, &mut gate).await?;
    Ok((!gate.finish()).then_some(outcome))
}

/// The slow path: creates the venv from `python` if missing, installs `dependencies` with the
/// session's network and records their marker.
async fn prepare_venv<S: AgentShell>(
    shell: &S,
    python: &str,
    dependencies: &[String],
    marker: Option<&str>,
) -> Result<(), S::Error> {
    let venv = r#"[ -x "$1/bin/python" ] || uv venv --quiet --python "$2" "$1""#;
    let (outcome, captured) =
        capture(shell, &["sh", "-c", venv, "sh", SESSION_VENV, python], Vec::new()).await?;
    if outcome.exit_code != 0 {
        return Err(Error::SessionCommand {
            what: "creating the session's venv".to_owned(),
            message: captured.stderr_lossy(),
        }
        .into());
    }
    let Some(marker) = marker else { return Ok(()) };
    let script = format!(
        r#"m=$1; shift; uv pip install --quiet --python {SESSION_VENV}/bin/python -- "$@" && mkdir -p -- "${{m%/*}}" && : > "$m""#
    );
    let mut argv = vec!["sh", "-c", &script, "sh", marker];
    argv.extend(dependencies.iter().map(String::as_str));
    let (outcome, captured) = capture(shell, &argv, Vec::new()).await?;
    if outcome.exit_code != 0 {
        return Err(Error::SessionPrepare {
            code: i64::from(outcome.exit_code),
            output: format!(
                "{}\nhint: dependencies install inside the session; a session started with `--net off` cannot download them",
                captured.stderr_lossy().trim_end()
            ),
        }
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_ignore_order_and_duplicates() {
        let a = deps_marker(&["b".to_owned(), "a".to_owned(), " a ".to_owned()]);
        let b = deps_marker(&["a".to_owned(), "b".to_owned()]);
        assert_eq!(a, b);
        assert!(a.as_deref().is_some_and(|m| m.starts_with(DEPS_MARKERS)));
        assert_eq!(deps_marker(&[]), None);
        assert_ne!(deps_marker(&["a".to_owned()]), b);
    }

    #[test]
    fn listings_refuse_names_that_climb() {
        let ok = parse_listing(b"f 3 b\0d 4096 a\0l 9 c\0").expect("listing");
        let names: Vec<_> = ok.iter().map(|e| (e.name.as_str(), e.kind, e.size)).collect();
        assert_eq!(
            names,
            [("a", EntryKind::Dir, 0), ("b", EntryKind::File, 3), ("c", EntryKind::Symlink, 0)]
        );
        for bad in [&b"f 1 ../x\0"[..], b"f 1 .\0", b"f x y\0", b"f 1 \0", b"nospace\0"] {
            assert!(parse_listing(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn captures_stop_at_their_cap() {
        let mut capped = Capped::new(4);
        capped.write(Stream::Stdout, b"abc");
        assert!(!capped.closed());
        capped.write(Stream::Stderr, b"de");
        assert!(capped.over() && capped.closed());
        assert_eq!(capped.captured.stdout, b"abc");
        assert_eq!(human_bytes(CAPTURE_LIMIT), "16 MiB");
        assert_eq!(human_bytes(2048), "2 KiB");
        assert_eq!(human_bytes(5), "5 bytes");
    }

    #[test]
    fn the_not_ready_line_is_swallowed_only_whole() {
        let mut out = Captured::default();
        let mut gate = NotReadyGate::new("n1", &mut out);
        gate.write(Stream::Stdout, b"python-sandbox-not-");
        gate.write(Stream::Stdout, b"ready-n1\n");
        assert!(gate.finish());
        assert!(out.stdout.is_empty());
        let mut gate = NotReadyGate::new("n1", &mut out);
        gate.write(Stream::Stdout, b"python-sandbox-not-ready-n2\n");
        assert!(!gate.finish());
        assert_eq!(out.stdout, b"python-sandbox-not-ready-n2\n");
    }
}
