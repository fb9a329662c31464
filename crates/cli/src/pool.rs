//! The warm pool from the CLI's side (the decisions are `sandbox_core::pool`'s, the primitives
//! each engine's): `session start` claims a member when the user config gives its engine a
//! pool (`pool = N`), and then leaves a detached `python-sandbox pool fill` behind that starts
//! the replacements, so the claimer never waits for a sandbox start. `pool list` and
//! `pool drain` show and empty the pools. This module names no engine.
//!
//! `pool serve` is the controller loop instead: each pass (under the same fill lock) lists a
//! pool and carries out `sandbox_core::pool::reconcile`'s actions for the config that
//! `session start` with the same flags in the same directory asks for. It holds a per-engine
//! serve lock for its whole life, so a second `pool serve` on the same pool refuses to start,
//! and a claim made while one serves leaves no detached refill (whose config, the claimer's,
//! would evict the served members): the next pass refills. A pool other hosts reach too (a
//! cluster's) is locked there as well (the engine's lease, `SessionEngine::pool_lease_take`):
//! taken at the start, renewed by every pass (a pass whose renewal finds another holder does
//! nothing), released on the way out.
//!
//! The refill child gets the session's config as JSON on its stdin (never on its command line:
//! the environment may hold secrets), runs in its own process group (a Ctrl-C of the caller's
//! terminal does not stop it halfway) and fills under an exclusive per-engine lock, so refills
//! left by claims in quick succession create each missing member once.

use std::io::Write;
use std::process::{ExitCode, Stdio};

use anstream::println;
use anyhow::{Context, Result};
use sandbox_core::pool::{PoolAction, RemoveReason};
use sandbox_core::{DynSessionEngine, SessionConfig, SessionInfo};

use crate::args::{PoolCmd, PoolServeArgs};
use crate::{registry, ui};

pub(crate) fn run(cmd: PoolCmd) -> Result<ExitCode> {
    match cmd {
        PoolCmd::List { json, engine, namespace } => {
            list(json, engine.as_deref(), namespace.as_deref())
        }
        PoolCmd::Drain { engine, namespace } => {
            let options = registry::Options::maintain(namespace.as_deref());
            let engine = open(&engine, &options)?;
            for member in engine.pool_members_dyn()? {
                engine.pool_remove_dyn(&member.id)?;
                println!("{}", member.id);
            }
            Ok(ExitCode::SUCCESS)
        }
        PoolCmd::Serve(args) => serve(&args),
        PoolCmd::Fill { engine, size, image, namespace } => {
            let config: SessionConfig = serde_json::from_reader(std::io::stdin().lock())
                .context("reading the session config of a pool refill")?;
            let options = registry::Options {
                image: image.as_deref(),
                namespace: namespace.as_deref(),
                script: None,
                purpose: registry::Purpose::Start,
                claims: &[],
            };
            let engine = open(&engine, &options)?;
            let _lock = fill_lock(engine.session_engine_name());
            sandbox_core::pool::refill(&*engine, &config, size)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn open(name: &str, options: &registry::Options<'_>) -> Result<Box<dyn DynSessionEngine>> {
    registry::select_sessions(Some(name), options)?
        .ok_or_else(|| anyhow::anyhow!("the {name} engine does not work here"))
}

/// The pool size the user config gives `engine` (0 when none, or the config is unreadable:
/// its error is reported by the commands that need it).
pub(crate) fn size_of(engine: &str) -> usize {
    crate::config::user().map_or(0, |user| user.pool(engine))
}

/// `session start`'s pool step on `engine`: a claimed member fitting `config`, or `None` to
/// start one the usual way. Either way a pooled engine gets a detached refill. A pool that
/// cannot be read is no reason to fail the start: it is passed over.
pub(crate) fn claim(
    engine: &dyn DynSessionEngine,
    config: &SessionConfig,
    options: &registry::Options<'_>,
) -> Option<SessionInfo> {
    let size = size_of(engine.session_engine_name());
    if size == 0 || engine.pool_identity_dyn().is_none() {
        return None;
    }
    let claimed = sandbox_core::pool::claim(engine, config).ok().flatten();
    // A controller on another host (the engine's lease) refills as well as one on this one.
    let elsewhere = || engine.pool_lease_holder_dyn().ok().flatten().is_some();
    if !serving(engine.session_engine_name()) && !elsewhere() {
        // Best effort: without the refill the next start is a cold one.
        let _ = spawn_fill(engine.session_engine_name(), size, config, options);
    }
    claimed
}

/// Leaves `python-sandbox pool fill` running on its own, the config on its stdin.
fn spawn_fill(
    engine: &str,
    size: usize,
    config: &SessionConfig,
    options: &registry::Options<'_>,
) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("finding this program")?;
    let mut command = std::process::Command::new(exe);
    command
        .current_dir("/")
        .args(["pool", "fill", "--engine", engine, "--size", &size.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    if let Some(image) = options.image {
        command.args(["--image", image]);
    }
    if let Some(namespace) = options.namespace {
        command.args(["--namespace", namespace]);
    }
    let mut child = command.spawn().context("starting the pool refill")?;
    let json = serde_json::to_vec(config).context("encoding the session config")?;
    if let Some(mut stdin) = child.stdin.take() {
        // A few hundred bytes: the pipe's buffer takes them without waiting for the child.
        stdin.write_all(&json).context("handing the refill its config")?;
    }
    // A long-lived caller (the MCP server) reaps it; a CLI exits first and init does.
    std::thread::spawn(move || child.wait());
    Ok(())
}

/// The per-engine fill lock, held while a refill or a serve pass lists and creates; `None`
/// (fill unlocked) when the lock file cannot be had.
fn fill_lock(engine: &str) -> Option<std::fs::File> {
    reaper::lock_env(&lock_path("fill", engine), reaper::LockMode::Exclusive).ok().flatten()
}

/// This user's lock file `pool-<what>-<engine>.lock`: in the runtime directory, beside the
/// pool records of docker and podman (so one `XDG_RUNTIME_DIR` is one pool), else the cache.
fn lock_path(what: &str, engine: &str) -> std::path::PathBuf {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(crate::registry::cache_base);
    base.join("python-sandbox").join("locks").join(format!("pool-{what}-{engine}.lock"))
}

/// Whether a `pool serve` keeps `engine`'s pool (it holds the serve lock exclusive).
fn serving(engine: &str) -> bool {
    matches!(reaper::lock_env(&lock_path("serve", engine), reaper::LockMode::TryShared), Ok(None))
}

/// The serve lock of `engine`, for the life of a `pool serve`. A claimer's look at it (a
/// shared lock for an instant) is waited out; another serve holding it is an error.
fn serve_lock(engine: &str) -> Result<std::fs::File> {
    let path = lock_path("serve", engine);
    for _ in 0..40 {
        if let Some(file) = reaper::lock_env(&path, reaper::LockMode::TryExclusive)? {
            return Ok(file);
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    Err(ui::hinted(
        format!("another `pool serve` already keeps the {engine} pool"),
        "one controller per pool: stop the other, or serve another engine with `--engine`",
    ))
}

/// `pool serve`: see the module header.
fn serve(args: &PoolServeArgs) -> Result<ExitCode> {
    let interval = crate::session::parse_ttl(&args.interval).ok_or_else(|| {
        ui::hinted(
            format!("invalid interval `{}`", args.interval),
            "use seconds or a suffix: `5s`, `1m`",
        )
    })?;
    let planned = crate::session::plan(&args.shape)?;
    if !planned.crossings.is_empty() && !args.shape.approve {
        return Ok(crate::spec::refuse(&planned.crossings, crate::spec::Subject::Session, false));
    }
    let config = planned.config();
    let names: Vec<&str> = match &args.engine {
        Some(name) => vec![name.as_str()],
        None => registry::session_choices().into_iter().filter(|n| size_of(n) > 0).collect(),
    };
    if names.is_empty() {
        return Err(ui::hinted(
            "no engine has a pool to serve",
            "set `pool = N` under `[engine.docker]`, `[engine.podman]` or `[engine.k8s]` in ~/.config/python-sandbox/config.toml, or name one with `--engine`",
        ));
    }
    let mut locks = Vec::new();
    for name in &names {
        locks.push(serve_lock(name)?);
    }
    // A pool every host reaches (a cluster's) has its lock there too: taken now, renewed by
    // each pass, given up on the way out.
    let holder = holder_identity();
    let ttl = lease_ttl(interval);
    let options = registry::Options {
        image: args.shape.container.image.as_deref(),
        namespace: args.shape.namespace.as_deref(),
        script: None,
        purpose: registry::Purpose::Start,
        claims: &[],
    };
    for name in &names {
        let taken = open(name, &options).and_then(|e| Ok(e.pool_lease_take_dyn(&holder, ttl)?));
        if let Ok(sandbox_core::PoolLease::HeldBy(other)) = taken {
            release_leases(&names, &options, &holder);
            return Err(ui::hinted(
                format!("another `pool serve` ({other}) already keeps the {name} pool"),
                "one controller per pool, across hosts: stop the other, or serve another engine with `--engine`",
            ));
        }
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // A second signal while a pass is under way ends the process at once.
        signal_hook::flag::register_conditional_shutdown(signal, 130, stop.clone())?;
        signal_hook::flag::register(signal, stop.clone())?;
    }
    let stopped = || stop.load(std::sync::atomic::Ordering::Relaxed);
    let log = Log { json: args.json };
    loop {
        let mut failed = false;
        for name in &names {
            if stopped() {
                break;
            }
            // Opened anew each pass, so a restarted engine is picked up; the size is read anew
            // too, and an unreadable config fails the pass rather than draining the pool.
            let pass = open(name, &options).and_then(|engine| {
                if engine.pool_identity_dyn().is_none() {
                    anyhow::bail!("the {name} engine has no pool");
                }
                match engine.pool_lease_take_dyn(&holder, ttl)? {
                    sandbox_core::PoolLease::HeldBy(other) => {
                        anyhow::bail!("the pool's lease is {other}'s now; this loop waits for it")
                    }
                    sandbox_core::PoolLease::Held | sandbox_core::PoolLease::Local => {}
                }
                let _fill = fill_lock(name);
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                let size = crate::config::user_now()?.pool(name);
                let mut done = |action: &PoolAction| log.action(name, action);
                Ok(sandbox_core::pool::serve_pass(&*engine, &config, size, now, &mut done)?)
            });
            if let Err(e) = pass {
                log.error(name, &e);
                failed = true;
            }
        }
        if args.once {
            release_leases(&names, &options, &holder);
            return Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS });
        }
        let until = std::time::Instant::now() + interval;
        while !stopped() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        if stopped() {
            eprintln!(
                "pool serve: stopped; the members stay (`python-sandbox pool drain` removes them)"
            );
            release_leases(&names, &options, &holder);
            drop(locks);
            return Ok(ExitCode::SUCCESS);
        }
    }
}

/// Who holds a pool's lease: this host and process (nothing secret; what `kubectl get lease`
/// shows an operator looking for the loop).
fn holder_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = host.trim();
    format!("{}/{}", if host.is_empty() { "localhost" } else { host }, std::process::id())
}

/// Pure: how long a pool's lease outlives its last renewal: three passes, at least 30 s (a
/// pass may take a while: it starts pods).
fn lease_ttl(interval: std::time::Duration) -> std::time::Duration {
    (interval * 3).max(std::time::Duration::from_secs(30))
}

/// Gives up the leases `holder` holds on `names`' pools (best effort: an unreleased lease
/// expires by itself).
fn release_leases(names: &[&str], options: &registry::Options<'_>, holder: &str) {
    for name in names {
        if let Ok(engine) = open(name, options) {
            let _ = engine.pool_lease_release_dyn(holder);
        }
    }
}

/// `pool serve`'s output: a line per action on stderr, and with `--json` a JSON object per
/// action on stdout too.
struct Log {
    json: bool,
}

impl Log {
    fn action(&self, engine: &str, action: &PoolAction) {
        match action {
            PoolAction::Create => eprintln!("pool {engine}: started a member"),
            PoolAction::Remove { id, reason } => {
                eprintln!("pool {engine}: removed {id} ({})", reason.as_str());
            }
        }
        if self.json {
            let line = match action {
                PoolAction::Create => serde_json::json!({ "engine": engine, "action": "create" }),
                PoolAction::Remove { id, reason } => serde_json::json!({
                    "engine": engine,
                    "action": "remove",
                    "id": id,
                    "reason": match reason {
                        RemoveReason::OtherKey => "other-key",
                        RemoveReason::Stale => "stale",
                        RemoveReason::Surplus => "surplus",
                    },
                }),
            };
            println!("{line}");
        }
    }

    fn error(&self, engine: &str, e: &anyhow::Error) {
        eprintln!("pool {engine}: error: {e:#}");
        if self.json {
            println!("{}", serde_json::json!({ "engine": engine, "error": format!("{e:#}") }));
        }
    }
}

fn list(json: bool, engine: Option<&str>, namespace: Option<&str>) -> Result<ExitCode> {
    let names: Vec<&str> = match engine {
        Some(name) => vec![name],
        None => registry::session_choices().into_iter().filter(|n| size_of(n) > 0).collect(),
    };
    let mut rows = Vec::new();
    for name in names {
        let engine = open(name, &registry::Options::maintain(namespace))?;
        for member in engine.pool_members_dyn()? {
            rows.push((name, member));
        }
    }
    if json {
        let items: Vec<serde_json::Value> = rows
            .iter()
            .map(|(engine, m)| {
                serde_json::json!({ "engine": engine, "id": m.id, "key": m.key, "created": m.created })
            })
            .collect();
        println!("{}", serde_json::Value::Array(items));
    } else {
        for (engine, m) in &rows {
            println!("{engine}\t{}\t{}", m.id, &m.key[..m.key.len().min(12)]);
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn a_lease_outlives_three_passes_and_at_least_half_a_minute() {
        assert_eq!(super::lease_ttl(Duration::from_secs(5)), Duration::from_secs(30));
        assert_eq!(super::lease_ttl(Duration::from_secs(20)), Duration::from_secs(60));
        let holder = super::holder_identity();
        assert!(holder.ends_with(&format!("/{}", std::process::id())), "{holder}");
    }
}
