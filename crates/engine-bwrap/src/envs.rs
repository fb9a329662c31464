//! Prepared environments over time: the lease a run holds on its environment (the lock file
//! `<cache>/bwrap/locks/<key>.lock`, shared, for the whole run, since nothing else would stop a
//! directory from being deleted under a running script; its mtime is the last-use stamp), and
//! pruning of environments nobody used for a while ([`reaper::stale_envs`] decides) and of the
//! least recently used environments and packages while the cache is over its size cap
//! ([`reaper::over_cap`] decides, counting each file once: environments link the package
//! cache's files).
//!
//! The pruner takes the lock exclusive without waiting (busy means in use: skip), removes the
//! marker first and the directory second (a half-pruned environment is rebuilt, never reused),
//! and unlinks the lock file while holding it ([`reaper::lock_env`] makes lockers notice).
//! Packages go only under the store's lock (`locks/store.lock`), which every prepare step that
//! installs from the package cache holds shared: uv never links from a package being removed,
//! and finds a removed one missing and fetches it again.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reaper::{CacheEntry, EntryKind, FileId, LockMode};

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

/// The store's lock, shared (waiting while a prune removes packages).
pub(crate) fn lock_store(path: &Path) -> Result<Option<File>> {
    lock(path, LockMode::Shared)
}

fn lock(path: &Path, mode: LockMode) -> Result<Option<File>> {
    reaper::lock_env(path, mode).map_err(|e| {
        Error::io(format!("locking {}", path.display()))(std::io::Error::other(e.to_string()))
    })
}

/// The cache's default size cap (`[cache] max-size` in the user config): 5 GiB.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 5 << 30;
/// A prepare that built a new environment prunes (age and cap) at most this often.
const AUTO_PRUNE_INTERVAL: Duration = Duration::from_secs(86_400);
/// `detect` measures the cache again when the last measurement is older than this.
const USAGE_MAX_AGE: Duration = Duration::from_secs(86_400);
/// The maximum age of an environment when no one says otherwise (as docker's and podman's).
pub const DEFAULT_ENV_MAX_AGE: Duration = Duration::from_secs(30 * 86_400);

/// One environment (or package of the package cache) the pruner chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrunedEnv {
    /// `environment`, or `package` (one unpacked package of the package cache).
    pub kind: &'static str,
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
/// and not in use, then, while the cache is over `max_bytes`, its least recently used
/// environments and packages: removed, or with `dry_run` only reported. Needs no bwrap: only
/// the cache. Records the cache's size for [`cache_usage`].
pub fn prune_envs(
    cache_dir: &Path,
    max_age: Duration,
    max_bytes: Option<u64>,
    dry_run: bool,
) -> Result<Vec<PrunedEnv>> {
    let layout = CacheLayout::new(cache_dir);
    let mut out = prune_by_age(&layout, max_age, dry_run)?;
    let survey = survey(&layout)?;
    let Some(cap) = max_bytes else {
        record_usage(&layout, reaper::distinct_size(&survey));
        return Ok(out);
    };
    let gone: Vec<String> = out
        .iter()
        .filter(|p| p.kind == "environment" && (p.removed || dry_run))
        .filter_map(|p| p.dir.file_name()?.to_str().map(str::to_owned))
        .collect();
    let plan = reaper::over_cap(cap, &survey, &gone);
    let envs_dir = layout.envs_dir();
    let lock_of = |key: &str| layout.locks_dir().join(format!("{key}.lock"));
    let now = secs(SystemTime::now());
    // Packages go only while no prepare installs from the package cache.
    let store_lock = if dry_run || plan.actions.iter().all(|a| a.kind != EntryKind::Package) {
        None
    } else {
        crate::fsutil::create_dir_all(&layout.locks_dir())?;
        Some(lock(&layout.store_lock(), LockMode::TryExclusive)?)
    };
    let mut size = plan.size_after;
    for action in &plan.actions {
        let (kind, dir) = match action.kind {
            EntryKind::Package => ("package", layout.uv_cache().join(&action.id)),
            _ => ("environment", envs_dir.join(&action.id)),
        };
        let mut pruned = PrunedEnv {
            kind,
            dir: dir.clone(),
            reason: action.to_string(),
            removed: false,
            error: None,
        };
        if !dry_run {
            let removed = match action.kind {
                EntryKind::Package => match &store_lock {
                    Some(Some(_held)) => std::fs::remove_dir_all(&dir).map_err(|e| e.to_string()),
                    _ => Err("in use (a prepare is installing from the package cache)".to_owned()),
                },
                _ => {
                    let stamp = modified(&lock_of(&action.id));
                    // Any use since the listing keeps it: the cap picked it for its last use.
                    remove_env(
                        &envs_dir,
                        &action.id,
                        &lock_of(&action.id),
                        stamp,
                        now,
                        Duration::MAX,
                    )
                }
            };
            match removed {
                Ok(()) => pruned.removed = true,
                Err(why) => {
                    size += action.freed;
                    pruned.error = Some(why);
                }
            }
        }
        out.push(pruned);
    }
    if !dry_run {
        record_usage(&layout, size);
    }
    Ok(out)
}

/// What the cache takes on disk, each file once, and when that was measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheUsage {
    /// `<cache_dir>/bwrap`.
    pub dir: PathBuf,
    /// Bytes on disk.
    pub bytes: u64,
    /// When it was measured, unix seconds.
    pub measured: u64,
}

/// The cache's size. With `fresh`, measured now (a walk of the whole cache: seconds for a
/// large one); without, as the last prune or measurement found it, measured again when that
/// is older than a day or was never taken (environments built since are not in it).
pub fn cache_usage(cache_dir: &Path, fresh: bool) -> Result<CacheUsage> {
    let layout = CacheLayout::new(cache_dir);
    let dir = layout.root().to_owned();
    let now = secs(SystemTime::now());
    let recent = |(_, measured): &(u64, u64)| {
        !fresh && *measured <= now && now - measured < USAGE_MAX_AGE.as_secs()
    };
    if let Some((bytes, measured)) = recorded_usage(&layout).filter(recent) {
        return Ok(CacheUsage { dir, bytes, measured });
    }
    if std::fs::symlink_metadata(&dir).is_err() {
        return Ok(CacheUsage { dir, bytes: 0, measured: now });
    }
    let bytes = reaper::distinct_size(&survey(&layout)?);
    record_usage(&layout, bytes);
    Ok(CacheUsage { dir, bytes, measured: now })
}

/// After a prepare built a new environment: the age and cap prune, at most once a day (a stamp
/// in the cache). Best effort: a failure leaves the cache as it was.
pub(crate) fn auto_prune(cache_dir: &Path, max_bytes: u64) {
    let layout = CacheLayout::new(cache_dir);
    let stamp = layout.root().join("auto-prune.stamp");
    let due = modified(&stamp).is_none_or(|last| {
        SystemTime::now().duration_since(last).map_or(true, |d| d >= AUTO_PRUNE_INTERVAL)
    });
    if !due {
        return;
    }
    if crate::fsutil::write_atomic(&stamp, b"").is_ok() {
        let _ = prune_envs(cache_dir, DEFAULT_ENV_MAX_AGE, Some(max_bytes), false);
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Usage {
    bytes: u64,
    measured: u64,
}

fn record_usage(layout: &CacheLayout, bytes: u64) {
    let usage = Usage { bytes, measured: secs(SystemTime::now()) };
    if let Ok(text) = serde_json::to_vec(&usage) {
        let _ = crate::fsutil::write_atomic(&layout.usage_file(), &text);
    }
}

fn recorded_usage(layout: &CacheLayout) -> Option<(u64, u64)> {
    let text = std::fs::read(layout.usage_file()).ok()?;
    let usage: Usage = serde_json::from_slice(&text).ok()?;
    Some((usage.bytes, usage.measured))
}

/// Every file of the cache by identity, grouped into what the cap may remove: each environment
/// (its directory and marker), each unpacked package of the package cache, and the rest.
fn survey(layout: &CacheLayout) -> Result<Vec<CacheEntry>> {
    use std::collections::BTreeMap;
    use std::os::unix::fs::MetadataExt;
    let root = layout.root();
    let envs_dir = layout.envs_dir();
    let archive = layout.uv_cache().join(ARCHIVE);
    let mut groups: BTreeMap<(u8, String), Vec<(FileId, u64)>> = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    let root_meta = match std::fs::symlink_metadata(root) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("reading {}", root.display()))(e)),
    };
    let mut add = |path: &Path, meta: &std::fs::Metadata| {
        let group = if let Ok(rest) = path.strip_prefix(&envs_dir) {
            let first = rest.components().next().and_then(|c| c.as_os_str().to_str());
            match first.map(|name| name.strip_suffix(".json").unwrap_or(name)) {
                Some(key) if is_key(key) => (0, key.to_owned()),
                _ => (2, String::new()),
            }
        } else if let Ok(rest) = path.strip_prefix(&archive) {
            match rest.components().next().and_then(|c| c.as_os_str().to_str()) {
                Some(id) => (1, format!("{ARCHIVE}/{id}")),
                None => (2, String::new()),
            }
        } else {
            (2, String::new())
        };
        let id = FileId { dev: meta.dev(), ino: meta.ino() };
        groups.entry(group).or_default().push((id, meta.blocks() * 512));
    };
    add(root, &root_meta);
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            // Not followed: a link is its own small file.
            let Ok(meta) = entry.metadata() else { continue };
            add(&path, &meta);
            // Another file system mounted in the cache is not the cache's disk.
            if meta.is_dir() && meta.dev() == root_meta.dev() {
                stack.push(path);
            }
        }
    }
    let now = secs(SystemTime::now());
    let lock_of = |key: &str| layout.locks_dir().join(format!("{key}.lock"));
    Ok(groups
        .into_iter()
        .map(|((group, id), files)| match group {
            0 => {
                // The stamp, else when the marker (written last) or the directory appeared.
                let last = modified(&lock_of(&id))
                    .or_else(|| modified(&envs_dir.join(format!("{id}.json"))))
                    .or_else(|| modified(&envs_dir.join(&id)));
                let in_use = busy(&lock_of(&id));
                CacheEntry {
                    kind: EntryKind::Environment,
                    last_used: last.map_or(now, secs),
                    in_use,
                    files,
                    id,
                }
            }
            1 => {
                let last = modified(&layout.uv_cache().join(&id)).map_or(now, secs);
                CacheEntry { kind: EntryKind::Package, last_used: last, in_use: false, files, id }
            }
            _ => CacheEntry {
                kind: EntryKind::Other,
                last_used: 0,
                in_use: true,
                files,
                id: "other".to_owned(),
            },
        })
        .collect())
}

/// uv's directory of unpacked packages in its cache.
const ARCHIVE: &str = "archive-v0";

/// Environment keys are hex: anything else in `envs/` (temporary files) is not one.
fn is_key(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The age prune: [`reaper::stale_envs`] over every environment's last use.
fn prune_by_age(layout: &CacheLayout, max_age: Duration, dry_run: bool) -> Result<Vec<PrunedEnv>> {
    let mut out = leftovers(layout, dry_run);
    let envs_dir = layout.envs_dir();
    let entries = match std::fs::read_dir(&envs_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(Error::io(format!("reading {}", envs_dir.display()))(e)),
    };
    let mut keys: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .map(|name| name.strip_suffix(".json").map(str::to_owned).unwrap_or(name))
        .filter(|name| is_key(name))
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
        let mut pruned = PrunedEnv {
            kind: "environment",
            dir: dir.clone(),
            reason: action.to_string(),
            removed: false,
            error: None,
        };
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
                kind: "environment",
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
