//! The coding agent example's loop (`examples/coding_agent/agent.rs`) against a scripted
//! Messages API server ([`server`]): tool dispatch and the `tool_result`s sent back, headers,
//! retries with backoff, the errors that end a run. The tools run against `FakeSandbox` and,
//! when available, a real bwrap session and a real docker session.

#![allow(clippy::print_stdout)]

// What only the examples' mains use (`Api::from_env`, `with_session`, ...) is dead here.
#[allow(dead_code)]
#[path = "../../examples/coding_agent/agent.rs"]
mod agent;
#[allow(dead_code)]
#[path = "../../examples/common/mod.rs"]
mod common;
mod server;

use std::time::Duration;

use sandbox_core::{FakeReply, FakeSandbox, MASK, Sandbox, Secrets, SessionEngine};
use serde_json::{Value, json};

use agent::{AgentConfig, AgentError, Api, Event, Retry, Stop, ToolResult, Tools};
use server::{Reply, Server};

const KEY: &str = "sk-ant-test-0123456789abcdef";
const EXEC: engine_bwrap::Immediate = engine_bwrap::Immediate;

fn fast_retry(attempts: u32) -> Retry {
    Retry { attempts, base_delay: Duration::from_millis(10), max_delay: Duration::from_millis(200) }
}

fn tool_use(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": input})
}

fn message(stop_reason: &str, content: Vec<Value>) -> Reply {
    Reply::json(
        200,
        &json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": content, "stop_reason": stop_reason,
            "usage": {"input_tokens": 1, "output_tokens": 1}
        }),
    )
}

fn calls(id: &str, name: &str, input: Value) -> Reply {
    message("tool_use", vec![json!({"type": "text", "text": "working"}), tool_use(id, name, input)])
}

fn done() -> Reply {
    message("end_turn", vec![json!({"type": "text", "text": "all done"})])
}

fn api_error(status: u16, kind: &str, message: &str) -> Reply {
    Reply::json(status, &json!({"type": "error", "error": {"type": kind, "message": message}}))
}

fn secrets() -> Secrets {
    let mut secrets = Secrets::new();
    secrets.register(KEY).expect("register");
    secrets
}

/// A fake whose `sh -c 'python3 FILE'` prints what FILE's `print('...')` says, and whose
/// `sh -c 'echo $KEY'` leaks the API key, as a careless script would.
fn fake() -> FakeSandbox {
    let fake = FakeSandbox::new("fake-1");
    fake.publish(8000);
    fake.add_file("/ws/.keep", b"").expect("the workspace");
    fake.on_exec(&["sh", "-c"], |request, fs| {
        let command = request.argv.get(2).map(String::as_str).unwrap_or("");
        if let Some(file) = command.strip_prefix("python3 ") {
            let path = format!("{}/{file}", request.cwd.as_deref().unwrap_or("/"));
            let Ok(source) = fs.read(&path) else {
                return FakeReply::exit(2).stderr(&format!("python3: can't open file '{path}'\n"));
            };
            let source = String::from_utf8_lossy(source);
            let said =
                source.split("print('").nth(1).and_then(|s| s.split("')").next()).unwrap_or("");
            return FakeReply::exit(0).stdout(&format!("{said}\n"));
        }
        if command == "echo $KEY" {
            return FakeReply::exit(0).stdout(&format!("{KEY}\n"));
        }
        if command == "sleep 1000" {
            return FakeReply::exit(137).timed_out();
        }
        if command == "yes | head -c 100000" {
            return FakeReply::exit(0).stdout(&"y\n".repeat(50_000));
        }
        FakeReply::exit(127).stderr("sh: not found\n")
    });
    fake
}

/// The `tool_result` blocks of the last (user) message of `request`.
fn results_of(request: &server::Request) -> Vec<(String, String, bool)> {
    let messages = request.body["messages"].as_array().expect("messages");
    let last = messages.last().expect("a message");
    assert_eq!(last["role"], "user");
    last["content"]
        .as_array()
        .expect("tool results")
        .iter()
        .map(|block| {
            assert_eq!(block["type"], "tool_result");
            (
                block["tool_use_id"].as_str().expect("id").to_owned(),
                block["content"].as_str().expect("content").to_owned(),
                block["is_error"].as_bool().expect("is_error"),
            )
        })
        .collect()
}

fn run(
    server: &Server,
    sandbox: &impl Sandbox,
    tools: &mut Tools,
    retry: Retry,
    max_turns: u32,
) -> (Result<agent::Outcome, AgentError>, Vec<String>) {
    let api = Api::new(&server.base, KEY, retry);
    let config = AgentConfig::new("claude-test", max_turns, tools);
    let mut events = Vec::new();
    let outcome =
        agent::run_agent(&api, sandbox, &EXEC, tools, "write hello.py", &config, &mut |e| {
            events.push(match e {
                Event::Text(t) => format!("text {t}"),
                Event::Call { name, .. } => format!("call {name}"),
                Event::Result { name, result } => format!("result {name} {}", result.is_error),
                Event::Retry(why) => format!("retry {why}"),
            });
        });
    (outcome, events)
}

/// Every tool through the loop, an unknown tool and a failing one in one turn, then
/// `end_turn`: each request carries the previous answer's `tool_result`s, in order, with the
/// right `is_error`, the key masked, and the API's headers.
#[test]
fn the_loop_dispatches_every_tool_and_sends_the_results_back() {
    let server = Server::start(vec![
        calls("t1", "write_file", json!({"path": "hello.py", "content": "print('helo')"})),
        calls("t2", "run_command", json!({"command": "python3 hello.py"})),
        calls(
            "t3",
            "edit_file",
            json!({"path": "hello.py", "old_string": "helo", "new_string": "hello"}),
        ),
        calls("t4", "read_file", json!({"path": "/ws/hello.py"})),
        calls(
            "t5",
            "start_service",
            json!({"command": "python3 -m http.server 8000 --bind 0.0.0.0", "port": 8000}),
        ),
        message(
            "tool_use",
            vec![
                tool_use("t6", "delete_everything", json!({})),
                tool_use(
                    "t7",
                    "edit_file",
                    json!({"path": "hello.py", "old_string": "absent", "new_string": "x"}),
                ),
                tool_use("t8", "start_service", json!({"command": "true", "port": 9000})),
            ],
        ),
        calls("t9", "run_command", json!({"command": "echo $KEY"})),
        done(),
    ]);
    let fake = fake();
    let mut tools = Tools::new("/ws", vec![8000], secrets());
    let (outcome, events) = run(&server, &fake, &mut tools, fast_retry(1), 20);
    let outcome = outcome.expect("the loop ends");
    assert_eq!(outcome.stop, Stop::EndTurn);
    assert_eq!(outcome.turns, 8);
    assert_eq!(events.last().map(String::as_str), Some("text all done"));

    let requests = server.requests();
    assert_eq!(requests.len(), 8);
    for (n, request) in requests.iter().enumerate() {
        assert_eq!((request.method.as_str(), request.path.as_str()), ("POST", "/v1/messages"));
        assert_eq!(request.headers.get("x-api-key").map(String::as_str), Some(KEY));
        assert_eq!(
            request.headers.get("anthropic-version").map(String::as_str),
            Some("2023-06-01")
        );
        assert_eq!(
            request.headers.get("content-type").map(String::as_str),
            Some("application/json")
        );
        assert_eq!(request.body["model"], "claude-test");
        let names: Vec<&str> = request.body["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert_eq!(names, ["write_file", "edit_file", "read_file", "run_command", "start_service"]);
        // The whole conversation each time: the task, then (assistant, tool results) pairs.
        assert_eq!(request.body["messages"].as_array().expect("messages").len(), 2 * n + 1);
    }
    assert_eq!(
        requests[0].body["messages"][0],
        json!({"role": "user", "content": "write hello.py"})
    );
    let ok = |id: &str, content: &str| vec![(id.to_owned(), content.to_owned(), false)];
    assert_eq!(results_of(&requests[1]), ok("t1", "wrote 13 bytes to /ws/hello.py"));
    assert_eq!(results_of(&requests[2]), ok("t2", "exit code: 0\nstdout:\nhelo\n\nstderr:\n"));
    assert_eq!(results_of(&requests[3]), ok("t3", "edited /ws/hello.py"));
    assert_eq!(results_of(&requests[4]), ok("t4", "print('hello')"));
    assert_eq!(
        results_of(&requests[5]),
        ok("t5", "serving on port 8000; the user reaches it at http://127.0.0.1:8000")
    );
    let errors = results_of(&requests[6]);
    assert_eq!(errors.len(), 3);
    assert_eq!(errors[0].0, "t6");
    assert!(errors[0].1.starts_with("unknown tool `delete_everything`"), "{}", errors[0].1);
    assert_eq!(errors[1].0, "t7");
    assert!(errors[1].1.contains("`old_string` does not occur"), "{}", errors[1].1);
    assert_eq!(errors[2].1, "port 9000 is not published; this session publishes 8000");
    assert!(errors.iter().all(|(_, _, is_error)| *is_error));
    let leaked = results_of(&requests[7]);
    assert_eq!(leaked, ok("t9", &format!("exit code: 0\nstdout:\n{MASK}\n\nstderr:\n")));
    assert!(!requests.iter().any(|r| r.body.to_string().contains(KEY)), "the key left in a body");

    assert_eq!(fake.fs().read("/ws/hello.py").expect("file"), b"print('hello')");
    assert_eq!(tools.services.len(), 1);
    assert_eq!(tools.services[0].url, "http://127.0.0.1:8000");
}

/// 429 (with `retry-after`), 500 and 529 `overloaded_error` are retried with backoff until
/// an answer comes.
#[test]
fn rate_limits_overload_and_server_errors_are_retried() {
    let server = Server::start(vec![
        api_error(429, "rate_limit_error", "slow down").header("retry-after", "0"),
        api_error(500, "api_error", "internal"),
        api_error(529, "overloaded_error", "Overloaded"),
        done(),
    ]);
    let mut tools = Tools::new("/ws", Vec::new(), secrets());
    let started = std::time::Instant::now();
    let (outcome, events) = run(&server, &fake(), &mut tools, fast_retry(5), 5);
    assert_eq!(outcome.expect("answer").stop, Stop::EndTurn);
    assert_eq!(server.requests().len(), 4);
    let retries: Vec<&String> = events.iter().filter(|e| e.starts_with("retry")).collect();
    assert_eq!(retries.len(), 3, "{events:?}");
    assert!(
        retries[0].contains("HTTP 429 rate_limit_error: slow down; retrying in 0ns"),
        "{}",
        retries[0]
    );
    assert!(retries[1].contains("HTTP 500 api_error"), "{}", retries[1]);
    assert!(
        retries[2].contains("HTTP 529 overloaded_error: Overloaded; retrying in 40ms"),
        "{}",
        retries[2]
    );
    // retry-after 0, then 20 ms and 40 ms of backoff.
    assert!(started.elapsed() >= Duration::from_millis(60));
}

/// A server that keeps failing is given up on after the attempts, with the last reason.
#[test]
fn a_server_that_keeps_failing_is_given_up_on() {
    let server =
        Server::start((0..5).map(|_| api_error(503, "overloaded_error", "busy")).collect());
    let mut tools = Tools::new("/ws", Vec::new(), secrets());
    let (outcome, _) = run(&server, &fake(), &mut tools, fast_retry(3), 5);
    let error = outcome.expect_err("gives up");
    assert!(matches!(error, AgentError::GaveUp { attempts: 3, .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        "the Messages API still fails after 3 attempts (last: HTTP 503 overloaded_error: busy)\nhint: try again later"
    );
    assert_eq!(server.requests().len(), 3);
}

/// A 401 ends the run at once with a hint, and the key the server echoed is masked.
#[test]
fn a_refused_key_is_a_clear_error_without_the_key() {
    let server = Server::start(vec![api_error(
        401,
        "authentication_error",
        &format!("invalid x-api-key {KEY}"),
    )]);
    let mut tools = Tools::new("/ws", Vec::new(), secrets());
    let (outcome, _) = run(&server, &fake(), &mut tools, fast_retry(5), 5);
    let error = outcome.expect_err("refused").to_string();
    assert_eq!(
        error,
        format!(
            "the Messages API refused the key (HTTP 401: invalid x-api-key {MASK})\nhint: check `ANTHROPIC_API_KEY` (it is never printed)"
        )
    );
    assert_eq!(server.requests().len(), 1, "a refused key is not retried");
}

/// A request the API calls invalid is not retried.
#[test]
fn an_invalid_request_is_not_retried() {
    let server =
        Server::start(vec![api_error(400, "invalid_request_error", "max_tokens: too large")]);
    let mut tools = Tools::new("/ws", Vec::new(), secrets());
    let (outcome, _) = run(&server, &fake(), &mut tools, fast_retry(5), 5);
    assert_eq!(
        outcome.expect_err("invalid").to_string(),
        "the Messages API answered HTTP 400 (invalid_request_error): max_tokens: too large"
    );
    assert_eq!(server.requests().len(), 1);
}

/// No key is a clear error before anything is sent; `ANTHROPIC_BASE_URL` moves the endpoint.
#[test]
fn the_key_and_the_endpoint_come_from_the_environment() {
    for key in [None, Some(""), Some("  \n")] {
        let error = Api::from_vars(key, None).err().expect("no key");
        assert!(matches!(error, AgentError::MissingKey));
        assert!(error.to_string().starts_with("`ANTHROPIC_API_KEY` is not set\nhint: "), "{error}");
    }
    let server = Server::start(vec![done()]);
    let api = Api::from_vars(Some(KEY), Some(&server.base)).expect("api");
    api.create(&json!({}), &mut |_| {}).expect("answer");
    assert_eq!(server.requests().len(), 1);
}

/// Nothing listening is a transport error: retried, then given up on.
#[test]
fn an_unreachable_endpoint_is_retried_then_given_up_on() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let api = Api::new(&format!("http://127.0.0.1:{port}"), KEY, fast_retry(2));
    let mut retries = 0;
    let error = api.create(&json!({}), &mut |_| retries += 1).expect_err("unreachable");
    assert!(error.to_string().contains("cannot reach http://127.0.0.1"), "{error}");
    assert_eq!(retries, 1);
}

/// A model that never stops calling tools is stopped by the turn budget.
#[test]
fn the_turn_budget_ends_the_loop() {
    let server = Server::start(
        (0..5).map(|i| calls(&format!("t{i}"), "read_file", json!({"path": "/nope"}))).collect(),
    );
    let mut tools = Tools::new("/ws", Vec::new(), secrets());
    let (outcome, _) = run(&server, &fake(), &mut tools, fast_retry(1), 2);
    let outcome = outcome.expect("ends");
    assert_eq!((outcome.stop, outcome.turns), (Stop::MaxTurns, 2));
    assert_eq!(server.requests().len(), 2);
}

/// Tool edge cases straight through `Tools::call`: bad input, timeouts, capped output,
/// ambiguous edits, a service restarted on its port.
#[test]
fn tool_edge_cases() {
    let fake = fake();
    let mut tools = Tools::new("/ws", vec![8000], secrets());
    let mut call = |name: &str, input: Value| tools.call(&fake, &EXEC, name, &input);
    let missing = call("write_file", json!({"path": "a.txt"}));
    assert_eq!(
        missing,
        ToolResult { content: "missing string field `content`".to_owned(), is_error: true }
    );
    let timed_out = call("run_command", json!({"command": "sleep 1000", "timeout_secs": 5}));
    assert!(
        timed_out.is_error && timed_out.content.starts_with("timed out after 5 s"),
        "{timed_out:?}"
    );
    let bad_timeout = call("run_command", json!({"command": "true", "timeout_secs": "soon"}));
    assert!(bad_timeout.is_error);
    let big = call("run_command", json!({"command": "yes | head -c 100000"}));
    assert!(!big.is_error);
    assert!(big.content.len() < 17 * 1024, "{}", big.content.len());
    assert!(big.content.contains("bytes elided"));
    let failed = call("run_command", json!({"command": "python3 missing.py"}));
    assert!(!failed.is_error, "a non-zero exit is the command's, not the tool's");
    assert!(failed.content.starts_with("exit code: 2\n"), "{}", failed.content);
    call("write_file", json!({"path": "twice.txt", "content": "a a"}));
    let ambiguous =
        call("edit_file", json!({"path": "twice.txt", "old_string": "a", "new_string": "b"}));
    assert_eq!(
        ambiguous.content,
        "/ws/twice.txt: `old_string` occurs 2 times; include more context to make it unique"
    );
    // A file holding the key is read back masked: what a tool returns leaves the machine.
    call("write_file", json!({"path": ".env", "content": format!("KEY={KEY}\n")}));
    let env = call("read_file", json!({"path": ".env"}));
    assert_eq!(env.content, format!("KEY={MASK}\n"));
    let unread = call("read_file", json!({"path": "nope.txt"}));
    assert!(
        unread.is_error && unread.content.starts_with("cannot read /ws/nope.txt"),
        "{unread:?}"
    );
    for _ in 0..2 {
        let started =
            call("start_service", json!({"command": "python3 -m http.server 8000", "port": 8000}));
        assert!(!started.is_error, "{started:?}");
    }
    assert_eq!(fake.services().len(), 1, "the restart stopped the first service");
    assert_eq!(tools.services.len(), 1);
}

#[test]
fn pure_helpers() {
    assert_eq!(agent::edit("x = 1\ny = 2\n", "y = 2", "y = 3"), Ok("x = 1\ny = 3\n".to_owned()));
    assert!(agent::edit("abc", "", "x").is_err());
    let retry = Retry {
        attempts: 9,
        base_delay: Duration::from_millis(100),
        max_delay: Duration::from_secs(1),
    };
    let delays: Vec<u128> = (0..5).map(|n| retry.delay(n, None).as_millis()).collect();
    assert_eq!(delays, [100, 200, 400, 800, 1000]);
    assert_eq!(retry.delay(0, Some(Duration::from_secs(5))), Duration::from_secs(1));
    assert_eq!(retry.delay(3, Some(Duration::from_millis(7))), Duration::from_millis(7));
    assert!([408, 409, 429, 500, 503, 529].into_iter().all(agent::retryable));
    assert!(![400, 401, 403, 404, 413].into_iter().any(agent::retryable));
    // 200 bytes in two-byte chars, 10 kept at each end.
    let capped = agent::cap_text(&"é".repeat(100), 21);
    assert_eq!(capped, "ééééé\n[... 180 bytes elided ...]\nééééé");
    assert_eq!(agent::cap_text("short", 21), "short");
    assert_eq!(agent::sh_quote("it's"), r"'it'\''s'");
    let mut args: Vec<String> = ["--engine", "docker", "task"].map(str::to_owned).to_vec();
    assert_eq!(common::take_engine(&mut args).expect("engine"), common::EngineChoice::Docker);
    assert_eq!(args, ["task"]);
    assert!(common::take_engine(&mut vec!["--engine=lxc".to_owned()]).is_err());
}

/// The scripted conversation against a real session: files, a command that fails then
/// passes after an edit, a service whose URL answers from the host.
fn against_a_real_session<E: SessionEngine + Sync>(engine: &E) {
    let workspace = tempfile::tempdir().expect("workspace");
    let root = workspace.path().canonicalize().expect("real path");
    let info = engine
        .start_session(&common::session_config(&root, &[8000]), &mut |_| {})
        .expect("session start");
    let session = engine.open_session(&info.id).expect("open");
    let server = Server::start(vec![
        calls("t1", "write_file", json!({"path": "site/index.html", "content": "<h1>helo</h1>"})),
        calls(
            "t2",
            "write_file",
            json!({"path": "check.py", "content": "import sys\nt = open('site/index.html').read()\nprint(t)\nsys.exit(0 if 'hello' in t else 3)\n"}),
        ),
        calls("t3", "run_command", json!({"command": "python3 check.py"})),
        calls(
            "t4",
            "edit_file",
            json!({"path": "site/index.html", "old_string": "helo", "new_string": "hello"}),
        ),
        calls("t5", "run_command", json!({"command": "python3 check.py"})),
        calls(
            "t6",
            "start_service",
            json!({"command": "python3 -m http.server 8000 --bind 0.0.0.0 --directory site", "port": 8000}),
        ),
        done(),
    ]);
    let ports = info.ports.iter().map(|(port, _)| *port).collect();
    let mut tools = Tools::new(&root.to_string_lossy(), ports, secrets());
    let api = Api::new(&server.base, KEY, fast_retry(1));
    let config = AgentConfig::new("claude-test", 10, &tools);
    let outcome =
        agent::run_agent(&api, &session, engine, &mut tools, "make a page", &config, &mut |_| {});
    let requests = server.requests();
    let url = tools.services.first().map(|s| s.url.clone());
    let page =
        url.as_deref().map(|url| ureq::get(url).call().map(|mut r| r.body_mut().read_to_string()));
    engine.stop_session(&info.id).expect("stop");
    assert_eq!(outcome.expect("loop").stop, Stop::EndTurn);
    let result = |n: usize| results_of(&requests[n]).remove(0);
    assert_eq!(result(3).1, "exit code: 3\nstdout:\n<h1>helo</h1>\n\nstderr:\n");
    assert!(!result(3).2);
    assert_eq!(result(5).1, "exit code: 0\nstdout:\n<h1>hello</h1>\n\nstderr:\n");
    let (_, started, is_error) = result(6);
    assert!(!is_error, "{started}");
    let url = url.expect("a service");
    assert!(started.ends_with(&url), "{started}");
    assert_eq!(page.expect("fetched").expect("GET").expect("body"), "<h1>hello</h1>");
}

#[test]
fn tools_on_a_real_bwrap_session() {
    let probe = engine_bwrap::probe(std::env::var_os("PATH").as_deref());
    if !probe.available {
        println!("SKIPPED: bwrap: {}", probe.reason.lines().next().unwrap_or_default());
        return;
    }
    let mut config = engine_bwrap::BwrapConfig::from_env().expect("config");
    config.handle_signals = false;
    against_a_real_session(&engine_bwrap::BwrapEngine::new(config).expect("engine"));
}

#[test]
fn tools_on_a_real_docker_session() {
    match engine_oci::OciEngine::new(engine_oci::OciConfig::from_env(engine_oci::Flavor::Docker)) {
        Ok(engine) => against_a_real_session(&engine),
        Err(error) => {
            println!("SKIPPED: docker: {}", error.to_string().lines().next().unwrap_or_default())
        }
    }
}
