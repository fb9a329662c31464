//! Mount safety: every host path is canonicalized, targets reached through a symlink are
//! refused, read-write mount points are created here without following symlinks, and some
//! paths are never mounted at all. [`check_policy`] is the pure part.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use sandbox_core::{Mount, MountMode};

use crate::error::{Error, Result};
use crate::fsutil;
use crate::plan::{Access, Bind};

/// What a path is being used for (the rules differ slightly).
pub(crate) use sandbox_core::PathUse as Use;

/// What the cache holds, for the refusal of paths overlapping it.
const CACHE_HOLDS: &str = "the prepared environments, which scripts must not change";

/// Pure: `Err(reason)` when a canonical path must not be mounted (the rules every engine shares,
/// with the bwrap cache as python-sandbox's own directory).
pub(crate) fn check_policy(
    path: &Path,
    usage: Use,
    home: &Path,
    cache_root: &Path,
) -> std::result::Result<(), String> {
    sandbox_core::check_host_path(path, usage, Some(home), (cache_root, CACHE_HOLDS))
}

/// Canonicalizes `path` and insists it already was canonical (no symlink on the way).
fn canonical_exact(path: &Path) -> Result<PathBuf> {
    if !path.is_absolute() {
        return Err(Error::RefusedMount {
            path: path.to_owned(),
            reason: "not an absolute path".into(),
        });
    }
    let real = std::fs::canonicalize(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::MissingPath { path: path.to_owned() },
        _ => Error::Io { context: format!("resolving {}", path.display()), source: e },
    })?;
    if real != path {
        return Err(Error::SymlinkInPath { path: path.to_owned(), real });
    }
    Ok(real)
}

/// The workspace: canonical, existing, and not something that would expose too much.
pub(crate) fn resolve_workspace(path: &Path, home: &Path, cache_root: &Path) -> Result<PathBuf> {
    let real =
        std::fs::canonicalize(path).map_err(|_| Error::MissingPath { path: path.to_owned() })?;
    check_policy(&real, Use::Workspace, home, cache_root)
        .map_err(|reason| Error::RefusedWorkspace { path: real.clone(), reason })?;
    Ok(real)
}

/// One extra mount: read-only ones must exist; read-write directories are created.
pub(crate) fn resolve_mount(mount: &Mount, home: &Path, cache_root: &Path) -> Result<Bind> {
    let access = match mount.mode {
        MountMode::ReadOnly => Access::ReadOnly,
        MountMode::ReadWrite => Access::ReadWrite,
    };
    let path = &mount.path;
    let exists = std::fs::symlink_metadata(path).is_ok();
    if !exists && access == Access::ReadWrite {
        fsutil::create_dir_all_nofollow(path)?;
    }
    let real = canonical_exact(path)?;
    check_policy(&real, Use::Mount, home, cache_root)
        .map_err(|reason| Error::RefusedMount { path: real.clone(), reason })?;
    let meta =
        std::fs::metadata(&real).map_err(Error::io(format!("inspecting {}", real.display())))?;
    if meta.file_type().is_socket() {
        return Err(Error::RefusedMount {
            path: real,
            reason: "it is a socket; host sockets never enter the sandbox".into(),
        });
    }
    Ok(Bind::same(&real, access))
}

/// The script, canonical (it may live outside the workspace; then it is mounted read-only).
pub(crate) fn resolve_script(path: &Path) -> Result<PathBuf> {
    let real =
        std::fs::canonicalize(path).map_err(|_| Error::MissingPath { path: path.to_owned() })?;
    if !real.is_file() {
        return Err(Error::MissingPath { path: real });
    }
    Ok(real)
}
