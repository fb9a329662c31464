//! Properties of the policy over arbitrary resource sets: it never selects what is not ours, it is
//! monotone in time, and labels round-trip.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use reaper::{Kind, Owner, Policy, Resource, SandboxLabels, State, labels};

use crate::support::{T0, liveness, owner};

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(Kind::Run), Just(Kind::Session), Just(Kind::Prepare)]
}

fn state() -> impl Strategy<Value = State> {
    prop_oneof![
        Just(State::Created),
        Just(State::Running),
        Just(State::Paused),
        Just(State::Exited),
        Just(State::Passive),
        Just(State::Unknown),
    ]
}

fn sandbox_labels() -> impl Strategy<Value = SandboxLabels> {
    (
        prop::sample::select(vec!["s1", "s2", "s3"]),
        kind(),
        prop::sample::select(vec![100u32, 200, 300, 400]),
        0u64..20_000,
        prop::option::of(0u64..10_000),
        prop::option::of(0u64..20_000),
        prop::option::of(0u64..20_000),
    )
        .prop_map(|(id, kind, pid, age, ttl, expires_in, activity_ago)| SandboxLabels {
            id: id.to_owned(),
            kind,
            owner: owner(pid),
            created: T0 - age,
            ttl,
            expires: expires_in.map(|d| T0 - 10_000 + d),
            last_activity: activity_ago.map(|d| T0 - d),
        })
}

/// What an engine may list: ours, ours with a foreign managed-by value, and arbitrary foreign labels.
fn resource() -> impl Strategy<Value = (Resource, bool)> {
    let ours =
        (sandbox_labels(), state(), prop::option::of(0u64..20_000), prop::option::of(0u64..20_000));
    let foreign_value =
        prop_oneof![Just("python-sandbox-old"), Just(""), Just("PYTHON-SANDBOX"), Just("docker")];
    (
        ours,
        0u8..4,
        foreign_value,
        prop::collection::btree_map("[a-z.-]{1,12}", "[a-z0-9]{0,6}", 0..4),
    )
        .prop_map(|((l, state, act, fin), variant, value, extra)| {
            let mut labels = l.to_labels().expect("valid labels");
            let managed = match variant {
                0 | 1 => true,
                2 => {
                    labels.insert(labels::MANAGED_BY.into(), value.into());
                    false
                }
                _ => {
                    labels = extra;
                    labels.remove(labels::MANAGED_BY);
                    false
                }
            };
            let r = Resource {
                id: String::new(),
                labels,
                state,
                last_activity: act.map(|d| T0 - d),
                finished_at: fin.map(|d| T0 - d),
            };
            (r, managed)
        })
}

fn resources() -> impl Strategy<Value = Vec<(Resource, bool)>> {
    prop::collection::vec(resource(), 0..12).prop_map(|mut rs| {
        for (i, (r, _)) in rs.iter_mut().enumerate() {
            r.id = format!("r{i}");
        }
        rs
    })
}

fn policy() -> impl Strategy<Value = Policy> {
    (0u64..2000, 0u64..2000)
        .prop_map(|(exited_grace, no_workload_grace)| Policy { exited_grace, no_workload_grace })
}

proptest! {
    #[test]
    fn never_selects_unmanaged(rs in resources(), policy in policy(), dt in 0u64..40_000) {
        let unmanaged: BTreeSet<String> = rs.iter().filter(|(_, m)| !m).map(|(r, _)| r.id.clone()).collect();
        let list: Vec<Resource> = rs.into_iter().map(|(r, _)| r).collect();
        for action in policy.decide(T0 - 10_000 + dt, &list, &liveness) {
            prop_assert!(!unmanaged.contains(&action.id), "selected {}", action.id);
        }
    }

    #[test]
    fn monotone_in_time(rs in resources(), policy in policy(), t in 0u64..30_000, dt in 0u64..30_000) {
        let list: Vec<Resource> = rs.into_iter().map(|(r, _)| r).collect();
        let now = T0 - 10_000 + t;
        let ids = |at: u64| -> BTreeSet<String> {
            policy.decide(at, &list, &liveness).into_iter().map(|a| a.id).collect()
        };
        let (early, late) = (ids(now), ids(now + dt));
        prop_assert!(early.is_subset(&late), "at {now}: {early:?}, at +{dt}: {late:?}");
    }

    #[test]
    fn selects_each_resource_at_most_once(rs in resources(), t in 0u64..30_000) {
        let list: Vec<Resource> = rs.into_iter().map(|(r, _)| r).collect();
        let actions = reaper::decide(T0 - 10_000 + t, &list, &liveness);
        let unique: BTreeSet<&str> = actions.iter().map(|a| a.id.as_str()).collect();
        prop_assert_eq!(unique.len(), actions.len());
    }

    #[test]
    fn labels_round_trip(l in sandbox_labels(), user in "[a-z][a-z0-9_-]{0,20}[a-z0-9]", start in any::<u64>()) {
        let l = SandboxLabels { owner: Owner { user, start_time: start, ..l.owner.clone() }, ..l };
        let map: BTreeMap<String, String> = l.to_labels().expect("valid labels");
        prop_assert_eq!(SandboxLabels::from_labels(&map).unwrap(), Some(l));
    }
}
