//! The engine seam, session side: what the CLI needs of an engine for warm sessions. The
//! typed pair is [`SessionEngine`] (start, open by id, list, stop) and the handle it opens,
//! a [`WarmSession`] (the [`Sandbox`] protocol plus what `session run` needs: the policy the
//! session was started with, its secrets to mask, its script count). Their object-safe views,
//! [`DynSessionEngine`] and [`DynSession`], are what a registry hands out: synchronous, with
//! every error a classified [`EngineError`].
//!
//! The dyn views are synchronous the same way [`crate::DynEngine`] is: each engine drives its
//! own futures ([`Executor`]: a tokio runtime for the API engines, nothing for bwrap, whose
//! session IO is blocking), so no runtime leaks into the CLI.

use std::future::Future;
use std::path::{Path, PathBuf};

use crate::{
    Classify, DirEntry, EngineError, ExecRequest, Interactive, InteractiveExec, Limits, Net,
    OutputSink, RunOutcome, Sandbox, ScriptOptions, Service, ServiceSpec, SessionConfig,
};

/// A session as `session list` shows it, whatever engine holds it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionInfo {
    /// The session id (what `session run/exec/stop` take).
    pub id: String,
    /// The engine's name (`bwrap`, `docker`, ...).
    pub engine: String,
    /// What the engine calls the sandbox: a container name, a host pid.
    pub sandbox: String,
    /// Unix seconds.
    pub created: u64,
    /// Idle TTL in seconds.
    pub ttl: u64,
    /// The engine's state, e.g. `running`.
    pub state: String,
    /// The workspace.
    pub workspace: String,
    /// (port inside, URL on the host) of published ports.
    pub ports: Vec<(u16, String)>,
    /// From a start: what the engine could not give the session; empty in listings.
    pub warnings: Vec<String>,
}

/// What a session was started with, for checking the scripts run in it: mounts, network,
/// ports, the tmpfs cap and the resource limits are fixed when the sandbox starts, on every
/// engine.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct SessionPolicy {
    /// Whether the session has a network.
    pub net: bool,
    /// With a network: the only hosts it reaches (none recorded: the whole network).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<crate::Allow>,
    /// Extra mounts (real host paths) and whether each is writable.
    pub mounts: Vec<(PathBuf, bool)>,
    /// Ports published to the host.
    pub publish: Vec<u16>,
    /// The cap of each of the session's tmpfs, in bytes; `None` for a session of an older
    /// version, which cannot show it holds any cap.
    #[serde(default)]
    pub tmpfs_size: Option<u64>,
    /// The session's resource limits (none recorded by an older version).
    #[serde(default)]
    pub limits: Limits,
}

/// What a script asks of the sandbox it runs in, among what a session fixes at its start: what
/// `session run` checks against the session's [`SessionPolicy`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScriptAsks {
    /// Mounts (canonical host paths) and whether each is writable.
    pub mounts: Vec<(PathBuf, bool)>,
    /// The network, when the script sets it (`None`: the session's own).
    pub net: Option<Net>,
    /// The script's allowlist (`net = [...]`), when it sets one: a tightening a session
    /// without the same list does not hold.
    pub allow: Option<crate::Allow>,
    /// Ports to publish.
    pub publish: Vec<u16>,
    /// The tmpfs cap, when the script sets it.
    pub tmpfs_size: Option<u64>,
    /// The resource limits the script sets.
    pub limits: Limits,
    /// Whether it has dependencies to install (which needs the session's network).
    pub dependencies: bool,
}

impl SessionPolicy {
    /// Pure: what of a script's own sandbox settings this session cannot give it, one line each
    /// (empty: it fits). Asking for more than the session has (a mount, the network, a port) is
    /// a misfit, and so is every tightening the session does not hold: `net = "off"` in a
    /// session with a network, a read-only mount the session has writable, a tmpfs cap or a
    /// resource limit below the session's (a cap at or above the session's holds). Never
    /// dropped: the script would run with less protection than it declares.
    pub fn misfits(&self, workspace: &Path, asks: &ScriptAsks) -> Vec<String> {
        let mut out = Vec::new();
        for (path, writable) in &asks.mounts {
            let shown = path.display();
            match (self.writable_at(workspace, path), writable) {
                (None, _) => out.push(format!(
                    "mount `{shown}{}`: the session has no such mount",
                    if *writable { "" } else { ":ro" }
                )),
                (Some(false), true) => {
                    out.push(format!("mount `{shown}`: the session mounts it read-only"));
                }
                (Some(true), false) => {
                    out.push(format!("mount `{shown}:ro`: the session mounts it read-write"));
                }
                (Some(false), false) => {
                    if let Some((below, _)) =
                        self.mounts.iter().find(|(m, rw)| *rw && m != path && m.starts_with(path))
                    {
                        out.push(format!(
                            "mount `{shown}:ro`: the session mounts `{}` inside it read-write",
                            below.display()
                        ));
                    }
                }
                (Some(true), true) => {}
            }
        }
        let quoted = |allow: &crate::Allow| {
            allow.patterns().iter().map(|p| format!("\"{p}\"")).collect::<Vec<_>>().join(", ")
        };
        match asks.net {
            Some(Net::On) if !self.net => {
                out.push("`net = \"on\"`: the session has no network".to_owned());
            }
            Some(Net::On) if asks.allow.is_none() && self.allow.is_some() => {
                let have = self.allow.as_ref().map(quoted).unwrap_or_default();
                out.push(format!("`net = \"on\"`: the session reaches only [{have}]"));
            }
            Some(Net::Off) if self.net => {
                out.push("`net = \"off\"`: the session has a network".to_owned());
            }
            _ => {}
        }
        if let Some(allow) = &asks.allow
            && self.net
        {
            // The session's list holds the script's when it names nothing the script's does
            // not: every pattern of the session's is one of the script's.
            match &self.allow {
                None => out.push(format!(
                    "`net = [{}]`: the session reaches the whole network, not only these hosts",
                    quoted(allow)
                )),
                Some(have) if !have.patterns().iter().all(|p| allow.patterns().contains(p)) => {
                    out.push(format!(
                        "`net = [{}]`: the session reaches [{}]",
                        quoted(allow),
                        quoted(have)
                    ));
                }
                // A caller's list reaches the private addresses it names; a script's alone
                // would not.
                Some(have)
                    if have.opens_private()
                        && !allow.opens_private()
                        && have
                            .patterns()
                            .iter()
                            .any(|p| matches!(p.target, crate::HostTarget::Range(_))) =>
                {
                    out.push(format!(
                        "`net = [{}]`: the session's list reaches private addresses the script's may not",
                        quoted(allow)
                    ));
                }
                Some(_) => {}
            }
        }
        for port in &asks.publish {
            if !self.publish.contains(port) {
                out.push(format!("publish {port}: the session does not publish it"));
            }
        }
        let limits = &self.limits;
        let size = |b: u64| format!("\"{}\"", size_text(b));
        let caps = [
            asks.tmpfs_size.map(|t| {
                cap_misfit(("tmpfs-size", "tmpfs cap"), size(t), t, self.tmpfs_size, size)
            }),
            asks.limits
                .memory
                .map(|m| cap_misfit(("memory", "memory limit"), size(m), m, limits.memory, size)),
            asks.limits.cpus.map(|c| {
                cap_misfit(("cpus", "cpu limit"), c.to_string(), c, limits.cpus, |c| c.to_string())
            }),
            asks.limits.pids.map(|p| {
                cap_misfit(("pids-limit", "process limit"), p.to_string(), p, limits.pids, |p| {
                    p.to_string()
                })
            }),
        ];
        out.extend(caps.into_iter().flatten().flatten());
        out
    }

    /// Whether `path` is writable in the session: by the deepest of its mounts that holds it
    /// (the workspace, always read-write, among them); `None` when none does.
    fn writable_at(&self, workspace: &Path, path: &Path) -> Option<bool> {
        let depth = |p: &Path| p.components().count();
        let mut best = path.starts_with(workspace).then(|| (depth(workspace), true));
        for (have, rw) in &self.mounts {
            if path.starts_with(have) && best.is_none_or(|(d, _)| depth(have) >= d) {
                best = Some((depth(have), *rw));
            }
        }
        best.map(|(_, rw)| rw)
    }
}

/// A cap the script asks for (`key = shown`) against the session's (`have`): it holds when the
/// session's is at most the script's; `what` names it in the misfit.
fn cap_misfit<T: PartialOrd + Copy>(
    (key, what): (&str, &str),
    shown: String,
    asked: T,
    have: Option<T>,
    show: impl Fn(T) -> String,
) -> Option<String> {
    match have {
        Some(have) if have <= asked => None,
        Some(have) => {
            Some(format!("`{key} = {shown}`: the session's {what} is {}, higher", show(have)))
        }
        None => Some(format!("`{key} = {shown}`: the session has no {what}")),
    }
}

impl ScriptAsks {
    /// Whether the script sets nothing a session fixes at its start (dependencies aside).
    pub fn asks_nothing(&self) -> bool {
        self.mounts.is_empty()
            && self.net.is_none()
            && self.publish.is_empty()
            && self.tmpfs_size.is_none()
            && self.limits.is_empty()
    }

    /// Pure: the `session start` flags of a session that gives the script all it asks, for the
    /// hint of a misfit (mounts in the workspace that are writable need none).
    pub fn start_flags(&self, workspace: &Path) -> Vec<String> {
        let mut flags = Vec::new();
        match (&self.allow, self.net) {
            (Some(allow), _) => flags.push(format!("--net {}", shell_word(&allow.to_string()))),
            (None, Some(net)) => {
                flags.push(format!("--net {}", if net == Net::On { "on" } else { "off" }));
            }
            (None, None) => {}
        }
        for (path, writable) in &self.mounts {
            match (writable, path.starts_with(workspace)) {
                (true, true) => {}
                (true, false) => {
                    flags.push(format!("--mount {}", shell_word(&format!("{}:rw", path.display()))))
                }
                (false, _) => {
                    flags.push(format!("--mount {}", shell_word(&format!("{}:ro", path.display()))))
                }
            }
        }
        flags.extend(self.publish.iter().map(|p| format!("--publish {p}")));
        if let Some(cap) = self.tmpfs_size {
            flags.push(format!("--tmpfs-size {}", size_text(cap)));
        }
        if let Some(m) = self.limits.memory {
            flags.push(format!("--memory {}", size_text(m)));
        }
        if let Some(c) = self.limits.cpus {
            flags.push(format!("--cpus {c}"));
        }
        if let Some(p) = self.limits.pids {
            flags.push(format!("--pids-limit {p}"));
        }
        flags
    }

    /// Pure: the hint of a misfit: the `session start` that fits, or `run` alone when no
    /// session can (dependencies to install with the network off).
    pub fn misfit_hint(&self, workspace: &Path) -> String {
        let run = "run it on its own with `python-sandbox run`";
        if self.net == Some(Net::Off) && self.dependencies {
            return format!(
                "{run}: a session installs dependencies with its own network, so one started with `--net off` cannot install them"
            );
        }
        let flags = self.start_flags(workspace);
        let start = if flags.is_empty() {
            "python-sandbox session start".to_owned()
        } else {
            format!("python-sandbox session start {}", flags.join(" "))
        };
        format!("start a session that fits, `{start}`, or {run}")
    }
}

/// A byte size as the flags spell it (`512m`, `2g`, or bytes).
fn size_text(bytes: u64) -> String {
    match bytes {
        0 => "0".to_owned(),
        b if b % (1 << 30) == 0 => format!("{}g", b >> 30),
        b if b % (1 << 20) == 0 => format!("{}m", b >> 20),
        b if b % (1 << 10) == 0 => format!("{}k", b >> 10),
        b => b.to_string(),
    }
}

/// `text` as one shell word: as it is when it holds no character a shell would read, else in
/// single quotes.
fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text.chars().all(|c| c.is_ascii_alphanumeric() || "/._-:=@%+,~".contains(c));
    if plain { text.to_owned() } else { format!("'{}'", text.replace('\'', r"'\''")) }
}

/// A running session: the [`crate::Sandbox`] protocol with interactive execs, and what
/// `session run` needs around it.
pub trait WarmSession: InteractiveExec {
    /// The workspace the session was started in (a real host path, mounted at itself).
    fn workspace(&self) -> &str;

    /// What the session was started with; `None` for sessions of older versions.
    fn policy(&self) -> Option<SessionPolicy>;

    /// The values of the session's own secret-looking environment, masked in what it prints.
    fn secrets(&self) -> &[String];

    /// How many scripts `session run` had run in the session when it was opened.
    fn scripts_run(&self) -> u64;

    /// Records that one more script runs in the session (best effort).
    fn note_script(&self);

    /// Runs the host script in the session's venv after installing `options.dependencies`
    /// ([`crate::shell::run_script`]).
    fn run_script(
        &self,
        script: &Path,
        options: &ScriptOptions,
        output: &mut dyn OutputSink,
    ) -> impl Future<Output = Result<RunOutcome, Self::Error>> + Send;
}

/// Drives a future to its end from synchronous code: an engine's runtime, or nothing at all
/// for an engine whose futures do their IO blocking.
pub trait Executor {
    /// Runs `future` to completion.
    fn block_on<F: Future>(&self, future: F) -> F::Output;
}

impl<T: Executor + ?Sized> Executor for &T {
    fn block_on<F: Future>(&self, future: F) -> F::Output {
        (**self).block_on(future)
    }
}

/// An engine with warm sessions: the session half of the seam. Separate from [`crate::Engine`]
/// (the run half): an engine may have either or both (bwrap, docker and podman have both).
pub trait SessionEngine: Executor {
    /// The engine's own error type (each engine crate has one `thiserror` enum).
    type Error: std::error::Error + Classify + Send + Sync + 'static;
    /// The handle [`SessionEngine::open_session`] gives.
    type Session: WarmSession<Error = Self::Error>;

    /// The engine's stable lower-case name, as [`crate::Engine::name`].
    fn session_engine_name(&self) -> &'static str;

    /// Starts a session and returns once it serves commands. Status lines (a cold interpreter
    /// lookup) go to `status`.
    fn start_session(
        &self,
        config: &SessionConfig,
        status: &mut dyn FnMut(&str),
    ) -> Result<SessionInfo, Self::Error>;

    /// The running session `id`; an error of class [`crate::ErrorClass::NotFound`] when this
    /// engine has none.
    fn open_session(&self, id: &str) -> Result<Self::Session, Self::Error>;

    /// Every session of this user on this engine.
    fn list_sessions(&self) -> Result<Vec<SessionInfo>, Self::Error>;

    /// Stops session `id` and everything in it, and what the engine kept for it on the host.
    fn stop_session(&self, id: &str) -> Result<(), Self::Error>;

    /// The warm pool ([`crate::pool`]): what besides a [`SessionConfig`] fixes this engine's
    /// sandboxes at their start (image, flavor, namespace), part of every pool key; `None`
    /// (the default) for an engine without a pool, whose other `pool_*` methods are never
    /// called.
    fn pool_identity(&self) -> Option<String> {
        None
    }

    /// The unclaimed members of this user's pool on this engine (none claimable by anyone
    /// else, none that ran anything).
    fn pool_members(&self) -> Result<Vec<crate::PoolMember>, Self::Error> {
        Ok(Vec::new())
    }

    /// Starts one member for `config`, labelled with `key`. A member is a session the engine
    /// refuses to open until it is claimed.
    fn pool_create(&self, _config: &SessionConfig, _key: &str) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Claims `member` atomically: `Some` (the session, now like any started one) for exactly
    /// one caller; `None` when another caller claimed it first or it is unfit (gone, used, a
    /// mount source replaced; such a member is removed).
    fn pool_claim(&self, _member: &crate::PoolMember) -> Result<Option<SessionInfo>, Self::Error> {
        Ok(None)
    }

    /// Removes unclaimed member `id` (a claimed one is left alone).
    fn pool_remove(&self, _id: &str) -> Result<(), Self::Error> {
        Ok(())
    }

    /// The pool's controller lock (`pool serve`'s), for an engine whose pool every host can
    /// reach (a cluster's): takes or renews it for `holder`, kept for `ttl` unless renewed.
    /// [`crate::PoolLease::Local`] (the default): the pool is this host's, and a lock file on
    /// the host orders its controllers.
    fn pool_lease_take(
        &self,
        _holder: &str,
        _ttl: std::time::Duration,
    ) -> Result<crate::PoolLease, Self::Error> {
        Ok(crate::PoolLease::Local)
    }

    /// Gives the controller lock up, if `holder` holds it.
    fn pool_lease_release(&self, _holder: &str) -> Result<(), Self::Error> {
        Ok(())
    }

    /// Who keeps the pool now from wherever (a live holder of the lock [`pool_lease_take`]
    /// gives); `None` when nobody does or the pool is this host's (the default).
    ///
    /// [`pool_lease_take`]: SessionEngine::pool_lease_take
    fn pool_lease_holder(&self) -> Result<Option<String>, Self::Error> {
        Ok(None)
    }
}

/// Object-safe view of a [`WarmSession`], driven by its engine's [`Executor`].
pub trait DynSession {
    /// See [`crate::Sandbox::id`].
    fn id(&self) -> &str;
    /// See [`WarmSession::workspace`].
    fn workspace(&self) -> &str;
    /// See [`WarmSession::policy`].
    fn policy(&self) -> Option<SessionPolicy>;
    /// See [`WarmSession::secrets`].
    fn secrets(&self) -> &[String];
    /// See [`WarmSession::scripts_run`].
    fn scripts_run(&self) -> u64;
    /// See [`WarmSession::note_script`].
    fn note_script(&self);
    /// See [`crate::Sandbox::exec`].
    fn exec(
        &self,
        request: &ExecRequest,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome, EngineError>;
    /// See [`InteractiveExec::exec_interactive`].
    fn exec_interactive(
        &self,
        request: &ExecRequest,
        io: Interactive,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome, EngineError>;
    /// See [`WarmSession::run_script`].
    fn run_script(
        &self,
        script: &Path,
        options: &ScriptOptions,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome, EngineError>;
    /// See [`Sandbox::read_file`].
    fn read_file(&self, path: &str) -> Result<Vec<u8>, EngineError>;
    /// See [`Sandbox::write_file`].
    fn write_file(&self, path: &str, contents: &[u8]) -> Result<(), EngineError>;
    /// See [`Sandbox::list_dir`].
    fn list_dir(&self, path: &str) -> Result<Vec<DirEntry>, EngineError>;
    /// See [`Sandbox::start_service`].
    fn start_service(&self, service: &ServiceSpec) -> Result<Service, EngineError>;
}

/// A session with the executor that drives it: the [`DynSession`] every engine hands out.
pub struct Driven<X, S> {
    /// Drives the session's futures.
    pub executor: X,
    /// The session.
    pub session: S,
}

impl<X: Executor, S: WarmSession> DynSession for Driven<X, S>
where
    S::Error: Classify,
{
    fn id(&self) -> &str {
        self.session.id()
    }

    fn workspace(&self) -> &str {
        self.session.workspace()
    }

    fn policy(&self) -> Option<SessionPolicy> {
        self.session.policy()
    }

    fn secrets(&self) -> &[String] {
        self.session.secrets()
    }

    fn scripts_run(&self) -> u64 {
        self.session.scripts_run()
    }

    fn note_script(&self) {
        self.session.note_script();
    }

    fn exec(
        &self,
        request: &ExecRequest,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome, EngineError> {
        self.executor.block_on(self.session.exec(request, output)).map_err(EngineError::new)
    }

    fn exec_interactive(
        &self,
        request: &ExecRequest,
        io: Interactive,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome, EngineError> {
        self.executor
            .block_on(self.session.exec_interactive(request, io, output))
            .map_err(EngineError::new)
    }

    fn run_script(
        &self,
        script: &Path,
        options: &ScriptOptions,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome, EngineError> {
        self.executor
            .block_on(self.session.run_script(script, options, output))
            .map_err(EngineError::new)
    }

    fn read_file(&self, path: &str) -> Result<Vec<u8>, EngineError> {
        self.executor.block_on(Sandbox::read_file(&self.session, path)).map_err(EngineError::new)
    }

    fn write_file(&self, path: &str, contents: &[u8]) -> Result<(), EngineError> {
        self.executor
            .block_on(Sandbox::write_file(&self.session, path, contents))
            .map_err(EngineError::new)
    }

    fn list_dir(&self, path: &str) -> Result<Vec<DirEntry>, EngineError> {
        self.executor.block_on(Sandbox::list_dir(&self.session, path)).map_err(EngineError::new)
    }

    fn start_service(&self, service: &ServiceSpec) -> Result<Service, EngineError> {
        self.executor
            .block_on(Sandbox::start_service(&self.session, service))
            .map_err(EngineError::new)
    }
}

/// Object-safe view of a [`SessionEngine`]; every `SessionEngine` implements it.
pub trait DynSessionEngine {
    /// See [`SessionEngine::session_engine_name`].
    fn session_engine_name(&self) -> &'static str;

    /// See [`SessionEngine::start_session`].
    fn start_session_dyn(
        &self,
        config: &SessionConfig,
        status: &mut dyn FnMut(&str),
    ) -> Result<SessionInfo, EngineError>;

    /// See [`SessionEngine::open_session`].
    fn open_session_dyn(&self, id: &str) -> Result<Box<dyn DynSession + '_>, EngineError>;

    /// See [`SessionEngine::list_sessions`].
    fn list_sessions_dyn(&self) -> Result<Vec<SessionInfo>, EngineError>;

    /// See [`SessionEngine::stop_session`].
    fn stop_session_dyn(&self, id: &str) -> Result<(), EngineError>;

    /// See [`SessionEngine::pool_identity`].
    fn pool_identity_dyn(&self) -> Option<String>;

    /// See [`SessionEngine::pool_members`].
    fn pool_members_dyn(&self) -> Result<Vec<crate::PoolMember>, EngineError>;

    /// See [`SessionEngine::pool_create`].
    fn pool_create_dyn(&self, config: &SessionConfig, key: &str) -> Result<(), EngineError>;

    /// See [`SessionEngine::pool_claim`].
    fn pool_claim_dyn(
        &self,
        member: &crate::PoolMember,
    ) -> Result<Option<SessionInfo>, EngineError>;

    /// See [`SessionEngine::pool_remove`].
    fn pool_remove_dyn(&self, id: &str) -> Result<(), EngineError>;

    /// See [`SessionEngine::pool_lease_take`].
    fn pool_lease_take_dyn(
        &self,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<crate::PoolLease, EngineError>;

    /// See [`SessionEngine::pool_lease_release`].
    fn pool_lease_release_dyn(&self, holder: &str) -> Result<(), EngineError>;

    /// See [`SessionEngine::pool_lease_holder`].
    fn pool_lease_holder_dyn(&self) -> Result<Option<String>, EngineError>;
}

impl<E: SessionEngine> DynSessionEngine for E {
    fn session_engine_name(&self) -> &'static str {
        SessionEngine::session_engine_name(self)
    }

    fn start_session_dyn(
        &self,
        config: &SessionConfig,
        status: &mut dyn FnMut(&str),
    ) -> Result<SessionInfo, EngineError> {
        self.start_session(config, status).map_err(EngineError::new)
    }

    fn open_session_dyn(&self, id: &str) -> Result<Box<dyn DynSession + '_>, EngineError> {
        let session = self.open_session(id).map_err(EngineError::new)?;
        Ok(Box::new(Driven { executor: self, session }))
    }

    fn list_sessions_dyn(&self) -> Result<Vec<SessionInfo>, EngineError> {
        self.list_sessions().map_err(EngineError::new)
    }

    fn stop_session_dyn(&self, id: &str) -> Result<(), EngineError> {
        self.stop_session(id).map_err(EngineError::new)
    }

    fn pool_identity_dyn(&self) -> Option<String> {
        self.pool_identity()
    }

    fn pool_members_dyn(&self) -> Result<Vec<crate::PoolMember>, EngineError> {
        self.pool_members().map_err(EngineError::new)
    }

    fn pool_create_dyn(&self, config: &SessionConfig, key: &str) -> Result<(), EngineError> {
        self.pool_create(config, key).map_err(EngineError::new)
    }

    fn pool_claim_dyn(
        &self,
        member: &crate::PoolMember,
    ) -> Result<Option<SessionInfo>, EngineError> {
        self.pool_claim(member).map_err(EngineError::new)
    }

    fn pool_remove_dyn(&self, id: &str) -> Result<(), EngineError> {
        self.pool_remove(id).map_err(EngineError::new)
    }

    fn pool_lease_take_dyn(
        &self,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<crate::PoolLease, EngineError> {
        self.pool_lease_take(holder, ttl).map_err(EngineError::new)
    }

    fn pool_lease_release_dyn(&self, holder: &str) -> Result<(), EngineError> {
        self.pool_lease_release(holder).map_err(EngineError::new)
    }

    fn pool_lease_holder_dyn(&self) -> Result<Option<String>, EngineError> {
        self.pool_lease_holder().map_err(EngineError::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_policy_misfits() {
        let ws = PathBuf::from("/ws");
        let policy = SessionPolicy {
            net: false,
            mounts: vec![(PathBuf::from("/data"), false), (PathBuf::from("/out"), true)],
            publish: vec![8000],
            ..SessionPolicy::default()
        };
        let asks = |mounts: &[(&str, bool)], net, publish: &[u16]| ScriptAsks {
            mounts: mounts.iter().map(|(p, w)| (PathBuf::from(p), *w)).collect(),
            net,
            publish: publish.to_vec(),
            ..ScriptAsks::default()
        };
        let fits = |a: &ScriptAsks| policy.misfits(&ws, a);
        assert!(
            fits(&asks(&[("/ws/sub", true), ("/data/in", false), ("/out/x", true)], None, &[]))
                .is_empty()
        );
        assert!(fits(&asks(&[], Some(Net::Off), &[8000])).is_empty());
        let misfits =
            fits(&asks(&[("/data", true), ("/elsewhere", false)], Some(Net::On), &[9000]));
        assert_eq!(
            misfits,
            [
                "mount `/data`: the session mounts it read-only",
                "mount `/elsewhere:ro`: the session has no such mount",
                "`net = \"on\"`: the session has no network",
                "publish 9000: the session does not publish it",
            ]
        );
        assert!(
            fits(&asks(&[("/database", false)], None, &[])).len() == 1,
            "prefix of a name is not a parent"
        );
    }

    /// Every tightening the session does not hold is a misfit, never a warning: `net = "off"`
    /// with a network, a read-only mount it has writable, caps below its own or that it lacks.
    #[test]
    fn an_allowlist_is_a_tightening_a_session_with_a_network_does_not_hold() {
        let ws = PathBuf::from("/ws");
        let policy = SessionPolicy { net: true, ..SessionPolicy::default() };
        let allow = crate::Allow::parse(["pypi.org", "*.example.com:443"]).expect("list");
        let asks = ScriptAsks { net: Some(Net::On), allow: Some(allow), ..ScriptAsks::default() };
        insta::assert_snapshot!(policy.misfits(&ws, &asks).join("\n"), @r#"`net = ["pypi.org", "*.example.com:443"]`: the session reaches the whole network, not only these hosts"#);
        assert_eq!(
            asks.misfit_hint(&ws),
            "start a session that fits, `python-sandbox session start --net 'pypi.org,*.example.com:443'`, or run it on its own with `python-sandbox run`"
        );
        let offline = SessionPolicy { net: false, ..SessionPolicy::default() };
        assert_eq!(offline.misfits(&ws, &asks), ["`net = \"on\"`: the session has no network"]);
    }

    #[test]
    fn a_sessions_list_holds_a_script_whose_list_names_all_of_it_and_nothing_wider() {
        let ws = PathBuf::from("/ws");
        let list = |l: &str| crate::Allow::parse(l.split(',')).unwrap();
        let listed = SessionPolicy {
            net: true,
            allow: Some(list("pypi.org,files.pythonhosted.org")),
            ..SessionPolicy::default()
        };
        let asking = |net: Option<Net>, allow: Option<&str>| ScriptAsks {
            net,
            allow: allow.map(list),
            ..ScriptAsks::default()
        };
        let none: Vec<String> = Vec::new();
        // The session's own network, the same list, or a script's list wider than the session's.
        assert_eq!(listed.misfits(&ws, &asking(None, None)), none);
        let same = asking(Some(Net::On), Some("files.pythonhosted.org,pypi.org"));
        assert_eq!(listed.misfits(&ws, &same), none);
        let wider = asking(Some(Net::On), Some("pypi.org,files.pythonhosted.org,example.com"));
        assert_eq!(listed.misfits(&ws, &wider), none);
        // A script that lists less than the session reaches, or asks for the whole network.
        assert_eq!(
            listed.misfits(&ws, &asking(Some(Net::On), Some("pypi.org"))),
            [
                "`net = [\"pypi.org\"]`: the session reaches [\"files.pythonhosted.org\", \"pypi.org\"]"
            ]
        );
        assert_eq!(
            listed.misfits(&ws, &asking(Some(Net::On), None)),
            ["`net = \"on\"`: the session reaches only [\"files.pythonhosted.org\", \"pypi.org\"]"]
        );
        assert_eq!(
            listed.misfits(&ws, &asking(Some(Net::Off), None)),
            ["`net = \"off\"`: the session has a network"]
        );
        // A caller's list (which reaches the private addresses it names) holds a script's list
        // of names, but not one naming an address the script alone could not reach.
        let callers = SessionPolicy {
            allow: listed.allow.clone().map(|a| a.opening_private(true)),
            ..listed.clone()
        };
        assert_eq!(callers.misfits(&ws, &same), none);
        let private = SessionPolicy {
            allow: Some(list("10.1.2.3:5432").opening_private(true)),
            ..listed.clone()
        };
        assert_eq!(private.misfits(&ws, &asking(Some(Net::On), Some("10.1.2.3:5432"))).len(), 1);
        // The hint starts a session with the script's list.
        let flags = asking(Some(Net::On), Some("pypi.org,*.example.com")).start_flags(&ws);
        assert_eq!(flags, ["--net 'pypi.org,*.example.com'"]);
        // Stored and read back as given (a session's record and policy annotation).
        let stored = serde_json::to_string(&private).unwrap();
        assert_eq!(serde_json::from_str::<SessionPolicy>(&stored).unwrap(), private, "{stored}");
        let older: SessionPolicy =
            serde_json::from_str(r#"{"net":true,"mounts":[],"publish":[]}"#).unwrap();
        assert_eq!(older.allow, None, "a record without a list is the whole network");
    }

    #[test]
    fn tightenings_a_session_cannot_give_are_misfits() {
        let ws = PathBuf::from("/ws");
        let policy = SessionPolicy {
            net: true,
            allow: None,
            mounts: vec![
                (PathBuf::from("/data"), true),
                (PathBuf::from("/ro"), false),
                (PathBuf::from("/ro/out"), true),
                (PathBuf::from("/ws/locked"), false),
            ],
            publish: vec![],
            tmpfs_size: Some(1 << 30),
            limits: Limits { memory: Some(1 << 30), pids: Some(256), ..Limits::default() },
        };
        let asks = ScriptAsks {
            mounts: vec![
                (PathBuf::from("/data/in"), false),
                (PathBuf::from("/ws/sub"), false),
                (PathBuf::from("/ro"), false),
                (PathBuf::from("/ws/locked/x"), false),
                (PathBuf::from("/ws/locked/y"), true),
                (PathBuf::from("/my dir"), false),
            ],
            net: Some(Net::Off),
            allow: None,
            publish: vec![],
            tmpfs_size: Some(64 << 20),
            limits: Limits {
                memory: Some(512 << 20),
                cpus: Some(crate::Cpus::from_millis(500).expect("cpus")),
                pids: Some(256),
                ..Limits::default()
            },
            dependencies: false,
        };
        let misfits = policy.misfits(&ws, &asks).join("\n");
        insta::assert_snapshot!(misfits, @r#"
        mount `/data/in:ro`: the session mounts it read-write
        mount `/ws/sub:ro`: the session mounts it read-write
        mount `/ro:ro`: the session mounts `/ro/out` inside it read-write
        mount `/ws/locked/y`: the session mounts it read-only
        mount `/my dir:ro`: the session has no such mount
        `net = "off"`: the session has a network
        `tmpfs-size = "64m"`: the session's tmpfs cap is "1g", higher
        `memory = "512m"`: the session's memory limit is "1g", higher
        `cpus = 0.5`: the session has no cpu limit
        "#);
        insta::assert_snapshot!(asks.misfit_hint(&ws), @"start a session that fits, `python-sandbox session start --net off --mount /data/in:ro --mount /ws/sub:ro --mount /ro:ro --mount /ws/locked/x:ro --mount '/my dir:ro' --tmpfs-size 64m --memory 512m --cpus 0.5 --pids-limit 256`, or run it on its own with `python-sandbox run`");
        let fits = SessionPolicy {
            net: false,
            mounts: vec![(PathBuf::from("/data/in"), false), (PathBuf::from("/ws/sub"), false)],
            tmpfs_size: Some(64 << 20),
            limits: Limits {
                memory: Some(256 << 20),
                cpus: Some(crate::Cpus::from_millis(500).expect("cpus")),
                pids: Some(100),
                ..Limits::default()
            },
            ..SessionPolicy::default()
        };
        let asks = ScriptAsks {
            mounts: vec![(PathBuf::from("/data/in"), false), (PathBuf::from("/ws/sub"), false)],
            ..asks
        };
        assert_eq!(fits.misfits(&ws, &asks), Vec::<String>::new(), "caps at or below hold");
        let older = SessionPolicy { net: false, ..SessionPolicy::default() };
        let only_caps = ScriptAsks { mounts: vec![], net: None, ..asks.clone() };
        assert_eq!(older.misfits(&ws, &only_caps).len(), 4, "an older session shows no caps");
        let with_deps = ScriptAsks { dependencies: true, ..asks };
        assert!(with_deps.misfit_hint(&ws).starts_with("run it on its own"));
    }
}
