//! `SandboxConfig`: everything about the cluster side of a pod sandbox that is not per sandbox
//! (namespace, image, resources, scheduling, preview domain, lifetimes), with defaults that match
//! `deploy/` and one `validate` that names the bad field and says how to fix it. Pure: no IO.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Toleration;

use crate::Error;

/// The namespace `deploy/` creates (labelled for Pod Security `restricted`).
pub const DEFAULT_NAMESPACE: &str = "python-sandbox";
/// The versioned tag `cargo xtask image` gives the runtime image beside `:latest`
/// (`<version>-abi<N>`, N the image layout of deploy/image/Containerfile), which
/// `cargo xtask kind load` puts on the nodes: a `:latest` image is pulled `Always`, which fails
/// without a registry. Pulled `IfNotPresent` either way ([`PullPolicy`]).
pub const DEFAULT_IMAGE: &str =
    concat!("python-sandbox-runtime:", env!("CARGO_PKG_VERSION"), "-abi4");
/// Resolves every `<anything>.127.0.0.1.nip.io` to loopback, where kind maps ingress-nginx's
/// ports 80 and 443 (deploy/kind/cluster.yaml).
pub const DEFAULT_PREVIEW_DOMAIN: &str = "127.0.0.1.nip.io";
/// The class ingress-nginx registers.
pub const DEFAULT_INGRESS_CLASS: &str = "nginx";
/// Where ingress-nginx runs; the only namespace a sandbox's NetworkPolicy lets in.
pub const DEFAULT_INGRESS_NAMESPACE: &str = "ingress-nginx";
/// The workspace inside the pod (an `emptyDir`).
pub const DEFAULT_WORKDIR: &str = "/workspace";
/// A session unused this long ends itself (the agent's watchdog), as on the other engines.
pub const DEFAULT_IDLE_TTL: Duration = Duration::from_secs(30 * 60);
/// `activeDeadlineSeconds`: the cluster ends the pod after this whatever it is doing.
pub const DEFAULT_HARD_LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);

/// How `start_service` gives a preview URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Preview {
    /// The Ingress URL once it answers, else a local port-forward (no controller serves the
    /// domain within [`crate::session::AUTO_PATIENCE`]).
    #[default]
    Auto,
    /// The Ingress URL only; a controller that never routes is an error.
    Ingress,
    /// Always a local port-forward (`http://127.0.0.1:PORT`), held by the handle.
    PortForward,
}

impl Preview {
    /// `auto`, `ingress` or `port-forward` (what a config file or flag says).
    pub fn parse(name: &str) -> Option<Preview> {
        match name {
            "auto" => Some(Preview::Auto),
            "ingress" => Some(Preview::Ingress),
            "port-forward" => Some(Preview::PortForward),
            _ => None,
        }
    }
}

/// The seccomp profile of the sandbox container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Seccomp {
    /// The runtime's own profile (`RuntimeDefault`): on every node, but not the project's wall
    /// (containerd 1.6's refuses `get_mempolicy`, which numpy calls, and allows what the wall
    /// refuses).
    #[default]
    RuntimeDefault,
    /// The project's wall as a `Localhost` profile
    /// ([`sandbox_core::oci_seccomp::wall_profile_name`]), which `deploy/seccomp/` installs on
    /// every node: a node without it fails the pod's start, never runs it under less.
    Wall,
}

impl Seccomp {
    /// `runtime-default` or `wall` (what a config file says).
    pub fn parse(name: &str) -> Option<Seccomp> {
        match name {
            "runtime-default" => Some(Seccomp::RuntimeDefault),
            "wall" => Some(Seccomp::Wall),
            _ => None,
        }
    }
}

/// `imagePullPolicy` of the sandbox container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PullPolicy {
    /// Use the node's copy (`kind load docker-image`), pull only when missing. The default:
    /// `:latest` would otherwise mean `Always`, an `ErrImagePull` where there is no registry.
    #[default]
    IfNotPresent,
    /// Pull on every start (a registry with a moving tag).
    Always,
    /// Never pull: the image must already be on the node.
    Never,
}

impl PullPolicy {
    /// The API value.
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::IfNotPresent => "IfNotPresent",
            PullPolicy::Always => "Always",
            PullPolicy::Never => "Never",
        }
    }
}

/// Requests and limits of the sandbox container, as Kubernetes quantities (`500m`, `2Gi`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resources {
    /// CPU the scheduler reserves.
    pub cpu_request: String,
    /// CPU the container may use (throttled above).
    pub cpu_limit: String,
    /// Memory the scheduler reserves.
    pub memory_request: String,
    /// Memory the container may use (OOM-killed above: exit 137).
    pub memory_limit: String,
    /// Node disk the scheduler reserves (the emptyDirs and the container's writable layer).
    pub ephemeral_storage_request: String,
    /// Node disk the pod may use (evicted above).
    pub ephemeral_storage_limit: String,
}

impl Default for Resources {
    /// The other engines' defaults (2 CPUs, 2 GiB), requests small enough to pack a node.
    fn default() -> Resources {
        Resources {
            cpu_request: "250m".to_owned(),
            cpu_limit: "2".to_owned(),
            memory_request: "256Mi".to_owned(),
            memory_limit: "2Gi".to_owned(),
            ephemeral_storage_request: "256Mi".to_owned(),
            ephemeral_storage_limit: "4Gi".to_owned(),
        }
    }
}

/// `sizeLimit`s of the pod's three `emptyDir`s. The workspace and home are on the node's disk
/// and together at most the ephemeral-storage limit; `/tmp` is a tmpfs, as on every engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeSizes {
    /// The workspace ([`SandboxConfig::workdir`]).
    pub workspace: String,
    /// `/tmp` (the agent's socket lives there): a memory-backed `emptyDir`, so a write past its
    /// size fails with ENOSPC instead of evicting the pod, and what it holds counts against the
    /// memory limit. A session's `tmpfs_size` (`--tmpfs-size`) sets it.
    pub tmp: String,
    /// The home directory: the session's venv and uv cache.
    pub home: String,
}

impl Default for VolumeSizes {
    fn default() -> VolumeSizes {
        VolumeSizes { workspace: "1Gi".to_owned(), tmp: "256Mi".to_owned(), home: "2Gi".to_owned() }
    }
}

/// How pod sandboxes are made on a cluster. `Default` gives the shape `deploy/` sets up;
/// [`SandboxConfig::validate`] runs before anything is sent.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxConfig {
    /// Namespace of every object (must exist; deploy/kind/namespace.yaml).
    pub namespace: String,
    /// Absolute path of the workspace in the pod.
    pub workdir: String,
    /// The runtime image.
    pub image: String,
    /// `imagePullPolicy`.
    pub pull_policy: PullPolicy,
    /// Preview URLs are `http://<id>.<preview_domain>`.
    pub preview_domain: String,
    /// `ingressClassName` of preview Ingresses; `None` leaves the cluster's default class.
    pub ingress_class: Option<String>,
    /// Namespace of the ingress controller, the one source a sandbox accepts traffic from.
    pub ingress_namespace: String,
    /// How preview URLs are served: the Ingress, a local port-forward, or the first that works.
    pub preview: Preview,
    /// Cluster-internal ranges outside RFC 1918 and 100.64.0.0/10 (pod and service CIDRs of
    /// clusters on other ranges), denied to net-on sandboxes like the private ranges.
    pub cluster_cidrs: Vec<String>,
    /// Whether net-on sandboxes may reach the private ranges (pods and nodes on them; the
    /// `cluster_cidrs` stay denied): off unless the user config says `[net] lan = true`.
    pub lan: sandbox_core::Lan,
    /// Container requests and limits.
    pub resources: Resources,
    /// The emptyDirs' size caps.
    pub volume_sizes: VolumeSizes,
    /// `runtimeClassName`, e.g. `gvisor` (deploy/gvisor).
    pub runtime_class: Option<String>,
    /// The container's seccomp profile.
    pub seccomp: Seccomp,
    /// `serviceAccountName`; its token is never mounted.
    pub service_account: Option<String>,
    /// `nodeSelector`.
    pub node_selector: BTreeMap<String, String>,
    /// `tolerations` (tainted sandbox nodes).
    pub tolerations: Vec<Toleration>,
    /// Added to every object's labels; may not touch the reaper's `io.python-sandbox.` keys.
    pub extra_labels: BTreeMap<String, String>,
    /// Idle time after which the pod's main process (the agent) exits.
    pub idle_ttl: Duration,
    /// `activeDeadlineSeconds`: the cap whatever the activity.
    pub hard_lifetime: Duration,
    /// The most bytes of file contents `run` syncs each way (the workspace in, its changes out).
    pub sync_limit: u64,
    /// User claims mounted into run pods (`--mount pvc:NAME:/path[:ro]`, `crate::claims`);
    /// never into sessions or the environment's prepare pod.
    pub run_claims: Vec<crate::claims::ClaimMount>,
}

impl Default for SandboxConfig {
    fn default() -> SandboxConfig {
        SandboxConfig {
            namespace: DEFAULT_NAMESPACE.to_owned(),
            workdir: DEFAULT_WORKDIR.to_owned(),
            image: DEFAULT_IMAGE.to_owned(),
            pull_policy: PullPolicy::default(),
            preview_domain: DEFAULT_PREVIEW_DOMAIN.to_owned(),
            ingress_class: Some(DEFAULT_INGRESS_CLASS.to_owned()),
            ingress_namespace: DEFAULT_INGRESS_NAMESPACE.to_owned(),
            preview: Preview::Auto,
            cluster_cidrs: Vec::new(),
            lan: sandbox_core::Lan::Refused,
            resources: Resources::default(),
            volume_sizes: VolumeSizes::default(),
            runtime_class: None,
            seccomp: Seccomp::RuntimeDefault,
            service_account: None,
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            extra_labels: BTreeMap::new(),
            idle_ttl: DEFAULT_IDLE_TTL,
            hard_lifetime: DEFAULT_HARD_LIFETIME,
            sync_limit: sandbox_core::sync::DEFAULT_SYNC_LIMIT,
            run_claims: Vec::new(),
        }
    }
}

/// The prefix of the reaper's label keys; extra labels may not use it.
const RESERVED_LABEL_PREFIX: &str = "io.python-sandbox.";
/// Mount points the pod already uses; the workspace may not be one of them or below them.
const RESERVED_PATHS: [&str; 2] = ["/tmp", sandbox_core::SANDBOX_HOME];

impl SandboxConfig {
    /// Checks every field; the first bad one is an [`Error::Config`] naming it, with a hint.
    pub fn validate(&self) -> Result<(), Error> {
        dns_label("namespace", &self.namespace)?;
        dns_label("ingress_namespace", &self.ingress_namespace)?;
        self.validate_workdir()?;
        if self.image.is_empty() || self.image.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(bad(
                "image",
                format!("`{}` is not an image reference", self.image),
                format!("use a name such as `{DEFAULT_IMAGE}`"),
            ));
        }
        dns_subdomain("preview_domain", &self.preview_domain)?;
        if let Some(class) = &self.ingress_class {
            dns_subdomain("ingress_class", class)?;
        }
        if let Some(class) = &self.runtime_class {
            dns_subdomain("runtime_class", class)?;
        }
        if let Some(account) = &self.service_account {
            dns_subdomain("service_account", account)?;
        }
        for cidr in &self.cluster_cidrs {
            if parse_cidr(cidr).is_none() {
                return Err(bad(
                    "cluster_cidrs",
                    format!("`{cidr}` is not a CIDR"),
                    "write ranges as `10.96.0.0/12` or `fd00::/8`".to_owned(),
                ));
            }
        }
        self.validate_resources()?;
        crate::claims::check_paths(&self.run_claims, &self.workdir)?;
        for (key, value) in &self.node_selector {
            label_pair("node_selector", key, value)?;
        }
        for (key, value) in &self.extra_labels {
            label_pair("extra_labels", key, value)?;
            if key.starts_with(RESERVED_LABEL_PREFIX) {
                return Err(bad(
                    "extra_labels",
                    format!("`{key}` is one of the reaper's labels"),
                    format!(
                        "pick a key outside `{RESERVED_LABEL_PREFIX}*`: the sweep relies on those"
                    ),
                ));
            }
        }
        if self.idle_ttl.as_secs() == 0 {
            return Err(bad(
                "idle_ttl",
                "must be at least one second".to_owned(),
                "the agent exits after this long without an exec".to_owned(),
            ));
        }
        if self.hard_lifetime.as_secs() == 0 {
            return Err(bad(
                "hard_lifetime",
                "must be at least one second".to_owned(),
                "it becomes the pod's `activeDeadlineSeconds`".to_owned(),
            ));
        }
        if self.idle_ttl > self.hard_lifetime {
            return Err(bad(
                "idle_ttl",
                format!(
                    "{} s is longer than hard_lifetime ({} s)",
                    self.idle_ttl.as_secs(),
                    self.hard_lifetime.as_secs()
                ),
                "lower idle_ttl or raise hard_lifetime".to_owned(),
            ));
        }
        Ok(())
    }

    fn validate_workdir(&self) -> Result<(), Error> {
        let dir = self.workdir.trim_end_matches('/');
        let hint = format!("use an absolute path of its own such as `{DEFAULT_WORKDIR}`");
        if !dir.starts_with('/') || dir.split('/').any(|c| c == ".." || c == ".") {
            return Err(bad(
                "workdir",
                format!("`{}` is not an absolute path", self.workdir),
                hint,
            ));
        }
        // Below `/tmp` is a volume mounted on the tmpfs's own; the home holds the session's
        // venv and is never shared.
        let clash = RESERVED_PATHS.iter().any(|p| {
            let below = dir.starts_with(&format!("{p}/")) && *p != "/tmp";
            dir == *p || below || p.starts_with(&format!("{dir}/"))
        });
        if dir.is_empty() || clash {
            return Err(bad(
                "workdir",
                format!("`{}` overlaps `/`, `/tmp` or the home directory", self.workdir),
                hint,
            ));
        }
        Ok(())
    }

    fn validate_resources(&self) -> Result<(), Error> {
        let r = &self.resources;
        let pairs = [
            ("resources.cpu_request", &r.cpu_request, "resources.cpu_limit", &r.cpu_limit),
            (
                "resources.memory_request",
                &r.memory_request,
                "resources.memory_limit",
                &r.memory_limit,
            ),
            (
                "resources.ephemeral_storage_request",
                &r.ephemeral_storage_request,
                "resources.ephemeral_storage_limit",
                &r.ephemeral_storage_limit,
            ),
        ];
        for (req_field, req, lim_field, lim) in pairs {
            let request = quantity(req_field, req)?;
            let limit = quantity(lim_field, lim)?;
            if limit == 0.0 {
                return Err(bad(
                    lim_field,
                    "must be more than zero".to_owned(),
                    "every sandbox gets a limit: the restricted namespace's policy requires it"
                        .to_owned(),
                ));
            }
            if request > limit {
                return Err(bad(
                    req_field,
                    format!("`{req}` is more than {lim_field} `{lim}`"),
                    "a request may not exceed its limit".to_owned(),
                ));
            }
        }
        let v = &self.volume_sizes;
        let mut total = 0.0;
        for (field, size, on_disk) in [
            ("volume_sizes.workspace", &v.workspace, true),
            ("volume_sizes.tmp", &v.tmp, false),
            ("volume_sizes.home", &v.home, true),
        ] {
            let bytes = quantity(field, size)?;
            if bytes == 0.0 {
                return Err(bad(
                    field,
                    "must be more than zero".to_owned(),
                    "an emptyDir needs room".to_owned(),
                ));
            }
            if on_disk {
                total += bytes;
            }
        }
        if total > quantity("resources.ephemeral_storage_limit", &r.ephemeral_storage_limit)? {
            return Err(bad(
                "volume_sizes",
                format!(
                    "workspace and home together are more than resources.ephemeral_storage_limit `{}`",
                    r.ephemeral_storage_limit
                ),
                "the emptyDirs count against that limit: shrink them or raise it".to_owned(),
            ));
        }
        Ok(())
    }
}

fn bad(field: &'static str, message: String, hint: String) -> Error {
    Error::Config { field, message, hint }
}

/// A Kubernetes quantity (`250m`, `2`, `1.5Gi`, `1e3`) as a number in base units; `Err` names
/// the field. Only what the API accepts: a decimal number and one known suffix.
pub(crate) fn quantity(field: &'static str, text: &str) -> Result<f64, Error> {
    const SUFFIXES: [(&str, f64); 13] = [
        ("Ki", 1024.0),
        ("Mi", 1024.0 * 1024.0),
        ("Gi", 1024.0 * 1024.0 * 1024.0),
        ("Ti", 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("Pi", 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("Ei", 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    let invalid = || {
        bad(
            field,
            format!("`{text}` is not a Kubernetes quantity"),
            "write it as `500m`, `2`, `512Mi` or `4Gi`".to_owned(),
        )
    };
    let (number, scale) = SUFFIXES
        .iter()
        .find_map(|(suffix, scale)| text.strip_suffix(suffix).map(|n| (n, *scale)))
        .unwrap_or((text, 1.0));
    let plain = number
        .chars()
        .all(|c| c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+');
    if number.is_empty() || number.starts_with(['-', '+']) || !plain {
        return Err(invalid());
    }
    let value: f64 = number.parse().map_err(|_| invalid())?;
    if !value.is_finite() {
        return Err(invalid());
    }
    Ok(value * scale)
}

/// An RFC 1123 label: namespaces.
fn dns_label(field: &'static str, value: &str) -> Result<(), Error> {
    if is_dns_label(value) {
        return Ok(());
    }
    Err(bad(
        field,
        format!("`{value}` is not a DNS label"),
        "use at most 63 lower-case letters, digits and `-`, starting and ending with a letter or digit"
            .to_owned(),
    ))
}

fn dns_subdomain(field: &'static str, value: &str) -> Result<(), Error> {
    if is_dns_subdomain(value) {
        return Ok(());
    }
    Err(bad(
        field,
        format!("`{value}` is not a DNS name"),
        "use lower-case DNS labels joined by `.`, at most 253 characters".to_owned(),
    ))
}

pub(crate) fn is_dns_label(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 63
        && value.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-')
}

pub(crate) fn is_dns_subdomain(value: &str) -> bool {
    value.len() <= 253 && value.split('.').all(is_dns_label)
}

/// A label key (`[prefix/]name`) and value, as the API checks them.
fn label_pair(field: &'static str, key: &str, value: &str) -> Result<(), Error> {
    let (prefix, name) = key.rsplit_once('/').map_or((None, key), |(p, n)| (Some(p), n));
    let name_ok = !name.is_empty() && reaper::labels::is_label_value(name);
    if !name_ok || prefix.is_some_and(|p| !is_dns_subdomain(p)) {
        return Err(bad(
            field,
            format!("`{key}` is not a label key"),
            "use `[dns.prefix/]name`, the name at most 63 of `[A-Za-z0-9._-]`".to_owned(),
        ));
    }
    if !reaper::labels::is_label_value(value) {
        return Err(bad(
            field,
            format!("`{value}` (for `{key}`) is not a label value"),
            "use at most 63 of `[A-Za-z0-9._-]`, starting and ending with a letter or digit"
                .to_owned(),
        ));
    }
    Ok(())
}

/// An IPv4 or IPv6 CIDR: address and prefix length in range.
pub(crate) fn parse_cidr(text: &str) -> Option<(std::net::IpAddr, u8)> {
    let (addr, len) = text.split_once('/')?;
    let addr: std::net::IpAddr = addr.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (len <= max).then_some((addr, len))
}

#[cfg(test)]
mod tests;
