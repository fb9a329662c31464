//! The one error type of engine-k8s, classified for the engine seam.

use sandbox_core::{Classify, ErrorClass};

/// Everything that can go wrong talking to a cluster or in a pod sandbox.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The session protocol's own errors (see `sandbox_core::shell`).
    #[error(transparent)]
    Sandbox(#[from] sandbox_core::Error),
}

impl Classify for Error {
    fn class(&self) -> ErrorClass {
        match self {
            Error::Sandbox(e) => e.class(),
        }
    }
}
