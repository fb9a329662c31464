//! [`OciEngine`]: configuration, connection, the prepare phase (dependencies installed with
//! network into a content-keyed volume by a prepare container) and the run phase (a hardened
//! container mounts that volume read-only and runs the script).

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bollard::Docker;
use bollard::models::VolumeCreateRequest;
use sandbox_core::{Engine, Net, Output, RunIo, RunOutcome, RunSpec};
use sha2::{Digest, Sha256};

use crate::client::{self, Connection, Flavor};
use crate::container::{self, Signals, Sink};
use crate::envs::{self, Lease, PrunedEnv};
use crate::error::api;
use crate::error::{Error, Result};
use crate::host::{self, HostFacts};
use crate::plan::{self, Limits, PrepareLayout, RunLayout};
use crate::sweep::{self, Swept};
use crate::workspace;

/// The image every container runs unless `--image` says otherwise.
pub const DEFAULT_IMAGE: &str = "python-sandbox-runtime:latest";
/// The image layout this engine expects (label `io.python-sandbox.image-abi`, set by
/// deploy/image/Containerfile): 2 has the empty venv at `/opt/python-sandbox/env` and no `UV_*`
/// in its config; 3 adds the execute-only `/usr/bin/tini` every container starts as pid 1
/// (`plan::INIT`); 4 carries its CA bundle at the contract's path too
/// (`sandbox_core::SANDBOX_CA_BUNDLE`), where a pod, which cannot see the host's, finds it.
/// An image without it is refused before anything runs, with how to rebuild.
pub const IMAGE_ABI: u32 = 4;
/// Bumped whenever the layout of a prepared environment volume changes.
const ENV_FORMAT: &str = "python-sandbox-oci-env-v1";
/// Runs get an `expires` label this long after their timeout, for the sweep.
const EXPIRY_GRACE_SECS: u64 = 300;

/// How to build an [`OciEngine`]. No `Default`: [`OciConfig::from_env`] is the usual start.
#[derive(Debug, Clone, PartialEq)]
pub struct OciConfig {
    /// Docker or Podman.
    pub flavor: Flavor,
    /// The runtime image; empty for an engine that only lists and removes (no image check).
    pub image: String,
    /// python-sandbox's cache root; this engine keeps lock files under `oci/`.
    pub cache_dir: PathBuf,
    /// Where a private podman API socket goes (never mounted into a sandbox).
    pub runtime_dir: PathBuf,
    /// The caller's home (a workspace may not expose all of it).
    pub home: Option<PathBuf>,
    /// `PATH`, to find `podman`.
    pub path: Option<OsString>,
    /// While a script runs, turn SIGINT/SIGTERM/SIGHUP into "kill and remove the container".
    pub handle_signals: bool,
    /// Sweep expired and orphaned containers when the engine is created (and, at most once a
    /// day, prune environments unused for [`OciConfig::env_max_age`]).
    pub sweep_on_start: bool,
    /// Environment volumes unused for this long go in the daily automatic prune.
    pub env_max_age: Duration,
    /// Whether net-on containers may reach private ranges (the user's LAN; the host's own
    /// addresses never): off unless the user config says `[net] lan = true`.
    pub lan: sandbox_core::Lan,
}

impl OciConfig {
    /// Image [`DEFAULT_IMAGE`], cache from `XDG_CACHE_HOME` or `~/.cache`
    /// (else `XDG_RUNTIME_DIR`, else a `/tmp` directory used only if it is the caller's own),
    /// runtime dir from `XDG_RUNTIME_DIR` (else under the cache), signals handled, sweep on.
    pub fn from_env(flavor: Flavor) -> OciConfig {
        // The real path: `..` or a link in HOME must not hide it from the workspace check.
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .map(|h| h.canonicalize().unwrap_or(h));
        // Without HOME (cron, systemd units) this may name a shared directory: every file the
        // engine writes there goes through `reaper::PrivateDir`, which refuses a foreign one.
        let cache_base = reaper::hostfs::cache_base(
            &|name| std::env::var_os(name),
            &std::env::temp_dir(),
            rustix::process::geteuid().as_raw(),
        );
        let cache_dir = cache_base.join("python-sandbox");
        let runtime_dir = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .map(|p| p.join("python-sandbox"))
            .unwrap_or_else(|| cache_dir.join("oci").join("run"));
        OciConfig {
            flavor,
            image: DEFAULT_IMAGE.to_owned(),
            cache_dir,
            runtime_dir,
            home,
            path: std::env::var_os("PATH"),
            handle_signals: true,
            sweep_on_start: true,
            env_max_age: envs::DEFAULT_ENV_MAX_AGE,
            lan: sandbox_core::Lan::Refused,
        }
    }
}

/// A prepared environment: what [`OciEngine::run_prepared`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedEnv {
    /// The environment volume, or `None` when the script has no dependencies (the image's
    /// interpreter runs it directly).
    pub volume: Option<String>,
    /// False when an existing environment was reused (the warm path).
    pub fresh: bool,
    /// The hold on the environment's lock that keeps the pruner away until the run's container
    /// references the volume.
    pub(crate) lease: Lease,
}

/// Runs PEP 723 scripts in Docker or Podman containers.
pub struct OciEngine {
    config: OciConfig,
    connection: Connection,
    docker: Docker,
    rt: Option<tokio::runtime::Runtime>,
    host: HostFacts,
    owner: reaper::Owner,
    /// Signs what this engine creates; the sweep removes only what it verifies.
    mark: reaper::MarkKey,
    image_id: String,
    swept: Vec<Swept>,
    /// The `seccomp=` security option of every container (see [`OciEngine::seccomp_profile`]).
    seccomp: String,
    /// Rootless podman: containers keep the caller's uid, limits it cannot hold are dropped.
    rootless: Option<plan::Rootless>,
}

impl std::fmt::Debug for OciEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OciEngine")
            .field("config", &self.config)
            .field("connection", &self.connection)
            .field("image_id", &self.image_id)
            .finish_non_exhaustive()
    }
}

impl Drop for OciEngine {
    fn drop(&mut self) {
        // A blocking read of our stdin (fed to a container) may still be pending; do not wait.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A short random id: hash of the clock, the pid and a counter (no RNG dependency needed;
/// uniqueness, not secrecy, is what matters).
pub(crate) fn random_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = Sha256::new();
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    hasher.update(nanos.to_le_bytes());
    hasher.update(std::process::id().to_le_bytes());
    hasher.update(COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    hex(&hasher.finalize())[..12].to_owned()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Pure: the volume name of the environment for these inputs (dependencies order-insensitive)
/// and this user's `mark` key. Keyed by the user's secret, so another user of the same daemon
/// can neither predict the name nor squat it with an environment of their own making; reuse
/// also checks each volume's mark ([`volume_is_ours`]).
pub(crate) fn env_volume_name(
    mark: &reaper::MarkKey,
    image_id: &str,
    requires_python: Option<&str>,
    deps: &[String],
) -> String {
    let content = env_content_key(image_id, requires_python, deps);
    format!("python-sandbox-env-{}", &mark.mark("env", &content)[..24])
}

/// Pure: the content key of an environment, the same for every user.
fn env_content_key(image_id: &str, requires_python: Option<&str>, deps: &[String]) -> String {
    let mut deps: Vec<&str> = deps.iter().map(|d| d.trim()).collect();
    deps.sort_unstable();
    deps.dedup();
    let mut hasher = Sha256::new();
    for part in [ENV_FORMAT, image_id, requires_python.unwrap_or("")] {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    for dep in deps {
        hasher.update(dep.as_bytes());
        hasher.update(b"\n");
    }
    hex(&hasher.finalize())
}

impl OciEngine {
    /// Connects (starting a private podman service if needed), checks the image, and sweeps
    /// expired and orphaned containers.
    pub fn new(config: OciConfig) -> Result<OciEngine> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(Error::io("starting the async runtime"))?;
        let connection = client::find_endpoint(
            config.flavor,
            &|name| std::env::var_os(name),
            &config.runtime_dir,
            config.path.as_deref(),
        )?;
        let docker = {
            let _enter = rt.enter();
            client::client(&connection)?
        };
        let owner = reaper::Owner::current(None)?;
        let mark = mark_key(&config.cache_dir)?;
        let engine_name = config.flavor.as_str();
        // An empty image is for callers that never create containers (`reap`, `session list`).
        let image_id = if config.image.is_empty() {
            String::new()
        } else {
            rt.block_on(image_id(&docker, engine_name, &config.image))?
        };
        let swept = if config.sweep_on_start {
            let swept = rt.block_on(sweep::sweep(&docker, &connection, &mark, now_secs(), false));
            rt.block_on(crate::idmap::sweep(&docker, &config.cache_dir));
            rt.block_on(envs::auto_prune(
                &docker,
                &connection,
                &mark,
                &config.cache_dir,
                now_secs(),
                config.env_max_age,
            ));
            swept.unwrap_or_default()
        } else {
            Vec::new()
        };
        let seccomp = seccomp_option(config.flavor, &config.cache_dir)?;
        let rootless = match config.flavor {
            Flavor::Docker => None,
            // What a rootless server can then enforce is the plan's concern.
            Flavor::Podman => client::rootless(&connection.endpoint)
                .then(|| plan::Rootless { cgroup_limits: engine_detect::rootless_cgroup_limits() }),
        };
        let engine = OciEngine {
            seccomp,
            rootless,
            config,
            connection,
            docker,
            rt: Some(rt),
            host: HostFacts::gather(),
            owner,
            mark,
            image_id,
            swept,
        };
        if engine.config.sweep_on_start {
            // Best effort, like the sweep: `reap` reports what this could not do.
            let _ = engine.reap_grants(false);
        }
        Ok(engine)
    }

    fn rt(&self) -> &tokio::runtime::Runtime {
        // Only `Drop` takes it.
        self.rt.as_ref().unwrap_or_else(|| unreachable!("runtime used after drop"))
    }

    /// Adapts a plan to this engine: its seccomp profile, and for rootless podman the user
    /// mapping and the limits it can hold. The warning says which limits were dropped.
    pub(crate) fn adapt(&self, container: &mut plan::ContainerPlan) -> Option<String> {
        container.seccomp = Some(self.seccomp.clone());
        self.rootless.and_then(|engine| plan::rootless(container, engine))
    }

    /// Held around each container create on rootless podman: its API service reads the
    /// user's subordinate ids through libsubid for every `keep-id` create, which is not
    /// thread-safe (podman 4.3 has died with SIGSEGV in `subid_get_uid_ranges` under concurrent
    /// creates, failing every run after it), so this user's creates go one at a time. A lock
    /// file in the runtime directory, so parallel CLI processes serialize too; `None` elsewhere
    /// (and where the lock cannot be taken: the create then just is not serialized).
    pub(crate) fn create_lock(&self) -> Option<std::fs::File> {
        self.rootless?;
        let dir = reaper::PrivateDir::open(&self.config.runtime_dir.join("oci")).ok()?;
        reaper::lock_in(&dir, "podman-create.lock", reaper::LockMode::Exclusive).ok().flatten()
    }

    /// Whether the engine is rootless podman (`keep-id`, see [`plan::Rootless`]).
    pub fn rootless(&self) -> Option<plan::Rootless> {
        self.rootless
    }

    /// What follows `seccomp=` in every container's security options, runs and sessions alike:
    /// the wall on the engine's base profile (`seccomp.rs`), as a file path for podman (its
    /// service reads it on this host) and as the profile itself for docker (its API takes the
    /// JSON, and its default profile is not on disk to start from).
    pub fn seccomp_profile(&self) -> &str {
        &self.seccomp
    }

    /// The key that signs this user's containers and volumes.
    pub(crate) fn mark(&self) -> &reaper::MarkKey {
        &self.mark
    }

    /// The engine's configuration.
    pub fn config(&self) -> &OciConfig {
        &self.config
    }

    /// Where the API answered.
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// The network wall of `container` (with the network on): the LAN as the user config
    /// says, its gateway's replies let out when it publishes ports.
    pub(crate) fn wall(&self, container: &crate::plan::ContainerPlan) -> crate::netwall::Wall {
        crate::netwall::Wall { lan: self.config.lan, inbound: !container.publish.is_empty() }
    }

    /// What the start-up sweep removed.
    pub fn swept(&self) -> &[Swept] {
        &self.swept
    }

    /// The bollard client (for sessions and tests); use it inside [`OciEngine::block_on`].
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// Runs a future on the engine's runtime.
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.rt().block_on(future)
    }

    pub(crate) fn engine_name(&self) -> &'static str {
        self.config.flavor.as_str()
    }

    /// Runs the reaper now: one list call, decide, remove (or only report with `dry_run`).
    pub fn reap(&self, dry_run: bool) -> Result<Vec<Swept>> {
        self.block_on(sweep::sweep(&self.docker, &self.connection, &self.mark, now_secs(), dry_run))
    }

    /// Gives back the directories that runs killed with -9 and expired sessions of this engine
    /// left lent to the sandbox user (see `crate::workspace`), or with `dry_run` only lists
    /// them. Holds of the other engine's sessions are left to it. One container list call, and
    /// only when a session holds a grant.
    pub fn reap_grants(&self, dry_run: bool) -> Result<Vec<reaper::acl::Leftover>> {
        let state = reaper::acl::state_dir(&self.config.cache_dir);
        let prefix = crate::workspace::holder(self.engine_name(), "");
        let live = std::cell::OnceCell::new();
        let alive = |holder: &str| {
            let Some(id) = holder.strip_prefix(&prefix) else { return true };
            // Unknown (the list failed) counts as alive: a grant is never taken from a session.
            let live = live.get_or_init(|| sandbox_core::SessionEngine::list_sessions(self).ok());
            live.as_ref().is_none_or(|sessions: &Vec<crate::SessionInfo>| {
                sessions.iter().any(|s| s.id == id)
            })
        };
        let placeholders = reaper::protect::state_dir(&self.config.cache_dir);
        // Their leftovers are listed by `reap` with the rest of the sweep's; a failure here
        // leaves them to the next sweep.
        let _ = reaper::protect::reap(&placeholders, dry_run, &alive);
        Ok(reaper::acl::reap(&state, dry_run, &alive)?)
    }

    /// Idmapped copies of `dirs` for container `name` when the caller is root on a local,
    /// rootful daemon and the filesystems allow it (`crate::idmap`); `None` otherwise.
    pub(crate) fn idmap_stages(
        &self,
        name: &str,
        dirs: &[PathBuf],
    ) -> Option<crate::idmap::Stages> {
        let local = matches!(self.connection.endpoint, engine_detect::ApiEndpoint::Unix(_));
        if self.host.uid != 0 || !local || self.rootless.is_some() {
            return None;
        }
        crate::idmap::Stages::stage(&self.config.cache_dir, name, dirs)
    }

    /// Prunes environment volumes unused for `max_age` (zero: every one not in use) and not in
    /// use, or with `dry_run` only reports them. One volume list and one container list call.
    pub fn prune_envs(&self, max_age: Duration, dry_run: bool) -> Result<Vec<PrunedEnv>> {
        let (docker, cache) = (&self.docker, &self.config.cache_dir);
        self.block_on(envs::prune(
            docker,
            &self.connection,
            &self.mark,
            cache,
            now_secs(),
            max_age,
            dry_run,
        ))
    }

    /// Checks what `run` would refuse.
    pub fn check(&self, spec: &RunSpec) -> Result<()> {
        // The relay joins the container's network namespace, on this machine: as root, or
        // through rootless podman's user namespace, which the caller owns (a rootful daemon's
        // containers are root's, whoever may use its socket).
        let local = matches!(self.connection.endpoint, engine_detect::ApiEndpoint::Unix(_));
        let joinable = rustix::process::geteuid().is_root() || self.rootless.is_some();
        if !(local && joinable) {
            sandbox_core::refuse_allowlist(
                spec,
                self.engine_name(),
                "its relay must join the container's network namespace, which takes root or rootless podman, with the engine on this machine",
            )?;
        }
        if spec.allow.is_some() && !spec.publish.is_empty() {
            sandbox_core::refuse_allowlist(
                spec,
                self.engine_name(),
                "its containers with an allowlist have no bridge to publish a port through",
            )?;
        }
        if let Some(first) = spec.publish.first()
            && spec.net == Net::Off
        {
            return Err(Error::PublishWithoutNet { port: first.port });
        }
        sandbox_core::check_host_ports_free(&spec.publish, reaper::ports::in_use)?;
        for var in &spec.env {
            if var.name.is_empty() || var.name.contains(['=', '\0']) {
                return Err(Error::InvalidEnvName { name: var.name.clone() });
            }
            if var.value.is_none() {
                return Err(Error::EnvWithoutValue { name: var.name.clone() });
            }
        }
        plan::check_rootless_limits(self.rootless, &spec.limits)
    }

    /// Returns the environment for `spec`, building it if needed. Warm path: one volume
    /// inspect of the completion marker. Cold path: a prepare container (network on, no
    /// workspace) installs into a fresh volume; the marker volume is created last, so an
    /// interrupted install is never reused. Concurrent prepares of one key serialize on a lock,
    /// which the returned environment holds shared (and stamps as its last use) until
    /// [`OciEngine::run_prepared`] has created the container, so a prune never races the run.
    pub fn prepare(&self, spec: &RunSpec, status: &mut dyn FnMut(&str)) -> Result<PreparedEnv> {
        // `requires-python` alone still goes through prepare: uv checks the image's interpreter
        // against it there (and the volume is the warm marker of that check).
        if spec.dependencies.is_empty() && spec.requires_python.is_none() {
            return Ok(PreparedEnv { volume: None, fresh: false, lease: Lease::none() });
        }
        let volume = env_volume_name(
            &self.mark,
            &self.image_id,
            spec.requires_python.as_deref(),
            &spec.dependencies,
        );
        let marker = format!("{volume}{}", envs::MARKER_SUFFIX);
        let cache = &self.config.cache_dir;
        let lease = Lease::shared(cache, &volume, status)?;
        if self.block_on(self.env_ready(&volume, &marker)) {
            return Ok(PreparedEnv { volume: Some(volume), fresh: false, lease });
        }
        let lease = lease.exclusive(cache, &volume, status)?;
        if self.block_on(self.env_ready(&volume, &marker)) {
            return Ok(PreparedEnv {
                volume: Some(volume),
                fresh: false,
                lease: lease.downgrade()?,
            });
        }
        status(&format!(
            "installing {} dependenc{} in {}",
            spec.dependencies.len(),
            if spec.dependencies.len() == 1 { "y" } else { "ies" },
            self.engine_name()
        ));
        self.block_on(self.build_env(spec, &volume, &marker))?;
        Ok(PreparedEnv { volume: Some(volume), fresh: true, lease: lease.downgrade()? })
    }

    /// A complete environment of ours: the marker (created last) and the volume, both marked.
    async fn env_ready(&self, volume: &str, marker: &str) -> bool {
        volume_is_ours(&self.docker, &self.mark, marker).await
            && volume_is_ours(&self.docker, &self.mark, volume).await
    }

    async fn build_env(&self, spec: &RunSpec, volume: &str, marker: &str) -> Result<()> {
        let engine = self.engine_name();
        // Leftovers of an interrupted install are replaced, never reused.
        let _ = self
            .docker
            .remove_volume(volume, None::<bollard::query_parameters::RemoveVolumeOptions>)
            .await;
        let volume_labels = |name: &str| {
            let mut labels = std::collections::BTreeMap::from([(
                reaper::MANAGED_BY.to_owned(),
                reaper::MANAGED_BY_VALUE.to_owned(),
            )]);
            self.mark.sign(name, &mut labels);
            labels.into_iter().collect::<std::collections::HashMap<_, _>>()
        };
        let request = VolumeCreateRequest {
            name: Some(volume.to_owned()),
            labels: Some(volume_labels(volume)),
            ..Default::default()
        };
        self.docker
            .create_volume(request)
            .await
            .map_err(api(engine, &format!("creating volume {volume}")))?;

        let id = random_id();
        let now = now_secs();
        let mut labels = reaper::labels_for_prepare(&id, &self.owner, now, Some(now + 3600))?;
        self.mark.sign(&format!("python-sandbox-prepare-{id}"), &mut labels);
        let layout = PrepareLayout {
            image: self.config.image.clone(),
            labels,
            env_volume: volume.to_owned(),
            dependencies: spec.dependencies.clone(),
            requires_python: spec.requires_python.clone(),
            // uv's install is ours, not the script's: the engine's defaults, never the limits
            // asked for the script (`--pids-limit 16` would starve uv's threads).
            limits: Limits::DEFAULT,
            tmpfs_size: spec.tmpfs_size,
        };
        let mut container = plan::prepare_plan(&self.host, &layout);
        // The run that follows says which limits are gone.
        let _ = self.adapt(&mut container);
        // Only the CA bundle, a system file; nothing from the caller.
        crate::verify::check_sources(&container.mounts)?;
        let body = plan::create_body(&container, self.config.flavor);
        let name = format!("python-sandbox-prepare-{id}");
        let serial = self.create_lock();
        let guard =
            container::create(&self.docker, engine, &name, body, &self.config.image).await?;
        drop(serial);
        let mut output = Vec::new();
        let mut signals = Signals::new(self.config.handle_signals);
        let finished = container::attach_and_run(
            &self.docker,
            &self.connection,
            &name,
            container.net.then_some(self.wall(&container)),
            None,
            &sandbox_core::Stdin::Null,
            Sink::Collect(&mut output),
            Some(Duration::from_secs(1800)),
            &mut signals,
            None,
            None,
        )
        .await;
        guard.remove().await;
        let finished = finished?;
        if finished.exit_code != 0 || finished.interrupted.is_some() || finished.timed_out {
            let _ = self
                .docker
                .remove_volume(volume, None::<bollard::query_parameters::RemoveVolumeOptions>)
                .await;
            return Err(Error::Prepare {
                code: i64::from(finished.exit_code),
                output: String::from_utf8_lossy(&output).trim_end().to_owned(),
            });
        }
        let request = VolumeCreateRequest {
            name: Some(marker.to_owned()),
            labels: Some(volume_labels(marker)),
            ..Default::default()
        };
        self.docker
            .create_volume(request)
            .await
            .map_err(api(engine, &format!("creating volume {marker}")))?;
        Ok(())
    }

    /// Runs `spec` with a prepared environment. Returns once the container is gone. A script
    /// that fails is not an error; a container that cannot be set up is.
    pub fn run_prepared(
        &self,
        spec: &RunSpec,
        env: &PreparedEnv,
        io: RunIo<'_>,
    ) -> Result<RunOutcome> {
        self.check(spec)?;
        let private = &self.config.runtime_dir;
        let home = self.config.home.as_deref();
        let workspace = host::resolve_workspace(&spec.workspace, home, private)?;
        let script = host::resolve_script(&spec.script)?;
        let mounts = spec
            .mounts
            .iter()
            .map(|m| host::resolve_mount(m, home, private))
            .collect::<Result<Vec<_>>>()?;
        let writable: Vec<PathBuf> = std::iter::once(workspace.clone())
            .chain(mounts.iter().filter(|m| m.writable).map(|m| m.path.clone()))
            .collect();
        let id = random_id();
        // A root caller's read-write directories: idmapped copies where possible, else lent
        // with an ACL (`crate::idmap`).
        let idmapped = self.idmap_stages(&format!("python-sandbox-run-{id}"), &writable);
        let grant = match idmapped {
            Some(_) => None,
            None => workspace::lend(self.host.uid, &writable, &self.config.cache_dir)?,
        };
        let (placeholders, protected) = workspace::protect(&workspace, &mounts, &self.config)?;
        let now = now_secs();
        let expires = spec.timeout.map(|t| now + t.as_secs() + EXPIRY_GRACE_SECS);
        let mut labels = reaper::labels_for_run(&id, &self.owner, now, expires)?;
        self.mark.sign(&format!("python-sandbox-run-{id}"), &mut labels);
        let layout = RunLayout {
            image: self.config.image.clone(),
            labels,
            env_volume: env.volume.clone(),
            workspace,
            script,
            args: spec.args.clone(),
            mounts,
            protected,
            net: spec.net == Net::On,
            publish: spec.publish.clone(),
            user_env: spec
                .env
                .iter()
                .filter_map(|v| v.value.as_ref().map(|value| (v.name.clone(), value.clone())))
                .collect(),
            limits: Limits::asked_or_default(&spec.limits),
            tmpfs_size: spec.tmpfs_size,
            merge_output: match io.output {
                Output::Merged(_) => true,
                Output::Inherit => sandbox_core::same_file_out_err(),
                Output::Sink(_) => false,
            },
        };
        let mut container = plan::run_plan(&self.host, &layout);
        if let Some(stages) = &idmapped {
            stages.apply(&mut container);
        }
        let mut warnings: Vec<String> = self.adapt(&mut container).into_iter().collect();
        let pins = crate::verify::check_sources(&container.mounts)?;
        let mut body = plan::create_body(&container, self.config.flavor);
        // An allowlist: no bridge; the relay is the container's only network.
        let listed = spec.allow.clone().map(sandbox_net::Listed::new);
        if listed.is_some()
            && let Some(host_config) = body.host_config.as_mut()
        {
            host_config.network_mode = Some("none".to_owned());
        }
        let name = format!("python-sandbox-run-{id}");
        let engine = self.engine_name();
        let sink = match io.output {
            Output::Inherit => Sink::Inherit,
            Output::Sink(sink) | Output::Merged(sink) => Sink::Caller(sink),
        };
        let asked = sandbox_core::asked_host_ports(&spec.publish);
        let published = io.published.filter(|_| !asked.is_empty()).map(|hook| (&asked[..], hook));
        let finished = self.block_on(async {
            let serial = self.create_lock();
            let guard = container::create(&self.docker, engine, &name, body, &self.config.image)
                .await
                .map_err(|e| crate::ports::explain(e, &spec.publish))?;
            drop(serial);
            // The container references the volume now: the engine refuses to remove it.
            env.lease.release();
            let mut signals = Signals::new(self.config.handle_signals);
            let finished = container::attach_and_run(
                &self.docker,
                &self.connection,
                &name,
                container.net.then_some(self.wall(&container)),
                listed.as_ref(),
                &io.stdin,
                sink,
                spec.timeout,
                &mut signals,
                Some(&pins),
                published,
            )
            .await
            .map_err(|e| crate::ports::explain(e, &spec.publish));
            match &finished {
                // Podman queues a removal behind its own cleanup process (~200 ms after the
                // exit code is known): hand it over. Docker removes at once; so do timeouts,
                // signals and errors, always.
                Ok(f)
                    if self.config.flavor == Flavor::Podman
                        && !f.timed_out
                        && f.interrupted.is_none() =>
                {
                    guard.hand_off(&self.connection).await;
                }
                _ => guard.remove().await,
            }
            finished
        });
        match idmapped {
            // Detached: the container is gone (or going, on podman, holding its own reference).
            Some(stages) => drop(stages),
            None => workspace::reclaim(self.host.uid, &writable),
        }
        if let Some(Err(e)) = grant.map(reaper::acl::Grant::release) {
            warnings.push(e.to_string());
        }
        // The container is gone (podman's own cleanup holds no mount of ours).
        if let Err(e) = placeholders.release() {
            warnings.push(e.to_string());
        }
        let finished = finished?;
        Ok(RunOutcome {
            exit_code: finished.exit_code,
            duration: finished.duration,
            timed_out: finished.timed_out,
            warnings,
            net_refused: listed.map(|l| l.refused()).unwrap_or_default(),
        })
    }
}

impl Engine for OciEngine {
    type Error = Error;
    type Prepared = PreparedEnv;

    fn name(&self) -> &'static str {
        self.engine_name()
    }

    fn capability(&self) -> sandbox_core::Capability {
        // Rootless podman on cgroup v1 (or without delegated controllers) cannot limit.
        let limits = self.rootless.is_none_or(|r| r.cgroup_limits);
        sandbox_core::Capability {
            sessions: true,
            host_mounts: true,
            publish: true,
            memory_limit: limits,
            cpu_limit: limits,
            pids_limit: limits,
            pty: false,
            seccomp_wall: true,
            preview_urls: false,
        }
    }

    fn check(&self, spec: &RunSpec) -> Result<Vec<String>, Error> {
        OciEngine::check(self, spec).map(|()| Vec::new())
    }

    fn prepare(&self, spec: &RunSpec, status: &mut dyn FnMut(&str)) -> Result<PreparedEnv, Error> {
        OciEngine::prepare(self, spec, status)
    }

    fn run_prepared(
        &self,
        spec: &RunSpec,
        prepared: &PreparedEnv,
        io: RunIo<'_>,
    ) -> Result<RunOutcome, Error> {
        OciEngine::run_prepared(self, spec, prepared, io)
    }
}

/// Whether volume `name` exists and carries this user's mark for it (labels are claims anyone
/// with the daemon can make; the mark is not).
async fn volume_is_ours(docker: &Docker, mark: &reaper::MarkKey, name: &str) -> bool {
    match docker.inspect_volume(name).await {
        Ok(volume) => {
            let labels: std::collections::BTreeMap<String, String> =
                volume.labels.into_iter().collect();
            mark.verifies(name, &labels)
        }
        Err(_) => false,
    }
}

/// The image's id; a missing image is [`Error::MissingImage`].
async fn image_id(docker: &Docker, engine: &'static str, image: &str) -> Result<String> {
    match docker.inspect_image(image).await {
        Ok(inspect) => {
            let abi = inspect
                .config
                .as_ref()
                .and_then(|c| c.labels.as_ref())
                .and_then(|l| l.get(crate::plan::IMAGE_ABI_LABEL))
                .and_then(|v| v.parse::<u32>().ok());
            if abi != Some(IMAGE_ABI) {
                return Err(Error::OutdatedImage { image: image.to_owned(), engine, found: abi });
            }
            Ok(inspect.id.unwrap_or_else(|| image.to_owned()))
        }
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {
            Err(Error::MissingImage { image: image.to_owned(), engine })
        }
        Err(e) => Err(api(engine, &format!("inspecting image {image}"))(e)),
    }
}

/// The base profile installed by containers-common, if any.
fn default_profile() -> Option<String> {
    sandbox_core::oci_seccomp::DEFAULT_PROFILES.iter().find_map(|p| std::fs::read_to_string(p).ok())
}

/// The `seccomp=` value for `flavor`: the wall on the default profile (docker without one:
/// on [`sandbox_core::oci_seccomp::VENDORED_DEFAULT`]).
fn seccomp_option(flavor: Flavor, cache_dir: &std::path::Path) -> Result<String> {
    let base = match (flavor, default_profile()) {
        (_, Some(base)) => base,
        (Flavor::Docker, None) => sandbox_core::oci_seccomp::VENDORED_DEFAULT.to_owned(),
        (Flavor::Podman, None) => {
            return Err(Error::Seccomp {
                reason: format!(
                    "no default profile at {}",
                    sandbox_core::oci_seccomp::DEFAULT_PROFILES.join(" or ")
                ),
            });
        }
    };
    let walled =
        sandbox_core::oci_seccomp::with_wall(&base).map_err(|reason| Error::Seccomp { reason })?;
    match flavor {
        Flavor::Docker => Ok(walled),
        Flavor::Podman => Ok(write_profile(cache_dir, &walled)?.display().to_string()),
    }
}

/// Writes (content-addressed, once) a profile and returns its path; podman reads it on the
/// same host. In a [`reaper::PrivateDir`]: nobody else can have put a weaker one there.
fn write_profile(cache_dir: &std::path::Path, profile: &str) -> Result<PathBuf> {
    let digest = hex(&Sha256::digest(profile.as_bytes()));
    let dir = reaper::PrivateDir::open(&cache_dir.join("oci"))?;
    let name = format!("seccomp-{}.json", &digest[..16]);
    if dir.stat(&name)?.is_none() {
        // Readable by the podman service, whichever user it runs as.
        dir.write_once(&name, profile.as_bytes(), 0o644)?;
    }
    Ok(dir.path().join(name))
}

/// This user's [`reaper::MarkKey`], kept in `<cache>/keys` (created on first use).
fn mark_key(cache_dir: &std::path::Path) -> Result<reaper::MarkKey> {
    Ok(reaper::MarkKey::load(&reaper::PrivateDir::open(&cache_dir.join("keys"))?)?)
}
