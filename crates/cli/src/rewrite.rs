//! Writing back a file the user asked us to edit (`meta add/set/...`), as a careful editor
//! does, so the edit changes the file's contents and nothing else:
//!
//! * a symlink is followed: its target is edited and the link stays a link (`sed -i` replaces
//!   the link with a regular file unless given `--follow-symlinks`; vim writes through it);
//! * a file without any write bit is refused even for root (whom DAC lets write anything): its
//!   mode says "do not edit", as vim's `'readonly'` does; so is a file the caller cannot write
//!   (`access(2)`: mode, ACLs, a read-only mount). Nothing is changed in either case;
//! * the write is atomic where that keeps the file as it was: a temporary file in the target's
//!   own directory, given the original owner, group, mode and extended attributes (ACLs), then
//!   renamed over the target. Where a replacement could not be the same file (another user's
//!   file we may write but not give away, hard links a rename would split, a directory we may
//!   not create in, attributes we cannot copy), the contents are rewritten in place instead,
//!   as vim's `backupcopy=auto` does, and put back if that write fails half-way.

use std::io::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::Result;
use rustix::fs::{Access, Gid, Uid};

use crate::script::io_reason;
use crate::ui;

/// Replaces the contents of `file` (which held `original`) with `contents`; on error the file
/// is as it was.
pub(crate) fn rewrite(file: &Path, original: &[u8], contents: &[u8]) -> Result<()> {
    let shown = file.display();
    let failed = |e: std::io::Error| {
        ui::hinted(format!("cannot write `{shown}`: {}", io_reason(&e)), "nothing was changed")
    };
    let target = std::fs::canonicalize(file).map_err(failed)?;
    let meta = std::fs::metadata(&target).map_err(failed)?;
    if !meta.is_file() {
        return Err(ui::hinted(
            format!("cannot write `{shown}`: not a regular file"),
            "nothing was changed",
        ));
    }
    check_writable(file, &target, &meta)?;
    match replace(&target, &meta, contents) {
        Ok(Replaced::Done) => Ok(()),
        Ok(Replaced::NotTheSame) => in_place(&target, &meta, original, contents)
            .map_err(|e| anyhow::Error::new(e).context(format!("cannot write `{shown}`"))),
        Err(e) => Err(failed(e)),
    }
}

/// Refuses a file the caller cannot write, or one whose mode has no write bit at all.
fn check_writable(file: &Path, target: &Path, meta: &std::fs::Metadata) -> Result<()> {
    let shown = file.display();
    let mode = meta.permissions().mode() & 0o7777;
    if let Err(e) = rustix::fs::access(target, Access::WRITE_OK) {
        return Err(ui::hinted(
            format!("cannot edit `{shown}`: {}", io_reason(&e.into())),
            format!("nothing was changed; it is mode {mode:04o}, owned by uid {}", meta.uid()),
        ));
    }
    if mode & 0o222 == 0 {
        return Err(ui::hinted(
            format!("cannot edit `{shown}`: it is read-only (mode {mode:04o})"),
            format!(
                "nothing was changed; if you mean to edit it, make it writable first (`chmod u+w {shown}`)"
            ),
        ));
    }
    Ok(())
}

enum Replaced {
    Done,
    /// A replacement could not carry what the file is (owner, links, attributes); nothing
    /// was changed.
    NotTheSame,
}

/// The atomic path: a temporary sibling made to match the original, renamed over it.
fn replace(target: &Path, meta: &std::fs::Metadata, contents: &[u8]) -> std::io::Result<Replaced> {
    if meta.nlink() > 1 {
        return Ok(Replaced::NotTheSame);
    }
    let dir = target.parent().unwrap_or(Path::new("/"));
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.python-sandbox-{}.tmp", std::process::id()));
    let file = match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nofollow())
        .open(&tmp)
    {
        Ok(file) => file,
        // A directory we may not create in (the file itself is writable): write in place.
        Err(e) if is_denied(&e) => return Ok(Replaced::NotTheSame),
        Err(e) => return Err(e),
    };
    let result = fill(&file, meta, target, contents).and_then(|same| {
        if !same {
            return Ok(Replaced::NotTheSame);
        }
        match std::fs::rename(&tmp, target) {
            Ok(()) => {}
            // A sticky directory (`/tmp`) lets only the owner replace the file; writing
            // in place still may.
            Err(e) if is_denied(&e) => return Ok(Replaced::NotTheSame),
            Err(e) => return Err(e),
        }
        // Best effort: the rename is what makes the edit atomic; this makes it durable.
        if let Ok(dir) = std::fs::File::open(dir) {
            let _ = dir.sync_all();
        }
        Ok(Replaced::Done)
    });
    if !matches!(result, Ok(Replaced::Done)) {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Writes the contents into the temporary file and gives it the original's owner, mode and
/// extended attributes; `false` when one of them cannot be given.
fn fill(
    file: &std::fs::File,
    meta: &std::fs::Metadata,
    target: &Path,
    contents: &[u8],
) -> std::io::Result<bool> {
    let mut writer = file;
    writer.write_all(contents)?;
    file.sync_all()?;
    let fd = file.as_fd();
    let ours = rustix::fs::fstat(fd)?;
    if (ours.st_uid, ours.st_gid) != (meta.uid(), meta.gid()) {
        let owner = (Uid::from_raw(meta.uid()), Gid::from_raw(meta.gid()));
        if rustix::fs::fchown(fd, Some(owner.0), Some(owner.1)).is_err() {
            return Ok(false);
        }
    }
    // After the chown, which clears set-id bits.
    rustix::fs::fchmod(fd, rustix::fs::Mode::from_raw_mode(meta.mode() & 0o7777))?;
    Ok(copy_xattrs(target, fd).is_ok())
}

/// Copies every extended attribute (POSIX ACLs live there) of `from` onto `to`.
fn copy_xattrs(from: &Path, to: impl AsFd) -> rustix::io::Result<()> {
    let source: OwnedFd = rustix::fs::open(
        from,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let mut names = vec![0u8; 64 * 1024];
    let n = rustix::fs::flistxattr(&source, &mut names[..])?;
    let mut value = vec![0u8; 64 * 1024];
    for name in names[..n].split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let name = std::ffi::CString::new(name).map_err(|_| rustix::io::Errno::INVAL)?;
        let len = rustix::fs::fgetxattr(&source, &name, &mut value[..])?;
        rustix::fs::fsetxattr(&to, &name, &value[..len], rustix::fs::XattrFlags::empty())?;
    }
    Ok(())
}

/// The fallback: the same inode, rewritten from the start; what was there before is put back
/// if the write fails.
fn in_place(
    target: &Path,
    meta: &std::fs::Metadata,
    original: &[u8],
    contents: &[u8],
) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new().write(true).custom_flags(nofollow()).open(target)?;
    let now = file.metadata()?;
    if (now.dev(), now.ino()) != (meta.dev(), meta.ino()) {
        return Err(std::io::Error::other("the file was replaced while it was being edited"));
    }
    let write = |bytes: &[u8]| -> std::io::Result<()> {
        use std::os::unix::fs::FileExt as _;
        file.write_all_at(bytes, 0)?;
        file.set_len(u64::try_from(bytes.len()).unwrap_or(u64::MAX))?;
        file.sync_all()
    };
    write(contents).map_err(|e| match write(original) {
        Ok(()) => {
            std::io::Error::new(e.kind(), format!("{e}; its previous contents were put back"))
        }
        Err(_) => std::io::Error::new(
            e.kind(),
            format!("{e}; its previous contents could not be put back"),
        ),
    })
}

/// Whether `e` says "not allowed here" (a reason to write in place instead), not a failure.
fn is_denied(e: &std::io::Error) -> bool {
    use rustix::io::Errno;
    matches!(Errno::from_io_error(e), Some(Errno::ACCESS | Errno::PERM | Errno::ROFS))
}

/// `O_NOFOLLOW` for `OpenOptionsExt::custom_flags`.
fn nofollow() -> i32 {
    i32::try_from(rustix::fs::OFlags::NOFOLLOW.bits()).unwrap_or(0)
}

#[cfg(test)]
#[path = "rewrite_tests.rs"]
mod tests;
