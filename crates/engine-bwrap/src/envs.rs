//! Prepared environments over time: the lease a run holds on its environment (the lock file
//! `<cache>/bwrap/locks/<key>.lock`, shared, for the whole run, since nothing else would stop a
//! directory from being deleted under a running script; its mtime is the last-use stamp), and
//! pruning of environments nobody used for a while ([`reaper::stale_envs`] decides).
//!
//! The pruner takes the lock exclusive without waiting (busy means in use: skip), removes the
//! marker first and the directory second (a half-pruned environment is rebuilt, never reused),
//! and unlinks the lock file while holding it ([`reaper::lock_env`] makes lockers notice).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reaper::LockMode;

use crate::cache::CacheLayout;
use crate::error::{Error, Result};

/// A hold on an environment's lock, shared by the clones of its [`crate::PreparedEnv`]; the
/// lock goes when the last clone does.
#[derive(Clone, Default)]
pub(crate) struct Lease(Option<Arc<File>>);

impl Lease {
    /// Takes the lock shared (waiting, and saying so through `status`, while someone builds
    /// the environment) and stamps the last use. Nobody waits for it exclusive: see
    /// [`Lease::try_exclusive`].
    pub(crate) fn take(path: &Path, status: &mut dyn FnMut(&str)) -> Result<Lease> {
        let file = match lock(path, LockMode::TryShared)? {
            Some(file) => file,
            None => {
                status("waiting for another python-sandbox preparing the same environment");
                lock(path, LockMode::Shared)?.ok_or_else(|| {
                    Error::io(format!("locking {}", path.display()))(std::io::Error::other(
                        "lock not taken",
                    ))
                })?
            }
        };
        Ok(Lease::stamped(file))
    }

    /// The lock shared if nobody holds it exclusive, without waiting; stamps the last use.
    pub(crate) fn try_shared(path: &Path) -> Result<Option<Lease>> {
        Ok(lock(path, LockMode::TryShared)?.map(Lease::stamped))
    }

    /// The exclusive lock if nobody holds the lock at all, without waiting; stamps the last use.
    pub(crate) fn try_exclusive(path: &Path) -> Result<Option<Lease>> {
        Ok(lock(path, LockMode::TryExclusive)?.map(Lease::stamped))
    }

    fn stamped(file: File) -> Lease {
        // Best effort: a missing stamp only makes the pruner fall back to the marker's age.
        let _ = file.set_modified(SystemTime::now());
        Lease(Some(Arc::new(file)))
    }

    /// Turns an exclusive hold into a shared one without letting go (flock converts in place),
    /// so a freshly built environment is never pruned before its first run.
    pub(crate) fn share(&self) -> Result<()> {
        match &self.0 {
            Some(file) => file.lock_shared().map_err(Error::io("sharing an environment lock")),
            None => Ok(()),
        }
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Lease(held)" } else { "Lease(none)" })
    }
}

/// A lease is not part of an environment's identity.
impl PartialEq for Lease {
    fn eq(&self, _: &Lease) -> bool {
        true
    }
}
impl Eq for Lease {}

fn lock(path: &Path, mode: LockMode) -> Result<Option<File>> {
    reaper::lock_env(path, mode).map_err(|e| {
        Error::io(format!("locking {}", path.display()))(std::io::Error::other(e.to_string()))
    })
}

/// One environment the pruner chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrunedEnv {
    /// The environment directory.
    pub dir: PathBuf,
    /// Why, lower case (e.g. `unused for 31 d, max age 30 d`).
    pub reason: String,
    /// Whether it was removed (false in a dry run, when in use, or when removal failed).
    pub removed: bool,
    /// Why it was not removed after all (in use, an IO error).
    pub error: Option<String>,
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::symlink_metadata(path).ok()?.modified().ok()
}

fn secs(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Whether someone holds the lock at `path` now, without creating it (a created lock file would
/// read as a fresh use).
fn busy(path: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path);
    let Ok(file) = opened else {
        return false;
    };
    matches!(file.try_lock(), Err(std::fs::TryLockError::WouldBlock))
}

/// Environments under `<cache_dir>/bwrap/envs` unused for `max_age` (zero: every one not in use)
/// and not in use: removed, or with `dry_run` only reported. Needs no bwrap: only the cache.
pub fn prune_envs(cache_dir: &Path, max_age: Duration, dry_run: bool) -> Result<Vec<PrunedEnv>> {
    let layout = CacheLayout::new(cache_dir);
    let mut out = leftovers(&layout, dry_run);
    let envs_dir = layout.envs_dir();
    let entries = match std::fs::read_dir(&envs_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(Error::io(format!("reading {}", envs_dir.display()))(e)),
    };
    // Keys are hex: anything else here (temporary files) is not an environment.
    let mut keys: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .map(|name| name.strip_suffix(".json").map(str::to_owned).unwrap_or(name))
        .filter(|name| !name.is_empty() && name.bytes().all(|b| b.is_ascii_hexdigit()))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let now = secs(SystemTime::now());
    let lock_of = |key: &str| layout.locks_dir().join(format!("{key}.lock"));
    let uses: Vec<reaper::EnvUse> = keys
        .iter()
        .map(|key| {
            // The stamp, else when the marker (written last) or the directory appeared.
            let last = modified(&lock_of(key))
                .or_else(|| modified(&envs_dir.join(format!("{key}.json"))))
                .or_else(|| modified(&envs_dir.join(key)));
            reaper::EnvUse::owned(key, last.map_or(now, secs), busy(&lock_of(key)))
        })
        .collect();
    for action in reaper::stale_envs(now, max_age.as_secs(), &uses) {
        let dir = envs_dir.join(&action.id);
        let mut pruned =
            PrunedEnv { dir: dir.clone(), reason: action.to_string(), removed: false, error: None };
        if !dry_run {
            let stamp = modified(&lock_of(&action.id));
            match remove_env(&envs_dir, &action.id, &lock_of(&action.id), stamp, now, max_age) {
                Ok(()) => pruned.removed = true,
                Err(why) => pruned.error = Some(why),
            }
        }
        out.push(pruned);
    }
    Ok(out)
}

/// What no environment uses any more: the uv cache of versions before the package store, and
/// an environment an install was interrupted in (left in the store, its lock free again; the
/// next prepare of its key builds it anew).
fn leftovers(layout: &CacheLayout, dry_run: bool) -> Vec<PrunedEnv> {
    let mut found = vec![(layout.legacy_uv_cache(), "the package cache of an older version")];
    let building = layout.building("");
    for entry in std::fs::read_dir(&building).into_iter().flatten().flatten() {
        let key = entry.file_name().to_string_lossy().into_owned();
        if !busy(&layout.locks_dir().join(format!("{key}.lock"))) {
            found.push((entry.path(), "an interrupted install"));
        }
    }
    found
        .into_iter()
        .filter(|(dir, _)| std::fs::symlink_metadata(dir).is_ok())
        .map(|(dir, reason)| {
            let removed =
                if dry_run { Ok(false) } else { std::fs::remove_dir_all(&dir).map(|()| true) };
            PrunedEnv {
                dir,
                reason: reason.to_owned(),
                removed: removed.as_ref().is_ok_and(|r| *r),
                error: removed.err().map(|e| e.to_string()),
            }
        })
        .collect()
}

/// Removes one environment under its exclusive lock: marker first, then the directory, then the
/// lock file. `Err` says why it stays.
fn remove_env(
    envs_dir: &Path,
    key: &str,
    lock_path: &Path,
    stamp: Option<SystemTime>,
    now: u64,
    max_age: Duration,
) -> std::result::Result<(), String> {
    let (locks, name) = crate::fsutil::private_parent(lock_path).map_err(|e| e.to_string())?;
    // Creating the lock file ourselves must not look like a use.
    let ours =
        locks.create_new(&name).ok().flatten().and_then(|f| f.metadata().ok()?.modified().ok());
    let Some(held) =
        reaper::lock_in(&locks, &name, LockMode::TryExclusive).map_err(|e| e.to_string())?
    else {
        return Err("in use (a run or prepare holds its lock)".to_owned());
    };
    let seen = if ours.is_some() { ours } else { stamp };
    let current = modified(lock_path);
    if current != seen && now.saturating_sub(current.map_or(0, secs)) < max_age.as_secs() {
        return Err("in use (used since the listing)".to_owned());
    }
    let marker = envs_dir.join(format!("{key}.json"));
    match std::fs::remove_file(&marker) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("removing {}: {e}", marker.display())),
    }
    let dir = envs_dir.join(key);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("removing {}: {e}", dir.display())),
    }
    let _ = locks.remove(&name);
    drop(held);
    Ok(())
}
