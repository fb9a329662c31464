//! The engine seam's session half for bwrap: [`BwrapEngine`] as a
//! `sandbox_core::SessionEngine`, [`Session`] as a `sandbox_core::WarmSession`, and the warm
//! fast path ([`local_session`]) that opens a session from its record without setting up an
//! engine (no host facts gathered, no tool checks: the record pins the sandbox).

use std::path::Path;

use sandbox_core::{
    Driven, DynSession, Executor, OutputSink, RunOutcome, ScriptOptions, SessionConfig,
    SessionEngine, SessionInfo, SessionPolicy, WarmSession,
};

use crate::engine::{BwrapConfig, BwrapEngine};
use crate::error::Result;
use crate::session::Session;

/// Drives the futures of a bwrap session: they do their IO blocking and are ready on the
/// first poll, so no runtime is needed (a future that is not ready is polled again after a
/// millisecond rather than hanging: nothing here registers a waker).
#[derive(Debug, Clone, Copy, Default)]
pub struct Immediate;

impl Executor for Immediate {
    fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        struct Noop;
        impl std::task::Wake for Noop {
            fn wake(self: std::sync::Arc<Self>) {}
        }
        let waker = std::task::Waker::from(std::sync::Arc::new(Noop));
        let mut cx = std::task::Context::from_waker(&waker);
        let mut future = std::pin::pin!(future);
        loop {
            if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
                return out;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

impl Executor for BwrapEngine {
    fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        Immediate.block_on(future)
    }
}

impl SessionEngine for BwrapEngine {
    type Session = Session;

    fn start_session(
        &self,
        config: &SessionConfig,
        status: &mut dyn FnMut(&str),
    ) -> Result<SessionInfo> {
        BwrapEngine::start_session(self, config, status)
    }

    fn open_session(&self, id: &str) -> Result<Session> {
        self.session(id)
    }

    fn list_sessions(&self) -> Result<Vec<SessionInfo>> {
        BwrapEngine::list_sessions(self)
    }

    fn stop_session(&self, id: &str) -> Result<()> {
        BwrapEngine::stop_session(self, id)
    }
}

impl WarmSession for Session {
    fn workspace(&self) -> &str {
        Session::workspace(self)
    }

    fn policy(&self) -> Option<SessionPolicy> {
        Some(SessionPolicy {
            net: self.net(),
            mounts: self.mounts().to_vec(),
            publish: self.ports().iter().map(|(port, _)| *port).collect(),
        })
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

/// Session `id` of this user opened from its record, without an engine; `None` when there is
/// no such running session (the caller looks elsewhere).
pub fn local_session(config: &BwrapConfig, id: &str) -> Option<Box<dyn DynSession>> {
    let session = crate::session::open(&config.runtime_dir, &config.cache_dir, id).ok()?;
    Some(Box::new(Driven { executor: Immediate, session }))
}
