//! The engine seam's session half for docker and podman: [`OciEngine`] as a
//! `sandbox_core::SessionEngine`, [`Session`] as a `sandbox_core::WarmSession`, and the warm
//! fast path ([`local_session`]) that serves a session from its host record without
//! connecting to the daemon at all.

use std::path::Path;

use sandbox_core::{
    Driven, DynSession, Executor, OutputSink, RunOutcome, ScriptOptions, SessionConfig,
    SessionEngine, SessionInfo, SessionPolicy, WarmSession,
};

use crate::engine::OciEngine;
use crate::error::Result;
use crate::session::Session;

impl Executor for OciEngine {
    fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        OciEngine::block_on(self, future)
    }
}

impl SessionEngine for OciEngine {
    type Session = Session;

    fn start_session(
        &self,
        config: &SessionConfig,
        _status: &mut dyn FnMut(&str),
    ) -> Result<SessionInfo> {
        OciEngine::start_session(self, config)
    }

    fn open_session(&self, id: &str) -> Result<Session> {
        self.session(id)
    }

    fn list_sessions(&self) -> Result<Vec<SessionInfo>> {
        OciEngine::list_sessions(self)
    }

    fn stop_session(&self, id: &str) -> Result<()> {
        OciEngine::stop_session(self, id)
    }
}

impl WarmSession for Session {
    fn workspace(&self) -> &str {
        Session::workspace(self)
    }

    fn policy(&self) -> Option<SessionPolicy> {
        Session::policy(self).cloned()
    }

    fn secrets(&self) -> &[String] {
        Session::secrets(self)
    }

    fn scripts_run(&self) -> u64 {
        Session::scripts_run(self)
    }

    fn note_script(&self) {
        Session::note_script(self);
    }

    async fn run_script(
        &self,
        script: &Path,
        options: &ScriptOptions,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome> {
        self.run_script_with(script, options, output).await
    }
}

/// A current-thread runtime: all a session served by its agent needs.
struct Local(tokio::runtime::Runtime);

impl Executor for Local {
    fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.0.block_on(future)
    }
}

/// Session `id` of `flavor` opened from its record under `runtime_dir`, served by its agent:
/// no daemon connection, no API call. `None` sends the caller down the connected path (no
/// record, another engine's session, the agent gone); a command that then finds the agent
/// gone fails with `Error::NoSession` before anything ran, so retrying it connected never
/// runs it twice.
pub fn local_session(
    runtime_dir: &Path,
    id: &str,
    flavor: crate::Flavor,
) -> Option<Box<dyn DynSession>> {
    let session = Session::local(runtime_dir, id, Some(flavor))?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
    Some(Box::new(Driven { executor: Local(runtime), session }))
}
