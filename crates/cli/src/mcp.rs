//! `python-sandbox mcp`: the Model Context Protocol over stdio (rmcp), so an MCP client gets
//! typed tools instead of shell lines. Every tool goes through the same code paths as the
//! command line (`run::plan`/`run::run_captured`, `session::start_resolved`,
//! `session::ScriptInSession`, the registry and the `sandbox_core` session seam) and so
//! through the same walls: a boundary crossing is never approved here, only named in a
//! `needs_approval` result until a call carries `approve: true`; output is scrubbed of secrets
//! and capped per stream.
//!
//! stdout is the protocol: nothing here prints to it, scripts get no stdin, and the engines'
//! blocking work runs on tokio's blocking pool so the protocol loop keeps answering.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{CallToolResult, Implementation, ServerCapabilities, ServerInfo};
use rmcp::{ErrorData, ServerHandler, ServiceExt as _, tool, tool_handler, tool_router};
use sandbox_core::{
    Crossing, DynSession, EngineError, ExecRequest, Layer, Net, OutputSink, RunOutcome,
    ScrubbingSink, ServiceSpec, Stream,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{files, meta, registry, run, script, session, spec, ui};

/// Bytes kept of each output stream (and of a file read): enough for a model to read, small
/// enough not to flood its context. What is cut is replaced by [`truncation_marker`].
pub(crate) const OUTPUT_CAP: usize = 64 * 1024;

/// The approval rule, told to clients in the server instructions and the tool descriptions.
const APPROVAL: &str = "A call whose mounts cross a boundary (a secret or home directory, a host socket, read-write outside the workspace) returns {\"status\": \"needs_approval\", \"crossings\": [...]} and runs nothing; repeat it with `approve: true` only after the user confirmed each crossing.";

/// Serves MCP on stdin/stdout until the client closes stdin.
pub(crate) fn serve() -> Result<std::process::ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the MCP server's runtime")?;
    runtime.block_on(async {
        let server = Server::new().serve(rmcp::transport::stdio()).await?;
        server.waiting().await?;
        anyhow::Ok(())
    })?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// The tools; sessions are found by id through the registry, so the server keeps no state.
#[derive(Clone)]
struct Server {
    tool_router: ToolRouter<Server>,
}

/// `run_script`'s arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RunScriptArgs {
    /// A script file (relative to the server's working directory, the workspace). Give this or `code`.
    path: Option<String>,
    /// The script's source, PEP 723 header included if it has one. Give this or `path`.
    code: Option<String>,
    /// Requirements to install on top of the script's own, e.g. `["rich>=13"]`.
    #[serde(default)]
    dependencies: Vec<String>,
    /// Arguments passed to the script.
    #[serde(default)]
    args: Vec<String>,
    /// Extra mounts as `PATH`, `PATH:ro` or `PATH:rw` (as `--mount`), or a cluster volume claim
    /// `pvc:NAME:/path[:ro]` (engine `k8s` only, as in the script's own `mounts`).
    #[serde(default)]
    mounts: Vec<String>,
    /// `on` or `off` (the default is off unless the script asks).
    net: Option<NetArg>,
    /// Ports to publish, as `--publish` (`8000`, `127.0.0.1:8000`).
    #[serde(default)]
    publish: Vec<String>,
    /// Environment: `NAME=VALUE`, or `NAME` to copy the server's value.
    #[serde(default)]
    env: Vec<String>,
    /// Seconds before the whole run is stopped.
    timeout: Option<f64>,
    /// `auto` (default) or an engine name (`bwrap`, `docker`, `podman`).
    engine: Option<String>,
    /// Allow the boundary crossings a previous call named: only after the user confirmed them.
    #[serde(default)]
    approve: bool,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum NetArg {
    On,
    Off,
}

impl From<NetArg> for Net {
    fn from(n: NetArg) -> Net {
        match n {
            NetArg::On => Net::On,
            NetArg::Off => Net::Off,
        }
    }
}

/// `check_script`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CheckArgs {
    /// A script file. Give this or `code`.
    path: Option<String>,
    /// The script's source. Give this or `path`.
    code: Option<String>,
}

/// `session_start`'s arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SessionStartArgs {
    /// Extra mounts as `PATH`, `PATH:ro` or `PATH:rw`.
    #[serde(default)]
    mounts: Vec<String>,
    /// `on` or `off`: the session's network (on by default: dependencies install inside it).
    net: Option<NetArg>,
    /// Ports to publish (for `start_service`).
    #[serde(default)]
    publish: Vec<String>,
    /// Environment: `NAME=VALUE`, or `NAME` to copy the server's value.
    #[serde(default)]
    env: Vec<String>,
    /// Idle time after which the session ends itself: `90s`, `30m` (default), `2h`.
    ttl: Option<String>,
    /// An engine name; the first that can hold a session when unset.
    engine: Option<String>,
    /// Allow the boundary crossings a previous call named: only after the user confirmed them.
    #[serde(default)]
    approve: bool,
}

/// A session's id (and, to skip the search, its engine).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SessionRef {
    /// The id `session_start` returned.
    id: String,
    /// The session's engine, if known.
    engine: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SessionExecArgs {
    /// The id `session_start` returned.
    id: String,
    /// The session's engine, if known.
    engine: Option<String>,
    /// Program and arguments, e.g. `["python", "-c", "print(1)"]`.
    command: Vec<String>,
    /// Text fed to the command's stdin.
    stdin: Option<String>,
    /// Seconds before the command is stopped.
    timeout: Option<f64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SessionRunArgs {
    /// The id `session_start` returned.
    id: String,
    /// The session's engine, if known.
    engine: Option<String>,
    /// A script file. Give this or `code`.
    path: Option<String>,
    /// The script's source. Give this or `path`.
    code: Option<String>,
    /// Arguments passed to the script.
    #[serde(default)]
    args: Vec<String>,
    /// Environment: `NAME=VALUE`, or `NAME` to copy the server's value.
    #[serde(default)]
    env: Vec<String>,
    /// Seconds before the script is stopped.
    timeout: Option<f64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct FileArgs {
    /// The id `session_start` returned.
    id: String,
    /// The session's engine, if known.
    engine: Option<String>,
    /// A path in the session; relative paths are below its workspace.
    path: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WriteFileArgs {
    /// The id `session_start` returned.
    id: String,
    /// The session's engine, if known.
    engine: Option<String>,
    /// A path in the session; relative paths are below its workspace.
    path: String,
    /// The file's new contents (text).
    content: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ServiceArgs {
    /// The id `session_start` returned.
    id: String,
    /// The session's engine, if known.
    engine: Option<String>,
    /// Program and arguments, e.g. `["python", "-m", "http.server", "8000"]`.
    command: Vec<String>,
    /// The port it listens on inside the session (published at `session_start`).
    port: u16,
    /// Environment: `NAME=VALUE` pairs.
    #[serde(default)]
    env: Vec<String>,
}

#[tool_router]
impl Server {
    fn new() -> Server {
        Server { tool_router: Self::tool_router() }
    }

    #[tool(
        description = "Run a Python (PEP 723) script in a throwaway sandbox with the server's working directory as the workspace. Returns exit_code, stdout, stderr (each capped at 64 KiB, secrets masked), files_written, files_deleted, protected_refused (protected paths such as `.git` or `.claude` are read-only in every sandbox), duration_ms, and notes (such as a network that is HTTP(S) only, through a proxy). A call whose mounts cross a boundary returns {\"status\": \"needs_approval\", \"crossings\": [...]} and runs nothing; repeat it with `approve: true` only after the user confirmed each crossing."
    )]
    async fn run_script(
        &self,
        Parameters(a): Parameters<RunScriptArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        blocking(move || run_script(a)).await
    }

    #[tool(
        description = "Check a script's inline metadata: its status and diagnostics (line, column, severity, code, message, hint), as `python-sandbox meta check --json` gives them."
    )]
    async fn check_script(
        &self,
        Parameters(a): Parameters<CheckArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        blocking(move || {
            let source = Source::of(a.path, a.code)?;
            let (file, bytes) = match &source {
                Source::Path(p) => (p.clone(), script::read_script(p)?),
                Source::Code(code) => (PathBuf::from("<code>"), code.clone().into_bytes()),
            };
            Ok(meta::check_json(&file, &bytes))
        })
        .await
    }

    #[tool(
        description = "Start a warm session (a sandbox that stays up between calls) in the server's working directory; returns its id, the URLs of published ports and notes (such as a network that is HTTP(S) only, through a proxy). A call whose mounts cross a boundary returns {\"status\": \"needs_approval\", \"crossings\": [...]} and starts nothing; repeat it with `approve: true` only after the user confirmed each crossing."
    )]
    async fn session_start(
        &self,
        Parameters(a): Parameters<SessionStartArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        blocking(move || session_start(a)).await
    }

    #[tool(
        description = "Run a command in a session; returns exit_code, stdout, stderr (capped, secrets masked), duration_ms."
    )]
    async fn session_exec(
        &self,
        Parameters(a): Parameters<SessionExecArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        blocking(move || {
            let timeout = spec::timeout_flag(a.timeout.map(|t| t.to_string()).as_deref())?;
            let request = ExecRequest {
                argv: a.command,
                stdin: a.stdin.unwrap_or_default().into_bytes(),
                timeout,
                ..ExecRequest::default()
            };
            let (outcome, capped) = on_session(&a.id, a.engine.as_deref(), |s| {
                let mut sink =
                    ScrubbingSink::new(&session::session_secrets(s, &[]), Capped::default());
                let outcome = s.exec(&request, &mut sink)?;
                Ok((outcome, sink.finish()))
            })?;
            Ok(outcome_json(&outcome, crate::exit::of_script(&outcome), &capped))
        })
        .await
    }

    #[tool(
        description = "Run a Python (PEP 723) script in a session's venv, installing its dependencies there; returns exit_code, stdout, stderr (capped, secrets masked), duration_ms."
    )]
    async fn session_run(
        &self,
        Parameters(a): Parameters<SessionRunArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        blocking(move || session_run(a)).await
    }

    #[tool(description = "Read a text file in a session (capped at 64 KiB, secrets masked).")]
    async fn read_file(
        &self,
        Parameters(a): Parameters<FileArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        blocking(move || {
            let asked = a.path.context("give the file's `path`")?;
            on_session(&a.id, a.engine.as_deref(), |s| {
                let path = in_session(s, &asked);
                let bytes = s.read_file(&path)?;
                let mut sink =
                    ScrubbingSink::new(&session::session_secrets(s, &[]), Capped::default());
                sink.write(Stream::Stdout, &bytes);
                let capped = sink.finish();
                Ok(json!({ "path": path, "size": bytes.len(), "content": capped.text(Stream::Stdout) }))
            })
        })
        .await
    }

    #[tool(
        description = "Create or replace a text file in a session (parent directories are created)."
    )]
    async fn write_file(
        &self,
        Parameters(a): Parameters<WriteFileArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        blocking(move || {
            on_session(&a.id, a.engine.as_deref(), |s| {
                let path = in_session(s, &a.path);
                s.write_file(&path, a.content.as_bytes())?;
                Ok(json!({ "path": path, "size": a.content.len() }))
            })
        })
        .await
    }

    #[tool(
        description = "List a directory in a session (default: its workspace): name, kind (file, dir, symlink) and size of each entry."
    )]
    async fn list_files(
        &self,
        Parameters(a): Parameters<FileArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        blocking(move || {
            on_session(&a.id, a.engine.as_deref(), |s| {
                let path = in_session(s, a.path.as_deref().unwrap_or("."));
                let entries: Vec<Value> = s
                    .list_dir(&path)?
                    .into_iter()
                    .map(|e| {
                        let kind = match e.kind {
                            sandbox_core::EntryKind::File => "file",
                            sandbox_core::EntryKind::Dir => "dir",
                            sandbox_core::EntryKind::Symlink => "symlink",
                        };
                        json!({ "name": e.name, "kind": kind, "size": e.size })
                    })
                    .collect();
                Ok(json!({ "path": path, "entries": entries }))
            })
        })
        .await
    }

    #[tool(
        description = "Start a long-running command in a session listening on a port published at session_start; returns the URL where the host reaches it."
    )]
    async fn start_service(
        &self,
        Parameters(a): Parameters<ServiceArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        blocking(move || {
            let env = a
                .env
                .iter()
                .map(|e| {
                    e.split_once('=')
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .with_context(|| format!("`{e}` is not `NAME=VALUE`"))
                })
                .collect::<Result<Vec<_>>>()?;
            let service = ServiceSpec { argv: a.command, port: a.port, env };
            on_session(&a.id, a.engine.as_deref(), |s| {
                let started = s.start_service(&service)?;
                Ok(json!({ "service": started.id, "port": started.port, "url": started.url }))
            })
        })
        .await
    }

    #[tool(description = "Stop a session and everything in it.")]
    async fn session_stop(
        &self,
        Parameters(a): Parameters<SessionRef>,
    ) -> Result<CallToolResult, ErrorData> {
        blocking(move || {
            let target = registry::Target { engine: a.engine.as_deref(), namespace: None };
            registry::stop_session(&a.id, target)?;
            Ok(json!({ "id": a.id, "stopped": true }))
        })
        .await
    }

    #[tool(
        description = "Which isolation engines (bwrap, docker, podman, k8s) work here, with reasons and the limits each enforces; `selected` is what `auto` picks."
    )]
    async fn detect(&self) -> Result<CallToolResult, ErrorData> {
        blocking(|| Ok(serde_json::to_value(registry::detection())?)).await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerInfo {
        ServerInfo::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("python-sandbox", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "Runs untrusted Python (PEP 723) scripts in throwaway sandboxes, and warm sessions, with the server's working directory as the workspace. {APPROVAL}"
            ))
    }
}

/// What a tool body gives: a JSON result, or an error shown as `run --json` shows it.
type Answer = Result<Value>;

/// Runs a tool body on the blocking pool (the engines block) and turns its answer into a
/// tool result: a structured value, or a structured error the model can read.
async fn blocking(
    work: impl FnOnce() -> Answer + Send + 'static,
) -> Result<CallToolResult, ErrorData> {
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(value)) => Ok(CallToolResult::structured(value)),
        Ok(Err(e)) => Ok(CallToolResult::structured_error(ui::error_json(&e))),
        Err(e) => Err(ErrorData::internal_error(format!("the tool stopped: {e}"), None)),
    }
}

/// A script named by path or given inline.
enum Source {
    Path(PathBuf),
    Code(String),
}

impl Source {
    fn of(path: Option<String>, code: Option<String>) -> Result<Source> {
        match (path, code) {
            (Some(p), None) => Ok(Source::Path(PathBuf::from(p))),
            (None, Some(c)) => Ok(Source::Code(c)),
            _ => Err(ui::hinted(
                "give exactly one of `path` and `code`",
                "`path` names a script file; `code` is its source",
            )),
        }
    }

    fn load(self) -> Result<script::Script> {
        match self {
            Source::Path(p) => script::load(&p),
            Source::Code(c) => script::from_stream(PathBuf::from("<code>"), c.into_bytes()),
        }
    }
}

/// Pure: the result of a call that would cross a boundary; nothing ran.
fn needs_approval(crossings: &[Crossing], subject: &str) -> Value {
    json!({
        "status": "needs_approval",
        "error": format!("this {subject} crosses a boundary and needs the user's approval"),
        "crossings": spec::crossings_json(crossings),
        "hint": "ask the user to confirm each crossing, then repeat the call with `approve: true`",
    })
}

fn run_script(a: RunScriptArgs) -> Answer {
    let script = Source::of(a.path, a.code)?.load()?;
    let cli = |path: &Path| -> Result<Layer> {
        Ok(Layer {
            script: Some(path.to_owned()),
            args: (!a.args.is_empty()).then(|| a.args.clone()),
            dependencies: a.dependencies.clone(),
            mounts: a
                .mounts
                .iter()
                .filter(|m| !registry::is_claim_mount(m))
                .map(|m| m.parse())
                .collect::<Result<_, _>>()?,
            net: a.net.map(Net::from),
            publish: a.publish.iter().map(|p| p.parse()).collect::<Result<_, _>>()?,
            env: a.env.iter().map(|e| e.parse()).collect::<Result<_, _>>()?,
            timeout: spec::timeout_flag(a.timeout.map(|t| t.to_string()).as_deref())?,
            ..Layer::default()
        })
    };
    let (spec, crossings, keys) = run::plan(&script, cli)?;
    if !crossings.is_empty() && !a.approve {
        return Ok(needs_approval(&crossings, "run"));
    }
    let engine = a.engine.as_deref().unwrap_or("auto");
    let claims = registry::claim_mounts(&a.mounts, &keys.claims, engine)?;
    let options = registry::Options {
        image: None,
        namespace: None,
        script: Some(&keys),
        purpose: registry::Purpose::Start,
        claims: &claims,
    };
    let Some(engine) = registry::select(engine, &options)? else {
        return Err(ui::hinted(
            "no isolation engine works here, so nothing was run",
            "call `detect` for the reasons",
        ));
    };
    // The warnings of keys the engine does not use are dropped here: the tool's answer has
    // no place for them, and nothing is weakened by an unused image.
    registry::script_keys(engine.name(), &keys)?;
    let before = files::snapshot(&spec.workspace);
    let mut urls = Vec::new();
    let (outcome, capped, refused) =
        run::run_captured(&*engine, &spec, Capped::default(), &mut urls)?;
    let code =
        if outcome.timed_out { crate::exit::TIMEOUT } else { crate::exit::of_script(&outcome) };
    let mut v = outcome_json(&outcome, code, &capped);
    v["engine"] = engine.name().into();
    let changes = files::changes_since(&before, &spec.workspace);
    v["files_written"] = changes.written.into();
    v["files_deleted"] = changes.deleted.into();
    v["urls"] = ui::urls_json(&urls);
    let mut notes = notes(engine.name(), spec.net);
    if let Some((note, hint)) = files::refusal_note(&refused) {
        notes.push(format!("{note}; {hint} (the user must approve)"));
    }
    v["protected_refused"] = refused.into();
    v["notes"] = notes.into();
    Ok(v)
}

/// What the CLI says on stderr as a `note:` about a sandbox started on `engine`, for a tool's
/// answer (an agent reads our answers, not our stderr): today that net on is HTTP(S) only,
/// through the built-in proxy, where pasta cannot run.
fn notes(engine: &str, net: Net) -> Vec<String> {
    if net == Net::On { registry::net_note(engine).into_iter().collect() } else { Vec::new() }
}

fn session_start(a: SessionStartArgs) -> Answer {
    let workspace = std::env::current_dir()
        .and_then(|d| d.canonicalize())
        .context("cannot determine the current directory (the workspace)")?;
    let ttl_text = a.ttl.as_deref().unwrap_or("30m");
    let ttl = session::parse_ttl(ttl_text).ok_or_else(|| {
        ui::hinted(
            format!("invalid ttl `{ttl_text}`"),
            "use seconds or a suffix: `90s`, `30m`, `2h`",
        )
    })?;
    session::refuse_claims(&a.mounts)?;
    let layer = Layer {
        script: Some(workspace.join(".session")),
        mounts: a.mounts.iter().map(|m| m.parse()).collect::<Result<_, _>>()?,
        net: a.net.map(Net::from),
        publish: a.publish.iter().map(|p| p.parse()).collect::<Result<_, _>>()?,
        env: a.env.iter().map(|e| e.parse()).collect::<Result<_, _>>()?,
        ..Layer::default()
    };
    let resolved = spec::resolve(&Layer::default(), &layer)?;
    let crossings = resolved.crossings();
    if !crossings.is_empty() && !a.approve {
        return Ok(needs_approval(&crossings, "session"));
    }
    let options = registry::Options {
        image: None,
        namespace: None,
        script: None,
        purpose: registry::Purpose::Start,
        claims: &[],
    };
    let net = resolved.spec.net;
    let info =
        session::start_resolved(resolved.spec, workspace, ttl, a.engine.as_deref(), &options)?;
    Ok(json!({
        "id": info.id,
        "engine": info.engine,
        "sandbox": info.sandbox,
        "workspace": info.workspace,
        "urls": ui::urls_json(&info.ports),
        "warnings": info.warnings,
        "notes": notes(&info.engine, net),
    }))
}

fn session_run(a: SessionRunArgs) -> Answer {
    let script = Source::of(a.path, a.code)?.load()?;
    let parsed = meta::parse_for_run(&script)?;
    let inline = parsed.metadata.as_ref().map(spec::inline_layer).unwrap_or_default();
    let key_warnings = spec::EngineKeys::of_script(&parsed, &script).for_session(&a.id)?;
    let cli = Layer {
        script: Some(script.path.clone()),
        env: a.env.iter().map(|e| e.parse()).collect::<Result<_, _>>()?,
        timeout: spec::timeout_flag(a.timeout.map(|t| t.to_string()).as_deref())?,
        ..Layer::default()
    };
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    let planned = session::ScriptInSession {
        script: &script.path,
        inline: &inline,
        cli: &cli,
        args: &a.args,
    };
    let (outcome, capped, warnings) = on_session(&a.id, a.engine.as_deref(), |s| {
        let mut capped = Capped::default();
        let mut warnings = Vec::new();
        let (outcome, _) =
            planned.run(s, home.clone(), &mut capped, &mut |w, _| warnings.push(w))?;
        Ok((outcome, capped, warnings))
    })?;
    let code =
        if outcome.timed_out { crate::exit::TIMEOUT } else { crate::exit::of_script(&outcome) };
    let mut v = outcome_json(&outcome, code, &capped);
    if let Some(list) = v["warnings"].as_array_mut() {
        list.splice(0..0, key_warnings.into_iter().chain(warnings).map(Value::from));
    }
    Ok(v)
}

/// `work` on session `id`, found through the registry as `session exec` finds it.
fn on_session<T>(
    id: &str,
    engine: Option<&str>,
    work: impl FnMut(&dyn DynSession) -> Result<T, EngineError>,
) -> Result<T> {
    registry::with_session(id, registry::Target { engine, namespace: None }, work)
}

/// Pure: a path in the session; a relative one is below its workspace.
fn in_session(session: &dyn DynSession, path: &str) -> String {
    if path.starts_with('/') {
        return path.to_owned();
    }
    let joined = Path::new(session.workspace()).join(path);
    joined.to_string_lossy().into_owned()
}

/// Pure: the JSON of a finished command, with our exit code `code`.
fn outcome_json(outcome: &RunOutcome, code: u8, capped: &Capped) -> Value {
    json!({
        "exit_code": code,
        "stdout": capped.text(Stream::Stdout),
        "stderr": capped.text(Stream::Stderr),
        "duration_ms": u64::try_from(outcome.duration.as_millis()).unwrap_or(u64::MAX),
        "timed_out": outcome.timed_out,
        "warnings": outcome.warnings,
    })
}

/// Keeps the first [`OUTPUT_CAP`] bytes of each stream and counts the rest.
#[derive(Debug, Default)]
pub(crate) struct Capped {
    kept: [Vec<u8>; 2],
    dropped: [u64; 2],
}

impl Capped {
    fn index(stream: Stream) -> usize {
        match stream {
            Stream::Stdout => 0,
            Stream::Stderr => 1,
        }
    }

    /// The stream as text (invalid UTF-8 replaced), with the marker when some was cut.
    pub(crate) fn text(&self, stream: Stream) -> String {
        let i = Self::index(stream);
        let mut text = String::from_utf8_lossy(&self.kept[i]).into_owned();
        if self.dropped[i] > 0 {
            text.push_str(&truncation_marker(self.dropped[i]));
        }
        text
    }
}

impl OutputSink for Capped {
    fn write(&mut self, stream: Stream, chunk: &[u8]) {
        let i = Self::index(stream);
        let room = OUTPUT_CAP.saturating_sub(self.kept[i].len());
        let (keep, rest) = chunk.split_at(room.min(chunk.len()));
        self.kept[i].extend_from_slice(keep);
        self.dropped[i] += rest.len() as u64;
    }
}

/// Pure: what replaces the cut part of a stream.
pub(crate) fn truncation_marker(dropped: u64) -> String {
    format!(
        "\n[python-sandbox: output capped at {OUTPUT_CAP} bytes; {dropped} more bytes dropped]\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_capped_per_stream_with_a_marker() {
        let mut capped = Capped::default();
        capped.write(Stream::Stdout, &vec![b'a'; OUTPUT_CAP - 1]);
        capped.write(Stream::Stdout, b"bcd");
        capped.write(Stream::Stderr, b"err");
        let out = capped.text(Stream::Stdout);
        assert!(out.starts_with(&"a".repeat(OUTPUT_CAP - 1)));
        assert!(out.ends_with(&format!("ab{}", truncation_marker(2))), "{out:?}");
        assert_eq!(capped.text(Stream::Stderr), "err");
    }
}
