//! engine-k8s: the `Sandbox` protocol on hardened, disposable Kubernetes pods (one pod per
//! sandbox, its NetworkPolicy, and a Service and Ingress per published port, all owned by the
//! pod), reached through the Kubernetes API with `kube`.
//!
//! Pure cores, IO at the edges: every object the engine creates is built by a pure function
//! (`manifest`), checked against the Pod Security Standard `restricted` by a pure checker; the
//! API flow and the exec channel are thin adapters over `kube`.

pub mod config;
mod error;
pub mod manifest;
pub mod rbac;
pub mod restricted;

pub use config::{PullPolicy, Resources, SandboxConfig, VolumeSizes};
pub use error::Error;
