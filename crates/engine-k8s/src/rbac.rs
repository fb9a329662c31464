//! The permissions the engine needs in its namespace, as data: `deploy/rbac/role.yaml` grants
//! exactly these (a test compares both ways), and the API module names them when the cluster
//! answers 403, so an RBAC error says which verb on which resource is missing.

/// `(resource, verb)` pairs, subresources as `pods/exec`. Why each:
/// - pods: create, get (read back what the apiserver kept), list and watch (wait to ready, the
///   sweep), delete; dependents go by owner references; patch (a session's script count, an
///   annotation).
/// - pods/exec: `create`, and `get` too: before about 1.30 the apiserver authorised a WebSocket
///   exec (an HTTP GET upgrade) as `get`, newer ones check `create`.
/// - pods/portforward: the same two, for the agent's warm path (`crate::exec`: every call of a
///   session or run goes through a forward to the agent's loopback port) and the local preview
///   fallback.
/// - services, ingresses, networkpolicies: create, get, list (the sweep), delete.
/// - events: list and watch, for the reason a pod does not start.
/// - persistentvolumeclaims: create, get and patch, for `run`'s prepared environments
///   (`crate::environment`: made once, read by every run, marked ready); watch, for a run
///   waiting on another's prepare; list and delete, for the sweep of unused ones; `get` also
///   reads each user claim of `--mount pvc:` before the run's pod (`crate::claims`), which
///   needs no verb more (the sweep deletes only claims signed as the engine's own).
/// - leases (`coordination.k8s.io`): get, create, update and delete, for the warm pool's
///   controller lock (`crate::lease`: one `pool serve` per pool across hosts), and `get` for a
///   claim's look at whether one serves.
pub const REQUIRED_PERMISSIONS: &[(&str, &str)] = &[
    ("pods", "create"),
    ("pods", "get"),
    ("pods", "list"),
    ("pods", "watch"),
    ("pods", "delete"),
    ("pods", "patch"),
    ("pods/exec", "create"),
    ("pods/exec", "get"),
    ("pods/portforward", "create"),
    ("pods/portforward", "get"),
    ("services", "create"),
    ("services", "get"),
    ("services", "list"),
    ("services", "delete"),
    ("ingresses", "create"),
    ("ingresses", "get"),
    ("ingresses", "list"),
    ("ingresses", "delete"),
    ("networkpolicies", "create"),
    ("networkpolicies", "get"),
    ("networkpolicies", "list"),
    ("networkpolicies", "delete"),
    ("events", "list"),
    ("events", "watch"),
    ("persistentvolumeclaims", "create"),
    ("persistentvolumeclaims", "get"),
    ("persistentvolumeclaims", "patch"),
    ("persistentvolumeclaims", "watch"),
    ("persistentvolumeclaims", "list"),
    ("persistentvolumeclaims", "delete"),
    ("leases", "get"),
    ("leases", "create"),
    ("leases", "update"),
    ("leases", "delete"),
];

/// The API group of a resource in [`REQUIRED_PERMISSIONS`] (`""` is the core group).
pub fn api_group(resource: &str) -> &'static str {
    match resource.split('/').next().unwrap_or(resource) {
        "ingresses" | "networkpolicies" => "networking.k8s.io",
        "leases" => "coordination.k8s.io",
        _ => "",
    }
}

/// Whether the engine needs `verb` on `resource`: an RBAC 403 on anything else is a bug here,
/// not a missing grant.
pub fn is_required(resource: &str, verb: &str) -> bool {
    REQUIRED_PERMISSIONS.iter().any(|(r, v)| *r == resource && *v == verb)
}

#[cfg(test)]
pub(crate) mod tests;
