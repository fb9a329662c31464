//! Starting bwrap as nobody for a root caller (see [`crate::plan::Plan::run_as`]).
//!
//! bwrap maps the sandbox's user onto the uid it runs as, so a root caller must start it as an
//! unprivileged user. That user cannot reach root's files by path (`/root` is 0700, the cache
//! and interpreter live there), and bwrap resolves bind sources by path. So, in the forked child
//! and before `exec`, while still root:
//!
//! 1. a private mount namespace (propagation private: the host sees none of this);
//! 2. a small tmpfs at [`crate::plan::STAGE`] and, for each source, a mount point there onto
//!    which a **detached copy of the source's mount, cloned in the parent** (`open_tree` of a
//!    descriptor opened without following links) is attached with `move_mount`. What was
//!    checked is what is mounted: a path swapped after the check is never resolved again. (A
//!    plain bind from `/proc/self/fd/N` fails here: the source mount belongs to the parent's
//!    mount namespace.)
//! 3. supplementary groups cleared, then gid and uid set to nobody, which drops every
//!    capability; then `exec` of bwrap, whose binds name the staged paths.
//!
//! Only async-signal-safe syscalls run in the child: everything is allocated before `fork`.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::process::Command;

use rustix::fs::{Mode, OFlags};
use rustix::mount::{MountFlags, MountPropagationFlags, MoveMountFlags, OpenTreeFlags};

use crate::error::{Error, Result};
use crate::plan::{STAGE, Staged};

/// The descriptors and paths one staged start needs; kept alive until bwrap has started.
pub(crate) struct Stage {
    /// (detached mount tree, staged path, is a directory).
    sources: Vec<(OwnedFd, CString, bool)>,
    /// Directories to create inside the stage first, parents before children (for a source
    /// staged at its own path below the stage, such as a bwrap binary under `/tmp`).
    dirs: Vec<CString>,
    stage: CString,
    uid: u32,
    gid: u32,
}

impl Stage {
    /// Opens every source: the caller's ([`Staged::exact`]) with no symlink followed anywhere
    /// (`crate::pin`), our own with none followed at the last component (the paths are
    /// canonical, so a symlink there means it changed since it was checked).
    pub(crate) fn open(staging: &[Staged], uid: u32, gid: u32) -> Result<Stage> {
        let mut sources = Vec::with_capacity(staging.len());
        let mut dirs: Vec<CString> = Vec::new();
        for staged in staging {
            let stage = std::path::Path::new(STAGE);
            let mut parents: Vec<&std::path::Path> = staged
                .at
                .ancestors()
                .skip(1)
                .take_while(|p| p.starts_with(stage) && *p != stage)
                .collect();
            parents.reverse();
            for parent in parents {
                let parent = cstring(parent.as_os_str().as_bytes())?;
                if !dirs.contains(&parent) {
                    dirs.push(parent);
                }
            }
            let fd = if staged.exact {
                crate::pin::open(&staged.src)?
            } else {
                rustix::fs::open(
                    &staged.src,
                    OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| Error::io(format!("opening {}", staged.src.display()))(e.into()))?
            };
            let stat = rustix::fs::fstat(&fd)
                .map_err(|e| Error::io(format!("inspecting {}", staged.src.display()))(e.into()))?;
            let kind = rustix::fs::FileType::from_raw_mode(stat.st_mode);
            let is_dir = match kind {
                rustix::fs::FileType::Directory => true,
                rustix::fs::FileType::RegularFile => false,
                _ => {
                    return Err(Error::io(format!("mounting {}", staged.src.display()))(
                        std::io::Error::other(
                            "it is neither a directory nor a regular file (it changed after it was checked)",
                        ),
                    ));
                }
            };
            let tree = rustix::mount::open_tree(
                &fd,
                c"",
                OpenTreeFlags::OPEN_TREE_CLONE
                    | OpenTreeFlags::OPEN_TREE_CLOEXEC
                    | OpenTreeFlags::AT_EMPTY_PATH
                    | OpenTreeFlags::AT_RECURSIVE,
            )
            .map_err(|e| {
                Error::io(format!("cloning the mount of {}", staged.src.display()))(e.into())
            })?;
            if staged.idmap {
                reaper::idmap::idmap(&tree, &root_as_nobody()?).map_err(|e| {
                    Error::io(format!("idmapping the mount of {}", staged.src.display()))(e)
                })?;
            }
            let at = cstring(staged.at.as_os_str().as_bytes())?;
            sources.push((tree, at, is_dir));
        }
        Ok(Stage { sources, dirs, stage: cstring(STAGE.as_bytes())?, uid, gid })
    }

    /// Makes `command` (bwrap) stage the sources and drop to nobody right before `exec`.
    pub(crate) fn apply(&self, command: &mut Command) {
        let sources: Vec<(i32, CString, bool)> = self
            .sources
            .iter()
            .map(|(tree, at, is_dir)| (tree.as_raw_fd(), at.clone(), *is_dir))
            .collect();
        let stage = self.stage.clone();
        let dirs = self.dirs.clone();
        let (uid, gid) = (self.uid, self.gid);
        let data = c"mode=0755,size=1m";
        // SAFETY: the closure runs in the forked child before exec and only makes raw
        // syscalls on memory allocated before the fork (no allocation, no locks). The
        // descriptors it names are open in the child (close-on-exec closes them only at exec).
        unsafe {
            command.pre_exec(move || {
                rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS)?;
                rustix::mount::mount_change(
                    c"/",
                    MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
                )?;
                rustix::mount::mount(
                    c"tmpfs",
                    stage.as_c_str(),
                    c"tmpfs",
                    MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
                    data,
                )?;
                for dir in &dirs {
                    rustix::fs::mkdir(dir.as_c_str(), Mode::from_raw_mode(0o755))?;
                }
                for (tree, at, is_dir) in &sources {
                    if *is_dir {
                        rustix::fs::mkdir(at.as_c_str(), Mode::from_raw_mode(0o755))?;
                    } else {
                        let file = rustix::fs::open(
                            at.as_c_str(),
                            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
                            Mode::from_raw_mode(0o644),
                        )?;
                        drop(file);
                    }
                    // SAFETY: the tree descriptor is open in the child (see above) and is not
                    // closed or reused while borrowed.
                    let tree = BorrowedFd::borrow_raw(*tree);
                    rustix::mount::move_mount(
                        tree,
                        c"",
                        rustix::fs::CWD,
                        at.as_c_str(),
                        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
                    )?;
                }
                sandbox_net::drop_to(uid, gid)
            });
        }
    }
}

fn cstring(bytes: &[u8]) -> Result<CString> {
    CString::new(bytes).map_err(|_| {
        Error::io("preparing a mount path")(std::io::Error::other("the path contains a NUL byte"))
    })
}

/// Whether `dir` can be staged idmapped (`reaper::idmap::supported`); the first call makes the
/// idmap user namespace, a spawn, so it runs under [`sandbox_net::spawn_guard`].
pub(crate) fn idmap_supported(dir: &std::path::Path) -> bool {
    let _guard = sandbox_net::spawn_guard();
    reaper::idmap::supported(dir)
}

/// A root caller's engine: makes the idmap user namespace on a thread of its own, while the
/// caller goes on (parsing, planning); [`idmap_supported`] then finds it made. Creating a user
/// namespace is a quarter of a millisecond of kernel work (its sysctl table is registered), on
/// the critical path of every root caller's run otherwise. Made by [`root_as_nobody`], under
/// the spawn guard, so a run's first `idmap_supported` waits for it; a failure is kept, and
/// that call finds it (falling back to an ACL, as it would have).
pub(crate) fn make_idmap_userns_meanwhile() {
    let made = std::thread::Builder::new().name("idmap-userns".into()).spawn(|| {
        let _ = root_as_nobody();
    });
    // No thread: the first `idmap_supported` makes it, as it would have anyway.
    drop(made);
}

/// `reaper::idmap::root_as_nobody`, made under [`sandbox_net::spawn_guard`].
fn root_as_nobody() -> Result<BorrowedFd<'static>> {
    let _guard = sandbox_net::spawn_guard();
    reaper::idmap::root_as_nobody().map_err(Error::io("making the idmap user namespace"))
}
