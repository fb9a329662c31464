//! The reaper's IO for pods: one label-selected list, [`reaper::decide`], then a delete of each
//! chosen pod by name and uid. The pod's Services, Ingresses and NetworkPolicy are not listed:
//! they are owned by the pod and the garbage collector removes them with it.
//!
//! The same policy as for containers, with what a cluster can and cannot tell:
//! - `expires` (the hard lifetime, also `activeDeadlineSeconds` on the pod) and finished pods
//!   (`Succeeded`/`Failed` longer than the grace) apply wherever the sweep runs;
//! - a run's owner process is judged only from the owner's own boot and pid namespace
//!   ([`reaper::ProcLiveness`]): a sweep on the machine the CLI ran on removes a run whose CLI
//!   was killed, while one on another machine cannot see that process and leaves the pod to its
//!   deadline (and to the watchdog in the pod);
//! - a running session counts as active now: its idle TTL is enforced inside the pod by the
//!   watchdog, which sees the execs.
//!
//! The prepared environments of runs (PersistentVolumeClaims, `crate::environment`) are swept
//! in the same pass: those unused for `environment::UNUSED_AFTER` and prepares that never
//! finished ([`environment::sweep_reason`]), by name and uid, this user's mark verified.
//!
//! Labels are claims anyone who may create pods in the namespace can make, so only pods whose
//! [`reaper::MARK`] verifies under this user's key for their own name are considered, and the
//! delete carries the listed uid as a precondition: a pod that took the name since the list is
//! not touched.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::Client;
use reaper::{Kind, MarkKey, OwnerLiveness, Resource, SandboxLabels, State};

use crate::error::{Error, Result};
use crate::{api, environment};

/// One pod the sweep chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Swept {
    /// The pod name.
    pub pod: String,
    /// The sandbox id from its labels.
    pub sandbox: String,
    /// `run`, `session`, `prepare`, `pool` (an unclaimed warm-pool member: nobody's session
    /// yet) or `environment` (a prepared environment's claim).
    pub kind: String,
    /// Why, lower case (the reaper's reason).
    pub reason: String,
    /// Whether it was deleted (false in a dry run or when the delete failed).
    pub removed: bool,
    /// Whether it had already finished (`Succeeded`/`Failed`): routine garbage, not news.
    pub exited: bool,
    /// Why the delete failed, if it did.
    pub error: Option<String>,
}

/// One listed pod as the reaper sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The pod's uid, the delete's precondition.
    pub uid: String,
    /// [`Resource::id`] is the pod name.
    pub resource: Resource,
}

/// Pure: a listed pod as the reaper sees it, or `None` without a name and uid, or when it is
/// already being deleted.
pub fn resource_of(pod: &Pod, now: u64) -> Option<Listed> {
    let meta = &pod.metadata;
    let name = meta.name.as_deref().filter(|n| !n.is_empty())?;
    let uid = meta.uid.clone().filter(|u| !u.is_empty())?;
    if meta.deletion_timestamp.is_some() {
        return None;
    }
    let labels = meta.labels.clone().unwrap_or_default();
    let status = pod.status.as_ref();
    let state = State::from_pod_phase(status.and_then(|s| s.phase.as_deref()).unwrap_or_default());
    let mut resource = Resource::new(name, labels, state);
    resource.finished_at = status
        .into_iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| u64::try_from(t.0.as_second()).unwrap_or(0))
        .max();
    let is_session = SandboxLabels::from_labels(&resource.labels)
        .ok()
        .flatten()
        .is_some_and(|l| l.kind == Kind::Session);
    if is_session && state == State::Running {
        resource.last_activity = Some(now);
    }
    Some(Listed { uid, resource })
}

/// Pure: what to delete among `pods` at `now`: only pods whose mark verifies for their name,
/// each with its [`Swept`] (not yet removed).
pub fn decide(
    pods: &[Pod],
    key: &MarkKey,
    now: u64,
    owners: &dyn OwnerLiveness,
) -> Vec<(Listed, Swept)> {
    let listed: Vec<Listed> = pods
        .iter()
        .filter_map(|p| resource_of(p, now))
        .filter(|l| key.verifies(&l.resource.id, &l.resource.labels))
        .collect();
    let resources: Vec<Resource> = listed.iter().map(|l| l.resource.clone()).collect();
    reaper::decide(now, &resources, owners)
        .into_iter()
        .filter_map(|action| {
            let chosen = listed.iter().find(|l| l.resource.id == action.id)?;
            let labels = SandboxLabels::from_labels(&chosen.resource.labels).ok().flatten()?;
            let state = chosen.resource.labels.get(crate::engine::POOL_STATE_LABEL);
            let pooled = state.map(String::as_str) == Some(crate::engine::POOL_READY);
            let swept = Swept {
                pod: chosen.resource.id.clone(),
                sandbox: labels.id,
                kind: if pooled { "pool" } else { labels.kind.as_str() }.to_owned(),
                reason: action.reason.to_string(),
                removed: false,
                exited: chosen.resource.state == State::Exited,
                error: None,
            };
            Some((chosen.clone(), swept))
        })
        .collect()
}

/// Lists this user's pods in `namespace` (one call), deletes (or, with `dry_run`, only reports)
/// what the reaper decides.
pub async fn sweep(
    client: &Client,
    namespace: &str,
    key: &MarkKey,
    now: u64,
    dry_run: bool,
) -> Result<Vec<Swept>> {
    let liveness = reaper::ProcLiveness::new().map_err(|e| Error::Object {
        action: "judge pod owners".to_owned(),
        message: e.to_string(),
    })?;
    let mut swept = sweep_with(client, namespace, key, now, dry_run, &liveness).await?;
    match sweep_claims(client, namespace, key, now, dry_run).await {
        Ok(claims) => swept.extend(claims),
        // A Role from before environments were swept: the pods are what matter here.
        Err(Error::Forbidden { .. }) => {}
        Err(e) => return Err(e),
    }
    Ok(swept)
}

/// What a delete of the listed `what` did to `swept`: gone meanwhile (its owner, a
/// concurrent sweep) counts as removed; 409 is another object that took the name.
fn record(swept: &mut Swept, deleted: Result<bool>, what: &str) {
    match deleted {
        Ok(_) => swept.removed = true,
        Err(Error::Api { code: 409, .. }) => {
            swept.error = Some(format!("no longer the {what} that was listed"));
        }
        Err(e) => swept.error = Some(e.to_string()),
    }
}

/// Pure: which of `claims` to delete at `now`: this user's environment claims (mark verified
/// for the name) that [`environment::sweep_reason`] gives a reason for.
pub fn decide_claims(
    claims: &[PersistentVolumeClaim],
    key: &MarkKey,
    now: u64,
) -> Vec<(String, Swept)> {
    claims
        .iter()
        .filter_map(|claim| {
            let meta = &claim.metadata;
            let name = meta.name.as_deref()?;
            let uid = meta.uid.clone()?;
            let labels = meta.labels.clone().unwrap_or_default();
            if meta.deletion_timestamp.is_some()
                || !name.starts_with(environment::CLAIM_PREFIX)
                || !key.verifies(name, &labels)
            {
                return None;
            }
            let reason = environment::sweep_reason(claim, now)?;
            let swept = Swept {
                pod: name.to_owned(),
                sandbox: name.to_owned(),
                kind: "environment".to_owned(),
                reason,
                removed: false,
                exited: false,
                error: None,
            };
            Some((uid, swept))
        })
        .collect()
}

/// Lists this user's environment claims (one call) and deletes (or, with `dry_run`, only
/// reports) the unused and the never finished.
pub async fn sweep_claims(
    client: &Client,
    namespace: &str,
    key: &MarkKey,
    now: u64,
    dry_run: bool,
) -> Result<Vec<Swept>> {
    let op = crate::failure::Op::new("list", "persistentvolumeclaim", None, namespace);
    let claims: kube::Api<PersistentVolumeClaim> = kube::Api::namespaced(client.clone(), namespace);
    let params = kube::api::ListParams::default().labels(reaper::MANAGED_FILTER);
    let listed = claims.list(&params).await.map_err(|e| crate::failure::api_error(&op, e))?;
    let mut out = Vec::new();
    for (uid, mut swept) in decide_claims(&listed.items, key, now) {
        if !dry_run {
            let deleted =
                api::delete::<PersistentVolumeClaim>(client, namespace, &swept.pod, Some(&uid))
                    .await;
            record(&mut swept, deleted, "claim");
        }
        out.push(swept);
    }
    Ok(out)
}

/// [`sweep`] with the owner oracle given (tests).
pub async fn sweep_with(
    client: &Client,
    namespace: &str,
    key: &MarkKey,
    now: u64,
    dry_run: bool,
    owners: &dyn OwnerLiveness,
) -> Result<Vec<Swept>> {
    let pods = api::list_pods(client, namespace, reaper::MANAGED_FILTER).await?;
    let mut out = Vec::new();
    for (listed, mut swept) in decide(&pods, key, now, owners) {
        if !dry_run {
            let deleted =
                api::delete_pod(client, namespace, &listed.resource.id, Some(&listed.uid)).await;
            record(&mut swept, deleted, "pod");
        }
        out.push(swept);
    }
    Ok(out)
}
