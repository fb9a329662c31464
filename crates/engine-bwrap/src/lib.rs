//! Runs PEP 723 scripts with uv inside bubblewrap.
//!
//! Two phases:
//!
//! * **Prepare** ([`BwrapEngine::prepare`]): uv resolves and installs the script's dependencies
//!   into an environment keyed by a hash of (requires-python, dependencies, interpreter
//!   request, uv version), inside its own bwrap sandbox with the network on but without the
//!   workspace or `$HOME`; only uv's cache, the python dir and that one environment are
//!   writable. A lock file serializes concurrent prepares of the same key; a marker written
//!   last (outside the environment, so build scripts cannot forge it) makes it visible. Runs
//!   hold that lock shared while they use the environment and stamp its mtime as the last use;
//!   [`prune_envs`] (`python-sandbox reap`) removes environments unused for a maximum age, and
//!   the least recently used environments and packages while the cache is over its size cap.
//! * **Run** ([`BwrapEngine::run_prepared`]): the environment's interpreter runs the script
//!   directly (no uv), with the configured network. Environment and interpreter are
//!   read-only; the uv cache is not visible at all. The warm path is: key → marker → exec.
//!
//! The wall: `--unshare-all` always (net on is the sandbox's own namespace connected by pasta,
//! see [`sandbox_net::UserNet`]), `--unshare-user --disable-userns`, `--cap-drop ALL`, the seccomp wall
//! (`sandbox_core::WALL`), `--die-with-parent` (runs; a session outlives its starter, see
//! `session.rs`), `--new-session` unless stdin is a terminal and
//! the kernel blocks TIOCSTI (`dev.tty.legacy_tiocsti=0`), an unprivileged uid on the host too
//! (the caller's; for root, bwrap itself is started as 65534, see `stage.rs`), `/usr` and an
//! allowlisted `/etc` read-only, synthesized passwd/group, a new `/proc` with `/proc/sys` and
//! friends read-only and init's memory files masked (`plan::INIT_MEMORY`), minimal `/dev`, size-capped tmpfs `/tmp` and `/home/sandbox` (`HOME`), the
//! workspace read-write at its real path, extra mounts at their real paths, an empty
//! environment plus a small allowlist and explicit `--env`.
//!
//! # Calling it from the CLI
//!
//! ```text
//! let config = BwrapConfig { python: cli_python, ..BwrapConfig::from_env()? };
//! let engine = BwrapEngine::new(config)?;              // cheap: no uv, no namespaces probed
//! let env = engine.prepare(&spec, &mut |line| ui::status(line))?;   // "preparing python 3.12 …"
//! let outcome = engine.run_prepared(&spec, &env, RunIo { stdin: Stdin::Inherit,
//!     output: Output::Inherit /* or Sink(&mut ScrubbingSink) */, status: None, published: None })?;
//! for w in &outcome.warnings { ui::warning(w) }        // things that did not stop the run
//! exit(outcome.exit_code)                              // 128+N for signals; check outcome.timed_out
//! ```
//!
//! Or through [`sandbox_core::Engine::run`] (prepare + run, status lines to `io.status`).
//! [`BwrapEngine::check`] validates a spec up front (publish needs net on, `--env` values
//! filled). Errors are [`Error`]: `BwrapNotFound`, `BwrapTooOld` and `SandboxSetup` mean
//! "this engine cannot sandbox here" (point at `python-sandbox suggest`); `PythonNotFound`,
//! `Prepare`, mount and workspace refusals are user errors with `hint:` lines; the rest are IO.
//! Nothing ever falls back to running unsandboxed. [`probe`] (or `engine_detect::detect`)
//! answers "does bwrap work here" with a real namespace round-trip.
//!
//! uv: the host `uv` on `PATH` is used when present (its version is cached by binary
//! identity); otherwise uv [`PINNED_UV_VERSION`] is downloaded once from PyPI
//! ([`find_or_fetch_uv`]), sha256-checked before extraction, into `<cache>/bwrap/uv/`.
//!
//! The argv builder (`plan.rs`) is pure and snapshot-tested; `host.rs` gathers the facts it needs.

mod cache;
mod engine;
mod envs;
mod error;
mod fds;
mod fsutil;
mod host;
mod key;
mod launcher;
mod limits;
mod lockfile;
mod paths;
mod pin;
mod plan;
mod process;
mod seam;
mod session;
mod stage;
mod tools;
mod uv;
mod venv;

pub use engine::{BwrapConfig, BwrapEngine, PreparedEnv};
pub use envs::{
    CacheUsage, DEFAULT_CACHE_MAX_BYTES, DEFAULT_ENV_MAX_AGE, PrunedEnv, cache_usage, prune_envs,
};
pub use error::Error;
pub use host::{HostFacts, RootEntry};
pub use launcher::{BwrapLauncher, Detached, Ended, Launcher, SandboxStdio, Sandboxed, Start};
pub use limits::{Cgroup, CgroupPlan, Rlim, SandboxLimits};
pub use plan::{Access, Bind, Plan};
pub use seam::{Immediate, local_session};
pub use session::{Session, SessionConfig, SessionInfo, reap_sessions};
pub use uv::{
    PINNED_UV_VERSION, PINNED_WHEELS, PinnedWheel, UvBinary, UvOrigin, fetch_uv, find_or_fetch_uv,
    pinned_wheel,
};

/// Whether bwrap can create its namespaces here (a real, cheap round-trip); see
/// [`engine_detect::probe_bwrap`].
pub fn probe(path: Option<&std::ffi::OsStr>) -> engine_detect::Probe {
    engine_detect::probe_bwrap(path)
}

/// [`probe`] with its success memoized under the engine's cache for the rest of this boot
/// (see [`engine_detect::probe_bwrap_cached`]): what `run --engine auto` should call, since the
/// real probe costs two process spawns on every warm run.
pub fn probe_cached(config: &BwrapConfig) -> engine_detect::Probe {
    let memo = config.cache_dir.join("bwrap").join("probe-ok");
    engine_detect::probe_bwrap_cached(config.path.as_deref(), &memo)
}

#[cfg(test)]
mod tests;
