//! The crate's one error type. Messages are lower case, without a trailing period, and carry
//! a `hint:` line where the fix is not obvious.

/// Everything that can stop a sandbox's network from being set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(
        "the sandbox's network could not be set up with pasta: {reason}\nhint: run with `--net off`, or check that `pasta` (package passt) works here"
    )]
    UserNetwork { reason: String },
    /// The built-in proxy or relay (net on without pasta) could not be set up.
    #[error("the sandbox's built-in proxy could not be set up: {reason}")]
    BuiltinNetwork { reason: String },
    /// A published host port another process holds (`sandbox_core::busy_host_port`).
    #[error(transparent)]
    Sandbox(#[from] sandbox_core::Error),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let context = context.into();
        move |source| Error::Io { context, source }
    }
}

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;
