//! The warm pool's primitives on docker and podman (the decisions are the seam's,
//! `sandbox_core::pool`): a member is a session container started ahead of time, labelled with
//! its pool key, plus a host-private pool record `<runtime dir>/pool/<id>.json` holding the
//! session record a claim will write and the agent's activity stamp at the member's start.
//!
//! **The claim is the unlink of the pool record.** Container labels are immutable and a rename
//! would break the mark (signed over the container's name), so the atomic step is on the host:
//! of any number of callers that read a member's pool record, exactly one `unlinkat` succeeds;
//! the others get `ENOENT` and try the next member. Pool records live in this user's private
//! runtime directory, so only this user's CLIs can claim, and only members whose mark
//! verifies under this user's key are ever listed.
//!
//! **A member never ran anything.** Until its session record exists `open_session` refuses it
//! and `session list` hides it, so no exec or file write reaches it through the CLI; and the
//! claimer checks the agent's activity file (`/tmp/.last-activity`, touched by the agent at
//! start and by every request or API exec) still has the modification time recorded when the
//! member was ready, read through the pinned init's root. A member that fails any check at
//! its claim (gone, replaced agent, used, a mount source swapped since its create: every bind
//! is compared with a fresh pin of its source, as at a start) is removed, not handed out.
//!
//! Lifetime: a member is a session container like any other (the reaper's labels with its
//! TTL, auto-remove, the agent's idle watchdog), so it expires after its TTL unclaimed and
//! every sweep judges it as a session; a claim resets the idle clock with one connection to
//! the agent, so a member claimed late does not expire early.

use std::time::Duration;

use bollard::query_parameters::InspectContainerOptions;
use sandbox_core::{PoolMember, SessionConfig, SessionEngine, SessionInfo};

use crate::agent::AgentAddr;
use crate::engine::OciEngine;
use crate::error::{Error, Result};

use super::POOL_LABEL;
use super::lifecycle::{item_labels, pooled};
use super::record::{Record, record_path, write_record};

/// The agent's activity file, relative to the container's root.
const ACTIVITY: &str = "tmp/.last-activity";

/// A member's pool record.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct PoolRecord {
    key: String,
    /// The activity file's modification time (seconds, nanoseconds) when the member was ready.
    stamp: (i64, u64),
    /// The session record its claim writes.
    session: Record,
}

fn pool_dir(engine: &OciEngine) -> Result<reaper::PrivateDir> {
    reaper::PrivateDir::open(&engine.config().runtime_dir.join("pool")).map_err(Error::from)
}

fn record_name(id: &str) -> Option<String> {
    let ok = !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric());
    ok.then(|| format!("{id}.json"))
}

fn stamp(agent: &AgentAddr) -> Option<(i64, u64)> {
    let pin = reaper::ProcPin { pid: agent.pid, start_time: agent.start_time };
    let stat = pin.stat_in_root(ACTIVITY)?;
    Some((stat.st_mtime, stat.st_mtime_nsec))
}

/// What besides the config fixes a session container here: the engine, its image, and
/// whether it is rootless (which changes the plan).
pub(super) fn identity(engine: &OciEngine) -> Option<String> {
    let image = &engine.config().image;
    (!image.is_empty()).then(|| {
        format!(
            "{} {image} rootless={} lan={:?}",
            engine.config().flavor.as_str(),
            engine.rootless().is_some(),
            engine.config().lan
        )
    })
}

/// This user's unclaimed members, listed with one label-filtered call. Pool records whose
/// container is gone are dropped on the way.
pub(super) fn members(engine: &OciEngine) -> Result<Vec<PoolMember>> {
    let filters = [
        reaper::MANAGED_FILTER.to_owned(),
        format!("{}=session", reaper::labels::KIND),
        POOL_LABEL.to_owned(),
    ];
    let items =
        engine.block_on(crate::client::list_containers_raw(engine.connection(), &filters))?;
    let runtime_dir = &engine.config().runtime_dir;
    let dir = pool_dir(engine)?;
    let mut out = Vec::new();
    for item in &items {
        let labels = item_labels(item);
        let name = item
            .get("Names")
            .and_then(|n| n.get(0))
            .and_then(serde_json::Value::as_str)
            .map(|n| n.trim_start_matches('/'))
            .unwrap_or_default();
        let running = item.get("State").and_then(serde_json::Value::as_str) == Some("running");
        let Ok(Some(parsed)) = reaper::SandboxLabels::from_labels(&labels) else { continue };
        let (Some(key), Some(file)) = (labels.get(POOL_LABEL), record_name(&parsed.id)) else {
            continue;
        };
        let claimable = running
            && engine.mark().verifies(name, &labels)
            && pooled(runtime_dir, &labels)
            && dir.stat(&file).ok().flatten().is_some();
        if claimable {
            out.push(PoolMember {
                id: parsed.id,
                key: key.clone(),
                created: parsed.created,
                revision: String::new(),
            });
        }
    }
    prune(&dir, &out);
    Ok(out)
}

/// Drops pool records of members that are no longer listed (expired, removed by hand); one
/// younger than a minute stays (its member may be between its start and the listing).
fn prune(dir: &reaper::PrivateDir, members: &[PoolMember]) {
    let Ok(entries) = std::fs::read_dir(dir.path()) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_suffix(".json") else { continue };
        let young = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age < Duration::from_secs(60));
        if !young && !members.iter().any(|m| m.id == id) {
            let _ = dir.remove(&name);
        }
    }
}

/// Starts one member for `config`; it becomes claimable once its pool record is written.
pub(super) fn create(engine: &OciEngine, config: &SessionConfig, key: &str) -> Result<()> {
    let (session, _warning) = engine.launch(config, Some(key))?;
    let id = session.id.clone();
    let ready = session.agent.as_ref().and_then(stamp);
    let written = match (ready, record_name(&id)) {
        (Some(stamp), Some(name)) => {
            let record = PoolRecord { key: key.to_owned(), stamp, session };
            let bytes = serde_json::to_vec(&record).map_err(|e| Error::Api {
                engine: engine.config().flavor.as_str(),
                context: "writing a pool record".to_owned(),
                message: e.to_string(),
            })?;
            pool_dir(engine)?.replace(&name, &bytes).map_err(Error::from)
        }
        // Without a reachable agent there is no activity stamp to prove the member unused.
        _ => Err(Error::NoSession { id: id.clone() }),
    };
    if written.is_err() {
        discard(engine, &id);
    }
    written
}

/// Claims `member`: see the module header for the steps and why each holds.
pub(super) fn claim(engine: &OciEngine, member: &PoolMember) -> Result<Option<SessionInfo>> {
    let Some(name) = record_name(&member.id) else { return Ok(None) };
    let dir = pool_dir(engine)?;
    let Some(bytes) = dir.read(&name)? else { return Ok(None) };
    match rustix::fs::unlinkat(dir.fd(), name.as_str(), rustix::fs::AtFlags::empty()) {
        Ok(()) => {}
        // Another caller's claim came first.
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(e) => return Err(Error::io(format!("claiming {}", member.id))(e.into())),
    }
    // Ours from here: whatever is wrong with it, nobody else can be handed it.
    let fit = serde_json::from_slice::<PoolRecord>(&bytes)
        .ok()
        .filter(|record| record.key == member.key && record.session.id == member.id)
        .and_then(|record| fit(engine, record));
    let Some(session) = fit else {
        discard(engine, &member.id);
        return Ok(None);
    };
    if let Err(e) = write_record(&engine.config().runtime_dir, &session) {
        discard(engine, &member.id);
        return Err(Error::io(format!("recording session {}", member.id))(e));
    }
    // One connection counts as activity: the idle clock starts now, not at the member's start.
    if let Some(agent) = &session.agent {
        engine.block_on(async { drop(agent.connect()) });
    }
    if !session.policy.publish.is_empty() {
        // The host ports are in the listing only.
        return Ok(engine.list_sessions()?.into_iter().find(|s| s.id == member.id));
    }
    let ttl = engine
        .block_on(
            engine.docker().inspect_container(&session.container, None::<InspectContainerOptions>),
        )
        .ok()
        .and_then(|i| i.config?.labels)
        .and_then(|labels| {
            let labels = labels.into_iter().collect();
            reaper::SandboxLabels::from_labels(&labels).ok().flatten()
        })
        .and_then(|l| l.ttl)
        .unwrap_or(0);
    Ok(Some(SessionInfo {
        id: session.id,
        engine: engine.config().flavor.as_str().to_owned(),
        sandbox: session.container,
        created: member.created,
        ttl,
        state: "running".to_owned(),
        workspace: session.workspace,
        ports: Vec::new(),
        warnings: Vec::new(),
    }))
}

/// The claimed member's session record, when the container is still the member that was
/// recorded and unused, and its binds still show the sources its policy names.
fn fit(engine: &OciEngine, record: PoolRecord) -> Option<Record> {
    let session = record.session;
    let inspect = engine
        .block_on(
            engine.docker().inspect_container(&session.container, None::<InspectContainerOptions>),
        )
        .ok()?;
    let labels = inspect.config.as_ref()?.labels.clone()?.into_iter().collect();
    let running = inspect.state.as_ref()?.running == Some(true);
    let pid = inspect.state.as_ref()?.pid.and_then(|p| u32::try_from(p).ok())?;
    let agent = session.agent?;
    let same = running
        && engine.mark().verifies(&session.container, &labels)
        && labels.get(POOL_LABEL) == Some(&record.key)
        && agent.pid == pid
        && agent.alive();
    if !same || stamp(&agent) != Some(record.stamp) {
        return None;
    }
    let workspace = std::path::PathBuf::from(&session.workspace);
    let mut pins = vec![crate::verify::Pin::open(&workspace, &workspace).ok()?];
    for (path, _) in &session.policy.mounts {
        pins.push(crate::verify::Pin::open(path, path).ok()?);
    }
    crate::verify::mounts(i64::from(pid), &pins).ok()?;
    Some(session)
}

/// Removes unclaimed member `id`.
pub(super) fn remove(engine: &OciEngine, id: &str) -> Result<()> {
    let Some(name) = record_name(id) else { return Ok(()) };
    let dir = pool_dir(engine)?;
    // Removing the pool record is a claim too: nobody is handed a member being removed.
    match rustix::fs::unlinkat(dir.fd(), name.as_str(), rustix::fs::AtFlags::empty()) {
        Ok(()) => {
            discard(engine, id);
            Ok(())
        }
        Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(Error::io(format!("removing pool member {id}"))(e.into())),
    }
}

/// Removes member `id`'s container and what it holds on the host, as `stop` does.
fn discard(engine: &OciEngine, id: &str) {
    let name = super::container_name(id);
    let _ = engine.block_on(crate::sweep::remove(engine.docker(), &name));
    let cache = &engine.config().cache_dir;
    let holder = crate::workspace::holder(engine.config().flavor.as_str(), id);
    let _ = reaper::acl::release_holder(&reaper::acl::state_dir(cache), &holder);
    let _ = reaper::protect::release_holder(&reaper::protect::state_dir(cache), &holder);
    if rustix::process::geteuid().is_root() {
        crate::idmap::release(&engine.config().cache_dir, &name);
    }
    if let Some(path) = record_path(&engine.config().runtime_dir, id) {
        let _ = std::fs::remove_file(path);
    }
}
