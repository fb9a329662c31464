//! Performs a [`Plan`]: the IO edge of the engine.
//!
//! **Design: fork from a dedicated thread, no re-exec.** A multi-threaded process cannot
//! `unshare(CLONE_NEWUSER)`, and `PR_SET_PDEATHSIG` fires when the *thread* that forked exits.
//! So [`spawn`] starts one thread that forks and then waits for the child until it is gone:
//! the parent-death signal is tied to exactly the lifetime of the wait, whatever thread the
//! caller uses. Re-executing the binary as its own init (codex's pattern) would need a hook in
//! every binary that links the library (the CLI, each test binary); a fork keeps the crate
//! self-contained. Everything the children need (C strings, the seccomp program, idmapped
//! trees) is built before the fork; after it only syscalls and the Landlock calls run, and
//! the allocator stays usable in a forked child (glibc's and musl's take their lock around
//! `fork`; the CLI's musl build registers dlmalloc's the same way).
//!
//! **Three processes**, like bubblewrap's, and a short-lived fourth:
//! 1. the *monitor*, forked from the caller: unshares the tree's namespaces, writes its id
//!    maps, starts the namespace maker, forks the init, forwards
//!    SIGINT/SIGTERM/SIGHUP/SIGQUIT/SIGTSTP/SIGCONT to the init and exits with its status
//!    (its pid is the one the caller sees); it reports that status through the *done* pipe
//!    first (see below). The *namespace maker* (`make_namespaces`, a child sharing the
//!    monitor's memory: no fork of the caller's address space) makes the sandbox's own
//!    user and network namespaces (and brings loopback up) while the init builds the tree (the
//!    kernel takes half a millisecond for them), and exits once the init holds them;
//! 2. the *init*, pid 1 of the new pid namespace: mounts procfs (only a process inside the pid
//!    namespace may), builds the tree, `pivot_root`s (a short-lived helper detaches the old
//!    root meanwhile, see `Detacher`), drops every
//!    capability (bounding set included), becomes undumpable, takes `PR_SET_NO_NEW_PRIVS` and
//!    the wall (with net on demand, the gate of [`crate::demand`] too, whose held calls it
//!    serves), forks the command (which inherits all of them) and reaps until the command
//!    exits, forwarding signals to it (so Ctrl-C is a `KeyboardInterrupt` inside, and a
//!    terminal's Ctrl-Z stops the whole namespace until the shell's `fg` or `bg` continues it);
//!    when it exits the kernel kills everything left in the namespace;
//! 3. the *command*, started like `posix_spawn` starts one (`CLONE_VM | CLONE_VFORK`: no copy
//!    of the init's address space, which is the caller's): new session, parent-death signal,
//!    Landlock (best effort, the ruleset built by the init), rlimits, then `execve`.
//!
//! **The end of a run.** The monitor is the last process of the sandbox's mount, ipc, uts and
//! cgroup namespaces, so the kernel tears them down in its `exit` (unmounting the whole tree),
//! after the init and everything in the pid namespace are gone; a caller waiting for the
//! monitor would wait for that teardown too. So once the monitor sees the init exited (whose
//! exit waits until every process of its pid namespace is gone: nothing of the run runs any
//! more) it writes the init's exit code to the done pipe, and [`Child::wait_status`] returns on
//! that record. It looks without reaping (`WNOWAIT`) and reaps after writing: releasing the
//! init waits for an RCU grace period (its `/proc/1` entries carry the masking mounts), which
//! is no part of the run. The monitor itself is reaped in the background by the thread that
//! forked it, which lives on until then (the parent-death signal stays armed). No record (the
//! monitor was killed, or failed before the init existed): the caller waits for the monitor.
//! Neither the init nor the command holds the pipe, so nothing inside can forge the record.
//!
//! **Ids.** An unprivileged caller's monitor first unshares a user namespace alone and maps
//! uid 0 in it onto its own uid (a one-line map of its own id, the only kind it may write), so
//! the tree's mounts (devpts) work. A root caller's sandbox must never be
//! host root: the tree is built as real root in namespaces owned by the host's user namespace
//! (so the sandbox holds no capability over any of them), the workspace and rw mounts are
//! attached as idmapped trees (root's files appear as nobody's, nobody's writes land as
//! root's: `reaper::idmap`), then the init drops to host nobody (65534) and only then joins a
//! user namespace mapping nobody onto itself: the maker made it as nobody (so nobody owns it,
//! and the network namespace in it), the init mapped it while still root.
//!
//! **Mount flags.** Every bind gets `MS_NOSUID|MS_NODEV` (device nodes: nosuid, noexec) and
//! read-only where planned through `mount_setattr(AT_RECURSIVE)`, which only sets attributes,
//! so the flags the kernel locks in a less privileged namespace are never cleared (and
//! submounts are covered without bubblewrap's mountinfo walk).

#![allow(unsafe_code)]

use std::ffi::{CString, OsString};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use crate::error::{Error, Result};
use crate::plan::{Access, Op, Plan};

/// What runs inside: an absolute program path with its arguments, the complete environment,
/// and optional stdio (inherited from the caller when `None`).
#[derive(Debug, Default)]
pub struct Command {
    /// `argv[0]` is the program, resolved inside the sandbox.
    pub argv: Vec<OsString>,
    /// The whole environment; nothing of the caller's is added.
    pub env: Vec<(String, OsString)>,
    /// fd 0.
    pub stdin: Option<OwnedFd>,
    /// fd 1.
    pub stdout: Option<OwnedFd>,
    /// fd 2.
    pub stderr: Option<OwnedFd>,
    /// Resource limits (`RLIMIT_*`, value as soft and hard limit), set by the command right
    /// before its `execve`, in the sandbox's user namespace: `RLIMIT_NPROC` then counts the
    /// sandbox's processes only (set before, it would be checked against all of the caller's).
    pub rlimits: Vec<(libc::c_int, u64)>,
    /// A cgroup's `cgroup.procs`, opened for writing: the monitor moves itself there before
    /// anything else, so the whole tree is in it (a delegated cgroup v2 holding the limits).
    pub cgroup_procs: Option<OwnedFd>,
    /// A session's sandbox, which outlives the caller: the monitor arms no parent-death
    /// signal and starts a session of its own (no terminal's signal reaches it). What ends it
    /// is its command exiting (the agent's idle TTL) or a SIGKILL to [`Child::pid`].
    pub detach: bool,
    /// Net on: connect the network when the script first needs it ([`crate::demand`]) rather
    /// than before it starts; the caller serves [`Child::take_net_demand`]. Ignored where the
    /// kernel cannot ([`crate::demand::supported`]): the network is then connected up front.
    pub net_on_demand: bool,
    /// Net on demand: addresses on the sandbox's loopback that the network, once attached,
    /// serves (the relay's doors to the host's loopback nameservers,
    /// `sandbox_net::loopback_nameservers`): a call to one asks for the network like a call
    /// outside does.
    pub net_doors: Vec<std::net::SocketAddr>,
}

/// A started sandbox.
#[derive(Debug)]
pub struct Child {
    pid: i32,
    /// A pidfd of the monitor, opened before anything could reap it (so never a recycled pid).
    pidfd: OwnedFd,
    /// Net on: the host pid of the sandbox's init, a process in the sandbox's network namespace.
    init: Option<i32>,
    waiter: std::thread::JoinHandle<Result<i32>>,
    /// The done pipe's read end: the init's exit code once it and every process of the run are
    /// gone (written by the monitor alone; see the module docs), or EOF when the monitor ends
    /// without one.
    done: OwnedFd,
    /// Setup failures: a record `(step, errno)` from whichever process failed.
    error_r: OwnedFd,
    labels: Vec<String>,
    /// Net on: the init waits after its last `unshare` until this is written (or closed, which
    /// ends the sandbox before anything of the command ran).
    go: Option<OwnedFd>,
    /// Net on, connected on demand: the caller's side ([`Child::take_net_demand`]).
    demand: Option<crate::demand::NetDemand>,
}

impl Child {
    /// Net on: lets the sandbox go on once its network namespace (that of [`Child::pid`]) is
    /// connected; until then nothing is set up in it. No-op with net off.
    pub fn release(&mut self) -> Result<()> {
        if let Some(go) = self.go.take() {
            rustix::io::write(&go, &[1])
                .map_err(|e| Error::io("releasing the native sandbox")(e.into()))?;
        }
        Ok(())
    }

    /// Net on, when the network could not be attached: the sandbox ends before its setup
    /// (what dropping the [`Child`] does too). No-op with net off or once released.
    pub fn release_abandoned(&mut self) {
        self.go = None;
    }

    /// Net on, connected on demand ([`Command::net_on_demand`]): the handle through which the
    /// sandbox asks for its network, once. `None` otherwise (net off, or connected up front:
    /// see [`Child::release`]).
    pub fn take_net_demand(&mut self) -> Option<crate::demand::NetDemand> {
        self.demand.take()
    }

    /// The monitor's host pid: signals sent to it reach the command.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// A pidfd of the monitor: readable once it has exited; SIGKILL through it ends the whole
    /// sandbox (the init dies with the monitor, the pid namespace with the init).
    pub fn pidfd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.pidfd)
    }

    /// Net on: a host pid in the sandbox's network namespace (its init's; the namespace is
    /// made together with the sandbox's own user namespace, so it belongs to the sandbox's
    /// host user, never to root). With net off, the monitor's.
    pub fn netns_pid(&self) -> i32 {
        self.init.unwrap_or(self.pid)
    }

    /// Readable once the run has ended and nothing of it runs any more (the done pipe: the
    /// record, or EOF when the monitor ended without one), possibly before the monitor itself
    /// has finished exiting; [`Child::wait_status`] then does not block.
    pub fn ended(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.done)
    }

    /// Waits for the command; its exit code, or 128 + the signal that ended it.
    pub fn wait(self) -> Result<i32> {
        self.wait_status().map(|(code, signal)| match (code, signal) {
            (Some(code), _) => code,
            (None, Some(signal)) => 128 + signal,
            (None, None) => 255,
        })
    }

    /// Waits for the end of the run: `(exit code, None)` when the monitor reported or exited
    /// (with the command's exit code, or 128 + the signal that ended the command),
    /// `(None, Some(signal))` when the monitor itself was killed (the caller's SIGKILL ending
    /// the sandbox). Returns once every process of the run is gone; the monitor may still be
    /// in the kernel's teardown of its namespaces, and is reaped in the background.
    pub fn wait_status(self) -> Result<(Option<i32>, Option<i32>)> {
        self.finish(false)
    }

    /// [`Child::wait_status`], and the monitor reaped too: for a caller that must find the
    /// monitor gone afterwards (removing the run's cgroup, which the monitor is in until its
    /// exit is complete).
    pub fn wait_reaped(self) -> Result<(Option<i32>, Option<i32>)> {
        self.finish(true)
    }

    fn finish(self, reap: bool) -> Result<(Option<i32>, Option<i32>)> {
        let Child { waiter, done, error_r, labels, demand, .. } = self;
        // A demand nobody serves must not hold the script's network calls forever: dropped,
        // they go on (and find no route).
        drop(demand);
        let mut record = [0u8; 4];
        let reported = read_exact(&done, &mut record).then(|| i32::from_ne_bytes(record));
        let ended = match reported {
            Some(code) => {
                if reap {
                    join(waiter)?;
                }
                // Else dropping the handle detaches the thread, which reaps the monitor.
                Ended::Reported(code)
            }
            None => Ended::Status(join(waiter)?),
        };
        if let Some(e) = setup_error(&error_r, &labels)? {
            return Err(e);
        }
        Ok(ended.code_and_signal())
    }
}

/// How the caller learnt of a run's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// The monitor's record on the done pipe: the init's exit code.
    Reported(i32),
    /// The monitor's raw wait status (it ended without a record).
    Status(i32),
}

impl Ended {
    /// `(exit code, None)`, or `(None, Some(signal))` for a monitor killed by `signal`.
    fn code_and_signal(self) -> (Option<i32>, Option<i32>) {
        match self {
            Ended::Reported(code) => (Some(code), None),
            Ended::Status(status) if libc::WIFEXITED(status) => {
                (Some(libc::WEXITSTATUS(status)), None)
            }
            Ended::Status(status) if libc::WIFSIGNALED(status) => {
                (None, Some(libc::WTERMSIG(status)))
            }
            Ended::Status(_) => (Some(255), None),
        }
    }
}

fn join(waiter: std::thread::JoinHandle<Result<i32>>) -> Result<i32> {
    waiter.join().unwrap_or_else(|_| {
        Err(Error::Io {
            context: "waiting for the native sandbox".into(),
            source: std::io::Error::other("the waiting thread panicked"),
        })
    })
}

/// The setup failure a process of the sandbox recorded before it exited, if any. Read without
/// blocking once the run has ended: every record is written before its writer's exit.
fn setup_error(error_r: &OwnedFd, labels: &[String]) -> Result<Option<Error>> {
    let mut record = [0u8; 8];
    rustix::fs::fcntl_setfl(error_r, rustix::fs::OFlags::NONBLOCK)
        .map_err(|e| Error::io("error pipe")(e.into()))?;
    if let Ok(8) = rustix::io::read(error_r, &mut record) {
        let step = u32::from_ne_bytes([record[0], record[1], record[2], record[3]]);
        let errno = i32::from_ne_bytes([record[4], record[5], record[6], record[7]]);
        return Ok(Some(Error::Setup {
            step: step_label(step, labels),
            source: std::io::Error::from_raw_os_error(errno),
        }));
    }
    Ok(None)
}

const SANDBOX_ROOT: &str = "/tmp";
/// The tree being built, after the first `pivot_root` (the host is at [`OLDROOT`]).
const NEWROOT: &str = "/newroot";
const OLDROOT: &str = "/oldroot";

/// One prepared step of the tree, with every path already a C string.
enum Step {
    Mkdir(CString, u32),
    Symlink(CString, CString),
    Bind { src: CString, dest: CString, dir: bool, attr: u64 },
    Tree { tree: OwnedFd, dest: CString, dir: bool, attr: u64 },
    Tmpfs { dest: CString, data: CString },
    Proc(CString),
    Devpts { pts: CString, ptmx: CString },
    ReadOnly(CString),
    Mask { dest: CString },
    RootReadOnly(CString),
}

/// Fixed steps, reported through the error pipe by number (ops are `OPS + index`).
const STEP_NAMES: &[&str] = &[
    "unshare",
    "uid_map",
    "setgroups",
    "gid_map",
    "fork",
    "mount propagation",
    "sandbox root tmpfs",
    "pivot_root into the sandbox root",
    "detaching the host root",
    "final pivot_root",
    "hostname",
    "loopback up",
    "dropping to nobody",
    "user namespace",
    "capabilities",
    "no_new_privs",
    "seccomp",
    "chdir",
    "execve",
    "parent died",
    "waiting for the network",
    "resource limits",
    "joining the cgroup",
];
const S_UNSHARE: u32 = 0;
const S_UID_MAP: u32 = 1;
const S_SETGROUPS: u32 = 2;
const S_GID_MAP: u32 = 3;
const S_FORK: u32 = 4;
const S_PROPAGATION: u32 = 5;
const S_ROOT_TMPFS: u32 = 6;
const S_PIVOT: u32 = 7;
const S_DETACH: u32 = 8;
const S_PIVOT2: u32 = 9;
const S_HOSTNAME: u32 = 10;
const S_LOOPBACK: u32 = 11;
const S_NOBODY: u32 = 12;
const S_USERNS: u32 = 13;
const S_CAPS: u32 = 14;
const S_NNP: u32 = 15;
const S_SECCOMP: u32 = 16;
const S_CHDIR: u32 = 17;
const S_EXEC: u32 = 18;
const S_PARENT: u32 = 19;
const S_NET: u32 = 20;
const S_RLIMIT: u32 = 21;
const S_CGROUP: u32 = 22;
const OPS: u32 = 100;

/// Everything the three processes need, built before the fork.
struct Prepared {
    steps: Vec<Step>,
    labels: Vec<String>,
    root_caller: bool,
    /// An unprivileged caller's first user namespace: the caller is uid 0 there (devpts and
    /// the tree need uid 0 mapped), until the init's own user namespace maps it back.
    uid_map: CString,
    gid_map: CString,
    /// `(uid, gid)` the root caller's init drops to.
    nobody: (u32, u32),
    /// The sandbox's own user namespace, made by the init after the tree: the sandbox's ids
    /// onto the builder's (0 for an unprivileged caller, host nobody for a root caller).
    sandbox_map: CString,
    sandbox_gmap: CString,
    rlimits: Vec<(libc::c_int, u64)>,
    cgroup_procs: Option<OwnedFd>,
    detach: bool,
    /// [`Command::net_doors`].
    net_doors: Vec<std::net::SocketAddr>,
    writable: Vec<PathBuf>,
    chdir: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    seccomp: Vec<libc::sock_filter>,
    stdio: [Option<OwnedFd>; 3],
    error_w: OwnedFd,
    /// The done pipe's write end (see the module docs): the monitor's alone.
    done_w: OwnedFd,
    /// Net on: how the sandbox and its caller agree on connecting the network.
    net_sync: Option<NetSync>,
    /// Net on demand: the gate's program ([`crate::demand::gate`]), installed with the wall.
    gate: Vec<libc::sock_filter>,
    /// The descriptors the monitor keeps (sorted): every other one it inherited by the fork
    /// (this spawn's parent ends, other concurrent sandboxes' pipes) is closed, so an EOF the
    /// sandbox waits for is never held off by a copy inside it.
    keep: Vec<i32>,
}

/// The sandbox's ends of the pipes connecting its network with the caller.
enum NetSync {
    /// Connected before the command runs: `ready` (written by the init once the network
    /// namespace exists), `go` (read by it until the network is attached), `pid` (written by
    /// the monitor with the init's host pid).
    UpFront { ready: OwnedFd, go: OwnedFd, pid: OwnedFd },
    /// Connected on demand ([`crate::demand`]): the init's end of the socket pair
    /// [`crate::demand::NetDemand`] holds the other end of.
    OnDemand { sock: OwnedFd },
}

impl NetSync {
    fn fds(&self) -> Vec<i32> {
        match self {
            NetSync::UpFront { ready, go, pid } => {
                vec![ready.as_raw_fd(), go.as_raw_fd(), pid.as_raw_fd()]
            }
            NetSync::OnDemand { sock } => vec![sock.as_raw_fd()],
        }
    }
}

/// Starts `command` in the sandbox `plan` describes. With net on the sandbox stops right after
/// creating its namespaces: connect the network namespace of [`Child::pid`] (`crate::net`),
/// then [`Child::release`] it; or, with [`Command::net_on_demand`] where the kernel can, serve
/// [`Child::take_net_demand`] while the sandbox runs.
pub fn spawn(plan: &Plan, command: Command) -> Result<Child> {
    let (error_r, error_w) = pipe()?;
    let (done, done_w) = pipe()?;
    let on_demand = plan.net && command.net_on_demand && crate::demand::supported();
    let mut prepared = Prepared::new(plan, command, error_w, done_w)?;
    let labels = prepared.labels.clone();
    let mut parent_sync = None;
    let mut demand = None;
    if on_demand {
        let (sock, theirs) = rustix::net::socketpair(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::STREAM,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )
        .map_err(|e| Error::io("making a socket pair")(e.into()))?;
        prepared.net_sync = Some(NetSync::OnDemand { sock: theirs });
        prepared.gate = native_program(&crate::demand::gate)?;
        demand = Some(crate::demand::NetDemand { sock });
    } else if plan.net {
        let (ready_r, ready) = pipe()?;
        let (go, go_w) = pipe()?;
        let (pid_r, pid) = pipe()?;
        prepared.net_sync = Some(NetSync::UpFront { ready, go, pid });
        parent_sync = Some((ready_r, go_w, pid_r));
    }
    prepared.keep = prepared.keep_list();
    let (tx, rx) = mpsc::channel::<Result<(i32, OwnedFd)>>();
    let waiter = std::thread::Builder::new()
        .name("native-sandbox".into())
        .spawn(move || waiter(prepared, tx))
        .map_err(Error::io("starting the native sandbox's waiting thread"))?;
    let pid = rx.recv().unwrap_or_else(|_| {
        Err(Error::Io {
            context: "starting the native sandbox".into(),
            source: std::io::Error::other("the waiting thread ended early"),
        })
    });
    let (pid, pidfd) = match pid {
        Ok(started) => started,
        Err(e) => {
            let _ = waiter.join();
            return Err(e);
        }
    };
    let Some((ready_r, go_w, pid_r)) = parent_sync else {
        return Ok(Child {
            pid,
            pidfd,
            init: None,
            waiter,
            done,
            error_r,
            labels,
            go: None,
            demand,
        });
    };
    // The init's copy of the write end closes when it fails or exits (the monitor closes its
    // own): EOF, and the waiter has its reason.
    let mut byte = [0u8; 1];
    let ready = loop {
        match rustix::io::read(&ready_r, &mut byte) {
            Err(rustix::io::Errno::INTR) => {}
            other => break other,
        }
    };
    let mut init = [0u8; 4];
    let init = match ready {
        Ok(1) => read_exact(&pid_r, &mut init).then(|| i32::from_ne_bytes(init)),
        _ => None,
    };
    let Some(init) = init else {
        drop(go_w);
        let err = join(waiter).err().or_else(|| setup_error(&error_r, &labels).ok().flatten());
        return Err(err.unwrap_or_else(|| Error::Setup {
            step: "unshare".into(),
            source: std::io::Error::other("the sandbox ended before its namespaces existed"),
        }));
    };
    Ok(Child {
        pid,
        pidfd,
        init: Some(init),
        waiter,
        done,
        error_r,
        labels,
        go: Some(go_w),
        demand: None,
    })
}

/// Fills `buf` from `fd`; false on EOF or an error first.
pub(crate) fn read_exact(fd: &OwnedFd, buf: &mut [u8]) -> bool {
    let mut at = 0;
    while at < buf.len() {
        match rustix::io::read(fd, &mut buf[at..]) {
            Ok(0) => return false,
            Ok(n) => at += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return false,
        }
    }
    true
}

/// Forks the monitor, reports its pid through `tx`, and returns its raw wait status.
fn waiter(prepared: Prepared, tx: mpsc::Sender<Result<(i32, OwnedFd)>>) -> Result<i32> {
    let parent = std::process::id() as i32;
    // SAFETY: fork in a process that may have threads: the child only runs the prepared steps
    // (syscalls on data allocated before the fork) and glibc's fork-safe allocator.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        let _ = tx.send(Err(Error::io("fork")(std::io::Error::from_raw_os_error(
            e.raw_os_error().unwrap_or(libc::EIO),
        ))));
        return Err(Error::io("fork")(e));
    }
    if pid == 0 {
        monitor(&prepared, parent);
    }
    // Before the wait below can reap it: the pid is the monitor's until then.
    let pidfd = rustix::process::Pid::from_raw(pid)
        .ok_or(rustix::io::Errno::SRCH)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()));
    match pidfd {
        Ok(pidfd) => {
            let _ = tx.send(Ok((pid, pidfd)));
        }
        Err(e) => {
            // SAFETY: kill of our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = tx.send(Err(Error::io("opening a pidfd for the native sandbox")(e.into())));
        }
    }
    // After the caller has the pid, so it goes on meanwhile: closing the idmapped trees can
    // cost an RCU grace period each (the last reference to a detached mount unmounts it).
    drop(prepared);
    let mut status = 0;
    // SAFETY: plain waitpid on our own child.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        if errno() != libc::EINTR {
            return Err(Error::io("waiting for the native sandbox")(
                std::io::Error::last_os_error(),
            ));
        }
    }
    Ok(status)
}

fn step_label(step: u32, labels: &[String]) -> String {
    if step >= OPS {
        labels.get((step - OPS) as usize).cloned().unwrap_or_else(|| format!("step {step}"))
    } else {
        STEP_NAMES.get(step as usize).map_or_else(|| format!("step {step}"), |s| (*s).to_owned())
    }
}

/// The exit code of a status: the code, or 128 + the signal.
fn exit_code(status: i32) -> i32 {
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        255
    }
}

fn cstr(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| Error::Refused {
        path: path.to_owned(),
        reason: "it contains a NUL byte".into(),
    })
}

fn under(root: &str, path: &Path) -> PathBuf {
    let rel = path.strip_prefix("/").unwrap_or(path);
    Path::new(root).join(rel)
}

impl Prepared {
    fn new(plan: &Plan, command: Command, error_w: OwnedFd, done_w: OwnedFd) -> Result<Prepared> {
        let ids = plan.ids;
        let mut steps = Vec::new();
        let mut labels = Vec::new();
        const RW: u64 = libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV;
        const RO: u64 = RW | libc::MOUNT_ATTR_RDONLY;
        for op in &plan.ops {
            let (step, label) = match op {
                Op::Dir { path, mode } => (
                    Step::Mkdir(cstr(&under(NEWROOT, path))?, *mode),
                    format!("mkdir {}", path.display()),
                ),
                Op::Symlink { target, path } => (
                    Step::Symlink(cstr(target)?, cstr(&under(NEWROOT, path))?),
                    format!("symlink {}", path.display()),
                ),
                Op::Bind { src, dest, access, caller } => {
                    let meta = std::fs::metadata(src)
                        .map_err(Error::io(format!("reading `{}`", src.display())))?;
                    let attr = if *access == Access::ReadOnly { RO } else { RW };
                    let dest_c = cstr(&under(NEWROOT, dest))?;
                    let step = if ids.root_caller && *caller {
                        let fd = rustix::fs::open(
                            src,
                            rustix::fs::OFlags::PATH
                                | rustix::fs::OFlags::NOFOLLOW
                                | rustix::fs::OFlags::CLOEXEC,
                            rustix::fs::Mode::empty(),
                        )
                        .map_err(|e| Error::io(format!("opening `{}`", src.display()))(e.into()))?;
                        let tree = reaper::idmap::clone_idmapped(std::os::fd::AsFd::as_fd(&fd))
                            .map_err(Error::io(format!(
                                "making an idmapped copy of `{}`",
                                src.display()
                            )))?;
                        Step::Tree { tree, dest: dest_c, dir: meta.is_dir(), attr }
                    } else {
                        Step::Bind {
                            src: cstr(&under(OLDROOT, src))?,
                            dest: dest_c,
                            dir: meta.is_dir(),
                            attr,
                        }
                    };
                    (step, format!("mount {}", dest.display()))
                }
                Op::Tmpfs { path, mode, size, owner } => (
                    Step::Tmpfs {
                        dest: cstr(&under(NEWROOT, path))?,
                        data: CString::new(match owner {
                            Some((uid, gid)) => {
                                format!("size={size},mode={mode:o},uid={uid},gid={gid}")
                            }
                            None => format!("size={size},mode={mode:o}"),
                        })
                        .map_err(|_| Error::io("tmpfs options")(std::io::Error::other("nul")))?,
                    },
                    format!("tmpfs {}", path.display()),
                ),
                Op::Proc => {
                    (Step::Proc(cstr(&under(NEWROOT, Path::new("/proc")))?), "mount /proc".into())
                }
                Op::DevNode { name } => {
                    let dev = Path::new("/dev").join(name);
                    (
                        Step::Bind {
                            src: cstr(&under(OLDROOT, &dev))?,
                            dest: cstr(&under(NEWROOT, &dev))?,
                            dir: false,
                            attr: libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NOEXEC,
                        },
                        format!("mount {}", dev.display()),
                    )
                }
                Op::Devpts => (
                    Step::Devpts {
                        pts: cstr(&under(NEWROOT, Path::new("/dev/pts")))?,
                        ptmx: cstr(&under(NEWROOT, Path::new("/dev/ptmx")))?,
                    },
                    "mount /dev/pts".into(),
                ),
                Op::ReadOnly { path } => (
                    Step::ReadOnly(cstr(&under(NEWROOT, path))?),
                    format!("read-only {}", path.display()),
                ),
                Op::Mask { path } => (
                    Step::Mask { dest: cstr(&under(NEWROOT, path))? },
                    format!("mask {}", path.display()),
                ),
                Op::RootReadOnly => {
                    (Step::RootReadOnly(cstr(Path::new(NEWROOT))?), "read-only /".into())
                }
            };
            steps.push(step);
            labels.push(label);
        }
        let seccomp = native_program(&|arch| sandbox_core::compile(sandbox_core::WALL, arch))?;
        let map = |inside: u32, host: u32| CString::new(format!("{inside} {host} 1\n"));
        let nul = |_| Error::io("id map")(std::io::Error::other("nul"));
        let argv = command
            .argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| {
                Error::io("argv")(std::io::Error::other("an argument contains a NUL byte"))
            })?;
        if argv.is_empty() {
            return Err(Error::io("argv")(std::io::Error::other("no program")));
        }
        let envp = command
            .env
            .iter()
            .map(|(k, v)| {
                let mut kv = k.as_bytes().to_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                CString::new(kv)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| {
                Error::io("env")(std::io::Error::other("a variable contains a NUL byte"))
            })?;
        Ok(Prepared {
            steps,
            labels,
            root_caller: ids.root_caller,
            uid_map: map(0, ids.host_uid).map_err(nul)?,
            gid_map: map(0, ids.host_gid).map_err(nul)?,
            nobody: (ids.host_uid, ids.host_gid),
            sandbox_map: map(ids.uid, ids.builder().0).map_err(nul)?,
            sandbox_gmap: map(ids.gid, ids.builder().1).map_err(nul)?,
            rlimits: command.rlimits,
            cgroup_procs: command.cgroup_procs,
            detach: command.detach,
            net_doors: command.net_doors,
            writable: plan.writable.clone(),
            chdir: cstr(&plan.chdir)?,
            argv,
            envp,
            seccomp,
            stdio: [command.stdin, command.stdout, command.stderr],
            error_w,
            done_w,
            net_sync: None,
            gate: Vec::new(),
            keep: Vec::new(),
        })
    }

    fn keep_list(&self) -> Vec<i32> {
        let mut keep = vec![self.error_w.as_raw_fd(), self.done_w.as_raw_fd()];
        if let Some(sync) = &self.net_sync {
            keep.extend(sync.fds());
        }
        keep.extend(self.cgroup_procs.as_ref().map(AsRawFd::as_raw_fd));
        keep.extend(self.steps.iter().filter_map(|s| match s {
            Step::Tree { tree, .. } => Some(tree.as_raw_fd()),
            _ => None,
        }));
        keep.sort_unstable();
        keep
    }

    fn fail(&self, step: u32, err: i32) -> ! {
        let mut record = [0u8; 8];
        record[..4].copy_from_slice(&step.to_ne_bytes());
        record[4..].copy_from_slice(&err.to_ne_bytes());
        // SAFETY: write of a local buffer to our pipe; then the process ends.
        unsafe {
            libc::write(self.error_w.as_raw_fd(), record.as_ptr().cast(), record.len());
            libc::_exit(127)
        }
    }

    fn check(&self, step: u32, rc: libc::c_long) {
        if rc < 0 {
            self.fail(step, errno());
        }
    }
}

/// A program for this architecture, as the kernel takes it.
fn native_program(
    compile: &dyn Fn(sandbox_core::Arch) -> Vec<sandbox_core::Insn>,
) -> Result<Vec<libc::sock_filter>> {
    let arch = sandbox_core::Arch::native().ok_or_else(|| Error::Unsupported {
        what: "the seccomp wall has no program for this architecture".into(),
        hint: "use the bwrap or a container engine here".into(),
    })?;
    Ok(compile(arch)
        .into_iter()
        .map(|i| libc::sock_filter { code: i.code, jt: i.jt, jf: i.jf, k: i.k })
        .collect())
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| Error::io("making a pipe")(e.into()))
}

const FORWARDED: &[i32] = &[
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    // Job control: a terminal's Ctrl-Z reaches the caller's process group (the caller and the
    // monitor), never the sandbox's own sessions; the monitor passes it on and the init stops
    // or continues everything in the pid namespace (`pause_or_resume`).
    libc::SIGTSTP,
    libc::SIGCONT,
];

fn signal_set(with_chld: bool) -> libc::sigset_t {
    // SAFETY: sigset operations on a local.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in FORWARDED {
            libc::sigaddset(&mut set, *sig);
        }
        if with_chld {
            libc::sigaddset(&mut set, libc::SIGCHLD);
        }
        set
    }
}

/// Writes `data` to the procfs `file`.
fn write_proc(file: &std::ffi::CStr, data: &[u8]) -> libc::c_long {
    // SAFETY: open/write/close of a NUL-terminated path and a local buffer.
    unsafe {
        let fd = libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return -1;
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        libc::close(fd);
        if n < 0 { -1 } else { 0 }
    }
}

/// Writes a user namespace's id maps through `proc` (`/proc/self`, or another process's
/// directory), `setgroups` denied between them as the kernel asks of an unprivileged writer.
fn write_maps(prep: &Prepared, proc: &str, uid_map: &CString, gid_map: &CString) {
    let file = |name: &str| CString::new(format!("{proc}/{name}")).unwrap_or_default();
    prep.check(S_UID_MAP, write_proc(&file("uid_map"), uid_map.as_bytes()));
    prep.check(S_SETGROUPS, write_proc(&file("setgroups"), b"deny"));
    prep.check(S_GID_MAP, write_proc(&file("gid_map"), gid_map.as_bytes()));
}

/// Arms the parent-death signal and ends this process if the parent is already gone (the
/// signal is only sent for a death after the `prctl`).
fn die_with_parent(prep: &Prepared, parent: i32) {
    // SAFETY: prctl/getppid take no pointers.
    unsafe {
        prep.check(S_PARENT, libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL).into());
        if libc::getppid() != parent {
            libc::_exit(137);
        }
    }
}

/// The monitor (see the module docs). Never returns.
fn monitor(prep: &Prepared, parent: i32) -> ! {
    if prep.detach {
        // SAFETY: setsid takes no pointers.
        unsafe { libc::setsid() };
    } else {
        die_with_parent(prep, parent);
    }
    // SAFETY: syscalls on prepared data only.
    unsafe {
        for (fd, target) in prep.stdio.iter().zip(0..) {
            if let Some(fd) = fd {
                libc::dup2(fd.as_raw_fd(), target);
            }
        }
        let mut from = 3u32;
        for fd in &prep.keep {
            let fd = *fd as u32;
            if fd > from {
                libc::syscall(libc::SYS_close_range, from, fd - 1, 0u32);
            }
            from = from.max(fd + 1);
        }
        libc::syscall(libc::SYS_close_range, from, u32::MAX, 0u32);
        if let Some(procs) = &prep.cgroup_procs {
            // Before the cgroup namespace: its root is then the run's own cgroup.
            prep.check(S_CGROUP, libc::write(procs.as_raw_fd(), b"0".as_ptr().cast(), 1) as _);
        }
        if !prep.root_caller {
            prep.check(S_UNSHARE, libc::unshare(libc::CLONE_NEWUSER).into());
            write_maps(prep, "/proc/self", &prep.uid_map, &prep.gid_map);
        }
        // Blocked in the maker too: a Ctrl-C is the init's, which the monitor forwards.
        let set = signal_set(true);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        let me = libc::getpid();
        // The maker's report to the init, and the init's release of the maker (its end of file).
        let (mut report, mut release) = ([-1; 2], [-1; 2]);
        prep.check(S_FORK, libc::pipe2(report.as_mut_ptr(), libc::O_CLOEXEC).into());
        prep.check(S_FORK, libc::pipe2(release.as_mut_ptr(), libc::O_CLOEXEC).into());
        // Inside the caller's user namespace (ours), outside the others: the kernel refuses a
        // user namespace to a process whose root is not its mount namespace's, which the
        // init's first `pivot_root` makes of every process sharing its mount namespace, and a
        // process of the new pid namespace would hold its teardown until the monitor reaps it.
        // Reaped only once the init has exited, so its pid names it for as long as the init
        // may use it.
        // Lives as long as the monitor (which never returns), so as long as the maker.
        let maker_args = MakerArgs { prep, monitor: me, report: report[1], release: release[0] };
        let maker = start_maker(prep, &maker_args);
        // The network namespace is the maker's, joined by the init after the tree.
        let flags = libc::CLONE_NEWNS
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWUTS
            | libc::CLONE_NEWCGROUP;
        prep.check(S_UNSHARE, libc::unshare(flags).into());
        // A credential change (the new user namespace's capabilities) cleared it.
        if !prep.detach {
            die_with_parent(prep, parent);
        }
        // A fork, never a child sharing our memory like the maker's: the init serves the
        // script's held network calls, and we stay outside the sandbox's namespaces (host root
        // for a root caller) until the end.
        let init = libc::fork();
        if init < 0 {
            prep.fail(S_FORK, errno());
        }
        if init == 0 {
            libc::close(report[1]);
            libc::close(release[0]);
            init_main(prep, Maker { report: report[0], release: release[1] });
        }
        // The monitor never uses stdio: its copies would hold the caller's output pipes open
        // until its exit is complete (a file's last close runs after the namespace teardown).
        libc::syscall(libc::SYS_close_range, 0u32, 2u32, 0u32);
        for fd in report.into_iter().chain(release) {
            libc::close(fd);
        }
        match &prep.net_sync {
            Some(NetSync::UpFront { ready, pid, .. }) => {
                // Only the init may hold the ready pipe open: its end is the caller's EOF.
                libc::close(ready.as_raw_fd());
                let bytes = init.to_ne_bytes();
                libc::write(pid.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
                libc::close(pid.as_raw_fd());
            }
            // The same for the init's end of the socket pair.
            Some(NetSync::OnDemand { sock }) => {
                libc::close(sock.as_raw_fd());
            }
            None => {}
        }
        loop {
            let sig = libc::sigwaitinfo(&set, std::ptr::null_mut());
            if sig == libc::SIGCHLD || sig < 0 {
                // Seen, not reaped yet (WNOWAIT): reaping the init costs the kernel an RCU
                // grace period (its `/proc/1` entries carry the masking mounts), which the
                // caller need not wait for.
                let mut info: libc::siginfo_t = std::mem::zeroed();
                let r = libc::waitid(
                    libc::P_PID,
                    init as libc::id_t,
                    &mut info,
                    libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                );
                if r == 0 && info.si_pid() == init {
                    let code = match info.si_code {
                        libc::CLD_EXITED => info.si_status(),
                        _ => 128 + info.si_status(),
                    };
                    // The init is a zombie, so every other process of its pid namespace is
                    // gone already (the kernel reaps them all before the init's own exit
                    // completes). A caller that dropped its end gets no record, and this no
                    // SIGPIPE.
                    libc::signal(libc::SIGPIPE, libc::SIG_IGN);
                    // The maker is gone too (it ends on the init's release, or the init's
                    // exit), and the init no longer names it: reaped before the record, so
                    // after it nothing of the run is left but the init's zombie.
                    let mut status = 0;
                    libc::waitpid(maker, &mut status, 0);
                    let record = code.to_ne_bytes();
                    libc::write(prep.done_w.as_raw_fd(), record.as_ptr().cast(), record.len());
                    libc::close(prep.done_w.as_raw_fd());
                    libc::waitpid(init, &mut status, 0);
                    libc::_exit(code);
                }
                if r < 0 && errno() == libc::ECHILD {
                    libc::_exit(255);
                }
            } else {
                libc::kill(init, sig);
            }
        }
    }
}

/// The init's ends of the pipes to the namespace maker ([`make_namespaces`]).
struct Maker {
    /// Its report: its host pid and 0, or an errno.
    report: i32,
    /// Closed once the init holds the namespaces: the maker's end of file.
    release: i32,
}

/// The stack of the namespace maker ([`start_maker`]).
const MAKER_STACK: usize = 64 * 1024;

/// The maker's arguments, in the monitor's memory.
struct MakerArgs<'a> {
    prep: &'a Prepared,
    /// The monitor's pid: the maker's parent, whose death ends it.
    monitor: i32,
    /// The write end of the report pipe, and the read end of the release pipe.
    report: i32,
    release: i32,
}

/// In the monitor: starts the namespace maker as a child sharing the monitor's memory (no
/// page-table copy: the maker is on the critical path of every run, the init waiting for its
/// namespaces). Returns its pid, or fails the run.
fn start_maker(prep: &Prepared, args: &MakerArgs<'_>) -> i32 {
    let arg = (args as *const MakerArgs<'_>).cast_mut().cast::<libc::c_void>();
    // SAFETY: `args` lives as long as the monitor (which ends with `_exit`, its stack never
    // unmapped), and the maker only reads it.
    unsafe {
        clone_on_stack(
            prep,
            S_FORK,
            MAKER_STACK,
            libc::CLONE_VM | libc::SIGCHLD,
            make_namespaces,
            arg,
        )
        .0
    }
}
/// A child started by `clone(flags)` on a fresh stack of `size` bytes, running `entry(arg)`
/// (a child sharing our memory: `CLONE_VM`): its pid and its stack, to unmap once the child
/// no longer runs on it. Fails the run at `step` when the kernel refuses either.
///
/// SAFETY: `arg` must stay valid for as long as the child may read it, and `entry` may touch
/// nothing of ours that we use meanwhile.
unsafe fn clone_on_stack(
    prep: &Prepared,
    step: u32,
    size: usize,
    flags: libc::c_int,
    entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
) -> (i32, *mut libc::c_void) {
    // SAFETY: a fresh private mapping, the child's stack alone; the rest is the caller's.
    unsafe {
        let stack = libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        );
        if stack == libc::MAP_FAILED {
            prep.fail(step, errno());
        }
        let top = stack.cast::<u8>().add(size).cast::<libc::c_void>();
        let pid = libc::clone(entry, top, flags, arg);
        if pid < 0 {
            prep.fail(step, errno());
        }
        (pid, stack)
    }
}

/// The namespace maker (see the module docs): the sandbox's user and network namespaces,
/// loopback up, reported to the init, which maps and opens them; then it waits for the init's
/// release (making a network namespace costs the kernel half a millisecond, as much as the
/// tree the init builds meanwhile). It becomes the sandbox's host user first (nobody for a
/// root caller), so it is that user who owns them, as when the init made them itself; that
/// id change makes the memory it shares with the monitor undumpable, so no process of that
/// user can read it. It lives in the caller's pid namespace, out of the sandbox's sight, and
/// keeps no descriptor but its two pipe ends. It runs beside the monitor in the monitor's
/// memory: rustix's raw syscalls only (they never touch `errno`, which the monitor reads),
/// nothing allocated.
extern "C" fn make_namespaces(arg: *mut libc::c_void) -> libc::c_int {
    use rustix::process::{Signal, getppid, set_parent_process_death_signal};
    use rustix::thread::{UnshareFlags, set_thread_groups, set_thread_res_gid, set_thread_res_uid};
    // SAFETY: `start_maker` passes its `MakerArgs`, alive as long as we are.
    let args = unsafe { &*arg.cast::<MakerArgs<'_>>() };
    let (report, release) = (args.report, args.release);
    let (low, high) = (report.min(release) as u32, report.max(release) as u32);
    // SAFETY: closes our copies of every descriptor but the two pipe ends (bounds in order, so
    // the calls cannot fail and set `errno`).
    unsafe {
        if low > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, low - 1, 0u32);
        }
        if high > low + 1 {
            libc::syscall(libc::SYS_close_range, low + 1, high - 1, 0u32);
        }
        libc::syscall(libc::SYS_close_range, high + 1, u32::MAX, 0u32);
    }
    let made = (|| -> rustix::io::Result<bool> {
        if args.prep.root_caller {
            let (uid, gid) = args.prep.nobody;
            let (uid, gid) =
                (rustix::process::Uid::from_raw(uid), rustix::process::Gid::from_raw(gid));
            set_thread_groups(&[])?;
            set_thread_res_gid(gid, gid, gid)?;
            set_thread_res_uid(uid, uid, uid)?;
        }
        // A credential change (above) would have cleared it; the signal is only sent for a
        // death after it is armed.
        set_parent_process_death_signal(Some(Signal::KILL))?;
        if getppid().map(|p| p.as_raw_nonzero().get()) != Some(args.monitor) {
            return Ok(false);
        }
        // Loopback too, here beside the tree rather than in the init after it: the new user
        // namespace's capabilities cover the network namespace made with it.
        // SAFETY: this process shares its memory with the monitor but nothing else: no
        // thread group, files or filesystem information (no CLONE_THREAD/FILES/FS).
        unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER | UnshareFlags::NEWNET) }?;
        loopback_up()?;
        Ok(true)
    })();
    let err = match made {
        Ok(true) => 0,
        // The monitor is gone: so is the run.
        Ok(false) => return 137,
        Err(e) => e.raw_os_error(),
    };
    let pid = rustix::process::getpid().as_raw_nonzero().get();
    let mut record = [0u8; 8];
    record[..4].copy_from_slice(&pid.to_ne_bytes());
    record[4..].copy_from_slice(&err.to_ne_bytes());
    // SAFETY: our own copies of the pipe ends, open until we return.
    let (report, release) =
        unsafe { (BorrowedFd::borrow_raw(report), BorrowedFd::borrow_raw(release)) };
    // A short write cannot happen (8 bytes into an empty pipe); a failed one is the init's EOF.
    let _ = rustix::io::write(report, &record);
    // Our copy of the report's write end: the init reads the record, or EOF, without waiting
    // for us to end.
    // SAFETY: closed once, and not used again.
    unsafe { rustix::io::close(args.report) };
    let mut byte = [0u8; 1];
    while let Err(rustix::io::Errno::INTR) = rustix::io::read(release, &mut byte) {}
    0
}

/// In the init, still holding the host's root at [`OLDROOT`] and its own privileges: waits for
/// the maker's report, writes the maps of its user namespace, opens both namespaces and
/// releases it. Returns the user and network namespaces' descriptors, joined later, or `None`
/// when the maker could not make them (the init then makes its own, after the tree).
///
/// SAFETY: syscalls on prepared data and locals only.
unsafe fn adopt_namespaces(prep: &Prepared, maker: &Maker) -> Option<(i32, i32)> {
    unsafe {
        let mut record = [0i32; 2];
        let size = std::mem::size_of_val(&record);
        // One read: a pipe write this small is atomic.
        let n = loop {
            let n = libc::read(maker.report, record.as_mut_ptr().cast(), size);
            if n >= 0 || errno() != libc::EINTR {
                break n;
            }
        };
        if n != size as isize {
            // No report (end of file): the maker was killed before it wrote one.
            prep.fail(S_USERNS, if n < 0 { errno() } else { libc::ECHILD });
        }
        libc::close(maker.report);
        let [pid, err] = record;
        if err != 0 {
            libc::close(maker.release);
            return None;
        }
        // Not reaped until the init is gone (see `monitor`): the pid is the maker's.
        let proc = format!("{OLDROOT}/proc/{pid}");
        let file = |name: &str| CString::new(format!("{proc}/{name}")).unwrap_or_default();
        write_maps(prep, &proc, &prep.sandbox_map, &prep.sandbox_gmap);
        let user = libc::open(file("ns/user").as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        prep.check(S_USERNS, user.into());
        let net = libc::open(file("ns/net").as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        prep.check(S_USERNS, net.into());
        libc::close(maker.release);
        Some((user, net))
    }
}

/// `mount_setattr(path, AT_RECURSIVE, set)`, falling back to a remount of the top mount on
/// kernels before 5.12.
fn set_attr(path: &std::ffi::CStr, set: u64) -> libc::c_long {
    set_attr_at(path, set, libc::AT_RECURSIVE as libc::c_uint)
}

/// [`set_attr`] with the `mount_setattr` flags given: 0 for the top mount alone.
fn set_attr_at(path: &std::ffi::CStr, set: u64, recursive: libc::c_uint) -> libc::c_long {
    let attr = libc::mount_attr { attr_set: set, attr_clr: 0, propagation: 0, userns_fd: 0 };
    // SAFETY: the path is NUL-terminated; `attr` lives across the call.
    unsafe {
        let rc = libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            recursive | libc::AT_SYMLINK_NOFOLLOW as libc::c_uint,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        );
        if rc == 0 || errno() != libc::ENOSYS {
            return rc;
        }
        let mut st: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(path.as_ptr(), &mut st) < 0 {
            return -1;
        }
        // The kernel's `ST_RELATIME` (`linux/statfs.h`); musl's headers do not name it.
        const ST_RELATIME: libc::c_ulong = 0x1000;
        // Keep what the mount has: those flags may be locked and cannot be cleared.
        let mut flags = libc::MS_BIND | libc::MS_REMOUNT;
        for (st_flag, ms) in [
            (libc::ST_RDONLY, libc::MS_RDONLY),
            (libc::ST_NOSUID, libc::MS_NOSUID),
            (libc::ST_NODEV, libc::MS_NODEV),
            (libc::ST_NOEXEC, libc::MS_NOEXEC),
            (libc::ST_NOATIME, libc::MS_NOATIME),
            (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
            (ST_RELATIME, libc::MS_RELATIME),
        ] {
            if st.f_flag & st_flag != 0 {
                flags |= ms;
            }
        }
        for (a, ms) in [
            (libc::MOUNT_ATTR_RDONLY, libc::MS_RDONLY),
            (libc::MOUNT_ATTR_NOSUID, libc::MS_NOSUID),
            (libc::MOUNT_ATTR_NODEV, libc::MS_NODEV),
            (libc::MOUNT_ATTR_NOEXEC, libc::MS_NOEXEC),
        ] {
            if set & a != 0 {
                flags |= ms;
            }
        }
        libc::mount(std::ptr::null(), path.as_ptr(), std::ptr::null(), flags, std::ptr::null())
            .into()
    }
}

/// Creates a mount point: a directory or an empty file.
fn mount_point(path: &std::ffi::CStr, dir: bool) -> libc::c_long {
    // SAFETY: NUL-terminated path.
    unsafe {
        if dir {
            if libc::mkdir(path.as_ptr(), 0o755) < 0 && errno() != libc::EEXIST {
                return -1;
            }
        } else {
            // An empty file to mount on: one syscall where `open` + `close` would be two.
            if libc::mknod(path.as_ptr(), libc::S_IFREG | 0o444, 0) < 0 && errno() != libc::EEXIST {
                return -1;
            }
        }
        0
    }
}

fn run_step(step: &Step) -> libc::c_long {
    let null = std::ptr::null::<libc::c_char>();
    // SAFETY: every pointer is a NUL-terminated prepared string or null.
    unsafe {
        match step {
            Step::Mkdir(path, mode) => {
                // Made with the planned mode (the umask is 0 meanwhile); one that exists (a
                // mount point made for an earlier step) gets it too.
                if libc::mkdir(path.as_ptr(), *mode) == 0 {
                    return 0;
                }
                if errno() != libc::EEXIST {
                    return -1;
                }
                libc::chmod(path.as_ptr(), *mode).into()
            }
            Step::Symlink(target, path) => libc::symlink(target.as_ptr(), path.as_ptr()).into(),
            Step::Bind { src, dest, dir, attr } => {
                if mount_point(dest, *dir) < 0 {
                    return -1;
                }
                let rc = libc::mount(
                    src.as_ptr(),
                    dest.as_ptr(),
                    null,
                    libc::MS_BIND | libc::MS_REC,
                    null.cast(),
                );
                if rc < 0 {
                    return -1;
                }
                set_attr(dest, *attr)
            }
            Step::Tree { tree, dest, dir, attr } => {
                if mount_point(dest, *dir) < 0 {
                    return -1;
                }
                let rc = libc::syscall(
                    libc::SYS_move_mount,
                    tree.as_raw_fd(),
                    c"".as_ptr(),
                    libc::AT_FDCWD,
                    dest.as_ptr(),
                    libc::MOVE_MOUNT_F_EMPTY_PATH,
                );
                if rc < 0 {
                    return -1;
                }
                set_attr(dest, *attr)
            }
            Step::Tmpfs { dest, data } => libc::mount(
                c"tmpfs".as_ptr(),
                dest.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                data.as_ptr().cast(),
            )
            .into(),
            Step::Proc(dest) => {
                if mount_point(dest, true) < 0 {
                    return -1;
                }
                libc::mount(
                    c"proc".as_ptr(),
                    dest.as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    null.cast(),
                )
                .into()
            }
            Step::Devpts { pts, ptmx } => {
                if mount_point(pts, true) < 0 {
                    return -1;
                }
                let rc = libc::mount(
                    c"devpts".as_ptr(),
                    pts.as_ptr(),
                    c"devpts".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NOEXEC,
                    c"newinstance,ptmxmode=0666,mode=620".as_ptr().cast(),
                );
                // Needs uid 0 mapped (the kernel owns ptmx by it): the builder is uid 0 of
                // its namespace for every caller (`Ids::builder`).
                if rc < 0 {
                    return -1;
                }
                libc::symlink(c"pts/ptmx".as_ptr(), ptmx.as_ptr()).into()
            }
            Step::ReadOnly(path) => {
                let rc = libc::mount(
                    path.as_ptr(),
                    path.as_ptr(),
                    null,
                    libc::MS_BIND | libc::MS_REC,
                    null.cast(),
                );
                if rc < 0 {
                    return if errno() == libc::ENOENT { 0 } else { -1 };
                }
                set_attr(
                    path,
                    libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV,
                )
            }
            Step::Mask { dest } => {
                let rc = libc::mount(
                    c"/oldroot/dev/null".as_ptr(),
                    dest.as_ptr(),
                    null,
                    libc::MS_BIND,
                    null.cast(),
                );
                if rc < 0 {
                    return if errno() == libc::ENOENT { 0 } else { -1 };
                }
                // As bwrap's `--ro-bind /dev/null`: nodev, so the device does not open at all
                // (a read-only mount alone does not stop a device node opening for writing).
                set_attr_at(
                    dest,
                    libc::MOUNT_ATTR_RDONLY
                        | libc::MOUNT_ATTR_NOSUID
                        | libc::MOUNT_ATTR_NODEV
                        | libc::MOUNT_ATTR_NOEXEC,
                    0,
                )
            }
            // The root tmpfs alone: everything mounted on it keeps its own flags.
            Step::RootReadOnly(path) => set_attr_at(
                path,
                libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV,
                0,
            ),
        }
    }
}

/// Empties the capability bounding set: every capability up to the first the kernel does not
/// know (`EINVAL`; they are numbered without gaps).
fn drop_bounding() -> libc::c_long {
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap) } < 0 {
            return if errno() == libc::EINVAL { 0 } else { -1 };
        }
    }
    0
}

/// Drops every capability: bounding set, ambient, then the effective/permitted/inheritable sets.
fn drop_caps() -> libc::c_long {
    if drop_bounding() < 0 {
        return -1;
    }
    // SAFETY: prctl with integer arguments; capset with local, correctly sized structures.
    unsafe {
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let header = Header { version: 0x2008_0522, pid: 0 };
        let data = [
            Data { effective: 0, permitted: 0, inheritable: 0 },
            Data { effective: 0, permitted: 0, inheritable: 0 },
        ];
        libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr())
    }
}

/// Brings `lo` up in this process's network namespace (the kernel gives it 127.0.0.1/8 and
/// ::1). Raw syscalls only: the namespace maker runs it in the monitor's memory.
fn loopback_up() -> rustix::io::Result<()> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType, socket_with};
    let sock = socket_with(AddressFamily::INET, SocketType::DGRAM, SocketFlags::CLOEXEC, None)?;
    // SAFETY: a plain C struct, valid zeroed.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    ifr.ifr_name[0] = b'l' as libc::c_char;
    ifr.ifr_name[1] = b'o' as libc::c_char;
    ifr.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads an `ifreq`, which `Setter` passes by pointer.
    unsafe {
        rustix::ioctl::ioctl(
            &sock,
            rustix::ioctl::Setter::<{ libc::SIOCSIFFLAGS as rustix::ioctl::Opcode }, libc::ifreq>::new(
                ifr,
            ),
        )
    }
}

/// `PR_SET_NO_NEW_PRIVS`, the net-on-demand gate when planned (its listener is returned, else
/// -1), then the wall.
fn install_seccomp(prep: &Prepared) -> i32 {
    let prog = libc::sock_fprog {
        len: prep.seccomp.len() as u16,
        filter: prep.seccomp.as_ptr().cast_mut(),
    };
    // SAFETY: the programs outlive the calls (the kernel copies them).
    unsafe {
        prep.check(S_NNP, libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).into());
        let mut listener = -1;
        if !prep.gate.is_empty() {
            listener = crate::demand::install(&prep.gate);
            prep.check(S_SECCOMP, listener.into());
            crate::demand::sync_wake_up(listener);
        }
        prep.check(
            S_SECCOMP,
            libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog as *const _).into(),
        );
        listener
    }
}

/// The stack of the [`Detacher`]: it makes one raw syscall.
const DETACHER_STACK: usize = 16 * 1024;

/// The init's helper for the old root's lazy unmount. The unmount itself is quick, but the
/// syscall then waits out an RCU grace period (0.05–0.4 ms traced on an idle machine, about
/// 1 ms on a busy one) before it returns: the helper waits it out while the init drops its privileges and installs
/// the wall, and the init reaps it before it forks the command.
struct Detacher {
    pid: i32,
    stack: *mut libc::c_void,
}

impl Detacher {
    /// Starts the helper: a child sharing the init's memory (no page-table copy), born with
    /// the init's privileges (it unmounts in the tree's namespaces, before the init leaves
    /// them), and a copy of its root and working directory. Fails the run when it cannot.
    fn start(prep: &Prepared) -> Detacher {
        // SAFETY: `detach` touches nothing of ours; the stack is unmapped once it is reaped.
        let (pid, stack) = unsafe {
            clone_on_stack(
                prep,
                S_DETACH,
                DETACHER_STACK,
                libc::CLONE_VM | libc::SIGCHLD,
                detach,
                std::ptr::null_mut(),
            )
        };
        Detacher { pid, stack }
    }

    /// Reaps the helper: the old root is gone, or the run fails with the unmount's errno.
    fn finish(self, prep: &Prepared) {
        let mut status = 0;
        // SAFETY: waitpid on our own child; the stack is unmapped once it is gone.
        unsafe {
            while libc::waitpid(self.pid, &mut status, libc::__WALL) < 0 {
                if errno() != libc::EINTR {
                    prep.fail(S_DETACH, errno());
                }
            }
            libc::munmap(self.stack, DETACHER_STACK);
        }
        let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { libc::ECHILD };
        if code != 0 {
            prep.fail(S_DETACH, code);
        }
    }
}

/// The [`Detacher`]'s body: `umount2(".", MNT_DETACH)`, exiting with its errno (0 when done).
/// It shares the init's memory, so it makes the raw syscall only (rustix's, which never touches
/// `errno` or any other thread-local state) and returns, which exits it.
extern "C" fn detach(_: *mut libc::c_void) -> libc::c_int {
    match rustix::mount::unmount(c".", rustix::mount::UnmountFlags::DETACH) {
        Ok(()) => 0,
        Err(e) => e.raw_os_error(),
    }
}

/// The sandbox's pid 1 (see the module docs). Never returns.
fn init_main(prep: &Prepared, maker: Maker) -> ! {
    // SAFETY: syscalls on prepared data only.
    unsafe {
        // The monitor is outside this pid namespace (getppid() is 0 here): it waits for us and
        // dies only by SIGKILL, which this signal then passes on.
        prep.check(S_PARENT, libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL).into());
        // The done record is the monitor's word that the whole run is gone: never ours, nor
        // the command's.
        libc::close(prep.done_w.as_raw_fd());
        let null = std::ptr::null::<libc::c_char>();
        prep.check(
            S_PROPAGATION,
            libc::mount(null, c"/".as_ptr(), null, libc::MS_REC | libc::MS_PRIVATE, null.cast())
                .into(),
        );
        let root = CString::new(SANDBOX_ROOT).unwrap_or_default();
        prep.check(
            S_ROOT_TMPFS,
            libc::mount(
                c"tmpfs".as_ptr(),
                root.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"size=1m,mode=0755".as_ptr().cast(),
            )
            .into(),
        );
        prep.check(S_ROOT_TMPFS, libc::mkdir(c"/tmp/newroot".as_ptr(), 0o755).into());
        prep.check(S_ROOT_TMPFS, libc::mkdir(c"/tmp/oldroot".as_ptr(), 0o755).into());
        prep.check(
            S_ROOT_TMPFS,
            libc::mount(
                c"tmpfs".as_ptr(),
                c"/tmp/newroot".as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                c"size=1m,mode=0755".as_ptr().cast(),
            )
            .into(),
        );
        prep.check(S_PIVOT, libc::chdir(c"/tmp".as_ptr()).into());
        prep.check(
            S_PIVOT,
            libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c"oldroot".as_ptr()),
        );
        prep.check(S_PIVOT, libc::chdir(c"/".as_ptr()).into());
        // No umask while the tree is made, so every planned mode is created as planned (no
        // `chmod` after each `mkdir`); the usual one for the command.
        libc::umask(0);
        for (i, step) in prep.steps.iter().enumerate() {
            if run_step(step) < 0 {
                prep.fail(OPS + i as u32, errno());
            }
        }
        libc::umask(0o022);
        let made = adopt_namespaces(prep, &maker);
        prep.check(S_PIVOT2, libc::chdir(c"/newroot".as_ptr()).into());
        prep.check(S_PIVOT2, libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()));
        // The old root tmpfs is now stacked on the new root, the host's tree beneath it at
        // `oldroot`: one lazy unmount detaches both (every mount is private since the start,
        // so nothing propagates). A helper makes it while we go on (see `Detacher`); our own
        // root and working directory lie beneath the stack, so no lookup of ours reaches it.
        let mut detacher = Some(Detacher::start(prep));
        let name = sandbox_core::SANDBOX_HOSTNAME;
        prep.check(S_HOSTNAME, libc::sethostname(name.as_ptr().cast(), name.len()).into());
        if let Some(NetSync::UpFront { pid, .. }) = &prep.net_sync {
            libc::close(pid.as_raw_fd());
        }

        if prep.root_caller {
            // While still root: the bounding set needs CAP_SETPCAP to shrink; setresuid then
            // clears the rest.
            prep.check(S_CAPS, drop_bounding());
            let (uid, gid) = prep.nobody;
            prep.check(S_NOBODY, libc::setgroups(0, std::ptr::null()).into());
            prep.check(S_NOBODY, libc::setresgid(gid, gid, gid).into());
            prep.check(S_NOBODY, libc::setresuid(uid, uid, uid).into());
            // Changing ids made us undumpable, which gives our /proc entries to root: pasta,
            // joining our namespaces as the sandbox's user, could not open them (the init
            // becomes undumpable again below).
            libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
        }
        // The sandbox's own user namespace, and its network namespace with it: both belong to
        // the sandbox's host user (nobody for a root caller), so pasta joins them as that user
        // and never as root; the namespaces of the tree stay out of the sandbox's reach.
        if let Some((user, net)) = made {
            prep.check(S_USERNS, libc::setns(user, libc::CLONE_NEWUSER).into());
            prep.check(S_USERNS, libc::setns(net, libc::CLONE_NEWNET).into());
            libc::close(user);
            libc::close(net);
        } else {
            // The maker's root is the caller's, not its mount namespace's (a chroot, where
            // the kernel refuses one); ours is the tree's own once the old root is gone (the
            // kernel refuses one as well while a mount is stacked on our root).
            if let Some(detacher) = detacher.take() {
                detacher.finish(prep);
            }
            prep.check(S_USERNS, libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET).into());
            write_maps(prep, "/proc/self", &prep.sandbox_map, &prep.sandbox_gmap);
            if let Err(e) = loopback_up() {
                prep.fail(S_LOOPBACK, e.raw_os_error());
            }
        }
        // Each credential change above cleared the parent-death signal.
        prep.check(S_PARENT, libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL).into());
        if let Some(NetSync::OnDemand { sock }) = &prep.net_sync {
            // While still dumpable (and before the gate, which would hold this `sendmsg`).
            prep.check(S_NET, crate::demand::send_netns(sock.as_raw_fd()));
        }
        if let Some(NetSync::UpFront { ready, go, .. }) = &prep.net_sync {
            prep.check(S_NET, libc::write(ready.as_raw_fd(), [1u8].as_ptr().cast(), 1) as _);
            libc::close(ready.as_raw_fd());
            let mut byte = 0u8;
            loop {
                let n = libc::read(go.as_raw_fd(), (&mut byte as *mut u8).cast(), 1);
                if n == 1 {
                    break;
                }
                if n == 0 || errno() != libc::EINTR {
                    // Never connected: nothing of the command may run.
                    prep.fail(S_NET, if n == 0 { libc::ENETUNREACH } else { errno() });
                }
            }
            libc::close(go.as_raw_fd());
        }

        // Nothing of the script may reach its reaper: no capabilities, not dumpable (no
        // ptrace, no /proc/1/mem even for the same uid), the wall. Taken before the fork, so
        // the command inherits all three (the kernel builds the filter once per run, not
        // twice); its `execve` makes it dumpable again, as any exec without a credential
        // change does.
        prep.check(S_CAPS, drop_caps());
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        let listener = install_seccomp(prep);
        let set = signal_set(true);
        // Net on demand: the signals come through a descriptor, polled with the gate's.
        let signals = match &prep.net_sync {
            Some(NetSync::OnDemand { .. }) => {
                libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK)
            }
            _ => 0,
        };
        prep.check(S_NET, signals.into());
        // Nothing of the command runs before the host's tree is gone.
        if let Some(detacher) = detacher.take() {
            detacher.finish(prep);
        }
        prep.check(S_PIVOT2, libc::chdir(c"/".as_ptr()).into());
        let command = start_command(prep);
        if let Some(NetSync::OnDemand { sock }) = &prep.net_sync {
            serve_on_demand(command, signals, listener, sock.as_raw_fd(), &prep.net_doors);
        }
        let mut code: Option<i32> = None;
        loop {
            let sig = libc::sigwaitinfo(&set, std::ptr::null_mut());
            on_signal(sig, command, &mut code);
        }
    }
}

/// In the init: one signal (or a failed wait for one, `sig < 0`): SIGCHLD reaps (and ends the
/// init once `command` has exited, with its code), SIGTSTP and SIGCONT stop or continue the pid
/// namespace, any other is forwarded to `command`.
///
/// SAFETY: `waitpid`, `kill` and `_exit` only.
unsafe fn on_signal(sig: i32, command: i32, code: &mut Option<i32>) {
    unsafe {
        if sig == libc::SIGCHLD || sig < 0 {
            loop {
                let mut status = 0;
                let r = libc::waitpid(-1, &mut status, libc::WNOHANG);
                if r == command {
                    *code = Some(exit_code(status));
                }
                if r <= 0 {
                    break;
                }
            }
            if let Some(code) = code {
                libc::_exit(*code);
            }
        } else if !pause_or_resume(sig) {
            libc::kill(command, sig);
        }
    }
}

/// The init's loop when the network is connected on demand ([`crate::demand`]): signals as in
/// [`on_signal`] (from `signals`, a signalfd), and the gate's `listener`. The first held call
/// asks the caller (a byte on `sock`); calls are held until its answer or EOF on `sock`, and
/// let go at once after. Never returns: the init exits with the command.
///
/// SAFETY: raw descriptors the init owns; syscalls only.
unsafe fn serve_on_demand(
    command: i32,
    signals: i32,
    listener: i32,
    sock: i32,
    doors: &[std::net::SocketAddr],
) -> ! {
    unsafe {
        let mut code = None;
        let mut asked = false;
        let mut answered = false;
        // Calls received and held until the answer; more wait in the kernel's queue (a thread
        // blocked in a held call is blocked either way).
        let mut held = [0u64; 64];
        let mut n = 0;
        loop {
            let poll = |fd: i32, on: bool| libc::pollfd {
                fd: if on { fd } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            };
            let mut fds = [
                poll(signals, true),
                poll(listener, answered || n < held.len()),
                poll(sock, !answered),
            ];
            if libc::poll(fds.as_mut_ptr(), 3, -1) < 0 {
                continue;
            }
            if fds[0].revents != 0 {
                let mut info: libc::signalfd_siginfo = std::mem::zeroed();
                let size = std::mem::size_of::<libc::signalfd_siginfo>();
                while libc::read(signals, (&raw mut info).cast(), size) == size as isize {
                    on_signal(info.ssi_signo as i32, command, &mut code);
                }
            }
            if fds[2].revents != 0 {
                // The answer, or the caller's end closed: either way the calls go on (without a
                // network they find no route).
                let mut byte = 0u8;
                libc::read(sock, (&raw mut byte).cast(), 1);
                answered = true;
                for id in &held[..n] {
                    crate::demand::let_go(listener, *id);
                }
                n = 0;
            }
            if fds[1].revents & libc::POLLIN != 0 {
                let Some(call) = crate::demand::receive(listener, !answered, doors) else {
                    continue;
                };
                let id = call.id;
                // The sandbox's own loopback, a unix socket: no network needed.
                if answered || call.local {
                    crate::demand::let_go(listener, id);
                    continue;
                }
                if !asked {
                    libc::send(sock, [1u8].as_ptr().cast(), 1, libc::MSG_NOSIGNAL);
                    asked = true;
                }
                held[n] = id;
                n += 1;
            }
        }
    }
}

/// In the init: a Ctrl-Z (SIGTSTP) stops every process of the pid namespace and SIGCONT (the
/// shell's `fg` or `bg`) continues them; `false` for any other signal. SIGSTOP, not SIGTSTP:
/// the command leads a session of its own whose parent (this init) is in another, so its
/// process group is orphaned and the kernel drops a SIGTSTP sent to it; and a script's
/// children in sessions of their own stop with it.
///
/// SAFETY: `kill` only.
unsafe fn pause_or_resume(sig: i32) -> bool {
    let sent = match sig {
        libc::SIGTSTP => libc::SIGSTOP,
        libc::SIGCONT => libc::SIGCONT,
        _ => return false,
    };
    // -1: every process this init may signal, all of the pid namespace but itself.
    unsafe { libc::kill(-1, sent) };
    true
}

/// The command's stack: it makes a few syscalls, then `execve` (see [`start_command`]).
const COMMAND_STACK: usize = 64 * 1024;

/// What the command's process reads: the init's, built before the clone.
struct CommandArgs<'a> {
    prep: &'a Prepared,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    /// The Landlock ruleset ([`writes_ruleset`]); `None` where the kernel has none.
    landlock: Option<OwnedFd>,
}

/// In the init: starts the command, a child sharing the init's memory until its `execve`
/// (`CLONE_VM | CLONE_VFORK`, as `posix_spawn` does), so neither the page-table copy of a
/// fork nor its copy-on-write faults are paid, and the init is suspended meanwhile. So the
/// child allocates nothing and touches no state of ours: what it needs is built here first
/// (the argument and environment arrays, the Landlock ruleset). Returns its pid, or fails
/// the run.
fn start_command(prep: &Prepared) -> i32 {
    let pointers = |strings: &[CString]| {
        let mut v: Vec<*const libc::c_char> = strings.iter().map(|a| a.as_ptr()).collect();
        v.push(std::ptr::null());
        v
    };
    let args = CommandArgs {
        prep,
        argv: pointers(&prep.argv),
        envp: pointers(&prep.envp),
        landlock: writes_ruleset(&prep.writable),
    };
    let arg = (&args as *const CommandArgs<'_>).cast_mut().cast::<libc::c_void>();
    // SAFETY: CLONE_VFORK returns once the child has exec'd or exited, so it no longer runs on
    // its stack, and `args` outlives its use; `command_main` only reads `args`.
    unsafe {
        let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
        let (pid, stack) = clone_on_stack(prep, S_FORK, COMMAND_STACK, flags, command_entry, arg);
        libc::munmap(stack, COMMAND_STACK);
        pid
    }
}

extern "C" fn command_entry(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `start_command` passes its `CommandArgs`, alive until we exec or exit.
    command_main(unsafe { &*arg.cast::<CommandArgs<'_>>() })
}

/// The command (see the module docs), in the init's memory: syscalls only, on data the init
/// prepared; `errno` writes land in the init's thread-local slot, which it no longer reads.
/// Never returns.
fn command_main(args: &CommandArgs<'_>) -> ! {
    let prep = args.prep;
    // SAFETY: syscalls on prepared data.
    unsafe {
        let set = signal_set(true);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        // Ignored signals survive execve: the Rust runtime ignores SIGPIPE, and a caller
        // started in the background of a shell ignores SIGINT and SIGQUIT, which would make
        // the forwarded Ctrl-C a no-op instead of the script's `KeyboardInterrupt`. (Our own
        // signal handlers: no CLONE_SIGHAND.)
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        for sig in FORWARDED {
            libc::signal(*sig, libc::SIG_DFL);
        }
        // A new session: no controlling terminal to push input into (TIOCSTI).
        libc::setsid();
        // No capability, no new privileges and the seccomp wall came with the clone (the
        // init took them first); no credential changes here, so this signal stays armed.
        prep.check(S_PARENT, libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL).into());
        if libc::getppid() != 1 {
            libc::_exit(137);
        }
        // Best effort, as the ruleset was: a kernel refusing it keeps the other walls.
        if let Some(ruleset) = &args.landlock {
            libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32);
        }
        prep.check(S_CHDIR, libc::chdir(prep.chdir.as_ptr()).into());
        // Last before the exec: `RLIMIT_DATA` must not starve this process, which still lives in
        // the init's address space; in the sandbox's user namespace `RLIMIT_NPROC` counts only
        // the sandbox's processes.
        for (resource, value) in &prep.rlimits {
            let limit = libc::rlimit64 { rlim_cur: *value, rlim_max: *value };
            let set = libc::syscall(libc::SYS_prlimit64, 0, *resource, &raw const limit, 0usize);
            prep.check(S_RLIMIT, set);
        }
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC);
        libc::execve(args.argv[0], args.argv.as_ptr(), args.envp.as_ptr());
        prep.fail(S_EXEC, errno());
    }
}

/// In the init, for the command: the Landlock ruleset allowing writes only beneath `writable`
/// and (ABI 6) no abstract unix socket and no signal reaching outside the sandbox, the
/// command's once it restricts itself with it. Best effort: `None` where the kernel has no
/// Landlock (the other walls hold), and the crate downgrades to the ABI the kernel has.
fn writes_ruleset(writable: &[PathBuf]) -> Option<OwnedFd> {
    use landlock::{
        ABI, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope, path_beneath_rules,
    };
    // `LANDLOCK_ABI`.
    let abi = ABI::V6;
    let created = Ruleset::default()
        .handle_access(AccessFs::from_write(abi))
        .and_then(|r| r.scope(Scope::from_all(abi)))
        .and_then(|r| r.create())
        // Only rights the ruleset handles: a rule with any other (reads) fails the whole
        // ruleset, which best effort would then drop without a word. (A path that cannot be
        // opened, an optional mount point missing, gets no rule: `path_beneath_rules` skips
        // it.)
        .and_then(|r| r.add_rules(path_beneath_rules(writable, AccessFs::from_write(abi))))
        .ok()?;
    created.into()
}

/// The Landlock ABI [`spawn`] asks for (6: writes, abstract unix sockets and signals scoped).
pub const LANDLOCK_ABI: u32 = 6;

/// The Landlock ABI a sandbox gets here: the kernel's, at most [`LANDLOCK_ABI`] (`None`: this
/// kernel has no Landlock, and the other walls hold alone). What `detect` reports.
pub fn landlock_applied() -> Option<u32> {
    landlock_abi().map(|v| v.min(LANDLOCK_ABI))
}

/// The Landlock ABI this kernel offers (`None`: no Landlock); what [`spawn`] applies is
/// [`landlock_applied`].
pub fn landlock_abi() -> Option<u32> {
    // SAFETY: the version query takes no buffer.
    let v = unsafe {
        libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<u8>(), 0usize, 1u32)
    };
    u32::try_from(v).ok().filter(|v| *v > 0)
}

/// Whether user namespaces can be created here, found by trying: a forked child unshares its
/// user namespace and writes its map. `Err` carries the reason.
pub fn userns_probe() -> std::result::Result<(), String> {
    let (r, w) = pipe().map_err(|e| e.to_string())?;
    let uid = rustix::process::getuid().as_raw();
    let map = CString::new(format!("{uid} {uid} 1\n")).map_err(|e| e.to_string())?;
    // SAFETY: the child runs only syscalls on prepared data and exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: as above.
        unsafe {
            let report = |step: u8| {
                let rec = [step, errno() as u8];
                libc::write(w.as_raw_fd(), rec.as_ptr().cast(), 2);
                libc::_exit(1);
            };
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) < 0 {
                report(1);
            }
            if write_proc(c"/proc/self/uid_map", map.as_bytes()) < 0 {
                report(2);
            }
            let null = std::ptr::null::<libc::c_char>();
            if libc::mount(c"tmpfs".as_ptr(), c"/tmp".as_ptr(), c"tmpfs".as_ptr(), 0, null.cast())
                < 0
            {
                report(3);
            }
            libc::_exit(0);
        }
    }
    drop(w);
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let mut rec = [0u8; 2];
    let read = rustix::io::read(&r, &mut rec).unwrap_or(0);
    if read == 2 {
        let what = ["", "unshare(CLONE_NEWUSER)", "writing uid_map", "mounting a tmpfs"];
        let err = std::io::Error::from_raw_os_error(i32::from(rec[1]));
        let step = what.get(usize::from(rec[0])).unwrap_or(&"");
        let sysctl = |name: &str| std::fs::read_to_string(format!("/proc/sys/{name}")).ok();
        return Err(match crate::plan::userns_reason(sysctl) {
            Some(reason) => format!("{reason} ({step} failed: {err})"),
            None => format!("{step} failed: {err}"),
        });
    }
    if exit_code(status) != 0 {
        return Err(format!("the probe child exited with {}", exit_code(status)));
    }
    Ok(())
}
