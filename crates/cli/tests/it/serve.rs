//! Serving a port on the default engine with nothing installed (issue 31): without pasta, the
//! built-in relay carries a published port in, on native and bwrap, as root and as an
//! unprivileged user; the wall holds meanwhile (the host's loopback stays out of reach, an
//! undeclared port is not forwarded). Where no network that publishes can be had, the refusal
//! is exit 2 naming an engine that can, never exit 3 ("no engine"). MCP sessions' services
//! are in `mcp.rs`.

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::fault::{ROOTLESS, cli, hand_to, path_without_pasta, runs_here, user_exists};

/// Tries the host's loopback listener (at `argv[3]`) from inside, at the sandbox's loopback
/// and at the relay's address; listens on an undeclared port (`argv[2]`) too; then greets
/// every connection on the published port (`argv[1]`) until one says `bye`.
const SERVER: &str = r#"import socket, sys
port, other, host = (int(a) for a in sys.argv[1:4])
for addr in ("127.0.0.1", "10.0.2.2"):
    try:
        socket.create_connection((addr, host), 3).close()
        print("reached", addr)
    except OSError:
        print("refused", addr)
def listener(p):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", p))
    s.listen(8)
    return s
extra = listener(other)
srv = listener(port)
srv.settimeout(60)
open("listening", "w").close()
while True:
    conn, _ = srv.accept()
    with conn:
        conn.sendall(b"hello\n")
        conn.settimeout(5)
        try:
            if conn.recv(16).startswith(b"bye"):
                break
        except OSError:
            pass
print("served")
"#;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("port")
}

/// Connects to 127.0.0.1:`port` until the sandbox greets, then says `bye`; gives up when
/// `child` (the run) ends first.
fn greet(port: u16, deadline: Instant, child: &mut std::process::Child) -> Result<(), String> {
    let mut last = String::from("never connected");
    while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(mut s) => {
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let mut buf = [0u8; 6];
                match s.read_exact(&mut buf) {
                    Ok(()) if &buf == b"hello\n" => {
                        let _ = s.write_all(b"bye\n");
                        return Ok(());
                    }
                    Ok(()) => last = format!("read {:?}", String::from_utf8_lossy(&buf)),
                    Err(e) => last = format!("read: {e}"),
                }
            }
            Err(e) => last = format!("connect: {e}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!("127.0.0.1:{port} never greeted from inside ({last})"))
}

/// One run publishing a port without pasta, as `user`: `Err` says what went wrong.
fn served_through_the_relay(engine: &str, user: Option<&str>, path: &str) -> Result<(), String> {
    let workspace = tempfile::tempdir().map_err(|e| e.to_string())?;
    let ws = workspace.path();
    std::fs::write(ws.join("s.py"), SERVER).map_err(|e| e.to_string())?;
    hand_to(user, ws)?;
    let host = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let host_port = host.local_addr().map_err(|e| e.to_string())?.port().to_string();
    let (port, other) = (free_port(), free_port());
    let (p, o) = (port.to_string(), other.to_string());
    let args = ["run", "--engine", engine, "--net", "on", "--publish", &p, "s.py", "--", &p, &o];
    let mut args = args.to_vec();
    args.push(&host_port);
    let mut child = cli(user, ws, path, &args)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn: {e}"))?;
    // A fresh cache prepares first.
    let deadline = Instant::now() + Duration::from_secs(180);
    while !ws.join("listening").exists() && Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Only the declared port is carried in: the sandbox's other listener is not reached.
    let undeclared = TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], other)),
        Duration::from_secs(2),
    );
    let greeted = greet(port, deadline, &mut child);
    if greeted.is_err() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let shown = format!("{}\n--- stdout\n{stdout}--- stderr\n{stderr}", out.status);
    greeted.map_err(|e| format!("{e}\n{shown}"))?;
    if undeclared.is_ok() {
        return Err(format!("127.0.0.1:{other} was reached, but only {port} was published"));
    }
    let want = ["refused 127.0.0.1\n", "refused 10.0.2.2\n", "served\n"];
    if !out.status.success() || want.iter().any(|w| !stdout.contains(w)) {
        return Err(shown);
    }
    if !stderr.contains(&format!("port {port} is published at http://127.0.0.1:{port}")) {
        return Err(format!("the CLI did not say where the port is\n{shown}"));
    }
    Ok(())
}

/// A machine without the passt package: `run --publish` on native and bwrap gets the built-in
/// relay, as root and as [`ROOTLESS`] (where we are root and it exists). It was refused with
/// exit 3 ("needs pasta") before.
#[test]
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn a_published_port_without_pasta_is_carried_in_by_the_relay() {
    if !sandbox_net::relay_available() {
        println!("SKIPPED: publishing through the relay: no tun device this user may open");
        return;
    }
    // In /var/tmp, which the unprivileged user reaches too.
    let bin = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let _ =
        std::fs::set_permissions(bin.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755));
    let path = path_without_pasta(bin.path());
    let mut users = vec![None];
    if rustix::process::getuid().is_root() {
        if user_exists(ROOTLESS) {
            users.push(Some(ROOTLESS));
        } else {
            println!(
                "SKIPPED: publishing through the relay as an unprivileged user: no `{ROOTLESS}`"
            );
        }
    }
    let mut failures = Vec::new();
    for engine in ["native", "bwrap"] {
        if !runs_here(engine) {
            println!("SKIPPED: publishing through the relay on {engine}: it cannot run here");
            continue;
        }
        for user in &users {
            if let Err(e) = served_through_the_relay(engine, *user, &path) {
                failures.push(format!("{engine} as {}: {e}", user.unwrap_or("the test's user")));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Where neither pasta nor the relay can be had (a host that reaches the world through its own
/// proxy gets the built-in proxy, which cannot publish), a published port is refused for that
/// alone: exit 2 with a hint naming an engine that publishes, never exit 3 ("no engine") while
/// native works; nothing runs. `--json` says the same.
#[test]
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn a_port_no_network_here_can_publish_is_exit_2_naming_an_engine_that_can() {
    if !runs_here("native") {
        println!("SKIPPED: publishing without pasta or relay: native cannot run here");
        return;
    }
    let bin = tempfile::tempdir().expect("tempdir");
    let path = path_without_pasta(bin.path());
    let ws = tempfile::tempdir().expect("workspace");
    std::fs::write(ws.path().join("p.py"), "open('ran', 'w')\n").expect("script");
    let port = free_port().to_string();
    for json in [false, true] {
        let mut args = vec!["run", "--engine", "native", "--publish", &port, "p.py"];
        if json {
            args.insert(1, "--json");
        }
        let out = cli(None, ws.path(), &path, &args)
            .stdout(Stdio::piped())
            .env("HTTPS_PROXY", "http://proxy.invalid:3128")
            .output()
            .expect("run");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let text = format!("{}\n{stdout}\n{stderr}", out.status);
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(!Path::new(&ws.path().join("ran")).exists(), "the script ran: {text}");
        let (error, hint) = if json {
            let v: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
            assert_eq!(v["exit_code"], 2, "{v}");
            (
                v["error"].as_str().unwrap_or("").to_owned(),
                v["hint"].as_str().unwrap_or("").to_owned(),
            )
        } else {
            (stderr.to_string(), stderr.to_string())
        };
        let refusal = "publishing a port needs pasta or the built-in relay";
        assert!(
            error.lines().any(|l| l.trim_start_matches("error: ").starts_with(refusal)),
            "{text}"
        );
        assert!(hint.contains("`--engine docker`"), "{text}");
        assert!(!stderr.contains("no isolation engine works here"), "{text}");
    }
}
