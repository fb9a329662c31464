//! The one list of engines: their names, the `auto` ladder (the order of [`ENGINES`]), a cheap
//! probe each, how to open one for runs and for sessions, and what `reap` does on each. `run`,
//! `session *` and `reap` dispatch only through this list and the `sandbox_core` seam
//! (`DynEngine`, `DynSessionEngine`, `DynSession`); this is the only CLI module that names a
//! concrete engine. Adding an engine is: a crate, its probe, one entry here.
//!
//! An engine off the ladder (`in_auto: false`: a cluster) is never `auto`'s choice, and the
//! commands that look through every engine (`session list`, `reap`, a session id without
//! `--engine`) consult it only when its cheap `usable` says so (a cluster configured in the
//! user config): no command makes a network call to a cluster nobody named.

use std::cell::OnceCell;
use std::time::Duration;

use anyhow::Result;
use sandbox_core::{DynEngine, DynSession, DynSessionEngine, EngineError, ErrorClass};

use crate::ui;

/// What an engine is opened for: the container engines connect differently for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// `run` or `session start`: the image is needed, the startup sweep runs.
    Start,
    /// A command on existing sessions (`session run/exec/stop/list`): no image; the sweep at
    /// most once a minute (the interactive hot path).
    Attach,
    /// `reap`: no image, no sweep (reap's own sweep is the one that reports).
    Maintain,
}

/// What opening an engine may use from the command line.
#[derive(Clone, Copy)]
pub(crate) struct Options<'a> {
    /// `--image` (container engines, clusters).
    pub(crate) image: Option<&'a str>,
    /// `--namespace` (clusters).
    pub(crate) namespace: Option<&'a str>,
    /// The script's engine keys (`run`): below the flags, above the user config.
    pub(crate) script: Option<&'a crate::spec::EngineKeys>,
    pub(crate) purpose: Purpose,
    /// `run --mount pvc:…` (clusters; every other engine refuses them before it opens).
    pub(crate) claims: &'a [engine_k8s::claims::ClaimMount],
}

impl<'a> Options<'a> {
    /// For commands on existing sessions.
    pub(crate) fn attach(namespace: Option<&'a str>) -> Options<'a> {
        Options { image: None, namespace, script: None, purpose: Purpose::Attach, claims: &[] }
    }

    /// For `reap`.
    pub(crate) fn maintain(namespace: Option<&'a str>) -> Options<'a> {
        Options { image: None, namespace, script: None, purpose: Purpose::Maintain, claims: &[] }
    }
}

/// Facts the probes share, computed at most once per command.
#[derive(Default)]
pub(crate) struct Probes {
    detection: OnceCell<engine_detect::Detection>,
    native: OnceCell<engine_detect::Probe>,
    cluster: OnceCell<bool>,
}

impl Probes {
    /// Probes that take the user config's word on whether a cluster is configured.
    #[cfg(test)]
    fn with_cluster(configured: bool) -> Probes {
        Probes { cluster: OnceCell::from(configured), ..Probes::default() }
    }

    /// Whether the user config has an `[engine.k8s]` table (reads a file, no network). A
    /// config that does not parse counts as none here, with a warning: the commands that
    /// need the cluster report the error itself.
    fn cluster_configured(&self) -> bool {
        *self.cluster.get_or_init(|| match crate::config::user() {
            Ok(user) => user.k8s.is_some(),
            Err(e) => {
                ui::warn(&format!("the cluster is left out: {e}"));
                false
            }
        })
    }

    /// The native engine's probe: a forked child that unshares, its success remembered for
    /// this boot and context only (`engine_native::probe`), so a warm `run` skips the fork.
    fn native(&self) -> &engine_detect::Probe {
        self.native.get_or_init(engine_native::probe)
    }

    fn detection(&self) -> &engine_detect::Detection {
        self.detection.get_or_init(engine_detect::detect)
    }

    /// Whether `name` answers (or, podman, can be started: a private service).
    fn oci_usable(&self, name: engine_detect::EngineName) -> bool {
        self.detection()
            .probe(name)
            .is_some_and(|p| p.available || p.state == engine_detect::ProbeState::InstalledNoSocket)
    }

    /// `detect`'s probe of `name`, with its reason and limits.
    fn probe(&self, name: engine_detect::EngineName) -> engine_detect::Probe {
        match self.detection().probe(name) {
            Some(probe) => probe.clone(),
            None => engine_detect::Probe::new(
                name,
                engine_detect::ProbeState::Failed,
                "not probed".to_owned(),
            ),
        }
    }
}

/// Serves as the helper process an engine started this binary as, and exits (the built-in
/// proxy's keeper of a warm native or bwrap session without pasta); returns at once for
/// every other command line. First thing in `main`, while there is one thread.
pub(crate) fn helper_main_if_asked() {
    sandbox_net::keeper_main_if_asked();
}

/// What `detect` and `suggest` report: every engine's full probe, in ladder order.
pub(crate) fn detection() -> engine_detect::Detection {
    let probes = Probes::default();
    engine_detect::Detection::from_probes(ENGINES.iter().map(|e| (e.probe)(&probes)).collect())
}

/// The ladder's probes only: the advice of a run that found no engine, which must not ask a
/// cluster anything (`auto` would never have used it).
pub(crate) fn ladder_detection() -> engine_detect::Detection {
    let probes = Probes::default();
    let ladder = ENGINES.iter().filter(|e| e.in_auto);
    engine_detect::Detection::from_probes(ladder.map(|e| (e.probe)(&probes)).collect())
}

/// Connects an engine for runs.
type RunOpener = fn(&Options<'_>) -> Result<Box<dyn DynEngine>>;

/// One engine.
pub(crate) struct Entry {
    /// `--engine NAME`.
    pub(crate) name: &'static str,
    /// Whether `auto` may pick it. Off the ladder, commands looking through every engine
    /// consult it only when `usable`.
    in_auto: bool,
    /// Whether `auto` (and commands looking through every engine) should try it here: cheap,
    /// may be memoized, and never a network call to a cluster.
    usable: fn(&Probes) -> bool,
    /// The full probe `detect` prints (slower than `usable`: it may really try the engine).
    probe: fn(&Probes) -> engine_detect::Probe,
    /// Connects for runs; an [`ErrorClass::Unavailable`] error means it cannot sandbox here.
    /// `None`: the engine does not run scripts (yet), only sessions.
    open: Option<RunOpener>,
    /// The session side, for engines with warm sessions.
    sessions: Option<Sessions>,
    /// What `reap` removes on this engine.
    reap: fn(&Reap) -> Result<Vec<Reaped>>,
}

/// An engine's session side.
struct Sessions {
    /// Connects for sessions.
    open: fn(&Options<'_>) -> Result<Box<dyn DynSessionEngine>>,
    /// Session `id` without connecting (from its host record), for the warm path; `None`
    /// sends the caller to `open`.
    local: fn(&str) -> Option<Box<dyn DynSession>>,
}

/// The engines, in `auto` order.
pub(crate) const ENGINES: &[Entry] = &[
    Entry {
        name: "native",
        in_auto: true,
        // Built in: works wherever user namespaces and seccomp filters do, found by trying.
        usable: |p| p.native().available,
        probe: |p| p.native().clone(),
        open: Some(|o| Ok(native(o)?)),
        // bwrap's session side, the sandbox started in-process (its own records).
        sessions: Some(Sessions {
            open: |o| Ok(native(o)?),
            local: |id| {
                let config = engine_bwrap::BwrapConfig::from_env().ok()?;
                engine_native::local_session(&config, id)
            },
        }),
        reap: reap_native,
    },
    Entry {
        name: "bwrap",
        in_auto: true,
        // The probe creates real namespaces, so a bwrap that is installed but blocked
        // (AppArmor, a container without user namespaces) is skipped rather than failing
        // mid-run. Its success is memoized per bwrap binary: warm runs spawn nothing extra.
        usable: |_| {
            engine_bwrap::BwrapConfig::from_env()
                .is_ok_and(|config| engine_bwrap::probe_cached(&config).available)
        },
        probe: |p| p.probe(engine_detect::EngineName::Bwrap),
        open: Some(|o| Ok(bwrap(o)?)),
        sessions: Some(Sessions {
            open: |o| Ok(bwrap(o)?),
            local: |id| {
                let config = engine_bwrap::BwrapConfig::from_env().ok()?;
                engine_bwrap::local_session(&config, "bwrap", id)
            },
        }),
        reap: reap_bwrap,
    },
    Entry {
        name: "docker",
        in_auto: true,
        usable: |p| p.oci_usable(engine_detect::EngineName::Docker),
        probe: |p| p.probe(engine_detect::EngineName::Docker),
        open: Some(|o| Ok(oci(engine_oci::Flavor::Docker, o)?)),
        sessions: Some(Sessions {
            open: |o| Ok(oci(engine_oci::Flavor::Docker, o)?),
            local: |id| oci_local(engine_oci::Flavor::Docker, id),
        }),
        reap: |r| reap_oci(engine_oci::Flavor::Docker, r),
    },
    Entry {
        name: "podman",
        in_auto: true,
        usable: |p| p.oci_usable(engine_detect::EngineName::Podman),
        probe: |p| p.probe(engine_detect::EngineName::Podman),
        open: Some(|o| Ok(oci(engine_oci::Flavor::Podman, o)?)),
        sessions: Some(Sessions {
            open: |o| Ok(oci(engine_oci::Flavor::Podman, o)?),
            local: |id| oci_local(engine_oci::Flavor::Podman, id),
        }),
        reap: |r| reap_oci(engine_oci::Flavor::Podman, r),
    },
    Entry {
        name: "k8s",
        in_auto: false,
        usable: Probes::cluster_configured,
        probe: k8s_probe,
        // Runs sync the workspace in and out (`engine_k8s::workspace`).
        open: Some(|o| Ok(k8s(o)?)),
        sessions: Some(Sessions {
            open: |o| Ok(k8s(o)?),
            // A session's record is its pod: there is nothing on this host to open it from,
            // so every command on it goes through the API (one get).
            local: |_| None,
        }),
        reap: reap_k8s,
    },
];

/// bwrap, with the session records swept on the way (a read of one directory: cheap enough
/// for every command, and what ends a session whose agent was replaced by code that never
/// exits).
fn bwrap(options: &Options<'_>) -> Result<Box<engine_bwrap::BwrapEngine>> {
    let config = bwrap_config()?;
    if options.purpose != Purpose::Maintain {
        let _ = engine_bwrap::reap_sessions(&config, "bwrap", false);
    }
    Ok(Box::new(engine_bwrap::BwrapEngine::new(config).map_err(EngineError::new)?))
}

/// The configuration native and bwrap share, with the user config's LAN setting and cache cap.
fn bwrap_config() -> Result<engine_bwrap::BwrapConfig> {
    let mut config = engine_bwrap::BwrapConfig::from_env().map_err(EngineError::new)?;
    let user = crate::config::user()?;
    config.lan = user.lan;
    config.cache_max_bytes = cache_max_bytes(user);
    Ok(config)
}

/// The cache's size cap: the user config's `[cache] max-size`, else the engines' default.
pub(crate) fn cache_max_bytes(user: &crate::config::UserConfig) -> u64 {
    user.cache_max_size.unwrap_or(engine_bwrap::DEFAULT_CACHE_MAX_BYTES)
}

/// The cache of native and bwrap (their environments and packages), as last measured, and its
/// cap: what `detect` reports; none without a home to keep it in.
pub(crate) struct CacheReport {
    pub(crate) dir: std::path::PathBuf,
    pub(crate) bytes: u64,
    /// When it was measured, unix seconds.
    pub(crate) measured: u64,
    pub(crate) max_bytes: u64,
}

pub(crate) fn cache_report() -> Option<CacheReport> {
    let config = engine_bwrap::BwrapConfig::from_env().ok()?;
    let usage = engine_bwrap::cache_usage(&config.cache_dir, false).ok()?;
    let max_bytes =
        crate::config::user().map_or(engine_bwrap::DEFAULT_CACHE_MAX_BYTES, cache_max_bytes);
    Some(CacheReport { dir: usage.dir, bytes: usage.bytes, measured: usage.measured, max_bytes })
}

/// The `note:` of a net-on run or session on `engine` when its network is narrower than full
/// TCP/UDP (native or bwrap without pasta or a tun device it may open: HTTP(S) through the
/// built-in proxy).
pub(crate) fn net_note(engine: &str) -> Option<String> {
    let config = engine_bwrap::BwrapConfig::from_env().ok()?;
    matches!(engine, "native" | "bwrap").then(|| engine_native::net_note(&config))?
}

/// The native engine: bwrap's pipeline and configuration, the sandbox built in-process; its
/// session records swept on the way, as bwrap's are.
fn native(options: &Options<'_>) -> Result<Box<engine_native::NativeEngine>> {
    let config = bwrap_config()?;
    if options.purpose != Purpose::Maintain {
        let _ = engine_native::reap_sessions(&config, false);
    }
    Ok(Box::new(engine_native::NativeEngine::new(config).map_err(EngineError::new)?))
}

/// A sweep at most this often from commands on existing sessions (they are the interactive
/// hot path, and a session's own expiry does not depend on the sweep), and from starts on a
/// cluster.
const SESSION_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Pure: whether a sweep last recorded at `last` is older than the interval at `now`.
fn sweep_due(last: Option<std::time::SystemTime>, now: std::time::SystemTime) -> bool {
    last.and_then(|t| now.duration_since(t).ok()).is_none_or(|age| age >= SESSION_SWEEP_INTERVAL)
}

/// docker or podman, connected for `options.purpose` (sweeping on connect as it asks).
fn oci(flavor: engine_oci::Flavor, options: &Options<'_>) -> Result<Box<engine_oci::OciEngine>> {
    let mut config = engine_oci::OciConfig::from_env(flavor);
    config.lan = crate::config::user()?.lan;
    let mut stamp = None;
    match options.purpose {
        Purpose::Start => {
            let inline = options.script.and_then(|s| s.image.as_ref()).map(|i| i.value.as_str());
            if let Some(image) = options.image.or(inline) {
                config.image = image.to_owned();
            }
        }
        Purpose::Attach => {
            config.image = String::new();
            // The stamp lives in a directory checked to be the caller's and is touched
            // without following a link; a refused directory just means sweeping every time.
            let dir = reaper::PrivateDir::open(&config.cache_dir.join("oci")).ok();
            let name = format!("last-sweep-{}", flavor.as_str());
            let last = dir.as_ref().and_then(|d| d.modified(&name).ok().flatten());
            config.sweep_on_start = sweep_due(last, std::time::SystemTime::now());
            stamp = dir.filter(|_| config.sweep_on_start).map(|d| (d, name));
        }
        Purpose::Maintain => {
            config.image = String::new();
            config.sweep_on_start = false;
        }
    }
    let engine = engine_oci::OciEngine::new(config).map_err(EngineError::new)?;
    // Only what was still running is news (a script a killed CLI left behind); exited leftovers
    // are routine (a podman run hands its removal to the engine and returns).
    for swept in engine.swept() {
        if swept.removed && !swept.exited {
            ui::warn(&format!("removed leftover container {} ({})", swept.container, swept.reason));
        }
    }
    // Best effort: without the stamp the next command just sweeps again.
    if let Some((dir, name)) = stamp {
        let _ = dir.touch(&name);
    }
    Ok(Box::new(engine))
}

fn oci_local(flavor: engine_oci::Flavor, id: &str) -> Option<Box<dyn DynSession>> {
    let runtime_dir = engine_oci::OciConfig::from_env(flavor).runtime_dir;
    engine_oci::local_session(&runtime_dir, id, flavor)
}

/// Pure: the cluster settings, flags beating the user config's `[engine.k8s]` (at `path`)
/// beating the defaults, checked; and the kube context to use. A bad value names where it came
/// from: the flag, or the file's line and column.
fn k8s_config(
    file: &crate::config::K8sSettings,
    path: Option<&std::path::Path>,
    options: &Options<'_>,
) -> Result<(engine_k8s::SandboxConfig, Option<String>)> {
    let mut config = engine_k8s::SandboxConfig::default();
    let value = |key: &str| file.get(key).map(|s| s.value.clone());
    if let Some(v) = value("namespace") {
        config.namespace = v;
    }
    if let Some(v) = value("image") {
        config.image = v;
    }
    if let Some(v) = value("preview-domain") {
        config.preview_domain = v;
    }
    if let Some(v) = value("ingress-class") {
        config.ingress_class = Some(v);
    }
    if let Some(v) = value("runtime-class") {
        config.runtime_class = Some(v);
    }
    // Where a bad value came from: the file's line and column of it.
    let at = |key: &str, setting: &crate::config::Setting| {
        path.map_or_else(
            || format!("`{key}`"),
            |p| format!("{}:{}:{}: `{key}`", p.display(), setting.line, setting.col),
        )
    };
    // A key with a few spellings: an unknown one is refused at its place, with the choices.
    let choice = |key: &'static str, what: &'static str, hint: &'static str| {
        file.get(key).map(|setting| {
            (setting.value.as_str(), move || {
                ui::hinted(
                    format!("{}: unknown {what} `{}`", at(key, setting), setting.value),
                    hint,
                )
            })
        })
    };
    if let Some((value, bad)) = choice(
        "preview",
        "preview mode",
        "use `auto` (the Ingress URL, else a local port-forward), `ingress` or `port-forward`",
    ) {
        config.preview = engine_k8s::config::Preview::parse(value).ok_or_else(bad)?;
    }
    if let Some((value, bad)) = choice(
        "seccomp",
        "seccomp profile",
        "use `wall` (the project's wall, installed on each node by `deploy/seccomp/`) or `runtime-default`",
    ) {
        config.seccomp = engine_k8s::config::Seccomp::parse(value).ok_or_else(bad)?;
    }
    if let Some(setting) = file.get("sync-limit") {
        config.sync_limit = sandbox_core::parse_size(&setting.value).map_err(|e| {
            ui::hinted(
                format!("{}: {}", at("sync-limit", setting), first_line_of(&e.to_string())),
                "use a size such as `256MiB` or `1GiB`",
            )
        })?;
    }
    let inline = options.script.cloned().unwrap_or_default();
    if let Some(key) = &inline.image {
        config.image = key.value.clone();
    }
    if let Some(key) = &inline.runtime_class {
        config.runtime_class = Some(key.value.clone());
    }
    config.run_claims = options.claims.to_vec();
    let flags = [("namespace", options.namespace), ("image", options.image)];
    for (field, flag) in flags {
        if let Some(v) = flag {
            match field {
                "namespace" => config.namespace = v.to_owned(),
                _ => config.image = v.to_owned(),
            }
        }
    }
    match config.validate() {
        Ok(()) => Ok((config, value("context"))),
        Err(engine_k8s::Error::Config { field, message, hint }) => {
            let key = field.replace('_', "-");
            let from_flag = flags.iter().any(|(f, v)| *f == field && v.is_some());
            let from_script = inline.set().into_iter().find(|(name, _)| *name == key);
            let at = match (file.get(&key), path) {
                _ if from_flag => format!("--{key}"),
                _ if from_script.is_some() => {
                    from_script.map(|(_, k)| format!("{}: `{key}`", k.at)).unwrap_or_default()
                }
                (Some(setting), Some(path)) => {
                    format!("{}:{}:{}: `{key}`", path.display(), setting.line, setting.col)
                }
                _ => format!("`{key}`"),
            };
            Err(ui::hinted(format!("{at}: {message}"), hint))
        }
        Err(e) => Err(EngineError::new(e).into()),
    }
}

/// The cluster of the user config and flags (the kube config's context it names, else the
/// current one). Started for a session, it sweeps this user's expired pods first (one list
/// call: the cluster was asked for, so the call is no surprise).
fn k8s(options: &Options<'_>) -> Result<Box<engine_k8s::K8sEngine>> {
    let user = crate::config::user()?;
    let file = user.k8s.clone().unwrap_or_default();
    let (mut config, context) = k8s_config(&file, user.path.as_deref(), options)?;
    config.lan = user.lan;
    let engine = engine_k8s::K8sEngine::with_context(config, context.as_deref())
        .map_err(EngineError::new)?;
    // The sweep lists every managed pod and claim of the namespace: at most once a minute per
    // cluster and namespace, so a thousand runs do not each list a thousand pods.
    let stamp = engine.place_key().and_then(|key| {
        let dir =
            reaper::PrivateDir::open(&cache_base().join("python-sandbox")).ok()?.sub("k8s").ok()?;
        Some((dir, format!("last-sweep-{key}")))
    });
    let last = stamp.as_ref().and_then(|(dir, name)| dir.modified(name).ok().flatten());
    if options.purpose == Purpose::Start && sweep_due(last, std::time::SystemTime::now()) {
        if let Some((dir, name)) = &stamp {
            // Best effort: without the stamp the next start sweeps again.
            let _ = dir.touch(name);
        }
        for swept in engine.reap(false).map_err(EngineError::new)? {
            if swept.removed && !swept.exited {
                let what = if swept.kind == "environment" { "environment claim" } else { "pod" };
                ui::warn(&format!("removed leftover {what} {} ({})", swept.pod, swept.reason));
            }
        }
    }
    Ok(Box::new(engine))
}

/// `detect`'s k8s line: `not configured` without a word to the network unless the user config
/// has `[engine.k8s]` or `KUBECONFIG` is set; else what the cluster answers.
fn k8s_probe(probes: &Probes) -> engine_detect::Probe {
    use engine_detect::{EngineName, LimitSupport, Mechanism, Probe, ProbeState};
    let kubeconfig = std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty());
    if !probes.cluster_configured() && !kubeconfig {
        let file = crate::config::user()
            .ok()
            .and_then(|u| u.path.as_ref())
            .map_or_else(|| "the config file".to_owned(), |p| p.display().to_string());
        return Probe::new(
            EngineName::K8s,
            ProbeState::NotConfigured,
            format!("no `[engine.k8s]` in {file} and `KUBECONFIG` is unset"),
        );
    }
    let answered = k8s(&Options::maintain(None)).and_then(|engine| {
        let timeout = Duration::from_secs(10);
        let asked =
            engine_k8s::probe::readiness(engine.client(), &engine.config().namespace, timeout);
        Ok(sandbox_core::Executor::block_on(&*engine, asked).map_err(EngineError::new)?)
    });
    let (state, reason) = match answered.map(|r| r.verdict()) {
        Ok(Ok(reason)) => (ProbeState::Available { endpoint: None }, reason),
        Ok(Err(reason)) => (ProbeState::Failed, reason),
        Err(e) => (ProbeState::Failed, format!("{e:#}")),
    };
    let mut probe = Probe::new(EngineName::K8s, state, reason);
    if probe.available {
        // The pod's limits, which the node's container runtime enforces; no per-pod pid limit.
        let runtime = Some(Mechanism::ContainerRuntime);
        probe.limits = LimitSupport { memory: runtime, cpus: runtime, pids: None };
    }
    probe
}

/// `python-sandbox egress-proxy`: the k8s engine's egress proxy, until stopped.
pub(crate) fn egress_proxy(namespace: &str, listen: std::net::SocketAddr) -> Result<()> {
    Ok(engine_k8s::egress::serve(namespace, listen)?)
}

fn reap_k8s(request: &Reap) -> Result<Vec<Reaped>> {
    let engine = k8s(&Options::maintain(request.namespace.as_deref()))?;
    let swept = engine.reap(request.dry_run).map_err(EngineError::new)?;
    Ok(swept.into_iter().map(k8s_reaped).collect())
}

/// Pure: one item of a cluster's sweep as `reap` reports it: an environment claim as the
/// environment it is (as on every other engine), a pod as its sandbox (a warm-pool member's
/// kind `pool`).
fn k8s_reaped(swept: engine_k8s::Swept) -> Reaped {
    if swept.kind == "environment" {
        return Reaped::Environment {
            kind: "environment",
            name: swept.pod,
            reason: swept.reason,
            removed: swept.removed,
            error: swept.error,
        };
    }
    Reaped::Sandbox {
        name: swept.pod,
        sandbox: swept.sandbox,
        kind: swept.kind,
        reason: swept.reason,
        removed: swept.removed,
        error: swept.error,
    }
}

/// Whether a `--mount` value names a cluster volume claim (`pvc:NAME:/path[:ro]`), which only
/// the k8s engine mounts; every other value is a host path.
pub(crate) fn is_claim_mount(mount: &str) -> bool {
    engine_k8s::claims::is_claim(mount)
}

/// Pure: the volume claims of a run: the script's inline `mounts` entries that name one
/// (`inline`, located) and the `pvc:NAME:/path[:ro]` values among `flags` (`--mount`, the MCP
/// tool's `mounts`), parsed; refused on any engine but k8s (`auto` never picks a cluster),
/// where host paths are the only mounts. Precedence as for host mounts: the inline entries
/// first, then the flags, an entry replacing an earlier one for the same pod path in place.
pub(crate) fn claim_mounts(
    flags: &[String],
    inline: &[crate::spec::InlineKey],
    engine: &str,
) -> Result<Vec<engine_k8s::claims::ClaimMount>> {
    if engine != "k8s" {
        let only_k8s = |what: String| {
            ui::hinted(
                format!(
                    "{what}: a PersistentVolumeClaim is mounted only by the k8s engine (this run is on `{engine}`)"
                ),
                "run with `--engine k8s`, or mount a host path (`PATH[:ro]`; write `./pvc:…` for a path that starts with `pvc:`)",
            )
        };
        if let Some(first) = inline.first() {
            return Err(only_k8s(format!("{}: mount `{}`", first.at, first.value)));
        }
        if let Some(first) = flags.iter().find(|m| is_claim_mount(m)) {
            return Err(only_k8s(format!("--mount `{first}`")));
        }
        return Ok(Vec::new());
    }
    let mut out: Vec<engine_k8s::claims::ClaimMount> = Vec::new();
    let located = inline.iter().map(|key| {
        engine_k8s::claims::parse(&key.value).map_err(|e| match e {
            engine_k8s::Error::ClaimMount { value, message, hint } => {
                ui::hinted(format!("{}: mount `{value}`: {message}", key.at), hint)
            }
            other => EngineError::new(other).into(),
        })
    });
    let flagged = flags
        .iter()
        .filter(|m| is_claim_mount(m))
        .map(|m| engine_k8s::claims::parse(m).map_err(|e| EngineError::new(e).into()));
    for claim in located.chain(flagged) {
        let claim: engine_k8s::claims::ClaimMount = claim?;
        let target = claim.path.trim_end_matches('/').to_owned();
        match out.iter_mut().find(|c| c.path.trim_end_matches('/') == target) {
            Some(earlier) => *earlier = claim,
            None => out.push(claim),
        }
    }
    Ok(out)
}

/// The script keys (`[tool.python-sandbox]`'s `image`, `runtime-class`) each engine honours;
/// an engine not listed honours none. A table beside [`ENGINES`] rather than a field of it,
/// so an engine entry stays what it was.
const SCRIPT_KEYS: &[(&str, &[&str])] =
    &[("docker", &["image"]), ("podman", &["image"]), ("k8s", &["image", "runtime-class"])];

/// Pure: what becomes of the script's engine keys on `engine`. A key it cannot honour is
/// refused when dropping it would leave the sandbox weaker than the script asked
/// (`runtime-class`: a tightening, as a limit is), and a warning when it only changes what
/// the script finds inside (`image`).
pub(crate) fn script_keys(engine: &str, keys: &crate::spec::EngineKeys) -> Result<Vec<String>> {
    let honoured = SCRIPT_KEYS.iter().find(|(e, _)| *e == engine).map_or(&[][..], |(_, k)| *k);
    let by = |key: &str| {
        let names: Vec<&str> =
            SCRIPT_KEYS.iter().filter(|(_, k)| k.contains(&key)).map(|(e, _)| *e).collect();
        names.join(", ")
    };
    let mut warnings = Vec::new();
    for (key, at) in keys.set() {
        if honoured.contains(&key) {
            continue;
        }
        if key == "runtime-class" {
            return Err(ui::hinted(
                format!(
                    "{}: the {engine} engine cannot run the script under runtime class `{}`, so nothing was run",
                    at.at, at.value
                ),
                format!(
                    "choose an engine that can with `--engine` ({}), or remove `runtime-class` from the script",
                    by(key)
                ),
            ));
        }
        warnings.push(format!(
            "{}: the {engine} engine has no image, so the script's `image = \"{}\"` is not used (engines with images: {})",
            at.at,
            at.value,
            by(key)
        ));
    }
    Ok(warnings)
}

/// `--engine` values of `run`: `auto` and every engine's name (one without runs refuses with
/// a hint, rather than clap not knowing it).
pub(crate) fn choices() -> Vec<&'static str> {
    std::iter::once("auto").chain(ENGINES.iter().map(|e| e.name)).collect()
}

/// The engines that run scripts.
pub(crate) fn run_names() -> Vec<&'static str> {
    ENGINES.iter().filter(|e| e.open.is_some()).map(|e| e.name).collect()
}

/// The engines `auto` tries, in order.
pub(crate) fn ladder_names() -> Vec<&'static str> {
    ENGINES.iter().filter(|e| e.in_auto && e.open.is_some()).map(|e| e.name).collect()
}

/// `detect`'s line in `--help`: every engine, and the `auto` ladder.
pub(crate) fn detect_about() -> String {
    format!(
        "Report which isolation engines ({}) work here and which one `auto` picks: the first \
         that works of {} (exit 3 when none does)",
        names().join(", "),
        ladder_names().join(", ")
    )
}

/// `session`'s line in `--help`.
pub(crate) fn session_about() -> String {
    format!("Warm sandboxes that stay up between runs ({})", session_choices().join(", "))
}

/// `run --engine`'s help.
pub(crate) fn run_engine_help() -> String {
    let off: Vec<_> = names().into_iter().filter(|n| !ladder_names().contains(n)).collect();
    format!(
        "The isolation engine; `auto` takes the first that works of {} (never {})",
        ladder_names().join(", "),
        off.join(", ")
    )
}

/// `--engine` values of the session commands: the engines with sessions.
pub(crate) fn session_choices() -> Vec<&'static str> {
    ENGINES.iter().filter(|e| e.sessions.is_some()).map(|e| e.name).collect()
}

/// `--engine` values of `reap`: every engine.
pub(crate) fn names() -> Vec<&'static str> {
    ENGINES.iter().map(|e| e.name).collect()
}

fn entry(name: &str) -> Result<&'static Entry> {
    ENGINES.iter().find(|e| e.name == name).ok_or_else(|| {
        ui::hinted(
            format!("unknown engine `{name}`"),
            format!("choose one of {}", names().join(", ")),
        )
    })
}

/// `Ok(None)` for an engine that cannot sandbox here (its daemon does not answer).
fn available<T>(opened: Result<T>) -> Result<Option<T>> {
    match opened {
        Err(e) if crate::exit::class(&e) == Some(ErrorClass::Unavailable) => Ok(None),
        other => other.map(Some),
    }
}

/// The engine for `--engine choice` (`auto`: the first usable one of the ladder); `None` when
/// none can sandbox here. An engine that cannot (its daemon does not answer) counts as none.
pub(crate) fn select(choice: &str, options: &Options<'_>) -> Result<Option<Box<dyn DynEngine>>> {
    if choice == "auto" {
        let probes = Probes::default();
        let ladder = ENGINES.iter().filter(|e| e.in_auto).filter_map(|e| Some((e, e.open?)));
        return match ladder.into_iter().find(|(e, _)| (e.usable)(&probes)) {
            Some((_, open)) => available(open(options)),
            None => Ok(None),
        };
    }
    let entry = entry(choice)?;
    match entry.open {
        // A cluster that was named but does not answer says why (exit 3), as `session start`
        // does: the ladder's advice would be about other engines.
        Some(open) if !entry.in_auto => open(options).map(Some),
        Some(open) => available(open(options)),
        None => Err(no_runs(entry)),
    }
}

/// The refusal of `run --engine NAME` for an engine that has no runs.
fn no_runs(entry: &Entry) -> anyhow::Error {
    let name = entry.name;
    let hint = if entry.sessions.is_some() {
        format!(
            "start a session there and run the script in it: `python-sandbox session start --engine {name}`, then `python-sandbox session run ID SCRIPT`; or run on {}",
            run_names().join(", ")
        )
    } else {
        format!("choose one of {}", run_names().join(", "))
    };
    ui::hinted(format!("the {name} engine cannot `run` a script yet, so nothing was run"), hint)
}

/// The session engine for `session start --engine choice` (`None`: the first usable one with
/// sessions); `None` when none can hold a session here.
pub(crate) fn select_sessions(
    choice: Option<&str>,
    options: &Options<'_>,
) -> Result<Option<Box<dyn DynSessionEngine>>> {
    let entry = match choice {
        Some(name) => Some(entry(name)?),
        None => {
            let probes = Probes::default();
            session_ladder().find(|e| (e.usable)(&probes))
        }
    };
    let Some(entry) = entry else { return Ok(None) };
    match &entry.sessions {
        // A named engine that cannot start says why (its own error, exit 3), as `run` does
        // through `no_engine`'s table; `auto` just found none.
        Some(sessions) if choice.is_some() => (sessions.open)(options).map(Some),
        Some(sessions) => available((sessions.open)(options)),
        None => Err(ui::hinted(
            format!("the {} engine has no sessions", entry.name),
            format!("choose one of {}", session_choices().join(", ")),
        )),
    }
}

/// What `session start` without `--engine` tries, in order: the `auto` ladder's engines with
/// sessions (native first, as for runs).
fn session_ladder() -> impl Iterator<Item = &'static Entry> {
    ENGINES.iter().filter(|e| e.in_auto && e.sessions.is_some())
}

/// Whether a command looking through every engine (no `--engine`) consults `entry`: every
/// engine of the ladder, one off it (a cluster) only when `usable` (configured).
fn consulted(entry: &Entry, probes: &Probes) -> bool {
    entry.in_auto || (entry.usable)(probes)
}

/// The engines a command on existing sessions looks through: the one named, or every one
/// with sessions that is [`consulted`] (in ladder order).
fn session_entries(choice: Option<&str>, probes: &Probes) -> Result<Vec<&'static Entry>> {
    Ok(match choice {
        Some(name) => vec![entry(name)?],
        None => ENGINES.iter().filter(|e| e.sessions.is_some() && consulted(e, probes)).collect(),
    })
}

/// Which session, on which engine (`--engine`), and where on it (`--namespace`).
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub(crate) engine: Option<&'a str>,
    pub(crate) namespace: Option<&'a str>,
}

/// Runs `work` on session `id`: first opened from its host record when the engine can (no
/// connection, no API call), else through a connected engine. Only "no such session" moves
/// on (to the connected path, then the next engine), so nothing runs twice. Without
/// `--engine` no engine is probed first: a full detection costs more than a warm run.
pub(crate) fn with_session<T>(
    id: &str,
    target: Target<'_>,
    mut work: impl FnMut(&dyn DynSession) -> Result<T, EngineError>,
) -> Result<T> {
    let recorded = recorded(id, target);
    let target = recorded.as_ref().map_or(target, Recorded::target);
    let probes = Probes::default();
    let entries = session_entries(target.engine, &probes)?;
    let not_found =
        |r: &Result<T, EngineError>| matches!(r, Err(e) if e.class() == ErrorClass::NotFound);
    for entry in &entries {
        let Some(sessions) = &entry.sessions else { continue };
        if let Some(session) = (sessions.local)(id) {
            let result = work(&*session);
            if !not_found(&result) {
                return Ok(result?);
            }
        }
    }
    through_engines(id, target, &entries, |engine| work(&*engine.open_session_dyn(id)?))
}

/// `op` on each session engine of `entries`, connected, until one does not answer "no such
/// session".
fn through_engines<T>(
    id: &str,
    target: Target<'_>,
    entries: &[&'static Entry],
    mut op: impl FnMut(&dyn DynSessionEngine) -> Result<T, EngineError>,
) -> Result<T> {
    let mut unreachable = None;
    for entry in entries {
        let Some(sessions) = &entry.sessions else { continue };
        let engine = match (sessions.open)(&Options::attach(target.namespace)) {
            Ok(engine) => engine,
            Err(e) => {
                unreachable = Some(e);
                continue;
            }
        };
        match op(&*engine) {
            Err(e) if e.class() == ErrorClass::NotFound => {}
            other => return Ok(other?),
        }
    }
    Err(no_session(id, target.engine, unreachable))
}

/// The error when no engine has session `id`. An engine that answered "no such session" says
/// more than one this user cannot reach (a podman-only user has no docker socket), unless it
/// was the only one asked.
fn no_session(id: &str, choice: Option<&str>, unreachable: Option<anyhow::Error>) -> anyhow::Error {
    match unreachable {
        Some(e) if choice.is_some() => e,
        _ => ui::hinted(
            format!("no session `{id}`"),
            "`python-sandbox session list` shows the running sessions",
        ),
    }
}

/// Stops session `id` through its engine (which also releases what it kept on the host).
pub(crate) fn stop_session(id: &str, target: Target<'_>) -> Result<()> {
    let recorded = recorded(id, target);
    let target = recorded.as_ref().map_or(target, Recorded::target);
    let entries = session_entries(target.engine, &Probes::default())?;
    through_engines(id, target, &entries, |engine| engine.stop_session_dyn(id))?;
    if recorded.is_some()
        && let Some(dir) = session_records()
    {
        // Best effort: a stale record only names the engine that then says "no session".
        let _ = dir.remove(&record_name(id));
    }
    Ok(())
}

/// Where a session of an engine off the ladder (a cluster) started: kept on this host at
/// `session start`, so a command on its id goes straight to that engine and namespace, even
/// when no user config names the cluster (`consulted` would skip it) and with no call to any
/// other engine. Sessions of the ladder's engines need none: their own host records find them.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct Recorded {
    engine: String,
    namespace: Option<String>,
}

impl Recorded {
    fn target(&self) -> Target<'_> {
        Target { engine: Some(&self.engine), namespace: self.namespace.as_deref() }
    }
}

/// This user's directory of [`Recorded`] sessions (`<cache>/python-sandbox/sessions`, checked
/// to be the caller's); `None` where it cannot be had: commands then look as before.
fn session_records() -> Option<reaper::PrivateDir> {
    reaper::PrivateDir::open(&cache_base().join("python-sandbox")).ok()?.sub("sessions").ok()
}

/// Where this user's `python-sandbox` cache directory goes (`reaper::hostfs::cache_base`).
pub(crate) fn cache_base() -> std::path::PathBuf {
    let uid = rustix::process::geteuid().as_raw();
    reaper::hostfs::cache_base(&|n| std::env::var_os(n), std::path::Path::new("/tmp"), uid)
}

/// Pure: the record's file name of session `id`: its characters kept when they are a plain
/// name, so no id names another file.
fn record_name(id: &str) -> String {
    let safe = id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if safe && !id.is_empty() { format!("{id}.json") } else { String::from("-.json") }
}

/// Records where session `id` started, for an engine off the ladder (see [`Recorded`]).
pub(crate) fn record_session(id: &str, engine: &str, namespace: Option<&str>) {
    let off_ladder = ENGINES.iter().any(|e| e.name == engine && !e.in_auto);
    let name = record_name(id);
    if !off_ladder || name == "-.json" {
        return;
    }
    let record = Recorded { engine: engine.to_owned(), namespace: namespace.map(str::to_owned) };
    if let (Some(dir), Ok(bytes)) = (session_records(), serde_json::to_vec(&record)) {
        // Best effort: without it, commands on the id look through the configured engines.
        let _ = dir.replace(&name, &bytes);
    }
}

/// The record of session `id`, when the command names no engine (an explicit `--engine` wins).
fn recorded(id: &str, target: Target<'_>) -> Option<Recorded> {
    if target.engine.is_some() {
        return None;
    }
    let name = record_name(id);
    let bytes = session_records()?.read(&name).ok()??;
    let mut record: Recorded = serde_json::from_slice(&bytes).ok()?;
    if let Some(namespace) = target.namespace {
        record.namespace = Some(namespace.to_owned());
    }
    ENGINES.iter().any(|e| e.name == record.engine).then_some(record)
}

/// Every session of the engines asked (all usable ones by default: one of the ladder that
/// does not answer is skipped, a configured cluster that does not answer is warned about,
/// and one that was named is an error).
pub(crate) fn list_sessions(target: Target<'_>) -> Result<Vec<sandbox_core::SessionInfo>> {
    let probes = Probes::default();
    let mut all = Vec::new();
    for entry in session_entries(target.engine, &probes)? {
        let Some(sessions) = &entry.sessions else { continue };
        if target.engine.is_none() && !(entry.usable)(&probes) {
            continue;
        }
        let listed = (sessions.open)(&Options::attach(target.namespace))
            .and_then(|e| Ok(e.list_sessions_dyn()?));
        match listed {
            Ok(mut listed) => all.append(&mut listed),
            Err(e) if target.engine.is_some() => return Err(e),
            Err(e) if !entry.in_auto => ui::warn(&format!("{}: {}", entry.name, first_line(&e))),
            Err(_) => {}
        }
    }
    Ok(all)
}

fn first_line_of(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_owned()
}

fn first_line(e: &anyhow::Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_owned()
}

/// What `reap` asks of each engine.
pub(crate) struct Reap {
    pub(crate) dry_run: bool,
    /// Prepared environments unused for longer than this go.
    pub(crate) env_max_age: Duration,
    /// The cache's size cap (native and bwrap: their one cache).
    pub(crate) max_bytes: u64,
    /// `--namespace` (clusters).
    pub(crate) namespace: Option<String>,
}

/// One thing `reap` removed (or would have), as it reports it.
#[derive(Debug)]
pub(crate) enum Reaped {
    /// A sandbox (container, session) of a run that did not end, or an expired session.
    Sandbox {
        /// What the engine calls it (container name, session id).
        name: String,
        /// The sandbox id.
        sandbox: String,
        /// `run`, `session`, `prepare` or `pool` (an unclaimed warm-pool member).
        kind: String,
        reason: String,
        removed: bool,
        error: Option<String>,
    },
    /// A directory a root caller's run lent to the sandbox user (ACL and mode given back).
    Lent { path: String, restored: bool, error: Option<String> },
    /// A prepared environment, or (`kind` `package`) a package of the package cache.
    Environment {
        kind: &'static str,
        name: String,
        reason: String,
        removed: bool,
        error: Option<String>,
    },
}

/// The engines `reap` works on without `--engine`: every [`consulted`] one.
fn reap_entries(choice: Option<&str>, probes: &Probes) -> Result<Vec<&'static Entry>> {
    Ok(match choice {
        Some(name) => vec![entry(name)?],
        None => ENGINES.iter().filter(|e| consulted(e, probes)).collect(),
    })
}

/// The engines `reap` works on: the one named, or every one that is usable here; bwrap's
/// state is only files of ours, so it is always looked at.
pub(crate) fn reap(choice: Option<&str>, request: &Reap) -> Result<Vec<(&'static str, Reaped)>> {
    let probes = Probes::default();
    let mut out = Vec::new();
    for entry in reap_entries(choice, &probes)? {
        match (entry.reap)(request) {
            Ok(items) => out.extend(items.into_iter().map(|item| (entry.name, item))),
            Err(e) if choice.is_some() => return Err(e),
            // Not installed, not answering: nothing of ours can be there to reap, unless it
            // answers (then its error is news).
            Err(_) if !(entry.usable)(&probes) => {}
            Err(e) => ui::warn(&format!("{}: {}", entry.name, first_line(&e))),
        }
    }
    Ok(out)
}

/// What `reap` reports of the bwrap or native sessions the sweep ended.
fn reaped_sessions(ids: Vec<String>, dry_run: bool) -> Vec<Reaped> {
    ids.into_iter()
        .map(|id| Reaped::Sandbox {
            name: id.clone(),
            sandbox: id,
            kind: "session".to_owned(),
            reason: "expired, or its sandbox is gone".to_owned(),
            removed: !dry_run,
            error: None,
        })
        .collect()
}

/// Native sessions; its environments are the bwrap engine's (one store), pruned by that entry.
fn reap_native(request: &Reap) -> Result<Vec<Reaped>> {
    let config = engine_bwrap::BwrapConfig::from_env().map_err(EngineError::new)?;
    let ids = engine_native::reap_sessions(&config, request.dry_run).map_err(EngineError::new)?;
    Ok(reaped_sessions(ids, request.dry_run))
}

fn reap_bwrap(request: &Reap) -> Result<Vec<Reaped>> {
    let config = engine_bwrap::BwrapConfig::from_env().map_err(EngineError::new)?;
    let ids =
        engine_bwrap::reap_sessions(&config, "bwrap", request.dry_run).map_err(EngineError::new)?;
    let mut out = reaped_sessions(ids, request.dry_run);
    let pruned = engine_bwrap::prune_envs(
        &config.cache_dir,
        request.env_max_age,
        Some(request.max_bytes),
        request.dry_run,
    )
    .map_err(EngineError::new)?;
    out.extend(pruned.into_iter().map(|env| Reaped::Environment {
        kind: env.kind,
        name: env.dir.display().to_string(),
        reason: env.reason,
        removed: env.removed,
        error: env.error,
    }));
    Ok(out)
}

fn reap_oci(flavor: engine_oci::Flavor, request: &Reap) -> Result<Vec<Reaped>> {
    let engine = oci(flavor, &Options::maintain(None))?;
    let mut out = Vec::new();
    for swept in engine.reap(request.dry_run).map_err(EngineError::new)? {
        out.push(Reaped::Sandbox {
            name: swept.container,
            sandbox: swept.sandbox,
            kind: swept.kind,
            reason: swept.reason,
            removed: swept.removed,
            error: swept.error,
        });
    }
    for left in engine.reap_grants(request.dry_run).map_err(EngineError::new)? {
        out.push(Reaped::Lent {
            path: left.path.display().to_string(),
            restored: left.restored,
            error: left.error,
        });
    }
    let pruned = engine.prune_envs(request.env_max_age, request.dry_run);
    for pruned in pruned.map_err(EngineError::new)? {
        out.push(Reaped::Environment {
            kind: "environment",
            name: pruned.volume,
            reason: pruned.reason,
            removed: pruned.removed,
            error: pruned.error,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without `[cache] max-size` the engines' default cap holds.
    #[test]
    fn the_cache_cap_defaults_to_the_engines() {
        assert_eq!(
            cache_max_bytes(&crate::config::UserConfig::default()),
            engine_bwrap::DEFAULT_CACHE_MAX_BYTES
        );
    }

    /// A session id names its record's file and nothing else.
    #[test]
    fn a_record_name_is_a_plain_file_name() {
        assert_eq!(record_name("a1b2c3d4e5f6"), "a1b2c3d4e5f6.json");
        for odd in ["", "../config", "a/b", ".hidden", "x y"] {
            assert_eq!(record_name(odd), "-.json", "{odd:?}");
        }
    }

    /// A cluster's environment claims are reported as environments (`"environment": NAME`,
    /// as other engines report theirs), its pool members as `pool` sandboxes.
    #[test]
    fn a_clusters_sweep_names_environments_and_pool_members() {
        let swept = |pod: &str, kind: &str| engine_k8s::Swept {
            pod: pod.to_owned(),
            sandbox: pod.trim_start_matches("psbx-").to_owned(),
            kind: kind.to_owned(),
            reason: "expired".to_owned(),
            removed: false,
            exited: false,
            error: None,
        };
        let env = k8s_reaped(swept("psbx-env-0a1b", "environment"));
        assert!(
            matches!(&env, Reaped::Environment { name, .. } if name == "psbx-env-0a1b"),
            "{env:?}"
        );
        let member = k8s_reaped(swept("psbx-ab12", "pool"));
        assert!(
            matches!(&member, Reaped::Sandbox { kind, sandbox, .. } if kind == "pool" && sandbox == "ab12"),
            "{member:?}"
        );
    }

    #[test]
    fn names_are_unique_and_choices_follow_the_ladder() {
        let names = names();
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        assert_eq!(choices()[0], "auto");
        assert_eq!(&choices()[1..], &names[..]);
        assert!(session_choices().iter().all(|n| names.contains(n)));
    }

    /// An error with its hint, as the user sees it.
    fn shown(err: &anyhow::Error) -> String {
        let hint = err.downcast_ref::<ui::Hinted>().map(|h| h.hint.clone()).unwrap_or_default();
        format!("{err}\nhint: {hint}")
    }

    fn names_of(entries: &[&Entry]) -> Vec<&'static str> {
        entries.iter().map(|e| e.name).collect()
    }

    #[test]
    fn a_cluster_is_consulted_only_when_named_or_configured() {
        // No config, no `--engine`: the cluster is not among what is opened, so no command
        // looking through every engine can make a network call to it.
        let laptop = Probes::with_cluster(false);
        assert_eq!(
            names_of(&session_entries(None, &laptop).unwrap()),
            ["native", "bwrap", "docker", "podman"]
        );
        assert_eq!(
            names_of(&reap_entries(None, &laptop).unwrap()),
            ["native", "bwrap", "docker", "podman"]
        );
        assert_eq!(names_of(&session_entries(Some("k8s"), &laptop).unwrap()), ["k8s"]);
        assert_eq!(names_of(&reap_entries(Some("k8s"), &laptop).unwrap()), ["k8s"]);
        let configured = Probes::with_cluster(true);
        assert_eq!(names_of(&session_entries(None, &configured).unwrap()).last(), Some(&"k8s"));
        assert_eq!(names_of(&reap_entries(None, &configured).unwrap()).last(), Some(&"k8s"));
        // `auto` never picks it, configured or not.
        assert!(ENGINES.iter().filter(|e| e.in_auto).all(|e| e.name != "k8s"));
        assert!(run_names().contains(&"k8s"), "runs on k8s sync the workspace");
        assert!(session_choices().contains(&"k8s"));
    }

    fn setting(value: &str, line: usize, col: usize) -> Option<crate::config::Setting> {
        Some(crate::config::Setting { value: value.to_owned(), line, col })
    }

    #[test]
    fn cluster_settings_are_flags_then_the_file_then_the_defaults() {
        let path = std::path::Path::new("/home/u/.config/python-sandbox/config.toml");
        let none = Options {
            image: None,
            namespace: None,
            script: None,
            purpose: Purpose::Start,
            claims: &[],
        };
        let (config, context) =
            k8s_config(&crate::config::K8sSettings::default(), Some(path), &none).unwrap();
        assert_eq!(config, engine_k8s::SandboxConfig::default());
        assert_eq!(context, None);

        let file = crate::config::K8sSettings {
            namespace: setting("team-a", 2, 13),
            image: setting("registry.example/psbx:1", 3, 9),
            runtime_class: setting("gvisor", 4, 17),
            ingress_class: setting("traefik", 5, 17),
            preview_domain: setting("preview.example.com", 6, 18),
            preview: setting("port-forward", 8, 11),
            context: setting("kind-psbx", 7, 11),
            sync_limit: setting("64MiB", 9, 14),
            seccomp: setting("wall", 10, 11),
        };
        let (config, context) = k8s_config(&file, Some(path), &none).unwrap();
        assert_eq!(
            (config.namespace.as_str(), config.image.as_str(), config.runtime_class.as_deref()),
            ("team-a", "registry.example/psbx:1", Some("gvisor"))
        );
        assert_eq!(config.ingress_class.as_deref(), Some("traefik"));
        assert_eq!(config.preview_domain, "preview.example.com");
        assert_eq!(context.as_deref(), Some("kind-psbx"));
        assert_eq!(config.preview, engine_k8s::Preview::PortForward);
        assert_eq!(config.sync_limit, 64 << 20);
        assert_eq!(config.seccomp, engine_k8s::config::Seccomp::Wall);

        let flags = Options { image: Some("mine:2"), namespace: Some("team-b"), ..none };
        let (config, _) = k8s_config(&file, Some(path), &flags).unwrap();
        assert_eq!((config.namespace.as_str(), config.image.as_str()), ("team-b", "mine:2"));

        // A bad value names where it came from.
        let bad_file =
            crate::config::K8sSettings { namespace: setting("Team_A", 2, 13), ..file.clone() };
        let err = k8s_config(&bad_file, Some(path), &none).unwrap_err();
        insta::assert_snapshot!(shown(&err), @r"
        /home/u/.config/python-sandbox/config.toml:2:13: `namespace`: `Team_A` is not a DNS label
        hint: use at most 63 lower-case letters, digits and `-`, starting and ending with a letter or digit
        ");
        let bad_preview =
            crate::config::K8sSettings { preview: setting("sometimes", 8, 11), ..file.clone() };
        let err = k8s_config(&bad_preview, Some(path), &none).unwrap_err();
        insta::assert_snapshot!(shown(&err), @r"
        /home/u/.config/python-sandbox/config.toml:8:11: `preview`: unknown preview mode `sometimes`
        hint: use `auto` (the Ingress URL, else a local port-forward), `ingress` or `port-forward`
        ");
        let bad_seccomp =
            crate::config::K8sSettings { seccomp: setting("unconfined", 10, 11), ..file.clone() };
        let err = k8s_config(&bad_seccomp, Some(path), &none).unwrap_err();
        insta::assert_snapshot!(shown(&err), @r"
        /home/u/.config/python-sandbox/config.toml:10:11: `seccomp`: unknown seccomp profile `unconfined`
        hint: use `wall` (the project's wall, installed on each node by `deploy/seccomp/`) or `runtime-default`
        ");
        let bad_flag = Options { namespace: Some("Team_B"), ..none };
        let err =
            k8s_config(&crate::config::K8sSettings::default(), Some(path), &bad_flag).unwrap_err();
        insta::assert_snapshot!(shown(&err), @r"
        --namespace: `Team_B` is not a DNS label
        hint: use at most 63 lower-case letters, digits and `-`, starting and ending with a letter or digit
        ");
    }

    fn inline(value: &str, at: &str) -> Option<crate::spec::InlineKey> {
        Some(crate::spec::InlineKey { value: value.to_owned(), at: at.to_owned() })
    }

    /// flags > the script's inline table > the user config > the defaults, and a bad inline
    /// value names the script's line and column.
    #[test]
    fn the_scripts_engine_keys_sit_between_the_flags_and_the_user_config() {
        let path = std::path::Path::new("/home/u/.config/python-sandbox/config.toml");
        let file = crate::config::K8sSettings {
            image: setting("registry.example/psbx:1", 3, 9),
            runtime_class: setting("kata", 4, 17),
            ..crate::config::K8sSettings::default()
        };
        let keys = crate::spec::EngineKeys {
            image: inline("registry.example/numpy:2", "s.py:5:11"),
            runtime_class: inline("gvisor", "s.py:6:19"),
            claims: Vec::new(),
        };
        let none = Options {
            image: None,
            namespace: None,
            script: None,
            purpose: Purpose::Start,
            claims: &[],
        };
        let (config, _) = k8s_config(&file, Some(path), &none).unwrap();
        assert_eq!(
            (config.image.as_str(), config.runtime_class.as_deref()),
            ("registry.example/psbx:1", Some("kata"))
        );
        let script = Options { script: Some(&keys), ..none };
        let (config, _) = k8s_config(&file, Some(path), &script).unwrap();
        assert_eq!(
            (config.image.as_str(), config.runtime_class.as_deref()),
            ("registry.example/numpy:2", Some("gvisor"))
        );
        let flag = Options { image: Some("mine:3"), ..script };
        let (config, _) = k8s_config(&file, Some(path), &flag).unwrap();
        assert_eq!(
            (config.image.as_str(), config.runtime_class.as_deref()),
            ("mine:3", Some("gvisor"))
        );
        // Without a file the defaults are below the script.
        let (config, _) =
            k8s_config(&crate::config::K8sSettings::default(), None, &script).unwrap();
        assert_eq!(config.image, "registry.example/numpy:2");

        // A value pep723-meta let through that the engine refuses still names the script.
        let long = crate::spec::EngineKeys {
            runtime_class: inline(&"a".repeat(254), "s.py:6:19"),
            ..keys
        };
        let err =
            k8s_config(&file, Some(path), &Options { script: Some(&long), ..none }).unwrap_err();
        assert!(shown(&err).starts_with("s.py:6:19: `runtime-class`: "), "{}", shown(&err));
    }

    /// The script's claim mounts and the flags' resolve as host mounts do (inline first, a
    /// flag replacing an entry for the same pod path in place) and reach the k8s engine's
    /// config (whose run tests take them into the run pod); off k8s the inline entry is
    /// refused at its line and column, with a hint; a bad inline claim names its line too.
    #[test]
    fn inline_and_flag_claims_resolve_by_precedence_and_are_refused_off_k8s() {
        let key = |value: &str, at: &str| crate::spec::InlineKey {
            value: value.to_owned(),
            at: at.to_owned(),
        };
        let inline = [
            key("pvc:psbx-data-a:/data", "s.py:3:13"),
            key("pvc:psbx-data-b:/models:ro", "s.py:3:38"),
        ];
        let flags = ["pvc:psbx-data-c:/data/:ro".to_owned(), "./host".to_owned()];
        let claims = claim_mounts(&flags, &inline, "k8s").unwrap();
        let shown_claims: Vec<String> = claims
            .iter()
            .map(|c| format!("{} at {} ro={}", c.claim, c.path, c.read_only))
            .collect();
        assert_eq!(
            shown_claims,
            ["psbx-data-c at /data ro=true", "psbx-data-b at /models ro=true"],
            "the flag replaces the inline entry for /data in place"
        );
        assert_eq!(claim_mounts(&[], &inline, "k8s").unwrap().len(), 2);
        assert_eq!(claim_mounts(&flags[1..], &[], "docker").unwrap(), Vec::new(), "host paths");

        let options = Options {
            image: None,
            namespace: None,
            script: None,
            purpose: Purpose::Start,
            claims: &claims,
        };
        let (config, _) =
            k8s_config(&crate::config::K8sSettings::default(), None, &options).unwrap();
        assert_eq!(config.run_claims, claims);

        let err = claim_mounts(&flags, &inline, "docker").unwrap_err();
        insta::assert_snapshot!(shown(&err), @r"
        s.py:3:13: mount `pvc:psbx-data-a:/data`: a PersistentVolumeClaim is mounted only by the k8s engine (this run is on `docker`)
        hint: run with `--engine k8s`, or mount a host path (`PATH[:ro]`; write `./pvc:…` for a path that starts with `pvc:`)
        ");
        let bad = [key("pvc:shared:/data", "s.py:4:13")];
        let err = claim_mounts(&[], &bad, "k8s").unwrap_err();
        assert!(
            shown(&err).starts_with("s.py:4:13: mount `pvc:shared:/data`: claim `shared` is not one meant for sandboxes\nhint: "),
            "{}",
            shown(&err)
        );
    }

    /// What each engine does with a script key it cannot honour: `runtime-class` refused,
    /// `image` a warning; the engines that honour one say nothing.
    #[test]
    fn a_script_key_an_engine_cannot_honour_is_refused_or_warned_about() {
        let keys = crate::spec::EngineKeys {
            image: inline("registry.example/numpy:2", "s.py:5:11"),
            runtime_class: inline("gvisor", "s.py:6:19"),
            claims: Vec::new(),
        };
        assert_eq!(script_keys("k8s", &keys).unwrap(), Vec::<String>::new());
        let err = script_keys("docker", &keys).unwrap_err();
        insta::assert_snapshot!(shown(&err), @r#"
        s.py:6:19: the docker engine cannot run the script under runtime class `gvisor`, so nothing was run
        hint: choose an engine that can with `--engine` (k8s), or remove `runtime-class` from the script
        "#);
        let image_only = crate::spec::EngineKeys { runtime_class: None, ..keys.clone() };
        assert_eq!(script_keys("podman", &image_only).unwrap(), Vec::<String>::new());
        insta::assert_snapshot!(script_keys("bwrap", &image_only).unwrap().join("\n"), @r#"
        s.py:5:11: the bwrap engine has no image, so the script's `image = "registry.example/numpy:2"` is not used (engines with images: docker, podman, k8s)
        "#);
        let err = script_keys("bwrap", &keys).unwrap_err();
        insta::assert_snapshot!(shown(&err), @r#"
        s.py:6:19: the bwrap engine cannot run the script under runtime class `gvisor`, so nothing was run
        hint: choose an engine that can with `--engine` (k8s), or remove `runtime-class` from the script
        "#);
        assert_eq!(
            script_keys("bwrap", &crate::spec::EngineKeys::default()).unwrap(),
            Vec::<String>::new()
        );
        // Every engine named in the table exists.
        assert!(SCRIPT_KEYS.iter().all(|(e, _)| names().contains(e)));
    }

    #[test]
    fn session_start_on_auto_walks_the_run_ladder() {
        let ladder: Vec<&Entry> = session_ladder().collect();
        assert_eq!(names_of(&ladder), ["native", "bwrap", "docker", "podman"]);
        let runs: Vec<&str> =
            ENGINES.iter().filter(|e| e.in_auto && e.open.is_some()).map(|e| e.name).collect();
        assert_eq!(names_of(&ladder), runs, "sessions try the engines in the order runs do");
    }

    #[test]
    fn session_sweeps_are_throttled() {
        let now = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert!(sweep_due(None, now), "never swept");
        assert!(!sweep_due(Some(now - Duration::from_secs(5)), now));
        assert!(sweep_due(Some(now - SESSION_SWEEP_INTERVAL), now));
        assert!(sweep_due(Some(now - Duration::from_secs(3600)), now));
        assert!(sweep_due(Some(now + Duration::from_secs(5)), now), "a stamp from the future");
    }
}
