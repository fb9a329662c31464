//! The expiry policy: given what an engine listed, which resources to remove and why. Pure: the clock
//! is an argument and owner liveness an oracle, so tests run it on a fake clock.
//!
//! Invariants (property-tested): a resource without the exact managed-by pair, or whose labels this
//! version cannot read, is never selected; and selection is monotone in time, so a resource chosen
//! at `now` is chosen at every later `now` too (a sweep that ran late never keeps something an earlier
//! one would have removed).

use std::collections::BTreeMap;
use std::fmt;

use crate::{Kind, Liveness, OwnerLiveness, SandboxLabels};

/// What the engine saw a resource doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Created, not started (Docker `created`, Kubernetes `Pending`).
    Created,
    /// Running (Kubernetes `Running`).
    Running,
    /// Paused or frozen.
    Paused,
    /// Its process tree ended (Docker `exited`/`dead`, Kubernetes `Succeeded`/`Failed`).
    Exited,
    /// Runs nothing by nature: a volume, network, Kubernetes service or ingress.
    Passive,
    /// The engine reported a state this crate does not know; treated as running.
    Unknown,
}

impl State {
    /// From Docker's and Podman's container `State` string (list and inspect responses).
    pub fn from_container_state(state: &str) -> State {
        match state.to_ascii_lowercase().as_str() {
            "created" | "configured" | "initialized" => State::Created,
            "running" | "restarting" => State::Running,
            "paused" => State::Paused,
            "exited" | "dead" | "stopped" | "removing" => State::Exited,
            _ => State::Unknown,
        }
    }

    /// From a Kubernetes pod's `status.phase`.
    pub fn from_pod_phase(phase: &str) -> State {
        match phase {
            "Pending" => State::Created,
            "Running" => State::Running,
            "Succeeded" | "Failed" => State::Exited,
            _ => State::Unknown,
        }
    }
}

/// One thing an engine listed, reduced to what the policy needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// The engine's id for it (container id, `pod/name`, `service/name`…), handed back in [`Action`].
    pub id: String,
    /// All its labels, ours and anyone else's.
    pub labels: BTreeMap<String, String>,
    /// What it is doing.
    pub state: State,
    /// Last activity the engine knows of outside labels, unix seconds. Docker and Podman labels are
    /// immutable, so there the engine records execs elsewhere and reports them here.
    pub last_activity: Option<u64>,
    /// When it exited, unix seconds (Docker `State.FinishedAt`), if it did and the engine knows.
    pub finished_at: Option<u64>,
}

impl Resource {
    /// A resource with no out-of-label activity or exit time.
    pub fn new(id: &str, labels: BTreeMap<String, String>, state: State) -> Resource {
        Resource { id: id.to_owned(), labels, state, last_activity: None, finished_at: None }
    }
}

/// Why a resource goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Its absolute deadline passed.
    Expired {
        /// The deadline, unix seconds.
        expires: u64,
    },
    /// A session unused for longer than its time-to-live.
    Idle {
        /// Seconds since the last activity.
        idle_secs: u64,
        /// The time-to-live.
        ttl: u64,
    },
    /// A run's or prepare's owner process has exited.
    OwnerDead {
        /// The owner's pid.
        pid: u32,
    },
    /// A run's or prepare's owner exited and its pid now belongs to another process.
    OwnerReplaced {
        /// The owner's pid.
        pid: u32,
    },
    /// Its process tree ended longer ago than the grace period: nobody will read its output now.
    Exited {
        /// Seconds since it exited (since creation when the exit time is unknown).
        since_secs: u64,
    },
    /// Another resource of the same sandbox goes, and a sandbox goes whole.
    Companion {
        /// The resource whose removal takes this one along.
        of: String,
    },
    /// A passive resource (service, ingress, volume) whose sandbox has no workload left.
    NoWorkload,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Expired { expires } => write!(f, "expired at {expires}"),
            Reason::Idle { idle_secs, ttl } => write!(f, "idle for {idle_secs} s, ttl {ttl} s"),
            Reason::OwnerDead { pid } => write!(f, "owner process {pid} has exited"),
            Reason::OwnerReplaced { pid } => {
                write!(f, "owner process {pid} has exited and its pid was reused")
            }
            Reason::Exited { since_secs } => write!(f, "exited {since_secs} s ago"),
            Reason::Companion { of } => write!(f, "removed with `{of}` of the same sandbox"),
            Reason::NoWorkload => f.write_str("its sandbox has no workload left"),
        }
    }
}

/// One removal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Action {
    /// [`Resource::id`].
    pub id: String,
    /// Why.
    pub reason: Reason,
}

/// The tunables; [`Policy::default`] is what [`decide`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// How long an exited workload stays for its owner to collect output, seconds.
    pub exited_grace: u64,
    /// How long a passive resource may exist without a workload, seconds: engines create a service
    /// before its pod, and that gap must not look like a leftover.
    pub no_workload_grace: u64,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy { exited_grace: 600, no_workload_grace: 600 }
    }
}

/// [`Policy::decide`] with the default policy.
pub fn decide(now: u64, resources: &[Resource], owners: &dyn OwnerLiveness) -> Vec<Action> {
    Policy::default().decide(now, resources, owners)
}

impl Policy {
    /// The resources to remove at `now` (unix seconds), in input order, each with its reason.
    /// Resources of one sandbox (same id label) go together: when one has a reason, the others go as
    /// [`Reason::Companion`].
    pub fn decide(
        &self,
        now: u64,
        resources: &[Resource],
        owners: &dyn OwnerLiveness,
    ) -> Vec<Action> {
        // Unreadable labels (hand-made, corrupted, newer schema) mean we do not know the rules: keep.
        let managed: Vec<(&Resource, SandboxLabels)> = resources
            .iter()
            .filter_map(|r| SandboxLabels::from_labels(&r.labels).ok().flatten().map(|l| (r, l)))
            .collect();
        let mut sandboxes: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, (_, labels)) in managed.iter().enumerate() {
            sandboxes.entry(labels.id.as_str()).or_default().push(i);
        }
        let mut reasons: Vec<Option<Reason>> = vec![None; managed.len()];
        for members in sandboxes.values() {
            // Activity anywhere in the sandbox counts for all of it (an exec lands on the pod, not on
            // its service).
            let activity = members
                .iter()
                .flat_map(|&i| {
                    let (r, l) = &managed[i];
                    [Some(l.created), l.last_activity, r.last_activity]
                })
                .flatten()
                .max()
                .unwrap_or(0);
            let has_workload = members.iter().any(|&i| managed[i].0.state != State::Passive);
            for &i in members {
                let (resource, labels) = &managed[i];
                reasons[i] = self.own_reason(now, resource, labels, activity, has_workload, owners);
            }
            let trigger =
                members.iter().find(|&&i| reasons[i].is_some()).map(|&i| managed[i].0.id.clone());
            if let Some(of) = trigger {
                for &i in members {
                    reasons[i].get_or_insert_with(|| Reason::Companion { of: of.clone() });
                }
            }
        }
        managed
            .iter()
            .zip(reasons)
            .filter_map(|((resource, _), reason)| {
                Some(Action { id: resource.id.clone(), reason: reason? })
            })
            .collect()
    }

    fn own_reason(
        &self,
        now: u64,
        resource: &Resource,
        labels: &SandboxLabels,
        activity: u64,
        has_workload: bool,
        owners: &dyn OwnerLiveness,
    ) -> Option<Reason> {
        if let Some(expires) = labels.expires.filter(|&e| now >= e) {
            return Some(Reason::Expired { expires });
        }
        match labels.kind {
            Kind::Run | Kind::Prepare => match owners.liveness(&labels.owner) {
                Liveness::Dead => return Some(Reason::OwnerDead { pid: labels.owner.pid }),
                Liveness::Reused => return Some(Reason::OwnerReplaced { pid: labels.owner.pid }),
                Liveness::Alive | Liveness::Unknown => {}
            },
            Kind::Session => {
                let idle_secs = now.saturating_sub(activity);
                if let Some(ttl) = labels.ttl.filter(|&ttl| idle_secs > ttl) {
                    return Some(Reason::Idle { idle_secs, ttl });
                }
            }
        }
        match resource.state {
            State::Exited => {
                let since_secs = now.saturating_sub(resource.finished_at.unwrap_or(labels.created));
                (since_secs >= self.exited_grace).then_some(Reason::Exited { since_secs })
            }
            State::Passive if !has_workload => (now.saturating_sub(labels.created)
                >= self.no_workload_grace)
                .then_some(Reason::NoWorkload),
            _ => None,
        }
    }
}
