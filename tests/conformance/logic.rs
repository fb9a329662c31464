//! The conformance suite's pure parts under libtest (the suite itself is a custom runner, whose
//! `#[test]`s would never run): which engines a run selects, where a case is skipped and why,
//! and that a skip is counted as skipped, never as passed.

// The runner's modules as main.rs has them; only the pure parts are called here.
#![allow(dead_code, clippy::print_stdout, clippy::print_stderr)]

#[path = "cases.rs"]
mod cases;
#[path = "cli.rs"]
mod cli;
#[path = "engines.rs"]
mod engines;
#[path = "fixture.rs"]
mod fixture;
#[path = "harness.rs"]
mod harness;
#[path = "report.rs"]
mod report;

#[cfg(test)]
#[path = "logic_tests.rs"]
mod tests;
