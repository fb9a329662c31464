//! The crate's one error type. Messages are lower case, carry no trailing period and add a
//! `hint:` line where the fix is not obvious.

use std::path::PathBuf;

/// Everything that can go wrong in `sandbox-core`: resolving layers into a [`crate::RunSpec`]
/// and the in-memory [`crate::FakeSandbox`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No layer named the script to run.
    #[error("no script to run\nhint: pass the script path, e.g. `python-sandbox run script.py`")]
    MissingScript,
    /// The workspace handed to [`crate::resolve`] is relative; relative mounts would be ambiguous.
    #[error("workspace `{}` is not an absolute path", path.display())]
    RelativeWorkspace {
        /// The offending workspace path.
        path: PathBuf,
    },
    /// The home directory handed to [`crate::resolve`] is relative.
    #[error("home directory `{}` is not an absolute path", path.display())]
    RelativeHome {
        /// The offending home path.
        path: PathBuf,
    },
    /// A path starts with `~` but the home directory is unknown.
    #[error("`{}` starts with `~` but the home directory is unknown\nhint: set `HOME` or spell the path out", path.display())]
    UnknownHome {
        /// The path that needed `~` expansion.
        path: PathBuf,
    },
    /// `~user/…` would need a user database lookup, which is IO.
    #[error("`{}` refers to another user's home directory, which is not supported\nhint: spell the path out", path.display())]
    OtherUserHome {
        /// The `~user/…` path.
        path: PathBuf,
    },
    /// An environment variable name is empty or holds `=` or NUL.
    #[error(
        "{} is not a valid environment variable name\nhint: names are non-empty and contain neither `=` nor NUL",
        if name.is_empty() { "an empty string".to_owned() } else { format!("`{name}`") }
    )]
    InvalidEnvName {
        /// The rejected name.
        name: String,
    },
    /// A dependency does not start with a package name.
    #[error(
        "dependency `{requirement}` does not start with a package name\nhint: use a PEP 508 requirement such as `requests>=2`"
    )]
    InvalidDependency {
        /// The rejected requirement string.
        requirement: String,
    },
    /// A command-line value does not parse.
    #[error("invalid {what} `{value}`\nhint: {hint}")]
    InvalidValue {
        /// What was being parsed, e.g. "published port".
        what: &'static str,
        /// The text as given.
        value: String,
        /// The accepted spellings.
        hint: &'static str,
    },
    /// A mount spelled with something other than `:ro`/`:rw` after its last `:`.
    #[error("unknown mode `{mode}` in mount `{mount}`\nhint: {hint}")]
    UnknownMountMode {
        /// The mount as given.
        mount: String,
        /// The text after the last `:`.
        mode: String,
        /// The two modes for the path as typed, and how to mount a path containing `:`.
        hint: String,
    },
    /// A read-only mount of a path that does not exist ([`crate::MissingMount::Refuse`]).
    #[error("mount `{}` does not exist\nhint: a read-only mount must exist; create it first, or mount it with `:rw` to have an empty directory made", path.display())]
    MissingMount {
        /// The missing path.
        path: PathBuf,
    },
    /// Port 0 cannot be published.
    #[error("cannot publish port 0\nhint: ports range from 1 to 65535")]
    InvalidPort,
    /// A host port asked for (`--publish PORT` or `HOSTPORT:PORT`) is taken on the host.
    #[error(
        "host port {host_port} is already in use\nhint: publish `{any}` for any free host port, or choose another port"
    )]
    HostPortInUse {
        /// The host port.
        host_port: u16,
        /// The same entry with any host port (`0:PORT`), as the user would write it.
        any: String,
    },
    /// Two published ports ask for the same host address and port.
    #[error(
        "host port {host_port} is published twice (`{first}` and `{second}`)\nhint: give one of them another host port, e.g. `0:PORT` for any free one"
    )]
    HostPortTwice {
        /// The host port.
        host_port: u16,
        /// The first entry, as spelled canonically.
        first: String,
        /// The second entry.
        second: String,
    },
    /// No free host port could be found for `0:PORT`.
    #[error("no free host port on {addr}: {reason}")]
    NoFreePort {
        /// The host address.
        addr: std::net::IpAddr,
        /// The OS error.
        reason: String,
    },
    /// Ports are published but the network is off, so nothing could reach them.
    #[error(
        "cannot publish port {port} with the network off\nhint: turn the network on or drop the published ports"
    )]
    PublishWithoutNet {
        /// The first published port.
        port: u16,
    },
    /// A network allowlist on an engine that cannot hold one: refused, never dropped.
    #[error(
        "the {engine} engine cannot hold a network allowlist (`net = [...]`): {why}\nhint: run it with `--engine native` or `--engine bwrap`, which check every flow by name, or widen it to the whole network with `--net on`"
    )]
    AllowlistUnsupported {
        /// The engine's name.
        engine: &'static str,
        /// What it lacks.
        why: &'static str,
    },
    /// A zero timeout would kill every run before it starts.
    #[error("timeout must be greater than zero")]
    ZeroTimeout,
    /// A path inside a sandbox must be absolute.
    #[error("sandbox path `{path}` is not absolute")]
    RelativeSandboxPath {
        /// The rejected path.
        path: String,
    },
    /// Nothing exists at a path inside the sandbox.
    #[error("no such file or directory in the sandbox: `{path}`")]
    NotFound {
        /// The missing path.
        path: String,
    },
    /// A file operation hit a directory.
    #[error("`{path}` is a directory")]
    IsADirectory {
        /// The directory.
        path: String,
    },
    /// A directory operation hit a regular file.
    #[error("`{path}` is not a directory")]
    NotADirectory {
        /// The regular file.
        path: String,
    },
    /// A tar archive could not be read.
    #[error("invalid tar archive: {reason}")]
    InvalidTar {
        /// What was wrong, lower case.
        reason: String,
    },
    /// The workspace to sync holds more than the limit.
    #[error(
        "the workspace is larger than the sync limit of {}{}\nhint: leave large paths out with `.gitignore` or `.python-sandbox-ignore`, or raise the limit (`sync-limit` in `[engine.k8s]` of the user config)",
        crate::sync::approx_bytes(*limit),
        largest_text(largest)
    )]
    WorkspaceTooLarge {
        /// The limit, bytes.
        limit: u64,
        /// The largest files sent so far: (path, bytes).
        largest: Vec<(String, u64)>,
    },
    /// A path the sandbox named in a sync does not stay in the workspace.
    #[error("refused `{path}` coming back from the sandbox: {reason}; nothing was applied")]
    UnsafeSyncPath {
        /// The path, escaped.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The sandbox's workspace listing does not parse.
    #[error("the sandbox's workspace listing is invalid: {reason}")]
    BadSyncListing {
        /// What was wrong.
        reason: String,
    },
    /// The operation needs something this implementation deliberately does not do.
    #[error("{what} is not supported by {by}\nhint: {hint}")]
    Unsupported {
        /// The operation.
        what: String,
        /// The implementation that refuses it.
        by: String,
        /// What to do instead.
        hint: String,
    },
    /// A script asks for sandbox settings its session was not started with.
    #[error(
        "session `{id}` cannot run this script as it asks, so nothing was run:\n{}\nhint: {hint}",
        misfits.iter().map(|m| format!("  - {m}")).collect::<Vec<_>>().join("\n")
    )]
    SessionMisfit {
        /// The session.
        id: String,
        /// One line per setting that does not fit.
        misfits: Vec<String>,
        /// What to do: the `session start` flags that fit ([`crate::ScriptAsks::misfit_hint`]).
        hint: String,
    },
    /// The sandbox was stopped; no further operations are possible.
    #[error("sandbox `{id}` is stopped")]
    Stopped {
        /// The sandbox id.
        id: String,
    },
    /// A service already listens on the port.
    #[error("a service already uses port {port}")]
    PortInUse {
        /// The contested port.
        port: u16,
    },
    /// No service with this id runs in the sandbox.
    #[error("no service `{id}` in the sandbox")]
    NoSuchService {
        /// The unknown service id.
        id: String,
    },
    /// `run_prepared_dyn` got an environment another engine prepared (a caller bug).
    #[error("{engine} was handed an environment another engine prepared")]
    ForeignPrepared {
        /// The engine.
        engine: &'static str,
    },
    /// A session's agent answered outside the protocol (an oversized frame, an exit code no
    /// process can have, an unknown frame, a listing name that is not one path component).
    /// Code run in the session can replace the agent, so its answers are untrusted input.
    #[error(
        "the agent of session `{id}` answered outside the protocol: {problem}\nhint: code run in the session may have replaced its agent; stop the session with `python-sandbox session stop {id}`"
    )]
    AgentProtocol {
        /// The session.
        id: String,
        /// What was wrong, lower case.
        problem: String,
    },
    /// An interactive exec reached an agent that does not speak the interactive protocol:
    /// one from a session started by an older python-sandbox. It started nothing.
    #[error(
        "the agent of session `{id}` predates interactive execs (`session exec -i`/`-t`)\nhint: the session was started by an older python-sandbox; stop it with `python-sandbox session stop {id}` and start a new one"
    )]
    AgentTooOld {
        /// The session.
        id: String,
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
    /// A helper command inside a session failed in a way that is not a script's own exit.
    #[error("{what} failed in the sandbox: {message}")]
    SessionCommand {
        /// What we were doing.
        what: String,
        /// stderr of the helper command.
        message: String,
    },
    /// Installing a script's dependencies into a session failed.
    #[error("installing the dependencies failed (exit code {code}):\n{output}")]
    SessionPrepare {
        /// Exit code of the install.
        code: i64,
        /// Its output, with a `hint:` line.
        output: String,
    },
}

/// Spec errors are the caller's input; a stopped sandbox or a busy port is setup.
impl crate::Classify for Error {
    fn class(&self) -> crate::ErrorClass {
        crate::ErrorClass::Setup
    }
}

fn largest_text(largest: &[(String, u64)]) -> String {
    if largest.is_empty() {
        return String::new();
    }
    let named: Vec<String> = largest
        .iter()
        .map(|(path, size)| format!("`{path}` {}", crate::sync::approx_bytes(*size)))
        .collect();
    format!(" (largest: {})", named.join(", "))
}
