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
        publish: Vec::new(),
        env: Vec::new(),
        timeout: Some(Duration::from_secs(120)),
        workspace: ws.to_owned(),
    }
}

/// Runs with captured output and no stdin.
pub(crate) fn run(engine: &OciEngine, spec: &RunSpec) -> (RunOutcome, Captured) {
    let mut captured = Captured::default();
    let env = engine.prepare(spec, &mut |_| {}).expect("prepare");
    let io = RunIo { stdin: Stdin::Null, output: Output::Sink(&mut captured), status: None };
    let outcome = engine.run_prepared(spec, &env, io).expect("run");
    (outcome, captured)
}

/// Container names of ours that are still present (any state).
pub(crate) fn containers(engine: &OciEngine, filter: &str) -> Vec<String> {
    let cli = name(engine);
    let out = std::process::Command::new(cli)
        .args([
            "ps",
            "-a",
            "--format",
            "{{.Names}}",
            "--filter",
            "label=io.python-sandbox.managed-by=python-sandbox",
        ])
        .output()
        .expect("ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(filter))
        .map(str::to_owned)
        .collect()
}
