//! The crate's one error type. Messages are lower case, without a trailing period, and carry
//! a `hint:` line where the fix is not obvious.

use std::path::PathBuf;

/// Everything that can stop a bwrap run before or while it starts. A script that runs and
/// fails is not an error: its exit code comes back in the outcome.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(
        "bwrap not found on PATH\nhint: install the `bubblewrap` package, or run `python-sandbox suggest`"
    )]
    BwrapNotFound,
    #[error(
        "bubblewrap {found} is too old: need >= 0.8 (for --disable-userns)\nhint: install a newer bubblewrap"
    )]
    BwrapTooOld { found: String },
    /// bwrap exited before starting the command; `reason` comes from a fresh probe.
    #[error("bubblewrap could not set up the sandbox (its own message is above): {reason}")]
    SandboxSetup { reason: String },
    /// Another [`crate::Launcher`] could not build its sandbox; nothing of the command ran.
    #[error("the {engine} sandbox could not be set up: {reason}")]
    LauncherSetup { engine: &'static str, reason: String },
    #[error(
        "cannot find the cache directory: neither XDG_CACHE_HOME nor HOME is set to an absolute path\nhint: set HOME"
    )]
    NoCacheDir,
    #[error("no usable home directory: HOME is unset or not absolute\nhint: set HOME")]
    NoHome,
    #[error(
        "uv is not on PATH and there is no pinned uv build for {arch}\nhint: install uv (https://docs.astral.sh/uv/) and put it on PATH"
    )]
    UvUnsupportedPlatform { arch: String },
    #[error(
        "downloading uv from {url} failed: {message}\nhint: install uv yourself and put it on PATH, or check HTTPS_PROXY and the CA bundle"
    )]
    UvDownload { url: String, message: String },
    #[error(
        "the downloaded uv wheel does not match its pinned sha256 (expected {expected}, got {actual})\nhint: something between you and PyPI altered the file; nothing was installed"
    )]
    UvChecksum { expected: String, actual: String },
    #[error("the uv wheel has no `uv` binary in it: {message}")]
    UvWheel { message: String },
    #[error("`{} --version` failed: {message}", uv.display())]
    UvVersion { uv: PathBuf, message: String },
    #[error(
        "no Python interpreter matches {request}: {message}\nhint: install one (e.g. `uv python install`), or change `requires-python`"
    )]
    PythonNotFound { request: String, message: String },
    #[error("the interpreter {} lives under {}, which would expose all of it to the sandbox\nhint: use an interpreter installed in its own directory (pyenv, uv python install, /usr/bin)", python.display(), prefix.display())]
    UnsafeInterpreterPrefix { python: PathBuf, prefix: PathBuf },
    #[error("installing the dependencies failed (uv exited with {code}):\n{stderr}")]
    Prepare { code: i32, stderr: String },
    #[error("{} does not exist", path.display())]
    MissingPath { path: PathBuf },
    #[error("{} goes through a symlink; mounts must use real paths\nhint: use {}", path.display(), real.display())]
    SymlinkInPath { path: PathBuf, real: PathBuf },
    #[error("refusing to mount {}: {reason}", path.display())]
    RefusedMount { path: PathBuf, reason: String },
    #[error("refusing to use {} as the workspace: {reason}\nhint: run from a project directory", path.display())]
    RefusedWorkspace { path: PathBuf, reason: String },
    /// A mount source is no longer what was checked (a symlink swapped in): a refused
    /// boundary crossing, like an unapproved one.
    #[error("refusing to mount {}: it changed after it was checked ({reason}); nothing was run\nhint: something replaces it while python-sandbox starts (a symlink swapped in?); check what writes there", path.display())]
    MountChanged { path: PathBuf, reason: String },
    #[error(
        "cannot publish port {port} with the network off\nhint: turn the network on or drop the published ports"
    )]
    PublishWithoutNet { port: u16 },
    #[error(
        "environment variable `{name}` has no value\nhint: the CLI fills `--env NAME` from the host environment; set it there"
    )]
    EnvWithoutValue { name: String },
    #[error("`{name}` is not a valid environment variable name")]
    InvalidEnvName { name: String },
    /// A limit was asked for that nothing holds under bwrap here (`crate::limits::decide`).
    #[error(
        "bwrap cannot enforce `{flag}` here: {reason}; nothing was run\nhint: drop `{flag}`, use `--engine docker` or `--engine podman`, or run from a cgroup v2 scope delegated to you (`systemd-run --user --scope -p Delegate=yes python-sandbox run ...`); `python-sandbox detect` says what holds each limit"
    )]
    LimitUnsupported { flag: &'static str, reason: String },
    /// Setting up a limit failed; the script did not start without it.
    #[error("cannot set up the resource limits of the sandbox: {reason}; nothing was run")]
    LimitSetup { reason: String },
    #[error(transparent)]
    Workspace(#[from] reaper::Error),
    #[error(
        "bwrap sandboxes reach the network through pasta, but {why}\nhint: {hint}, or run with `--net off`"
    )]
    PastaNotFound { why: String, hint: &'static str },
    /// The sandbox's network (pasta, the built-in relay or proxy) could not be set up.
    #[error(transparent)]
    Net(#[from] sandbox_net::Error),
    /// What the built-in proxy (net on without pasta, where the relay cannot be had) cannot
    /// give. An engine that works here cannot do this one thing: a setup error (exit 2), not
    /// "no engine".
    #[error(
        "{what} needs pasta or the built-in relay, but {why}, and the relay needs a tun device this user may open and no `HTTPS_PROXY`/`HTTP_PROXY` of the host's own (this sandbox gets HTTP(S) through the built-in proxy only)\nhint: {hint}; or use an engine that publishes ports: `--engine docker` (or `--engine podman`)"
    )]
    NeedsPasta { what: &'static str, why: String, hint: &'static str },
    #[error(
        "no running {engine} session `{id}`\nhint: `python-sandbox session list` shows the running ones"
    )]
    NoSession { engine: &'static str, id: String },
    #[error("the {engine} session could not start: {reason}")]
    SessionStart { engine: &'static str, reason: String },
    #[error("exec through the agent of session `{id}` failed: {message}")]
    AgentExec { id: String, message: String },
    /// The session protocol's own errors (see `sandbox_core::shell`).
    #[error(transparent)]
    Sandbox(#[from] sandbox_core::Error),
    /// A writable tree's protected paths could not be made read-only.
    #[error(transparent)]
    Protect(#[from] engine_detect::protect::ProtectError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// [`Error::NeedsPasta`] for `what`, saying why pasta cannot be had here.
    pub fn needs_pasta(what: &'static str, no: &engine_detect::NoPasta) -> Error {
        Error::NeedsPasta { what, why: no.why(), hint: no.hint() }
    }

    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

impl sandbox_core::Classify for Error {
    fn class(&self) -> sandbox_core::ErrorClass {
        use sandbox_core::ErrorClass;
        match self {
            // bwrap cannot sandbox here at all: "no engine", and nothing ran.
            Error::BwrapNotFound
            | Error::BwrapTooOld { .. }
            | Error::SandboxSetup { .. }
            | Error::LauncherSetup { .. }
            | Error::PastaNotFound { .. } => ErrorClass::Unavailable,
            Error::MountChanged { .. } => ErrorClass::Refused,
            Error::NoSession { .. } => ErrorClass::NotFound,
            _ => ErrorClass::Setup,
        }
    }
}
