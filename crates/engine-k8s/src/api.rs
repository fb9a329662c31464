//! The API control flow of a pod sandbox over `kube`: create the pod and its NetworkPolicy,
//! wait for it with a watch (never polling) under a timeout, publish a port as a Service and an
//! Ingress, delete, list by label. Objects arrive built (`manifest`); this module only sets the
//! owner reference that makes the dependents go with the pod, and turns every refusal into the
//! classified error of [`crate::failure`].
//!
//! The NetworkPolicy is created right after the pod, before the wait: the pod's uid (which the
//! owner reference needs) exists only then, and the policy should be in place before anything in
//! the pod can use the network. A start that fails after the pod exists deletes the pod, and its
//! dependents go with it.

use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Event, Pod, Service};
use k8s_openapi::api::networking::v1::{Ingress, NetworkPolicy};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Client;
use kube::api::{
    Api, DeleteParams, ListParams, PostParams, Preconditions, PropagationPolicy, WatchEvent,
    WatchParams,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::exec::Greeting;
use crate::failure::{self, Op, Progress, StartFailure, api_error};

/// The watches this process holds on the API server: the observable behind "a run holds at most
/// one watch" (a CLI process makes one run, so per process is per run). Each watch request
/// counts while its stream is read; `PYTHON_SANDBOX_K8S_TRACE=1` also writes one
/// `k8s-trace: watch KIND/NAME (open N)` line per request on stderr, which the end-to-end load
/// test counts per CLI process.
#[derive(Debug, Default)]
pub struct WatchGauge {
    issued: AtomicUsize,
    open: AtomicUsize,
    max_open: AtomicUsize,
}

/// A reading of a [`WatchGauge`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Watches {
    /// Watch requests made.
    pub issued: usize,
    /// Watch streams open now.
    pub open: usize,
    /// The most open at once.
    pub max_open: usize,
}

impl WatchGauge {
    /// A gauge at zero.
    pub const fn new() -> WatchGauge {
        WatchGauge {
            issued: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
            max_open: AtomicUsize::new(0),
        }
    }

    /// Counts one watch request, open until the guard drops.
    pub fn open(&self) -> WatchOpen<'_> {
        self.issued.fetch_add(1, Ordering::SeqCst);
        let now = self.open.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_open.fetch_max(now, Ordering::SeqCst);
        WatchOpen(self)
    }

    /// What it counted so far.
    pub fn read(&self) -> Watches {
        Watches {
            issued: self.issued.load(Ordering::SeqCst),
            open: self.open.load(Ordering::SeqCst),
            max_open: self.max_open.load(Ordering::SeqCst),
        }
    }
}

/// One open watch of a [`WatchGauge`]; dropping it closes it in the count.
#[derive(Debug)]
pub struct WatchOpen<'a>(&'a WatchGauge);

impl Drop for WatchOpen<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

static WATCHES: WatchGauge = WatchGauge::new();

/// This process's watches so far ([`WatchGauge`]).
pub fn watches() -> Watches {
    WATCHES.read()
}

/// Counts (and, under `PYTHON_SANDBOX_K8S_TRACE`, prints) a watch of `kind` `name` about to be
/// requested; the stream counts as open until the returned guard drops.
pub(crate) fn watch_opened(kind: &str, name: &str) -> WatchOpen<'static> {
    let open = WATCHES.open();
    if tracing() {
        use std::io::Write as _;
        let now = WATCHES.read().open;
        // A trace line lost to a closed stderr changes nothing of the run.
        let _ = writeln!(std::io::stderr(), "{}", trace_line(kind, name, now));
    }
    open
}

static REQUESTS: AtomicUsize = AtomicUsize::new(0);

/// The requests this process made to the API server so far: every call, watch, exec and
/// port-forward ([`CountRequests`]). A CLI process makes one run, so per process is per run.
pub fn requests() -> usize {
    REQUESTS.load(Ordering::SeqCst)
}

/// Whether `PYTHON_SANDBOX_K8S_TRACE` asks for `k8s-trace:` lines.
fn tracing() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os(TRACE_VAR).is_some_and(|v| !v.is_empty() && v != "0"))
}

/// The client's outermost layer: counts each request ([`requests`]) and, under
/// `PYTHON_SANDBOX_K8S_TRACE`, writes `k8s-trace: request METHOD PATH` on stderr (the path
/// only: a query may carry an exec's command). The end-to-end tier counts these per run and
/// per session command.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountRequests;

impl<S> tower::Layer<S> for CountRequests {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted(inner)
    }
}

/// A service whose requests [`CountRequests`] counts.
#[derive(Debug, Clone)]
pub struct Counted<S>(S);

impl<S, B> tower::Service<http::Request<B>> for Counted<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::result::Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> S::Future {
        REQUESTS.fetch_add(1, Ordering::SeqCst);
        if tracing() {
            use std::io::Write as _;
            let line = request_line(request.method().as_str(), request.uri());
            // A trace line lost to a closed stderr changes nothing of the run.
            let _ = writeln!(std::io::stderr(), "{line}");
        }
        self.0.call(request)
    }
}

/// The `k8s-trace:` line of a request: method and path, ` (watch)` for a watch.
pub fn request_line(method: &str, uri: &http::Uri) -> String {
    let watch =
        uri.query().is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    format!("k8s-trace: request {method} {}{}", uri.path(), if watch { " (watch)" } else { "" })
}

/// The `k8s-trace:` line of a watch request, with how many this process then holds.
pub fn trace_line(kind: &str, name: &str, open: usize) -> String {
    format!("k8s-trace: watch {kind}/{name} (open {open})")
}

/// The variable that turns on the `k8s-trace:` lines of [`WatchGauge`] and [`CountRequests`].
pub const TRACE_VAR: &str = "PYTHON_SANDBOX_K8S_TRACE";

/// How long one watch request may stay open before the apiserver ends it and it is re-issued
/// from the last resourceVersion (below the apiserver's own cap, so the end is ours).
const WATCH_SECS: u32 = 290;

/// How long a pod that failed to start is waited out after its delete: one kubelet status
/// batch (10 s) and its stop, with room for a busy node.
const START_CLEANUP: Duration = Duration::from_secs(30);

/// Sets `owner` as the owner of `meta`: the garbage collector deletes the object when the pod
/// goes. Neither `controller` nor `blockOwnerDeletion` is set: the latter needs `update` on
/// `pods/finalizers` where the OwnerReferencesPermissionEnforcement plugin runs, and a
/// background delete does not wait for it anyway.
pub fn own(meta: &mut ObjectMeta, owner: &Pod) -> Result<()> {
    let (Some(name), Some(uid)) = (owner.metadata.name.as_ref(), owner.metadata.uid.as_ref())
    else {
        return Err(Error::Object {
            action: "own an object by its pod".to_owned(),
            message: "the pod has no name or uid (it was not read back from the cluster)"
                .to_owned(),
        });
    };
    let reference = OwnerReference {
        api_version: "v1".to_owned(),
        kind: "Pod".to_owned(),
        name: name.clone(),
        uid: uid.clone(),
        ..OwnerReference::default()
    };
    let references = meta.owner_references.get_or_insert_with(Vec::new);
    references.retain(|r| r.uid != reference.uid);
    references.push(reference);
    Ok(())
}

fn kind_of<K: kube::Resource<DynamicType = ()>>() -> &'static str {
    match K::kind(&()).as_ref() {
        "Pod" => "pod",
        "Service" => "service",
        "Ingress" => "ingress",
        "NetworkPolicy" => "networkpolicy",
        "Event" => "event",
        "PersistentVolumeClaim" => "persistentvolumeclaim",
        _ => "object",
    }
}

/// A namespaced object the engine creates (pod, NetworkPolicy, Service, Ingress).
pub trait Object:
    kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + Clone
    + Debug
    + Serialize
    + DeserializeOwned
{
}

impl<K> Object for K where
    K: kube::Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned
{
}

fn name_of(meta: &ObjectMeta) -> Option<&str> {
    meta.name.as_deref()
}

/// Creates one namespaced object and returns what the cluster kept.
pub async fn create<K: Object>(client: &Client, namespace: &str, object: &K) -> Result<K> {
    let op = Op::new("create", kind_of::<K>(), name_of(object.meta()), namespace);
    if op.name.is_none() {
        return Err(Error::Object { action: op.to_string(), message: "it has no name".to_owned() });
    }
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    api.create(&PostParams::default(), object).await.map_err(|e| api_error(&op, e))
}

/// Creates `object` owned by `owner` (see [`own`]).
pub async fn create_owned<K: Object>(
    client: &Client,
    namespace: &str,
    owner: &Pod,
    mut object: K,
) -> Result<K> {
    own(object.meta_mut(), owner)?;
    create(client, namespace, &object).await
}

/// What a pod's start waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    /// Running and Ready (the readiness probe saw the agent listen).
    Ready,
    /// Running with every container started.
    Started,
}

/// The `k8s-trace:` line of each ask whether a started pod's agent answers, before its name.
pub const GREET_TRACE: &str = "k8s-trace: greet ";

/// When the agent is asked whether it answers, in ms after the container started (about
/// 1.6 s in all): it listens a few tens of ms after its start, and each ask is one request.
pub const GREET_BACKOFF_MS: [u64; 7] = [0, 25, 50, 100, 200, 400, 800];

/// Creates `pod` and its `network_policy` (owned by the pod), then waits (at most `timeout`
/// each for the start and, where needed, the readiness) until its agent answers; on any failure
/// the pod is deleted again and waited out. The pod is handed out as soon as its container
/// runs and `greet` says the agent answers through a port-forward (a few hundred ms before the
/// kubelet's readiness probe, period 1 s, would say so); where the forward never answers (RBAC
/// without `pods/portforward`, a runtime whose forward does not reach the pod's loopback), the
/// probe's Ready decides, as it did alone before.
///
/// With `early` (a run's pod, which nobody looks up by its status), the agent is also asked
/// from [`EARLY_GREET_MS`] after the create on, beside the watch: the kubelet reports a started
/// container only at its next relist (up to a second), and an agent that answers before is
/// handed out then, as created.
#[allow(clippy::too_many_arguments)]
pub async fn start<G, F>(
    client: &Client,
    namespace: &str,
    pod: &Pod,
    network_policy: NetworkPolicy,
    timeout: Duration,
    status: &mut dyn FnMut(&str),
    greet: G,
    early: bool,
) -> Result<Pod>
where
    G: Fn(Pod) -> F,
    F: std::future::Future<Output = Greeting>,
{
    let created = create(client, namespace, pod).await?;
    let started = async {
        create_owned(client, namespace, &created, network_policy).await?;
        let reported = async {
            let running =
                wait_until(client, namespace, &created, timeout, status, Until::Started).await?;
            if matches!(failure::progress(&running), Progress::Ready)
                || agent_answers(&greet, &running).await
            {
                return Ok(running);
            }
            wait_until(client, namespace, &running, timeout, status, Until::Ready).await
        };
        if !early {
            return reported.await;
        }
        tokio::pin!(reported);
        tokio::select! {
            biased;
            reported = &mut reported => reported,
            true = answers_early(&greet, &created) => Ok(created.clone()),
        }
    }
    .await;
    match started {
        Ok(ready) => Ok(ready),
        Err(e) => {
            // The start error is the news, and nothing of the start is left behind it; a
            // failed or slow cleanup leaves the pod to its own deadline and the sweep.
            let _ = delete_pod_and_wait(
                client,
                namespace,
                created.metadata.name.as_deref().unwrap_or_default(),
                created.metadata.uid.as_deref(),
                START_CLEANUP,
            )
            .await;
            Err(e)
        }
    }
}

/// When a run's agent is asked whether it answers before the kubelet reports its container
/// started, in ms after the previous ask (the first after the create): a warm pod's agent
/// listens about 0.6 s after its create on the test cluster, and each ask is one request.
pub const EARLY_GREET_MS: [u64; 8] = [500, 100, 100, 100, 200, 200, 300, 300];

/// How long one early ask may take: a forward to a pod whose sandbox the runtime is still
/// making hangs for a second or more on a busy node, and the next ask may find the agent up.
const EARLY_ASK: Duration = Duration::from_millis(250);

/// Asks `greet` along [`EARLY_GREET_MS`] whether `created`'s agent answers yet: `true` when it
/// does; `false` when the asks ran out (the watch decides then). A forward refused this early
/// is no verdict: the kubelet refuses one to a pod whose sandbox it is still making.
async fn answers_early<G, F>(greet: &G, created: &Pod) -> bool
where
    G: Fn(Pod) -> F,
    F: std::future::Future<Output = Greeting>,
{
    asks(greet, created, &EARLY_GREET_MS, true).await
}

/// Asks `greet` along [`GREET_BACKOFF_MS`] until the agent answers (`true`), or the forward is
/// refused or never reaches it (`false`).
async fn agent_answers<G, F>(greet: &G, pod: &Pod) -> bool
where
    G: Fn(Pod) -> F,
    F: std::future::Future<Output = Greeting>,
{
    asks(greet, pod, &GREET_BACKOFF_MS, false).await
}

/// Asks `greet` after each delay of `schedule` (ms) until `pod`'s agent answers (`true`), the
/// forward is refused (`false`) or the schedule ends (`false`). `early`, before the kubelet
/// reported the pod started: an ask that takes longer than [`EARLY_ASK`], or whose forward is
/// refused, counts as not yet.
async fn asks<G, F>(greet: &G, pod: &Pod, schedule: &[u64], early: bool) -> bool
where
    G: Fn(Pod) -> F,
    F: std::future::Future<Output = Greeting>,
{
    for delay in schedule {
        tokio::time::sleep(Duration::from_millis(*delay)).await;
        if tracing() {
            // Each ask is a request: the load test tells them from the run's own.
            use std::io::Write as _;
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            let _ = writeln!(std::io::stderr(), "{GREET_TRACE}{name}");
        }
        let asked = greet(pod.clone());
        let answer = if early {
            tokio::time::timeout(EARLY_ASK, asked).await.unwrap_or(Greeting::NotYet)
        } else {
            asked.await
        };
        match answer {
            Greeting::Answered => return true,
            Greeting::NoForward if !early => return false,
            Greeting::NoForward | Greeting::NotYet => {}
        }
    }
    false
}

/// Watches `created` (at most `timeout`) until it is as far as `until`; its failure, with the
/// cluster's reason, when it cannot get there.
async fn wait_until(
    client: &Client,
    namespace: &str,
    created: &Pod,
    timeout: Duration,
    status: &mut dyn FnMut(&str),
    until: Until,
) -> Result<Pod> {
    let name = created.metadata.name.clone().unwrap_or_default();
    let mut last = created.clone();
    let watch = watch_until_ready(client, namespace, &name, &mut last, status, until);
    match tokio::time::timeout(timeout, watch).await {
        Ok(result) => result,
        Err(_elapsed) => {
            // Best effort: the timeout is the error; what the events add only explains it.
            let events = pod_events(client, namespace, &name).await.unwrap_or_default();
            Err(Error::StartTimeout {
                pod: name,
                namespace: namespace.to_owned(),
                secs: timeout.as_secs(),
                state: failure::explain_timeout(Some(&last), &events),
            })
        }
    }
}

async fn watch_until_ready(
    client: &Client,
    namespace: &str,
    name: &str,
    last: &mut Pod,
    status: &mut dyn FnMut(&str),
    until: Until,
) -> Result<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let op = Op::new("watch", "pod", Some(name), namespace);
    let mut version = last.metadata.resource_version.clone().unwrap_or_else(|| "0".to_owned());
    let mut told = String::new();
    let mut settled = |name: &str, pod: &Pod| -> Result<Option<Pod>> {
        if let Progress::Waiting(text) = failure::progress(pod)
            && text.starts_with(failure::NOT_SCHEDULED_YET)
            && text != told
        {
            status(&format!("pod `{name}` {text}; waiting"));
            told = text;
        }
        settled(name, pod, until)
    };
    if let Some(done) = settled(name, last)? {
        return Ok(done);
    }
    loop {
        let params =
            WatchParams::default().fields(&format!("metadata.name={name}")).timeout(WATCH_SECS);
        let _open = watch_opened("pod", name);
        let mut events =
            pods.watch(&params, &version).await.map_err(|e| api_error(&op, e))?.boxed();
        while let Some(event) = events.try_next().await.map_err(|e| api_error(&op, e))? {
            match event {
                WatchEvent::Added(pod) | WatchEvent::Modified(pod) => {
                    version = pod.metadata.resource_version.clone().unwrap_or(version);
                    *last = pod;
                    if let Some(done) = settled(name, last)? {
                        return Ok(done);
                    }
                }
                WatchEvent::Deleted(_) => {
                    return Err(Error::StartFailed {
                        pod: name.to_owned(),
                        failure: StartFailure::Deleted,
                    });
                }
                WatchEvent::Bookmark(bookmark) => version = bookmark.metadata.resource_version,
                // 410 Gone: the version is older than the apiserver keeps; read the pod afresh and
                // watch from its version.
                WatchEvent::Error(status) if status.code == 410 => {
                    let get = Op::new("get", "pod", Some(name), namespace);
                    *last = pods.get(name).await.map_err(|e| api_error(&get, e))?;
                    version =
                        last.metadata.resource_version.clone().unwrap_or_else(|| "0".to_owned());
                    if let Some(done) = settled(name, last)? {
                        return Ok(done);
                    }
                    break;
                }
                WatchEvent::Error(status) => return Err(failure::status_error(&op, &status)),
            }
        }
    }
}

fn settled(name: &str, pod: &Pod, until: Until) -> Result<Option<Pod>> {
    match failure::progress(pod) {
        Progress::Ready => Ok(Some(pod.clone())),
        Progress::Waiting(_) if until == Until::Started && failure::started(pod) => {
            Ok(Some(pod.clone()))
        }
        Progress::Waiting(_) => Ok(None),
        Progress::Failed(failure) => Err(Error::StartFailed { pod: name.to_owned(), failure }),
    }
}

/// Publishes a port of a running sandbox: `service` and, when the preview goes through an
/// ingress controller, `ingress`, both owned by `owner`. When the Ingress is refused the Service
/// is deleted again, so a failed publish leaves nothing behind.
pub async fn publish(
    client: &Client,
    namespace: &str,
    owner: &Pod,
    service: Service,
    ingress: Option<Ingress>,
) -> Result<(Service, Option<Ingress>)> {
    let service = create_owned(client, namespace, owner, service).await?;
    let Some(ingress) = ingress else { return Ok((service, None)) };
    match create_owned(client, namespace, owner, ingress).await {
        Ok(ingress) => Ok((service, Some(ingress))),
        Err(e) => {
            let name = service.metadata.name.as_deref().unwrap_or_default();
            // The owner reference removes it with the pod if this fails too.
            let _ =
                delete::<Service>(client, namespace, name, service.metadata.uid.as_deref()).await;
            Err(e)
        }
    }
}

/// Deletes a pod (background propagation: the garbage collector removes the NetworkPolicy,
/// Services and Ingresses it owns). With `uid`, only that very pod: a new pod that took the
/// name meanwhile answers 409 and stays. `Ok(false)` when it was already gone.
pub async fn delete_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
) -> Result<bool> {
    delete::<Pod>(client, namespace, name, uid).await
}

/// [`delete_pod`], then waits (at most `patience`) until the apiserver no longer lists the pod
/// of that uid: a run returns with nothing of it left. One watch from the deleted object's
/// version, not a poll: a run costs the API server one request for it, not fifteen. A watch
/// that ends early (410 Gone, the server's own timeout) reads the pod once and watches again.
/// `Ok(false)` when the pod was still there at the deadline (the caller's TTL and the sweep
/// take it then).
///
/// Once the watch shows every container of the pod terminated, nothing of it runs any more,
/// and the object is removed at once (a delete with no grace, of that uid). Left to itself,
/// the kubelet removes it only at its status manager's next 10 s batch after the volumes are
/// torn down: 5 s on average alone, and 30-60 s for runs that end together on a busy node.
pub async fn delete_pod_and_wait(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
    patience: Duration,
) -> Result<bool> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let deadline = tokio::time::Instant::now() + patience;
    let this = |pod: &Pod| uid.is_none() || pod.metadata.uid.as_deref() == uid;
    let done = |pod: &Pod| this(pod) && failure::stopped(pod);
    // `None` when the pod is already gone, else the version to watch from.
    let Some(deleted) = delete_object::<Pod>(client, namespace, name, uid, STOP_GRACE).await?
    else {
        return Ok(true);
    };
    let mut version = deleted.and_then(|pod| pod.metadata.resource_version);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        if let Some(from) = version.take() {
            let op = Op::new("watch", "pod", Some(name), namespace);
            let secs = u32::try_from(left.as_secs()).unwrap_or(WATCH_SECS).clamp(1, WATCH_SECS);
            let params =
                WatchParams::default().fields(&format!("metadata.name={name}")).timeout(secs);
            let _open = watch_opened("pod", name);
            let watched = tokio::time::timeout(left, async {
                let mut events =
                    pods.watch(&params, &from).await.map_err(|e| api_error(&op, e))?.boxed();
                loop {
                    let next = events.try_next().await;
                    let Some(event) = next.map_err(|e| api_error(&op, e))? else {
                        return Ok(false);
                    };
                    match event {
                        WatchEvent::Deleted(pod) if this(&pod) => return Ok(true),
                        WatchEvent::Modified(pod) if done(&pod) => {
                            return remove_stopped(client, namespace, name, uid).await;
                        }
                        WatchEvent::Error(status) if status.code != 410 => {
                            return Err(failure::status_error(&op, &status));
                        }
                        _ => {}
                    }
                }
            })
            .await;
            match watched {
                Err(_elapsed) => return Ok(false),
                Ok(Ok(true)) => return Ok(true),
                Ok(Ok(false)) => {}
                Ok(Err(e)) => return Err(e),
            }
        }
        let op = Op::new("get", "pod", Some(name), namespace);
        match pods.get_opt(name).await.map_err(|e| api_error(&op, e))? {
            Some(pod) if done(&pod) => {
                return remove_stopped(client, namespace, name, uid).await;
            }
            // Another pod of the same name (a later run) is not this one.
            Some(pod) if this(&pod) => version = pod.metadata.resource_version,
            _ => return Ok(true),
        }
        // A pod without a version cannot be watched: look again shortly.
        if version.is_none() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Removes a run's pod in which nothing runs but its agent, as the agent itself found just
/// before (`K8sEngine::end`: every other process of the pod killed and seen gone): with no
/// grace period, so the apiserver drops it at once and the kubelet stops the idle agent
/// after, instead of a stop the kubelet reports only 1 to 3 s later. Only that uid.
pub async fn remove_emptied(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
) -> Result<bool> {
    remove_stopped(client, namespace, name, uid).await
}

/// Removes the object of a pod whose containers all stopped ([`crate::failure::stopped`])
/// or in which nothing runs but its agent ([`remove_emptied`]) with no grace period, so the apiserver drops it at once instead of at the kubelet's next
/// status batch. Only that uid: a later pod of the same name is not touched.
async fn remove_stopped(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
) -> Result<bool> {
    match delete_object::<Pod>(client, namespace, name, uid, 0).await {
        // Gone now or already, or (409) the name is another pod's: this one is gone either way.
        Ok(_) | Err(Error::Api { code: 409, .. }) => Ok(true),
        Err(e) => Err(e),
    }
}

/// The grace period of a delete, in seconds: one lets the kubelet stop the container itself
/// (a zero grace period removes the object while the container may still run on the node;
/// only [`remove_stopped`], for a pod whose containers all stopped or that holds only its idle
/// agent, gives none).
const STOP_GRACE: u32 = 1;

/// A delete of `uid` only (a later object of the same name is not touched), its dependents in
/// the background, with `grace` seconds for a pod's containers to stop.
fn delete_params(grace: u32, uid: Option<&str>) -> DeleteParams {
    DeleteParams {
        grace_period_seconds: Some(grace),
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: uid
            .map(|uid| Preconditions { uid: Some(uid.to_owned()), resource_version: None }),
        ..DeleteParams::default()
    }
}

/// Deletes one namespaced object; see [`delete_pod`].
pub async fn delete<K: Object>(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
) -> Result<bool> {
    Ok(delete_object::<K>(client, namespace, name, uid, STOP_GRACE).await?.is_some())
}

/// [`delete`], with the object as the apiserver answered: `None` when it was already gone,
/// `Some(None)` when it went at once.
async fn delete_object<K: Object>(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
    grace: u32,
) -> Result<Option<Option<K>>> {
    let op = Op::new("delete", kind_of::<K>(), Some(name), namespace);
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    match api.delete(name, &delete_params(grace, uid)).await {
        // The object as deleted (its version: where a watch for its end starts), or a status
        // when it went at once.
        Ok(either) => Ok(Some(either.left())),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(e) => Err(api_error(&op, e)),
    }
}

/// The pods matching a label selector (`reaper::MANAGED_FILTER` for the sweep), one list call.
pub async fn list_pods(client: &Client, namespace: &str, selector: &str) -> Result<Vec<Pod>> {
    let op = Op::new("list", "pod", None, namespace);
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let list =
        api.list(&ListParams::default().labels(selector)).await.map_err(|e| api_error(&op, e))?;
    Ok(list.items)
}

/// The events about one pod (what its status does not say: a node without the runtime handler,
/// a failed mount).
pub async fn pod_events(client: &Client, namespace: &str, pod: &str) -> Result<Vec<Event>> {
    let op = Op::new("list", "event", None, namespace);
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let params =
        ListParams::default().fields(&format!("involvedObject.kind=Pod,involvedObject.name={pod}"));
    let list = api.list(&params).await.map_err(|e| api_error(&op, e))?;
    Ok(list.items)
}

/// One pod by name; `Ok(None)` when there is none.
pub async fn get_pod(client: &Client, namespace: &str, name: &str) -> Result<Option<Pod>> {
    let op = Op::new("get", "pod", Some(name), namespace);
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    match api.get(name).await {
        Ok(pod) => Ok(Some(pod)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(e) => Err(api_error(&op, e)),
    }
}

/// Sets one annotation of a pod (a JSON merge patch, so nothing else of the pod is touched;
/// only the pod of `uid`, when given: a merge patch carrying the uid fails on another pod).
pub async fn annotate_pod(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: Option<&str>,
    key: &str,
    value: &str,
) -> Result<()> {
    let op = Op::new("patch", "pod", Some(name), namespace);
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut metadata = serde_json::json!({ "annotations": { key: value } });
    if let Some(uid) = uid {
        metadata["uid"] = serde_json::Value::String(uid.to_owned());
    }
    let patch = kube::api::Patch::Merge(serde_json::json!({ "metadata": metadata }));
    api.patch(name, &kube::api::PatchParams::default(), &patch)
        .await
        .map_err(|e| api_error(&op, e))?;
    Ok(())
}

/// Relabels pod `name` with `labels` only if it is still at `revision` (a JSON merge patch
/// carrying `metadata.resourceVersion`, which the apiserver checks before it applies the
/// patch): the warm pool's atomic claim. `Ok(None)` when another writer changed the pod first
/// (409 Conflict) or it is gone (404): the caller tries its next candidate.
pub async fn relabel_at(
    client: &Client,
    namespace: &str,
    name: &str,
    revision: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> Result<Option<Pod>> {
    let op = Op::new("patch", "pod", Some(name), namespace);
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let patch = kube::api::Patch::Merge(serde_json::json!({
        "metadata": { "resourceVersion": revision, "labels": labels }
    }));
    match api.patch(name, &kube::api::PatchParams::default(), &patch).await {
        Ok(pod) => Ok(Some(pod)),
        Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => Ok(None),
        Err(e) => Err(api_error(&op, e)),
    }
}
