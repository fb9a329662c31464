//! The one integration-test binary of sandbox-core: data-driven tables with insta snapshots
//! first, proptest laws next, then the Sandbox protocol against the in-memory fake.

mod boundary;
mod engine;
mod fake;
#[path = "../shared/interactive.rs"]
#[allow(dead_code, reason = "the fake has no tty: only the stdin half of the contract runs here")]
mod interactive;
mod resolve;
mod scrub;
mod seccomp;
mod support;
mod wall_py;
