//! Warm bwrap sessions against the real sandbox: start/exec/run/list/stop, state kept between
//! scripts, the idle TTL with no CLI left, a session outliving the process that started it,
//! an agent replaced by the session's own code, and the reap of orphaned and expired ones.
//! The `Sandbox` contract the fake passes too (`sandbox_core::contract`) runs here.

use sandbox_core::{SessionEngine as _, WarmSession as _};
use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use engine_bwrap::{Session, SessionConfig};
use sandbox_core::{
    Captured, ExecRequest, Interactive, InteractiveExec, Net, Sandbox, ScriptOptions, contract,
};

use crate::support::{Fixture, fixture, pasta_fixture};

/// A minimal executor: the bwrap session's futures do their IO blocking, so they are ready
/// on the first poll; the fake's too.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    sandbox_core::Executor::block_on(&engine_bwrap::Immediate, future)
}

fn config(fx: &Fixture, ttl: Duration) -> SessionConfig {
    SessionConfig {
        workspace: fx.workspace.path().to_owned(),
        mounts: Vec::new(),
        net: Net::Off,
        allow: None,
        publish: Vec::new(),
        env: vec![crate::support::env("GREETING", "hello")],
        ttl,
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        limits: sandbox_core::Limits::NONE,
    }
}

fn start(fx: &Fixture, ttl: Duration) -> Session {
    let info = fx
        .engine
        .start_session(&config(fx, ttl), &mut |line| println!("status: {line}"))
        .expect("session start");
    assert_eq!(info.engine, "bwrap");
    fx.engine.open_session(&info.id).expect("open by id")
}

fn exec(session: &Session, argv: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let mut out = Captured::default();
    let request = ExecRequest { stdin: stdin.to_vec(), ..ExecRequest::new(argv) };
    let outcome = block_on(session.exec(&request, &mut out)).expect("exec");
    (outcome.exit_code, out.stdout_lossy(), out.stderr_lossy())
}

fn wait_until(patience: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + patience;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    done()
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

/// A port free on the host now (a bwrap session publishes the same port on the host).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// An HTTP/1.0 GET from the host: the whole response, or why there is none.
pub(crate) fn http_get(url: &str) -> Result<String, String> {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").ok_or("not an http url")?;
    let (addr, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let mut stream = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    stream
        .write_all(format!("GET /{path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(|e| e.to_string())?;
    Ok(response)
}

/// The whole `Sandbox` contract (`sandbox_core::contract`), the one the fake passes too, on a
/// session with a network and a published port.
#[test]
fn the_sandbox_contract_holds() {
    let Some(fx) = pasta_fixture() else { return };
    let port = free_port();
    let config = SessionConfig {
        net: Net::On,
        publish: vec![sandbox_core::Publish::same(port)],
        ..config(&fx, Duration::from_secs(600))
    };
    let info =
        fx.engine.start_session(&config, &mut |line| println!("status: {line}")).expect("start");
    let session = fx.engine.open_session(&info.id).expect("open by id");
    let unpublished = free_port();
    let expect = contract::Expect {
        published: port,
        unpublished: if unpublished == port { port.wrapping_add(1) } else { unpublished },
        default_cwd: Some(session.workspace().to_owned()),
        commands: true,
        fetch: Some(&http_get),
        host_tree: None,
        tar_links: true,
    };
    let report = block_on(contract::check(&session, &expect));
    println!("{}", report.summary());
    report.assert_passed();
    assert!(
        fx.engine.open_session(&info.id).is_err(),
        "the session is gone after the contract's stop"
    );
}

#[test]
fn start_exec_run_list_stop_with_state_between_scripts() {
    let Some(fx) = fixture() else { return };
    let session = start(&fx, Duration::from_secs(600));
    let id = session.id().to_owned();

    let (code, out, _) = exec(&session, &["sh", "-c", "echo $GREETING; pwd; id -u"], b"");
    assert_eq!(code, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "hello");
    assert_eq!(Path::new(lines[1]), std::fs::canonicalize(fx.workspace.path()).expect("real"));
    let (code, out, _) = exec(&session, &["cat"], b"from stdin");
    assert_eq!((code, out.as_str()), (0, "from stdin"), "exec -i feeds stdin");
    let (code, _, err) = exec(&session, &["no-such-program"], b"");
    assert_eq!(code, 127, "{err}");
    let (code, _, _) = exec(&session, &["sh", "-c", "exit 7"], b"");
    assert_eq!(code, 7);

    // The wall of a run: no capabilities, the seccomp wall, no network.
    let (_, status, _) =
        exec(&session, &["grep", "-E", "^(CapEff|Seccomp|NoNewPrivs):", "/proc/self/status"], b"");
    assert!(status.contains("CapEff:\t0000000000000000"), "{status}");
    assert!(status.contains("Seccomp:\t2"), "{status}");
    let (_, routes, _) = exec(&session, &["cat", "/proc/net/route"], b"");
    assert_eq!(routes.lines().count(), 1, "net off: no route at all: {routes}");

    // State between scripts: the first leaves a file in the session's /tmp and a module in
    // its venv's reach; the second sees them.
    let first = fx.workspace.path().join("first.py");
    std::fs::write(&first, "open('/tmp/state', 'w').write('kept')\nprint('first')\n")
        .expect("write");
    let second = fx.workspace.path().join("second.py");
    std::fs::write(&second, "import sys\nprint(open('/tmp/state').read(), sys.prefix)\n")
        .expect("write");
    let mut out = Captured::default();
    let outcome = block_on(session.run_script_with(&first, &ScriptOptions::default(), &mut out))
        .expect("first script");
    assert_eq!(outcome.exit_code, 0, "{}", out.stderr_lossy());
    assert_eq!(out.stdout_lossy(), "first\n");
    let mut out = Captured::default();
    let started = Instant::now();
    let outcome = block_on(session.run_script_with(&second, &ScriptOptions::default(), &mut out))
        .expect("second script");
    println!("warm session run: {:?}", started.elapsed());
    assert_eq!(outcome.exit_code, 0, "{}", out.stderr_lossy());
    assert_eq!(out.stdout_lossy(), "kept /home/sandbox/.venv\n");
    // A script timeout ends the script, not the session.
    let sleepy = fx.workspace.path().join("sleepy.py");
    std::fs::write(&sleepy, "import time\ntime.sleep(60)\n").expect("write");
    let options = ScriptOptions { timeout: Some(Duration::from_millis(500)), ..Default::default() };
    let outcome = block_on(session.run_script_with(&sleepy, &options, &mut Captured::default()))
        .expect("sleepy");
    assert!(outcome.timed_out, "{outcome:?}");

    let listed = fx.engine.list_sessions().expect("list");
    assert!(listed.iter().any(|s| s.id == id), "{listed:?}");
    let pid = session.pid();
    fx.engine.stop_session(&id).expect("stop");
    assert!(wait_until(Duration::from_secs(5), || !alive(pid)), "the sandbox is gone after stop");
    assert!(fx.engine.list_sessions().expect("list").iter().all(|s| s.id != id));
    assert!(fx.engine.open_session(&id).is_err(), "a stopped session cannot be opened");
}

/// Run by [`a_session_outlives_the_process_that_started_it`] in a child process: starts a
/// session, prints its id and exits.
#[test]
fn helper_start_and_exit() {
    if std::env::var_os("PSBX_SESSION_HELPER").is_none() {
        return;
    }
    let Some(fx) = fixture() else { return };
    let workspace = std::path::PathBuf::from(std::env::var_os("PSBX_SESSION_HELPER").expect("ws"));
    let config = SessionConfig { workspace, ..config(&fx, Duration::from_secs(600)) };
    let info = fx.engine.start_session(&config, &mut |_| {}).expect("start");
    println!("SESSION-ID {}", info.id);
}

#[test]
fn a_session_outlives_the_process_that_started_it_and_its_ttl_needs_no_cli() {
    let Some(fx) = fixture() else { return };
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "session::helper_start_and_exit", "--nocapture", "--test-threads=1"])
        .env("PSBX_SESSION_HELPER", fx.workspace.path())
        .output()
        .expect("helper");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let id = stdout
        .lines()
        .find_map(|l| l.split("SESSION-ID ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no id: {stdout} {}", String::from_utf8_lossy(&out.stderr)));
    let session = fx.engine.open_session(id).expect("the session is still there");
    let (code, out, _) = exec(&session, &["echo", "still here"], b"");
    assert_eq!((code, out.as_str()), (0, "still here\n"));
    fx.engine.stop_session(id).expect("stop");

    // The idle TTL: nobody talks to it, and it ends itself.
    let session = start(&fx, Duration::from_secs(2));
    let pid = session.pid();
    assert!(alive(pid));
    assert!(
        wait_until(Duration::from_secs(15), || !alive(pid)),
        "the agent ends the session after its idle TTL"
    );
    assert!(fx.engine.open_session(session.id()).is_err());
}

#[test]
fn a_replaced_agent_cannot_make_the_host_follow_links_or_allocate() {
    let Some(fx) = fixture() else { return };
    let session = start(&fx, Duration::from_secs(600));
    // A fake agent at the socket's path answering with a 4 GiB frame.
    let fake = r#"
import os, socket, struct
p = '/tmp/.python-sandbox-agent.sock'
os.unlink(p)
s = socket.socket(socket.AF_UNIX); s.bind(p); s.listen(8)
if os.fork() == 0:
    os.setsid()
    while True:
        c, _ = s.accept()
        c.recv(65536)
        c.sendall(b'o' + struct.pack('>I', 0xffffffff))
        c.close()
"#;
    let (code, _, err) = exec(&session, &["python3", "-c", fake], b"");
    assert_eq!(code, 0, "{err}");
    let mut out = Captured::default();
    let err = block_on(session.exec(&ExecRequest::new(&["true"]), &mut out)).expect_err("hostile");
    let text = err.to_string();
    assert!(
        text.contains("answered outside the protocol") && text.contains("4294967295"),
        "{text}"
    );

    // A symlink at the socket's path, to a socket of the host: never followed.
    let host_dir = tempfile::tempdir().expect("tempdir");
    let host_socket = host_dir.path().join("host.sock");
    let listener = std::os::unix::net::UnixListener::bind(&host_socket).expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let session2 = start(&fx, Duration::from_secs(600));
    let link = format!(
        "ln -sf {} /tmp/.python-sandbox-agent.sock.new && mv -f /tmp/.python-sandbox-agent.sock.new /tmp/.python-sandbox-agent.sock",
        host_socket.display()
    );
    let (code, _, err) = exec(&session2, &["sh", "-c", &link], b"");
    assert_eq!(code, 0, "{err}");
    let err = block_on(session2.exec(&ExecRequest::new(&["true"]), &mut Captured::default()))
        .expect_err("no agent reachable");
    assert!(err.to_string().contains("no running bwrap session"), "{err}");
    assert!(listener.accept().is_err(), "the host socket was never connected to");
    fx.engine.stop_session(session.id()).expect("stop");
    fx.engine.stop_session(session2.id()).expect("stop");
}

#[test]
fn reap_removes_orphaned_and_expired_sessions() {
    let Some(fx) = fixture() else { return };
    // Orphaned: its process died without a stop (killed, crashed).
    let orphan = start(&fx, Duration::from_secs(600));
    let orphan_id = orphan.id().to_owned();
    let killed =
        std::process::Command::new("kill").args(["-KILL", &orphan.pid().to_string()]).status();
    assert!(killed.is_ok_and(|s| s.success()));
    assert!(wait_until(Duration::from_secs(5), || !alive(orphan.pid())));
    // Expired: the host has not used it for longer than its TTL (its agent should have
    // ended it; code in the session may have replaced the agent).
    let stale = start(&fx, Duration::from_secs(600));
    let record =
        fx.engine.config().runtime_dir.join("bwrap-sessions").join(format!("{}.json", stale.id()));
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record).expect("record")).expect("json");
    json["last_used"] = 1.into();
    std::fs::write(&record, serde_json::to_vec(&json).expect("encode")).expect("rewrite");
    let fresh = start(&fx, Duration::from_secs(600));

    let would = fx.engine.reap_sessions(true).expect("dry run");
    assert!(would.contains(&stale.id().to_owned()), "{would:?}");
    assert!(alive(stale.pid()), "a dry run touches nothing");
    let reaped = fx.engine.reap_sessions(false).expect("reap");
    assert!(reaped.contains(&orphan_id), "{reaped:?}");
    assert!(reaped.contains(&stale.id().to_owned()), "{reaped:?}");
    assert!(!reaped.contains(&fresh.id().to_owned()), "{reaped:?}");
    assert!(wait_until(Duration::from_secs(5), || !alive(stale.pid())), "expired one killed");
    assert!(alive(fresh.pid()));
    fx.engine.stop_session(fresh.id()).expect("stop");
}

/// A session holds the limits it was started with, as a run does (rlimits on the sandbox's
/// first process here, inherited by everything in the session; a delegated cgroup v2 where
/// the host has one): a script allocating 1 GiB under `--memory 256m` fails, the session and
/// its smaller commands go on, and the process cap holds.
#[test]
fn a_session_holds_its_limits() {
    let Some(fx) = fixture() else { return };
    let limits = sandbox_core::Limits {
        memory: Some(256 << 20),
        pids: Some(64),
        ..sandbox_core::Limits::NONE
    };
    let config = SessionConfig { limits, ..config(&fx, Duration::from_secs(600)) };
    let info = fx.engine.start_session(&config, &mut |_| {}).expect("a session with limits");
    let session = fx.engine.open_session(&info.id).expect("open");
    let grab = "b = bytearray(1 << 30); print('allocated', len(b))";
    let (code, out, err) = exec(&session, &["python3", "-c", grab], b"");
    assert_ne!(code, 0, "1 GiB under a 256 MiB limit: {out}");
    assert!(err.contains("MemoryError"), "{err}");
    let (code, out, _) = exec(&session, &["python3", "-c", "print(len(bytearray(16 << 20)))"], b"");
    assert_eq!((code, out.trim()), (0, "16777216"), "small allocations go on");
    let fork_bomb = "import os\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            import time; time.sleep(5); os._exit(0)\n        n += 1\nexcept OSError as e:\n    print('stopped at', n, e.errno)\n";
    let (code, out, err) = exec(&session, &["python3", "-c", fork_bomb], b"");
    assert_eq!(code, 0, "{err}");
    let stopped: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(stopped.first().copied(), Some("stopped"), "{out}");
    let forks: u32 = stopped.get(2).and_then(|n| n.parse().ok()).expect("a count");
    assert!(forks < 64, "at most 64 processes: {out}");
    fx.engine.stop_session(&info.id).expect("stop");
}

/// `session exec -i`/`-t` on a bwrap session: the interactive contract shared with the fake
/// and the OCI sessions.
#[test]
fn interactive_exec_streams_stdin_and_gives_a_pty() {
    let Some(fx) = fixture() else { return };
    let session = start(&fx, Duration::from_secs(600));
    let mut exec = |request: &ExecRequest, io: Interactive| {
        let mut out = Captured::default();
        let outcome = block_on(session.exec_interactive(request, io, &mut out)).expect("exec");
        (outcome, out)
    };
    crate::interactive::stdin_contract("bwrap", &mut exec);
    crate::interactive::tty_contract("bwrap", &mut exec);
    fx.engine.stop_session(session.id()).expect("stop");
}
