//! Shared fixtures: an engine with a fake home full of secrets, a workspace, and a runner
//! that captures output.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use engine_bwrap::{BwrapConfig, BwrapEngine, PreparedEnv};
use sandbox_core::{Captured, EnvVar, Mount, Net, Output, RunIo, RunOutcome, RunSpec, Stdin};

pub(crate) struct Fixture {
    pub(crate) engine: BwrapEngine,
    pub(crate) home: tempfile::TempDir,
    pub(crate) workspace: tempfile::TempDir,
}

/// `None` (after printing why) when bwrap cannot sandbox here.
pub(crate) fn fixture() -> Option<Fixture> {
    fixture_with(false)
}

/// Like [`fixture`], optionally with the engine's SIGINT/SIGTERM/SIGHUP handling on.
pub(crate) fn fixture_with(handle_signals: bool) -> Option<Fixture> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    let verdict = PROBE.get_or_init(|| {
        let probe = engine_bwrap::probe(std::env::var_os("PATH").as_deref());
        if probe.available {
            Ok(())
        } else {
            Err(probe.reason.lines().next().unwrap_or_default().to_owned())
        }
    });
    if let Err(reason) = verdict {
        println!("SKIPPED: bwrap: {reason}");
        return None;
    }
    let home = tempfile::tempdir().expect("home");
    for (rel, content) in [
        (".ssh/id_rsa", "PRIVATE KEY"),
        (".aws/credentials", "aws_secret"),
        (".netrc", "machine x password y"),
    ] {
        let path = home.path().join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, content).expect("write secret");
    }
    let workspace = tempfile::tempdir().expect("workspace");
    let config = BwrapConfig {
        cache_dir: cache_dir(),
        home: home.path().to_owned(),
        // Debian's python, not the pyenv shims: deterministic and outside any home.
        path: Some("/usr/local/bin:/usr/bin:/bin".into()),
        bwrap: None,
        uv: None,
        python: None,
        handle_signals,
        runtime_dir: cache_dir().join("run"),
        builtin_relay: true,
        lan: sandbox_core::Lan::Refused,
        cache_max_bytes: engine_bwrap::DEFAULT_CACHE_MAX_BYTES,
    };
    let engine = BwrapEngine::new(config).expect("engine");
    Some(Fixture { engine, home, workspace })
}

/// [`fixture`] for a test of what only pasta gives (DNS and raw sockets inside, published
/// ports, the network's failure modes): `None`, after printing why, where pasta is missing or
/// cannot open `/dev/net/tun` as the user it runs as (no udev: `cargo xtask ci` gives the
/// device udev's mode), so the engine serves net on through its built-in proxy instead.
pub(crate) fn pasta_fixture() -> Option<Fixture> {
    let f = fixture()?;
    if let Err(no) = engine_detect::pasta(f.engine.config().path.as_deref()) {
        println!("SKIPPED: pasta: {}", no.why());
        return None;
    }
    Some(f)
}

/// `PSBX_TEST_CACHE` overrides it, for running the binary as another user (psbx-rootless),
/// who cannot write cargo's target dir.
pub(crate) fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PSBX_TEST_CACHE") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("engine-bwrap-cache")
}

impl Fixture {
    pub(crate) fn spec(&self, script: &str) -> RunSpec {
        let path = self.workspace.path().join("script.py");
        std::fs::write(&path, script).expect("write script");
        RunSpec {
            script: path,
            args: Vec::new(),
            dependencies: Vec::new(),
            requires_python: None,
            mounts: Vec::new(),
            net: Net::Off,
            allow: None,
            publish: Vec::new(),
            env: Vec::new(),
            timeout: Some(Duration::from_secs(120)),
            tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
            limits: sandbox_core::Limits::NONE,
            workspace: self.workspace.path().to_owned(),
        }
    }

    pub(crate) fn prepare(&self, spec: &RunSpec) -> PreparedEnv {
        self.engine.prepare(spec, &mut |line| println!("status: {line}")).expect("prepare")
    }

    /// Runs and captures; panics on engine errors.
    pub(crate) fn run(&self, spec: &RunSpec) -> (RunOutcome, Captured) {
        let (outcome, captured) = run_on(&self.engine, spec);
        println!(
            "exit {} stdout {:?} stderr {:?}",
            outcome.exit_code,
            captured.stdout_lossy(),
            captured.stderr_lossy()
        );
        (outcome, captured)
    }

    pub(crate) fn run_ok(&self, spec: &RunSpec) -> String {
        let (outcome, captured) = self.run(spec);
        assert_eq!(outcome.exit_code, 0, "stderr: {}", captured.stderr_lossy());
        captured.stdout_lossy()
    }
}

/// An engine like the fixture's with a cache of its own.
pub(crate) fn own_cache(fx: &Fixture) -> (tempfile::TempDir, engine_bwrap::BwrapEngine) {
    let cache = tempfile::tempdir().expect("cache");
    let config = engine_bwrap::BwrapConfig {
        cache_dir: cache.path().to_owned(),
        ..fx.engine.config().clone()
    };
    (cache, engine_bwrap::BwrapEngine::new(config).expect("engine"))
}

/// `Engine::run` (prepare and run) on `engine` with no input, its output captured; panics on
/// engine errors.
pub(crate) fn run_on(engine: &engine_bwrap::BwrapEngine, spec: &RunSpec) -> (RunOutcome, Captured) {
    let mut captured = Captured::default();
    let outcome = sandbox_core::Engine::run(engine, spec, quiet_io(&mut captured)).expect("run");
    (outcome, captured)
}

/// No input; the output into `captured`.
fn quiet_io(captured: &mut Captured) -> RunIo<'_> {
    RunIo {
        stdin: Stdin::Null,
        output: Output::Sink(captured),
        status: None,
        published: None,
        started: None,
    }
}

/// `engine.run_prepared` with no input, its output captured.
pub(crate) fn run_prepared(
    engine: &engine_bwrap::BwrapEngine,
    spec: &RunSpec,
    env: &PreparedEnv,
) -> (Result<RunOutcome, engine_bwrap::Error>, Captured) {
    let mut captured = Captured::default();
    let outcome = engine.run_prepared(spec, env, quiet_io(&mut captured));
    (outcome, captured)
}

pub(crate) fn env(name: &str, value: &str) -> EnvVar {
    EnvVar { name: name.to_owned(), value: Some(value.to_owned()) }
}

pub(crate) fn mount(path: &Path, mode: sandbox_core::MountMode) -> Mount {
    Mount { path: path.to_owned(), mode }
}

/// Host processes whose command line contains `needle` (NUL-separated argv).
pub(crate) fn host_processes_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("proc").flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if text.contains(needle) {
                found.push(format!("{}: {text}", entry.file_name().to_string_lossy()));
            }
        }
    }
    found
}
