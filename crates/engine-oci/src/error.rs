//! The crate's one error type. Messages are lower case, without a trailing period, and carry
//! a `hint:` line where the fix is not obvious.

use std::path::PathBuf;

/// Everything that can stop a container run, a session operation or a sweep. A script that
/// runs and fails is not an error: its exit code comes back in the outcome.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No API socket of the engine answers.
    #[error("{engine} is not reachable: {detail}\nhint: {hint}")]
    Unreachable {
        /// `docker` or `podman`.
        engine: &'static str,
        /// What was tried, lower case.
        detail: String,
        /// What to do.
        hint: String,
    },
    /// The runtime image is not present in the engine's image store.
    #[error(
        "the image `{image}` is not in {engine}'s image store\nhint: build it with `cargo xtask image`, or `{engine} build -t {image} deploy/image` (deploy/image/Containerfile), or pass `--image`"
    )]
    MissingImage {
        /// The image reference.
        image: String,
        /// `docker` or `podman`.
        engine: &'static str,
    },
    /// The runtime image was built for another version of this engine.
    #[error(
        "the image `{image}` in {engine}'s image store has layout {} but this python-sandbox needs {}\nhint: rebuild it with `cargo xtask image`, or `{engine} build -t {image} deploy/image`",
        found.map_or_else(|| "(none)".to_owned(), |f| f.to_string()),
        crate::IMAGE_ABI
    )]
    OutdatedImage {
        /// The image reference.
        image: String,
        /// `docker` or `podman`.
        engine: &'static str,
        /// The image's `io.python-sandbox.image-abi`, if any.
        found: Option<u32>,
    },
    /// The network wall of a container with the network on (`crate::netwall`) failed.
    #[error(
        "cannot wall the container's network in (link-local and metadata addresses, private ranges, the host's own addresses): {reason}\nhint: python-sandbox needs a privileged exec into its own container for this; `--net off` needs none"
    )]
    NetworkWall {
        /// What failed.
        reason: String,
    },
    /// Limits were asked for that this engine cannot enforce here (rootless podman on cgroup
    /// v1, or on cgroup v2 without the controllers delegated): refused rather than run without.
    #[error(
        "rootless podman cannot enforce {asked} here (cgroup v1, or cgroup v2 without the memory, cpu and pids controllers delegated to the user), so nothing was run\nhint: run without those flags, use docker or rootful podman, or rootless podman on cgroup v2 with delegation (`Delegate=cpu memory pids` for `user@.service`)"
    )]
    LimitsUnenforceable {
        /// The flags asked for, e.g. "`--memory` and `--pids-limit`".
        asked: String,
    },
    /// Podman has no init binary for `init: true`.
    #[error(
        "podman has no container init binary (catatonit)\nhint: install the `catatonit` package; python-sandbox needs an init process so signals and zombies work"
    )]
    NoPodmanInit,
    /// The seccomp profile (the wall on the engine's base profile) could not be built.
    #[error(
        "cannot build the seccomp profile: {reason}\nhint: podman packages ship /usr/share/containers/seccomp.json (containers-common); python-sandbox refuses to run containers without its seccomp wall"
    )]
    Seccomp {
        /// What went wrong.
        reason: String,
    },
    /// A call to the engine API failed.
    #[error("{engine} API: {context}: {message}")]
    Api {
        /// `docker` or `podman`.
        engine: &'static str,
        /// What we were doing.
        context: String,
        /// The engine's message.
        message: String,
    },
    /// Installing the dependencies failed in the prepare container.
    #[error("installing the dependencies failed (exit code {code}):\n{output}")]
    Prepare {
        /// Exit code of the prepare container.
        code: i64,
        /// Its combined output.
        output: String,
    },
    /// A path to mount does not exist.
    #[error("{} does not exist", path.display())]
    MissingPath {
        /// The path.
        path: PathBuf,
    },
    /// A mount is refused by policy.
    #[error("refusing to mount {}: {reason}", path.display())]
    RefusedMount {
        /// The canonical path.
        path: PathBuf,
        /// Why, lower case.
        reason: String,
    },
    /// A mount source is no longer what was checked (a symlink swapped in before the daemon
    /// resolved it): a refused boundary crossing, like an unapproved one.
    #[error("refusing to mount {}: it changed after it was checked ({reason}); nothing was run\nhint: something replaces it while python-sandbox starts (a symlink swapped in?); check what writes there", path.display())]
    MountChanged {
        /// The canonical path that was checked.
        path: PathBuf,
        /// What was found instead, lower case.
        reason: String,
    },
    /// The container's mounts could not be compared with what was checked.
    #[error(
        "cannot check the container's mounts against what was checked: {reason}; nothing was run\nhint: python-sandbox needs the container's processes in this host's /proc (a daemon in a VM cannot be checked); use bwrap there"
    )]
    MountUnverified {
        /// Why, lower case.
        reason: String,
    },
    /// The workspace is refused by policy.
    #[error("refusing to use {} as the workspace: {reason}\nhint: run from a project directory", path.display())]
    RefusedWorkspace {
        /// The canonical path.
        path: PathBuf,
        /// Why, lower case.
        reason: String,
    },
    /// Ports cannot be published without a network.
    #[error(
        "cannot publish port {port} with the network off\nhint: turn the network on or drop the published ports"
    )]
    PublishWithoutNet {
        /// The first published port.
        port: u16,
    },
    /// `--env NAME` without a value reached the engine.
    #[error(
        "environment variable `{name}` has no value\nhint: the CLI fills `--env NAME` from the host environment; set it there"
    )]
    EnvWithoutValue {
        /// The variable.
        name: String,
    },
    /// An environment variable name the engine cannot pass.
    #[error("`{name}` is not a valid environment variable name")]
    InvalidEnvName {
        /// The variable.
        name: String,
    },
    /// A label could not be built or read.
    #[error(transparent)]
    Labels(#[from] reaper::Error),
    /// A writable tree's protected paths could not be made read-only.
    #[error(transparent)]
    Protect(#[from] engine_detect::protect::ProtectError),
    /// No session with this id exists.
    #[error("no session `{id}`\nhint: `python-sandbox session list` shows the running sessions")]
    NoSession {
        /// The id asked for.
        id: String,
    },
    /// A session operation failed inside the container.
    #[error(transparent)]
    Sandbox(sandbox_core::Error),
    /// A command inside a session failed in a way that is not the command's own exit code.
    #[error("{what} failed in the sandbox: {message}")]
    Exec {
        /// What we were doing.
        what: String,
        /// stderr of the helper command.
        message: String,
    },
    /// A session's agent answered outside the protocol (an oversized frame, an exit code no
    /// process can have, an unknown frame). Code run in the session can replace the agent, so
    /// its answers are checked like any untrusted input.
    #[error(
        "the agent of session `{id}` answered outside the protocol: {problem}\nhint: code run in the session may have replaced its agent; stop the session with `python-sandbox session stop {id}`"
    )]
    AgentProtocol {
        /// The session.
        id: String,
        /// What was wrong, lower case.
        problem: String,
    },
    /// More came back from a session than the host takes into memory.
    #[error("{what} from session `{id}` is larger than the {limit} the host reads\nhint: {hint}")]
    TooLarge {
        /// The session.
        id: String,
        /// What was read, e.g. "the file `/tmp/x`".
        what: String,
        /// The cap, human readable (`64 MiB`).
        limit: String,
        /// What to do instead.
        hint: String,
    },
    /// Host IO.
    #[error("{context}: {source}")]
    Io {
        /// What we were doing.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Session protocol errors keep this crate's variants (and their messages): the shared
/// session helpers (`sandbox_core::shell`) report them as `sandbox_core::Error`.
impl From<sandbox_core::Error> for Error {
    fn from(error: sandbox_core::Error) -> Error {
        match error {
            sandbox_core::Error::AgentProtocol { id, problem } => {
                Error::AgentProtocol { id, problem }
            }
            sandbox_core::Error::TooLarge { id, what, limit, hint } => {
                Error::TooLarge { id, what, limit, hint }
            }
            sandbox_core::Error::SessionCommand { what, message } => Error::Exec { what, message },
            sandbox_core::Error::SessionPrepare { code, output } => Error::Prepare { code, output },
            other => Error::Sandbox(other),
        }
    }
}

impl Error {
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
            Error::Unreachable { .. } => ErrorClass::Unavailable,
            Error::MountChanged { .. } => ErrorClass::Refused,
            Error::NoSession { .. } => ErrorClass::NotFound,
            _ => ErrorClass::Setup,
        }
    }
}

/// Maps a bollard error to [`Error::Api`] with what was being done.
pub(crate) fn api(
    engine: &'static str,
    context: &str,
) -> impl FnOnce(bollard::errors::Error) -> Error {
    let context = context.to_owned();
    move |e| Error::Api { engine, context, message: e.to_string() }
}
