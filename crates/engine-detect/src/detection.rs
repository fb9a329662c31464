//! The ladder: every probe in order, and the [`Detection`] it fills (the probes' own result
//! types are in `probe`, which the rungs share).

use std::ffi::OsString;
use std::time::Duration;

use serde::Serialize;

use crate::api::{self, ApiEndpoint};
use crate::bwrap;
use crate::limits::{self, LimitSupport};
use crate::probe::{EngineName, Probe, ProbeState};
use crate::which::which;

/// All probes in ladder order plus the first available one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Detection {
    pub selected: Option<EngineName>,
    pub engines: Vec<Probe>,
}

impl Detection {
    /// Selects the first available probe of the ladder ([`EngineName::in_auto`]); `probes`
    /// must be in ladder order.
    pub fn from_probes(mut engines: Vec<Probe>) -> Detection {
        for probe in &mut engines {
            probe.defaults = limits::DefaultLimits::of(&probe.limits);
        }
        let selected = engines.iter().find(|p| p.available && p.name.in_auto()).map(|p| p.name);
        Detection { selected, engines }
    }

    pub fn probe(&self, name: EngineName) -> Option<&Probe> {
        self.engines.iter().find(|p| p.name == name)
    }
}

/// Runs every probe of this crate against the current process environment: the ladder but
/// native, which engine-native probes itself (the CLI's registry puts it first).
pub fn detect() -> Detection {
    let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    detect_with(&env)
}

/// Runs every probe with an explicit environment (`PATH`, `DOCKER_HOST`, `CONTAINER_HOST`,
/// `XDG_RUNTIME_DIR` are read from it).
pub fn detect_with(env: &[(OsString, OsString)]) -> Detection {
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let path = get("PATH");
    let timeout = Duration::from_millis(1500);

    let bwrap = bwrap::probe_bwrap(path.as_deref());
    let docker = probe_api(
        EngineName::Docker,
        &api::docker_endpoints(get("DOCKER_HOST").as_deref()),
        which("docker", path.as_deref()).is_some(),
        timeout,
    );
    let uid = rustix::process::getuid().as_raw();
    let podman = probe_api(
        EngineName::Podman,
        &api::podman_endpoints(
            get("CONTAINER_HOST").as_deref(),
            get("XDG_RUNTIME_DIR").as_deref(),
            uid,
        ),
        which("podman", path.as_deref()).is_some(),
        timeout,
    );
    let mut probes = vec![bwrap, docker, podman];
    for probe in &mut probes {
        let usable = probe.available || probe.state == ProbeState::InstalledNoSocket;
        probe.limits = match probe.name {
            _ if !usable => LimitSupport::NONE,
            EngineName::Bwrap | EngineName::Native => limits::bwrap_limits().support,
            EngineName::Docker => LimitSupport::RUNTIME,
            // A non-root caller's podman is rootless (its own service), which holds limits
            // only on cgroup v2 with delegated controllers.
            EngineName::Podman if uid == 0 || limits::rootless_cgroup_limits() => {
                LimitSupport::RUNTIME
            }
            EngineName::Podman | EngineName::K8s => LimitSupport::NONE,
        };
    }
    Detection::from_probes(probes)
}

fn probe_api(
    name: EngineName,
    endpoints: &[Result<ApiEndpoint, String>],
    installed: bool,
    timeout: Duration,
) -> Probe {
    let mut tried = Vec::new();
    for endpoint in endpoints {
        match endpoint {
            Ok(endpoint) => match api::ping(endpoint, timeout) {
                Ok(()) => {
                    return Probe::new(
                        name,
                        ProbeState::Available { endpoint: Some(endpoint.clone()) },
                        format!("{name} API answers at {endpoint}"),
                    );
                }
                Err(err) => tried.push(format!("{endpoint}: {err}")),
            },
            Err(unsupported) => tried.push(unsupported.clone()),
        }
    }
    let tried = tried.join("; ");
    let (state, reason) = match (name, installed) {
        (EngineName::Podman, true) => (
            ProbeState::InstalledNoSocket,
            format!(
                "podman is installed but no API socket answers ({tried})\n\
                 hint: start one with `systemctl --user start podman.socket` or `podman system service --time=0 &`"
            ),
        ),
        (_, true) => (
            ProbeState::Failed,
            format!(
                "{name} is installed but its daemon does not answer ({tried})\n\
                 hint: start the daemon (`sudo systemctl start docker`) and make sure your user may use its socket"
            ),
        ),
        (_, false) if endpoints.iter().any(Result::is_ok) && tried.contains("refused") => {
            (ProbeState::Failed, format!("{name} socket exists but does not answer ({tried})"))
        }
        (_, false) => (ProbeState::NotInstalled, format!("{name} not found ({tried})")),
    };
    Probe::new(name, state, reason)
}
