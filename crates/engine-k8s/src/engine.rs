//! `K8sEngine`: the session half of the engine seam on a cluster (`impl SessionEngine`, name
//! `k8s`). A session is one hardened pod ([`crate::manifest::pod`]) whose main process is the
//! agent; its NetworkPolicy, and a Service and Ingress per published port, are owned by it.
//!
//! The pure core is [`plan`]: a `SessionConfig` becomes the pod, its signed labels, the
//! secret env kept out of the spec and the preview URLs, or a refusal with a hint for what a
//! pod cannot do (host mounts, a pid limit). The engine does the IO around it: one client and
//! a small tokio runtime of its own (the dyn seam is synchronous), and this user's
//! [`reaper::MarkKey`] (shared with the OCI engines: one key per user) signing every pod, so
//! open, list, stop and the sweep touch only pods this user made.
//!
//! Mapping of a `SessionConfig`:
//! - workspace: the pod's workdir (`SandboxConfig::workdir`, an `emptyDir`); the host directory
//!   is not synced (a warning says so); `tmpfs_size` is the size of `/tmp`, a memory-backed
//!   `emptyDir` (ENOSPC when full, as on every engine); the workspace's and home's sizes are
//!   `SandboxConfig::volume_sizes`;
//! - limits: memory and cpus become the container's limits (requests lowered to fit); a pid
//!   limit is refused (Kubernetes sets those per node);
//! - publish: each port a Service and an Ingress, its URL `http://<host>.<preview domain>`
//!   (the id for the first port, `<id>-<port>` for others); a host address or host port does
//!   not apply (a warning says so); there is no local port-forward fallback yet;
//! - env: plain values in the pod spec, secret-looking ones only over exec stdin
//!   ([`crate::session`]).

use std::collections::BTreeMap;
use std::io::Read as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Pod;
use reaper::{Kind, MarkKey, Owner, SandboxLabels};
use sandbox_core::{
    Executor, HostPort, Net, SessionConfig, SessionEngine, SessionInfo, SessionPolicy, shell,
};

use crate::error::{Error, Result};
use crate::manifest::{self, PodOwner, PodRequest};
use crate::session::{
    Attached, POLICY_ANNOTATION, PodSandbox, SCRIPTS_ANNOTATION, SECRET_ENV_FILE,
    SECRET_NAMES_ANNOTATION,
};
use crate::{PodExec, SandboxConfig, Swept, api};

/// The engine's name on the seam.
pub const ENGINE_NAME: &str = "k8s";
/// How long a pod may take from create to ready (an image pull on a cold node included).
pub const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Sessions as pods on a cluster.
pub struct K8sEngine {
    config: SandboxConfig,
    client: kube::Client,
    rt: Option<tokio::runtime::Runtime>,
    mark: MarkKey,
    owner: Owner,
    /// The apiserver's URL: with the namespace, what the net-off verdict is kept for on the
    /// host ([`crate::netoff`]). `None` for an engine on a given client (tests): its verdicts
    /// are never kept, and never read from the user's cache.
    cluster: Option<String>,
    /// Tests: the verdict a fake cluster's policies get without a probe.
    #[cfg(test)]
    pub(crate) assumed_policy: Option<crate::netoff::Verdict>,
}

impl std::fmt::Debug for K8sEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("K8sEngine").field("config", &self.config).finish_non_exhaustive()
    }
}

impl Drop for K8sEngine {
    fn drop(&mut self) {
        // An interactive exec's input thread may still block on the caller's stdin.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().map_err(
        |e| Error::Host { what: "start the async runtime".to_owned(), message: e.to_string() },
    )
}

/// Where this user's `python-sandbox` cache directory goes (`reaper::hostfs::cache_base`).
fn cache_base() -> std::path::PathBuf {
    let uid = rustix::process::geteuid().as_raw();
    reaper::hostfs::cache_base(&|n| std::env::var_os(n), &std::env::temp_dir(), uid)
}

/// This user's signing key, where the OCI engines keep theirs (one key per user).
fn mark_key() -> Result<MarkKey> {
    let base = cache_base();
    let host = |e: reaper::Error| Error::Host {
        what: "load the signing key".to_owned(),
        message: e.to_string(),
    };
    let dir = reaper::PrivateDir::open(&base.join("python-sandbox").join("keys")).map_err(host)?;
    MarkKey::load(&dir).map_err(host)
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// 12 random hex digits from `/dev/urandom` (ids, and the nonce of a script run, which the
/// script must not guess); the clock and pid only if it cannot be read.
pub(crate) fn random_id() -> String {
    let mut bytes = [0u8; 6];
    if std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).is_err() {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        let mixed = nanos ^ (u128::from(std::process::id()) << 64);
        bytes.copy_from_slice(&mixed.to_le_bytes()[..6]);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A session as the engine will create it ([`plan`]).
#[derive(Debug, Clone)]
pub struct Plan {
    /// The sandbox id.
    pub id: String,
    /// The engine's config with this session's TTL and limits.
    pub config: SandboxConfig,
    /// The pod, labels signed, annotations set.
    pub pod: Pod,
    /// The labels every object of the session carries.
    pub labels: BTreeMap<String, String>,
    /// Where the session's traffic may go.
    pub egress: manifest::PodEgress,
    /// With a list: the egress proxy's address, once known ([`Plan::proxied`]).
    pub proxy: Option<std::net::IpAddr>,
    /// Published ports, in order.
    pub ports: Vec<u16>,
    /// Secret-looking env, kept out of the spec.
    pub secret_env: Vec<(String, String)>,
    /// What the session was started with.
    pub policy: SessionPolicy,
    /// What the session does not get as asked, one line each.
    pub warnings: Vec<String>,
}

impl Plan {
    /// Points the pod's clients at the egress proxy at `proxy` (its Service's address), for a
    /// plan with a list ([`manifest::PodEgress::Proxy`]; without this its pod reaches nothing).
    pub fn proxied(&mut self, proxy: std::net::IpAddr) {
        self.proxy = Some(proxy);
        let env = crate::egress::pod_env(proxy);
        let containers = self.pod.spec.iter_mut().flat_map(|spec| spec.containers.iter_mut());
        for container in containers.filter(|c| c.name == manifest::CONTAINER) {
            let vars = container.env.get_or_insert_with(Vec::new);
            vars.retain(|v| !env.iter().any(|(name, _)| *name == v.name));
            vars.extend(env.iter().map(|(name, value)| k8s_openapi::api::core::v1::EnvVar {
                name: name.clone(),
                value: Some(value.clone()),
                value_from: None,
            }));
        }
    }

    /// The pod's NetworkPolicy, without an owner: `api::start` sets it from the created pod.
    pub fn network_policy(&self) -> k8s_openapi::api::networking::v1::NetworkPolicy {
        let owner = PodOwner { name: manifest::pod_name(&self.id), uid: String::new() };
        let mut policy = manifest::network_policy(
            &self.config,
            &self.id,
            &self.labels,
            &owner,
            self.egress,
            &self.ports,
        );
        policy.metadata.owner_references = None;
        policy
    }
}

/// Pure: the preview URL of the `index`th published `port` of sandbox `id`.
pub fn preview_url(config: &SandboxConfig, id: &str, index: usize, port: u16) -> String {
    let host_id = if index == 0 { id.to_owned() } else { format!("{id}-{port}") };
    format!("http://{}", manifest::preview_host(config, &host_id))
}

fn unsupported(what: &str, hint: &str) -> Error {
    sandbox_core::Error::Unsupported {
        what: what.to_owned(),
        by: "the k8s engine".to_owned(),
        hint: hint.to_owned(),
    }
    .into()
}

/// Pure: the session `session` asks for as pod sandbox `id` of `owner` at `now`, signed with
/// `mark`; a refusal names what a pod cannot do.
pub fn plan(
    base: &SandboxConfig,
    session: &SessionConfig,
    id: &str,
    owner: &Owner,
    now: u64,
    mark: &MarkKey,
) -> Result<Plan> {
    if let Some(mount) = session.mounts.first() {
        return Err(unsupported(
            &format!("the mount `{}`", mount.path.display()),
            "a pod cannot see host paths; copy files in with `put` (or `write_file`) instead",
        ));
    }
    let mut config = base.clone();
    config.idle_ttl = session.ttl.max(Duration::from_secs(1));
    // The pod's /tmp is a tmpfs of this size, as every engine's is.
    config.volume_sizes.tmp = session.tmpfs_size.to_string();
    apply_limits(&mut config, &session.limits)?;
    config.validate()?;
    let mut spec_env = Vec::new();
    let mut secret_env = Vec::new();
    for var in &session.env {
        let value =
            var.value.clone().ok_or_else(|| Error::EnvWithoutValue { name: var.name.clone() })?;
        if sandbox_core::is_secret_name(&var.name) {
            secret_env.push((var.name.clone(), value));
        } else {
            spec_env.push((var.name.clone(), value));
        }
    }
    let mut warnings = vec![format!(
        "the workspace is the pod's `{}`; `{}` on this host is not copied into it",
        config.workdir,
        session.workspace.display()
    )];
    let mut ports = Vec::new();
    for publish in &session.publish {
        if publish.port == crate::exec::AGENT_PORT {
            return Err(unsupported(
                &format!("publishing port {}", publish.port),
                "the sandbox's agent listens on it inside the pod; serve on another port",
            ));
        }
        if publish.host.is_some() || publish.host_port != HostPort::Same {
            warnings.push(format!(
                "publish {}: a host address or host port does not apply on k8s; the port is served at its preview URL",
                publish.port
            ));
        }
        if !ports.contains(&publish.port) {
            ports.push(publish.port);
        }
    }
    let mut labels = SandboxLabels {
        ttl: Some(config.idle_ttl.as_secs()),
        expires: Some(now.saturating_add(config.hard_lifetime.as_secs())),
        ..SandboxLabels::new(id, Kind::Session, owner, now)
    }
    .to_labels()
    .map_err(|e| Error::Host { what: "label the pod".to_owned(), message: e.to_string() })?;
    mark.sign(&manifest::pod_name(id), &mut labels);
    let mut pod = manifest::pod(
        &config,
        &PodRequest {
            id: id.to_owned(),
            labels: labels.clone(),
            ports: ports.clone(),
            env: spec_env,
        },
    )?;
    let policy = SessionPolicy {
        net: session.net == Net::On,
        allow: session.allow.clone().filter(|_| session.net == Net::On),
        mounts: Vec::new(),
        publish: ports.clone(),
        tmpfs_size: Some(session.tmpfs_size),
        limits: session.limits,
    };
    let names: Vec<&str> = secret_env.iter().map(|(k, _)| k.as_str()).collect();
    let mut annotations = BTreeMap::from([
        (POLICY_ANNOTATION.to_owned(), serde_json::to_string(&policy).unwrap_or_default()),
        (SCRIPTS_ANNOTATION.to_owned(), "0".to_owned()),
    ]);
    if !names.is_empty() {
        annotations.insert(SECRET_NAMES_ANNOTATION.to_owned(), names.join(","));
    }
    pod.metadata.annotations = Some(annotations);
    let egress = match (session.net, &policy.allow) {
        (Net::Off, _) => manifest::PodEgress::Off,
        (Net::On, None) => manifest::PodEgress::On,
        (Net::On, Some(_)) => manifest::PodEgress::Proxy,
    };
    Ok(Plan {
        id: id.to_owned(),
        egress,
        proxy: None,
        config,
        pod,
        labels,
        ports,
        secret_env,
        policy,
        warnings,
    })
}

/// Memory and cpus as the container's limits, requests lowered to fit; pids refused. A pod
/// always has memory and cpu limits (the restricted namespace's policy requires them: the
/// config's `resources` are the defaults), so `none` for either is refused; `none` for pids
/// asks for what a pod already is.
fn apply_limits(config: &mut SandboxConfig, limits: &sandbox_core::Limits) -> Result<()> {
    if limits.off.memory || limits.off.cpus {
        let flag = if limits.off.memory { "`--memory none`" } else { "`--cpus none`" };
        return Err(unsupported(
            flag,
            "a pod always has memory and cpu limits (the namespace's policy requires them); give a size or a number of CPUs instead",
        ));
    }
    if limits.pids.is_some() {
        return Err(unsupported(
            "a process limit (`--pids`)",
            "Kubernetes limits processes per node (the kubelet's `podPidsLimit`), not per pod; leave out `--pids`",
        ));
    }
    let r = &mut config.resources;
    if let Some(bytes) = limits.memory {
        r.memory_limit = bytes.to_string();
        if crate::config::quantity("resources.memory_request", &r.memory_request)? > bytes as f64 {
            r.memory_request = r.memory_limit.clone();
        }
    }
    if let Some(cpus) = limits.cpus {
        r.cpu_limit = format!("{}m", cpus.millis());
        if crate::config::quantity("resources.cpu_request", &r.cpu_request)? > cpus.as_f64() {
            r.cpu_request = r.cpu_limit.clone();
        }
    }
    Ok(())
}

/// Pure: a listed pod as a session, when it is one of this user's (mark, kind).
pub fn session_info(config: &SandboxConfig, mark: &MarkKey, pod: &Pod) -> Option<SessionInfo> {
    let name = pod.metadata.name.as_deref()?;
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    if !mark.verifies(name, &labels) {
        return None;
    }
    let parsed = SandboxLabels::from_labels(&labels).ok()??;
    if parsed.kind != Kind::Session || manifest::pod_name(&parsed.id) != name {
        return None;
    }
    let policy = policy_of(pod);
    let state = if pod.metadata.deletion_timestamp.is_some() {
        "terminating".to_owned()
    } else {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
        phase.to_ascii_lowercase()
    };
    Some(SessionInfo {
        ports: urls(config, &parsed.id, &policy.publish),
        id: parsed.id,
        engine: ENGINE_NAME.to_owned(),
        sandbox: name.to_owned(),
        created: parsed.created,
        ttl: parsed.ttl.unwrap_or(0),
        state,
        workspace: workdir_of(pod).unwrap_or_else(|| config.workdir.clone()),
        warnings: Vec::new(),
    })
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

fn policy_of(pod: &Pod) -> SessionPolicy {
    annotation(pod, POLICY_ANNOTATION)
        .and_then(|p| serde_json::from_str(p).ok())
        .unwrap_or_default()
}

fn workdir_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref()?.containers.first()?.working_dir.clone()
}

fn urls(config: &SandboxConfig, id: &str, ports: &[u16]) -> Vec<(u16, String)> {
    ports.iter().enumerate().map(|(i, p)| (*p, preview_url(config, id, i, *p))).collect()
}

impl K8sEngine {
    /// An engine on the cluster of the usual kube config (`KUBECONFIG`, `~/.kube/config`, a
    /// pod's service account). Sends nothing yet: the first call finds out whether the
    /// cluster answers ([`K8sEngine::server_version`] asks directly).
    pub fn new(config: SandboxConfig) -> Result<K8sEngine> {
        K8sEngine::with_context(config, None)
    }

    /// [`K8sEngine::new`] on context `context` of the kube config (`KUBECONFIG` or
    /// `~/.kube/config`) instead of its current one; `None` is [`K8sEngine::new`].
    pub fn with_context(config: SandboxConfig, context: Option<&str>) -> Result<K8sEngine> {
        config.validate()?;
        let rt = runtime()?;
        let client = rt.block_on(async {
            let no_config =
                |e: &dyn std::fmt::Display| Error::NoKubeconfig { message: e.to_string() };
            let kube_config = match context {
                None => kube::Config::infer().await.map_err(|e| no_config(&e))?,
                Some(context) => {
                    let options = kube::config::KubeConfigOptions {
                        context: Some(context.to_owned()),
                        ..kube::config::KubeConfigOptions::default()
                    };
                    kube::Config::from_kubeconfig(&options).await.map_err(|e| no_config(&e))?
                }
            };
            let cluster = kube_config.cluster_url.to_string();
            let builder = kube::client::ClientBuilder::try_from(kube_config).map_err(|e| {
                Error::Unreachable {
                    action: "connect to the cluster".to_owned(),
                    message: e.to_string(),
                }
            })?;
            let client = builder.with_layer(&crate::api::CountRequests).build();
            Ok::<_, Error>((client, cluster))
        })?;
        let (client, cluster) = client;
        let mut engine = K8sEngine::with_client(config, rt, client, mark_key()?)?;
        engine.cluster = Some(cluster);
        Ok(engine)
    }

    /// An engine on a given client (made inside `rt`) and key.
    pub(crate) fn with_client(
        config: SandboxConfig,
        rt: tokio::runtime::Runtime,
        client: kube::Client,
        mark: MarkKey,
    ) -> Result<K8sEngine> {
        let owner = Owner::current(None).map_err(|e| Error::Host {
            what: "identify the owner".to_owned(),
            message: e.to_string(),
        })?;
        Ok(K8sEngine {
            config,
            client,
            rt: Some(rt),
            mark,
            owner,
            cluster: None,
            #[cfg(test)]
            assumed_policy: None,
        })
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        // Only `Drop` takes it.
        self.rt.as_ref().unwrap_or_else(|| unreachable!("runtime used after drop"))
    }

    /// The engine's configuration.
    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// [`crate::netoff::place_key`] of the cluster and namespace, where the engine knows its
    /// cluster's URL (made from a kube config, not a given client).
    pub fn place_key(&self) -> Option<String> {
        Some(crate::netoff::place_key(self.cluster.as_deref()?, &self.config.namespace))
    }

    /// The kube client (use it inside [`Executor::block_on`]).
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// The apiserver's version (`v1.30.2`): whether the cluster answers at all.
    pub fn server_version(&self) -> Result<String> {
        self.block_on(self.client.apiserver_version()).map(|v| v.git_version).map_err(|e| {
            Error::Unreachable {
                action: "ask the apiserver its version".to_owned(),
                message: e.to_string(),
            }
        })
    }

    /// Runs the reaper now in the engine's namespace ([`crate::sweep::sweep`]).
    pub fn reap(&self, dry_run: bool) -> Result<Vec<Swept>> {
        self.block_on(crate::sweep::sweep(
            &self.client,
            &self.config.namespace,
            &self.mark,
            now_secs(),
            dry_run,
        ))
    }

    fn not_found(&self, id: &str) -> Error {
        Error::NotFound {
            kind: "session".to_owned(),
            name: id.to_owned(),
            namespace: self.config.namespace.clone(),
        }
    }

    /// This user's session pod `id`, whatever its phase; `NotFound` for anything else.
    fn own_pod(&self, id: &str) -> Result<Pod> {
        manifest::check_id(id).map_err(|_| self.not_found(id))?;
        let name = manifest::pod_name(id);
        let pod = self.block_on(api::get_pod(&self.client, &self.config.namespace, &name))?;
        pod.filter(|p| session_info(&self.config, &self.mark, p).is_some())
            .ok_or_else(|| self.not_found(id))
    }

    pub(crate) async fn publish_all(&self, plan: &Plan, pod: &Pod) -> Result<()> {
        let owner = PodOwner {
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
        };
        let ns = &self.config.namespace;
        for (index, port) in plan.ports.iter().enumerate() {
            let host_id = if index == 0 { plan.id.clone() } else { format!("{}-{port}", plan.id) };
            let service = manifest::service(&plan.config, &plan.id, &plan.labels, &owner, *port);
            let ingress =
                manifest::ingress(&plan.config, &plan.id, &plan.labels, &owner, *port, &host_id);
            api::publish(&self.client, ns, pod, service, Some(ingress)).await?;
        }
        Ok(())
    }

    pub(crate) fn handle(&self, pod: &Pod, secret_env: Vec<(String, String)>) -> PodSandbox {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let id = labels.get(reaper::labels::ID).cloned().unwrap_or_default();
        let policy = policy_of(pod);
        let attached = Attached {
            urls: urls(&self.config, &id, &policy.publish),
            workdir: workdir_of(pod).unwrap_or_else(|| self.config.workdir.clone()),
            uid: pod.metadata.uid.clone(),
            scripts: annotation(pod, SCRIPTS_ANNOTATION).and_then(|n| n.parse().ok()).unwrap_or(0),
            env: spec_env_of(pod),
            secret_env,
            policy,
            id,
            preview: self.config.preview,
        };
        PodSandbox::attach(self.pod_exec(pod), attached).with_api(
            self.client.clone(),
            &self.config.namespace,
            self.rt().handle().clone(),
        )
    }
}

impl K8sEngine {
    /// Execs in `pod`'s sandbox container, through its agent.
    fn pod_exec(&self, pod: &Pod) -> PodExec {
        let name = pod.metadata.name.clone().unwrap_or_default();
        // gVisor's and Kata's port-forward does not reach the pod's loopback: under a runtime
        // class every call is an exec (no failed forward first, on every CLI call).
        let runtime_class = pod.spec.as_ref().and_then(|s| s.runtime_class_name.as_ref());
        PodExec::new(self.client.clone(), &self.config.namespace, &name)
            .container(manifest::CONTAINER)
            .agent_port(runtime_class.is_none().then_some(crate::exec::AGENT_PORT))
    }

    /// Creates and starts `pod` with `policy` ([`api::start`]), handed out once its agent
    /// answers; with `early` (a run's pod) as soon as it does, before the kubelet reports it.
    pub(crate) async fn launch_pod(
        &self,
        pod: &Pod,
        policy: k8s_openapi::api::networking::v1::NetworkPolicy,
        status: &mut dyn FnMut(&str),
        early: bool,
    ) -> Result<Pod> {
        let greet = |started: Pod| {
            let exec = self.pod_exec(&started);
            async move { exec.greet().await }
        };
        let ns = &self.config.namespace;
        api::start(&self.client, ns, pod, policy, START_TIMEOUT, status, greet, early).await
    }

    /// Refuses a net-off sandbox (`pod`, started under its deny-all egress policy) on a cluster
    /// that does not enforce NetworkPolicy ([`crate::netoff`]): the verdict kept on the host
    /// for this cluster and namespace, else the probe run in `pod` and its verdict kept.
    pub(crate) async fn net_off_given(
        &self,
        pod: &Pod,
        refusal: fn(&str) -> crate::Error,
    ) -> Result<()> {
        use sandbox_core::Sandbox as _;
        let ns = &self.config.namespace;
        let records = self.cluster.as_ref().and_then(|_| netoff_records());
        let name = crate::netoff::record_name(self.cluster.as_deref().unwrap_or_default(), ns);
        let now = SystemTime::now();
        let verdict = match self.net_off_known() {
            Some(verdict) => verdict,
            None => {
                let sandbox = self.handle(pod, Vec::new());
                let request = sandbox_core::ExecRequest {
                    argv: ["python3", "-I", "-c", crate::netoff::PROBE].map(str::to_owned).to_vec(),
                    cwd: Some("/".to_owned()),
                    ..Default::default()
                };
                let mut capped = shell::Capped::new(4096);
                let outcome = sandbox.exec(&request, &mut capped).await?;
                let Some(verdict) = crate::netoff::verdict(outcome.exit_code) else {
                    return Err(unsupported(
                        "`net = \"off\"` (whether this cluster enforces NetworkPolicy could not be checked: the pod knows no apiserver address)",
                        "nothing was run; run with the network on explicitly (`--net on`), or on another engine",
                    ));
                };
                if let Some(dir) = &records {
                    // Best effort: without the record the next net-off sandbox checks again.
                    let _ = dir.replace(&name, crate::netoff::render(verdict, now).as_bytes());
                }
                verdict
            }
        };
        match verdict {
            crate::netoff::Verdict::Enforced => Ok(()),
            crate::netoff::Verdict::Ignored => Err(refusal(ns)),
        }
    }

    /// A pod whose policy must be enforced to hold (net off, a list) runs only where it is:
    /// checked from inside it at the first on a cluster and namespace ([`K8sEngine::net_off_given`]).
    pub(crate) async fn policy_given(&self, plan: &Plan, pod: &Pod) -> Result<()> {
        match plan.egress {
            manifest::PodEgress::On => Ok(()),
            manifest::PodEgress::Off => self.net_off_given(pod, crate::netoff::refusal).await,
            manifest::PodEgress::Proxy => {
                self.net_off_given(pod, crate::netoff::list_refusal).await
            }
        }
    }

    /// Refuses net off, or a list, before anything is made on a cluster already found not to
    /// enforce NetworkPolicy.
    pub(crate) fn refuse_unenforced(&self, net: Net, listed: bool) -> Result<()> {
        let walled = net == Net::Off || listed;
        if walled && self.net_off_known() == Some(crate::netoff::Verdict::Ignored) {
            let ns = &self.config.namespace;
            return Err(match net {
                Net::Off => crate::netoff::refusal(ns),
                Net::On => crate::netoff::list_refusal(ns),
            });
        }
        Ok(())
    }

    /// For a plan with a list: the egress proxy's address into its pod's environment; refused
    /// when the proxy is not deployed (or this account cannot see it).
    pub(crate) async fn hold_to_list(&self, plan: &mut Plan) -> Result<()> {
        if plan.egress != manifest::PodEgress::Proxy {
            return Ok(());
        }
        let services: kube::Api<k8s_openapi::api::core::v1::Service> =
            kube::Api::namespaced(self.client.clone(), crate::egress::NAMESPACE);
        let (ns, name) = (crate::egress::NAMESPACE, crate::egress::SERVICE);
        let op = crate::failure::Op::new("get", "service", Some(name), ns);
        let found = services.get_opt(name).await.map_err(|e| crate::failure::api_error(&op, e));
        let address = match found {
            Ok(service) => service
                .and_then(|s| s.spec)
                .and_then(|s| s.cluster_ip)
                .and_then(|ip| ip.parse::<std::net::IpAddr>().ok()),
            // The reader's Role comes with the proxy (deploy/egress): no Role, no proxy.
            Err(Error::Forbidden { .. }) => None,
            Err(e) => return Err(e),
        };
        let Some(address) = address else {
            return Err(unsupported(
                &format!(
                    "a list of hosts (`--net HOST,...`): no egress proxy is deployed in namespace `{}` that this account can read (a NetworkPolicy names addresses, not hosts)",
                    crate::egress::NAMESPACE
                ),
                &format!(
                    "nothing was run; deploy the proxy with `{}`, or run with `--net on` or on another engine",
                    crate::egress::DEPLOY_HINT
                ),
            ));
        };
        plan.proxied(address);
        Ok(())
    }

    /// The net-off verdict kept on this host for this cluster and namespace, while fresh.
    pub(crate) fn net_off_known(&self) -> Option<crate::netoff::Verdict> {
        #[cfg(test)]
        if self.assumed_policy.is_some() {
            return self.assumed_policy;
        }
        let name = crate::netoff::record_name(self.cluster.as_deref()?, &self.config.namespace);
        let kept = netoff_records()?.read(&name).ok()??;
        crate::netoff::parse(&String::from_utf8_lossy(&kept), SystemTime::now())
    }

    /// Starts a session pod for `config`; a warm pool member, labelled with its key and
    /// [`POOL_READY`], when `pool` is given.
    fn start_pod(
        &self,
        config: &SessionConfig,
        status: &mut dyn FnMut(&str),
        pool: Option<&str>,
    ) -> Result<SessionInfo> {
        self.refuse_unenforced(config.net, config.allow.is_some())?;
        let id = random_id();
        let mut plan = plan(&self.config, config, &id, &self.owner, now_secs(), &self.mark)?;
        self.block_on(self.hold_to_list(&mut plan))?;
        if let Some(key) = pool {
            let labels = plan.pod.metadata.labels.get_or_insert_with(BTreeMap::new);
            labels.insert(POOL_LABEL.to_owned(), key.to_owned());
            labels.insert(POOL_STATE_LABEL.to_owned(), POOL_READY.to_owned());
        }
        let ns = &self.config.namespace;
        let policy = plan.network_policy();
        status(&format!("starting pod `{}` in namespace `{ns}`", manifest::pod_name(&id)));
        let pod = self.block_on(self.launch_pod(&plan.pod, policy, status, false))?;
        let finished = self.block_on(async {
            self.policy_given(&plan, &pod).await?;
            self.publish_all(&plan, &pod).await?;
            if !plan.secret_env.is_empty() {
                write_secret_env(&self.handle(&pod, Vec::new()), &plan.secret_env).await?;
            }
            Ok::<_, Error>(())
        });
        if let Err(e) = finished {
            // The pod takes its Services, Ingresses and policy along.
            let name = manifest::pod_name(&id);
            let _ = self.block_on(api::delete_pod(
                &self.client,
                ns,
                &name,
                pod.metadata.uid.as_deref(),
            ));
            return Err(e);
        }
        let mut info =
            session_info(&self.config, &self.mark, &pod).ok_or_else(|| self.not_found(&id))?;
        info.warnings = plan.warnings;
        Ok(info)
    }
}

/// Our label on a warm pool member: its `sandbox_core::pool::pool_key`.
pub const POOL_LABEL: &str = "io.python-sandbox.pool";
/// A pool member's state: [`POOL_READY`] until a claim relabels it [`POOL_CLAIMED`].
pub const POOL_STATE_LABEL: &str = "io.python-sandbox.pool-state";
/// Unclaimed: nobody's session yet, never opened.
pub const POOL_READY: &str = "ready";
/// Claimed: a session like any other.
pub const POOL_CLAIMED: &str = "claimed";

/// Pure: whether `pod` is an unclaimed pool member.
fn unclaimed(pod: &Pod) -> bool {
    pod.metadata.labels.as_ref().and_then(|l| l.get(POOL_STATE_LABEL)).map(String::as_str)
        == Some(POOL_READY)
}

/// Pure: `pod` as a claimable member of this user's pool: ours (its mark verifies), running,
/// unclaimed, and no script ever recorded in it.
pub fn pool_member(
    config: &SandboxConfig,
    mark: &MarkKey,
    pod: &Pod,
) -> Option<sandbox_core::PoolMember> {
    let info = session_info(config, mark, pod)?;
    let key = pod.metadata.labels.as_ref()?.get(POOL_LABEL)?.clone();
    let fresh = annotation(pod, SCRIPTS_ANNOTATION).is_none_or(|n| n == "0");
    let ok = unclaimed(pod) && info.state == "running" && fresh;
    ok.then(|| sandbox_core::PoolMember {
        id: info.id,
        key,
        created: info.created,
        revision: pod.metadata.resource_version.clone().unwrap_or_default(),
    })
}

impl Executor for K8sEngine {
    fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.rt().block_on(future)
    }
}

impl SessionEngine for K8sEngine {
    type Error = Error;
    type Session = PodSandbox;

    fn session_engine_name(&self) -> &'static str {
        ENGINE_NAME
    }

    fn start_session(
        &self,
        config: &SessionConfig,
        status: &mut dyn FnMut(&str),
    ) -> Result<SessionInfo> {
        self.start_pod(config, status, None)
    }

    fn open_session(&self, id: &str) -> Result<PodSandbox> {
        let pod = self.own_pod(id)?;
        let running = pod.metadata.deletion_timestamp.is_none()
            && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        // An unclaimed pool member is nobody's session: nothing runs in it before its claim.
        if !running || unclaimed(&pod) {
            return Err(self.not_found(id));
        }
        let names: Vec<String> = annotation(&pod, SECRET_NAMES_ANNOTATION)
            .map(|n| n.split(',').filter(|n| !n.is_empty()).map(str::to_owned).collect())
            .unwrap_or_default();
        let secret_env = if names.is_empty() {
            Vec::new()
        } else {
            self.block_on(read_secret_env(&self.handle(&pod, Vec::new()), &names))?
        };
        Ok(self.handle(&pod, secret_env))
    }

    fn list_sessions(&self) -> Result<Vec<SessionInfo>> {
        let selector = format!("{},{}=session", reaper::MANAGED_FILTER, reaper::labels::KIND);
        let pods =
            self.block_on(api::list_pods(&self.client, &self.config.namespace, &selector))?;
        let mut out: Vec<SessionInfo> = pods
            .iter()
            .filter(|p| !unclaimed(p))
            .filter_map(|p| session_info(&self.config, &self.mark, p))
            .collect();
        out.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
        Ok(out)
    }

    fn stop_session(&self, id: &str) -> Result<()> {
        let pod = self.own_pod(id)?;
        let name = manifest::pod_name(id);
        let deleted = self.block_on(api::delete_pod(
            &self.client,
            &self.config.namespace,
            &name,
            pod.metadata.uid.as_deref(),
        ))?;
        if deleted { Ok(()) } else { Err(self.not_found(id)) }
    }

    /// The cluster settings a pod is made from (namespace, image, runtime class, resources…).
    fn pool_identity(&self) -> Option<String> {
        Some(format!("k8s {:?}", self.config))
    }

    fn pool_members(&self) -> Result<Vec<sandbox_core::PoolMember>> {
        let selector = format!(
            "{},{}=session,{POOL_STATE_LABEL}={POOL_READY}",
            reaper::MANAGED_FILTER,
            reaper::labels::KIND
        );
        let pods =
            self.block_on(api::list_pods(&self.client, &self.config.namespace, &selector))?;
        Ok(pods.iter().filter_map(|p| pool_member(&self.config, &self.mark, p)).collect())
    }

    fn pool_create(&self, config: &SessionConfig, key: &str) -> Result<()> {
        self.start_pod(config, &mut |_| {}, Some(key)).map(drop)
    }

    /// One conditional relabel: of any number of callers that listed the member at the same
    /// resourceVersion, the apiserver applies exactly one patch and answers the rest 409.
    fn pool_claim(&self, member: &sandbox_core::PoolMember) -> Result<Option<SessionInfo>> {
        if manifest::check_id(&member.id).is_err() || member.revision.is_empty() {
            return Ok(None);
        }
        let labels = BTreeMap::from([(POOL_STATE_LABEL.to_owned(), POOL_CLAIMED.to_owned())]);
        let name = manifest::pod_name(&member.id);
        let claimed = self.block_on(api::relabel_at(
            &self.client,
            &self.config.namespace,
            &name,
            &member.revision,
            &labels,
        ))?;
        let Some(pod) = claimed else { return Ok(None) };
        let key = pod.metadata.labels.as_ref().and_then(|l| l.get(POOL_LABEL));
        match session_info(&self.config, &self.mark, &pod) {
            Some(info) if key == Some(&member.key) => Ok(Some(info)),
            // Ours now, but not what was listed: nobody gets it.
            _ => {
                let _ = self.stop_session(&member.id);
                Ok(None)
            }
        }
    }

    /// A Lease in the namespace, named for this user's pool (`crate::lease`).
    fn pool_lease_take(
        &self,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<sandbox_core::PoolLease> {
        let name = crate::lease::name(&self.mark);
        let ns = &self.config.namespace;
        Ok(match self.block_on(crate::lease::take(&self.client, ns, &name, holder, ttl))? {
            None => sandbox_core::PoolLease::Held,
            Some(other) => sandbox_core::PoolLease::HeldBy(other),
        })
    }

    fn pool_lease_release(&self, holder: &str) -> Result<()> {
        let name = crate::lease::name(&self.mark);
        self.block_on(crate::lease::release(&self.client, &self.config.namespace, &name, holder))
    }

    fn pool_lease_holder(&self) -> Result<Option<String>> {
        let name = crate::lease::name(&self.mark);
        self.block_on(crate::lease::holder(&self.client, &self.config.namespace, &name))
    }

    fn pool_remove(&self, id: &str) -> Result<()> {
        let pod = self.own_pod(id)?;
        let Some(member) = pool_member(&self.config, &self.mark, &pod) else { return Ok(()) };
        // Claimed first, so no caller is handed a member being removed.
        let labels = BTreeMap::from([(POOL_STATE_LABEL.to_owned(), POOL_CLAIMED.to_owned())]);
        let name = manifest::pod_name(id);
        let ns = &self.config.namespace;
        if self
            .block_on(api::relabel_at(&self.client, ns, &name, &member.revision, &labels))?
            .is_some()
        {
            self.stop_session(id)?;
        }
        Ok(())
    }
}

/// Pure: the environment the sandbox container's spec carries, in order (no secrets: they
/// never enter a spec).
fn spec_env_of(pod: &Pod) -> Vec<(String, String)> {
    let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
    let container = containers.iter().find(|c| c.name == manifest::CONTAINER);
    let vars = container.and_then(|c| c.env.as_deref()).unwrap_or_default();
    vars.iter().filter_map(|v| Some((v.name.clone(), v.value.clone()?))).collect()
}

/// Writes the secret env into the pod over the exec's stdin, readable by the sandbox user only.
async fn write_secret_env(sandbox: &PodSandbox, env: &[(String, String)]) -> Result<()> {
    let json = serde_json::to_vec(env).unwrap_or_default();
    let script = r#"umask 077 && cat > "$1""#;
    let (outcome, captured) =
        shell::capture(sandbox, &["sh", "-c", script, "sh", SECRET_ENV_FILE], json).await?;
    if outcome.exit_code != 0 {
        return Err(sandbox_core::Error::SessionCommand {
            what: "handing the secret env to the pod".to_owned(),
            message: captured.stderr_lossy(),
        }
        .into());
    }
    Ok(())
}

/// The secret env a start left in the pod, only the `names` its annotation lists.
async fn read_secret_env(sandbox: &PodSandbox, names: &[String]) -> Result<Vec<(String, String)>> {
    let (outcome, captured) =
        shell::capture(sandbox, &["cat", "--", SECRET_ENV_FILE], Vec::new()).await?;
    let pairs: Vec<(String, String)> = if outcome.exit_code == 0 {
        serde_json::from_slice(&captured.stdout).unwrap_or_default()
    } else {
        Vec::new()
    };
    Ok(pairs.into_iter().filter(|(k, _)| names.contains(k)).collect())
}

mod run;
#[cfg(test)]
mod tests;

/// This user's directory of net-off verdicts (`<cache>/python-sandbox/k8s`, checked to be the
/// caller's); `None` where it cannot be had, and every net-off sandbox then checks.
fn netoff_records() -> Option<reaper::PrivateDir> {
    reaper::PrivateDir::open(&cache_base().join("python-sandbox")).ok()?.sub("k8s").ok()
}
