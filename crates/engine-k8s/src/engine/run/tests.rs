//! `run --engine k8s` against a stand-in cluster on a local port: a small stateful apiserver
//! (claims, pods and policies kept as created, watches answered from that state) and, for
//! WebSocket exec upgrades, a stand-in pod that speaks `v4.channel.k8s.io` and the agent's
//! frames and runs each command as a local process (the environment's python and the sandbox
//! python mapped to this machine's interpreter, the prepare command scripted). The engine is
//! the real one on a real `kube::Client` over HTTP: every request is the one a cluster gets.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use sandbox_core::{Classify as _, Engine as _, ErrorClass, Net, Output, RunIo, RunSpec, Stdin};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_tungstenite::tungstenite::Message;

use super::super::K8sEngine;
use crate::api_tests::key;
use crate::{SandboxConfig, channel, environment};

const NS: &str = "python-sandbox";
const PYTHON: &str = "/usr/bin/python3.11";

/// What the stand-in cluster holds and saw.
#[derive(Default)]
struct State {
    /// `METHOD path?query` of every request, in order.
    log: Vec<String>,
    claims: BTreeMap<String, Value>,
    pods: BTreeMap<String, Value>,
    version: u64,
    /// Claims are refused (403), as for a Role without them.
    forbid_claims: bool,
    /// Pods never start: their image cannot be pulled.
    pull_fails: bool,
    /// The prepare command's exit code and stderr, and how long it takes.
    prepare: (i32, String),
    prepare_takes: Duration,
    /// A pod's agent cannot empty it (a process outlived `SIGKILL`): its `EMPTY_POD` fails.
    stuck: bool,
    /// The argv of every command run in a pod.
    commands: Vec<Vec<String>>,
    /// The env of every command run in a pod, as its request carried it.
    envs: Vec<Vec<(String, String)>>,
    /// Every pod as created, kept after its delete.
    created: Vec<Value>,
    /// Watch streams open now, and the most at once, by the name they watch.
    watching: BTreeMap<String, usize>,
    most_watching: BTreeMap<String, usize>,
}

type Shared = Arc<Mutex<State>>;

struct Cluster {
    url: String,
    state: Shared,
}

impl Cluster {
    async fn start() -> Cluster {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let state = Shared::default();
        let shared = Arc::clone(&state);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(serve(tcp, Arc::clone(&shared)));
            }
        });
        Cluster { url, state }
    }

    fn log(&self) -> Vec<String> {
        self.state.lock().expect("state").log.clone()
    }
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "code": code, "reason": reason, "message": message})
}

fn ready_status() -> Value {
    json!({"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "sandbox", "image": "x", "imageID": "", "ready": true,
            "restartCount": 0, "state": {"running": {"startedAt": "2025-01-01T00:00:02Z"}}}]})
}

/// How long the stand-in kubelet takes to remove a pod deleted with a grace period.
const KUBELET_BATCH: Duration = Duration::from_secs(3);

/// A deleted pod's status once its container was stopped.
fn stopped_status() -> Value {
    json!({"phase": "Failed", "containerStatuses": [{"name": "sandbox", "image": "x",
        "imageID": "", "ready": false, "restartCount": 0, "state": {"terminated": {
            "exitCode": 137, "reason": "Error"}}}]})
}

fn pull_failed_status() -> Value {
    json!({"phase": "Pending", "containerStatuses": [{"name": "sandbox", "image": "x",
        "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {
            "reason": "ErrImagePull",
            "message": "failed to pull image \"x\": not found"}}}]})
}

/// Reads one request head (and its body), without consuming it when it is an upgrade.
async fn serve(tcp: tokio::net::TcpStream, state: Shared) {
    let mut peeked = vec![0u8; 64 << 10];
    let head = loop {
        let Ok(n) = tcp.peek(&mut peeked).await else { return };
        if n == 0 {
            return;
        }
        if let Some(end) = peeked[..n].windows(4).position(|w| w == b"\r\n\r\n") {
            break String::from_utf8_lossy(&peeked[..end]).into_owned();
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let lower = head.to_ascii_lowercase();
    let line = head.lines().next().unwrap_or_default().to_owned();
    let mut parts = line.split(' ');
    let method = parts.next().unwrap_or_default().to_owned();
    let target = parts.next().unwrap_or_default().to_owned();
    state.lock().expect("state").log.push(format!("{method} {target}"));
    // A port-forward's connection: refused, as from a pod where nothing listens yet.
    if target.contains("/portforward") {
        return;
    }
    if lower.contains("upgrade: websocket") {
        return pod_exec(tcp, state).await;
    }
    let mut tcp = tcp;
    let length: usize = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut buf = vec![0u8; head.len() + 4 + length];
    if tcp.read_exact(&mut buf).await.is_err() {
        return;
    }
    let body: Value = serde_json::from_slice(&buf[head.len() + 4..]).unwrap_or(Value::Null);
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    if query.contains("watch=true") {
        return watch(tcp, path, query, state).await;
    }
    let (code, answer) = rest(&state, &method, path, body);
    let bytes = serde_json::to_vec(&answer).expect("json");
    let head = format!(
        "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        bytes.len()
    );
    let _ = tcp.write_all(head.as_bytes()).await;
    let _ = tcp.write_all(&bytes).await;
}

fn rest(state: &Shared, method: &str, path: &str, body: Value) -> (u16, Value) {
    let mut s = state.lock().expect("state");
    let prefix = format!("/api/v1/namespaces/{NS}/");
    let net = format!("/apis/networking.k8s.io/v1/namespaces/{NS}/");
    let rest = path.strip_prefix(&prefix).or_else(|| path.strip_prefix(&net)).unwrap_or(path);
    let (kind, name) = rest.split_once('/').unwrap_or((rest, ""));
    s.version += 1;
    let version = s.version.to_string();
    let created = |mut object: Value| {
        object["metadata"]["uid"] = json!(format!("uid-{version}"));
        object["metadata"]["resourceVersion"] = json!(version);
        object
    };
    match (method, kind, name) {
        (_, "persistentvolumeclaims", _) if s.forbid_claims => (
            403,
            status(
                403,
                "Forbidden",
                "persistentvolumeclaims is forbidden: User \"alice\" cannot create resource \"persistentvolumeclaims\" in API group \"\" in the namespace \"python-sandbox\"",
            ),
        ),
        ("GET", "persistentvolumeclaims", "") => (
            200,
            json!({"kind": "PersistentVolumeClaimList",
            "apiVersion": "v1", "metadata": {}, "items": s.claims.values().collect::<Vec<_>>()}),
        ),
        ("GET", "persistentvolumeclaims", name) => match s.claims.get(name) {
            Some(claim) => (200, claim.clone()),
            None => (404, status(404, "NotFound", "not found")),
        },
        ("POST", "persistentvolumeclaims", "") => {
            let name = body["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            if s.claims.contains_key(&name) {
                return (409, status(409, "AlreadyExists", "already exists"));
            }
            let claim = created(body);
            s.claims.insert(name, claim.clone());
            (201, claim)
        }
        ("PATCH", "persistentvolumeclaims", name) => {
            let Some(claim) = s.claims.get_mut(name) else {
                return (404, status(404, "NotFound", "not found"));
            };
            let asked = body["metadata"]["resourceVersion"].as_str();
            if asked.is_some_and(|v| Some(v) != claim["metadata"]["resourceVersion"].as_str()) {
                return (409, status(409, "Conflict", "the object has been modified"));
            }
            for (k, v) in body["metadata"]["annotations"].as_object().into_iter().flatten() {
                claim["metadata"]["annotations"][k] = v.clone();
            }
            claim["metadata"]["resourceVersion"] = json!(version);
            (200, claim.clone())
        }
        ("DELETE", "persistentvolumeclaims", name)
            if body["preconditions"]["uid"].as_str().is_some_and(|uid| {
                Some(uid) != s.claims.get(name).and_then(|c| c["metadata"]["uid"].as_str())
            }) =>
        {
            (409, status(409, "Conflict", "precondition failed: uid"))
        }
        ("DELETE", "persistentvolumeclaims", name) => match s.claims.remove(name) {
            Some(claim) => (200, claim),
            None => (404, status(404, "NotFound", "not found")),
        },
        ("GET", "pods", "") => (
            200,
            json!({"kind": "PodList", "apiVersion": "v1",
            "metadata": {}, "items": s.pods.values().collect::<Vec<_>>()}),
        ),
        ("POST", "pods", "") => {
            let name = body["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            let pod = created(body);
            s.created.push(pod.clone());
            s.pods.insert(name, pod.clone());
            (201, pod)
        }
        // As a kubelet does: a graceful delete stops the containers (the pod shows them
        // terminated) and the object goes only at its status batch (here 3 s later); a delete
        // with no grace removes it at once.
        ("DELETE", "pods", name) if body["gracePeriodSeconds"] == json!(0) => {
            match s.pods.remove(name) {
                Some(pod) => (200, pod),
                None => (404, status(404, "NotFound", "not found")),
            }
        }
        ("DELETE", "pods", name) => {
            let Some(pod) = s.pods.get_mut(name) else {
                return (404, status(404, "NotFound", "not found"));
            };
            pod["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:09Z");
            pod["metadata"]["resourceVersion"] = json!(version);
            pod["status"] = stopped_status();
            let answer = pod.clone();
            let (state, name) = (Arc::clone(state), name.to_owned());
            tokio::spawn(async move {
                tokio::time::sleep(KUBELET_BATCH).await;
                state.lock().expect("state").pods.remove(&name);
            });
            (200, answer)
        }
        ("GET", "pods", name) => match s.pods.get(name) {
            Some(pod) => (200, pod.clone()),
            None => (404, status(404, "NotFound", "not found")),
        },
        ("POST", "networkpolicies" | "services" | "ingresses", "") => (201, created(body)),
        ("GET", "events", "") => (
            200,
            json!({"kind": "EventList", "apiVersion": "v1",
            "metadata": {}, "items": []}),
        ),
        _ => (500, status(500, "InternalError", "unexpected request")),
    }
}

/// A watch of one pod or claim (by field selector), answered from the state: a pod's start as
/// it is, a claim's events as it changes until it is ready or gone, or the watch's own end.
async fn watch(mut tcp: tokio::net::TcpStream, path: &str, query: &str, state: Shared) {
    let name = query
        .split('&')
        .find_map(|p| p.strip_prefix("fieldSelector=metadata.name%3D"))
        .unwrap_or_default()
        .to_owned();
    {
        let mut s = state.lock().expect("state");
        let now = *s.watching.entry(name.clone()).and_modify(|n| *n += 1).or_insert(1);
        let most = s.most_watching.entry(name.clone()).or_insert(0);
        *most = (*most).max(now);
    }
    answer_watch(&mut tcp, path, &name, &state).await;
    if let Some(n) = state.lock().expect("state").watching.get_mut(&name) {
        *n -= 1;
    }
}

async fn answer_watch(tcp: &mut tokio::net::TcpStream, path: &str, name: &str, state: &Shared) {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    let _ = tcp.write_all(head.as_bytes()).await;
    let send = |event: Value| {
        let line = format!("{event}\n");
        format!("{:x}\r\n{line}\r\n", line.len())
    };
    if path.ends_with("/pods") {
        // The pod as it is (a kubelet's status made up for one not deleted and not exited),
        // then each change of it for a while, as a real watch stays open.
        let mut last = None;
        for _ in 0..500 {
            // The client went away (a pod's start seen): the watch ends with it.
            if matches!(tcp.try_read(&mut [0u8; 1]), Ok(0)) {
                return;
            }
            let (pod, fails) = {
                let s = state.lock().expect("state");
                (s.pods.get(name).cloned(), s.pull_fails)
            };
            let Some(mut pod) = pod else {
                if let Some(seen) = last {
                    let gone = json!({"type": "DELETED", "object": seen});
                    let _ = tcp.write_all(send(gone).as_bytes()).await;
                }
                break;
            };
            if last.as_ref().is_none_or(|l: &Value| {
                l["metadata"] != pod["metadata"] || l["status"]["phase"] != pod["status"]["phase"]
            }) {
                let exited = pod["status"]["phase"] == json!("Failed");
                if pod["metadata"]["deletionTimestamp"].is_null() && !exited {
                    pod["status"] = if fails { pull_failed_status() } else { ready_status() };
                }
                let event = json!({"type": "MODIFIED", "object": pod});
                if tcp.write_all(send(event).as_bytes()).await.is_err() {
                    return;
                }
                last = state.lock().expect("state").pods.get(name).cloned();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    } else {
        let seen = state.lock().expect("state").claims.get(name).cloned();
        let mut last = seen.as_ref().map(|c| c["metadata"]["resourceVersion"].clone());
        for _ in 0..500 {
            let now = state.lock().expect("state").claims.get(name).cloned();
            match now {
                None => {
                    let gone = json!({"type": "DELETED", "object": seen.clone()});
                    let _ = tcp.write_all(send(gone).as_bytes()).await;
                    break;
                }
                Some(claim) if Some(&claim["metadata"]["resourceVersion"]) != last.as_ref() => {
                    last = Some(claim["metadata"]["resourceVersion"].clone());
                    let event = json!({"type": "MODIFIED", "object": claim});
                    if tcp.write_all(send(event).as_bytes()).await.is_err() {
                        return;
                    }
                }
                Some(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let _ = tcp.write_all(b"0\r\n\r\n").await;
}

fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![channel::STDOUT, kind];
    out.extend_from_slice(&u32::try_from(payload.len()).expect("len").to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// One exec: the relay's request header and input frames read, the command run, its output
/// and exit sent back as agent frames.
async fn pod_exec(tcp: tokio::net::TcpStream, state: Shared) {
    #[allow(clippy::result_large_err)]
    let pick =
        |_: &tokio_tungstenite::tungstenite::handshake::server::Request,
         mut response: tokio_tungstenite::tungstenite::handshake::server::Response| {
            response.headers_mut().insert(
                "sec-websocket-protocol",
                channel::Protocol::V4.name().parse().expect("header"),
            );
            Ok(response)
        };
    let Ok(socket) = tokio_tungstenite::accept_hdr_async(tcp, pick).await else { return };
    let (mut sink, mut stream) = socket.split();
    let mut input = Vec::new();
    let mut stdin = Vec::new();
    let header = 'read: loop {
        let Some(Ok(Message::Binary(bytes))) = stream.next().await else { return };
        if bytes.first() == Some(&channel::STDIN) {
            input.extend_from_slice(&bytes[1..]);
        }
        let Some(len) = input.get(..4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]])) else {
            continue;
        };
        let len = len as usize;
        let Some(header) = input.get(4..4 + len) else { continue };
        let header: Value = serde_json::from_slice(header).expect("header");
        let mut at = 4 + len;
        while let Some(head) = input.get(at..at + 5) {
            let n = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
            let Some(payload) = input.get(at + 5..at + 5 + n) else { break };
            match head[0] {
                b'i' => stdin.extend_from_slice(payload),
                b'c' => break 'read header,
                _ => {}
            }
            at += 5 + n;
        }
        stdin.clear();
    };
    let argv: Vec<String> = serde_json::from_value(header["cmd"].clone()).expect("argv");
    let cwd = header["cwd"].as_str().unwrap_or("/").to_owned();
    let env: Vec<(String, String)> = serde_json::from_value(header["env"].clone()).expect("env");
    {
        let mut s = state.lock().expect("state");
        s.commands.push(argv.clone());
        s.envs.push(env.clone());
    }
    let _ = sink.send(Message::binary(frame(b'v', br#"{"v": 2}"#))).await;
    let (code, stdout, stderr) = if argv == super::EMPTY_POD {
        // As a pod's agent answers once it killed the rest of its pod: never run here, where
        // `kill -1` would reach the host's processes.
        match state.lock().expect("state").stuck {
            false => (0, super::EMPTIED.to_vec(), Vec::new()),
            true => (1, Vec::new(), Vec::new()),
        }
    } else if argv.get(2).map(String::as_str) == Some(environment::PREPARE) {
        let ((code, stderr), takes) = {
            let s = state.lock().expect("state");
            (s.prepare.clone(), s.prepare_takes)
        };
        tokio::time::sleep(takes).await;
        (code, Vec::new(), stderr.into_bytes())
    } else {
        let mut argv = argv;
        if argv[0] == environment::python() || argv[0] == sandbox_core::sync::SANDBOX_PYTHON {
            argv[0] = PYTHON.to_owned();
        }
        run_local(&argv, &cwd, &env, &stdin).await
    };
    for (kind, bytes) in [(b'o', stdout), (b'e', stderr)] {
        for chunk in bytes.chunks(32 << 10) {
            let _ = sink.send(Message::binary(frame(kind, chunk))).await;
        }
    }
    let exit = format!(r#"{{"code": {code}}}"#);
    let _ = sink.send(Message::binary(frame(b'x', exit.as_bytes()))).await;
    // The client closes once it has the exit.
    while let Some(Ok(_)) = stream.next().await {}
}

async fn run_local(
    argv: &[String],
    cwd: &str,
    env: &[(String, String)],
    stdin: &[u8],
) -> (i32, Vec<u8>, Vec<u8>) {
    let mut command = tokio::process::Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .current_dir(cwd)
        // As the pod's agent runs it (`sandbox_core::agent::EXACT_ENV_ARG`).
        .env_clear()
        .envs(env.iter().cloned())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let Ok(mut child) = command.spawn() else {
        return (127, Vec::new(), format!("{}: not found", argv[0]).into_bytes());
    };
    let mut pipe = child.stdin.take().expect("stdin");
    let input = stdin.to_vec();
    let feed = tokio::spawn(async move {
        let _ = pipe.write_all(&input).await;
    });
    let out = child.wait_with_output().await.expect("wait");
    let _ = feed.await;
    (out.status.code().unwrap_or(137), out.stdout, out.stderr)
}

/// A scratch workspace and pod workdir of their own (a pod workdir may not be under `/tmp`).
struct Scratch {
    root: std::path::PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        static N: AtomicUsize = AtomicUsize::new(0);
        let root = std::path::PathBuf::from(format!(
            "/var/tmp/psbx-k8s-run-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        for dir in ["host", "pod"] {
            std::fs::create_dir_all(root.join(dir)).expect("scratch");
        }
        Scratch { root }
    }

    fn host(&self) -> std::path::PathBuf {
        self.root.join("host")
    }

    fn pod(&self) -> String {
        self.root.join("pod").display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn engine(cluster: &Cluster, scratch: &Scratch) -> K8sEngine {
    engine_with(cluster, SandboxConfig { workdir: scratch.pod(), ..SandboxConfig::default() })
}

fn engine_with(cluster: &Cluster, sandbox: SandboxConfig) -> K8sEngine {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let config = kube::Config::new(cluster.url.parse().expect("url"));
    let client = rt.block_on(async { kube::Client::try_from(config).expect("client") });
    let mut engine = K8sEngine::with_client(sandbox, rt, client, key()).expect("engine");
    // The fake cluster enforces its policies (the refusal is the e2e tier's, on a real one).
    engine.assumed_policy = Some(crate::netoff::Verdict::Enforced);
    engine
}

fn spec(scratch: &Scratch, source: &str) -> RunSpec {
    let script = scratch.root.join("hello.py");
    std::fs::write(&script, source).expect("script");
    RunSpec {
        script,
        args: Vec::new(),
        dependencies: vec!["rich".to_owned()],
        requires_python: None,
        mounts: Vec::new(),
        net: Net::Off,
        allow: None,
        publish: Vec::new(),
        env: Vec::new(),
        timeout: Some(Duration::from_secs(60)),
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        limits: sandbox_core::Limits::NONE,
        workspace: scratch.host(),
    }
}

/// Runs `spec` prepared, its output captured; the exit code and stdout.
fn run(engine: &K8sEngine, spec: &RunSpec, stdin: Stdin) -> (i32, String, Vec<String>) {
    let prepared = engine.prepare(spec, &mut |_| {}).expect("prepared");
    let mut out = sandbox_core::Captured::default();
    let io = RunIo {
        stdin,
        output: Output::Sink(&mut out),
        status: None,
        published: None,
        started: None,
    };
    let outcome = engine.run_prepared(spec, &prepared, io).expect("ran");
    (outcome.exit_code, out.stdout_lossy(), outcome.warnings)
}

/// The log without ids, versions and query noise: what a reader checks the flow by.
fn flow(log: &[String]) -> String {
    log.iter()
        .map(|l| {
            let (path, query) = l.split_once('?').unwrap_or((l, ""));
            let path = path.replace(&format!("/namespaces/{NS}"), "");
            let mut shown: String = path
                .split('/')
                .map(|part| {
                    if part.starts_with("psbx-env-") {
                        "psbx-env-<key>"
                    } else if part.starts_with("psbx-") {
                        "psbx-<id>"
                    } else {
                        part
                    }
                })
                .collect::<Vec<_>>()
                .join("/");
            if query.contains("watch=true") {
                shown.push_str(" (watch)");
            }
            if path.ends_with("/exec") {
                shown = "EXEC".to_owned();
            }
            shown
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_cold_run_prepares_the_claim_once_and_a_warm_run_only_reads_it() {
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let cluster = rt.block_on(Cluster::start());
    let scratch = Scratch::new();
    std::fs::write(scratch.host().join("input.txt"), "from the host").expect("input");
    let engine = engine(&cluster, &scratch);
    let script = "import pathlib\nprint(pathlib.Path('input.txt').read_text())\n\
                  pathlib.Path('output.txt').write_text('from the pod')\n";
    let spec = spec(&scratch, script);
    let (code, stdout, _) = run(&engine, &spec, Stdin::Null);
    assert_eq!((code, stdout.as_str()), (0, "from the host\n"));
    let echo = self::spec(&scratch, "import sys\nprint(sys.stdin.read().upper(), end='')\n");
    let (code, stdout, _) = run(&engine, &echo, Stdin::Bytes(b"piped in\n".to_vec()));
    assert_eq!((code, stdout.as_str()), (0, "PIPED IN\n"), "stdin reaches the script");
    // The first run's requests (the second's follow).
    cluster.state.lock().expect("state").log.truncate(24);
    assert_eq!(
        std::fs::read_to_string(scratch.host().join("output.txt")).expect("synced back"),
        "from the pod"
    );
    let state = cluster.state.lock().expect("state");
    assert!(state.pods.is_empty(), "a pod was left: {:?}", state.pods.keys());
    let claim = state.claims.values().next().expect("the claim");
    assert!(environment::is_ready(&serde_json::from_value(claim.clone()).expect("claim")));
    drop(state);
    insta::assert_snapshot!(flow(&cluster.log()), @r"
    GET /api/v1/persistentvolumeclaims/psbx-env-<key>
    POST /api/v1/persistentvolumeclaims
    POST /api/v1/pods
    POST /apis/networking.k8s.io/v1/networkpolicies
    GET /api/v1/pods (watch)
    GET /api/v1/pods/psbx-<id>/portforward
    EXEC
    GET /api/v1/pods/psbx-<id>/portforward
    EXEC
    DELETE /api/v1/pods/psbx-<id>
    PATCH /api/v1/persistentvolumeclaims/psbx-env-<key>
    POST /api/v1/pods
    POST /apis/networking.k8s.io/v1/networkpolicies
    GET /api/v1/pods (watch)
    GET /api/v1/pods/psbx-<id>/portforward
    EXEC
    EXEC
    EXEC
    EXEC
    EXEC
    EXEC
    GET /api/v1/pods/psbx-<id>/portforward
    EXEC
    DELETE /api/v1/pods/psbx-<id>
    ");

    cluster.state.lock().expect("state").log.clear();
    let prepared =
        engine.prepare(&spec, &mut |_| panic!("a warm run prepares nothing")).expect("warm");
    assert_eq!(flow(&cluster.log()), "GET /api/v1/persistentvolumeclaims/psbx-env-<key>");
    drop(prepared);
}

/// A pod its agent could not empty is stopped by the kubelet, and waited for: deleted with a
/// grace period and watched until it stopped, then removed; nothing of the run is left.
#[test]
fn a_run_whose_pod_could_not_be_emptied_waits_for_the_kubelets_stop() {
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let cluster = rt.block_on(Cluster::start());
    let scratch = Scratch::new();
    let engine = engine(&cluster, &scratch);
    let spec = spec(&scratch, "print('ran')\n");
    assert_eq!(run(&engine, &spec, Stdin::Null).0, 0, "warms the claim");
    {
        let mut state = cluster.state.lock().expect("state");
        state.stuck = true;
        state.log.clear();
    }
    let (code, stdout, _) = run(&engine, &spec, Stdin::Null);
    assert_eq!((code, stdout.as_str()), (0, "ran\n"));
    let state = cluster.state.lock().expect("state");
    assert!(state.pods.is_empty(), "a pod was left: {:?}", state.pods.keys());
    let log = flow(&state.log);
    let end: Vec<&str> = log.lines().skip_while(|l| !l.starts_with("DELETE")).collect();
    assert_eq!(end[..2], ["DELETE /api/v1/pods/psbx-<id>", "GET /api/v1/pods (watch)"], "{log}");
    assert_eq!(end.iter().filter(|l| l.starts_with("DELETE")).count(), 2, "{log}");
}

/// The env-contract case of the conformance suite, as far as it can run here: the script's
/// request carries exactly the contract's names (and its `--env`), nothing of a session's uv
/// settings; the prepare's carries the pod's own environment.
#[test]
fn a_runs_script_gets_exactly_the_contract_env_and_its_own_env_values() {
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let cluster = rt.block_on(Cluster::start());
    let scratch = Scratch::new();
    let engine = engine(&cluster, &scratch);
    let mut spec = spec(
        &scratch,
        "import os\nprint(' '.join(sorted(os.environ)))\nprint(os.environ['PWD'] == os.getcwd())\n",
    );
    spec.env = vec![sandbox_core::EnvVar { name: "MINE".to_owned(), value: Some("1".to_owned()) }];
    let (code, stdout, _) = run(&engine, &spec, Stdin::Null);
    assert_eq!(
        (code, stdout.as_str()),
        (
            0,
            "HOME HOSTNAME LANG MINE PATH PWD REQUESTS_CA_BUNDLE SSL_CERT_FILE VIRTUAL_ENV container\nTrue\n"
        )
    );
    let state = cluster.state.lock().expect("state");
    let at = state.commands.iter().position(|c| c[0] == environment::python()).expect("script");
    let env: BTreeMap<&str, &str> =
        state.envs[at].iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let ca = sandbox_core::SANDBOX_CA_BUNDLE;
    let venv = environment::ENV_DIR;
    let pwd = scratch.pod();
    let path = format!("{venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
    let expected = BTreeMap::from([
        ("HOME", sandbox_core::SANDBOX_HOME),
        ("HOSTNAME", sandbox_core::SANDBOX_HOSTNAME),
        ("LANG", "C.UTF-8"),
        ("MINE", "1"),
        ("PATH", path.as_str()),
        ("PWD", pwd.as_str()),
        ("REQUESTS_CA_BUNDLE", ca),
        ("SSL_CERT_FILE", ca),
        ("VIRTUAL_ENV", venv),
        ("container", sandbox_core::SANDBOX_CONTAINER),
    ]);
    assert_eq!(env, expected);
    let at = state
        .commands
        .iter()
        .position(|c| c.get(2).map(String::as_str) == Some(environment::PREPARE))
        .expect("prepare");
    let names: Vec<&str> = state.envs[at].iter().map(|(k, _)| k.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len(), "one value per name: {names:?}");
    assert_eq!(
        sorted.join(" "),
        "HOME HOSTNAME LANG PATH PWD REQUESTS_CA_BUNDLE SSL_CERT_FILE UV_CACHE_DIR UV_NATIVE_TLS \
         UV_NO_CONFIG UV_NO_PROGRESS UV_PYTHON_DOWNLOADS UV_SYSTEM_CERTS container"
    );
}

/// What a test breaks in the stand-in cluster.
type Breaks = fn(&mut State);

#[test]
fn a_prepare_that_fails_or_cannot_start_names_why_and_leaves_no_pod_and_no_claim() {
    let broken: [(Breaks, &str); 2] = [
        (
            |s| s.prepare = (1, "error: no solution found when resolving: rich==99".to_owned()),
            "no solution found",
        ),
        (|s| s.pull_fails = true, "ErrImagePull"),
    ];
    for (breaks, why) in broken {
        let rt = tokio::runtime::Runtime::new().expect("rt");
        let cluster = rt.block_on(Cluster::start());
        let scratch = Scratch::new();
        breaks(&mut cluster.state.lock().expect("state"));
        let engine = engine(&cluster, &scratch);
        let error = engine.prepare(&spec(&scratch, "print(1)\n"), &mut |_| {}).expect_err("fails");
        let message = error.to_string();
        assert!(message.contains(why) && message.contains("hint:"), "{message}");
        let state = cluster.state.lock().expect("state");
        assert!(state.pods.is_empty(), "a pod was left: {:?}", state.pods.keys());
        assert!(
            state.claims.is_empty(),
            "a half-prepared claim was left: {:?}",
            state.claims.keys()
        );
    }
}

#[test]
fn claims_the_role_does_not_allow_are_named_with_a_hint_and_nothing_is_made() {
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let cluster = rt.block_on(Cluster::start());
    let scratch = Scratch::new();
    cluster.state.lock().expect("state").forbid_claims = true;
    let engine = engine(&cluster, &scratch);
    let error = engine.prepare(&spec(&scratch, "print(1)\n"), &mut |_| {}).expect_err("fails");
    assert!(matches!(error, crate::Error::Forbidden { .. }), "{error:?}");
    assert_eq!(error.class(), ErrorClass::Setup, "{error}");
    let message = error.to_string();
    assert!(message.contains("persistentvolumeclaim") && message.contains("hint:"), "{message}");
    let state = cluster.state.lock().expect("state");
    assert!(state.pods.is_empty() && state.commands.is_empty(), "{:?}", state.log);
}

/// What a run with `--publish 8000` tells its `published` hook under `preview`, and the
/// log of the run.
fn published_run(preview: crate::Preview) -> (Vec<sandbox_core::PublishedPort>, bool, String) {
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let cluster = rt.block_on(Cluster::start());
    let scratch = Scratch::new();
    let sandbox = SandboxConfig { workdir: scratch.pod(), preview, ..SandboxConfig::default() };
    let engine = engine_with(&cluster, sandbox);
    let mut spec = spec(&scratch, "print('served')\n");
    spec.net = Net::On;
    spec.publish = vec![sandbox_core::Publish::same(8000)];
    let prepared = engine.prepare(&spec, &mut |_| {}).expect("prepared");
    cluster.state.lock().expect("state").log.clear();
    let mut told = Vec::new();
    // Whether the port-forward accepts while the run is up.
    let mut reachable = false;
    let mut hook = |ports: &[sandbox_core::PublishedPort]| {
        for p in ports.iter().filter(|p| p.preview.is_none()) {
            reachable = std::net::TcpStream::connect((p.addr, p.host_port)).is_ok();
        }
        told.extend_from_slice(ports);
    };
    let mut out = sandbox_core::Captured::default();
    let io = RunIo {
        stdin: Stdin::Null,
        output: Output::Sink(&mut out),
        status: None,
        published: Some(&mut hook),
        started: None,
    };
    let outcome = engine.run_prepared(&spec, &prepared, io).expect("ran");
    assert_eq!((outcome.exit_code, out.stdout_lossy().as_str()), (0, "served\n"));
    assert!(
        !outcome.warnings.iter().any(|w| w.contains("published")),
        "the URL is the hook's, not a warning: {:?}",
        outcome.warnings
    );
    let log = flow(&cluster.log());
    (told, reachable, log)
}

#[test]
fn a_runs_published_port_is_told_to_the_hook_as_its_ingress_url() {
    let (told, _, log) = published_run(crate::Preview::Ingress);
    let [port] = told.as_slice() else { panic!("{told:?}") };
    assert_eq!(port.port, 8000);
    let url = port.url();
    assert!(
        url.starts_with("http://")
            && url.ends_with(&format!(".{}", crate::config::DEFAULT_PREVIEW_DOMAIN)),
        "{url}"
    );
    assert!(log.contains("POST /api/v1/services") && log.contains("ingresses"), "{log}");
}

#[test]
fn a_runs_port_forward_is_a_local_url_held_for_the_run_only() {
    let (told, reachable, _) = published_run(crate::Preview::PortForward);
    let [port] = told.as_slice() else { panic!("{told:?}") };
    assert_eq!(
        (port.port, port.addr, port.preview.as_deref()),
        (8000, sandbox_core::DEFAULT_PUBLISH_ADDR, None)
    );
    assert!(port.host_port != 0 && port.url().starts_with("http://127.0.0.1:"), "{port:?}");
    assert!(reachable, "the forward listens while the run is up");
    // The runtime's tasks are gone with the engine; the listener closed when the run ended.
    assert!(
        std::net::TcpStream::connect((port.addr, port.host_port)).is_err(),
        "the forward outlived the run"
    );
}

/// `--mount pvc:`: a claim not in the namespace stops the run before its pod (a pod would
/// wait in `Pending` for it); one that is there is mounted into the run's pod, read-only as
/// asked, and never into the environment's prepare pod.
#[test]
fn a_users_claim_is_read_before_the_run_and_mounted_into_its_pod_only() {
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let cluster = rt.block_on(Cluster::start());
    let scratch = Scratch::new();
    let mount = crate::claims::parse("pvc:psbx-data-models:/models:ro").expect("mount");
    let sandbox = SandboxConfig {
        workdir: scratch.pod(),
        run_claims: vec![mount],
        ..SandboxConfig::default()
    };
    let engine = engine_with(&cluster, sandbox);
    let spec = spec(&scratch, "print('ran')\n");
    let prepared = engine.prepare(&spec, &mut |_| {}).expect("prepared");
    let pods = cluster.state.lock().expect("state").created.len();
    let mut out = sandbox_core::Captured::default();
    let io = captured_io(&mut out);
    let error = engine.run_prepared(&spec, &prepared, io).expect_err("no such claim");
    assert!(matches!(error, crate::Error::ClaimMissing { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("psbx-data-models") && message.contains("hint:"), "{message}");
    let state = cluster.state.lock().expect("state");
    assert_eq!(state.created.len(), pods, "a pod was made for a missing claim");
    let prepare_pod = state.created.last().expect("the prepare pod").clone();
    drop(state);
    let volumes = |pod: &Value| -> Vec<String> {
        pod["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str().map(str::to_owned))
            .collect()
    };
    assert!(!volumes(&prepare_pod).contains(&"psbx-data-models".to_owned()), "{prepare_pod}");

    cluster.state.lock().expect("state").claims.insert(
        "psbx-data-models".to_owned(),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "psbx-data-models", "namespace": NS, "uid": "u", "resourceVersion": "1"}}),
    );
    let (code, stdout, _) = run(&engine, &spec, Stdin::Null);
    assert_eq!((code, stdout.as_str()), (0, "ran\n"));
    let state = cluster.state.lock().expect("state");
    let run_pod = state.created.last().expect("the run pod");
    assert!(volumes(run_pod).contains(&"psbx-data-models".to_owned()), "{run_pod}");
    let mounts = &run_pod["spec"]["containers"][0]["volumeMounts"];
    let mounted = mounts.as_array().into_iter().flatten().find(|m| m["mountPath"] == "/models");
    assert_eq!(mounted.map(|m| m["readOnly"].clone()), Some(json!(true)), "{mounts}");
}

fn prepares(cluster: &Cluster) -> usize {
    let state = cluster.state.lock().expect("state");
    state
        .commands
        .iter()
        .filter(|c| c.get(2).map(String::as_str) == Some(environment::PREPARE))
        .count()
}

#[test]
fn concurrent_runs_of_one_environment_prepare_it_once_and_the_others_wait_with_one_watch() {
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let cluster = rt.block_on(Cluster::start());
    cluster.state.lock().expect("state").prepare_takes = Duration::from_millis(600);
    let scratch = Scratch::new();
    let spec = spec(&scratch, "print(1)\n");
    let waits = std::thread::scope(|scope| {
        let runs: Vec<_> = (0..3)
            .map(|_| {
                let engine = engine(&cluster, &scratch);
                let spec = spec.clone();
                scope.spawn(move || {
                    let mut lines = Vec::new();
                    engine.prepare(&spec, &mut |l| lines.push(l.to_owned())).expect("prepared");
                    lines
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().expect("run")).collect::<Vec<_>>()
    });
    assert_eq!(prepares(&cluster), 1, "{:?}", cluster.state.lock().expect("state").commands);
    let waited = waits.iter().filter(|l| l.iter().any(|l| l.starts_with("waiting for"))).count();
    assert_eq!(waited, 2, "{waits:?}");
    let log = cluster.log();
    let claim_watches = log
        .iter()
        .filter(|l| l.contains("persistentvolumeclaims?") && l.contains("watch=true"))
        .count();
    assert_eq!(claim_watches, 2, "one watch per waiting run: {log:#?}");
    let state = cluster.state.lock().expect("state");
    assert!(state.pods.is_empty());
    assert!(environment::is_ready(
        &serde_json::from_value(state.claims.values().next().expect("claim").clone())
            .expect("claim")
    ));
}

#[test]
fn a_prepare_that_never_finished_is_taken_over_and_a_failed_one_is_retried() {
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let cluster = rt.block_on(Cluster::start());
    let scratch = Scratch::new();
    let spec = spec(&scratch, "print(1)\n");
    let name = environment::claim_name(&environment::key(
        &SandboxConfig::default().image,
        None,
        &spec.dependencies,
    ));
    // A claim whose prepare began 11 minutes ago (its CLI was killed).
    let long_ago = super::now_secs() - 11 * 60;
    let stale = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {
        "name": name, "namespace": NS, "uid": "uid-old", "resourceVersion": "7",
        "annotations": {environment::PREPARING_ANNOTATION: long_ago.to_string()}}});
    cluster.state.lock().expect("state").claims.insert(name.clone(), stale);
    let engine = engine(&cluster, &scratch);
    engine.prepare(&spec, &mut |_| {}).expect("taken over");
    assert_eq!(prepares(&cluster), 1);
    let state = cluster.state.lock().expect("state");
    let claim = &state.claims[&name];
    assert_eq!(claim["metadata"]["uid"], "uid-old", "the same claim, filled");
    assert!(environment::is_ready(&serde_json::from_value(claim.clone()).expect("claim")));
    drop(state);

    // A prepare elsewhere that fails deletes its claim: a waiting run then prepares itself.
    let fresh = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {
        "name": name, "namespace": NS, "uid": "uid-other", "resourceVersion": "8",
        "annotations": {environment::PREPARING_ANNOTATION: super::now_secs().to_string()}}});
    cluster.state.lock().expect("state").claims.insert(name.clone(), fresh);
    let shared = Arc::clone(&cluster.state);
    let other = name.clone();
    let failing = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        shared.lock().expect("state").claims.remove(&other);
    });
    engine.prepare(&spec, &mut |_| {}).expect("prepared after the other failed");
    failing.join().expect("other");
    assert_eq!(prepares(&cluster), 2);
    assert_ne!(cluster.state.lock().expect("state").claims[&name]["metadata"]["uid"], "uid-other");
}

#[test]
fn reap_deletes_this_users_unused_and_never_finished_claims_and_a_dry_run_only_lists_them() {
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let cluster = rt.block_on(Cluster::start());
    let scratch = Scratch::new();
    let engine = engine(&cluster, &scratch);
    let now = super::now_secs();
    let day = 86_400;
    let claim = |name: &str, mark: &reaper::MarkKey, annotations: Value| {
        let mut labels = engine.env_labels(name).expect("labels");
        labels.retain(|k, _| k != reaper::MARK);
        mark.sign(name, &mut labels);
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {
            "name": name, "namespace": NS, "uid": format!("uid-{name}"), "resourceVersion": "1",
            "labels": labels, "annotations": annotations}})
    };
    let ready = |used: u64| {
        json!({environment::READY_ANNOTATION: "true",
        environment::LAST_USED_ANNOTATION: used.to_string()})
    };
    let other = reaper::MarkKey::from_bytes([9; 32]);
    let claims = [
        claim("psbx-env-old", &key(), ready(now - 8 * day)),
        claim("psbx-env-recent", &key(), ready(now - day)),
        claim(
            "psbx-env-stuck",
            &key(),
            json!({environment::PREPARING_ANNOTATION: (now - 3600).to_string()}),
        ),
        claim("psbx-env-busy", &key(), json!({environment::PREPARING_ANNOTATION: now.to_string()})),
        claim("psbx-env-theirs", &other, ready(now - 30 * day)),
    ];
    for c in claims {
        let name = c["metadata"]["name"].as_str().expect("name").to_owned();
        cluster.state.lock().expect("state").claims.insert(name, c);
    }
    let listed = engine.reap(true).expect("dry run");
    let shown: Vec<(&str, &str, &str, bool)> = listed
        .iter()
        .map(|s| (s.pod.as_str(), s.kind.as_str(), s.reason.as_str(), s.removed))
        .collect();
    assert_eq!(
        shown,
        [
            ("psbx-env-old", "environment", "unused for 7 days", false),
            ("psbx-env-stuck", "environment", "its prepare never finished", false),
        ]
    );
    assert_eq!(cluster.state.lock().expect("state").claims.len(), 5, "a dry run deletes nothing");
    let swept = engine.reap(false).expect("reap");
    assert!(swept.iter().all(|s| s.removed), "{swept:?}");
    let left: Vec<String> = cluster.state.lock().expect("state").claims.keys().cloned().collect();
    assert_eq!(left, ["psbx-env-busy", "psbx-env-recent", "psbx-env-theirs"]);
}

/// The pod names the log's watch requests name, in order.
fn pod_watches(log: &[String]) -> Vec<String> {
    log.iter()
        .filter(|l| l.contains("/pods?") && l.contains("watch=true"))
        .filter_map(|l| {
            let at =
                l.find("fieldSelector=metadata.name%3D")? + "fieldSelector=metadata.name%3D".len();
            Some(l[at..].split('&').next().unwrap_or_default().to_owned())
        })
        .collect()
}

#[test]
fn twenty_parallel_runs_from_one_workspace_all_succeed_each_holding_one_watch() {
    const RUNS: usize = 20;
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let cluster = rt.block_on(Cluster::start());
    let scratch = Scratch::new();
    std::fs::write(scratch.host().join("input.txt"), "shared input\n").expect("input");
    let script = "import pathlib, sys\ni = sys.argv[1]\n\
                  text = pathlib.Path('input.txt').read_text()\n\
                  pathlib.Path(f'out-{i}.txt').write_text(f'{text}run {i}\\n' * 500)\n\
                  print('ran', i)\n";
    let spec = spec(&scratch, script);
    // Warm: the environment is prepared once, before the load.
    let warm = RunSpec { args: vec!["warm".to_owned()], ..spec.clone() };
    assert_eq!(run(&engine(&cluster, &scratch), &warm, Stdin::Null).0, 0);
    cluster.state.lock().expect("state").log.clear();
    let created_before = cluster.state.lock().expect("state").created.len();

    let outcomes = std::thread::scope(|scope| {
        let runs: Vec<_> = (0..RUNS)
            .map(|i| {
                // Each run's pod has its own workdir; the host workspace is the one they share.
                let workdir = scratch.root.join(format!("pod-{i}"));
                std::fs::create_dir_all(&workdir).expect("pod workdir");
                let config = SandboxConfig {
                    workdir: workdir.display().to_string(),
                    ..SandboxConfig::default()
                };
                let engine = engine_with(&cluster, config);
                let spec = RunSpec { args: vec![i.to_string()], ..spec.clone() };
                scope.spawn(move || run(&engine, &spec, Stdin::Null))
            })
            .collect();
        runs.into_iter().map(|r| r.join().expect("run")).collect::<Vec<_>>()
    });
    for (i, (code, stdout, _)) in outcomes.iter().enumerate() {
        assert_eq!((*code, stdout.as_str()), (0, format!("ran {i}\n").as_str()));
        let out = std::fs::read_to_string(scratch.host().join(format!("out-{i}.txt")))
            .expect("synced back");
        assert_eq!(out, format!("shared input\nrun {i}\n").repeat(500), "out-{i}.txt");
    }
    let state = cluster.state.lock().expect("state");
    assert!(state.pods.is_empty(), "pods left: {:?}", state.pods.keys());
    let pods: Vec<String> = state.created[created_before..]
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(pods.len(), RUNS, "one pod per run");
    let mut watched = pod_watches(&state.log);
    watched.sort();
    // Its start, one stream (below), never a poll; its end, emptied by its agent, is a
    // removal without a watch.
    let mut expected: Vec<String> = pods.clone();
    expected.sort();
    assert_eq!(watched, expected, "each run watched its own pod, once");
    let claim_watches = state.log.iter().filter(|l| l.contains("persistentvolumeclaims?")).count();
    assert_eq!(claim_watches, 0, "a warm run waits for no claim");
    for pod in &pods {
        assert_eq!(state.most_watching.get(pod), Some(&1), "{pod}: watches open at once");
    }
}

/// A stdout whose reader went away.
struct BrokenPipe(usize);

impl std::io::Write for BrokenPipe {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        self.0 += 1;
        Err(std::io::ErrorKind::BrokenPipe.into())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_run_whose_reader_went_away_ends_as_a_closed_pipe() {
    use sandbox_core::OutputSink as _;
    let mut sink = super::Inherit { stdout: BrokenPipe(0), stderr: Vec::new(), closed: false };
    sink.write(sandbox_core::Stream::Stderr, b"to stderr\n");
    assert!(!sink.closed(), "stderr still has its reader");
    sink.write(sandbox_core::Stream::Stdout, b"line 0\n");
    assert!(sink.closed());
    sink.write(sandbox_core::Stream::Stdout, b"line 1\n");
    assert_eq!(sink.stdout.0, 1, "nothing is written after the reader left");
    assert_eq!(sink.stderr, b"to stderr\n");

    // The engine then stops the script at the first output it cannot pass on: 141, not the
    // script's own end (the stand-in pod sends the output before the exit, as a long run would).
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let cluster = rt.block_on(Cluster::start());
    let scratch = Scratch::new();
    let engine = engine(&cluster, &scratch);
    let spec = spec(&scratch, "for i in range(1000):\n    print(i, flush=True)\n");
    let prepared = engine.prepare(&spec, &mut |_| {}).expect("prepared");
    let mut closed = super::Inherit { stdout: BrokenPipe(0), stderr: Vec::new(), closed: false };
    let io = RunIo {
        stdin: Stdin::Null,
        output: Output::Sink(&mut closed),
        status: None,
        published: None,
        started: None,
    };
    let outcome = engine.run_prepared(&spec, &prepared, io).expect("ran");
    assert_eq!(outcome.exit_code, sandbox_core::EXIT_CLOSED_PIPE);
}

/// Set in the copy of this test binary that [`a_sigterm_mid_run_stops_the_script_syncs_back_and_deletes_the_pod`]
/// runs: signals are process-wide, and the other tests' runs must not get this one.
const SIGTERM_CHILD: &str = "PSBX_K8S_RUN_SIGTERM_CHILD";

/// The child's half: a run whose script writes a file and sleeps, SIGTERM to this process once
/// the script runs; the run ends with 143, the file back on the host and no pod left.
#[test]
fn sigterm_child() {
    if std::env::var_os(SIGTERM_CHILD).is_none() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let cluster = rt.block_on(Cluster::start());
    let scratch = Scratch::new();
    let engine = engine(&cluster, &scratch);
    let spec = spec(
        &scratch,
        "import pathlib, time\npathlib.Path('before.txt').write_text('written')\ntime.sleep(30)\n",
    );
    let prepared = engine.prepare(&spec, &mut |_| {}).expect("prepared");
    let outcome = std::thread::scope(|scope| {
        let run = scope.spawn(|| {
            let mut out = sandbox_core::Captured::default();
            engine.run_prepared(&spec, &prepared, captured_io(&mut out)).expect("ran")
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !cluster
            .state
            .lock()
            .expect("state")
            .commands
            .iter()
            .any(|c| c.iter().any(|a| a.starts_with("/tmp/.scripts/")))
        {
            assert!(std::time::Instant::now() < deadline, "the script never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        // The script is running (its exec is open); its file is written right away.
        std::thread::sleep(Duration::from_millis(500));
        signal_hook::low_level::raise(signal_hook::consts::SIGTERM).expect("raise");
        run.join().expect("run")
    });
    assert_eq!(outcome.exit_code, 143);
    assert_eq!(
        std::fs::read_to_string(scratch.host().join("before.txt")).expect("synced back"),
        "written"
    );
    assert!(cluster.state.lock().expect("state").pods.is_empty(), "the pod was left");
    println!("SIGTERM CHILD OK");
}

#[test]
fn a_sigterm_mid_run_stops_the_script_syncs_back_and_deletes_the_pod() {
    let child = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args(["--exact", "engine::run::tests::sigterm_child", "--nocapture", "--test-threads=1"])
        .env(SIGTERM_CHILD, "1")
        .output()
        .expect("the child");
    let stdout = String::from_utf8_lossy(&child.stdout);
    assert!(
        child.status.success() && stdout.contains("SIGTERM CHILD OK"),
        "{}\n{stdout}\n{}",
        child.status,
        String::from_utf8_lossy(&child.stderr)
    );
}

/// A run's pod has the workspace at its host path (issue 33 item 3: it was `/workspace`), except
/// where that path is one of the image's directories or would hide `/tmp`.
#[test]
fn a_runs_workdir_is_the_host_path_where_a_pod_can_have_it() {
    use std::path::Path;
    for (host, workdir) in [
        ("/home/alice/project", Some("/home/alice/project")),
        ("/tmp/.tmpab12/ws", Some("/tmp/.tmpab12/ws")),
        ("/work/main/", Some("/work/main")),
        ("/root/x", Some("/root/x")),
        ("/", None),
        ("/tmp", None),
        ("/usr/local/src", None),
        ("/opt", None),
        ("/opt/python-sandbox/env", None),
        ("/home/sandbox/work", None),
        ("/home", None),
        ("/var/lib/x", None),
        ("/proc/1", None),
        ("relative/path", None),
        ("/a/../b", None),
        ("/a:b", None),
    ] {
        assert_eq!(super::run_workdir(Path::new(host)).as_deref(), workdir, "{host}");
    }
}

/// The script's output into `out`, no stdin, no hooks.
fn captured_io(out: &mut sandbox_core::Captured) -> RunIo<'_> {
    RunIo {
        stdin: Stdin::Null,
        output: Output::Sink(out),
        status: None,
        published: None,
        started: None,
    }
}
