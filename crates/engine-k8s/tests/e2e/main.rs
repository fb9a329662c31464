//! The end-to-end tier: a real cluster, when `KUBECONFIG` points at one that answers (else every
//! test prints `SKIPPED: no cluster (KUBECONFIG ...)` and passes; a cluster that answers and
//! then fails is a failure). `cargo xtask test-engines --engine k8s` runs it. The `Sandbox`
//! contract (`sandbox_core::contract`, the one the fake and every engine pass) on a session pod
//! with a network and a published port, and the hardening read back from the pod the cluster
//! kept (old apiservers drop fields they do not know).

#![allow(clippy::print_stdout)]

use std::io::{Read as _, Write as _};
use std::time::Duration;

use engine_k8s::{K8sEngine, SandboxConfig};
use sandbox_core::{Net, Publish, SessionConfig, SessionEngine as _, WarmSession as _, contract};

/// The engine on the cluster `KUBECONFIG` names, or why there is none.
fn cluster() -> Option<K8sEngine> {
    let Some(path) = std::env::var_os("KUBECONFIG").filter(|p| !p.is_empty()) else {
        println!("SKIPPED: no cluster (KUBECONFIG is not set)");
        return None;
    };
    let shown = std::path::PathBuf::from(&path).display().to_string();
    let engine = match K8sEngine::new(SandboxConfig::default()) {
        Ok(engine) => engine,
        Err(e) => {
            println!("SKIPPED: no cluster (KUBECONFIG={shown}: {e})");
            return None;
        }
    };
    match engine.server_version() {
        Ok(version) => {
            println!("cluster {version} (KUBECONFIG={shown})");
            Some(engine)
        }
        Err(e) => {
            println!("SKIPPED: no cluster (KUBECONFIG={shown} does not answer: {e})");
            None
        }
    }
}

fn config(publish: &[u16]) -> SessionConfig {
    SessionConfig {
        workspace: std::env::temp_dir(),
        mounts: Vec::new(),
        net: Net::On,
        publish: publish.iter().map(|p| Publish::same(*p)).collect(),
        env: vec![sandbox_core::EnvVar {
            name: "GREETING".to_owned(),
            value: Some("hi".to_owned()),
        }],
        ttl: Duration::from_secs(600),
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        limits: sandbox_core::Limits::NONE,
    }
}

/// A plain HTTP GET of a preview URL from this host.
fn http_get(url: &str) -> Result<String, String> {
    let (host, port) = engine_k8s::preview::host_port(url).ok_or("not an http URL")?;
    let mut tcp = std::net::TcpStream::connect((host.as_str(), port)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    write!(tcp, "GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    tcp.read_to_string(&mut response).map_err(|e| e.to_string())?;
    let (head, body) = response.split_once("\r\n\r\n").ok_or("no HTTP answer")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        return Err(head.lines().next().unwrap_or_default().to_owned());
    }
    Ok(body.to_owned())
}

#[test]
fn the_sandbox_contract_holds_on_a_pod() {
    let Some(engine) = cluster() else { return };
    let info =
        engine.start_session(&config(&[8000]), &mut |l| println!("status: {l}")).expect("start");
    let session = engine.open_session(&info.id).expect("open by id");
    let host_tree = std::env::temp_dir().join(format!("psbx-k8s-tree-{}", std::process::id()));
    for (path, bytes) in contract::HOST_TREE {
        let file = host_tree.join(path);
        std::fs::create_dir_all(file.parent().expect("parent")).expect("tree");
        std::fs::write(file, bytes).expect("tree file");
    }
    let expect = contract::Expect {
        published: 8000,
        unpublished: 8001,
        default_cwd: Some(session.workspace().to_owned()),
        commands: true,
        fetch: Some(&http_get),
        host_tree: Some(host_tree.clone()),
        tar_links: true,
    };
    let report = sandbox_core::Executor::block_on(&engine, contract::check(&session, &expect));
    let _ = std::fs::remove_dir_all(&host_tree);
    println!("{}", report.summary());
    report.assert_passed();
    assert!(engine.open_session(&info.id).is_err(), "the pod is gone after the contract's stop");
}

#[test]
fn the_hardening_is_what_the_cluster_kept() {
    let Some(engine) = cluster() else { return };
    let info = engine.start_session(&config(&[]), &mut |_| {}).expect("start");
    let pod = sandbox_core::Executor::block_on(&engine, async {
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(engine.client().clone(), &engine.config().namespace);
        pods.get(&info.sandbox).await
    });
    let stopped = engine.stop_session(&info.id);
    let pod = pod.expect("read back");
    let violations = engine_k8s::restricted::check(&pod);
    assert!(violations.is_empty(), "the kept pod is not restricted: {violations:?}");
    let spec = pod.spec.expect("spec");
    assert_eq!(spec.automount_service_account_token, Some(false));
    assert_eq!(spec.enable_service_links, Some(false));
    let security = spec.containers[0].security_context.clone().expect("security context");
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(security.run_as_user, Some(engine_k8s::manifest::SANDBOX_UID));
    stopped.expect("stop");
}
