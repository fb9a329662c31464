//! [`NativeEngine`]: engine-bwrap's pipeline (prepare and run, the environment cache and its
//! locks, the pinned uv, the checked lockfile, limits, publish, status and errors) with this
//! crate's in-process sandbox as its [`Launcher`] instead of bubblewrap.
//!
//! The pipeline describes every sandbox as one abstract [`engine_bwrap::Plan`]; [`input`]
//! turns it into this crate's [`Input`] (pure, snapshot-tested), [`crate::plan()`] into the
//! mount tree, and [`NativeLauncher`] performs it: limits (the run's cgroup joined by the
//! monitor, rlimits set by the command before its `execve`), the network through pasta.

use std::ffi::OsString;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;

use engine_bwrap::{
    Access, BwrapConfig, BwrapEngine, Detached, Ended, Error, HostFacts, Launcher, Plan,
    PreparedEnv, Rlim, Sandboxed, Start,
};
use sandbox_core::{
    Engine, MountMode, RunIo, RunOutcome, RunSpec, SessionConfig, SessionEngine, SessionInfo,
};

use crate::plan::Input;

/// Runs PEP 723 scripts behind the native wall: the bwrap engine's pipeline, this crate's
/// sandbox. Cheap to create: one forked child tries a user namespace (about a millisecond,
/// skipped where it worked before in the same boot and context, [`crate::probe()`]), so an
/// engine that cannot work here says why before anything is prepared.
#[derive(Debug)]
pub struct NativeEngine {
    inner: BwrapEngine,
}

impl NativeEngine {
    /// Checks that the wall can be built here ([`crate::probe()`]), gathers the host facts and
    /// prepares the cache layout (shared with the bwrap engine).
    pub fn new(config: BwrapConfig) -> Result<NativeEngine, Error> {
        let probe = crate::probe();
        if !probe.available {
            return Err(Error::LauncherSetup { engine: "native", reason: probe.reason });
        }
        Ok(NativeEngine { inner: BwrapEngine::with_launcher(config, Box::new(NativeLauncher))? })
    }

    /// The engine's configuration.
    pub fn config(&self) -> &BwrapConfig {
        self.inner.config()
    }
}

impl Engine for NativeEngine {
    type Error = Error;
    type Prepared = PreparedEnv;

    fn name(&self) -> &'static str {
        "native"
    }

    fn capability(&self) -> sandbox_core::Capability {
        self.inner.capability()
    }

    fn check(&self, spec: &RunSpec) -> Result<Vec<String>, Error> {
        self.inner.check(spec)
    }

    fn prepare(&self, spec: &RunSpec, status: &mut dyn FnMut(&str)) -> Result<PreparedEnv, Error> {
        self.inner.prepare(spec, status)
    }

    fn run_prepared(
        &self,
        spec: &RunSpec,
        prepared: &PreparedEnv,
        io: RunIo<'_>,
    ) -> Result<RunOutcome, Error> {
        self.inner.run_prepared(spec, prepared, io)
    }
}

impl sandbox_core::Executor for NativeEngine {
    fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        engine_bwrap::Immediate.block_on(future)
    }
}

/// Warm sessions: engine-bwrap's session side (records, the agent, reap, limits, publish,
/// the TTL) with this crate's sandbox started detached ([`crate::Command::detach`]); the
/// records are this engine's own (`native-sessions` in the runtime dir).
impl SessionEngine for NativeEngine {
    type Error = Error;
    type Session = engine_bwrap::Session;

    fn session_engine_name(&self) -> &'static str {
        "native"
    }

    fn start_session(
        &self,
        config: &SessionConfig,
        status: &mut dyn FnMut(&str),
    ) -> Result<SessionInfo, Error> {
        self.inner.start_session(config, status)
    }

    fn open_session(&self, id: &str) -> Result<engine_bwrap::Session, Error> {
        self.inner.open_session(id)
    }

    fn list_sessions(&self) -> Result<Vec<SessionInfo>, Error> {
        self.inner.list_sessions()
    }

    fn stop_session(&self, id: &str) -> Result<(), Error> {
        self.inner.stop_session(id)
    }
}

/// The startup sweep of native sessions ([`engine_bwrap::reap_sessions`]): needs no engine.
pub fn reap_sessions(config: &BwrapConfig, dry_run: bool) -> Result<Vec<String>, Error> {
    engine_bwrap::reap_sessions(config, "native", dry_run)
}

/// Native session `id` opened from its record, without an engine (the warm path).
pub fn local_session(config: &BwrapConfig, id: &str) -> Option<Box<dyn sandbox_core::DynSession>> {
    engine_bwrap::local_session(config, "native", id)
}

/// Pure: the pipeline's abstract plan as this crate's [`Input`]. The caller's paths (the
/// plan's pinned sources) become the workspace (the read-write one the command starts in) and
/// declared mounts, checked again by [`crate::plan()`]'s policy; the rest of the read-only binds
/// are the interpreter and environment, the rest of the read-write ones the engine's own
/// directories a prepare step writes (which must lie in `cache_root`).
pub fn input(plan: &Plan, host: &HostFacts, cache_root: &Path) -> Input {
    let mut input = Input {
        uid: host.uid,
        gid: host.gid,
        home: Some(host.home.clone()),
        own: (cache_root.to_owned(), "python-sandbox's cache".to_owned()),
        root_entries: host.root_entries.clone(),
        etc: host.etc.clone(),
        passwd: host.passwd.clone(),
        group: host.group.clone(),
        ca_bundle: host.ca_bundle.clone(),
        ro_dirs: Vec::new(),
        workspace: None,
        mounts: Vec::new(),
        own_writable: Vec::new(),
        not_idmapped: Vec::new(),
        chdir: Some(plan.chdir.clone()),
        net: plan.net,
        tmpfs_size: plan.tmpfs_size,
        links: plan.links.clone(),
    };
    for bind in &plan.binds {
        let caller = plan.pinned.contains(&bind.src);
        match (caller, bind.access) {
            (true, Access::ReadWrite) if bind.src == plan.chdir && input.workspace.is_none() => {
                input.workspace = Some(bind.src.clone());
            }
            (true, access) => input.mounts.push((
                bind.src.clone(),
                match access {
                    Access::ReadOnly => MountMode::ReadOnly,
                    Access::ReadWrite => MountMode::ReadWrite,
                },
            )),
            (false, Access::ReadOnly) => input.ro_dirs.push((bind.src.clone(), bind.dest.clone())),
            (false, Access::ReadWrite) => {
                input.own_writable.push((bind.src.clone(), bind.dest.clone()));
            }
        }
        // The pipeline lent these to nobody with an ACL instead (no idmapped mounts there).
        if caller && !plan.idmapped.contains(&bind.src) {
            input.not_idmapped.push(bind.src.clone());
        }
    }
    input
}

/// The in-process launcher (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct NativeLauncher;

struct NativeSandbox {
    child: crate::Child,
    /// pasta (net on), ended with the handle once the tree is gone.
    net: Option<sandbox_net::UserNet>,
    /// Net on, connected on demand: the thread that attaches pasta or the relay when the
    /// script first needs it (`crate::demand`), with that network or why it failed.
    on_demand: Option<crate::net::OnDemand>,
    /// The built-in proxy or relay (net on without pasta, not on demand): a thread stopped
    /// with the handle, or a session's keeper.
    proxy: Option<sandbox_net::ProxyServer>,
    /// The run's cgroup, removed when dropped.
    cgroup: Option<engine_bwrap::Cgroup>,
}

impl Sandboxed for NativeSandbox {
    fn pidfd(&self) -> BorrowedFd<'_> {
        self.child.pidfd()
    }

    fn ended(&self) -> BorrowedFd<'_> {
        self.child.ended()
    }

    fn wait(self: Box<Self>) -> Result<Ended, Error> {
        let NativeSandbox { child, net, on_demand, proxy, cgroup } = *self;
        // The cgroup is removed below: the monitor must have left it (its exit complete).
        let status = match cgroup {
            Some(_) => child.wait_reaped(),
            None => child.wait_status(),
        };
        let ended = match status {
            Ok((code, signal)) => Ended { code, signal, started: true, setup_error: None },
            Err(e @ crate::Error::Setup { .. }) => Ended {
                code: Some(127),
                signal: None,
                started: false,
                setup_error: Some(e.to_string()),
            },
            Err(e) => return Err(to_bwrap(e)),
        };
        // The thread ends once the init has gone (EOF on its socket pair), or after attaching
        // pasta for a script that asked.
        let attached = on_demand.map(crate::net::OnDemand::finish);
        drop(net);
        drop(proxy);
        drop(cgroup);
        // The script's network calls found no route: the run did not get what it asked for.
        if let Some(Err(e)) = attached
            && ended.started
        {
            return Err(e.into());
        }
        Ok(ended)
    }

    /// The monitor: its root follows the init's `pivot_root`s (they move every process of the
    /// mount namespace whose root was the old one), it stays dumpable for an unprivileged
    /// caller (the init does not), and the init and with it the pid namespace die with it.
    fn session_pid(&self) -> Option<u32> {
        u32::try_from(self.child.pid()).ok()
    }

    fn detach(self: Box<Self>) -> Detached {
        // A session never gets a network on demand (`NativeLauncher::start` connects a
        // session's up front), and its proxy is a keeper.
        let NativeSandbox { child, net, on_demand: _, proxy, cgroup } = *self;
        // The waiting thread is the monitor's parent: it reaps it while this process lives.
        std::thread::spawn(move || {
            let _ = child.wait();
        });
        Detached::keep(net, proxy, cgroup)
    }
}

fn to_bwrap(e: crate::Error) -> Error {
    match e {
        crate::Error::Network(reason) => Error::Net(sandbox_net::Error::UserNetwork { reason }),
        other => Error::LauncherSetup { engine: "native", reason: other.to_string() },
    }
}

fn owned(fd: BorrowedFd<'_>, what: &str) -> Result<OwnedFd, Error> {
    fd.try_clone_to_owned()
        .map_err(|e| Error::LauncherSetup { engine: "native", reason: format!("{what}: {e}") })
}

impl Launcher for NativeLauncher {
    fn name(&self) -> &'static str {
        "native"
    }

    fn start(&self, start: Start<'_>) -> Result<Box<dyn Sandboxed>, Error> {
        let Start { plan, host, cache_root, pasta, relay, lan, listed, net_early, stdio } = start;
        // Net on without pasta: the built-in relay (full TCP/UDP) where a tun device can be
        // had (a run's attached on demand, a session's served by a keeper); else the built-in
        // HTTP(S) proxy. What only pasta gives is refused by name.
        let builtin = plan.net && pasta.is_err();
        let relay = relay && builtin && sandbox_net::relay_available();
        let proxy = builtin && !relay;

        // The sandbox reads the host's resolv.conf: a nameserver there on the host's loopback
        // is served on the sandbox's by the relay.
        let nameservers = if relay { sandbox_net::host_loopback_nameservers() } else { Vec::new() };
        if proxy
            && let Err(no) = pasta
            && !plan.publish.is_empty()
        {
            return Err(Error::needs_pasta("publishing a port", no));
        }
        let tree = crate::plan(&input(plan, host, cache_root)).map_err(to_bwrap)?;
        let cgroup = plan.limits.cgroup.as_ref().map(engine_bwrap::Cgroup::create).transpose()?;
        let cgroup_procs =
            cgroup.as_ref().map(|c| owned(c.procs(), "holding the run's cgroup")).transpose()?;
        let mut env = plan.env.clone();
        if !env.iter().any(|(k, _)| k == "PWD") {
            env.push(("PWD".to_owned(), plan.chdir.clone().into_os_string()));
        }
        if proxy {
            env.retain(|(k, _)| !k.to_ascii_lowercase().ends_with("_proxy"));
            env.extend(sandbox_net::proxy_env());
        }
        let command = crate::Command {
            argv: plan.command.iter().map(OsString::from).collect(),
            env,
            stdin: stdio.stdin,
            stdout: stdio.stdout,
            stderr: stdio.stderr,
            rlimits: plan
                .limits
                .rlimits
                .iter()
                // `as`: glibc gives `RLIMIT_*` a type of its own, musl an `int`.
                .map(|r| match *r {
                    Rlim::Data(v) => (libc::RLIMIT_DATA as libc::c_int, v),
                    Rlim::Processes(v) => (libc::RLIMIT_NPROC as libc::c_int, v),
                })
                .collect(),
            cgroup_procs,
            detach: !plan.die_with_parent,
            // pasta or the relay (the built-in proxy listens before the script runs); not for
            // a session, whose caller is gone before its script needs anything, nor with a
            // published port, which must be bound before the script runs (a busy one fails
            // with nothing run).
            net_on_demand: !proxy && plan.die_with_parent && plan.publish.is_empty(),
            net_doors: nameservers.clone(),
        };
        let mut child = crate::spawn(&tree, command).map_err(to_bwrap)?;
        let network = match pasta {
            Ok(pasta) => Some(crate::net::Network::Pasta(pasta)),
            Err(_) if relay => {
                Some(crate::net::Network::Relay { nameservers: &nameservers, listed })
            }
            Err(_) => None,
        };
        if let Some(network) = network {
            match crate::net::connect_on_demand(&mut child, network, lan, net_early) {
                Ok(None) => {}
                Ok(on_demand) => {
                    return Ok(Box::new(NativeSandbox {
                        child,
                        net: None,
                        on_demand,
                        proxy: None,
                        cgroup,
                    }));
                }
                Err(e) => {
                    // Dropping the demand lets the held calls go on without a network; the
                    // run is ended before it gets that far.
                    let _ = rustix::process::pidfd_send_signal(
                        child.pidfd(),
                        rustix::process::Signal::KILL,
                    );
                    let _ = child.wait();
                    return Err(to_bwrap(e));
                }
            }
        }
        let session = !plan.die_with_parent;
        let attached = match (plan.net, pasta) {
            (false, _) => Ok((None, None)),
            (true, Ok(pasta)) => {
                crate::net::attach(&child, pasta, &plan.publish, lan).map(|n| (Some(n), None))
            }
            (true, Err(_)) if relay => {
                crate::net::serve_relay(&child, &nameservers, &plan.publish, session, lan, listed)
                    .map(|r| (None, Some(r)))
            }
            (true, Err(_)) => {
                crate::net::serve_proxy(&child, session, lan, listed).map(|p| (None, Some(p)))
            }
        };
        let (net, proxy) = match attached {
            Ok(attached) => attached,
            Err(e) => {
                // Nothing of the command runs: the sandbox ends before its setup.
                child.release_abandoned();
                let _ = child.wait();
                return Err(e.into());
            }
        };
        child.release().map_err(to_bwrap)?;
        Ok(Box::new(NativeSandbox { child, net, on_demand: None, proxy, cgroup }))
    }

    fn setup_failure(&self, detail: Option<String>) -> Error {
        let reason = match (detail, crate::userns_probe()) {
            (Some(detail), _) => detail,
            (None, Err(reason)) => reason,
            (None, Ok(())) => "user namespaces work here, so something in this run's mounts was \
                               rejected\nhint: check the paths named in the message above"
                .to_owned(),
        };
        Error::LauncherSetup { engine: "native", reason }
    }

    fn forwards_signals(&self) -> bool {
        true
    }

    fn builtin_net(&self) -> bool {
        true
    }
}
