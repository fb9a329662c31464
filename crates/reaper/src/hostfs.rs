//! The one way the CLI writes its own files on the host (locks, stamps, records, profiles,
//! keys): inside a [`PrivateDir`], a directory reached by a descriptor walk that checked every
//! component, and through `*at` calls on that descriptor with `O_NOFOLLOW`.
//!
//! Why: a path string is resolved again by every call, so a directory that someone else can
//! write (or owns, and so can chmod) lets them plant a symlink that makes the caller create,
//! truncate or touch a file of their choosing with the caller's privileges. A directory is
//! trusted here when it is owned by the caller or root and nobody else can write it (a sticky
//! directory such as `/tmp` may be passed through: its entries cannot be replaced by others);
//! the directory the files go in must be the caller's own. The walk opens one component at a
//! time with `O_NOFOLLOW`; a symlink on the way (a user's `~/.cache` may be one) is resolved by
//! the walk itself, and only when the caller or root made it, so every directory actually used
//! is one that was checked and no link planted by someone else is ever followed.
//!
//! [`cache_base`] is where python-sandbox's cache lives when `HOME` is unset: it never names a
//! shared directory that the caller did not create (`/tmp/python-sandbox-<uid>` is used only
//! when the walk finds it the caller's own, else refused with a hint).

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use crate::Error;

/// The mode of every directory this module creates.
const DIR_MODE: u32 = 0o700;
/// The mode of every file this module creates.
const FILE_MODE: u32 = 0o600;
/// Links followed on one walk before giving up (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// Where python-sandbox's cache root goes (the caller appends `python-sandbox`):
/// `XDG_CACHE_HOME`, else `HOME/.cache`, else `XDG_RUNTIME_DIR` (private to the user by the
/// XDG spec), else `<tmp>/python-sandbox-<uid>`. Pure: `get` reads the environment. Only
/// absolute values count. The last one is a name anyone could have taken first: it is safe
/// only because every use goes through [`PrivateDir::open`], which refuses it unless it is the
/// caller's own.
pub fn cache_base(get: &dyn Fn(&str) -> Option<OsString>, tmp: &Path, uid: u32) -> PathBuf {
    let absolute = |name: &str| get(name).map(PathBuf::from).filter(|p| p.is_absolute());
    absolute("XDG_CACHE_HOME")
        .or_else(|| absolute("HOME").map(|h| h.join(".cache")))
        .or_else(|| absolute("XDG_RUNTIME_DIR"))
        .unwrap_or_else(|| tmp.join(format!("python-sandbox-{uid}")))
}

/// What a directory on the way must be. Pure, over `fstat`'s owner and mode.
fn check(owner: u32, mode: u32, me: u32, own: bool) -> Result<(), String> {
    let others_write = mode & 0o022 != 0;
    let sticky = mode & 0o1000 != 0;
    if own {
        if owner != me {
            return Err(format!("belongs to uid {owner}, not to you (uid {me})"));
        }
        if others_write {
            return Err(format!("can be written by others (mode {:o})", mode & 0o7777));
        }
    } else {
        if owner != me && owner != 0 {
            return Err(format!("belongs to uid {owner}, neither you (uid {me}) nor root"));
        }
        if others_write && !sticky {
            return Err(format!("can be written by others (mode {:o})", mode & 0o7777));
        }
    }
    Ok(())
}

fn unsafe_dir(path: &Path, problem: impl Into<String>) -> Error {
    Error::UnsafeDir { path: path.display().to_string(), problem: problem.into() }
}

fn file_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::HostFile { path: path.display().to_string(), message: e.to_string() }
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// A directory that is the caller's own and was reached without following a link through
/// anything someone else controls. Files in it are opened relative to its descriptor.
#[derive(Debug)]
pub struct PrivateDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl PrivateDir {
    /// Opens `path`, creating missing directories (mode 0700). Fails with
    /// [`Error::UnsafeDir`] when a component is a symlink (below the resolved prefix), belongs
    /// to someone else than the caller or root, or others can write it (unless sticky), or
    /// when `path` itself is not the caller's own.
    pub fn open(path: &Path) -> Result<PrivateDir, Error> {
        if !path.is_absolute() {
            return Err(unsafe_dir(path, "is not an absolute path"));
        }
        let me = rustix::process::geteuid().as_raw();
        let root = rustix::fs::open("/", dir_flags(), Mode::empty())
            .map_err(|e| file_error(Path::new("/"), e))?;
        // The directories walked so far, `/` first: `..` in a link target goes back up.
        let mut walked: Vec<(OwnedFd, PathBuf)> = vec![(root, PathBuf::from("/"))];
        let mut pending: Vec<OsString> = names(path);
        pending.reverse();
        let mut links = 0;
        verify(&walked[0].0, Path::new("/"), me, pending.is_empty())?;
        while let Some(name) = pending.pop() {
            if name == "." {
                continue;
            }
            if name == ".." {
                if walked.len() > 1 {
                    walked.pop();
                }
                continue;
            }
            let Some((fd, parent)) = walked.last() else {
                return Err(unsafe_dir(path, "has no existing ancestor"));
            };
            let at = parent.join(&name);
            let next = match rustix::fs::openat(fd, &name, dir_flags(), Mode::empty()) {
                Ok(next) => next,
                Err(Errno::NOENT) => {
                    match rustix::fs::mkdirat(fd, &name, Mode::from_raw_mode(DIR_MODE)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(file_error(&at, e)),
                    }
                    rustix::fs::openat(fd, &name, dir_flags(), Mode::empty())
                        .map_err(|e| opened(&at, e))?
                }
                Err(Errno::LOOP | Errno::NOTDIR) => {
                    // A link is followed only when the caller or root made it: its directory
                    // passed the checks, so nobody else could have put it there, except in a
                    // sticky directory, where the link's own owner tells.
                    let stat = rustix::fs::statat(fd, &name, AtFlags::SYMLINK_NOFOLLOW)
                        .map_err(|e| file_error(&at, e))?;
                    if stat.st_mode & 0o170_000 != 0o120_000 {
                        return Err(unsafe_dir(&at, "is not a directory"));
                    }
                    if stat.st_uid != me && stat.st_uid != 0 {
                        return Err(unsafe_dir(
                            &at,
                            format!("is a symlink made by uid {}", stat.st_uid),
                        ));
                    }
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(unsafe_dir(&at, "has too many levels of symlinks"));
                    }
                    let target = rustix::fs::readlinkat(fd, &name, Vec::new())
                        .map_err(|e| file_error(&at, e))?;
                    let target = PathBuf::from(std::ffi::OsStr::from_bytes(target.as_bytes()));
                    if target.is_absolute() {
                        walked.truncate(1);
                    }
                    pending.extend(names(&target).into_iter().rev());
                    continue;
                }
                Err(e) => return Err(opened(&at, e)),
            };
            verify(&next, &at, me, pending.is_empty())?;
            walked.push((next, at));
        }
        let (fd, _) = walked.pop().ok_or_else(|| unsafe_dir(path, "has no directory"))?;
        Ok(PrivateDir { fd, path: path.to_owned() })
    }

    /// The path it was opened as (for messages and for handing to other programs).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory's descriptor, for `*at` calls of the caller's own.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// `name` below this directory, checked like [`PrivateDir::open`] and created if missing.
    pub fn sub(&self, name: &str) -> Result<PrivateDir, Error> {
        let path = self.path.join(name);
        check_name(&path, name)?;
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(DIR_MODE)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(file_error(&path, e)),
        }
        let fd = rustix::fs::openat(&self.fd, name, dir_flags(), Mode::empty())
            .map_err(|e| opened(&path, e))?;
        verify(&fd, &path, rustix::process::geteuid().as_raw(), true)?;
        Ok(PrivateDir { fd, path })
    }

    fn file(&self, name: &str, flags: OFlags) -> Result<Option<File>, Error> {
        let path = self.path.join(name);
        check_name(&path, name)?;
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
        match rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(FILE_MODE)) {
            Ok(fd) => {
                let stat = rustix::fs::fstat(&fd).map_err(|e| file_error(&path, e))?;
                if stat.st_mode & 0o170_000 != 0o100_000 {
                    return Err(unsafe_dir(&path, "is not a regular file"));
                }
                Ok(Some(File::from(fd)))
            }
            Err(Errno::EXIST | Errno::NOENT) => Ok(None),
            Err(e) => Err(opened(&path, e)),
        }
    }

    /// Opens `name` read-write, creating it (0600) if missing and never truncating it.
    pub fn open_file(&self, name: &str) -> Result<File, Error> {
        self.file(name, OFlags::RDWR | OFlags::CREATE)?
            .ok_or_else(|| file_error(&self.path.join(name), "vanished while being created"))
    }

    /// Creates `name` (0600); `Ok(None)` when it exists already.
    pub fn create_new(&self, name: &str) -> Result<Option<File>, Error> {
        self.file(name, OFlags::RDWR | OFlags::CREATE | OFlags::EXCL)
    }

    /// Reads `name`; `Ok(None)` when it does not exist.
    pub fn read(&self, name: &str) -> Result<Option<Vec<u8>>, Error> {
        let Some(mut file) = self.file(name, OFlags::RDONLY)? else { return Ok(None) };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(|e| file_error(&self.path.join(name), e))?;
        Ok(Some(bytes))
    }

    /// `name`'s metadata without following a link; `Ok(None)` when it does not exist.
    pub fn stat(&self, name: &str) -> Result<Option<rustix::fs::Stat>, Error> {
        let path = self.path.join(name);
        check_name(&path, name)?;
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(stat)),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(file_error(&path, e)),
        }
    }

    /// `name`'s mtime (of a link itself, never its target); `None` when it does not exist.
    pub fn modified(&self, name: &str) -> Result<Option<std::time::SystemTime>, Error> {
        Ok(self.stat(name)?.map(|stat| {
            let secs = u64::try_from(stat.st_mtime).unwrap_or(0);
            let nanos = u32::try_from(stat.st_mtime_nsec).unwrap_or(0);
            std::time::UNIX_EPOCH + std::time::Duration::new(secs, nanos)
        }))
    }

    /// Sets `name`'s mtime to now, creating it empty if missing (never truncating).
    pub fn touch(&self, name: &str) -> Result<(), Error> {
        let file = self.open_file(name)?;
        file.set_modified(std::time::SystemTime::now())
            .map_err(|e| file_error(&self.path.join(name), e))
    }

    /// Replaces `name` with `bytes` through a temporary file and a rename in this directory, so
    /// readers see the old or the new content, never a torn one.
    pub fn replace(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        self.replace_with(name, bytes, true)
    }

    /// [`PrivateDir::replace`] without flushing the content to the disk first: for records
    /// written on a run's hot path whose loss in a host crash costs little (each flush took 3
    /// to 10 ms here). Readers still never see a torn record.
    pub fn replace_unflushed(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        self.replace_with(name, bytes, false)
    }

    fn replace_with(&self, name: &str, bytes: &[u8], flush: bool) -> Result<(), Error> {
        let tmp = self.write_temp(name, bytes, flush)?;
        rustix::fs::renameat(&self.fd, &tmp, &self.fd, name).map_err(|e| {
            let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
            file_error(&self.path.join(name), e)
        })
    }

    /// Writes `name` with `bytes` and permission bits `mode` unless it exists (the first writer
    /// wins: a link, not a rename, so a reader holding the first copy keeps it). `Ok(false)`
    /// when it existed. `mode` is for files another uid must read (a sandbox's `/etc/passwd`).
    pub fn write_once(&self, name: &str, bytes: &[u8], mode: u32) -> Result<bool, Error> {
        let tmp = self.write_temp(name, bytes, true)?;
        if mode != FILE_MODE {
            let chmod =
                rustix::fs::chmodat(&self.fd, &tmp, Mode::from_raw_mode(mode), AtFlags::empty());
            if let Err(e) = chmod {
                let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
                return Err(file_error(&self.path.join(name), e));
            }
        }
        let linked = rustix::fs::linkat(&self.fd, &tmp, &self.fd, name, AtFlags::empty());
        let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
        match linked {
            Ok(()) => Ok(true),
            Err(Errno::EXIST) => Ok(false),
            Err(e) => Err(file_error(&self.path.join(name), e)),
        }
    }

    /// Removes `name` (a file or a link, never what a link points to); gone is fine.
    pub fn remove(&self, name: &str) -> Result<(), Error> {
        let path = self.path.join(name);
        check_name(&path, name)?;
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(file_error(&path, e)),
        }
    }

    fn write_temp(&self, name: &str, bytes: &[u8], flush: bool) -> Result<String, Error> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let tmp =
            format!(".{name}.{}.{}.tmp", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
        let path = self.path.join(&tmp);
        let mut file =
            self.create_new(&tmp)?.ok_or_else(|| file_error(&path, "temporary name taken"))?;
        let written = file.write_all(bytes);
        written.and_then(|()| if flush { file.sync_all() } else { Ok(()) }).map_err(|e| {
            let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
            file_error(&path, e)
        })?;
        Ok(tmp)
    }
}

/// The components of `path` as names, `.` and `..` kept (a link target is walked as written).
fn names(path: &Path) -> Vec<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_owned()),
            Component::ParentDir => Some("..".into()),
            Component::CurDir => Some(".".into()),
            Component::RootDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// A file name must stay in its directory.
fn check_name(path: &Path, name: &str) -> Result<(), Error> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return Err(unsafe_dir(path, "is not a plain file name"));
    }
    Ok(())
}

fn opened(path: &Path, e: Errno) -> Error {
    match e {
        Errno::LOOP | Errno::NOTDIR => unsafe_dir(path, "is a symlink or not a directory"),
        e => file_error(path, e),
    }
}

fn verify(fd: &OwnedFd, path: &Path, me: u32, own: bool) -> Result<(), Error> {
    let stat = rustix::fs::fstat(fd).map_err(|e| file_error(path, e))?;
    check(stat.st_uid, stat.st_mode, me, own).map_err(|problem| unsafe_dir(path, problem))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallbacks() {
        let tmp = Path::new("/tmp");
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.into())
        };
        let cases: [(&[(&str, &str)], &str); 5] = [
            (&[("XDG_CACHE_HOME", "/c"), ("HOME", "/h")], "/c"),
            (&[("XDG_CACHE_HOME", "rel"), ("HOME", "/h")], "/h/.cache"),
            (&[("XDG_RUNTIME_DIR", "/run/user/0")], "/run/user/0"),
            (&[("HOME", ""), ("XDG_RUNTIME_DIR", "run")], "/tmp/python-sandbox-7"),
            (&[], "/tmp/python-sandbox-7"),
        ];
        for (pairs, want) in cases {
            assert_eq!(cache_base(&env(pairs), tmp, 7), Path::new(want), "{pairs:?}");
        }
    }

    #[test]
    fn checks() {
        let cases = [
            // (owner, mode, own) → verdict for caller uid 1000
            (1000, 0o40700, true, None),
            (1000, 0o40755, true, None),
            (1000, 0o40775, true, Some("can be written by others (mode 775)")),
            (0, 0o40700, true, Some("belongs to uid 0, not to you (uid 1000)")),
            (0, 0o41777, false, None),
            (0, 0o40755, false, None),
            (1001, 0o40755, false, Some("belongs to uid 1001, neither you (uid 1000) nor root")),
            (0, 0o40777, false, Some("can be written by others (mode 777)")),
        ];
        for (owner, mode, own, want) in cases {
            let got = check(owner, mode, 1000, own).err();
            assert_eq!(got.as_deref(), want, "{owner} {mode:o} {own}");
        }
    }
}
