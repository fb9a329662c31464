//! Pure tests: container create bodies (insta snapshots), the env key, the listing and inspect
//! parsers, a stopped container's exit code and the sweep's resource mapping.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::client::Flavor;
use crate::host::{Bind, HostFacts, check_policy};
use crate::plan::{self, Limits, PrepareLayout, RunLayout, SessionLayout};

fn host(uid: u32) -> HostFacts {
    HostFacts {
        uid,
        gid: uid,
        nofile_hard: Some(20_000),
        nproc_hard: Some(96_364),
        ca_bundle: Some(PathBuf::from("/etc/ssl/certs/ca-certificates.crt")),
        env: vec![
            ("LANG".to_owned(), "en_US.UTF-8".to_owned()),
            ("HTTPS_PROXY".to_owned(), "http://proxy:3128".to_owned()),
        ],
    }
}

fn labels() -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    labels.insert(reaper::MANAGED_BY.to_owned(), reaper::MANAGED_BY_VALUE.to_owned());
    labels.insert(reaper::labels::KIND.to_owned(), "run".to_owned());
    labels
}

fn publishes(texts: &[&str]) -> Vec<sandbox_core::Publish> {
    texts.iter().map(|t| t.parse().expect("publish")).collect()
}

fn run_layout() -> RunLayout {
    RunLayout {
        image: "python-sandbox-runtime:latest".to_owned(),
        labels: labels(),
        env_volume: Some("python-sandbox-env-0123".to_owned()),
        workspace: PathBuf::from("/home/me/project"),
        script: PathBuf::from("/home/me/project/main.py"),
        args: vec!["--flag".to_owned()],
        mounts: vec![
            Bind { path: PathBuf::from("/data/in"), writable: false },
            Bind { path: PathBuf::from("/home/me/project/out"), writable: true },
        ],
        protected: vec![
            PathBuf::from("/home/me/project/.git"),
            PathBuf::from("/home/me/project/out/.envrc"),
        ],
        net: true,
        // The same port, on every address, any free one, and another host port.
        publish: publishes(&["8000", "0.0.0.0:9000", "0:9100", "[::1]:8080:9200"]),
        user_env: vec![("TOKEN".to_owned(), "x".to_owned()), ("LANG".to_owned(), "C".to_owned())],
        limits: Limits::DEFAULT,
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        merge_output: false,
    }
}

/// The body as JSON with sorted maps, so snapshots are stable.
fn json(plan: &plan::ContainerPlan) -> serde_json::Value {
    json_for(plan, Flavor::Docker)
}

fn json_for(plan: &plan::ContainerPlan, flavor: Flavor) -> serde_json::Value {
    let body = plan::create_body(plan, flavor);
    let text = serde_json::to_string(&body).expect("serialize");
    let value: serde_json::Value = serde_json::from_str(&text).expect("parse");
    sort(value)
}

fn sort(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let sorted: BTreeMap<String, serde_json::Value> =
                map.into_iter().map(|(k, v)| (k, sort(v))).collect();
            serde_json::Value::Object(sorted.into_iter().collect())
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(sort).collect())
        }
        other => other,
    }
}

#[test]
fn run_body_net_on_with_deps_publish_and_mounts() {
    insta::assert_json_snapshot!(json(&plan::run_plan(&host(1234), &run_layout())));
}

#[test]
fn run_body_net_off_no_deps_root_caller() {
    let mut layout = run_layout();
    layout.env_volume = None;
    layout.net = false;
    layout.publish.clear();
    layout.mounts.clear();
    layout.user_env.clear();
    layout.script = PathBuf::from("/elsewhere/tool.py");
    insta::assert_json_snapshot!(json(&plan::run_plan(&host(0), &layout)));
}

/// The gate in front of every container command: one shell, `exec`'d (no shell left in the
/// process tree), arguments positional, never re-parsed; nothing at all when nothing is needed.
#[test]
fn gate_composes_go_line_network_wall_and_merged_output() {
    let cmd = ["python".to_owned(), "$(touch x)".to_owned(), "a b".to_owned()];
    assert_eq!(crate::gate::command(&cmd, false, false, false, false), cmd);
    let script = |go, net, merge, pwd| {
        let out = crate::gate::command(&cmd, go, net, merge, pwd);
        assert_eq!(out[..2], ["sh", "-c"]);
        assert_eq!(out[3..], ["gate", "python", "$(touch x)", "a b"]);
        out[2].clone()
    };
    insta::assert_snapshot!(
        [
            script(false, false, true, true),
            script(true, false, false, true),
            script(true, true, true, true),
            script(false, true, false, false),
        ]
        .join("\n"),
        @r#"
    exec "$@" 2>&1
    read -r go && [ "$go" = go ] || exit 125; exec "$@"
    read -r go && [ "$go" = go ] || exit 125; grep -q '^[*].0000FEA9.' /proc/net/route || { echo 'python-sandbox: the network wall is not up' >&2; exit 125; }; exec "$@" 2>&1
    n=0; until grep -q '^[*].0000FEA9.' /proc/net/route; do n=$((n+1)); if [ "$n" -gt 4000 ]; then echo 'python-sandbox: the network wall did not come up' >&2; exit 125; fi; sleep 0.005; done; unset PWD; exec "$@"
    "#
    );
}

/// The run body carries merged output into the gate.
#[test]
fn run_merged_output_dups_stderr_in_the_container() {
    let mut layout = run_layout();
    layout.net = false;
    layout.merge_output = true;
    let body = plan::create_body(&plan::run_plan(&host(1000), &layout), Flavor::Docker);
    let cmd = body.cmd.unwrap_or_default();
    assert_eq!(cmd[..2], plan::INIT);
    assert!(cmd[4].ends_with("exec \"$@\" 2>&1"), "{}", cmd[4]);
    assert_eq!(cmd[6], "/opt/python-sandbox/env/bin/python");
}

#[test]
fn prepare_body() {
    let layout = PrepareLayout {
        image: "python-sandbox-runtime:latest".to_owned(),
        labels: labels(),
        env_volume: "python-sandbox-env-0123".to_owned(),
        dependencies: vec!["requests>=2".to_owned(), "rich".to_owned()],
        requires_python: Some(">=3.11".to_owned()),
        limits: Limits::DEFAULT,
        tmpfs_size: 256 << 20,
    };
    insta::assert_json_snapshot!(json(&plan::prepare_plan(&host(1234), &layout)));
}

#[test]
fn session_body() {
    let layout = SessionLayout {
        image: "python-sandbox-runtime:latest".to_owned(),
        labels: labels(),
        workspace: PathBuf::from("/home/me/project"),
        mounts: Vec::new(),
        protected: vec![PathBuf::from("/home/me/project/.claude")],
        net: true,
        // A session's `PORT` is the same host port, as a run's (it used to be any).
        publish: publishes(&["8000", "0:8001"]),
        user_env: Vec::new(),
        limits: Limits { memory: None, cpus: Some(0.5), pids: Some(64) },
        tmpfs_size: 16 << 20,
        ttl_secs: 1800,
    };
    let mut body = json(&plan::session_plan(&host(1234), &layout));
    // The agent's program is its own file; the snapshot shows where it goes.
    // Net on: behind the gate (`sh -c GATE sh`), then the watchdog's own command.
    assert_eq!(body["Cmd"][11], sandbox_core::agent::AGENT_PY);
    body["Cmd"][11] = "<agent.py>".into();
    insta::assert_json_snapshot!(body);
    let podman = json_for(&plan::session_plan(&host(1234), &layout), Flavor::Podman);
    insta::assert_json_snapshot!(podman["HostConfig"]["Tmpfs"], @r#"
    {
      "/home/sandbox": "rw,nosuid,nodev,U,mode=0700,size=16777216",
      "/tmp": "rw,nosuid,nodev,mode=1777,size=16777216"
    }
    "#);
}

#[test]
fn ulimits_never_exceed_hard_limits() {
    let mut facts = host(1000);
    facts.nofile_hard = Some(1024);
    facts.nproc_hard = Some(100);
    let plan = plan::run_plan(&facts, &run_layout());
    assert_eq!((plan.nofile, plan.nproc), (1024, 100));
    facts.nofile_hard = None;
    facts.nproc_hard = None;
    let plan = plan::run_plan(&facts, &run_layout());
    assert_eq!((plan.nofile, plan.nproc), (65_536, 32_768));
}

#[test]
fn every_body_keeps_the_wall() {
    for facts in [host(0), host(1000)] {
        let mut layout = run_layout();
        for net in [true, false] {
            layout.net = net;
            let body = plan::create_body(&plan::run_plan(&facts, &layout), Flavor::Docker);
            let hc = body.host_config.expect("host config");
            assert_eq!(hc.readonly_rootfs, Some(true));
            assert_eq!(hc.cap_drop, Some(vec!["ALL".to_owned()]));
            assert_eq!(hc.security_opt, Some(vec!["no-new-privileges".to_owned()]));
            // The image's execute-only tini is pid 1, not the engine's readable init.
            assert_eq!(hc.init, Some(false));
            assert_eq!(
                body.cmd.as_deref().map(|c| &c[..2]),
                Some(&plan::INIT.map(String::from)[..])
            );
            assert_eq!(hc.privileged, Some(false));
            assert_eq!(hc.network_mode.as_deref(), Some(if net { "bridge" } else { "none" }));
            let user = body.user.expect("user");
            assert!(!user.starts_with("0:") && !user.starts_with("0"), "runs as {user}");
            assert_eq!(hc.binds, None, "structured mounts only");
            for mount in hc.mounts.expect("mounts") {
                let source = mount.source.expect("source");
                assert!(
                    !source.contains(".sock")
                        && !source.starts_with("/run")
                        && !source.starts_with("/var/run"),
                    "{source}"
                );
            }
            let env = body.env.expect("env");
            assert!(
                env.iter().all(|e| !e.starts_with("HTTPS_PROXY=")),
                "run gets no proxy: {env:?}"
            );
        }
    }
}

#[test]
fn env_volume_name_ignores_dependency_order_and_duplicates() {
    let key = reaper::MarkKey::from_bytes([7; 32]);
    let a = crate::engine::env_volume_name(
        &key,
        "sha256:1",
        Some(">=3.11"),
        &["b".into(), "a".into(), "a".into()],
    );
    let b = crate::engine::env_volume_name(
        &key,
        "sha256:1",
        Some(">=3.11"),
        &[" a".into(), "b".into()],
    );
    let c =
        crate::engine::env_volume_name(&key, "sha256:2", Some(">=3.11"), &["a".into(), "b".into()]);
    let d = crate::engine::env_volume_name(&key, "sha256:1", None, &["a".into(), "b".into()]);
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert_ne!(a, d);
    assert!(a.starts_with("python-sandbox-env-") && a.len() == "python-sandbox-env-".len() + 24);
    // Another user's key gives another name: nobody can predict or squat ours.
    let other = reaper::MarkKey::from_bytes([8; 32]);
    let theirs = crate::engine::env_volume_name(
        &other,
        "sha256:1",
        Some(">=3.11"),
        &["a".into(), "b".into()],
    );
    assert_ne!(a, theirs);
}

#[test]
fn policy_refuses_kernel_trees_sockets_dirs_and_home() {
    let private = PathBuf::from("/run/user/0/python-sandbox");
    let home = PathBuf::from("/home/me");
    let cases = [
        ("/", false, Some("it is the root directory")),
        ("/proc/self", false, Some("/proc holds kernel interfaces")),
        ("/var/run/docker.sock", false, Some("/var/run holds host sockets")),
        (
            "/var/lib/containers/storage",
            false,
            Some("/var/lib/containers holds container engine state"),
        ),
        ("/home/me", true, Some("it would expose your whole home directory")),
        ("/home", true, Some("it would expose your whole home directory")),
        ("/home/me", false, None),
        ("/usr/share", true, Some("/usr is a system directory")),
        ("/home/me/project", true, None),
    ];
    for (path, ws, expected) in cases {
        let got = check_policy(&PathBuf::from(path), ws, Some(&home), &private).err();
        assert_eq!(got.as_deref(), expected, "{path}");
    }
    let inside = check_policy(
        &PathBuf::from("/srv/x/python-sandbox"),
        false,
        None,
        &PathBuf::from("/srv/x/python-sandbox/run"),
    );
    assert!(inside.is_err());
}

#[test]
fn listing_parses_and_sorts() {
    let raw = b"f 12 b.txt\0d 4096 a dir\0l 7 link\0";
    let entries = sandbox_core::shell::parse_listing(raw).expect("a listing find prints");
    let shown: Vec<String> =
        entries.iter().map(|e| format!("{:?} {} {}", e.kind, e.size, e.name)).collect();
    assert_eq!(shown, vec!["Dir 0 a dir", "File 12 b.txt", "Symlink 0 link"]);
}

#[test]
fn session_names() {
    assert_eq!(crate::session::container_name("abc"), "python-sandbox-session-abc");
    assert_eq!(
        crate::session::container_name("python-sandbox-session-abc"),
        "python-sandbox-session-abc"
    );
}

#[test]
fn sweep_maps_states_and_keeps_sessions_active() {
    let owner = reaper::Owner {
        user: "uid-0".into(),
        host: "h".into(),
        boot_id: "b".into(),
        pid_ns: 1,
        pid: 1,
        start_time: 1,
    };
    let labels = reaper::labels_for_session("s1", &owner, 100, 60).expect("labels");
    let item = serde_json::json!({
        "Id": "c0ffee",
        "Names": ["/python-sandbox-session-s1"],
        "Labels": labels,
        "State": "running",
        "Ports": [{"IP": "127.0.0.1", "PrivatePort": 8000, "PublicPort": 49153, "Type": "tcp"}],
    });
    let listed = crate::sweep::resource_of(&item, 10_000).expect("resource");
    assert_eq!(listed.name, "python-sandbox-session-s1");
    let resource = listed.resource;
    assert_eq!(resource.id, "c0ffee");
    assert_eq!(resource.state, reaper::State::Running);
    assert_eq!(resource.last_activity, Some(10_000));
    let dead = |_: &reaper::Owner| reaper::Liveness::Dead;
    assert!(reaper::decide(10_000, &[resource], &dead).is_empty());
    let info = crate::session::lifecycle::session_info(&item, "podman").expect("session");
    assert_eq!((info.id.as_str(), info.ttl), ("s1", 60));
    assert_eq!(info.ports, vec![(8000, "http://127.0.0.1:49153".to_owned())]);
    // Podman's compat list says `stopped` for a container on its way out.
    for (state, expected) in [
        ("stopped", reaper::State::Exited),
        ("exited", reaper::State::Exited),
        ("created", reaper::State::Created),
        ("weird", reaper::State::Unknown),
    ] {
        let item = serde_json::json!({"Id": "1", "Names": ["/x"], "Labels": {}, "State": state});
        assert_eq!(
            crate::sweep::resource_of(&item, 0).expect("resource").resource.state,
            expected,
            "{state}"
        );
    }
}

/// Forgeries on a shared daemon: only what this user's key marked, for the container's own
/// name, reaches the policy; and removal goes by full id after the inspect agrees.
#[test]
fn sweep_takes_only_containers_this_user_marked() {
    let owner = reaper::Owner {
        user: "uid-0".into(),
        host: "h".into(),
        boot_id: "b".into(),
        pid_ns: 1,
        pid: 1,
        start_time: 1,
    };
    let key = reaper::MarkKey::from_bytes([1; 32]);
    let mut ours = reaper::labels_for_run("r1", &owner, 100, Some(200)).expect("labels");
    key.sign("python-sandbox-run-r1", &mut ours);
    let unmarked = reaper::labels_for_run("r1", &owner, 100, Some(200)).expect("labels");
    let mut theirs = unmarked.clone();
    reaper::MarkKey::from_bytes([2; 32]).sign("python-sandbox-run-r1", &mut theirs);
    let item = |id: &str, name: &str, labels: &std::collections::BTreeMap<String, String>| serde_json::json!({"Id": id, "Names": [format!("/{name}")], "Labels": labels, "State": "exited"});
    let items = [
        item("a1", "python-sandbox-run-r1", &ours),
        // Named after a victim's id prefix, our labels copied without a mark.
        item("b2", "5c1e0a11b0b0", &unmarked),
        // Our labels, mark included, copied onto another name: same sandbox id, not ours.
        item("c3", "python-sandbox-run-forged", &ours),
        // Another user's genuine container.
        item("d4", "python-sandbox-run-r1x", &theirs),
    ];
    let listed = crate::sweep::ours(&items, &key, 1_000);
    let ids: Vec<&str> = listed.iter().map(|l| l.resource.id.as_str()).collect();
    assert_eq!(ids, ["a1"]);
    let chosen = &listed[0];
    let inspect = |id: &str, name: &str, labels: &std::collections::BTreeMap<String, String>| serde_json::json!({"Id": id, "Name": format!("/{name}"), "Config": {"Labels": labels}});
    assert!(crate::sweep::still_ours(&inspect("a1", "python-sandbox-run-r1", &ours), chosen, &key));
    for changed in [
        inspect("a2", "python-sandbox-run-r1", &ours),
        inspect("a1", "renamed", &ours),
        inspect("a1", "python-sandbox-run-r1", &unmarked),
    ] {
        assert!(!crate::sweep::still_ours(&changed, chosen, &key), "{changed}");
    }
}

#[test]
fn list_response_parsing() {
    let ok = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n[{\"Names\":[\"/a\"]}]\n";
    assert_eq!(crate::client::parse_list_response(ok).expect("ok").len(), 1);
    let err = b"HTTP/1.0 500 Internal Server Error\r\n\r\n{\"message\":\"boom\"}";
    assert_eq!(
        crate::client::parse_list_response(err).expect_err("500"),
        r#"HTTP 500: {"message":"boom"}"#
    );
    assert!(crate::client::parse_list_response(b"HTTP/1.0 200").is_err());
}

#[test]
fn inspect_response_parsing() {
    let ok = b"HTTP/1.0 200 OK\r\n\r\n{\"State\":{\"Status\":\"stopped\"}}";
    let value = crate::client::parse_json_response(ok).expect("ok");
    assert_eq!(value["State"]["Status"], "stopped");
    // An object is not a listing.
    assert!(crate::client::parse_list_response(ok).is_err());
    let gone = b"HTTP/1.0 404 Not Found\r\n\r\n{\"message\":\"no such container\"}";
    assert_eq!(
        crate::client::parse_json_response(gone).expect_err("404"),
        r#"HTTP 404: {"message":"no such container"}"#
    );
}

#[test]
fn exit_code_only_once_stopped() {
    let state = |status: &str, running: bool, code: i64| {
        let state = serde_json::json!({"Status": status, "Running": running, "ExitCode": code});
        serde_json::json!({ "State": state })
    };
    let cases = [
        // Podman between the exit and conmon's cleanup, then after it.
        (state("stopped", false, 3), Some(3)),
        (state("exited", false, 137), Some(137)),
        (state("running", true, 0), None),
        // Not started yet: its code means nothing.
        (state("created", false, 0), None),
        (state("configured", false, 0), None),
        // Inconsistent or malformed answers are not trusted.
        (state("exited", true, 0), None),
        (state("exited", false, 1 << 40), None),
        (serde_json::json!({"State": {"Status": "exited", "Running": false}}), None),
        (serde_json::json!({"message": "no such container"}), None),
    ];
    for (inspect, expected) in cases {
        assert_eq!(crate::container::stopped_exit_code(&inspect), expected, "{inspect}");
    }
}

/// One line per profile entry: `name action [arg&mask==value ...]`.
fn compact(entries: &[serde_json::Value]) -> String {
    let mut out = String::new();
    for e in entries {
        let names: Vec<&str> =
            e["names"].as_array().into_iter().flatten().filter_map(|n| n.as_str()).collect();
        let action = match (e["action"].as_str(), e["errnoRet"].as_u64()) {
            (Some("SCMP_ACT_ERRNO"), Some(n)) => format!("errno {n}"),
            (Some(a), _) => a.trim_start_matches("SCMP_ACT_").to_lowercase(),
            (None, _) => "?".to_owned(),
        };
        let args: Vec<String> = e["args"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                let op = a["op"].as_str().unwrap_or("?").trim_start_matches("SCMP_CMP_");
                format!(
                    "{}:{op}({:#x},{:#x})",
                    a["index"],
                    a["value"].as_u64().unwrap_or(0),
                    a["valueTwo"].as_u64().unwrap_or(0)
                )
            })
            .collect();
        out.push_str(
            &format!("{} {action} {}\n", names.join(","), args.join(" ")).replace(" \n", "\n"),
        );
    }
    out
}

/// The actions of every entry naming `syscall` whose comparisons all hold, deduplicated.
/// More than one would leave the outcome to libseccomp's merge; none means the default action.
fn profile_actions(profile: &serde_json::Value, syscall: &str, args: &[u64; 6]) -> Vec<String> {
    let mut hits = Vec::new();
    for e in profile["syscalls"].as_array().into_iter().flatten() {
        if !e["names"].as_array().is_some_and(|n| n.iter().any(|n| n == syscall)) {
            continue;
        }
        let holds = e["args"].as_array().into_iter().flatten().all(|a| {
            let arg = args[a["index"].as_u64().unwrap_or(9) as usize];
            let (mask, value) =
                (a["value"].as_u64().unwrap_or(0), a["valueTwo"].as_u64().unwrap_or(0));
            match a["op"].as_str() {
                Some("SCMP_CMP_MASKED_EQ") => arg & mask == value,
                Some("SCMP_CMP_EQ") => arg == mask,
                Some("SCMP_CMP_NE") => arg != mask,
                op => panic!("unexpected op {op:?}"),
            }
        });
        if holds {
            let action = match (e["action"].as_str().unwrap_or("?"), e["errnoRet"].as_u64()) {
                ("SCMP_ACT_ERRNO", Some(n)) => format!("errno {n}"),
                (a, _) => a.to_owned(),
            };
            if !hits.contains(&action) {
                hits.push(action);
            }
        }
    }
    hits
}

/// The reference: the wall's own first-match semantics on the arguments' low 32 bits.
fn wall_action(rules: &[sandbox_core::SeccompRule], syscall: &str, args: &[u64; 6]) -> String {
    use sandbox_core::{ArgCheck, SeccompAction};
    let low = |i: u8| args[usize::from(i)] as u32;
    let action = rules
        .iter()
        .filter(|r| r.syscall == syscall)
        .find(|r| {
            r.checks.iter().all(|c| match *c {
                ArgCheck::AnyBit { arg, mask } => low(arg) & mask != 0,
                ArgCheck::Equals { arg, value } => low(arg) == value,
            })
        })
        .map_or(SeccompAction::Allow, |r| r.action);
    match action {
        SeccompAction::Allow => "SCMP_ACT_ALLOW".to_owned(),
        SeccompAction::Errno(n) => format!("errno {n}"),
        SeccompAction::KillProcess => "SCMP_ACT_KILL_PROCESS".to_owned(),
    }
}

/// Arguments worth trying for `rules`: every value their checks name, single bits, the usual
/// modes and flags, those with garbage in the upper half, and a deterministic spray.
fn probe_args(rules: &[sandbox_core::SeccompRule]) -> Vec<[u64; 6]> {
    use sandbox_core::ArgCheck;
    let mut values: Vec<u64> = vec![
        0,
        0o644,
        0o755,
        0o4755,
        0o2755,
        0o6777,
        0o1777,
        0o100,
        0o101,
        0o102,
        0o20200000,
        0x1200_0011,
        0x5413,
        0xffff_ffff,
    ];
    for r in rules {
        for c in r.checks {
            match *c {
                ArgCheck::AnyBit { mask, .. } => {
                    values.extend([u64::from(mask), u64::from(mask) | 0o755])
                }
                ArgCheck::Equals { value, .. } => {
                    values.extend([
                        u64::from(value),
                        u64::from(value ^ 1),
                        u64::from(value) ^ 0x8000_0000,
                    ]);
                }
            }
        }
    }
    values.extend((0..32).map(|b| 1u64 << b));
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..64 {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        values.push(seed >> 32);
    }
    let with_high: Vec<u64> = values.iter().map(|v| v | 0xdead_0000_0000_0000).collect();
    values.extend(with_high);
    let mut out = Vec::new();
    for (i, &a) in values.iter().enumerate() {
        // Pairs across arguments without a full cross product: each value against a few others.
        for &b in values.iter().skip(i % 7).step_by(7) {
            out.push([a, a, b, b, a, b]);
            out.push([b, a, a, b, b, a]);
        }
    }
    out
}

#[test]
fn wall_profile_entries_cover_each_syscall_disjointly_with_the_wall_s_first_match_outcome() {
    let entries = sandbox_core::oci_seccomp::entries(sandbox_core::WALL);
    let args = probe_args(sandbox_core::WALL);
    let mut syscalls: Vec<&str> = sandbox_core::WALL.iter().map(|r| r.syscall).collect();
    syscalls.sort_unstable();
    syscalls.dedup();
    for syscall in syscalls {
        // Only the syscall's own entries: the others cannot match, and scanning them for every
        // probe makes this test minutes long.
        let own: Vec<&serde_json::Value> = entries
            .iter()
            .filter(|e| e["names"].as_array().is_some_and(|n| n == &[syscall]))
            .collect();
        let profile = serde_json::json!({ "syscalls": own });
        for a in &args {
            let got = profile_actions(&profile, syscall, a);
            assert_eq!(got, vec![wall_action(sandbox_core::WALL, syscall, a)], "{syscall} {a:x?}");
        }
    }
    // And the test can fail: the old overlapping shape (an unconditional allow beside the
    // conditional errno) is caught as two actions.
    let overlapping = serde_json::json!({"syscalls": [
        {"names": ["chmod"], "action": "SCMP_ACT_ALLOW"},
        {"names": ["chmod"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1,
         "args": [{"index": 1, "value": 2048, "valueTwo": 2048, "op": "SCMP_CMP_MASKED_EQ"}]},
    ]});
    assert_eq!(profile_actions(&overlapping, "chmod", &[0, 0o4755, 0, 0, 0, 0]).len(), 2);
}

#[test]
fn wall_profile_entries() {
    insta::assert_snapshot!(compact(&sandbox_core::oci_seccomp::entries(sandbox_core::WALL)));
}

#[test]
fn the_wall_takes_over_the_syscalls_it_names_from_the_base_profile() {
    let base = r#"{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":38,"syscalls":[
        {"names":["read","chmod","clone","clone3","unshare","ioctl","write"],"action":"SCMP_ACT_ALLOW","args":[]},
        {"names":["clone"],"action":"SCMP_ACT_ALLOW","includes":{"caps":["CAP_SYS_ADMIN"]}},
        {"name":"fchmod","action":"SCMP_ACT_ALLOW"},
        {"names":["sethostname"],"action":"SCMP_ACT_ERRNO","errnoRet":1}]}"#;
    let walled = sandbox_core::oci_seccomp::with_wall(base).expect("walled");
    let value: serde_json::Value = serde_json::from_str(&walled).expect("json");
    assert_eq!(value["defaultErrnoRet"], 38, "the rest of the base is kept");
    let flat =
        r#"{"architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_X86","SCMP_ARCH_X32"],"syscalls":[]}"#;
    let flat: serde_json::Value =
        serde_json::from_str(&sandbox_core::oci_seccomp::with_wall(flat).expect("flat"))
            .expect("json");
    assert_eq!(flat["architectures"], serde_json::json!(["SCMP_ARCH_X86_64"]));
    let entries = value["syscalls"].as_array().expect("syscalls");
    let kept = compact(
        &entries[..entries.len() - sandbox_core::oci_seccomp::entries(sandbox_core::WALL).len()],
    );
    insta::assert_snapshot!(kept, @r"
    read,write allow
    sethostname errno 1
    ");
    // Now only the wall decides these.
    for a in probe_args(sandbox_core::WALL) {
        for syscall in ["chmod", "fchmod", "clone", "ioctl"] {
            assert_eq!(
                profile_actions(&value, syscall, &a),
                [wall_action(sandbox_core::WALL, syscall, &a)]
            );
        }
    }
    assert!(sandbox_core::oci_seccomp::with_wall("{}").is_err());
    assert!(sandbox_core::oci_seccomp::with_wall("nope").is_err());
}

#[test]
fn the_installed_default_profile_gets_the_wall_too() {
    // The real base of this machine, when containers-common is installed, and docker's fallback.
    let installed = sandbox_core::oci_seccomp::DEFAULT_PROFILES
        .iter()
        .filter_map(|path| Some((*path, std::fs::read_to_string(path).ok()?)));
    for (path, text) in
        installed.chain([("vendored", sandbox_core::oci_seccomp::VENDORED_DEFAULT.to_owned())])
    {
        let walled: serde_json::Value =
            serde_json::from_str(&sandbox_core::oci_seccomp::with_wall(&text).expect(path))
                .expect("json");
        // Deny by default: a syscall the host's libseccomp cannot name still fails.
        assert_eq!(walled["defaultAction"], "SCMP_ACT_ERRNO", "{path}");
        // No compat ABI beside an architecture: i386 and x32 calls are killed, not filtered
        // by another syscall table.
        let map = walled["archMap"].as_array().expect("archMap");
        assert!(map.iter().any(|a| a["architecture"] == "SCMP_ARCH_X86_64"), "{path}");
        assert!(map.iter().all(|a| a["subArchitectures"] == serde_json::json!([])), "{path}");
        for rule in sandbox_core::WALL {
            // Calls the base allows only with capabilities are decided like the rest (the
            // containers have none), so check with and without `includes`.
            for a in [
                [0, 0o4755, 0o4755, 0o4755, 0, 0],
                [0x1000_0000, 0o101, 0o101, 0o4755, 0, 0],
                [0, 0x5412, 0, 0, 0, 0],
                [0; 6],
            ] {
                assert_eq!(
                    profile_actions(&walled, rule.syscall, &a),
                    [wall_action(sandbox_core::WALL, rule.syscall, &a)],
                    "{path}: {} {a:?}",
                    rule.syscall
                );
            }
        }
    }
}

#[test]
fn deps_markers_ignore_order_and_duplicates() {
    use sandbox_core::shell::deps_marker;
    let deps = |d: &[&str]| d.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(deps_marker(&[]), None, "no dependencies: only the venv is needed");
    let a = deps_marker(&deps(&["six", "rich>=13"])).expect("marker");
    assert!(a.starts_with("/home/sandbox/.venv/.python-sandbox-deps/"), "{a}");
    assert_eq!(deps_marker(&deps(&[" rich>=13", "six", "six"])), Some(a.clone()));
    assert_ne!(deps_marker(&deps(&["six"])), Some(a));
}

#[test]
fn not_ready_gate_swallows_only_its_own_line() {
    use sandbox_core::shell::NotReadyGate;
    use sandbox_core::{Captured, OutputSink, Stream};
    let run = |chunks: &[(Stream, &str)]| {
        let mut out = Captured::default();
        let mut gate = NotReadyGate::new("n0nce", &mut out);
        for (stream, chunk) in chunks {
            gate.write(*stream, chunk.as_bytes());
        }
        let not_ready = gate.finish();
        (not_ready, out.stdout_lossy(), out.stderr_lossy())
    };
    let line = "python-sandbox-not-ready-n0nce\n";
    assert_eq!(run(&[(Stream::Stdout, line)]), (true, String::new(), String::new()));
    // Split across chunks, still recognised.
    assert_eq!(
        run(&[(Stream::Stdout, "python-sandbox-"), (Stream::Stdout, "not-ready-n0nce\n")]),
        (true, String::new(), String::new())
    );
    // A script's output that merely starts like it, or another nonce, passes through whole.
    assert_eq!(
        run(&[(Stream::Stdout, "python-sandbox-not-ready-other\n")]),
        (false, "python-sandbox-not-ready-other\n".to_owned(), String::new())
    );
    assert_eq!(run(&[(Stream::Stdout, "python")]), (false, "python".to_owned(), String::new()));
    assert_eq!(
        run(&[(Stream::Stdout, line), (Stream::Stdout, "more")]),
        (false, format!("{line}more"), String::new())
    );
    assert_eq!(
        run(&[(Stream::Stderr, "err"), (Stream::Stdout, "hello\n")]),
        (false, "hello\n".to_owned(), "err".to_owned())
    );
}

#[test]
fn env_auto_prune_is_daily() {
    use crate::envs::auto_prune_due;
    use std::time::{Duration, SystemTime};
    let now = SystemTime::now();
    assert!(auto_prune_due(None, now));
    assert!(!auto_prune_due(Some(now - Duration::from_secs(3600)), now));
    assert!(auto_prune_due(Some(now - Duration::from_secs(86_400)), now));
    assert!(auto_prune_due(Some(now + Duration::from_secs(60)), now), "a stamp from the future");
}

#[test]
fn env_lease_stamps_and_excludes_the_pruner_until_released() {
    use crate::envs::{Lease, lock, lock_path};
    use reaper::LockMode::TryExclusive as NonBlockingLockExclusive;
    let cache = tempfile::tempdir().unwrap();
    let path = lock_path(cache.path(), "python-sandbox-env-x");
    let lease = Lease::shared(cache.path(), "python-sandbox-env-x", &mut |_| {}).unwrap();
    let stamped = std::fs::metadata(&path).unwrap().modified().unwrap();
    assert!(stamped.elapsed().unwrap_or_default() < std::time::Duration::from_secs(60));
    let clone = lease.clone();
    assert!(lock(&path, NonBlockingLockExclusive).unwrap().is_none(), "held shared");
    // A second run shares it.
    let other = Lease::shared(cache.path(), "python-sandbox-env-x", &mut |_| {}).unwrap();
    drop(other);
    clone.release();
    assert!(lock(&path, NonBlockingLockExclusive).unwrap().is_some(), "released for every clone");
    drop(lease);
}

#[test]
fn env_lock_survives_the_pruner_unlinking_it() {
    use crate::envs::lock;
    use reaper::LockMode::{Exclusive as LockExclusive, Shared as LockShared};
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("env.lock");
    let pruner = lock(&path, LockExclusive).unwrap().unwrap();
    let waiter = {
        let path = path.clone();
        std::thread::spawn(move || lock(&path, LockShared).unwrap().unwrap())
    };
    // Let the waiter open the old file and block on it, then prune: unlink while held.
    std::thread::sleep(std::time::Duration::from_millis(200));
    std::fs::remove_file(&path).unwrap();
    drop(pruner);
    let held = waiter.join().unwrap();
    let current = std::fs::metadata(&path).expect("the waiter made a new lock file");
    assert_eq!(held.metadata().unwrap().ino(), current.ino(), "holds the file the path names");
}

#[test]
fn session_record_paths_are_plain_ids() {
    use crate::session::record::record_path;
    let dir = std::path::Path::new("/run/ps");
    assert_eq!(record_path(dir, "abc123"), Some(PathBuf::from("/run/ps/sessions/abc123.json")));
    assert_eq!(
        record_path(dir, "python-sandbox-session-abc123"),
        Some(PathBuf::from("/run/ps/sessions/abc123.json"))
    );
    for bad in ["", "../x", "a/b", "a.json", "x y"] {
        assert_eq!(record_path(dir, bad), None, "{bad}");
    }
}

#[test]
fn rootless_keeps_the_caller_and_drops_limits_it_cannot_enforce() {
    let v1 = plan::Rootless { cgroup_limits: false };
    let mut run = plan::run_plan(&host(1000), &run_layout());
    let warning = plan::rootless(&mut run, v1).expect("a warning for dropped limits");
    assert_eq!(
        warning,
        "rootless podman cannot enforce memory, cpu or process limits here (cgroup v1, or cgroup \
         v2 without those controllers delegated to the user): this run has none\n\
         hint: docker or rootful podman enforce them, as does rootless podman on cgroup v2 with \
         delegation"
    );
    let body = json_for(&run, Flavor::Podman);
    let hc = &body["HostConfig"];
    insta::assert_json_snapshot!(
        [&body["User"], &hc["UsernsMode"], &hc["Memory"], &hc["MemorySwap"], &hc["NanoCpus"], &hc["PidsLimit"]],
        @r#"
    [
      "1000:1000",
      "keep-id",
      null,
      null,
      null,
      null
    ]
    "#
    );
    // The rest of the wall is the rootful one.
    let mut rootful = json_for(&plan::run_plan(&host(1000), &run_layout()), Flavor::Podman);
    let mut rootless = body.clone();
    for hc in [&mut rootful["HostConfig"], &mut rootless["HostConfig"]] {
        let map = hc.as_object_mut().expect("object");
        for key in ["UsernsMode", "Memory", "MemorySwap", "NanoCpus", "PidsLimit"] {
            map.remove(key);
        }
    }
    assert_eq!(rootful, rootless);

    let mut session = plan::session_plan(
        &host(1000),
        &SessionLayout {
            image: "img".to_owned(),
            labels: labels(),
            workspace: PathBuf::from("/w"),
            mounts: Vec::new(),
            protected: Vec::new(),
            net: false,
            publish: Vec::new(),
            user_env: Vec::new(),
            limits: Limits { memory: None, cpus: Some(1.0), pids: None },
            tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
            ttl_secs: 60,
        },
    );
    let warning = plan::rootless(&mut session, v1).expect("cpu dropped");
    assert!(warning.starts_with("rootless podman cannot enforce cpu limits here"), "{warning}");
    assert!(warning.contains("this session has none"), "{warning}");

    // Nothing asked for, nothing lost; with delegated controllers the limits stay.
    let mut layout = run_layout();
    layout.limits = Limits::NONE;
    assert_eq!(plan::rootless(&mut plan::run_plan(&host(1000), &layout), v1), None);
    let mut delegated = plan::run_plan(&host(1000), &run_layout());
    assert_eq!(plan::rootless(&mut delegated, plan::Rootless { cgroup_limits: true }), None);
    assert_eq!((delegated.limits, delegated.userns.as_deref()), (Limits::DEFAULT, Some("keep-id")));
}

/// Limits the user asked for are refused where rootless podman cannot hold them (it used to
/// warn and run without them); without any asked for, the run goes on (the defaults are
/// dropped with the warning above).
#[test]
fn rootless_refuses_asked_limits_it_cannot_enforce() {
    let v1 = Some(plan::Rootless { cgroup_limits: false });
    let asked = sandbox_core::Limits {
        memory: Some(256 << 20),
        pids: Some(16),
        ..sandbox_core::Limits::NONE
    };
    let refused = plan::check_rootless_limits(v1, &asked).expect_err("refused");
    insta::assert_snapshot!(refused.to_string(), @r"
    rootless podman cannot enforce `--memory` and `--pids-limit` here (cgroup v1, or cgroup v2 without the memory, cpu and pids controllers delegated to the user), so nothing was run
    hint: run without those flags, use docker or rootful podman, or rootless podman on cgroup v2 with delegation (`Delegate=cpu memory pids` for `user@.service`)
    ");
    assert!(plan::check_rootless_limits(v1, &sandbox_core::Limits::NONE).is_ok());
    let delegated = Some(plan::Rootless { cgroup_limits: true });
    assert!(plan::check_rootless_limits(delegated, &asked).is_ok());
    assert!(plan::check_rootless_limits(None, &asked).is_ok(), "rootful");
}

/// What was asked wins field by field; the rest keeps the engine's defaults.
#[test]
fn asked_limits_fill_in_the_defaults() {
    let asked = sandbox_core::Limits {
        cpus: Some(sandbox_core::parse_cpus("0.5").expect("cpus")),
        pids: Some(16),
        ..sandbox_core::Limits::NONE
    };
    let limits = Limits::asked_or_default(&asked);
    assert_eq!(limits, Limits { memory: Limits::DEFAULT.memory, cpus: Some(0.5), pids: Some(16) });
    assert_eq!(Limits::asked_or_default(&sandbox_core::Limits::NONE), Limits::DEFAULT);
    // `none` lifts a default: docker's and podman's containers then have no such limit.
    let off = sandbox_core::Limits {
        off: sandbox_core::LimitsOff { memory: true, pids: true, cpus: false },
        ..sandbox_core::Limits::NONE
    };
    assert_eq!(Limits::asked_or_default(&off), Limits { cpus: Some(2.0), ..Limits::NONE });
}

#[test]
fn cgroup_limits_need_memory_cpu_and_pids() {
    assert!(engine_detect::controllers_for_containers("cpuset cpu io memory hugetlb pids rdma\n"));
    assert!(!engine_detect::controllers_for_containers("cpu memory\n"));
    assert!(
        !engine_detect::controllers_for_containers("cpuset io memory pids"),
        "cpuset is not cpu"
    );
    assert!(!engine_detect::controllers_for_containers(""));
}

#[test]
fn paths_with_colons_stay_whole() {
    let mut layout = run_layout();
    layout.env_volume = None;
    layout.workspace = PathBuf::from("/tmp/edge:ws");
    layout.script = PathBuf::from("/tmp/edge:ws/main.py");
    layout.mounts = vec![Bind { path: PathBuf::from("/tmp/edge-out:zz"), writable: false }];
    layout.protected = Vec::new();
    for flavor in [Flavor::Docker, Flavor::Podman] {
        let body = json_for(&plan::run_plan(&host(1234), &layout), flavor);
        let mounts: Vec<String> = body["HostConfig"]["Mounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .map(|m| {
                format!("{} {} -> {} ro={}", m["Type"], m["Source"], m["Target"], m["ReadOnly"])
            })
            .collect();
        assert_eq!(
            mounts,
            [
                r#""bind" "/etc/ssl/certs/ca-certificates.crt" -> "/etc/python-sandbox/ca-certificates.crt" ro=true"#,
                r#""bind" "/tmp/edge:ws" -> "/tmp/edge:ws" ro=false"#,
                r#""bind" "/tmp/edge-out:zz" -> "/tmp/edge-out:zz" ro=true"#,
            ],
            "{flavor:?}"
        );
        assert_eq!(body["HostConfig"].get("Binds"), None);
    }
}

/// The mount point of a mount id in a mountinfo text, with the kernel's octal escapes undone.
#[test]
fn mount_points_are_found_by_id_and_unescaped() {
    let info = "22 1 0:21 / / rw - overlay overlay rw\n\
                384 22 254:0 /tmp/ws /tmp/ws rw,relatime - ext4 /dev/vda rw\n\
                385 384 254:0 /tmp/my\\040data /tmp/ws/my\\040data ro - ext4 /dev/vda rw\n";
    assert_eq!(crate::verify::mount_point(info, 384), Some(PathBuf::from("/tmp/ws")));
    assert_eq!(crate::verify::mount_point(info, 385), Some(PathBuf::from("/tmp/ws/my data")));
    assert_eq!(crate::verify::mount_point(info, 38), None);
}

/// A run's command waits behind the gate for the go line the host writes after its check.
#[test]
fn run_command_is_gated() {
    let plan = plan::run_plan(&host(1234), &run_layout());
    let cmd = plan::create_body(&plan, Flavor::Docker).cmd.unwrap_or_default();
    assert_eq!(cmd[..4], ["/usr/bin/tini", "--", "sh", "-c"]);
    assert!(cmd[4].starts_with("read -r go"), "{}", cmd[4]);
    assert!(plan.stdin, "the go line travels on stdin");
}

/// A root caller's idmapped copies replace the read-write host binds only; targets stay.
#[test]
fn restage_swaps_only_read_write_host_sources() {
    let mut plan = plan::run_plan(&host(0), &run_layout());
    let staged = PathBuf::from("/root/.cache/python-sandbox/idmap/abc/0");
    let pairs = vec![
        (PathBuf::from("/home/me/project"), staged.clone()),
        (PathBuf::from("/data/in"), PathBuf::from("/never")),
    ];
    crate::idmap::restage(&mut plan, &pairs);
    let binds: Vec<(String, String, bool)> = plan
        .mounts
        .iter()
        .filter_map(|m| match &m.source {
            plan::Source::Host(p) => {
                Some((p.display().to_string(), m.target.display().to_string(), m.writable))
            }
            plan::Source::Volume(_) => None,
        })
        .collect();
    assert!(binds.contains(&(staged.display().to_string(), "/home/me/project".into(), true)));
    // Read-only: untouched even when named.
    assert!(binds.contains(&("/data/in".into(), "/data/in".into(), false)));
}

/// What the daemon bound, read back per asked port: the daemon's choice for `0:PORT`, an
/// address match (podman leaves 0.0.0.0 empty), and what was asked when nothing is reported.
#[test]
fn bound_ports_from_an_inspect() {
    use bollard::models::PortBinding;
    let asked =
        sandbox_core::asked_host_ports(&publishes(&["8000", "0:9000", "0.0.0.0:0:9100", "7000"]));
    let binding = |ip: &str, port: &str| PortBinding {
        host_ip: Some(ip.to_owned()),
        host_port: Some(port.to_owned()),
    };
    let ports = std::collections::HashMap::from([
        ("8000/tcp".to_owned(), Some(vec![binding("127.0.0.1", "8000")])),
        ("9000/tcp".to_owned(), Some(vec![binding("::1", "1"), binding("127.0.0.1", "32768")])),
        ("9100/tcp".to_owned(), Some(vec![binding("", "32769")])),
    ]);
    let bound: Vec<String> = crate::ports::bound(&asked, &ports)
        .iter()
        .map(|p| format!("{} {}", p.port, p.url()))
        .collect();
    assert_eq!(
        bound,
        [
            "8000 http://127.0.0.1:8000",
            "9000 http://127.0.0.1:32768",
            "9100 http://127.0.0.1:32769",
            "7000 http://127.0.0.1:7000",
        ]
    );
}
