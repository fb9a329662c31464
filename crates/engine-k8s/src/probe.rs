//! Whether a cluster can hold sandboxes for this caller, for `python-sandbox detect`: the
//! apiserver answers (its version), the engine's namespace exists, and the caller may create
//! pods and `pods/exec` there (a `SelfSubjectAccessReview` each: the cluster's own answer, no
//! pod is made). The IO is [`readiness`]; [`Readiness::verdict`] is the pure judgement.

use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};

use crate::error::{Error, Result};

/// What the cluster said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// The apiserver's `gitVersion` (`v1.30.2`).
    pub version: String,
    /// The namespace the engine works in.
    pub namespace: String,
    /// `Some(false)` when it does not exist; `None` when the caller may not read namespaces
    /// (a namespaced Role, as deploy/rbac's, cannot): then the access reviews decide.
    pub namespace_exists: Option<bool>,
    /// `(resource, allowed)`: `pods` and `pods/exec`, verb `create`.
    pub allowed: Vec<(String, bool)>,
}

/// What a sandbox needs the caller to be allowed in the namespace.
pub const CHECKED: &[(&str, &str)] = &[("pods", "create"), ("pods/exec", "create")];

impl Readiness {
    /// Pure: `Ok(reason)` when sandboxes can start, `Err(reason with a hint)` when not.
    pub fn verdict(&self) -> std::result::Result<String, String> {
        let ns = &self.namespace;
        if self.namespace_exists == Some(false) {
            return Err(format!(
                "the cluster ({}) answers but namespace `{ns}` does not exist\nhint: `cargo xtask kind up` makes a local cluster with it, or `kubectl create namespace {ns}`",
                self.version
            ));
        }
        let denied: Vec<&str> =
            self.allowed.iter().filter(|(_, ok)| !ok).map(|(r, _)| r.as_str()).collect();
        if !denied.is_empty() {
            let list = denied.iter().map(|r| format!("`create {r}`")).collect::<Vec<_>>();
            return Err(format!(
                "the cluster ({}) answers but this user may not {} in namespace `{ns}`\nhint: apply the engine's Role: `kubectl apply -n {ns} -f deploy/rbac/`, and bind it to this user",
                self.version,
                list.join(" or ")
            ));
        }
        Ok(format!("cluster {} answers; may create pods and pods/exec in `{ns}`", self.version))
    }
}

/// Asks the cluster of `client` (all within `timeout`).
pub async fn readiness(
    client: &kube::Client,
    namespace: &str,
    timeout: Duration,
) -> Result<Readiness> {
    let unreachable =
        |action: &str, message: String| Error::Unreachable { action: action.to_owned(), message };
    let asked = async {
        let version = client
            .apiserver_version()
            .await
            .map_err(|e| unreachable("ask the apiserver its version", e.to_string()))?
            .git_version;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let namespace_exists = match namespaces.get_opt(namespace).await {
            Ok(found) => Some(found.is_some()),
            Err(kube::Error::Api(status)) if status.code == 403 => None,
            Err(e) => return Err(unreachable("read the namespace", e.to_string())),
        };
        let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
        let mut allowed = Vec::new();
        for (resource, verb) in CHECKED {
            let (resource_name, subresource) = match resource.split_once('/') {
                Some((r, s)) => (r, Some(s.to_owned())),
                None => (*resource, None),
            };
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        namespace: Some(namespace.to_owned()),
                        verb: Some((*verb).to_owned()),
                        resource: Some(resource_name.to_owned()),
                        subresource,
                        ..ResourceAttributes::default()
                    }),
                    ..SelfSubjectAccessReviewSpec::default()
                },
                ..SelfSubjectAccessReview::default()
            };
            let answer = reviews
                .create(&PostParams::default(), &review)
                .await
                .map_err(|e| unreachable("review this user's access", e.to_string()))?;
            let ok = answer.status.is_some_and(|s| s.allowed);
            allowed.push(((*resource).to_owned(), ok));
        }
        Ok(Readiness { version, namespace: namespace.to_owned(), namespace_exists, allowed })
    };
    tokio::time::timeout(timeout, asked).await.unwrap_or_else(|_| {
        Err(unreachable("ask the cluster", format!("no answer within {} s", timeout.as_secs())))
    })
}

#[cfg(test)]
mod tests;
