//! `python-sandbox mcp` spoken to as an MCP client would: newline-delimited JSON-RPC over the
//! server's stdio (initialize, the tool list, calls). The run on the default engine is gated
//! on one being available (`SKIPPED: reason`); the approval result and the diagnostics need
//! no engine.

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{Value, json};

use crate::Ctx;

/// Every tool the server lists, sorted: what each client test expects to see.
pub(crate) const TOOLS: [&str; 11] = [
    "check_script",
    "detect",
    "list_files",
    "read_file",
    "run_script",
    "session_exec",
    "session_run",
    "session_start",
    "session_stop",
    "start_service",
    "write_file",
];

/// A running server and the next request id.
struct Client {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Client {
    /// Starts the server in `ctx` with `home` as `HOME` and completes the handshake.
    fn start(ctx: &Ctx, home: &std::path::Path) -> (Client, Value) {
        Client::start_with(ctx, home, &[])
    }

    /// [`Client::start`] with more of the server's environment.
    fn start_with(ctx: &Ctx, home: &std::path::Path, env: &[(&str, &str)]) -> (Client, Value) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_python-sandbox"))
            .arg("mcp")
            .current_dir(ctx.path())
            .env("HOME", home)
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn python-sandbox mcp");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut client = Client { child, stdin, stdout, next: 1 };
        let init = client.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "it", "version": "0"}}),
        );
        client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        (client, init)
    }

    fn send(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").expect("write to the server");
        self.stdin.flush().expect("flush");
    }

    /// One request and its result (the server answers every request; notifications it might
    /// send first are skipped).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            let n = self.stdout.read_line(&mut line).expect("read from the server");
            assert!(n > 0, "the server closed stdout before answering {method}");
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout is not JSON-RPC ({e}): {line}"));
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    /// One request written as `line` (JSON text, which `json!` could not spell, such as a
    /// key twice) with id `id`; the whole answer, result or error.
    fn raw(&mut self, id: u64, line: &str) -> Value {
        writeln!(self.stdin, "{line}").expect("write to the server");
        self.stdin.flush().expect("flush");
        loop {
            let mut answer = String::new();
            let n = self.stdout.read_line(&mut answer).expect("read from the server");
            assert!(n > 0, "the server closed stdout before answering {line}");
            let v: Value = serde_json::from_str(&answer).expect("JSON-RPC");
            if v["id"] == id {
                return v;
            }
        }
    }

    /// A tool call's structured result and whether it is an error.
    fn call(&mut self, tool: &str, arguments: Value) -> (Value, bool) {
        let result = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        (result["structuredContent"].clone(), result["isError"] == true)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn mcp_over_stdio() {
    let ctx = Ctx::new();
    let home = tempfile::tempdir().expect("home");
    std::fs::create_dir(home.path().join(".ssh")).expect("fake ~/.ssh");
    let (mut client, init) = Client::start(&ctx, home.path());
    assert_eq!(init["serverInfo"]["name"], "python-sandbox");
    assert!(init["instructions"].as_str().is_some_and(|i| i.contains("approve: true")), "{init}");

    let tools = client.request("tools/list", json!({}));
    let mut names: Vec<&str> = tools["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(names, TOOLS);
    let run_tool =
        tools["tools"].as_array().and_then(|t| t.iter().find(|t| t["name"] == "run_script"));
    let schema = &run_tool.expect("run_script")["inputSchema"]["properties"];
    assert!(schema["approve"].is_object() && schema["code"].is_object(), "{schema}");

    // A home secret is named, never mounted, until a call carries `approve: true`.
    let ssh = home.path().join(".ssh");
    let (v, is_error) = client.call(
        "run_script",
        json!({"code": "print(1)", "mounts": [format!("{}:ro", ssh.display())]}),
    );
    assert!(!is_error, "{v}");
    assert_eq!(v["status"], "needs_approval", "{v}");
    let crossing = &v["crossings"][0];
    assert_eq!(crossing["path"], ssh.display().to_string(), "{v}");
    assert_eq!(crossing["mode"], "ro");
    assert!(v.get("exit_code").is_none(), "nothing ran: {v}");
    let (v, _) = client.call("session_start", json!({"mounts": ["~/.ssh:ro"]}));
    assert_eq!(v["status"], "needs_approval", "a session too: {v}");

    // Diagnostics as `meta check --json` gives them.
    let bad = "# /// script\n# dependencies = \"requests\"\n# ///\n";
    let (v, is_error) = client.call("check_script", json!({"code": bad}));
    assert!(!is_error, "{v}");
    assert_eq!(v["status"], "invalid", "{v}");
    assert!(v["diagnostics"][0]["line"] == 2, "{v}");
    let (v, is_error) = client.call("check_script", json!({"code": "print(1)", "path": "x.py"}));
    assert!(is_error && v["error"].as_str().is_some_and(|e| e.contains("exactly one")), "{v}");

    // A run on the default engine: its exit code, output (capped), files written.
    let code = "import sys\nprint(6 * 7)\nprint('x' * 70000, file=sys.stderr)\nopen('out.txt', 'w').write('hi')\nsys.exit(3)\n";
    let (v, is_error) = client.call("run_script", json!({"code": code}));
    if no_engine(&v, is_error) {
        println!("SKIPPED: mcp run_script: no engine here");
        return;
    }
    assert!(!is_error, "{v}");
    assert_eq!(v["exit_code"], 3, "{v}");
    assert_eq!(v["stdout"], "42\n");
    let stderr = v["stderr"].as_str().expect("stderr");
    assert!(
        stderr.len() < 70000 && stderr.contains("output capped at 65536 bytes"),
        "{}",
        stderr.len()
    );
    assert_eq!(v["files_written"], json!(["out.txt"]));
    assert_eq!(v["files_deleted"], json!([]));
    assert!(v["duration_ms"].is_u64());
    assert_eq!(ctx.read("out.txt"), "hi");

    // A protected path stays read-only; the answer names it, and says how to widen. Deleting a
    // file is reported as such.
    let code = "import os\nos.remove('out.txt')\nopen('.claude/settings.json', 'w').write('{}')\n";
    let (v, is_error) = client.call("run_script", json!({"code": code}));
    assert!(!is_error, "{v}");
    assert_eq!(v["exit_code"], 1, "{v}");
    assert_eq!(v["protected_refused"], json!([".claude/settings.json"]), "{v}");
    assert_eq!(v["files_deleted"], json!(["out.txt"]), "{v}");
    let notes = v["notes"].to_string();
    assert!(notes.contains("--mount ./.claude:rw --approve"), "{v}");
    assert!(!ctx.path().join(".claude").exists(), "the placeholder is gone");

    // An agent's list: only the listed name resolves; the refusal is named with the pattern
    // that would allow it. (PyPI is a registry this machine reaches; nothing is connected.)
    let code = "import socket\nfor n in ('pypi.org', 'registry.npmjs.org'):\n    try:\n        socket.getaddrinfo(n, 443)\n        print(n, 'resolved')\n    except OSError:\n        print(n, 'refused')\n";
    let (v, is_error) = client.call("run_script", json!({"code": code, "net": ["pypi.org:443"]}));
    assert!(!is_error, "{v}");
    if v["exit_code"] == 2 {
        // The default engine here cannot hold a list (docker or podman): refused, not widened.
        assert!(v.to_string().contains("cannot hold a network allowlist"), "{v}");
    } else {
        assert_eq!(v["stdout"], "pypi.org resolved\nregistry.npmjs.org refused\n", "{v}");
        assert_eq!(v["net_refused"][0]["host"], "registry.npmjs.org", "{v}");
        assert!(v["notes"].to_string().contains("the network allowlist refused"), "{v}");
    }
    let (v, is_error) = client.call("run_script", json!({"code": "print(1)", "net": ["*"]}));
    assert!(is_error && v.to_string().contains("invalid network pattern"), "{v}");

    // A secret-looking variable's value is masked in what the script prints.
    let (v, _) = client.call(
        "run_script",
        json!({"code": "import os\nprint(os.environ['API_TOKEN'])", "env": ["API_TOKEN=s3cr3t-value-123"]}),
    );
    assert_eq!(v["exit_code"], 0, "{v}");
    let shown = v["stdout"].as_str().unwrap_or_default();
    assert!(!shown.is_empty() && !shown.contains("s3cr3t-value-123"), "{v}");
}

/// The `mcp` SDK installed once per target directory with the test Python's pip; `None` (and
/// the reason) when it cannot be installed here.
fn python_sdk() -> Result<std::path::PathBuf, String> {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-python-sdk");
    if dir.join("mcp").join("__init__.py").is_file() {
        return Ok(dir);
    }
    let out = Command::new(PYTHON)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target"])
        .arg(&dir)
        .arg("mcp")
        .output()
        .map_err(|e| format!("cannot run {PYTHON}: {e}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("pip install mcp failed: {}", stderr.lines().last().unwrap_or("")));
    }
    Ok(dir)
}

/// The interpreter of the SDK client (the SDK needs 3.10 or newer).
const PYTHON: &str = "/usr/bin/python3.11";

#[test]
fn mcp_python_sdk_client() {
    let ctx = Ctx::new();
    let home = tempfile::tempdir().expect("home");
    std::fs::create_dir(home.path().join(".ssh")).expect("fake ~/.ssh");
    sdk_client(&ctx, home.path(), "mcp_client.py", "mcp sdk client");
}

/// What an agent sees, through the real SDK client (`tests/mcp_agent_view.py`, which says what
/// it checks): progress notifications while a run or a session installs a dependency, the
/// images a script wrote and `read_file`'s kinds of content, the note of a run that failed
/// because its network is off. The home is fresh, so the first run installs.
#[test]
fn mcp_python_sdk_sees_progress_pictures_and_the_network_note() {
    let ctx = Ctx::new();
    let home = tempfile::tempdir().expect("home");
    sdk_client(&ctx, home.path(), "mcp_agent_view.py", "mcp agent view");
}

/// Runs the SDK client `tests/SCRIPT` against the binary in `ctx` with `home` as `HOME`; it
/// must end with `ok: WHAT` (or say why it skipped).
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn sdk_client(ctx: &Ctx, home: &std::path::Path, script: &str, what: &str) {
    if !std::path::Path::new(PYTHON).exists() {
        println!("SKIPPED: {what}: no {PYTHON}");
        return;
    }
    let sdk = match python_sdk() {
        Ok(dir) => dir,
        Err(reason) => {
            println!("SKIPPED: {what}: {reason}");
            return;
        }
    };
    let client = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join(script);
    let out = Command::new(PYTHON)
        .arg(client)
        .arg(env!("CARGO_BIN_EXE_python-sandbox"))
        .arg(ctx.path())
        .arg(home)
        .env("PYTHONPATH", &sdk)
        .stdin(Stdio::null())
        .output()
        .expect("run the sdk client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    print!("{stdout}");
    assert!(
        out.status.success(),
        "the sdk client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&format!("ok: {what}")) || stdout.contains("SKIPPED:"), "{stdout}");
}

/// `pvc:NAME:/path[:ro]` in the run tool's `mounts` and in the script's own table: refused
/// off k8s (the inline entry at its line and column), a claim not meant for sandboxes refused
/// on k8s, a session refuses one; each with a hint and before any engine or cluster is asked.
#[test]
fn mcp_claim_mounts_are_recognised_in_arguments_and_the_scripts_table() {
    let ctx = Ctx::new();
    let home = tempfile::tempdir().expect("home");
    let (mut client, _) = Client::start(&ctx, home.path());
    let inline = "# /// script\n# [tool.python-sandbox]\n# mounts = [\"pvc:psbx-data-a:/data:ro\"]\n# ///\nprint(1)\n";
    let cases = [
        (
            "run_script",
            json!({"code": "print(1)", "mounts": ["pvc:psbx-data-a:/data"]}),
            "--mount `pvc:psbx-data-a:/data`: a PersistentVolumeClaim is mounted only by the k8s engine (this run is on `auto`)",
        ),
        (
            "run_script",
            json!({"code": inline, "engine": "docker"}),
            "<code>:3:13: mount `pvc:psbx-data-a:/data:ro`: a PersistentVolumeClaim is mounted only by the k8s engine (this run is on `docker`)",
        ),
        (
            "run_script",
            json!({"code": "print(1)", "engine": "k8s", "mounts": ["pvc:shared:/data"]}),
            "claim `shared` is not one meant for sandboxes",
        ),
        (
            "session_start",
            json!({"mounts": ["pvc:psbx-data-a:/data"]}),
            "a claim is mounted only by `run --engine k8s`, not into a session",
        ),
    ];
    for (tool, arguments, error) in cases {
        let (v, is_error) = client.call(tool, arguments.clone());
        assert!(is_error, "{tool} {arguments}: {v}");
        let text = v.to_string();
        assert!(text.contains(error), "{tool} {arguments}: {v}");
        assert!(text.contains("hint"), "{tool} {arguments}: {v}");
    }
    assert!(ctx.ls().is_empty(), "nothing ran: {:?}", ctx.ls());
}

/// Without pasta, where the built-in relay cannot be had, the network of a run and of a
/// session is the built-in proxy's, HTTP(S) only: the tools' answers say so in `notes` (an
/// agent reads the answers, never the server's stderr), and say nothing with net off or
/// through the relay (full TCP/UDP).
#[test]
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn mcp_answers_note_a_network_that_is_http_only() {
    let ctx = Ctx::new();
    if let Err(reason) = crate::session::available(&ctx, "native") {
        println!("SKIPPED: mcp notes on native: {reason}");
        return;
    }
    let home = tempfile::tempdir().expect("home");
    let bin = tempfile::tempdir().expect("bin");
    let path = crate::fault::path_without_pasta(bin.path());
    let (mut client, _) = Client::start_with(&ctx, home.path(), &[("PATH", &path)]);
    let http_only = |v: &Value| {
        v["notes"].as_array().is_some_and(|notes| {
            notes.len() == 1 && notes[0].as_str().is_some_and(|n| n.contains("HTTP(S) only"))
        })
    };
    let (v, is_error) = client.call("run_script", json!({"code": "print(1)", "engine": "native"}));
    let relay = sandbox_net::relay_available();
    let noted = |v: &Value| if relay { v["notes"] == json!([]) } else { http_only(v) };
    assert!(!is_error && v["exit_code"] == 0 && noted(&v), "{v}");
    let (v, is_error) =
        client.call("run_script", json!({"code": "print(1)", "engine": "native", "net": "off"}));
    assert!(!is_error && v["notes"] == json!([]), "{v}");
    let (v, is_error) = client.call("session_start", json!({"engine": "native", "ttl": "2m"}));
    assert!(!is_error && noted(&v), "{v}");
    let (stopped, is_error) = client.call("session_stop", json!({"id": v["id"]}));
    assert!(!is_error, "{stopped}");
}

/// Whether a run's answer says no engine works here (a gated test then skips).
fn no_engine(v: &Value, is_error: bool) -> bool {
    is_error && v["error"].as_str().is_some_and(|e| e.starts_with("no isolation engine"))
}

/// The crossing in a `needs_approval` answer with `key` (`path` or `variable`) `value`, if
/// the answer is one and nothing ran.
fn crossing<'a>(v: &'a Value, key: &str, value: &str) -> Option<&'a Value> {
    if v["status"] != "needs_approval" || v.get("exit_code").is_some() {
        return None;
    }
    v["crossings"].as_array()?.iter().find(|c| c[key] == value)
}

/// Item 6 of issue 30: a script `path` outside the workspace (through `~`, `..` or a link
/// in the workspace) is a crossing, as is a read-only mount there and a `check_script` of
/// such a file; the agent learns nothing of the file until the user approves. A `path` that
/// is no regular file (the server's own stdin) is refused; a script in the workspace needs
/// nothing.
#[test]
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn mcp_script_paths_outside_the_workspace_need_approval() {
    let ctx = Ctx::new();
    let home = tempfile::tempdir().expect("home");
    std::fs::create_dir(home.path().join(".ssh")).expect("fake ~/.ssh");
    let key = home.path().join(".ssh/id_rsa");
    std::fs::write(&key, "PRIVATE KEY hunter2-secret-material\n").expect("key");
    let outside = tempfile::tempdir().expect("outside");
    let elsewhere = outside.path().canonicalize().expect("real").join("x.py");
    std::fs::write(&elsewhere, "print('outside ran')\n").expect("script outside");
    std::os::unix::fs::symlink(&elsewhere, ctx.path().join("link.py")).expect("link");
    ctx.write("ok.py", "print('inside ran')\n");
    let dotdot =
        format!("../{}/x.py", outside.path().file_name().and_then(|n| n.to_str()).expect("name"));
    let (mut client, _) = Client::start(&ctx, home.path());
    let key = key.display().to_string();
    let far = elsewhere.display().to_string();
    let cases = [
        ("run_script", json!({"path": "~/.ssh/id_rsa"}), &key, "secret"),
        ("run_script", json!({"path": key}), &key, "secret"),
        ("run_script", json!({"path": far}), &far, "outside-workspace"),
        ("run_script", json!({"path": "link.py"}), &far, "outside-workspace"),
        ("run_script", json!({"path": dotdot}), &far, "outside-workspace"),
        ("check_script", json!({"path": "~/.ssh/id_rsa"}), &key, "secret"),
        ("check_script", json!({"path": "link.py"}), &far, "outside-workspace"),
    ];
    for (tool, arguments, path, kind) in cases {
        let (v, is_error) = client.call(tool, arguments.clone());
        assert!(!is_error, "{tool} {arguments}: {v}");
        let found = crossing(&v, "path", path);
        assert!(found.is_some_and(|c| c["kind"] == kind), "{tool} {arguments}: {v}");
        assert!(!v.to_string().contains("hunter2"), "{v}");
    }
    let dir = outside.path().canonicalize().expect("real").display().to_string();
    let (v, _) =
        client.call("run_script", json!({"code": "print(1)", "mounts": [format!("{dir}:ro")]}));
    assert!(crossing(&v, "path", &dir).is_some_and(|c| c["kind"] == "outside-workspace"), "{v}");
    let (v, is_error) = client.call("run_script", json!({"path": "/dev/stdin"}));
    assert!(
        is_error && v["error"].as_str().is_some_and(|e| e.contains("not a regular file")),
        "{v}"
    );
    let (v, is_error) = client.call("check_script", json!({"path": "ok.py"}));
    assert!(!is_error && v.get("status") != Some(&json!("needs_approval")), "{v}");

    let (v, is_error) = client.call("run_script", json!({"path": "ok.py"}));
    if no_engine(&v, is_error) {
        println!("SKIPPED: mcp script paths, the runs: no engine here");
        return;
    }
    assert!(!is_error && v["exit_code"] == 0 && v["stdout"] == "inside ran\n", "{v}");
    let (v, is_error) = client.call("run_script", json!({"path": "link.py", "approve": true}));
    assert!(!is_error && v["exit_code"] == 0 && v["stdout"] == "outside ran\n", "{v}");
}

/// Item 7 of issue 30: a host variable copied by name into a sandbox (`env: ["NAME"]`, or the
/// script's own `env = ["NAME"]`) needs approval, a secret-looking one as any other; nothing
/// runs, so no encoding of the value can come back. A value the agent gives needs none.
#[test]
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn mcp_host_variables_copied_by_name_need_approval() {
    let ctx = Ctx::new();
    let home = tempfile::tempdir().expect("home");
    let secret = "wJalrXUtnFEMI-server-own-secret";
    let env = [("AWS_SECRET_ACCESS_KEY", secret), ("PLAIN_SETTING", "abc")];
    let (mut client, _) = Client::start_with(&ctx, home.path(), &env);
    let leak = "import base64, os\nprint(base64.b64encode(os.environ['AWS_SECRET_ACCESS_KEY'].encode()).decode(), os.environ['AWS_SECRET_ACCESS_KEY'][::-1])\n";
    let inline = format!(
        "# /// script\n# [tool.python-sandbox]\n# env = [\"AWS_SECRET_ACCESS_KEY\"]\n# ///\n{leak}"
    );
    let cases = [
        (
            "run_script",
            json!({"code": leak, "env": ["AWS_SECRET_ACCESS_KEY"]}),
            "AWS_SECRET_ACCESS_KEY",
            "secret-variable",
        ),
        ("run_script", json!({"code": inline}), "AWS_SECRET_ACCESS_KEY", "secret-variable"),
        (
            "run_script",
            json!({"code": "print(1)", "env": ["PLAIN_SETTING"]}),
            "PLAIN_SETTING",
            "host-variable",
        ),
        (
            "session_start",
            json!({"env": ["AWS_SECRET_ACCESS_KEY"]}),
            "AWS_SECRET_ACCESS_KEY",
            "secret-variable",
        ),
    ];
    for (tool, arguments, name, kind) in cases {
        let (v, is_error) = client.call(tool, arguments.clone());
        assert!(!is_error, "{tool} {arguments}: {v}");
        let found = crossing(&v, "variable", name);
        assert!(found.is_some_and(|c| c["kind"] == kind), "{tool} {arguments}: {v}");
    }
    let (v, is_error) = client.call(
        "run_script",
        json!({"code": "import os\nprint(os.environ['GIVEN'])", "env": ["GIVEN=from-the-agent"]}),
    );
    if no_engine(&v, is_error) {
        println!("SKIPPED: mcp host variables, the run: no engine here");
        return;
    }
    assert!(!is_error && v["stdout"] == "from-the-agent\n", "{v}");
}

/// Item 8 of issue 30: a key twice in one object of a call, `approve` among the tool's
/// arguments or the tool's `name`, is a JSON-RPC error naming the key; nothing runs, and
/// the server goes on answering.
#[test]
fn mcp_duplicate_keys_are_refused() {
    let ctx = Ctx::new();
    let home = tempfile::tempdir().expect("home");
    std::fs::create_dir(home.path().join(".ssh")).expect("fake ~/.ssh");
    let ssh = home.path().join(".ssh").display().to_string();
    let (mut client, _) = Client::start(&ctx, home.path());
    let code = "open('ran.txt', 'w').write('ran')";
    let approve = format!(
        r#"{{"jsonrpc":"2.0","id":90,"method":"tools/call","params":{{"name":"run_script","arguments":{{"code":"{code}","mounts":["{ssh}:ro"],"approve":false,"approve":true}}}}}}"#
    );
    let name = format!(
        r#"{{"jsonrpc":"2.0","id":91,"method":"tools/call","params":{{"name":"detect","name":"run_script","arguments":{{"code":"{code}"}}}}}}"#
    );
    for (id, line, key, at) in
        [(90, approve, "approve", "`params.arguments`"), (91, name, "name", "`params`")]
    {
        let v = client.raw(id, &line);
        assert_eq!(v["error"]["code"], -32602, "{v}");
        let message = v["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(&format!("duplicate key `{key}` in {at}")), "{v}");
        assert!(v.get("result").is_none(), "{v}");
    }
    let tools = client.request("tools/list", json!({}));
    assert!(tools["tools"].as_array().is_some_and(|t| t.len() == TOOLS.len()), "{tools}");
    assert!(!ctx.ls().contains(&"ran.txt".to_owned()), "nothing ran: {:?}", ctx.ls());
}

/// Item 9 of issue 30: the schemas say what the tools do: every engine of the registry
/// (`native` too) in the `engine` arguments, the network's real default, and a handler that
/// never asks for an argument its schema calls optional: each tool called with only what
/// its schema requires (and `code` where `path` or `code` is wanted) never answers with a
/// missing argument.
#[test]
fn mcp_tool_schemas_say_what_the_tools_do() {
    let ctx = Ctx::new();
    let home = tempfile::tempdir().expect("home");
    let (mut client, _) = Client::start(&ctx, home.path());
    let tools = client.request("tools/list", json!({}));
    let tools = tools["tools"].as_array().cloned().expect("tools");
    let schema = |name: &str| -> Value {
        let tool = tools.iter().find(|t| t["name"] == name).expect("tool");
        tool["inputSchema"].clone()
    };
    let run = schema("run_script");
    let engines = run["properties"]["engine"]["enum"].clone();
    for name in ["auto", "native", "bwrap", "docker", "podman", "k8s"] {
        assert!(engines.as_array().is_some_and(|e| e.contains(&json!(name))), "{engines}");
    }
    let net = run["properties"]["net"]["description"].as_str().unwrap_or_default();
    assert!(net.contains("default: `on`") && !net.contains("default is off"), "{net}");
    assert_eq!(schema("read_file")["required"], json!(["id", "path"]));

    for tool in &tools {
        let name = tool["name"].as_str().expect("name");
        let props = &tool["inputSchema"]["properties"];
        let mut arguments = serde_json::Map::new();
        for field in tool["inputSchema"]["required"].as_array().into_iter().flatten() {
            let field = field.as_str().expect("field");
            let kind = &props[field]["type"];
            let dummy = match kind.as_str() {
                Some("array") => json!([]),
                Some("integer") => json!(1),
                _ if field == "id" => json!("psbx-no-such-session"),
                _ => json!("x"),
            };
            arguments.insert(field.to_owned(), dummy);
        }
        if props.get("code").is_some() {
            arguments.insert("code".into(), json!("print(1)"));
        }
        let (v, is_error) = client.call(name, Value::Object(arguments.clone()));
        let text = v.to_string();
        let asks = ["give the", "give exactly one", "missing field", "invalid type"];
        assert!(!asks.iter().any(|a| text.contains(a)), "{name} {arguments:?}: {v}");
        if name == "session_start" && !is_error {
            let (stopped, _) = client.call("session_stop", json!({"id": v["id"]}));
            assert_eq!(stopped["stopped"], true, "{stopped}");
        }
    }
}

/// Issue 30, the sessions an agent names by id: one started in another workspace is a
/// crossing for every tool that uses it (not for `session_stop`); what goes into one of the
/// server's own (a script `path` outside the workspace, a host variable copied by name, in
/// `env` or the script's table) needs approval as in a run.
#[test]
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn mcp_sessions_of_another_workspace_and_what_goes_in_need_approval() {
    let ours = Ctx::new();
    if let Err(reason) = crate::session::available(&ours, "native") {
        println!("SKIPPED: mcp sessions and approval on native: {reason}");
        return;
    }
    let theirs = Ctx::new();
    // One home for both, so that the server finds the session the command line started.
    let home = tempfile::tempdir().expect("home");
    let home_var = [("HOME", home.path().to_str().expect("utf-8 home"))];
    let start = ["session", "start", "--engine", "native", "--ttl", "2m"];
    let started = theirs.run_with_env(&start, &home_var);
    let text = String::from_utf8_lossy(&started.stdout);
    let id = text.lines().last().expect("an id").trim().to_owned();
    let env = [("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI-server-own-secret")];
    let (mut client, _) = Client::start_with(&ours, home.path(), &env);
    let their_dir = theirs.path().canonicalize().expect("real").display().to_string();
    let calls = [
        ("session_exec", json!({"id": id, "command": ["true"]})),
        ("session_run", json!({"id": id, "code": "print(1)"})),
        ("read_file", json!({"id": id, "path": "x.txt"})),
        ("write_file", json!({"id": id, "path": "planted.txt", "content": "x"})),
        ("list_files", json!({"id": id})),
        ("start_service", json!({"id": id, "command": ["true"], "port": 8000})),
    ];
    for (tool, arguments) in calls {
        let (v, is_error) = client.call(tool, arguments.clone());
        assert!(!is_error, "{tool} {arguments}: {v}");
        let found = crossing(&v, "path", &their_dir);
        assert!(found.is_some_and(|c| c["kind"] == "writable-outside-workspace"), "{tool}: {v}");
    }
    assert!(!theirs.ls().contains(&"planted.txt".to_owned()), "{:?}", theirs.ls());
    let approved = json!({"id": id, "path": "planted.txt", "content": "x", "approve": true});
    let (v, is_error) = client.call("write_file", approved);
    assert!(!is_error && v["size"] == 1, "{v}");
    assert!(theirs.ls().contains(&"planted.txt".to_owned()), "{:?}", theirs.ls());
    let (v, is_error) = client.call("session_stop", json!({"id": id}));
    assert!(!is_error && v["stopped"] == true, "{v}");

    let (v, is_error) = client.call("session_start", json!({"engine": "native", "ttl": "2m"}));
    assert!(!is_error, "{v}");
    let own = v["id"].as_str().expect("id").to_owned();
    let (v, is_error) = client.call("session_exec", json!({"id": own, "command": ["true"]}));
    assert!(!is_error && v["exit_code"] == 0, "{v}");
    let outside = tempfile::tempdir().expect("outside");
    let far = outside.path().canonicalize().expect("real").join("x.py");
    std::fs::write(&far, "print('outside ran')\n").expect("script");
    let inline = "# /// script\n# [tool.python-sandbox]\n# env = [\"AWS_SECRET_ACCESS_KEY\"]\n# ///\nprint(1)\n";
    let far = far.display().to_string();
    let runs = [
        (
            json!({"id": own, "code": "print(1)", "env": ["AWS_SECRET_ACCESS_KEY"]}),
            "variable",
            "AWS_SECRET_ACCESS_KEY",
        ),
        (json!({"id": own, "code": inline}), "variable", "AWS_SECRET_ACCESS_KEY"),
        (json!({"id": own, "path": far}), "path", far.as_str()),
    ];
    for (arguments, key, value) in runs {
        let (v, is_error) = client.call("session_run", arguments.clone());
        assert!(!is_error && crossing(&v, key, value).is_some(), "{arguments}: {v}");
    }
    let (v, is_error) = client.call("session_run", json!({"id": own, "code": "print(6 * 7)"}));
    assert!(!is_error && v["stdout"] == "42\n", "{v}");
    let (v, is_error) = client.call("session_stop", json!({"id": own}));
    assert!(!is_error && v["stopped"] == true, "{v}");
}

/// A script's output without a newline, through the secret scrubber and the 64 KiB cap: the
/// server's peak resident memory stays far below what the script wrote (a scrubbed gigabyte
/// once queued in it whole while the answer kept 64 KiB).
#[test]
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn mcp_scrubbed_output_keeps_the_server_small() {
    let ctx = Ctx::new();
    if let Err(reason) = crate::session::available(&ctx, "native") {
        println!("SKIPPED: mcp output memory on native: {reason}");
        return;
    }
    let home = tempfile::tempdir().expect("home");
    let (mut client, _) = Client::start(&ctx, home.path());
    let code = "import os, sys\nout = sys.stdout.buffer\nchunk = b'x' * (1 << 20)\n\
                for _ in range(192):\n    out.write(chunk)\n    out.flush()\n\
                print('\\n' + os.environ['API_TOKEN'])\n";
    let (v, is_error) = client.call(
        "run_script",
        json!({"code": code, "engine": "native", "env": ["API_TOKEN=mcp-big-output-token"],
               "approve": true}),
    );
    assert!(
        !is_error && v["exit_code"] == 0,
        "{}",
        v.to_string().chars().take(2000).collect::<String>()
    );
    let stdout = v["stdout"].as_str().unwrap_or_default();
    assert!(
        !stdout.contains("mcp-big-output-token") && stdout.contains("bytes dropped"),
        "{stdout:.2000}"
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", client.child.id()))
        .expect("the server's status");
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    assert!(peak_kib < 96 << 10, "the server reached {} MiB of resident memory", peak_kib >> 10);
}

/// Greets every connection on the port in `argv[1]` (a service for `start_service`).
const GREETER: &str = "import socket, sys\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('0.0.0.0', int(sys.argv[1])))\ns.listen(8)\nwhile True:\n    c, _ = s.accept()\n    c.sendall(b'hello\\n')\n    c.close()\n";

/// Issue 31: what an agent does with a session, on each session engine here (native and bwrap
/// without pasta, so through the built-in relay; docker and podman, whose `start_service` was
/// an internal error, "no engine connection"): `session_start` installs its `dependencies`
/// before it answers, `python3` is the session's environment's from the start (it was the
/// image's or the host's before the first script), a service on a published port answers the
/// host at the URL given, and one on a port not published is refused naming the parameter an
/// agent has (`publish`), not the command line's flag.
#[test]
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn mcp_sessions_install_serve_and_run_their_own_python_on_every_engine() {
    let bin = tempfile::tempdir().expect("bin");
    let without_pasta = crate::fault::path_without_pasta(bin.path());
    let mut failures = Vec::new();
    for engine in ["native", "bwrap", "docker", "podman"] {
        let ctx = Ctx::new();
        if let Err(reason) = crate::session::available(&ctx, engine) {
            println!("SKIPPED: mcp sessions on {engine}: {reason}");
            continue;
        }
        let local = matches!(engine, "native" | "bwrap");
        if local && !sandbox_net::relay_available() {
            println!("SKIPPED: mcp sessions on {engine} without pasta: no tun device to open");
            continue;
        }
        let home = tempfile::tempdir().expect("home");
        let path = std::env::var("PATH").unwrap_or_default();
        let path = if local { without_pasta.as_str() } else { path.as_str() };
        let (mut client, _) = Client::start_with(&ctx, home.path(), &[("PATH", path)]);
        if let Err(e) = session_tools(&mut client, engine) {
            failures.push(format!("{engine}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The calls of [`mcp_sessions_install_serve_and_run_their_own_python_on_every_engine`] on
/// `engine`; the session is stopped however they end.
fn session_tools(client: &mut Client, engine: &str) -> Result<(), String> {
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port())
    };
    let (port, other) = (free().expect("port"), free().expect("port"));
    let start = json!({"engine": engine, "net": "on", "publish": [port.to_string()],
        "dependencies": ["six"], "ttl": "5m"});
    let (v, is_error) = client.call("session_start", start);
    let id = match v["id"].as_str() {
        Some(id) if !is_error => id.to_owned(),
        _ => return Err(format!("session_start: {v}")),
    };
    let result = (|| {
        let probe = "import six, sys; print(sys.prefix)";
        let (v, _) =
            client.call("session_exec", json!({"id": id, "command": ["python3", "-c", probe]}));
        if v["exit_code"] != 0 || v["stdout"] != "/home/sandbox/.venv\n" {
            return Err(format!("python3 is not the session's environment's: {v}"));
        }
        let service = json!({"id": id, "command": ["python3", "-c", GREETER, port.to_string()],
            "port": port});
        let (v, is_error) = client.call("start_service", service);
        let url = v["url"].as_str().unwrap_or_default();
        let at = url.strip_prefix("http://").unwrap_or_default().to_owned();
        if is_error || at.is_empty() {
            return Err(format!("start_service: {v}"));
        }
        let mut greeting = String::new();
        std::net::TcpStream::connect(&at)
            .and_then(|mut s| {
                s.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
                std::io::Read::read_to_string(&mut s, &mut greeting)
            })
            .map_err(|e| format!("{url}: {e}"))?;
        if greeting != "hello\n" {
            return Err(format!("{url} answered {greeting:?}"));
        }
        let unpublished = json!({"id": id, "command": ["true"], "port": other});
        let (v, is_error) = client.call("start_service", unpublished);
        let said = format!("{} {}", v["error"], v["hint"]);
        if !is_error || !said.contains("publish: [") || said.contains("--publish") {
            return Err(format!("an unpublished port: {v}"));
        }
        Ok(())
    })();
    let (v, is_error) = client.call("session_stop", json!({"id": id}));
    if is_error || v["stopped"] != true {
        return Err(format!("session_stop: {v}"));
    }
    result?;
    // With the network off, the dependencies are installed apart and copied in: the session
    // imports them and still has no route anywhere.
    let start = json!({"engine": engine, "net": "off", "dependencies": ["six"], "ttl": "5m"});
    let (v, is_error) = client.call("session_start", start);
    let id = match v["id"].as_str() {
        Some(id) if !is_error => id.to_owned(),
        _ => return Err(format!("session_start with the network off: {v}")),
    };
    // No IPv4 route at all (asked of the kernel, nothing is contacted).
    let probe = "import six, sys\nprint(sys.prefix)\nroutes = open('/proc/net/route').read().splitlines()[1:]\nprint('no route' if not routes else routes)";
    let (v, _) =
        client.call("session_exec", json!({"id": id, "command": ["python3", "-c", probe]}));
    let _ = client.call("session_stop", json!({"id": id}));
    if v["exit_code"] != 0 || v["stdout"] != "/home/sandbox/.venv\nno route\n" {
        return Err(format!("a session with the network off and dependencies: {v}"));
    }
    Ok(())
}
