//! What every example shares: `--engine` parsing and a session started in a throwaway
//! workspace, handed to the example's body and stopped afterwards: on success, on error and
//! on Ctrl-C (SIGINT, SIGTERM, SIGHUP). A body is generic over the engine's `Sandbox` and the
//! `Executor` that drives its futures, so wiring another session engine is one match arm in
//! [`with_session`].

// Examples talk to their user on stderr.
#![allow(clippy::print_stderr)]

use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use sandbox_core::{Executor, Net, Publish, Sandbox, SessionConfig, SessionEngine, SessionInfo};

/// A session engine the examples can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EngineChoice {
    K8s,
    Docker,
    Podman,
    Bwrap,
}

impl std::str::FromStr for EngineChoice {
    type Err = anyhow::Error;

    fn from_str(name: &str) -> Result<EngineChoice> {
        Ok(match name {
            "k8s" => EngineChoice::K8s,
            "docker" => EngineChoice::Docker,
            "podman" => EngineChoice::Podman,
            "bwrap" => EngineChoice::Bwrap,
            other => bail!("unknown engine `{other}`\nhint: use one of k8s, docker, podman, bwrap"),
        })
    }
}

/// Pure: `--engine NAME` (or `--engine=NAME`) taken out of `args`; bwrap when absent.
pub(crate) fn take_engine(args: &mut Vec<String>) -> Result<EngineChoice> {
    let mut choice = None;
    let mut i = 0;
    while i < args.len() {
        if let Some(name) = args[i].strip_prefix("--engine=") {
            choice = Some(name.parse()?);
            args.remove(i);
        } else if args[i] == "--engine" {
            let Some(name) = args.get(i + 1) else { bail!("`--engine` needs a value") };
            choice = Some(name.parse()?);
            args.drain(i..i + 2);
        } else {
            i += 1;
        }
    }
    Ok(choice.unwrap_or(EngineChoice::Bwrap))
}

/// What an example does with its running session.
pub(crate) trait Body {
    type Output;

    /// Runs against `sandbox`, whose futures `executor` drives; `info` has the session's
    /// published ports and the workspace is `workspace` (a path inside the sandbox too).
    fn run<S: Sandbox, X: Executor>(
        self,
        sandbox: &S,
        executor: &X,
        info: &SessionInfo,
        workspace: &str,
    ) -> Result<Self::Output>;
}

/// The session settings of an example: a fresh workspace, the network only when a port is
/// published (docker and podman publish nothing without one), a short idle TTL as the last
/// line of cleanup should this process be killed with SIGKILL.
pub(crate) fn session_config(workspace: &std::path::Path, publish: &[u16]) -> SessionConfig {
    SessionConfig {
        workspace: workspace.to_owned(),
        mounts: Vec::new(),
        net: if publish.is_empty() { Net::Off } else { Net::On },
        allow: None,
        // `0:PORT`: any free host port, so two examples never collide.
        publish: publish
            .iter()
            .map(|&port| Publish { host_port: sandbox_core::HostPort::Any, ..Publish::same(port) })
            .collect(),
        env: Vec::new(),
        ttl: Duration::from_secs(15 * 60),
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        limits: sandbox_core::Limits::NONE,
    }
}

/// Starts a session on `choice` in a new temporary workspace, runs `body` in it, and stops it.
pub(crate) fn with_session<B: Body>(
    choice: EngineChoice,
    publish: &[u16],
    body: B,
) -> Result<B::Output> {
    let workspace = tempfile::Builder::new()
        .prefix("psbx-example-")
        .tempdir()
        .context("creating the example's workspace")?;
    // The real path: engines mount the workspace at itself and refuse links.
    let path = workspace.path().canonicalize().context("resolving the workspace")?;
    let config = session_config(&path, publish);
    match choice {
        EngineChoice::Bwrap => {
            let mut bwrap = engine_bwrap::BwrapConfig::from_env()?;
            // This process handles the signals itself (below), to stop the session.
            bwrap.handle_signals = false;
            drive(&engine_bwrap::BwrapEngine::new(bwrap)?, &config, body)
        }
        EngineChoice::Docker => drive(&oci(engine_oci::Flavor::Docker)?, &config, body),
        EngineChoice::Podman => drive(&oci(engine_oci::Flavor::Podman)?, &config, body),
        EngineChoice::K8s => {
            drive(&engine_k8s::K8sEngine::new(engine_k8s::SandboxConfig::default())?, &config, body)
        }
    }
}

fn oci(flavor: engine_oci::Flavor) -> Result<engine_oci::OciEngine> {
    Ok(engine_oci::OciEngine::new(engine_oci::OciConfig::from_env(flavor))?)
}

/// Start, run, stop on one engine; a signal while the body runs stops the session too.
fn drive<E, B>(engine: &E, config: &SessionConfig, body: B) -> Result<B::Output>
where
    E: SessionEngine + Sync,
    B: Body,
{
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("installing the signal handler")?;
    let info = engine.start_session(config, &mut |line| eprintln!("{line}"))?;
    for warning in &info.warnings {
        eprintln!("warning: {warning}");
    }
    let id = info.id.clone();
    eprintln!("started {} session {id}", info.engine);
    let handle = signals.handle();
    let result = std::thread::scope(|scope| {
        scope.spawn(|| {
            if let Some(signal) = signals.forever().next() {
                eprintln!("\nsignal {signal}: stopping session {id}");
                let _ = engine.stop_session(&id);
                std::process::exit(128 + signal);
            }
        });
        let result = engine.open_session(&id).map_err(anyhow::Error::from).and_then(|session| {
            body.run(&session, engine, &info, &config.workspace.to_string_lossy())
        });
        handle.close();
        result
    });
    let stopped = engine.stop_session(&id);
    eprintln!("stopped session {id}");
    let output = result?;
    stopped?;
    Ok(output)
}

/// The exit status of an example's `main`, with the error printed the CLI's way.
pub(crate) fn exit(result: Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
