//! The host side of protected paths (their names and the decisions are
//! `sandbox_core::protect`'s): finding them in a writable tree ([`find`]), and placeholders
//! that hold a read-only mount where a protected name is missing ([`Placeholders`]), removed
//! when the last run or session using them ends.
//!
//! **Protocol** (the one of [`crate::acl`]). The state dir (0700, under the caller's cache,
//! shared by every engine) holds for each writable tree, keyed by the device and inode of its
//! top directory:
//! - `<key>.lock`: every run that relies on the tree's placeholders holds it shared, from
//!   before it looks for them until its sandbox is gone;
//! - `<key>.p.<name>`: one record per placeholder (kind, device, inode, the tree's path),
//!   written by the run that created it;
//! - `<key>.hold.<holder>`: placeholders a session keeps after its starter ends.
//!
//! A release drops its shared lock and takes it exclusive without waiting: only the last user
//! gets it, and with no live hold it removes each placeholder that is still the recorded entry
//! and still empty (a host user who put something in one keeps it), then the records. While
//! any sandbox uses a placeholder as a mount point it is never removed: removing a mount point
//! from the host detaches that mount in every other namespace, which would lift the sandbox's
//! protection. A run killed with -9 leaves its records; [`reap`] removes them once the lock is
//! free. Every entry is reached through the tree's descriptor, never by path.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::acl::check_holder;
use crate::{Error, LockMode, PrivateDir, lock_in};

/// First line of a placeholder record; bumped when its layout changes.
const RECORD_MAGIC: &str = "python-sandbox placeholder v1";

/// The state directory of the placeholders under python-sandbox's cache root.
pub fn state_dir(cache_root: &Path) -> PathBuf {
    cache_root.join("protect")
}

/// What an entry found by [`find`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Entry {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link (never followed).
    Symlink,
    /// Anything else.
    Other,
}

/// How far [`find`] looks.
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)]
pub struct Walk<'a> {
    /// Whether a file name is protected (then it is reported and not entered).
    pub protected: &'a dyn Fn(&str) -> bool,
    /// Directory names not entered.
    pub skip: &'a [&'a str],
    /// Levels of directories below the top that are read (0: the top only).
    pub depth: usize,
    /// At most this many directories are read.
    pub max_dirs: usize,
}

/// Every protected entry of the tree at `top`, as a `/`-separated path relative to it, with
/// what it is, breadth first. Links are never followed and no other filesystem is entered;
/// a directory that cannot be read is passed over (the sandbox's user could not list it
/// either, and what it cannot reach it cannot write).
pub fn find(top: &Path, walk: &Walk<'_>) -> Result<Vec<(String, Entry)>, Error> {
    let fd = open_dir(top)?;
    let dev = rustix::fs::fstat(&fd).map_err(errno(top))?.st_dev;
    let mut out = Vec::new();
    let mut queue: std::collections::VecDeque<(OwnedFd, String, usize)> =
        std::collections::VecDeque::from([(fd, String::new(), 0)]);
    let mut read = 0;
    while let Some((dirfd, rel, depth)) = queue.pop_front() {
        if read == walk.max_dirs {
            break;
        }
        read += 1;
        let Ok(dir) = rustix::fs::Dir::read_from(&dirfd) else { continue };
        for entry in dir.flatten() {
            let Ok(name) = entry.file_name().to_str() else { continue };
            if name == "." || name == ".." {
                continue;
            }
            let mut kind = entry.file_type();
            if kind == FileType::Unknown {
                let Ok(stat) = rustix::fs::statat(&dirfd, name, AtFlags::SYMLINK_NOFOLLOW) else {
                    continue;
                };
                kind = FileType::from_raw_mode(stat.st_mode);
            }
            let path = if rel.is_empty() { name.to_owned() } else { format!("{rel}/{name}") };
            if (walk.protected)(name) {
                out.push((path, entry_of(kind)));
                continue;
            }
            if kind != FileType::Directory || depth == walk.depth || walk.skip.contains(&name) {
                continue;
            }
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let Ok(child) = rustix::fs::openat(&dirfd, name, flags, Mode::empty()) else {
                continue;
            };
            if rustix::fs::fstat(&child).is_ok_and(|st| st.st_dev == dev) {
                queue.push_back((child, path, depth + 1));
            }
        }
    }
    Ok(out)
}

fn entry_of(kind: FileType) -> Entry {
    match kind {
        FileType::Directory => Entry::Dir,
        FileType::RegularFile => Entry::File,
        FileType::Symlink => Entry::Symlink,
        _ => Entry::Other,
    }
}

/// What a placeholder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholder {
    /// An empty directory (mode 0755).
    Dir,
    /// An empty regular file (mode 0644).
    File,
}

/// What [`Placeholders::make`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Made {
    /// The placeholder was made (and recorded).
    Created,
    /// Something is there already (made meanwhile by another run, or the user's): it holds
    /// the mount as well.
    There,
    /// The caller may not create anything there, and so neither may its sandbox: nothing to
    /// hold.
    Unwritable,
}

/// One tree whose placeholders this process relies on.
#[derive(Debug)]
struct Tree {
    top: PathBuf,
    key: String,
    fd: OwnedFd,
    lock: Option<File>,
    /// The placeholders this process made: name, device, inode, a directory.
    made: Vec<(String, u64, u64, bool)>,
}

/// The placeholders of the writable trees of one run or session: each tree locked shared
/// ([`Placeholders::lock`]) before its protected names are looked for, placeholders made in
/// it ([`Placeholders::make`]), and everything given up on [`Placeholders::release`] or drop
/// (or kept for a session by [`Placeholders::hold`]).
#[derive(Debug)]
pub struct Placeholders {
    state: PrivateDir,
    trees: Vec<Tree>,
    janitor: Option<janitor::Janitor>,
}

impl Placeholders {
    /// Opens the state dir (see [`state_dir`]), creating it private to the caller.
    pub fn new(state_dir: &Path) -> Result<Placeholders, Error> {
        Ok(Placeholders { state: PrivateDir::open(state_dir)?, trees: Vec::new(), janitor: None })
    }

    /// Takes the shared lock of the tree at `top` (canonical); call it before looking for the
    /// tree's protected entries, so no release removes a placeholder that is about to be used.
    pub fn lock(&mut self, top: &Path) -> Result<(), Error> {
        let fd = open_dir(top)?;
        let stat = rustix::fs::fstat(&fd).map_err(errno(top))?;
        let key = format!("{:x}-{:x}", stat.st_dev, stat.st_ino);
        if self.trees.iter().any(|t| t.key == key) {
            return Ok(());
        }
        let lock = lock_in(&self.state, &format!("{key}.lock"), LockMode::Shared)?;
        self.trees.push(Tree { top: top.to_owned(), key, fd, lock, made: Vec::new() });
        Ok(())
    }

    /// Creates the placeholder `name` at the top of the locked tree `top`.
    pub fn make(&mut self, top: &Path, name: &str, kind: Placeholder) -> Result<Made, Error> {
        let Some(tree) = self.trees.iter().find(|t| t.top == top) else {
            return Err(state_error(top, "the tree is not locked"));
        };
        let at = top.join(name);
        if name.contains('/') || name == "." || name == ".." {
            return Err(state_error(&at, "a placeholder is one file name"));
        }
        let made = match kind {
            Placeholder::Dir => rustix::fs::mkdirat(&tree.fd, name, Mode::from_raw_mode(0o755)),
            Placeholder::File => {
                let flags = OFlags::WRONLY
                    | OFlags::CREATE
                    | OFlags::EXCL
                    | OFlags::NOFOLLOW
                    | OFlags::CLOEXEC
                    | OFlags::NOCTTY;
                rustix::fs::openat(&tree.fd, name, flags, Mode::from_raw_mode(0o644)).map(drop)
            }
        };
        match made {
            Ok(()) => {}
            Err(Errno::EXIST) => return Ok(Made::There),
            // A tree the caller cannot add to (a read-only filesystem, a directory of someone
            // else's): the sandbox, which writes as the caller or less, cannot either.
            Err(Errno::ROFS | Errno::ACCESS | Errno::PERM) => return Ok(Made::Unwritable),
            Err(e) => return Err(errno(&at)(e)),
        }
        let stat =
            rustix::fs::statat(&tree.fd, name, AtFlags::SYMLINK_NOFOLLOW).map_err(errno(&at))?;
        let kind = match kind {
            Placeholder::Dir => 'd',
            Placeholder::File => 'f',
        };
        let record = format!(
            "{RECORD_MAGIC}\n{kind} {} {}\n{}\n",
            stat.st_dev,
            stat.st_ino,
            tree.top.display()
        );
        let key = tree.key.clone();
        // Not flushed to the disk: that cost 3 to 10 ms per placeholder, up to eight a run,
        // while the record only matters if this process dies (then it is on disk long before
        // the sweep reads it); only a host crash in the moment after a run began can leave an
        // unrecorded empty placeholder behind.
        let recorded = self.state.replace_unflushed(&format!("{key}.p.{name}"), record.as_bytes());
        if let Err(e) = recorded {
            // Unrecorded, it would outlive every cleanup: take it back at once.
            let flag = if kind == 'd' { AtFlags::REMOVEDIR } else { AtFlags::empty() };
            let _ = rustix::fs::unlinkat(&tree.fd, name, flag);
            return Err(e);
        }
        if let Some(tree) = self.trees.iter_mut().find(|t| t.top == top) {
            tree.made.push((name.to_owned(), stat.st_dev, stat.st_ino, kind == 'd'));
        }
        Ok(Made::Created)
    }

    /// Puts this run's placeholders on a leash: a forked janitor (`protect/janitor.rs`)
    /// removes them if this process dies without releasing them (SIGKILL), once `sandbox` (a
    /// pidfd of the sandbox's first process) has ended too. Without placeholders, or when the
    /// janitor cannot be forked, nothing happens: the next sweep removes what a killed run
    /// left.
    pub fn leash(&mut self, sandbox: std::os::fd::BorrowedFd<'_>) {
        if self.janitor.is_some() || self.trees.iter().all(|t| t.made.is_empty()) {
            return;
        }
        let Ok(state) = self.state.fd().try_clone_to_owned() else { return };
        let mut trees = Vec::new();
        for tree in self.trees.iter().filter(|t| !t.made.is_empty()) {
            let lock_name = format!("{}.lock", tree.key);
            let flags = OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let (Ok(top), Ok(lock), Ok(lock_c)) = (
                tree.fd.try_clone(),
                rustix::fs::openat(&state, lock_name.as_str(), flags, Mode::empty()),
                std::ffi::CString::new(lock_name.clone()),
            ) else {
                return;
            };
            let mut made = Vec::new();
            for (name, dev, ino, dir) in &tree.made {
                let (Ok(name_c), Ok(record)) = (
                    std::ffi::CString::new(name.as_str()),
                    std::ffi::CString::new(format!("{}.p.{name}", tree.key)),
                ) else {
                    return;
                };
                made.push(janitor::Made { name: name_c, record, dev: *dev, ino: *ino, dir: *dir });
            }
            trees.push(janitor::TreeFds { top, lock, lock_name: lock_c, made });
        }
        self.janitor = janitor::Janitor::start(sandbox, &state, trees);
    }

    /// Gives every tree up: the last user of each removes its placeholders (see the module
    /// docs). The first error is returned after trying them all.
    pub fn release(mut self) -> Result<(), Error> {
        self.release_all()
    }

    /// Turns the locks into holds named `holder` (letters, digits, `.`, `_`, `-`): the
    /// placeholders stay after this process ends, until [`release_holder`] (or [`reap`], once
    /// the holder is gone).
    pub fn hold(mut self, holder: &str) -> Result<(), Error> {
        check_holder(holder)?;
        if let Some(janitor) = self.janitor.take() {
            janitor.dismiss();
        }
        for i in 0..self.trees.len() {
            let name = format!("{}.hold.{holder}", self.trees[i].key);
            if let Err(e) =
                self.state.replace(&name, self.trees[i].top.as_os_str().as_encoded_bytes())
            {
                for t in &self.trees[..i] {
                    let _ = self.state.remove(&format!("{}.hold.{holder}", t.key));
                }
                return Err(e);
            }
        }
        // The holds keep the placeholders; the locks go with this process.
        self.trees.clear();
        Ok(())
    }

    fn release_all(&mut self) -> Result<(), Error> {
        if let Some(janitor) = self.janitor.take() {
            janitor.dismiss();
        }
        let mut first = None;
        for mut tree in std::mem::take(&mut self.trees) {
            drop(tree.lock.take());
            // A child that another thread of this process forks holds a copy of our lock until
            // its exec closes it (a sandbox's spawn, milliseconds): give such a copy that long
            // before taking the tree to be someone else's still.
            let lock = format!("{}.lock", tree.key);
            for _ in 0..10 {
                match lock_in(&self.state, &lock, LockMode::TryExclusive) {
                    Ok(None) => std::thread::sleep(std::time::Duration::from_millis(2)),
                    Ok(Some(_)) | Err(_) => break,
                }
            }
            if let Err(e) = give_back(&self.state, &tree.key, &|_| true, false) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Placeholders {
    fn drop(&mut self) {
        let _ = self.release_all();
    }
}

/// Ends the holds of `holder` and removes the placeholders nobody else uses.
pub fn release_holder(state_dir: &Path, holder: &str) -> Result<(), Error> {
    check_holder(holder)?;
    let Ok(state) = PrivateDir::open(state_dir) else { return Ok(()) };
    let suffix = format!(".hold.{holder}");
    let mut first = None;
    for key in names(&state).iter().filter_map(|n| n.strip_suffix(&suffix)) {
        let _ = state.remove(&format!("{key}{suffix}"));
        if let Err(e) = give_back(&state, key, &|_| true, false) {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// Placeholders a run or session left (its process was killed), as [`reap`] found them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// The placeholder.
    pub path: PathBuf,
    /// It was removed (never with `dry_run`).
    pub removed: bool,
    /// Why it was kept: `in use`, `held by a session`, `not empty`, an error.
    pub kept: Option<String>,
}

/// Removes the placeholders of every tree whose lock is free and whose holders are not
/// `alive` (or with `dry_run` only lists them).
pub fn reap(
    state_dir: &Path,
    dry_run: bool,
    alive: &dyn Fn(&str) -> bool,
) -> Result<Vec<Leftover>, Error> {
    if !state_dir.exists() {
        return Ok(Vec::new());
    }
    let state = PrivateDir::open(state_dir)?;
    let all = names(&state);
    let mut keys: Vec<&str> = all.iter().filter_map(|n| record_key(n)).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut out = Vec::new();
    for key in keys {
        out.extend(give_back(&state, key, alive, dry_run)?);
    }
    Ok(out)
}

/// The tree key of a placeholder record's file name (`<dev>-<ino>.p.<name>`, hex); `None` for
/// anything else in the state dir (locks, holds, another writer's temporary files).
fn record_key(name: &str) -> Option<&str> {
    let (key, _) = name.split_once(".p.")?;
    let (dev, ino) = key.split_once('-')?;
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(dev) && hex(ino)).then_some(key)
}

fn names(state: &PrivateDir) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(state.path()) else { return Vec::new() };
    entries.flatten().filter_map(|e| e.file_name().into_string().ok()).collect()
}

/// The protocol's release for one tree: exclusive without waiting; then, with no live hold,
/// every recorded placeholder that is still the recorded, empty entry is removed with its
/// record.
fn give_back(
    state: &PrivateDir,
    key: &str,
    alive: &dyn Fn(&str) -> bool,
    dry_run: bool,
) -> Result<Vec<Leftover>, Error> {
    let all = names(state);
    let prefix = format!("{key}.p.");
    let records: Vec<&str> =
        all.iter().filter(|n| n.starts_with(&prefix)).map(String::as_str).collect();
    let exclusive = lock_in(state, &format!("{key}.lock"), LockMode::TryExclusive)?;
    let hold_prefix = format!("{key}.hold.");
    let mut held = false;
    if exclusive.is_some() {
        for hold in all.iter().filter(|n| n.starts_with(&hold_prefix)) {
            if alive(&hold[hold_prefix.len()..]) {
                held = true;
            } else if !dry_run {
                let _ = state.remove(hold);
            }
        }
    }
    let mut out = Vec::new();
    for record_name in records {
        let Some(record) = state.read(record_name)?.and_then(|b| Record::decode(&b)) else {
            if !dry_run && exclusive.is_some() && !held {
                let _ = state.remove(record_name);
            }
            continue;
        };
        let path = record.top.join(&record_name[prefix.len()..]);
        let kept = if exclusive.is_none() {
            Some("in use (a run holds its lock)".to_owned())
        } else if held {
            Some("in use (a session holds it)".to_owned())
        } else {
            None
        };
        if kept.is_some() || dry_run {
            out.push(Leftover { path, removed: false, kept });
            continue;
        }
        let kept = remove(&record, &record_name[prefix.len()..]).err();
        let _ = state.remove(record_name);
        out.push(Leftover { path, removed: kept.is_none(), kept });
    }
    if exclusive.is_some() && !held && !dry_run {
        // Removed while held, like a pruned environment's lock: lockers check the path still
        // names it.
        let _ = state.remove(&format!("{key}.lock"));
    }
    Ok(out)
}

/// Removes the placeholder `name` of `record`'s tree if it is still the recorded entry and
/// empty; `Err(why it was kept)`.
fn remove(record: &Record, name: &str) -> Result<(), String> {
    let top = open_dir(&record.top).map_err(|e| e.to_string())?;
    let stat = match rustix::fs::statat(&top, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => stat,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(std::io::Error::from(e).to_string()),
    };
    if (stat.st_dev, stat.st_ino) != (record.dev, record.ino) {
        return Err("replaced since (not ours any more)".to_owned());
    }
    let flags = if record.dir {
        AtFlags::REMOVEDIR
    } else if stat.st_size == 0 {
        AtFlags::empty()
    } else {
        return Err("not empty (written on the host meanwhile)".to_owned());
    };
    match rustix::fs::unlinkat(&top, name, flags) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(Errno::NOTEMPTY | Errno::EXIST) => {
            Err("not empty (written on the host meanwhile)".to_owned())
        }
        Err(e) => Err(std::io::Error::from(e).to_string()),
    }
}

/// A placeholder record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    dir: bool,
    dev: u64,
    ino: u64,
    top: PathBuf,
}

impl Record {
    fn decode(bytes: &[u8]) -> Option<Record> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut lines = text.lines();
        if lines.next()? != RECORD_MAGIC {
            return None;
        }
        let mut ids = lines.next()?.split(' ');
        let dir = match ids.next()? {
            "d" => true,
            "f" => false,
            _ => return None,
        };
        let dev = ids.next()?.parse().ok()?;
        let ino = ids.next()?.parse().ok()?;
        let top = PathBuf::from(lines.next()?);
        top.is_absolute().then_some(Record { dir, dev, ino, top })
    }
}

fn open_dir(path: &Path) -> Result<OwnedFd, Error> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    // The top is canonical (the engines resolved it); its own last component must not be a
    // link swapped in since.
    rustix::fs::open(path, flags | OFlags::NOFOLLOW, Mode::empty()).map_err(errno(path))
}

fn errno(path: &Path) -> impl Fn(Errno) -> Error + '_ {
    move |e| Error::HostFile {
        path: path.display().to_string(),
        message: std::io::Error::from(e).to_string(),
    }
}

fn state_error(path: &Path, message: &str) -> Error {
    Error::HostFile { path: path.display().to_string(), message: message.to_owned() }
}

mod janitor;

#[cfg(test)]
mod tests;
