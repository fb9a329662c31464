//! `cargo xtask bench --engine k8s`: the pod engine against `kubectl` on the cluster
//! `KUBECONFIG` names, side by side in one run: `exec` of `true` in a ready sandbox against
//! `kubectl exec` of the same pod (target 0.5x), create to first exec against `kubectl run` +
//! `kubectl wait --for=condition=Ready` of the same image (1.1x), `put` of 50 MB against
//! `kubectl cp` (1.0x). Without a cluster (or kubectl) it prints
//! `SKIPPED: bench k8s: no cluster (...)` and succeeds; a missed target fails.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use engine_k8s::{K8sEngine, SandboxConfig, manifest};
use sandbox_core::{
    Captured, ExecRequest, Executor as _, Net, PutSource, Sandbox as _, SessionConfig,
    SessionEngine as _,
};

const RUNS: usize = 10;

fn main() -> Result<()> {
    let Some(engine) = cluster() else { return Ok(()) };
    let config = engine.config().clone();
    let session = SessionConfig {
        workspace: std::env::temp_dir(),
        mounts: Vec::new(),
        net: Net::Off,
        publish: Vec::new(),
        env: Vec::new(),
        ttl: Duration::from_secs(600),
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        limits: sandbox_core::Limits::NONE,
    };
    // Create to first exec, ours.
    let t = Instant::now();
    let info = engine.start_session(&session, &mut |_| {})?;
    let sandbox = engine.open_session(&info.id)?;
    let first =
        engine.block_on(sandbox.exec(&ExecRequest::new(&["true"]), &mut Captured::default()))?;
    let ours_create = t.elapsed();
    anyhow::ensure!(first.exit_code == 0, "the first exec exited {}", first.exit_code);
    let measured = measure(&engine, &sandbox, &info.sandbox, &config);
    let _ = engine.stop_session(&info.id);
    let (ours_exec, theirs_exec, ours_put, theirs_put) = measured?;
    let theirs_create = kubectl_run(&config)?;
    println!("{:<28} {:>14} {:>14} {:>8} {:>8}", "k8s", "engine-k8s", "kubectl", "ratio", "target");
    let mut missed = Vec::new();
    for (what, ours, theirs, target) in [
        ("exec true (median)", ours_exec, theirs_exec, 0.5),
        ("create to first exec", ours_create, theirs_create, 1.1),
        ("put 50 MB", ours_put, theirs_put, 1.0),
    ] {
        let ratio = ours.as_secs_f64() / theirs.as_secs_f64().max(1e-9);
        let verdict = if ratio <= target { "" } else { "  MISSED" };
        println!(
            "{what:<28} {:>14} {:>14} {ratio:>7.2}x {target:>7.1}x{verdict}",
            format!("{ours:.2?}"),
            format!("{theirs:.2?}")
        );
        if ratio > target {
            missed.push(what);
        }
    }
    if !missed.is_empty() {
        bail!("bench k8s: missed the target of {}", missed.join(", "));
    }
    Ok(())
}

/// The engine on the cluster `KUBECONFIG` names and `kubectl`, or why not (printed).
fn cluster() -> Option<K8sEngine> {
    let skip = |why: String| println!("SKIPPED: bench k8s: no cluster ({why})");
    let Some(path) = std::env::var_os("KUBECONFIG").filter(|p| !p.is_empty()) else {
        skip("KUBECONFIG is not set".to_owned());
        return None;
    };
    let shown = std::path::PathBuf::from(path).display().to_string();
    let engine = match K8sEngine::new(SandboxConfig::default()) {
        Ok(engine) => engine,
        Err(e) => {
            skip(format!("KUBECONFIG={shown}: {e}"));
            return None;
        }
    };
    if let Err(e) = engine.server_version() {
        skip(format!("KUBECONFIG={shown} does not answer: {e}"));
        return None;
    }
    if !Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success())
    {
        skip("no kubectl on PATH to compare with".to_owned());
        return None;
    }
    Some(engine)
}

fn kubectl(args: &[&str]) -> Result<Duration> {
    let t = Instant::now();
    let out = Command::new("kubectl").args(args).output().context("kubectl")?;
    if !out.status.success() {
        bail!("kubectl {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(t.elapsed())
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// exec of `true` (median of [`RUNS`]) and a 50 MB put, ours and kubectl's, on the same pod.
fn measure(
    engine: &K8sEngine,
    sandbox: &engine_k8s::PodSandbox,
    pod: &str,
    config: &SandboxConfig,
) -> Result<(Duration, Duration, Duration, Duration)> {
    let ns = config.namespace.as_str();
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        engine.block_on(sandbox.exec(&ExecRequest::new(&["true"]), &mut Captured::default()))?;
        ours.push(t.elapsed());
        theirs.push(kubectl(&["exec", "-n", ns, pod, "-c", manifest::CONTAINER, "--", "true"])?);
    }
    let dir = std::env::temp_dir().join(format!("psbx-bench-k8s-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("fifty.bin");
    std::fs::write(&file, (0..50usize << 20).map(|i| (i % 251) as u8).collect::<Vec<u8>>())?;
    let t = Instant::now();
    let put = engine.block_on(
        sandbox.put(&PutSource::HostPath(file.clone()), &format!("{}/ours", config.workdir)),
    );
    let ours_put = t.elapsed();
    let target = format!("{ns}/{pod}:{}/theirs.bin", config.workdir);
    let theirs_put =
        kubectl(&["cp", "-c", manifest::CONTAINER, &file.display().to_string(), &target]);
    let _ = std::fs::remove_dir_all(&dir);
    put?;
    Ok((median(ours), median(theirs), ours_put, theirs_put?))
}

/// `kubectl run` + `kubectl wait --for=condition=Ready` of the same image, hardened as the
/// namespace's `restricted` policy demands (else admission refuses it).
fn kubectl_run(config: &SandboxConfig) -> Result<Duration> {
    let name = format!("psbx-bench-{}", std::process::id());
    let overrides = serde_json::json!({
        "apiVersion": "v1",
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": manifest::SANDBOX_UID, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": name, "image": config.image, "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "300"],
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            }],
        },
    })
    .to_string();
    let ns = config.namespace.as_str();
    let t = Instant::now();
    let ran = kubectl(&[
        "run",
        &name,
        "-n",
        ns,
        "--restart=Never",
        "--image",
        &config.image,
        "--overrides",
        &overrides,
    ])
    .and_then(|_| {
        kubectl(&[
            "wait",
            "-n",
            ns,
            "--for=condition=Ready",
            &format!("pod/{name}"),
            "--timeout=180s",
        ])
    });
    let elapsed = t.elapsed();
    let _ = kubectl(&["delete", "pod", "-n", ns, &name, "--wait=false"]);
    ran.map(|_| elapsed)
}
