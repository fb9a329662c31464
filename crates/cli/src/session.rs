//! `python-sandbox session …`: warm docker/podman sandboxes that stay up between runs, and the
//! engine construction shared with `run` and `reap` (image, flavor).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anstream::println;
use anyhow::{Context, Result};
use engine_oci::{Flavor, OciConfig, OciEngine, SessionConfig, SessionInfo};
use sandbox_core::{ExecRequest, Layer, Net, RunOutcome, Sandbox, Secrets};

use crate::args::{ContainerArgs, NetFlag, OciChoice, SessionCmd, SessionStartArgs};
use crate::relay::Relay;
use crate::{meta, ui};

/// Connects to docker or podman with the container flags applied (sweeps on connect).
pub(crate) fn oci_engine(flavor: Flavor, container: &ContainerArgs) -> Result<OciEngine> {
    let mut config = OciConfig::from_env(flavor);
    if let Some(image) = &container.image {
        config.image = image.clone();
    }
    let engine = OciEngine::new(config).map_err(sandbox_core::EngineError::new)?;
    // Only what was still running is news (a script a killed CLI left behind); exited leftovers
    // are routine (a podman run hands its removal to the engine and returns).
    for swept in engine.swept() {
        if swept.removed && !swept.exited {
            ui::warn(&format!("removed leftover container {} ({})", swept.container, swept.reason));
        }
    }
    Ok(engine)
}

/// `90s`, `30m`, `2h`, `1d`, or plain seconds.
pub(crate) fn parse_ttl(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let value: u64 = digits.parse().ok()?;
    let secs = match unit {
        "s" => value,
        "m" => value.checked_mul(60)?,
        "h" => value.checked_mul(3600)?,
        "d" => value.checked_mul(86_400)?,
        _ => return None,
    };
    (secs > 0).then(|| Duration::from_secs(secs))
}

fn flavor(choice: OciChoice) -> Flavor {
    match choice {
        OciChoice::Docker => Flavor::Docker,
        OciChoice::Podman => Flavor::Podman,
    }
}

/// The engines to look at: the chosen one, or every one that answers (podman also when only
/// installed: a private service can be started for it).
fn candidate_flavors(choice: Option<OciChoice>) -> Vec<Flavor> {
    if let Some(choice) = choice {
        return vec![flavor(choice)];
    }
    let detection = engine_detect::detect();
    let mut out = Vec::new();
    for (name, flavor) in [
        (engine_detect::EngineName::Docker, Flavor::Docker),
        (engine_detect::EngineName::Podman, Flavor::Podman),
    ] {
        if detection
            .probe(name)
            .is_some_and(|p| p.available || p.state == engine_detect::ProbeState::InstalledNoSocket)
        {
            out.push(flavor);
        }
    }
    out
}

fn default_container() -> ContainerArgs {
    ContainerArgs { image: Some(String::new()) }
}

/// A sweep at most this often from session commands (`run`, `exec`, `stop`): they are the
/// interactive hot path, and a session's own expiry does not depend on the sweep.
const SESSION_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Pure: whether a sweep last recorded at `last` is older than the interval at `now`.
fn sweep_due(last: Option<std::time::SystemTime>, now: std::time::SystemTime) -> bool {
    last.and_then(|t| now.duration_since(t).ok()).is_none_or(|age| age >= SESSION_SWEEP_INTERVAL)
}

/// Connects for a session command, sweeping only when the last sweep of this engine is older
/// than [`SESSION_SWEEP_INTERVAL`] (a timestamp file in our cache directory).
fn session_engine(flavor: Flavor) -> Result<OciEngine> {
    let mut config = OciConfig::from_env(flavor);
    config.image = String::new();
    // The stamp lives in a directory checked to be the caller's and is touched without
    // following a link; a refused directory just means sweeping every time.
    let oci = reaper::PrivateDir::open(&config.cache_dir.join("oci")).ok();
    let stamp = format!("last-sweep-{}", flavor.as_str());
    let last = oci.as_ref().and_then(|d| d.modified(&stamp).ok().flatten());
    config.sweep_on_start = sweep_due(last, std::time::SystemTime::now());
    let sweeping = config.sweep_on_start;
    let engine = OciEngine::new(config)?;
    for swept in engine.swept() {
        if swept.removed && !swept.exited {
            ui::warn(&format!("removed leftover container {} ({})", swept.container, swept.reason));
        }
    }
    if sweeping {
        // Best effort: without the stamp the next command just sweeps again.
        if let Some(oci) = &oci {
            let _ = oci.touch(&stamp);
        }
    }
    Ok(engine)
}

/// The engine that has session `id`, connected. Without `--engine`, docker then podman are
/// simply tried: a full engine detection would probe bubblewrap too, which costs more than
/// the whole warm run.
fn engine_with_session(
    id: &str,
    choice: Option<OciChoice>,
) -> Result<(OciEngine, engine_oci::Session)> {
    let flavors = match choice {
        Some(choice) => vec![flavor(choice)],
        None => vec![Flavor::Docker, Flavor::Podman],
    };
    let (mut last, mut answered) = (None, false);
    for flavor in flavors {
        let engine = match session_engine(flavor) {
            Ok(engine) => engine,
            Err(e) => {
                last = Some(e);
                continue;
            }
        };
        match engine.session(id) {
            Ok(session) => return Ok((engine, session)),
            Err(engine_oci::Error::NoSession { .. }) => answered = true,
            Err(e) => last = Some(e.into()),
        }
    }
    // An engine that answered "no such session" says more than one this user cannot reach
    // (a podman-only user has no docker socket).
    match last {
        Some(e) if !answered => Err(e),
        _ => Err(engine_oci::Error::NoSession { id: id.to_owned() }.into()),
    }
}

pub(crate) fn run(cmd: SessionCmd) -> Result<ExitCode> {
    match cmd {
        SessionCmd::Start(args) => start(args),
        SessionCmd::Run { id, script, args, env, timeout, engine } => {
            let flags = ScriptFlags { env, timeout: crate::run::timeout_flag(timeout.as_deref())? };
            run_script(&id, &script, &args, &flags, engine)
        }
        SessionCmd::Exec { id, command, engine, interactive, tty } => {
            exec(&id, command, engine, interactive, tty)
        }
        SessionCmd::Stop { id, engine } => {
            let (engine, session) = engine_with_session(&id, engine)?;
            // Through the engine: it also detaches what it kept for the session on the host.
            engine.stop_session(session.id()).map_err(sandbox_core::EngineError::new)?;
            Ok(ExitCode::SUCCESS)
        }
        SessionCmd::List { json, engine } => list(json, engine),
    }
}

fn start(args: SessionStartArgs) -> Result<ExitCode> {
    let workspace = std::env::current_dir()
        .and_then(|d| d.canonicalize())
        .context("cannot determine the current directory (the workspace)")?;
    let ttl = parse_ttl(&args.ttl).ok_or_else(|| {
        ui::hinted(
            format!("invalid ttl `{}`", args.ttl),
            "use seconds or a suffix: `90s`, `30m`, `2h`",
        )
    })?;
    // Resolved like a run's command-line layer, so spellings, defaults and checks are the same.
    let layer = Layer {
        script: Some(workspace.join(".session")),
        mounts: args.mounts.iter().map(|m| m.parse()).collect::<Result<_, _>>()?,
        net: args.net.map(|n| match n {
            NetFlag::On => Net::On,
            NetFlag::Off => Net::Off,
        }),
        publish: args.publish.iter().map(|p| p.parse()).collect::<Result<_, _>>()?,
        env: args.env.iter().map(|e| e.parse()).collect::<Result<_, _>>()?,
        tmpfs_size: args.tmpfs_size.as_deref().map(sandbox_core::parse_size).transpose()?,
        limits: args.limits.layer()?,
        ..Layer::default()
    };
    // The same resolution and boundary check as `run` (crate::spec): they cannot drift.
    let resolved = crate::spec::resolve(&Layer::default(), &layer)?;
    let crossings = resolved.crossings();
    let spec = resolved.spec;
    if !crossings.is_empty() && !args.approve {
        return Ok(crate::spec::refuse(&crossings, crate::spec::Subject::Session, false));
    }
    let flavor = match args.engine {
        Some(choice) => flavor(choice),
        None => *candidate_flavors(None).first().ok_or_else(|| {
            ui::hinted(
                "neither docker nor podman is available",
                "sessions need docker or podman; run `python-sandbox detect`",
            )
        })?,
    };
    let engine = oci_engine(flavor, &args.container)?;
    let config = SessionConfig {
        workspace,
        mounts: spec.mounts,
        net: spec.net,
        publish: spec.publish,
        env: spec.env,
        ttl,
        tmpfs_size: spec.tmpfs_size,
        limits: spec.limits,
    };
    let info = engine.start_session(&config).map_err(sandbox_core::EngineError::new)?;
    for warning in &info.warnings {
        ui::warn(warning);
    }
    for (port, url) in &info.ports {
        eprintln_note(&format!("port {port} is published at {url}"));
    }
    println!("{}", info.id);
    Ok(ExitCode::SUCCESS)
}

fn eprintln_note(text: &str) {
    anstream::eprintln!("{}note{:#}: {text}", ui::NOTE, ui::NOTE);
}

/// The secrets to mask in what a session prints: its own secret-looking environment and that
/// of this one command.
fn session_secrets(session: &engine_oci::Session, env: &[(String, String)]) -> Secrets {
    let own = session.secrets().iter().map(|value| ("SESSION_SECRET", value.as_str()));
    Secrets::of_env(own.chain(env.iter().map(|(k, v)| (k.as_str(), v.as_str()))))
}

/// Pure: the warning for a script given secret-looking variables `names` in a session that
/// has already run `earlier` scripts; `None` when there is nothing to warn about.
fn shared_secret_warning(id: &str, earlier: u64, names: &[&str]) -> Option<(String, String)> {
    if earlier == 0 || names.is_empty() {
        return None;
    }
    let listed = names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    let scripts = if earlier == 1 { "1 script".to_owned() } else { format!("{earlier} scripts") };
    let looks = if names.len() == 1 { "looks" } else { "look" };
    Some((
        format!(
            "session `{id}` has already run {scripts}; {listed} {looks} secret, and anything those scripts left behind in the session can read what this one is given"
        ),
        "a session is one trust domain: run a script that needs a secret with `python-sandbox run`, or in a fresh session".to_owned(),
    ))
}

fn exit(outcome: &RunOutcome) -> ExitCode {
    ExitCode::from(u8::try_from(outcome.exit_code).unwrap_or(1))
}

/// A session opened from its record, served by its agent: no engine connection, no API call.
/// `None` sends the caller down the API path (no record, another engine, the agent gone).
fn local_session(id: &str, choice: Option<OciChoice>) -> Option<engine_oci::Session> {
    let runtime_dir = OciConfig::from_env(Flavor::Docker).runtime_dir;
    engine_oci::Session::local(&runtime_dir, id, choice.map(flavor))
}

/// Runs `work` on the session: through its agent when it can be reached without the API (a
/// current-thread runtime is all that needs), else through a connected engine. Only "could not
/// reach the agent" falls back, so nothing runs twice.
fn with_session<T>(
    id: &str,
    choice: Option<OciChoice>,
    work: impl AsyncFn(&engine_oci::Session) -> Result<T, engine_oci::Error>,
) -> Result<T> {
    if let Some(session) = local_session(id, choice) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        match rt.block_on(work(&session)) {
            Err(engine_oci::Error::NoSession { .. }) => {}
            other => return Ok(other?),
        }
    }
    let (engine, session) = engine_with_session(id, choice)?;
    Ok(engine.block_on(work(&session))?)
}

fn exec(
    id: &str,
    command: Vec<String>,
    choice: Option<OciChoice>,
    i: bool,
    t: bool,
) -> Result<ExitCode> {
    let mut request = ExecRequest { argv: command, ..Default::default() };
    let attached = crate::tty::attach(&mut request, i, t)?;
    let outcome = with_session(id, choice, async |session| {
        let mut sink = Relay::scrubbed(&session_secrets(session, &[]), false);
        let outcome = match &attached {
            Some(attached) => crate::tty::exec(session, &request, attached, &mut sink).await,
            None => session.exec(&request, &mut sink).await,
        };
        let _ = sink.finish();
        outcome
    })?;
    Ok(exit(&outcome))
}

/// `session run` flags that beat the script's inline table.
struct ScriptFlags {
    env: Vec<String>,
    timeout: Option<Duration>,
}

fn run_script(
    id: &str,
    script: &std::path::Path,
    args: &[String],
    flags: &ScriptFlags,
    choice: Option<OciChoice>,
) -> Result<ExitCode> {
    let script = crate::script::load(script)?;
    let parsed = meta::parse_for_run(&script)?;
    let inline = parsed.metadata.as_ref().map(crate::run::inline_layer).unwrap_or_default();
    let cli = Layer {
        script: Some(script.path.clone()),
        env: flags.env.iter().map(|e| e.parse()).collect::<Result<_, _>>()?,
        timeout: flags.timeout,
        ..Layer::default()
    };
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    let timed_out = std::cell::Cell::new(None);
    let outcome = with_session(id, choice, async |session| {
        // The script's own settings, resolved as a run would (relative paths against the
        // session's workspace), then checked against what the session was started with.
        let workspace = PathBuf::from(session.workspace());
        let ctx = sandbox_core::ResolveCtx { workspace: workspace.clone(), home: home.clone() };
        let mut spec = sandbox_core::resolve(&Layer::default(), &inline, &cli, &ctx)?;
        crate::spec::fill_env_from_host(&mut spec);
        if let Some(policy) = session.policy() {
            let mounts: Vec<(PathBuf, bool)> = spec
                .mounts
                .iter()
                .map(|m| {
                    let path = std::fs::canonicalize(&m.path).unwrap_or_else(|_| m.path.clone());
                    (path, m.mode == sandbox_core::MountMode::ReadWrite)
                })
                .collect();
            let net = inline.net.unwrap_or(if policy.net { Net::On } else { Net::Off });
            if let Some(warning) = policy.net_warning(net) {
                ui::warn(&warning);
            }
            let ports: Vec<u16> = spec.publish.iter().map(|p| p.port).collect();
            let misfits = policy.misfits(&workspace, &mounts, net, &ports);
            if !misfits.is_empty() {
                return Err(engine_oci::Error::SessionMisfit {
                    id: session.id().to_owned(),
                    misfits,
                });
            }
        }
        timed_out.set(spec.timeout);
        let options = engine_oci::ScriptOptions {
            dependencies: spec.dependencies.clone(),
            args: args.to_vec(),
            env: spec
                .env
                .iter()
                .filter_map(|v| v.value.as_ref().map(|value| (v.name.clone(), value.clone())))
                .collect(),
            timeout: spec.timeout,
        };
        let secret_names: Vec<&str> = options
            .env
            .iter()
            .filter(|(name, value)| {
                sandbox_core::is_secret_name(name)
                    && value.chars().count() >= sandbox_core::MIN_SECRET_LEN
            })
            .map(|(name, _)| name.as_str())
            .collect();
        if let Some((warning, hint)) =
            shared_secret_warning(session.id(), session.scripts_run(), &secret_names)
        {
            ui::warn(&warning);
            ui::print_hint(&hint);
        }
        // Counted before it runs: whatever it leaves behind, it leaves from its first line.
        session.note_script();
        let mut sink = Relay::scrubbed(&session_secrets(session, &options.env), false);
        let outcome = session.run_script_with(&script.path, &options, &mut sink).await;
        let _ = sink.finish();
        outcome
    })?;
    if outcome.timed_out {
        let secs = timed_out.get().map_or(0.0, |t| t.as_secs_f64());
        anstream::eprintln!(
            "{}error{:#}: timed out after {secs}s; the script was stopped",
            ui::ERROR,
            ui::ERROR
        );
        return Ok(ExitCode::from(crate::exit::TIMEOUT));
    }
    Ok(exit(&outcome))
}

fn list(json: bool, choice: Option<OciChoice>) -> Result<ExitCode> {
    let mut all: Vec<SessionInfo> = Vec::new();
    for flavor in candidate_flavors(choice) {
        match oci_engine(flavor, &default_container()) {
            Ok(engine) => all.extend(engine.list_sessions()?),
            Err(e) if choice.is_some() => return Err(e),
            Err(_) => {}
        }
    }
    if json {
        let items: Vec<_> = all
            .iter()
            .map(|s| {
                serde_json::json!({
                    "id": s.id,
                    "engine": s.engine,
                    "container": s.container,
                    "state": s.state,
                    "created": s.created,
                    "ttl_secs": s.ttl,
                    "workspace": s.workspace,
                    "ports": s.ports.iter().map(|(p, url)| serde_json::json!({"port": p, "url": url})).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(items));
        return Ok(ExitCode::SUCCESS);
    }
    if all.is_empty() {
        anstream::eprintln!("no sessions");
    }
    for s in &all {
        let ports: Vec<String> = s.ports.iter().map(|(p, url)| format!("{p}->{url}")).collect();
        println!(
            "{}\t{}\t{}\tttl={}s\t{}\t{}",
            s.id,
            s.engine,
            s.state,
            s.ttl,
            s.workspace,
            ports.join(",")
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls() {
        assert_eq!(parse_ttl("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_ttl("30m"), Some(Duration::from_secs(1800)));
        assert_eq!(parse_ttl("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_ttl("45"), Some(Duration::from_secs(45)));
        assert_eq!(parse_ttl("0s"), None);
        assert_eq!(parse_ttl("5w"), None);
    }

    #[test]
    fn secrets_into_a_used_session_are_warned_about() {
        assert_eq!(shared_secret_warning("s1", 0, &["API_TOKEN"]), None, "a fresh session");
        assert_eq!(shared_secret_warning("s1", 3, &[]), None, "no secret");
        let (warning, hint) =
            shared_secret_warning("s1", 1, &["API_TOKEN", "DB_PASSWORD"]).expect("a warning");
        assert_eq!(
            warning,
            "session `s1` has already run 1 script; `API_TOKEN`, `DB_PASSWORD` look secret, and anything those scripts left behind in the session can read what this one is given"
        );
        assert!(hint.starts_with("a session is one trust domain"), "{hint}");
        let (warning, _) = shared_secret_warning("s1", 2, &["API_TOKEN"]).expect("a warning");
        assert!(warning.contains("already run 2 scripts"), "{warning}");
    }

    #[test]
    fn session_sweeps_are_throttled() {
        let now = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert!(sweep_due(None, now), "never swept");
        assert!(!sweep_due(Some(now - Duration::from_secs(5)), now));
        assert!(sweep_due(Some(now - SESSION_SWEEP_INTERVAL), now));
        assert!(sweep_due(Some(now - Duration::from_secs(3600)), now));
        assert!(sweep_due(Some(now + Duration::from_secs(5)), now), "a stamp from the future");
    }
}
