//! The one error type of engine-k8s, classified for the engine seam.

use sandbox_core::{Classify, ErrorClass};

use crate::failure::StartFailure;

/// Everything that can go wrong talking to a cluster or in a pod sandbox.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The session protocol's own errors (see `sandbox_core::shell`).
    #[error(transparent)]
    Sandbox(#[from] sandbox_core::Error),

    /// No answer from the apiserver (connection refused, TLS, DNS, a proxy in the way).
    #[error(
        "the k8s engine cannot reach the cluster to {action}: {message}\nhint: check `kubectl \
         cluster-info`; the kube config comes from `KUBECONFIG`, `~/.kube/config` or the \
         in-cluster service account"
    )]
    Unreachable {
        /// What was being done, e.g. `create pod "x" in namespace "ns"`.
        action: String,
        /// The client's error.
        message: String,
    },

    /// RBAC refused a verb on a resource (403 `Forbidden` naming the user).
    #[error(
        "cannot {action}: {user} lacks `{verb}` on `{resource}` in namespace `{namespace}`\nhint: \
         apply `deploy/rbac/` (`kubectl apply -n {namespace} -f deploy/rbac/`: a Role with exactly \
         the verbs python-sandbox uses) and bind it to {user}"
    )]
    Forbidden {
        /// What was being done.
        action: String,
        /// The user or service account the cluster saw.
        user: String,
        /// The verb it lacks (`create`, `watch`, ...).
        verb: String,
        /// The resource, with its group when not core (`pods/exec`, `ingresses.networking.k8s.io`).
        resource: String,
        /// The namespace.
        namespace: String,
    },

    /// A ResourceQuota in the namespace refused the object.
    #[error(
        "cannot {action}: {message}\nhint: lower the sandbox's resources in the config, end other \
         sandboxes (`python-sandbox reap`), or raise the quota (`kubectl describe resourcequota -n \
         {namespace}`)"
    )]
    QuotaExceeded {
        /// What was being done.
        action: String,
        /// The cluster's message (which quota, requested, used, limited).
        message: String,
        /// The namespace.
        namespace: String,
    },

    /// An admission controller refused the object (Pod Security, a ValidatingAdmissionPolicy,
    /// a webhook).
    #[error(
        "cannot {action}: admission denied: {message}\nhint: the policy named above refused it; \
         python-sandbox's pods pass the Pod Security Standard `restricted`, so a stricter policy \
         needs the config to match it (runtime class, node selector, resources)"
    )]
    AdmissionDenied {
        /// What was being done.
        action: String,
        /// The policy's own message.
        message: String,
    },

    /// The namespace the engine works in does not exist.
    #[error(
        "cannot {action}: namespace `{namespace}` does not exist\nhint: create it (`kubectl create \
         namespace {namespace}`, or `cargo xtask kind up` for a local cluster) or set another \
         namespace in the config"
    )]
    NamespaceMissing {
        /// What was being done.
        action: String,
        /// The namespace.
        namespace: String,
    },

    /// The object is gone (a session's pod deleted or expired).
    #[error("{kind} `{name}` not found in namespace `{namespace}`")]
    NotFound {
        /// `pod`, `service`, ...
        kind: String,
        /// Its name.
        name: String,
        /// The namespace.
        namespace: String,
    },

    /// An object of that name exists already.
    #[error(
        "cannot {action}: {kind} `{name}` already exists\nhint: another sandbox has that name; \
         pick another, or remove the old one (`kubectl delete {kind} -n {namespace} {name}`)"
    )]
    NameTaken {
        /// What was being done.
        action: String,
        /// `pod`, `service`, ...
        kind: String,
        /// Its name.
        name: String,
        /// The namespace.
        namespace: String,
    },

    /// The apiserver rejected the object as invalid (422), naming the fields.
    #[error("cannot {action}: the cluster rejected it as invalid: {fields}")]
    Invalid {
        /// What was being done.
        action: String,
        /// `field: message` per cause, or the whole message without causes.
        fields: String,
    },

    /// Any other refusal or server error, with the cluster's code, reason and message.
    #[error("cannot {action}: the cluster answered {code} {reason}: {message}")]
    Api {
        /// What was being done.
        action: String,
        /// HTTP status code.
        code: u16,
        /// The Status reason.
        reason: String,
        /// The Status message.
        message: String,
    },

    /// The pod cannot start, for the reason the cluster gave.
    #[error("pod `{pod}` cannot start: {failure}")]
    StartFailed {
        /// The pod name.
        pod: String,
        /// What the cluster reported.
        failure: StartFailure,
    },

    /// The pod was not ready in time and nothing said it never will be.
    #[error(
        "pod `{pod}` was not ready after {secs} s: {state}\nhint: `kubectl describe pod -n \
         {namespace} {pod}` shows what the cluster is doing; a slow image pull or node start needs \
         a longer start timeout"
    )]
    StartTimeout {
        /// The pod name.
        pod: String,
        /// The namespace.
        namespace: String,
        /// The timeout.
        secs: u64,
        /// Where it was: phase, waiting reason, the last warning event.
        state: String,
    },

    /// The prepare pod could not install the script's dependencies into the environment claim.
    #[error(
        "installing the script's dependencies into `{claim}` failed: {message}\nhint: check the \
         script's `dependencies` (the prepare pod resolves them with network; an index the \
         cluster cannot reach fails here too)"
    )]
    PrepareFailed {
        /// The environment claim.
        claim: String,
        /// The installer's stderr.
        message: String,
    },

    /// Another run's prepare of the same environment did not finish in time, more than once.
    #[error(
        "the environment `{claim}` was not ready after {secs} s of waiting for another run to \
         prepare it\nhint: `kubectl get pvc -n {namespace} {claim} -o yaml` shows its \
         annotations; delete the claim to start over"
    )]
    PrepareWait {
        /// The environment claim.
        claim: String,
        /// The namespace.
        namespace: String,
        /// How long this run waited.
        secs: u64,
    },

    /// An object to create lacks what the engine needs of it (a name, the owner's uid).
    #[error("cannot {action}: {message}")]
    Object {
        /// What was being done.
        action: String,
        /// What is missing.
        message: String,
    },
    /// The exec WebSocket could not be opened (the upgrade or the API refused it).
    #[error("cannot exec in pod `{pod}`: {source}")]
    ExecConnect {
        /// The pod.
        pod: String,
        /// kube's error (an API refusal carries the cluster's status).
        #[source]
        source: kube::Error,
    },
    /// The exec stream broke or carried what the protocol does not allow.
    #[error("exec in pod `{pod}`: {problem}")]
    ExecProtocol {
        /// The pod.
        pod: String,
        /// What was wrong, lower case.
        problem: String,
    },
    /// The cluster ran no command: its status message (container not found, runtime error).
    #[error("exec in pod `{pod}` failed: {message}")]
    ExecFailed {
        /// The pod.
        pod: String,
        /// The status message.
        message: String,
    },
    /// The relay started but nothing answers on the agent's socket.
    #[error(
        "the agent of pod `{pod}` does not answer: {message}\nhint: the pod's main process must be the session agent; a pod that lost it cannot serve execs, start a new sandbox"
    )]
    NoAgent {
        /// The pod.
        pod: String,
        /// The relay's own message.
        message: String,
    },
    /// A plain exec with stdin on a cluster that speaks only `v4.channel.k8s.io`.
    #[error(
        "exec in pod `{pod}` with stdin needs the v5.channel.k8s.io protocol (Kubernetes 1.30 and up); this cluster speaks v4, which cannot end stdin without losing the output\nhint: run the command through the pod's agent (`PodExec::exec`), which ends stdin in band"
    )]
    StdinNeedsV5 {
        /// The pod.
        pod: String,
    },
    /// A [`crate::SandboxConfig`] field that cannot work, named.
    #[error("invalid sandbox config `{field}`: {message}\nhint: {hint}")]
    Config {
        /// The field, as in the struct (`resources.cpu_limit`).
        field: &'static str,
        /// What is wrong with its value.
        message: String,
        /// How to fix it.
        hint: String,
    },
    /// A `--mount pvc:NAME:/path[:ro]` that cannot be mounted, named as given.
    #[error("--mount `{value}`: {message}\nhint: {hint}")]
    ClaimMount {
        /// The flag's value.
        value: String,
        /// What is wrong with it.
        message: String,
        /// How to fix it.
        hint: String,
    },
    /// A claim to mount that is not in the namespace.
    #[error(
        "--mount `pvc:{claim}:…`: no claim `{claim}` in namespace `{namespace}`\nhint: make it first (`kubectl get pvc -n {namespace}` lists what there is); sandboxes mount claims named `psbx-data-*`"
    )]
    ClaimMissing {
        /// The claim.
        claim: String,
        /// The namespace.
        namespace: String,
    },
    /// A sandbox id that cannot become object names and label values.
    #[error(
        "invalid sandbox id `{id}`: object names need at most {max} lower-case letters, digits and `-`\nhint: let the engine pick the id"
    )]
    InvalidId {
        /// The id.
        id: String,
        /// [`crate::manifest::MAX_ID_LEN`].
        max: usize,
    },
    /// An env var whose name looks secret was about to go into a pod spec, which anyone who can
    /// read pods (and the audit log) sees.
    #[error(
        "refusing to put `{name}` in the pod spec: its name says it is a secret, and pod specs are readable by anyone who can get pods\nhint: pass it as a registered secret: those go over exec stdin, never into the spec"
    )]
    SecretInPodSpec {
        /// The variable's name (never its value).
        name: String,
    },
    /// No kube config: none in `KUBECONFIG`, `~/.kube/config`, nor a pod's service account.
    #[error(
        "the k8s engine has no cluster to talk to: {message}\nhint: point `KUBECONFIG` at a kube config (`cargo xtask kind up` makes a local cluster), or run in a pod with a service account"
    )]
    NoKubeconfig {
        /// kube's reason.
        message: String,
    },
    /// Something on this host the engine needs (its async runtime, its signing key, the
    /// owner's identity) could not be had.
    #[error("cannot {what}: {message}")]
    Host {
        /// What was being done.
        what: String,
        /// Why not.
        message: String,
    },
    /// An env var named without a value (`--env NAME` with `NAME` unset on the host).
    #[error(
        "environment variable `{name}` has no value\nhint: set it on the host or pass `--env {name}=VALUE`"
    )]
    EnvWithoutValue {
        /// The name.
        name: String,
    },
    /// A published service listens in the pod but its preview URL does not answer.
    #[error(
        "the preview `{url}` does not answer after {secs} s ({last})\nhint: the URL goes through the cluster's ingress controller (`cargo xtask kind up` installs ingress-nginx); without one serving the preview domain there is no preview, and a local port-forward fallback is not built yet"
    )]
    PreviewSilent {
        /// The URL.
        url: String,
        /// How long it was tried.
        secs: u64,
        /// The last thing seen.
        last: String,
    },
    /// An error whose text carried a secret of the session, masked (its class kept).
    #[error("{message}")]
    Scrubbed {
        /// The error's text with every secret masked.
        message: String,
        /// The class of the original error.
        class: ErrorClass,
    },
}

impl Classify for Error {
    fn class(&self) -> ErrorClass {
        match self {
            Error::Sandbox(e) => e.class(),
            Error::Unreachable { .. } => ErrorClass::Unavailable,
            Error::Api { code, .. } if *code >= 500 || *code == 429 => ErrorClass::Unavailable,
            Error::NotFound { .. } => ErrorClass::NotFound,
            Error::Forbidden { .. }
            | Error::QuotaExceeded { .. }
            | Error::AdmissionDenied { .. }
            | Error::NamespaceMissing { .. }
            | Error::NameTaken { .. }
            | Error::Invalid { .. }
            | Error::Api { .. }
            | Error::StartFailed { .. }
            | Error::StartTimeout { .. }
            | Error::PrepareFailed { .. }
            | Error::PrepareWait { .. }
            | Error::Object { .. } => ErrorClass::Setup,
            Error::ExecConnect { source: kube::Error::Api(status), .. } if status.code == 404 => {
                ErrorClass::NotFound
            }
            Error::ExecConnect { .. } => ErrorClass::Unavailable,
            Error::ExecProtocol { .. }
            | Error::ExecFailed { .. }
            | Error::NoAgent { .. }
            | Error::StdinNeedsV5 { .. } => ErrorClass::Setup,
            Error::Config { .. } | Error::InvalidId { .. } | Error::ClaimMount { .. } => {
                ErrorClass::Setup
            }
            Error::ClaimMissing { .. } => ErrorClass::Setup,
            Error::SecretInPodSpec { .. } => ErrorClass::Refused,
            Error::NoKubeconfig { .. } => ErrorClass::Unavailable,
            Error::PreviewSilent { .. } => ErrorClass::Setup,
            Error::Host { .. } | Error::EnvWithoutValue { .. } => ErrorClass::Setup,
            Error::Scrubbed { class, .. } => *class,
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
