//! Warm sessions on real engines: the `Sandbox` protocol over exec, services with a host URL,
//! installs that stay, and stop.

use sandbox_core::{SessionEngine as _, WarmSession as _};
use std::io::{Read, Write};
use std::time::Duration;

use engine_oci::{OciEngine, Session, SessionConfig};
use sandbox_core::{
    Captured, EntryKind, ExecRequest, Interactive, InteractiveExec, Net, Publish, PutSource,
    Sandbox, ServiceSpec, contract,
};

use crate::support::{containers, engines, eventually, name, workspace};

pub(crate) fn start(
    engine: &OciEngine,
    ws: &std::path::Path,
    net: Net,
    publish: &[u16],
    ttl: Duration,
) -> Session {
    let config = SessionConfig {
        workspace: ws.to_owned(),
        mounts: Vec::new(),
        net,
        allow: None,
        publish: publish.iter().map(|p| Publish::same(*p)).collect(),
        env: vec![sandbox_core::EnvVar {
            name: "GREETING".to_owned(),
            value: Some("hi".to_owned()),
        }],
        ttl,
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        limits: sandbox_core::Limits::NONE,
    };
    let info = engine.start_session(&config, &mut |_| {}).expect("start");
    assert_eq!(info.ttl, ttl.as_secs());
    assert!(engine.list_sessions().expect("list").iter().any(|s| s.id == info.id));
    engine.open_session(&info.id).expect("session")
}

/// The whole protocol, through the agent and through the API (what a session whose agent
/// cannot be reached uses): both must behave the same.
#[test]
fn protocol_exec_files_and_stop() {
    for engine in engines() {
        for via_agent in [true, false] {
            let (_dir, ws) = workspace("print('x')\n");
            let session = start(&engine, &ws, Net::Off, &[], Duration::from_secs(600));
            let session = if via_agent { session } else { session.via_api() };
            let e = format!("{} via {}", name(&engine), if via_agent { "agent" } else { "api" });
            assert_eq!(session.uses_agent(), via_agent, "{e}");
            engine.block_on(async {
                // A command that cannot start, and one killed by a signal: what a shell reports.
                let mut out = Captured::default();
                let outcome = session
                    .exec(&ExecRequest::new(&["no-such-command"]), &mut out)
                    .await
                    .expect("exec");
                assert_eq!(outcome.exit_code, 127, "{e}: {}", out.stderr_lossy());
                assert!(out.stderr_lossy().contains("no-such-command"), "{e}");
                let outcome = session
                    .exec(
                        &ExecRequest::new(&["sh", "-c", "kill -TERM $$"]),
                        &mut Captured::default(),
                    )
                    .await
                    .expect("exec");
                assert_eq!(outcome.exit_code, 143, "{e}");

                // exec: streamed output, exit code, env, cwd = workspace, stdin.
                let mut out = Captured::default();
                let request = ExecRequest {
                    argv: ["sh", "-c", "echo $GREETING $EXTRA; pwd; cat; echo oops >&2; exit 7"]
                        .map(String::from)
                        .to_vec(),
                    env: vec![("EXTRA".to_owned(), "there".to_owned())],
                    stdin: b"from stdin\n".to_vec(),
                    ..Default::default()
                };
                let outcome = session.exec(&request, &mut out).await.expect("exec");
                assert_eq!(outcome.exit_code, 7, "{e}");
                assert_eq!(
                    out.stdout_lossy(),
                    format!("hi there\n{}\nfrom stdin\n", ws.display()),
                    "{e}"
                );
                assert_eq!(out.stderr_lossy(), "oops\n", "{e}");

                // exec timeout.
                let request = ExecRequest {
                    timeout: Some(Duration::from_secs(1)),
                    ..ExecRequest::new(&["sleep", "30"])
                };
                let outcome = session.exec(&request, &mut Captured::default()).await.expect("exec");
                assert!(outcome.timed_out, "{e}: {outcome:?}");

                // files: write (parents created), read, list, errors; tmpfs and workspace alike.
                session.write_file("/tmp/a/b/c.txt", b"content").await.expect("write");
                assert_eq!(session.read_file("/tmp/a/b/c.txt").await.expect("read"), b"content");
                session.write_file("/tmp/a/empty", b"").await.expect("write empty");
                let listing = session.list_dir("/tmp/a").await.expect("list");
                let shown: Vec<(String, EntryKind, u64)> =
                    listing.into_iter().map(|d| (d.name, d.kind, d.size)).collect();
                assert_eq!(
                    shown,
                    vec![
                        ("b".to_owned(), EntryKind::Dir, 0),
                        ("empty".to_owned(), EntryKind::File, 0)
                    ],
                    "{e}"
                );
                let ws_file = format!("{}/from-session.txt", ws.display());
                session.write_file(&ws_file, b"shared").await.expect("write ws");
                assert_eq!(
                    std::fs::read(ws.join("from-session.txt")).expect("host read"),
                    b"shared"
                );
                let missing = session.read_file("/tmp/nope").await.expect_err("missing");
                assert!(missing.to_string().contains("no such file"), "{e}: {missing}");
                let dir = session.read_file("/tmp/a").await.expect_err("dir");
                assert!(dir.to_string().contains("is a directory"), "{e}: {dir}");
                let not_dir = session.list_dir("/tmp/a/empty").await.expect_err("not a dir");
                assert!(not_dir.to_string().contains("not a directory"), "{e}: {not_dir}");
                assert!(session.read_file("relative").await.is_err());

                // put: a tar and a host tree.
                let mut builder = tar::Builder::new(Vec::new());
                let mut header = tar::Header::new_gnu();
                header.set_size(3);
                header.set_mode(0o644);
                header.set_cksum();
                builder.append_data(&mut header, "pkg/mod.py", &b"x=1"[..]).expect("tar");
                let archive = builder.into_inner().expect("tar");
                session.put(&PutSource::Tar(archive), "/tmp/put").await.expect("put tar");
                assert_eq!(session.read_file("/tmp/put/pkg/mod.py").await.expect("read"), b"x=1");
                let tree = tempfile::tempdir().expect("tree");
                std::fs::create_dir_all(tree.path().join("src/inner")).expect("mkdir");
                std::fs::write(tree.path().join("src/inner/f.txt"), "tree").expect("write");
                session
                    .put(&PutSource::HostPath(tree.path().join("src")), "/tmp/tree")
                    .await
                    .expect("put path");
                assert_eq!(
                    session.read_file("/tmp/tree/src/inner/f.txt").await.expect("read"),
                    b"tree"
                );

                // stop: the container goes, further calls fail.
                session.stop().await.expect("stop");
                assert!(
                    session
                        .exec(&ExecRequest::new(&["true"]), &mut Captured::default())
                        .await
                        .is_err()
                );
            });
            assert!(engine.open_session(session.id()).is_err(), "{e}: stopped session still found");
        }
    }
}

/// The agent path: a session opens from its record without the API; dropping an exec kills
/// the command; a socket the sandbox swapped for a symlink (here to the engine's own API
/// socket) is never followed: the handle without the API refuses, the API one falls back.
#[test]
fn agent_is_local_cancellable_and_pinned() {
    for engine in engines() {
        let (_dir, ws) = workspace("print('x')\n");
        let session = start(&engine, &ws, Net::Off, &[], Duration::from_secs(600));
        let e = name(&engine);
        let runtime_dir = engine.config().runtime_dir.clone();
        let local = Session::local(&runtime_dir, session.id(), None).expect("record");
        assert!(local.uses_agent(), "{e}");
        assert_eq!(local.workspace(), ws.display().to_string());
        let other = match engine.config().flavor {
            engine_oci::Flavor::Docker => engine_oci::Flavor::Podman,
            engine_oci::Flavor::Podman => engine_oci::Flavor::Docker,
        };
        assert!(Session::local(&runtime_dir, session.id(), Some(other)).is_none(), "{e}");
        assert!(Session::local(&runtime_dir, "../../etc/passwd", None).is_none(), "{e}");
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        rt.block_on(async {
            let mut out = Captured::default();
            let request = ExecRequest::new(&["sh", "-c", "echo local $PWD"]);
            let outcome = local.exec(&request, &mut out).await.expect("local exec");
            assert_eq!(
                (outcome.exit_code, out.stdout_lossy()),
                (0, format!("local {}\n", ws.display())),
                "{e}"
            );

            let request = ExecRequest::new(&["sh", "-c", "echo started; exec sleep 1234"]);
            let mut out = Captured::default();
            let dropped =
                tokio::time::timeout(Duration::from_millis(1500), local.exec(&request, &mut out))
                    .await;
            assert!(dropped.is_err(), "{e}: the exec should still run");
        });
        let count = ExecRequest::new(&[
            "sh",
            "-c",
            "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c 'sleep 123[4]' || true",
        ]);
        let gone = eventually(Duration::from_secs(10), || {
            let mut out = Captured::default();
            rt.block_on(local.exec(&count, &mut out)).expect("count");
            out.stdout_lossy().trim() == "0"
        });
        assert!(gone, "{e}: a dropped exec must kill its command");

        let api_socket = match &engine.connection().endpoint {
            engine_detect::ApiEndpoint::Unix(path) => path.display().to_string(),
            engine_detect::ApiEndpoint::Tcp(_) => "/run/docker.sock".to_owned(),
        };
        let plant = ExecRequest::new(&[
            "sh",
            "-c",
            &format!(
                "rm -f /tmp/.python-sandbox-agent.sock && ln -s {api_socket} /tmp/.python-sandbox-agent.sock"
            ),
        ]);
        rt.block_on(local.exec(&plant, &mut Captured::default())).expect("plant");
        assert!(!local.uses_agent(), "{e}: a symlink is not the agent");
        let refused =
            rt.block_on(local.exec(&ExecRequest::new(&["true"]), &mut Captured::default()));
        assert!(matches!(refused, Err(engine_oci::Error::NoSession { .. })), "{e}: {refused:?}");
        engine.block_on(async {
            let mut out = Captured::default();
            let outcome = session
                .exec(&ExecRequest::new(&["echo", "via the api"]), &mut out)
                .await
                .expect("fallback exec");
            assert_eq!(
                (outcome.exit_code, out.stdout_lossy().as_str()),
                (0, "via the api\n"),
                "{e}"
            );
            session.stop().await.expect("stop");
        });
        assert!(
            Session::local(&runtime_dir, session.id(), None).is_none(),
            "{e}: record left after stop"
        );
    }
}

/// An HTTP/1.0 GET from the host: the whole response, or why there is none.
fn http_get(url: &str) -> Result<String, String> {
    let rest = url.strip_prefix("http://").ok_or("not an http url")?;
    let (addr, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut stream = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    stream
        .write_all(format!("GET /{path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(|e| e.to_string())?;
    Ok(response)
}

/// A port free on the host now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// The whole `Sandbox` contract (`sandbox_core::contract`), the one the fake passes too, through
/// the agent and through the API, on a session with a network and a published port.
#[test]
fn the_sandbox_contract_holds() {
    let tree = tempfile::tempdir().expect("tree");
    let root = tree.path().join("src");
    for (relative, contents) in contract::HOST_TREE {
        let path = root.join(relative);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, contents).expect("write");
    }
    for engine in engines() {
        for via_agent in [true, false] {
            let (_dir, ws) = workspace("print('x')\n");
            let port = free_port();
            let session = start(&engine, &ws, Net::On, &[port], Duration::from_secs(600));
            let session = if via_agent { session } else { session.via_api() };
            let e = format!("{} via {}", name(&engine), if via_agent { "agent" } else { "api" });
            assert_eq!(session.uses_agent(), via_agent, "{e}");
            let unpublished = free_port();
            let expect = contract::Expect {
                published: port,
                unpublished: if unpublished == port { port.wrapping_add(1) } else { unpublished },
                default_cwd: Some(ws.display().to_string()),
                commands: true,
                fetch: Some(&http_get),
                host_tree: Some(root.clone()),
                tar_links: true,
            };
            let report = engine.block_on(contract::check(&session, &expect));
            println!("{e}:\n{}", report.summary());
            report.assert_passed();
            assert!(engine.open_session(session.id()).is_err(), "{e}: stopped session still found");
        }
    }
}

#[test]
fn service_url_reaches_the_host_and_stops() {
    for engine in engines() {
        let (_dir, ws) = workspace("print('x')\n");
        std::fs::write(ws.join("hello.txt"), "hello from the session").expect("write");
        // `PORT` is now the same port on the host: one free here, not a fixed 8000.
        let port = crate::publish::free_port();
        let session = start(&engine, &ws, Net::On, &[port], Duration::from_secs(600));
        let e = name(&engine);
        engine.block_on(async {
            let spec = ServiceSpec {
                argv: ["python3", "-m", "http.server", &port.to_string(), "--bind", "0.0.0.0"]
                    .map(String::from)
                    .to_vec(),
                port,
                env: Vec::new(),
            };
            let service = session.start_service(&spec).await.expect("service");
            assert_eq!(service.url, format!("http://127.0.0.1:{port}"), "{e}");
            let url = service.url.clone();
            let body = tokio::task::spawn_blocking(move || http_get(&format!("{url}/hello.txt")))
                .await
                .expect("join")
                .expect("get");
            assert!(body.contains("hello from the session"), "{e}: {body}");
            let again = session.start_service(&spec).await.expect_err("port in use");
            assert!(again.to_string().contains(&format!("already uses port {port}")), "{e}: {again}");
            let unpublished = ServiceSpec { port: 9999, ..spec.clone() };
            assert!(session.start_service(&unpublished).await.is_err());
            session.stop_service(&service).await.expect("stop service");
            let mut out = Captured::default();
            let probe = "import socket\ntry:\n    socket.create_connection(('127.0.0.1', PORT), 1); print('up')\nexcept OSError: print('down')";
            let probe = probe.replace("PORT", &port.to_string());
            session.exec(&ExecRequest::new(&["python3", "-c", &probe]), &mut out).await.expect("probe");
            assert_eq!(out.stdout_lossy(), "down\n", "{e}");
            session.stop().await.expect("stop");
        });
    }
}

#[test]
fn run_script_installs_dependencies_that_stay() {
    for engine in engines() {
        let (_dir, ws) = workspace("import sys, six\nprint('six ok', sys.argv[1:])\n");
        let session = start(&engine, &ws, Net::On, &[], Duration::from_secs(600));
        let e = name(&engine);
        engine.block_on(async {
            let mut out = Captured::default();
            let outcome = session
                .run_script(&ws.join("main.py"), &["six".to_owned()], &["a".to_owned()], &mut out)
                .await
                .expect("run");
            assert_eq!(
                (outcome.exit_code, out.stdout_lossy().as_str()),
                (0, "six ok ['a']\n"),
                "{e}: {}",
                out.stderr_lossy()
            );
            // Installed into the session: importable without asking again, from a script
            // outside the workspace (copied in).
            let outside = tempfile::tempdir().expect("outside");
            let script = outside.path().join("other.py");
            std::fs::write(&script, "import six\nprint('still here')\n").expect("write");
            let mut out = Captured::default();
            let outcome = session.run_script(&script, &[], &[], &mut out).await.expect("run");
            assert_eq!(
                (outcome.exit_code, out.stdout_lossy().as_str()),
                (0, "still here\n"),
                "{e}"
            );
            session.stop().await.expect("stop");
        });
    }
}

#[test]
fn idle_session_removes_itself() {
    for engine in engines() {
        let (_dir, ws) = workspace("print('x')\n");
        let session = start(&engine, &ws, Net::Off, &[], Duration::from_secs(3));
        let label = format!("io.python-sandbox.id={}", session.id());
        assert_eq!(containers(&engine, &label).len(), 1);
        // An exec longer than the TTL keeps it alive while it runs.
        engine.block_on(async {
            let outcome = session
                .exec(&ExecRequest::new(&["sleep", "6"]), &mut Captured::default())
                .await
                .expect("exec");
            assert_eq!(outcome.exit_code, 0, "{}", name(&engine));
        });
        let gone = eventually(Duration::from_secs(30), || containers(&engine, &label).is_empty());
        assert!(gone, "{}: session {} still there after its ttl", name(&engine), session.id());
    }
}

/// The CLI end to end: `session start` prints the id last, `run`/`exec` return the command's
/// exit code, `list --json` shows it, `stop` removes it; `reap --dry-run --json` is valid JSON.
#[test]
fn cli_session_lifecycle() {
    let Some(bin) = crate::support::cli_binary() else {
        println!("SKIPPED: python-sandbox binary not built (cargo build -p cli)");
        return;
    };
    for engine in engines() {
        let e = name(&engine);
        let (_dir, ws) = workspace("import sys\nprint('in session', sys.argv[1:])\nsys.exit(5)\n");
        let cli = |args: &[&str]| {
            let out =
                std::process::Command::new(&bin).args(args).current_dir(&ws).output().expect("cli");
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        };
        let (code, stdout, stderr) =
            cli(&["session", "start", "--engine", e, "--net", "off", "--ttl", "10m"]);
        assert_eq!(code, Some(0), "{e}: {stderr}");
        let id = stdout.lines().last().expect("id").to_owned();
        let (code, stdout, stderr) = cli(&["session", "run", &id, "main.py", "--", "x"]);
        assert_eq!((code, stdout.as_str()), (Some(5), "in session ['x']\n"), "{e}: {stderr}");
        let (code, stdout, _) =
            cli(&["session", "exec", &id, "--", "sh", "-c", "echo $((6*7)); exit 3"]);
        assert_eq!((code, stdout.as_str()), (Some(3), "42\n"), "{e}");
        // The script's own table applies in the session: env (flags beat it), timeout, and
        // settings the session cannot give are refused before anything runs.
        std::fs::write(
            ws.join("table.py"),
            "# /// script\n# [tool.python-sandbox]\n# env = [\"FROM_TABLE=table\", \"BOTH=table\"]\n# timeout = 60\n# ///\nimport os, sys, time\nprint(os.environ.get('FROM_TABLE'), os.environ.get('BOTH'))\nif sys.argv[1:] == ['sleep']:\n    time.sleep(60)\n",
        )
        .expect("write");
        let (code, stdout, stderr) =
            cli(&["session", "run", &id, "--env", "BOTH=flag", "table.py"]);
        assert_eq!((code, stdout.as_str()), (Some(0), "table flag\n"), "{e}: {stderr}");
        let (code, _, stderr) =
            cli(&["session", "run", &id, "--timeout", "1", "table.py", "--", "sleep"]);
        assert_eq!(code, Some(124), "{e}: {stderr}");
        std::fs::write(
            ws.join("publish.py"),
            "# /// script\n# [tool.python-sandbox]\n# net = \"on\"\n# publish = [8123]\n# ///\nopen('ran', 'w')\n",
        )
        .expect("write");
        let (code, _, stderr) = cli(&["session", "run", &id, "publish.py"]);
        assert_eq!(code, Some(2), "{e}: {stderr}");
        assert!(stderr.contains("publish 8123") && stderr.contains("no network"), "{e}: {stderr}");
        assert!(!ws.join("ran").exists(), "{e}: a refused script ran");
        let (code, stdout, _) = cli(&["session", "list", "--json", "--engine", e]);
        assert_eq!(code, Some(0));
        let listed: serde_json::Value = serde_json::from_str(&stdout).expect("json");
        assert!(
            listed.as_array().expect("array").iter().any(|s| s["id"] == id.as_str()),
            "{e}: {stdout}"
        );
        let (code, _, stderr) = cli(&["session", "stop", &id]);
        assert_eq!(code, Some(0), "{e}: {stderr}");
        let (code, _, stderr) = cli(&["session", "exec", &id, "--", "true"]);
        assert_eq!(code, Some(2), "{e}: exec after stop must fail: {stderr}");
        assert!(stderr.contains("no session"), "{e}: {stderr}");
        let (code, stdout, _) = cli(&["reap", "--dry-run", "--json", "--engine", e]);
        assert_eq!(code, Some(0));
        assert!(serde_json::from_str::<serde_json::Value>(&stdout).expect("json").is_array());
    }
}

/// `session exec -i`/`-t` on docker and podman sessions: the interactive contract shared with
/// the fake and bwrap, through the agent; a session reached only through the API refuses.
#[test]
fn interactive_exec_streams_stdin_and_gives_a_pty() {
    for engine in engines() {
        let e = name(&engine);
        let (_dir, ws) = workspace("print('x')\n");
        let session = start(&engine, &ws, Net::Off, &[], Duration::from_secs(600));
        let mut exec = |request: &ExecRequest, io: Interactive| {
            let mut out = Captured::default();
            let outcome =
                engine.block_on(session.exec_interactive(request, io, &mut out)).expect("exec");
            (outcome, out)
        };
        crate::interactive::stdin_contract(e, &mut exec);
        crate::interactive::tty_contract(e, &mut exec);

        let api = engine.open_session(session.id()).expect("session").via_api();
        let (_input, io) = Interactive::channel(None);
        let refused = engine.block_on(api.exec_interactive(
            &ExecRequest::new(&["touch", "/tmp/ran"]),
            io,
            &mut Captured::default(),
        ));
        let message = refused.expect_err("refused").to_string();
        assert!(
            message.contains("an interactive exec (`-i`/`-t`) is not supported"),
            "{e}: {message}"
        );
        assert!(message.contains("\nhint: "), "{e}: {message}");
        let mut out = Captured::default();
        engine.block_on(session.exec(&ExecRequest::new(&["ls", "/tmp"]), &mut out)).expect("ls");
        assert!(!out.stdout_lossy().contains("ran"), "{e}: a refused exec ran nothing");
        engine.stop_session(session.id()).expect("stop");
    }
}
