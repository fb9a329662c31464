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

/// The name of a session's hold on its grant.
pub(crate) fn holder(engine: &str, session_id: &str) -> String {
    format!("{engine}-{session_id}")
}
