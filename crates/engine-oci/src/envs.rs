//! Environment volumes over time: the per-environment lock file that is also its last-use stamp,
//! the lease a run holds on it from the warm check until its container exists, and pruning of
//! environments nobody used for a while ([`reaper::stale_envs`] decides).
//!
//! The lock file `<cache>/oci/locks/<volume>.lock`: a run holds it shared (and sets its mtime, the
//! last-use stamp) from the warm check until its container exists; after that docker and podman
//! themselves refuse to remove a volume a container references (409). Prepare holds it exclusive
//! while building. The pruner takes it exclusive without waiting (busy means in use: skip),
//! removes the `-ready` marker first and the environment second (so a half-pruned environment is
//! rebuilt, never reused), and unlinks the lock file while still holding it; every locker checks
//! that the path still names the file it locked, so nobody ends up holding a lock on a deleted file.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bollard::Docker;
use bollard::models::VolumeCreateRequest;
use bollard::query_parameters::{ListVolumesOptions, RemoveVolumeOptions};
use reaper::{LockMode, MarkKey};

use crate::client::{self, Connection};
use crate::error::api;
use crate::error::{Error, Result};

/// Every environment volume's name starts with this; its completion marker adds [`MARKER_SUFFIX`].
pub(crate) const ENV_PREFIX: &str = "python-sandbox-env-";
/// The completion marker's suffix.
pub(crate) const MARKER_SUFFIX: &str = "-ready";
/// The default for [`crate::OciConfig::env_max_age`] and `reap --env-max-age`: 30 days.
pub const DEFAULT_ENV_MAX_AGE: Duration = Duration::from_secs(30 * 86_400);
/// The automatic prune at engine start runs at most this often (a stamp file per engine).
const AUTO_PRUNE_INTERVAL: Duration = Duration::from_secs(86_400);

/// The lock file (and last-use stamp) of an environment volume.
pub(crate) fn lock_path(cache_dir: &Path, volume: &str) -> PathBuf {
    cache_dir.join("oci").join("locks").join(format!("{volume}.lock"))
}

/// [`reaper::lock_env`] with this crate's error.
pub(crate) fn lock(path: &Path, mode: LockMode) -> Result<Option<File>> {
    reaper::lock_env(path, mode).map_err(|e| {
        Error::io(format!("locking {}", path.display()))(std::io::Error::other(e.to_string()))
    })
}

/// Takes `path` shared or exclusive, saying so through `status` when someone else holds it.
fn lock_waiting(path: &Path, exclusive: bool, status: &mut dyn FnMut(&str)) -> Result<File> {
    let (try_op, wait_op) = if exclusive {
        (LockMode::TryExclusive, LockMode::Exclusive)
    } else {
        (LockMode::TryShared, LockMode::Shared)
    };
    if let Some(file) = lock(path, try_op)? {
        return Ok(file);
    }
    status("waiting for another python-sandbox preparing the same environment");
    lock(path, wait_op)?.ok_or_else(|| {
        Error::io(format!("locking {}", path.display()))(std::io::Error::other("lock not taken"))
    })
}

/// A run's or prepare's hold on an environment's lock file, shared by clones of its
/// [`crate::PreparedEnv`]; released explicitly once the run's container exists, else on drop.
#[derive(Clone, Default)]
pub(crate) struct Lease(Option<Arc<Mutex<Option<File>>>>);

impl Lease {
    /// No lock held (a script without dependencies has no environment).
    pub(crate) fn none() -> Lease {
        Lease(None)
    }

    /// Takes the environment's lock shared (waiting for a prepare or pruner that holds it) and
    /// stamps the last use: one open, one flock, one futimens on the warm path.
    pub(crate) fn shared(
        cache_dir: &Path,
        volume: &str,
        status: &mut dyn FnMut(&str),
    ) -> Result<Lease> {
        // `reaper::lock_env` creates the directory, checked to be the caller's.
        let path = lock_path(cache_dir, volume);
        let file = lock_waiting(&path, false, status)?;
        // Best effort: a missing stamp only makes the pruner fall back to the volume's age.
        let _ = file.set_modified(SystemTime::now());
        Ok(Lease(Some(Arc::new(Mutex::new(Some(file))))))
    }

    /// Trades the shared hold for an exclusive one (to build). Not atomic, so callers re-check
    /// what they saw under the shared lock.
    pub(crate) fn exclusive(
        self,
        cache_dir: &Path,
        volume: &str,
        status: &mut dyn FnMut(&str),
    ) -> Result<Lease> {
        drop(self);
        let path = lock_path(cache_dir, volume);
        let file = lock_waiting(&path, true, status)?;
        let _ = file.set_modified(SystemTime::now());
        Ok(Lease(Some(Arc::new(Mutex::new(Some(file))))))
    }

    /// Trades an exclusive hold (after a build) for a shared one, so other prepares of the
    /// same environment (in this process too) proceed while this one is still held. Not
    /// atomic, but a pruner that slips in between sees the fresh stamp and keeps the env.
    pub(crate) fn downgrade(self) -> Result<Lease> {
        if let Some(slot) = &self.0 {
            let slot = slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(file) = slot.as_ref() {
                file.lock_shared().map_err(Error::io("sharing an environment lock"))?;
            }
        }
        Ok(self)
    }

    /// Lets go of the lock (for every clone): the run's container now references the volume.
    pub(crate) fn release(&self) {
        if let Some(slot) = &self.0 {
            // A poisoned slot still holds the file; take it either way.
            let mut slot = slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            slot.take();
        }
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.0.as_ref().is_some_and(|s| s.lock().map(|s| s.is_some()).unwrap_or(true));
        f.write_str(if held { "Lease(held)" } else { "Lease(none)" })
    }
}

/// A lease is not part of an environment's identity.
impl PartialEq for Lease {
    fn eq(&self, _: &Lease) -> bool {
        true
    }
}
impl Eq for Lease {}

/// One environment the pruner chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrunedEnv {
    /// The environment volume (its marker is `<volume>-ready`).
    pub volume: String,
    /// Why, lower case (e.g. `unused for 31 d, max age 30 d`).
    pub reason: String,
    /// Whether it was removed (false in a dry run, when in use, or when removal failed).
    pub removed: bool,
    /// Why it was not removed after all, if it was not (in use, an API error).
    pub error: Option<String>,
}

/// One environment as listed: its volumes and when they were made.
#[derive(Debug, Default)]
struct Listed {
    labels: BTreeMap<String, String>,
    env: bool,
    marker: bool,
    created: u64,
    /// The lock file's mtime (last-use stamp) at listing time.
    stamp: Option<SystemTime>,
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::symlink_metadata(path).ok()?.modified().ok()
}

fn secs(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Volume names any container (in any state) references: one unfiltered list call.
async fn volumes_in_use(connection: &Connection) -> Result<BTreeSet<String>> {
    let items = client::list_containers_raw(connection, &[]).await?;
    Ok(items
        .iter()
        .filter_map(|c| c.get("Mounts")?.as_array())
        .flatten()
        .filter_map(|m| m.get("Name")?.as_str().map(str::to_owned))
        .collect())
}

/// Lists our environment volumes, decides with [`reaper::stale_envs`] and removes (or, with
/// `dry_run`, only reports) the stale ones.
pub(crate) async fn prune(
    docker: &Docker,
    connection: &Connection,
    key: &MarkKey,
    cache_dir: &Path,
    now: u64,
    max_age: Duration,
    dry_run: bool,
) -> Result<Vec<PrunedEnv>> {
    let engine = connection.flavor.as_str();
    let filters = HashMap::from([("label".to_owned(), vec![reaper::MANAGED_FILTER.to_owned()])]);
    let listed = docker
        .list_volumes(Some(ListVolumesOptions { filters: Some(filters) }))
        .await
        .map_err(api(engine, "listing environment volumes"))?;
    let mut envs: BTreeMap<String, Listed> = BTreeMap::new();
    for volume in listed.volumes.unwrap_or_default() {
        // Labels are claims: only volumes this user's python-sandbox made (its mark over the
        // volume's own name) are ever pruned.
        let labels: BTreeMap<String, String> = volume.labels.into_iter().collect();
        if !volume.name.starts_with(ENV_PREFIX) || !key.verifies(&volume.name, &labels) {
            continue;
        }
        let (base, is_marker) = match volume.name.strip_suffix(MARKER_SUFFIX) {
            Some(base) => (base.to_owned(), true),
            None => (volume.name.clone(), false),
        };
        let entry = envs.entry(base).or_default();
        let created = volume.created_at.as_deref().and_then(reaper::unix_from_rfc3339);
        // An unreadable creation time counts as now: unknown age is never old.
        entry.created = entry.created.max(created.unwrap_or(now));
        if is_marker {
            entry.marker = true;
        } else {
            entry.env = true;
        }
        entry.labels.extend(labels);
    }
    if envs.is_empty() {
        return Ok(Vec::new());
    }
    for (name, listed) in &mut envs {
        listed.stamp = modified(&lock_path(cache_dir, name));
    }
    let in_use = volumes_in_use(connection).await?;
    let uses: Vec<reaper::EnvUse> = envs
        .iter()
        .map(|(name, listed)| reaper::EnvUse {
            id: name.clone(),
            labels: listed.labels.clone(),
            // The stamp wins: it is set on every use; the creation time only stands in without one.
            last_used: listed.stamp.map_or(listed.created, secs),
            in_use: in_use.contains(name) || in_use.contains(&format!("{name}{MARKER_SUFFIX}")),
        })
        .collect();
    let mut out = Vec::new();
    for action in reaper::stale_envs(now, max_age.as_secs(), &uses) {
        let listed = &envs[&action.id];
        let mut pruned = PrunedEnv {
            volume: action.id.clone(),
            reason: action.to_string(),
            removed: false,
            error: None,
        };
        if !dry_run {
            match remove_env(docker, key, cache_dir, &action.id, listed, now, max_age).await {
                Ok(()) => pruned.removed = true,
                Err(why) => pruned.error = Some(why),
            }
        }
        out.push(pruned);
    }
    Ok(out)
}

/// Removes one environment under its exclusive lock: marker first, then the volume. `Err` says
/// why it stays (in use, locked, an API error).
async fn remove_env(
    docker: &Docker,
    key: &MarkKey,
    cache_dir: &Path,
    volume: &str,
    listed: &Listed,
    now: u64,
    max_age: Duration,
) -> std::result::Result<(), String> {
    let path = lock_path(cache_dir, volume);
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Err(format!("{} is not a lock file path", path.display()));
    };
    let dir = reaper::PrivateDir::open(dir).map_err(|e| e.to_string())?;
    // Creating the lock file ourselves must not look like a use.
    let ours = dir.create_new(name).ok().flatten().and_then(|f| f.metadata().ok()?.modified().ok());
    let Some(lock) =
        reaper::lock_in(&dir, name, LockMode::TryExclusive).map_err(|e| e.to_string())?
    else {
        return Err("in use (a run or prepare holds its lock)".to_owned());
    };
    // A run may have used it between the listing and the lock: it stamped the lock file then.
    let seen = if ours.is_some() { ours } else { listed.stamp };
    let current = modified(&path);
    if current != seen {
        let last = current.map_or(listed.created, secs);
        if now.saturating_sub(last) < max_age.as_secs() {
            return Err("in use (used since the listing)".to_owned());
        }
    }
    let marker = format!("{volume}{MARKER_SUFFIX}");
    if listed.marker {
        remove_volume(docker, &marker).await?;
    }
    if listed.env
        && let Err(why) = remove_volume(docker, volume).await
    {
        // Still referenced: put the marker back (the contents are complete, and nobody can be
        // building it while we hold the lock), so its users keep a ready environment.
        if listed.marker {
            let mut labels = listed.labels.clone();
            key.sign(&marker, &mut labels);
            let request = VolumeCreateRequest {
                name: Some(marker),
                labels: Some(labels.into_iter().collect()),
                ..Default::default()
            };
            let _ = docker.create_volume(request).await;
        }
        return Err(why);
    }
    // Unlinked while held: lockers that opened the old file notice and retry.
    let _ = dir.remove(name);
    drop(lock);
    Ok(())
}

/// Removes a volume; gone already is fine, referenced by a container (409) is "in use".
async fn remove_volume(docker: &Docker, name: &str) -> std::result::Result<(), String> {
    match docker.remove_volume(name, None::<RemoveVolumeOptions>).await {
        Ok(()) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, .. }) => {
            Err("in use (a container references it)".to_owned())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Pure: whether an automatic prune last recorded at `last` is due at `now`.
pub(crate) fn auto_prune_due(last: Option<SystemTime>, now: SystemTime) -> bool {
    last.and_then(|t| now.duration_since(t).ok()).is_none_or(|age| age >= AUTO_PRUNE_INTERVAL)
}

/// The automatic prune at engine start: at most once per [`AUTO_PRUNE_INTERVAL`] per engine (a
/// stamp file, written first so a failing prune is not retried on every invocation), quiet and
/// best effort. Costs one `stat` when not due.
pub(crate) async fn auto_prune(
    docker: &Docker,
    connection: &Connection,
    key: &MarkKey,
    cache_dir: &Path,
    now: u64,
    max_age: Duration,
) {
    // The stamp is touched in a checked directory, never through a link (it used to be a plain
    // write, which truncated whatever a planted link named).
    let Ok(dir) = reaper::PrivateDir::open(&cache_dir.join("oci")) else { return };
    let stamp = format!("last-env-prune-{}", connection.flavor.as_str());
    let last = dir.modified(&stamp).ok().flatten();
    if !auto_prune_due(last, SystemTime::now()) {
        return;
    }
    if dir.touch(&stamp).is_err() {
        return;
    }
    let _ = prune(docker, connection, key, cache_dir, now, max_age, false).await;
}
