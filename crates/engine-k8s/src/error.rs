//! The one error type of engine-k8s, classified for the engine seam.

use sandbox_core::{Classify, ErrorClass};

/// Everything that can go wrong talking to a cluster or in a pod sandbox.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The session protocol's own errors (see `sandbox_core::shell`).
    #[error(transparent)]
    Sandbox(#[from] sandbox_core::Error),
    /// The exec WebSocket could not be opened (the upgrade or the API refused it).
    #[error("cannot exec in pod `{pod}`: {source}")]
    ExecConnect {
        /// The pod.
        pod: String,
        /// kube's error (an API refusal carries the cluster's status).
        #[source]
        source: kube::Error,
    },
    /// The exec stream broke or carried what the protocol does not allow.
    #[error("exec in pod `{pod}`: {problem}")]
    ExecProtocol {
        /// The pod.
        pod: String,
        /// What was wrong, lower case.
        problem: String,
    },
    /// The cluster ran no command: its status message (container not found, runtime error).
    #[error("exec in pod `{pod}` failed: {message}")]
    ExecFailed {
        /// The pod.
        pod: String,
        /// The status message.
        message: String,
    },
    /// The relay started but nothing answers on the agent's socket.
    #[error(
        "the agent of pod `{pod}` does not answer: {message}\nhint: the pod's main process must be the session agent; a pod that lost it cannot serve execs, start a new sandbox"
    )]
    NoAgent {
        /// The pod.
        pod: String,
        /// The relay's own message.
        message: String,
    },
    /// A plain exec with stdin on a cluster that speaks only `v4.channel.k8s.io`.
    #[error(
        "exec in pod `{pod}` with stdin needs the v5.channel.k8s.io protocol (Kubernetes 1.30 and up); this cluster speaks v4, which cannot end stdin without losing the output\nhint: run the command through the pod's agent (`PodExec::exec`), which ends stdin in band"
    )]
    StdinNeedsV5 {
        /// The pod.
        pod: String,
    },
}

impl Classify for Error {
    fn class(&self) -> ErrorClass {
        match self {
            Error::Sandbox(e) => e.class(),
            Error::ExecConnect { source: kube::Error::Api(status), .. } if status.code == 404 => {
                ErrorClass::NotFound
            }
            Error::ExecConnect { .. } => ErrorClass::Unavailable,
            Error::ExecProtocol { .. }
            | Error::ExecFailed { .. }
            | Error::NoAgent { .. }
            | Error::StdinNeedsV5 { .. } => ErrorClass::Setup,
        }
    }
}
