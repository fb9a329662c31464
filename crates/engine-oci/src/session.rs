//! Warm sessions: a long-lived container whose main process is the agent (`agent.py`: an idle
//! watchdog that also serves execs over a unix socket, see `agent.rs`), serving the [`Sandbox`]
//! protocol through execs: over the agent's socket when it is reachable from this host, through
//! the Docker API otherwise (a remote daemon, an image without python3). Files move through
//! exec `cat`/`tar`/`find`, never the archive endpoints (they do not see tmpfs mounts on Docker).
//!
//! `session start` leaves a host-private record (`<runtime dir>/sessions/<id>.json`: container,
//! workspace, the agent's pinned address, the session's policy), so `session run` and
//! `session exec` need no API call at all on the warm path ([`Session::local`]).
//!
//! Idle TTL: requests served by the agent, and API execs (each registers its shell under
//! `/tmp/.active/` and touches `/tmp/.last-activity`), count as activity; the agent exits once
//! nothing ran for the TTL, and auto-remove makes the container disappear, even if no CLI ever
//! runs again. Services started with [`Sandbox::start_service`] and traffic to them do not count.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::query_parameters::InspectContainerOptions;
use futures_util::StreamExt;
use sandbox_core::{
    Captured, DirEntry, EntryKind, EnvVar, ExecRequest, Mount, Net, OutputSink, Publish, PutSource,
    RunOutcome, Sandbox, Service, ServiceSpec, Stream,
};
use sha2::Digest;
use tokio::io::AsyncWriteExt;

use crate::agent::{self, AgentAddr};
use crate::container::{self, api};
use crate::engine::{OciEngine, now_secs, random_id};
use crate::error::{Error, Result};
use crate::host;
use crate::plan::{self, SessionLayout};

/// Our label holding the session's workspace (not part of the reaper schema).
const WORKSPACE_LABEL: &str = "io.python-sandbox.oci.workspace";
/// Our label holding the session's [`SessionPolicy`] as JSON.
const POLICY_LABEL: &str = "io.python-sandbox.oci.policy";
/// The session's own virtual environment, in its tmpfs home.
const VENV: &str = "/home/sandbox/.venv";
/// Wraps every exec: registers it as activity while it runs. Shell builtins only on the way
/// in and out (truncating the activity file updates its mtime like `touch`); the one external
/// command, `rm`, runs in the background detached from the exec's streams, so the exec ends
/// with the command (the watchdog also drops files of dead pids).
const EXEC_WRAPPER: &str = r#"[ -d /tmp/.active ] || mkdir -p /tmp/.active 2>/dev/null
: > /tmp/.active/$$ 2>/dev/null
: > /tmp/.last-activity 2>/dev/null
"$@"
rc=$?
: > /tmp/.last-activity 2>/dev/null
rm -f /tmp/.active/$$ < /dev/null > /dev/null 2>&1 &
exit $rc"#;

/// What `session start` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionConfig {
    /// Mounted read-write at its real path; the working directory of execs.
    pub workspace: PathBuf,
    /// Extra mounts at their real paths.
    pub mounts: Vec<Mount>,
    /// Network of the session.
    pub net: Net,
    /// Ports reachable from the host (each on a free host port of the given address,
    /// 127.0.0.1 by default).
    pub publish: Vec<Publish>,
    /// Explicit environment.
    pub env: Vec<EnvVar>,
    /// Idle time after which the session removes itself.
    pub ttl: Duration,
    /// Size cap of each of the session's tmpfs (`/tmp` and home, which holds its venv), bytes;
    /// normally [`sandbox_core::DEFAULT_TMPFS_SIZE`].
    pub tmpfs_size: u64,
    /// The limits asked for; the engine's defaults fill in the rest.
    pub limits: sandbox_core::Limits,
}

/// Markers of the dependency sets installed into [`VENV`], one empty file per set.
const DEPS_MARKERS: &str = "/home/sandbox/.venv/.python-sandbox-deps";
/// The warm path of `run_script`, in one exec. The first stdin line is a per-call nonce (read
/// from the pipe, so the script cannot learn it from argv or the environment); when the venv or
/// the dependency marker `$1` is missing, or the copy to `$2` fails, it prints the not-ready
/// line and exits before anything of the script runs. The rest of stdin is the script when `$2`
/// names where to copy it.
const RUN_IF_READY: &str = r#"IFS= read -r nonce
if [ ! -x /home/sandbox/.venv/bin/python ] || { [ -n "$1" ] && [ ! -e "$1" ]; }; then
  printf 'python-sandbox-not-ready-%s\n' "$nonce"; exit 0
fi
if [ -n "$2" ]; then
  { mkdir -p -- "${2%/*}" && cat > "$2"; } || { printf 'python-sandbox-not-ready-%s\n' "$nonce"; exit 0; }
fi
shift 2
exec "$@""#;

/// Pure: the marker file of a dependency set (order-insensitive, duplicates ignored); `None`
/// without dependencies.
pub(crate) fn deps_marker(dependencies: &[String]) -> Option<String> {
    let mut deps: Vec<&str> = dependencies.iter().map(|d| d.trim()).collect();
    deps.sort_unstable();
    deps.dedup();
    if deps.is_empty() {
        return None;
    }
    let mut hasher = sha2::Sha256::new();
    for dep in deps {
        hasher.update(dep.as_bytes());
        hasher.update(b"\n");
    }
    let digest: String = hasher.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect();
    Some(format!("{DEPS_MARKERS}/{digest}"))
}

/// Passes output through, except the not-ready line of [`RUN_IF_READY`]: stdout is held only
/// while it is still a prefix of that line.
pub(crate) struct NotReadyGate<'a> {
    line: Vec<u8>,
    held: Vec<u8>,
    open: bool,
    inner: &'a mut dyn OutputSink,
}

impl<'a> NotReadyGate<'a> {
    pub(crate) fn new(nonce: &str, inner: &'a mut dyn OutputSink) -> Self {
        let line = format!("python-sandbox-not-ready-{nonce}\n").into_bytes();
        NotReadyGate { line, held: Vec::new(), open: false, inner }
    }

    /// True when the exec only reported "not ready"; otherwise flushes what it held.
    pub(crate) fn finish(self) -> bool {
        if !self.open && self.held == self.line {
            return true;
        }
        if !self.held.is_empty() {
            self.inner.write(Stream::Stdout, &self.held);
        }
        false
    }
}

impl OutputSink for NotReadyGate<'_> {
    fn write(&mut self, stream: Stream, chunk: &[u8]) {
        if stream != Stream::Stdout || self.open {
            return self.inner.write(stream, chunk);
        }
        self.held.extend_from_slice(chunk);
        if !self.line.starts_with(&self.held) {
            self.open = true;
            let held = std::mem::take(&mut self.held);
            self.inner.write(Stream::Stdout, &held);
        }
    }

    fn closed(&self) -> bool {
        self.inner.closed()
    }
}

/// What the host reads into memory from one helper command in a session (stderr of an
/// install, a service's start-up output): output is streamed everywhere else, and a capture
/// is bounded, because the session's code answers it.
pub(crate) const CAPTURE_LIMIT: usize = 16 << 20;
/// The largest file [`Sandbox::read_file`] reads from a session.
pub(crate) const READ_FILE_LIMIT: usize = 64 << 20;

/// Pure: a byte count as `16 MiB`.
pub(crate) fn human_bytes(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// A [`Captured`] that takes at most `limit` bytes of both streams together; past that it
/// drops what comes and reports its reader closed, which stops the command.
pub(crate) struct Capped {
    pub(crate) captured: Captured,
    limit: usize,
    over: bool,
}

impl Capped {
    pub(crate) fn new(limit: usize) -> Capped {
        Capped { captured: Captured::default(), limit, over: false }
    }

    /// Whether more than the limit came.
    pub(crate) fn over(&self) -> bool {
        self.over
    }
}

impl OutputSink for Capped {
    fn write(&mut self, stream: Stream, chunk: &[u8]) {
        let taken = self.captured.stdout.len() + self.captured.stderr.len();
        if self.over || taken + chunk.len() > self.limit {
            self.over = true;
            return;
        }
        self.captured.write(stream, chunk);
    }

    fn closed(&self) -> bool {
        self.over
    }
}

/// How [`Session::run_script_with`] runs a script.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScriptOptions {
    /// Installed into the session's environment first (they stay for later scripts).
    pub dependencies: Vec<String>,
    /// The script's arguments.
    pub args: Vec<String>,
    /// Extra environment for the script, on top of the session's.
    pub env: Vec<(String, String)>,
    /// Kill the script (and its children) after this long.
    pub timeout: Option<Duration>,
}

/// A session as `session list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// The session id (what `session run/exec/stop` take).
    pub id: String,
    /// The container name.
    pub container: String,
    /// `docker` or `podman`.
    pub engine: String,
    /// Unix seconds.
    pub created: u64,
    /// Idle TTL in seconds.
    pub ttl: u64,
    /// The engine's state, e.g. `running`.
    pub state: String,
    /// The workspace.
    pub workspace: String,
    /// (port inside, URL on the host) of published ports.
    pub ports: Vec<(u16, String)>,
    /// From `start_session`: what the engine could not give the session (e.g. limits on
    /// rootless podman); empty in listings.
    pub warnings: Vec<String>,
}

/// Pure: the container name of a session id (an id may also be given as the full name).
pub(crate) fn container_name(id: &str) -> String {
    if id.starts_with("python-sandbox-session-") {
        id.to_owned()
    } else {
        format!("python-sandbox-session-{id}")
    }
}

/// What a session was started with, for checking the scripts run in it: mounts, network and
/// ports are fixed when the container starts.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct SessionPolicy {
    /// Whether the session has a network.
    pub net: bool,
    /// Extra mounts (real host paths) and whether each is writable.
    pub mounts: Vec<(PathBuf, bool)>,
    /// Ports published to the host.
    pub publish: Vec<u16>,
}

impl SessionPolicy {
    /// Pure: what of a script's own sandbox settings this session cannot give it, one line each
    /// (empty: it fits). `mounts` are canonical host paths with their writability; the
    /// workspace (always mounted read-write) covers everything below it.
    pub fn misfits(
        &self,
        workspace: &Path,
        mounts: &[(PathBuf, bool)],
        net: Net,
        publish: &[u16],
    ) -> Vec<String> {
        let mut out = Vec::new();
        for (path, writable) in mounts {
            let covered = path.starts_with(workspace)
                || self
                    .mounts
                    .iter()
                    .any(|(have, rw)| path.starts_with(have) && (*rw || !writable));
            if !covered {
                out.push(format!(
                    "mount `{}{}`: the session has no such mount",
                    path.display(),
                    if *writable { "" } else { ":ro" }
                ));
            }
        }
        // A script asking for no network in a session that has one is only warned about
        // (`net_warning`): its dependencies install inside the session, which needs the network.
        if net == Net::On && !self.net {
            out.push("`net = \"on\"`: the session has no network".to_owned());
        }
        for port in publish {
            if !self.publish.contains(port) {
                out.push(format!("publish {port}: the session does not publish it"));
            }
        }
        out
    }
}

impl SessionPolicy {
    /// Pure: the warning for a script that asks for `net`, when the session cannot honour it
    /// (a script's `net = "off"` in a session with a network).
    pub fn net_warning(&self, net: Net) -> Option<String> {
        (net == Net::Off && self.net).then(|| {
            "the script asks for `net = \"off\"` but this session has a network; it runs with it (start the session with `--net off` to enforce it)".to_owned()
        })
    }
}

/// The host-private record `session start` leaves under the runtime directory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Record {
    id: String,
    container: String,
    engine: String,
    workspace: String,
    agent: Option<AgentAddr>,
    policy: SessionPolicy,
    /// The values of the session's own secret-looking environment (`session start --env`),
    /// masked in everything its commands print. The container's configuration holds them
    /// anyway; this file is as private as the runtime directory (0700, the file 0600).
    #[serde(default)]
    secrets: Vec<String>,
    /// How many scripts `session run` has run in the session (the later ones share whatever
    /// the earlier ones left behind).
    #[serde(default)]
    scripts: u64,
}

/// Pure: the record file of session `id` (an id may also be given as the container name); `None`
/// for an id that is not one of ours (it becomes a file name).
pub(crate) fn record_path(runtime_dir: &Path, id: &str) -> Option<PathBuf> {
    let id = id.strip_prefix("python-sandbox-session-").unwrap_or(id);
    let ok = !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric());
    ok.then(|| runtime_dir.join("sessions").join(format!("{id}.json")))
}

/// A running session container.
#[derive(Debug)]
pub struct Session {
    /// `None` for a session opened from its record only ([`Session::local`]).
    docker: Option<Docker>,
    engine: &'static str,
    id: String,
    container: String,
    workspace: String,
    agent: Option<AgentAddr>,
    policy: Option<SessionPolicy>,
    record: Option<PathBuf>,
    /// The ACL grants' state dir, whose hold `stop` ends (a session opened from the API).
    grants: Option<PathBuf>,
    /// Values of the session's own secret-looking environment.
    secrets: Vec<String>,
    /// Scripts run in the session so far, as its record says.
    scripts: u64,
    stopped: AtomicBool,
    /// Tests only: the agent's socket at a plain path (a fake agent outside any container).
    #[cfg(test)]
    pub(crate) test_socket: Option<PathBuf>,
}

impl OciEngine {
    /// Starts a session container and returns its id once it runs.
    pub fn start_session(&self, config: &SessionConfig) -> Result<SessionInfo> {
        let private = &self.config().runtime_dir;
        let home = self.config().home.as_deref();
        if let Some(first) = config.publish.first()
            && config.net == Net::Off
        {
            return Err(Error::PublishWithoutNet { port: first.port });
        }
        plan::check_rootless_limits(self.rootless(), &config.limits)?;
        let mut user_env = Vec::new();
        for var in &config.env {
            if var.name.is_empty() || var.name.contains(['=', '\0']) {
                return Err(Error::InvalidEnvName { name: var.name.clone() });
            }
            let value = var
                .value
                .clone()
                .ok_or_else(|| Error::EnvWithoutValue { name: var.name.clone() })?;
            user_env.push((var.name.clone(), value));
        }
        let user_env_kept = user_env.clone();
        let workspace = host::resolve_workspace(&config.workspace, home, private)?;
        let mounts = config
            .mounts
            .iter()
            .map(|m| host::resolve_mount(m, home, private))
            .collect::<Result<Vec<_>>>()?;
        let host = crate::host::HostFacts::gather();
        let writable: Vec<PathBuf> = std::iter::once(workspace.clone())
            .chain(mounts.iter().filter(|m| m.writable).map(|m| m.path.clone()))
            .collect();
        let grant = crate::workspace::lend(host.uid, &writable, &self.config().cache_dir)?;
        let id = random_id();
        let ttl_secs = config.ttl.as_secs().max(1);
        let owner = reaper::Owner::current(None)?;
        let mut labels = reaper::labels_for_session(&id, &owner, now_secs(), ttl_secs)?;
        self.mark().sign(&container_name(&id), &mut labels);
        labels.insert(WORKSPACE_LABEL.to_owned(), workspace.display().to_string());
        let policy = SessionPolicy {
            net: config.net == Net::On,
            mounts: mounts.iter().map(|m| (m.path.clone(), m.writable)).collect(),
            publish: config.publish.iter().map(|p| p.port).collect(),
        };
        labels.insert(POLICY_LABEL.to_owned(), serde_json::to_string(&policy).unwrap_or_default());
        let workspace_text = workspace.display().to_string();
        let layout = SessionLayout {
            image: self.config().image.clone(),
            labels,
            workspace,
            mounts,
            net: config.net == Net::On,
            publish: config
                .publish
                .iter()
                .map(|p| (p.host, p.port))
                .collect::<Vec<(Option<IpAddr>, u16)>>(),
            user_env,
            limits: plan::Limits::asked_or_default(&config.limits),
            tmpfs_size: config.tmpfs_size,
            ttl_secs,
        };
        let mut container = plan::session_plan(&host, &layout);
        let warning = self.adapt(&mut container);
        let pins = host::check_sources(&container.mounts)?;
        let body = plan::create_body(&container, self.config().flavor);
        let name = container_name(&id);
        let engine = self.config().flavor.as_str();
        let image = self.config().image.clone();
        self.block_on(async {
            let guard = container::create(self.docker(), engine, &name, body, &image).await?;
            let started = self
                .docker()
                .start_container(&name, None::<bollard::query_parameters::StartContainerOptions>)
                .await;
            // The main process is the agent, at its gate until the network wall is up
            // (`crate::netwall`); no script runs before the mounts are checked.
            let started = match started {
                Ok(()) if container.net => {
                    match crate::netwall::apply(self.docker(), self.connection(), &name).await {
                        Ok(()) => crate::verify::started(self.docker(), engine, &name, &pins).await,
                        Err(e) => Err(e),
                    }
                }
                Ok(()) => crate::verify::started(self.docker(), engine, &name, &pins).await,
                Err(e) => Err(container::start_error(engine, &name, e)),
            };
            match started {
                Ok(()) => {
                    // From here on the session lives on its own (watchdog + auto-remove), and
                    // so does its grant, until `stop` or, once it is gone, a sweep.
                    std::mem::forget(guard);
                    match grant {
                        Some(grant) => {
                            grant.hold(&crate::workspace::holder(engine, &id)).map_err(Error::from)
                        }
                        None => Ok(()),
                    }
                }
                Err(e) => {
                    guard.remove().await;
                    Err(e)
                }
            }
        })?;
        let agent = self.block_on(async {
            let addr = init_pid(self.docker(), &name).await.and_then(AgentAddr::of_pid)?;
            agent::wait_listening(&addr, Duration::from_secs(5)).await.then_some(addr)
        });
        let record = Record {
            id: id.clone(),
            container: name,
            engine: engine.to_owned(),
            workspace: workspace_text,
            agent,
            policy,
            secrets: secret_values(&user_env_kept),
            scripts: 0,
        };
        // Best effort: without the record, session commands go through the API.
        let _ = write_record(&self.config().runtime_dir, &record);
        let sessions = self.list_sessions()?;
        let mut info = sessions.into_iter().find(|s| s.id == id).ok_or(Error::NoSession { id })?;
        info.warnings.extend(warning);
        Ok(info)
    }

    /// The running session `id`.
    pub fn session(&self, id: &str) -> Result<Session> {
        let name = container_name(id);
        let engine = self.config().flavor.as_str();
        let inspect =
            self.block_on(self.docker().inspect_container(&name, None::<InspectContainerOptions>));
        let inspect = match inspect {
            Ok(i) => i,
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {
                return Err(Error::NoSession { id: id.to_owned() });
            }
            Err(e) => return Err(api(engine, &format!("inspecting {name}"))(e)),
        };
        let labels = inspect.config.as_ref().and_then(|c| c.labels.clone()).unwrap_or_default();
        let is_session = labels.get(reaper::labels::KIND).map(String::as_str) == Some("session")
            && labels.get(reaper::MANAGED_BY).map(String::as_str) == Some(reaper::MANAGED_BY_VALUE);
        let running = inspect.state.as_ref().and_then(|s| s.running) == Some(true);
        if !is_session || !running {
            return Err(Error::NoSession { id: id.to_owned() });
        }
        let pid = inspect.state.as_ref().and_then(|s| s.pid).and_then(|p| u32::try_from(p).ok());
        let id = labels.get(reaper::labels::ID).cloned().unwrap_or_else(|| id.to_owned());
        let env: Vec<(String, String)> = inspect
            .config
            .as_ref()
            .and_then(|c| c.env.as_ref())
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
            .collect();
        let record = record_path(&self.config().runtime_dir, &id);
        let scripts = record.as_deref().and_then(read_record).map_or(0, |r| r.scripts);
        Ok(Session {
            docker: Some(self.docker().clone()),
            engine,
            record,
            grants: Some(reaper::acl::state_dir(&self.config().cache_dir)),
            secrets: secret_values(&env),
            scripts,
            id,
            container: name,
            workspace: labels.get(WORKSPACE_LABEL).cloned().unwrap_or_else(|| "/tmp".to_owned()),
            agent: pid.filter(|p| *p > 0).and_then(AgentAddr::of_pid),
            policy: labels.get(POLICY_LABEL).and_then(|p| serde_json::from_str(p).ok()),
            stopped: AtomicBool::new(false),
            #[cfg(test)]
            test_socket: None,
        })
    }

    /// Every session container of this engine (running or on its way out).
    pub fn list_sessions(&self) -> Result<Vec<SessionInfo>> {
        let engine = self.config().flavor.as_str();
        let filters =
            [reaper::MANAGED_FILTER.to_owned(), format!("{}=session", reaper::labels::KIND)];
        let items =
            self.block_on(crate::client::list_containers_raw(self.connection(), &filters))?;
        let mut out: Vec<SessionInfo> =
            items.iter().filter_map(|item| session_info(item, engine)).collect();
        out.sort_by_key(|s| s.created);
        prune_records(&self.config().runtime_dir);
        Ok(out)
    }

    /// Stops and removes session `id`.
    pub fn stop_session(&self, id: &str) -> Result<()> {
        let session = self.session(id)?;
        self.block_on(session.stop())
    }
}

impl Session {
    /// Opens session `id` from the record `session start` left in `runtime_dir`, without any
    /// API call; `None` when there is no record (another engine's `flavor`, a session started
    /// elsewhere) or its agent is gone. Such a session serves execs and scripts through the
    /// agent only: anything that needs the API (services, stop) wants [`OciEngine::session`].
    pub fn local(runtime_dir: &Path, id: &str, flavor: Option<crate::Flavor>) -> Option<Session> {
        let path = record_path(runtime_dir, id)?;
        let record = read_record(&path)?;
        let engine = match record.engine.as_str() {
            "docker" => crate::Flavor::Docker,
            "podman" => crate::Flavor::Podman,
            _ => return None,
        };
        if flavor.is_some_and(|f| f != engine) {
            return None;
        }
        let agent = record.agent.filter(AgentAddr::alive)?;
        Some(Session {
            docker: None,
            engine: engine.as_str(),
            id: record.id,
            container: record.container,
            workspace: record.workspace,
            agent: Some(agent),
            policy: Some(record.policy),
            record: Some(path),
            grants: None,
            secrets: record.secrets,
            scripts: record.scripts,
            stopped: AtomicBool::new(false),
            #[cfg(test)]
            test_socket: None,
        })
    }

    /// Whether commands go through the session's agent (else through the engine's API).
    pub fn uses_agent(&self) -> bool {
        self.agent.is_some_and(|a| a.listening())
    }

    /// The same session with the agent turned off: every command goes through the engine's
    /// API (what a session whose agent cannot be reached does anyway; for tests and debugging).
    pub fn via_api(mut self) -> Session {
        self.agent = None;
        self
    }

    /// What the session was started with (`None` for sessions of older versions).
    pub fn policy(&self) -> Option<&SessionPolicy> {
        self.policy.as_ref()
    }

    /// The values of the session's own secret-looking environment (names as
    /// [`sandbox_core::is_secret_name`] tells), for masking what its commands print.
    pub fn secrets(&self) -> &[String] {
        &self.secrets
    }

    /// How many scripts `session run` had run in this session when it was opened.
    pub fn scripts_run(&self) -> u64 {
        self.scripts
    }

    /// Records in the session's host-private record that one more script runs in it (best
    /// effort: a session without a record, e.g. of an older version, stays uncounted).
    pub fn note_script(&self) {
        let Some(path) = &self.record else { return };
        let Some(dir) = path.parent().and_then(Path::parent) else { return };
        let mut record = match read_record(path) {
            Some(record) => record,
            None => {
                let Some(policy) = self.policy.clone() else { return };
                Record {
                    id: self.id.clone(),
                    container: self.container.clone(),
                    engine: self.engine.to_owned(),
                    workspace: self.workspace.clone(),
                    agent: self.agent,
                    policy,
                    secrets: self.secrets.clone(),
                    scripts: 0,
                }
            }
        };
        record.scripts = record.scripts.max(self.scripts).saturating_add(1);
        let _ = write_record(dir, &record);
    }
}

/// Pure: the values among `env` whose names say they are secret.
fn secret_values(env: &[(String, String)]) -> Vec<String> {
    env.iter()
        .filter(|(name, _)| sandbox_core::is_secret_name(name))
        .map(|(_, v)| v.clone())
        .collect()
}

/// The record at `path`, if it is one.
fn read_record(path: &Path) -> Option<Record> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// The host pid of a container's init process.
async fn init_pid(docker: &Docker, name: &str) -> Option<u32> {
    let inspect = docker.inspect_container(name, None::<InspectContainerOptions>).await.ok()?;
    inspect.state?.pid.and_then(|p| u32::try_from(p).ok()).filter(|p| *p > 0)
}

fn write_record(runtime_dir: &Path, record: &Record) -> std::io::Result<()> {
    let path = record_path(runtime_dir, &record.id)
        .ok_or_else(|| std::io::Error::other("not a session id"))?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let bytes = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    let dir = reaper::PrivateDir::open(&runtime_dir.join("sessions"))
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    dir.replace(name, &bytes).map_err(|e| std::io::Error::other(e.to_string()))
}

/// Removes the records of sessions whose agent is gone (expired, stopped, reaped); a record
/// younger than a minute stays (its session may be starting).
fn prune_records(runtime_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(runtime_dir.join("sessions")) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let young = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age < Duration::from_secs(60));
        if young {
            continue;
        }
        let live = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
            .and_then(|r| r.agent)
            .is_some_and(|a| a.alive());
        if !live {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Pure: a `/containers/json` item as a [`SessionInfo`]; `None` if it is not one of ours.
pub(crate) fn session_info(item: &serde_json::Value, engine: &str) -> Option<SessionInfo> {
    let labels: BTreeMap<String, String> = item
        .get("Labels")?
        .as_object()?
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect();
    let parsed = reaper::SandboxLabels::from_labels(&labels).ok()??;
    let container =
        item.get("Names")?.as_array()?.first()?.as_str()?.trim_start_matches('/').to_owned();
    let mut ports: Vec<(u16, String)> = item
        .get("Ports")
        .and_then(serde_json::Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|p| {
            let public = u16::try_from(p.get("PublicPort")?.as_u64()?).ok()?;
            let private = u16::try_from(p.get("PrivatePort")?.as_u64()?).ok()?;
            let ip = p
                .get("IP")
                .and_then(serde_json::Value::as_str)
                .filter(|ip| !ip.is_empty() && *ip != "0.0.0.0")
                .unwrap_or("127.0.0.1");
            let ip = if ip.contains(':') { format!("[{ip}]") } else { ip.to_owned() };
            Some((private, format!("http://{ip}:{public}")))
        })
        .collect();
    ports.sort();
    ports.dedup_by_key(|p| p.0);
    Some(SessionInfo {
        id: parsed.id,
        container,
        engine: engine.to_owned(),
        created: parsed.created,
        ttl: parsed.ttl.unwrap_or(0),
        state: item.get("State").and_then(serde_json::Value::as_str).unwrap_or_default().to_owned(),
        workspace: labels.get(WORKSPACE_LABEL).cloned().unwrap_or_default(),
        ports,
        warnings: Vec::new(),
    })
}

/// Maps the stderr of a failed file helper to the protocol's errors.
fn file_error(what: &str, path: &str, outcome: &RunOutcome, captured: &Captured) -> Error {
    let stderr = captured.stderr_lossy();
    if stderr.contains("No such file") || outcome.exit_code == 2 && stderr.contains("missing") {
        return sandbox_core::Error::NotFound { path: path.to_owned() }.into();
    }
    if stderr.contains("Is a directory") {
        return sandbox_core::Error::IsADirectory { path: path.to_owned() }.into();
    }
    if stderr.contains("Not a directory") || stderr.contains("notdir") {
        return sandbox_core::Error::NotADirectory { path: path.to_owned() }.into();
    }
    Error::Exec { what: format!("{what} `{path}`"), message: stderr.trim().to_owned() }
}

fn check_abs(path: &str) -> Result<()> {
    if path.starts_with('/') {
        Ok(())
    } else {
        Err(sandbox_core::Error::RelativeSandboxPath { path: path.to_owned() }.into())
    }
}

fn strings(argv: &[&str]) -> Vec<String> {
    argv.iter().map(|s| (*s).to_owned()).collect()
}

impl Session {
    /// The workspace the session was started in.
    pub fn workspace(&self) -> &str {
        &self.workspace
    }

    /// The container name.
    pub fn container(&self) -> &str {
        &self.container
    }

    /// Tests only: a session served by the (fake) agent listening at `socket`.
    #[cfg(test)]
    pub(crate) fn fake(id: &str, socket: PathBuf) -> Session {
        Session {
            docker: None,
            engine: "docker",
            id: id.to_owned(),
            container: container_name(id),
            workspace: "/ws".to_owned(),
            agent: None,
            policy: Some(SessionPolicy::default()),
            record: None,
            grants: None,
            secrets: Vec::new(),
            scripts: 0,
            stopped: AtomicBool::new(false),
            test_socket: Some(socket),
        }
    }

    /// A connection to the session's agent, if it can be reached.
    fn connect_agent(&self) -> Option<tokio::net::UnixStream> {
        #[cfg(test)]
        if let Some(path) = &self.test_socket {
            let stream = std::os::unix::net::UnixStream::connect(path).ok()?;
            stream.set_nonblocking(true).ok()?;
            return tokio::net::UnixStream::from_std(stream).ok();
        }
        self.agent.as_ref().and_then(AgentAddr::connect)
    }

    fn ensure_running(&self) -> Result<()> {
        if self.stopped.load(Ordering::Relaxed) {
            return Err(sandbox_core::Error::Stopped { id: self.id.clone() }.into());
        }
        Ok(())
    }

    /// Runs one command through the activity wrapper, streaming to `output`.
    async fn exec_raw(
        &self,
        request: &ExecRequest,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome> {
        self.ensure_running()?;
        let cwd = request.cwd.clone().unwrap_or_else(|| self.workspace.clone());
        if let Some(stream) = self.connect_agent() {
            return agent::exec(stream, request, &cwd, output, &self.id).await;
        }
        let Some(docker) = &self.docker else {
            return Err(Error::NoSession { id: self.id.clone() });
        };
        let mut cmd = strings(&["sh", "-c", EXEC_WRAPPER, "exec"]);
        if let Some(timeout) = request.timeout {
            // Inside the container: exec has no kill endpoint, and this kills the whole command.
            let secs = format!("{:.3}", timeout.as_secs_f64());
            cmd.extend(strings(&["timeout", "-s", "KILL", &secs]));
        }
        cmd.extend(request.argv.iter().cloned());
        let options = CreateExecOptions::<String> {
            attach_stdin: Some(!request.stdin.is_empty()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            env: Some(request.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            cmd: Some(cmd),
            working_dir: Some(cwd),
            ..Default::default()
        };
        let exec = docker.create_exec(&self.container, options).await.map_err(|e| match e {
            bollard::errors::Error::DockerResponseServerError {
                status_code: 404 | 409, ..
            } => Error::NoSession { id: self.id.clone() },
            e => api(self.engine, "creating an exec")(e),
        })?;
        let start = Instant::now();
        let started = docker
            .start_exec(
                &exec.id,
                Some(StartExecOptions { detach: false, tty: false, output_capacity: None }),
            )
            .await
            .map_err(api(self.engine, "starting an exec"))?;
        let StartExecResults::Attached { output: mut stream, mut input } = started else {
            return Err(Error::Exec {
                what: "exec".to_owned(),
                message: "started detached".to_owned(),
            });
        };
        let feeder = (!request.stdin.is_empty()).then(|| {
            let bytes = request.stdin.clone();
            tokio::spawn(async move {
                let _ = input.write_all(&bytes).await;
                let _ = input.shutdown().await;
            })
        });
        while let Some(item) = stream.next().await {
            match item {
                Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                    output.write(Stream::Stdout, &message)
                }
                Ok(LogOutput::StdErr { message }) => output.write(Stream::Stderr, &message),
                Ok(LogOutput::StdIn { .. }) => {}
                Err(_) => break,
            }
            if output.closed() {
                // The API has no way to end an exec; the closed stream leaves the command
                // blocked on its full output pipe at worst (the agent path kills it).
                if let Some(feeder) = feeder {
                    feeder.abort();
                }
                return Ok(RunOutcome {
                    exit_code: sandbox_core::EXIT_CLOSED_PIPE,
                    duration: start.elapsed(),
                    timed_out: false,
                    warnings: Vec::new(),
                });
            }
        }
        if let Some(feeder) = feeder {
            feeder.abort();
        }
        let mut exit_code = None;
        for _ in 0..200 {
            let inspect = docker
                .inspect_exec(&exec.id)
                .await
                .map_err(api(self.engine, "inspecting an exec"))?;
            if inspect.running != Some(true) {
                exit_code = inspect.exit_code;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let exit_code = i32::try_from(exit_code.unwrap_or(1)).unwrap_or(1);
        let duration = start.elapsed();
        let timed_out = request.timeout.is_some_and(|t| exit_code == 137 && duration >= t);
        Ok(RunOutcome { exit_code, duration, timed_out, warnings: Vec::new() })
    }

    /// Runs a helper command with its output captured, at most [`CAPTURE_LIMIT`] bytes.
    async fn capture(&self, argv: &[&str], stdin: Vec<u8>) -> Result<(RunOutcome, Captured)> {
        let program = argv.first().copied().unwrap_or_default();
        let what = || format!("the output of a helper command (`{program}`)");
        self.capture_limited(argv, stdin, CAPTURE_LIMIT, &what).await
    }

    /// [`Session::capture`] with its own cap; more output than `limit` stops the command and
    /// is [`Error::TooLarge`] naming `what`.
    async fn capture_limited(
        &self,
        argv: &[&str],
        stdin: Vec<u8>,
        limit: usize,
        what: &(dyn Fn() -> String + Sync),
    ) -> Result<(RunOutcome, Captured)> {
        let request = ExecRequest {
            argv: strings(argv),
            stdin,
            cwd: Some("/".to_owned()),
            ..Default::default()
        };
        let mut capped = Capped::new(limit);
        let outcome = self.exec_raw(&request, &mut capped).await?;
        self.within(&capped, limit, what)?;
        Ok((outcome, capped.captured))
    }

    fn within(&self, capped: &Capped, limit: usize, what: &dyn Fn() -> String) -> Result<()> {
        if !capped.over() {
            return Ok(());
        }
        Err(Error::TooLarge {
            id: self.id.clone(),
            what: what(),
            limit: human_bytes(limit),
            hint: "the host reads a session's answers into memory only up to this cap; move large data through the workspace, and if nothing there should be this large, code in the session may be misbehaving".to_owned(),
        })
    }

    /// Installs `dependencies` into the session's venv (creating it on first use) and runs the
    /// host script with it. A script inside the session's workspace runs at its real path;
    /// any other is copied into the session first.
    ///
    /// Warm path: one exec that checks the venv and the marker of this dependency set, copies
    /// the script if needed (over stdin) and execs python; no uv. Only when that exec reports
    /// the session is not ready does the slow path create the venv, install and retry.
    pub async fn run_script(
        &self,
        script: &Path,
        dependencies: &[String],
        args: &[String],
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome> {
        let options = ScriptOptions {
            dependencies: dependencies.to_vec(),
            args: args.to_vec(),
            ..ScriptOptions::default()
        };
        self.run_script_with(script, &options, output).await
    }

    /// [`Session::run_script`] with an environment and a timeout for the script (not for the
    /// install).
    pub async fn run_script_with(
        &self,
        script: &Path,
        options: &ScriptOptions,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome> {
        let dependencies = options.dependencies.as_slice();
        let real = std::fs::canonicalize(script)
            .map_err(|_| Error::MissingPath { path: script.to_owned() })?;
        let marker = deps_marker(dependencies);
        let (inside, copy) = if real.starts_with(&self.workspace) {
            (real.display().to_string(), None)
        } else {
            let bytes =
                std::fs::read(&real).map_err(Error::io(format!("reading {}", real.display())))?;
            let name = real
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "script.py".to_owned());
            (format!("/tmp/.scripts/{}/{name}", random_id()), Some(bytes))
        };
        if let Some(outcome) =
            self.run_if_ready(marker.as_deref(), &inside, copy.as_deref(), options, output).await?
        {
            return Ok(outcome);
        }
        self.prepare_venv(dependencies, marker.as_deref()).await?;
        self.run_if_ready(marker.as_deref(), &inside, copy.as_deref(), options, output)
            .await?
            .ok_or_else(|| Error::Exec {
                what: "running the script".to_owned(),
                message: "the session's environment is not ready right after preparing it"
                    .to_owned(),
            })
    }

    /// One exec: the script runs if the venv (and `marker`) exist; `None` when they do not.
    async fn run_if_ready(
        &self,
        marker: Option<&str>,
        inside: &str,
        copy: Option<&[u8]>,
        options: &ScriptOptions,
        output: &mut dyn OutputSink,
    ) -> Result<Option<RunOutcome>> {
        let nonce = random_id();
        let mut stdin = format!("{nonce}\n").into_bytes();
        stdin.extend_from_slice(copy.unwrap_or_default());
        let mut argv = strings(&["sh", "-c", RUN_IF_READY, "sh"]);
        argv.push(marker.unwrap_or_default().to_owned());
        argv.push(if copy.is_some() { inside.to_owned() } else { String::new() });
        argv.push(format!("{VENV}/bin/python"));
        argv.push(inside.to_owned());
        argv.extend(options.args.iter().cloned());
        let request = ExecRequest {
            argv,
            stdin,
            env: options.env.clone(),
            timeout: options.timeout,
            cwd: None,
        };
        let mut gate = NotReadyGate::new(&nonce, output);
        let outcome = self.exec_raw(&request, &mut gate).await?;
        Ok((!gate.finish()).then_some(outcome))
    }

    /// The slow path: creates the venv if missing, installs `dependencies` and records their
    /// marker.
    async fn prepare_venv(&self, dependencies: &[String], marker: Option<&str>) -> Result<()> {
        let (outcome, captured) = self
            .capture(&["sh", "-c", &format!("[ -x {VENV}/bin/python ] || uv venv --quiet --python /usr/bin/python3 {VENV}")], Vec::new())
            .await?;
        if outcome.exit_code != 0 {
            return Err(Error::Exec {
                what: "creating the session's venv".to_owned(),
                message: captured.stderr_lossy(),
            });
        }
        let Some(marker) = marker else { return Ok(()) };
        let script = format!(
            r#"m=$1; shift; uv pip install --quiet --python {VENV}/bin/python -- "$@" && mkdir -p -- "${{m%/*}}" && : > "$m""#
        );
        let mut argv = vec!["sh", "-c", &script, "sh", marker];
        argv.extend(dependencies.iter().map(String::as_str));
        let (outcome, captured) = self.capture(&argv, Vec::new()).await?;
        if outcome.exit_code != 0 {
            return Err(Error::Prepare {
                code: i64::from(outcome.exit_code),
                output: format!(
                    "{}\nhint: dependencies install inside the session; a session started with `--net off` cannot download them",
                    captured.stderr_lossy().trim_end()
                ),
            });
        }
        Ok(())
    }

    /// The API client; sessions opened with [`Session::local`] have none.
    fn api(&self, what: &str) -> Result<&Docker> {
        self.docker.as_ref().ok_or_else(|| Error::Exec {
            what: what.to_owned(),
            message:
                "this session handle has no engine connection (open it with `OciEngine::session`)"
                    .to_owned(),
        })
    }

    async fn host_port(&self, port: u16) -> Result<Option<String>> {
        let inspect = self
            .api("finding a published port")?
            .inspect_container(&self.container, None::<InspectContainerOptions>)
            .await
            .map_err(api(self.engine, "inspecting the session"))?;
        let ports = inspect.network_settings.and_then(|n| n.ports).unwrap_or_default();
        let binding = ports.get(&format!("{port}/tcp")).cloned().flatten().and_then(|b| {
            b.into_iter().find(|b| b.host_port.as_deref().is_some_and(|p| !p.is_empty()))
        });
        Ok(binding.map(|b| {
            let ip = b
                .host_ip
                .filter(|ip| !ip.is_empty() && ip != "0.0.0.0")
                .unwrap_or_else(|| "127.0.0.1".to_owned());
            let ip = if ip.contains(':') { format!("[{ip}]") } else { ip };
            format!("http://{ip}:{}", b.host_port.unwrap_or_default())
        }))
    }
}

/// Pure: parses `find -printf '%y %s %f\0'` output into sorted entries. The session's code
/// produced it, so every record must be one `find` can print: a name that is a single path
/// component (not empty, `.` or `..`, no `/`) and a size that is a number; `Err` names the
/// first record that is not.
pub(crate) fn parse_listing(bytes: &[u8]) -> std::result::Result<Vec<DirEntry>, String> {
    let mut entries = Vec::new();
    for record in bytes.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let text = String::from_utf8_lossy(record);
        let bad = || format!("a listing entry `{}`", text.chars().take(80).collect::<String>());
        let (kind, rest) = text.split_once(' ').ok_or_else(bad)?;
        let (size, name) = rest.split_once(' ').ok_or_else(bad)?;
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(bad());
        }
        let kind = match kind {
            "d" => EntryKind::Dir,
            "l" => EntryKind::Symlink,
            _ => EntryKind::File,
        };
        let size: u64 = size.parse().map_err(|_| bad())?;
        let size = if kind == EntryKind::File { size } else { 0 };
        entries.push(DirEntry { name: name.to_owned(), kind, size });
    }
    entries.sort();
    Ok(entries)
}

/// Builds a tar of a host file or directory tree, rooted at its base name.
fn tar_of(path: &Path) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    let name = path.file_name().map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    let meta = std::fs::symlink_metadata(path)
        .map_err(|_| Error::MissingPath { path: path.to_owned() })?;
    let result = if meta.is_dir() {
        builder.append_dir_all(&name, path)
    } else {
        builder.append_path_with_name(path, &name)
    };
    result.map_err(Error::io(format!("packing {}", path.display())))?;
    builder.into_inner().map_err(Error::io(format!("packing {}", path.display())))
}

impl Sandbox for Session {
    type Error = Error;

    fn id(&self) -> &str {
        &self.id
    }

    async fn exec(&self, request: &ExecRequest, output: &mut dyn OutputSink) -> Result<RunOutcome> {
        self.exec_raw(request, output).await
    }

    async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        check_abs(path)?;
        let (outcome, captured) = self
            .capture_limited(&["cat", "--", path], Vec::new(), READ_FILE_LIMIT, &|| {
                format!("the file `{path}`")
            })
            .await?;
        if outcome.exit_code != 0 {
            return Err(file_error("reading", path, &outcome, &captured));
        }
        Ok(captured.stdout)
    }

    async fn write_file(&self, path: &str, contents: &[u8]) -> Result<()> {
        check_abs(path)?;
        let script = r#"d=$(dirname -- "$1"); [ -d "$1" ] && { echo "Is a directory" >&2; exit 1; }; mkdir -p -- "$d" && cat > "$1""#;
        let (outcome, captured) =
            self.capture(&["sh", "-c", script, "sh", path], contents.to_vec()).await?;
        if outcome.exit_code != 0 {
            return Err(file_error("writing", path, &outcome, &captured));
        }
        // An empty stdin is never attached; the file must still exist.
        if contents.is_empty() {
            let (outcome, captured) =
                self.capture(&["sh", "-c", ": > \"$1\"", "sh", path], Vec::new()).await?;
            if outcome.exit_code != 0 {
                return Err(file_error("writing", path, &outcome, &captured));
            }
        }
        Ok(())
    }

    async fn list_dir(&self, path: &str) -> Result<Vec<DirEntry>> {
        check_abs(path)?;
        let script = r#"if [ ! -e "$1" ]; then echo missing >&2; exit 2; fi
if [ ! -d "$1" ]; then echo notdir >&2; exit 3; fi
exec find "$1" -mindepth 1 -maxdepth 1 -printf '%y %s %f\0'"#;
        let (outcome, captured) = self
            .capture_limited(&["sh", "-c", script, "sh", path], Vec::new(), CAPTURE_LIMIT, &|| {
                format!("the listing of `{path}`")
            })
            .await?;
        if outcome.exit_code != 0 {
            return Err(file_error("listing", path, &outcome, &captured));
        }
        parse_listing(&captured.stdout)
            .map_err(|problem| Error::AgentProtocol { id: self.id.clone(), problem })
    }

    async fn put(&self, source: &PutSource, dest: &str) -> Result<()> {
        check_abs(dest)?;
        let archive = match source {
            PutSource::Tar(bytes) => bytes.clone(),
            PutSource::HostPath(path) => tar_of(path)?,
        };
        let script = r#"mkdir -p -- "$1" && exec tar -x -f - -C "$1" --no-same-owner"#;
        let (outcome, captured) = self.capture(&["sh", "-c", script, "sh", dest], archive).await?;
        if outcome.exit_code != 0 {
            return Err(file_error("unpacking into", dest, &outcome, &captured));
        }
        Ok(())
    }

    async fn start_service(&self, service: &ServiceSpec) -> Result<Service> {
        self.ensure_running()?;
        let port = service.port;
        let Some(url) = self.host_port(port).await? else {
            return Err(sandbox_core::Error::Unsupported {
                what: format!("a service on port {port}"),
                by: format!("session `{}`", self.id),
                hint: format!("start the session with `--publish {port}`"),
            }
            .into());
        };
        let script = r#"port=$1; shift; mkdir -p /tmp/.services
if [ -s /tmp/.services/$port.pid ] && kill -0 "$(cat /tmp/.services/$port.pid)" 2>/dev/null; then echo inuse >&2; exit 3; fi
setsid "$@" > /tmp/.services/$port.log 2>&1 < /dev/null &
echo $! > /tmp/.services/$port.pid"#;
        let mut argv = strings(&["sh", "-c", script, "sh", &port.to_string()]);
        argv.extend(service.argv.iter().cloned());
        let request = ExecRequest { argv, env: service.env.clone(), ..Default::default() };
        let mut capped = Capped::new(CAPTURE_LIMIT);
        let outcome = self.exec_raw(&request, &mut capped).await?;
        self.within(&capped, CAPTURE_LIMIT, &|| {
            format!("the start of the service on port {port}")
        })?;
        let captured = capped.captured;
        if outcome.exit_code == 3 {
            return Err(sandbox_core::Error::PortInUse { port }.into());
        }
        if outcome.exit_code != 0 {
            return Err(Error::Exec {
                what: "starting a service".to_owned(),
                message: captured.stderr_lossy(),
            });
        }
        // Ready when something accepts on the port inside (the host side of a published port
        // accepts even when nothing listens).
        let probe = format!(
            "import socket,sys,time\nfor _ in range(150):\n    try:\n        socket.create_connection(('127.0.0.1',{port}),0.2).close(); sys.exit(0)\n    except OSError: time.sleep(0.1)\nsys.exit(1)"
        );
        let (ready, _) = self.capture(&["python3", "-c", &probe], Vec::new()).await?;
        if ready.exit_code != 0 {
            let (_, log) = self
                .capture(
                    &["sh", "-c", &format!("tail -c 2000 /tmp/.services/{port}.log")],
                    Vec::new(),
                )
                .await?;
            return Err(Error::Exec {
                what: format!("starting a service on port {port}"),
                message: format!("nothing listens after 15 s; its output:\n{}", log.stdout_lossy()),
            });
        }
        Ok(Service { id: port.to_string(), port, url })
    }

    async fn stop_service(&self, service: &Service) -> Result<()> {
        let script = r#"f=/tmp/.services/$1.pid; [ -s "$f" ] || { echo missing >&2; exit 2; }
pid=$(cat "$f"); kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
kill -KILL -- "-$pid" 2>/dev/null; rm -f "$f""#;
        let (outcome, _) =
            self.capture(&["sh", "-c", script, "sh", &service.id], Vec::new()).await?;
        if outcome.exit_code == 2 {
            return Err(sandbox_core::Error::NoSuchService { id: service.id.clone() }.into());
        }
        Ok(())
    }

    async fn stop(&self) -> Result<()> {
        let docker = self.api("stopping the session")?;
        self.stopped.store(true, Ordering::Relaxed);
        if let Some(record) = &self.record {
            let _ = std::fs::remove_file(record);
        }
        let removed = crate::sweep::remove(docker, &self.container).await;
        if let Some(grants) = &self.grants {
            let _ = reaper::acl::release_holder(
                grants,
                &crate::workspace::holder(self.engine, &self.id),
            );
        }
        removed.map_err(|message| Error::Api {
            engine: self.engine,
            context: format!("removing {}", self.container),
            message,
        })
    }
}
