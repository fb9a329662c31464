//! `python-sandbox pool serve` through the binary on docker and podman: a pass fills the pool
//! to its size, refills what a `session start` claimed, drains members of a key the flags no
//! longer ask for; the loop follows a size edited in the user config; a second serve of the
//! same pool refuses to start, and a serve stopped by SIGTERM leaves its members. Each test has its own runtime directory (so its own pool
//! records and locks: nothing another test or CI run pooled is touched) and user config.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::Ctx;
use crate::session::available;

/// A user config giving `engine` a pool of 2, and a private runtime directory.
struct Pooled {
    dir: tempfile::TempDir,
    engine: String,
}

/// A failed assertion still drains the pool: its records go with the directory, its
/// containers would wait for their TTL.
impl Drop for Pooled {
    fn drop(&mut self) {
        let _ = Command::new(env!("CARGO_BIN_EXE_python-sandbox"))
            .args(["pool", "drain", "--engine", &self.engine])
            .current_dir("/")
            .envs(self.env())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Pooled {
    fn new(engine: &str) -> Pooled {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("config/python-sandbox")).expect("config dir");
        let run = dir.path().join("run");
        std::fs::create_dir(&run).expect("runtime dir");
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let pooled = Pooled { dir, engine: engine.to_owned() };
        pooled.write_config(engine, 2);
        pooled
    }

    fn write_config(&self, engine: &str, size: usize) {
        let path = self.dir.path().join("config/python-sandbox/config.toml");
        std::fs::write(path, format!("[engine.{engine}]\npool = {size}\n")).expect("config");
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("XDG_CONFIG_HOME", self.dir.path().join("config").display().to_string()),
            ("XDG_RUNTIME_DIR", self.dir.path().join("run").display().to_string()),
        ]
    }

    fn run(&self, ctx: &Ctx, args: &[&str]) -> std::process::Output {
        let env = self.env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        ctx.run_with_env(args, &env)
    }

    /// The ids of the pool's unclaimed members.
    fn members(&self, ctx: &Ctx, engine: &str) -> BTreeSet<String> {
        let out = self.run(ctx, &["pool", "list", "--engine", engine, "--json"]);
        assert!(out.status.success(), "{engine}: pool list: {}", text(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        json.as_array()
            .expect("an array")
            .iter()
            .map(|m| m["id"].as_str().expect("an id").to_owned())
            .collect()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn count(haystack: &[u8], needle: &str) -> usize {
    text(haystack).matches(needle).count()
}

// The `SKIPPED:` line is how a gated test says it did not run.
#[allow(clippy::print_stdout)]
fn serve_keeps_the_pool(engine: &str) {
    let ctx = Ctx::new();
    if let Err(reason) = available(&ctx, engine) {
        println!("SKIPPED: pool serve on {engine}: {reason}");
        return;
    }
    let pool = Pooled::new(engine);
    let once =
        |ttl: &str| pool.run(&ctx, &["pool", "serve", "--once", "--engine", engine, "--ttl", ttl]);

    let fill = once("10m");
    assert!(fill.status.success(), "{engine}: serve: {}", text(&fill.stderr));
    assert_eq!(count(&fill.stderr, "started a member"), 2, "{engine}: {}", text(&fill.stderr));
    let first = pool.members(&ctx, engine);
    assert_eq!(first.len(), 2, "{engine}");
    let steady = once("10m");
    assert_eq!(text(&steady.stderr), "", "{engine}: a full pool is left alone");

    // The same flags in the same directory claim what serve keeps; the pass refills.
    let start = pool.run(&ctx, &["session", "start", "--engine", engine, "--ttl", "10m"]);
    assert!(start.status.success(), "{engine}: start: {}", text(&start.stderr));
    let claimed = text(&start.stdout).trim().to_owned();
    assert!(first.contains(&claimed), "{engine}: {claimed} was not claimed from {first:?}");
    let refill = once("10m");
    assert!(refill.status.success(), "{engine}: serve: {}", text(&refill.stderr));
    let second = pool.members(&ctx, engine);
    assert_eq!(second.len(), 2, "{engine}: refilled to the size, not beyond: {second:?}");
    assert!(!second.contains(&claimed), "{engine}: a claimed member is never pooled again");
    let stop = pool.run(&ctx, &["session", "stop", &claimed]);
    assert!(stop.status.success(), "{engine}: stop: {}", text(&stop.stderr));

    // Other flags, another key: the old members go, new ones come (and `--json` says so).
    let changed =
        pool.run(&ctx, &["pool", "serve", "--once", "--json", "--engine", engine, "--ttl", "5m"]);
    assert!(changed.status.success(), "{engine}: serve: {}", text(&changed.stderr));
    let actions: Vec<(String, String)> = text(&changed.stdout)
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            assert_eq!(v["engine"], engine, "{line}");
            let what = v["action"].as_str().unwrap_or_default().to_owned();
            (what, v["reason"].as_str().unwrap_or_default().to_owned())
        })
        .collect();
    let removed = ("remove".to_owned(), "other-key".to_owned());
    let created = ("create".to_owned(), String::new());
    assert_eq!(actions, [removed.clone(), removed, created.clone(), created], "{engine}");
    assert_eq!(count(&changed.stderr, "its key is not the configured one"), 2, "{engine}");
    assert_eq!(count(&changed.stderr, "started a member"), 2, "{engine}");
    let third = pool.members(&ctx, engine);
    assert_eq!(third.len(), 2, "{engine}");
    assert!(third.is_disjoint(&second), "{engine}: {third:?} vs {second:?}");

    let drain = pool.run(&ctx, &["pool", "drain", "--engine", engine]);
    assert!(drain.status.success(), "{engine}: drain: {}", text(&drain.stderr));
    assert!(pool.members(&ctx, engine).is_empty(), "{engine}");
}

#[test]
fn serve_once_fills_refills_and_follows_the_flags_on_docker() {
    serve_keeps_the_pool("docker");
}

#[test]
fn serve_once_fills_refills_and_follows_the_flags_on_podman() {
    serve_keeps_the_pool("podman");
}

// The `SKIPPED:` line is how a gated test says it did not run.
#[allow(clippy::print_stdout)]
fn one_serve_per_pool(engine: &str) {
    let ctx = Ctx::new();
    if let Err(reason) = available(&ctx, engine) {
        println!("SKIPPED: pool serve lock on {engine}: {reason}");
        return;
    }
    let pool = Pooled::new(engine);
    let mut serve = Command::new(env!("CARGO_BIN_EXE_python-sandbox"));
    serve
        .args(["pool", "serve", "--engine", engine, "--ttl", "10m", "--interval", "1s"])
        .current_dir(ctx.path())
        .env("NO_COLOR", "1")
        .envs(pool.env())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut serving = Serving(Some(serve.spawn().expect("spawn pool serve")));
    let wait_for = |want: usize| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let members = pool.members(&ctx, engine);
            assert!(members.len() <= 2, "{engine}: never beyond the size: {members:?}");
            if members.len() == want || Instant::now() > deadline {
                return members;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let full = wait_for(2);
    assert_eq!(full.len(), 2, "{engine}: the loop filled the pool");

    let second = pool.run(&ctx, &["pool", "serve", "--once", "--engine", engine, "--ttl", "10m"]);
    assert!(!second.status.success(), "{engine}: a second serve of the same pool started");
    assert!(
        text(&second.stderr).contains("another `pool serve` already keeps the"),
        "{engine}: {}",
        text(&second.stderr)
    );

    // A claim while the loop serves: no detached refill of its own; the loop refills once.
    let start = pool.run(&ctx, &["session", "start", "--engine", engine, "--ttl", "10m"]);
    assert!(start.status.success(), "{engine}: start: {}", text(&start.stderr));
    let claimed = text(&start.stdout).trim().to_owned();
    assert!(full.contains(&claimed), "{engine}: {claimed} not from {full:?}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut refilled = pool.members(&ctx, engine);
    while (refilled.len() < 2 || refilled.contains(&claimed)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        refilled = pool.members(&ctx, engine);
    }
    assert_eq!(refilled.len(), 2, "{engine}: {refilled:?}");
    // A few more passes: still the size.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(pool.members(&ctx, engine), refilled, "{engine}: the pool kept still");

    // The size is read anew each pass: a smaller one removes the surplus, oldest first.
    pool.write_config(engine, 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut shrunk = pool.members(&ctx, engine);
    while shrunk.len() != 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        shrunk = pool.members(&ctx, engine);
    }
    assert_eq!(shrunk.len(), 1, "{engine}: {shrunk:?}");
    assert!(shrunk.is_subset(&refilled), "{engine}: nothing new for a smaller size");

    let child = serving.0.take().expect("still serving");
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{engine}: serve after SIGTERM: {}", text(&out.stderr));
    let log = text(&out.stderr);
    assert!(log.contains("the members stay"), "{engine}: {log}");
    assert_eq!(count(&out.stderr, "started a member"), 3, "{engine}: {log}");
    assert_eq!(count(&out.stderr, "(more members than the pool size)"), 1, "{engine}: {log}");
    assert_eq!(pool.members(&ctx, engine), shrunk, "{engine}: members outlive the loop");
    let _ = pool.run(&ctx, &["session", "stop", &claimed]);
    let drain = pool.run(&ctx, &["pool", "drain", "--engine", engine]);
    assert!(drain.status.success(), "{engine}: drain: {}", text(&drain.stderr));
}

/// The loop under test, killed when a failed assertion leaves it running.
struct Serving(Option<std::process::Child>);

impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn one_serve_per_pool_and_claims_are_refilled_once_on_docker() {
    one_serve_per_pool("docker");
}

#[test]
fn one_serve_per_pool_and_claims_are_refilled_once_on_podman() {
    one_serve_per_pool("podman");
}
