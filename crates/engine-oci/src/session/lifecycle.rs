//! The session half of the engine: start a session container, open one by id, list, stop.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::InspectContainerOptions;
use sandbox_core::{Net, Sandbox};

use crate::agent::{self, AgentAddr};
use crate::container;
use crate::engine::{OciEngine, now_secs, random_id};
use crate::error::api;
use crate::error::{Error, Result};
use crate::host;
use crate::plan::{self, SessionLayout};

use super::record::{Record, prune_records, read_record, record_path, secret_values, write_record};
use sandbox_core::{Executor, SessionEngine};

use super::{
    POLICY_LABEL, POOL_LABEL, Session, SessionConfig, SessionInfo, SessionPolicy, WORKSPACE_LABEL,
    container_name,
};

impl Executor for OciEngine {
    fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        OciEngine::block_on(self, future)
    }
}

impl SessionEngine for OciEngine {
    type Error = crate::Error;
    type Session = Session;

    fn session_engine_name(&self) -> &'static str {
        self.config().flavor.as_str()
    }

    /// Starts a session container and returns its id once it runs.
    fn start_session(
        &self,
        config: &SessionConfig,
        _status: &mut dyn FnMut(&str),
    ) -> Result<SessionInfo> {
        let (record, warning) = self.launch(config, None)?;
        let id = record.id.clone();
        // Best effort: without the record, session commands go through the API.
        let _ = write_record(&self.config().runtime_dir, &record);
        let sessions = self.list_sessions()?;
        let mut info = sessions.into_iter().find(|s| s.id == id).ok_or(Error::NoSession { id })?;
        info.warnings.extend(warning);
        Ok(info)
    }

    /// The running session `id`.
    fn open_session(&self, id: &str) -> Result<Session> {
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
        // An unclaimed pool member is nobody's session yet: nothing may run in it before a
        // claim hands it out (`super::pool`).
        if !is_session
            || !running
            || pooled(&self.config().runtime_dir, &labels.clone().into_iter().collect())
        {
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
        let recorded = record.as_deref().and_then(read_record);
        let scripts = recorded.as_ref().map_or(0, |r| r.scripts);
        let ports = recorded.map(|r| r.ports).unwrap_or_default();
        Ok(Session {
            docker: Some(self.docker().clone()),
            engine,
            record,
            holds: Some(self.config().cache_dir.clone()),
            secrets: secret_values(&env),
            scripts,
            ports,
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
    fn list_sessions(&self) -> Result<Vec<SessionInfo>> {
        let engine = self.config().flavor.as_str();
        let filters =
            [reaper::MANAGED_FILTER.to_owned(), format!("{}=session", reaper::labels::KIND)];
        let items =
            self.block_on(crate::client::list_containers_raw(self.connection(), &filters))?;
        let runtime_dir = &self.config().runtime_dir;
        let mut out: Vec<SessionInfo> = items
            .iter()
            .filter(|item| !pooled(runtime_dir, &item_labels(item)))
            .filter_map(|item| session_info(item, engine))
            .collect();
        out.sort_by_key(|s| s.created);
        prune_records(&self.config().runtime_dir);
        Ok(out)
    }

    /// Stops and removes session `id`.
    fn stop_session(&self, id: &str) -> Result<()> {
        let session = self.open_session(id)?;
        let stopped = self.block_on(session.stop());
        if stopped.is_ok() && rustix::process::geteuid().is_root() {
            crate::idmap::release(&self.config().cache_dir, &container_name(id));
        }
        stopped
    }

    fn pool_identity(&self) -> Option<String> {
        super::pool::identity(self)
    }

    fn pool_members(&self) -> Result<Vec<sandbox_core::PoolMember>> {
        super::pool::members(self)
    }

    fn pool_create(&self, config: &SessionConfig, key: &str) -> Result<()> {
        super::pool::create(self, config, key)
    }

    fn pool_claim(&self, member: &sandbox_core::PoolMember) -> Result<Option<SessionInfo>> {
        super::pool::claim(self, member)
    }

    fn pool_remove(&self, id: &str) -> Result<()> {
        super::pool::remove(self, id)
    }
}

/// Pure: the labels of a `/containers/json` item.
pub(super) fn item_labels(item: &serde_json::Value) -> BTreeMap<String, String> {
    item.get("Labels")
        .and_then(serde_json::Value::as_object)
        .map(|labels| {
            labels.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect()
        })
        .unwrap_or_default()
}

/// Whether a container with `labels` is an unclaimed pool member: created for the pool, and
/// no claim has written its session record.
pub(super) fn pooled(runtime_dir: &std::path::Path, labels: &BTreeMap<String, String>) -> bool {
    labels.contains_key(POOL_LABEL)
        && labels
            .get(reaper::labels::ID)
            .and_then(|id| record_path(runtime_dir, id))
            .is_none_or(|record| !record.exists())
}

impl OciEngine {
    /// Creates and starts a session container for `config` (a pool member labelled with its
    /// key when `pool` is given) and returns once it runs: the record its commands need (not
    /// written yet) and a warning about what the engine could not give it.
    pub(super) fn launch(
        &self,
        config: &SessionConfig,
        pool: Option<&str>,
    ) -> Result<(Record, Option<String>)> {
        if config.allow.is_some() {
            // A run's list is held by a relay of the CLI, which ends with the run; nothing
            // would hold one for a session that outlives its caller.
            return Err(sandbox_core::Error::AllowlistUnsupported {
                engine: self.engine_name(),
                why: "its sessions have no relay that outlives the command starting them",
            }
            .into());
        }
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
        let (placeholders, protected) =
            crate::workspace::protect(&workspace, &mounts, self.config())?;
        let ttl_secs = config.ttl.as_secs().max(1);
        let owner = reaper::Owner::current(None)?;
        let mut labels = reaper::labels_for_session(&id, &owner, now_secs(), ttl_secs)?;
        self.mark().sign(&container_name(&id), &mut labels);
        labels.insert(WORKSPACE_LABEL.to_owned(), workspace.display().to_string());
        if let Some(key) = pool {
            labels.insert(super::POOL_LABEL.to_owned(), key.to_owned());
        }
        let policy = SessionPolicy {
            net: config.net == Net::On,
            allow: None,
            mounts: mounts.iter().map(|m| (m.path.clone(), m.writable)).collect(),
            publish: config.publish.iter().map(|p| p.port).collect(),
            tmpfs_size: Some(config.tmpfs_size),
            // What was asked, enforced or refused above; the defaults a rootless engine may
            // not hold are not claimed.
            limits: config.limits,
        };
        labels.insert(POLICY_LABEL.to_owned(), serde_json::to_string(&policy).unwrap_or_default());
        let workspace_text = workspace.display().to_string();
        let layout = SessionLayout {
            image: self.config().image.clone(),
            labels,
            workspace,
            mounts,
            protected,
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
        let pins = crate::verify::check_sources(&container.mounts)?;
        let body = plan::create_body(&container, self.config().flavor);
        let name = container_name(&id);
        let engine = self.config().flavor.as_str();
        let image = self.config().image.clone();
        self.block_on(async {
            let explain = |e| crate::ports::explain(e, &config.publish);
            let serial = self.create_lock();
            let guard = container::create(self.docker(), engine, &name, body, &image)
                .await
                .map_err(explain)?;
            drop(serial);
            let started = self
                .docker()
                .start_container(&name, None::<bollard::query_parameters::StartContainerOptions>)
                .await;
            // The main process is the agent, at its gate until the network wall is up
            // (`crate::netwall`); no script runs before the mounts are checked.
            let started = match started {
                Ok(()) if container.net => {
                    let wall = self.wall(&container);
                    match crate::netwall::apply(self.docker(), self.connection(), &name, wall).await
                    {
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
                    placeholders.hold(&crate::workspace::holder(engine, &id))?;
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
        // A port not found here is looked up again by a connected handle.
        let ports = self.block_on(async {
            let mut ports = Vec::new();
            for port in config.publish.iter().map(|p| p.port) {
                let url = super::exec::published_url(self.docker(), engine, &name, port).await;
                ports.extend(url.ok().flatten().map(|url| (port, url)));
            }
            ports
        });
        let record = Record {
            id,
            container: name,
            engine: engine.to_owned(),
            workspace: workspace_text,
            agent,
            policy,
            secrets: secret_values(&user_env_kept),
            scripts: 0,
            ports,
        };
        Ok((record, warning))
    }
}

/// The host pid of a container's init process.
pub(super) async fn init_pid(docker: &Docker, name: &str) -> Option<u32> {
    let inspect = docker.inspect_container(name, None::<InspectContainerOptions>).await.ok()?;
    inspect.state?.pid.and_then(|p| u32::try_from(p).ok()).filter(|p| *p > 0)
}

/// Pure: a `/containers/json` item as a [`SessionInfo`]; `None` if it is not one of ours.
pub(crate) fn session_info(item: &serde_json::Value, engine: &str) -> Option<SessionInfo> {
    let labels = item_labels(item);
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
