//! Selection and skips, from `detect --json` as the CLI prints it.

use crate::engines::{self, Applies, Engine};
use crate::report::{self, Status};

fn engine(name: &str, available: bool, reason: &str) -> Engine {
    Engine {
        name: name.to_owned(),
        available,
        reason: reason.to_owned(),
        limits: Default::default(),
    }
}

fn names(engines: &[Engine]) -> Vec<&str> {
    engines.iter().map(|e| e.name.as_str()).collect()
}

const K8S_ONLY_REASON: &[(&str, &str)] = &[("k8s", "a pod mounts no host path")];

#[test]
fn a_cluster_that_answers_joins_the_default_selection() {
    let detected = [
        engine("native", true, ""),
        engine("docker", false, "no daemon"),
        engine("k8s", true, "cluster v1.31 answers"),
    ];
    let selected = engines::select(&detected, None).expect("select");
    assert_eq!(names(&selected), ["native", "docker", "k8s"]);
}

#[test]
fn a_cluster_nobody_configured_stays_out_unless_named() {
    let detected = [engine("native", true, ""), engine("k8s", false, "`KUBECONFIG` is unset")];
    assert_eq!(names(&engines::select(&detected, None).expect("select")), ["native"]);
    let named = engines::select(&detected, Some("k8s")).expect("select");
    assert_eq!(names(&named), ["k8s"]);
    assert_eq!(
        engines::unavailable_line(&named[0]),
        "SKIPPED: k8s: no cluster (`KUBECONFIG` is unset)"
    );
    assert_eq!(
        engines::unavailable_line(&engine("docker", false, "no daemon\nhint: start it")),
        "SKIPPED: docker: no daemon"
    );
}

#[test]
fn detect_json_with_an_available_cluster_selects_it() {
    let json = r#"{"selected": "native", "engines": [
        {"name": "native", "available": true, "reason": null,
         "limits": {"memory": "cgroup", "cpus": "cgroup", "pids": "cgroup"}},
        {"name": "k8s", "available": true, "reason": "ready",
         "limits": {"memory": "container-runtime", "cpus": "container-runtime", "pids": null}}
    ]}"#;
    let detected = engines::parse_detect(json).expect("parse");
    let selected = engines::select(&detected, Some("k8s")).expect("select");
    assert_eq!(names(&selected), ["k8s"]);
    assert!(selected[0].available);
    assert_eq!(selected[0].limits[2], None, "no pid limit on a pod");
}

#[test]
fn an_engine_specific_skip_names_its_reason_and_only_that_engine() {
    let case = Applies { skip_on: K8S_ONLY_REASON, ..Applies::default() };
    assert_eq!(
        engines::skip_reason(case, &engine("k8s", true, "")).as_deref(),
        Some("k8s: a pod mounts no host path")
    );
    assert_eq!(engines::skip_reason(case, &engine("docker", true, "")), None);
    // Unavailable elsewhere: the engine's own reason.
    assert_eq!(
        engines::skip_reason(case, &engine("podman", false, "no socket")).as_deref(),
        Some("unavailable: no socket")
    );
}

#[test]
fn only_on_and_unavailable_only_decide_before_availability() {
    let only = Applies { only_on: Some(&["bwrap", "native"]), ..Applies::default() };
    assert_eq!(
        engines::skip_reason(only, &engine("k8s", true, "")).as_deref(),
        Some("only for bwrap, native")
    );
    assert_eq!(engines::skip_reason(only, &engine("native", true, "")), None);
    let unavailable = Applies { unavailable_only: true, ..Applies::default() };
    assert_eq!(engines::skip_reason(unavailable, &engine("k8s", false, "no cluster")), None);
    assert_eq!(
        engines::skip_reason(unavailable, &engine("k8s", true, "")).as_deref(),
        Some("only for an unavailable engine")
    );
    assert_eq!(engines::skip_reason(Applies::default(), &engine("k8s", true, "")), None);
}

#[test]
fn skips_are_counted_as_skipped_and_reported_whole() {
    let case = Applies { skip_on: K8S_ONLY_REASON, ..Applies::default() };
    let statuses: Vec<Status> = [engine("native", true, ""), engine("k8s", true, "")]
        .iter()
        .map(|e| engines::skip_reason(case, e).map_or(Status::Pass, Status::Skipped))
        .collect();
    assert_eq!(report::summary(&statuses), "1 passed, 0 failed, 1 skipped");
    let text = report::engine_skips(&[("mount-ro-rw", "k8s", "a pod mounts no host path")]);
    assert_eq!(text, "skipped on k8s: mount-ro-rw: a pod mounts no host path\n");
}

/// Every engine-specific skip, reviewed: a case added to or dropped from this list is a
/// decision about what a pod cannot do, made here in the open.
#[test]
fn the_cases_a_pod_cannot_apply_to_are_these() {
    let all = crate::cases::all();
    let mut skipped: Vec<&str> = all
        .iter()
        .filter(|c| c.skip_on.iter().any(|(e, _)| *e == "k8s"))
        .map(|c| c.name)
        .filter(|n| !n.starts_with("wall-seccomp-"))
        .collect();
    skipped.sort_unstable();
    assert_eq!(
        skipped,
        [
            "boundary-approve-runs",
            "mount-inline-ro-subdir",
            "mount-missing-rw-outside-created",
            "mount-missing-rw-through-symlink-refused",
            "mount-ro-rw",
            "protected-path-mount-approved-writes",
            "publish-any-host-port-noted",
            "publish-busy-host-port-refused",
            "publish-port-reachable",
            "session-start-publish-busy-host-port-refused",
        ]
    );
    let known = ["native", "bwrap", "docker", "podman", "k8s"];
    for case in &all {
        for (engine, why) in case.skip_on {
            assert!(known.contains(engine), "{}: skip_on names `{engine}`", case.name);
            assert!(!why.is_empty() && !why.ends_with('.'), "{}: reason {why:?}", case.name);
        }
        let k8s_runs = crate::engines::skip_reason(
            Applies { only_on: case.only_on, unavailable_only: false, skip_on: case.skip_on },
            &engine("k8s", true, ""),
        )
        .is_none();
        // The wall is on pods too (the agent takes it): every family's case runs there.
        if case.name.starts_with("wall-") {
            assert!(k8s_runs, "{} is skipped on k8s", case.name);
        }
    }
}

/// The host's own addresses, from the kernel's local table: every `/32 host LOCAL` entry but
/// loopback, once each (a `fib_trie` lists the main and local tables both).
#[test]
fn the_hosts_addresses_come_from_its_local_table() {
    let fib_trie = "Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- 0.0.0.0\n        /0 universe UNICAST\n     +-- 127.0.0.0/8 2 0 2\n        +-- 127.0.0.0/31 1 0 0\n           |-- 127.0.0.1\n              /32 host LOCAL\n     |-- 172.17.0.1\n        /32 host LOCAL\n     |-- 192.0.2.2\n        /32 host LOCAL\n     |-- 192.0.2.255\n        /32 link BROADCAST\nLocal:\n     |-- 172.17.0.1\n        /32 host LOCAL\n";
    assert_eq!(crate::fixture::local_addresses(fib_trie), ["172.17.0.1", "192.0.2.2"]);
}
