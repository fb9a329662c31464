//! The warm pool from the CLI's side (the decisions are `sandbox_core::pool`'s, the primitives
//! each engine's): `session start` claims a member when the user config gives its engine a
//! pool (`pool = N`), and then leaves a detached `python-sandbox pool fill` behind that starts
//! the replacements, so the claimer never waits for a sandbox start. `pool list` and
//! `pool drain` show and empty the pools. This module names no engine.
//!
//! The refill child gets the session's config as JSON on its stdin (never on its command line:
//! the environment may hold secrets), runs in its own process group (a Ctrl-C of the caller's
//! terminal does not stop it halfway) and fills under an exclusive per-engine lock, so refills
//! left by claims in quick succession create each missing member once.

use std::io::Write;
use std::process::{ExitCode, Stdio};

use anstream::println;
use anyhow::{Context, Result};
use sandbox_core::{DynSessionEngine, SessionConfig, SessionInfo};

use crate::args::PoolCmd;
use crate::registry;

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
    // Best effort: without the refill the next start is a cold one.
    let _ = spawn_fill(engine.session_engine_name(), size, config, options);
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

/// The per-engine fill lock, held while a refill lists and creates; `None` (fill unlocked)
/// when the lock file cannot be had.
fn fill_lock(engine: &str) -> Option<std::fs::File> {
    let uid = rustix::process::geteuid().as_raw();
    let base =
        reaper::hostfs::cache_base(&|n| std::env::var_os(n), std::path::Path::new("/tmp"), uid);
    let path = base.join("python-sandbox").join("pool").join(format!("fill-{engine}.lock"));
    reaper::lock_env(&path, reaper::LockMode::Exclusive).ok().flatten()
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
