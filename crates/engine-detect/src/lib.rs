//! Detects which isolation engine works on this machine and explains what to do when none does.
//!
//! The ladder is native → bwrap → docker → podman (native's probe is engine-native's: this
//! crate cannot depend on the engines). Every probe is real but cheap: the bwrap probe creates
//! user, mount, pid and network namespaces and runs `true` inside them (this is what catches
//! Ubuntu's AppArmor user-namespace restriction and containers without user namespaces); the
//! docker and podman probes send `GET /_ping` to their API sockets with short timeouts.
//!
//! * [`detect`] runs every probe in ladder order and returns a [`Detection`]
//!   (serializes to the `python-sandbox detect --json` shape).
//! * [`OsInfo::detect`] gathers OS facts; [`OsInfo::from_os_release`] is its pure parser.
//! * [`suggest`] is a pure function from ([`OsInfo`], [`Detection`]) to guidance text for the
//!   "no engine" case. It never suggests running unsandboxed.
//! * [`probe_bwrap_cached`] memoizes a successful bwrap probe for the rest of the boot, so a
//!   warm `run` does not pay two process spawns for detection.
//! * [`bwrap_limits`] says what holds each resource limit under bwrap (a delegated cgroup v2,
//!   else rlimits); [`delegation_in`] is its pure core.
//! * [`which`] is the PATH lookup shared with the engines, [`create_dir_all_nofollow`] the
//!   one way they create a missing read-write mount point, and [`open_nofollow`] the one way
//!   they pin a mount source.

mod api;
mod bwrap;
mod detection;
mod host;
mod limits;
mod mkdir;
pub mod netlink;
mod os;
mod probe;
pub mod protect;
mod suggest;
mod which;

pub use api::{ApiEndpoint, docker_endpoints, ping, podman_endpoints};
pub use bwrap::{
    BwrapVersion, bwrap_version, classify_bwrap_failure, probe_bwrap, probe_bwrap_binary,
    probe_bwrap_cached,
};
pub use detection::{Detection, detect, detect_with};
pub use host::{ca_bundle, proxy_addresses};
pub use limits::{
    BwrapLimits, CONTROLLERS, DATA_PER_CPU, DefaultLimit, DefaultLimits, Delegation, LimitSupport,
    Mechanism, bwrap_limits, bwrap_limits_from, controllers_for_containers, cpu_count,
    delegation_in, nproc_per_userns, rlimit_memory_default, rootless_cgroup_limits,
};
pub use mkdir::{CreateDirError, create_dir_all_nofollow, open_nofollow, open_nofollow_in};
pub use os::{Distro, OsInfo, OsKind, Wsl};
pub use probe::{
    APPARMOR_USERNS_RESTRICTED, EngineName, MAX_USER_NAMESPACES_OFF, NO_SECCOMP_FILTERS, Probe,
    ProbeState, USERNS_CLONE_OFF,
};
pub use suggest::{BUILTIN_NET, NATIVE_USERNS_PREFIX, suggest};
pub use which::{NoPasta, pasta, relay_possible, which};

#[cfg(test)]
mod tests;
