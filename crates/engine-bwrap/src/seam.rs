//! What the session half needs beyond `session.rs` (which implements
//! `sandbox_core::SessionEngine` for [`BwrapEngine`], whichever its launcher, and
//! `WarmSession` for its sessions): an
//! [`Executor`] for futures that never wait, and the warm fast path ([`local_session`]) that
//! opens a session from its record without setting up an engine (no host facts gathered, no
//! tool checks: the record pins the sandbox).

use sandbox_core::{Driven, DynSession, Executor};

use crate::engine::{BwrapConfig, BwrapEngine};

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

/// Session `id` of this user that `launcher` (`bwrap`, `native`) started, opened from its
/// record without an engine; `None` when there is no such running session (the caller looks
/// elsewhere).
pub fn local_session(
    config: &BwrapConfig,
    launcher: &'static str,
    id: &str,
) -> Option<Box<dyn DynSession>> {
    let session = crate::session::open(config, launcher, id).ok()?;
    Some(Box::new(Driven { executor: Immediate, session }))
}
