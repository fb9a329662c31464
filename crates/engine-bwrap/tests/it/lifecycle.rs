//! Exit codes, timeouts, process-tree teardown, dependencies and the warm path.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sandbox_core::Net;

use crate::support::{fixture, host_processes_with};

#[test]
fn exit_codes_come_through() {
    let Some(f) = fixture() else { return };
    let (outcome, _) = f.run(&f.spec("import sys\nsys.exit(42)\n"));
    assert_eq!((outcome.exit_code, outcome.timed_out), (42, false));
    let (outcome, _) = f.run(&f.spec("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n"));
    assert_eq!(outcome.exit_code, 143);
    let (outcome, captured) = f.run(&f.spec("raise SystemExit('boom')\n"));
    assert_eq!(outcome.exit_code, 1);
    assert!(captured.stderr_lossy().contains("boom"));
}

#[test]
fn timeout_kills_the_whole_tree() {
    let Some(f) = fixture() else { return };
    let mut spec = f.spec(
        "import subprocess, time\n\
         subprocess.Popen(['sleep', '987'])\n\
         subprocess.Popen(['sh', '-c', 'sleep 986 & wait'], start_new_session=True)\n\
         print('started', flush=True)\n\
         time.sleep(600)\n",
    );
    spec.timeout = Some(Duration::from_secs(3));
    let start = Instant::now();
    let (outcome, captured) = f.run(&spec);
    assert!(outcome.timed_out);
    assert!(start.elapsed() < Duration::from_secs(30));
    assert_eq!(captured.stdout_lossy(), "started\n");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(host_processes_with("sleep 987"), Vec::<String>::new());
    assert_eq!(host_processes_with("sleep 986"), Vec::<String>::new());
}

#[test]
fn background_children_die_with_the_script() {
    let Some(f) = fixture() else { return };
    let spec = f.spec(
        "import subprocess\n\
         subprocess.Popen(['sleep', '985'], start_new_session=True)\n\
         print('bye')\n",
    );
    assert_eq!(f.run_ok(&spec), "bye\n");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(host_processes_with("sleep 985"), Vec::<String>::new());
}

#[test]
fn dependencies_install_in_prepare_and_import_with_net_off() {
    let Some(f) = fixture() else { return };
    let mut spec = f.spec("import idna\nprint(idna.encode('ドメイン.テスト').decode())\n");
    spec.dependencies = vec!["idna>=3".to_owned()];
    spec.net = Net::Off;
    let env = f.prepare(&spec);
    let again = f.prepare(&spec);
    assert!(!again.fresh, "the second prepare must reuse the environment");
    assert_eq!(env.dir, again.dir);
    let out = f.run_ok(&spec);
    assert_eq!(out, "xn--eckwd4c7c.xn--zckzah\n");
}

#[test]
fn concurrent_prepares_of_one_key_agree() {
    let Some(f) = fixture() else { return };
    let mut spec = f.spec("print('x')\n");
    // A key no other test uses, so both threads race on a cold environment.
    spec.requires_python = Some(format!(">=3.8,!=3.0.{}", std::process::id()));
    let marker = crate::support::cache_dir().join("bwrap/envs");
    let before = std::fs::read_dir(&marker).map(|d| d.count()).unwrap_or(0);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| f.engine.prepare(&spec, &mut |_| {}).expect("prepare a"));
        let b = s.spawn(|| f.engine.prepare(&spec, &mut |_| {}).expect("prepare b"));
        (a.join().expect("a"), b.join().expect("b"))
    });
    assert_eq!(a.dir, b.dir);
    assert!(a.fresh != b.fresh, "exactly one of them builds");
    assert!(std::fs::read_dir(&marker).map(|d| d.count()).unwrap_or(0) > before);
    assert_eq!(f.run_ok(&spec), "x\n");
}

#[test]
fn warm_runs_do_not_prepare_again() {
    let Some(f) = fixture() else { return };
    let spec = f.spec("print('warm')\n");
    f.prepare(&spec);
    let start = Instant::now();
    let env = f.prepare(&spec);
    assert!(!env.fresh);
    assert!(start.elapsed() < Duration::from_millis(200), "{:?}", start.elapsed());
    assert_eq!(f.run_ok(&spec), "warm\n");
}

#[test]
fn sigterm_to_the_caller_ends_the_whole_sandbox() {
    let Some(f) = crate::support::fixture_with(true) else { return };
    let started = f.workspace.path().join("started");
    let spec = f.spec(
        "import subprocess, time\n\
         subprocess.Popen(['sleep', '984'], start_new_session=True)\n\
         open('started', 'w').close()\n\
         time.sleep(600)\n",
    );
    let killer = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !started.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::TERM)
            .expect("signal ourselves");
    });
    let start = Instant::now();
    let (outcome, _) = f.run(&spec);
    killer.join().expect("killer");
    assert!(!outcome.timed_out);
    assert_eq!(outcome.exit_code, 128 + 15, "the tree is killed; the exit code names SIGTERM");
    assert!(start.elapsed() < Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(host_processes_with("sleep 984"), Vec::<String>::new());
}

#[test]
fn inherited_output_with_a_timeout_still_ends_the_tree() {
    let Some(f) = fixture() else { return };
    let mut spec =
        f.spec("import subprocess, time\nsubprocess.Popen(['sleep', '983'])\ntime.sleep(600)\n");
    spec.timeout = Some(Duration::from_secs(2));
    let env = f.prepare(&spec);
    let io = sandbox_core::RunIo {
        stdin: sandbox_core::Stdin::Null,
        output: sandbox_core::Output::Inherit,
        status: None,
        published: None,
        started: None,
    };
    let outcome = f.engine.run_prepared(&spec, &env, io).expect("run");
    assert!(outcome.timed_out);
    assert!(outcome.duration < Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(host_processes_with("sleep 983"), Vec::<String>::new());
}

#[test]
fn a_sandbox_that_cannot_start_is_an_error_not_an_exit_code() {
    let Some(f) = fixture() else { return };
    let spec = f.spec("print('must not run')\n");
    let env = f.prepare(&spec);
    // A bwrap that reports a good version but fails every setup, like AppArmor-blocked ones.
    let dir = tempfile::tempdir().expect("dir");
    let fake = dir.path().join("bwrap");
    std::fs::write(&fake, "#!/bin/sh\n[ \"$1\" = --version ] && echo 'bubblewrap 0.8.0' && exit 0\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
        .expect("fake");
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let mut config = f.engine.config().clone();
    config.bwrap = Some(fake);
    let engine = engine_bwrap::BwrapEngine::new(config).expect("engine");
    let (outcome, captured) = crate::support::run_prepared(&engine, &spec, &env);
    let err = outcome.expect_err("setup failure");
    assert!(matches!(err, engine_bwrap::Error::SandboxSetup { .. }), "{err}");
    println!("{err}");
    assert!(captured.stderr_lossy().contains("uid map"));
    assert!(!captured.stdout_lossy().contains("must not run"));
}

/// A new environment's files are hard links into the shared package cache, not copies: the
/// install step sees the environment inside the package store (one mount with the cache) at
/// `/opt/python-sandbox/env` through a link, and the environment is back in place afterwards,
/// with bytecode of its own and entry points that name the path runs see.
#[test]
fn a_new_environment_links_its_files_from_the_package_cache() {
    let Some(f) = fixture() else { return };
    let nonce = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_nanos();
    let mut spec = f.spec("import idna\nprint(idna.encode('ドメイン.テスト').decode())\n");
    // A spelling no earlier run used, with a marker (a ready environment's pins would serve a
    // list without one as it is): this environment is built now.
    spec.dependencies =
        vec![format!("idna>=3,!=0.0.{nonce}; python_version >= '3'"), "pip!=0.0.1".to_owned()];
    spec.net = Net::Off;
    let env = f.prepare(&spec);
    assert!(env.fresh);
    assert!(env.dir.ends_with(format!("envs/{}", env.key)), "{}", env.dir.display());
    let store = env.dir.parent().and_then(Path::parent).expect("cache root").join("store");
    assert!(!store.join("building").join(&env.key).exists(), "moved back after the install");
    let site = std::fs::read_dir(env.dir.join("lib"))
        .expect("lib")
        .flatten()
        .map(|e| e.path().join("site-packages"))
        .find(|p| p.join("idna").is_dir())
        .expect("idna installed");
    let module = std::fs::metadata(site.join("idna/__init__.py")).expect("idna/__init__.py");
    assert!(module.nlink() >= 2, "a copy, not a link into the package cache");
    assert!(site.join("idna/__pycache__").is_dir(), "the modules are compiled");
    let entry = std::fs::read_to_string(env.dir.join("bin/pip")).expect("bin/pip");
    assert!(entry.starts_with("#!/opt/python-sandbox/env/bin/python"), "{entry}");
    assert_eq!(f.run_ok(&spec), "xn--eckwd4c7c.xn--zckzah\n");
}

/// A dependency list spelled anew that resolves to the packages of a ready environment (the
/// same pins and hashes, interpreter and uv) installs nothing: that environment's files are
/// linked, bytecode included, and the script runs the same.
#[test]
fn a_list_that_resolves_alike_links_the_packages_of_a_ready_environment() {
    let Some(f) = fixture() else { return };
    let nonce = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_nanos();
    let mut spec = f.spec("import idna\nprint(idna.encode('ドメイン.テスト').decode())\n");
    spec.net = Net::Off;
    let mut built = |spelling: String| {
        spec.dependencies = vec![spelling];
        let mut lines = Vec::new();
        let env = f.engine.prepare(&spec, &mut |l| lines.push(l.to_owned())).expect("prepare");
        assert!(env.fresh);
        let module =
            env.dir.join("lib").read_dir().expect("lib").flatten().next().expect("lib/python3.x");
        let meta = std::fs::metadata(module.path().join("site-packages/idna/__init__.py"))
            .expect("idna installed");
        assert!(module.path().join("site-packages/idna/__pycache__").is_dir());
        (env, meta.ino(), lines)
    };
    // The first may link too: other tests build idna's environment. A marker makes each list
    // one a resolver must answer (the pins of a ready environment would serve it as it is).
    let (first, first_ino, _) = built(format!("idna>=3,!=0.0.{nonce}; python_version >= '3'"));
    let (second, second_ino, second_lines) =
        built(format!("idna>=3.0,!=0.0.{nonce}; python_version >= '3'"));
    assert_ne!(first.dir, second.dir, "two lists, two environments");
    assert!(second_lines.iter().any(|l| l.starts_with("linking 1 package")), "{second_lines:?}");
    assert_eq!(first_ino, second_ino, "the same files, linked");
    assert_eq!(f.run_ok(&spec), "xn--eckwd4c7c.xn--zckzah\n");
}

/// A list spelled anew, or a subset of a ready environment's packages, runs in that environment
/// when its pinned versions satisfy the list: nothing resolved, nothing built. What the pins do
/// not satisfy builds its own.
#[test]
fn a_list_its_pins_satisfy_runs_in_a_ready_environment() {
    let Some(f) = fixture() else { return };
    let (_cache, engine) = crate::support::own_cache(&f);
    let prepare = |deps: &[&str]| {
        let mut spec = f.spec("import six\nprint(six.PY3)\n");
        spec.dependencies = deps.iter().map(|d| (*d).to_owned()).collect();
        let mut lines = Vec::new();
        let env = engine.prepare(&spec, &mut |l| lines.push(l.to_owned())).expect("prepare");
        (spec, env, lines)
    };
    let (_, both, _) = prepare(&["six", "idna>=3"]);
    assert!(both.fresh);
    let (spec, respelt, lines) = prepare(&["six!=0.0.1"]);
    assert!(!respelt.fresh, "a subset spelled anew built an environment: {lines:?}");
    assert_eq!(respelt.dir, both.dir, "{lines:?}");
    assert!(lines.is_empty(), "as quiet as a warm run: {lines:?}");
    let (outcome, captured) = crate::support::run_prepared(&engine, &spec, &respelt);
    assert_eq!(outcome.expect("run").exit_code, 0, "{}", captured.stderr_lossy());
    assert_eq!(captured.stdout_lossy(), "True\n");
    // Not satisfied: a version the pins exclude.
    let (_, other, _) = prepare(&["six", "idna<3"]);
    assert!(other.fresh && other.dir != both.dir);
}
