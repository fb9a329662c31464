//! The API tier: `api` and `sweep` against kube's `tower-test` mock, a scripted apiserver that
//! answers each request in order with what real apiservers send (`metav1.Status` bodies for
//! refusals, newline-delimited watch events) and records method, path, query and body. Each case
//! snapshots that transcript and the error text, so a changed request or message shows up.

use std::collections::BTreeMap;
use std::time::Duration;

use http::{Request, Response};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use kube::Client;
use kube::client::Body;
use reaper::{Liveness, MarkKey, Owner};
use sandbox_core::{Classify, ErrorClass};
use serde_json::{Value, json};

use crate::exec::Greeting;
use crate::{Error, api, failure, sweep};

const NS: &str = "python-sandbox";
const POD: &str = "psbx-abc";
const UID: &str = "0b6c2f3e-1111-4a2b-9c3d-5e6f7a8b9c0d";

/// One scripted answer.
enum Reply {
    /// A JSON body with this status code.
    Json(u16, Value),
    /// A watch stream: these events, then the end of the response.
    Watch(Vec<Value>),
    /// Never answer (a watch that stays open).
    Hang,
}

fn ok(body: Value) -> Reply {
    Reply::Json(200, body)
}

fn created(body: Value) -> Reply {
    Reply::Json(201, body)
}

/// A `metav1.Status` failure exactly as the apiserver writes it.
fn status(code: u16, reason: &str, message: &str, details: Value) -> Reply {
    let mut body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    });
    if !details.is_null() {
        body["details"] = details;
    }
    Reply::Json(code, body)
}

/// Runs `flow` against a scripted apiserver; returns its result and the transcript: one line per
/// request (`METHOD path?query`, then the body's interesting fields), and a line for every
/// scripted reply never asked for.
async fn scripted<T, F, Fut>(replies: Vec<Reply>, flow: F) -> (T, String)
where
    F: FnOnce(Client) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(async move {
        let mut transcript = Vec::new();
        let mut held = Vec::new();
        let mut replies = replies.into_iter();
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.expect("request body");
            let mut line = format!("{} {}", parts.method, parts.uri);
            if !bytes.is_empty() {
                let body: Value = serde_json::from_slice(&bytes).expect("json request body");
                line.push_str(&format!("\n    {}", interesting(&body)));
            }
            transcript.push(line);
            match replies.next() {
                Some(Reply::Json(code, body)) => {
                    let response = Response::builder()
                        .status(code)
                        .body(Body::from(serde_json::to_vec(&body).expect("json")))
                        .expect("response");
                    send.send_response(response);
                }
                Some(Reply::Watch(events)) => {
                    let text: String =
                        events.iter().map(|e| format!("{e}\n")).collect::<Vec<_>>().concat();
                    send.send_response(Response::new(Body::from(text.into_bytes())));
                }
                Some(Reply::Hang) => held.push(send),
                None => {
                    transcript.push("    (unexpected request)".to_owned());
                    let body = json!({"kind": "Status", "status": "Failure", "code": 500,
                        "reason": "InternalError", "message": "unexpected request"});
                    let response = Response::builder()
                        .status(500)
                        .body(Body::from(serde_json::to_vec(&body).expect("json")))
                        .expect("response");
                    send.send_response(response);
                }
            }
        }
        let left = replies.count();
        if left > 0 {
            transcript.push(format!("({left} scripted replies never asked for)"));
        }
        transcript.join("\n")
    });
    let result = flow(Client::new(service, NS)).await;
    let transcript = server.await.expect("server task");
    (result, transcript)
}

/// The fields of a request body that the engine decides: name, owner references, delete options.
fn interesting(body: &Value) -> String {
    let mut out = serde_json::Map::new();
    for key in ["kind", "propagationPolicy", "gracePeriodSeconds", "preconditions"] {
        if let Some(v) = body.get(key) {
            out.insert(key.to_owned(), v.clone());
        }
    }
    if let Some(meta) = body.get("metadata") {
        for key in ["name", "ownerReferences"] {
            if let Some(v) = meta.get(key) {
                out.insert(key.to_owned(), v.clone());
            }
        }
    }
    // A Lease: the write's precondition and what it claims (times vary, so they are left out).
    if body.get("kind") == Some(&json!("Lease")) {
        if let Some(rv) = body.pointer("/metadata/resourceVersion") {
            out.insert("resourceVersion".to_owned(), rv.clone());
        }
        for key in ["holderIdentity", "leaseDurationSeconds", "leaseTransitions"] {
            if let Some(v) = body.pointer(&format!("/spec/{key}")) {
                out.insert(key.to_owned(), v.clone());
            }
        }
    }
    Value::Object(out).to_string()
}

/// A pod as the apiserver returns it, with `status` as given.
fn pod_with(rv: &str, status: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": POD, "namespace": NS, "uid": UID, "resourceVersion": rv},
        "spec": {"containers": [{"name": "sandbox", "image": "python-sandbox-runtime:0.1.0",
            "resources": {"limits": {"memory": "256Mi", "cpu": "1"}}}]},
        "status": status,
    })
}

fn pending(rv: &str) -> Value {
    pod_with(
        rv,
        json!({"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "True"}]}),
    )
}

/// The sandbox container's status in `state`.
fn sandbox_status(ready: bool, state: Value) -> Value {
    json!([{"name": "sandbox", "image": "python-sandbox-runtime:0.1.0", "imageID": "",
        "ready": ready, "restartCount": 0, "state": state}])
}

/// Running, its container started; Ready as `ready` says.
fn running(rv: &str, ready: bool) -> Value {
    let condition = if ready { "True" } else { "False" };
    pod_with(
        rv,
        json!({"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True"},
        {"type": "Ready", "status": condition}],
        "containerStatuses": sandbox_status(
            ready, json!({"running": {"startedAt": "2025-01-01T00:00:02Z"}}))}),
    )
}

fn running_ready(rv: &str) -> Value {
    running(rv, true)
}

fn waiting(rv: &str, reason: &str, message: &str) -> Value {
    pod_with(
        rv,
        json!({"phase": "Pending", "containerStatuses": sandbox_status(
            false, json!({"waiting": {"reason": reason, "message": message}}))}),
    )
}

fn event(kind: &str, value: Value) -> Value {
    json!({"type": kind, "object": value})
}

fn the_pod() -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": POD, "labels": {"io.python-sandbox.id": "abc"}},
        "spec": {"containers": [{"name": "sandbox", "image": "python-sandbox-runtime:0.1.0"}]},
    }))
    .expect("pod fixture")
}

fn the_policy() -> NetworkPolicy {
    serde_json::from_value(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": POD},
        "spec": {"podSelector": {"matchLabels": {"io.python-sandbox.id": "abc"}},
            "policyTypes": ["Ingress", "Egress"]},
    }))
    .expect("policy fixture")
}

/// The server's answer to a create: what was sent, with the fields the server adds.
fn echo(kind: &str, api_version: &str, name: &str) -> Reply {
    created(json!({"apiVersion": api_version, "kind": kind,
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-of-{name}"),
            "resourceVersion": "101",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": POD, "uid": UID}]}}))
}

fn deleted_ok() -> Reply {
    ok(pod_with("120", json!({"phase": "Running"})))
}

/// A pod's delete as a kubelet answers it: the object with its deletion time, then a watch
/// showing its container stopped, then the delete with no grace that removes it.
fn cleanup() -> Vec<Reply> {
    let mut deleting = pod_with("120", json!({"phase": "Running"}));
    deleting["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:09Z");
    let mut stopped = pod_with(
        "121",
        json!({"phase": "Failed", "containerStatuses": sandbox_status(
            false, json!({"terminated": {"exitCode": 137, "reason": "Error"}}))}),
    );
    stopped["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:09Z");
    vec![ok(deleting), Reply::Watch(vec![event("MODIFIED", stopped.clone())]), ok(stopped)]
}

async fn start(client: Client, timeout: Duration) -> Result<Pod, Error> {
    greeted(client, timeout, answers, false).await
}

/// [`api::start`] of the test's pod, its agent asked through `greet`, no status lines.
async fn greeted<G, F>(
    client: Client,
    timeout: Duration,
    greet: G,
    early: bool,
) -> Result<Pod, Error>
where
    G: Fn(Pod) -> F,
    F: std::future::Future<Output = Greeting>,
{
    api::start(&client, NS, &the_pod(), the_policy(), timeout, &mut |_| {}, greet, early).await
}

/// An agent that answers at once.
async fn answers(_: Pod) -> Greeting {
    Greeting::Answered
}

/// Running, its container started, not Ready yet: the readiness probe has not run.
fn running_not_ready(rv: &str) -> Value {
    running(rv, false)
}

/// The pod is handed out once its container runs and the agent answers, before the kubelet's
/// readiness probe says so; asked again while it does not answer yet.
#[tokio::test]
async fn a_started_pod_whose_agent_answers_is_ready_before_its_probe() {
    let replies = vec![
        created(pending("100")),
        echo("NetworkPolicy", "networking.k8s.io/v1", POD),
        Reply::Watch(vec![
            event("MODIFIED", waiting("105", "ContainerCreating", "")),
            event("MODIFIED", running_not_ready("107")),
            event("MODIFIED", running_ready("110")),
        ]),
    ];
    let asked = std::sync::atomic::AtomicUsize::new(0);
    let greet = |_: Pod| {
        let n = asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        async move { if n < 2 { Greeting::NotYet } else { Greeting::Answered } }
    };
    let (result, transcript) =
        scripted(
            replies,
            |c| async move { greeted(c, Duration::from_secs(5), greet, false).await },
        )
        .await;
    let pod = result.expect("started");
    assert_eq!(pod.metadata.resource_version.as_deref(), Some("107"), "not waited for Ready");
    assert_eq!(asked.load(std::sync::atomic::Ordering::Relaxed), 3);
    assert!(!transcript.contains("(unexpected request)"), "{transcript}");
}

/// A run's pod (`early`) is handed out as created once its agent answers, before the kubelet
/// reports its container started (its next relist, up to a second later); a pod started
/// without `early` is not asked before that report.
#[tokio::test]
async fn a_runs_pod_whose_agent_answers_early_is_handed_out_before_the_kubelets_report() {
    for early in [true, false] {
        let replies = vec![
            created(pending("100")),
            echo("NetworkPolicy", "networking.k8s.io/v1", POD),
            // The kubelet has not reported the container started, and will not here.
            Reply::Hang,
        ];
        let asked = std::sync::atomic::AtomicUsize::new(0);
        let greet = |_: Pod| {
            let n = asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // A forward refused this early (the sandbox is still being made) is no verdict.
            async move { if n < 1 { Greeting::NoForward } else { Greeting::Answered } }
        };
        let (result, transcript) = scripted(replies, |c| async move {
            let timeout = Duration::from_secs(2);
            greeted(c, timeout, greet, early).await
        })
        .await;
        let asks = asked.load(std::sync::atomic::Ordering::Relaxed);
        if early {
            let pod = result.expect("handed out");
            assert_eq!(pod.metadata.resource_version.as_deref(), Some("100"), "as created");
            assert_eq!(asks, 2);
            assert!(!transcript.contains("(unexpected request)"), "{transcript}");
        } else {
            // Its cleanup after the timeout is another test's.
            assert!(matches!(result, Err(Error::StartTimeout { .. })), "{result:?}");
            assert_eq!(asks, 0, "never asked before the report");
        }
    }
}

/// Where no forward can be had (RBAC without `pods/portforward`), the kubelet's Ready decides:
/// the start watches on from the started pod's version.
#[tokio::test]
async fn without_a_forward_the_start_waits_for_the_probe() {
    let replies = vec![
        created(pending("100")),
        echo("NetworkPolicy", "networking.k8s.io/v1", POD),
        Reply::Watch(vec![event("MODIFIED", running_not_ready("107"))]),
        Reply::Watch(vec![event("MODIFIED", running_ready("110"))]),
    ];
    let (result, transcript) = scripted(replies, |c| async move {
        let refused = |_: Pod| async { Greeting::NoForward };
        greeted(c, Duration::from_secs(5), refused, false).await
    })
    .await;
    let pod = result.expect("ready");
    assert_eq!(pod.metadata.resource_version.as_deref(), Some("110"));
    insta::assert_snapshot!(transcript);
}

#[tokio::test]
async fn start_creates_the_pod_and_its_policy_then_watches_it_to_ready() {
    let replies = vec![
        created(pending("100")),
        echo("NetworkPolicy", "networking.k8s.io/v1", POD),
        Reply::Watch(vec![
            event("ADDED", pending("100")),
            event("MODIFIED", waiting("105", "ContainerCreating", "")),
            event("MODIFIED", running_ready("110")),
        ]),
    ];
    let (result, transcript) = scripted(replies, |c| start(c, Duration::from_secs(5))).await;
    let pod = result.expect("ready");
    assert_eq!(pod.metadata.resource_version.as_deref(), Some("110"));
    insta::assert_snapshot!(transcript);
}

/// What the live cluster showed: the ~0.3 s before the provisioner binds an `Immediate`
/// claim, and 20 parallel runs on a 2-CPU node. Both clear by themselves: the start waits,
/// says why once per reason, and goes on when the pod is placed.
#[tokio::test]
async fn a_pod_not_scheduled_for_a_reason_that_clears_is_waited_for() {
    let not_yet = |rv: &str, message: &str| {
        pod_with(
            rv,
            json!({"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": message}]}),
        )
    };
    let cpu = "0/1 nodes are available: 1 Insufficient cpu.";
    let replies = vec![
        created(pending("100")),
        echo("NetworkPolicy", "networking.k8s.io/v1", POD),
        Reply::Watch(vec![
            event("MODIFIED", not_yet("101", "pod has unbound immediate PersistentVolumeClaims")),
            event("MODIFIED", not_yet("102", cpu)),
            event("MODIFIED", not_yet("103", cpu)),
            event("MODIFIED", running_ready("110")),
        ]),
    ];
    let mut said = Vec::new();
    let (result, _) = scripted(replies, |c| async move {
        let status = &mut |line: &str| said.push(line.to_owned());
        api::start(&c, NS, &the_pod(), the_policy(), Duration::from_secs(5), status, answers, false)
            .await
            .map(|pod| (pod, said))
    })
    .await;
    let (pod, said) = result.expect("ready once placed");
    assert_eq!(pod.metadata.resource_version.as_deref(), Some("110"));
    insta::assert_snapshot!(said.join("\n"), @r"
    pod `psbx-abc` not scheduled yet: pod has unbound immediate PersistentVolumeClaims; waiting
    pod `psbx-abc` not scheduled yet: 0/1 nodes are available: 1 Insufficient cpu.; waiting
    ");
}

#[test]
fn what_a_scheduler_says_clears_or_not() {
    for (message, clears) in [
        ("pod has unbound immediate PersistentVolumeClaims", true),
        ("0/1 nodes are available: 1 Insufficient cpu.", true),
        (
            "0/3 nodes are available: 1 Insufficient memory, 2 node(s) didn't match node selector.",
            true,
        ),
        ("0/1 nodes are available: 1 Too many pods.", true),
        (
            "0/1 nodes are available: 1 node(s) had taint {node.kubernetes.io/not-ready: }, that the pod didn't tolerate.",
            true,
        ),
        ("0/2 nodes are available: 2 node(s) were unschedulable.", true),
        ("no nodes available to schedule pods", true),
        ("0/1 nodes are available: 1 node(s) didn't match node selector.", false),
        ("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity.", false),
        (
            "0/1 nodes are available: 1 node(s) had taint {dedicated: gpu}, that the pod didn't tolerate.",
            false,
        ),
    ] {
        assert_eq!(crate::failure::unschedulable_clears(message), clears, "{message}");
    }
}

#[tokio::test]
async fn a_watch_that_ends_or_expires_is_resumed_from_the_last_version() {
    let gone = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
        "metadata": {}, "status": "Failure", "message": "too old resource version: 100 (200)",
        "reason": "Expired", "code": 410}});
    let replies = vec![
        created(pending("100")),
        echo("NetworkPolicy", "networking.k8s.io/v1", POD),
        // The apiserver ends a watch at its timeout; the next one starts where this one stopped.
        Reply::Watch(vec![event("MODIFIED", waiting("105", "ContainerCreating", ""))]),
        Reply::Watch(vec![gone]),
        ok(pending("200")),
        Reply::Watch(vec![event("MODIFIED", running_ready("210"))]),
    ];
    let (result, transcript) = scripted(replies, |c| start(c, Duration::from_secs(5))).await;
    result.expect("ready");
    insta::assert_snapshot!(transcript);
}

#[tokio::test]
async fn publish_creates_a_service_and_an_ingress_owned_by_the_pod_and_delete_goes_by_uid() {
    let owner: Pod = serde_json::from_value(running_ready("110")).expect("pod");
    let service: Service = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "psbx-abc-8000"},
        "spec": {"ports": [{"port": 8000}]}}))
    .expect("service");
    let ingress: Ingress = serde_json::from_value(json!({"apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress", "metadata": {"name": "psbx-abc-8000"}, "spec": {}}))
    .expect("ingress");
    let replies = vec![
        echo("Service", "v1", "psbx-abc-8000"),
        echo("Ingress", "networking.k8s.io/v1", "psbx-abc-8000"),
        deleted_ok(),
        status(
            404,
            "NotFound",
            "pods \"psbx-abc\" not found",
            json!({"name": POD, "kind": "pods"}),
        ),
    ];
    let (result, transcript) = scripted(replies, |c| async move {
        let published = api::publish(&c, NS, &owner, service, Some(ingress)).await?;
        let first = api::delete_pod(&c, NS, POD, Some(UID)).await?;
        let again = api::delete_pod(&c, NS, POD, Some(UID)).await?;
        Ok::<_, Error>((published.1.is_some(), first, again))
    })
    .await;
    assert_eq!(result.expect("published and deleted"), (true, true, false));
    insta::assert_snapshot!(transcript);
}

#[tokio::test]
async fn a_refused_ingress_takes_its_service_back() {
    let owner: Pod = serde_json::from_value(running_ready("110")).expect("pod");
    let service: Service = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "psbx-abc-8000"}, "spec": {}}))
    .expect("service");
    let ingress: Ingress = serde_json::from_value(json!({"apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress", "metadata": {"name": "psbx-abc-8000"}}))
    .expect("ingress");
    let forbidden = "ingresses.networking.k8s.io is forbidden: User \"system:serviceaccount:python-sandbox:psbx\" cannot create resource \"ingresses\" in API group \"networking.k8s.io\" in the namespace \"python-sandbox\"";
    let replies = vec![
        echo("Service", "v1", "psbx-abc-8000"),
        status(
            403,
            "Forbidden",
            forbidden,
            json!({"group": "networking.k8s.io", "kind": "ingresses"}),
        ),
        ok(json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})),
    ];
    let (result, transcript) =
        scripted(
            replies,
            |c| async move { api::publish(&c, NS, &owner, service, Some(ingress)).await },
        )
        .await;
    let error = result.expect_err("refused");
    insta::assert_snapshot!(format!("{error}\n---\n{transcript}"));
}

/// One way a start fails: what the apiserver answers after the pod create, and the snapshot name.
struct Case {
    name: &'static str,
    class: ErrorClass,
    replies: Vec<Reply>,
}

fn after_create(replies: Vec<Reply>) -> Vec<Reply> {
    let mut all = vec![created(pending("100")), echo("NetworkPolicy", "networking.k8s.io/v1", POD)];
    all.extend(replies);
    all
}

fn watch_then_cleanup(events: Vec<Value>) -> Vec<Reply> {
    let mut replies = vec![Reply::Watch(events)];
    replies.extend(cleanup());
    after_create(replies)
}

fn failure_cases() -> Vec<Case> {
    let rbac = "pods is forbidden: User \"system:serviceaccount:python-sandbox:default\" cannot create resource \"pods\" in API group \"\" in the namespace \"python-sandbox\"";
    let quota = "pods \"psbx-abc\" is forbidden: exceeded quota: sandbox-quota, requested: limits.memory=1Gi, used: limits.memory=3584Mi, limited: limits.memory=4Gi";
    let pod_security = "pods \"psbx-abc\" is forbidden: violates PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false (container \"sandbox\" must set securityContext.allowPrivilegeEscalation=false)";
    let vap = "pods \"psbx-abc\" is forbidden: ValidatingAdmissionPolicy 'python-sandbox-hardening' with binding 'python-sandbox-hardening' denied request: containers must drop ALL capabilities";
    let webhook = "admission webhook \"validate.kyverno.svc-fail\" denied the request: \n\npolicy Pod/python-sandbox/psbx-abc for resource violation: \n\nrequire-labels:\n  check-team: label 'team' is required";
    let runtime_class =
        "pods \"psbx-abc\" is forbidden: pod rejected: RuntimeClass \"gvisor\" not found";
    let netpol_rbac = "networkpolicies.networking.k8s.io is forbidden: User \"alice\" cannot create resource \"networkpolicies\" in API group \"networking.k8s.io\" in the namespace \"python-sandbox\"";
    let watch_rbac = "pods \"psbx-abc\" is forbidden: User \"alice\" cannot watch resource \"pods\" in API group \"\" in the namespace \"python-sandbox\"";
    let oom = pod_with(
        "110",
        json!({"phase": "Running", "containerStatuses": [{"name": "sandbox",
        "image": "python-sandbox-runtime:0.1.0", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
            "finishedAt": "2025-01-01T00:00:03Z"}}}]}),
    );
    let crashloop = pod_with(
        "110",
        json!({"phase": "Running", "containerStatuses": [{"name": "sandbox",
        "image": "python-sandbox-runtime:0.1.0", "imageID": "", "ready": false, "restartCount": 3,
        "state": {"waiting": {"reason": "CrashLoopBackOff",
            "message": "back-off 40s restarting failed container=sandbox pod=psbx-abc_python-sandbox"}},
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
            "message": "exec /usr/local/bin/psbx-agent: no such file or directory"}}}]}),
    );
    let exited = pod_with(
        "110",
        json!({"phase": "Failed", "containerStatuses": [{"name": "sandbox",
        "image": "python-sandbox-runtime:0.1.0", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": 2, "reason": "Error",
            "message": "psbx-agent: /workspace is not writable\n"}}}]}),
    );
    let deadline = pod_with(
        "110",
        json!({"phase": "Failed", "reason": "DeadlineExceeded",
        "message": "Pod was active on the node longer than the specified deadline"}),
    );
    let unschedulable = pod_with(
        "104",
        json!({"phase": "Pending", "conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/1 nodes are available: 1 node(s) didn't match node selector."}]}),
    );
    vec![
        Case {
            name: "image_not_on_the_node",
            class: ErrorClass::Setup,
            replies: watch_then_cleanup(vec![event(
                "MODIFIED",
                waiting(
                    "105",
                    "ErrImagePull",
                    "rpc error: code = Unknown desc = failed to pull and unpack image \"docker.io/library/python-sandbox-runtime:0.1.0\": failed to resolve reference \"docker.io/library/python-sandbox-runtime:0.1.0\": pull access denied, repository does not exist or may require authorization",
                ),
            )]),
        },
        Case {
            name: "image_never_pull",
            class: ErrorClass::Setup,
            replies: watch_then_cleanup(vec![event(
                "MODIFIED",
                waiting(
                    "105",
                    "ErrImageNeverPull",
                    "Container image \"python-sandbox-runtime:0.1.0\" is not present with pull policy of Never",
                ),
            )]),
        },
        Case {
            name: "image_pull_backoff",
            class: ErrorClass::Setup,
            replies: watch_then_cleanup(vec![event(
                "MODIFIED",
                waiting(
                    "105",
                    "ImagePullBackOff",
                    "Back-off pulling image \"python-sandbox-runtime:0.1.0\"",
                ),
            )]),
        },
        Case {
            name: "unschedulable",
            class: ErrorClass::Setup,
            replies: watch_then_cleanup(vec![event("MODIFIED", unschedulable)]),
        },
        Case {
            name: "oom_killed",
            class: ErrorClass::Setup,
            replies: watch_then_cleanup(vec![event("MODIFIED", oom)]),
        },
        Case {
            name: "crash_loop",
            class: ErrorClass::Setup,
            replies: watch_then_cleanup(vec![event("MODIFIED", crashloop)]),
        },
        Case {
            name: "terminated_during_start",
            class: ErrorClass::Setup,
            replies: watch_then_cleanup(vec![event("MODIFIED", exited)]),
        },
        Case {
            name: "deadline_exceeded",
            class: ErrorClass::Setup,
            replies: watch_then_cleanup(vec![event("MODIFIED", deadline)]),
        },
        Case {
            name: "deleted_while_starting",
            class: ErrorClass::Setup,
            replies: watch_then_cleanup(vec![event("DELETED", pending("106"))]),
        },
        Case {
            name: "rbac_forbidden_create",
            class: ErrorClass::Setup,
            replies: vec![status(403, "Forbidden", rbac, json!({"kind": "pods"}))],
        },
        Case {
            name: "quota_exceeded",
            class: ErrorClass::Setup,
            replies: vec![status(403, "Forbidden", quota, json!({"name": POD, "kind": "pods"}))],
        },
        Case {
            name: "pod_security_denied",
            class: ErrorClass::Setup,
            replies: vec![status(
                403,
                "Forbidden",
                pod_security,
                json!({"name": POD, "kind": "pods"}),
            )],
        },
        Case {
            name: "admission_policy_denied",
            class: ErrorClass::Setup,
            replies: vec![status(422, "Invalid", vap, json!({"name": POD, "kind": "pods"}))],
        },
        Case {
            name: "admission_webhook_denied",
            class: ErrorClass::Setup,
            replies: vec![status(400, "BadRequest", webhook, Value::Null)],
        },
        Case {
            name: "runtime_class_missing",
            class: ErrorClass::Setup,
            replies: vec![status(
                403,
                "Forbidden",
                runtime_class,
                json!({"name": POD, "kind": "pods"}),
            )],
        },
        Case {
            name: "namespace_missing",
            class: ErrorClass::Setup,
            replies: vec![status(
                404,
                "NotFound",
                "namespaces \"python-sandbox\" not found",
                json!({"name": "python-sandbox", "kind": "namespaces"}),
            )],
        },
        Case {
            name: "name_taken",
            class: ErrorClass::Setup,
            replies: vec![status(
                409,
                "AlreadyExists",
                "pods \"psbx-abc\" already exists",
                json!({"name": POD, "kind": "pods"}),
            )],
        },
        Case {
            name: "invalid",
            class: ErrorClass::Setup,
            replies: vec![status(
                422,
                "Invalid",
                "Pod \"psbx-abc\" is invalid: [spec.containers[0].image: Required value, spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit]",
                json!({"name": POD, "kind": "Pod", "causes": [
                    {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers[0].image"},
                    {"reason": "FieldValueInvalid", "message": "Invalid value: \"2\": must be less than or equal to cpu limit", "field": "spec.containers[0].resources.requests"}]}),
            )],
        },
        Case {
            name: "apiserver_unavailable",
            class: ErrorClass::Unavailable,
            replies: vec![status(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
                Value::Null,
            )],
        },
        Case {
            name: "policy_forbidden_cleans_up_the_pod",
            class: ErrorClass::Setup,
            replies: vec![
                created(pending("100")),
                status(
                    403,
                    "Forbidden",
                    netpol_rbac,
                    json!({"group": "networking.k8s.io", "kind": "networkpolicies"}),
                ),
            ]
            .into_iter()
            .chain(cleanup())
            .collect(),
        },
        Case {
            name: "watch_forbidden",
            class: ErrorClass::Setup,
            replies: after_create(
                [status(403, "Forbidden", watch_rbac, json!({"name": POD, "kind": "pods"}))]
                    .into_iter()
                    .chain(cleanup())
                    .collect(),
            ),
        },
    ]
}

#[tokio::test]
async fn every_start_failure_names_the_clusters_reason_and_a_hint() {
    for case in failure_cases() {
        let (result, transcript) =
            scripted(case.replies, |c| start(c, Duration::from_secs(5))).await;
        let error = result.expect_err(case.name);
        assert_eq!(error.class(), case.class, "{}", case.name);
        insta::assert_snapshot!(case.name, format!("{error}\n---\n{transcript}"));
    }
}

#[tokio::test]
async fn a_pod_that_never_gets_ready_times_out_with_its_last_warning() {
    let events = json!({"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": [
        {"metadata": {"name": "psbx-abc.1", "namespace": NS}, "involvedObject": {"kind": "Pod", "name": POD},
         "type": "Normal", "reason": "Scheduled", "message": "Successfully assigned python-sandbox/psbx-abc to kind-control-plane",
         "lastTimestamp": "2025-01-01T00:00:01Z"},
        {"metadata": {"name": "psbx-abc.2", "namespace": NS}, "involvedObject": {"kind": "Pod", "name": POD},
         "type": "Warning", "reason": "FailedCreatePodSandBox",
         "message": "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for \"runsc\" is configured",
         "lastTimestamp": "2025-01-01T00:00:09Z"},
        {"metadata": {"name": "psbx-abc.3", "namespace": NS}, "involvedObject": {"kind": "Pod", "name": POD},
         "type": "Warning", "reason": "FailedMount", "message": "older warning",
         "lastTimestamp": "2025-01-01T00:00:05Z"}]});
    let replies = after_create(
        vec![
            Reply::Watch(vec![event("MODIFIED", waiting("105", "ContainerCreating", ""))]),
            Reply::Hang,
            ok(events),
        ]
        .into_iter()
        .chain(cleanup())
        .collect(),
    );
    let (result, transcript) = scripted(replies, |c| start(c, Duration::from_secs(1))).await;
    let error = result.expect_err("timeout");
    assert_eq!(error.class(), ErrorClass::Setup);
    insta::assert_snapshot!(format!("{error}\n---\n{transcript}"));
}

#[tokio::test]
async fn a_cluster_that_does_not_answer_is_unavailable() {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    drop(handle);
    let error =
        start(Client::new(service, NS), Duration::from_secs(1)).await.expect_err("no cluster");
    assert_eq!(error.class(), ErrorClass::Unavailable);
    insta::assert_snapshot!(error.to_string());
}

#[tokio::test]
async fn a_session_pod_that_is_gone_is_not_found() {
    let replies = vec![status(
        404,
        "NotFound",
        "pods \"psbx-abc\" not found",
        json!({"name": POD, "kind": "pods"}),
    )];
    let (result, _) = scripted(replies, |c| async move {
        let pods: kube::Api<Pod> = kube::Api::namespaced(c, NS);
        let op = failure::Op::new("get", "pod", Some(POD), NS);
        pods.get(POD).await.map_err(|e| failure::api_error(&op, e))
    })
    .await;
    let error = result.expect_err("gone");
    assert_eq!(error.class(), ErrorClass::NotFound);
    assert_eq!(error.to_string(), "pod `psbx-abc` not found in namespace `python-sandbox`");
}

#[test]
fn own_sets_one_reference_to_the_pods_uid_and_needs_one() {
    let owner: Pod = serde_json::from_value(running_ready("110")).expect("pod");
    let mut meta = the_policy().metadata;
    api::own(&mut meta, &owner).expect("owned");
    api::own(&mut meta, &owner).expect("owned twice");
    insta::assert_json_snapshot!(meta.owner_references, @r#"
    [
      {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "psbx-abc",
        "uid": "0b6c2f3e-1111-4a2b-9c3d-5e6f7a8b9c0d"
      }
    ]
    "#);
    let error = api::own(&mut meta, &the_pod()).expect_err("not read back");
    assert!(error.to_string().contains("has no name or uid"), "{error}");
}

#[test]
fn rbac_messages_name_user_verb_resource_and_namespace() {
    let cases = [
        "pods is forbidden: User \"system:serviceaccount:ns:default\" cannot create resource \"pods\" in API group \"\" in the namespace \"ns\"",
        "pods \"x\" is forbidden: User \"alice\" cannot create resource \"pods/exec\" in API group \"\" in the namespace \"ns\"",
        "ingresses.networking.k8s.io is forbidden: User \"bob\" cannot list resource \"ingresses\" in API group \"networking.k8s.io\" in the namespace \"ns\": RBAC: role.rbac.authorization.k8s.io \"psbx\" not found",
        "pods is forbidden: User \"carol\" cannot list resource \"pods\" in API group \"\" at the cluster scope",
        "pods \"x\" is forbidden: exceeded quota: q",
    ];
    let parsed: Vec<String> =
        cases.iter().map(|m| format!("{:?}", failure::parse_rbac(m))).collect();
    insta::assert_snapshot!(parsed.join("\n"));
}

// ---- sweep ----

const NOW: u64 = 1_750_000_000;

pub(crate) fn key() -> MarkKey {
    MarkKey::from_bytes([7; 32])
}

pub(crate) fn owner() -> Owner {
    Owner {
        user: "alice".to_owned(),
        host: "laptop".to_owned(),
        boot_id: "boot-elsewhere".to_owned(),
        pid_ns: 4_026_531_836,
        pid: 4242,
        start_time: 99,
    }
}

/// A listed pod: `labels` from the reaper's builders, signed for `name` unless `forged`.
fn listed_pod(
    name: &str,
    labels: BTreeMap<String, String>,
    phase: &str,
    extra: Value,
    forged: bool,
) -> Value {
    let mut labels = labels;
    if forged {
        MarkKey::from_bytes([8; 32]).sign(name, &mut labels);
    } else {
        key().sign(name, &mut labels);
    }
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "labels": labels},
        "status": {"phase": phase}});
    if let (Some(pod), Some(extra)) = (pod.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            if k == "metadata" {
                if let (Some(meta), Some(more)) = (pod["metadata"].as_object_mut(), v.as_object()) {
                    meta.extend(more.clone());
                }
            } else {
                pod.insert(k.clone(), v.clone());
            }
        }
    }
    pod
}

fn sweep_list() -> Reply {
    let old = NOW - 7200;
    let run =
        |id: &str, expires| reaper::labels_for_run(id, &owner(), old, expires).expect("labels");
    let session =
        |id: &str, ttl| reaper::labels_for_session(id, &owner(), old, ttl).expect("labels");
    let finished = json!({"status": {"phase": "Succeeded", "containerStatuses": [{"name": "sandbox",
        "image": "i", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "finishedAt": "2025-06-15T14:00:00Z"}}}]}});
    ok(
        json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "500"}, "items": [
            listed_pod("psbx-expired", run("expired", Some(NOW - 10)), "Running", Value::Null, false),
            listed_pod("psbx-finished", run("finished", Some(NOW + 3600)), "Succeeded", finished, false),
            listed_pod("psbx-live-run", run("live", Some(NOW + 3600)), "Running", Value::Null, false),
            listed_pod("psbx-session", session("session", 600), "Running", Value::Null, false),
            listed_pod("psbx-idle-pending", session("idle", 600), "Pending", Value::Null, false),
            listed_pod("psbx-forged", run("forged", Some(NOW - 10)), "Running", Value::Null, true),
            listed_pod("psbx-going", run("going", Some(NOW - 10)), "Running",
                json!({"metadata": {"deletionTimestamp": "2025-06-15T15:00:00Z"}}), false),
        ]}),
    )
}

fn gone_owner(owner: &Owner) -> Liveness {
    // The owner on this machine that has exited: the sweep on the owner's machine sees it.
    if owner.boot_id == "boot-elsewhere" { Liveness::Unknown } else { Liveness::Dead }
}

#[tokio::test]
async fn sweep_deletes_expired_finished_and_idle_pods_by_uid_and_keeps_the_rest() {
    let replies = vec![
        sweep_list(),
        deleted_ok(),
        status(
            404,
            "NotFound",
            "pods \"psbx-finished\" not found",
            json!({"name": "psbx-finished", "kind": "pods"}),
        ),
        status(
            409,
            "Conflict",
            "Precondition failed: UID in precondition: uid-psbx-idle-pending, UID in object meta: 6f1d",
            json!({"name": "psbx-idle-pending", "kind": "pods"}),
        ),
    ];
    let (result, transcript) = scripted(replies, |c| async move {
        sweep::sweep_with(&c, NS, &key(), NOW, false, &gone_owner).await
    })
    .await;
    let swept = result.expect("swept");
    insta::assert_snapshot!(format!("{swept:#?}\n---\n{transcript}"));
}

#[tokio::test]
async fn a_dry_run_sweep_lists_and_deletes_nothing() {
    let (result, transcript) = scripted(vec![sweep_list()], |c| async move {
        sweep::sweep_with(&c, NS, &key(), NOW, true, &gone_owner).await
    })
    .await;
    let swept = result.expect("swept");
    let names: Vec<(&str, bool)> = swept.iter().map(|s| (s.pod.as_str(), s.removed)).collect();
    assert_eq!(
        names,
        [("psbx-expired", false), ("psbx-finished", false), ("psbx-idle-pending", false)]
    );
    insta::assert_snapshot!(transcript);
}

/// `reap` tells an unclaimed warm-pool member (`pool`) from a session, a claimed member
/// being a session like any other.
#[test]
fn a_swept_pool_member_is_named_as_one() {
    let pods: Vec<Pod> = [
        ("ready", Some(crate::engine::POOL_READY)),
        ("claimed", Some(crate::engine::POOL_CLAIMED)),
        ("plain", None),
    ]
    .into_iter()
    .map(|(id, state)| {
        let mut labels = reaper::labels_for_session(id, &owner(), NOW - 7200, 600).expect("labels");
        if let Some(state) = state {
            labels.insert(crate::engine::POOL_LABEL.to_owned(), "k".to_owned());
            labels.insert(crate::engine::POOL_STATE_LABEL.to_owned(), state.to_owned());
        }
        let pod = listed_pod(&format!("psbx-{id}"), labels, "Pending", Value::Null, false);
        serde_json::from_value(pod).expect("pod")
    })
    .collect();
    let kinds: Vec<(String, String)> = sweep::decide(&pods, &key(), NOW, &gone_owner)
        .into_iter()
        .map(|(_, s)| (s.pod, s.kind))
        .collect();
    let want = [("psbx-ready", "pool"), ("psbx-claimed", "session"), ("psbx-plain", "session")];
    assert_eq!(kinds, want.map(|(p, k)| (p.to_owned(), k.to_owned())));
}

#[test]
fn a_run_whose_owner_died_on_this_machine_goes_and_elsewhere_waits_for_its_deadline() {
    let mut here = owner();
    here.boot_id = "boot-here".to_owned();
    // Two sandboxes (one would be removed whole, the other as its companion).
    let labels = |id: &str, o: &Owner| {
        reaper::labels_for_run(id, o, NOW - 60, Some(NOW + 3600)).expect("labels")
    };
    let pods: Vec<Pod> =
        [("psbx-here", labels("here", &here)), ("psbx-elsewhere", labels("elsewhere", &owner()))]
            .into_iter()
            .map(|(name, l)| {
                serde_json::from_value(listed_pod(name, l, "Running", Value::Null, false))
                    .expect("pod")
            })
            .collect();
    let chosen: Vec<(String, String)> = sweep::decide(&pods, &key(), NOW, &gone_owner)
        .into_iter()
        .map(|(_, s)| (s.pod, s.reason))
        .collect();
    assert_eq!(chosen, [("psbx-here".to_owned(), "owner process 4242 has exited".to_owned())]);
}

#[test]
fn running_is_not_ready_until_the_ready_condition_says_so() {
    let mut pod: Pod = serde_json::from_value(running_ready("110")).expect("pod");
    assert_eq!(failure::progress(&pod), failure::Progress::Ready);
    let conditions = pod.status.as_mut().and_then(|s| s.conditions.as_mut()).expect("conditions");
    conditions.retain(|c| c.type_ != "Ready");
    assert_eq!(failure::progress(&pod), failure::Progress::Waiting("phase Running".to_owned()));
    let no_status: Pod = the_pod();
    assert_eq!(
        failure::progress(&no_status),
        failure::Progress::Waiting("no status yet".to_owned())
    );
}

#[test]
fn the_watch_gauge_counts_requests_and_how_many_are_open_at_once() {
    let gauge = api::WatchGauge::new();
    let first = gauge.open();
    let second = gauge.open();
    assert_eq!(gauge.read(), api::Watches { issued: 2, open: 2, max_open: 2 });
    drop((first, second));
    let _third = gauge.open();
    assert_eq!(gauge.read(), api::Watches { issued: 3, open: 1, max_open: 2 });
}

#[test]
fn a_watch_trace_line_names_the_object_and_the_open_count() {
    insta::assert_snapshot!(api::trace_line("pod", "psbx-0a1b", 1), @"k8s-trace: watch pod/psbx-0a1b (open 1)");
}

/// A Lease as the apiserver returns it: held by `holder`, renewed `age` seconds ago.
fn lease_body(rv: &str, holder: &str, age: i64) -> Value {
    let renewed = k8s_openapi::jiff::Timestamp::now()
        .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(age))
        .expect("time");
    json!({
        "kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
        "metadata": {"name": LEASE, "namespace": NS, "resourceVersion": rv},
        "spec": {
            "holderIdentity": holder, "leaseDurationSeconds": 30, "leaseTransitions": 2,
            "acquireTime": "2026-12-05T00:00:00.000000Z",
            "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
        },
    })
}

const LEASE: &str = "psbx-pool-serve-0123456789abcdef";
const ME: &str = "host-a/100";

async fn take(client: Client) -> Result<Option<String>, Error> {
    crate::lease::take(&client, NS, LEASE, ME, Duration::from_secs(30)).await
}

fn not_found(name: &str) -> Reply {
    status(
        404,
        "NotFound",
        &format!("leases.coordination.k8s.io \"{name}\" not found"),
        json!({"name": name, "group": "coordination.k8s.io", "kind": "leases"}),
    )
}

fn conflict(name: &str) -> Reply {
    status(
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on leases.coordination.k8s.io \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
        ),
        json!({"name": name, "group": "coordination.k8s.io", "kind": "leases"}),
    )
}

#[tokio::test]
async fn a_free_pool_lease_is_created_for_this_loop() {
    let replies = vec![not_found(LEASE), created(lease_body("7", ME, 0))];
    let (result, transcript) = scripted(replies, take).await;
    assert_eq!(result.expect("taken"), None);
    insta::assert_snapshot!(transcript);
}

#[tokio::test]
async fn a_live_lease_of_another_loop_is_not_taken() {
    let replies = vec![ok(lease_body("7", "host-b/200", 5))];
    let (result, transcript) = scripted(replies, take).await;
    assert_eq!(result.expect("read"), Some("host-b/200".to_owned()));
    assert_eq!(transcript.lines().count(), 1, "{transcript}");
}

#[tokio::test]
async fn our_lease_is_renewed_and_an_expired_one_taken_over_at_its_version() {
    let replies = vec![ok(lease_body("7", ME, 5)), ok(lease_body("8", ME, 0))];
    let (result, renewed) = scripted(replies, take).await;
    assert_eq!(result.expect("renewed"), None);
    let replies = vec![ok(lease_body("9", "host-b/200", 120)), ok(lease_body("10", ME, 0))];
    let (result, taken_over) = scripted(replies, take).await;
    assert_eq!(result.expect("taken over"), None);
    insta::assert_snapshot!(format!("{renewed}\n---\n{taken_over}"));
}

#[tokio::test]
async fn of_two_loops_taking_a_lease_at_once_the_second_learns_the_first() {
    let replies = vec![not_found(LEASE), conflict(LEASE), ok(lease_body("7", "host-b/200", 0))];
    let (result, transcript) = scripted(replies, take).await;
    assert_eq!(result.expect("read"), Some("host-b/200".to_owned()));
    assert_eq!(transcript.lines().filter(|l| !l.starts_with(' ')).count(), 3, "{transcript}");
}

#[tokio::test]
async fn a_lease_is_released_only_by_its_holder_and_at_the_version_read() {
    let replies =
        vec![ok(lease_body("7", ME, 5)), ok(json!({"kind": "Status", "status": "Success"}))];
    let (result, ours) =
        scripted(replies, |c| async move { crate::lease::release(&c, NS, LEASE, ME).await }).await;
    result.expect("released");
    let replies = vec![ok(lease_body("7", "host-b/200", 5))];
    let (result, theirs) =
        scripted(replies, |c| async move { crate::lease::release(&c, NS, LEASE, ME).await }).await;
    result.expect("left alone");
    assert_eq!(theirs.lines().count(), 1, "{theirs}");
    insta::assert_snapshot!(ours);
}

#[tokio::test]
async fn a_claim_sees_a_live_holder_and_no_expired_one() {
    for (age, want) in [(5, Some("host-b/200".to_owned())), (31, None)] {
        let replies = vec![ok(lease_body("7", "host-b/200", age))];
        let (result, _) =
            scripted(replies, |c| async move { crate::lease::holder(&c, NS, LEASE).await }).await;
        assert_eq!(result.expect("read"), want, "renewed {age} s ago");
    }
    let (result, _) =
        scripted(
            vec![not_found(LEASE)],
            |c| async move { crate::lease::holder(&c, NS, LEASE).await },
        )
        .await;
    assert_eq!(result.expect("read"), None);
}

#[test]
fn the_lease_verdict_follows_holder_and_age() {
    use crate::lease::{Verdict, verdict};
    let now = k8s_openapi::jiff::Timestamp::now();
    let parse = |v: Value| -> k8s_openapi::api::coordination::v1::Lease {
        serde_json::from_value(v).expect("lease")
    };
    assert_eq!(verdict(None, ME, now), Verdict::Create);
    assert_eq!(
        verdict(Some(&parse(lease_body("7", ME, 100))), ME, now),
        Verdict::Renew { revision: "7".into() }
    );
    assert_eq!(
        verdict(Some(&parse(lease_body("7", "host-b/200", 29))), ME, now),
        Verdict::Held { holder: "host-b/200".into() }
    );
    assert_eq!(
        verdict(Some(&parse(lease_body("7", "host-b/200", 31))), ME, now),
        Verdict::TakeOver { revision: "7".into(), transitions: 2 }
    );
    assert_eq!(
        verdict(Some(&parse(lease_body("7", "", 0))), ME, now),
        Verdict::TakeOver { revision: "7".into(), transitions: 2 }
    );
    // The name is the user's, stable, and a valid object name.
    let mark = MarkKey::from_bytes([7; 32]);
    let name = crate::lease::name(&mark);
    assert_eq!(name, crate::lease::name(&mark));
    assert_ne!(name, crate::lease::name(&MarkKey::from_bytes([8; 32])));
    assert!(name.len() <= 63 && name.starts_with("psbx-pool-serve-"), "{name}");
}

/// When a deleted pod's object may be removed at once: only once nothing of it runs, as the
/// kubelet reports it (a container stopped, or already removed by the runtime).
#[test]
fn a_deleted_pod_is_removed_at_once_only_when_no_container_runs() {
    let gone = json!({"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown"}});
    let cases = [
        (
            "stopped by SIGTERM",
            true,
            "Failed",
            json!({"terminated": {"exitCode": 143}}),
            None,
            true,
        ),
        ("ended by itself", true, "Succeeded", json!({"terminated": {"exitCode": 0}}), None, true),
        // The runtime removed it before the kubelet read its state (seen on a busy node).
        (
            "removed",
            true,
            "Failed",
            json!({"waiting": {"reason": "ContainerCreating"}}),
            Some(gone),
            true,
        ),
        ("still running", true, "Running", json!({"running": {}}), None, false),
        ("terminal phase, container running", true, "Failed", json!({"running": {}}), None, false),
        ("not being deleted", false, "Failed", json!({"terminated": {"exitCode": 1}}), None, false),
    ];
    for (what, deleting, phase, state, last, expected) in cases {
        let mut pod = pod_with(
            "130",
            json!({"phase": phase, "containerStatuses": [{"name": "sandbox", "image": "x",
                "imageID": "", "ready": false, "restartCount": 0, "state": state,
                "lastState": last.unwrap_or_else(|| json!({}))}]}),
        );
        if deleting {
            pod["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:09Z");
        }
        let pod: Pod = serde_json::from_value(pod).expect("pod");
        assert_eq!(crate::failure::stopped(&pod), expected, "{what}");
    }
    let mut no_statuses = pod_with("131", json!({"phase": "Failed"}));
    no_statuses["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:09Z");
    let no_statuses: Pod = serde_json::from_value(no_statuses).expect("pod");
    assert!(!crate::failure::stopped(&no_statuses), "a pod the kubelet has not reported on");
    let mut init_running = pod_with(
        "132",
        json!({"phase": "Failed",
            "initContainerStatuses": [{"name": "init", "image": "x", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"running": {}}}],
            "containerStatuses": [{"name": "sandbox", "image": "x", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"terminated": {"exitCode": 0}}}]}),
    );
    init_running["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:09Z");
    let init_running: Pod = serde_json::from_value(init_running).expect("pod");
    assert!(!crate::failure::stopped(&init_running), "an init container still runs");
}
