//! Keeping a root caller's workspace writable without running as uid 0 in the container.
//!
//! **Decision.** A non-root caller's container runs as the caller's uid:gid, so files land
//! owned by the caller with no help. A root caller's container runs as nobody (65534:65534),
//! never as 0: uid 0 in a container is host root as far as every bind mount is concerned. To
//! let nobody write, a run binds idmapped copies of the workspace and read-write mounts where
//! it can (`crate::idmap`, runs and sessions); otherwise they are lent to it with one
//! POSIX ACL entry ([`reaper::acl::Grant`]), and given back exactly as they were
//! when the last run (or session) using them ends; a killed CLI's leftovers go at the next
//! sweep or `reap`. After the run, entries the sandbox created (owned by 65534) are handed back
//! to root without following symlinks, so files land owned by the caller as with bwrap.

use std::path::{Path, PathBuf};

use reaper::acl::Grant;

use crate::error::Result;
use crate::host::NOBODY;

/// Lends `dirs` to the sandbox user when the caller is root (`None` otherwise).
pub(crate) fn lend(caller_uid: u32, dirs: &[PathBuf], cache_dir: &Path) -> Result<Option<Grant>> {
    if caller_uid != 0 {
        return Ok(None);
    }
    let dirs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    Ok(Some(Grant::take(&dirs, NOBODY, &reaper::acl::state_dir(cache_dir))?))
}

/// Hands what the sandbox created below `dirs` back to root (a root caller's runs only).
pub(crate) fn reclaim(caller_uid: u32, dirs: &[PathBuf]) {
    if caller_uid == 0 {
        for dir in dirs {
            reaper::acl::reclaim(dir, NOBODY);
        }
    }
}

/// Makes the protected paths of the workspace and the read-write directory mounts read-only
/// (`engine_detect::protect`): the placeholders to release (or hold) once the container is
/// gone, and every path to bind read-only over itself. The cache root is the one every engine
/// shares, so runs of different engines in one workspace share the protocol.
pub(crate) fn protect(
    workspace: &Path,
    mounts: &[crate::host::Bind],
    config: &crate::OciConfig,
) -> Result<(reaper::protect::Placeholders, Vec<PathBuf>)> {
    use engine_detect::protect::{protect, writable_trees};
    let mounts: Vec<(PathBuf, bool)> =
        mounts.iter().map(|m| (m.path.clone(), m.writable)).collect();
    let home = config.home.as_deref().unwrap_or(Path::new("/nonexistent"));
    let trees = writable_trees(workspace, &mounts, home);
    Ok(protect(&trees, &reaper::protect::state_dir(&config.cache_dir))?)
}

/// The name of a session's hold on its grant (and its placeholders).
pub(crate) fn holder(engine: &str, session_id: &str) -> String {
    format!("{engine}-{session_id}")
}
