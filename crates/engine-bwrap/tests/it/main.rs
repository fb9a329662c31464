//! Real-bwrap tests: small scripts run in the actual sandbox and check what they can and
//! cannot see or do. Gated on the bwrap probe (printing `SKIPPED: bwrap: reason`); the cache
//! (uv, environments) lives in cargo's target tmpdir so later runs are warm.

// Test helpers report skips and progress on stdout; the harness captures it.
#![allow(clippy::print_stdout)]

#[path = "../../../sandbox-core/tests/shared/builtin_net.rs"]
mod builtin_net;
mod escapes;
#[path = "../../../sandbox-core/tests/shared/interactive.rs"]
mod interactive;
mod lab;
mod lifecycle;
mod netlab;
mod poison;
mod prune;
mod publish;
mod race;
mod relay;
mod session;
mod support;
mod uv;
mod wall;
