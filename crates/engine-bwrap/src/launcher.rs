//! The seam between the engine's pipeline and what builds a sandbox.
//!
//! Everything about a run but the sandbox itself is the pipeline's (`engine.rs`: the checks,
//! the environment cache and its lock, uv and the checked lockfile, the root caller's lent
//! directories, the limits decided; `process.rs`: stdio, the timeout, signals, the exit
//! code). It describes each sandbox as one abstract [`Plan`] (binds, environment, command,
//! ids, home, network, tmpfs size, limits, published ports) and hands it to a [`Launcher`],
//! which builds it: [`BwrapLauncher`] renders it to a bubblewrap argv, engine-native builds it
//! in-process. So both engines prepare, cache and run by one code path and differ only here.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::error::{Error, Result};
use crate::host::HostFacts;
use crate::plan::Plan;
use crate::process::{Launched, Tools};

/// The sandbox's stdio; `None` inherits the caller's descriptor.
#[derive(Debug, Default)]
pub struct SandboxStdio {
    /// fd 0.
    pub stdin: Option<OwnedFd>,
    /// fd 1.
    pub stdout: Option<OwnedFd>,
    /// fd 2.
    pub stderr: Option<OwnedFd>,
}

/// One sandbox to start.
#[derive(Debug)]
pub struct Start<'a> {
    /// What to build and run.
    pub plan: &'a Plan,
    /// The host facts the plan was made from.
    pub host: &'a HostFacts,
    /// The engine's own directory (the cache root): no caller path may overlap it.
    pub cache_root: &'a Path,
    /// pasta, for a plan with the network on, or why it cannot be had here.
    pub pasta: Result<&'a Path, &'a engine_detect::NoPasta>,
    /// Whether a run without pasta may get the built-in relay ([`sandbox_net::Relay`], where the
    /// launcher supports it: both do): the configuration's
    /// [`crate::BwrapConfig::builtin_relay`].
    pub relay: bool,
    /// Whether a net-on sandbox may reach private ranges: the configuration's
    /// [`crate::BwrapConfig::lan`].
    pub lan: sandbox_core::Lan,
    /// A network allowlist (`net = [...]`) for the relay (or the built-in proxy) to hold; the
    /// run's refusals are recorded in it. With one, `pasta` is an `Err`.
    pub listed: Option<&'a sandbox_net::Listed>,
    /// The command needs its network from its start (a prepare step's uv): a launcher that
    /// connects the network on demand connects it at once, beside the command's start, rather
    /// than holding the command's first call until it is connected.
    pub net_early: bool,
    /// The sandbox's stdio.
    pub stdio: SandboxStdio,
}

/// How a sandbox ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// The exit code of the process [`Sandboxed::pidfd`] refers to, when it exited.
    pub code: Option<i32>,
    /// The signal that ended it, when it was killed.
    pub signal: Option<i32>,
    /// Setup succeeded and the command started.
    pub started: bool,
    /// Why setup failed, when the launcher knows (else [`Launcher::setup_failure`] finds out).
    pub setup_error: Option<String>,
}

/// What a detached sandbox (a session's: [`Plan::die_with_parent`] off) leaves its owner to
/// end with it. The sandbox itself ends by its agent's idle TTL, a stop or the reaper
/// (SIGKILL to [`Sandboxed::session_pid`]); these do not end by themselves.
#[derive(Debug, Default)]
pub struct Detached {
    /// The network's process, pinned: pasta (net on; it holds the namespace, so it never
    /// exits on its own) or the built-in proxy's keeper (net on without pasta; it ends with
    /// the sandbox).
    pub network: Option<reaper::ProcPin>,
    /// The sandbox's own cgroup, to remove once its tree is gone.
    pub cgroup: Option<PathBuf>,
}

impl Detached {
    /// What a detached sandbox keeps: its network's process (pasta, else the proxy's keeper)
    /// and its cgroup, each handed over so that dropping the handles no longer ends them.
    pub fn keep(
        net: Option<sandbox_net::UserNet>,
        proxy: Option<sandbox_net::ProxyServer>,
        cgroup: Option<crate::limits::Cgroup>,
    ) -> Detached {
        Detached {
            network: net
                .and_then(sandbox_net::UserNet::keep)
                .or_else(|| proxy.and_then(sandbox_net::ProxyServer::keep)),
            cgroup: cgroup.map(crate::limits::Cgroup::keep),
        }
    }
}

/// A started sandbox.
pub trait Sandboxed: Send {
    /// A pidfd of the process whose end means the whole sandbox is gone; SIGKILL to it ends
    /// the sandbox (the rest dies with it, through the pid namespace).
    fn pidfd(&self) -> BorrowedFd<'_>;
    /// Readable once the sandbox has ended and nothing of it runs any more; [`Sandboxed::wait`]
    /// then returns without waiting. By default the [`Sandboxed::pidfd`]; a launcher whose
    /// process outlives the sandbox itself (engine-native's monitor, still in the kernel's
    /// teardown of its namespaces) gives a descriptor that says so sooner.
    fn ended(&self) -> BorrowedFd<'_> {
        self.pidfd()
    }
    /// Waits for the sandbox's end (already there, or about to) and says how it ended.
    fn wait(self: Box<Self>) -> Result<Ended>;
    /// A session's hold on its sandbox: the host pid of a process whose root directory is the
    /// sandbox's once it is set up (the agent's socket is reached through `/proc/<pid>/root`)
    /// and whose SIGKILL ends the whole sandbox; `None` when there is none (it failed early).
    fn session_pid(&self) -> Option<u32>;
    /// Lets a detached sandbox run on past this handle and past this process (reaped in the
    /// background while this process lives); hands back what must end with it.
    fn detach(self: Box<Self>) -> Detached;
}

/// What starts sandboxes for the pipeline.
pub trait Launcher: Send + Sync + std::fmt::Debug {
    /// The engine's name (`bwrap`, `native`).
    fn name(&self) -> &'static str;
    /// Starts `start.plan`: set up (limits held, network attached), its command running.
    fn start(&self, start: Start<'_>) -> Result<Box<dyn Sandboxed>>;
    /// The error for a sandbox that did not start, from what [`Ended::setup_error`] said.
    fn setup_failure(&self, detail: Option<String>) -> Error;
    /// Whether SIGINT, SIGTERM and SIGHUP to the caller are passed on to the sandbox's command
    /// (which then ends as it would: a Ctrl-C is a `KeyboardInterrupt`), the sandbox killed
    /// only when it has not ended after a grace period; else the signal kills the sandbox.
    fn forwards_signals(&self) -> bool;

    /// Whether a net-on sandbox without pasta gets the built-in HTTP(S) proxy
    /// ([`sandbox_net::ProxyServer`]) instead of failing with [`Error::PastaNotFound`] (pasta missing, or
    /// unable to open `/dev/net/tun` as the user it runs as).
    fn builtin_net(&self) -> bool {
        false
    }
}

/// Renders the plan to a bubblewrap argv and starts bwrap (`crate::process::launch`).
#[derive(Debug, Clone)]
pub struct BwrapLauncher {
    bwrap: PathBuf,
}

impl BwrapLauncher {
    /// Launches with the bwrap at `bwrap` (checked by the caller: >= 0.8).
    pub fn new(bwrap: PathBuf) -> BwrapLauncher {
        BwrapLauncher { bwrap }
    }

    /// The bwrap binary.
    pub fn bwrap(&self) -> &Path {
        &self.bwrap
    }
}

struct BwrapSandbox {
    launched: Launched,
}

impl Sandboxed for BwrapSandbox {
    fn pidfd(&self) -> BorrowedFd<'_> {
        self.launched.pidfd.as_fd()
    }

    fn wait(self: Box<Self>) -> Result<Ended> {
        use std::os::unix::process::ExitStatusExt;
        let Launched { mut child, status_read, early_status, net, proxy, _cgroup, .. } =
            self.launched;
        let status = child.wait().map_err(Error::io("waiting for bwrap"))?;
        let rest = crate::process::read_status(status_read);
        // The tree is gone: pasta (or the proxy) and the run's cgroup go after it.
        drop(net);
        drop(proxy);
        drop(_cgroup);
        let started = early_status.contains("\"child-pid\"") || rest.contains("\"child-pid\"");
        Ok(Ended { code: status.code(), signal: status.signal(), started, setup_error: None })
    }

    fn session_pid(&self) -> Option<u32> {
        self.launched.child_pid.and_then(|pid| u32::try_from(pid).ok())
    }

    fn detach(self: Box<Self>) -> Detached {
        let Launched { mut child, net, proxy, _cgroup: cgroup, .. } = self.launched;
        // Reaps bwrap if the session ends while this process still lives (a long-lived
        // library user); a CLI that exits first leaves that to init.
        std::thread::spawn(move || {
            let _ = child.wait();
        });
        Detached::keep(net, proxy, cgroup)
    }
}

impl Launcher for BwrapLauncher {
    fn name(&self) -> &'static str {
        "bwrap"
    }

    fn builtin_net(&self) -> bool {
        true
    }

    fn start(&self, start: Start<'_>) -> Result<Box<dyn Sandboxed>> {
        let stdio = |fd: Option<OwnedFd>| fd.map_or_else(Stdio::inherit, Stdio::from);
        let SandboxStdio { stdin, stdout, stderr } = start.stdio;
        let tools = Tools {
            bwrap: &self.bwrap,
            pasta: start.pasta,
            relay: start.relay,
            lan: start.lan,
            listed: start.listed,
        };
        let launched = crate::process::launch(
            tools,
            start.plan,
            start.host,
            [stdio(stdin), stdio(stdout), stdio(stderr)],
            // A session's sandbox: a process group of its own, its pid read.
            !start.plan.die_with_parent,
        )?;
        Ok(Box::new(BwrapSandbox { launched }))
    }

    /// Either bwrap cannot create namespaces here at all, or it can and something about this
    /// run (a mount) made it fail.
    fn setup_failure(&self, _detail: Option<String>) -> Error {
        let probe = engine_detect::probe_bwrap_binary(&self.bwrap);
        let reason = if probe.available {
            "bwrap itself works here, so something in this run's mounts was rejected\n\
             hint: check the paths named in the message above"
                .to_owned()
        } else {
            probe.reason
        };
        Error::SandboxSetup { reason }
    }

    fn forwards_signals(&self) -> bool {
        false
    }
}
