//! `python-sandbox reap …` without an engine: argument errors come before any engine is touched.
//! The engine side (containers swept, environments pruned, `--dry-run --json`) is tested against
//! real docker and podman in engine-oci's integration tests.

use insta::assert_snapshot;

use crate::{Ctx, transcript};

#[test]
fn invalid_env_max_age_is_a_usage_error_with_a_hint() {
    let ctx = Ctx::new();
    assert_snapshot!(transcript(&ctx.run(&["reap", "--dry-run", "--env-max-age", "soon"])), @"
    exit: 2
    --- stdout
    --- stderr
    error: invalid --env-max-age `soon`
    hint: use `30d`, `12h`, `90m`, `45s`, or `0` for every environment not in use
    ");
}

#[test]
fn invalid_max_size_is_a_usage_error_with_a_hint() {
    let ctx = Ctx::new();
    assert_snapshot!(transcript(&ctx.run(&["reap", "--dry-run", "--max-size", "lots"])), @"
    exit: 2
    --- stdout
    --- stderr
    error: invalid --max-size `lots`
    hint: use `5GiB`, `500m`, `0` (everything not in use), or a number of bytes
    ");
}

/// The cache of native and bwrap over its cap, as a user sees it: `detect` says its size and
/// the user config's cap; `reap --max-size` lists the least recently used environment, then
/// the package it alone linked, and removes them; the package a newer environment links stays.
#[test]
fn the_cache_over_its_cap_loses_the_least_recently_used() {
    use std::time::{Duration, SystemTime};
    let ctx = Ctx::new();
    let home = ctx.path().join("home");
    let cache = home.join(".cache/python-sandbox/bwrap");
    let config = home.join(".config/python-sandbox");
    std::fs::create_dir_all(&config).expect("config dir");
    std::fs::write(config.join("config.toml"), "[cache]\nmax-size = \"1MiB\"\n").expect("config");
    let archive = cache.join("store/uv/archive-v0");
    let (old, new) = ("0a0a", "0b0b");
    let lib = |key: &str| cache.join("envs").join(key).join("lib");
    for dir in [archive.join("six"), archive.join("idna"), lib(old), lib(new), cache.join("locks")]
    {
        std::fs::create_dir_all(&dir).expect("mkdir");
    }
    std::fs::write(archive.join("six/six.py"), vec![b'6'; 600_000]).expect("six");
    std::fs::write(archive.join("idna/idna.py"), vec![b'i'; 600_000]).expect("idna");
    std::fs::hard_link(archive.join("six/six.py"), lib(old).join("six.py")).expect("link six");
    std::fs::hard_link(archive.join("idna/idna.py"), lib(new).join("idna.py")).expect("link");
    // Unpacked long ago: a package is as recent as the newest environment linking it.
    for package in ["six", "idna"] {
        let dir = std::fs::File::open(archive.join(package)).expect("open package");
        dir.set_modified(SystemTime::now() - Duration::from_secs(86_400)).expect("stamp");
    }
    for (key, age) in [(old, 7200), (new, 60)] {
        std::fs::write(cache.join("envs").join(format!("{key}.json")), "{}").expect("marker");
        let lock = cache.join("locks").join(format!("{key}.lock"));
        let file = std::fs::File::create(&lock).expect("lock");
        file.set_modified(SystemTime::now() - Duration::from_secs(age)).expect("stamp");
    }
    let home_env =
        [("HOME", home.to_str().expect("utf-8")), ("XDG_CACHE_HOME", ""), ("XDG_CONFIG_HOME", "")];

    let out = ctx.run_with_env(&["detect", "--json"], &home_env);
    let detect: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(detect["cache"]["max_bytes"], 1 << 20, "{detect}");
    assert!(detect["cache"]["bytes"].as_u64().expect("bytes") > 1_200_000, "{detect}");

    let listed = |args: &[&str]| -> Vec<(String, String)> {
        let out = ctx.run_with_env(args, &home_env);
        assert!(out.status.success(), "{}", transcript(&out));
        let items: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("json");
        items
            .iter()
            .filter(|i| i["kind"] != "acl")
            .map(|i| {
                let name = i["environment"].as_str().unwrap_or_default();
                let tail = name.rsplit('/').next().unwrap_or_default().to_owned();
                (i["kind"].as_str().unwrap_or_default().to_owned(), tail)
            })
            .collect()
    };
    let expected =
        [("environment".to_owned(), old.to_owned()), ("package".to_owned(), "six".to_owned())];
    assert_eq!(listed(&["reap", "--engine", "bwrap", "--dry-run", "--json"]), expected);
    assert!(lib(old).is_dir(), "a dry run removes nothing");
    assert_eq!(listed(&["reap", "--engine", "bwrap", "--json"]), expected);
    assert!(!lib(old).exists() && !archive.join("six").exists(), "removed");
    assert!(lib(new).join("idna.py").is_file() && archive.join("idna").is_dir(), "kept");
    // Nothing is left to remove under this cap, and `--max-size` beats the file.
    assert_eq!(listed(&["reap", "--engine", "bwrap", "--json"]), []);
    assert_eq!(
        listed(&["reap", "--engine", "bwrap", "--dry-run", "--json", "--max-size", "0"]).len(),
        2
    );
}
