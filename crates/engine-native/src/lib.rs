//! The native engine: the python-sandbox wall built in-process from Linux namespaces, a fresh
//! tmpfs root, the shared seccomp wall and Landlock, with no helper binary on the host.
//!
//! [`plan`](mod@plan) is pure (what the tree is); [`sandbox`] performs a plan (fork, namespaces, mounts,
//! `pivot_root`, privileges dropped, filters applied, `execve`); [`net`] connects a sandbox with
//! net on through pasta (engine-bwrap's code). [`NativeEngine`] is the `sandbox_core::Engine`:
//! engine-bwrap's pipeline (prepare/run, environment cache, uv, lockfile, limits, publish)
//! with [`NativeLauncher`] building each of its sandboxes here instead of in bubblewrap.

pub mod demand;
mod engine;
mod error;
pub mod net;
pub mod plan;
pub mod probe;
pub mod sandbox;
#[cfg(test)]
mod tests;

pub use engine::{NativeEngine, NativeLauncher, input, local_session, reap_sessions};
pub use error::{Error, Result};
pub use net::{
    Attached, BUILTIN_NET_NOTE, Network, OnDemand, builtin_net_applies, builtin_net_note, connect,
    connect_on_demand, net_note, relay_applies,
};
pub use plan::{Access, Ids, Input, Op, Plan, RootEntry, plan};
pub use probe::probe;
pub use sandbox::{
    Child, Command, LANDLOCK_ABI, landlock_abi, landlock_applied, spawn, userns_probe,
};
