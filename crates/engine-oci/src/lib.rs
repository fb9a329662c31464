//! Runs PEP 723 scripts in Docker or Podman containers through the Docker Engine API
//! (bollard). One engine serves both: Podman through its Docker-compatible socket, started
//! privately (`podman system service --time=60`) when it is installed but no socket runs.
//!
//! Two phases, like the bwrap engine:
//!
//! * **Prepare** ([`OciEngine::prepare`]): a prepare container (network on, no workspace, uv with
//!   the host CA bundle) installs the dependencies into a named volume keyed by a hash of
//!   (image id, requires-python, dependencies): `python-sandbox-env-<hash>`. A second, empty
//!   volume `…-ready` is the completion marker, created last. No dependencies: no prepare.
//! * **Run** ([`OciEngine::run_prepared`]): a container mounts the environment read-only and
//!   runs the script with the configured network; output streams live; the exit code is the
//!   script's (128+N for signals); timeout, Ctrl-C and errors kill and remove the container.
//!
//! The wall (`plan.rs`): read-only rootfs, tmpfs `/tmp` and home, `cap_drop ALL`,
//! `no-new-privileges`, private IPC, an init process, pids/memory/cpu limits, ulimits no
//! higher than the host's hard limits, an unprivileged user (the caller, or 65534 for root:
//! see `workspace.rs`), `network_mode: none` when the network is off, ports published on
//! 127.0.0.1 unless an address is given (the same host port unless `0:PORT`, `ports.rs`), an empty environment plus an allowlist and explicit
//! `--env`, no host sockets. Everything carries the reaper's labels; [`OciEngine::new`] sweeps
//! expired and orphaned containers with one list call.
//!
//! Decisions worth knowing:
//!
//! * A root caller's container runs as 65534, never 0 (see `workspace.rs`): new files are handed
//!   back to root after the run, but existing root-owned files the sandbox did not create stay
//!   read-only to it unless their mode lets others write.
//! * After a podman run exits by itself (exit code in hand), its removal is handed to podman
//!   without waiting: podman queues it behind its own cleanup process (~200 ms) and finishes it
//!   after we have gone; should it not, the next sweep does. Timeouts, signals and errors remove
//!   before `run` returns, and so does every Docker run. The sweep reports only leftovers that
//!   were still running.
//! * Every container, run or session, enforces the one seccomp wall (`sandbox_core::WALL`) on
//!   top of the engine's default profile (`sandbox_core::oci_seccomp`). Pid 1 is the image's execute-only
//!   tini (`plan::INIT`), never the engine's own init: the script cannot open its memory.
//! * The environment is `sandbox_core::run_env` plus `PATH`, `PWD` and `VIRTUAL_ENV` (the image
//!   sets no `UV_*`; podman's `container=podman` is overridden); nothing of the host's
//!   environment reaches the script beyond the allowlist and explicit `--env`.
//! * Environment volumes are a cache: the container sweep never removes them. Each run stamps
//!   its environment's lock file (`<cache>/oci/locks/<volume>.lock`, mtime = last use) and holds
//!   it shared until its container references the volume; [`OciEngine::prune_envs`] (`reap`,
//!   and at most once a day at engine start) removes those unused for a maximum age, marker
//!   first, skipping any that is locked or referenced (see `envs.rs`).
//!
//! Warm sessions ([`Session`]) implement [`sandbox_core::Sandbox`] on a long-lived container
//! whose main process is an agent (idle watchdog and exec server on a unix socket in the
//! container's own `/tmp`, reached from the host through `/proc/<pid>/root`).
//!
//! ```text
//! let engine = OciEngine::new(OciConfig::from_env(Flavor::Docker))?;
//! let env = engine.prepare(&spec, &mut |line| eprintln!("{line}"))?;
//! let outcome = engine.run_prepared(&spec, &env, RunIo::inherit())?;
//! ```

mod agent;
mod client;
mod container;
mod engine;
mod envs;
mod error;
mod gate;
mod host;
#[cfg(test)]
mod hostile;
mod idmap;
mod netwall;
mod plan;
mod ports;
mod session;
mod sweep;
mod verify;
mod workspace;

pub use agent::AgentAddr;
pub use client::{Connection, Flavor};
pub use engine::{DEFAULT_IMAGE, IMAGE_ABI, OciConfig, OciEngine, PreparedEnv};
pub use envs::{DEFAULT_ENV_MAX_AGE, PrunedEnv};
pub use error::Error;
pub use plan::{Limits, Rootless};
pub use sandbox_core::ScriptOptions;
pub use session::record::local_session;
pub use session::{Session, SessionConfig, SessionInfo, SessionPolicy};
pub use sweep::Swept;

#[cfg(test)]
mod tests;
