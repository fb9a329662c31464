//! [`engine_native::NativeEngine`] end to end: engine-bwrap's pipeline (prepare, the
//! environment cache, the run) with the native sandbox as its launcher.

use std::path::{Path, PathBuf};
use std::time::Duration;

use engine_bwrap::BwrapConfig;
use engine_native::NativeEngine;
use sandbox_core::{Captured, Engine, Net, Output, RunIo, RunOutcome, RunSpec, Stdin};

pub(crate) struct EngineFixture {
    _base: super::Fixture,
    pub(crate) workspace: PathBuf,
    pub(crate) engine: NativeEngine,
}

pub(crate) fn engine_fixture() -> EngineFixture {
    let base = super::fixture();
    let (home, workspace) = (base.home.clone(), base.workspace.clone());
    // One cache per user for the whole test binary: the environment is warm after the first.
    let cache_dir = std::env::temp_dir()
        .join(format!("engine-native-test-cache-{}", rustix::process::getuid().as_raw()));
    let config = BwrapConfig {
        runtime_dir: cache_dir.join("run"),
        cache_dir,
        home,
        path: Some("/usr/local/bin:/usr/bin:/bin".into()),
        bwrap: None,
        uv: None,
        python: Some(super::PYTHON.into()),
        handle_signals: false,
        builtin_relay: true,
        lan: sandbox_core::Lan::Refused,
        cache_max_bytes: engine_bwrap::DEFAULT_CACHE_MAX_BYTES,
    };
    let engine = NativeEngine::new(config).unwrap();
    EngineFixture { _base: base, workspace, engine }
}

pub(crate) fn spec(f: &EngineFixture, script: &str) -> RunSpec {
    let path = f.workspace.join("script.py");
    std::fs::write(&path, script).unwrap();
    RunSpec {
        script: path,
        args: vec!["one".into()],
        dependencies: Vec::new(),
        requires_python: None,
        mounts: Vec::new(),
        net: Net::Off,
        allow: None,
        publish: Vec::new(),
        env: Vec::new(),
        timeout: Some(Duration::from_secs(60)),
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        limits: sandbox_core::Limits::NONE,
        workspace: f.workspace.clone(),
    }
}

fn run(f: &EngineFixture, spec: &RunSpec) -> (RunOutcome, Captured) {
    let mut captured = Captured::default();
    let io = RunIo {
        stdin: Stdin::Bytes(b"from stdin".to_vec()),
        output: Output::Sink(&mut captured),
        status: None,
        published: None,
        started: None,
    };
    let outcome = f.engine.run(spec, io).unwrap();
    (outcome, captured)
}

fn runs_a_script() {
    let f = engine_fixture();
    assert_eq!(f.engine.name(), "native");
    let script = "import os, sys\nprint(sys.argv[1], sys.stdin.read(), os.getcwd() == os.environ['PWD'])\nprint(sorted(os.listdir(os.environ['HOME'])), file=sys.stderr)\nopen('out.txt', 'w').write('x')\nsys.exit(7)\n";
    let (outcome, captured) = run(&f, &spec(&f, script));
    assert_eq!(outcome.exit_code, 7, "{}", captured.stderr_lossy());
    assert_eq!(captured.stdout_lossy(), "one from stdin True\n");
    assert_eq!(captured.stderr_lossy(), "[]\n");
    assert!(f.workspace.join("out.txt").exists());
    // The same environment, warm.
    let (again, _) = run(&f, &spec(&f, "print('hi')\n"));
    assert_eq!(again.exit_code, 0);
}

#[test]
fn the_native_engine_runs_a_script_through_the_shared_pipeline() {
    super::as_root_and_rootless(
        "engine::the_native_engine_runs_a_script_through_the_shared_pipeline",
        runs_a_script,
    );
}

fn holds_limits() {
    let f = engine_fixture();
    let mut s = spec(
        &f,
        "import resource\nprint(resource.getrlimit(resource.RLIMIT_DATA)[0] if resource.getrlimit(resource.RLIMIT_DATA)[0] > 0 else 'cgroup')\nx = bytearray(400 << 20)\nprint('allocated')\n",
    );
    s.limits.memory = Some(200 << 20);
    let (outcome, captured) = run(&f, &s);
    assert!(!captured.stdout_lossy().contains("allocated"), "{}", captured.stdout_lossy());
    assert_ne!(outcome.exit_code, 0);
}

#[test]
fn a_memory_limit_holds_on_the_native_engine() {
    super::as_root_and_rootless("engine::a_memory_limit_holds_on_the_native_engine", holds_limits);
}

fn prepares_and_runs_with_net() {
    if !Path::new("/usr/bin/pasta").exists() {
        eprintln!("SKIPPED: native net on: pasta is not installed");
        return;
    }
    let f = engine_fixture();
    let mut s = spec(&f, "import six\nprint(six.__name__)\n");
    s.dependencies = vec!["six".to_owned()];
    s.net = Net::On;
    let (outcome, captured) = run(&f, &s);
    assert_eq!(outcome.exit_code, 0, "{}", captured.stderr_lossy());
    assert_eq!(captured.stdout_lossy(), "six\n");
}

#[test]
fn the_native_engine_prepares_dependencies_in_its_own_sandboxes() {
    super::as_root_and_rootless(
        "engine::the_native_engine_prepares_dependencies_in_its_own_sandboxes",
        prepares_and_runs_with_net,
    );
}

/// Net on where pasta is not installed and the relay is turned off (or no tun device can be
/// opened): the shared contract (`builtin_net.rs`), with the engine's own cache so the install
/// goes through the proxy, not a warm environment.
fn prepares_and_runs_through_the_builtin_proxy() {
    let mut f = engine_fixture();
    let uid = rustix::process::getuid().as_raw();
    let scratch = std::env::temp_dir()
        .join(format!("engine-native-builtin-net-{uid}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let mut config = f.engine.config().clone();
    config.path = Some(super::builtin_net::path_without_pasta(&scratch.join("bin")));
    config.cache_dir = scratch.join("cache");
    config.runtime_dir = scratch.join("cache/run");
    config.builtin_relay = false;
    assert!(engine_native::builtin_net_applies(&config));
    assert!(!engine_native::relay_applies(&config));
    assert!(engine_native::net_note(&config).is_some());
    f.engine = NativeEngine::new(config).unwrap();
    let service = super::builtin_net::HostService::start();
    let mut s = service.spec(spec(&f, ""));
    assert!(f.engine.check(&s).is_ok());
    let (outcome, captured) = run(&f, &s);
    let _ = std::fs::remove_dir_all(&scratch);
    assert_eq!(outcome.exit_code, 0, "{}{}", captured.stdout_lossy(), captured.stderr_lossy());
    service.check(&captured.stdout_lossy());
    // What only pasta gives is refused by name.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    s.publish = vec![sandbox_core::Publish::same(free)];
    let err = f.engine.check(&s).unwrap_err().to_string();
    assert!(err.contains("publishing a port needs pasta"), "{err}");
}

/// Net on where pasta is not installed: the built-in relay. A dependency installs through it
/// (the engine's own cache, so nothing is warm), and the script gets plain TCP and UDP, no
/// proxy in its environment, and the host's own address refused.
fn prepares_and_runs_through_the_relay() {
    if !sandbox_net::relay_available() {
        eprintln!("SKIPPED: native relay: no tun device to open here");
        return;
    }
    let mut f = engine_fixture();
    let uid = rustix::process::getuid().as_raw();
    let scratch =
        std::env::temp_dir().join(format!("engine-native-relay-{uid}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let mut config = f.engine.config().clone();
    config.path = Some(super::builtin_net::path_without_pasta(&scratch.join("bin")));
    config.cache_dir = scratch.join("cache");
    config.runtime_dir = scratch.join("cache/run");
    assert!(engine_native::relay_applies(&config));
    assert!(engine_native::net_note(&config).is_none());
    f.engine = NativeEngine::new(config).unwrap();
    let service = super::builtin_net::HostService::start();
    let s = service.relay_spec(spec(&f, ""));
    let (outcome, captured) = run(&f, &s);
    let _ = std::fs::remove_dir_all(&scratch);
    let out = captured.stdout_lossy();
    assert_eq!(outcome.exit_code, 0, "{out}{}", captured.stderr_lossy());
    service.relay_check(&out);
}

#[test]
fn without_pasta_net_on_gets_the_relay() {
    super::as_root_and_rootless(
        "engine::without_pasta_net_on_gets_the_relay",
        prepares_and_runs_through_the_relay,
    );
}

#[test]
fn without_pasta_net_on_goes_through_the_builtin_proxy() {
    super::as_root_and_rootless(
        "engine::without_pasta_net_on_goes_through_the_builtin_proxy",
        prepares_and_runs_through_the_builtin_proxy,
    );
}
