//! The publish contract on bwrap (pasta), runs and sessions (`sandbox_core::publish`): `PORT`
//! is served on the same host port, `0:PORT` on the port reported once the sandbox is up, and
//! a busy host port is refused by name with nothing left behind.

use sandbox_core::SessionEngine as _;
use std::io::Read as _;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use engine_bwrap::SessionConfig;
use sandbox_core::{Captured, Engine, Net, Output, Publish, PublishedPort, RunIo, RunSpec, Stdin};

use crate::support::{Fixture, fixture, pasta_fixture};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// Serves `pong` on `port` inside, on every address, `times` times.
fn server(port: u16, times: u32) -> String {
    format!(
        "import socket\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('0.0.0.0', {port}))\ns.listen()\nprint('listening', flush=True)\ns.settimeout(60)\nfor _ in range({times}):\n    c, _ = s.accept()\n    c.sendall(b'pong')\n    c.close()\n"
    )
}

fn reach(host_port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", host_port)) {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = String::new();
            let _ = stream.read_to_string(&mut buf);
            if buf == "pong" {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Runs `spec`, reaching the script from the host at whatever `published` reports while it
/// runs; returns the reported ports.
fn run_and_reach(f: &Fixture, spec: &RunSpec) -> Vec<PublishedPort> {
    let env = f.prepare(spec);
    let (tell, told) = std::sync::mpsc::channel::<Vec<PublishedPort>>();
    std::thread::scope(|scope| {
        let runner = scope.spawn(|| {
            let mut captured = Captured::default();
            let mut published = |ports: &[PublishedPort]| {
                let _ = tell.send(ports.to_vec());
            };
            let io = RunIo {
                stdin: Stdin::Null,
                output: Output::Sink(&mut captured),
                status: None,
                published: Some(&mut published),
                started: None,
            };
            let outcome = f.engine.run_prepared(spec, &env, io).expect("run");
            (outcome, captured)
        });
        let ports = told.recv_timeout(Duration::from_secs(60)).expect("ports reported");
        let reached = reach(ports[0].host_port);
        let (outcome, captured) = runner.join().expect("join");
        assert!(reached, "{ports:?} not reachable: {}", captured.stderr_lossy());
        assert_eq!(outcome.exit_code, 0);
        ports
    })
}

#[test]
fn run_serves_on_the_same_port_or_the_reported_one() {
    let Some(f) = pasta_fixture() else { return };
    let port = free_port();
    let mut spec = f.spec(&server(port, 1));
    spec.net = Net::On;
    spec.publish = vec![Publish::same(port)];
    let ports = run_and_reach(&f, &spec);
    let urls: Vec<(u16, String)> = ports.iter().map(|p| (p.port, p.url())).collect();
    assert_eq!(urls, [(port, format!("http://127.0.0.1:{port}"))]);

    spec.publish = vec![format!("0:{port}").parse().expect("publish")];
    let ports = run_and_reach(&f, &spec);
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].port, port);
    assert_ne!(ports[0].host_port, 0);
}

/// Processes whose command line names `needle` (a run's or session's workspace).
fn processes_naming(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("proc").flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmdline).contains(needle)
        {
            out.push(String::from_utf8_lossy(&cmdline).replace('\0', " "));
        }
    }
    out
}

/// Neither a run nor a session starts for a taken port: the error names it and hints `0:PORT`.
#[test]
fn busy_port_is_refused_for_runs_and_sessions() {
    let Some(f) = fixture() else { return };
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let mut spec = f.spec(&server(port, 1));
    spec.net = Net::On;
    spec.publish = vec![Publish::same(port)];
    let want = format!(
        "host port {port} is already in use\nhint: publish `0:{port}` for any free host port, or choose another port"
    );
    let err = f.engine.run(&spec, RunIo::inherit()).expect_err("busy");
    assert_eq!(err.to_string(), want);
    let config = SessionConfig {
        workspace: f.workspace.path().to_owned(),
        mounts: Vec::new(),
        net: Net::On,
        allow: None,
        publish: spec.publish.clone(),
        env: Vec::new(),
        ttl: Duration::from_secs(120),
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        limits: sandbox_core::Limits::NONE,
    };
    let before = f.engine.list_sessions().expect("list").len();
    let err = f.engine.start_session(&config, &mut |_| {}).expect_err("busy");
    assert_eq!(err.to_string(), want);
    assert_eq!(f.engine.list_sessions().expect("list").len(), before);
    let ws = f.workspace.path().display().to_string();
    assert_eq!(processes_naming(&ws), Vec::<String>::new());
    drop(taken);
}

/// A session's ports are what pasta bound: `PORT` the same, `0:PORT` the picked one; both
/// reach a service in the session.
#[test]
fn session_ports_are_the_real_host_ports() {
    use sandbox_core::Sandbox as _;
    let Some(f) = pasta_fixture() else { return };
    let (same, any) = (free_port(), free_port());
    let config = SessionConfig {
        workspace: f.workspace.path().to_owned(),
        mounts: Vec::new(),
        net: Net::On,
        allow: None,
        publish: vec![Publish::same(same), format!("0:{any}").parse().expect("publish")],
        env: Vec::new(),
        ttl: Duration::from_secs(300),
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        limits: sandbox_core::Limits::NONE,
    };
    let info = f.engine.start_session(&config, &mut |_| {}).expect("start");
    let url_of = |port: u16| info.ports.iter().find(|p| p.0 == port).map(|p| p.1.clone());
    assert_eq!(url_of(same), Some(format!("http://127.0.0.1:{same}")), "{:?}", info.ports);
    assert!(url_of(any).is_some_and(|u| !u.ends_with(":0")), "{:?}", info.ports);
    let session = f.engine.open_session(&info.id).expect("session");
    for (port, url) in &info.ports {
        let service = sandbox_core::ServiceSpec {
            // Its start is checked by connecting from inside: more than one greeting.
            argv: vec!["python3".to_owned(), "-c".to_owned(), server(*port, 100)],
            port: *port,
            env: Vec::new(),
        };
        let started = crate::session::block_on(session.start_service(&service)).expect("service");
        assert_eq!(&started.url, url);
        let host_port: u16 = url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port");
        assert!(reach(host_port), "{url} not reachable");
    }
    crate::session::block_on(session.stop()).expect("stop");
}
