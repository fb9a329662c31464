//! Integration tests of engine-oci against real Docker and Podman. Each test runs on every
//! engine that answers here and prints `SKIPPED: <engine>: <reason>` for the others
//! (`ENGINE_OCI_SKIP=podman` skips one on purpose).

#![allow(clippy::print_stdout)]

mod fault;
mod forged;
mod hostile;
#[path = "../../../sandbox-core/tests/shared/interactive.rs"]
mod interactive;
mod pool;
mod prune;
mod publish;
mod race;
mod run;
mod session;
mod support;
mod wall;
