//! Runs one script file in the sandbox with the caller's terminal, for manual checks:
//! `cargo run -p engine-bwrap --example run -- script.py [--net] [args...]`.

#![allow(clippy::print_stderr)]

use std::process::ExitCode;

use engine_bwrap::{BwrapConfig, BwrapEngine};
use sandbox_core::{Net, RunIo, RunSpec};

fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        eprintln!("usage: run SCRIPT [--net] [ARGS...]");
        return Ok(ExitCode::from(2));
    }
    let script = std::fs::canonicalize(args.remove(0))?;
    let net = if args.first().map(String::as_str) == Some("--net") {
        args.remove(0);
        Net::On
    } else {
        Net::Off
    };
    let spec = RunSpec {
        script,
        args,
        dependencies: Vec::new(),
        requires_python: None,
        mounts: Vec::new(),
        net,
        allow: None,
        publish: Vec::new(),
        env: Vec::new(),
        timeout: None,
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        limits: sandbox_core::Limits::NONE,
        workspace: std::env::current_dir()?,
    };
    let engine = BwrapEngine::new(BwrapConfig::from_env()?)?;
    let env = engine.prepare(&spec, &mut |line| eprintln!("{line}"))?;
    let outcome = engine.run_prepared(&spec, &env, RunIo::inherit())?;
    for warning in &outcome.warnings {
        eprintln!("warning: {warning}");
    }
    Ok(ExitCode::from(u8::try_from(outcome.exit_code).unwrap_or(1)))
}
