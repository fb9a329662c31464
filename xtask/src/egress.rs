//! The k8s engine's egress proxy (`deploy/egress/`): `cargo xtask image --egress` builds its
//! image into docker from `deploy/egress/Containerfile` and this checkout's binary; the k8s
//! tier puts it on the private cluster `../shared/k8s/up.sh` makes (imported into its
//! containerd, `deploy/egress/` applied, rolled out) before the end-to-end tier, whose
//! `the_egress_proxy_holds_each_pod_to_its_list` talks to it.

use std::os::unix::process::CommandExt as _;

use anyhow::{Context as _, Result};
use xshell::{Shell, cmd};

use crate::services;

/// The proxy's image, as `deploy/egress/20-proxy.yaml` names it.
pub(crate) const TAG: &str = "python-sandbox-egress:0.0.0";

/// The private cluster's containerd (`../shared/k8s/up.sh`'s `CTR_SOCK`).
const CLUSTER_CONTAINERD: &str = "/run/psbx-k8s/containerd/containerd.sock";

/// `cargo xtask image --egress`: the runtime image (its base) made current in docker, the
/// CLI built (debug: the glibc of the runtime image is this machine's, Debian 12), and the
/// image built from a context holding only the Containerfile and the binary.
pub(crate) fn build(sh: &Shell) -> Result<()> {
    let ready = crate::image::Image {
        engines: vec![crate::image::Engine::Docker],
        ..crate::image::Image::all()
    }
    .ready_engines(sh)?;
    anyhow::ensure!(
        ready.contains(&crate::image::Engine::Docker),
        "docker is not ready (see the SKIPPED line above): the egress image is built on the runtime image in docker"
    );
    cmd!(sh, "cargo build -p cli").run()?;
    let context = services::target_dir(sh).join("egress-image");
    let _ = std::fs::remove_dir_all(&context);
    std::fs::create_dir_all(&context)?;
    std::fs::copy("deploy/egress/Containerfile", context.join("Containerfile"))?;
    std::fs::copy(
        services::target_dir(sh).join("debug/python-sandbox"),
        context.join("python-sandbox"),
    )
    .context("copying the CLI into the image's context")?;
    let base = crate::image::DEFAULT_TAG;
    cmd!(
        sh,
        "docker build -q -t {TAG} --build-arg BASE={base} -f {context}/Containerfile {context}"
    )
    .run()?;
    println!("built {TAG}");
    Ok(())
}

/// A forward that gives the private cluster's pods the apiserver, for as long as it lives,
/// and whether the proxy was put there.
pub(crate) struct ApiForward(Option<std::process::Child>, pub(crate) bool);

impl Drop for ApiForward {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            // The whole group: socat forks a child per connection (the proxy's watch among
            // them), which would outlive the listener.
            let group = format!("-{}", child.id());
            let _ = std::process::Command::new("kill").args(["-TERM", "--", &group]).status();
            let _ = child.wait();
        }
    }
}

/// The proxy on the private cluster, for the end-to-end tier (keep what it returns until the
/// tier is done); `SKIPPED` (and no proxy) where `KUBECONFIG` names another cluster or it could
/// not be put there.
pub(crate) fn on_the_cluster(sh: &Shell) -> ApiForward {
    let tier = "k8s egress proxy (deploy/egress) in the end-to-end tier";
    if !std::env::var("KUBECONFIG").is_ok_and(|k| k.ends_with("psbx-k8s.conf")) {
        crate::skipped(
            tier,
            "KUBECONFIG names no cluster this machine runs (build the image with `cargo xtask image --egress`, load it on yours and apply deploy/egress/)",
        );
        return ApiForward(None, false);
    }
    let mut forward = ApiForward(None, false);
    let deployed = (|| -> Result<()> {
        forward = api_for_pods(sh)?;
        build(sh)?;
        let image = format!("docker.io/library/{TAG}");
        let saved = cmd!(sh, "docker save {TAG}").output()?.stdout;
        cmd!(sh, "ctr --address {CLUSTER_CONTAINERD} -n k8s.io images import -")
            .stdin(saved)
            .quiet()
            .ignore_stdout()
            .run()
            .with_context(|| format!("importing {image} into the cluster's containerd"))?;
        cmd!(sh, "kubectl apply -f deploy/egress/").quiet().ignore_stdout().run()?;
        // A new binary in the same tag: the running pod is replaced.
        cmd!(
            sh,
            "kubectl -n python-sandbox-egress rollout restart deployment/python-sandbox-egress"
        )
        .quiet()
        .ignore_stdout()
        .run()?;
        cmd!(
            sh,
            "kubectl -n python-sandbox-egress rollout status deployment/python-sandbox-egress --timeout=120s"
        )
        .run()?;
        Ok(())
    })();
    match deployed {
        Ok(()) => forward.1 = true,
        Err(e) => crate::skipped(tier, &format!("{e:#}")),
    }
    forward
}

/// Set for the end-to-end tier once the proxy is on the cluster and can watch its pods: the
/// test talks to it only then (the workspace's plain `cargo test` runs it too, with nothing
/// keeping the apiserver in the proxy's reach).
pub(crate) const DEPLOYED_VAR: &str = "PSBX_EGRESS_PROXY_DEPLOYED";

/// The private cluster's apiserver listens on its node's loopback only, so the `kubernetes`
/// Service's endpoint (the node's address) refuses pods, and the proxy cannot watch them
/// (`../shared/k8s/NOTES.md`). A real cluster's pods reach it; here a forward from that
/// endpoint to the loopback gives them the same (its serving certificate names the Service's
/// address). Nothing is forwarded where the endpoint already answers.
fn api_for_pods(sh: &Shell) -> Result<ApiForward> {
    let path = "jsonpath={.subsets[0].addresses[0].ip}:{.subsets[0].ports[0].port}";
    let endpoint = cmd!(sh, "kubectl get endpoints kubernetes -o {path}").read()?;
    let address: std::net::SocketAddr = endpoint
        .trim()
        .parse()
        .with_context(|| format!("the apiserver's endpoint `{endpoint}`"))?;
    let answers = |addr: &std::net::SocketAddr| {
        std::net::TcpStream::connect_timeout(addr, std::time::Duration::from_secs(2)).is_ok()
    };
    if answers(&address) {
        return Ok(ApiForward(None, false));
    }
    let (ip, port) = (address.ip(), address.port());
    let child = std::process::Command::new("socat")
        .arg(format!("TCP-LISTEN:{port},bind={ip},fork,reuseaddr"))
        .arg(format!("TCP:127.0.0.1:{port}"))
        .stdout(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .context("starting socat (installed with the cluster)")?;
    let forward = ApiForward(Some(child), false);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !answers(&address) {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "{address} does not answer through socat"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    println!("the apiserver answers pods at {address} (forwarded to its loopback)");
    Ok(forward)
}
