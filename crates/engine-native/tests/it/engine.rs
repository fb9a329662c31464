//! [`engine_native::NativeEngine`] end to end: engine-bwrap's pipeline (prepare, the
//! environment cache, the run) with the native sandbox as its launcher.

use std::path::{Path, PathBuf};
use std::time::Duration;

use engine_bwrap::BwrapConfig;
use engine_native::NativeEngine;
use sandbox_core::{Captured, Engine, Net, Output, RunIo, RunOutcome, RunSpec, Stdin};

pub(crate) struct EngineFixture {
    _base: super::Fixture,
    pub(crate) workspace: PathBuf,
    pub(crate) engine: NativeEngine,
}

pub(crate) fn engine_fixture() -> EngineFixture {
    let base = super::fixture();
    let (home, workspace) = (base.home.clone(), base.workspace.clone());
    // One cache per user for the whole test binary: the environment is warm after the first.
    let cache_dir = std::env::temp_dir()
        .join(format!("engine-native-test-cache-{}", rustix::process::getuid().as_raw()));
    let config = BwrapConfig {
        runtime_dir: cache_dir.join("run"),
        cache_dir,
        home,
        path: Some("/usr/local/bin:/usr/bin:/bin".into()),
        bwrap: None,
        uv: None,
        python: Some(super::PYTHON.into()),
        handle_signals: false,
    };
    let engine = NativeEngine::new(config).unwrap();
    EngineFixture { _base: base, workspace, engine }
}

pub(crate) fn spec(f: &EngineFixture, script: &str) -> RunSpec {
    let path = f.workspace.join("script.py");
    std::fs::write(&path, script).unwrap();
    RunSpec {
        script: path,
        args: vec!["one".into()],
        dependencies: Vec::new(),
        requires_python: None,
        mounts: Vec::new(),
        net: Net::Off,
        publish: Vec::new(),
        env: Vec::new(),
        timeout: Some(Duration::from_secs(60)),
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        limits: sandbox_core::Limits::NONE,
        workspace: f.workspace.clone(),
    }
}

fn run(f: &EngineFixture, spec: &RunSpec) -> (RunOutcome, Captured) {
    let mut captured = Captured::default();
    let io = RunIo {
        stdin: Stdin::Bytes(b"from stdin".to_vec()),
        output: Output::Sink(&mut captured),
        status: None,
        published: None,
    };
    let outcome = f.engine.run(spec, io).unwrap();
    (outcome, captured)
}

fn runs_a_script() {
    let f = engine_fixture();
    assert_eq!(f.engine.name(), "native");
    let script = "import os, sys\nprint(sys.argv[1], sys.stdin.read(), os.getcwd() == os.environ['PWD'])\nprint(sorted(os.listdir(os.environ['HOME'])), file=sys.stderr)\nopen('out.txt', 'w').write('x')\nsys.exit(7)\n";
    let (outcome, captured) = run(&f, &spec(&f, script));
    assert_eq!(outcome.exit_code, 7, "{}", captured.stderr_lossy());
    assert_eq!(captured.stdout_lossy(), "one from stdin True\n");
    assert_eq!(captured.stderr_lossy(), "[]\n");
    assert!(f.workspace.join("out.txt").exists());
    // The same environment, warm.
    let (again, _) = run(&f, &spec(&f, "print('hi')\n"));
    assert_eq!(again.exit_code, 0);
}

#[test]
fn the_native_engine_runs_a_script_through_the_shared_pipeline() {
    super::as_root_and_rootless(
        "engine::the_native_engine_runs_a_script_through_the_shared_pipeline",
        runs_a_script,
    );
}

fn holds_limits() {
    let f = engine_fixture();
    let mut s = spec(
        &f,
        "import resource\nprint(resource.getrlimit(resource.RLIMIT_AS)[0] if resource.getrlimit(resource.RLIMIT_AS)[0] > 0 else 'cgroup')\nx = bytearray(400 << 20)\nprint('allocated')\n",
    );
    s.limits.memory = Some(200 << 20);
    let (outcome, captured) = run(&f, &s);
    assert!(!captured.stdout_lossy().contains("allocated"), "{}", captured.stdout_lossy());
    assert_ne!(outcome.exit_code, 0);
}

#[test]
fn a_memory_limit_holds_on_the_native_engine() {
    super::as_root_and_rootless("engine::a_memory_limit_holds_on_the_native_engine", holds_limits);
}

fn prepares_and_runs_with_net() {
    if !Path::new("/usr/bin/pasta").exists() {
        eprintln!("SKIPPED: native net on: pasta is not installed");
        return;
    }
    let f = engine_fixture();
    let mut s = spec(&f, "import six\nprint(six.__name__)\n");
    s.dependencies = vec!["six".to_owned()];
    s.net = Net::On;
    let (outcome, captured) = run(&f, &s);
    assert_eq!(outcome.exit_code, 0, "{}", captured.stderr_lossy());
    assert_eq!(captured.stdout_lossy(), "six\n");
}

#[test]
fn the_native_engine_prepares_dependencies_in_its_own_sandboxes() {
    super::as_root_and_rootless(
        "engine::the_native_engine_prepares_dependencies_in_its_own_sandboxes",
        prepares_and_runs_with_net,
    );
}

/// A directory of links to everything in `/usr/bin` but pasta: this machine as a fresh one
/// without the passt package.
fn path_without_pasta(dir: &Path) -> std::ffi::OsString {
    std::fs::create_dir_all(dir).unwrap();
    for entry in std::fs::read_dir("/usr/bin").unwrap() {
        let name = entry.unwrap().file_name();
        let text = name.to_string_lossy();
        if !text.starts_with("pasta") && !text.starts_with("passt") {
            let _ = std::os::unix::fs::symlink(Path::new("/usr/bin").join(&name), dir.join(&name));
        }
    }
    dir.as_os_str().to_owned()
}

const BUILTIN_NET_SCRIPT: &str = r#"
import socket, sys, urllib.request
port, host_ip = sys.argv[1], sys.argv[2]
print("pypi", urllib.request.urlopen("https://pypi.org/simple/six/", timeout=60).status)
def via_proxy(request):
    c = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    c.sendall(request.encode() + b"\r\n\r\n")
    return c.recv(200).split(b"\r\n")[0].decode()
print("loopback", via_proxy(f"CONNECT 127.0.0.1:{port} HTTP/1.1"))
print("localhost", via_proxy(f"GET http://localhost:{port}/ HTTP/1.1\r\nHost: localhost"))
if host_ip != "-":
    print("host address", via_proxy(f"CONNECT {host_ip}:{port} HTTP/1.1"))
s = socket.socket()
s.settimeout(10)
try:
    s.connect(("151.101.0.223", 443))
    print("raw connected")
except OSError as e:
    print("raw", e.errno)
import six
print(six.__name__)
"#;

/// Net on where pasta is not installed: the dependency is installed and the script's HTTPS
/// works through the built-in proxy; the host's loopback and own addresses are refused
/// through it, and a raw socket has no route.
fn prepares_and_runs_through_the_builtin_proxy() {
    let mut f = engine_fixture();
    let uid = rustix::process::getuid().as_raw();
    let scratch = std::env::temp_dir()
        .join(format!("engine-native-builtin-net-{uid}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let mut config = f.engine.config().clone();
    config.path = Some(path_without_pasta(&scratch.join("bin")));
    // Its own cache: the install must go through the proxy, not find a warm environment.
    config.cache_dir = scratch.join("cache");
    config.runtime_dir = scratch.join("cache/run");
    assert!(engine_native::builtin_net_applies(&config));
    f.engine = NativeEngine::new(config).unwrap();
    // A host service on every address, which the sandbox must not reach.
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let host_ip = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("151.101.0.223:443").and_then(|()| s.local_addr()))
        .map_or("-".to_owned(), |a| a.ip().to_string());
    let mut s = spec(&f, BUILTIN_NET_SCRIPT);
    s.args = vec![port.to_string(), host_ip.clone()];
    s.dependencies = vec!["six".to_owned()];
    s.net = Net::On;
    assert!(f.engine.check(&s).is_ok());
    let (outcome, captured) = run(&f, &s);
    let _ = std::fs::remove_dir_all(&scratch);
    let stdout = captured.stdout_lossy();
    assert_eq!(outcome.exit_code, 0, "{stdout}{}", captured.stderr_lossy());
    let mut expected =
        "pypi 200\nloopback HTTP/1.1 403 Forbidden\nlocalhost HTTP/1.1 403 Forbidden\n".to_owned();
    if host_ip != "-" {
        expected.push_str("host address HTTP/1.1 403 Forbidden\n");
    }
    expected.push_str(&format!("raw {}\nsix\n", libc::ENETUNREACH));
    assert_eq!(stdout, expected);
    assert!(listener.accept().is_err(), "the host's listener was reached from the sandbox");
    // What only pasta gives is refused by name.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    s.publish = vec![sandbox_core::Publish::same(free)];
    let err = f.engine.check(&s).unwrap_err().to_string();
    assert!(err.contains("publishing a port needs pasta"), "{err}");
}

#[test]
fn without_pasta_net_on_goes_through_the_builtin_proxy() {
    super::as_root_and_rootless(
        "engine::without_pasta_net_on_goes_through_the_builtin_proxy",
        prepares_and_runs_through_the_builtin_proxy,
    );
}
