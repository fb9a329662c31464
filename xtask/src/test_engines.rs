//! `cargo xtask test-engines [--engine NAME]... [FILTER]...`: builds the CLI, brings up the container
//! engines it will test (daemon and runtime image, via `image::Image::ready_engines`), then runs the
//! cross-engine conformance suite (tests/conformance), which prints its own engine × case matrix.
//! Engines that cannot run here show up as `SKIPPED: <engine>: <reason>`, never silently.
//!
//! `podman-rootless` is not an engine the CLI knows but a way to run one: the suite's own binary
//! runs as the rootless user (`rootless::USER`, set up by `rootless::ensure`) on `podman`, with
//! its fixtures under that user's home, so every case sees what a normal user with podman sees;
//! bwrap and native run in the same pass as that user.

use anyhow::{Context, Result};
use xshell::{Shell, cmd};

use crate::image::{Engine, Image};
use crate::rootless;
use crate::services;

/// The tier that runs the suite as the rootless user.
pub(crate) const ROOTLESS: &str = "podman-rootless";
/// The Kubernetes engine: its tier is the conformance suite on pods (`CONFORMANCE_ENGINES=k8s`)
/// and engine-k8s's end-to-end tests (the `Sandbox` contract on a pod, the hardening read back,
/// load and kill -9), both printing `SKIPPED: ... no cluster (...)` where `KUBECONFIG` names no
/// cluster that answers; a cluster `detect` finds available whose runs fail is a failure.
pub(crate) const K8S: &str = "k8s";

pub(crate) struct TestEngines {
    /// Empty: every engine `python-sandbox detect --json` lists.
    pub(crate) engines: Vec<String>,
    /// Substrings of case names, as for libtest.
    pub(crate) filters: Vec<String>,
}

impl TestEngines {
    pub(crate) fn run(self, sh: &Shell) -> Result<()> {
        crate::section("build the CLI");
        cmd!(sh, "cargo build -p cli").run()?;
        let oci: Vec<Engine> = if self.engines.is_empty() {
            Engine::ALL.to_vec()
        } else {
            self.engines.iter().filter_map(|e| Engine::parse(e)).collect()
        };
        let ready = if oci.is_empty() {
            Vec::new()
        } else {
            // What cannot start prints its own SKIPPED line; the suite then skips it too.
            Image { engines: oci, ..Image::all() }.ready_engines(sh)?
        };
        // The suite's engines as the caller named them (k8s among them); the rootless tier
        // runs below, as its user.
        let rootful: Vec<String> =
            self.engines.iter().filter(|e| *e != ROOTLESS).cloned().collect();
        let filters = &self.filters;
        let mut failed = Vec::new();
        if self.engines.is_empty() || !rootful.is_empty() {
            // The runner's own pure parts first (selection, skips, the report): `ci` leaves the
            // `tests` package out of its workspace run, so they run here.
            crate::section("conformance suite: its selection and skips");
            cmd!(sh, "cargo test -p tests --test conformance-logic").run()?;
            let k8s = self.engines.is_empty() || rootful.iter().any(|e| e == K8S);
            // Pods under the project's wall (`seccomp = "wall"`) where its profile could be
            // put on the cluster's node; else the runtime's own profile, said so.
            let walled = if k8s { wall_on_the_node(sh) } else { None };
            let _config = walled.as_ref().map(|dir| sh.push_env("XDG_CONFIG_HOME", dir));
            crate::section("conformance suite");
            let _on = sh.push_env("CONFORMANCE", "1");
            let _engines = (!rootful.is_empty())
                .then(|| sh.push_env("CONFORMANCE_ENGINES", rootful.join(",")));
            if cmd!(sh, "cargo test -p tests --test conformance -- {filters...}").run().is_err() {
                failed.push("the conformance suite failed; see the matrix above");
            }
        }
        if ready.contains(&Engine::PodmanRootless) {
            run_rootless(sh, filters)?;
        }
        // After the suite even when it failed: the two tiers fail for different reasons.
        if self.engines.is_empty() || self.engines.iter().any(|e| e == K8S) {
            crate::section("engine-k8s end-to-end tier");
            let forward = crate::egress::on_the_cluster(sh);
            let _deployed = forward.1.then(|| sh.push_env(crate::egress::DEPLOYED_VAR, "1"));
            let e2e = cmd!(
                sh,
                "cargo test -p engine-k8s --test e2e -- --nocapture --test-threads=1 {filters...}"
            )
            .run();
            if e2e.is_err() {
                failed.push("engine-k8s's end-to-end tier failed on the cluster KUBECONFIG names");
            }
        }
        if !failed.is_empty() {
            anyhow::bail!("{}", failed.join("; "));
        }
        Ok(())
    }
}

/// Puts the wall's seccomp profile on the node of the private cluster `../shared/k8s/up.sh`
/// makes (its node is this machine), through the real installer (`deploy/seccomp/wall.yaml`),
/// and returns a config dir whose user config sets `seccomp = "wall"` for the k8s engine;
/// `None`, with a `SKIPPED` line, where `KUBECONFIG` names another cluster or the profile did
/// not arrive.
fn wall_on_the_node(sh: &Shell) -> Option<std::path::PathBuf> {
    let tier = "k8s pods under the project's seccomp wall (`seccomp = \"wall\"`)";
    if !std::env::var("KUBECONFIG").is_ok_and(|k| k.ends_with("psbx-k8s.conf")) {
        crate::skipped(
            tier,
            "KUBECONFIG names no cluster this machine runs (install `deploy/seccomp/` on yours and set the key)",
        );
        return None;
    }
    let installed = (|| -> Result<std::path::PathBuf> {
        let yaml = sh.read_file("deploy/seccomp/wall.yaml")?;
        cmd!(sh, "kubectl apply -f deploy/seccomp/wall.yaml").quiet().ignore_stdout().run()?;
        let name = yaml
            .lines()
            .find_map(|l| l.trim().strip_suffix(": |").filter(|n| n.ends_with(".json")))
            .context("no profile in deploy/seccomp/wall.yaml")?
            .to_owned();
        // Kubelet 1.20 reads profiles from its default `--seccomp-profile-root`, whatever its
        // root dir: where the DaemonSet writes.
        let file = std::path::Path::new("/var/lib/kubelet/seccomp/python-sandbox").join(&name);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
        while !file.is_file() {
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "{} did not appear within 90 s (`kubectl -n kube-system get pods -l app.kubernetes.io/name=python-sandbox-seccomp`)",
                file.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        let dir = services::target_dir(sh).join("k8s-wall-config");
        std::fs::create_dir_all(dir.join("python-sandbox"))?;
        std::fs::write(
            dir.join("python-sandbox/config.toml"),
            "[engine.k8s]\nseccomp = \"wall\"\n",
        )?;
        println!("the wall's profile is on the node: {}", file.display());
        Ok(dir)
    })();
    match installed {
        Ok(dir) => Some(dir),
        Err(e) => {
            crate::skipped(tier, &format!("{e:#}"));
            None
        }
    }
}

/// The suite's binary run as [`rootless::USER`] on podman: built here, run there with its
/// temp dirs under the user's home (a workspace the user owns, as in real use).
fn run_rootless(sh: &Shell, filters: &[String]) -> Result<()> {
    crate::section(&format!(
        "conformance suite on {ROOTLESS}, bwrap and native (as {})",
        rootless::USER
    ));
    let suite = test_binary(sh, "tests", "conformance")?;
    let account = rootless::Account::lookup().context("the rootless user is gone")?;
    let target = services::target_dir(sh);
    let env = [
        "CONFORMANCE=1".to_owned(),
        // bwrap and native too: their walls fail differently for an unprivileged caller (no
        // staging, the caller's own user namespace and pasta), so they are checked as that
        // user as well.
        "CONFORMANCE_ENGINES=podman,bwrap,native".to_owned(),
        "NO_COLOR=1".to_owned(),
        format!("PYTHON_SANDBOX_BIN={}", target.join("debug/python-sandbox").display()),
        format!("CARGO_TARGET_DIR={}", account.home.join("conformance").display()),
    ];
    let mut tail: Vec<&str> = env.iter().map(String::as_str).collect();
    tail.push(&suite);
    tail.extend(filters.iter().map(String::as_str));
    as_rootless(sh, &tail).with_context(|| {
        format!("the conformance suite failed on {ROOTLESS}; see the matrix above")
    })?;
    if filters.is_empty() {
        run_rootless_sessions(sh, &env)?;
    }
    Ok(())
}

/// engine-oci's session and warm pool tests as the rootless user: the suite has no session
/// cases, and a rootless session reaches its agent differently (through the user namespace
/// podman made), which the pool's claim checks (the agent's activity stamp, the binds) read.
fn run_rootless_sessions(sh: &Shell, env: &[String]) -> Result<()> {
    crate::section(&format!(
        "engine-oci session and pool tests on {ROOTLESS} (as {})",
        rootless::USER
    ));
    let it = test_binary(sh, "engine-oci", "it")?;
    let mut tail: Vec<&str> = env.iter().map(String::as_str).collect();
    // Docker's socket is not the rootless user's; say so instead of a SKIPPED line per test.
    // The pool tests assert podman is the rootless one here, so the tier cannot pass on a
    // rootful fallback.
    tail.extend([
        "ENGINE_OCI_SKIP=docker",
        "ENGINE_OCI_EXPECT_ROOTLESS=podman",
        &it,
        "session::",
        "pool::",
        "--test-threads=2",
    ]);
    as_rootless(sh, &tail)
        .with_context(|| format!("engine-oci's session tests failed on {ROOTLESS}"))
}

/// Builds test target `test` of `package` and returns its executable's absolute path.
fn test_binary(sh: &Shell, package: &str, test: &str) -> Result<String> {
    let built = cmd!(sh, "cargo test -p {package} --test {test} --no-run").read_stderr()?;
    let exe = executable(&built)
        .with_context(|| format!("no `{test}` executable in cargo's output:\n{built}"))?;
    Ok(sh.current_dir().join(exe).display().to_string())
}

/// Runs `argv` as [`rootless::USER`] (see [`rootless::as_user`]), output shown.
fn as_rootless(sh: &Shell, argv: &[&str]) -> Result<()> {
    let argv = rootless::as_user(argv);
    let (program, args) = argv.split_first().context("empty command")?;
    cmd!(sh, "{program} {args...}").run()?;
    Ok(())
}

/// Pure: the test binary from cargo's `Executable tests/conformance/main.rs (PATH)` line.
pub(crate) fn executable(cargo_stderr: &str) -> Option<&str> {
    cargo_stderr.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("Executable ")?;
        let (_, path) = rest.split_once(" (")?;
        path.strip_suffix(')')
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_suite_binary_is_read_from_cargo() {
        let out = "    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.3s\n  \
                   Executable tests/conformance/main.rs (target/debug/deps/conformance-0f1e2d)\n";
        assert_eq!(super::executable(out), Some("target/debug/deps/conformance-0f1e2d"));
        assert_eq!(super::executable("Finished\n"), None);
    }
}
