//! `cargo xtask bench --engine k8s`: the pod engine against `kubectl` on the cluster
//! `KUBECONFIG` names, side by side in one run:
//! - warm `python-sandbox run --engine k8s hello.py` against `kubectl run --rm -i
//!   --restart=Never` of the same image and script (target 1.2x; kubectl installs and syncs
//!   nothing),
//! - time to interactive (session start to the first exec answering) with a warm pool against
//!   without one (at most 100 ms median, and 0.25x),
//! - `python-sandbox session run` of hello in a warm session against `kubectl exec` of `python3
//!   hello.py` in the same pod (0.5x),
//! - `exec` of `true` in a ready sandbox against `kubectl exec` of the same pod (0.5x), create to
//!   first exec against `kubectl run` + `kubectl wait --for=condition=Ready` (1.1x), `put` of
//!   50 MB against `kubectl cp` (1.0x).
//!
//! The CLI rows run the CLI (`PYTHON_SANDBOX_BIN`, else the release build `cargo xtask bench
//! --engine k8s` makes first). Without a cluster (or kubectl) it prints
//! `SKIPPED: bench k8s: no cluster (...)` and succeeds; a missed target fails.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use engine_k8s::{K8sEngine, SandboxConfig, manifest};
use sandbox_core::{
    Captured, ExecRequest, Executor as _, Net, PutSource, Sandbox as _, SessionConfig,
    SessionEngine as _,
};

const RUNS: usize = 10;
/// Samples of the slow rows (a pod start each).
const SLOW_RUNS: usize = 5;
/// The script of the hello rows.
const HELLO: &str = "print('hello')\n";

/// One row: ours against the baseline, the ratio's target, and an absolute cap on ours.
struct Row {
    what: &'static str,
    ours: Duration,
    theirs: Duration,
    baseline: &'static str,
    target: f64,
    cap: Option<Duration>,
}

impl Row {
    fn ratio(&self) -> f64 {
        self.ours.as_secs_f64() / self.theirs.as_secs_f64().max(1e-9)
    }

    fn missed(&self) -> bool {
        self.ratio() > self.target || self.cap.is_some_and(|cap| self.ours > cap)
    }
}

/// Net on: like `kubectl run`, and the only setting every cluster gives (net off is refused
/// where NetworkPolicy is not enforced, as on the private CI cluster).
fn session_config() -> SessionConfig {
    SessionConfig {
        workspace: std::env::temp_dir(),
        mounts: Vec::new(),
        net: Net::On,
        allow: None,
        publish: Vec::new(),
        env: Vec::new(),
        ttl: Duration::from_secs(600),
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        limits: sandbox_core::Limits::NONE,
    }
}

fn main() -> Result<()> {
    let Some(engine) = cluster() else { return Ok(()) };
    let cli = cli()?;
    let config = engine.config().clone();
    let session = session_config();
    let dir = std::env::temp_dir().join(format!("psbx-bench-k8s-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("hello.py"), HELLO)?;
    let rows = rows(&engine, &cli, &config, &session, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    let rows = rows?;
    println!(
        "{:<34} {:>12} {:>12} {:<30} {:>7} {:>7} {:>8}",
        "k8s", "engine-k8s", "baseline", "(baseline)", "ratio", "target", "cap"
    );
    let mut missed = Vec::new();
    for row in &rows {
        let verdict = if row.missed() { "  MISSED" } else { "" };
        println!(
            "{:<34} {:>12} {:>12} {:<30} {:>6.2}x {:>6.2}x {:>8}{verdict}",
            row.what,
            format!("{:.2?}", row.ours),
            format!("{:.2?}", row.theirs),
            row.baseline,
            row.ratio(),
            row.target,
            row.cap.map_or_else(String::new, |c| format!("{c:.0?}")),
        );
        if row.missed() {
            missed.push(row.what);
        }
    }
    if !missed.is_empty() {
        bail!("bench k8s: missed the target of {}", missed.join(", "));
    }
    Ok(())
}

/// Every row, measured in turn; sessions and pods it made are stopped on the way.
fn rows(
    engine: &K8sEngine,
    cli: &Path,
    config: &SandboxConfig,
    session: &SessionConfig,
    dir: &Path,
) -> Result<Vec<Row>> {
    // Time to interactive without a pool: start, open, the first exec answering.
    let mut cold = Vec::new();
    let mut first_session = None;
    for _ in 0..SLOW_RUNS {
        let t = Instant::now();
        let info = engine.start_session(session, &mut |_| {})?;
        let sandbox = engine.open_session(&info.id)?;
        let first = engine
            .block_on(sandbox.exec(&ExecRequest::new(&["true"]), &mut Captured::default()))?;
        cold.push(t.elapsed());
        anyhow::ensure!(first.exit_code == 0, "the first exec exited {}", first.exit_code);
        match first_session {
            None => first_session = Some((info, sandbox)),
            Some(_) => engine.stop_session(&info.id)?,
        }
    }
    let cold = median(cold);
    let Some((info, sandbox)) = first_session else { bail!("no session started") };
    let measured = measure(engine, &sandbox, &info.sandbox, config).and_then(|m| {
        session_run(cli, &sandbox, engine, &info.id, &info.sandbox, config, dir).map(|r| (m, r))
    });
    let _ = engine.stop_session(&info.id);
    let ((ours_exec, theirs_exec, ours_put, theirs_put), (ours_session_run, kubectl_exec_hello)) =
        measured?;
    let pooled = pool_tti(engine, session)?;
    let theirs_create = kubectl_run(config)?;
    let (ours_run, theirs_run) = warm_run(cli, config, dir)?;
    Ok(vec![
        Row {
            what: "warm run of hello",
            ours: ours_run,
            theirs: theirs_run,
            baseline: "kubectl run --rm -i",
            target: 1.2,
            cap: None,
        },
        Row {
            what: "time to interactive, warm pool",
            ours: pooled,
            theirs: cold,
            baseline: "engine-k8s without a pool",
            target: 0.25,
            cap: Some(Duration::from_millis(100)),
        },
        Row {
            what: "session run of hello (median)",
            ours: ours_session_run,
            theirs: kubectl_exec_hello,
            baseline: "kubectl exec python3 hello.py",
            target: 0.5,
            cap: None,
        },
        Row {
            what: "exec true (median)",
            ours: ours_exec,
            theirs: theirs_exec,
            baseline: "kubectl exec true",
            target: 0.5,
            cap: None,
        },
        Row {
            what: "create to first exec (median)",
            ours: cold,
            theirs: theirs_create,
            baseline: "kubectl run + wait Ready",
            target: 1.1,
            cap: None,
        },
        Row {
            what: "put 50 MB",
            ours: ours_put,
            theirs: theirs_put,
            baseline: "kubectl cp",
            target: 1.0,
            cap: None,
        },
    ])
}

/// The CLI the CLI rows run: `PYTHON_SANDBOX_BIN`, else the workspace's release build.
fn cli() -> Result<PathBuf> {
    if let Some(bin) = std::env::var_os("PYTHON_SANDBOX_BIN").filter(|b| !b.is_empty()) {
        return Ok(PathBuf::from(bin));
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"), PathBuf::from);
    let bin = target.join("release/python-sandbox");
    anyhow::ensure!(
        bin.exists(),
        "{} is missing\nhint: `cargo build --release -p cli` (`cargo xtask bench --engine k8s` does)",
        bin.display()
    );
    Ok(bin)
}

/// Runs the CLI in `dir`; its wall time, failing unless it exits 0 printing `hello`.
fn cli_hello(cli: &Path, dir: &Path, args: &[&str]) -> Result<Duration> {
    let t = Instant::now();
    let out = Command::new(cli)
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("{} {} in {}", cli.display(), args.join(" "), dir.display()))?;
    let elapsed = t.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || stdout != "hello\n" {
        bail!(
            "python-sandbox {} ({}): {stdout:?} {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(elapsed)
}

/// Warm `run` of hello (the environment prepared by a first run) against `kubectl run --rm -i
/// --restart=Never` of the same image running the same script, medians of [`SLOW_RUNS`].
fn warm_run(cli: &Path, config: &SandboxConfig, dir: &Path) -> Result<(Duration, Duration)> {
    let run = ["run", "--engine", "k8s", "hello.py"];
    cli_hello(cli, dir, &run)?;
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for i in 0..SLOW_RUNS {
        ours.push(cli_hello(cli, dir, &run)?);
        theirs.push(kubectl_run_hello(config, i)?);
    }
    Ok((median(ours), median(theirs)))
}

/// `kubectl run --rm -i --restart=Never` of the sandbox image running [`HELLO`], hardened as
/// the namespace's `restricted` policy demands; its wall time.
fn kubectl_run_hello(config: &SandboxConfig, i: usize) -> Result<Duration> {
    let name = format!("psbx-bench-run-{}-{i}", std::process::id());
    let overrides = restricted_pod(&name, config, &["python3", "-c", HELLO], true);
    let ns = config.namespace.as_str();
    let t = Instant::now();
    let out = Command::new("kubectl")
        .args(["run", &name, "-n", ns, "--rm", "-i", "--quiet", "--restart=Never"])
        .args(["--image", &config.image, "--overrides", &overrides])
        .stdin(std::process::Stdio::null())
        .output()
        .context("kubectl")?;
    let elapsed = t.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !stdout.contains("hello") {
        let _ = kubectl(&["delete", "pod", "-n", ns, &name, "--wait=false"]);
        bail!(
            "kubectl run --rm -i ({}): {stdout:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(elapsed)
}

/// `session run` of hello through the CLI in the warm session `id` (its venv made by a first
/// run) against `kubectl exec` of `python3 hello.py` in the same pod, medians of [`RUNS`].
fn session_run(
    cli: &Path,
    sandbox: &engine_k8s::PodSandbox,
    engine: &K8sEngine,
    id: &str,
    pod: &str,
    config: &SandboxConfig,
    dir: &Path,
) -> Result<(Duration, Duration)> {
    let inside = format!("{}/hello.py", config.workdir);
    engine.block_on(sandbox.write_file(&inside, HELLO.as_bytes()))?;
    let run = ["session", "run", "--engine", "k8s", id, "hello.py"];
    cli_hello(cli, dir, &run)?;
    let ns = config.namespace.as_str();
    let exec = ["exec", "-n", ns, pod, "-c", manifest::CONTAINER, "--", "python3", &inside];
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for _ in 0..RUNS {
        ours.push(cli_hello(cli, dir, &run)?);
        theirs.push(kubectl(&exec)?);
    }
    Ok((median(ours), median(theirs)))
}

/// Time to interactive from a warm pool: a claim, the open, the first exec answering; the
/// median over [`SLOW_RUNS`] members made ahead of time (the refill is not timed).
fn pool_tti(engine: &K8sEngine, session: &SessionConfig) -> Result<Duration> {
    sandbox_core::pool::refill(engine, session, SLOW_RUNS)?;
    let mut samples = Vec::new();
    let mut claimed = Vec::new();
    let measured = (|| -> Result<()> {
        for _ in 0..SLOW_RUNS {
            let t = Instant::now();
            let info = sandbox_core::pool::claim(engine, session)?
                .context("the pool had no member to claim")?;
            claimed.push(info.id.clone());
            let sandbox = engine.open_session(&info.id)?;
            let first = engine
                .block_on(sandbox.exec(&ExecRequest::new(&["true"]), &mut Captured::default()))?;
            samples.push(t.elapsed());
            anyhow::ensure!(first.exit_code == 0, "the first exec exited {}", first.exit_code);
        }
        Ok(())
    })();
    for id in &claimed {
        let _ = engine.stop_session(id);
    }
    measured?;
    Ok(median(samples))
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
    // Not the directory of the CLI rows (`main`'s), which this one's removal would take along.
    let dir = std::env::temp_dir().join(format!("psbx-bench-k8s-put-{}", std::process::id()));
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

/// A pod spec the namespace admits, as `kubectl run --overrides` JSON: Pod Security
/// `restricted` and deploy/policy's hardening (no token, no service links, a read-only root,
/// a lifetime cap, the same resources as a sandbox pod), the sandbox image running `command`
/// (with stdin for `-i` when `attach`). Nothing more: no agent, no workspace, no environment.
fn restricted_pod(name: &str, config: &SandboxConfig, command: &[&str], attach: bool) -> String {
    let r = &config.resources;
    let mut container = serde_json::json!({
        "name": name, "image": config.image, "imagePullPolicy": "IfNotPresent",
        "command": command,
        "resources": {
            "requests": {"cpu": r.cpu_request, "memory": r.memory_request,
                "ephemeral-storage": r.ephemeral_storage_request},
            "limits": {"cpu": r.cpu_limit, "memory": r.memory_limit,
                "ephemeral-storage": r.ephemeral_storage_limit},
        },
        "securityContext": {
            "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
            "runAsNonRoot": true, "capabilities": {"drop": ["ALL"]},
        },
    });
    if attach {
        container["stdin"] = serde_json::json!(true);
        container["stdinOnce"] = serde_json::json!(true);
    }
    serde_json::json!({
        "apiVersion": "v1",
        "spec": {
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "activeDeadlineSeconds": 600,
            "securityContext": {
                "runAsNonRoot": true, "runAsUser": manifest::SANDBOX_UID,
                "runAsGroup": manifest::SANDBOX_UID, "fsGroup": manifest::SANDBOX_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [container],
        },
    })
    .to_string()
}

/// `kubectl run` + `kubectl wait --for=condition=Ready` of the same image, median of
/// [`SLOW_RUNS`].
fn kubectl_run(config: &SandboxConfig) -> Result<Duration> {
    let mut samples = Vec::new();
    for i in 0..SLOW_RUNS {
        samples.push(kubectl_run_ready(config, i)?);
    }
    Ok(median(samples))
}

fn kubectl_run_ready(config: &SandboxConfig, i: usize) -> Result<Duration> {
    let name = format!("psbx-bench-{}-{i}", std::process::id());
    let overrides = restricted_pod(&name, config, &["sleep", "300"], false);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(ours_ms: u64, theirs_ms: u64, target: f64, cap_ms: Option<u64>) -> Row {
        Row {
            what: "row",
            ours: Duration::from_millis(ours_ms),
            theirs: Duration::from_millis(theirs_ms),
            baseline: "baseline",
            target,
            cap: cap_ms.map(Duration::from_millis),
        }
    }

    /// What deploy/policy/validating-admission-policy.yaml checks of a pod, on the baseline's.
    #[test]
    fn the_kubectl_baseline_pod_passes_the_namespaces_hardening() {
        let config = SandboxConfig::default();
        let pod: serde_json::Value =
            serde_json::from_str(&restricted_pod("psbx-bench-x", &config, &["true"], true))
                .expect("json");
        let spec = &pod["spec"];
        assert_eq!(spec["automountServiceAccountToken"], false);
        assert_eq!(spec["enableServiceLinks"], false);
        assert!(spec["activeDeadlineSeconds"].is_u64());
        assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
        assert!(spec["securityContext"]["fsGroup"].as_i64().is_some_and(|g| g != 0));
        assert_eq!(spec["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
        let c = &spec["containers"][0];
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(c["securityContext"]["capabilities"]["drop"], serde_json::json!(["ALL"]));
        for limit in ["cpu", "memory", "ephemeral-storage"] {
            assert!(c["resources"]["limits"][limit].is_string(), "{limit}");
        }
        assert_eq!(c["stdin"], true);
    }

    #[test]
    fn a_row_misses_on_its_ratio_or_its_cap() {
        assert!(!row(60, 120, 0.5, None).missed());
        assert!(row(61, 120, 0.5, None).missed());
        // The pool's row: 0.25x of the cold start is not enough above 100 ms.
        assert!(row(120, 2000, 0.25, Some(100)).missed());
        assert!(!row(90, 2000, 0.25, Some(100)).missed());
        assert!(row(90, 300, 0.25, Some(100)).missed());
    }
}
