//! Why a request or a pod failed, in the cluster's own words plus a `hint:`: pure functions over
//! the apiserver's `metav1.Status` answers and over Pod status and Events, so every case is
//! tested with the objects real clusters send.
//!
//! A create that the apiserver refuses answers a Status at once (RBAC 403, quota 403, admission
//! 403/422/400, namespace 404, name 409, invalid 422). A pod that the apiserver accepts and the
//! node cannot run says so only in its status (`waiting.reason`, `PodScheduled=False`,
//! `terminated`), which [`progress`] reads on every watch event so a start fails fast; what only
//! Events tell (a node without the runtime handler, a failed mount) explains a timeout instead.

use std::fmt;

use k8s_openapi::api::core::v1::{ContainerStatus, Event, Pod};
use kube::core::Status;

use crate::error::Error;

/// What a request was doing, for messages: `create pod "x" in namespace "ns"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Op {
    /// `create`, `delete`, `watch`, `list`, ...
    pub(crate) verb: &'static str,
    /// `pod`, `networkpolicy`, `service`, `ingress`, `event`.
    pub(crate) kind: &'static str,
    /// The object, when the request names one.
    pub(crate) name: Option<String>,
    /// The namespace.
    pub(crate) namespace: String,
}

impl Op {
    pub(crate) fn new(
        verb: &'static str,
        kind: &'static str,
        name: Option<&str>,
        namespace: &str,
    ) -> Op {
        Op { verb, kind, name: name.map(str::to_owned), namespace: namespace.to_owned() }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => {
                write!(f, "{} {} `{name}` in namespace `{}`", self.verb, self.kind, self.namespace)
            }
            None => write!(f, "{} {}s in namespace `{}`", self.verb, self.kind, self.namespace),
        }
    }
}

/// A kube client error as this crate's error: the apiserver's Status classified, anything that
/// never got an answer as [`Error::Unreachable`].
pub(crate) fn api_error(op: &Op, error: kube::Error) -> Error {
    match error {
        kube::Error::Api(status) => status_error(op, &status),
        kube::Error::HyperError(e) => {
            Error::Unreachable { action: op.to_string(), message: e.to_string() }
        }
        kube::Error::Service(e) => {
            Error::Unreachable { action: op.to_string(), message: e.to_string() }
        }
        other => Error::Api {
            action: op.to_string(),
            code: 0,
            reason: "ClientError".to_owned(),
            message: other.to_string(),
        },
    }
}

/// Pure: an apiserver's refusal (`metav1.Status`) as this crate's error.
pub(crate) fn status_error(op: &Op, status: &Status) -> Error {
    let action = op.to_string();
    let message = status.message.trim().to_owned();
    let admission = (message.contains("admission webhook \"")
        && message.contains("denied the request"))
        || (message.contains("ValidatingAdmissionPolicy") && message.contains("denied request"))
        || message.contains("violates PodSecurity");
    if admission {
        return Error::AdmissionDenied { action, message };
    }
    match status.code {
        403 if message.contains("exceeded quota") || message.contains("failed quota") => {
            Error::QuotaExceeded { action, message, namespace: op.namespace.clone() }
        }
        403 => match parse_rbac(&message) {
            Some(denied) => Error::Forbidden {
                action,
                user: denied.user,
                verb: denied.verb,
                resource: denied.resource,
                namespace: denied.namespace.unwrap_or_else(|| op.namespace.clone()),
            },
            // Other admission plugins answer 403 too (RuntimeClass, LimitRanger, NodeRestriction).
            None if message.contains("is forbidden:") => Error::AdmissionDenied { action, message },
            None => api(action, status),
        },
        404 => {
            let details = status.details.as_ref();
            let namespace_gone = details.is_some_and(|d| d.kind == "namespaces")
                || message.starts_with("namespaces \"");
            if namespace_gone {
                let namespace = details
                    .map(|d| d.name.clone())
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| op.namespace.clone());
                Error::NamespaceMissing { action, namespace }
            } else {
                Error::NotFound {
                    kind: op.kind.to_owned(),
                    name: op
                        .name
                        .clone()
                        .or_else(|| details.map(|d| d.name.clone()))
                        .unwrap_or_default(),
                    namespace: op.namespace.clone(),
                }
            }
        }
        409 if status.reason == "AlreadyExists" => Error::NameTaken {
            action,
            kind: op.kind.to_owned(),
            name: op.name.clone().unwrap_or_default(),
            namespace: op.namespace.clone(),
        },
        422 => {
            let causes: Vec<String> = status
                .details
                .iter()
                .flat_map(|d| &d.causes)
                .map(|c| {
                    if c.field.is_empty() {
                        c.message.clone()
                    } else {
                        format!("{}: {}", c.field, c.message)
                    }
                })
                .collect();
            let fields = if causes.is_empty() { message } else { causes.join("; ") };
            Error::Invalid { action, fields }
        }
        _ => api(action, status),
    }
}

fn api(action: String, status: &Status) -> Error {
    Error::Api {
        action,
        code: status.code,
        reason: status.reason.clone(),
        message: status.message.clone(),
    }
}

/// What an RBAC denial names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Denied {
    pub(crate) user: String,
    pub(crate) verb: String,
    /// `resource` or `resource.group`.
    pub(crate) resource: String,
    /// `None` at the cluster scope.
    pub(crate) namespace: Option<String>,
}

/// Pure: the parts of the authorizer's message, the one format every apiserver since 1.8 writes:
/// `pods is forbidden: User "u" cannot create resource "pods" in API group "" in the namespace "ns"`.
pub(crate) fn parse_rbac(message: &str) -> Option<Denied> {
    let rest = &message[message.find("User \"")? + "User \"".len()..];
    let (user, rest) = rest.split_once('"')?;
    let rest = rest.strip_prefix(" cannot ")?;
    let (verb, rest) = rest.split_once(" resource \"")?;
    let (resource, rest) = rest.split_once('"')?;
    let group = quoted_after(rest, " in API group \"").unwrap_or_default();
    let namespace = quoted_after(rest, " in the namespace \"");
    let resource = if group.is_empty() {
        resource.to_owned()
    } else {
        // `pods/exec` in group "" stays as it is; `ingresses` in networking.k8s.io gets its group.
        format!("{resource}.{group}")
    };
    Some(Denied { user: format!("user `{user}`"), verb: verb.to_owned(), resource, namespace })
}

fn quoted_after(text: &str, prefix: &str) -> Option<String> {
    let rest = &text[text.find(prefix)? + prefix.len()..];
    rest.split_once('"').map(|(value, _)| value.to_owned())
}

/// Why a pod the apiserver accepted will not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartFailure {
    /// The image is not on the node and cannot be pulled (`ErrImagePull`, `ImagePullBackOff`,
    /// `ErrImageNeverPull`, `InvalidImageName`).
    ImageMissing {
        /// The image as the pod names it.
        image: String,
        /// The kubelet's reason.
        reason: String,
        /// The kubelet's message.
        message: String,
    },
    /// No node fits (`PodScheduled=False`, `Unschedulable`); the message names the resource.
    Unschedulable {
        /// The scheduler's message, e.g. `0/1 nodes are available: 1 Insufficient memory.`
        message: String,
    },
    /// A container hit its memory limit (`OOMKilled`, exit 137).
    OutOfMemory {
        /// The container.
        container: String,
        /// Its memory limit as the pod spec gives it.
        limit: Option<String>,
    },
    /// A container ended while the pod was starting (or crash-loops).
    Exited {
        /// The container.
        container: String,
        /// Its exit code.
        exit_code: i32,
        /// The runtime's reason (`Error`, `Completed`, ...), with `CrashLoopBackOff` noted.
        reason: String,
        /// The runtime's message (often the end of the log), if any.
        message: String,
    },
    /// The runtime could not create the container (`CreateContainerConfigError`, ...).
    ContainerError {
        /// The container.
        container: String,
        /// The kubelet's reason.
        reason: String,
        /// The kubelet's message.
        message: String,
    },
    /// The whole pod ended (`DeadlineExceeded`, `Evicted`, ...).
    Ended {
        /// `Failed` or `Succeeded`.
        phase: String,
        /// The pod's status reason.
        reason: String,
        /// The pod's status message.
        message: String,
    },
    /// The pod was deleted while the engine waited for it.
    Deleted,
}

impl fmt::Display for StartFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartFailure::ImageMissing { image, reason, message } => write!(
                f,
                "image `{image}` is not on the node ({reason}: {message})\nhint: load it into the \
                 cluster (`kind load docker-image {image}`, or `cargo xtask kind load`), or push it \
                 to a registry the nodes pull from and set `image` in the config"
            ),
            StartFailure::Unschedulable { message } => write!(
                f,
                "no node can run it: {message}\nhint: the message names what no node has; lower the \
                 sandbox's requests, or check the node selector, tolerations and runtime class in \
                 the config"
            ),
            StartFailure::OutOfMemory { container, limit } => {
                let limit = limit.as_deref().map(|l| format!(" of {l}")).unwrap_or_default();
                write!(
                    f,
                    "container `{container}` was killed for exceeding its memory limit{limit} \
                     (OOMKilled, exit 137)\nhint: raise the memory limit in the config"
                )
            }
            StartFailure::Exited { container, exit_code, reason, message } => {
                write!(f, "container `{container}` ended with exit code {exit_code} ({reason}")?;
                if !message.is_empty() {
                    write!(f, ": {}", message.trim())?;
                }
                write!(
                    f,
                    ")\nhint: `kubectl logs` of the pod (with `--previous` after a restart) says why; \
                     the image's entrypoint must be the sandbox agent"
                )
            }
            StartFailure::ContainerError { container, reason, message } => {
                write!(f, "container `{container}` could not be created ({reason}: {message})")?;
                if message.contains("seccomp") {
                    // `seccomp = "wall"` on a node without the wall's profile (or another
                    // version of it).
                    f.write_str(
                        "\nhint: install the wall's profile on every node (`kubectl apply -f \
                         deploy/seccomp/`, from this version of python-sandbox), or set \
                         `seccomp = \"runtime-default\"` in `[engine.k8s]`",
                    )?;
                }
                Ok(())
            }
            StartFailure::Ended { phase, reason, message } => {
                write!(f, "the pod ended ({phase}")?;
                if !reason.is_empty() {
                    write!(f, ", {reason}")?;
                }
                if !message.is_empty() {
                    write!(f, ": {message}")?;
                }
                f.write_str(")")
            }
            StartFailure::Deleted => {
                f.write_str("the pod was deleted while starting (by someone else, or evicted)")
            }
        }
    }
}

/// Where a starting pod is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Running and Ready: exec can go.
    Ready,
    /// Still on its way; the text says where (for a timeout message).
    Waiting(String),
    /// It will not start.
    Failed(StartFailure),
}

const IMAGE_REASONS: [&str; 4] =
    ["ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"];
const CONTAINER_REASONS: [&str; 3] =
    ["CreateContainerConfigError", "CreateContainerError", "RunContainerError"];

/// How [`progress`] starts the text of a pod the scheduler has not placed for a reason that
/// can clear.
pub const NOT_SCHEDULED_YET: &str = "not scheduled yet";

/// What in a scheduler's message can clear by itself: a volume the provisioner is about to
/// bind (for the fraction of a second a StorageClass with `Immediate` binding takes), capacity
/// that other pods free or a cluster autoscaler adds, a node that is not ready yet or cordoned
/// for a moment. The scheduler retries on its own; the engine waits, within its start timeout.
const CLEARS: [&str; 8] = [
    // Also "pod has unbound immediate PersistentVolumeClaims".
    "persistentvolumeclaim",
    "insufficient ",
    "too many pods",
    "didn't have free ports",
    "node(s) were unschedulable",
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "no nodes available to schedule pods",
];

/// Pure: whether a pod the scheduler reports `Unschedulable` with `message` may still be
/// placed without anyone changing it: when any node (or the volume) is held back by something
/// in its list of such reasons. A message that names only what cannot change by waiting (no node matches the
/// selector or affinity, a taint the pod does not tolerate) is final.
///
/// ```
/// use engine_k8s::failure::unschedulable_clears;
/// assert!(unschedulable_clears("0/1 nodes are available: 1 Insufficient cpu."));
/// assert!(unschedulable_clears("pod has unbound immediate PersistentVolumeClaims"));
/// assert!(!unschedulable_clears("0/1 nodes are available: 1 node(s) didn't match node selector."));
/// ```
pub fn unschedulable_clears(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    CLEARS.iter().any(|reason| message.contains(reason))
}

/// Pure: where the pod is, from its status alone.
pub fn progress(pod: &Pod) -> Progress {
    let Some(status) = pod.status.as_ref() else {
        return Progress::Waiting("no status yet".to_owned());
    };
    let phase = status.phase.as_deref().unwrap_or("Unknown");
    let containers: Vec<&ContainerStatus> = status
        .init_container_statuses
        .iter()
        .chain(status.container_statuses.iter())
        .flatten()
        .collect();
    for c in &containers {
        if let Some(failure) = container_failure(pod, c) {
            return Progress::Failed(failure);
        }
    }
    if matches!(phase, "Failed" | "Succeeded") {
        return Progress::Failed(StartFailure::Ended {
            phase: phase.to_owned(),
            reason: status.reason.clone().unwrap_or_default(),
            message: status.message.clone().unwrap_or_default(),
        });
    }
    let condition = |kind: &str| status.conditions.iter().flatten().find(|c| c.type_ == kind);
    if let Some(scheduled) = condition("PodScheduled")
        && scheduled.status == "False"
        && scheduled.reason.as_deref() == Some("Unschedulable")
    {
        let message = scheduled.message.clone().unwrap_or_default();
        if unschedulable_clears(&message) {
            return Progress::Waiting(format!("{NOT_SCHEDULED_YET}: {}", message.trim()));
        }
        return Progress::Failed(StartFailure::Unschedulable { message });
    }
    if phase == "Running" && condition("Ready").is_some_and(|c| c.status == "True") {
        return Progress::Ready;
    }
    let waiting: Vec<String> = containers
        .iter()
        .filter_map(|c| {
            let reason = c.state.as_ref()?.waiting.as_ref()?.reason.as_deref()?;
            Some(format!("container `{}` {reason}", c.name))
        })
        .collect();
    if waiting.is_empty() {
        Progress::Waiting(format!("phase {phase}"))
    } else {
        Progress::Waiting(format!("phase {phase}, {}", waiting.join(", ")))
    }
}

fn container_failure(pod: &Pod, c: &ContainerStatus) -> Option<StartFailure> {
    let state = c.state.as_ref()?;
    if let Some(waiting) = &state.waiting {
        let reason = waiting.reason.clone().unwrap_or_default();
        let message = waiting.message.clone().unwrap_or_default();
        if IMAGE_REASONS.contains(&reason.as_str()) {
            let image = spec_image(pod, &c.name).unwrap_or_else(|| c.image.clone());
            return Some(StartFailure::ImageMissing { image, reason, message });
        }
        if CONTAINER_REASONS.contains(&reason.as_str()) {
            return Some(StartFailure::ContainerError {
                container: c.name.clone(),
                reason,
                message,
            });
        }
        if reason == "CrashLoopBackOff" {
            let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref());
            return Some(match last {
                Some(t) => terminated(pod, &c.name, t, " after restarts (CrashLoopBackOff)"),
                None => StartFailure::Exited {
                    container: c.name.clone(),
                    exit_code: -1,
                    reason,
                    message,
                },
            });
        }
    }
    state.terminated.as_ref().map(|t| terminated(pod, &c.name, t, ""))
}

fn terminated(
    pod: &Pod,
    container: &str,
    t: &k8s_openapi::api::core::v1::ContainerStateTerminated,
    note: &str,
) -> StartFailure {
    let reason = t.reason.clone().unwrap_or_default();
    if reason == "OOMKilled" {
        return StartFailure::OutOfMemory {
            container: container.to_owned(),
            limit: memory_limit(pod, container),
        };
    }
    StartFailure::Exited {
        container: container.to_owned(),
        exit_code: t.exit_code,
        reason: format!("{}{note}", if reason.is_empty() { "terminated" } else { reason.as_str() }),
        message: t.message.clone().unwrap_or_default(),
    }
}

fn spec_containers(pod: &Pod) -> impl Iterator<Item = &k8s_openapi::api::core::v1::Container> {
    pod.spec.iter().flat_map(|s| s.init_containers.iter().flatten().chain(s.containers.iter()))
}

fn spec_image(pod: &Pod, container: &str) -> Option<String> {
    spec_containers(pod).find(|c| c.name == container).and_then(|c| c.image.clone())
}

fn memory_limit(pod: &Pod, container: &str) -> Option<String> {
    let c = spec_containers(pod).find(|c| c.name == container)?;
    c.resources.as_ref()?.limits.as_ref()?.get("memory").map(|q| q.0.clone())
}

/// Pure: where a pod that timed out was, for [`Error::StartTimeout`]: its progress and the
/// latest Warning event about it (what status alone does not show: a node without the runtime
/// handler, a failed mount, a slow pull).
pub fn explain_timeout(pod: Option<&Pod>, events: &[Event]) -> String {
    let state = match pod.map(progress) {
        Some(Progress::Waiting(text)) => text,
        Some(Progress::Ready) => "ready just now".to_owned(),
        Some(Progress::Failed(failure)) => failure.to_string(),
        None => "the pod could not be read".to_owned(),
    };
    let latest = events
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        // One of these times is set, depending on the reporter.
        .max_by_key(|e| {
            e.last_timestamp
                .as_ref()
                .map(|t| t.0)
                .or_else(|| e.event_time.as_ref().map(|t| t.0))
                .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
        });
    match latest {
        Some(e) => format!(
            "{state}; last warning: {}: {}",
            e.reason.as_deref().unwrap_or("?"),
            e.message.as_deref().unwrap_or_default().trim()
        ),
        None => format!("{state}; no warning events"),
    }
}

/// Whether `pod` runs with every container started (the kubelet's readiness aside): its
/// agent is about to listen, or listens already.
pub(crate) fn started(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else { return false };
    status.phase.as_deref() == Some("Running")
        && status.container_statuses.as_ref().is_some_and(|c| {
            !c.is_empty() && c.iter().all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        })
}

/// Whether nothing of `pod` runs any more: it is being deleted, and [`finished`].
pub(crate) fn stopped(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some() && finished(pod)
}

/// Whether the kubelet reports that nothing of `pod` runs any more: its phase is terminal, and
/// no container of it (init containers too) runs. A stopped container shows `terminated`; one
/// the runtime already removed shows `waiting` with its last state `ContainerStatusUnknown`
/// ("could not be located when the pod was deleted"): both are gone.
pub(crate) fn finished(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else { return false };
    let terminal = matches!(status.phase.as_deref(), Some("Failed" | "Succeeded"));
    let none_running = |statuses: &Option<Vec<ContainerStatus>>| {
        statuses.iter().flatten().all(|c| c.state.as_ref().is_some_and(|s| s.running.is_none()))
    };
    terminal
        && status.container_statuses.as_ref().is_some_and(|c| !c.is_empty())
        && none_running(&status.container_statuses)
        && none_running(&status.init_container_statuses)
}
