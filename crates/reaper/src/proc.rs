//! A process pinned by pid and start time (field 22 of `/proc/<pid>/stat`), so a recycled pid
//! is never taken for it: the init of a session sandbox, whose agent socket the host reaches
//! through `/proc/<pid>/root` and which a stop or a reap kills.
//!
//! Every lookup goes through one `/proc/<pid>` directory handle whose start time is checked
//! first; what lies below the sandbox's root is opened relative to it with `O_NOFOLLOW`, so a
//! symlink planted by the sandbox never leads anywhere on the host.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::process::{Pid, PidfdFlags, Signal};

/// A process on this host, pinned by its start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcPin {
    /// Host pid.
    pub pid: u32,
    /// Its start time (field 22 of `/proc/<pid>/stat`, clock ticks since boot).
    pub start_time: u64,
}

fn proc_dir(pid: u32) -> Option<OwnedFd> {
    rustix::fs::open(
        format!("/proc/{pid}"),
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()
}

fn start_time_in(dir: &OwnedFd) -> Option<u64> {
    let fd =
        rustix::fs::openat(dir, "stat", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let mut buf = vec![0u8; 4096];
    let n = rustix::io::read(&fd, &mut buf).ok()?;
    let (state, start) = crate::parse_stat(&String::from_utf8_lossy(&buf[..n]))?;
    // A zombie has let go of everything it had; it is not the session any more.
    (state != 'Z').then_some(start)
}

impl ProcPin {
    /// Pins the process `pid` as it is now.
    pub fn of_pid(pid: u32) -> Option<ProcPin> {
        let dir = proc_dir(pid)?;
        Some(ProcPin { pid, start_time: start_time_in(&dir)? })
    }

    /// The `/proc/<pid>` handle, if the process is still the one pinned.
    fn dir(&self) -> Option<OwnedFd> {
        let dir = proc_dir(self.pid)?;
        (start_time_in(&dir)? == self.start_time).then_some(dir)
    }

    /// Whether the process is still the one pinned (and not a zombie).
    pub fn alive(&self) -> bool {
        self.dir().is_some()
    }

    /// The unix socket at `rel` below the process's root directory, opened `O_PATH` without
    /// following anything the sandbox controls; `None` when the process is gone or recycled,
    /// or `rel` is not a socket (a symlink is not followed, it is refused).
    pub fn socket_in_root(&self, rel: &str) -> Option<OwnedFd> {
        let fd = self.path_in_root(rel)?;
        let stat = rustix::fs::fstat(&fd).ok()?;
        (FileType::from_raw_mode(stat.st_mode) == FileType::Socket).then_some(fd)
    }

    /// The status of the file at `rel` below the process's root, looked up as
    /// [`ProcPin::socket_in_root`] does (nothing followed); `None` when the process is gone
    /// or nothing is there. The warm pool reads a member's activity stamp this way.
    pub fn stat_in_root(&self, rel: &str) -> Option<rustix::fs::Stat> {
        rustix::fs::fstat(self.path_in_root(rel)?).ok()
    }

    /// `rel` below the pinned process's root, `O_PATH | O_NOFOLLOW`.
    fn path_in_root(&self, rel: &str) -> Option<OwnedFd> {
        let dir = self.dir()?;
        let root = rustix::fs::openat(
            &dir,
            "root",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        rustix::fs::openat(
            &root,
            rel,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()
    }

    /// Connects to the socket at `rel` below the process's root ([`ProcPin::socket_in_root`]),
    /// through `/proc/self/fd/N`, so the inode checked is the inode connected to.
    pub fn connect_in_root(&self, rel: &str) -> Option<std::os::unix::net::UnixStream> {
        let fd = self.socket_in_root(rel)?;
        let path = format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd());
        std::os::unix::net::UnixStream::connect(path).ok()
    }

    /// SIGKILLs the process through a pidfd opened while the pin still held, so a recycled
    /// pid is never hit; `false` when it was already gone.
    pub fn kill(&self) -> bool {
        let Some(pid) = i32::try_from(self.pid).ok().and_then(Pid::from_raw) else {
            return false;
        };
        let Ok(pidfd) = rustix::process::pidfd_open(pid, PidfdFlags::empty()) else {
            return false;
        };
        // The pidfd names one process for good; check it is still the pinned one.
        if !self.alive() {
            return false;
        }
        rustix::process::pidfd_send_signal(pidfd.as_fd(), Signal::KILL).is_ok()
    }
}

/// Reaps our own child `pid`, which was just told to exit: waits for its end on a pidfd (no
/// polling interval added to every run's end), at most `patience`. A child that does not end
/// in time is left (a zombie until this process exits) rather than holding the caller up.
pub fn reap_child(pid: i32, patience: std::time::Duration) {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let Some(child) = rustix::process::Pid::from_raw(pid) else { return };
    let reap = || {
        rustix::process::waitpid(Some(child), rustix::process::WaitOptions::NOHANG)
            .map(|status| status.is_some())
    };
    let Ok(pidfd) = rustix::process::pidfd_open(child, rustix::process::PidfdFlags::empty()) else {
        // Reaped already, or no pidfd here (a kernel before 5.3): a bounded poll of the pid.
        let deadline = std::time::Instant::now() + patience;
        while matches!(reap(), Ok(false)) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        return;
    };
    let deadline = std::time::Instant::now() + patience;
    loop {
        match reap() {
            Ok(true) => return,
            Err(e) if e != rustix::io::Errno::INTR => return,
            _ => {}
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        let timeout = Timespec::try_from(left).unwrap_or(Timespec { tv_sec: 1, tv_nsec: 0 });
        let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
        let _ = rustix::event::poll(&mut fds, Some(&timeout));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_process_is_pinned_and_a_recycled_pid_is_not() {
        let me = ProcPin::of_pid(std::process::id()).expect("own /proc entry");
        assert!(me.alive());
        let recycled = ProcPin { start_time: me.start_time + 1, ..me };
        assert!(!recycled.alive(), "a different start time is a different process");
        assert!(!recycled.kill(), "never signals a process that is not the pinned one");
        assert!(me.socket_in_root("tmp/.python-sandbox-agent.sock").is_none());
    }

    #[test]
    fn a_symlink_at_the_socket_path_is_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("real.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
        let link = dir.path().join("link.sock");
        std::os::unix::fs::symlink(&socket, &link).expect("symlink");
        let me = ProcPin::of_pid(std::process::id()).expect("pin");
        // Our root is the host's `/`, so the paths are relative to it.
        let rel = |p: &std::path::Path| p.to_string_lossy().trim_start_matches('/').to_owned();
        assert!(me.connect_in_root(&rel(&socket)).is_some(), "the real socket connects");
        assert!(me.socket_in_root(&rel(&link)).is_none(), "the planted link is refused");
    }
}
