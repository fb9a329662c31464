//! The binary under test: where it lives, and one invocation with a deadline and captured output.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

pub(crate) fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

pub(crate) fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => workspace_root().join(dir),
        None => workspace_root().join("target"),
    }
}

/// `PYTHON_SANDBOX_BIN`, else `target/debug/python-sandbox`, built once if missing.
pub(crate) fn locate() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("PYTHON_SANDBOX_BIN") {
        let bin = PathBuf::from(bin);
        return if bin.is_file() {
            Ok(bin)
        } else {
            Err(format!("PYTHON_SANDBOX_BIN={} is not a file", bin.display()))
        };
    }
    let bin = target_dir().join("debug").join("python-sandbox");
    if !bin.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        eprintln!("conformance: {} is missing, running `cargo build -p cli`", bin.display());
        let status = Command::new(&cargo)
            .args(["build", "-p", "cli"])
            .current_dir(workspace_root())
            .status()
            .map_err(|e| format!("cannot run {cargo}: {e}"))?;
        if !status.success() {
            return Err(format!("`cargo build -p cli` failed ({status})"));
        }
    }
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(format!("{} does not exist after `cargo build -p cli`", bin.display()))
    }
}

pub(crate) struct Invocation<'a> {
    pub(crate) bin: &'a Path,
    pub(crate) args: Vec<String>,
    /// A command the CLI is run through (its argv, the CLI's appended): it must `exec` the CLI,
    /// so the pid the runner signals is the CLI's.
    pub(crate) wrap: &'a [&'a str],
    pub(crate) cwd: &'a Path,
    pub(crate) env: &'a [(String, String)],
    pub(crate) deadline: Duration,
    /// Fed to the CLI's stdin (else it reads nothing).
    pub(crate) stdin: Option<Vec<u8>>,
    /// A file that gets the CLI's stderr instead of a pipe; read back into [`Output::stderr`].
    pub(crate) stderr_to: Option<PathBuf>,
    /// Close our end of the CLI's stdout after this many lines (`| head -N`).
    pub(crate) stdout_lines: Option<usize>,
}

#[derive(Debug, Default)]
pub(crate) struct Output {
    /// The exit code, with death by signal N folded into 128+N as a shell reports it.
    pub(crate) code: i32,
    pub(crate) signal: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) elapsed: Duration,
    /// Killed by the runner at the deadline.
    pub(crate) hung: bool,
    /// A pipe stayed open after the CLI exited: some process of the run outlived it.
    pub(crate) pipe_held: bool,
}

/// Host-side work alongside a run, given the CLI's pid; `exited` turns true once the CLI is gone,
/// so it can stop waiting.
pub(crate) type During<'a> = &'a (dyn Fn(&Running<'_>) -> Result<(), String> + Sync);

/// What a host-side action sees of the run in progress.
pub(crate) struct Running<'a> {
    /// Turns true when the CLI exited.
    pub(crate) exited: &'a AtomicBool,
    /// The CLI's pid (the process this runner started).
    pub(crate) pid: u32,
    stdout: &'a Mutex<Vec<u8>>,
}

impl Running<'_> {
    /// The CLI's stdout so far: where the sandbox is says nothing about whether this host sees
    /// its processes (a pod's node may be another machine), but the script's own lines arrive.
    pub(crate) fn stdout(&self) -> String {
        self.stdout.lock().map(|s| String::from_utf8_lossy(&s).into_owned()).unwrap_or_default()
    }
}

impl Invocation<'_> {
    pub(crate) fn run(
        &self,
        during: Option<During<'_>>,
    ) -> Result<(Output, Option<Result<(), String>>), String> {
        let start = Instant::now();
        let stderr_file = match &self.stderr_to {
            Some(path) => Stdio::from(
                std::fs::File::create(path)
                    .map_err(|e| format!("cannot create {}: {e}", path.display()))?,
            ),
            None => Stdio::piped(),
        };
        let mut command = match self.wrap.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(self.bin);
                c
            }
            None => Command::new(self.bin),
        };
        let mut child = command
            .args(&self.args)
            .current_dir(self.cwd)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(if self.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(stderr_file)
            .spawn()
            .map_err(|e| format!("cannot spawn {}: {e}", self.bin.display()))?;
        if let (Some(mut pipe), Some(bytes)) = (child.stdin.take(), &self.stdin) {
            use std::io::Write as _;
            pipe.write_all(bytes).map_err(|e| format!("cannot feed the script on stdin: {e}"))?;
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stdout = drain(child.stdout.take(), self.stdout_lines, Some(Arc::clone(&seen)));
        let stderr = drain(child.stderr.take(), None, None);
        let exited = AtomicBool::new(false);
        let (waited, during_result) = std::thread::scope(|scope| {
            let pid = child.id();
            let exited = &exited;
            let seen = &*seen;
            let side =
                during.map(|f| scope.spawn(move || f(&Running { exited, pid, stdout: seen })));
            let waited = wait_until(&mut child, start + self.deadline);
            exited.store(true, Ordering::SeqCst);
            let during_result = side
                .map(|h| h.join().unwrap_or_else(|_| Err("the host-side check panicked".into())));
            (waited, during_result)
        });
        let (status, hung) = waited?;
        let elapsed = start.elapsed();
        // An exited CLI closes its pipes; a survivor holding them keeps them open.
        let grace = Duration::from_secs(5);
        let (stdout, held_out) = collect(&stdout, grace);
        let (mut stderr, held_err) = collect(&stderr, grace);
        if let Some(path) = &self.stderr_to {
            stderr = std::fs::read_to_string(path).unwrap_or_default();
        }
        let signal = status.signal();
        let code = status.code().or(signal.map(|s| 128 + s)).unwrap_or(-1);
        let out =
            Output { code, signal, stdout, stderr, elapsed, hung, pipe_held: held_out || held_err };
        Ok((out, during_result))
    }
}

/// Streams chunks, so that output read before a survivor kept the pipe open is not lost. With
/// `lines`, the pipe is closed (dropped) once that many lines came, as `head -N` does; the
/// rest of the chunk that completed them is dropped too.
fn drain<R: Read + Send + 'static>(
    pipe: Option<R>,
    lines: Option<usize>,
    seen: Option<Arc<Mutex<Vec<u8>>>>,
) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut pipe) = pipe {
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            let mut left = lines;
            while let Ok(n @ 1..) = pipe.read(&mut buf) {
                let chunk = &buf[..n];
                if let Some(Ok(mut seen)) = seen.as_ref().map(|s| s.lock()) {
                    seen.extend_from_slice(chunk);
                }
                if let Some(left) = &mut left {
                    let mut ends = chunk.iter().enumerate().filter(|(_, b)| **b == b'\n');
                    // The newline that completes the last wanted line, if it is in this chunk.
                    if let Some((end, _)) = ends.nth(left.saturating_sub(1)) {
                        let _ = tx.send(chunk[..=end].to_vec());
                        return;
                    }
                    *left -= chunk.iter().filter(|b| **b == b'\n').count();
                }
                if tx.send(chunk.to_vec()).is_err() {
                    break;
                }
            }
        });
    }
    rx
}

/// The pipe's bytes and whether it was still open `grace` after the CLI exited.
fn collect(rx: &mpsc::Receiver<Vec<u8>>, grace: Duration) -> (String, bool) {
    let deadline = Instant::now() + grace;
    let mut all = Vec::new();
    let held = loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(chunk) => all.extend_from_slice(&chunk),
            Err(mpsc::RecvTimeoutError::Disconnected) => break false,
            Err(mpsc::RecvTimeoutError::Timeout) => break true,
        }
    };
    (String::from_utf8_lossy(&all).into_owned(), held)
}

fn wait_until(
    child: &mut Child,
    deadline: Instant,
) -> Result<(std::process::ExitStatus, bool), String> {
    loop {
        if let Some(status) =
            child.try_wait().map_err(|e| format!("cannot wait for the CLI: {e}"))?
        {
            return Ok((status, false));
        }
        if Instant::now() >= deadline {
            // Only the process this runner started; the CLI owns the rest of the tree.
            let _ = child.kill();
            let status = child.wait().map_err(|e| format!("cannot reap the CLI: {e}"))?;
            return Ok((status, true));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
