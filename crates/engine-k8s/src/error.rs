//! The one error type of engine-k8s, classified for the engine seam.

use sandbox_core::{Classify, ErrorClass};

/// Everything that can go wrong talking to a cluster or in a pod sandbox.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The session protocol's own errors (see `sandbox_core::shell`).
    #[error(transparent)]
    Sandbox(#[from] sandbox_core::Error),
    /// A [`crate::SandboxConfig`] field that cannot work, named.
    #[error("invalid sandbox config `{field}`: {message}\nhint: {hint}")]
    Config {
        /// The field, as in the struct (`resources.cpu_limit`).
        field: &'static str,
        /// What is wrong with its value.
        message: String,
        /// How to fix it.
        hint: String,
    },
    /// A sandbox id that cannot become object names and label values.
    #[error(
        "invalid sandbox id `{id}`: object names need at most {max} lower-case letters, digits and `-`\nhint: let the engine pick the id"
    )]
    InvalidId {
        /// The id.
        id: String,
        /// [`crate::manifest::MAX_ID_LEN`].
        max: usize,
    },
    /// An env var whose name looks secret was about to go into a pod spec, which anyone who can
    /// read pods (and the audit log) sees.
    #[error(
        "refusing to put `{name}` in the pod spec: its name says it is a secret, and pod specs are readable by anyone who can get pods\nhint: pass it as a registered secret: those go over exec stdin, never into the spec"
    )]
    SecretInPodSpec {
        /// The variable's name (never its value).
        name: String,
    },
}

impl Classify for Error {
    fn class(&self) -> ErrorClass {
        match self {
            Error::Sandbox(e) => e.class(),
            Error::Config { .. } | Error::InvalidId { .. } => ErrorClass::Setup,
            Error::SecretInPodSpec { .. } => ErrorClass::Refused,
        }
    }
}
