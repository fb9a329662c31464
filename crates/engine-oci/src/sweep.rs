//! The reaper's IO for containers: one label-filtered list call, [`reaper::decide`], then a
//! forced removal of each chosen container. Runs at the start of every CLI invocation that
//! touches docker or podman, and on demand (`python-sandbox reap`).

use std::collections::BTreeMap;

use bollard::Docker;
use bollard::query_parameters::RemoveContainerOptions;
use reaper::{Kind, Resource, SandboxLabels, State};

use crate::client::{self, Connection};
use crate::error::Result;

/// One container the sweep chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swept {
    /// The container name.
    pub container: String,
    /// The sandbox id from its labels.
    pub sandbox: String,
    /// `run`, `session` or `prepare`.
    pub kind: String,
    /// Why, lower case (the reaper's reason).
    pub reason: String,
    /// Whether it was removed (false in a dry run or when removal failed).
    pub removed: bool,
    /// Whether it had already exited: routine garbage (a run whose removal its owner handed
    /// to the engine, say) rather than news like a script left running by a killed CLI.
    pub exited: bool,
    /// Why removal failed, if it did.
    pub error: Option<String>,
}

/// Pure: a listed container (untyped `/containers/json` item) as the reaper sees it. Running
/// sessions count as active now: their idle TTL is enforced inside the container by the
/// watchdog, which knows about execs.
pub(crate) fn resource_of(item: &serde_json::Value, now: u64) -> Option<Resource> {
    let name = item.get("Names")?.as_array()?.first()?.as_str()?.trim_start_matches('/').to_owned();
    let labels: BTreeMap<String, String> = item
        .get("Labels")
        .and_then(serde_json::Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
        .unwrap_or_default();
    let state = match item.get("State").and_then(serde_json::Value::as_str).unwrap_or_default() {
        "created" | "configured" | "initialized" => State::Created,
        "running" | "restarting" | "stopping" => State::Running,
        "paused" => State::Paused,
        "exited" | "stopped" | "dead" | "removing" => State::Exited,
        _ => State::Unknown,
    };
    let mut resource = Resource::new(&name, labels, state);
    let is_session = SandboxLabels::from_labels(&resource.labels)
        .ok()
        .flatten()
        .is_some_and(|l| l.kind == Kind::Session);
    if is_session && state == State::Running {
        resource.last_activity = Some(now);
    }
    Some(resource)
}

/// Lists our containers (one call) and returns them as reaper resources.
pub(crate) async fn list(connection: &Connection, now: u64) -> Result<Vec<Resource>> {
    let items =
        client::list_containers_raw(connection, &[reaper::MANAGED_FILTER.to_owned()]).await?;
    Ok(items.iter().filter_map(|c| resource_of(c, now)).collect())
}

/// Removes (or, with `dry_run`, only reports) what the reaper decides.
pub(crate) async fn sweep(
    docker: &Docker,
    connection: &Connection,
    now: u64,
    dry_run: bool,
) -> Result<Vec<Swept>> {
    let resources = list(connection, now).await?;
    if resources.is_empty() {
        return Ok(Vec::new());
    }
    let liveness = reaper::ProcLiveness::new()?;
    let actions = reaper::decide(now, &resources, &liveness);
    let mut out = Vec::new();
    for action in actions {
        let resource = resources.iter().find(|r| r.id == action.id);
        let exited = resource.is_some_and(|r| r.state == State::Exited);
        let labels = resource.and_then(|r| SandboxLabels::from_labels(&r.labels).ok().flatten());
        let (sandbox, kind) = labels
            .map(|l| (l.id, l.kind.as_str().to_owned()))
            .unwrap_or_else(|| (String::new(), String::new()));
        let mut swept = Swept {
            container: action.id.clone(),
            sandbox,
            kind,
            reason: action.reason.to_string(),
            removed: false,
            exited,
            error: None,
        };
        if !dry_run {
            match remove(docker, &action.id).await {
                Ok(()) => swept.removed = true,
                Err(e) => swept.error = Some(e.to_string()),
            }
        }
        out.push(swept);
    }
    Ok(out)
}

/// Kills and removes a container; a container that is already gone is not an error.
pub(crate) async fn remove(docker: &Docker, name: &str) -> std::result::Result<(), String> {
    let options = RemoveContainerOptions { force: true, v: true, ..Default::default() };
    match docker.remove_container(name, Some(options)).await {
        Ok(()) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(()),
        // Removal already in progress (auto-remove, a concurrent sweep): it will be gone.
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, .. }) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}
