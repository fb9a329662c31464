//! Warm sessions on [`engine_native::NativeEngine`]: engine-bwrap's session side with the
//! native sandbox started detached. The `Sandbox` contract (`sandbox_core::contract`) and the
//! interactive one, a session outliving the process that started it while nothing of it
//! outlives its stop, its idle TTL or the reaper, and its limits; each as root and again as
//! `psbx-rootless`.

use std::path::Path;
use std::time::{Duration, Instant};

use engine_bwrap::{Session, SessionConfig};
use sandbox_core::{
    Captured, ExecRequest, Interactive, InteractiveExec, Net, Sandbox, SessionEngine as _,
    WarmSession as _, contract,
};

use crate::engine::{EngineFixture, engine_fixture};

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    sandbox_core::Executor::block_on(&engine_bwrap::Immediate, future)
}

fn config(f: &EngineFixture, ttl: Duration) -> SessionConfig {
    SessionConfig {
        workspace: f.workspace.clone(),
        mounts: Vec::new(),
        net: Net::Off,
        allow: None,
        publish: Vec::new(),
        env: vec![sandbox_core::EnvVar { name: "GREETING".into(), value: Some("hello".into()) }],
        ttl,
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        limits: sandbox_core::Limits::NONE,
    }
}

fn start_with(f: &EngineFixture, config: &SessionConfig) -> Session {
    let info = f.engine.start_session(config, &mut |line| eprintln!("status: {line}")).unwrap();
    assert_eq!(info.engine, "native");
    f.engine.open_session(&info.id).unwrap()
}

fn exec(session: &Session, argv: &[&str]) -> (i32, String, String) {
    let mut out = Captured::default();
    let outcome = block_on(session.exec(&ExecRequest::new(argv), &mut out)).unwrap();
    (outcome.exit_code, out.stdout_lossy(), out.stderr_lossy())
}

fn wait_until(patience: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + patience;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

/// The host pids of every process in the pid namespace the session's monitor made (what must
/// be gone once the session ends). The monitor's `pid_for_children` names it.
fn members(monitor: u32) -> Option<(String, Vec<u32>)> {
    let ns = std::fs::read_link(format!("/proc/{monitor}/ns/pid_for_children")).ok()?;
    Some((ns.display().to_string(), in_namespace(&ns.display().to_string())))
}

fn in_namespace(ns: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let link = std::fs::read_link(format!("/proc/{pid}/ns/pid"));
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |s| s.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')));
        if link.is_ok_and(|l| l.display().to_string() == ns) && !zombie {
            pids.push(pid);
        }
    }
    pids
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

/// A port free on the host now (a session publishes the same port on the host).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn http_get(url: &str) -> Result<String, String> {
    use std::io::{Read, Write};
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

fn contract_holds() {
    // The contract's published port is pasta's.
    if super::pasta().is_none() {
        return;
    }
    let f = engine_fixture();
    let port = free_port();
    let config = SessionConfig {
        net: Net::On,
        publish: vec![sandbox_core::Publish::same(port)],
        ..config(&f, Duration::from_secs(600))
    };
    let session = start_with(&f, &config);
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
    eprintln!("{}", report.summary());
    report.assert_passed();
    assert!(f.engine.open_session(session.id()).is_err(), "gone after the contract's stop");
}

#[test]
fn the_sandbox_contract_holds_on_a_native_session() {
    super::as_root_and_rootless(
        "session::the_sandbox_contract_holds_on_a_native_session",
        contract_holds,
    );
}

fn interactive() {
    let f = engine_fixture();
    let session = start_with(&f, &config(&f, Duration::from_secs(600)));
    let mut exec = |request: &ExecRequest, io: Interactive| {
        let mut out = Captured::default();
        let outcome = block_on(session.exec_interactive(request, io, &mut out)).unwrap();
        (outcome, out)
    };
    crate::interactive::stdin_contract("native", &mut exec);
    crate::interactive::tty_contract("native", &mut exec);
    f.engine.stop_session(session.id()).unwrap();
}

#[test]
fn interactive_exec_streams_stdin_and_gives_a_pty_on_native() {
    super::as_root_and_rootless(
        "session::interactive_exec_streams_stdin_and_gives_a_pty_on_native",
        interactive,
    );
}

/// Run by [`lifetime`] in a child process: starts a session, prints its id and exits.
#[test]
fn helper_start_and_exit() {
    let Some(workspace) = std::env::var_os("PSBX_NATIVE_SESSION_HELPER") else { return };
    let f = engine_fixture();
    let config =
        SessionConfig { workspace: workspace.into(), ..config(&f, Duration::from_secs(600)) };
    let info = f.engine.start_session(&config, &mut |_| {}).unwrap();
    println!("SESSION-ID {}", info.id);
}

fn lifetime() {
    let f = engine_fixture();
    // Started by a process that then exits: the session stays, in a session of its own.
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "session::helper_start_and_exit", "--nocapture", "--test-threads=1"])
        .env("PSBX_NATIVE_SESSION_HELPER", &f.workspace)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let id = stdout
        .lines()
        .find_map(|l| l.split("SESSION-ID ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no id: {stdout} {}", String::from_utf8_lossy(&out.stderr)))
        .to_owned();
    let session = f.engine.open_session(&id).expect("the session outlived its starter");
    let (code, out, _) = exec(&session, &["sh", "-c", "echo $GREETING; id -u"]);
    assert_eq!(code, 0);
    assert_eq!(out.lines().next(), Some("hello"));
    let monitor = session.pid();
    let stat = std::fs::read_to_string(format!("/proc/{monitor}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split_whitespace().collect();
    assert_eq!(fields[3], monitor.to_string(), "the sandbox leads a session of its own: {stat}");
    // The wall of a run.
    let (_, status, _) =
        exec(&session, &["grep", "-E", "^(CapEff|Seccomp|NoNewPrivs):", "/proc/self/status"]);
    assert!(status.contains("CapEff:\t0000000000000000"), "{status}");
    assert!(status.contains("Seccomp:\t2"), "{status}");
    let (ns, before) = members(monitor).unwrap();
    assert!(!before.is_empty(), "the agent runs in the sandbox's pid namespace");
    // The stop ends every process of it.
    f.engine.stop_session(&id).unwrap();
    assert!(wait_until(Duration::from_secs(5), || !alive(monitor)), "the monitor is gone");
    assert!(wait_until(Duration::from_secs(5), || in_namespace(&ns).is_empty()), "{ns} empty");
    assert!(f.engine.open_session(&id).is_err());
    assert!(f.engine.list_sessions().unwrap().iter().all(|s| s.id != id));

    // The idle TTL: nobody talks to it, and it ends itself with everything in it.
    let session = start_with(&f, &config(&f, Duration::from_secs(2)));
    let monitor = session.pid();
    let (ns, _) = members(monitor).unwrap();
    assert!(
        wait_until(Duration::from_secs(15), || !alive(monitor) && in_namespace(&ns).is_empty()),
        "the agent ends the session after its idle TTL"
    );
    assert!(f.engine.open_session(session.id()).is_err());
}

#[test]
fn a_native_session_outlives_its_starter_and_nothing_outlives_its_end() {
    super::as_root_and_rootless(
        "session::a_native_session_outlives_its_starter_and_nothing_outlives_its_end",
        lifetime,
    );
}

fn reaps() {
    let f = engine_fixture();
    let config = config(&f, Duration::from_secs(600));
    let orphan = start_with(&f, &config);
    assert!(
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(orphan.pid() as i32).unwrap(),
            rustix::process::Signal::KILL
        )
        .is_ok()
    );
    assert!(wait_until(Duration::from_secs(5), || !alive(orphan.pid())));
    let stale = start_with(&f, &config);
    let record: &Path = &f.engine.config().runtime_dir.join("native-sessions");
    let record = record.join(format!("{}.json", stale.id()));
    let json = std::fs::read_to_string(&record).unwrap();
    let (head, rest) = json.split_once("\"last_used\":").unwrap();
    let rest = rest.trim_start_matches(|c: char| c.is_ascii_digit());
    std::fs::write(&record, format!("{head}\"last_used\":1{rest}")).unwrap();
    let fresh = start_with(&f, &config);

    let would = engine_native::reap_sessions(f.engine.config(), true).unwrap();
    assert!(would.contains(&stale.id().to_owned()), "{would:?}");
    assert!(alive(stale.pid()), "a dry run touches nothing");
    let reaped = engine_native::reap_sessions(f.engine.config(), false).unwrap();
    assert!(reaped.contains(&orphan.id().to_owned()), "{reaped:?}");
    assert!(reaped.contains(&stale.id().to_owned()), "{reaped:?}");
    assert!(!reaped.contains(&fresh.id().to_owned()), "{reaped:?}");
    assert!(wait_until(Duration::from_secs(5), || !alive(stale.pid())), "expired one killed");
    // bwrap's sweep does not see native sessions, nor the other way round.
    let bwrap = engine_bwrap::reap_sessions(f.engine.config(), "bwrap", false).unwrap();
    assert!(!bwrap.contains(&fresh.id().to_owned()));
    assert!(alive(fresh.pid()));

    // Limits hold as in a run: 1 GiB under 256 MiB fails, the process cap holds.
    f.engine.stop_session(fresh.id()).unwrap();
    let limits = sandbox_core::Limits {
        memory: Some(256 << 20),
        pids: Some(64),
        ..sandbox_core::Limits::NONE
    };
    let session = start_with(&f, &SessionConfig { limits, ..config });
    let (code, out, err) = exec(&session, &["python3", "-c", "b = bytearray(1 << 30); print(1)"]);
    assert_ne!(code, 0, "1 GiB under a 256 MiB limit: {out}");
    assert!(err.contains("MemoryError"), "{err}");
    let bomb = "import os\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            import time; time.sleep(5); os._exit(0)\n        n += 1\nexcept OSError as e:\n    print('stopped at', n)\n";
    let (code, out, err) = exec(&session, &["python3", "-c", bomb]);
    assert_eq!(code, 0, "{err}");
    let forks: u32 = out.split_whitespace().nth(2).and_then(|n| n.parse().ok()).expect(&out);
    assert!(forks < 64, "at most 64 processes: {out}");
    f.engine.stop_session(session.id()).unwrap();
}

#[test]
fn native_sessions_are_reaped_and_hold_their_limits() {
    super::as_root_and_rootless("session::native_sessions_are_reaped_and_hold_their_limits", reaps);
}

/// A socket anyone planted at the agent's path in the host's `/tmp` is not taken for the
/// agent while the sandbox is still being built (its pinned process's root is the host's until
/// the `pivot_root`): `session start` returns once the real agent listens, and nothing ever
/// connects to the planted one.
#[test]
fn a_socket_planted_in_the_host_tmp_is_not_taken_for_the_agent() {
    if super::gate().is_none() {
        return;
    }
    struct Planted(std::path::PathBuf);
    impl Drop for Planted {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let planted = Planted(Path::new("/").join(sandbox_core::agent::AGENT_SOCKET));
    let _ = std::fs::remove_file(&planted.0);
    let listener = std::os::unix::net::UnixListener::bind(&planted.0).unwrap();
    listener.set_nonblocking(true).unwrap();
    let f = engine_fixture();
    for _ in 0..3 {
        let session = start_with(&f, &config(&f, Duration::from_secs(600)));
        let (code, out, err) = exec(&session, &["echo", "agent"]);
        assert_eq!((code, out.as_str()), (0, "agent\n"), "{err}");
        f.engine.stop_session(session.id()).unwrap();
    }
    assert!(listener.accept().is_err(), "the planted socket was connected to");
}

/// Without pasta a warm session with net on gets the built-in relay (or, without a tun device
/// to open, the proxy) from a keeper, this binary started again (the CLI's tests run it:
/// `session::a_native_session_without_pasta_…`).
/// A binary that does not serve as one (this test harness) gets a clear error, and nothing
/// is left.
#[test]
fn without_pasta_a_session_needs_a_program_that_serves_its_proxy() {
    if super::gate().is_none() {
        return;
    }
    let mut f = engine_fixture();
    let bin = tempfile::tempdir().unwrap();
    let mut engine_config = f.engine.config().clone();
    engine_config.path = Some(crate::builtin_net::path_without_pasta(bin.path()));
    // Records of its own: the other tests' sessions come and go meanwhile.
    let runtime = tempfile::tempdir().unwrap();
    engine_config.runtime_dir = runtime.path().to_owned();
    f.engine = engine_native::NativeEngine::new(engine_config).unwrap();
    let config = SessionConfig { net: Net::On, ..config(&f, Duration::from_secs(60)) };
    assert_eq!(f.engine.list_sessions().unwrap().len(), 0);
    let err = f.engine.start_session(&config, &mut |_| {}).unwrap_err().to_string();
    let which = if sandbox_net::relay_available() { "relay" } else { "proxy" };
    let want = format!("starting the built-in {which}'s keeper for the session");
    assert!(err.contains(&want), "{err}");
    assert!(err.contains("sandbox_net::keeper_main_if_asked"), "{err}");
    assert_eq!(f.engine.list_sessions().unwrap().len(), 0);
}
