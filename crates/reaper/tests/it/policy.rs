//! The policy as a table of scenarios on a fake clock, snapshotted as one readable table.

use std::fmt::Write;

use reaper::{Kind, Policy, Resource, State, decide, labels};

use crate::support::{
    ALIVE, DEAD, ELSEWHERE, REUSED, T0, labels as sandbox, liveness, resource, unlabelled,
};

struct Scenario {
    name: &'static str,
    now: u64,
    resources: Vec<Resource>,
}

fn scenarios() -> Vec<Scenario> {
    let hour = 3600;
    let mut out = Vec::new();
    let mut add = |name, now, resources| out.push(Scenario { name, now, resources });

    // Never ours to touch.
    add("unlabelled and ancient", T0, vec![unlabelled("web-1", &[], State::Exited)]);
    let mut foreign = sandbox("s1", Kind::Run, DEAD, hour).to_labels().expect("valid labels");
    foreign.insert(labels::MANAGED_BY.into(), "someone-else".into());
    add(
        "managed by someone else, owner dead",
        T0,
        vec![Resource::new("c1", foreign, State::Exited)],
    );
    let mut broken = sandbox("s1", Kind::Run, DEAD, hour).to_labels().expect("valid labels");
    broken.remove(labels::CREATED);
    add("ours but missing `created`", T0, vec![Resource::new("c1", broken, State::Exited)]);
    let mut newer = sandbox("s1", Kind::Run, DEAD, hour).to_labels().expect("valid labels");
    newer.insert(labels::SCHEMA.into(), "2".into());
    add("ours but a newer schema", T0, vec![Resource::new("c1", newer, State::Exited)]);

    // Runs live as long as their owner.
    add(
        "run, owner alive",
        T0,
        vec![resource("c1", &sandbox("s1", Kind::Run, ALIVE, hour), State::Running)],
    );
    add(
        "run, owner dead",
        T0,
        vec![resource("c1", &sandbox("s1", Kind::Run, DEAD, 5), State::Running)],
    );
    add(
        "run, owner pid reused",
        T0,
        vec![resource("c1", &sandbox("s1", Kind::Run, REUSED, 5), State::Running)],
    );
    let mut remote = sandbox("s1", Kind::Run, ELSEWHERE, hour);
    remote.expires = Some(T0 + 60);
    add("run, owner unknown, before expires", T0, vec![resource("c1", &remote, State::Running)]);
    add("run, owner unknown, at expires", T0 + 60, vec![resource("c1", &remote, State::Running)]);
    add(
        "prepare, owner dead",
        T0,
        vec![resource("c1", &sandbox("s1", Kind::Prepare, DEAD, 5), State::Running)],
    );

    // Exited leftovers wait a grace period for their owner to read the output.
    let exited = |finished_ago: u64| Resource {
        finished_at: Some(T0 - finished_ago),
        ..resource("c1", &sandbox("s1", Kind::Run, ALIVE, hour), State::Exited)
    };
    add("run exited 30 s ago, owner alive", T0, vec![exited(30)]);
    add("run exited 700 s ago, owner alive", T0, vec![exited(700)]);
    add(
        "run exited, exit time unknown, created 1 h ago",
        T0,
        vec![resource("c1", &sandbox("s1", Kind::Run, ELSEWHERE, hour), State::Exited)],
    );

    // Sessions end after `ttl` seconds without activity.
    let session = |activity_ago: u64| {
        let mut l = sandbox("s2", Kind::Session, DEAD, 4 * hour);
        l.ttl = Some(1800);
        l.last_activity = Some(T0 - activity_ago);
        l
    };
    add(
        "session idle 1000 s of 1800 (owner gone: irrelevant)",
        T0,
        vec![resource("c2", &session(1000), State::Running)],
    );
    add("session idle exactly its ttl", T0, vec![resource("c2", &session(1800), State::Running)]);
    add("session idle 2000 s of 1800", T0, vec![resource("c2", &session(2000), State::Running)]);
    add(
        "session with stale label but engine-observed exec 60 s ago",
        T0,
        vec![Resource {
            last_activity: Some(T0 - 60),
            ..resource("c2", &session(2000), State::Running)
        }],
    );
    let mut both = session(2000);
    both.expires = Some(T0 - 1);
    add("session expired and idle: expiry wins", T0, vec![resource("c2", &both, State::Running)]);
    let mut no_ttl = sandbox("s2", Kind::Session, ALIVE, 48 * hour);
    no_ttl.ttl = None;
    add("session without ttl, two days old", T0, vec![resource("c2", &no_ttl, State::Running)]);

    // A sandbox goes whole.
    let idle = session(2000);
    add(
        "kubernetes session idle: pod, service and ingress go together",
        T0,
        vec![
            resource("pod/s2", &idle, State::Running),
            resource("service/s2", &idle, State::Passive),
            resource("ingress/s2", &idle, State::Passive),
            unlabelled("service/unrelated", &[], State::Passive),
        ],
    );
    let fresh = session(10);
    add(
        "kubernetes session active: exec on the pod keeps its service",
        T0,
        vec![
            resource("pod/s2", &fresh, State::Running),
            resource("service/s2", &session(3000), State::Passive),
        ],
    );
    let run = sandbox("s5", Kind::Run, ALIVE, hour);
    add(
        "run exited long ago takes its volume along",
        T0,
        vec![resource("c5", &run, State::Exited), resource("volume/s5", &run, State::Passive)],
    );
    add(
        "service left without its pod for 20 min",
        T0,
        vec![resource("service/s3", &sandbox("s3", Kind::Session, ALIVE, 1200), State::Passive)],
    );
    add(
        "service created 60 s ago, pod not yet created",
        T0,
        vec![resource("service/s3", &sandbox("s3", Kind::Session, ALIVE, 60), State::Passive)],
    );

    // Clock skew: created "in the future" reads as brand new.
    let mut skewed = sandbox("s4", Kind::Session, ALIVE, 0);
    skewed.created = T0 + 600;
    skewed.ttl = Some(60);
    add("session created 10 min in the future", T0, vec![resource("c4", &skewed, State::Exited)]);
    out
}

#[test]
fn scenarios_snapshot() {
    let mut table = String::new();
    for s in scenarios() {
        let actions = decide(s.now, &s.resources, &liveness);
        writeln!(table, "{} (now = T0{:+}):", s.name, s.now as i64 - T0 as i64).unwrap();
        if actions.is_empty() {
            table.push_str("    keep everything\n");
        }
        for a in actions {
            writeln!(table, "    remove {}: {}", a.id, a.reason).unwrap();
        }
    }
    insta::assert_snapshot!(table);
}

#[test]
fn grace_periods_are_tunable() {
    let l = sandbox("s1", Kind::Run, ALIVE, 120);
    let r = Resource { finished_at: Some(T0 - 60), ..resource("c1", &l, State::Exited) };
    let strict = Policy { exited_grace: 0, no_workload_grace: 0 };
    assert_eq!(strict.decide(T0, std::slice::from_ref(&r), &liveness).len(), 1);
    assert!(Policy::default().decide(T0, &[r], &liveness).is_empty());
}

#[test]
fn output_follows_input_order() {
    let dead = |id: &str| resource(id, &sandbox(id, Kind::Run, DEAD, 5), State::Running);
    let ids: Vec<String> = decide(T0, &[dead("z"), dead("a"), dead("m")], &liveness)
        .into_iter()
        .map(|a| a.id)
        .collect();
    assert_eq!(ids, ["z", "a", "m"]);
}

#[test]
fn engine_states_map_onto_the_policy_states() {
    let containers = [
        ("created", State::Created),
        ("running", State::Running),
        ("restarting", State::Running),
        ("paused", State::Paused),
        ("exited", State::Exited),
        ("dead", State::Exited),
        ("stopped", State::Exited),
        ("Exited", State::Exited),
        ("something-new", State::Unknown),
    ];
    for (text, want) in containers {
        assert_eq!(State::from_container_state(text), want, "{text}");
    }
    let phases = [
        ("Pending", State::Created),
        ("Running", State::Running),
        ("Succeeded", State::Exited),
        ("Failed", State::Exited),
        ("Unknown", State::Unknown),
    ];
    for (text, want) in phases {
        assert_eq!(State::from_pod_phase(text), want, "{text}");
    }
}
