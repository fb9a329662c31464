//! Mount safety: every host path is canonicalized, targets reached through a symlink are
//! refused, missing read-write mount points are created without following symlinks, and some
//! paths are never mounted at all. [`check_policy`] is the pure part.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use engine_detect::CreateDirError;
use sandbox_core::{MissingMount, Mount, MountMode};

use crate::error::{Error, Result};
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

/// One extra mount. A missing path follows `sandbox_core::missing_mount`: read-write ones are
/// created (after the policy check, so a refused path is never created), read-only ones are an
/// error naming the path.
pub(crate) fn resolve_mount(mount: &Mount, home: &Path, cache_root: &Path) -> Result<Bind> {
    let access = match mount.mode {
        MountMode::ReadOnly => Access::ReadOnly,
        MountMode::ReadWrite => Access::ReadWrite,
    };
    let path = &mount.path;
    let missing = std::fs::symlink_metadata(path).is_err();
    if missing && sandbox_core::missing_mount(mount.mode) == MissingMount::CreateDir {
        check_policy(path, Use::Mount, home, cache_root)
            .map_err(|reason| Error::RefusedMount { path: path.clone(), reason })?;
        engine_detect::create_dir_all_nofollow(path).map_err(|e| create_error(path, e))?;
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

fn create_error(path: &Path, e: CreateDirError) -> Error {
    match e {
        CreateDirError::Symlink { at } => {
            let rest = path.strip_prefix(&at).unwrap_or(Path::new(""));
            let real = std::fs::canonicalize(&at).map_or_else(|_| at.clone(), |r| r.join(rest));
            Error::SymlinkInPath { path: path.to_owned(), real }
        }
        CreateDirError::NotADirectory { at } => Error::RefusedMount {
            path: path.to_owned(),
            reason: format!("{} is not a directory", at.display()),
        },
        CreateDirError::NotNormal => Error::RefusedMount {
            path: path.to_owned(),
            reason: "not a normalized absolute path".into(),
        },
        CreateDirError::Io { at, source } => {
            Error::Io { context: format!("creating {}", at.display()), source }
        }
    }
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
