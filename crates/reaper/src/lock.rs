//! The environment lock protocol every engine shares (the one IO here besides /proc): one lock
//! file per prepared environment, which is also its last-use stamp (mtime).
//!
//! Runs hold it shared while they depend on the environment existing, prepare holds it exclusive
//! while building, and a pruner takes it exclusive without waiting (busy = in use) and unlinks it
//! while still holding it. Every locker therefore checks, once it holds the lock, that the path
//! still names the file it locked, and starts over if not: nobody ever holds a lock on a file the
//! next locker cannot see. Lock files are opened `O_NOFOLLOW` in a [`PrivateDir`], so a link
//! planted at a lock's name is an error, never a file created or touched elsewhere.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::Error;
use crate::hostfs::PrivateDir;

/// How to take an environment's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// Shared, waiting for an exclusive holder.
    Shared,
    /// Exclusive, waiting for every holder.
    Exclusive,
    /// Shared, or `None` at once when someone holds it exclusive.
    TryShared,
    /// Exclusive, or `None` at once when anyone holds it.
    TryExclusive,
}

/// Opens (creating) and locks `path`; `Ok(None)` only for the `Try*` modes when it is busy. The
/// lock lives as long as the returned file. The file is opened with `O_NOFOLLOW` inside its
/// directory checked as a [`PrivateDir`] (created if missing): a link planted there is never
/// followed, so taking a lock never creates or touches a file elsewhere.
pub fn lock_env(path: &Path, mode: LockMode) -> Result<Option<File>, Error> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Err(Error::HostFile {
            path: path.display().to_string(),
            message: "not a lock file path".to_owned(),
        });
    };
    lock_in(&PrivateDir::open(dir)?, name, mode)
}

/// [`lock_env`] for `name` in an already opened directory.
pub fn lock_in(dir: &PrivateDir, name: &str, mode: LockMode) -> Result<Option<File>, Error> {
    let io = |e: std::io::Error| Error::HostFile {
        path: dir.path().join(name).display().to_string(),
        message: e.to_string(),
    };
    loop {
        let file = dir.open_file(name)?;
        let taken = match mode {
            LockMode::Shared => file.lock_shared().map(|()| true),
            LockMode::Exclusive => file.lock().map(|()| true),
            LockMode::TryShared => try_lock(file.try_lock_shared()),
            LockMode::TryExclusive => try_lock(file.try_lock()),
        }
        .map_err(io)?;
        if !taken {
            return Ok(None);
        }
        let held = file.metadata().map_err(io)?;
        match dir.stat(name)? {
            Some(now) if now.st_dev == held.dev() && now.st_ino == held.ino() => {
                return Ok(Some(file));
            }
            _ => {}
        }
    }
}

fn try_lock(result: Result<(), std::fs::TryLockError>) -> std::io::Result<bool> {
    match result {
        Ok(()) => Ok(true),
        Err(std::fs::TryLockError::WouldBlock) => Ok(false),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}
