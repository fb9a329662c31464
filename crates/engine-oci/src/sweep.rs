//! The reaper's IO for containers: one label-filtered list call, [`reaper::decide`], then a
//! forced removal of each chosen container. Runs at the start of every CLI invocation that
//! touches docker or podman, and on demand (`python-sandbox reap`).
//!
//! Labels are claims anyone with the daemon can make, so only containers whose
//! [`reaper::MARK`] verifies under this user's key for their own name reach the policy (a
//! forgery is not ours, and is not anyone's companion either). Removal goes by the full `Id`
//! of the listing, never a name (docker resolves a name that is gone as an id prefix), after
//! an inspect by that id has shown the same name and a mark that still verifies.

use std::collections::BTreeMap;

use bollard::Docker;
use bollard::query_parameters::RemoveContainerOptions;
use reaper::{Kind, MarkKey, Resource, SandboxLabels, State};

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

/// One listed container: its name (for people and for its mark) and what the reaper sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listed {
    /// The name, without docker's leading `/`.
    pub(crate) name: String,
    /// [`Resource::id`] is the container's full `Id`.
    pub(crate) resource: Resource,
}

/// Pure: a listed container (untyped `/containers/json` item) as the reaper sees it, or `None`
/// without an `Id` and a name. Running sessions count as active now: their idle TTL is
/// enforced inside the container by the watchdog, which knows about execs.
pub(crate) fn resource_of(item: &serde_json::Value, now: u64) -> Option<Listed> {
    let id = item.get("Id")?.as_str().filter(|id| !id.is_empty())?;
    let name = item.get("Names")?.as_array()?.first()?.as_str()?.trim_start_matches('/').to_owned();
    let labels = labels_of(item.get("Labels"));
    let state = match item.get("State").and_then(serde_json::Value::as_str).unwrap_or_default() {
        "created" | "configured" | "initialized" => State::Created,
        "running" | "restarting" | "stopping" => State::Running,
        "paused" => State::Paused,
        "exited" | "stopped" | "dead" | "removing" => State::Exited,
        _ => State::Unknown,
    };
    let mut resource = Resource::new(id, labels, state);
    let is_session = SandboxLabels::from_labels(&resource.labels)
        .ok()
        .flatten()
        .is_some_and(|l| l.kind == Kind::Session);
    if is_session && state == State::Running {
        resource.last_activity = Some(now);
    }
    Some(Listed { name, resource })
}

fn labels_of(labels: Option<&serde_json::Value>) -> BTreeMap<String, String> {
    labels
        .and_then(serde_json::Value::as_object)
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
        .unwrap_or_default()
}

/// Pure: the listed containers this user's python-sandbox made (the mark verifies for the
/// container's own name); everything else is left alone, whatever its labels say.
pub(crate) fn ours(items: &[serde_json::Value], key: &MarkKey, now: u64) -> Vec<Listed> {
    items
        .iter()
        .filter_map(|item| resource_of(item, now))
        .filter(|l| key.verifies(&l.name, &l.resource.labels))
        .collect()
}

/// Pure: whether an inspect (untyped `/containers/{id}/json`) shows the container that was
/// listed: the same full id and name, and labels whose mark still verifies for that name.
pub(crate) fn still_ours(inspect: &serde_json::Value, listed: &Listed, key: &MarkKey) -> bool {
    let id = inspect.get("Id").and_then(serde_json::Value::as_str);
    let name =
        inspect.get("Name").and_then(serde_json::Value::as_str).map(|n| n.trim_start_matches('/'));
    let labels = labels_of(inspect.get("Config").and_then(|c| c.get("Labels")));
    id == Some(listed.resource.id.as_str())
        && name == Some(listed.name.as_str())
        && key.verifies(&listed.name, &labels)
}

/// Lists our containers (one call) and returns the ones this user made as reaper resources.
pub(crate) async fn list(connection: &Connection, key: &MarkKey, now: u64) -> Result<Vec<Listed>> {
    let items =
        client::list_containers_raw(connection, &[reaper::MANAGED_FILTER.to_owned()]).await?;
    Ok(ours(&items, key, now))
}

/// Removes (or, with `dry_run`, only reports) what the reaper decides.
pub(crate) async fn sweep(
    docker: &Docker,
    connection: &Connection,
    key: &MarkKey,
    now: u64,
    dry_run: bool,
) -> Result<Vec<Swept>> {
    let listed = list(connection, key, now).await?;
    if listed.is_empty() {
        return Ok(Vec::new());
    }
    let resources: Vec<Resource> = listed.iter().map(|l| l.resource.clone()).collect();
    let liveness = reaper::ProcLiveness::new()?;
    let actions = reaper::decide(now, &resources, &liveness);
    let mut out = Vec::new();
    for action in actions {
        let Some(chosen) = listed.iter().find(|l| l.resource.id == action.id) else { continue };
        let labels = SandboxLabels::from_labels(&chosen.resource.labels).ok().flatten();
        let (sandbox, kind) = labels
            .map(|l| (l.id, l.kind.as_str().to_owned()))
            .unwrap_or_else(|| (String::new(), String::new()));
        let mut swept = Swept {
            container: chosen.name.clone(),
            sandbox,
            kind,
            reason: action.reason.to_string(),
            removed: false,
            exited: chosen.resource.state == State::Exited,
            error: None,
        };
        if !dry_run {
            match client::inspect_container_raw(connection, &action.id).await {
                Ok(inspect) if still_ours(&inspect, chosen, key) => {
                    match remove(docker, &action.id).await {
                        Ok(()) => swept.removed = true,
                        Err(e) => swept.error = Some(e),
                    }
                }
                Ok(_) => swept.error = Some("no longer the container that was listed".to_owned()),
                // Gone meanwhile (removed by its owner, auto-remove): nothing left to do.
                Err(e) if e.to_string().contains("HTTP 404") => swept.removed = true,
                Err(e) => swept.error = Some(e.to_string()),
            }
        }
        out.push(swept);
    }
    Ok(out)
}

/// Kills and removes a container; a container that is already gone is not an error. `name` is
/// a full id or a name python-sandbox gave (never one read from a listing: see the module).
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
