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
    Classify, DirEntry, EngineError, ExecRequest, Interactive, InteractiveExec, Net, OutputSink,
    RunOutcome, Sandbox, ScriptOptions, Service, ServiceSpec, SessionConfig,
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

/// What a session was started with, for checking the scripts run in it: mounts, network and
/// ports are fixed when the sandbox starts, on every engine.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct SessionPolicy {
    /// Whether the session has a network.
    pub net: bool,
    /// Extra mounts (real host paths) and whether each is writable.
    pub mounts: Vec<(PathBuf, bool)>,
    /// Ports published to the host.
    pub publish: Vec<u16>,
}

impl SessionPolicy {
    /// Pure: what of a script's own sandbox settings this session cannot give it, one line each
    /// (empty: it fits). `mounts` are canonical host paths with their writability; the
    /// workspace (always mounted read-write) covers everything below it.
    pub fn misfits(
        &self,
        workspace: &Path,
        mounts: &[(PathBuf, bool)],
        net: Net,
        publish: &[u16],
    ) -> Vec<String> {
        let mut out = Vec::new();
        for (path, writable) in mounts {
            let covered = path.starts_with(workspace)
                || self
                    .mounts
                    .iter()
                    .any(|(have, rw)| path.starts_with(have) && (*rw || !writable));
            if !covered {
                out.push(format!(
                    "mount `{}{}`: the session has no such mount",
                    path.display(),
                    if *writable { "" } else { ":ro" }
                ));
            }
        }
        // A script asking for no network in a session that has one is only warned about
        // (`net_warning`): its dependencies install inside the session, which needs the network.
        if net == Net::On && !self.net {
            out.push("`net = \"on\"`: the session has no network".to_owned());
        }
        for port in publish {
            if !self.publish.contains(port) {
                out.push(format!("publish {port}: the session does not publish it"));
            }
        }
        out
    }

    /// Pure: the warning for a script that asks for `net`, when the session cannot honour it
    /// (a script's `net = "off"` in a session with a network).
    pub fn net_warning(&self, net: Net) -> Option<String> {
        (net == Net::Off && self.net).then(|| {
            "the script asks for `net = \"off\"` but this session has a network; it runs with it (start the session with `--net off` to enforce it)".to_owned()
        })
    }
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
        };
        let fits = |mounts: &[(&str, bool)], net, publish: &[u16]| {
            let mounts: Vec<(PathBuf, bool)> =
                mounts.iter().map(|(p, w)| (PathBuf::from(p), *w)).collect();
            policy.misfits(&ws, &mounts, net, publish)
        };
        assert!(
            fits(&[("/ws/sub", true), ("/data/in", false), ("/out/x", true)], Net::Off, &[])
                .is_empty()
        );
        assert!(fits(&[], Net::Off, &[8000]).is_empty());
        let misfits = fits(&[("/data", true), ("/elsewhere", false)], Net::On, &[9000]);
        assert_eq!(
            misfits,
            [
                "mount `/data`: the session has no such mount",
                "mount `/elsewhere:ro`: the session has no such mount",
                "`net = \"on\"`: the session has no network",
                "publish 9000: the session does not publish it",
            ]
        );
        assert!(
            fits(&[("/database", false)], Net::Off, &[]).len() == 1,
            "prefix of a name is not a parent"
        );
        assert_eq!(policy.net_warning(Net::Off), None);
        let open = SessionPolicy { net: true, ..policy.clone() };
        assert!(open.net_warning(Net::Off).is_some());
        assert_eq!(open.net_warning(Net::On), None);
    }
}
