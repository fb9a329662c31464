//! Pruning prepared environments: an aged one goes (marker, directory and lock file) and is
//! rebuilt on its next use; a dry run only reports; one a run holds stays. A private cache dir
//! keeps these stamps away from the other tests' shared cache.

use std::time::{Duration, SystemTime};

use engine_bwrap::prune_envs;

use crate::support::{fixture, own_cache, run_prepared};

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
    let (cache, engine) = own_cache(&fx);
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

    assert!(
        prune_envs(cache.path(), MONTH, None, false).expect("prune").is_empty(),
        "fresh env chosen"
    );

    age();
    let pruned = settled(|| prune_envs(cache.path(), MONTH, None, true).expect("dry run"));
    assert_eq!(pruned.len(), 1, "{pruned:?}");
    assert!(!pruned[0].removed && pruned[0].reason.starts_with("unused for 60 d"), "{pruned:?}");
    assert!(dir.is_dir() && marker.is_file(), "a dry run removed something");

    // A run holds its environment for as long as it uses it.
    let held = engine.prepare(&spec, &mut |_| {}).expect("warm prepare");
    assert!(!held.fresh);
    age();
    let pruned = prune_envs(cache.path(), MONTH, None, false).expect("prune");
    assert!(
        pruned
            .iter()
            .all(|p| !p.removed && p.error.as_deref().is_some_and(|e| e.contains("in use"))),
        "{pruned:?}"
    );
    assert!(dir.is_dir() && marker.is_file(), "held env removed");
    drop(held);

    let pruned = settled(|| prune_envs(cache.path(), MONTH, None, false).expect("prune"));
    assert!(pruned.len() == 1 && pruned[0].removed, "{pruned:?}");
    assert!(!dir.exists() && !marker.exists() && !lock.exists(), "leftovers");

    let env = engine.prepare(&spec, &mut |_| {}).expect("prepare again");
    assert!(env.fresh, "a pruned env must be rebuilt");
    let (outcome, captured) = run_prepared(&engine, &spec, &env);
    outcome.expect("run");
    assert_eq!(captured.stdout_lossy(), "hi\n");
    drop(env);
    // Zero: every environment not in use.
    let pruned = prune_envs(cache.path(), Duration::ZERO, None, false).expect("prune all");
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
    let listed = prune_envs(cache.path(), MONTH, None, true).expect("dry run");
    let mut reasons: Vec<&str> = listed.iter().map(|p| p.reason.as_str()).collect();
    reasons.sort_unstable();
    assert_eq!(reasons, ["an interrupted install", "the package cache of an older version"]);
    assert!(legacy.is_dir() && interrupted.is_dir(), "a dry run removes nothing");
    let pruned = prune_envs(cache.path(), MONTH, None, false).expect("prune");
    assert!(pruned.iter().all(|p| p.removed), "{pruned:?}");
    assert!(!bwrap.join("uv-cache").exists());
    assert!(!bwrap.join("store/building/0123abcd").exists());
    assert_eq!(prune_envs(cache.path(), MONTH, None, false).expect("again").len(), 0);
}

/// Over its size cap the cache loses its least recently used environment first; a package goes
/// once no environment links it, never while a run's environment does; a removed package is
/// fetched again by the next prepare that needs it. The size is each file once: environments
/// are hard links into the package cache.
#[test]
fn over_its_cap_the_least_recently_used_go_and_what_a_run_holds_stays() {
    let Some(fx) = fixture() else { return };
    let (cache, engine) = own_cache(&fx);
    let mut old = fx.spec("import six\nprint(six.PY3)\n");
    old.dependencies = vec!["six".to_owned()];
    let mut new = fx.spec("import idna\nprint(idna.encode('a.b').decode())\n");
    new.dependencies = vec!["idna>=3".to_owned()];
    let old_env = engine.prepare(&old, &mut |_| {}).expect("prepare six");
    let old_key = old_env.key.clone();
    drop(old_env);
    let held = engine.prepare(&new, &mut |_| {}).expect("prepare idna");
    let lock = cache.path().join("bwrap/locks").join(format!("{old_key}.lock"));
    let file = std::fs::File::options().write(true).open(&lock).expect("lock file");
    file.set_modified(SystemTime::now() - Duration::from_secs(7200)).expect("set mtime");

    let size = engine_bwrap::cache_usage(cache.path(), true).expect("usage").bytes;
    assert!(size > 0);
    let archive = cache.path().join("bwrap/store/uv/archive-v0");
    let packages = || std::fs::read_dir(&archive).map(|d| d.count()).unwrap_or(0);
    assert_eq!(packages(), 2, "six and idna unpacked once each");

    // Just over: the older environment goes; its package stays (removing it was not needed).
    let pruned = settled(|| prune_envs(cache.path(), MONTH, Some(size - 1), true).expect("dry"));
    let listed: Vec<(&str, bool)> = pruned.iter().map(|p| (p.kind, p.removed)).collect();
    assert_eq!(listed, [("environment", false)], "{pruned:?}");
    assert!(pruned[0].dir.ends_with(&old_key), "{pruned:?}");
    assert!(pruned[0].reason.starts_with("least recently used, the cache is"), "{pruned:?}");

    // Nothing allowed: all that no run holds, six's package once its environment is gone;
    // idna's package stays while the held environment links it.
    let pruned = prune_envs(cache.path(), MONTH, Some(0), false).expect("prune");
    let listed: Vec<(&str, bool)> = pruned.iter().map(|p| (p.kind, p.removed)).collect();
    assert_eq!(listed, [("environment", true), ("package", true)], "{pruned:?}");
    assert_eq!(packages(), 1, "idna's package stays");
    assert!(held.dir.join("bin/python").exists(), "the held environment stays");
    let after = engine_bwrap::cache_usage(cache.path(), true).expect("usage");
    assert!(after.bytes < size, "{} then {}", size, after.bytes);

    // six comes back from the index. (The fixture has one script file: write six's again.)
    let old = sandbox_core::RunSpec {
        dependencies: old.dependencies.clone(),
        ..fx.spec("import six\nprint(six.PY3)\n")
    };
    let env = engine.prepare(&old, &mut |_| {}).expect("prepare six again");
    assert!(env.fresh);
    let (outcome, captured) = run_prepared(&engine, &old, &env);
    let outcome = outcome.expect("run");
    let shown = (outcome.exit_code, captured.stdout_lossy(), captured.stderr_lossy());
    assert_eq!((shown.0, shown.1.as_str()), (0, "True\n"), "{}", shown.2);
    drop(held);
}
