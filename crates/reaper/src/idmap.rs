//! Idmapped mounts for a root caller's sandboxes: the workspace and read-write mounts appear to
//! the sandbox user (host nobody, 65534) as its own, and what it writes lands owned by root, so
//! existing files stay writable and no permission or ACL of the caller changes. bwrap stages
//! such mounts in its private mount namespace; docker and podman bind a staged copy the CLI
//! attaches on the host ([`Staged`], detached again when the run ends; a killed CLI's leftovers
//! go with the next sweep, [`unstage`]).
//!
//! Root only; needs Linux 5.12+ and a filesystem that supports idmapped mounts. Where either is
//! missing the engines lend the directories with an ACL instead (`crate::acl`).

#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::mount::{MoveMountFlags, OpenTreeFlags, UnmountFlags};

/// Host nobody: the uid and gid a root caller's sandbox runs as.
pub const NOBODY: u32 = 65534;

/// A user namespace whose root is host nobody (`0 65534 1`): as a mount's idmap it shows root's
/// files as nobody's and stores nobody's writes as root's. Made once per process by a child
/// born in its own user namespace, which waits on a pipe while we write the maps. Callers
/// that guard their spawns (engine-bwrap) make the first call under that guard.
pub fn root_as_nobody() -> std::io::Result<BorrowedFd<'static>> {
    static USERNS: std::sync::OnceLock<Result<OwnedFd, String>> = std::sync::OnceLock::new();
    match USERNS.get_or_init(|| make_root_as_nobody().map_err(|e| e.to_string())) {
        Ok(fd) => Ok(fd.as_fd()),
        Err(e) => Err(std::io::Error::other(format!("making the idmap user namespace: {e}"))),
    }
}

/// The stack of the namespace's holder: it makes two raw syscalls.
const HOLDER_STACK: usize = 16 * 1024;

/// The holder: closes its copy of the pipe's write end, then blocks until the read end sees
/// end of file. It shares our memory, so it makes raw syscalls only (rustix's, which never
/// touch `errno` or any other thread-local state) and returns, which exits it.
extern "C" fn hold(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` points at the two raw descriptors (read end, write end) of a pipe, which
    // the parent keeps, with the pair itself, until this process has exited.
    let [read_end, write_end] = unsafe { *arg.cast::<[i32; 2]>() };
    // SAFETY: the write end is this process's own copy (its descriptor table is a copy), and
    // nothing else in it uses the descriptor.
    unsafe { rustix::io::close(write_end) };
    // SAFETY: as above, for the read end, which stays open until we return.
    let fd = unsafe { BorrowedFd::borrow_raw(read_end) };
    let mut byte = [0u8];
    while let Err(rustix::io::Errno::INTR) = rustix::io::read(fd, &mut byte) {}
    0
}

fn make_root_as_nobody() -> std::io::Result<OwnedFd> {
    let (hold_r, hold_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let mut ends = [hold_r.as_raw_fd(), hold_w.as_raw_fd()];
    let mut stack = vec![0u128; HOLDER_STACK / 16];
    // The top of the stack (it grows down), 16-byte aligned like every `u128`.
    let top = stack.as_mut_ptr_range().end.cast::<libc::c_void>();
    // Born in its own user namespace and sharing our memory: no fork of this (large) process,
    // whose page-table copy and the copy-on-write faults after it cost more than the rest of
    // a warm run's setup. Not CLONE_VFORK: we must write its maps while it lives.
    // SAFETY: `hold` runs on `stack` and reads `ends`, both of which outlive the child (we
    // reap it before returning); it touches nothing else of ours.
    let pid = unsafe {
        libc::clone(
            hold,
            top,
            libc::CLONE_VM | libc::CLONE_NEWUSER | libc::SIGCHLD,
            ends.as_mut_ptr().cast::<libc::c_void>(),
        )
    };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let made = std::fs::write(proc.join("uid_map"), format!("0 {NOBODY} 1\n"))
        .and_then(|()| std::fs::write(proc.join("gid_map"), format!("0 {NOBODY} 1\n")))
        .and_then(|()| std::fs::File::open(proc.join("ns/user")).map(OwnedFd::from));
    drop(hold_w);
    let mut status = 0;
    // SAFETY: waitpid on our own child, which exits once `hold_w` is closed.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR)
    {}
    drop((hold_r, stack, ends));
    made
}

/// Applies `userns` as the idmap of the detached mount tree `tree` (and its submounts).
pub fn idmap(tree: &OwnedFd, userns: &BorrowedFd<'_>) -> std::io::Result<()> {
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: mount_setattr reads `size` bytes of `attr`, which lives across the call; the path
    // is an empty C string (AT_EMPTY_PATH: the descriptor itself).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_RECURSIVE,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// A detached, idmapped copy of the mount tree at `source` (a descriptor opened without
/// following links: what was checked is what is cloned).
pub fn clone_idmapped(source: BorrowedFd<'_>) -> std::io::Result<OwnedFd> {
    if let Some(tree) = take_trial(source) {
        return Ok(tree);
    }
    let tree = rustix::mount::open_tree(
        source,
        "",
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_EMPTY_PATH
            | OpenTreeFlags::AT_RECURSIVE,
    )?;
    idmap(&tree, &root_as_nobody()?)?;
    Ok(tree)
}

/// Whether `dir` can be mounted idmapped (its filesystem supports it, the kernel is 5.12+):
/// tried on a throwaway clone of its mount, so the answer is the one the real one will get.
pub fn supported(dir: &Path) -> bool {
    let Ok(userns) = root_as_nobody() else { return false };
    let clone = rustix::mount::open_tree(
        rustix::fs::CWD,
        dir,
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_RECURSIVE
            | OpenTreeFlags::AT_SYMLINK_NOFOLLOW,
    );
    let Ok(tree) = clone else { return false };
    if idmap(&tree, &userns).is_err() {
        return false;
    }
    if let Ok(stat) = rustix::fs::fstat(&tree)
        && let Ok(mut trial) = TRIAL.lock()
    {
        // The previous trial, if any, is dropped here: never the one a spawn is about to use.
        *trial = Some((stat.st_dev, stat.st_ino, tree));
    }
    true
}

/// The last successful trial of [`supported`], kept for the [`clone_idmapped`] of the same
/// directory that follows it in a run: the same copy (recursive, idmapped the same way), made
/// once instead of twice, and never closed on the run's critical path (closing a detached
/// tree unmounts it, which waits for an RCU grace period).
static TRIAL: std::sync::Mutex<Option<(u64, u64, OwnedFd)>> = std::sync::Mutex::new(None);

/// The kept trial when it is a copy of exactly the directory `source` names (same device and
/// inode: a directory swapped in between is cloned afresh).
fn take_trial(source: BorrowedFd<'_>) -> Option<OwnedFd> {
    let stat = rustix::fs::fstat(source).ok()?;
    let mut trial = TRIAL.lock().ok()?;
    match trial.take() {
        Some((dev, ino, tree)) if dev == stat.st_dev && ino == stat.st_ino => Some(tree),
        other => {
            *trial = other;
            None
        }
    }
}

/// An idmapped copy of a directory attached on the host at [`Staged::path`] (an empty
/// directory of ours) for an engine that resolves bind sources itself; detached and removed
/// on drop.
#[derive(Debug)]
pub struct Staged {
    path: PathBuf,
}

impl Staged {
    /// Attaches an idmapped clone of `source` at `path`, which is created (it must not exist;
    /// its parent must be a directory of ours).
    pub fn attach(source: BorrowedFd<'_>, path: &Path) -> std::io::Result<Staged> {
        let tree = clone_idmapped(source)?;
        std::fs::create_dir(path)?;
        let staged = Staged { path: path.to_owned() };
        rustix::mount::move_mount(
            tree.as_fd(),
            "",
            rustix::fs::CWD,
            path,
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
        )?;
        Ok(staged)
    }

    /// Where the copy is attached.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Leaves the copy attached (whoever owns it now detaches it: [`unstage`]).
    pub fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        unstage(&self.path);
    }
}

/// Detaches whatever is mounted at `path` (lazily: a container still using it keeps its own
/// reference) and removes the directory. Never follows a link at `path`.
pub fn unstage(path: &Path) {
    let _ = rustix::mount::unmount(path, UnmountFlags::DETACH | UnmountFlags::NOFOLLOW);
    let _ = std::fs::remove_dir(path);
}
