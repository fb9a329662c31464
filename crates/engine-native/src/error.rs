//! The one error type of the crate.

use std::path::PathBuf;

/// What can go wrong planning or starting a native sandbox.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A caller path the shared mount policy refuses.
    #[error("refusing to mount `{}`: {reason}", path.display())]
    Refused {
        /// The path.
        path: PathBuf,
        /// Why (from `sandbox_core::check_host_path`).
        reason: String,
    },
    /// A request this slice of the engine cannot honour yet.
    #[error("{what}\nhint: {hint}")]
    Unsupported {
        /// What was asked.
        what: String,
        /// What to do instead.
        hint: String,
    },
    /// A setup step inside the sandbox failed; nothing of the command ran.
    #[error("native sandbox setup failed at {step}: {source}")]
    Setup {
        /// The step (`unshare`, `mount /usr`, ...).
        step: String,
        /// The errno it failed with.
        source: std::io::Error,
    },
    /// The outbound network of a sandbox with net on could not be attached (pasta).
    #[error("cannot give the native sandbox its network: {0}")]
    Network(String),
    /// Host-side IO around the sandbox.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The failure.
        source: std::io::Error,
    },
}

/// Shorthand.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}
