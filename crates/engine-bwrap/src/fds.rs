//! Keeps inherited file descriptors out of the sandbox. bwrap passes every descriptor it
//! inherits to the command, so a socket our own parent leaked to us (a docker or agent
//! connection, say) would reach the script. Before each spawn every descriptor >= 3 except
//! the pipes bwrap reads (status, seccomp) is marked close-on-exec.

#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

/// Marks every open descriptor >= 3 close-on-exec, except those in `keep`.
pub(crate) fn close_on_exec_all_but(keep: &[BorrowedFd<'_>]) {
    let keep: Vec<RawFd> = keep.iter().map(AsRawFd::as_raw_fd).collect();
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return };
    let fds: Vec<RawFd> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .filter(|fd| *fd >= 3 && !keep.contains(fd))
        .collect();
    for fd in fds {
        // SAFETY: the descriptor was listed as open a moment ago; fcntl(F_SETFD) on a
        // descriptor that has since been closed fails with EBADF and changes nothing. The
        // borrow does not outlive this statement and never closes the descriptor.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let _ = rustix::io::fcntl_setfd(borrowed, rustix::io::FdFlags::CLOEXEC);
    }
}
