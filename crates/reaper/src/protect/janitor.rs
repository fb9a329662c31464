//! The janitor: removes a run's placeholders when the process that made them dies without
//! releasing them (SIGKILL: no destructor runs), once its sandbox is gone too.
//!
//! A forked watcher in a session of its own (a terminal's Ctrl-C or a process-group kill is
//! not for it) holds the read end of a pipe, a pidfd of the sandbox, and for each tree a
//! descriptor of its top, of the state dir and of the tree's lock file (a file description
//! of its own, so it never shares the run's lock). A byte on the pipe (the run released or
//! kept its placeholders) makes it exit. End of file (every copy of the write end closed: the
//! run's process died) makes it wait for the sandbox's end, then a grace period (the
//! sandbox's processes die of parent-death signals sent as its first process dies, and a
//! process with a pending SIGKILL runs no more code of its own), then take each tree's lock
//! exclusive without waiting: only when no other run or session uses the tree does it
//! remove each placeholder it was told of that is still the recorded entry and empty, with
//! its record. Async-signal-safe calls only after the fork; everything it needs is prepared
//! before.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::{Mode, OFlags};

/// How long after the sandbox's first process ends the janitor waits for the rest of it.
const GRACE: libc::timespec = libc::timespec { tv_sec: 0, tv_nsec: 200_000_000 };

/// One placeholder the janitor may remove.
#[derive(Debug)]
pub(crate) struct Made {
    pub(crate) name: CString,
    pub(crate) record: CString,
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) dir: bool,
}

/// One tree's descriptors and placeholders.
#[derive(Debug)]
pub(crate) struct TreeFds {
    pub(crate) top: OwnedFd,
    pub(crate) lock: OwnedFd,
    pub(crate) lock_name: CString,
    pub(crate) made: Vec<Made>,
}

/// The running janitor, seen from the run.
#[derive(Debug)]
pub(crate) struct Janitor {
    write: Option<OwnedFd>,
    pid: i32,
}

impl Janitor {
    /// Forks the janitor; `None` when it cannot be (then a killed run's placeholders are left
    /// to the next sweep, as before).
    pub(crate) fn start(
        sandbox: BorrowedFd<'_>,
        state: &OwnedFd,
        trees: Vec<TreeFds>,
    ) -> Option<Janitor> {
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).ok()?;
        let devnull =
            rustix::fs::open("/dev/null", OFlags::RDWR | OFlags::CLOEXEC, Mode::empty()).ok()?;
        let sandbox = sandbox.try_clone_to_owned().ok()?;
        let mut keep: Vec<i32> =
            vec![read.as_raw_fd(), sandbox.as_raw_fd(), state.as_raw_fd(), devnull.as_raw_fd()];
        for tree in &trees {
            keep.extend([tree.top.as_raw_fd(), tree.lock.as_raw_fd()]);
        }
        keep.sort_unstable();
        // SAFETY: the child runs only async-signal-safe system calls on descriptors it owns
        // and memory prepared before the fork (read, never allocated or freed), and ends in
        // `_exit`, so forking a multi-threaded process is sound.
        match unsafe { libc::fork() } {
            -1 => None,
            0 => unsafe {
                watch(
                    &keep,
                    devnull.as_raw_fd(),
                    read.as_raw_fd(),
                    sandbox.as_raw_fd(),
                    state.as_raw_fd(),
                    &trees,
                )
            },
            pid => Some(Janitor { write: Some(write), pid }),
        }
    }

    /// The run released (or kept) its placeholders: the janitor exits, and is reaped here.
    pub(crate) fn dismiss(mut self) {
        if let Some(write) = self.write.take() {
            let _ = rustix::io::write(&write, b"k");
        }
        crate::reap_child(self.pid, std::time::Duration::from_secs(1));
    }
}

/// The janitor, in the forked child.
///
/// SAFETY: call only in a freshly forked child, with `keep` open in it.
unsafe fn watch(
    keep: &[i32],
    devnull: i32,
    read: i32,
    sandbox: i32,
    state: i32,
    trees: &[TreeFds],
) -> ! {
    unsafe {
        libc::setsid();
        // Nothing of the run's but what it needs: its stdout may be a pipe whose reader waits
        // for end of file, and its shared lock must not live on in this process. The kept
        // descriptors are all above 2 (each was opened after the standard ones, or the run
        // would have been handed a closed one there; a duplicate would be needed otherwise).
        if keep.iter().any(|fd| *fd < 3) {
            libc::_exit(1);
        }
        for fd in 0..3 {
            libc::dup2(devnull, fd);
        }
        let mut first = 3;
        for &fd in keep {
            if first < fd {
                close_range(first, fd - 1);
            }
            first = fd + 1;
        }
        close_range(first, i32::MAX);

        let mut byte = 0u8;
        loop {
            match libc::read(read, (&raw mut byte).cast(), 1) {
                1 => libc::_exit(0),
                -1 if *libc::__errno_location() == libc::EINTR => {}
                _ => break,
            }
        }
        let mut poll = libc::pollfd { fd: sandbox, events: libc::POLLIN, revents: 0 };
        while libc::poll(&mut poll, 1, -1) < 0 && *libc::__errno_location() == libc::EINTR {}
        let mut left = GRACE;
        while libc::nanosleep(&left, &mut left) < 0 && *libc::__errno_location() == libc::EINTR {}
        for tree in trees {
            sweep(state, tree);
        }
        libc::_exit(0)
    }
}

/// Removes `tree`'s placeholders if nobody uses the tree and the lock file is still the one
/// its descriptor holds (a sweep that removed it may have let a new run make another).
///
/// SAFETY: async-signal-safe calls only.
unsafe fn sweep(state: i32, tree: &TreeFds) {
    unsafe {
        let lock = tree.lock.as_raw_fd();
        if libc::flock(lock, libc::LOCK_EX | libc::LOCK_NB) != 0 {
            return;
        }
        let mut held: libc::stat = std::mem::zeroed();
        let mut named: libc::stat = std::mem::zeroed();
        if libc::fstat(lock, &mut held) != 0
            || libc::fstatat(state, tree.lock_name.as_ptr(), &mut named, libc::AT_SYMLINK_NOFOLLOW)
                != 0
            || (held.st_dev, held.st_ino) != (named.st_dev, named.st_ino)
        {
            return;
        }
        let top = tree.top.as_raw_fd();
        for made in &tree.made {
            let mut record: libc::stat = std::mem::zeroed();
            if libc::fstatat(state, made.record.as_ptr(), &mut record, libc::AT_SYMLINK_NOFOLLOW)
                != 0
            {
                // Someone else removed it, and its placeholder with it.
                continue;
            }
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstatat(top, made.name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) == 0
                && (st.st_dev, st.st_ino) == (made.dev, made.ino)
            {
                if made.dir {
                    libc::unlinkat(top, made.name.as_ptr(), libc::AT_REMOVEDIR);
                } else if st.st_size == 0 {
                    libc::unlinkat(top, made.name.as_ptr(), 0);
                }
            }
            libc::unlinkat(state, made.record.as_ptr(), 0);
        }
    }
}

/// SAFETY: async-signal-safe.
unsafe fn close_range(first: i32, last: i32) {
    unsafe {
        if libc::syscall(libc::SYS_close_range, first, last, 0) != 0 {
            // Before Linux 5.9: one by one, up to a generous limit.
            for fd in first..=last.min(65_535) {
                libc::close(fd);
            }
        }
    }
}
