//! The workspace synced into a sandbox that cannot see the host and back out: the IO edge of
//! [`sandbox_core::sync`], over any [`Sandbox`] (the pods of `run --engine k8s`, the
//! `FakeSandbox` in tests), so what a run sees and gives back does not depend on the engine.
//!
//! In: one walk that only decides ([`Planner`]: ignore files, links, the size limit; an error
//! before anything is sent), then the planned entries streamed as tar in batches of at most
//! [`BATCH`] bytes, each one [`Sandbox::put`]: the workspace is never in memory, a batch at a
//! time is. Directories go in owner-writable (a read-only directory of one batch could not
//! receive the next batch's files); the listing right after the sync in is the baseline, so
//! that difference never comes back.
//!
//! Out: a second listing, [`changes`](sandbox_core::sync::changes), one archive of what changed spooled to an unnamed
//! temporary file (capped at the limit), checked whole (every member requested, a plain
//! relative path, of the listed kind, links inside) before anything is applied; a link the
//! script pointed out of the workspace is never fetched, only named in a warning. Applying
//! walks from a descriptor of the workspace, component by component without following links,
//! and replaces each file by a rename in its directory: a link the host has where the script
//! wrote a directory is never followed out of the workspace.

use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};
use sandbox_core::sync::{
    self, Changes, HostKind, IGNORE_FILES, MODE_MASK, Manifest, Planner, Stat, Verdict,
    approx_bytes,
};
use sandbox_core::{ExecRequest, OutputSink, PutSource, Sandbox, Stream, shell};

use crate::error::{Error, Result};

/// The most archive bytes one [`Sandbox::put`] carries (one file larger than this is a batch
/// of its own).
pub const BATCH: usize = 16 << 20;

/// What the sync in did.
#[derive(Debug, Clone, Default)]
pub struct SyncedIn {
    /// The sandbox's listing right after it: what the sync out compares with.
    pub baseline: Manifest,
    /// Files sent.
    pub files: u64,
    /// Bytes of file contents sent.
    pub bytes: u64,
    /// What the user should know (links left out).
    pub warnings: Vec<String>,
}

/// What the sync out did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncedOut {
    /// Files and links written on the host, relative, sorted.
    pub written: Vec<String>,
    /// Paths deleted on the host.
    pub deleted: Vec<String>,
    /// What the user should know (what was kept, and why).
    pub warnings: Vec<String>,
}

/// A status line for the caller's progress indicator.
pub type Status<'a> = dyn FnMut(&str) + Send + 'a;

fn host(what: impl Into<String>, e: impl std::fmt::Display) -> Error {
    Error::Host { what: what.into(), message: e.to_string() }
}

/// The walk's decisions: the entries to send (relative path and kind, parents first), the
/// planner's totals and the warnings.
struct Plan {
    entries: Vec<(String, HostKind)>,
    planner: Planner,
    warnings: Vec<String>,
}

fn plan(root: &Path, limit: u64) -> Result<Plan> {
    let mut planner = Planner::new(limit);
    let mut out = Vec::new();
    let mut stack = vec![String::new()];
    let mut undecodable = 0usize;
    while let Some(dir) = stack.pop() {
        let path = if dir.is_empty() { root.to_owned() } else { root.join(&dir) };
        for name in IGNORE_FILES {
            let file = path.join(name);
            // An ignore file that is a link is not followed (it could name any host file).
            if std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_file())
                && let Ok(text) = std::fs::read_to_string(&file)
            {
                planner.rules(&dir, &text);
            }
        }
        let mut names = Vec::new();
        for entry in
            std::fs::read_dir(&path).map_err(|e| host(format!("read `{}`", path.display()), e))?
        {
            let entry = entry.map_err(|e| host(format!("read `{}`", path.display()), e))?;
            match entry.file_name().into_string() {
                Ok(name) => names.push(name),
                Err(_) => undecodable += 1,
            }
        }
        names.sort();
        let mut subdirs = Vec::new();
        for name in names {
            let rel = if dir.is_empty() { name.clone() } else { format!("{dir}/{name}") };
            let full = path.join(&name);
            let meta = std::fs::symlink_metadata(&full)
                .map_err(|e| host(format!("read `{}`", full.display()), e))?;
            let kind = if meta.is_dir() {
                HostKind::Dir
            } else if meta.is_file() {
                HostKind::File { size: meta.len() }
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&full)
                    .map_err(|e| host(format!("read the link `{}`", full.display()), e))?;
                HostKind::Symlink { target: target.to_string_lossy().into_owned() }
            } else {
                HostKind::Other
            };
            if planner.decide(&rel, &kind)? == Verdict::Send {
                if kind == HostKind::Dir {
                    subdirs.push(rel.clone());
                }
                out.push((rel, kind));
            }
        }
        // Depth first in name order, as the stack pops.
        stack.extend(subdirs.into_iter().rev());
    }
    let mut warnings = planner.warnings();
    if undecodable > 0 {
        warnings.push(format!("{undecodable} names that are not UTF-8 are left out of the sync"));
    }
    Ok(Plan { entries: out, planner, warnings })
}

/// Syncs the host directory `root` into the sandbox's directory `dest` (absolute, created if
/// missing), refusing more than `limit` bytes before sending anything, and lists the result.
pub async fn sync_in<S: Sandbox>(
    sandbox: &S,
    root: &Path,
    dest: &str,
    limit: u64,
    status: &mut Status<'_>,
) -> Result<SyncedIn>
where
    Error: From<S::Error>,
{
    let Plan { entries, planner, warnings } = plan(root, limit)?;
    let total = planner.bytes();
    status(&format!(
        "syncing the workspace in: {} files, {}",
        planner.files(),
        approx_bytes(total)
    ));
    let mut sent = 0u64;
    let mut batch = tar::Builder::new(Vec::new());
    let mut batched = false;
    for (rel, kind) in &entries {
        let full = root.join(rel);
        let mut header = tar::Header::new_gnu();
        header.set_mtime(
            std::fs::symlink_metadata(&full)
                .map(|m| u64::try_from(m.mtime()).unwrap_or(0))
                .unwrap_or(0),
        );
        let appended = match kind {
            HostKind::Dir => {
                header.set_entry_type(tar::EntryType::Directory);
                let mode = std::fs::symlink_metadata(&full).map(|m| m.mode()).unwrap_or(0o755);
                header.set_mode((mode & MODE_MASK) | 0o700);
                header.set_size(0);
                batch.append_data(&mut header, rel, std::io::empty())
            }
            HostKind::Symlink { target } => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_mode(0o777);
                header.set_size(0);
                batch.append_link(&mut header, rel, target)
            }
            HostKind::File { .. } => {
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc_nofollow())
                    .open(&full)
                    .map_err(|e| host(format!("read `{}`", full.display()), e))?;
                let meta =
                    file.metadata().map_err(|e| host(format!("read `{}`", full.display()), e))?;
                let size = meta.len();
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(meta.mode() & MODE_MASK);
                header.set_size(size);
                sent += size;
                // Exactly `size` bytes even if the file shrinks meanwhile: the archive stays whole.
                let data = file.take(size).chain(std::io::repeat(0)).take(size);
                batch.append_data(&mut header, rel, data)
            }
            HostKind::Other => continue,
        };
        appended.map_err(|e| host(format!("pack `{}` for the sandbox", full.display()), e))?;
        batched = true;
        if batch.get_ref().len() >= BATCH {
            put_batch(sandbox, std::mem::replace(&mut batch, tar::Builder::new(Vec::new())), dest)
                .await?;
            batched = false;
            status(&format!(
                "syncing the workspace in: {} of {}",
                approx_bytes(sent),
                approx_bytes(total)
            ));
        }
    }
    if batched || entries.is_empty() {
        put_batch(sandbox, batch, dest).await?;
    }
    let baseline = list(sandbox, dest).await?;
    Ok(SyncedIn { baseline, files: planner.files(), bytes: total, warnings })
}

fn libc_nofollow() -> i32 {
    // O_NOFOLLOW: the walk saw a regular file; a link swapped in since is not followed.
    OFlags::NOFOLLOW.bits() as i32
}

async fn put_batch<S: Sandbox>(sandbox: &S, batch: tar::Builder<Vec<u8>>, dest: &str) -> Result<()>
where
    Error: From<S::Error>,
{
    let archive = batch.into_inner().map_err(|e| host("finish an archive for the sandbox", e))?;
    sandbox.put(&PutSource::Tar(archive), dest).await?;
    Ok(())
}

/// The sandbox's listing of `dest` ([`sync::LIST_PROGRAM`]).
pub async fn list<S: Sandbox>(sandbox: &S, dest: &str) -> Result<Manifest>
where
    Error: From<S::Error>,
{
    let request = ExecRequest {
        argv: sync::program_argv(sync::LIST_PROGRAM, dest),
        cwd: Some("/".to_owned()),
        ..Default::default()
    };
    let mut capped = shell::Capped::new(shell::CAPTURE_LIMIT);
    let outcome = sandbox.exec(&request, &mut capped).await?;
    if capped.over() {
        return Err(shell::too_large(
            sandbox.id(),
            "the workspace listing".to_owned(),
            shell::CAPTURE_LIMIT,
        )
        .into());
    }
    if outcome.exit_code != 0 {
        return Err(sandbox_core::Error::SessionCommand {
            what: "listing the workspace".to_owned(),
            message: capped.captured.stderr_lossy(),
        }
        .into());
    }
    let (manifest, _skipped) = sync::parse_manifest(&capped.captured.stdout)?;
    Ok(manifest)
}

/// The archive's bytes on stdout, spooled to `file` up to `limit`; stderr kept (capped).
struct Spool {
    file: File,
    written: u64,
    limit: u64,
    over: bool,
    failed: Option<std::io::Error>,
    stderr: Vec<u8>,
}

impl OutputSink for Spool {
    fn write(&mut self, stream: Stream, chunk: &[u8]) {
        match stream {
            Stream::Stdout => {
                if self.over || self.failed.is_some() {
                    return;
                }
                self.written += chunk.len() as u64;
                if self.written > self.limit {
                    self.over = true;
                    return;
                }
                if let Err(e) = self.file.write_all(chunk) {
                    self.failed = Some(e);
                }
            }
            Stream::Stderr => {
                let room = (64usize << 10).saturating_sub(self.stderr.len());
                self.stderr.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
        }
    }

    fn closed(&self) -> bool {
        self.over || self.failed.is_some()
    }
}

/// Brings back into `root` what the script changed in the sandbox's `dest` since `baseline`:
/// new and changed files (modes kept, without setuid/setgid/sticky), deletions applied.
pub async fn sync_out<S: Sandbox>(
    sandbox: &S,
    root: &Path,
    dest: &str,
    baseline: &Manifest,
    limit: u64,
    status: &mut Status<'_>,
) -> Result<SyncedOut>
where
    Error: From<S::Error>,
{
    let after = list(sandbox, dest).await?;
    let changes = sync::changes(baseline, &after);
    let mut out = SyncedOut::default();
    if !changes.refused.is_empty() {
        out.warnings.push(format!(
            "kept in the sandbox, never applied to the host's protected paths: {}",
            changes.refused.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
        ));
    }
    if !changes.outside_links.is_empty() {
        let links: Vec<&str> = changes.outside_links.iter().map(String::as_str).collect();
        out.warnings.push(format!(
            "kept in the sandbox, links that point outside the workspace: {}",
            sync::list(&links)
        ));
    }
    if changes.is_empty() {
        return Ok(out);
    }
    let bytes: u64 = changes
        .fetch
        .iter()
        .filter_map(|p| match after.get(p) {
            Some(Stat::File { size, .. }) => Some(*size),
            _ => None,
        })
        .sum();
    status(&format!(
        "syncing the workspace out: {} in {} paths",
        approx_bytes(bytes),
        changes.fetch.len()
    ));
    let mut spool = None;
    if !changes.fetch.is_empty() {
        spool = Some(fetch(sandbox, dest, &changes, limit).await?);
    }
    let archive = match spool {
        Some(mut file) => {
            file.rewind().map_err(|e| host("read back the returned archive", e))?;
            let members = check_archive(&mut file, &changes, &after)?;
            file.rewind().map_err(|e| host("read back the returned archive", e))?;
            Some((file, members))
        }
        None => None,
    };
    let workspace = open_dir(root)?;
    apply_deletions(&workspace, &changes, &mut out);
    if let Some((file, _)) = archive {
        apply_archive(&workspace, file, &after, &mut out)?;
    }
    out.written.sort();
    Ok(out)
}

/// Runs the packer for `changes.fetch` into an unnamed temporary file.
async fn fetch<S: Sandbox>(sandbox: &S, dest: &str, changes: &Changes, limit: u64) -> Result<File>
where
    Error: From<S::Error>,
{
    let file = tempfile::tempfile()
        .map_err(|e| host("make a temporary file for the returned archive", e))?;
    // Headers and padding on top of the contents: the cap leaves room for them.
    let cap = limit.saturating_add(limit / 8).saturating_add(1 << 20);
    let mut spool =
        Spool { file, written: 0, limit: cap, over: false, failed: None, stderr: Vec::new() };
    let request = ExecRequest {
        argv: sync::program_argv(sync::PACK_PROGRAM, dest),
        cwd: Some("/".to_owned()),
        stdin: sync::pack_input(&changes.fetch),
        ..Default::default()
    };
    let outcome = sandbox.exec(&request, &mut spool).await?;
    if spool.over {
        return Err(sandbox_core::Error::WorkspaceTooLarge { limit, largest: Vec::new() }.into());
    }
    if let Some(e) = spool.failed {
        return Err(host("spool the returned archive", e));
    }
    if outcome.exit_code != 0 {
        return Err(sandbox_core::Error::SessionCommand {
            what: "packing the workspace's changes".to_owned(),
            message: String::from_utf8_lossy(&spool.stderr).into_owned(),
        }
        .into());
    }
    Ok(spool.file)
}

/// Every member of the archive, checked before anything is applied: requested, a plain
/// relative path, of the kind the listing said, a link staying inside.
fn check_archive(file: &mut File, changes: &Changes, after: &Manifest) -> Result<Vec<String>> {
    let requested: std::collections::BTreeSet<&str> =
        changes.fetch.iter().map(String::as_str).collect();
    let mut archive = tar::Archive::new(file);
    let mut members = Vec::new();
    let unreadable = |e: std::io::Error| host("read the returned archive", e);
    for entry in archive.entries().map_err(unreadable)? {
        let entry = entry.map_err(unreadable)?;
        let path = member_path(&entry)?;
        if !requested.contains(path.as_str()) {
            return Err(refused(&path, "it was not asked for"));
        }
        let kind = entry.header().entry_type();
        let matches = match (kind, after.get(&path)) {
            (tar::EntryType::Regular, Some(Stat::File { .. })) => true,
            (tar::EntryType::Directory, Some(Stat::Dir { .. })) => true,
            (tar::EntryType::Symlink, Some(Stat::Symlink { .. })) => {
                let target = entry.link_name().map_err(unreadable)?;
                let target =
                    target.as_deref().and_then(Path::to_str).unwrap_or_default().to_owned();
                if !sync::link_inside(&path, &target) {
                    return Err(refused(&path, "it is a link that points outside the workspace"));
                }
                true
            }
            _ => false,
        };
        if !matches {
            return Err(refused(
                &path,
                "it is not what the listing said (or not a file, directory or link)",
            ));
        }
        members.push(path);
    }
    Ok(members)
}

fn refused(path: &str, reason: &'static str) -> Error {
    sandbox_core::Error::UnsafeSyncPath { path: path.escape_debug().to_string(), reason }.into()
}

fn member_path<R: std::io::Read>(entry: &tar::Entry<'_, R>) -> Result<String> {
    let raw = entry.path_bytes();
    let path = std::str::from_utf8(&raw)
        .map_err(|_| refused(&String::from_utf8_lossy(&raw), "it is not UTF-8"))?;
    let path = path.strip_suffix('/').unwrap_or(path);
    Ok(sync::check_member(path)?.to_owned())
}

fn open_dir(root: &Path) -> Result<OwnedFd> {
    rustix::fs::open(root, OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| host(format!("open the workspace `{}`", root.display()), e))
}

/// The directory holding `path` (relative), reached from `root` without following a link;
/// missing directories made when `create`. `None` when a component is not a directory.
fn parent_of(root: &OwnedFd, path: &str, create: bool) -> std::io::Result<(OwnedFd, String)> {
    let mut parts: Vec<&str> = path.split('/').collect();
    let name = parts.pop().unwrap_or_default().to_owned();
    let mut dir = rustix::fs::openat(
        root,
        ".",
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    for part in parts {
        let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
        let next = match rustix::fs::openat(&dir, part, flags, Mode::empty()) {
            Err(rustix::io::Errno::NOENT) if create => {
                rustix::fs::mkdirat(&dir, part, Mode::from_raw_mode(0o755))?;
                rustix::fs::openat(&dir, part, flags, Mode::empty())?
            }
            other => other?,
        };
        dir = next;
    }
    Ok((dir, name))
}

fn apply_deletions(root: &OwnedFd, changes: &Changes, out: &mut SyncedOut) {
    for path in &changes.delete {
        let Ok((dir, name)) = parent_of(root, path, false) else { continue };
        let removed = match rustix::fs::statat(&dir, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat)
                if rustix::fs::FileType::from_raw_mode(stat.st_mode)
                    == rustix::fs::FileType::Directory =>
            {
                rustix::fs::unlinkat(&dir, name.as_str(), AtFlags::REMOVEDIR)
            }
            Ok(_) => rustix::fs::unlinkat(&dir, name.as_str(), AtFlags::empty()),
            Err(e) => Err(e),
        };
        match removed {
            Ok(()) => out.deleted.push(path.clone()),
            // Gone already, or a directory holding what was never synced (ignored paths).
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTEMPTY) => {}
            Err(e) => out.warnings.push(format!("could not delete `{path}` on the host: {e}")),
        }
    }
}

/// A name for the file that replaces `name` in its directory.
fn temporary_name(name: &str) -> String {
    format!(".{name}.python-sandbox-{}", crate::engine::random_id())
}

fn apply_archive(root: &OwnedFd, file: File, after: &Manifest, out: &mut SyncedOut) -> Result<()> {
    let mut archive = tar::Archive::new(file);
    let unreadable = |e: std::io::Error| host("read the returned archive", e);
    for entry in archive.entries().map_err(unreadable)? {
        let mut entry = entry.map_err(unreadable)?;
        let path = member_path(&entry)?;
        let (dir, name) = match parent_of(root, &path, true) {
            Ok(found) => found,
            Err(e) => {
                out.warnings.push(format!("kept `{path}` in the sandbox: its directory on the host is not a plain directory ({e})"));
                continue;
            }
        };
        let applied = match after.get(&path) {
            Some(Stat::Dir { mode }) => apply_dir(&dir, &name, *mode),
            Some(Stat::File { mode, .. }) => apply_file(&dir, &name, *mode, &mut entry),
            Some(Stat::Symlink { target }) => apply_link(&dir, &name, target),
            None => Ok(()),
        };
        match applied {
            Ok(()) if !matches!(after.get(&path), Some(Stat::Dir { .. })) => out.written.push(path),
            Ok(()) => {}
            Err(e) => out.warnings.push(format!("could not write `{path}` on the host: {e}")),
        }
    }
    Ok(())
}

fn apply_dir(dir: &OwnedFd, name: &str, mode: u32) -> std::io::Result<()> {
    match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(mode & MODE_MASK)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
    let made = rustix::fs::openat(dir, name, flags, Mode::empty())?;
    rustix::fs::fchmod(&made, Mode::from_raw_mode(mode & MODE_MASK))?;
    Ok(())
}

fn apply_file(
    dir: &OwnedFd,
    name: &str,
    mode: u32,
    data: &mut impl std::io::Read,
) -> std::io::Result<()> {
    let temp = temporary_name(name);
    let flags = OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, temp.as_str(), flags, Mode::from_raw_mode(0o600))?;
    let mut file = File::from(fd);
    let written = std::io::copy(data, &mut file)
        .and_then(|_| {
            rustix::fs::fchmod(file.as_fd(), Mode::from_raw_mode(mode & MODE_MASK))
                .map_err(Into::into)
        })
        .and_then(|()| rustix::fs::renameat(dir, temp.as_str(), dir, name).map_err(Into::into));
    if written.is_err() {
        let _ = rustix::fs::unlinkat(dir, temp.as_str(), AtFlags::empty());
    }
    written
}

fn apply_link(dir: &OwnedFd, name: &str, target: &str) -> std::io::Result<()> {
    let temp = temporary_name(name);
    rustix::fs::symlinkat(target, dir, temp.as_str())?;
    let renamed = rustix::fs::renameat(dir, temp.as_str(), dir, name);
    if renamed.is_err() {
        let _ = rustix::fs::unlinkat(dir, temp.as_str(), AtFlags::empty());
    }
    Ok(renamed?)
}
