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
//!
//! By concern: `lifecycle` (start, open by id, list, stop: the engine's session half),
//! `pool` (the warm pool's primitives: members, create, the atomic claim), `record` (the
//! host-private record of the warm path), `exec` (one command through the agent or the API,
//! interactive or not); this module holds the handle and its protocol impls.

mod exec;
pub(crate) mod lifecycle;
mod pool;
pub(crate) mod record;

use record::{Record, read_record, record_path, write_record};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use bollard::Docker;
use sandbox_core::{
    DirEntry, ExecRequest, OutputSink, PutSource, RunOutcome, Sandbox, Service, ServiceSpec,
};
use sandbox_core::{ScriptOptions, shell};

use crate::agent::AgentAddr;
use crate::engine::random_id;
use crate::error::{Error, Result};

/// Our label holding the session's workspace (not part of the reaper schema).
const WORKSPACE_LABEL: &str = "io.python-sandbox.oci.workspace";
/// Our label holding the session's [`SessionPolicy`] as JSON.
const POLICY_LABEL: &str = "io.python-sandbox.oci.policy";
/// Our label on a warm pool member: its [`sandbox_core::pool::pool_key`]. Labels are fixed at
/// create, so a claimed member keeps it; what tells the two apart is the session record a
/// claim writes (see `pool`).
const POOL_LABEL: &str = "io.python-sandbox.oci.pool";
pub use sandbox_core::{SessionConfig, SessionInfo, SessionPolicy};

/// Pure: the container name of a session id (an id may also be given as the full name).
pub(crate) fn container_name(id: &str) -> String {
    if id.starts_with("python-sandbox-session-") {
        id.to_owned()
    } else {
        format!("python-sandbox-session-{id}")
    }
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
    /// The cache root whose holds (the ACL grant, the placeholders) `stop` ends (a session
    /// opened from the API).
    holds: Option<PathBuf>,
    /// Values of the session's own secret-looking environment.
    secrets: Vec<String>,
    /// Scripts run in the session so far, as its record says.
    scripts: u64,
    /// (port inside, URL on the host) of its published ports, as its record says: what a
    /// handle without an engine connection answers services from.
    ports: Vec<(u16, String)>,
    stopped: AtomicBool,
    /// Tests only: the agent's socket at a plain path (a fake agent outside any container).
    #[cfg(test)]
    pub(crate) test_socket: Option<PathBuf>,
}

impl Session {
    /// Opens session `id` from the record `session start` left in `runtime_dir`, without any
    /// API call; `None` when there is no record (another engine's `flavor`, a session started
    /// elsewhere) or its agent is gone. Such a session serves execs and scripts through the
    /// agent only: anything that needs the API (services, stop) wants the engine
    /// (`SessionEngine::open_session` on [`crate::OciEngine`]).
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
            holds: None,
            secrets: record.secrets,
            scripts: record.scripts,
            ports: record.ports,
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
            holds: None,
            secrets: Vec::new(),
            scripts: 0,
            ports: Vec::new(),
            stopped: AtomicBool::new(false),
            test_socket: Some(socket),
        }
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
        if let Some(cache) = &self.holds {
            let holder = crate::workspace::holder(self.engine, &self.id);
            let _ = reaper::acl::release_holder(&reaper::acl::state_dir(cache), &holder);
            let _ = reaper::protect::release_holder(&reaper::protect::state_dir(cache), &holder);
        }
        removed.map_err(|message| Error::Api {
            engine: self.engine,
            context: format!("removing {}", self.container),
            message,
        })
    }
}

impl sandbox_core::WarmSession for Session {
    fn workspace(&self) -> &str {
        &self.workspace
    }

    fn policy(&self) -> Option<SessionPolicy> {
        Session::policy(self).cloned()
    }

    fn secrets(&self) -> &[String] {
        &self.secrets
    }

    fn scripts_run(&self) -> u64 {
        self.scripts
    }

    fn note_script(&self) {
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
                    ports: self.ports.clone(),
                }
            }
        };
        record.scripts = record.scripts.max(self.scripts).saturating_add(1);
        let _ = write_record(dir, &record);
    }

    async fn run_script(
        &self,
        script: &Path,
        options: &ScriptOptions,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome> {
        self.run_script_with(script, options, output).await
    }
}
