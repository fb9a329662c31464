//! The warm pool's controller lock on a cluster: one `coordination.k8s.io/v1` Lease per user's
//! pool, so that of the `pool serve` loops started on any number of hosts against one namespace
//! exactly one keeps the pool (a lock file would only order the loops of one host). Every host
//! sees the Lease, so a claim made anywhere while one serves leaves the refilling to it.
//!
//! The loop takes the Lease at its start and renews it every pass; a holder that stops renewing
//! (its host gone, the loop killed) loses it once `leaseDurationSeconds` have passed since its
//! last renewal, and the next loop to ask takes it over. Every write carries the
//! `resourceVersion` it was decided on, so two loops deciding at once cannot both win: the
//! apiserver applies one write and answers the other 409 Conflict. [`verdict`] is the pure
//! decision, the rest one API call per step.
//!
//! The Lease's name is derived from the user's mark key (`reaper::MarkKey`), as the pool's
//! members are signed with it, so two users' pools in one namespace have two Leases and nobody
//! can guess another user's name from theirs. The holder identity names a host and a process,
//! nothing secret.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};

use crate::error::Result;
use crate::failure::{Op, api_error};

/// What to do about the pool's Lease, as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// There is none: create it.
    Create,
    /// Ours: renew it (a replace at this resourceVersion).
    Renew { revision: String },
    /// Another holder's, expired (or released): take it over at this resourceVersion.
    TakeOver { revision: String, transitions: i32 },
    /// Another holder's, live.
    Held { holder: String },
}

/// Pure: the verdict on `lease` (as read) for `holder` at `now`. A lease without a holder, a
/// duration or a renewal time counts as expired.
pub fn verdict(lease: Option<&Lease>, holder: &str, now: Timestamp) -> Verdict {
    let Some(lease) = lease else { return Verdict::Create };
    let revision = lease.metadata.resource_version.clone().unwrap_or_default();
    let spec = lease.spec.as_ref();
    let current = spec.and_then(|s| s.holder_identity.clone()).unwrap_or_default();
    if current == holder {
        return Verdict::Renew { revision };
    }
    if !current.is_empty() && live(lease, now) {
        return Verdict::Held { holder: current };
    }
    let transitions = spec.and_then(|s| s.lease_transitions).unwrap_or(0);
    Verdict::TakeOver { revision, transitions }
}

/// Pure: whether `lease` has a holder whose last renewal is younger than its duration.
pub fn live(lease: &Lease, now: Timestamp) -> bool {
    let Some(spec) = lease.spec.as_ref() else { return false };
    let (Some(renewed), Some(secs)) = (spec.renew_time.as_ref(), spec.lease_duration_seconds)
    else {
        return false;
    };
    let held = spec.holder_identity.as_deref().is_some_and(|h| !h.is_empty());
    held && now.as_second() < renewed.0.as_second().saturating_add(i64::from(secs))
}

/// Pure: the Lease `name` held by `holder` from `now` for `duration`, written over `revision`
/// (`None`: created), after `transitions` changes of holder.
pub fn lease(
    name: &str,
    holder: &str,
    now: Timestamp,
    duration: Duration,
    revision: Option<String>,
    transitions: i32,
) -> Lease {
    let secs = i32::try_from(duration.as_secs()).unwrap_or(i32::MAX).max(1);
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            resource_version: revision,
            labels: Some(
                [(
                    reaper::labels::MANAGED_BY.to_owned(),
                    reaper::labels::MANAGED_BY_VALUE.to_owned(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(secs),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }),
    }
}

/// Takes or renews the Lease `name` for `holder`: `Ok(None)` when it is ours now, or
/// `Ok(Some(other))` when `other` holds it (live, or it won a race for it just now).
pub async fn take(
    client: &Client,
    namespace: &str,
    name: &str,
    holder: &str,
    duration: Duration,
) -> Result<Option<String>> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let found = get(&api, namespace, name).await?;
    let now = Timestamp::now();
    let written = match verdict(found.as_ref(), holder, now) {
        Verdict::Held { holder } => return Ok(Some(holder)),
        Verdict::Create => {
            let op = Op::new("create", "lease", Some(name), namespace);
            let object = lease(name, holder, now, duration, None, 0);
            api.create(&PostParams::default(), &object).await.map(drop).map_err(|e| (op, e))
        }
        Verdict::Renew { revision } => {
            let op = Op::new("update", "lease", Some(name), namespace);
            let mut object = lease(name, holder, now, duration, Some(revision), 0);
            // A renewal keeps when it was acquired and how often it changed hands.
            if let (Some(spec), Some(old)) =
                (object.spec.as_mut(), found.as_ref().and_then(|l| l.spec.as_ref()))
            {
                spec.acquire_time = old.acquire_time.clone().or(spec.acquire_time.take());
                spec.lease_transitions = old.lease_transitions.or(spec.lease_transitions);
            }
            api.replace(name, &PostParams::default(), &object).await.map(drop).map_err(|e| (op, e))
        }
        Verdict::TakeOver { revision, transitions } => {
            let op = Op::new("update", "lease", Some(name), namespace);
            let object =
                lease(name, holder, now, duration, Some(revision), transitions.saturating_add(1));
            api.replace(name, &PostParams::default(), &object).await.map(drop).map_err(|e| (op, e))
        }
    };
    match written {
        Ok(()) => Ok(None),
        // Another loop wrote first: whoever holds it now is the answer.
        Err((_, kube::Error::Api(status))) if status.code == 409 => {
            let now = get(&api, namespace, name).await?;
            let holder_now = now.as_ref().and_then(|l| l.spec.as_ref()?.holder_identity.clone());
            Ok(Some(holder_now.filter(|h| h != holder).unwrap_or_else(|| "another loop".into())))
        }
        Err((op, e)) => Err(api_error(&op, e)),
    }
}

/// The live holder of the Lease `name`, if any: whether a `pool serve` keeps the pool now.
pub async fn holder(client: &Client, namespace: &str, name: &str) -> Result<Option<String>> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let found = get(&api, namespace, name).await?;
    Ok(found
        .filter(|l| live(l, Timestamp::now()))
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty()))
}

/// Releases the Lease `name` if `holder` holds it (deleted at the resourceVersion read, so a
/// holder that took it over meanwhile keeps it).
pub async fn release(client: &Client, namespace: &str, name: &str, holder: &str) -> Result<()> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let Some(found) = get(&api, namespace, name).await? else { return Ok(()) };
    let ours = found.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some(holder);
    if !ours {
        return Ok(());
    }
    let op = Op::new("delete", "lease", Some(name), namespace);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: None,
            resource_version: found.metadata.resource_version.clone(),
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(e) => Err(api_error(&op, e)),
    }
}

async fn get(api: &Api<Lease>, namespace: &str, name: &str) -> Result<Option<Lease>> {
    let op = Op::new("get", "lease", Some(name), namespace);
    match api.get(name).await {
        Ok(lease) => Ok(Some(lease)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(e) => Err(api_error(&op, e)),
    }
}

/// The name of the Lease of the pool signed with `mark`.
pub fn name(mark: &reaper::MarkKey) -> String {
    let mut id = mark.mark("pool-serve", "lease");
    id.truncate(16);
    format!("psbx-pool-serve-{id}")
}
