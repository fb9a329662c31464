//! The end-to-end tier: a real cluster, when `KUBECONFIG` points at one that answers (else every
//! test prints `SKIPPED: no cluster (KUBECONFIG ...)` and passes; a cluster that answers and
//! then fails is a failure). `cargo xtask test-engines --engine k8s` runs it. The `Sandbox`
//! contract (`sandbox_core::contract`, the one the fake and every engine pass) on a session pod
//! with a network and a published port, and the hardening read back from the pod the cluster
//! kept (old apiservers drop fields they do not know).

#![allow(clippy::print_stdout)]

mod load;

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
        allow: None,
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
    // The URL's own path: the contract asks for a file, not the listing of `/`.
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = after_scheme.find('/').map_or("/", |i| &after_scheme[i..]);
    let mut tcp = std::net::TcpStream::connect((host.as_str(), port)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    write!(tcp, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
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

/// Set in the child that [`a_killed_owner_leaves_nothing_after_the_idle_ttl`] SIGKILLs.
const OWNER_CHILD: &str = "PSBX_K8S_E2E_OWNER_CHILD";
const SHORT_TTL: Duration = Duration::from_secs(20);

/// The child's half: start a session with the short TTL, print its id, wait to be killed.
#[test]
fn owner_child() {
    if std::env::var_os(OWNER_CHILD).is_none() {
        return;
    }
    let config = SandboxConfig { idle_ttl: SHORT_TTL, ..SandboxConfig::default() };
    let engine = K8sEngine::new(config).expect("engine");
    let session = SessionConfig { ttl: SHORT_TTL, ..self::config(&[]) };
    let info = engine.start_session(&session, &mut |_| {}).expect("start");
    println!("SESSION {} {}", info.id, info.sandbox);
    std::io::stdout().flush().expect("flush");
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
fn a_killed_owner_leaves_nothing_after_the_idle_ttl() {
    let Some(engine) = cluster() else { return };
    let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args(["--exact", "owner_child", "--nocapture", "--test-threads=1"])
        .env(OWNER_CHILD, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the owner");
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    let pod = loop {
        line.clear();
        let n = std::io::BufRead::read_line(&mut out, &mut line).expect("read the owner");
        assert!(n > 0, "the owner ended without starting a session");
        // libtest may print `test owner_child ... ` ahead of it on the same line.
        if let Some(rest) = line.trim().split_once("SESSION ").map(|(_, rest)| rest) {
            break rest.split(' ').nth(1).expect("pod name").to_owned();
        }
    };
    // SIGKILL: nothing of the owner runs any cleanup.
    child.kill().expect("kill -9 the owner");
    let _ = child.wait();
    let ns = engine.config().namespace.clone();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(engine.client().clone(), &ns);
    let deadline = std::time::Instant::now() + SHORT_TTL + Duration::from_secs(90);
    loop {
        let got =
            sandbox_core::Executor::block_on(&engine, pods.get_opt(&pod)).expect("read the pod");
        let phase = got.as_ref().and_then(|p| p.status.as_ref()?.phase.clone());
        if !matches!(phase.as_deref(), Some("Running" | "Pending")) {
            println!("after the TTL the pod is {}", phase.as_deref().unwrap_or("gone"));
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "pod `{pod}` still runs long after its idle TTL"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    // The sweep any later CLI runs deletes the finished pod; its dependents go by owner refs.
    engine.reap(false).expect("reap");
    let policies: kube::Api<k8s_openapi::api::networking::v1::NetworkPolicy> =
        kube::Api::namespaced(engine.client().clone(), &ns);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (left_pod, left_policy) = sandbox_core::Executor::block_on(&engine, async {
            (pods.get_opt(&pod).await, policies.get_opt(&pod).await)
        });
        let (left_pod, left_policy) = (left_pod.expect("pod"), left_policy.expect("policy"));
        if left_pod.is_none() && left_policy.is_none() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "left behind: pod {:?}, policy {:?}",
            left_pod.is_some(),
            left_policy.is_some()
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// `open` or `closed: <why>` for a TCP connect from inside the pod.
fn connect_from(
    engine: &K8sEngine,
    session: &engine_k8s::PodSandbox,
    host: &str,
    port: u16,
) -> bool {
    let code = format!(
        "import socket\ntry:\n    socket.create_connection(('{host}', {port}), 4).close(); print('open')\nexcept OSError as e:\n    print('closed:', e)"
    );
    let mut out = sandbox_core::Captured::default();
    let request = sandbox_core::ExecRequest::new(&["python3", "-c", &code]);
    sandbox_core::Executor::block_on(
        engine,
        sandbox_core::Sandbox::exec(session, &request, &mut out),
    )
    .expect("probe");
    println!("connect {host}:{port}: {}", out.stdout_lossy().trim());
    out.stdout_lossy().starts_with("open")
}

/// Net off and net on are what a pod can reach, not objects the apiserver accepted. Every
/// address tried is on this machine or a package registry (by name): the cluster DNS, the
/// apiserver's Service, `pypi.org`. On a cluster whose CNI ignores NetworkPolicy (this test
/// cluster's bridge) net off must be refused before anything runs (issue 33 item 2: it was
/// silently not enforced); where policies hold, net off reaches nothing and net on reaches
/// the registry but not the cluster's private addresses.
#[test]
fn network_policies_are_reachability_not_objects() {
    let Some(engine) = cluster() else { return };
    let api_ip = sandbox_core::Executor::block_on(&engine, async {
        let services: kube::Api<k8s_openapi::api::core::v1::Service> =
            kube::Api::namespaced(engine.client().clone(), "default");
        services.get("kubernetes").await
    })
    .expect("the kubernetes Service")
    .spec
    .and_then(|s| s.cluster_ip)
    .expect("its ClusterIP");
    let off = engine.start_session(&SessionConfig { net: Net::Off, ..config(&[]) }, &mut |_| {});
    let off = match off {
        Ok(off) => off,
        Err(refused) => {
            let text = refused.to_string();
            assert!(
                text.contains("does not enforce NetworkPolicy") && text.contains("hint:"),
                "net off failed otherwise: {text}"
            );
            println!(
                "SKIPPED: net-on reachability: this cluster does not enforce NetworkPolicy (net off was refused: {})",
                text.lines().next().unwrap_or_default()
            );
            return;
        }
    };
    let off_session = engine.open_session(&off.id).expect("open off");
    let mut resolv = sandbox_core::Captured::default();
    let cat = sandbox_core::ExecRequest::new(&["cat", "/etc/resolv.conf"]);
    sandbox_core::Executor::block_on(
        &engine,
        sandbox_core::Sandbox::exec(&off_session, &cat, &mut resolv),
    )
    .expect("resolv.conf");
    let dns = resolv
        .stdout_lossy()
        .lines()
        .find_map(|l| l.strip_prefix("nameserver ").map(|s| s.trim().to_owned()))
        .expect("a cluster DNS server");
    let dns_off = connect_from(&engine, &off_session, &dns, 53);
    let api_off = connect_from(&engine, &off_session, &api_ip, 443);
    let _ = engine.stop_session(&off.id);
    assert!(!dns_off, "net off reached the cluster DNS {dns}:53");
    assert!(!api_off, "net off reached the apiserver's Service {api_ip}:443");
    let on = engine.start_session(&config(&[]), &mut |_| {}).expect("start on");
    let on_session = engine.open_session(&on.id).expect("open on");
    let reached: Vec<(&str, bool)> = [("pypi.org", 443), (api_ip.as_str(), 443)]
        .iter()
        .map(|(host, port)| (*host, connect_from(&engine, &on_session, host, *port)))
        .collect();
    let _ = engine.stop_session(&on.id);
    assert_eq!(
        reached,
        [("pypi.org", true), (api_ip.as_str(), false)],
        "net on: the registry, not the cluster's private addresses"
    );
}

/// The pool's controller lock on the cluster: one holder at a time, renewed by its holder,
/// released for the next (two `pool serve` loops on two hosts are two holders).
#[test]
fn one_pool_serve_holds_the_pools_lease_at_a_time() {
    let Some(engine) = cluster() else { return };
    let ttl = Duration::from_secs(30);
    let (a, b) = ("e2e-host-a/1", "e2e-host-b/2");
    let _ = engine.pool_lease_release(a);
    let _ = engine.pool_lease_release(b);
    assert_eq!(engine.pool_lease_take(a, ttl).unwrap(), sandbox_core::PoolLease::Held);
    assert_eq!(
        engine.pool_lease_take(b, ttl).unwrap(),
        sandbox_core::PoolLease::HeldBy(a.to_owned())
    );
    assert_eq!(engine.pool_lease_take(a, ttl).unwrap(), sandbox_core::PoolLease::Held);
    assert_eq!(engine.pool_lease_holder().unwrap().as_deref(), Some(a));
    // Released only by its holder.
    engine.pool_lease_release(b).unwrap();
    assert_eq!(engine.pool_lease_holder().unwrap().as_deref(), Some(a));
    engine.pool_lease_release(a).unwrap();
    assert_eq!(engine.pool_lease_holder().unwrap(), None);
    assert_eq!(engine.pool_lease_take(b, ttl).unwrap(), sandbox_core::PoolLease::Held);
    engine.pool_lease_release(b).unwrap();
}

/// What a pod's script gets through the cluster's egress proxy (`deploy/egress`, put on the
/// private cluster by the k8s tier) with `proxy` as `HTTPS_PROXY`: one line per attempt.
const THROUGH_PROXY: &str = r#"
import socket, ssl, sys, urllib.request
proxy = sys.argv[1]
def fetch(url):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({'https': proxy, 'http': proxy}))
    try:
        with opener.open(url, timeout=20) as r:
            return 'ok %d' % r.status
    except Exception as e:
        return 'refused %s' % e
def fronted():
    host, port = proxy.rsplit('/', 1)[1].rsplit(':', 1)
    s = socket.create_connection((host, int(port)), 10)
    s.sendall(b'CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n')
    head = s.recv(4096)
    if not head.startswith(b'HTTP/1.1 200'):
        return 'refused at connect'
    try:
        ctx = ssl.create_default_context()
        with ctx.wrap_socket(s, server_hostname='registry.npmjs.org') as t:
            t.sendall(b'GET / HTTP/1.1\r\nHost: registry.npmjs.org\r\n\r\n')
            return 'ok %r' % t.recv(64)
    except Exception as e:
        return 'refused %s' % type(e).__name__
def connect(target):
    host, port = proxy.rsplit('/', 1)[1].rsplit(':', 1)
    with socket.create_connection((host, int(port)), 10) as s:
        s.sendall(b'CONNECT %s HTTP/1.1\r\n\r\n' % target.encode())
        answer = s.recv(4096).decode(errors='replace')
    return ' '.join(answer.split('\r\n', 1)[:1] + answer.split('\r\n\r\n', 1)[1:]).strip()
print('asked', connect('registry.npmjs.org:443'))
print('listed', fetch('https://pypi.org/simple/six/'))
print('unlisted', fetch('https://registry.npmjs.org/'))
print('fronted', fronted())
"#;

/// `net` as a list on a cluster (issue 34). The engine's own path first: where NetworkPolicy
/// is not enforced (this test cluster's bridge), a list is refused before anything runs, as
/// net off is. Then the egress proxy itself, which every list depends on, from a running pod:
/// an address with no list is refused everything; once the pod's policy annotation carries a
/// list (as the engine writes it), the listed registry is fetched, an unlisted one on the same
/// address is refused, and a tunnel opened to the listed name whose TLS hello names another is
/// cut. Every target is a package registry, by name.
#[test]
fn the_egress_proxy_holds_each_pod_to_its_list() {
    let Some(engine) = cluster() else { return };
    let services: kube::Api<k8s_openapi::api::core::v1::Service> =
        kube::Api::namespaced(engine.client().clone(), engine_k8s::egress::NAMESPACE);
    let service =
        sandbox_core::Executor::block_on(&engine, services.get_opt(engine_k8s::egress::SERVICE))
            .expect("read the proxy's Service");
    let Some(proxy_ip) = service.and_then(|s| s.spec).and_then(|s| s.cluster_ip) else {
        println!(
            "SKIPPED: the egress proxy is not deployed (`cargo xtask test-engines --engine k8s` deploys it on the private cluster)"
        );
        return;
    };
    let allow = sandbox_core::Allow::parse(["pypi.org:443"]).expect("list");
    let listed = SessionConfig { allow: Some(allow.clone()), ..config(&[]) };
    match engine.start_session(&listed, &mut |_| {}) {
        Ok(info) => {
            // Policies hold here: the session's own pod reaches only the proxy.
            let session = engine.open_session(&info.id).expect("open");
            let mut out = sandbox_core::Captured::default();
            let request = sandbox_core::ExecRequest::new(&[
                "python3",
                "-c",
                THROUGH_PROXY,
                &format!("http://{proxy_ip}:{}", engine_k8s::egress::PORT),
            ]);
            sandbox_core::Executor::block_on(
                &engine,
                sandbox_core::Sandbox::exec(&session, &request, &mut out),
            )
            .expect("through the proxy");
            let _ = engine.stop_session(&info.id);
            let text = out.stdout_lossy();
            println!("{text}");
            assert!(text.contains("listed ok 200"), "{text}");
            assert!(text.contains("unlisted refused"), "{text}");
            assert!(text.contains("fronted refused"), "{text}");
            return;
        }
        Err(refused) => {
            let text = refused.to_string();
            assert!(
                text.contains("a list of hosts")
                    && text.contains("does not enforce NetworkPolicy")
                    && text.contains("hint:"),
                "a list failed otherwise: {text}"
            );
            println!(
                "a list is refused where NetworkPolicy is not enforced: {}",
                text.lines().next().unwrap_or_default()
            );
        }
    }
    if std::env::var_os("PSBX_EGRESS_PROXY_DEPLOYED").is_none() {
        println!(
            "SKIPPED: the egress proxy from a pod: PSBX_EGRESS_PROXY_DEPLOYED is not set (`cargo xtask test-engines --engine k8s` deploys the proxy and sets it)"
        );
        return;
    }
    // The proxy itself, from a session pod whose annotation is given a list the way the
    // engine writes it (this cluster lets the pod go around the proxy; the proxy is what is
    // tested here).
    let info = engine.start_session(&config(&[]), &mut |_| {}).expect("start on");
    let session = engine.open_session(&info.id).expect("open on");
    let proxy = format!("http://{proxy_ip}:{}", engine_k8s::egress::PORT);
    let through = |engine: &K8sEngine| {
        let mut out = sandbox_core::Captured::default();
        let request = sandbox_core::ExecRequest::new(&["python3", "-c", THROUGH_PROXY, &proxy]);
        sandbox_core::Executor::block_on(
            engine,
            sandbox_core::Sandbox::exec(&session, &request, &mut out),
        )
        .expect("through the proxy");
        let text = out.stdout_lossy();
        println!("{text}");
        text
    };
    let before = through(&engine);
    let unknown =
        "403 Forbidden python-sandbox proxy: this proxy serves only sandboxes with a network list";
    assert!(before.contains(unknown), "no list yet: {before}");
    assert!(before.contains("listed refused") && before.contains("fronted refused"), "{before}");
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(engine.client().clone(), "python-sandbox");
    let name = engine_k8s::manifest::pod_name(&info.id);
    let pod = sandbox_core::Executor::block_on(&engine, pods.get(&name)).expect("the pod");
    let annotations = pod.metadata.annotations.unwrap_or_default();
    let mut policy: sandbox_core::SessionPolicy = serde_json::from_str(
        annotations.get(engine_k8s::session::POLICY_ANNOTATION).expect("a policy annotation"),
    )
    .expect("the policy");
    policy.allow = Some(allow);
    let patch = serde_json::json!({"metadata": {"annotations": {
        engine_k8s::session::POLICY_ANNOTATION: serde_json::to_string(&policy).expect("json"),
    }}});
    sandbox_core::Executor::block_on(
        &engine,
        pods.patch(&name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)),
    )
    .expect("patch the annotation");
    // The proxy follows the pod's annotation within moments.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let after = loop {
        let text = through(&engine);
        if !text.contains(unknown) || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    // What a run asks once its script is done: the proxy tells the pod its own refusals.
    let ip: std::net::IpAddr = proxy_ip.parse().expect("the Service's address");
    let argv = engine_k8s::egress::refused_query(ip);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut told = sandbox_core::Captured::default();
    sandbox_core::Executor::block_on(
        &engine,
        sandbox_core::Sandbox::exec(&session, &sandbox_core::ExecRequest::new(&argv), &mut told),
    )
    .expect("the refusals query");
    let refused: Vec<sandbox_core::NetRefused> = serde_json::from_slice(&told.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", told.stderr_lossy()));
    println!("told: {refused:?}");
    assert!(refused.iter().any(|r| r.host == "registry.npmjs.org"), "{refused:?}");
    let _ = engine.stop_session(&info.id);
    assert!(after.contains("listed ok 200"), "the listed registry: {after}");
    assert!(after.contains("unlisted refused") && after.contains("403"), "another name: {after}");
    let named = "asked HTTP/1.1 403 Forbidden python-sandbox proxy: refusing registry.npmjs.org:443: not in the list";
    assert!(after.contains(named), "the refusal names the host: {after}");
    // The proxy's log names the pod and what it was refused (logged as its list goes).
    let proxies: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(engine.client().clone(), engine_k8s::egress::NAMESPACE);
    let selector = format!("{}={}", engine_k8s::egress::APP_LABEL, engine_k8s::egress::SERVICE);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let logged = loop {
        let logs = sandbox_core::Executor::block_on(&engine, async {
            let mut text = String::new();
            let listed = proxies.list(&kube::api::ListParams::default().labels(&selector)).await?;
            for pod in listed.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
                let name = pod.metadata.name.as_deref().unwrap_or_default();
                text.push_str(&proxies.logs(name, &kube::api::LogParams::default()).await?);
            }
            Ok::<_, kube::Error>(text)
        })
        .expect("the proxy's log");
        let line = format!("pod {name} refused: registry.npmjs.org");
        if logs.contains(&line) || std::time::Instant::now() > deadline {
            break logs;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(logged.contains(&format!("pod {name} refused: registry.npmjs.org")), "{logged}");
    assert!(after.contains("fronted refused"), "a tunnel to pypi.org naming npm: {after}");
}
