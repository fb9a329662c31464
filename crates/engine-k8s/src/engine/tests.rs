//! `K8sEngine` against kube's `tower-test` mock: a scripted apiserver (as in `api_tests`) that
//! echoes what is created, so `start_session`'s exact objects (signed labels, annotations,
//! owner references) are read off the requests; open, list and stop by label and mark; the
//! refusals of what a pod cannot do. The pure `plan` is snapshotted whole.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;
use reaper::MarkKey;

use crate::api_tests::{key, owner};
use sandbox_core::{
    Classify, EnvVar, ErrorClass, Limits, Mount, MountMode, Net, Publish, SessionConfig,
    SessionEngine,
};
use serde_json::{Value, json};

use super::*;

const NS: &str = "python-sandbox";

fn session(publish: &[u16], env: &[(&str, &str)]) -> SessionConfig {
    SessionConfig {
        workspace: "/home/alice/project".into(),
        mounts: Vec::new(),
        net: Net::Off,
        allow: None,
        publish: publish.iter().map(|p| Publish::same(*p)).collect(),
        env: env
            .iter()
            .map(|(k, v)| EnvVar { name: (*k).to_owned(), value: Some((*v).to_owned()) })
            .collect(),
        ttl: Duration::from_secs(600),
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        limits: Limits::NONE,
    }
}

/// One scripted answer.
enum Reply {
    /// 201 with the request body, given a uid and a resourceVersion (what a create returns).
    Echo,
    /// A watch stream with the last created pod, Running and Ready.
    WatchReady,
    /// This JSON with this code.
    Json(u16, Value),
}

fn ready(mut pod: Value) -> Value {
    pod["status"] = json!({"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "sandbox", "image": "x", "imageID": "", "ready": true,
            "restartCount": 0, "state": {"running": {"startedAt": "2025-01-01T00:00:02Z"}}}]});
    pod
}

/// Requests as seen: `METHOD uri` and the JSON body.
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

/// An engine whose client talks to the scripted apiserver.
fn engine(replies: Vec<Reply>) -> (K8sEngine, Seen) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let seen: Seen = Arc::default();
    let log = Arc::clone(&seen);
    let client = rt.block_on(async move {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        tokio::spawn(async move {
            let mut replies = replies.into_iter();
            let mut last_pod = Value::Null;
            while let Some((request, send)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await.expect("body");
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                log.lock()
                    .expect("log")
                    .push((format!("{} {}", parts.method, parts.uri), body.clone()));
                let (code, answer) = match replies.next() {
                    Some(Reply::Echo) => {
                        let mut object = body.clone();
                        object["metadata"]["uid"] = json!("uid-1");
                        object["metadata"]["resourceVersion"] = json!("100");
                        if object["kind"] == "Pod" {
                            last_pod = object.clone();
                        }
                        (201, object)
                    }
                    Some(Reply::WatchReady) => {
                        let event = json!({"type": "MODIFIED", "object": ready(last_pod.clone())});
                        send.send_response(Response::new(Body::from(
                            format!("{event}\n").into_bytes(),
                        )));
                        continue;
                    }
                    Some(Reply::Json(code, value)) => (code, value),
                    None => (
                        500,
                        json!({"kind": "Status", "status": "Failure", "code": 500,
                        "reason": "InternalError", "message": "unexpected request"}),
                    ),
                };
                let response = Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(&answer).expect("json")))
                    .expect("response");
                send.send_response(response);
            }
        });
        kube::Client::new(service, NS)
    });
    let mut engine =
        K8sEngine::with_client(SandboxConfig::default(), rt, client, key()).expect("engine");
    // The fake cluster enforces its policies (the refusal is the e2e tier's, on a real one).
    engine.assumed_policy = Some(crate::netoff::Verdict::Enforced);
    (engine, seen)
}

fn requests(seen: &Seen) -> Vec<(String, Value)> {
    seen.lock().expect("log").clone()
}

/// The method and path of each request, the random id replaced.
fn lines(seen: &Seen, id: &str) -> String {
    requests(seen).iter().map(|(l, _)| l.replace(id, "<id>")).collect::<Vec<_>>().join("\n")
}

#[test]
fn the_plan_is_the_hardened_pod_with_signed_labels_and_no_secret_in_it() {
    let config = session(&[8000, 9000], &[("GREETING", "hello"), ("API_TOKEN", "s3cr3t-value")]);
    let plan = plan(&SandboxConfig::default(), &config, "abc123", &owner(), 1_700_000_000, &key())
        .expect("plan");
    let spec = serde_json::to_string(&plan.pod).expect("json");
    assert!(!spec.contains("s3cr3t-value"), "a secret value is in the pod spec");
    assert_eq!(plan.secret_env, [("API_TOKEN".to_owned(), "s3cr3t-value".to_owned())]);
    assert!(key().verifies("psbx-abc123", &plan.labels), "the pod's mark verifies for its name");
    assert!(crate::restricted::check(&plan.pod).is_empty());
    assert_eq!(preview_url(&plan.config, "abc123", 1, 9000), "http://abc123-9000.127.0.0.1.nip.io");
    insta::assert_yaml_snapshot!((&plan.pod.metadata, &plan.warnings));
}

/// The pod's agent adds nothing of the pod's environment (`EXACT_ENV_ARG`): a session's handle,
/// opened later too, reads the spec's back and sends it with every exec, so a command gets what
/// a docker session's container gives it, then the session's `--env`.
#[test]
fn a_sessions_handle_sends_the_pods_spec_env_with_every_exec() {
    let config = session(&[], &[("GREETING", "hello"), ("API_TOKEN", "s3cr3t-value")]);
    let plan = plan(&SandboxConfig::default(), &config, "abc123", &owner(), 1_700_000_000, &key())
        .expect("plan");
    let names: Vec<String> = spec_env_of(&plan.pod).into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        names.join(" "),
        "PATH HOME HOSTNAME container LANG SSL_CERT_FILE REQUESTS_CA_BUNDLE PWD UV_CACHE_DIR \
         UV_NO_CONFIG UV_PYTHON_DOWNLOADS UV_SYSTEM_CERTS UV_NATIVE_TLS UV_NO_PROGRESS GREETING"
    );
    let command = plan.pod.spec.as_ref().expect("spec").containers[0].command.clone();
    let command = command.expect("command");
    let agent_args = &command[command.len() - 2..];
    assert_eq!(
        agent_args,
        [
            sandbox_core::agent::EXACT_ENV_ARG.to_owned(),
            sandbox_core::agent::tcp_arg(crate::exec::AGENT_PORT)
        ]
    );
}

/// `--tmpfs-size` on a pod: `/tmp` is a memory-backed emptyDir of that size (the kernel's
/// ENOSPC when full, as on every engine), outside the disk volumes' ephemeral-storage budget.
#[test]
fn the_tmpfs_size_is_the_memory_backed_tmp_of_the_pod() {
    let config = SessionConfig { tmpfs_size: 16 << 20, ..session(&[], &[]) };
    let plan =
        plan(&SandboxConfig::default(), &config, "abc123", &owner(), 0, &key()).expect("plan");
    let volumes = plan.pod.spec.as_ref().and_then(|s| s.volumes.clone()).expect("volumes");
    let tmp = volumes.iter().find(|v| v.name == "tmp").and_then(|v| v.empty_dir.clone());
    let tmp = tmp.expect("a tmp emptyDir");
    assert_eq!(tmp.medium.as_deref(), Some("Memory"));
    assert_eq!(tmp.size_limit.map(|q| q.0).as_deref(), Some("16777216"));
    for disk in volumes.iter().filter(|v| v.name != "tmp") {
        assert_eq!(disk.empty_dir.as_ref().and_then(|e| e.medium.clone()), None, "{}", disk.name);
    }
    // A /tmp larger than the disk budget is not the disk's to hold.
    let big = SessionConfig { tmpfs_size: 64 << 30, ..session(&[], &[]) };
    assert!(super::plan(&SandboxConfig::default(), &big, "abc123", &owner(), 0, &key()).is_ok());
}

#[test]
fn limits_become_the_containers_and_what_a_pod_cannot_do_is_refused() {
    let mut config = session(&[], &[]);
    config.limits = Limits {
        memory: Some(sandbox_core::parse_memory("128m").expect("memory")),
        cpus: Some(sandbox_core::parse_cpus("0.5").expect("cpus")),
        pids: None,
        off: sandbox_core::LimitsOff { pids: true, ..sandbox_core::LimitsOff::NONE },
    };
    let plan =
        plan(&SandboxConfig::default(), &config, "abc123", &owner(), 0, &key()).expect("plan");
    assert_eq!(plan.config.resources.memory_limit, "134217728");
    assert_eq!(
        plan.config.resources.memory_request, "134217728",
        "a request above the limit is lowered"
    );
    assert_eq!(plan.config.resources.cpu_limit, "500m");
    assert_eq!(plan.config.resources.cpu_request, "250m");

    let refusals = [
        SessionConfig {
            mounts: vec![Mount { path: "/data".into(), mode: MountMode::ReadOnly }],
            ..session(&[], &[])
        },
        SessionConfig { limits: Limits { pids: Some(64), ..Limits::NONE }, ..session(&[], &[]) },
        SessionConfig {
            limits: Limits {
                off: sandbox_core::LimitsOff { memory: true, ..sandbox_core::LimitsOff::NONE },
                ..Limits::NONE
            },
            ..session(&[], &[])
        },
        SessionConfig {
            env: vec![EnvVar { name: "UNSET".to_owned(), value: None }],
            ..session(&[], &[])
        },
    ];
    let messages: Vec<String> = refusals
        .iter()
        .map(|c| {
            let e = super::plan(&SandboxConfig::default(), c, "abc123", &owner(), 0, &key())
                .expect_err("refused");
            assert_ne!(e.class(), ErrorClass::Unavailable);
            e.to_string()
        })
        .collect();
    insta::assert_snapshot!(messages.join("\n---\n"));
}

#[test]
fn start_session_creates_the_pod_its_policy_and_a_service_and_ingress_per_port() {
    let replies = vec![Reply::Echo, Reply::Echo, Reply::WatchReady, Reply::Echo, Reply::Echo];
    let (engine, seen) = engine(replies);
    let mut status = Vec::new();
    let info = engine
        .start_session(&session(&[8000], &[("GREETING", "hello")]), &mut |l| {
            status.push(l.to_owned())
        })
        .expect("started");
    assert_eq!((info.engine.as_str(), info.state.as_str()), ("k8s", "running"));
    assert_eq!(info.workspace, "/workspace");
    assert_eq!(info.ports, [(8000, format!("http://{}.127.0.0.1.nip.io", info.id))]);
    assert_eq!(info.sandbox, format!("psbx-{}", info.id));
    let sent = requests(&seen);
    let labels: BTreeMap<String, String> =
        serde_json::from_value(sent[0].1["metadata"]["labels"].clone()).expect("labels");
    assert!(key().verifies(&info.sandbox, &labels));
    let parsed = SandboxLabels::from_labels(&labels).expect("labels").expect("ours");
    assert_eq!(
        (parsed.kind, parsed.ttl, parsed.owner.pid),
        (Kind::Session, Some(600), std::process::id())
    );
    assert_eq!(
        parsed.expires,
        Some(parsed.created + SandboxConfig::default().hard_lifetime.as_secs())
    );
    for (line, body) in &sent[1..] {
        if line.starts_with("POST") {
            assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "uid-1", "{line}");
            assert_eq!(
                body["metadata"]["ownerReferences"].as_array().map(Vec::len),
                Some(1),
                "{line}"
            );
            assert_eq!(body["metadata"]["labels"], json!(labels), "{line}");
        }
    }
    assert_eq!(sent[3].1["spec"]["ports"][0]["port"], 8000);
    assert_eq!(sent[4].1["spec"]["rules"][0]["host"], format!("{}.127.0.0.1.nip.io", info.id));
    assert_eq!(
        sent[1].1["spec"]["ingress"][0]["ports"][0]["port"], 8000,
        "the policy lets the ingress in"
    );
    insta::assert_snapshot!(format!(
        "{}\n---\n{}",
        lines(&seen, &info.id),
        status.join("\n").replace(&info.id, "<id>")
    ));
}

#[test]
fn a_start_whose_secret_cannot_be_handed_over_deletes_the_pod_and_never_names_the_value() {
    // The exec that writes the secret env is refused; the pod goes, the error has no value.
    let forbidden = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
        "reason": "Forbidden", "message": "pods \"x\" is forbidden: User \"alice\" cannot create resource \"pods/exec\""});
    let replies = vec![
        Reply::Echo,
        Reply::Echo,
        Reply::WatchReady,
        Reply::Json(403, forbidden),
        Reply::Json(200, json!({"kind": "Status", "status": "Success"})),
    ];
    let (engine, seen) = engine(replies);
    let error = engine
        .start_session(&session(&[], &[("API_TOKEN", "s3cr3t-value")]), &mut |_| {})
        .expect_err("the exec is refused");
    let all = format!("{error} {:?}", requests(&seen));
    assert!(!all.contains("s3cr3t-value"), "the secret went somewhere: {all}");
    let sent = requests(&seen);
    let last = &sent.last().expect("requests").0;
    assert!(last.starts_with("DELETE /api/v1/namespaces/python-sandbox/pods/psbx-"), "{last}");
    assert_eq!(sent.last().expect("delete").1["preconditions"]["uid"], "uid-1");
    let names = &sent[0].1["metadata"]["annotations"][crate::session::SECRET_NAMES_ANNOTATION];
    assert_eq!(names, "API_TOKEN", "the names are kept, never the values");
}

/// A pod as the apiserver lists it: planned for `id`, signed with `mark`, in `phase`.
fn listed(id: &str, mark: &MarkKey, phase: &str) -> Value {
    let plan =
        plan(&SandboxConfig::default(), &session(&[8000], &[]), id, &owner(), 1_700_000_000, mark)
            .expect("plan");
    let mut pod = serde_json::to_value(&plan.pod).expect("json");
    pod["metadata"]["uid"] = json!(format!("uid-{id}"));
    pod["status"] = json!({"phase": phase});
    pod
}

#[test]
fn open_list_and_stop_touch_only_this_users_running_session_pods() {
    let forged = listed("forged", &MarkKey::from_bytes([9; 32]), "Running");
    let list = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {},
        "items": [listed("b", &key(), "Running"), forged.clone(), listed("a", &key(), "Succeeded")]});
    let replies = vec![
        Reply::Json(200, list),
        Reply::Json(200, listed("a", &key(), "Running")),
        Reply::Json(200, forged),
        Reply::Json(200, listed("a", &key(), "Succeeded")),
        Reply::Json(200, listed("a", &key(), "Running")),
        Reply::Json(200, json!({"kind": "Status", "status": "Success"})),
        Reply::Json(
            404,
            json!({"kind": "Status", "status": "Failure", "code": 404, "reason": "NotFound",
            "message": "pods \"psbx-gone\" not found"}),
        ),
    ];
    let (engine, seen) = engine(replies);
    let sessions = engine.list_sessions().expect("list");
    let shown: Vec<(&str, &str)> =
        sessions.iter().map(|s| (s.id.as_str(), s.state.as_str())).collect();
    assert_eq!(shown, [("a", "succeeded"), ("b", "running")], "the forged pod is not listed");
    assert_eq!(sessions[1].ports, [(8000, "http://b.127.0.0.1.nip.io".to_owned())]);
    let opened = engine.open_session("a").expect("open");
    assert_eq!(sandbox_core::WarmSession::workspace(&opened), "/workspace");
    assert_eq!(sandbox_core::WarmSession::policy(&opened).map(|p| p.publish), Some(vec![8000]));
    assert_eq!(opened.urls(), [(8000, "http://a.127.0.0.1.nip.io".to_owned())]);
    let forged = engine.open_session("forged").expect_err("not ours");
    assert_eq!(forged.class(), ErrorClass::NotFound);
    let finished = engine.open_session("a").expect_err("not running");
    assert_eq!(finished.class(), ErrorClass::NotFound);
    engine.stop_session("a").expect("stopped");
    assert_eq!(engine.stop_session("gone").expect_err("gone").class(), ErrorClass::NotFound);
    assert_eq!(engine.open_session("Not_An_Id").expect_err("bad id").class(), ErrorClass::NotFound);
    let sent = requests(&seen);
    assert_eq!(sent[5].1["preconditions"]["uid"], "uid-a", "the delete names the pod it read");
    insta::assert_snapshot!(lines(&seen, "\u{0}"));
}

/// A listed pool member of `key`, at `revision`, in `state` (`ready` or `claimed`).
fn member(id: &str, key: &str, revision: &str, state: &str) -> Value {
    let mut pod = listed(id, &super::super::api_tests::key(), "Running");
    pod["metadata"]["resourceVersion"] = json!(revision);
    pod["metadata"]["labels"][POOL_LABEL] = json!(key);
    pod["metadata"]["labels"][POOL_STATE_LABEL] = json!(state);
    pod
}

fn conflict(name: &str) -> Value {
    json!({"kind": "Status", "status": "Failure", "code": 409, "reason": "Conflict",
        "message": format!("Operation cannot be fulfilled on pods \"{name}\": the object has been modified; please apply your changes to the latest version and try again")})
}

#[test]
fn a_claim_relabels_at_the_listed_revision_and_a_conflict_moves_to_the_next_member() {
    let config = session(&[8000], &[]);
    let identity = {
        let (engine, _) = engine(Vec::new());
        engine.pool_identity().expect("k8s has a pool")
    };
    let key = sandbox_core::pool::pool_key(&config, &identity);
    let list = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [
        member("a", &key, "5", POOL_READY),
        member("b", &key, "6", POOL_READY),
        member("c", "another-policy", "7", POOL_READY),
        member("d", &key, "8", POOL_CLAIMED),
    ]});
    let replies = vec![
        Reply::Json(200, list),
        // Another caller relabelled `a` between our list and our patch.
        Reply::Json(409, conflict("psbx-a")),
        Reply::Json(200, member("b", &key, "9", POOL_CLAIMED)),
    ];
    let (engine, seen) = engine(replies);
    let claimed = sandbox_core::pool::claim(&engine, &config).expect("claim").expect("a member");
    assert_eq!(claimed.id, "b");
    let sent = requests(&seen);
    assert_eq!(sent.len(), 3, "one list, two conditional patches: {sent:?}");
    assert!(sent[0].0.contains("labelSelector="), "{}", sent[0].0);
    for (request, (pod, revision)) in sent[1..].iter().zip([("psbx-a", "5"), ("psbx-b", "6")]) {
        assert!(request.0.starts_with("PATCH ") && request.0.contains(pod), "{}", request.0);
        assert_eq!(request.1["metadata"]["resourceVersion"], revision, "the precondition");
        assert_eq!(request.1["metadata"]["labels"][POOL_STATE_LABEL], POOL_CLAIMED);
    }
}

#[test]
fn an_unclaimed_member_is_not_a_session_and_a_used_one_is_not_a_member() {
    let mut used = member("u", "k", "3", POOL_READY);
    used["metadata"]["annotations"][SCRIPTS_ANNOTATION] = json!("1");
    let list = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [
        member("a", "k", "5", POOL_READY), member("b", "k", "6", POOL_CLAIMED), used,
        listed("forged", &MarkKey::from_bytes([9; 32]), "Running"),
    ]});
    let replies = vec![
        Reply::Json(200, list.clone()),
        Reply::Json(200, list),
        Reply::Json(200, member("a", "k", "5", POOL_READY)),
    ];
    let (engine, _) = engine(replies);
    let shown: Vec<String> =
        engine.list_sessions().expect("list").into_iter().map(|s| s.id).collect();
    assert_eq!(shown, ["b"], "unclaimed members are hidden, a claimed one is a session");
    let members: Vec<String> =
        engine.pool_members().expect("members").into_iter().map(|m| m.id).collect();
    assert_eq!(members, ["a"], "never a used pod, a claimed one or another user's");
    let refused = engine.open_session("a").expect_err("unclaimed");
    assert_eq!(refused.class(), ErrorClass::NotFound, "nothing runs in a member before its claim");
}

#[test]
fn a_serve_pass_removes_a_member_of_another_key_through_the_pool_api() {
    let config = session(&[8000], &[]);
    let identity = {
        let (engine, _) = engine(Vec::new());
        engine.pool_identity().expect("k8s has a pool")
    };
    let key = sandbox_core::pool::pool_key(&config, &identity);
    let list = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [
        member("a", &key, "5", POOL_READY),
        member("c", "another-policy", "7", POOL_READY),
    ]});
    let replies = vec![
        Reply::Json(200, list),
        Reply::Json(200, member("c", "another-policy", "7", POOL_READY)),
        Reply::Json(200, member("c", "another-policy", "8", POOL_CLAIMED)),
        Reply::Json(200, member("c", "another-policy", "8", POOL_CLAIMED)),
        Reply::Json(200, json!({"kind": "Status", "status": "Success"})),
    ];
    let (engine, seen) = engine(replies);
    let mut done = Vec::new();
    // A minute after the members' creation: `a` is fresh and fills the pool of one.
    let now = 1_700_000_060;
    let taken = sandbox_core::pool::serve_pass(&engine, &config, 1, now, &mut |a| {
        done.push(a.clone());
    })
    .expect("pass");
    assert_eq!(taken, 1);
    assert_eq!(
        done,
        [sandbox_core::pool::PoolAction::Remove {
            id: "c".into(),
            reason: sandbox_core::pool::RemoveReason::OtherKey
        }]
    );
    let sent = requests(&seen);
    let patch = sent.iter().find(|r| r.0.starts_with("PATCH ")).expect("a relabel");
    assert!(patch.0.contains("psbx-c"), "{}", patch.0);
    assert_eq!(patch.1["metadata"]["resourceVersion"], "7", "claimed at the listed revision");
    let last = &sent.last().expect("a delete").0;
    assert!(last.starts_with("DELETE ") && last.contains("psbx-c"), "{last}");
}

/// A list of hosts: the egress proxy's Service is read first; the pod's environment names its
/// address, its policy annotation holds the list (what the proxy reads), and its NetworkPolicy
/// lets it reach the proxy's pods only. Without the proxy, nothing is made.
#[test]
fn a_session_with_a_list_reaches_only_the_egress_proxy_which_holds_its_list() {
    let listed = SessionConfig {
        net: Net::On,
        allow: Some(sandbox_core::Allow::parse(["pypi.org", "*.example.com:443"]).expect("list")),
        ..session(&[], &[])
    };
    let proxy = json!({"kind": "Service", "apiVersion": "v1",
        "metadata": {"name": "python-sandbox-egress", "namespace": "python-sandbox-egress"},
        "spec": {"clusterIP": "10.96.0.42", "ports": [{"port": 3128}]}});
    let replies = vec![Reply::Json(200, proxy), Reply::Echo, Reply::Echo, Reply::WatchReady];
    let (k8s, seen) = engine(replies);
    k8s.start_session(&listed, &mut |_| {}).expect("started");
    let sent = requests(&seen);
    assert_eq!(
        sent[0].0,
        "GET /api/v1/namespaces/python-sandbox-egress/services/python-sandbox-egress"
    );
    let env = &sent[1].1["spec"]["containers"][0]["env"];
    assert!(
        env.as_array()
            .expect("env")
            .iter()
            .any(|v| v["name"] == "HTTPS_PROXY" && v["value"] == "http://10.96.0.42:3128"),
        "{env}"
    );
    let policy: sandbox_core::SessionPolicy = serde_json::from_str(
        sent[1].1["metadata"]["annotations"][crate::session::POLICY_ANNOTATION]
            .as_str()
            .expect("policy"),
    )
    .expect("policy json");
    assert_eq!(policy.allow, listed.allow);
    let egress = &sent[2].1["spec"]["egress"];
    assert_eq!(egress.as_array().map(Vec::len), Some(1), "{egress}");
    assert_eq!(egress[0]["ports"][0]["port"], 3128);
    assert_eq!(
        egress[0]["to"][0]["podSelector"]["matchLabels"][crate::egress::APP_LABEL],
        "python-sandbox-egress"
    );

    let missing = json!({"kind": "Status", "status": "Failure", "code": 404, "reason": "NotFound",
        "message": "services \"python-sandbox-egress\" not found"});
    let (k8s, seen) = engine(vec![Reply::Json(404, missing)]);
    let refused = k8s.start_session(&listed, &mut |_| {}).expect_err("no proxy");
    let text = refused.to_string();
    assert!(
        text.contains("no egress proxy is deployed") && text.contains("deploy/egress"),
        "{text}"
    );
    assert_eq!(requests(&seen).len(), 1, "nothing was made");
}
