//! The pool's pure decisions, and the claim driver against a scripted engine.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use super::*;
use crate::{DynSession, DynSessionEngine, EnvVar, Limits, Mount, MountMode, Net, Publish};

fn config() -> SessionConfig {
    SessionConfig {
        workspace: PathBuf::from("/ws"),
        mounts: Vec::new(),
        net: Net::Off,
        allow: None,
        publish: Vec::new(),
        env: Vec::new(),
        ttl: Duration::from_secs(1800),
        tmpfs_size: crate::DEFAULT_TMPFS_SIZE,
        limits: Limits::default(),
    }
}

/// The clock of the scripted passes: members it creates are born now.
const NOW: u64 = 100_000;

fn member(id: &str, key: &str, created: u64) -> PoolMember {
    PoolMember { id: id.to_owned(), key: key.to_owned(), created, revision: String::new() }
}

#[test]
fn key_covers_everything_a_sandbox_fixes_at_start() {
    let base = pool_key(&config(), "docker python-sandbox-runtime:1");
    assert_eq!(base.len(), 40);
    assert!(base.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(base, pool_key(&config(), "docker python-sandbox-runtime:1"), "deterministic");
    let variants: Vec<(&str, SessionConfig)> = vec![
        ("workspace", SessionConfig { workspace: PathBuf::from("/other"), ..config() }),
        (
            "mounts",
            SessionConfig {
                mounts: vec![Mount { path: PathBuf::from("/data"), mode: MountMode::ReadOnly }],
                ..config()
            },
        ),
        ("net", SessionConfig { net: Net::On, ..config() }),
        (
            "publish",
            SessionConfig { publish: vec!["8000".parse::<Publish>().expect("a port")], ..config() },
        ),
        (
            "env",
            SessionConfig {
                env: vec![EnvVar { name: "A".into(), value: Some("1".into()) }],
                ..config()
            },
        ),
        ("ttl", SessionConfig { ttl: Duration::from_secs(60), ..config() }),
        ("tmpfs", SessionConfig { tmpfs_size: 1 << 20, ..config() }),
        (
            "limits",
            SessionConfig { limits: Limits { pids: Some(64), ..Limits::default() }, ..config() },
        ),
    ];
    let mut seen = BTreeSet::from([base.clone()]);
    for (what, variant) in &variants {
        assert!(seen.insert(pool_key(variant, "docker python-sandbox-runtime:1")), "{what}");
    }
    assert_ne!(base, pool_key(&config(), "podman python-sandbox-runtime:1"), "identity");
    let secret = SessionConfig {
        env: vec![EnvVar { name: "API_TOKEN".into(), value: Some("hunter2".into()) }],
        ..config()
    };
    assert!(!pool_key(&secret, "x").contains("hunter2"));
}

#[test]
fn candidates_of_the_key_oldest_first() {
    let members = [member("c", "k", 30), member("a", "k", 10), member("x", "other", 1)];
    let ids: Vec<&str> = candidates(&members, "k").iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["a", "c"]);
    assert!(candidates(&members, "none").is_empty());
}

#[test]
fn refill_follows_the_last_request() {
    let members = [member("a", "k", 10), member("o1", "old", 5), member("o2", "old", 1)];
    assert_eq!(
        refill_plan(&members, "k", 3),
        RefillPlan { create: 2, remove: vec!["o2".into(), "o1".into()] }
    );
    assert_eq!(refill_plan(&members[..1], "k", 1), RefillPlan::default(), "already full");
    assert_eq!(refill_plan(&[], "k", 0), RefillPlan::default(), "no pool");
}

/// An engine whose pool is a list; a claim succeeds once per member, and members in `unfit`
/// are refused at the claim (as an engine refuses a used one).
struct Scripted {
    identity: Option<String>,
    members: Mutex<Vec<PoolMember>>,
    claimed: Mutex<BTreeSet<String>>,
    unfit: BTreeSet<String>,
    created: Mutex<Vec<String>>,
    removed: Mutex<Vec<String>>,
}

impl Scripted {
    fn new(members: Vec<PoolMember>) -> Scripted {
        Scripted {
            identity: Some("scripted".into()),
            members: Mutex::new(members),
            claimed: Mutex::default(),
            unfit: BTreeSet::new(),
            created: Mutex::default(),
            removed: Mutex::default(),
        }
    }
}

impl DynSessionEngine for Scripted {
    fn session_engine_name(&self) -> &'static str {
        "scripted"
    }
    fn start_session_dyn(
        &self,
        _: &SessionConfig,
        _: &mut dyn FnMut(&str),
    ) -> Result<SessionInfo, EngineError> {
        Err(EngineError::new(crate::Error::NotFound { path: "no cold starts".into() }))
    }
    fn open_session_dyn(&self, id: &str) -> Result<Box<dyn DynSession + '_>, EngineError> {
        Err(EngineError::new(crate::Error::NotFound { path: id.into() }))
    }
    fn list_sessions_dyn(&self) -> Result<Vec<SessionInfo>, EngineError> {
        Ok(Vec::new())
    }
    fn stop_session_dyn(&self, _: &str) -> Result<(), EngineError> {
        Ok(())
    }
    fn pool_identity_dyn(&self) -> Option<String> {
        self.identity.clone()
    }
    fn pool_members_dyn(&self) -> Result<Vec<PoolMember>, EngineError> {
        let claimed = self.claimed.lock().map_err(|_| poisoned())?;
        let members = self.members.lock().map_err(|_| poisoned())?;
        Ok(members.iter().filter(|m| !claimed.contains(&m.id)).cloned().collect())
    }
    fn pool_create_dyn(&self, _: &SessionConfig, key: &str) -> Result<(), EngineError> {
        let mut created = self.created.lock().map_err(|_| poisoned())?;
        created.push(key.to_owned());
        let id = format!("new{}", created.len());
        self.members.lock().map_err(|_| poisoned())?.push(member(&id, key, NOW));
        Ok(())
    }
    fn pool_claim_dyn(&self, member: &PoolMember) -> Result<Option<SessionInfo>, EngineError> {
        let fresh = self.claimed.lock().map_err(|_| poisoned())?.insert(member.id.clone());
        Ok((fresh && !self.unfit.contains(&member.id))
            .then(|| SessionInfo { id: member.id.clone(), ..SessionInfo::default() }))
    }
    fn pool_remove_dyn(&self, id: &str) -> Result<(), EngineError> {
        self.removed.lock().map_err(|_| poisoned())?.push(id.to_owned());
        self.members.lock().map_err(|_| poisoned())?.retain(|m| m.id != id);
        Ok(())
    }

    fn pool_lease_take_dyn(
        &self,
        _holder: &str,
        _ttl: std::time::Duration,
    ) -> Result<crate::PoolLease, EngineError> {
        Ok(crate::PoolLease::Local)
    }

    fn pool_lease_release_dyn(&self, _holder: &str) -> Result<(), EngineError> {
        Ok(())
    }

    fn pool_lease_holder_dyn(&self) -> Result<Option<String>, EngineError> {
        Ok(None)
    }
}

fn poisoned() -> EngineError {
    EngineError::new(crate::Error::NotFound { path: "poisoned".into() })
}

#[test]
fn claim_passes_over_taken_and_unfit_members_and_never_a_mismatch() {
    let key = pool_key(&config(), "scripted");
    let mut engine = Scripted::new(vec![
        member("used", &key, 1),
        member("taken", &key, 2),
        member("free", &key, 3),
        member("mismatch", "another-key", 0),
    ]);
    engine.unfit.insert("used".into());
    engine.claimed.lock().expect("lock").insert("taken".into());
    let got = claim(&engine, &config()).expect("claim").expect("a member");
    assert_eq!(got.id, "free");
    assert_eq!(claim(&engine, &config()).expect("claim"), None, "only a mismatch is left");
    let other = SessionConfig { net: Net::On, ..config() };
    assert_eq!(claim(&engine, &other).expect("claim"), None, "a different policy misses");
}

#[test]
fn concurrent_claims_each_get_a_distinct_member() {
    let key = pool_key(&config(), "scripted");
    let engine = Scripted::new((0..4).map(|i| member(&format!("m{i}"), &key, i)).collect());
    let got: Vec<Option<String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| claim(&engine, &config()).expect("claim").map(|i| i.id)))
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    let ids: Vec<&String> = got.iter().flatten().collect();
    let distinct: BTreeSet<&String> = ids.iter().copied().collect();
    assert_eq!(ids.len(), 4, "four members, four winners: {got:?}");
    assert_eq!(distinct.len(), 4, "no member handed out twice: {got:?}");
}

#[test]
fn refill_creates_for_the_asked_key_and_evicts_the_rest() {
    let key = pool_key(&config(), "scripted");
    let engine = Scripted::new(vec![member("a", &key, 1), member("old", "stale", 0)]);
    assert_eq!(refill(&engine, &config(), 3).expect("refill"), 2);
    assert_eq!(*engine.created.lock().expect("lock"), [key.clone(), key]);
    assert_eq!(*engine.removed.lock().expect("lock"), ["old"]);
    let none = Scripted { identity: None, ..Scripted::new(Vec::new()) };
    assert_eq!(refill(&none, &config(), 3).expect("refill"), 0, "an engine without a pool");
    assert_eq!(claim(&none, &config()).expect("claim"), None);
}

/// A listed member in the reconcile table: id, key, age in seconds.
type Listed = (&'static str, &'static str, u64);

/// Pure: the reconcile table, one line per case: the members (id:key:age in seconds), the
/// size, and the actions of the pass (ttl 1000 s: stale from 500 s).
#[test]
fn reconcile_table() {
    let cases: &[(&str, &[Listed], usize)] = &[
        ("empty pool fills", &[], 2),
        ("full pool does nothing", &[("a", "k", 10), ("b", "k", 20)], 2),
        ("a claimed member is refilled", &[("a", "k", 10)], 2),
        ("image changed: drain old, fill new", &[("a", "old", 10), ("b", "old", 20)], 2),
        ("stale replaced after its replacement", &[("a", "k", 600), ("b", "k", 20)], 2),
        ("exactly half the ttl is stale", &[("a", "k", 500)], 1),
        ("surplus goes, oldest first", &[("a", "k", 30), ("b", "k", 20), ("c", "k", 10)], 1),
        ("size 0 drains", &[("a", "k", 10), ("b", "other", 10)], 0),
        ("mixed", &[("s", "k", 900), ("o", "x", 5), ("f", "k", 1)], 3),
    ];
    let mut table = String::new();
    for (what, members, size) in cases {
        let members: Vec<PoolMember> =
            members.iter().map(|(id, key, age)| member(id, key, NOW - age)).collect();
        let actions = reconcile(&members, "k", *size, 1000, NOW);
        let shown: Vec<String> = actions
            .iter()
            .map(|a| match a {
                PoolAction::Create => "create".to_owned(),
                PoolAction::Remove { id, reason } => format!("remove {id} ({})", reason.as_str()),
            })
            .collect();
        let shown = if shown.is_empty() { "nothing".to_owned() } else { shown.join(", ") };
        table.push_str(&format!("{what} (size {size}): {shown}\n"));
    }
    insta::assert_snapshot!(table);
}

#[test]
fn serve_passes_keep_the_pool_at_its_size_through_claims() {
    let key = pool_key(&config(), "scripted");
    let engine = Scripted::new(vec![member("old", "stale-key", NOW)]);
    let mut log = Vec::new();
    let taken = serve_pass(&engine, &config(), 2, NOW, &mut |a| log.push(a.clone())).expect("pass");
    assert_eq!(taken, 3, "{log:?}");
    assert_eq!(*engine.removed.lock().expect("lock"), ["old"]);
    assert_eq!(candidates(&engine.pool_members_dyn().expect("members"), &key).len(), 2);
    let claimed = claim(&engine, &config()).expect("claim").expect("a member");
    assert_eq!(candidates(&engine.pool_members_dyn().expect("members"), &key).len(), 1);
    serve_pass(&engine, &config(), 2, NOW, &mut |_| {}).expect("pass");
    let members = engine.pool_members_dyn().expect("members");
    assert_eq!(candidates(&members, &key).len(), 2, "refilled to the size, not beyond");
    assert!(members.iter().all(|m| m.id != claimed.id), "a claimed member is not a member");
    assert_eq!(serve_pass(&engine, &config(), 2, NOW, &mut |_| {}).expect("pass"), 0, "steady");
    let none = Scripted { identity: None, ..Scripted::new(Vec::new()) };
    assert_eq!(serve_pass(&none, &config(), 2, NOW, &mut |_| {}).expect("pass"), 0);
}
