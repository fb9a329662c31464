//! Times the warm path (engine setup + prepare hit + run) of a hello-world script against
//! bare `uv run`, the comparison the engine's performance target is stated in:
//! `cargo run --release -p engine-bwrap --example warm -- [iterations]`.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use engine_bwrap::{BwrapConfig, BwrapEngine};
use sandbox_core::{Net, Output, RunIo, RunSpec, Stdin};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let iterations: u32 = std::env::args().nth(1).and_then(|n| n.parse().ok()).unwrap_or(20);
    let workspace =
        std::env::temp_dir().join(format!("python-sandbox-warm-{}", std::process::id()));
    std::fs::create_dir_all(&workspace)?;
    let script = workspace.join("hello.py");
    std::fs::write(&script, "# /// script\n# dependencies = []\n# ///\nprint('hello')\n")?;
    let spec = RunSpec {
        script: script.clone(),
        args: Vec::new(),
        dependencies: Vec::new(),
        requires_python: None,
        mounts: Vec::new(),
        net: Net::Off,
        allow: None,
        publish: Vec::new(),
        env: Vec::new(),
        timeout: None,
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        limits: sandbox_core::Limits::NONE,
        workspace: workspace.clone(),
    };
    let config = BwrapConfig::from_env()?;
    let uv = engine_bwrap::find_or_fetch_uv(&config.cache_dir, config.path.as_deref(), &mut |l| {
        eprintln!("{l}")
    })?;

    // Warm both paths once.
    let engine = BwrapEngine::new(config.clone())?;
    let env = engine.prepare(&spec, &mut |l| eprintln!("{l}"))?;
    let uv_run = || {
        Command::new(&uv.path)
            .args(["run", "--no-project", "--quiet"])
            .arg(&script)
            .current_dir(&workspace)
            .stdout(Stdio::null())
            .status()
    };
    uv_run()?;

    let mut ours = Duration::ZERO;
    let mut theirs = Duration::ZERO;
    let (mut setup, mut prepare) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..iterations {
        let start = Instant::now();
        // What `run --engine auto` does first; memoized after the first success.
        assert!(engine_bwrap::probe_cached(&config).available);
        let engine = BwrapEngine::new(config.clone())?;
        setup += start.elapsed();
        let env = engine.prepare(&spec, &mut |_| {})?;
        prepare += start.elapsed();
        let io = RunIo {
            stdin: Stdin::Null,
            output: Output::Inherit,
            status: None,
            published: None,
            started: None,
        };
        let outcome = engine.run_prepared(&spec, &env, io)?;
        assert_eq!(outcome.exit_code, 0);
        ours += start.elapsed();

        let start = Instant::now();
        uv_run()?;
        theirs += start.elapsed();
    }
    let ours = ours / iterations;
    let theirs = theirs / iterations;
    println!(
        "probe (memoized) + engine setup {:?}, + prepare hit {:?}",
        setup / iterations,
        prepare / iterations
    );
    println!(
        "warm bwrap run: {ours:?}  bare `uv run` (uv {}): {theirs:?}  ratio {:.2} (target <= 0.80)  env {}",
        uv.version,
        ours.as_secs_f64() / theirs.as_secs_f64(),
        env.dir.display()
    );
    std::fs::remove_dir_all(&workspace)?;
    Ok(())
}
