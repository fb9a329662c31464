//! The one-shot [`Engine`]: run one resolved [`RunSpec`] to completion.
//!
//! The trait is synchronous on purpose. bwrap drives `std::process` directly; the docker and
//! podman engines talk to their APIs through async clients and `block_on` internally, so
//! neither a runtime nor async leaks into callers that only want "run this script".

use std::time::Duration;

use crate::{OutputSink, RunSpec};

/// An isolation backend that runs one script and returns when its whole process tree is gone.
///
/// Implementations must never fall back to running unsandboxed: if isolation cannot be set
/// up, `run` returns an error.
pub trait Engine {
    /// The engine's own error type (each engine crate has one `thiserror` enum).
    type Error: std::error::Error + Send + Sync + 'static;

    /// A stable lower-case name, e.g. `"bwrap"`, `"docker"`, `"podman"`.
    fn name(&self) -> &'static str;

    /// Prepares what the spec needs (dependencies, image) and runs the script in it.
    /// Returns once the script and everything it started have exited or been killed.
    fn run(&self, spec: &RunSpec, io: RunIo<'_>) -> Result<RunOutcome, Self::Error>;
}

/// Object-safe view of any [`Engine`] with a boxed error, for callers that pick the engine at
/// run time (`Box<dyn DynEngine>`). Every `Engine` implements it.
pub trait DynEngine {
    /// See [`Engine::name`].
    fn name(&self) -> &'static str;

    /// See [`Engine::run`].
    fn run_dyn(
        &self,
        spec: &RunSpec,
        io: RunIo<'_>,
    ) -> Result<RunOutcome, Box<dyn std::error::Error + Send + Sync>>;
}

impl<E: Engine> DynEngine for E {
    fn name(&self) -> &'static str {
        Engine::name(self)
    }

    fn run_dyn(
        &self,
        spec: &RunSpec,
        io: RunIo<'_>,
    ) -> Result<RunOutcome, Box<dyn std::error::Error + Send + Sync>> {
        Ok(self.run(spec, io)?)
    }
}

/// Where a run's standard streams go.
pub struct RunIo<'a> {
    /// What the script reads on stdin.
    pub stdin: Stdin,
    /// Where the script's stdout and stderr go.
    pub output: Output<'a>,
    /// Receives short human status lines from the engine ("resolving 3 dependencies"), if set.
    /// Engines write nothing about their own progress to the script's streams.
    pub status: Option<&'a mut (dyn FnMut(&str) + Send)>,
}

impl RunIo<'_> {
    /// Inherit the caller's terminal for all three streams, no status lines.
    pub fn inherit() -> RunIo<'static> {
        RunIo { stdin: Stdin::Inherit, output: Output::Inherit, status: None }
    }
}

impl std::fmt::Debug for RunIo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunIo")
            .field("stdin", &self.stdin)
            .field("output", &self.output)
            .field("status", &self.status.as_ref().map(|_| "FnMut(&str)"))
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
}

impl RunOutcome {
    /// A run that ended normally with `exit_code`.
    pub fn exited(exit_code: i32, duration: Duration) -> RunOutcome {
        RunOutcome { exit_code, duration, timed_out: false, warnings: Vec::new() }
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
