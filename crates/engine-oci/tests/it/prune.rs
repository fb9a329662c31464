//! Pruning environment volumes on real engines: an aged environment goes (marker and volume, and
//! its lock file), a dry run only reports, and one that a container references or a run holds
//! locked stays. Each test uses its own cache dir (its own stamps and locks) and a unique
//! `requires-python`, so it only ever ages, and so only ever prunes, its own environment.

use std::path::Path;
use std::time::{Duration, SystemTime};

use engine_oci::{OciConfig, OciEngine, PrunedEnv};

use crate::support::{engines, name, spec, workspace};

const MONTH: Duration = Duration::from_secs(30 * 86_400);

fn volume_exists(engine: &OciEngine, volume: &str) -> bool {
    std::process::Command::new(name(engine))
        .args(["volume", "inspect", volume])
        .output()
        .expect("volume inspect")
        .status
        .success()
}

/// An engine like `base` with a private cache dir.
fn private(base: &OciEngine, cache: &Path) -> OciEngine {
    let mut config: OciConfig = base.config().clone();
    config.cache_dir = cache.to_owned();
    config.sweep_on_start = false;
    OciEngine::new(config).expect("engine")
}

fn age(cache: &Path, volume: &str, by: Duration) {
    let lock = cache.join("oci/locks").join(format!("{volume}.lock"));
    let file = std::fs::File::options().write(true).open(&lock).expect("lock file exists");
    file.set_modified(SystemTime::now() - by).expect("set mtime");
}

/// Prepares an environment of its own (a `requires-python` no other test or run uses, per
/// process, engine and `test`) and returns the spec, its volume and the volume's marker.
fn prepared(engine: &OciEngine, ws: &Path, test: u32) -> (sandbox_core::RunSpec, String, String) {
    let mut spec = spec(ws);
    let podman = u32::from(name(engine) == "podman");
    let nonce = format!("!=3.{test}.{}", std::process::id() * 1000 + podman);
    spec.requires_python = Some(format!(">=3.8,{nonce}"));
    let env = engine.prepare(&spec, &mut |_| {}).expect("prepare");
    let volume = env.volume.clone().expect("an env volume");
    let marker = format!("{volume}-ready");
    (spec, volume, marker)
}

fn find<'a>(pruned: &'a [PrunedEnv], volume: &str) -> Option<&'a PrunedEnv> {
    pruned.iter().find(|p| p.volume == volume)
}

#[test]
fn aged_env_is_pruned_marker_and_volume_and_rebuilt_on_next_use() {
    for base in engines() {
        let cache = tempfile::tempdir().expect("cache");
        let engine = private(&base, cache.path());
        let who = name(&engine);
        let (_dir, ws) = workspace("print('hi')\n");
        let (spec, volume, marker) = prepared(&engine, &ws, 0);
        assert!(volume_exists(&engine, &volume) && volume_exists(&engine, &marker), "{who}");

        // Used just now: not stale under the default age.
        let pruned = engine.prune_envs(MONTH, true).expect("prune");
        assert!(find(&pruned, &volume).is_none(), "{who}: fresh env chosen: {pruned:?}");

        age(cache.path(), &volume, MONTH + Duration::from_secs(86_400));
        let pruned = engine.prune_envs(MONTH, true).expect("dry run");
        let chosen = find(&pruned, &volume).unwrap_or_else(|| panic!("{who}: {pruned:?}"));
        assert!(
            !chosen.removed && chosen.reason.starts_with("unused for 31 d"),
            "{who}: {chosen:?}"
        );
        assert!(volume_exists(&engine, &volume) && volume_exists(&engine, &marker), "{who}");

        let pruned = engine.prune_envs(MONTH, false).expect("prune");
        let chosen = find(&pruned, &volume).unwrap_or_else(|| panic!("{who}: {pruned:?}"));
        assert!(chosen.removed, "{who}: {chosen:?}");
        assert!(!volume_exists(&engine, &marker), "{who}: marker left");
        assert!(!volume_exists(&engine, &volume), "{who}: volume left");
        let lock = cache.path().join("oci/locks").join(format!("{volume}.lock"));
        assert!(!lock.exists(), "{who}: lock file left");

        // The next use rebuilds it, and that one is fresh again.
        let env = engine.prepare(&spec, &mut |_| {}).expect("prepare again");
        assert!(env.fresh, "{who}: a pruned env must be rebuilt");
        drop(env);
        age(cache.path(), &volume, MONTH * 2);
        let pruned = engine.prune_envs(MONTH, false).expect("cleanup");
        assert!(find(&pruned, &volume).is_some_and(|p| p.removed), "{who}: {pruned:?}");
    }
}

#[test]
fn env_in_use_or_locked_is_kept() {
    for base in engines() {
        let cache = tempfile::tempdir().expect("cache");
        let engine = private(&base, cache.path());
        let who = name(&engine);
        let (_dir, ws) = workspace("print('hi')\n");
        let (spec, volume, marker) = prepared(&engine, &ws, 1);

        // Locked: a run between its warm check and its container holds the lock shared.
        let held = engine.prepare(&spec, &mut |_| {}).expect("warm prepare");
        assert!(!held.fresh, "{who}");
        age(cache.path(), &volume, MONTH * 2);
        let pruned = engine.prune_envs(MONTH, false).expect("prune");
        let chosen = find(&pruned, &volume).unwrap_or_else(|| panic!("{who}: {pruned:?}"));
        assert!(!chosen.removed, "{who}: {chosen:?}");
        assert!(chosen.error.as_deref().is_some_and(|e| e.contains("lock")), "{who}: {chosen:?}");
        assert!(volume_exists(&engine, &volume) && volume_exists(&engine, &marker), "{who}");
        drop(held);

        // Referenced by a container (any state): never chosen, and the engine would refuse.
        let container = format!("python-sandbox-prune-test-{}-{who}", std::process::id());
        let created = std::process::Command::new(who)
            .args(["create", "--name", &container, "-v", &format!("{volume}:/env:ro")])
            .arg(engine.config().image.as_str())
            .arg("true")
            .output()
            .expect("create");
        assert!(created.status.success(), "{who}: {}", String::from_utf8_lossy(&created.stderr));
        age(cache.path(), &volume, MONTH * 2);
        let pruned = engine.prune_envs(MONTH, false);
        let _ = std::process::Command::new(who).args(["rm", "-f", &container]).output();
        let pruned = pruned.expect("prune");
        assert!(find(&pruned, &volume).is_none(), "{who}: in-use env chosen: {pruned:?}");
        assert!(volume_exists(&engine, &volume) && volume_exists(&engine, &marker), "{who}");

        // Free again: it goes.
        let pruned = engine.prune_envs(MONTH, false).expect("cleanup");
        assert!(find(&pruned, &volume).is_some_and(|p| p.removed), "{who}: {pruned:?}");
        assert!(!volume_exists(&engine, &volume) && !volume_exists(&engine, &marker), "{who}");
    }
}

/// The CLI end to end: `reap --dry-run --json` lists an aged environment without removing it,
/// `reap --json` removes it. `XDG_CACHE_HOME` points the CLI at this test's stamps.
#[test]
fn cli_reap_reports_and_prunes_envs() {
    let Some(bin) = crate::support::cli_binary() else {
        println!("SKIPPED: python-sandbox binary not built (cargo build -p cli)");
        return;
    };
    for base in engines() {
        let xdg = tempfile::tempdir().expect("xdg cache");
        let cache = xdg.path().join("python-sandbox");
        let engine = private(&base, &cache);
        let who = name(&engine);
        let (_dir, ws) = workspace("print('hi')\n");
        let mut spec = spec(&ws);
        let nonce = format!("!=3.2.{}", std::process::id() * 1000 + u32::from(who == "podman"));
        spec.requires_python = Some(format!(">=3.8,{nonce}"));
        let volume = engine.prepare(&spec, &mut |_| {}).expect("prepare").volume.expect("volume");
        age(&cache, &volume, MONTH * 2);
        let reap = |extra: &[&str]| -> Vec<serde_json::Value> {
            let out = std::process::Command::new(&bin)
                .args(["reap", "--json", "--engine", who])
                .args(extra)
                .env("XDG_CACHE_HOME", xdg.path())
                .output()
                .expect("cli");
            assert!(out.status.success(), "{who}: {}", String::from_utf8_lossy(&out.stderr));
            let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
            json.as_array().expect("an array").clone()
        };
        let ours = |items: &[serde_json::Value]| {
            items.iter().find(|i| i["environment"] == volume.as_str()).cloned()
        };
        let dry = reap(&["--dry-run"]);
        let item = ours(&dry).unwrap_or_else(|| panic!("{who}: not listed: {dry:?}"));
        assert_eq!(item["kind"], "environment", "{who}: {item}");
        assert_eq!(item["removed"], false, "{who}: {item}");
        assert!(volume_exists(&engine, &volume), "{who}: a dry run removed it");
        let done = reap(&[]);
        let item = ours(&done).unwrap_or_else(|| panic!("{who}: not listed: {done:?}"));
        assert_eq!(item["removed"], true, "{who}: {item}");
        assert!(!volume_exists(&engine, &volume), "{who}: still there");
    }
}
