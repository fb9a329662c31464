//! Every object the engine creates, built by pure functions into `k8s_openapi` types: the sandbox
//! Pod (hardened by default, passing [`crate::restricted`]), its NetworkPolicy, and a Service and
//! Ingress per published port. The dependents carry an owner reference to the pod (its uid comes
//! from the created pod, so they are built after it), and go when it goes.
//!
//! No secret ever enters a spec: anyone who can `get pods` (or read events and audit logs) reads
//! it. [`pod`] refuses an env var whose name looks secret (`sandbox_core::is_secret_name`); the
//! engine sends those values over exec stdin instead.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, ExecAction, Pod,
    PodSecurityContext, PodSpec, Probe, ResourceRequirements, SeccompProfile, SecurityContext,
    Service, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, IPBlock, Ingress, IngressBackend, IngressRule,
    IngressServiceBackend, IngressSpec, NetworkPolicy, NetworkPolicyEgressRule,
    NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
    ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::{Error, SandboxConfig};

/// The uid and gid every sandbox runs as: `nobody`, as every other engine runs a root caller's
/// sandbox on the host (no user namespace here, so the pod's uid is the node's). The image's own
/// user (1000) is not used: the home is an emptyDir, group-owned through `fsGroup`.
pub const SANDBOX_UID: i64 = 65534;
/// The one container of a sandbox pod.
pub const CONTAINER: &str = "sandbox";
/// Prefix of every object name, so `kubectl get pods` shows whose they are.
pub const NAME_PREFIX: &str = "psbx-";
/// The pod's pid 1 is the agent itself, not tini as on docker and podman: the kernel ignores a
/// SIGSTOP or SIGKILL sent to a pid namespace's init from inside it, so a script that stops
/// everything it may signal cannot stop the agent that reports its end (issue 33 item 6: the
/// run hung and the pod stayed). As pid 1 the agent reaps orphans, ends on SIGTERM and makes
/// itself not dumpable, so `/proc/1/mem` stays closed as tini's execute-only binary kept it.
pub const INIT: [&str; 0] = [];
/// PATH inside the pod (the image's).
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The label ingress-nginx's namespace carries by itself (set by the apiserver since 1.21).
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";
/// Pure: the egress a net-on sandbox never gets, IPv4 and IPv6, each sorted: every engine's
/// refused ranges ([`sandbox_core::refused_ranges`]: "this network", loopback, link-local
/// with the cloud metadata addresses, and the private ranges, RFC 1918, carrier-grade NAT
/// where some clusters put pods, and unique-local, unless `lan` allows them), a range inside
/// another one left out.
pub fn denied_ranges(lan: sandbox_core::Lan) -> (Vec<String>, Vec<String>) {
    let mut ranges = sandbox_core::refused_ranges(lan);
    ranges.sort();
    let kept: Vec<sandbox_core::Cidr> = ranges
        .iter()
        .filter(|r| !ranges.iter().any(|other| other != *r && other.covers(r)))
        .copied()
        .collect();
    let (v4, v6): (Vec<sandbox_core::Cidr>, Vec<_>) =
        kept.into_iter().partition(|r| r.addr.is_ipv4());
    (v4.iter().map(ToString::to_string).collect(), v6.iter().map(ToString::to_string).collect())
}

/// One sandbox, as the pod builder needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct PodRequest {
    /// The sandbox id (the reaper's `io.python-sandbox.id`): lower-case letters, digits and `-`,
    /// at most [`MAX_ID_LEN`].
    pub id: String,
    /// The reaper's labels (`reaper::labels_for_session`); `extra_labels` are added to them.
    pub labels: BTreeMap<String, String>,
    /// Container ports to declare (published services); never host ports.
    pub ports: Vec<u16>,
    /// The session's own env, in order; later values of a name win. No secrets. The spec carries
    /// it for the handle, which sends it with every exec ([`run_env`]).
    pub env: Vec<(String, String)>,
}

/// The created pod, as its dependents reference it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodOwner {
    /// The pod's name.
    pub name: String,
    /// `metadata.uid` of the created pod.
    pub uid: String,
}

/// Longest id whose every derived name (`psbx-<id>-65535`, a Service name) fits in 63
/// characters.
pub const MAX_ID_LEN: usize = 63 - NAME_PREFIX.len() - "-65535".len();

/// The pod's name for a sandbox id.
pub fn pod_name(id: &str) -> String {
    format!("{NAME_PREFIX}{id}")
}

/// The NetworkPolicy's name.
pub fn network_policy_name(id: &str) -> String {
    format!("{NAME_PREFIX}{id}")
}

/// The Service and Ingress name for one published port.
pub fn service_name(id: &str, port: u16) -> String {
    format!("{NAME_PREFIX}{id}-{port}")
}

/// The preview host of a service: `<host_id>.<preview domain>`. The engine passes the sandbox id
/// for its first service and `<id>-<port>` for others, so every host routes to one port.
pub fn preview_host(config: &SandboxConfig, host_id: &str) -> String {
    format!("{host_id}.{}", config.preview_domain)
}

/// Checks a sandbox id before it becomes object names, a DNS label and a label value.
pub fn check_id(id: &str) -> Result<(), Error> {
    // A Service name is an RFC 1035 label: our prefix starts it with a letter already.
    if crate::config::is_dns_label(id) && id.len() <= MAX_ID_LEN {
        return Ok(());
    }
    Err(Error::InvalidId { id: id.to_owned(), max: MAX_ID_LEN })
}

/// The sandbox pod: the agent (idle watchdog and exec server) as its pid 1 ([`INIT`]),
/// hardened (see the crate's tests, one per field), resources and scheduling from `config`.
pub fn pod(config: &SandboxConfig, request: &PodRequest) -> Result<Pod, Error> {
    check_id(&request.id)?;
    let mut env = base_env(config);
    for (name, value) in &request.env {
        if sandbox_core::is_secret_name(name) {
            return Err(Error::SecretInPodSpec { name: name.clone() });
        }
        env.retain(|(k, _)| k != name);
        env.push((name.clone(), value.clone()));
    }
    let quantity = |q: &str| Quantity(q.to_owned());
    let r = &config.resources;
    let resources = ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_owned(), quantity(&r.cpu_request)),
            ("memory".to_owned(), quantity(&r.memory_request)),
            ("ephemeral-storage".to_owned(), quantity(&r.ephemeral_storage_request)),
        ])),
        limits: Some(BTreeMap::from([
            ("cpu".to_owned(), quantity(&r.cpu_limit)),
            ("memory".to_owned(), quantity(&r.memory_limit)),
            ("ephemeral-storage".to_owned(), quantity(&r.ephemeral_storage_limit)),
        ])),
        ..ResourceRequirements::default()
    };
    let v = &config.volume_sizes;
    // (name, mount path, sizeLimit, medium): /tmp is a tmpfs as on every engine, so a full
    // /tmp is ENOSPC for the script (a disk emptyDir over its limit evicts the whole pod).
    let volumes = [
        ("workspace", config.workdir.as_str(), &v.workspace, None),
        ("tmp", "/tmp", &v.tmp, Some("Memory")),
        ("home", sandbox_core::SANDBOX_HOME, &v.home, None),
    ];
    let mut command: Vec<String> = INIT.iter().map(|s| (*s).to_owned()).collect();
    // As the OCI sessions start it (isolated mode, the program inline, the TTL its argument),
    // behind the wall it takes itself first: every command of the pod is the agent's child.
    command.extend([
        "python3".to_owned(),
        "-I".to_owned(),
        "-c".to_owned(),
        sandbox_core::agent::walled(sandbox_core::agent::AGENT_PY),
        sandbox_core::agent::wall_arg(),
        config.idle_ttl.as_secs().to_string(),
        // A command's environment is exactly its request's: the kubelet's additions
        // (`KUBERNETES_*`, the pod's name as `HOSTNAME`) never reach it.
        sandbox_core::agent::EXACT_ENV_ARG.to_owned(),
        // The warm path: the same protocol on the pod's loopback, for the port-forward
        // (`crate::exec`), which saves every call a process start in the container.
        sandbox_core::agent::tcp_arg(crate::exec::AGENT_PORT),
    ]);
    let container = Container {
        name: CONTAINER.to_owned(),
        image: Some(config.image.clone()),
        image_pull_policy: Some(config.pull_policy.as_str().to_owned()),
        command: Some(command),
        working_dir: Some(config.workdir.clone()),
        env: Some(
            env.into_iter()
                .map(|(name, value)| EnvVar { name, value: Some(value), value_from: None })
                .collect(),
        ),
        ports: (!request.ports.is_empty()).then(|| {
            request
                .ports
                .iter()
                .map(|p| ContainerPort {
                    container_port: i32::from(*p),
                    protocol: Some("TCP".to_owned()),
                    ..ContainerPort::default()
                })
                .collect()
        }),
        resources: Some(resources),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            privileged: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            run_as_user: Some(SANDBOX_UID),
            run_as_group: Some(SANDBOX_UID),
            capabilities: Some(Capabilities { add: None, drop: Some(vec!["ALL".to_owned()]) }),
            seccomp_profile: Some(seccomp_of(config)),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(
            volumes
                .iter()
                .map(|(name, path, _, _)| VolumeMount {
                    name: (*name).to_owned(),
                    mount_path: (*path).to_owned(),
                    ..VolumeMount::default()
                })
                .collect(),
        ),
        // Ready once the agent listens. The start hands the pod out sooner when the agent
        // answers through a port-forward (`api::start`); this decides where none reaches it.
        readiness_probe: Some(Probe {
            exec: Some(ExecAction {
                command: Some(vec![
                    "test".to_owned(),
                    "-S".to_owned(),
                    format!("/{}", sandbox_core::agent::AGENT_SOCKET),
                ]),
            }),
            period_seconds: Some(1),
            failure_threshold: Some(30),
            ..Probe::default()
        }),
        stdin: Some(false),
        tty: Some(false),
        ..Container::default()
    };
    let secs = |d: std::time::Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
    Ok(Pod {
        metadata: metadata(config, &pod_name(&request.id), &request.labels, None),
        spec: Some(PodSpec {
            containers: vec![container],
            // As on every engine (`gethostname()`); the pod's name stays the API's.
            hostname: Some(sandbox_core::SANDBOX_HOSTNAME.to_owned()),
            restart_policy: Some("Never".to_owned()),
            active_deadline_seconds: Some(secs(config.hard_lifetime)),
            // The agent exits on SIGTERM; nothing in a sandbox is worth waiting 30 s for.
            termination_grace_period_seconds: Some(2),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            host_network: Some(false),
            host_pid: Some(false),
            host_ipc: Some(false),
            share_process_namespace: Some(false),
            service_account_name: config.service_account.clone(),
            runtime_class_name: config.runtime_class.clone(),
            node_selector: (!config.node_selector.is_empty()).then(|| config.node_selector.clone()),
            tolerations: (!config.tolerations.is_empty()).then(|| config.tolerations.clone()),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(SANDBOX_UID),
                run_as_group: Some(SANDBOX_UID),
                fs_group: Some(SANDBOX_UID),
                seccomp_profile: Some(seccomp_of(config)),
                ..PodSecurityContext::default()
            }),
            volumes: Some(
                volumes
                    .iter()
                    .map(|(name, _, size, medium)| Volume {
                        name: (*name).to_owned(),
                        empty_dir: Some(EmptyDirVolumeSource {
                            medium: medium.map(str::to_owned),
                            size_limit: Some(quantity(size)),
                            ..EmptyDirVolumeSource::default()
                        }),
                        ..Volume::default()
                    })
                    .collect(),
            ),
            ..PodSpec::default()
        }),
        status: None,
    })
}

/// Pure: a script's environment in the pod, the one contract of every engine
/// (`sandbox_core::run_env`) plus `PATH` and `PWD`: nothing of the CLI's host (the pod is not
/// on it, so `LANG` is `C.UTF-8`), and both CA variables naming the contract's bundle, which
/// the image (ABI 4, `deploy/image/setup.sh`) carries: its system bundle with any CA added at
/// build time, since a pod cannot see the host's. The agent adds nothing of the pod's
/// (`sandbox_core::agent::EXACT_ENV_ARG`): every exec carries it.
pub fn run_env(config: &SandboxConfig) -> Vec<(String, String)> {
    let mut env = vec![("PATH".to_owned(), PATH.to_owned())];
    env.extend(sandbox_core::run_env(|_| None::<String>, true));
    env.push(("PWD".to_owned(), config.workdir.clone()));
    env
}

/// The environment every sandbox starts with: [`run_env`] and, as in the OCI sessions, uv set
/// up for the session's own venv in its home (no interpreter downloads, system certificates).
/// The spec carries it so a later handle reads it back (`PodSandbox` sends it with every exec).
fn base_env(config: &SandboxConfig) -> Vec<(String, String)> {
    let mut env = run_env(config);
    for (name, value) in sandbox_core::shell::SESSION_UV_ENV {
        env.retain(|(k, _)| k != name);
        env.push((name.to_owned(), value.to_owned()));
    }
    // `python3` is the session's venv's (made at `session start`), as on every engine; a
    // run's exec sets its own `PATH`.
    let venv_bin = format!("{}/bin", sandbox_core::shell::SESSION_VENV);
    for (name, value) in &mut env {
        if name == "PATH" {
            *value = format!("{venv_bin}:{value}");
        }
    }
    env
}

fn seccomp_of(config: &SandboxConfig) -> SeccompProfile {
    match config.seccomp {
        crate::config::Seccomp::RuntimeDefault => {
            SeccompProfile { type_: "RuntimeDefault".to_owned(), localhost_profile: None }
        }
        crate::config::Seccomp::Wall => SeccompProfile {
            type_: "Localhost".to_owned(),
            localhost_profile: Some(sandbox_core::oci_seccomp::wall_profile_name()),
        },
    }
}

/// Name, namespace, the reaper's labels plus the config's extra ones, and the owner reference.
fn metadata(
    config: &SandboxConfig,
    name: &str,
    labels: &BTreeMap<String, String>,
    owner: Option<&PodOwner>,
) -> ObjectMeta {
    let mut all = config.extra_labels.clone();
    // The reaper's labels win: `validate` refuses extra labels under their prefix anyway.
    all.extend(labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(config.namespace.clone()),
        labels: Some(all),
        owner_references: owner.map(|o| {
            vec![OwnerReference {
                api_version: "v1".to_owned(),
                kind: "Pod".to_owned(),
                name: o.name.clone(),
                uid: o.uid.clone(),
                // No blockOwnerDeletion: it needs `update` on pods/finalizers, and nothing waits
                // on a dependent's deletion.
                controller: Some(true),
                block_owner_deletion: None,
            }]
        }),
        ..ObjectMeta::default()
    }
}

/// Selects exactly this sandbox's pod: its id and the managed-by pair.
fn sandbox_selector(id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (reaper::labels::MANAGED_BY.to_owned(), reaper::labels::MANAGED_BY_VALUE.to_owned()),
        (reaper::labels::ID.to_owned(), id.to_owned()),
    ])
}

/// Where a sandbox pod's traffic may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodEgress {
    /// Nowhere (`net = "off"`).
    Off,
    /// Public addresses and the cluster DNS (`net = "on"`).
    On,
    /// The cluster's egress proxy only, which holds the pod to its list ([`crate::egress`]).
    Proxy,
}

/// The sandbox's NetworkPolicy. Ingress only from the ingress controller's namespace, only to
/// `ports` (none: no ingress at all). Egress ([`PodEgress`]): nothing with net off; with net on
/// public addresses (every range of [`denied_ranges`] for `config.lan`, and
/// `config.cluster_cidrs`, excepted) plus the cluster DNS on port 53; with a list, the egress
/// proxy's pods on its port and nothing else (not even DNS: the proxy resolves names).
pub fn network_policy(
    config: &SandboxConfig,
    id: &str,
    labels: &BTreeMap<String, String>,
    owner: &PodOwner,
    egress: PodEgress,
    ports: &[u16],
) -> NetworkPolicy {
    let ingress = (!ports.is_empty()).then(|| {
        vec![NetworkPolicyIngressRule {
            from: Some(vec![NetworkPolicyPeer {
                namespace_selector: Some(match_labels([(
                    NAMESPACE_NAME_LABEL,
                    config.ingress_namespace.as_str(),
                )])),
                ..NetworkPolicyPeer::default()
            }]),
            ports: Some(ports.iter().map(|p| tcp(*p)).collect()),
        }]
    });
    let egress = if egress == PodEgress::Proxy {
        vec![NetworkPolicyEgressRule {
            to: Some(vec![NetworkPolicyPeer {
                namespace_selector: Some(match_labels([(
                    NAMESPACE_NAME_LABEL,
                    crate::egress::NAMESPACE,
                )])),
                pod_selector: Some(match_labels([(
                    crate::egress::APP_LABEL,
                    crate::egress::SERVICE,
                )])),
                ..NetworkPolicyPeer::default()
            }]),
            ports: Some(vec![tcp(crate::egress::PORT)]),
        }]
    } else if egress == PodEgress::On {
        let (mut v4, mut v6) = denied_ranges(config.lan);
        for cidr in &config.cluster_cidrs {
            match crate::config::parse_cidr(cidr) {
                Some((addr, _)) if addr.is_ipv4() => v4.push(cidr.clone()),
                Some(_) => v6.push(cidr.clone()),
                // `validate` refuses these; an unparsed range is left out rather than guessed.
                None => {}
            }
        }
        let block = |cidr: &str, except: Vec<String>| NetworkPolicyPeer {
            ip_block: Some(IPBlock { cidr: cidr.to_owned(), except: Some(except) }),
            ..NetworkPolicyPeer::default()
        };
        vec![
            NetworkPolicyEgressRule {
                to: Some(vec![block("0.0.0.0/0", v4), block("::/0", v6)]),
                ports: None,
            },
            // The cluster DNS lives in a denied range: allowed by name, on its port only.
            NetworkPolicyEgressRule {
                to: Some(vec![NetworkPolicyPeer {
                    namespace_selector: Some(match_labels([(NAMESPACE_NAME_LABEL, "kube-system")])),
                    pod_selector: Some(match_labels([("k8s-app", "kube-dns")])),
                    ..NetworkPolicyPeer::default()
                }]),
                ports: Some(vec![
                    NetworkPolicyPort {
                        protocol: Some("UDP".to_owned()),
                        port: Some(IntOrString::Int(53)),
                        end_port: None,
                    },
                    tcp(53),
                ]),
            },
        ]
    } else {
        Vec::new()
    };
    NetworkPolicy {
        metadata: metadata(config, &network_policy_name(id), labels, Some(owner)),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(sandbox_selector(id)),
                match_expressions: None,
            }),
            // Both types always: a type left out would mean "allow all" in that direction.
            policy_types: Some(vec!["Ingress".to_owned(), "Egress".to_owned()]),
            ingress,
            egress: Some(egress),
        }),
    }
}

fn match_labels<const N: usize>(pairs: [(&str, &str); N]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()),
        match_expressions: None,
    }
}

fn tcp(port: u16) -> NetworkPolicyPort {
    NetworkPolicyPort {
        protocol: Some("TCP".to_owned()),
        port: Some(IntOrString::Int(i32::from(port))),
        end_port: None,
    }
}

/// The ClusterIP Service in front of one published port of the sandbox.
pub fn service(
    config: &SandboxConfig,
    id: &str,
    labels: &BTreeMap<String, String>,
    owner: &PodOwner,
    port: u16,
) -> Service {
    Service {
        metadata: metadata(config, &service_name(id, port), labels, Some(owner)),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            selector: Some(sandbox_selector(id)),
            ports: Some(vec![ServicePort {
                name: Some("http".to_owned()),
                protocol: Some("TCP".to_owned()),
                port: i32::from(port),
                target_port: Some(IntOrString::Int(i32::from(port))),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The Ingress routing `http://<host_id>.<preview domain>/` to [`service`] for `port`.
pub fn ingress(
    config: &SandboxConfig,
    id: &str,
    labels: &BTreeMap<String, String>,
    owner: &PodOwner,
    port: u16,
    host_id: &str,
) -> Ingress {
    Ingress {
        metadata: metadata(config, &service_name(id, port), labels, Some(owner)),
        spec: Some(IngressSpec {
            ingress_class_name: config.ingress_class.clone(),
            rules: Some(vec![IngressRule {
                host: Some(preview_host(config, host_id)),
                http: Some(HTTPIngressRuleValue {
                    paths: vec![HTTPIngressPath {
                        path: Some("/".to_owned()),
                        path_type: "Prefix".to_owned(),
                        backend: IngressBackend {
                            service: Some(IngressServiceBackend {
                                name: service_name(id, port),
                                port: Some(ServiceBackendPort {
                                    number: Some(i32::from(port)),
                                    name: None,
                                }),
                            }),
                            resource: None,
                        },
                    }],
                }),
            }]),
            ..IngressSpec::default()
        }),
        status: None,
    }
}

/// The pod of sandbox `abc` with no labels, ports or env: what tests of added volumes start from.
#[cfg(test)]
pub(crate) fn bare_pod(config: &SandboxConfig) -> Pod {
    let request = PodRequest {
        id: "abc".to_owned(),
        labels: BTreeMap::new(),
        ports: Vec::new(),
        env: Vec::new(),
    };
    pod(config, &request).expect("the default pod")
}

#[cfg(test)]
mod tests;
