//! `python-sandbox mcp`: the Model Context Protocol over stdio (rmcp), so an MCP client gets
//! typed tools instead of shell lines. Every tool goes through the same code paths as the
//! command line (`run::plan`/`run::run_captured`, `session::start_resolved`,
//! `session::ScriptInSession`, the registry and the `sandbox_core` session seam) and so
//! through the same walls: a boundary crossing is never approved here, only named in a
//! `needs_approval` result until a call carries `approve: true`; output is scrubbed of secrets
//! and capped per stream.
//!
//! What the agent asks for is classified as an agent's ([`Asker::Agent`]): the user chose
//! nothing, so besides what the command line refuses, every host path outside the workspace
//! (a script `path`, a read-only mount), every host variable copied by name (`env: ["NAME"]`,
//! or the script's own `env = ["NAME"]`) and every session of another workspace is a crossing.
//! Arguments that name a key twice are refused by the transport ([`wire`]), and the tools'
//! schemas are built from what the code does (the engine names from the registry, the network
//! default from `Net::default`), so they cannot drift from it.
//!
//! stdout is the protocol: nothing here prints to it, scripts get no stdin, and the engines'
//! blocking work runs on tokio's blocking pool so the protocol loop keeps answering.

mod content;
mod wire;

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{
    CallToolResult, Content, Implementation, ProgressNotificationParam, ServerCapabilities,
    ServerInfo,
};
use rmcp::service::RequestContext;
use rmcp::{
    ErrorData, RoleServer, ServerHandler, ServiceExt as _, tool, tool_handler, tool_router,
};
use sandbox_core::{
    Asker, Crossing, DynSession, EngineError, EnvCrossing, ExecRequest, Layer, Net, OutputSink,
    RunOutcome, ScrubbingSink, ServiceSpec, Stream,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{files, meta, netoff, registry, run, script, session, spec, ui};

/// Bytes kept of each output stream (and of a file read): enough for a model to read, small
/// enough not to flood its context. What is cut is replaced by [`truncation_marker`].
pub(crate) const OUTPUT_CAP: usize = 64 * 1024;

/// Bytes of one image an answer carries: a plot saved at a usual size is far smaller, and a
/// model sees an image scaled down anyway.
const IMAGE_CAP: usize = 1 << 20;

/// Images `run_script` returns at most (`return_images`).
const MAX_IMAGES: usize = 4;

/// Bytes of a binary file `read_file` returns, so that its base64 is at most [`OUTPUT_CAP`].
const BINARY_CAP: usize = OUTPUT_CAP / 4 * 3;

/// The approval rule, told to clients in the server instructions.
const APPROVAL: &str = "A call that crosses a boundary (a mount or script path outside the workspace, a secret or home directory, a host socket, a host environment variable copied by name, a session of another workspace) returns {\"status\": \"needs_approval\", \"crossings\": [...]} and runs nothing; repeat it with `approve: true` only after the user confirmed each crossing.";

/// Serves MCP on stdin/stdout until the client closes stdin.
pub(crate) fn serve() -> Result<std::process::ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the MCP server's runtime")?;
    runtime.block_on(async {
        let server = Server::new().serve(wire::Stdio::new()).await?;
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
    /// A script file (relative to the server's working directory, the workspace; one outside it
    /// needs approval). Give this or `code`.
    path: Option<String>,
    /// The script's source, PEP 723 header included if it has one. Give this or `path`.
    code: Option<String>,
    /// Requirements to install on top of the script's own, e.g. `["rich>=13"]`.
    #[serde(default)]
    dependencies: Vec<String>,
    /// Arguments passed to the script.
    #[serde(default)]
    args: Vec<String>,
    /// Extra mounts as `PATH`, `PATH:ro` or `PATH:rw` (as `--mount`; one outside the workspace
    /// needs approval), or a cluster volume claim `pvc:NAME:/path[:ro]` (engine `k8s` only, as in
    /// the script's own `mounts`).
    #[serde(default)]
    mounts: Vec<String>,
    #[schemars(description = net_description("the script's own `net`"))]
    net: Option<NetArg>,
    /// Ports to publish, as `--publish` (`8000`, `127.0.0.1:8000`).
    #[serde(default)]
    publish: Vec<String>,
    #[schemars(description = ENV_DESCRIPTION)]
    #[serde(default)]
    env: Vec<String>,
    /// Seconds before the whole run is stopped.
    timeout: Option<f64>,
    #[schemars(description = engine_description(Engines::Runs), extend("enum" = engines(Engines::Runs)))]
    engine: Option<String>,
    /// Allow the boundary crossings a previous call named: only after the user confirmed them.
    #[serde(default)]
    approve: bool,
    /// Also return the images the script wrote in the workspace (PNG, JPEG, GIF, WebP as
    /// images, SVG as text), so they can be looked at: at most 4, each at most 1 MiB.
    #[serde(default)]
    return_images: bool,
}

/// `net`: `on`, `off`, or the only hosts the sandbox may reach.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
enum NetArg {
    Mode(NetMode),
    List(Vec<String>),
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum NetMode {
    On,
    Off,
}

impl NetArg {
    /// The layer's `net` and `allow`. An agent's list never opens a private range (that is
    /// the user's to give: `run::plan` marks it so).
    fn layer(&self) -> Result<(Option<Net>, Option<sandbox_core::Allow>)> {
        Ok(match self {
            NetArg::Mode(NetMode::On) => (Some(Net::On), None),
            NetArg::Mode(NetMode::Off) => (Some(Net::Off), None),
            NetArg::List(list) => {
                let allow = sandbox_core::Allow::parse(list.iter().map(String::as_str))?;
                (Some(Net::On), Some(allow))
            }
        })
    }
}

/// [`NetArg::layer`] of an optional argument.
fn net_layer(net: Option<&NetArg>) -> Result<(Option<Net>, Option<sandbox_core::Allow>)> {
    net.map_or(Ok((None, None)), NetArg::layer)
}

/// `check_script`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CheckArgs {
    /// A script file (one outside the workspace needs approval). Give this or `code`.
    path: Option<String>,
    /// The script's source. Give this or `path`.
    code: Option<String>,
    /// Allow the boundary crossings a previous call named: only after the user confirmed them.
    #[serde(default)]
    approve: bool,
}

/// `session_start`'s arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SessionStartArgs {
    /// Extra mounts as `PATH`, `PATH:ro` or `PATH:rw` (one outside the workspace needs
    /// approval).
    #[serde(default)]
    mounts: Vec<String>,
    #[schemars(description = net_description("nothing else"))]
    net: Option<NetArg>,
    /// Ports to publish (for `start_service`).
    #[serde(default)]
    publish: Vec<String>,
    /// Packages (PEP 508 requirements) installed into the session's environment before it is
    /// handed out (with `net` off too: they install with a network apart from the workspace
    /// and are copied in); later scripts and `session_exec`'s `python3` use them.
    #[serde(default)]
    dependencies: Vec<String>,
    #[schemars(description = ENV_DESCRIPTION)]
    #[serde(default)]
    env: Vec<String>,
    /// Idle time after which the session ends itself: `90s`, `30m` (default), `2h`.
    ttl: Option<String>,
    #[schemars(description = engine_description(Engines::Sessions), extend("enum" = engines(Engines::Sessions)))]
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
    #[schemars(description = engine_description(Engines::Known), extend("enum" = engines(Engines::Known)))]
    engine: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SessionExecArgs {
    /// The id `session_start` returned.
    id: String,
    #[schemars(description = engine_description(Engines::Known), extend("enum" = engines(Engines::Known)))]
    engine: Option<String>,
    /// Allow the crossing a previous call named (a session of another workspace): only after
    /// the user confirmed it.
    #[serde(default)]
    approve: bool,
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
    #[schemars(description = engine_description(Engines::Known), extend("enum" = engines(Engines::Known)))]
    engine: Option<String>,
    /// Allow the crossing a previous call named (a session of another workspace): only after
    /// the user confirmed it.
    #[serde(default)]
    approve: bool,
    /// A script file (one outside the workspace needs approval). Give this or `code`.
    path: Option<String>,
    /// The script's source. Give this or `path`.
    code: Option<String>,
    /// Arguments passed to the script.
    #[serde(default)]
    args: Vec<String>,
    #[schemars(description = ENV_DESCRIPTION)]
    #[serde(default)]
    env: Vec<String>,
    /// Seconds before the script is stopped.
    timeout: Option<f64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadFileArgs {
    /// The id `session_start` returned.
    id: String,
    #[schemars(description = engine_description(Engines::Known), extend("enum" = engines(Engines::Known)))]
    engine: Option<String>,
    /// Allow the crossing a previous call named (a session of another workspace): only after
    /// the user confirmed it.
    #[serde(default)]
    approve: bool,
    /// A path in the session; relative paths are below its workspace.
    path: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListFilesArgs {
    /// The id `session_start` returned.
    id: String,
    #[schemars(description = engine_description(Engines::Known), extend("enum" = engines(Engines::Known)))]
    engine: Option<String>,
    /// Allow the crossing a previous call named (a session of another workspace): only after
    /// the user confirmed it.
    #[serde(default)]
    approve: bool,
    /// A directory in the session, its workspace when unset; relative paths are below it.
    path: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WriteFileArgs {
    /// The id `session_start` returned.
    id: String,
    #[schemars(description = engine_description(Engines::Known), extend("enum" = engines(Engines::Known)))]
    engine: Option<String>,
    /// Allow the crossing a previous call named (a session of another workspace): only after
    /// the user confirmed it.
    #[serde(default)]
    approve: bool,
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
    #[schemars(description = engine_description(Engines::Known), extend("enum" = engines(Engines::Known)))]
    engine: Option<String>,
    /// Allow the crossing a previous call named (a session of another workspace): only after
    /// the user confirmed it.
    #[serde(default)]
    approve: bool,
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
        description = "Run a Python (PEP 723) script in a throwaway sandbox with the server's working directory as the workspace. Returns exit_code, stdout, stderr (each capped at 64 KiB, secrets masked), files_written, files_deleted, protected_refused (protected paths such as `.git` or `.claude` are read-only in every sandbox), duration_ms, and notes (such as a network that is off or HTTP(S) only). With `return_images: true`, the images the script wrote come back as images to look at. Installing dependencies is reported as progress when the call has a progress token. A call that crosses a boundary (a script or mount outside the workspace, a secret or home directory, a host socket, a host environment variable copied by name, a protected path made writable) returns {\"status\": \"needs_approval\", \"crossings\": [...]} and runs nothing; repeat it with `approve: true` only after the user confirmed each crossing."
    )]
    async fn run_script(
        &self,
        Parameters(a): Parameters<RunScriptArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        with_progress(&context, move |status| run_script(a, status)).await
    }

    #[tool(
        description = "Check a script's inline metadata: its status and diagnostics (line, column, severity, code, message, hint), as `python-sandbox meta check --json` gives them. A `path` outside the workspace returns {\"status\": \"needs_approval\", ...} until a call carries `approve: true`."
    )]
    async fn check_script(
        &self,
        Parameters(a): Parameters<CheckArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        blocking(move || {
            let script = Source::of(a.path, a.code)?.load()?;
            let crossings = script_crossings(&script)?;
            if !crossings.is_empty() && !a.approve {
                return Ok(needs_approval(&crossings, &[], "check"));
            }
            Ok(meta::check_json(&script.display, &script.bytes))
        })
        .await
    }

    #[tool(
        description = "Start a warm session (a sandbox that stays up between calls) in the server's working directory; returns its id, the URLs of published ports and notes (such as a network that is HTTP(S) only, through a proxy). A call that crosses a boundary (a mount outside the workspace, a secret or home directory, a host socket, a host environment variable copied by name) returns {\"status\": \"needs_approval\", \"crossings\": [...]} and starts nothing; repeat it with `approve: true` only after the user confirmed each crossing."
    )]
    async fn session_start(
        &self,
        Parameters(a): Parameters<SessionStartArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        with_progress(&context, move |status| session_start(a, status)).await
    }

    #[tool(
        description = "Run a command in a session; returns exit_code, stdout, stderr (capped, secrets masked), duration_ms. A session started in another workspace needs approval, as in every session tool but `session_stop`."
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
            on_session(&a.id, a.engine.as_deref(), a.approve, |s| {
                let mut sink =
                    ScrubbingSink::new(&session::session_secrets(s, &[]), Capped::default());
                let outcome = s.exec(&request, &mut sink)?;
                Ok(outcome_json(&outcome, crate::exit::of_script(&outcome), &sink.finish()))
            })
        })
        .await
    }

    #[tool(
        description = "Run a Python (PEP 723) script in a session's venv, installing its dependencies there (reported as progress when the call has a progress token); returns exit_code, stdout, stderr (capped, secrets masked), duration_ms, notes. A script `path` outside the workspace or a host environment variable copied by name (in `env` or the script's own table) needs approval."
    )]
    async fn session_run(
        &self,
        Parameters(a): Parameters<SessionRunArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        with_progress(&context, move |status| session_run(a, status)).await
    }

    #[tool(
        description = "Read a file in a session (secrets masked). An image (PNG, JPEG, GIF, WebP, at most 1 MiB) comes back as an image to look at; text, SVG included, as `content` (capped at 64 KiB); other bytes as base64 `content` with their `mime_type` (the first 48 KiB)."
    )]
    async fn read_file(
        &self,
        Parameters(a): Parameters<ReadFileArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        blocking(move || {
            let mut read = None;
            let answer = on_session(&a.id, a.engine.as_deref(), a.approve, |s| {
                let path = in_session(s, &a.path);
                // Masked before anything looks at the bytes: an image's own too.
                let bytes = session::session_secrets(s, &[]).scrub_bytes(&s.read_file(&path)?);
                read = Some((path, bytes));
                Ok(Value::Null)
            })?;
            match read {
                Some((path, bytes)) => file_reply(&path, &bytes),
                None => Ok(Reply::from(answer)),
            }
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
            on_session(&a.id, a.engine.as_deref(), a.approve, |s| {
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
        Parameters(a): Parameters<ListFilesArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        blocking(move || {
            on_session(&a.id, a.engine.as_deref(), a.approve, |s| {
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
            on_session(&a.id, a.engine.as_deref(), a.approve, |s| {
                // The engines' own refusal names `session start`'s flag; an agent has a parameter.
                if s.policy().is_some_and(|p| !p.publish.contains(&service.port)) {
                    return Err(EngineError::new(sandbox_core::Error::Unsupported {
                        what: format!("a service on port {}", service.port),
                        by: format!("session `{}`", s.id()),
                        hint: format!(
                            "start a session whose `session_start` call has `publish: [\"{}\"]`",
                            service.port
                        ),
                    }));
                }
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
        // Stopping reaches nothing, so it needs no approval, and it must work on a session
        // whose agent no longer answers.
        blocking(move || {
            let target = registry::Target { engine: a.engine.as_deref(), namespace: None };
            registry::stop_session(&a.id, target)?;
            Ok(json!({ "id": a.id, "stopped": true }))
        })
        .await
    }

    #[tool(
        description = "Which isolation engines work here, with reasons and the limits each enforces; `selected` is what `auto` picks."
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

/// A tool's answer: a JSON value, and what goes with it for the model to see.
struct Reply {
    value: Value,
    attached: Vec<Attached>,
}

/// An image (base64 and MIME type), or an SVG's text, beside a JSON answer.
enum Attached {
    Image { data: String, mime: &'static str },
    Text(String),
}

impl From<Value> for Reply {
    fn from(value: Value) -> Reply {
        Reply { value, attached: Vec::new() }
    }
}

impl Reply {
    fn result(self) -> CallToolResult {
        if self.attached.is_empty() {
            return CallToolResult::structured(self.value);
        }
        // The JSON as text, without `structuredContent`: Claude Code passes on only that when
        // both are there, and the images would never reach the model
        // (anthropics/claude-code#54737).
        let mut content = vec![Content::text(self.value.to_string())];
        content.extend(self.attached.into_iter().map(|a| match a {
            Attached::Image { data, mime } => Content::image(data, mime),
            Attached::Text(text) => Content::text(text),
        }));
        CallToolResult::success(content)
    }
}

/// Runs a tool body on the blocking pool (the engines block) and turns its answer into a
/// tool result: a structured value (with its images), or a structured error the model can
/// read.
async fn blocking<R: Into<Reply> + Send + 'static>(
    work: impl FnOnce() -> Result<R> + Send + 'static,
) -> Result<CallToolResult, ErrorData> {
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(reply)) => Ok(reply.into().result()),
        Ok(Err(e)) => Ok(CallToolResult::structured_error(ui::error_json(&e))),
        Err(e) => Err(ErrorData::internal_error(format!("the tool stopped: {e}"), None)),
    }
}

/// [`blocking`], with the status lines the body gives (`status`: installing dependencies,
/// starting a pod) sent as MCP progress notifications when the call carries a progress token,
/// in order, all of them before the answer.
async fn with_progress<R: Into<Reply> + Send + 'static>(
    context: &RequestContext<RoleServer>,
    work: impl FnOnce(&mut (dyn FnMut(&str) + Send)) -> Result<R> + Send + 'static,
) -> Result<CallToolResult, ErrorData> {
    let Some(token) = context.meta.get_progress_token() else {
        return blocking(move || work(&mut |_| {})).await;
    };
    let (lines, mut received) = tokio::sync::mpsc::unbounded_channel::<String>();
    let peer = context.peer.clone();
    let forward = tokio::spawn(async move {
        let mut progress = 0.0;
        while let Some(message) = received.recv().await {
            progress += 1.0;
            let param = ProgressNotificationParam {
                progress_token: token.clone(),
                progress,
                total: None,
                message: Some(message),
            };
            // A client gone away gets its answer (or nothing) the same way.
            let _ = peer.notify_progress(param).await;
        }
    });
    let answer = blocking(move || {
        work(&mut |line: &str| {
            if !line.is_empty() {
                let _ = lines.send(line.to_owned());
            }
        })
    })
    .await;
    // The sender went with the body: the forwarder ends after the last line.
    let _ = forward.await;
    answer
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

    /// The script; a `path` must name a regular file: a pipe would be read as a private
    /// copy, never judged as the host file it is, and `/dev/stdin` is the protocol itself.
    fn load(self) -> Result<script::Script> {
        let not_a_file = |p: &Path| {
            ui::hinted(
                format!("`{}` is not a regular file", p.display()),
                "`path` names a script file; give a script's source as `code`",
            )
        };
        match self {
            Source::Path(p) => {
                // Missing or unreadable: `load` says which.
                if std::fs::metadata(script::expand_home(&p)?).is_ok_and(|m| !m.is_file()) {
                    return Err(not_a_file(&p));
                }
                let script = script::load(&p)?;
                if script.real.is_none() {
                    return Err(not_a_file(&p));
                }
                Ok(script)
            }
            Source::Code(c) => script::from_stream(PathBuf::from("<code>"), c.into_bytes()),
        }
    }
}

/// What the `engine` argument of a tool names.
#[derive(Debug, Clone, Copy)]
enum Engines {
    /// `run_script`: `auto` or an engine with runs.
    Runs,
    /// `session_start`: an engine with sessions.
    Sessions,
    /// A session's engine, given to skip the search.
    Known,
}

/// The values of an `engine` argument, from the registry.
fn engines(which: Engines) -> Vec<&'static str> {
    match which {
        Engines::Runs => std::iter::once("auto").chain(registry::run_names()).collect(),
        Engines::Sessions | Engines::Known => registry::session_choices(),
    }
}

/// The description of an `engine` argument, naming the registry's engines.
fn engine_description(which: Engines) -> String {
    let names = |list: Vec<&str>| list.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>();
    match which {
        Engines::Runs => format!(
            "`auto` (the default: the first of {} that works here) or an engine: {}",
            names(registry::ladder_names()).join(", "),
            names(registry::run_names()).join(", ")
        ),
        Engines::Sessions => format!(
            "An engine ({}); unset, the first that can hold a session here",
            names(engines(which)).join(", ")
        ),
        Engines::Known => {
            format!("The session's engine, if known ({})", names(engines(which)).join(", "))
        }
    }
}

/// The description of a `net` argument: `on` or `off`, and the default the resolution falls
/// back to when neither this nor `other` sets it (`Net::default`, which the resolution uses).
fn net_description(other: &str) -> String {
    let default = match Net::default() {
        Net::On => "on",
        Net::Off => "off",
    };
    format!(
        "`on`, `off`, or a list of the only hosts it may reach (`[\"pypi.org\", \"*.example.com:443\"]`, checked by name). Unset, {other} decides; if that says nothing either, the default: `{default}` (dependencies install with a network either way)"
    )
}

/// The description of an `env` argument.
const ENV_DESCRIPTION: &str = "Environment: `NAME=VALUE`, or `NAME` to copy the server's own value, which needs approval (a value copied from the host is the user's, not the agent's, to give)";

/// Pure: the result of a call that would cross a boundary; nothing ran.
fn needs_approval(crossings: &[Crossing], env: &[EnvCrossing], subject: &str) -> Value {
    let mut items = spec::crossings_json(crossings);
    items.extend(spec::env_crossings_json(env));
    json!({
        "status": "needs_approval",
        "error": format!("this {subject} crosses a boundary and needs the user's approval"),
        "crossings": items,
        "hint": "ask the user to confirm each crossing, then repeat the call with `approve: true`",
    })
}

/// The crossings of reading and running the host file `script` (none for inline code),
/// judged against the server's workspace.
fn script_crossings(script: &script::Script) -> Result<Vec<Crossing>> {
    let workspace = spec::workspace()?;
    Ok(spec::script_crossings(script, &workspace, spec::home().as_ref(), Asker::Agent))
}

fn run_script(a: RunScriptArgs, status: &mut (dyn FnMut(&str) + Send)) -> Result<Reply> {
    let script = Source::of(a.path, a.code)?.load()?;
    let (net, allow) = net_layer(a.net.as_ref())?;
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
            net,
            allow,
            publish: a.publish.iter().map(|p| p.parse()).collect::<Result<_, _>>()?,
            env: a.env.iter().map(|e| e.parse()).collect::<Result<_, _>>()?,
            timeout: spec::timeout_flag(a.timeout.map(|t| t.to_string()).as_deref())?,
            ..Layer::default()
        })
    };
    let run::Planned { spec, crossings, env, keys } = run::plan(&script, Asker::Agent, cli)?;
    if (!crossings.is_empty() || !env.is_empty()) && !a.approve {
        return Ok(needs_approval(&crossings, &env, "run").into());
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
    // Walked before the engine is chosen, settled between the prepare and the start (as `run`).
    let mut before = files::unsettled(&spec.workspace);
    let Some(engine) = registry::select(engine, &options)? else {
        return Err(ui::hinted(
            "no isolation engine works here, so nothing was run",
            "call `detect` for the reasons",
        ));
    };
    // The warnings of keys the engine does not use are dropped here: the tool's answer has
    // no place for them, and nothing is weakened by an unused image.
    registry::script_keys(engine.name(), &keys)?;
    let mut urls = Vec::new();
    let (outcome, capped, seen) = run::run_captured(
        &*engine,
        &spec,
        Capped::default(),
        &mut urls,
        status,
        Some(&mut before),
    )?;
    let code =
        if outcome.timed_out { crate::exit::TIMEOUT } else { crate::exit::of_script(&outcome) };
    let mut v = outcome_json(&outcome, code, &capped);
    v["engine"] = engine.name().into();
    let changes = files::changes_since(&before, &spec.workspace);
    let mut attached = Vec::new();
    if a.return_images {
        let (shown, skipped) =
            written_images(&spec.workspace, &changes.written, &run::secrets_of(&spec));
        v["images"] = shown.iter().map(|(meta, _)| meta.clone()).collect();
        v["images_skipped"] = skipped.into();
        attached = shown.into_iter().map(|(_, a)| a).collect();
    }
    v["files_written"] = changes.written.into();
    v["files_deleted"] = changes.deleted.into();
    v["urls"] = ui::urls_json(&urls);
    let mut notes = notes(engine.name(), spec.net);
    if let Some((note, hint)) = files::refusal_note(&seen.refused) {
        notes.push(format!("{note}; {hint} (the user must approve)"));
    }
    if run::failed_offline(&outcome, &seen) {
        notes.push(format!("{}; {}", netoff::NOTE, netoff::hint(netoff::Where::RunTool)));
    }
    if let Some((note, hint)) = netoff::allowlist_note(&outcome.net_refused, false) {
        notes.push(format!("{note}; {hint} (the user must approve a wider list)"));
    }
    v["net_refused"] = serde_json::to_value(&outcome.net_refused).unwrap_or_default();
    v["protected_refused"] = seen.refused.into();
    v["notes"] = notes.into();
    Ok(Reply { value: v, attached })
}

/// The images among the files a run wrote (`written`, relative to `workspace`), for the
/// model to see: each with its JSON (path, MIME type, size) and what is attached, at most
/// [`MAX_IMAGES`] of at most [`IMAGE_CAP`] bytes (an SVG's text at most [`OUTPUT_CAP`]), their
/// secrets masked; and the images left out, each with the reason. A file is opened below the
/// workspace without following any link, so a link the script left cannot show another file.
fn written_images(
    workspace: &Path,
    written: &[String],
    secrets: &sandbox_core::Secrets,
) -> (Vec<(Value, Attached)>, Vec<Value>) {
    let mut shown = Vec::new();
    let mut skipped = Vec::new();
    for path in written.iter().filter(|p| content::image_name(p)) {
        let mut skip = |reason: String| skipped.push(json!({ "path": path, "reason": reason }));
        if shown.len() == MAX_IMAGES {
            skip(format!("only the first {MAX_IMAGES} images are returned"));
            continue;
        }
        let bytes = match read_beneath(workspace, path, IMAGE_CAP) {
            Ok(Some(bytes)) => secrets.scrub_bytes(&bytes),
            Ok(None) => {
                skip(format!("larger than the {} an answer carries", human(IMAGE_CAP)));
                continue;
            }
            Err(e) => {
                skip(format!("cannot be read: {e}"));
                continue;
            }
        };
        let size = bytes.len();
        let (mime, attached) = match content::kind(path, &bytes) {
            content::Kind::Image(mime) => {
                (mime, Attached::Image { data: content::base64(&bytes), mime })
            }
            content::Kind::Svg if size <= OUTPUT_CAP => {
                (content::SVG, Attached::Text(String::from_utf8_lossy(&bytes).into_owned()))
            }
            content::Kind::Svg => {
                skip(format!(
                    "an SVG larger than the {} of text an answer carries",
                    human(OUTPUT_CAP)
                ));
                continue;
            }
            content::Kind::Text | content::Kind::Binary(_) => {
                skip("named as an image, but its bytes are not one".to_owned());
                continue;
            }
        };
        shown.push((json!({ "path": path, "mime_type": mime, "size": size }), attached));
    }
    (shown, skipped)
}

/// At most `cap` bytes of the regular file `rel` below `root`, reached without following a
/// link or leaving the directory; `None` when it is larger.
fn read_beneath(root: &Path, rel: &str, cap: usize) -> std::io::Result<Option<Vec<u8>>> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    use std::io::Read as _;
    let dir = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK;
    let file = std::fs::File::from(rustix::fs::openat2(&dir, rel, flags, Mode::empty(), resolve)?);
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(u64::try_from(cap).unwrap_or(u64::MAX) + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() <= cap).then_some(bytes))
}

/// `1 MiB`, `64 KiB`.
fn human(bytes: usize) -> String {
    sandbox_core::shell::human_bytes(bytes)
}

/// The answer of `read_file` for the file at `path` in a session, holding `bytes` (secrets
/// already masked): see [`content::kind`].
fn file_reply(path: &str, bytes: &[u8]) -> Result<Reply> {
    let size = bytes.len();
    let text = |mime: &str| {
        let mut capped = Capped::default();
        capped.write(Stream::Stdout, bytes);
        json!({ "path": path, "size": size, "mime_type": mime, "content": capped.text(Stream::Stdout) })
    };
    Ok(match content::kind(path, bytes) {
        content::Kind::Image(mime) if size <= IMAGE_CAP => Reply {
            value: json!({ "path": path, "size": size, "mime_type": mime }),
            attached: vec![Attached::Image { data: content::base64(bytes), mime }],
        },
        content::Kind::Image(mime) => {
            return Err(ui::hinted(
                format!(
                    "`{path}` is a {mime} image of {size} bytes, larger than the {} an answer carries",
                    human(IMAGE_CAP)
                ),
                "save it smaller in the session (a lower `dpi` in `savefig`, or Pillow's `Image.thumbnail`) and read that",
            ));
        }
        content::Kind::Svg => text(content::SVG).into(),
        content::Kind::Text => text("text/plain").into(),
        content::Kind::Binary(mime) => {
            let kept = &bytes[..size.min(BINARY_CAP)];
            json!({
                "path": path,
                "size": size,
                "mime_type": mime,
                "encoding": "base64",
                "content": content::base64(kept),
                "truncated": size > BINARY_CAP,
            })
            .into()
        }
    })
}

/// What the CLI says on stderr as a `note:` about a sandbox started on `engine`, for a tool's
/// answer (an agent reads our answers, not our stderr): today that net on is HTTP(S) only,
/// through the built-in proxy, where pasta cannot run.
fn notes(engine: &str, net: Net) -> Vec<String> {
    if net == Net::On { registry::net_note(engine).into_iter().collect() } else { Vec::new() }
}

fn session_start(a: SessionStartArgs, status: &mut (dyn FnMut(&str) + Send)) -> Answer {
    let workspace = spec::workspace()?;
    let ttl_text = a.ttl.as_deref().unwrap_or("30m");
    let ttl = session::parse_ttl(ttl_text).ok_or_else(|| {
        ui::hinted(
            format!("invalid ttl `{ttl_text}`"),
            "use seconds or a suffix: `90s`, `30m`, `2h`",
        )
    })?;
    session::refuse_claims(&a.mounts)?;
    let (net, allow) = net_layer(a.net.as_ref())?;
    let layer = Layer {
        script: Some(workspace.join(".session")),
        mounts: a.mounts.iter().map(|m| m.parse()).collect::<Result<_, _>>()?,
        net,
        allow,
        publish: a.publish.iter().map(|p| p.parse()).collect::<Result<_, _>>()?,
        env: a.env.iter().map(|e| e.parse()).collect::<Result<_, _>>()?,
        ..Layer::default()
    };
    let resolved = spec::resolve(&Layer::default(), &layer)?;
    let crossings = resolved.crossings_as(Asker::Agent);
    let env = resolved.env_crossings(Asker::Agent);
    if (!crossings.is_empty() || !env.is_empty()) && !a.approve {
        return Ok(needs_approval(&crossings, &env, "session"));
    }
    let options = registry::Options {
        image: None,
        namespace: None,
        script: None,
        purpose: registry::Purpose::Start,
        claims: &[],
    };
    let net = resolved.spec.net;
    let engine = a.engine.as_deref();
    let info = session::start_resolved(
        resolved.spec,
        workspace,
        ttl,
        engine,
        &options,
        &a.dependencies,
        status,
    )?;
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

fn session_run(a: SessionRunArgs, status: &mut (dyn FnMut(&str) + Send)) -> Answer {
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
    let workspace = spec::workspace()?;
    let homes = spec::home();
    let script_crossings =
        spec::script_crossings(&script, &workspace, homes.as_ref(), Asker::Agent);
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    let planned = session::ScriptInSession {
        script: &script.path,
        inline: &inline,
        cli: &cli,
        args: &a.args,
    };
    let target = registry::Target { engine: a.engine.as_deref(), namespace: None };
    registry::with_session(&a.id, target, |s| {
        let mut crossings = script_crossings.clone();
        crossings.extend(session_crossings(s, &workspace, homes.as_ref()));
        let copied = planned.resolve(s, home.clone())?;
        let copied = copied.env.iter().filter(|v| v.value.is_none()).map(|v| v.name.as_str());
        let env = sandbox_core::classify_copied_env(copied, Asker::Agent);
        if (!crossings.is_empty() || !env.is_empty()) && !a.approve {
            return Ok(needs_approval(&crossings, &env, "run"));
        }
        let net = if s.policy().is_some_and(|p| !p.net) { Net::Off } else { Net::On };
        let mut sink =
            Reported { inner: files::Watch::new(Capped::default(), net), status: &mut *status };
        let mut warnings = Vec::new();
        let (outcome, _) = planned.run(s, home.clone(), &mut sink, &mut |w, _| warnings.push(w))?;
        let (capped, seen) = sink.inner.finish();
        let code =
            if outcome.timed_out { crate::exit::TIMEOUT } else { crate::exit::of_script(&outcome) };
        let mut v = outcome_json(&outcome, code, &capped);
        if let Some(list) = v["warnings"].as_array_mut() {
            let warnings = key_warnings.iter().cloned().chain(warnings);
            list.splice(0..0, warnings.map(Value::from));
        }
        let mut notes = Vec::new();
        if run::failed_offline(&outcome, &seen) {
            notes.push(format!("{}; {}", netoff::NOTE, netoff::hint(netoff::Where::SessionTool)));
        }
        if let Some((note, hint)) = netoff::allowlist_note(&outcome.net_refused, true) {
            notes.push(format!("{note}; {hint} (the user must approve a wider list)"));
        }
        v["net_refused"] = serde_json::to_value(&outcome.net_refused).unwrap_or_default();
        v["notes"] = notes.into();
        Ok(v)
    })
}

/// A sink that passes the output on to `inner` and the status lines to `status`.
struct Reported<'a, S> {
    inner: S,
    status: &'a mut (dyn FnMut(&str) + Send),
}

impl<S: OutputSink> OutputSink for Reported<'_, S> {
    fn write(&mut self, stream: Stream, chunk: &[u8]) {
        self.inner.write(stream, chunk);
    }

    fn closed(&self) -> bool {
        self.inner.closed()
    }

    fn status(&mut self, line: &str) {
        (self.status)(line);
    }
}

/// `work` on session `id`, found through the registry as `session exec` finds it. A session
/// started in another workspace than the server's is a crossing: unless `approve`, the
/// answer is `needs_approval` and `work` is not done.
fn on_session(
    id: &str,
    engine: Option<&str>,
    approve: bool,
    mut work: impl FnMut(&dyn DynSession) -> Result<Value, EngineError>,
) -> Answer {
    let workspace = spec::workspace()?;
    let home = spec::home();
    registry::with_session(id, registry::Target { engine, namespace: None }, |s| {
        let crossings = session_crossings(s, &workspace, home.as_ref());
        if !crossings.is_empty() && !approve {
            return Ok(needs_approval(&crossings, &[], "call"));
        }
        work(s)
    })
}

/// The crossings of using session `s` from the server's `workspace`, against `$HOME` as
/// given and real.
fn session_crossings(
    s: &dyn DynSession,
    workspace: &Path,
    home: Option<&(PathBuf, PathBuf)>,
) -> Vec<Crossing> {
    let theirs = Path::new(s.workspace());
    let mut all = Vec::new();
    for home in spec::homes(home) {
        for c in sandbox_core::classify_session(s.id(), theirs, workspace, home) {
            spec::push_new(&mut all, c);
        }
    }
    all
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

    /// Each tool's input schema, by name.
    fn schemas() -> std::collections::BTreeMap<String, Value> {
        let tools = Server::new().tool_router.list_all();
        tools
            .into_iter()
            .map(|t| (t.name.to_string(), Value::Object((*t.input_schema).clone())))
            .collect()
    }

    /// The `net` the schemas state as the default is the one a spec without any resolves to.
    #[test]
    fn the_schemas_state_the_network_default_the_resolution_uses() {
        let ctx = sandbox_core::ResolveCtx { workspace: PathBuf::from("/ws"), home: None };
        let script = Layer { script: Some(PathBuf::from("s.py")), ..Layer::default() };
        let none = Layer::default();
        let resolved = sandbox_core::resolve(&none, &none, &script, &ctx).expect("resolves");
        let default = match resolved.net {
            Net::On => "default: `on`",
            Net::Off => "default: `off`",
        };
        for tool in ["run_script", "session_start"] {
            let net = &schemas()[tool]["properties"]["net"];
            let text = net["description"].as_str().unwrap_or_default();
            assert!(text.contains(default), "{tool}: {net}");
        }
    }

    /// Every `engine` argument lists exactly the registry's engines that can serve it, and
    /// `run_script`'s `auto` too; each name is one the registry accepts.
    #[test]
    fn the_schemas_list_the_registrys_engines() {
        let listed = |tool: &str| -> Vec<String> {
            let engine = &schemas()[tool]["properties"]["engine"];
            let values = engine["enum"].as_array().unwrap_or_else(|| panic!("{tool}: {engine}"));
            values.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()
        };
        let mut runs = vec!["auto".to_owned()];
        runs.extend(registry::run_names().into_iter().map(str::to_owned));
        assert_eq!(listed("run_script"), runs);
        assert!(runs.iter().any(|r| r == "native"), "{runs:?}");
        let sessions: Vec<String> =
            registry::session_choices().into_iter().map(str::to_owned).collect();
        for tool in ["session_start", "session_exec", "session_run", "read_file", "list_files"] {
            assert_eq!(listed(tool), sessions, "{tool}");
        }
        let description = schemas()["run_script"]["properties"]["engine"]["description"].clone();
        for name in registry::run_names() {
            assert!(description.to_string().contains(&format!("`{name}`")), "{description}");
        }
    }

    /// What a handler needs is what the schema requires: `read_file` takes a `path`, which
    /// `list_files` may leave out.
    #[test]
    fn the_schemas_require_what_the_handlers_need() {
        let required = |tool: &str| -> Vec<String> {
            let list = schemas()[tool]["required"].as_array().cloned().unwrap_or_default();
            list.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()
        };
        assert_eq!(required("read_file"), ["id", "path"]);
        assert_eq!(required("list_files"), ["id"]);
        assert_eq!(required("write_file"), ["id", "path", "content"]);
        assert!(serde_json::from_value::<ReadFileArgs>(json!({"id": "x"})).is_err());
    }

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";

    #[test]
    fn a_file_is_answered_as_what_it_is() {
        let image = file_reply("p.png", PNG).expect("an image");
        assert_eq!(
            image.value,
            json!({ "path": "p.png", "size": PNG.len(), "mime_type": "image/png" })
        );
        assert!(
            matches!(&image.attached[..], [Attached::Image { mime: "image/png", data }] if data == &content::base64(PNG))
        );
        let result = serde_json::to_value(image.result()).expect("json");
        assert!(result.get("structuredContent").is_none(), "{result}");
        assert_eq!(result["content"][1]["type"], "image", "{result}");

        let mut big = PNG.to_vec();
        big.resize(IMAGE_CAP + 1, 0);
        let refused = file_reply("big.png", &big).err().expect("too big");
        assert!(ui::has_hint(&refused), "{refused}");

        let svg = file_reply("d.svg", b"<svg/>").expect("svg");
        assert_eq!(
            (svg.value["mime_type"].as_str(), svg.value["content"].as_str()),
            (Some("image/svg+xml"), Some("<svg/>"))
        );
        let blob: Vec<u8> = (0..=255u8).cycle().take(BINARY_CAP + 10).collect();
        let binary = file_reply("b.bin", &blob).expect("binary");
        assert_eq!(binary.value["encoding"], "base64");
        assert_eq!(binary.value["truncated"], true);
        assert_eq!(binary.value["content"].as_str().map(str::len), Some(OUTPUT_CAP));
        assert!(binary.attached.is_empty());
    }

    #[test]
    fn a_run_returns_the_images_it_wrote_within_the_caps_and_never_through_a_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path();
        let secret = "s3cr3t-in-a-picture";
        let with_secret = [PNG, secret.as_bytes()].concat();
        let mut written = Vec::new();
        for name in ["z1.png", "z2.png", "z3.png", "z4.png", "z5.png"] {
            std::fs::write(ws.join(name), &with_secret).expect("write");
            written.push(name.to_owned());
        }
        std::fs::write(ws.join("big.jpg"), vec![0xff; IMAGE_CAP + 1]).expect("write");
        std::fs::write(ws.join("fake.png"), "not a picture").expect("write");
        std::fs::write(ws.join("data.csv"), "a,b").expect("write");
        std::os::unix::fs::symlink("/etc/hostname", ws.join("link.png")).expect("link");
        std::fs::create_dir(ws.join("sub")).expect("dir");
        std::os::unix::fs::symlink(ws.join("sub"), ws.join("via")).expect("link");
        std::fs::write(ws.join("sub/s.png"), PNG).expect("write");
        written
            .extend(["big.jpg", "data.csv", "fake.png", "link.png", "via/s.png"].map(String::from));
        written.sort();
        let secrets = sandbox_core::Secrets::of_env([("API_TOKEN", secret)]);
        let (shown, skipped) = written_images(ws, &written, &secrets);
        let paths: Vec<&str> = shown.iter().filter_map(|(v, _)| v["path"].as_str()).collect();
        assert_eq!(paths, ["z1.png", "z2.png", "z3.png", "z4.png"]);
        for (_, attached) in &shown {
            let Attached::Image { data, .. } = attached else { panic!("not an image") };
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD.decode(data).expect("base64");
            assert!(bytes.starts_with(PNG));
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains(secret) && text.contains("***"), "{text}");
        }
        let reasons: Vec<String> =
            skipped.iter().map(|v| format!("{} {}", v["path"], v["reason"])).collect();
        assert_eq!(
            reasons,
            [
                "\"big.jpg\" \"larger than the 1 MiB an answer carries\"".to_owned(),
                "\"fake.png\" \"named as an image, but its bytes are not one\"".to_owned(),
                "\"link.png\" \"cannot be read: Too many levels of symbolic links (os error 40)\""
                    .to_owned(),
                "\"via/s.png\" \"cannot be read: Too many levels of symbolic links (os error 40)\""
                    .to_owned(),
                "\"z5.png\" \"only the first 4 images are returned\"".to_owned(),
            ]
        );
    }

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

    /// The skill's advice on plots names this server's tools, parameter and caps, so a renamed
    /// parameter or a changed cap cannot leave Claude asking for what no longer exists.
    #[test]
    fn the_skill_tells_of_pictures_as_this_server_returns_them() {
        let path =
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../plugin/skills/python-sandbox/SKILL.md");
        let skill = std::fs::read_to_string(path).expect("read the skill");
        let section = skill
            .split_once("## Plots and other pictures")
            .and_then(|(_, rest)| rest.split("\n## ").next())
            .expect("the skill has a section on plots");
        let tools = schemas();
        assert!(tools["run_script"]["properties"].get("return_images").is_some());
        assert!(tools.contains_key("read_file"));
        let caps = format!("at most {MAX_IMAGES}, each at most {} MiB", IMAGE_CAP >> 20);
        for said in [
            "`run_script` with `return_images: true`",
            "`read_file`",
            caps.as_str(),
            "never `plt.show()`",
            "**To show it to the user**",
        ] {
            assert!(section.contains(said), "the skill's section on plots has no `{said}`");
        }
    }
}
