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
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::query_parameters::InspectContainerOptions;
use futures_util::StreamExt;
use sandbox_core::{
    DirEntry, ExecRequest, Net, OutputSink, PutSource, RunOutcome, Sandbox, Service, ServiceSpec,
    Stream,
};
use sandbox_core::{ScriptOptions, shell};
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
/// Wraps every exec: registers it as activity while it runs (shell builtins only), then
/// becomes the command. Its pid is the command's, so the watchdog counts the exec as activity
/// while that pid lives and drops the file once it is gone. Exec-ing, not waiting, is what
/// makes it answer as the agent does (the `Sandbox` contract holds both to it): no shell is
/// left to print `Terminated` or `Killed` into the command's stderr. `$1` is the working
/// directory: one that is not there is a command that cannot start (127, or 126 for a
/// non-directory), not the runtime's own failure message on stdout.
const EXEC_WRAPPER: &str = r#"cd -- "$1" || { [ -e "$1" ] && exit 126; exit 127; }
shift
[ -d /tmp/.active ] || mkdir -p /tmp/.active 2>/dev/null
: > /tmp/.active/$$ 2>/dev/null
: > /tmp/.last-activity 2>/dev/null
exec "$@""#;

pub use sandbox_core::{SessionConfig, SessionInfo, SessionPolicy};

/// Pure: the container name of a session id (an id may also be given as the full name).
pub(crate) fn container_name(id: &str) -> String {
    if id.starts_with("python-sandbox-session-") {
        id.to_owned()
    } else {
        format!("python-sandbox-session-{id}")
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
        sandbox_core::check_host_ports_free(&config.publish, reaper::ports::in_use)?;
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
        let id = random_id();
        // As for a run (`crate::idmap`): idmapped copies where possible, kept for the
        // session's life (a sweep detaches them once its container is gone); else an ACL.
        let stages = self.idmap_stages(&container_name(&id), &writable);
        let grant = match stages {
            Some(_) => None,
            None => crate::workspace::lend(host.uid, &writable, &self.config().cache_dir)?,
        };
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
            publish: config.publish.clone(),
            user_env,
            limits: plan::Limits::asked_or_default(&config.limits),
            tmpfs_size: config.tmpfs_size,
            ttl_secs,
        };
        let mut container = plan::session_plan(&host, &layout);
        if let Some(stages) = &stages {
            stages.apply(&mut container);
        }
        let warning = self.adapt(&mut container);
        let pins = host::check_sources(&container.mounts)?;
        let body = plan::create_body(&container, self.config().flavor);
        let name = container_name(&id);
        let engine = self.config().flavor.as_str();
        let image = self.config().image.clone();
        self.block_on(async {
            let explain = |e| crate::ports::explain(e, &config.publish);
            let guard = container::create(self.docker(), engine, &name, body, &image)
                .await
                .map_err(explain)?;
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
                    if let Some(stages) = stages {
                        stages.keep();
                    }
                    match grant {
                        Some(grant) => {
                            grant.hold(&crate::workspace::holder(engine, &id)).map_err(Error::from)
                        }
                        None => Ok(()),
                    }
                }
                Err(e) => {
                    guard.remove().await;
                    Err(explain(e))
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
        let stopped = self.block_on(session.stop());
        if stopped.is_ok() && rustix::process::geteuid().is_root() {
            crate::idmap::release(&self.config().cache_dir, &container_name(id));
        }
        stopped
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
        sandbox: container,
        engine: engine.to_owned(),
        created: parsed.created,
        ttl: parsed.ttl.unwrap_or(0),
        state: item.get("State").and_then(serde_json::Value::as_str).unwrap_or_default().to_owned(),
        workspace: labels.get(WORKSPACE_LABEL).cloned().unwrap_or_default(),
        ports,
        warnings: Vec::new(),
    })
}

fn strings(argv: &[&str]) -> Vec<String> {
    argv.iter().map(|s| (*s).to_owned()).collect()
}

impl sandbox_core::AgentShell for Session {
    type Error = Error;

    fn shell_id(&self) -> &str {
        &self.id
    }

    async fn shell_exec(
        &self,
        request: &ExecRequest,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome> {
        self.exec_raw(request, output).await
    }
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

    /// An interactive exec: through the agent only (see [`sandbox_core::InteractiveExec`]).
    async fn exec_interactive_raw(
        &self,
        request: &ExecRequest,
        io: sandbox_core::Interactive,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome> {
        self.ensure_running()?;
        let cwd = request.cwd.clone().unwrap_or_else(|| self.workspace.clone());
        match self.connect_agent() {
            Some(stream) => {
                agent::exec_interactive(stream, request, &cwd, io, output, &self.id).await
            }
            // The API's exec has stdin and a tty too, but not the agent's kill on hang-up:
            // an interactive command left behind by a dropped CLI would run on unseen.
            None if self.docker.is_some() => Err(sandbox_core::Error::Unsupported {
                what: "an interactive exec (`-i`/`-t`)".to_owned(),
                by: format!("session `{}`, whose agent this host cannot reach", self.id),
                hint: "run it on the host that started the session, or start a new session there"
                    .to_owned(),
            }
            .into()),
            None => Err(Error::NoSession { id: self.id.clone() }),
        }
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
        let mut cmd = strings(&["sh", "-c", EXEC_WRAPPER, "exec", &cwd]);
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

    /// Installs `dependencies` into the session's venv (creating it on first use) and runs the
    /// host script with it ([`sandbox_core::shell::run_script`]). A script inside the
    /// session's workspace runs at its real path; any other is copied into the session first.
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
        let real = std::fs::canonicalize(script)
            .map_err(|_| Error::MissingPath { path: script.to_owned() })?;
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
        let nonce = random_id();
        let place = sandbox_core::ScriptPlace {
            inside: &inside,
            copy: copy.as_deref(),
            nonce: &nonce,
            python: "/usr/bin/python3",
        };
        shell::run_script(self, &place, options, output).await
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

impl sandbox_core::InteractiveExec for Session {
    async fn exec_interactive(
        &self,
        request: &ExecRequest,
        io: sandbox_core::Interactive,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome> {
        self.exec_interactive_raw(request, io, output).await
    }
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
        shell::read_file(self, path).await
    }

    async fn write_file(&self, path: &str, contents: &[u8]) -> Result<()> {
        shell::write_file(self, path, contents).await
    }

    async fn list_dir(&self, path: &str) -> Result<Vec<DirEntry>> {
        shell::list_dir(self, path).await
    }

    async fn put(&self, source: &PutSource, dest: &str) -> Result<()> {
        let archive = match source {
            PutSource::Tar(bytes) => bytes.clone(),
            PutSource::HostPath(path) => tar_of(path)?,
        };
        shell::put_tar(self, archive, dest).await
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
        shell::start_service(self, service, url).await
    }

    async fn stop_service(&self, service: &Service) -> Result<()> {
        shell::stop_service(self, service).await
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
