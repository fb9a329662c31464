//! The engine seam, run side: what the CLI (and any library user) needs of an engine to run
//! one resolved [`RunSpec`]: its name, what it can do ([`Capability`], as data), `check`,
//! `prepare` and `run_prepared`, and errors classified for exit codes ([`ErrorClass`]).
//!
//! [`Engine`] is the typed trait engines implement; [`DynEngine`] is its object-safe view
//! (`Box<dyn DynEngine>`) for callers that pick an engine at run time, with every error boxed
//! into one [`EngineError`] that carries its class. Callers never downcast engine error types.
//!
//! The trait is synchronous on purpose. bwrap drives `std::process` directly; the docker and
//! podman engines talk to their APIs through async clients and `block_on` internally, so
//! neither a runtime nor async leaks into callers that only want "run this script".

use std::any::Any;
use std::time::Duration;

use crate::{OutputSink, RunSpec};

/// What an engine can do, as plain data (the way OpenDAL services declare theirs): callers ask
/// this instead of matching on engine names, and refuse an unsupported request generically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capability {
    /// Warm sessions (the `Sandbox` protocol).
    pub sessions: bool,
    /// Host paths mounted at their real paths (`--mount`).
    pub host_mounts: bool,
    /// Ports published on the host (`--publish`).
    pub publish: bool,
    /// `--memory` enforced.
    pub memory_limit: bool,
    /// `--cpus` enforced.
    pub cpu_limit: bool,
    /// `--pids-limit` enforced.
    pub pids_limit: bool,
    /// A script on a terminal keeps it (interactive programs work).
    pub pty: bool,
    /// `crate::WALL` applied to everything the script runs.
    pub seccomp_wall: bool,
    /// Published ports get a preview URL beyond `127.0.0.1`.
    pub preview_urls: bool,
}

/// What kind of failure an engine error is, for the caller's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The engine cannot sandbox here (not installed, blocked, its daemon gone); nothing ran.
    /// The CLI exits 3, as when no engine is available at all.
    Unavailable,
    /// A boundary crossing was refused (a mount source changed after its check); exit 4.
    Refused,
    /// Bad input, or a setup step that failed (an install, a missing image); exit 2.
    Setup,
    /// What was asked for does not exist on this engine (no such session); exit 2. Callers
    /// looking through several engines go on to the next.
    NotFound,
}

/// Implemented by every engine's error type: the class of each of its variants.
pub trait Classify {
    /// The class of this error.
    fn class(&self) -> ErrorClass;
}

/// An engine error behind [`DynEngine`]: the engine's own error (its message and `source`
/// chain unchanged) with its class.
#[derive(Debug)]
pub struct EngineError {
    class: ErrorClass,
    error: Box<dyn std::error::Error + Send + Sync>,
}

impl EngineError {
    /// Wraps a classified engine error.
    pub fn new<E: std::error::Error + Classify + Send + Sync + 'static>(error: E) -> EngineError {
        EngineError { class: error.class(), error: Box::new(error) }
    }

    /// The class, for the exit code.
    pub fn class(&self) -> ErrorClass {
        self.class
    }

    /// The engine's own error.
    pub fn inner(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.error
    }
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// An isolation backend that runs one script and returns when its whole process tree is gone.
///
/// Implementations must never fall back to running unsandboxed: if isolation cannot be set
/// up, they return an error.
pub trait Engine {
    /// The engine's own error type (each engine crate has one `thiserror` enum).
    type Error: std::error::Error + Classify + Send + Sync + 'static;
    /// A prepared environment: what `prepare` made and `run_prepared` uses (it may hold a
    /// lease that keeps the environment from being pruned until the run is set up).
    type Prepared: Send + 'static;

    /// A stable lower-case name, e.g. `"bwrap"`, `"docker"`, `"podman"`.
    fn name(&self) -> &'static str;

    /// What this engine (as configured, on this host) can do.
    fn capability(&self) -> Capability;

    /// What `run_prepared` would refuse, before anything is prepared; `Ok` carries warnings.
    fn check(&self, spec: &RunSpec) -> Result<Vec<String>, Self::Error>;

    /// Makes (or finds) what `spec` needs: dependencies, interpreter, image. Short human
    /// status lines go to `status`.
    fn prepare(
        &self,
        spec: &RunSpec,
        status: &mut dyn FnMut(&str),
    ) -> Result<Self::Prepared, Self::Error>;

    /// Runs the script in `prepared`. Returns once the script and everything it started have
    /// exited or been killed. A script that fails is not an error; a sandbox that cannot be
    /// set up is.
    fn run_prepared(
        &self,
        spec: &RunSpec,
        prepared: &Self::Prepared,
        io: RunIo<'_>,
    ) -> Result<RunOutcome, Self::Error>;

    /// `check`, `prepare` (status lines to `io.status`), then `run_prepared`: the one body
    /// every engine shares.
    fn run(&self, spec: &RunSpec, mut io: RunIo<'_>) -> Result<RunOutcome, Self::Error> {
        self.check(spec)?;
        let prepared = match io.status.as_mut() {
            Some(status) => self.prepare(spec, &mut |line| status(line))?,
            None => self.prepare(spec, &mut |_| {})?,
        };
        self.run_prepared(spec, &prepared, io)
    }
}

/// A prepared environment behind [`DynEngine`].
pub type DynPrepared = Box<dyn Any + Send>;

/// Object-safe view of any [`Engine`] with one classified error type, for callers that pick
/// the engine at run time (`Box<dyn DynEngine>`). Every `Engine` implements it.
pub trait DynEngine {
    /// See [`Engine::name`].
    fn name(&self) -> &'static str;

    /// See [`Engine::capability`].
    fn capability(&self) -> Capability;

    /// See [`Engine::check`].
    fn check_dyn(&self, spec: &RunSpec) -> Result<Vec<String>, EngineError>;

    /// See [`Engine::prepare`].
    fn prepare_dyn(
        &self,
        spec: &RunSpec,
        status: &mut dyn FnMut(&str),
    ) -> Result<DynPrepared, EngineError>;

    /// See [`Engine::run_prepared`]; `prepared` must come from this engine's `prepare_dyn`.
    fn run_prepared_dyn(
        &self,
        spec: &RunSpec,
        prepared: &DynPrepared,
        io: RunIo<'_>,
    ) -> Result<RunOutcome, EngineError>;

    /// See [`Engine::run`].
    fn run_dyn(&self, spec: &RunSpec, io: RunIo<'_>) -> Result<RunOutcome, EngineError>;
}

impl<E: Engine> DynEngine for E {
    fn name(&self) -> &'static str {
        Engine::name(self)
    }

    fn capability(&self) -> Capability {
        Engine::capability(self)
    }

    fn check_dyn(&self, spec: &RunSpec) -> Result<Vec<String>, EngineError> {
        self.check(spec).map_err(EngineError::new)
    }

    fn prepare_dyn(
        &self,
        spec: &RunSpec,
        status: &mut dyn FnMut(&str),
    ) -> Result<DynPrepared, EngineError> {
        let prepared = self.prepare(spec, status).map_err(EngineError::new)?;
        Ok(Box::new(prepared))
    }

    fn run_prepared_dyn(
        &self,
        spec: &RunSpec,
        prepared: &DynPrepared,
        io: RunIo<'_>,
    ) -> Result<RunOutcome, EngineError> {
        let prepared = prepared.downcast_ref::<E::Prepared>().ok_or_else(|| {
            EngineError::new(crate::Error::ForeignPrepared { engine: Engine::name(self) })
        })?;
        self.run_prepared(spec, prepared, io).map_err(EngineError::new)
    }

    fn run_dyn(&self, spec: &RunSpec, io: RunIo<'_>) -> Result<RunOutcome, EngineError> {
        self.run(spec, io).map_err(EngineError::new)
    }
}

/// [`RunIo::published`]: told where each published port is bound on the host.
pub type PublishedHook<'a> = dyn FnMut(&[crate::PublishedPort]) + Send + 'a;

/// Where a run's standard streams go.
pub struct RunIo<'a> {
    /// What the script reads on stdin.
    pub stdin: Stdin,
    /// Where the script's stdout and stderr go.
    pub output: Output<'a>,
    /// Receives short human status lines from the engine ("resolving 3 dependencies"), if set.
    /// Engines write nothing about their own progress to the script's streams.
    pub status: Option<&'a mut (dyn FnMut(&str) + Send)>,
    /// Told once, when the sandbox is up and before the script runs, where each published port
    /// is bound on the host (`crate::publish`); not called when nothing is published.
    pub published: Option<&'a mut PublishedHook<'a>>,
    /// Called once as the script is let go (its sandbox set up, before it can write anything):
    /// the caller dates the run's changes from here. An engine whose script could start within
    /// a clock tick (4 ms) of the run's call must call it; one that takes longer to get there
    /// (a container, a pod) may leave it, and the caller counts from its own call.
    pub started: Option<&'a mut (dyn FnMut() + Send)>,
}

impl RunIo<'_> {
    /// Inherit the caller's terminal for all three streams, no status lines.
    pub fn inherit() -> RunIo<'static> {
        RunIo {
            stdin: Stdin::Inherit,
            output: Output::Inherit,
            status: None,
            published: None,
            started: None,
        }
    }
}

impl std::fmt::Debug for RunIo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunIo")
            .field("stdin", &self.stdin)
            .field("output", &self.output)
            .field("status", &self.status.as_ref().map(|_| "FnMut(&str)"))
            .field("published", &self.published.as_ref().map(|_| "FnMut(&[PublishedPort])"))
            .finish()
    }
}

/// The script's stdin.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Stdin {
    /// The caller's stdin (a terminal or a pipe).
    #[default]
    Inherit,
    /// Immediate end of file.
    Null,
    /// These bytes, then end of file.
    Bytes(Vec<u8>),
}

/// The script's stdout and stderr.
#[derive(Default)]
pub enum Output<'a> {
    /// Straight to the caller's stdout and stderr; nothing passes through this process (the
    /// container engines copy what their daemon sends, through one stream when the caller's
    /// stdout and stderr are the same file: [`crate::same_file_out_err`]). Secrets cannot be
    /// scrubbed in this mode.
    #[default]
    Inherit,
    /// Every chunk goes to this sink as it arrives (wrap it in a
    /// [`crate::ScrubbingSink`] to mask secrets).
    Sink(&'a mut dyn OutputSink),
    /// Both streams through one pipe, so the sink gets every byte in exactly the order the
    /// script wrote it, all as [`crate::Stream::Stdout`]. For callers that send both streams
    /// to one place (`--json` mode, or stdout and stderr being the same file): two pipes, and
    /// the container daemons' two copies, cannot keep the order between the streams.
    Merged(&'a mut dyn OutputSink),
}

impl std::fmt::Debug for Output<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Output::Inherit => f.write_str("Inherit"),
            Output::Sink(_) => f.write_str("Sink(..)"),
            Output::Merged(_) => f.write_str("Merged(..)"),
        }
    }
}

/// How a run or an exec ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    /// The script's exit code; `128 + N` when it died from signal `N` (shell convention).
    pub exit_code: i32,
    /// Wall-clock time from start to the end of the whole process tree.
    pub duration: Duration,
    /// Whether the run was killed because it hit its timeout.
    pub timed_out: bool,
    /// Things the user should know that did not stop the run, lower case, no trailing period
    /// (e.g. "rootless podman cannot enforce the memory limit here").
    pub warnings: Vec<String>,
    /// What a network allowlist refused (`net = [...]`), each once.
    pub net_refused: Vec<crate::NetRefused>,
}

impl RunOutcome {
    /// A run that ended normally with `exit_code`.
    pub fn exited(exit_code: i32, duration: Duration) -> RunOutcome {
        RunOutcome {
            exit_code,
            duration,
            timed_out: false,
            warnings: Vec::new(),
            net_refused: Vec::new(),
        }
    }
}

/// Maps a wait status, split as `std::os::unix::process::ExitStatusExt` reports it, to one
/// exit code: the code when the process exited, `128 + N` when signal `N` killed it, and 1
/// when neither is known (which only happens on exotic platforms).
pub fn exit_code(code: Option<i32>, signal: Option<i32>) -> i32 {
    match (code, signal) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    }
}
