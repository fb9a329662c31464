//! engine-k8s: the `Sandbox` protocol on hardened, disposable Kubernetes pods (one pod per
//! sandbox, its NetworkPolicy, and a Service and Ingress per published port, all owned by the
//! pod), reached through the Kubernetes API with `kube`.
//!
//! Pure cores, IO at the edges: every object the engine creates is built by a pure function
//! (`manifest`), checked against the Pod Security Standard `restricted` by a pure checker; the
//! API flow (`api`, failures classified by the pure `failure`, the `sweep`) and the exec channel
//! are thin adapters over `kube`.

pub mod api;
pub mod channel;
pub mod claims;
pub mod config;
pub mod egress;
pub mod engine;
pub mod environment;
mod error;
pub mod exec;
pub mod failure;
pub mod lease;
pub mod manifest;
pub mod netoff;
pub mod preview;
pub mod probe;
pub mod rbac;
pub mod relay;
pub mod restricted;
pub mod seccomp;
pub mod session;
pub mod sweep;
pub mod workspace;

pub use config::{Preview, PullPolicy, Resources, SandboxConfig, VolumeSizes};
pub use engine::K8sEngine;
pub use error::{Error, Result};
pub use exec::{AGENT_SOCKET, ExecChannel, PodExec};
pub use failure::{Progress, StartFailure};
pub use session::{Attached, PodSandbox};
pub use sweep::Swept;

#[cfg(test)]
mod api_tests;
#[cfg(test)]
mod workspace_tests;
