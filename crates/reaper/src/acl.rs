//! Lending a root caller's directories to the sandbox user for one run, and giving them back.
//!
//! A root caller's sandbox runs as an unprivileged uid (65534), never as host root, so it can
//! only write the workspace and read-write mounts through one extra POSIX ACL entry
//! (`user:<uid>:rwx` plus the mask). [`Grant::take`] adds it and [`Grant::release`] (also on
//! drop) puts each directory's access ACL and mode back exactly as they were: the original
//! `system.posix_acl_access` bytes, or no xattr at all.
//!
//! **Protocol** (the environment lock of [`crate::lock_env`], per directory). The state dir
//! (0700, under the caller's cache) holds for each directory, keyed by device and inode:
//! - `<key>.lock`: every run holds it shared while it needs the grant;
//! - `<key>.acl`: the original ACL and mode, recorded by the first taker before the change
//!   (created with `link`, so concurrent first takers record it once);
//! - `<key>.hold.<holder>`: a grant that outlives its process (a session, [`Grant::hold`]).
//!
//! Release drops its shared lock, then takes the lock exclusive without waiting: only the last
//! user gets it, and restores when no hold is left (`step`). A run killed with -9 leaves the
//! record; [`reap`] restores it once the lock is free. Every change goes through a directory
//! descriptor opened component by component with `O_NOFOLLOW` (never by path), because the
//! sandbox may have swapped a directory for a symlink; a record is only restored onto the
//! directory with its device and inode. [`reclaim`] hands what the sandbox created back to
//! root, with the same no-follow walk.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, XattrFlags};

use crate::{Error, LockMode, PrivateDir, lock_env};

/// The xattr that holds a file's access ACL.
const XATTR: &str = "system.posix_acl_access";
const ACL_VERSION: u32 = 2;
const ACL_USER_OBJ: u16 = 0x01;
const ACL_USER: u16 = 0x02;
const ACL_GROUP_OBJ: u16 = 0x04;
const ACL_MASK: u16 = 0x10;
const ACL_OTHER: u16 = 0x20;
const ACL_UNDEFINED_ID: u32 = u32::MAX;
/// First line of a record; bumped when its layout changes.
const RECORD_MAGIC: &str = "python-sandbox acl v1";
/// Deeper trees are not reclaimed below this depth (a sandbox could nest without end).
const RECLAIM_DEPTH: usize = 256;

/// The state directory of the grants under python-sandbox's cache root (every engine uses it,
/// so runs of different engines in one workspace share the protocol).
pub fn state_dir(cache_root: &Path) -> PathBuf {
    cache_root.join("acl")
}

/// One ACL entry: tag, permission bits, qualifier (uid/gid, or undefined).
type Entry = (u16, u16, u32);

/// Pure: the entries of an xattr value; `None` when it is not a version 2 ACL.
pub(crate) fn decode(bytes: &[u8]) -> Option<Vec<Entry>> {
    let (head, body) = bytes.split_first_chunk::<4>()?;
    if u32::from_le_bytes(*head) != ACL_VERSION || !body.len().is_multiple_of(8) {
        return None;
    }
    let entries = body
        .chunks_exact(8)
        .map(|c| {
            let tag = u16::from_le_bytes([c[0], c[1]]);
            let perm = u16::from_le_bytes([c[2], c[3]]);
            (tag, perm, u32::from_le_bytes([c[4], c[5], c[6], c[7]]))
        })
        .collect();
    Some(entries)
}

/// Pure: the xattr value of `entries`.
pub(crate) fn encode(entries: &[Entry]) -> Vec<u8> {
    let mut out = ACL_VERSION.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

/// Pure: the access ACL of a directory with `mode` and ACL `existing` plus rwx for `uid`, or
/// `None` when it already grants that. Other named entries are kept.
pub(crate) fn with_user(mode: u32, existing: Option<&[Entry]>, uid: u32) -> Option<Vec<u8>> {
    let mut entries: Vec<Entry> = match existing {
        Some(entries) => entries.to_vec(),
        None => vec![
            (ACL_USER_OBJ, ((mode >> 6) & 7) as u16, ACL_UNDEFINED_ID),
            (ACL_GROUP_OBJ, ((mode >> 3) & 7) as u16, ACL_UNDEFINED_ID),
            (ACL_OTHER, (mode & 7) as u16, ACL_UNDEFINED_ID),
        ],
    };
    let has_user = entries.iter().any(|&(t, p, id)| t == ACL_USER && id == uid && p & 7 == 7);
    let mask_ok = entries.iter().any(|&(t, p, _)| t == ACL_MASK && p & 7 == 7);
    if has_user && mask_ok {
        return None;
    }
    entries.retain(|&(t, _, id)| !(t == ACL_USER && id == uid) && t != ACL_MASK);
    entries.push((ACL_USER, 7, uid));
    // The mask bounds every named entry: without rwx in it the new entry would grant nothing.
    entries.push((ACL_MASK, 7, ACL_UNDEFINED_ID));
    entries.sort_by_key(|&(t, _, id)| (t, id));
    Some(encode(&entries))
}

/// What a directory looked like before the first grant: what a release puts back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) path: PathBuf,
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    /// The permission bits (`0o7777`), which an ACL's mask changes.
    pub(crate) mode: u32,
    /// The exact xattr value, `None` when there was none.
    pub(crate) acl: Option<Vec<u8>>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

impl Record {
    /// Pure: the record file's text (paths and ACL bytes in hex: any bytes survive).
    pub(crate) fn encode(&self) -> String {
        let acl = self.acl.as_deref().map_or_else(|| "-".to_owned(), hex);
        format!(
            "{RECORD_MAGIC}\ndev {}\nino {}\nmode {:o}\nacl {acl}\npath {}\n",
            self.dev,
            self.ino,
            self.mode,
            hex(self.path.as_os_str().as_bytes())
        )
    }

    /// Pure: a record file's text back; `None` for anything this version did not write.
    pub(crate) fn decode(text: &str) -> Option<Record> {
        let mut lines = text.lines();
        if lines.next()? != RECORD_MAGIC {
            return None;
        }
        let mut field = |name: &str| lines.next()?.strip_prefix(name)?.strip_prefix(' ');
        let dev = field("dev")?.parse().ok()?;
        let ino = field("ino")?.parse().ok()?;
        let mode = u32::from_str_radix(field("mode")?, 8).ok().filter(|m| *m <= 0o7777)?;
        let acl = match field("acl")? {
            "-" => None,
            bytes => Some(unhex(bytes).filter(|b| decode(b).is_some())?),
        };
        let path = PathBuf::from(std::ffi::OsString::from_vec(unhex(field("path")?)?));
        path.is_absolute().then_some(Record { path, dev, ino, mode, acl })
    }
}

/// What to do with a directory's grant once its shared lock is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Put the record back and remove it.
    Restore,
    /// Another run holds the lock: it restores when it ends.
    InUse,
    /// A session still holds it.
    Held,
    /// Nothing was changed (the directory already granted the uid): nothing to put back.
    Nothing,
}

/// Pure: the protocol's decision. `exclusive`: the lock was taken exclusive without waiting;
/// `holds`: live holds left; `recorded`: a record exists.
pub(crate) fn step(exclusive: bool, holds: usize, recorded: bool) -> Step {
    match (exclusive, holds, recorded) {
        (false, _, _) => Step::InUse,
        (true, 0, true) => Step::Restore,
        (true, 0, false) => Step::Nothing,
        (true, _, _) => Step::Held,
    }
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::AclState { path: path.display().to_string(), message: e.to_string() }
}

fn errno(path: &Path) -> impl Fn(rustix::io::Errno) -> Error + '_ {
    move |e| Error::AclState {
        path: path.display().to_string(),
        message: std::io::Error::from(e).to_string(),
    }
}

/// Opens the directory `path` (absolute, no `.` or `..`) one component at a time with
/// `O_NOFOLLOW`: a symlink anywhere on the way is an error, never followed.
fn open_dir(path: &Path) -> Result<OwnedFd, Error> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut components = path.components();
    if components.next() != Some(Component::RootDir) {
        return Err(Error::AclState {
            path: path.display().to_string(),
            message: "not absolute".into(),
        });
    }
    let mut fd = rustix::fs::open("/", flags, Mode::empty()).map_err(errno(path))?;
    for component in components {
        let Component::Normal(name) = component else {
            return Err(Error::AclState {
                path: path.display().to_string(),
                message: "not a canonical path".into(),
            });
        };
        fd = rustix::fs::openat(&fd, name, flags, Mode::empty()).map_err(errno(path))?;
    }
    Ok(fd)
}

/// The directory's access ACL, `None` when it has none.
fn read_acl(fd: impl AsFd, path: &Path) -> Result<Option<Vec<u8>>, Error> {
    let mut buf = vec![0u8; 4096];
    match rustix::fs::fgetxattr(fd, XATTR, &mut buf[..]) {
        Ok(n) => {
            buf.truncate(n);
            Ok(Some(buf))
        }
        Err(rustix::io::Errno::NODATA) => Ok(None),
        Err(e) => Err(errno(path)(e)),
    }
}

/// Puts `record` back on the directory `fd` (which must be the recorded one).
fn restore(fd: impl AsFd, record: &Record) -> Result<(), Error> {
    let path = &record.path;
    let acl_error = |e: rustix::io::Errno| Error::Acl {
        action: "restore",
        path: path.display().to_string(),
        message: std::io::Error::from(e).to_string(),
    };
    match &record.acl {
        Some(bytes) => rustix::fs::fsetxattr(&fd, XATTR, bytes, XattrFlags::empty()),
        None => match rustix::fs::fremovexattr(&fd, XATTR) {
            Err(rustix::io::Errno::NODATA) => Ok(()),
            other => other,
        },
    }
    .map_err(acl_error)?;
    // Setting or removing the ACL leaves the mask in the group bits: the mode goes back too.
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(record.mode)).map_err(acl_error)
}

/// The files of one directory's state.
struct Paths {
    lock: PathBuf,
    record: PathBuf,
}

impl Paths {
    fn new(state_dir: &Path, key: &str) -> Paths {
        Paths {
            lock: state_dir.join(format!("{key}.lock")),
            record: state_dir.join(format!("{key}.acl")),
        }
    }
}

fn key_of(dev: u64, ino: u64) -> String {
    format!("{dev:x}-{ino:x}")
}

/// The holders with a hold file for `key`.
fn holders(state_dir: &Path, key: &str) -> Result<Vec<String>, Error> {
    let prefix = format!("{key}.hold.");
    let entries = std::fs::read_dir(state_dir).map_err(io_error(state_dir))?;
    Ok(entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix(&prefix).map(str::to_owned))
        .collect())
}

fn read_record(path: &Path) -> Result<Option<Record>, Error> {
    match std::fs::read_to_string(path) {
        Ok(text) => Record::decode(&text).map(Some).ok_or_else(|| Error::AclState {
            path: path.display().to_string(),
            message: "not a record this version wrote".into(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(path)(e)),
    }
}

/// Writes `record` unless one exists (the first taker's wins).
fn write_record_once(paths: &Paths, record: &Record) -> Result<(), Error> {
    let (dir, name) = in_private_dir(&paths.record)?;
    dir.write_once(&name, record.encode().as_bytes(), 0o600).map(|_| ())
}

/// `path`'s directory as a [`PrivateDir`], and its file name.
fn in_private_dir(path: &Path) -> Result<(PrivateDir, String), Error> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Err(Error::AclState {
            path: path.display().to_string(),
            message: "not a state file".into(),
        });
    };
    Ok((PrivateDir::open(dir)?, name.to_owned()))
}

/// Creates the state dir, private to the caller.
fn ensure_state_dir(state_dir: &Path) -> Result<(), Error> {
    PrivateDir::open(state_dir).map(|_| ())
}

/// One directory lent to the sandbox user.
#[derive(Debug)]
struct Lent {
    path: PathBuf,
    key: String,
    fd: OwnedFd,
    lock: Option<File>,
}

/// Directories lent to a sandbox uid; given back on [`Grant::release`] or drop.
#[derive(Debug)]
pub struct Grant {
    state_dir: PathBuf,
    lent: Vec<Lent>,
}

impl Grant {
    /// Grants `uid` rwx on each directory in `dirs` (absolute, canonical; anything not a
    /// directory is skipped), recording the original ACL and mode first, under a shared lock
    /// in `state_dir` (see [`state_dir`]) that lasts until release.
    pub fn take(dirs: &[&Path], uid: u32, state_dir: &Path) -> Result<Grant, Error> {
        ensure_state_dir(state_dir)?;
        let mut grant = Grant { state_dir: state_dir.to_owned(), lent: Vec::new() };
        for &dir in dirs {
            let fd = match open_dir(dir) {
                Ok(fd) => fd,
                Err(_) if !dir.is_dir() => continue,
                Err(e) => return Err(e),
            };
            let stat = rustix::fs::fstat(&fd).map_err(errno(dir))?;
            let key = key_of(stat.st_dev, stat.st_ino);
            if grant.lent.iter().any(|l| l.key == key) {
                continue;
            }
            let paths = Paths::new(state_dir, &key);
            let lock = lock_env(&paths.lock, LockMode::Shared)?;
            // From here on a release must see this directory, even if the grant fails.
            grant.lent.push(Lent { path: dir.to_owned(), key, fd, lock });
            let Some(lent) = grant.lent.last() else { continue };
            // The mode again, under the lock: before it, another run's grant may have been
            // in place (its mask in the group bits).
            let stat = rustix::fs::fstat(&lent.fd).map_err(errno(dir))?;
            let current = read_acl(&lent.fd, dir)?;
            let entries = match current.as_deref() {
                Some(bytes) => Some(decode(bytes).ok_or_else(|| Error::Acl {
                    action: "read",
                    path: dir.display().to_string(),
                    message: "not a POSIX ACL of version 2".into(),
                })?),
                None => None,
            };
            let Some(granted) = with_user(stat.st_mode, entries.as_deref(), uid) else { continue };
            let record = Record {
                path: dir.to_owned(),
                dev: stat.st_dev,
                ino: stat.st_ino,
                mode: stat.st_mode & 0o7777,
                acl: current,
            };
            write_record_once(&paths, &record)?;
            rustix::fs::fsetxattr(&lent.fd, XATTR, &granted, XattrFlags::empty()).map_err(|e| {
                Error::Acl {
                    action: "grant",
                    path: dir.display().to_string(),
                    message: std::io::Error::from(e).to_string(),
                }
            })?;
        }
        Ok(grant)
    }

    /// Gives every directory back: each one no other run or session still uses gets its
    /// original ACL and mode. The first error is returned after trying them all.
    pub fn release(mut self) -> Result<(), Error> {
        self.release_all()
    }

    /// Turns the grant into a hold named `holder` (letters, digits, `.`, `_`, `-`): the
    /// directories stay lent after this process ends, until [`release_holder`] (or [`reap`],
    /// once the holder is gone).
    pub fn hold(mut self, holder: &str) -> Result<(), Error> {
        check_holder(holder)?;
        let hold_path = |l: &Lent| self.state_dir.join(format!("{}.hold.{holder}", l.key));
        for l in &self.lent {
            let path = hold_path(l);
            let written = in_private_dir(&path)
                .and_then(|(dir, name)| dir.replace(&name, l.path.as_os_str().as_bytes()));
            if let Err(e) = written {
                // Without every hold the grant is given back (on drop), none left behind.
                for l in &self.lent {
                    let _ = std::fs::remove_file(hold_path(l));
                }
                return Err(e);
            }
        }
        // The holds keep the directories lent; the locks go with this process.
        self.lent.clear();
        Ok(())
    }

    fn release_all(&mut self) -> Result<(), Error> {
        let mut first = None;
        for mut lent in std::mem::take(&mut self.lent) {
            drop(lent.lock.take());
            if let Err(e) = give_back(&self.state_dir, &lent.key, Some(&lent.fd), &|_| true, false)
            {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        let _ = self.release_all();
    }
}

pub(crate) fn check_holder(holder: &str) -> Result<(), Error> {
    let ok = !holder.is_empty()
        && holder.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok { Ok(()) } else { Err(Error::InvalidLabelValue { value: holder.to_owned() }) }
}

/// Ends the holds of `holder` and gives back the directories nobody else uses.
pub fn release_holder(state_dir: &Path, holder: &str) -> Result<(), Error> {
    check_holder(holder)?;
    let suffix = format!(".hold.{holder}");
    let Ok(entries) = std::fs::read_dir(state_dir) else { return Ok(()) };
    let keys: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(&suffix).map(str::to_owned))
        .collect();
    let mut first = None;
    for key in keys {
        let _ = std::fs::remove_file(state_dir.join(format!("{key}{suffix}")));
        if let Err(e) = give_back(state_dir, &key, None, &|_| true, false) {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// The protocol's release for one key: exclusive without waiting, then [`step`]. `fd` is the
/// directory when the caller still has it open; otherwise the record's path is opened and
/// must still be the recorded directory. Holds whose holder is not `alive` are dropped first
/// (unless `dry_run`).
fn give_back(
    state_dir: &Path,
    key: &str,
    fd: Option<&OwnedFd>,
    alive: &dyn Fn(&str) -> bool,
    dry_run: bool,
) -> Result<Step, Error> {
    let paths = Paths::new(state_dir, key);
    let exclusive = lock_env(&paths.lock, LockMode::TryExclusive)?;
    let mut holds = 0;
    if exclusive.is_some() {
        for holder in holders(state_dir, key)? {
            if alive(&holder) {
                holds += 1;
            } else if !dry_run {
                let _ = std::fs::remove_file(state_dir.join(format!("{key}.hold.{holder}")));
            }
        }
    }
    let record = if exclusive.is_some() { read_record(&paths.record)? } else { None };
    let decided = step(exclusive.is_some(), holds, record.is_some());
    if dry_run || exclusive.is_none() || holds > 0 {
        return Ok(decided);
    }
    if let Some(record) = record {
        let opened;
        let fd = match fd {
            Some(fd) => Some(fd),
            None => {
                opened = open_dir(&record.path).ok();
                opened.as_ref()
            }
        };
        let same = fd
            .and_then(|fd| rustix::fs::fstat(fd).ok())
            .is_some_and(|st| (st.st_dev, st.st_ino) == (record.dev, record.ino));
        // A directory that is gone or was replaced has nothing of ours to put back.
        if let (true, Some(fd)) = (same, fd) {
            restore(fd, &record)?;
        }
        std::fs::remove_file(&paths.record).map_err(io_error(&paths.record))?;
    }
    // Removed while held, like a pruned environment's lock: lockers check the path still names it.
    let _ = std::fs::remove_file(&paths.lock);
    Ok(decided)
}

/// A directory a run or session left lent (its process was killed), as [`reap`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// The directory.
    pub path: PathBuf,
    /// Its original ACL and mode were put back (never with `dry_run`).
    pub restored: bool,
    /// Why it was kept, or what failed: `in use`, `held by a session`, an error.
    pub error: Option<String>,
}

/// Restores every recorded directory whose lock is free and whose holders are not `alive`
/// (or with `dry_run` only lists them): what a run killed with -9, or a session that expired,
/// left behind.
pub fn reap(
    state_dir: &Path,
    dry_run: bool,
    alive: &dyn Fn(&str) -> bool,
) -> Result<Vec<Leftover>, Error> {
    let entries = match std::fs::read_dir(state_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(state_dir)(e)),
    };
    let mut keys: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".acl").map(str::to_owned))
        .collect();
    keys.sort();
    let mut out = Vec::new();
    for key in keys {
        let paths = Paths::new(state_dir, &key);
        let path = match read_record(&paths.record) {
            Ok(Some(record)) => record.path,
            Ok(None) => continue,
            Err(e) => {
                out.push(Leftover {
                    path: paths.record,
                    restored: false,
                    error: Some(e.to_string()),
                });
                continue;
            }
        };
        let (restored, error) = match give_back(state_dir, &key, None, alive, dry_run) {
            Ok(Step::Restore) => (!dry_run, None),
            Ok(Step::InUse) => (false, Some("in use (a run holds its lock)".to_owned())),
            Ok(Step::Held) => (false, Some("in use (a session holds it)".to_owned())),
            Ok(Step::Nothing) => continue,
            Err(e) => (false, Some(e.to_string())),
        };
        out.push(Leftover { path, restored, error });
    }
    Ok(out)
}

/// Hands every entry below `dir` owned by `uid` (what the sandbox created) back to root. Walks
/// with directory descriptors: no symlink is followed, no other filesystem entered.
pub fn reclaim(dir: &Path, uid: u32) {
    let Ok(fd) = open_dir(dir) else { return };
    let Ok(stat) = rustix::fs::fstat(&fd) else { return };
    reclaim_in(&fd, stat.st_dev, uid, 0);
}

fn reclaim_in(dirfd: &OwnedFd, dev: u64, uid: u32, depth: usize) {
    let Ok(dir) = rustix::fs::Dir::read_from(dirfd) else { return };
    let names: Vec<std::ffi::CString> = dir
        .flatten()
        .map(|e| e.file_name().to_owned())
        .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
        .collect();
    for name in names {
        let Ok(stat) = rustix::fs::statat(dirfd, &*name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        if stat.st_uid == uid {
            let root = (Some(rustix::process::Uid::ROOT), Some(rustix::process::Gid::ROOT));
            let _ = rustix::fs::chownat(dirfd, &*name, root.0, root.1, AtFlags::SYMLINK_NOFOLLOW);
        }
        let is_dir =
            rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::Directory;
        if is_dir && stat.st_dev == dev && depth < RECLAIM_DEPTH {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            if let Ok(child) = rustix::fs::openat(dirfd, &*name, flags, Mode::empty()) {
                reclaim_in(&child, dev, uid, depth + 1);
            }
        }
    }
}

#[cfg(test)]
mod tests;
