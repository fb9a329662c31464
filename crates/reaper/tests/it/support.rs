//! Builders shared by the test modules: owners whose pid encodes their liveness, and resources.

use std::collections::BTreeMap;

use reaper::{Kind, Liveness, Owner, Resource, SandboxLabels, State};

/// 2023-11-14T22:13:20Z: a fixed "now" so snapshots never depend on the wall clock.
pub(crate) const T0: u64 = 1_700_000_000;

pub(crate) const ALIVE: u32 = 100;
pub(crate) const DEAD: u32 = 200;
pub(crate) const REUSED: u32 = 300;
pub(crate) const ELSEWHERE: u32 = 400;

pub(crate) fn owner(pid: u32) -> Owner {
    Owner {
        user: "alice".into(),
        host: "ci-vm".into(),
        boot_id: "b3ed9e67-bbd6-409f-8429-100ea8ca66f2".into(),
        pid_ns: 4_026_531_836,
        pid,
        start_time: 5_551_234,
    }
}

/// The fake oracle: the pid says what the owner's fate is.
pub(crate) fn liveness(owner: &Owner) -> Liveness {
    match owner.pid {
        ALIVE => Liveness::Alive,
        DEAD => Liveness::Dead,
        REUSED => Liveness::Reused,
        _ => Liveness::Unknown,
    }
}

/// Labels of a sandbox `id` of `kind` created `age` seconds before [`T0`].
pub(crate) fn labels(id: &str, kind: Kind, pid: u32, age: u64) -> SandboxLabels {
    SandboxLabels::new(id, kind, &owner(pid), T0 - age)
}

pub(crate) fn resource(id: &str, labels: &SandboxLabels, state: State) -> Resource {
    Resource::new(id, labels.to_labels().expect("test labels are valid"), state)
}

pub(crate) fn unlabelled(id: &str, pairs: &[(&str, &str)], state: State) -> Resource {
    let labels: BTreeMap<String, String> =
        pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
    Resource::new(id, labels, state)
}
