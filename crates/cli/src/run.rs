//! `python-sandbox run`: metadata → layers → one resolved `RunSpec` → boundary check → engine.
//! Everything that decides is pure and lives in the library crates; this module gathers host
//! facts, picks the engine, shows progress and turns the outcome into our exit code.

use std::io::IsTerminal as _;
use std::path::Path;
use std::process::ExitCode;

use anstream::{eprintln, println};
use anyhow::Result;
use sandbox_core::{
    Asker, Capability, Crossing, DynEngine, EnvCrossing, ErrorClass, Layer, Net, Output,
    OutputSink, RunIo, RunOutcome, RunSpec, ScrubbingSink, Secrets, Stdin,
};

use crate::args::{NetFlag, RunArgs};
use crate::exit::{NO_ENGINE as EXIT_NO_ENGINE, TIMEOUT as EXIT_TIMEOUT};
use crate::relay::Relay;
use crate::{files, meta, netoff, progress, registry, script, spec, ui};

pub(crate) fn run(args: RunArgs) -> Result<ExitCode> {
    // The script may be given our terminal and change its modes: they are put back on the
    // way out, whichever it is.
    let _modes = crate::tty::SavedModes::save();
    let json = args.json;
    let mut engine = None;
    match run_selected(args, &mut engine) {
        Err(e) if json => {
            let code = ui::report_error(&e);
            print_json_error(&e, engine);
            Ok(code)
        }
        result => result,
    }
}

/// With `--json`, the one JSON object of a run that stopped with an error (exit 2).
pub(crate) fn print_json_error(e: &anyhow::Error, engine: Option<&str>) {
    let mut v = ui::error_json(e);
    v["engine"] = engine.into();
    v["exit_code"] = crate::exit::for_error(e).into();
    println!("{v}");
}

/// The run; `engine` is set once one is chosen, for the JSON of a later error.
fn run_selected(args: RunArgs, engine_name: &mut Option<&'static str>) -> Result<ExitCode> {
    let script = script::load(&args.script)?;
    let Planned { spec, crossings, keys, .. } =
        plan(&script, Asker::User, |path| cli_layer(&args, path))?;
    if !crossings.is_empty() && !args.approve {
        return Ok(spec::refuse(&crossings, spec::Subject::Run, args.json));
    }

    let claims = crate::registry::claim_mounts(&args.mounts, &keys.claims, &args.engine)?;
    let options = registry::Options {
        image: args.container.image.as_deref(),
        namespace: None,
        script: Some(&keys),
        purpose: registry::Purpose::Start,
        claims: &claims,
    };
    // Off a terminal (Claude Code's Bash, a log) a closing line names the files the run wrote
    // and deleted, as `--json` lists them: both need the workspace's listing before the run.
    // Walked before the engine is chosen, so the clock's next tick (settled between the
    // prepare and the start) has mostly passed by then.
    let plain = !args.json && !std::io::stderr().is_terminal();
    let mut before = (args.json || plain).then(|| files::unsettled(&spec.workspace));
    let Some(engine) = registry::select(&args.engine, &options)? else {
        return Ok(no_engine(args.json, None));
    };
    *engine_name = Some(engine.name());
    refuse_unsupported(engine.name(), engine.capability(), &spec)?;
    for warning in registry::script_keys(engine.name(), &keys)? {
        ui::warn(&warning);
    }
    if spec.net == Net::On
        && let Some(note) = registry::net_note(engine.name())
    {
        ui::note(&note);
    }
    let mut urls = Vec::new();
    let (outcome, seen) = match run_on(&*engine, &spec, args.json, &mut urls, before.as_mut()) {
        Ok(ran) => ran,
        // The engine turned out unable to sandbox here (a bwrap blocked after its cached probe,
        // a daemon gone): that is "no engine" for tools, and the script never started.
        Err(e) if crate::exit::class(&e) == Some(ErrorClass::Unavailable) => {
            ui::report_error(&e);
            return Ok(no_engine(args.json, ui::has_hint(&e).then_some(&e)));
        }
        Err(e) => return Err(e),
    };
    for warning in &outcome.warnings {
        ui::warn(warning);
    }
    if let Some((note, hint)) = files::refusal_note(&seen.refused) {
        ui::note(&format!("{note}\nhint: {hint}"));
    }
    if let Some((note, hint)) = netoff::allowlist_note(&outcome.net_refused, false) {
        ui::note(&format!("{note}\nhint: {hint}"));
    }
    if failed_offline(&outcome, &seen) {
        let place = netoff::Where::Run { flag: args.net == Some(NetFlag::Off) };
        ui::note(&format!("{}\nhint: {}", netoff::NOTE, netoff::hint(place)));
    }
    let code = if outcome.timed_out {
        let secs = spec.timeout.map_or(0.0, |t| t.as_secs_f64());
        eprintln!(
            "{}error{:#}: timed out after {secs}s; the whole run was stopped",
            ui::ERROR,
            ui::ERROR
        );
        EXIT_TIMEOUT
    } else {
        crate::exit::of_script(&outcome)
    };
    let changes = before.map(|b| files::changes_since(&b, &spec.workspace)).unwrap_or_default();
    if plain && let Some(line) = files::closing_line(&changes) {
        ui::note(&line);
    }
    if args.json {
        let summary = serde_json::json!({
            "engine": engine.name(),
            "exit_code": code,
            "duration_ms": u64::try_from(outcome.duration.as_millis()).unwrap_or(u64::MAX),
            "timed_out": outcome.timed_out,
            "files_written": changes.written,
            "files_deleted": changes.deleted,
            "protected_refused": seen.refused,
            "net_refused": outcome.net_refused,
            "urls": ui::urls_json(&urls),
        });
        println!("{summary}");
    }
    Ok(ExitCode::from(code))
}

/// A run planned by [`plan`]: the spec, what it crosses, and the script's engine keys.
pub(crate) struct Planned {
    pub(crate) spec: RunSpec,
    /// The crossings of the mounts, the workspace and the script file.
    pub(crate) crossings: Vec<Crossing>,
    /// The host variables copied by name that need approval (an agent's only).
    pub(crate) env: Vec<EnvCrossing>,
    pub(crate) keys: spec::EngineKeys,
}

/// What `run` and the MCP server's `run_script` share before an engine is chosen: the
/// script's metadata parsed strictly, the layers resolved in the current directory (the
/// workspace), and the boundary crossings of the result for `asker`, for the caller to
/// refuse. The caller's layer (`cli`, given the script's path) is built after the metadata
/// is read, so the script's diagnostics come before an error in the caller's own settings.
/// The script's engine keys come back beside the spec, for opening the engine.
pub(crate) fn plan(
    script: &script::Script,
    asker: Asker,
    cli: impl FnOnce(&Path) -> Result<Layer>,
) -> Result<Planned> {
    let parsed = meta::parse_for_run(script)?;
    let inline = parsed.metadata.as_ref().map(spec::inline_layer).unwrap_or_default();
    let keys = spec::EngineKeys::of_script(&parsed, script);
    let mut resolved = spec::resolve(&inline, &cli(&script.path)?)?;
    // An agent's list is no more the user's decision than the script's: no private range.
    if asker == Asker::Agent {
        resolved.spec.allow = resolved.spec.allow.take().map(|a| a.opening_private(false));
    }
    let mut crossings = resolved.script_crossings(script, asker);
    crossings.extend(resolved.crossings_as(asker));
    let env = resolved.env_crossings(asker);
    Ok(Planned { spec: resolved.spec, crossings, env, keys })
}

/// Whether the script failed (not stopped by its timeout) and its output shows a lookup or
/// connect that failed for want of the network its run does not have.
pub(crate) fn failed_offline(outcome: &RunOutcome, seen: &files::Seen) -> bool {
    seen.net_failure && outcome.exit_code != 0 && !outcome.timed_out
}

/// A run whose output is kept rather than relayed (the MCP server's `run_script`): the
/// engine's checks, prepare, then the run with no stdin and both streams scrubbed into
/// `output`. The engines' status lines go to `status`. The engine's warnings are returned with
/// the outcome's own, and what the script's output showed after `output` (`files::Watch`).
pub(crate) fn run_captured<S: OutputSink>(
    engine: &dyn DynEngine,
    spec: &RunSpec,
    output: S,
    urls: &mut Vec<(u16, String)>,
    status: &mut (dyn FnMut(&str) + Send),
    before: Option<&mut files::Snapshot>,
) -> Result<(RunOutcome, S, files::Seen)> {
    refuse_unsupported(engine.name(), engine.capability(), spec)?;
    let warnings = engine.check_dyn(spec)?;
    let prepared = engine.prepare_dyn(spec, &mut |line| status(line))?;
    // As `two_phase`: dated from when the engine lets the script go.
    let mut settle = files::settler(before);
    let mut published = |ports: &[sandbox_core::PublishedPort]| {
        urls.extend(ports.iter().map(|p| (p.port, p.url())));
    };
    let mut sink = ScrubbingSink::new(&secrets_of(spec), files::Watch::new(output, spec.net));
    let io = RunIo {
        stdin: Stdin::Null,
        output: Output::Sink(&mut sink),
        status: Some(status),
        published: Some(&mut published),
        started: Some(&mut settle),
    };
    let mut outcome = engine.run_prepared_dyn(spec, &prepared, io)?;
    outcome.warnings.splice(0..0, warnings);
    let (output, seen) = sink.finish().finish();
    Ok((outcome, output, seen))
}

/// The command line's layer. Flags that do not parse are errors before anything starts.
fn cli_layer(args: &RunArgs, script: &Path) -> Result<Layer> {
    let timeout = spec::timeout_flag(args.timeout.as_deref())?;
    Ok(Layer {
        script: Some(script.to_owned()),
        args: (!args.args.is_empty()).then(|| args.args.clone()),
        mounts: args
            .mounts
            .iter()
            .filter(|m| !crate::registry::is_claim_mount(m))
            .map(|m| m.parse())
            .collect::<Result<_, _>>()?,
        net: args.net.as_ref().and_then(|n| n.layer().0),
        allow: args.net.as_ref().and_then(|n| n.layer().1),
        publish: args.publish.iter().map(|p| p.parse()).collect::<Result<_, _>>()?,
        env: args.env.iter().map(|e| e.parse()).collect::<Result<_, _>>()?,
        timeout,
        tmpfs_size: args.tmpfs_size.as_deref().map(sandbox_core::parse_size).transpose()?,
        limits: args.limits.layer()?,
        ..Layer::default()
    })
}

/// The end of a run no engine could start (exit 3): the ladder's table and advice on stderr.
/// An engine that refused with an explanation of its own (`explained`: a hinted error, already
/// printed, such as a published port without pasta) is the whole story: the table would call
/// that engine fine ("nothing to fix") when only this run asks for what it lacks. The JSON
/// carries the detection either way, and the refusal's own error and hint when there is one.
fn no_engine(json: bool, explained: Option<&anyhow::Error>) -> ExitCode {
    const NO_ENGINE: &str = "no isolation engine works here, so nothing was run";
    // Probing every engine again is only for the table or the JSON.
    if explained.is_some() && !json {
        return ExitCode::from(EXIT_NO_ENGINE);
    }
    let detection = crate::registry::ladder_detection();
    if explained.is_none() {
        let os = engine_detect::OsInfo::detect();
        eprintln!("{}error{:#}: {NO_ENGINE}", ui::ERROR, ui::ERROR);
        eprintln!("{}", engine_detect::suggest(&os, &detection));
    }
    if json {
        let mut v = serde_json::json!({
            "engine": null,
            "exit_code": EXIT_NO_ENGINE,
            "error": NO_ENGINE,
            "detection": detection,
        });
        if let Some(e) = explained {
            let own = ui::error_json(e);
            v["error"] = own["error"].clone();
            v["hint"] = own["hint"].clone();
        }
        println!("{v}");
    }
    ExitCode::from(EXIT_NO_ENGINE)
}

/// Refuses, before anything is prepared, what `engine` cannot do (its [`Capability`]), naming
/// the engine: never a silent no-op of a flag the user gave.
pub(crate) fn refuse_unsupported(engine: &str, cap: Capability, spec: &RunSpec) -> Result<()> {
    let asked = [
        (!spec.mounts.is_empty() && !cap.host_mounts, "`--mount` (host paths)"),
        (!spec.publish.is_empty() && !cap.publish, "`--publish`"),
        (spec.limits.memory.is_some() && !cap.memory_limit, "`--memory`"),
        (spec.limits.cpus.is_some() && !cap.cpu_limit, "`--cpus`"),
        (spec.limits.pids.is_some() && !cap.pids_limit, "`--pids-limit`"),
    ];
    let missing: Vec<&str> = asked.iter().filter(|(a, _)| *a).map(|(_, what)| *what).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let supporting: Vec<&str> =
        registry::run_names().into_iter().filter(|name| *name != engine).collect();
    Err(ui::hinted(
        format!(
            "the {engine} engine cannot enforce {} here, so nothing was run",
            missing.join(", ")
        ),
        format!(
            "drop the flag, or choose another engine with `--engine` ({}); `python-sandbox detect` shows what each can do",
            supporting.join(", ")
        ),
    ))
}

/// Prepares (with a progress indicator on a terminal, a line per step off one), then runs,
/// through the seam. Where the published ports are is noted as soon as the sandbox is up, and
/// kept in `urls`. With the outcome, what the script's output showed, where it passed
/// through us.
fn run_on(
    engine: &dyn DynEngine,
    spec: &RunSpec,
    json: bool,
    urls: &mut Vec<(u16, String)>,
    before: Option<&mut files::Snapshot>,
) -> Result<(RunOutcome, files::Seen)> {
    for warning in engine.check_dyn(spec)? {
        ui::warn(&warning);
    }
    two_phase(
        spec,
        json,
        urls,
        before,
        |status| Ok(engine.prepare_dyn(spec, status)?),
        |prepared, io| Ok(engine.run_prepared_dyn(spec, prepared, io)?),
    )
}

/// The shape every engine shares: prepare behind the progress indicator, then run with output
/// inherited or scrubbed (and watched: `files::Watch`).
fn two_phase<P>(
    spec: &RunSpec,
    json: bool,
    urls: &mut Vec<(u16, String)>,
    before: Option<&mut files::Snapshot>,
    prepare: impl FnOnce(&mut dyn FnMut(&str)) -> Result<P>,
    run: impl FnOnce(&P, RunIo<'_>) -> Result<RunOutcome>,
) -> Result<(RunOutcome, files::Seen)> {
    let prepared = {
        let mut progress = progress::Progress::start();
        let result = prepare(&mut |line| progress.set(line));
        progress.finish();
        result?
    };
    let mut published = |ports: &[sandbox_core::PublishedPort]| {
        urls.extend(ports.iter().map(|p| (p.port, p.url())));
        ui::note_published(urls);
    };
    let secrets = secrets_of(spec);
    // Output passes through us only when it must (JSON mode, secrets to mask, or a run off a
    // terminal, whose refused protected paths and, without a network, failures to connect are
    // explained from its output: `files::Watch`, `netoff`), so that a script on a terminal
    // keeps its terminal. Off a terminal (Claude Code's Bash) there is none to keep.
    // Status lines of the run phase (a cluster's workspace sync) get the indicator again; an
    // empty line ends it, before the script's output starts.
    let mut indicator: Option<progress::Progress> = None;
    let mut status = |line: &str| match line {
        "" => drop(indicator.take()),
        line => indicator.get_or_insert_with(progress::Progress::start).set(line),
    };
    // The run's changes are dated from when the engine lets the script go (or, for an engine
    // that does not say, from the walk: its script starts long after).
    let mut settle = files::settler(before);
    let off_terminal = !std::io::stdout().is_terminal() && !std::io::stderr().is_terminal();
    if !json && secrets.is_empty() && !off_terminal {
        let io = stdio(Output::Inherit, &mut published, &mut status, &mut settle);
        let outcome = run(&prepared, io)?;
        return Ok((outcome, files::Seen::default()));
    }
    let mut sink = ScrubbingSink::new(&secrets, files::Watch::new(Relay::plain(json), spec.net));
    // One place for both (our stderr with --json, or one file behind both of ours): one stream
    // from the source, so the order between the script's stdout and stderr survives.
    let output = if json || sandbox_core::same_file_out_err() {
        Output::Merged(&mut sink)
    } else {
        Output::Sink(&mut sink)
    };
    let outcome = run(&prepared, stdio(output, &mut published, &mut status, &mut settle))?;
    let (_, seen) = sink.finish().finish();
    Ok((outcome, seen))
}

fn stdio<'a>(
    output: Output<'a>,
    published: &'a mut sandbox_core::PublishedHook<'a>,
    status: &'a mut (dyn FnMut(&str) + Send),
    started: &'a mut (dyn FnMut() + Send),
) -> RunIo<'a> {
    RunIo {
        stdin: Stdin::Inherit,
        output,
        status: Some(status),
        published: Some(published),
        started: Some(started),
    }
}

/// Values passed in through variables whose names say they are secret are masked in the output.
pub(crate) fn secrets_of(spec: &RunSpec) -> Secrets {
    Secrets::of_env(
        spec.env.iter().filter_map(|v| v.value.as_deref().map(|value| (v.name.as_str(), value))),
    )
}
