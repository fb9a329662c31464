//! `readiness` against kube's `tower-test` mock (what each request is, and how each answer is
//! judged) and the pure `verdict`.

use std::time::Duration;

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

use super::{Readiness, readiness};

const NS: &str = "python-sandbox";

/// Answers each request with the next `(status, body)`; returns the requests seen.
async fn scripted(replies: Vec<(u16, Value)>) -> (crate::Result<Readiness>, Vec<String>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut replies = replies.into_iter();
        while let Some((request, send)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect_bytes().await.expect("request body");
            let mut line = format!("{} {}", parts.method, parts.uri);
            if !bytes.is_empty() {
                let body: Value = serde_json::from_slice(&bytes).expect("json body");
                line.push_str(&format!(" {}", body["spec"]["resourceAttributes"]));
            }
            seen.push(line);
            let (code, body) = replies.next().unwrap_or((500, json!({"kind": "Status"})));
            let response = Response::builder()
                .status(code)
                .body(Body::from(serde_json::to_vec(&body).expect("json")))
                .expect("response");
            send.send_response(response);
        }
        seen
    });
    let result = readiness(&Client::new(service, NS), NS, Duration::from_secs(5)).await;
    (result, server.await.expect("server"))
}

fn version() -> (u16, Value) {
    (
        200,
        json!({"major": "1", "minor": "30", "gitVersion": "v1.30.2", "gitCommit": "", "gitTreeState": "", "buildDate": "", "goVersion": "", "compiler": "", "platform": ""}),
    )
}

fn review(allowed: bool) -> (u16, Value) {
    (
        201,
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {}, "status": {"allowed": allowed}}),
    )
}

#[tokio::test]
async fn a_ready_cluster_answers_its_version_namespace_and_both_reviews() {
    let ns = (200, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}));
    let (result, seen) = scripted(vec![version(), ns, review(true), review(true)]).await;
    let readiness = result.expect("ready");
    insta::assert_snapshot!(seen.join("\n"), @r#"
    GET /version
    GET /api/v1/namespaces/python-sandbox
    POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews? {"namespace":"python-sandbox","resource":"pods","verb":"create"}
    POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews? {"namespace":"python-sandbox","resource":"pods","subresource":"exec","verb":"create"}
    "#);
    assert_eq!(
        readiness.verdict(),
        Ok("cluster v1.30.2 answers; may create pods and pods/exec in `python-sandbox`".to_owned())
    );
}

#[tokio::test]
async fn a_namespace_hidden_by_rbac_leaves_the_reviews_to_decide_and_exec_denied_is_unavailable() {
    let forbidden = (
        403,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "namespaces \"python-sandbox\" is forbidden", "reason": "Forbidden", "code": 403}),
    );
    let (result, _) = scripted(vec![version(), forbidden, review(true), review(false)]).await;
    let readiness = result.expect("answered");
    assert_eq!(readiness.namespace_exists, None);
    insta::assert_snapshot!(readiness.verdict().expect_err("exec denied"), @r"
    the cluster (v1.30.2) answers but this user may not `create pods/exec` in namespace `python-sandbox`
    hint: apply the engine's Role: `kubectl apply -n python-sandbox -f deploy/rbac/`, and bind it to this user
    ");
}

#[tokio::test]
async fn a_missing_namespace_says_how_to_make_it() {
    let missing = (
        404,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "namespaces \"python-sandbox\" not found", "reason": "NotFound", "code": 404}),
    );
    let (result, _) = scripted(vec![version(), missing, review(false), review(false)]).await;
    insta::assert_snapshot!(result.expect("answered").verdict().expect_err("missing"), @r"
    the cluster (v1.30.2) answers but namespace `python-sandbox` does not exist
    hint: `cargo xtask kind up` makes a local cluster with it, or `kubectl create namespace python-sandbox`
    ");
}

#[tokio::test]
async fn an_apiserver_that_fails_is_unreachable() {
    let (result, seen) = scripted(vec![(503, json!({"kind": "Status", "code": 503}))]).await;
    let error = result.expect_err("no version");
    assert_eq!(sandbox_core::Classify::class(&error), sandbox_core::ErrorClass::Unavailable);
    assert_eq!(seen, ["GET /version"]);
}
