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
    if is_error && v["error"].as_str().is_some_and(|e| e.starts_with("no isolation engine")) {
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
    assert!(v["duration_ms"].is_u64());
    assert_eq!(ctx.read("out.txt"), "hi");

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
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn mcp_python_sdk_client() {
    if !std::path::Path::new(PYTHON).exists() {
        println!("SKIPPED: mcp sdk client: no {PYTHON}");
        return;
    }
    let sdk = match python_sdk() {
        Ok(dir) => dir,
        Err(reason) => {
            println!("SKIPPED: mcp sdk client: {reason}");
            return;
        }
    };
    let ctx = Ctx::new();
    let home = tempfile::tempdir().expect("home");
    std::fs::create_dir(home.path().join(".ssh")).expect("fake ~/.ssh");
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp_client.py");
    let out = Command::new(PYTHON)
        .arg(client)
        .arg(env!("CARGO_BIN_EXE_python-sandbox"))
        .arg(ctx.path())
        .arg(home.path())
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
    assert!(stdout.contains("ok: mcp sdk client") || stdout.contains("SKIPPED:"), "{stdout}");
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
    let relay = engine_bwrap::relay_available();
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
