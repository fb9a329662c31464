//! Pruning prepared environments: an aged one goes (marker, directory and lock file) and is
//! rebuilt on its next use; a dry run only reports; one a run holds stays. A private cache dir
//! keeps these stamps away from the other tests' shared cache.

use std::time::{Duration, SystemTime};

use engine_bwrap::{BwrapConfig, BwrapEngine, prune_envs};

use crate::support::fixture;

const MONTH: Duration = Duration::from_secs(30 * 86_400);

/// `prune` once no other thread's child still holds a copy of a just-released lock: a bwrap
/// that another test forks inherits every descriptor until its exec closes them, so for a few
/// milliseconds a released environment can still look in use. (The CLI forks nothing while it
/// prunes.) Gives up after 2 s and returns the last answer.
fn settled(prune: impl Fn() -> Vec<engine_bwrap::PrunedEnv>) -> Vec<engine_bwrap::PrunedEnv> {
    let mut last = prune();
    for _ in 0..100 {
        if last.iter().all(|p| p.error.as_deref().is_none_or(|e| !e.contains("in use")))
            && !last.is_empty()
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        last = prune();
    }
    last
}

#[test]
fn aged_env_is_pruned_unless_held_and_rebuilt_on_next_use() {
    let Some(fx) = fixture() else { return };
    let cache = tempfile::tempdir().expect("cache");
    let config = BwrapConfig { cache_dir: cache.path().to_owned(), ..fx.engine.config().clone() };
    let engine = BwrapEngine::new(config).expect("engine");
    let spec = fx.spec("print('hi')\n");
    let env = engine.prepare(&spec, &mut |_| {}).expect("prepare");
    let (dir, key) = (env.dir.clone(), env.key.clone());
    drop(env);
    let lock = cache.path().join("bwrap/locks").join(format!("{key}.lock"));
    let marker = cache.path().join("bwrap/envs").join(format!("{key}.json"));
    let age = || {
        let file = std::fs::File::options().write(true).open(&lock).expect("lock file");
        file.set_modified(SystemTime::now() - MONTH * 2).expect("set mtime");
    };

    assert!(prune_envs(cache.path(), MONTH, false).expect("prune").is_empty(), "fresh env chosen");

    age();
    let pruned = settled(|| prune_envs(cache.path(), MONTH, true).expect("dry run"));
    assert_eq!(pruned.len(), 1, "{pruned:?}");
    assert!(!pruned[0].removed && pruned[0].reason.starts_with("unused for 60 d"), "{pruned:?}");
    assert!(dir.is_dir() && marker.is_file(), "a dry run removed something");

    // A run holds its environment for as long as it uses it.
    let held = engine.prepare(&spec, &mut |_| {}).expect("warm prepare");
    assert!(!held.fresh);
    age();
    let pruned = prune_envs(cache.path(), MONTH, false).expect("prune");
    assert!(
        pruned
            .iter()
            .all(|p| !p.removed && p.error.as_deref().is_some_and(|e| e.contains("in use"))),
        "{pruned:?}"
    );
    assert!(dir.is_dir() && marker.is_file(), "held env removed");
    drop(held);

    let pruned = settled(|| prune_envs(cache.path(), MONTH, false).expect("prune"));
    assert!(pruned.len() == 1 && pruned[0].removed, "{pruned:?}");
    assert!(!dir.exists() && !marker.exists() && !lock.exists(), "leftovers");

    let env = engine.prepare(&spec, &mut |_| {}).expect("prepare again");
    assert!(env.fresh, "a pruned env must be rebuilt");
    let out = {
        let mut captured = sandbox_core::Captured::default();
        let io = sandbox_core::RunIo {
            stdin: sandbox_core::Stdin::Null,
            output: sandbox_core::Output::Sink(&mut captured),
            status: None,
            published: None,
        };
        engine.run_prepared(&spec, &env, io).expect("run");
        captured.stdout_lossy()
    };
    assert_eq!(out, "hi\n");
    drop(env);
    // Zero: every environment not in use.
    let pruned = prune_envs(cache.path(), Duration::ZERO, false).expect("prune all");
    assert!(pruned.len() == 1 && pruned[0].removed, "{pruned:?}");
}

/// What no environment uses is removed too: the uv cache of versions before the package store,
/// and an environment an install was interrupted in (its lock free); a dry run only lists them.
#[test]
fn leftovers_of_older_versions_and_interrupted_installs_go() {
    let cache = tempfile::tempdir().expect("cache");
    let bwrap = cache.path().join("bwrap");
    let legacy = bwrap.join("uv-cache/wheels-v5");
    let interrupted = bwrap.join("store/building/0123abcd/lib");
    for dir in [&legacy, &interrupted] {
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    let listed = prune_envs(cache.path(), MONTH, true).expect("dry run");
    let mut reasons: Vec<&str> = listed.iter().map(|p| p.reason.as_str()).collect();
    reasons.sort_unstable();
    assert_eq!(reasons, ["an interrupted install", "the package cache of an older version"]);
    assert!(legacy.is_dir() && interrupted.is_dir(), "a dry run removes nothing");
    let pruned = prune_envs(cache.path(), MONTH, false).expect("prune");
    assert!(pruned.iter().all(|p| p.removed), "{pruned:?}");
    assert!(!bwrap.join("uv-cache").exists());
    assert!(!bwrap.join("store/building/0123abcd").exists());
    assert_eq!(prune_envs(cache.path(), MONTH, false).expect("again").len(), 0);
}
