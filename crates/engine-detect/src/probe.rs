//! The result of probing one engine: its name, whether it works, and why ([`Probe`]).

use serde::Serialize;

use crate::api::ApiEndpoint;
use crate::limits::{DefaultLimits, LimitSupport};

/// The engines, in ladder order (first available wins), then those off the ladder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineName {
    /// The sandbox built into the binary (engine-native), probed by its own crate.
    Native,
    Bwrap,
    Docker,
    Podman,
    /// A Kubernetes cluster: listed and probed, never selected (where a script runs on a
    /// cluster is the caller's explicit choice, and probing one is a network call).
    K8s,
}

impl EngineName {
    /// Ladder order: the engines `auto` may select.
    pub const ALL: [EngineName; 4] =
        [EngineName::Native, EngineName::Bwrap, EngineName::Docker, EngineName::Podman];

    pub fn as_str(self) -> &'static str {
        match self {
            EngineName::Native => "native",
            EngineName::Bwrap => "bwrap",
            EngineName::Docker => "docker",
            EngineName::Podman => "podman",
            EngineName::K8s => "k8s",
        }
    }

    /// Whether `auto` may select it ([`EngineName::ALL`]).
    pub fn in_auto(self) -> bool {
        EngineName::ALL.contains(&self)
    }
}

impl std::fmt::Display for EngineName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The host settings that forbid user namespaces, as the native probe names them in its reason
/// (and `suggest` recognises them there): one wording for both.
pub const MAX_USER_NAMESPACES_OFF: &str = "user.max_user_namespaces = 0";
/// See [`MAX_USER_NAMESPACES_OFF`] (older Debian kernels).
pub const USERNS_CLONE_OFF: &str = "kernel.unprivileged_userns_clone = 0";
/// See [`MAX_USER_NAMESPACES_OFF`] (Ubuntu 23.10 and later).
pub const APPARMOR_USERNS_RESTRICTED: &str = "kernel.apparmor_restrict_unprivileged_userns = 1";
/// The native probe's reason for a kernel without seccomp filters.
pub const NO_SECCOMP_FILTERS: &str = "this kernel takes no seccomp filters";

/// Why a probe came out the way it did, beyond the human `reason`. Not serialized: the JSON
/// shape is fixed to `{"name","available","reason","limits","defaults"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeState {
    /// Works; for docker/podman, the endpoint that answered `/_ping`.
    Available { endpoint: Option<ApiEndpoint> },
    /// The tool is not on PATH and no socket answered.
    NotInstalled,
    /// Podman is installed but no API socket answers; a caller may start `podman system service`.
    InstalledNoSocket,
    /// Nothing says where it is (a cluster with no config and no `KUBECONFIG`); not probed.
    NotConfigured,
    /// Installed but unusable (bwrap cannot create namespaces, daemon not answering, …).
    Failed,
}

/// One rung of the ladder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Probe {
    pub name: EngineName,
    pub available: bool,
    /// One line for humans, lower-case, no trailing period; may be followed by `hint:` lines.
    pub reason: String,
    #[serde(skip)]
    pub state: ProbeState,
    /// What holds `--memory`, `--cpus` and `--pids-limit` on this engine here (all `null`
    /// when the engine is unusable).
    pub limits: LimitSupport,
    /// The default limits and what holds each here (`held_by: null`: that default does not
    /// apply on this engine here); filled from `limits` by [`crate::Detection::from_probes`].
    pub defaults: DefaultLimits,
}

impl Probe {
    /// A probe's result as its prober found it (engines probed outside this crate: k8s).
    pub fn new(name: EngineName, state: ProbeState, reason: String) -> Probe {
        let available = matches!(state, ProbeState::Available { .. });
        let limits = LimitSupport::NONE;
        Probe { name, available, reason, state, limits, defaults: DefaultLimits::of(&limits) }
    }
}
