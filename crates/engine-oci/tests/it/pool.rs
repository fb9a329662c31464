//! The warm pool on real engines: concurrent claims each get a distinct member (or none, and
//! start fresh), a member is never opened before its claim, one that was used or whose
//! workspace was replaced is never handed out, and a different policy misses the pool.

use std::collections::BTreeSet;
use std::time::Duration;

use engine_oci::{OciEngine, SessionConfig};
use sandbox_core::{DynSessionEngine, ExecRequest, Net, SessionEngine as _, pool};

use crate::support::{engines, name};

/// The tests on an engine's own pool take turns: a refill evicts the members of every other
/// policy, and each test's workspace is one (the controller's test has a pool of its own).
static POOL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// This test's turn at the engines' pools (a failed test's poison is no reason to fail the next).
fn turn() -> std::sync::MutexGuard<'static, ()> {
    POOL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn config(ws: &std::path::Path) -> SessionConfig {
    SessionConfig {
        workspace: ws.to_owned(),
        mounts: Vec::new(),
        net: Net::Off,
        allow: None,
        publish: Vec::new(),
        env: vec![sandbox_core::EnvVar { name: "POOLED".into(), value: Some("1".into()) }],
        ttl: Duration::from_secs(300),
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        limits: sandbox_core::Limits::NONE,
    }
}

fn members_of(engine: &OciEngine, config: &SessionConfig) -> Vec<String> {
    let identity = engine.pool_identity_dyn().expect("docker and podman have a pool");
    let key = pool::pool_key(config, &identity);
    let members = engine.pool_members().expect("members");
    pool::candidates(&members, &key).iter().map(|m| m.id.clone()).collect()
}

fn drain(engine: &OciEngine, ids: &[String]) {
    for id in ids {
        let _ = engine.pool_remove(id);
        let _ = engine.stop_session(id);
    }
}

#[test]
fn concurrent_claims_get_distinct_members() {
    let _turn = turn();
    for engine in engines() {
        let (_dir, ws) = crate::support::workspace("");
        let config = config(&ws);
        assert_eq!(pool::refill(&engine, &config, 3).expect("refill"), 3, "{}", name(&engine));
        let members = members_of(&engine, &config);
        assert_eq!(members.len(), 3);
        assert!(
            engine.list_sessions().expect("list").iter().all(|s| !members.contains(&s.id)),
            "unclaimed members are not sessions"
        );
        for id in &members {
            assert!(engine.open_session(id).is_err(), "a member is never opened before its claim");
        }
        let flavor = engine.config().flavor;
        // Eight callers, each with its own connection, as eight CLIs would be.
        let claimed: Vec<Option<String>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let config = &config;
                    s.spawn(move || {
                        let engine =
                            crate::support::engine(flavor).expect("engine answered before");
                        pool::claim(&engine, config).expect("claim").map(|info| info.id)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        let won: Vec<&String> = claimed.iter().flatten().collect();
        let distinct: BTreeSet<&String> = won.iter().copied().collect();
        assert_eq!(won.len(), 3, "{}: three members, three winners: {claimed:?}", name(&engine));
        assert_eq!(distinct.len(), 3, "{}: a member handed out twice: {claimed:?}", name(&engine));
        assert!(members_of(&engine, &config).is_empty());
        for id in &won {
            let session = engine.open_session(id).expect("a claimed member is a session");
            let mut out = sandbox_core::Captured::default();
            let request = ExecRequest {
                argv: vec!["sh".into(), "-c".into(), "echo $POOLED".into()],
                ..Default::default()
            };
            let outcome =
                engine.block_on(sandbox_core::Sandbox::exec(&session, &request, &mut out));
            assert_eq!(outcome.expect("exec").exit_code, 0);
            assert_eq!(out.stdout_lossy(), "1\n", "{}: the asked environment", name(&engine));
        }
        let won: Vec<String> = won.into_iter().cloned().collect();
        drain(&engine, &won);
        assert!(members_of(&engine, &config).is_empty(), "a stopped session is never pooled");
    }
}

#[test]
fn a_used_or_changed_member_is_never_handed_out() {
    let _turn = turn();
    for engine in engines() {
        let (_dir, ws) = crate::support::workspace("");
        let config = config(&ws);
        pool::refill(&engine, &config, 1).expect("refill");
        let [used] = members_of(&engine, &config).try_into().expect("one member");
        // Something ran in it: a connection to its agent from inside (what every request is).
        let poke = "import socket; s = socket.socket(socket.AF_UNIX); s.connect('/tmp/.python-sandbox-agent.sock'); s.close()";
        let exec = || {
            std::process::Command::new(name(&engine))
                .args(["exec", &format!("python-sandbox-session-{used}"), "python3", "-c", poke])
                .output()
                .expect("exec")
        };
        // 126: the runtime could not start the command (docker, twice in six runs of the whole
        // suite, which starts containers in parallel; nothing on stderr): try again.
        let mut out = exec();
        for _ in 0..4 {
            if out.status.code() != Some(126) {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
            out = exec();
        }
        let state = std::process::Command::new(name(&engine))
            .args(["inspect", "-f", "{{.State.Status}} {{.State.ExitCode}} {{.State.Error}}"])
            .arg(format!("python-sandbox-session-{used}"))
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        assert!(
            out.status.success(),
            "{}: {} {} (container: {state})",
            name(&engine),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(pool::claim(&engine, &config).expect("claim"), None, "{}: used", name(&engine));
        assert!(engine.open_session(&used).is_err(), "the used member was removed");

        pool::refill(&engine, &config, 1).expect("refill");
        let members = members_of(&engine, &config);
        // The workspace replaced by another directory at the same path since the create.
        let moved = ws.with_extension("old");
        std::fs::rename(&ws, &moved).expect("move");
        std::fs::create_dir(&ws).expect("recreate");
        assert_eq!(
            pool::claim(&engine, &config).expect("claim"),
            None,
            "{}: swapped",
            name(&engine)
        );
        assert!(members_of(&engine, &config).is_empty());
        drain(&engine, &members);
        let _ = std::fs::remove_dir_all(&moved);
    }
}

#[test]
fn another_policy_misses_the_pool() {
    let _turn = turn();
    for engine in engines() {
        let (_dir, ws) = crate::support::workspace("");
        let config = config(&ws);
        pool::refill(&engine, &config, 1).expect("refill");
        let (_other_dir, other_ws) = crate::support::workspace("");
        let misses = [
            SessionConfig { net: Net::On, ..config.clone() },
            SessionConfig { workspace: other_ws, ..config.clone() },
            SessionConfig { env: Vec::new(), ..config.clone() },
            SessionConfig { ttl: Duration::from_secs(60), ..config.clone() },
        ];
        for miss in &misses {
            assert_eq!(
                pool::claim(&engine, miss).expect("claim"),
                None,
                "{}: {miss:?}",
                name(&engine)
            );
        }
        let members = members_of(&engine, &config);
        assert_eq!(members.len(), 1, "a miss leaves the member alone");
        let claimed = pool::claim(&engine, &config).expect("claim").expect("the same policy");
        drain(&engine, &[claimed.id]);
    }
}

/// The `podman-rootless` tier runs these tests as an unprivileged user and sets
/// `ENGINE_OCI_EXPECT_ROOTLESS=podman`: there podman must be the rootless one, or the tier
/// tested nothing it claims to.
fn expect_rootless(engine: &OciEngine) {
    let wanted = std::env::var("ENGINE_OCI_EXPECT_ROOTLESS").unwrap_or_default();
    if wanted.split(',').any(|e| e == name(engine)) {
        assert!(engine.rootless().is_some(), "{}: expected rootless", name(engine));
        let identity = engine.pool_identity_dyn().unwrap_or_default();
        assert!(identity.split(' ').any(|part| part == "rootless=true"), "{identity}");
    }
}

#[test]
fn serve_passes_fill_a_claim_finds_it_unused_and_drain_empties_it() {
    for shared in engines() {
        // Its own runtime directory, so its own pool: a pass removes members of other keys,
        // and the other tests here fill theirs at the same time.
        let run = tempfile::Builder::new().prefix("engine-oci-run-").tempdir().expect("tempdir");
        let mut own = shared.config().clone();
        own.runtime_dir = run.path().to_owned();
        let engine = OciEngine::new(own).expect("the engine answered before");
        expect_rootless(&engine);
        let (_dir, ws) = crate::support::workspace("");
        let config = config(&ws);
        let now = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        };
        let pass = |size| pool::serve_pass(&engine, &config, size, now(), &mut |_| {});
        assert_eq!(pass(2).expect("fill"), 2, "{}", name(&engine));
        let members = members_of(&engine, &config);
        assert_eq!(members.len(), 2, "{}", name(&engine));

        let claimed = pool::claim(&engine, &config).expect("claim").expect("a member");
        assert!(members.contains(&claimed.id), "{}", name(&engine));
        // Never ran anything: its /tmp holds only what the agent made at its start, this
        // exec's own registration (`.active`) and the workspace's mount point when the
        // workspace is under /tmp.
        let session = engine.open_session(&claimed.id).expect("a claimed member is a session");
        let mut out = sandbox_core::Captured::default();
        let request = ExecRequest {
            argv: vec!["ls".into(), "-A".into(), "/tmp".into()],
            ..Default::default()
        };
        let outcome = engine.block_on(sandbox_core::Sandbox::exec(&session, &request, &mut out));
        assert_eq!(outcome.expect("exec").exit_code, 0, "{}", name(&engine));
        let mount_point = ws.strip_prefix("/tmp").ok().and_then(|p| p.iter().next());
        let listed = out.stdout_lossy();
        let unexpected: Vec<&str> = listed
            .lines()
            .filter(|f| ![".python-sandbox-agent.sock", ".last-activity", ".active"].contains(f))
            .filter(|f| mount_point.is_none_or(|m| m != std::ffi::OsStr::new(f)))
            .collect();
        assert!(unexpected.is_empty(), "{}: /tmp of a fresh member: {listed}", name(&engine));
        drop(session);

        assert_eq!(pass(2).expect("refill"), 1, "{}: one claimed, one created", name(&engine));
        let refilled = members_of(&engine, &config);
        assert_eq!(refilled.len(), 2, "{}", name(&engine));
        assert!(
            !refilled.contains(&claimed.id),
            "{}: a claimed member is not put back",
            name(&engine)
        );

        // Drain: a pass to size 0 removes every member, and they are gone, not just unlisted.
        assert_eq!(pass(0).expect("drain"), 2, "{}", name(&engine));
        assert!(members_of(&engine, &config).is_empty(), "{}", name(&engine));
        for id in &refilled {
            let gone = std::process::Command::new(name(&engine))
                .args(["container", "inspect", &format!("python-sandbox-session-{id}")])
                .output()
                .expect("inspect");
            assert!(!gone.status.success(), "{}: member {id} still exists", name(&engine));
        }
        drain(&engine, &[claimed.id]);
    }
}
