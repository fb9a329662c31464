//! The long-lived [`Sandbox`] protocol: a sandbox that stays up between calls, runs commands
//! with streamed output, holds files and serves ports. Container and pod engines implement
//! it; [`crate::FakeSandbox`] implements it in memory for tests.
//!
//! Methods return `impl Future + Send` rather than being `async fn` so that callers can
//! spawn them on a multi-threaded runtime; implementations may still write `async fn`.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use crate::{OutputSink, RunOutcome};

/// A running sandbox. Paths are absolute POSIX paths inside the sandbox, as `&str`, because
/// they never name anything on the host.
pub trait Sandbox: Send + Sync {
    /// The implementation's error type.
    type Error: std::error::Error + Send + Sync + 'static;

    /// A stable id (container name, pod name) for logs and cleanup.
    fn id(&self) -> &str;

    /// Runs a command to completion, handing each stdout/stderr chunk to `output` as it
    /// arrives. A non-zero exit is an `Ok` outcome; `Err` means the command could not be run.
    fn exec(
        &self,
        request: &ExecRequest,
        output: &mut dyn OutputSink,
    ) -> impl Future<Output = Result<RunOutcome, Self::Error>> + Send;

    /// Reads a whole regular file.
    fn read_file(&self, path: &str) -> impl Future<Output = Result<Vec<u8>, Self::Error>> + Send;

    /// Creates or replaces a regular file, creating missing parent directories.
    fn write_file(
        &self,
        path: &str,
        contents: &[u8],
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Lists a directory's immediate children, sorted by name.
    fn list_dir(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<Vec<DirEntry>, Self::Error>> + Send;

    /// Copies a tree into the sandbox below the directory `dest` (created if missing).
    fn put(
        &self,
        source: &PutSource,
        dest: &str,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Starts a long-running command listening on a port and returns where to reach it.
    fn start_service(
        &self,
        service: &ServiceSpec,
    ) -> impl Future<Output = Result<Service, Self::Error>> + Send;

    /// Stops one service and everything it started.
    fn stop_service(
        &self,
        service: &Service,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Stops the sandbox and everything in it. Further calls fail.
    fn stop(&self) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// One command to run in a [`Sandbox`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecRequest {
    /// Program and arguments; `argv[0]` is looked up on the sandbox's `PATH`.
    pub argv: Vec<String>,
    /// Extra environment on top of the sandbox's own.
    pub env: Vec<(String, String)>,
    /// Working directory; the sandbox's default when `None`.
    pub cwd: Option<String>,
    /// Bytes fed to stdin, then end of file.
    pub stdin: Vec<u8>,
    /// Kill the command (and its children) after this long.
    pub timeout: Option<Duration>,
}

impl ExecRequest {
    /// A request for `argv` with no extra environment, default cwd, empty stdin, no timeout.
    pub fn new(argv: &[&str]) -> ExecRequest {
        ExecRequest {
            argv: argv.iter().map(|arg| (*arg).to_owned()).collect(),
            ..Default::default()
        }
    }
}

/// One entry of [`Sandbox::list_dir`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DirEntry {
    /// The file name, without the directory.
    pub name: String,
    /// What the entry is.
    pub kind: EntryKind,
    /// Size in bytes for files, 0 otherwise.
    pub size: u64,
}

/// The kind of a [`DirEntry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (not followed).
    Symlink,
}

/// What [`Sandbox::put`] copies in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutSource {
    /// A file or directory tree on the host, copied recursively. Engines read it; the pure
    /// [`crate::FakeSandbox`] refuses it.
    HostPath(PathBuf),
    /// A tar archive (ustar, pax or GNU long names), unpacked below the destination.
    Tar(Vec<u8>),
}

/// A long-running command started with [`Sandbox::start_service`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSpec {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// The port the command listens on inside the sandbox.
    pub port: u16,
    /// Extra environment.
    pub env: Vec<(String, String)>,
}

/// A started service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// Implementation-chosen id, used by [`Sandbox::stop_service`].
    pub id: String,
    /// The port inside the sandbox.
    pub port: u16,
    /// Where the host reaches it, e.g. `http://127.0.0.1:49153`.
    pub url: String,
}

/// What `session start` asks of any session engine (one struct, so the engines' session sides
/// cannot drift apart: the seam's session half builds on it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SessionConfig {
    /// Mounted read-write at its real path; the working directory of execs.
    pub workspace: PathBuf,
    /// Extra mounts at their real paths.
    pub mounts: Vec<crate::Mount>,
    /// Network of the session.
    pub net: crate::Net,
    /// With `net` on: the only hosts the session reaches (`--net LIST`); an engine that cannot
    /// hold a list refuses the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<crate::Allow>,
    /// Ports reachable from the host, on the given address (127.0.0.1 by default).
    pub publish: Vec<crate::Publish>,
    /// Explicit environment.
    pub env: Vec<crate::EnvVar>,
    /// Idle time after which the session ends itself.
    pub ttl: Duration,
    /// Size cap of each of the session's tmpfs (`/tmp` and home, which holds its venv), bytes;
    /// normally [`crate::DEFAULT_TMPFS_SIZE`].
    pub tmpfs_size: u64,
    /// The limits asked for; an engine holds them or refuses the start.
    pub limits: crate::Limits,
}
