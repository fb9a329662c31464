//! Small filesystem helpers: atomic writes, hashing, and private cache directories.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// `path`'s directory, checked to be the caller's (see [`reaper::PrivateDir`]), and its name.
pub(crate) fn private_parent(path: &Path) -> Result<(reaper::PrivateDir, String)> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Err(Error::MissingPath { path: path.to_owned() });
    };
    Ok((reaper::PrivateDir::open(dir)?, name.to_owned()))
}

/// Writes `bytes` to `path` via a temporary sibling and a rename, so readers never see a
/// half-written file and concurrent writers of the same content do not collide; never through
/// a link (see [`reaper::PrivateDir::replace`]).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let (dir, name) = private_parent(path)?;
    Ok(dir.replace(&name, bytes)?)
}

/// Writes `bytes` once under `dir/<prefix>-<sha>` and returns that path.
pub(crate) fn write_content_addressed(dir: &Path, prefix: &str, bytes: &[u8]) -> Result<PathBuf> {
    let dir = reaper::PrivateDir::open(dir)?;
    let name = format!("{prefix}-{}", &sha256_hex(bytes)[..16]);
    // Never replaced once there (a link, not a rename): a concurrent run may already hold the
    // first copy open to mount it, and a replaced file could no longer be mounted.
    if dir.stat(&name)?.is_none() {
        // Read by the sandbox, which a root caller runs as another uid.
        dir.write_once(&name, bytes, 0o644)?;
    }
    Ok(dir.path().join(name))
}

pub(crate) fn unique_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{}-{nanos}", std::process::id())
}

/// `create_dir_all` for our own cache directories (private to the user): every directory up to
/// the parent is checked like a [`reaper::PrivateDir`]; the leaf may already exist with another
/// owner (a root caller's caches are handed to the sandbox user).
pub(crate) fn create_dir_all(dir: &Path) -> Result<()> {
    let (parent, name) = private_parent(dir)?;
    match rustix::fs::mkdirat(parent.fd(), name.as_str(), rustix::fs::Mode::from_raw_mode(0o700)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => Ok(()),
        Err(e) => Err(Error::io(format!("creating {}", dir.display()))(e.into())),
    }
}

/// Identity of a file for caches keyed by "the same binary": path, size, mtime, inode.
pub(crate) fn identity(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    Some(format!(
        "{}|{}|{}|{}|{}",
        path.display(),
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ino()
    ))
}

/// Makes `dir` and everything below it owned by `uid:gid`, unless `dir` already is (its owner
/// is changed last, so an interrupted hand-over is redone). For a root caller's cache
/// directories that the sandbox, running as nobody, writes. Never follows a symlink and stays
/// on `dir`'s filesystem; entries that vanish meanwhile are skipped.
pub(crate) fn hand_over(dir: &Path, uid: u32, gid: u32) -> Result<()> {
    let meta = std::fs::symlink_metadata(dir)
        .map_err(Error::io(format!("inspecting {}", dir.display())))?;
    if meta.uid() == uid && meta.gid() == gid {
        return Ok(());
    }
    let owner =
        (Some(rustix::process::Uid::from_raw(uid)), Some(rustix::process::Gid::from_raw(gid)));
    let chown = |path: &Path| {
        rustix::fs::chownat(
            rustix::fs::CWD,
            path,
            owner.0,
            owner.1,
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
    };
    let mut stack = vec![dir.to_owned()];
    let mut dirs = Vec::new();
    while let Some(current) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(m) = std::fs::symlink_metadata(&path) else { continue };
            if m.is_dir() && m.dev() == meta.dev() {
                stack.push(path.clone());
                dirs.push(path);
            } else if m.uid() != uid || m.gid() != gid {
                let _ = chown(&path);
            }
        }
    }
    for sub in dirs.iter().rev() {
        let _ = chown(sub);
    }
    chown(dir).map_err(|e| Error::io(format!("handing {} to uid {uid}", dir.display()))(e.into()))
}

/// Recreates the tree `src` in the existing directory `dst`: directories anew (with their
/// modes, set once filled), files as hard links, symlinks as they are. For environments,
/// whose files nothing ever writes in place once built.
pub(crate) fn link_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(src)? {
        let entry = entry?;
        let (from, to) = (entry.path(), dst.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            std::fs::create_dir(&to)?;
            link_tree(&from, &to)?;
            std::fs::set_permissions(&to, entry.metadata()?.permissions())?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&from)?, &to)?;
        } else if kind.is_file() {
            std::fs::hard_link(&from, &to)?;
        }
    }
    Ok(())
}
