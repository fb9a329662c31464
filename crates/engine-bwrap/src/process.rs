//! Starting bwrap and waiting for it: stdio, `--json-status-fd`, the timeout, signals, and
//! making sure the whole tree is gone when we return.
//!
//! Lifetime: bwrap runs with `--unshare-pid --die-with-parent`, so its pid-1 dies with the
//! outer bwrap process and the kernel then kills everything in the pid namespace. Killing the
//! outer bwrap (through a pidfd, so a recycled pid can never be hit) is therefore enough.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{Pid, PidfdFlags, Signal};
use sandbox_core::{OutputSink, Stdin, Stream};

use crate::error::{Error, Result};
use crate::launcher::{Launcher, SandboxStdio, Start};
use crate::plan::Plan;

/// Where the sandbox's stdout/stderr go.
pub(crate) enum Outputs<'a> {
    Inherit,
    Sink(&'a mut dyn OutputSink),
    /// Both streams through one pipe, in the order written (`sandbox_core::Output::Merged`).
    Merged(&'a mut dyn OutputSink),
    /// Collect both streams (prepare: shown only if uv fails).
    Collect(&'a mut Vec<u8>),
}

/// How to treat signals sent to us while the sandbox runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signals {
    /// Leave the process's signal dispositions alone.
    Ignore,
    /// SIGINT/SIGTERM/SIGHUP end the sandbox (SIGINT after a short grace period when the
    /// script shares our terminal and has received the same Ctrl-C).
    Handle { interactive: bool },
}

/// How bwrap ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finished {
    pub(crate) exit_code: i32,
    pub(crate) timed_out: bool,
    /// Setup succeeded and the command started (bwrap reported the child's pid).
    pub(crate) started: bool,
    /// Why setup failed, when the launcher said ([`crate::launcher::Ended::setup_error`]).
    pub(crate) setup_error: Option<String>,
    pub(crate) duration: Duration,
}

const SIGINT_GRACE: Duration = Duration::from_secs(2);

/// Chunks (of at most 32 KiB) read from the sandbox's pipes and not yet written to the sink.
const OUTPUT_QUEUE: usize = 8;

/// The host programs a sandbox start needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tools<'a> {
    pub(crate) bwrap: &'a Path,
    /// pasta, for a plan with the network on ([`sandbox_net::UserNet`]).
    pub(crate) pasta: Result<&'a Path, &'a engine_detect::NoPasta>,
    /// Without pasta, whether the built-in relay may serve (`Start::relay`).
    pub(crate) relay: bool,
    /// Whether the sandbox may reach private ranges (`Start::lan`).
    pub(crate) lan: sandbox_core::Lan,
    /// A network allowlist the relay holds (`Start::listed`).
    pub(crate) listed: Option<&'a sandbox_net::Listed>,
}

/// What `execute` needs besides the plan: the launcher and what it is given.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Launch<'a> {
    pub(crate) launcher: &'a dyn Launcher,
    pub(crate) host: &'a crate::host::HostFacts,
    pub(crate) cache_root: &'a Path,
    pub(crate) pasta: Result<&'a Path, &'a engine_detect::NoPasta>,
    /// Whether a run without pasta may get the built-in relay ([`sandbox_net::Relay`]).
    pub(crate) relay: bool,
    /// Whether the sandbox may reach private ranges ([`crate::BwrapConfig::lan`]).
    pub(crate) lan: sandbox_core::Lan,
    /// A network allowlist, held by the relay ([`sandbox_net::Listed`]).
    pub(crate) listed: Option<&'a sandbox_net::Listed>,
    /// See [`Start::net_early`].
    pub(crate) net_early: bool,
}

/// What a sandbox with an allowlist is told of pasta: not to be used.
static NO_PASTA_FOR_A_LIST: engine_detect::NoPasta = engine_detect::NoPasta::Missing;

impl<'a> Launch<'a> {
    /// The pasta the sandbox may use: none with an allowlist, which the relay or the built-in
    /// proxy holds (pasta checks no names).
    pub(crate) fn pasta(&self) -> Result<&'a Path, &'a engine_detect::NoPasta> {
        if self.listed.is_some() { Err(&NO_PASTA_FOR_A_LIST) } else { self.pasta }
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| Error::io("creating the sandbox's stdio pipes")(e.into()))
}

/// Runs `plan` in a sandbox of `launch.launcher` and waits for the whole tree.
/// `published` is told where the plan's ports are once pasta has bound them, before the script
/// runs (`sandbox_core::RunIo::published`). `placeholders` (a run's protected paths) are put
/// on a leash to the sandbox once it exists, so a SIGKILL of this process cannot leave them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn execute(
    launch: Launch<'_>,
    plan: &Plan,
    stdin: &Stdin,
    outputs: Outputs<'_>,
    timeout: Option<Duration>,
    signals: Signals,
    published: Option<&mut sandbox_core::PublishedHook<'_>>,
    started: Option<&mut (dyn FnMut() + Send)>,
    placeholders: Option<&mut reaper::protect::Placeholders>,
) -> Result<Finished> {
    let start = Instant::now();
    let mut stdio = SandboxStdio::default();
    let mut stdin_pipe = None;
    match stdin {
        Stdin::Inherit => {}
        Stdin::Null => {
            let null = std::fs::File::open("/dev/null").map_err(Error::io("opening /dev/null"))?;
            stdio.stdin = Some(null.into());
        }
        Stdin::Bytes(_) => {
            let (read, write) = pipe()?;
            stdio.stdin = Some(read);
            stdin_pipe = Some(std::fs::File::from(write));
        }
    }
    let mut merged = None;
    let mut stdout = None;
    let mut stderr = None;
    match outputs {
        Outputs::Inherit => {}
        Outputs::Sink(_) | Outputs::Collect(_) => {
            let (out_r, out_w) = pipe()?;
            let (err_r, err_w) = pipe()?;
            stdout = Some(std::fs::File::from(out_r));
            stderr = Some(std::fs::File::from(err_r));
            stdio.stdout = Some(out_w);
            stdio.stderr = Some(err_w);
        }
        Outputs::Merged(_) => {
            let (read, write) = pipe()?;
            let second = write.try_clone().map_err(Error::io("creating the output pipe"))?;
            merged = Some(std::fs::File::from(read));
            stdio.stdout = Some(write);
            stdio.stderr = Some(second);
        }
    }
    let sandbox = launch.launcher.start(Start {
        plan,
        host: launch.host,
        cache_root: launch.cache_root,
        pasta: launch.pasta(),
        relay: launch.relay,
        lan: launch.lan,
        listed: launch.listed,
        net_early: launch.net_early,
        stdio,
    })?;
    // Let go (a native run's script is released at the end of `start`); Python's own start
    // comes before anything of the script's can write.
    if let Some(started) = started {
        started();
    }
    if let Some(placeholders) = placeholders {
        placeholders.leash(sandbox.pidfd());
    }
    if let Some(published) = published.filter(|_| !plan.publish.is_empty()) {
        published(&plan.publish);
    }
    let pidfd = Arc::new(
        sandbox.pidfd().try_clone_to_owned().map_err(Error::io("holding the sandbox's pidfd"))?,
    );
    let ended =
        sandbox.ended().try_clone_to_owned().map_err(Error::io("holding the sandbox's pidfd"))?;

    if let (Stdin::Bytes(bytes), Some(mut pipe)) = (stdin, stdin_pipe) {
        let bytes = bytes.clone();
        std::thread::spawn(move || {
            // A script that never reads its stdin closes the pipe; that is not our error.
            let _ = pipe.write_all(&bytes);
        });
    }

    let signal_guard = match signals {
        Signals::Ignore => None,
        Signals::Handle { interactive } => {
            let mode = if launch.launcher.forwards_signals() {
                GuardMode::Forward
            } else {
                GuardMode::Kill { interactive }
            };
            Some(SignalGuard::install(Arc::clone(&pidfd), mode)?)
        }
    };

    let deadline = timeout.map(|t| start + t);
    let mut timed_out = false;
    // Our sink's reader went away (`run … | head -1`) and we stopped the tree for it.
    let mut reader_gone = false;
    let kill = |timed_out: &mut bool| {
        *timed_out = true;
        let _ = rustix::process::pidfd_send_signal(pidfd.as_fd(), Signal::KILL);
    };

    // Pump output (if piped) until both pipes close, which happens once the tree is gone.
    let stdout = stdout.or(merged);
    let stdout = stdout.map(|p| Box::new(p) as Box<dyn Read + Send>);
    let stderr = stderr.map(|p| Box::new(p) as Box<dyn Read + Send>);
    if stdout.is_some() || stderr.is_some() {
        // Bounded: a sink slower than the pipes (the secret scrubber, a terminal, a slow
        // reader of ours) holds the readers, the full pipes then hold the script, and our
        // memory stays at a few chunks however much the script writes. Unbounded, a scrubbed
        // gigabyte of output queued here whole.
        let (tx, rx) = mpsc::sync_channel::<(Stream, Vec<u8>)>(OUTPUT_QUEUE);
        let readers: Vec<_> = [(Stream::Stdout, stdout), (Stream::Stderr, stderr)]
            .into_iter()
            .filter_map(|(stream, pipe)| pipe.map(|p| (stream, p)))
            .map(|(stream, mut pipe)| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 32 * 1024];
                    loop {
                        match pipe.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if tx.send((stream, buf[..n].to_vec())).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        let mut outputs = outputs;
        loop {
            let wait = match deadline {
                Some(d) if !timed_out => d.saturating_duration_since(Instant::now()),
                _ => Duration::from_secs(3600),
            };
            match rx.recv_timeout(wait) {
                Ok((stream, chunk)) => match &mut outputs {
                    Outputs::Sink(sink) | Outputs::Merged(sink) => {
                        sink.write(stream, &chunk);
                        if sink.closed() && !reader_gone {
                            // What the script would have met writing to the closed pipe
                            // itself, had it not been behind our scrubber.
                            reader_gone = true;
                            let _ = rustix::process::pidfd_send_signal(pidfd.as_fd(), Signal::KILL);
                        }
                    }
                    Outputs::Collect(buf) => buf.extend_from_slice(&chunk),
                    Outputs::Inherit => {}
                },
                Err(RecvTimeoutError::Timeout) => {
                    if deadline.is_some_and(|d| Instant::now() >= d) && !timed_out {
                        kill(&mut timed_out);
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        for reader in readers {
            let _ = reader.join();
        }
    }

    // Wait for the sandbox's end, still honouring the deadline.
    loop {
        let remaining = match deadline {
            Some(d) if !timed_out => Some(d.saturating_duration_since(Instant::now())),
            _ => None,
        };
        if remaining == Some(Duration::ZERO) {
            kill(&mut timed_out);
            continue;
        }
        let timespec = remaining
            .map(|r| Timespec { tv_sec: r.as_secs() as i64, tv_nsec: i64::from(r.subsec_nanos()) });
        let mut fds = [PollFd::new(&ended, PollFlags::IN)];
        match rustix::event::poll(&mut fds, timespec.as_ref()) {
            Ok(0) => {
                kill(&mut timed_out);
            }
            Ok(_) => break,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(Error::io("waiting for the sandbox")(e.into())),
        }
    }
    let ended = sandbox.wait()?;
    // The tree was killed because we were signalled: report that signal (130 for Ctrl-C, 143
    // for SIGTERM), as the container engines do, not the SIGKILL used to end it.
    let ended_by = signal_guard.as_ref().and_then(SignalGuard::ended_by);
    drop(signal_guard);

    let exit_code = match ended_by {
        Some(signal) if ended.signal == Some(libc::SIGKILL) => 128 + signal,
        _ if reader_gone && ended.signal == Some(libc::SIGKILL) => sandbox_core::EXIT_CLOSED_PIPE,
        _ => sandbox_core::exit_code(ended.code, ended.signal),
    };
    Ok(Finished {
        exit_code,
        timed_out,
        started: ended.started,
        setup_error: ended.setup_error,
        duration: start.elapsed(),
    })
}

/// A started bwrap: its sandbox is set up (and, with net on, connected and unblocked).
pub(crate) struct Launched {
    pub(crate) child: Child,
    pub(crate) pidfd: OwnedFd,
    pub(crate) status_read: OwnedFd,
    /// What bwrap wrote to its status pipe so far.
    pub(crate) early_status: String,
    /// pasta, attached (net on).
    pub(crate) net: Option<sandbox_net::UserNet>,
    /// The built-in proxy or relay (net on without pasta), stopped once the tree is gone.
    pub(crate) proxy: Option<sandbox_net::ProxyServer>,
    /// The sandbox's init (bwrap's child) as reported, when it was read (net on, or `detach`).
    pub(crate) child_pid: Option<i32>,
    /// The run's own cgroup (`crate::limits`), held for its drop (which removes it): after
    /// the tree is gone.
    pub(crate) _cgroup: Option<crate::limits::Cgroup>,
}

/// Starts bwrap for `plan` with the given stdin, stdout and stderr: the status and seccomp
/// pipes, the pinned or staged sources, pasta for net on. `detach` (a session): bwrap gets
/// its own process group, so a Ctrl-C meant for the starting command does not reach it, and
/// the sandbox's pid is read even without a network.
pub(crate) fn launch(
    tools: Tools<'_>,
    plan: &Plan,
    host: &crate::host::HostFacts,
    stdio: [Stdio; 3],
    detach: bool,
) -> Result<Launched> {
    let Tools { bwrap, pasta, relay, lan, listed } = tools;
    // Net on, or rlimits to set: bwrap waits on this pipe until pasta has connected the
    // sandbox's namespace and the sandbox's first process has its limits (`crate::limits`).
    // Without pasta: the built-in relay (`sandbox_net::Relay`) where a tun device can be opened,
    // else the built-in HTTP(S) proxy (`sandbox_net::BuiltinProxy`), a session's served by a keeper; what
    // only pasta or the relay gives (published ports) is refused by name.
    let builtin = plan.net && pasta.is_err();
    let relay = builtin && relay && sandbox_net::relay_available();

    if builtin
        && !relay
        && let Err(no) = pasta
        && !plan.publish.is_empty()
    {
        return Err(Error::needs_pasta("publishing a port", no));
    }
    let block = if plan.net || !plan.limits.rlimits.is_empty() {
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| Error::io("creating the sandbox start pipe")(e.into()))?;
        Some((read, write))
    } else {
        None
    };
    let cgroup = plan.limits.cgroup.as_ref().map(crate::limits::Cgroup::create).transpose()?;
    let (status_read, status_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| Error::io("creating the status pipe")(e.into()))?;
    let seccomp = seccomp_pipe()?;
    let mut plan = plan.clone();
    if builtin && !relay {
        plan.env.retain(|(k, _)| !k.to_ascii_lowercase().ends_with("_proxy"));
        plan.env.extend(sandbox_net::proxy_env());
    }
    plan.status_fd = Some(std::os::fd::AsRawFd::as_raw_fd(&status_write));
    plan.seccomp_fd = Some(std::os::fd::AsRawFd::as_raw_fd(&seccomp));
    plan.block_fd = block.as_ref().map(|(read, _)| std::os::fd::AsRawFd::as_raw_fd(read));
    // A root caller's pinned sources are staged from their descriptors instead (`crate::stage`).
    let pins = match plan.run_as {
        Some(_) => Vec::new(),
        None => plan
            .pinned
            .iter()
            .filter(|src| plan.binds.iter().any(|b| b.src == **src))
            .map(|src| Ok((src.clone(), crate::pin::open(src)?)))
            .collect::<Result<Vec<_>>>()?,
    };
    plan.bind_fds =
        pins.iter().map(|(src, fd)| (src.clone(), std::os::fd::AsRawFd::as_raw_fd(fd))).collect();
    let env = env_args(&plan.env)?;
    let mut argv: Vec<OsString> =
        vec!["--args".into(), std::os::fd::AsRawFd::as_raw_fd(&env).to_string().into()];
    argv.extend(plan.argv(host));
    // The binary itself, not a link to it: for a root caller the path is looked up in bwrap's
    // own mount namespace, where the stage's tmpfs covers /tmp (a `PATH` entry there holding a
    // link to /usr/bin/bwrap would be gone).
    let binary = std::fs::canonicalize(bwrap).unwrap_or_else(|_| bwrap.to_owned());
    let stage = match plan.run_as {
        Some((uid, gid)) => {
            let mut staging = plan.staging(host);
            // A bwrap kept below /tmp must stay reachable at its own path.
            if binary.starts_with(crate::plan::STAGE) {
                staging.push(crate::plan::Staged {
                    src: binary.clone(),
                    at: binary.clone(),
                    idmap: false,
                    exact: false,
                });
            }
            Some(crate::stage::Stage::open(&staging, uid, gid)?)
        }
        None => None,
    };

    let mut command = Command::new(&binary);
    // No environment of bwrap's own: the sandbox's comes through `--args` (see `env_args`).
    command.args(&argv).env_clear().current_dir("/");
    // Before the stage's pre_exec: a root caller's child moves itself while still root.
    if let Some(cgroup) = &cgroup {
        cgroup.apply(&mut command);
    }
    if let Some(stage) = &stage {
        stage.apply(&mut command);
    }
    if detach {
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
    }
    let [stdin, stdout, stderr] = stdio;
    command.stdin(stdin).stdout(stdout).stderr(stderr);

    let mut child = {
        let _guard = sandbox_net::spawn_guard();
        let mut inherited = vec![status_write.as_fd(), seccomp.as_fd(), env.as_fd()];
        inherited.extend(block.as_ref().map(|(read, _)| read.as_fd()));
        inherited.extend(pins.iter().map(|(_, fd)| fd.as_fd()));
        crate::fds::close_on_exec_all_but(&inherited);
        for fd in inherited {
            rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())
                .map_err(|e| Error::io("preparing the status and seccomp pipes")(e.into()))?;
        }
        let spawned = command.spawn();
        // Closes our copies of the merged pipe's write end, so its reader sees EOF.
        drop(command);
        drop(status_write);
        drop(seccomp);
        drop(env);
        drop(stage);
        drop(pins);
        if let Some((read, _)) = &block {
            let _ = rustix::io::fcntl_setfd(read, rustix::io::FdFlags::CLOEXEC);
        }
        spawned.map_err(Error::io(format!("starting {}", bwrap.display())))?
    };

    let pidfd = match child_pidfd(&child) {
        Ok(fd) => fd,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::io("opening a pidfd for bwrap")(e));
        }
    };

    let mut early_status = String::new();
    let mut child_pid = None;
    let (net, proxy) = match block {
        None => (None, None),
        Some((read, write)) => {
            drop(read);
            child_pid = read_child_pid(Some(&status_read), &mut early_status);
            let pid = child_pid.ok_or_else(|| {
                Error::Net(sandbox_net::Error::UserNetwork {
                    reason: "bwrap did not report the sandbox's process".to_owned(),
                })
            });
            // The limits first: nothing of the script runs before the pipe is written, and a
            // limit that cannot be set stops the run rather than being dropped.
            let limited = pid.and_then(|pid| {
                crate::limits::set_rlimits(pid, &plan.limits.rlimits, plan.run_as).map(|()| pid)
            });
            let attached = limited.and_then(|pid| match (plan.net, pasta) {
                (false, _) => Ok((None, None)),
                (true, Ok(pasta)) => {
                    sandbox_net::UserNet::attach(pasta, pid, &plan.publish, plan.run_as, lan)
                        .map(|net| (Some(net), None))
                        .map_err(Error::from)
                }
                (true, Err(_)) if relay => {
                    let session = detach.then_some(pidfd.as_fd());
                    sandbox_net::serve_relay(pid, &plan.publish, session, lan, listed.cloned())
                        .map(|relay| (None, Some(relay)))
                        .map_err(Error::from)
                }
                (true, Err(_)) => sandbox_net::serve_proxy(
                    pid,
                    detach.then_some(pidfd.as_fd()),
                    lan,
                    listed.cloned(),
                )
                .map(|proxy| (None, Some(proxy)))
                .map_err(Error::from),
            });
            match attached {
                Ok(net) => {
                    // Unblocks the command; a bwrap that died meanwhile just reads EOF.
                    let _ = rustix::io::write(&write, b"1");
                    net
                }
                // A bwrap that failed its setup never reports a pid: its own error explains.
                Err(_) if !early_status.contains("child-pid") => (None, None),
                Err(e) => {
                    // The sandbox's own first process first: it waits on `write`, which closes
                    // (and so releases it) as this returns; nothing of the script may start.
                    if let Some(pid) = child_pid.and_then(rustix::process::Pid::from_raw)
                        && let Ok(sandbox) =
                            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
                    {
                        let _ = rustix::process::pidfd_send_signal(&sandbox, Signal::KILL);
                    }
                    let _ = rustix::process::pidfd_send_signal(pidfd.as_fd(), Signal::KILL);
                    let _ = child.wait();
                    drop(write);
                    return Err(e);
                }
            }
        }
    };
    if detach && child_pid.is_none() {
        child_pid = read_child_pid(Some(&status_read), &mut early_status);
    }
    Ok(Launched { child, pidfd, status_read, early_status, net, proxy, child_pid, _cgroup: cgroup })
}

/// The sandbox's environment as `--setenv NAME VALUE` arguments in a memory file, for bwrap's
/// `--args FD`. Not bwrap's own environment: bwrap lives as long as the sandbox, and a root
/// caller's runs as nobody and stays dumpable, so its `/proc/PID/environ` (`--env TOKEN=…`
/// values among it) would be readable by every process of that shared uid. Parsed arguments
/// live in bwrap's heap, which `/proc` does not show, and bwrap closes the descriptor once
/// read. Not argv either: that is world-readable.
fn env_args(env: &[(String, OsString)]) -> Result<OwnedFd> {
    use std::os::unix::ffi::OsStrExt as _;
    let fail = |e: std::io::Error| Error::io("handing the environment to bwrap")(e);
    let mut bytes = Vec::new();
    for (name, value) in env {
        for word in [b"--setenv".as_slice(), name.as_bytes(), value.as_bytes()] {
            bytes.extend_from_slice(word);
            bytes.push(0);
        }
    }
    let fd = rustix::fs::memfd_create("python-sandbox-env", rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| fail(e.into()))?;
    let file = std::fs::File::from(fd);
    // At offset 0 without moving the file's offset, where bwrap starts reading.
    std::os::unix::fs::FileExt::write_all_at(&file, &bytes, 0).map_err(fail)?;
    Ok(file.into())
}

/// A pipe holding the compiled seccomp wall, write end closed, for bwrap's `--seccomp`.
fn seccomp_pipe() -> Result<OwnedFd> {
    let arch = sandbox_core::Arch::native().ok_or_else(|| {
        Error::io("building the seccomp wall")(std::io::Error::other(
            "this CPU architecture has no seccomp wall (x86_64 and aarch64 do)",
        ))
    })?;
    let program = sandbox_core::bpf(arch);
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| Error::io("creating the seccomp pipe")(e.into()))?;
    // A few hundred bytes: far below the pipe's buffer, so this never blocks.
    let mut file = std::fs::File::from(write);
    file.write_all(&program).map_err(Error::io("writing the seccomp wall"))?;
    Ok(read)
}

fn child_pidfd(child: &Child) -> std::io::Result<OwnedFd> {
    let pid = i32::try_from(child.id())
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| std::io::Error::other("invalid child pid"))?;
    Ok(rustix::process::pidfd_open(pid, PidfdFlags::empty())?)
}

/// Reads bwrap's first status document (blocking: bwrap writes it right after creating the
/// sandbox, or exits) and returns the sandbox process's pid. What was read is kept in `seen`.
fn read_child_pid(status: Option<&OwnedFd>, seen: &mut String) -> Option<i32> {
    let status = status?;
    let mut chunk = [0u8; 512];
    while !seen.contains('}') && seen.len() < 64 * 1024 {
        match rustix::io::read(status, &mut chunk) {
            Ok(0) => break,
            Ok(n) => seen.push_str(&String::from_utf8_lossy(&chunk[..n])),
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
    }
    let after = seen.split("\"child-pid\":").nth(1)?;
    let digits: String = after.trim_start().chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Reads what bwrap wrote to the status pipe without waiting for EOF (a descendant could
/// in theory hold the write end).
pub(crate) fn read_status(fd: OwnedFd) -> String {
    let _ = rustix::io::ioctl_fionbio(&fd, true);
    let mut file = std::fs::File::from(fd);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while let Ok(n) = file.read(&mut chunk) {
        if n == 0 || buf.len() > 64 * 1024 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// What a [`SignalGuard`] does with SIGINT/SIGTERM/SIGHUP.
#[derive(Debug, Clone, Copy)]
enum GuardMode {
    /// Kill the sandbox (SIGINT after [`SIGINT_GRACE`] when the script shares our terminal
    /// and has received the same Ctrl-C).
    Kill { interactive: bool },
    /// Send the signal on to the sandbox (whose init passes it to the command), and kill it
    /// only if it is still there after [`SIGINT_GRACE`].
    Forward,
}

/// Ends the sandbox on SIGINT/SIGTERM/SIGHUP while installed (see [`GuardMode`]).
struct SignalGuard {
    handle: signal_hook::iterator::Handle,
    /// The signal that made us kill the sandbox, 0 while none has.
    ended_by: Arc<std::sync::atomic::AtomicI32>,
}

impl SignalGuard {
    fn install(pidfd: Arc<OwnedFd>, mode: GuardMode) -> Result<SignalGuard> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
            .map_err(Error::io("installing signal handlers"))?;
        let handle = signals.handle();
        let ended_by = Arc::new(std::sync::atomic::AtomicI32::new(0));
        let ended = Arc::clone(&ended_by);
        // Detached: see `drop`.
        std::thread::spawn(move || {
            let ends_in_grace = || {
                let mut fds = [PollFd::new(&*pidfd, PollFlags::IN)];
                let grace = Timespec { tv_sec: SIGINT_GRACE.as_secs() as i64, tv_nsec: 0 };
                matches!(rustix::event::poll(&mut fds, Some(&grace)), Ok(n) if n > 0)
            };
            for signal in signals.forever() {
                match mode {
                    // The script got the same Ctrl-C from the terminal; let it unwind.
                    GuardMode::Kill { interactive: true } if signal == SIGINT => {
                        if ends_in_grace() {
                            continue;
                        }
                    }
                    GuardMode::Kill { .. } => {}
                    GuardMode::Forward => {
                        if let Some(forwarded) = Signal::from_named_raw(signal) {
                            let _ = rustix::process::pidfd_send_signal(pidfd.as_fd(), forwarded);
                        }
                        if ends_in_grace() {
                            continue;
                        }
                    }
                }
                let _ = ended.compare_exchange(
                    0,
                    signal,
                    std::sync::atomic::Ordering::SeqCst,
                    std::sync::atomic::Ordering::SeqCst,
                );
                let _ = rustix::process::pidfd_send_signal(pidfd.as_fd(), Signal::KILL);
            }
        });
        Ok(SignalGuard { handle, ended_by })
    }

    fn ended_by(&self) -> Option<i32> {
        Some(self.ended_by.load(std::sync::atomic::Ordering::SeqCst)).filter(|&s| s != 0)
    }
}

impl Drop for SignalGuard {
    /// Ends the thread without waiting for it: it ends once the scheduler gets to it, which at
    /// the end of a run (while the kernel tears the sandbox down on the other cores) took a
    /// third of a millisecond of every run. Until then a signal is still taken by its handlers
    /// and at most passed on to the sandbox, which is gone.
    fn drop(&mut self) {
        self.handle.close();
    }
}
