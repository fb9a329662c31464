//! Shared helpers: the engines available here, a spec builder, a workspace.

use std::path::{Path, PathBuf};
use std::time::Duration;

use engine_oci::{Flavor, OciConfig, OciEngine};
use sandbox_core::{Captured, Net, Output, RunIo, RunOutcome, RunSpec, Stdin};

/// The engines this machine can run, each freshly connected; prints SKIPPED for the rest.
pub(crate) fn engines() -> Vec<OciEngine> {
    let mut out = Vec::new();
    for flavor in [Flavor::Docker, Flavor::Podman] {
        if let Some(engine) = engine(flavor) {
            out.push(engine);
        }
    }
    out
}

pub(crate) fn engine(flavor: Flavor) -> Option<OciEngine> {
    if std::env::var("ENGINE_OCI_SKIP").is_ok_and(|v| v.split(',').any(|e| e == flavor.as_str())) {
        println!("SKIPPED: {}: ENGINE_OCI_SKIP", flavor.as_str());
        return None;
    }
    let mut config = OciConfig::from_env(flavor);
    config.handle_signals = false;
    match OciEngine::new(config) {
        Ok(engine) => Some(engine),
        Err(e) => {
            println!("SKIPPED: {}: {}", flavor.as_str(), e.to_string().replace('\n', " / "));
            None
        }
    }
}

pub(crate) fn name(engine: &OciEngine) -> &'static str {
    engine.config().flavor.as_str()
}

/// A workspace under the target dir's tmp (not /tmp of some other test), with `script` in it.
pub(crate) fn workspace(script: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new().prefix("engine-oci-").tempdir().expect("tempdir");
    let path = dir.path().canonicalize().expect("canonical");
    std::fs::write(path.join("main.py"), script).expect("write script");
    (dir, path)
}

pub(crate) fn spec(ws: &Path) -> RunSpec {
    RunSpec {
        script: ws.join("main.py"),
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
        workspace: ws.to_owned(),
    }
}

/// Runs with captured output and no stdin.
pub(crate) fn run(engine: &OciEngine, spec: &RunSpec) -> (RunOutcome, Captured) {
    let mut captured = Captured::default();
    let env = engine.prepare(spec, &mut |_| {}).expect("prepare");
    let io = RunIo {
        stdin: Stdin::Null,
        output: Output::Sink(&mut captured),
        status: None,
        published: None,
        started: None,
    };
    let outcome = engine.run_prepared(spec, &env, io).expect("run");
    (outcome, captured)
}

/// Names of our containers that carry `label` (`key=value`), in any state, asked through the
/// engine's own CLI so the check does not trust the code under test.
pub(crate) fn containers(engine: &OciEngine, label: &str) -> Vec<String> {
    let out = std::process::Command::new(name(engine))
        .args(["ps", "-a", "--format", "{{.Names}}"])
        .args(["--filter", "label=io.python-sandbox.managed-by=python-sandbox"])
        .args(["--filter", &format!("label={label}")])
        .output()
        .expect("ps");
    assert!(
        out.status.success(),
        "{} ps failed: {}",
        name(engine),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect()
}

/// Polls `check` every 200 ms until it holds or `limit` passes.
pub(crate) fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    check()
}

/// The CLI binary, if built (`cargo build -p cli`).
pub(crate) fn cli_binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("PYTHON_SANDBOX_BIN") {
        return Some(PathBuf::from(bin));
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let bin = target.join("debug/python-sandbox");
    bin.is_file().then_some(bin)
}

/// A directory's access ACL (the `system.posix_acl_access` bytes `getfattr` shows) and mode.
pub(crate) fn permissions(dir: &Path) -> (Option<Vec<u8>>, u32) {
    use std::os::unix::fs::MetadataExt;
    let mut buf = vec![0u8; 4096];
    let acl = rustix::fs::getxattr(dir, "system.posix_acl_access", &mut buf[..])
        .ok()
        .map(|n| buf[..n].to_vec());
    (acl, std::fs::symlink_metadata(dir).expect("stat").mode())
}
