//! `python-sandbox session …`: warm sandboxes that stay up between runs, on every engine with
//! sessions, through the registry and the `sandbox_core` session seam only (`DynSessionEngine`,
//! `DynSession`): this module names no engine.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anstream::println;
use anyhow::{Context, Result};
use sandbox_core::{
    DynSession, EngineError, ExecRequest, Layer, Net, OutputSink, RunOutcome, Secrets,
    SessionConfig, SessionInfo,
};

use crate::args::{SessionCmd, SessionShape, SessionStartArgs};
use crate::progress::Stepped;
use crate::relay::{Forward, Relay};
use crate::{meta, registry, ui};

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

fn target<'a>(engine: &'a Option<String>, namespace: &'a Option<String>) -> registry::Target<'a> {
    registry::Target { engine: engine.as_deref(), namespace: namespace.as_deref() }
}

pub(crate) fn run(cmd: SessionCmd) -> Result<ExitCode> {
    match cmd {
        SessionCmd::Start(args) => start(args),
        SessionCmd::Run { id, script, args, env, timeout, engine, namespace } => {
            let flags =
                ScriptFlags { env, timeout: crate::spec::timeout_flag(timeout.as_deref())? };
            run_script(&id, &script, &args, &flags, target(&engine, &namespace))
        }
        SessionCmd::Exec { id, command, engine, namespace, interactive, tty } => {
            exec(&id, command, target(&engine, &namespace), interactive, tty)
        }
        SessionCmd::Stop { id, engine, namespace } => {
            registry::stop_session(&id, target(&engine, &namespace))?;
            Ok(ExitCode::SUCCESS)
        }
        SessionCmd::List { json, engine, namespace } => list(json, target(&engine, &namespace)),
    }
}

/// `session start`; with `--json`, stdout is one JSON object on every exit (as for `run`).
fn start(args: SessionStartArgs) -> Result<ExitCode> {
    let json = args.json;
    match start_session(args, json) {
        Err(e) if json => {
            let code = ui::report_error(&e);
            crate::run::print_json_error(&e, None);
            Ok(code)
        }
        result => result,
    }
}

fn start_session(args: SessionStartArgs, json: bool) -> Result<ExitCode> {
    let planned = plan(&args.shape)?;
    if !planned.crossings.is_empty() && !args.shape.approve {
        return Ok(crate::spec::refuse(&planned.crossings, crate::spec::Subject::Session, json));
    }
    let (spec, workspace, ttl) = (planned.spec, planned.workspace, planned.ttl);
    let options = registry::Options {
        image: args.shape.container.image.as_deref(),
        namespace: args.shape.namespace.as_deref(),
        script: None,
        purpose: registry::Purpose::Start,
        claims: &[],
    };
    let net_on = spec.net == Net::On;
    let mut progress = crate::progress::Progress::start();
    let engine = args.engine.as_deref();
    let started = start_resolved(spec, workspace, ttl, engine, &options, &args.with, &mut |line| {
        progress.set(line)
    });
    progress.finish();
    let info = started?;
    for warning in &info.warnings {
        ui::warn(warning);
    }
    // As a run says it: without pasta the session's network is the built-in proxy's.
    if net_on && let Some(note) = registry::net_note(&info.engine) {
        ui::note(&note);
    }
    ui::note_published(&info.ports);
    if json {
        let summary = serde_json::json!({
            "id": info.id,
            "engine": info.engine,
            "sandbox": info.sandbox,
            "urls": ui::urls_json(&info.ports),
        });
        println!("{summary}");
    } else {
        println!("{}", info.id);
    }
    Ok(ExitCode::SUCCESS)
}

/// What `session start` with `args` (its shaping flags) in the current directory starts, before the boundary
/// check and any engine: `pool serve` keeps ready exactly what this gives, so a start with the
/// same flags in the same directory claims what it keeps.
pub(crate) struct Planned {
    pub(crate) spec: sandbox_core::RunSpec,
    pub(crate) workspace: PathBuf,
    pub(crate) ttl: Duration,
    /// The boundary crossings still to approve (`--approve`).
    pub(crate) crossings: Vec<sandbox_core::Crossing>,
}

impl Planned {
    /// The session config a start of this plan asks the engine for.
    pub(crate) fn config(&self) -> SessionConfig {
        config_of(self.spec.clone(), self.workspace.clone(), self.ttl)
    }
}

/// A session mounts no volume claim (`session start --mount pvc:…`, the MCP `session_start`).
pub(crate) fn refuse_claims(mounts: &[String]) -> Result<()> {
    if let Some(claim) = mounts.iter().find(|m| crate::registry::is_claim_mount(m)) {
        return Err(ui::hinted(
            format!(
                "--mount `{claim}`: a claim is mounted only by `run --engine k8s`, not into a session"
            ),
            "run the script with `python-sandbox run --engine k8s --mount ...`, or copy the data in with `session put`",
        ));
    }
    Ok(())
}

/// The [`Planned`] start of `args`.
pub(crate) fn plan(args: &SessionShape) -> Result<Planned> {
    let workspace = std::env::current_dir()
        .and_then(|d| d.canonicalize())
        .context("cannot determine the current directory (the workspace)")?;
    let ttl = parse_ttl(&args.ttl).ok_or_else(|| {
        ui::hinted(
            format!("invalid ttl `{}`", args.ttl),
            "use seconds or a suffix: `90s`, `30m`, `2h`",
        )
    })?;
    refuse_claims(&args.mounts)?;
    // Resolved like a run's command-line layer, so spellings, defaults and checks are the same.
    let layer = Layer {
        script: Some(workspace.join(".session")),
        mounts: args.mounts.iter().map(|m| m.parse()).collect::<Result<_, _>>()?,
        net: args.net.as_ref().and_then(|n| n.layer().0),
        allow: args.net.as_ref().and_then(|n| n.layer().1),
        publish: args.publish.iter().map(|p| p.parse()).collect::<Result<_, _>>()?,
        env: args.env.iter().map(|e| e.parse()).collect::<Result<_, _>>()?,
        tmpfs_size: args.tmpfs_size.as_deref().map(sandbox_core::parse_size).transpose()?,
        limits: args.limits.layer()?,
        ..Layer::default()
    };
    // The same resolution and boundary check as `run` (crate::spec): they cannot drift.
    let resolved = crate::spec::resolve(&Layer::default(), &layer)?;
    let crossings = resolved.crossings();
    Ok(Planned { spec: resolved.spec, workspace, ttl, crossings })
}

/// Starts a session of a spec already resolved and checked at the boundary (by `session
/// start` or the MCP server's `session_start`) on `engine` (`None`: the first that can), its
/// environment made and `dependencies` installed there before it is handed out. The engine's
/// status lines go to `status`.
pub(crate) fn start_resolved(
    spec: sandbox_core::RunSpec,
    workspace: PathBuf,
    ttl: Duration,
    engine: Option<&str>,
    options: &registry::Options<'_>,
    dependencies: &[String],
    status: &mut (dyn FnMut(&str) + Send),
) -> Result<SessionInfo> {
    let Some(engine) = registry::select_sessions(engine, options)? else {
        return Err(ui::hinted(
            "no engine that can hold a session works here, so nothing was started",
            "run `python-sandbox detect` (and `python-sandbox suggest`)",
        ));
    };
    let config = config_of(spec, workspace, ttl);
    let info = match crate::pool::claim(&*engine, &config, options) {
        Some(claimed) => claimed,
        None => engine.start_session_dyn(&config, status)?,
    };
    // Nothing half-done: a session whose environment could not be made is stopped. The
    // dependencies keep a network of their own, apart from the script's: without one, or
    // with a list (which need not name the package index), they are installed apart.
    let apart = config.net == Net::Off || config.allow.is_some();
    let made = if apart && !dependencies.is_empty() {
        install_apart(&*engine, &info.id, &config, dependencies, status)
    } else {
        prepare(&*engine, &info.id, dependencies, status)
    };
    if let Err(e) = made {
        let _ = engine.stop_session_dyn(&info.id);
        return Err(e);
    }
    registry::record_session(&info.id, &info.engine, options.namespace);
    Ok(info)
}

/// The dependencies of a session without a network (`id`, started with `config`): installed
/// as a run's are, with a network but apart from the workspace: in a sibling session of the
/// same engine with the network on and nothing of the caller's (an empty workspace, no
/// mounts, no environment), whose environment is then copied into session `id` as a tar
/// (untrusted bytes for the host, held on disk and capped at the session's tmpfs size, and
/// unpacked inside the session with its own rights). The sibling is stopped either way.
fn install_apart(
    engine: &dyn sandbox_core::DynSessionEngine,
    id: &str,
    config: &SessionConfig,
    dependencies: &[String],
    status: &mut (dyn FnMut(&str) + Send),
) -> Result<()> {
    /// The sibling's tar of its venv, into a host file, refused past `cap` bytes.
    struct Spool {
        file: std::fs::File,
        written: u64,
        cap: u64,
        failed: Option<String>,
    }
    impl sandbox_core::OutputSink for Spool {
        fn write(&mut self, stream: sandbox_core::Stream, chunk: &[u8]) {
            if stream != sandbox_core::Stream::Stdout || self.failed.is_some() {
                return;
            }
            self.written += chunk.len() as u64;
            if self.written > self.cap {
                self.failed =
                    Some(format!("it is larger than the session's tmpfs ({} bytes)", self.cap));
            } else if let Err(e) = std::io::Write::write_all(&mut self.file, chunk) {
                self.failed = Some(e.to_string());
            }
        }
        fn closed(&self) -> bool {
            self.failed.is_some()
        }
    }
    let empty = tempfile::tempdir().context("cannot create the installing session's workspace")?;
    let sibling = SessionConfig {
        workspace: empty.path().canonicalize().context("the installing session's workspace")?,
        mounts: Vec::new(),
        net: Net::On,
        allow: None,
        publish: Vec::new(),
        env: Vec::new(),
        ttl: Duration::from_secs(15 * 60),
        tmpfs_size: config.tmpfs_size,
        limits: config.limits,
    };
    status("installing the dependencies with a network, apart from the session");
    let helper = engine.start_session_dyn(&sibling, status)?;
    let spooled = (|| {
        prepare(engine, &helper.id, dependencies, status)?;
        let mut spool = Spool {
            file: tempfile::tempfile().context("cannot spool the session's environment")?,
            written: 0,
            cap: config.tmpfs_size,
            failed: None,
        };
        let pack =
            sandbox_core::ExecRequest::new(&["tar", "-C", "/home/sandbox", "-cf", "-", ".venv"]);
        let outcome = engine.open_session_dyn(&helper.id)?.exec(&pack, &mut spool)?;
        if let Some(why) = spool.failed {
            anyhow::bail!("cannot copy the installed environment into the session: {why}");
        }
        if outcome.exit_code != 0 {
            anyhow::bail!(
                "cannot pack the installed environment (tar exited with {})",
                outcome.exit_code
            );
        }
        Ok(spool.file)
    })();
    let _ = engine.stop_session_dyn(&helper.id);
    let mut file = spooled?;
    let mut archive = Vec::new();
    std::io::Seek::rewind(&mut file)
        .and_then(|()| std::io::Read::read_to_end(&mut file, &mut archive))
        .context("cannot read the spooled environment")?;
    let unpack = "rm -rf /home/sandbox/.venv && exec tar -x -f - -C /home/sandbox --no-same-owner";
    let request = sandbox_core::ExecRequest {
        stdin: archive,
        ..sandbox_core::ExecRequest::new(&["sh", "-c", unpack])
    };
    let mut captured = sandbox_core::Captured::default();
    let outcome = engine.open_session_dyn(id)?.exec(&request, &mut captured)?;
    if outcome.exit_code != 0 {
        anyhow::bail!(
            "cannot unpack the installed environment in the session: {}",
            captured.stderr_lossy().trim_end()
        );
    }
    // The warm path now: the marker is there, nothing is installed, no network is needed.
    prepare(engine, id, dependencies, status)
}

/// Makes session `id`'s environment (its venv, first on every engine's `PATH`, so `python3`
/// there is the environment's from the start, not the image's or the host's) and installs
/// `dependencies` into it: the script contract of `session run`
/// (`sandbox_core::shell::run_script`), with an empty script.
fn prepare(
    engine: &dyn sandbox_core::DynSessionEngine,
    id: &str,
    dependencies: &[String],
    status: &mut (dyn FnMut(&str) + Send),
) -> Result<()> {
    /// Status lines go on; the empty script prints nothing, and an install's own error
    /// comes back as an error.
    struct Preparing<'a>(&'a mut (dyn FnMut(&str) + Send));
    impl sandbox_core::OutputSink for Preparing<'_> {
        fn write(&mut self, _: sandbox_core::Stream, _: &[u8]) {}
        fn status(&mut self, line: &str) {
            (self.0)(line);
        }
    }
    let session = engine.open_session_dyn(id)?;
    let script = tempfile::Builder::new()
        .prefix("python-sandbox-prepare-")
        .suffix(".py")
        .tempfile()
        .context("cannot create the empty script that prepares the session")?;
    let options = sandbox_core::ScriptOptions {
        dependencies: dependencies.to_vec(),
        ..sandbox_core::ScriptOptions::default()
    };
    let outcome = session.run_script(script.path(), &options, &mut Preparing(status))?;
    if outcome.exit_code != 0 {
        anyhow::bail!(
            "the session's environment could not be made (python exited with {})",
            outcome.exit_code
        );
    }
    Ok(())
}

fn config_of(spec: sandbox_core::RunSpec, workspace: PathBuf, ttl: Duration) -> SessionConfig {
    SessionConfig {
        workspace,
        mounts: spec.mounts,
        net: spec.net,
        allow: spec.allow,
        publish: spec.publish,
        env: spec.env,
        ttl,
        tmpfs_size: spec.tmpfs_size,
        limits: spec.limits,
    }
}

/// The secrets to mask in what a session prints: its own secret-looking environment and that
/// of this one command.
pub(crate) fn session_secrets(session: &dyn DynSession, env: &[(String, String)]) -> Secrets {
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
    ExitCode::from(crate::exit::of_script(outcome))
}

fn exec(
    id: &str,
    command: Vec<String>,
    choice: registry::Target<'_>,
    i: bool,
    t: bool,
) -> Result<ExitCode> {
    let mut request = ExecRequest { argv: command, ..Default::default() };
    // Before any engine is touched: `-t` without a terminal is refused here.
    let attached = crate::tty::attach(&mut request, i, t)?;
    let outcome = registry::with_session(id, choice, |session| {
        let mut sink = Relay::scrubbed(&session_secrets(session, &[]), false);
        let outcome = match &attached {
            Some(attached) => crate::tty::exec(session, &request, attached, &mut sink),
            None => session.exec(&request, &mut sink),
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
    choice: registry::Target<'_>,
) -> Result<ExitCode> {
    let script = crate::script::load(script)?;
    let parsed = meta::parse_for_run(&script)?;
    let inline = parsed.metadata.as_ref().map(crate::spec::inline_layer).unwrap_or_default();
    for warning in crate::spec::EngineKeys::of_script(&parsed, &script).for_session(id)? {
        ui::warn(&warning);
    }
    let cli = Layer {
        script: Some(script.path.clone()),
        env: flags.env.iter().map(|e| e.parse()).collect::<Result<_, _>>()?,
        timeout: flags.timeout,
        ..Layer::default()
    };
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    let timed_out = std::cell::Cell::new(None);
    // Off a terminal, a closing line names the files the script wrote and deleted, where the
    // session's workspace is the host directory we are in (not a pod's own).
    let plain = !std::io::stderr().is_terminal();
    let here = std::env::current_dir().ok();
    let mut seen = crate::files::Seen::default();
    let mut changes = crate::files::Changes::default();
    let outcome = registry::with_session(id, choice, |session| {
        let planned = ScriptInSession { script: &script.path, inline: &inline, cli: &cli, args };
        let workspace = Path::new(session.workspace());
        let before = (plain && here.as_ref().is_some_and(|h| h.starts_with(workspace)))
            .then(|| crate::files::snapshot(workspace));
        let net = if session.policy().is_some_and(|p| !p.net) { Net::Off } else { Net::On };
        let mut sink = Stepped::new(crate::files::Watch::new(Relay::plain(false), net));
        let outcome = planned.run(session, home.clone(), &mut sink, &mut |warning, hint| {
            ui::warn(&warning);
            if let Some(hint) = hint {
                ui::print_hint(&hint);
            }
        });
        seen = sink.into_inner().finish().1;
        if let Some(before) = before {
            changes = crate::files::changes_since(&before, workspace);
        }
        if let Ok((_, timeout)) = &outcome {
            timed_out.set(*timeout);
        }
        outcome.map(|(outcome, _)| outcome)
    })?;
    if let Some((note, hint)) = crate::files::refusal_note(&seen.refused) {
        ui::note(&format!("{note}\nhint: {hint}"));
    }
    if let Some((note, hint)) = crate::netoff::allowlist_note(&outcome.net_refused, true) {
        ui::note(&format!("{note}\nhint: {hint}"));
    }
    if crate::run::failed_offline(&outcome, &seen) {
        let hint = crate::netoff::hint(crate::netoff::Where::Session);
        ui::note(&format!("{}\nhint: {hint}", crate::netoff::NOTE));
    }
    if let Some(line) = crate::files::closing_line(&changes) {
        ui::note(&line);
    }
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

/// A script for a session, resolved: what `session run` and the MCP server's `session_run`
/// share.
pub(crate) struct ScriptInSession<'a> {
    pub(crate) script: &'a Path,
    pub(crate) inline: &'a Layer,
    pub(crate) cli: &'a Layer,
    pub(crate) args: &'a [String],
}

impl ScriptInSession<'_> {
    /// The script's spec in `session` (relative paths against its workspace), with the
    /// variables it copies from the host not filled in yet.
    pub(crate) fn resolve(
        &self,
        session: &dyn DynSession,
        home: Option<PathBuf>,
    ) -> Result<sandbox_core::RunSpec, EngineError> {
        let workspace = PathBuf::from(session.workspace());
        let ctx = sandbox_core::ResolveCtx { workspace, home };
        sandbox_core::resolve(&Layer::default(), self.inline, self.cli, &ctx)
            .map_err(EngineError::new)
    }

    /// Resolves the script's own settings as a run would (relative paths against the
    /// session's workspace), checks them against what the session was started with, warns
    /// through `warn` (a warning and its hint), and runs it with its output scrubbed into
    /// `output`. Returns the outcome and the script's timeout.
    pub(crate) fn run(
        &self,
        session: &dyn DynSession,
        home: Option<PathBuf>,
        output: &mut dyn OutputSink,
        warn: &mut dyn FnMut(String, Option<String>),
    ) -> Result<(RunOutcome, Option<Duration>), EngineError> {
        let inline = self.inline;
        let workspace = PathBuf::from(session.workspace());
        let mut spec = self.resolve(session, home)?;
        crate::spec::fill_env_from_host(&mut spec);
        let asks = script_asks(&spec, inline, self.cli);
        // An engine that cannot show what its session was started with cannot show that it
        // holds what the script asks either: refused, as a misfit, when the script asks.
        let policy = session.policy();
        let misfits = match &policy {
            Some(policy) => policy.misfits(&workspace, &asks),
            None if asks.asks_nothing() => Vec::new(),
            None => vec!["the session cannot show what it was started with".to_owned()],
        };
        if !misfits.is_empty() {
            return Err(EngineError::new(sandbox_core::Error::SessionMisfit {
                id: session.id().to_owned(),
                misfits,
                hint: asks.misfit_hint(&workspace),
            }));
        }
        let options = sandbox_core::ScriptOptions {
            dependencies: spec.dependencies.clone(),
            args: self.args.to_vec(),
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
            warn(warning, Some(hint));
        }
        // Counted before it runs: whatever it leaves behind, it leaves from its first line.
        session.note_script();
        let secrets = session_secrets(session, &options.env);
        let mut sink = sandbox_core::ScrubbingSink::new(&secrets, Forward(output));
        let outcome = session.run_script(self.script, &options, &mut sink);
        let _ = sink.finish();
        Ok((outcome?, spec.timeout))
    }
}

/// What the script asks of its session, from its own settings (`inline`) and those of the
/// command (`cli`), which beat them; `spec` is their resolution, for the mounts (made canonical,
/// as the session's are) and ports.
fn script_asks(
    spec: &sandbox_core::RunSpec,
    inline: &Layer,
    cli: &Layer,
) -> sandbox_core::ScriptAsks {
    let mounts = spec
        .mounts
        .iter()
        .map(|m| {
            let path = std::fs::canonicalize(&m.path).unwrap_or_else(|_| m.path.clone());
            (path, m.mode == sandbox_core::MountMode::ReadWrite)
        })
        .collect();
    let (set, by) = (&cli.limits, &inline.limits);
    sandbox_core::ScriptAsks {
        mounts,
        net: cli.net.or(inline.net),
        // Resolved like `net`: the flag's setting beats the script's, list or not.
        allow: spec.allow.clone(),
        publish: spec.publish.iter().map(|p| p.port).collect(),
        tmpfs_size: cli.tmpfs_size.or(inline.tmpfs_size),
        // A limit turned off (`none`) asks for no cap: only a value is a tightening.
        limits: sandbox_core::Limits {
            memory: asked(set.memory.or(by.memory)),
            cpus: asked(set.cpus.or(by.cpus)),
            pids: asked(set.pids.or(by.pids)),
            off: sandbox_core::LimitsOff::default(),
        },
        dependencies: !spec.dependencies.is_empty(),
    }
}

/// The cap a layer's setting asks for: a value, not `none`.
fn asked<T>(setting: Option<sandbox_core::LimitSetting<T>>) -> Option<T> {
    match setting {
        Some(sandbox_core::LimitSetting::Set(value)) => Some(value),
        Some(sandbox_core::LimitSetting::Off) | None => None,
    }
}

fn list(json: bool, choice: registry::Target<'_>) -> Result<ExitCode> {
    let all: Vec<SessionInfo> = registry::list_sessions(choice)?;
    if json {
        let items: Vec<_> = all
            .iter()
            .map(|s| {
                serde_json::json!({
                    "id": s.id,
                    "engine": s.engine,
                    "sandbox": s.sandbox,
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
}
