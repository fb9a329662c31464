//! The coding agent's loop, apart from any engine: a Messages API client with retries
//! ([`Api`]), the tools, each one `Sandbox` method ([`Tools`]), and [`run_agent`], which
//! alternates the two until the model ends its turn or the turn budget is spent. The example's
//! `main.rs` wires it to a session; `tests/coding_agent` runs it against a scripted Messages
//! API server and `FakeSandbox` (and a real bwrap session).
//!
//! Everything a tool hands back to the model is capped and scrubbed of the API key and the
//! session's own secrets: output is what leaves the machine.

use std::time::Duration;

use sandbox_core::{
    ExecRequest, Executor, OutputSink, Sandbox, ScrubbingSink, Secrets, Service, ServiceSpec,
    Stream,
};
use serde_json::{Value, json};

/// The Messages API version this client speaks.
pub(crate) const API_VERSION: &str = "2023-06-01";

/// Where requests go unless `ANTHROPIC_BASE_URL` says otherwise.
pub(crate) const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// Why the agent stopped short of an answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AgentError {
    #[error(
        "`ANTHROPIC_API_KEY` is not set\nhint: export an Anthropic API key (https://console.anthropic.com); `ANTHROPIC_BASE_URL` points the agent at another endpoint"
    )]
    MissingKey,
    #[error(
        "the Messages API refused the key (HTTP {status}: {message})\nhint: check `ANTHROPIC_API_KEY` (it is never printed)"
    )]
    Unauthorized { status: u16, message: String },
    #[error("the Messages API answered HTTP {status} ({kind}): {message}")]
    Api { status: u16, kind: String, message: String },
    #[error(
        "the Messages API still fails after {attempts} attempts (last: {last})\nhint: try again later"
    )]
    GaveUp { attempts: u32, last: String },
    #[error("unexpected answer from the Messages API: {0}")]
    BadResponse(String),
}

/// How often and how patiently a failed request is retried.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retry {
    /// Attempts in all, the first included.
    pub(crate) attempts: u32,
    /// The wait before the first retry; doubled for each next one.
    pub(crate) base_delay: Duration,
    /// No wait is longer, `retry-after` included.
    pub(crate) max_delay: Duration,
}

impl Retry {
    pub(crate) const DEFAULT: Retry = Retry {
        attempts: 6,
        base_delay: Duration::from_millis(500),
        max_delay: Duration::from_secs(30),
    };

    /// Pure: the wait before retry number `retry` (0-based), or what the server asked for.
    pub(crate) fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        let backoff = self.base_delay.saturating_mul(1u32 << retry.min(16));
        retry_after.unwrap_or(backoff).min(self.max_delay)
    }
}

/// Pure: whether an HTTP status is worth retrying (rate limits, overload, server errors; the
/// statuses Anthropic's own SDKs retry).
pub(crate) fn retryable(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || status >= 500
}

/// A blocking Messages API client.
pub(crate) struct Api {
    base: String,
    key: String,
    http: ureq::Agent,
    retry: Retry,
    /// The key, to mask in anything an error quotes.
    secrets: Secrets,
}

impl Api {
    /// `base` without the `/v1/messages` path; `key` is sent as `x-api-key`.
    pub(crate) fn new(base: &str, key: &str, retry: Retry) -> Api {
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::PlatformVerifier)
            .build();
        let config = ureq::Agent::config_builder()
            .tls_config(tls)
            // Error bodies carry the reason; statuses are handled below.
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(20)))
            .timeout_global(Some(Duration::from_secs(600)))
            .build();
        let mut secrets = Secrets::new();
        let _ = secrets.register(key);
        Api {
            base: base.trim_end_matches('/').to_owned(),
            key: key.to_owned(),
            http: ureq::Agent::new_with_config(config),
            retry,
            secrets,
        }
    }

    /// From `ANTHROPIC_API_KEY` and `ANTHROPIC_BASE_URL`.
    pub(crate) fn from_env() -> Result<Api, AgentError> {
        let key = std::env::var("ANTHROPIC_API_KEY").ok();
        let base = std::env::var("ANTHROPIC_BASE_URL").ok();
        Api::from_vars(key.as_deref(), base.as_deref())
    }

    /// Pure but for the client it builds: the API from the two variables' values.
    pub(crate) fn from_vars(key: Option<&str>, base: Option<&str>) -> Result<Api, AgentError> {
        let key = key.map(str::trim).filter(|k| !k.is_empty()).ok_or(AgentError::MissingKey)?;
        let base = base.map(str::trim).filter(|b| !b.is_empty()).unwrap_or(DEFAULT_BASE_URL);
        Ok(Api::new(base, key, Retry::DEFAULT))
    }

    /// One `POST /v1/messages`, retried on rate limits, overload, server and transport errors;
    /// `on_retry` hears why each retry waits.
    pub(crate) fn create(
        &self,
        body: &Value,
        on_retry: &mut dyn FnMut(&str),
    ) -> Result<Value, AgentError> {
        let url = format!("{}/v1/messages", self.base);
        let body = body.to_string();
        let mut last = String::new();
        for attempt in 0..self.retry.attempts.max(1) {
            let sent = self
                .http
                .post(&url)
                .header("x-api-key", &self.key)
                .header("anthropic-version", API_VERSION)
                .header("content-type", "application/json")
                .send(body.as_str());
            let (status, retry_after, text) = match sent {
                Ok(mut response) => {
                    let status = response.status().as_u16();
                    let retry_after = response
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(Duration::from_secs);
                    let text = response
                        .body_mut()
                        .with_config()
                        .limit(64 * 1024 * 1024)
                        .read_to_string()
                        .map_err(|e| AgentError::BadResponse(self.secrets.scrub(&e.to_string())))?;
                    (status, retry_after, text)
                }
                Err(error) => {
                    // Connection refused, reset, timed out: as transient as a 503.
                    last = self.secrets.scrub(&format!("cannot reach {url}: {error}"));
                    self.wait(attempt, None, &last, on_retry);
                    continue;
                }
            };
            if status == 200 {
                return serde_json::from_str(&text)
                    .map_err(|e| AgentError::BadResponse(format!("{e} in {}", excerpt(&text))));
            }
            let (kind, message) = error_of(&text);
            let message = self.secrets.scrub(&message);
            if status == 401 || status == 403 {
                return Err(AgentError::Unauthorized { status, message });
            }
            if !retryable(status) {
                return Err(AgentError::Api { status, kind, message });
            }
            last = format!("HTTP {status} {kind}: {message}");
            self.wait(attempt, retry_after, &last, on_retry);
        }
        Err(AgentError::GaveUp { attempts: self.retry.attempts.max(1), last })
    }

    fn wait(
        &self,
        attempt: u32,
        retry_after: Option<Duration>,
        why: &str,
        on_retry: &mut dyn FnMut(&str),
    ) {
        if attempt + 1 < self.retry.attempts {
            let delay = self.retry.delay(attempt, retry_after);
            on_retry(&format!("{why}; retrying in {delay:?}"));
            std::thread::sleep(delay);
        }
    }
}

/// Pure: the `error.type` and `error.message` of an API error body, or the raw text.
fn error_of(text: &str) -> (String, String) {
    let parsed: Option<Value> = serde_json::from_str(text).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    let field =
        |name: &str| error.and_then(|e| e.get(name)).and_then(Value::as_str).map(str::to_owned);
    match (field("type"), field("message")) {
        (Some(kind), Some(message)) => (kind, message),
        _ => ("error".to_owned(), excerpt(text)),
    }
}

fn excerpt(text: &str) -> String {
    cap_text(text, 300)
}

/// Pure: `text` with its middle elided when longer than `limit` bytes (head and tail kept,
/// cut on char boundaries).
pub(crate) fn cap_text(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    let half = limit / 2;
    let head_end = (0..=half).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    let tail_start =
        (text.len() - half..text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(text.len());
    format!(
        "{}\n[... {} bytes elided ...]\n{}",
        &text[..head_end],
        tail_start - head_end,
        &text[tail_start..]
    )
}

/// The JSON schemas of the tools, as the `tools` field of a request.
pub(crate) fn tool_specs() -> Value {
    let path = json!({"type": "string", "description": "file path; relative paths are below the workspace"});
    json!([
        {
            "name": "write_file",
            "description": "Create or replace a file in the sandbox (parent directories are created).",
            "input_schema": {"type": "object", "properties": {
                "path": path, "content": {"type": "string", "description": "the whole new content"}
            }, "required": ["path", "content"]}
        },
        {
            "name": "edit_file",
            "description": "Replace one exact occurrence of `old_string` in a file with `new_string`. Fails when `old_string` is missing or occurs more than once: include enough context to make it unique.",
            "input_schema": {"type": "object", "properties": {
                "path": path, "old_string": {"type": "string"}, "new_string": {"type": "string"}
            }, "required": ["path", "old_string", "new_string"]}
        },
        {
            "name": "read_file",
            "description": "Read a text file from the sandbox.",
            "input_schema": {"type": "object", "properties": {"path": path}, "required": ["path"]}
        },
        {
            "name": "run_command",
            "description": "Run a shell command (`sh -c`) in the workspace and return its exit code, stdout and stderr (long output is elided in the middle). `python3` is available; there is no network unless the session has one.",
            "input_schema": {"type": "object", "properties": {
                "command": {"type": "string"},
                "timeout_secs": {"type": "integer", "description": "kill it after this long (default 60, at most 600)"}
            }, "required": ["command"]}
        },
        {
            "name": "start_service",
            "description": "Start a long-running server command (`sh -c`, in the workspace) that listens on `port` on 0.0.0.0, and return the URL where the user reaches it. A service already on that port is stopped first.",
            "input_schema": {"type": "object", "properties": {
                "command": {"type": "string", "description": "e.g. `python3 -m http.server 8000 --bind 0.0.0.0`"},
                "port": {"type": "integer"}
            }, "required": ["command", "port"]}
        }
    ])
}

/// What one tool call gives back to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ToolResult {
    pub(crate) content: String,
    /// The tool could not do its job (bad input, a sandbox error, a timeout); a command that
    /// ran and exited non-zero is not an error of the tool.
    pub(crate) is_error: bool,
}

impl ToolResult {
    fn ok(content: impl Into<String>) -> ToolResult {
        ToolResult { content: content.into(), is_error: false }
    }

    fn error(content: impl Into<String>) -> ToolResult {
        ToolResult { content: content.into(), is_error: true }
    }
}

/// Limits of the tools.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ToolLimits {
    /// Bytes of each of stdout and stderr kept (and of a file read).
    pub(crate) output: usize,
    /// A command's timeout unless it asks for another.
    pub(crate) default_timeout: Duration,
    /// The longest timeout a command may ask for.
    pub(crate) max_timeout: Duration,
}

impl ToolLimits {
    pub(crate) const DEFAULT: ToolLimits = ToolLimits {
        output: 16 * 1024,
        default_timeout: Duration::from_secs(60),
        max_timeout: Duration::from_secs(600),
    };
}

/// The tools over one sandbox: where relative paths go, which ports may serve, what to mask,
/// and the services started so far.
pub(crate) struct Tools {
    /// The workspace inside the sandbox (absolute).
    pub(crate) root: String,
    /// Ports the session publishes.
    pub(crate) ports: Vec<u16>,
    pub(crate) secrets: Secrets,
    pub(crate) limits: ToolLimits,
    /// Services running now, in start order.
    pub(crate) services: Vec<Service>,
}

fn str_field<'a>(input: &'a Value, name: &str) -> Result<&'a str, ToolResult> {
    input
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolResult::error(format!("missing string field `{name}`")))
}

impl Tools {
    pub(crate) fn new(root: &str, ports: Vec<u16>, secrets: Secrets) -> Tools {
        Tools {
            root: root.to_owned(),
            ports,
            secrets,
            limits: ToolLimits::DEFAULT,
            services: Vec::new(),
        }
    }

    /// Pure: the sandbox path of a tool's `path`.
    pub(crate) fn resolve(&self, path: &str) -> String {
        if path.starts_with('/') {
            path.to_owned()
        } else {
            format!("{}/{}", self.root.trim_end_matches('/'), path.trim_start_matches("./"))
        }
    }

    /// Runs tool `name` with `input`; every answer is scrubbed.
    pub(crate) fn call<S: Sandbox, X: Executor>(
        &mut self,
        sandbox: &S,
        executor: &X,
        name: &str,
        input: &Value,
    ) -> ToolResult {
        let result = match self.dispatch(sandbox, executor, name, input) {
            Ok(result) | Err(result) => result,
        };
        ToolResult { content: self.secrets.scrub(&result.content), is_error: result.is_error }
    }

    fn dispatch<S: Sandbox, X: Executor>(
        &mut self,
        sandbox: &S,
        executor: &X,
        name: &str,
        input: &Value,
    ) -> Result<ToolResult, ToolResult> {
        let failed = |what: &str, e: S::Error| ToolResult::error(format!("{what}: {e}"));
        match name {
            "write_file" => {
                let path = self.resolve(str_field(input, "path")?);
                let content = str_field(input, "content")?;
                executor
                    .block_on(sandbox.write_file(&path, content.as_bytes()))
                    .map_err(|e| failed(&format!("cannot write {path}"), e))?;
                Ok(ToolResult::ok(format!("wrote {} bytes to {path}", content.len())))
            }
            "edit_file" => {
                let path = self.resolve(str_field(input, "path")?);
                let old = str_field(input, "old_string")?;
                let new = str_field(input, "new_string")?;
                let bytes = executor
                    .block_on(sandbox.read_file(&path))
                    .map_err(|e| failed(&format!("cannot read {path}"), e))?;
                let text = String::from_utf8(bytes)
                    .map_err(|_| ToolResult::error(format!("{path} is not UTF-8 text")))?;
                let edited =
                    edit(&text, old, new).map_err(|e| ToolResult::error(format!("{path}: {e}")))?;
                executor
                    .block_on(sandbox.write_file(&path, edited.as_bytes()))
                    .map_err(|e| failed(&format!("cannot write {path}"), e))?;
                Ok(ToolResult::ok(format!("edited {path}")))
            }
            "read_file" => {
                let path = self.resolve(str_field(input, "path")?);
                let bytes = executor
                    .block_on(sandbox.read_file(&path))
                    .map_err(|e| failed(&format!("cannot read {path}"), e))?;
                Ok(ToolResult::ok(cap_text(&String::from_utf8_lossy(&bytes), self.limits.output)))
            }
            "run_command" => {
                let command = str_field(input, "command")?;
                let timeout = match input.get("timeout_secs") {
                    None | Some(Value::Null) => self.limits.default_timeout,
                    Some(value) => value
                        .as_u64()
                        .map(Duration::from_secs)
                        .ok_or_else(|| {
                            ToolResult::error("`timeout_secs` must be a whole number of seconds")
                        })?
                        .min(self.limits.max_timeout),
                };
                let request = ExecRequest {
                    cwd: Some(self.root.clone()),
                    timeout: Some(timeout),
                    ..ExecRequest::new(&["sh", "-c", command])
                };
                let mut output = ScrubbingSink::new(
                    &self.secrets,
                    Capped::new(self.limits.output, self.secrets.max_len()),
                );
                let outcome = executor
                    .block_on(sandbox.exec(&request, &mut output))
                    .map_err(|e| failed("cannot run the command", e))?;
                let output = output.finish();
                let report = format!(
                    "exit code: {}\nstdout:\n{}\nstderr:\n{}",
                    outcome.exit_code,
                    output.stdout.text(),
                    output.stderr.text()
                );
                if outcome.timed_out {
                    return Err(ToolResult::error(format!(
                        "timed out after {} s and was killed\n{report}",
                        timeout.as_secs()
                    )));
                }
                Ok(ToolResult::ok(report))
            }
            "start_service" => {
                let command = str_field(input, "command")?;
                let port = input
                    .get("port")
                    .and_then(Value::as_u64)
                    .and_then(|p| u16::try_from(p).ok())
                    .ok_or_else(|| ToolResult::error("missing port number `port`"))?;
                if !self.ports.contains(&port) {
                    return Err(ToolResult::error(format!(
                        "port {port} is not published; this session publishes {}",
                        list_ports(&self.ports)
                    )));
                }
                // Restarting after a fix is the common case: the old one holds the port.
                if let Some(at) = self.services.iter().position(|s| s.port == port) {
                    let old = self.services.remove(at);
                    executor.block_on(sandbox.stop_service(&old)).map_err(|e| {
                        failed(&format!("cannot stop the service on port {port}"), e)
                    })?;
                }
                let spec = ServiceSpec {
                    argv: vec![
                        "sh".to_owned(),
                        "-c".to_owned(),
                        format!("cd {} && {command}", sh_quote(&self.root)),
                    ],
                    port,
                    env: Vec::new(),
                };
                let service = executor
                    .block_on(sandbox.start_service(&spec))
                    .map_err(|e| failed(&format!("cannot start the service on port {port}"), e))?;
                let url = service.url.clone();
                self.services.push(service);
                Ok(ToolResult::ok(format!("serving on port {port}; the user reaches it at {url}")))
            }
            other => Err(ToolResult::error(format!(
                "unknown tool `{other}`; the tools are write_file, edit_file, read_file, run_command, start_service"
            ))),
        }
    }
}

/// Pure: `text` with the one occurrence of `old` replaced by `new`.
pub(crate) fn edit(text: &str, old: &str, new: &str) -> Result<String, String> {
    if old.is_empty() {
        return Err("`old_string` is empty".to_owned());
    }
    match text.matches(old).count() {
        0 => {
            Err("`old_string` does not occur in the file; read it again and copy the text exactly"
                .to_owned())
        }
        1 => Ok(text.replacen(old, new, 1)),
        n => Err(format!("`old_string` occurs {n} times; include more context to make it unique")),
    }
}

fn list_ports(ports: &[u16]) -> String {
    if ports.is_empty() {
        return "no port".to_owned();
    }
    ports.iter().map(u16::to_string).collect::<Vec<_>>().join(", ")
}

/// Pure: `text` as one single-quoted `sh` word.
pub(crate) fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// One stream's output, its head and tail kept once it grows past the limit.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    head: Vec<u8>,
    tail: Vec<u8>,
    dropped: usize,
    limit: usize,
    /// The longest secret: trimmed at each cut, so no part of one survives a cut.
    guard: usize,
}

impl Kept {
    fn push(&mut self, mut chunk: &[u8]) {
        let half = self.limit / 2;
        if self.head.len() < half {
            let take = chunk.len().min(half - self.head.len());
            self.head.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
        }
        self.tail.extend_from_slice(chunk);
        if self.tail.len() > half {
            let excess = self.tail.len() - half;
            self.tail.drain(..excess);
            self.dropped += excess;
        }
    }

    pub(crate) fn text(&self) -> String {
        if self.dropped == 0 {
            let mut all = self.head.clone();
            all.extend_from_slice(&self.tail);
            return String::from_utf8_lossy(&all).into_owned();
        }
        let head = &self.head[..self.head.len().saturating_sub(self.guard)];
        let tail = &self.tail[self.guard.min(self.tail.len())..];
        let elided = self.dropped + 2 * self.guard;
        format!(
            "{}\n[... {elided} bytes elided ...]\n{}",
            String::from_utf8_lossy(head),
            String::from_utf8_lossy(tail)
        )
    }
}

/// A sink keeping a capped view of stdout and stderr.
#[derive(Debug, Default)]
pub(crate) struct Capped {
    pub(crate) stdout: Kept,
    pub(crate) stderr: Kept,
}

impl Capped {
    fn new(limit: usize, guard: usize) -> Capped {
        let kept = || Kept { limit, guard, ..Kept::default() };
        Capped { stdout: kept(), stderr: kept() }
    }
}

impl OutputSink for Capped {
    fn write(&mut self, stream: Stream, chunk: &[u8]) {
        match stream {
            Stream::Stdout => self.stdout.push(chunk),
            Stream::Stderr => self.stderr.push(chunk),
        }
    }
}

/// What the agent is asked to do and how far it may go.
#[derive(Debug, Clone)]
pub(crate) struct AgentConfig {
    pub(crate) model: String,
    pub(crate) max_tokens: u32,
    /// Requests to the model at most.
    pub(crate) max_turns: u32,
    pub(crate) system: String,
}

impl AgentConfig {
    pub(crate) fn new(model: &str, max_turns: u32, tools: &Tools) -> AgentConfig {
        let ports = list_ports(&tools.ports);
        AgentConfig {
            model: model.to_owned(),
            max_tokens: 8192,
            max_turns,
            system: format!(
                "You are a coding agent working in a disposable Linux sandbox. Your workspace is {root}; relative paths are below it. Use the tools to write code, run it, read its output and fix it until the task is done. Python 3 is installed (standard library; `uv` may be on PATH). To show the user something, start a server with start_service on a published port ({ports}), listening on 0.0.0.0. When the task is done, reply with a short summary and no tool call.",
                root = tools.root
            ),
        }
    }
}

/// Why the loop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The model ended its turn.
    EndTurn,
    /// The turn budget was spent while the model still called tools.
    MaxTurns,
    /// Any other `stop_reason` (`max_tokens`, `refusal`, ...).
    Other(String),
}

/// What a finished loop has to show.
#[derive(Debug, Clone)]
pub(crate) struct Outcome {
    pub(crate) stop: Stop,
    pub(crate) turns: u32,
}

/// What the loop reports while it runs.
#[derive(Debug)]
pub(crate) enum Event<'a> {
    Text(&'a str),
    Call { name: &'a str, input: &'a Value },
    Result { name: &'a str, result: &'a ToolResult },
    Retry(&'a str),
}

/// The agent loop: ask the model, run the tools it calls, hand back their results, until it
/// ends its turn or `config.max_turns` requests were made.
pub(crate) fn run_agent<S: Sandbox, X: Executor>(
    api: &Api,
    sandbox: &S,
    executor: &X,
    tools: &mut Tools,
    task: &str,
    config: &AgentConfig,
    events: &mut dyn FnMut(Event<'_>),
) -> Result<Outcome, AgentError> {
    let specs = tool_specs();
    let mut messages = vec![json!({"role": "user", "content": task})];
    for turn in 1..=config.max_turns {
        let request = json!({
            "model": config.model,
            "max_tokens": config.max_tokens,
            "system": config.system,
            "tools": specs,
            "messages": messages,
        });
        let response = api.create(&request, &mut |why| events(Event::Retry(why)))?;
        let content = response
            .get("content")
            .and_then(Value::as_array)
            .cloned()
            .ok_or_else(|| AgentError::BadResponse("no `content` array".to_owned()))?;
        let stop_reason = response.get("stop_reason").and_then(Value::as_str).unwrap_or("");
        let mut results = Vec::new();
        for block in &content {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    let said = block.get("text").and_then(Value::as_str).unwrap_or("");
                    events(Event::Text(said));
                }
                Some("tool_use") => {
                    let id = block.get("id").and_then(Value::as_str).unwrap_or("");
                    let name = block.get("name").and_then(Value::as_str).unwrap_or("");
                    let input = block.get("input").cloned().unwrap_or(Value::Null);
                    events(Event::Call { name, input: &input });
                    let result = tools.call(sandbox, executor, name, &input);
                    events(Event::Result { name, result: &result });
                    results.push(json!({
                        "type": "tool_result",
                        "tool_use_id": id,
                        "content": result.content,
                        "is_error": result.is_error,
                    }));
                }
                _ => {}
            }
        }
        messages.push(json!({"role": "assistant", "content": content}));
        match stop_reason {
            "tool_use" if !results.is_empty() => {
                messages.push(json!({"role": "user", "content": results}));
            }
            "end_turn" => return Ok(Outcome { stop: Stop::EndTurn, turns: turn }),
            other => return Ok(Outcome { stop: Stop::Other(other.to_owned()), turns: turn }),
        }
    }
    Ok(Outcome { stop: Stop::MaxTurns, turns: config.max_turns })
}
