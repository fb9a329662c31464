//! One expiry policy that removes sandboxes outliving their owner, for every engine.
//!
//! Engines label everything they create with [`labels_for_run`], [`labels_for_session`] or
//! [`labels_for_prepare`] (schema in [`labels`]). A sweep lists resources with the one filter
//! [`MANAGED_FILTER`], maps each to a [`Resource`] (id, labels, [`State`], optional activity and exit
//! times), calls [`decide`] with the current time and an [`OwnerLiveness`] (normally
//! [`ProcLiveness`]), and removes the [`Action`]s' ids. Nothing here does IO except the two /proc
//! readers [`ProcLiveness::new`] and [`Owner::current`], [`ProcPin`], [`lock_env`], [`hostfs`],
//! [`MarkKey::load`], [`acl`] and the host port probes of [`ports`].
//!
//! The rules, in order, per resource:
//! - `expires` passed: [`Reason::Expired`] (any kind);
//! - a run or prepare whose owner process is gone: [`Reason::OwnerDead`] / [`Reason::OwnerReplaced`]
//!   (only judged in the owner's own boot and pid namespace, else left to `expires`);
//! - a session idle for longer than its `ttl`: [`Reason::Idle`];
//! - exited longer than [`Policy::exited_grace`]: [`Reason::Exited`];
//! - passive (service, ingress, volume) with no workload left for [`Policy::no_workload_grace`]:
//!   [`Reason::NoWorkload`];
//!
//! and a sandbox goes whole: the other resources with its id follow as [`Reason::Companion`].
//! Resources without the exact managed-by pair, or with labels this version cannot read, are never
//! selected.
//!
//! Prepared dependency environments are caches, not sandboxes: [`stale_envs`] picks the ones unused
//! for longer than a maximum age and not in use (see [`EnvUse`]); [`lock_env`] is the lock-file
//! protocol that keeps a prune from racing a run. A cache over its size cap loses its least
//! recently used entries, counted per file since environments link the package cache's files
//! ([`over_cap`]).
//!
//! Labels are claims anyone with the daemon can make: engines sign what they create with the
//! user's [`MarkKey`] and sweep only what verifies, each resource on its own (see [`MarkKey`]).
//! Every file python-sandbox writes on the host goes through [`PrivateDir`] ([`hostfs`]).
//!
//! [`acl`] lends a root caller's workspace to the sandbox uid for one run (or session) and gives
//! it back exactly as it was, with the same kind of lock-file protocol.

pub mod acl;
mod cap;
mod envs;
mod error;
pub mod hostfs;
pub mod idmap;
pub mod labels;
mod lock;
mod mark;
mod owner;
mod policy;
pub mod ports;
mod proc;
pub mod protect;

pub use cap::{
    CacheEntry, CapAction, CapPlan, EntryKind, FileId, distinct_size, human_bytes, over_cap,
};
pub use envs::{EnvAction, EnvUse, human, stale_envs, unix_from_rfc3339};
pub use error::Error;
pub use hostfs::PrivateDir;
pub use labels::{
    Kind, MANAGED_BY, MANAGED_BY_VALUE, MANAGED_FILTER, Owner, SandboxLabels, activity_label,
    labels_for_prepare, labels_for_run, labels_for_session,
};
pub use lock::{LockMode, lock_env, lock_in};
pub use mark::{MARK, MarkKey};
pub use owner::{Liveness, OwnerLiveness, ProcLiveness, Stat, Vantage, judge, parse_stat};
pub use policy::{Action, Policy, Reason, Resource, State, decide};
pub use proc::{ProcPin, reap_child};
