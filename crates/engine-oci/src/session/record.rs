//! The host-private record `session start` leaves under the runtime directory, which lets
//! `session run` and `session exec` reach a session without any API call.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::agent::AgentAddr;

use sandbox_core::{Driven, DynSession, Executor};

use super::{Session, SessionPolicy};

/// The host-private record `session start` leaves under the runtime directory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Record {
    pub(super) id: String,
    pub(super) container: String,
    pub(super) engine: String,
    pub(super) workspace: String,
    pub(super) agent: Option<AgentAddr>,
    pub(super) policy: SessionPolicy,
    /// The values of the session's own secret-looking environment (`session start --env`),
    /// masked in everything its commands print. The container's configuration holds them
    /// anyway; this file is as private as the runtime directory (0700, the file 0600).
    #[serde(default)]
    pub(super) secrets: Vec<String>,
    /// How many scripts `session run` has run in the session (the later ones share whatever
    /// the earlier ones left behind).
    #[serde(default)]
    pub(super) scripts: u64,
    /// (port inside, URL on the host) of each published port, so a service can be started
    /// through a handle opened from this record, without an engine connection.
    #[serde(default)]
    pub(super) ports: Vec<(u16, String)>,
}

/// Pure: the record file of session `id` (an id may also be given as the container name); `None`
/// for an id that is not one of ours (it becomes a file name).
pub(crate) fn record_path(runtime_dir: &Path, id: &str) -> Option<PathBuf> {
    let id = id.strip_prefix("python-sandbox-session-").unwrap_or(id);
    let ok = !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric());
    ok.then(|| runtime_dir.join("sessions").join(format!("{id}.json")))
}

/// Pure: the values among `env` whose names say they are secret.
pub(super) fn secret_values(env: &[(String, String)]) -> Vec<String> {
    env.iter()
        .filter(|(name, _)| sandbox_core::is_secret_name(name))
        .map(|(_, v)| v.clone())
        .collect()
}

/// The record at `path`, if it is one.
pub(super) fn read_record(path: &Path) -> Option<Record> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

pub(super) fn write_record(runtime_dir: &Path, record: &Record) -> std::io::Result<()> {
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
pub(super) fn prune_records(runtime_dir: &Path) {
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

/// A current-thread runtime: all a session served by its agent needs.
struct Local(tokio::runtime::Runtime);

impl Executor for Local {
    fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.0.block_on(future)
    }
}

/// Session `id` of `flavor` opened from its record under `runtime_dir`, served by its agent:
/// no daemon connection, no API call. `None` sends the caller down the connected path (no
/// record, another engine's session, the agent gone); a command that then finds the agent
/// gone fails with `Error::NoSession` before anything ran, so retrying it connected never
/// runs it twice.
pub fn local_session(
    runtime_dir: &Path,
    id: &str,
    flavor: crate::Flavor,
) -> Option<Box<dyn DynSession>> {
    let session = Session::local(runtime_dir, id, Some(flavor))?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
    Some(Box::new(Driven { executor: Local(runtime), session }))
}
