//! `python-sandbox mcp` driven by the `rmcp` crate's client (the Rust SDK other agents embed):
//! the handshake, the tool list, a run, the approval result for a boundary crossing, and a
//! session from start to stop. Gated on an engine as the raw JSON-RPC test is.

use std::process::Stdio;

use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::Ctx;

type Client = rmcp::service::RunningService<rmcp::RoleClient, ()>;

/// A tool call's structured result and whether it is an error.
async fn call(client: &Client, tool: &'static str, arguments: Value) -> (Value, bool) {
    let Value::Object(arguments) = arguments else { panic!("arguments are an object") };
    let result = client
        .call_tool(CallToolRequestParams::new(tool).with_arguments(arguments))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    (result.structured_content.unwrap_or(Value::Null), result.is_error == Some(true))
}

#[test]
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn mcp_rmcp_client() {
    let ctx = Ctx::new();
    let home = tempfile::tempdir().expect("home");
    std::fs::create_dir(home.path().join(".ssh")).expect("fake ~/.ssh");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
    runtime.block_on(async {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_python-sandbox"))
            .arg("mcp")
            .current_dir(ctx.path())
            .env("HOME", home.path())
            .env("NO_COLOR", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn python-sandbox mcp");
        let stdout = child.stdout.take().expect("stdout");
        let stdin = child.stdin.take().expect("stdin");
        let client: Client = ().serve((stdout, stdin)).await.expect("initialize");
        let server = client.peer_info().expect("server info");
        assert_eq!(server.server_info.name, "python-sandbox");

        let mut names: Vec<String> = client
            .list_all_tools()
            .await
            .expect("tools/list")
            .into_iter()
            .map(|t| t.name.into_owned())
            .collect();
        names.sort_unstable();
        assert_eq!(names, crate::mcp::TOOLS);

        // A home secret is named, never mounted, without `approve: true`.
        let ssh = home.path().join(".ssh");
        let mounts = json!([format!("{}:ro", ssh.display())]);
        let (v, is_error) =
            call(&client, "run_script", json!({"code": "print(1)", "mounts": mounts})).await;
        assert!(!is_error, "{v}");
        assert_eq!(v["status"], "needs_approval", "{v}");
        assert_eq!(v["crossings"][0]["path"], ssh.display().to_string(), "{v}");
        assert!(v.get("exit_code").is_none(), "nothing ran: {v}");

        let (v, is_error) = call(&client, "run_script", json!({"code": "print(6 * 7)"})).await;
        if is_error && v["error"].as_str().is_some_and(|e| e.starts_with("no isolation engine")) {
            println!("SKIPPED: mcp rmcp client: no engine here");
            return;
        }
        assert!(!is_error && v["exit_code"] == 0 && v["stdout"] == "42\n", "{v}");

        let (v, is_error) = call(&client, "session_start", json!({"ttl": "5m"})).await;
        if is_error
            && v["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("no engine that can hold a session"))
        {
            println!("SKIPPED: mcp rmcp client sessions: no session engine here");
            return;
        }
        assert!(!is_error, "{v}");
        let id = v["id"].as_str().expect("session id").to_owned();
        let exec = json!({"id": id, "command": ["sh", "-c", "echo hi from exec"]});
        let (v, is_error) = call(&client, "session_exec", exec).await;
        assert!(!is_error && v["stdout"] == "hi from exec\n", "{v}");
        let note = json!({"id": id, "path": "note.txt", "content": "hello file"});
        let (v, is_error) = call(&client, "write_file", note).await;
        assert!(!is_error, "{v}");
        let (v, is_error) = call(&client, "read_file", json!({"id": id, "path": "note.txt"})).await;
        assert!(!is_error && v["content"] == "hello file", "{v}");
        let code = "print(open('note.txt').read().upper())";
        let (v, is_error) = call(&client, "session_run", json!({"id": id, "code": code})).await;
        assert!(!is_error && v["stdout"] == "HELLO FILE\n", "{v}");
        let (v, is_error) = call(&client, "session_stop", json!({"id": id})).await;
        assert!(!is_error && v["stopped"] == true, "{v}");
        let (v, is_error) =
            call(&client, "session_exec", json!({"id": id, "command": ["true"]})).await;
        assert!(is_error, "a stopped session still answers: {v}");
        assert_eq!(ctx.read("note.txt"), "hello file", "the session's workspace is the cwd");

        client.cancel().await.expect("close the client");
        let status = child.wait().await.expect("the server exits");
        assert!(status.success(), "the server ends cleanly when its client goes: {status}");
    });
}
