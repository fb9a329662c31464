//! Every exit code of `python-sandbox`, in one place, and the one mapping from an error to its
//! code: engines classify their own errors ([`sandbox_core::ErrorClass`]); nothing here names
//! an engine.

use sandbox_core::{EngineError, ErrorClass};

/// Errors that stop us before the script starts (bad flags, bad metadata, IO, setup).
pub(crate) const USER_ERROR: u8 = 2;
/// No isolation engine works here: never a fallback to running unsandboxed.
pub(crate) const NO_ENGINE: u8 = 3;
/// A refused boundary crossing: unapproved, or a mount source that changed after its check.
pub(crate) const BOUNDARY: u8 = 4;
/// The run hit its timeout; the whole process tree was killed (as `timeout(1)` does).
pub(crate) const TIMEOUT: u8 = 124;

/// The script's own exit code as ours (`128 + N` for a signal is already in it); a code that
/// does not fit a byte (never from a real process) becomes 1.
pub(crate) fn of_script(outcome: &sandbox_core::RunOutcome) -> u8 {
    u8::try_from(outcome.exit_code).unwrap_or(1)
}

/// The class of the engine error in `err`'s chain, if it holds one.
pub(crate) fn class(err: &anyhow::Error) -> Option<ErrorClass> {
    err.chain().find_map(|e| e.downcast_ref::<EngineError>()).map(EngineError::class)
}

/// The exit code of an error that stopped a command.
pub(crate) fn for_error(err: &anyhow::Error) -> u8 {
    match class(err) {
        Some(ErrorClass::Refused) => BOUNDARY,
        Some(ErrorClass::Unavailable) => NO_ENGINE,
        Some(ErrorClass::Setup | ErrorClass::NotFound) | None => USER_ERROR,
    }
}
