//! The publish contract on docker and podman, runs and sessions (`sandbox_core::publish`):
//! `PORT` is served on the same host port, `0:PORT` on the port reported once the container is
//! up, and a busy host port is refused by name with nothing left behind.

use sandbox_core::SessionEngine as _;
use std::io::Read as _;
use std::net::TcpListener;
use std::time::Duration;

use engine_oci::{OciEngine, SessionConfig};
use sandbox_core::{Captured, Net, Output, Publish, PublishedPort, RunIo, RunSpec, Stdin};

use crate::support::{containers, engines, eventually, name, spec, workspace};

/// A port free now (bound and released).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// Serves `pong` on `port` inside, on every address, `times` times.
fn server(port: u16, times: u32) -> String {
    format!(
        "import socket\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('0.0.0.0', {port}))\ns.listen()\nprint('listening', flush=True)\ns.settimeout(60)\nfor _ in range({times}):\n    c, _ = s.accept()\n    c.sendall(b'pong')\n    c.close()\n"
    )
}

fn pong(host_port: u16) -> bool {
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", host_port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut buf = String::new();
    let _ = stream.read_to_string(&mut buf);
    buf == "pong"
}

/// Runs `spec`, reaching the script from the host at whatever `published` reports while it
/// runs; returns the reported ports.
fn run_and_reach(engine: &OciEngine, spec: &RunSpec) -> Vec<PublishedPort> {
    let env = engine.prepare(spec, &mut |_| {}).expect("prepare");
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
            let outcome = engine.run_prepared(spec, &env, io).expect("run");
            (outcome, captured)
        });
        let ports = told.recv_timeout(Duration::from_secs(60)).expect("ports reported");
        let host_port = ports[0].host_port;
        let reached = eventually(Duration::from_secs(30), || pong(host_port));
        let (outcome, captured) = runner.join().expect("join");
        assert!(reached, "{}: {ports:?} not reachable: {}", name(engine), captured.stderr_lossy());
        assert_eq!(outcome.exit_code, 0, "{}", name(engine));
        ports
    })
}

#[test]
fn run_serves_on_the_same_port_or_the_reported_one() {
    for engine in engines() {
        let port = free_port();
        let (_dir, ws) = workspace(&server(port, 1));
        let mut spec = spec(&ws);
        spec.net = Net::On;
        spec.publish = vec![Publish::same(port)];
        let ports = run_and_reach(&engine, &spec);
        assert_eq!(
            ports.iter().map(|p| (p.port, p.url())).collect::<Vec<_>>(),
            [(port, format!("http://127.0.0.1:{port}"))]
        );

        spec.publish = vec![format!("0:{port}").parse().expect("publish")];
        let ports = run_and_reach(&engine, &spec);
        assert_eq!(ports.len(), 1, "{}", name(&engine));
        assert_eq!(ports[0].port, port);
        assert_ne!(ports[0].host_port, 0, "{}: the daemon's choice is reported", name(&engine));
    }
}

/// The container is never created for a taken port: the error names it and hints `0:PORT`.
#[test]
fn busy_port_is_refused_for_runs_and_sessions() {
    for engine in engines() {
        let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = taken.local_addr().expect("addr").port();
        let (_dir, ws) = workspace(&server(port, 1));
        let mut spec = spec(&ws);
        spec.net = Net::On;
        spec.publish = vec![Publish::same(port)];
        let want = format!(
            "host port {port} is already in use\nhint: publish `0:{port}` for any free host port, or choose another port"
        );
        let env = engine.prepare(&spec, &mut |_| {}).expect("prepare");
        let err = engine.run_prepared(&spec, &env, RunIo::inherit()).expect_err("busy");
        assert_eq!(err.to_string(), want, "{}", name(&engine));
        let config = SessionConfig {
            workspace: ws.clone(),
            mounts: Vec::new(),
            net: Net::On,
            allow: None,
            publish: spec.publish.clone(),
            env: Vec::new(),
            ttl: Duration::from_secs(120),
            tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
            limits: sandbox_core::Limits::NONE,
        };
        let err = engine.start_session(&config, &mut |_| {}).expect_err("busy");
        assert_eq!(err.to_string(), want, "{}", name(&engine));
        let workspace = format!("io.python-sandbox.oci.workspace={}", ws.display());
        assert_eq!(containers(&engine, &workspace), Vec::<String>::new(), "{}", name(&engine));
        assert!(
            !engine
                .list_sessions()
                .expect("list")
                .iter()
                .any(|s| s.workspace == ws.display().to_string()),
            "{}",
            name(&engine)
        );
        drop(taken);
    }
}

/// A session's `PORT` is the same host port (it used to be any), and `0:PORT` lists the
/// daemon's choice; both reach a server in the session.
#[test]
fn session_ports_are_the_real_host_ports() {
    use sandbox_core::Sandbox as _;
    for engine in engines() {
        let (same, any) = (free_port(), free_port());
        let (_dir, ws) = workspace("print('x')\n");
        let config = SessionConfig {
            workspace: ws.clone(),
            mounts: Vec::new(),
            net: Net::On,
            allow: None,
            publish: vec![Publish::same(same), format!("0:{any}").parse().expect("publish")],
            env: Vec::new(),
            ttl: Duration::from_secs(300),
            tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
            limits: sandbox_core::Limits::NONE,
        };
        let info = engine.start_session(&config, &mut |_| {}).expect("start");
        let e = name(&engine);
        assert_eq!(info.ports.len(), 2, "{e}: {:?}", info.ports);
        let url_of = |port: u16| info.ports.iter().find(|p| p.0 == port).map(|p| p.1.clone());
        assert_eq!(url_of(same), Some(format!("http://127.0.0.1:{same}")), "{e}");
        assert!(url_of(any).is_some_and(|u| !u.ends_with(":0")), "{e}: {:?}", info.ports);
        let session = engine.open_session(&info.id).expect("session");
        engine.block_on(async {
            for (port, url) in &info.ports {
                let service = sandbox_core::ServiceSpec {
                    // Its start is checked by connecting from inside: more than one greeting.
                    argv: vec!["python3".to_owned(), "-c".to_owned(), server(*port, 100)],
                    port: *port,
                    env: Vec::new(),
                };
                let started = session.start_service(&service).await.expect("service");
                assert_eq!(&started.url, url, "{e}: the service's URL is the listed one");
                let host_port: u16 =
                    url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("port");
                let reached = tokio::task::spawn_blocking(move || {
                    eventually(Duration::from_secs(20), || pong(host_port))
                })
                .await
                .expect("join");
                assert!(reached, "{e}: {url} not reachable");
            }
            session.stop().await.expect("stop");
        });
    }
}
