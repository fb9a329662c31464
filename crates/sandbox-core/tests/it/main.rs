//! The one integration-test binary of sandbox-core: data-driven tables with insta snapshots
//! first, proptest laws next, then the Sandbox protocol against the in-memory fake.

mod boundary;
mod engine;
mod fake;
mod resolve;
mod scrub;
mod seccomp;
mod support;
