//! Real sandboxes: each check runs as the caller and, when that is root, again as the
//! unprivileged `psbx-rootless` user (the test binary re-runs itself with `runuser`). Gated on
//! user namespaces working here (found by trying), printing `SKIPPED: native: <reason>`.

#![allow(clippy::print_stderr, clippy::unwrap_used)]

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use engine_native::{Command, Input, RootEntry};

#[path = "../../../sandbox-core/tests/shared/builtin_net.rs"]
mod builtin_net;
mod engine;
mod fault;
#[path = "../../../sandbox-core/tests/shared/interactive.rs"]
mod interactive;
mod on_demand;
mod session;

const PYTHON: &str = "/usr/bin/python3.11";
const ROOTLESS: &str = "psbx-rootless";
const INNER: &str = "ENGINE_NATIVE_INNER";

struct Fixture {
    _dir: tempfile::TempDir,
    home: PathBuf,
    workspace: PathBuf,
    input: Input,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let home = root.join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_rsa"), "SECRET-KEY-MARKER").unwrap();
    let workspace = root.join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let own = root.join("own");
    std::fs::create_dir(&own).unwrap();
    std::fs::write(own.join("passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
    std::fs::write(own.join("group"), "root:x:0:\n").unwrap();
    let mut root_entries = Vec::new();
    for name in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
        let path = Path::new("/").join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => root_entries.push(RootEntry::Symlink {
                name: name.into(),
                target: std::fs::read_link(&path).unwrap(),
            }),
            Ok(m) if m.is_dir() => root_entries.push(RootEntry::Dir { name: name.into() }),
            _ => {}
        }
    }
    let etc = ["resolv.conf", "hosts", "nsswitch.conf", "ld.so.cache"]
        .iter()
        .filter_map(|rel| {
            Some((std::fs::canonicalize(Path::new("/etc").join(rel)).ok()?, PathBuf::from(rel)))
        })
        .collect();
    let input = Input {
        uid: rustix::process::getuid().as_raw(),
        gid: rustix::process::getgid().as_raw(),
        home: Some(home.clone()),
        own: (own.clone(), "the test's own files".into()),
        root_entries,
        etc,
        passwd: own.join("passwd"),
        group: own.join("group"),
        ca_bundle: None,
        ro_dirs: vec![],
        workspace: Some(workspace.clone()),
        mounts: vec![],
        own_writable: vec![],
        not_idmapped: vec![],
        chdir: None,
        net: false,
        tmpfs_size: 16 << 20,
        links: Vec::new(),
    };
    Fixture { _dir: dir, home, workspace, input }
}

/// `None` (after printing why) when user namespaces cannot be made here.
pub(crate) fn gate() -> Option<()> {
    match engine_native::userns_probe() {
        Ok(()) => Some(()),
        Err(reason) => {
            eprintln!("SKIPPED: native: {reason}");
            None
        }
    }
}

/// Runs `check` as this user and, for root, again as `psbx-rootless` (the same test, re-run).
fn as_root_and_rootless(test: &str, check: fn()) {
    if gate().is_none() {
        return;
    }
    check();
    if rustix::process::getuid().is_root() && std::env::var_os(INNER).is_none() {
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new("runuser")
            .args(["-u", ROOTLESS, "--"])
            .arg(&exe)
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(INNER, "1")
            .current_dir("/tmp")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "as {ROOTLESS}:\n{text}");
        assert!(text.contains("1 passed"), "as {ROOTLESS} the test did not run:\n{text}");
    }
}

fn env() -> Vec<(String, OsString)> {
    vec![
        ("PATH".into(), "/usr/bin:/bin".into()),
        ("HOME".into(), sandbox_home().into()),
        ("LANG".into(), "C.UTF-8".into()),
    ]
}

fn sandbox_home() -> &'static str {
    "/home/sandbox"
}

/// Runs `argv` in the fixture's sandbox; (exit code, stdout).
fn run(f: &Fixture, argv: &[&str]) -> (i32, String) {
    let plan = engine_native::plan(&f.input).unwrap();
    let (r, w) = rustix::pipe::pipe().unwrap();
    let command = Command {
        argv: argv.iter().map(OsString::from).collect(),
        env: env(),
        stdin: None,
        stdout: Some(w),
        stderr: None,
        ..Command::default()
    };
    let child = engine_native::spawn(&plan, command).unwrap();
    let reader = std::thread::spawn(move || read_all(r));
    let code = child.wait().unwrap();
    (code, reader.join().unwrap())
}

fn read_all(fd: OwnedFd) -> String {
    use std::io::Read;
    let mut s = String::new();
    let _ = std::fs::File::from(fd).read_to_string(&mut s);
    s
}

fn python(f: &Fixture, code: &str) -> (i32, String) {
    run(f, &[PYTHON, "-I", "-c", code])
}

const FACTS: &str = r#"
import os, json, ctypes, socket, errno
libc = ctypes.CDLL(None, use_errno=True)
def sys(nr, *args):
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    return 0 if r >= 0 else ctypes.get_errno()
status = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
def can_write(p):
    try:
        open(p, "w").write("x"); return True
    except OSError:
        return False
def connect(addr):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(addr); return "connected"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
lo = socket.socket(); lo.bind(("127.0.0.1", 0)); lo.listen()
facts = {
    "uid": os.getuid(),
    "home": sorted(os.listdir(os.environ["HOME"])),
    "host_home_visible": os.path.exists(HOST_HOME),
    "write_ws": can_write("out.txt"),
    "write_outside": [p for p in ["/etc/x", "/usr/x", "/x", "/proc/sys/kernel/hostname", HOST_HOME + "/x"] if can_write(p)],
    "write_tmp": can_write("/tmp/x") and can_write(os.environ["HOME"] + "/x"),
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "pid": os.getpid(),
    "CapEff": status["CapEff"].strip(), "CapBnd": status["CapBnd"].strip(),
    "NoNewPrivs": status["NoNewPrivs"].strip(), "Seccomp": status["Seccomp"].strip(),
    "mount": sys(165, 0, 0, 0, 0, 0), "unshare_userns": sys(272, 0x10000000),
    "ptrace_init": sys(101, 16, 1, 0, 0), "keyctl": sys(250, 0, 0, 0, 0), "bpf": sys(321, 0, 0, 0),
    "io_uring_setup": sys(425, 1, 0), "clone3": sys(435, 0, 0), "setns": sys(308, 0, 0),
    "chmod_setuid": sys(90, ctypes.addressof(ctypes.create_string_buffer(b"out.txt")), 0o4755),
    "net_out": connect(("1.1.1.1", 80)), "loopback": connect(lo.getsockname()),
    "hostname": socket.gethostname(),
}
print(json.dumps(facts))
"#;

fn facts() {
    let f = fixture();
    let code = FACTS.replace("HOST_HOME", &format!("{:?}", f.home.display().to_string()));
    let (exit, out) = python(&f, &code);
    assert_eq!(exit, 0, "{out}");
    let get = |key: &str| -> String {
        let start = out.find(&format!("\"{key}\": ")).unwrap_or_else(|| panic!("{key} in {out}"));
        let rest = &out[start + key.len() + 4..];
        let end = rest.find([',', '}']).unwrap_or(rest.len());
        let end = if rest.starts_with('[') { rest.find(']').unwrap() + 1 } else { end };
        rest[..end].to_owned()
    };
    let eperm = libc::EPERM.to_string();
    let enosys = libc::ENOSYS.to_string();
    assert_eq!(get("home"), "[]");
    assert_eq!(get("host_home_visible"), "false");
    assert!(!out.contains("SECRET-KEY-MARKER"));
    assert_eq!(get("write_ws"), "true");
    assert_eq!(get("write_outside"), "[]", "{out}");
    assert_eq!(get("write_tmp"), "true");
    assert_ne!(get("pid"), "1");
    assert!(get("pids").starts_with("[1, "), "{out}");
    assert!(get("pids").split(',').count() <= 3, "only our init and the script: {out}");
    assert_eq!(get("CapEff"), "\"0000000000000000\"");
    assert_eq!(get("CapBnd"), "\"0000000000000000\"");
    assert_eq!(get("NoNewPrivs"), "\"1\"");
    assert_eq!(get("Seccomp"), "\"2\"");
    for key in ["mount", "unshare_userns", "ptrace_init", "keyctl", "bpf", "setns", "chmod_setuid"]
    {
        assert_eq!(get(key), eperm, "{key}: {out}");
    }
    for key in ["io_uring_setup", "clone3"] {
        assert_eq!(get(key), enosys, "{key}: {out}");
    }
    assert_eq!(get("net_out"), "\"ENETUNREACH\"", "{out}");
    assert_eq!(get("loopback"), "\"connected\"");
    assert_eq!(get("hostname"), "\"python-sandbox\"");
    assert!(f.workspace.join("out.txt").exists());
    if rustix::process::getuid().is_root() {
        assert_eq!(get("uid"), "65534");
    }
}

#[test]
fn the_wall_holds() {
    as_root_and_rootless("the_wall_holds", facts);
}

/// The host uid of every process of a running sandbox (the monitor's descendants).
fn descendants(pid: i32) -> Vec<i32> {
    let mut out = vec![];
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let children =
            std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")).unwrap_or_default();
        for c in children.split_whitespace().filter_map(|c| c.parse().ok()) {
            out.push(c);
            todo.push(c);
        }
    }
    out
}

fn host_uid(pid: i32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn never_host_root() {
    let f = fixture();
    let plan = engine_native::plan(&f.input).unwrap();
    let command = Command {
        argv: [PYTHON, "-c", "import time; time.sleep(30)"].iter().map(OsString::from).collect(),
        env: env(),
        ..Command::default()
    };
    let child = engine_native::spawn(&plan, command).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut tree = descendants(child.pid());
    while tree.len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        tree = descendants(child.pid());
    }
    assert!(tree.len() >= 2, "init and the script: {tree:?}");
    std::thread::sleep(Duration::from_millis(200));
    // Listed again: the init's short-lived helpers are gone by now.
    let tree = descendants(child.pid());
    let uids: Vec<(i32, u32)> =
        tree.iter().filter_map(|&pid| Some((pid, host_uid(pid)?))).collect();
    assert!(uids.len() >= 2, "init and the script: {tree:?}");
    for (pid, uid) in uids {
        assert_ne!(uid, 0, "process {pid} of the sandbox is host root");
    }
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.pid()).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    assert_eq!(child.wait().unwrap(), 128 + libc::SIGTERM);
}

#[test]
fn no_process_of_the_sandbox_is_host_root_and_sigterm_reaches_the_script() {
    as_root_and_rootless(
        "no_process_of_the_sandbox_is_host_root_and_sigterm_reaches_the_script",
        never_host_root,
    );
}

#[test]
fn exit_codes_come_through_after_a_denied_ptrace_of_init() {
    if gate().is_none() {
        return;
    }
    let f = fixture();
    let code = "import ctypes, sys\nlibc = ctypes.CDLL(None)\nlibc.syscall(101, 16, 1, 0, 0)\nsys.exit(42)";
    let started = Instant::now();
    assert_eq!(python(&f, code).0, 42);
    assert!(started.elapsed() < Duration::from_secs(10));
}

const KILLED_PARENT: &str = "ENGINE_NATIVE_KILLED_PARENT";

/// Inner half of the kill test: starts a sandbox whose script forks a sleeper, prints the
/// monitor's pid and waits.
#[test]
fn killed_parent_helper() {
    if std::env::var_os(KILLED_PARENT).is_none() {
        return;
    }
    let f = fixture();
    let plan = engine_native::plan(&f.input).unwrap();
    let command = Command {
        argv: ["/bin/sh", "-c", "sleep 300 & sleep 300"].iter().map(OsString::from).collect(),
        env: env(),
        ..Command::default()
    };
    let child = engine_native::spawn(&plan, command).unwrap();
    println!("MONITOR {}", child.pid());
    let _ = child.wait();
}

#[test]
fn the_whole_tree_dies_with_a_killed_parent() {
    if gate().is_none() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let mut helper = std::process::Command::new(exe)
        .args(["--exact", "killed_parent_helper", "--nocapture"])
        .env(KILLED_PARENT, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(helper.stdout.take().unwrap());
    let monitor: i32 = loop {
        let mut line = String::new();
        assert!(std::io::BufRead::read_line(&mut stdout, &mut line).unwrap() > 0);
        if let Some(pid) = line.trim().strip_prefix("MONITOR ") {
            break pid.parse().unwrap();
        }
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut tree = descendants(monitor);
    while tree.len() < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        tree = descendants(monitor);
    }
    assert!(tree.len() >= 4, "init, sh and two sleeps: {tree:?}");
    tree.push(monitor);
    helper.kill().unwrap();
    helper.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let alive = |pid: &i32| process_state(*pid).is_some_and(|s| s != 'Z');
    while tree.iter().any(alive) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<&i32> = tree.iter().filter(|p| alive(p)).collect();
    assert!(left.is_empty(), "still running after the parent died: {left:?}");
}

const NET_FACTS: &str = r#"
import errno, json, socket, ssl, urllib.request
def connect(addr, family=socket.AF_INET):
    s = socket.socket(family)
    s.settimeout(5)
    try:
        s.connect(addr); return "connected"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
try:
    pypi = urllib.request.urlopen("https://pypi.org/simple/six/", timeout=20).status
except Exception as e:
    pypi = repr(e)
def udp_dns():
    # A raw DNS query for pypi.org (type A) to the first nameserver the sandbox is given.
    server = next(l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver"))
    query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04pypi\x03org\x00\x00\x01\x00\x01"
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(10)
    try:
        s.sendto(query, (server, 53))
        reply = s.recv(4096)
        return "answered" if reply[:2] == b"\x12\x34" else "wrong reply"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
print(json.dumps({
    "pypi": pypi,
    "udp_dns": udp_dns(),
    "metadata": connect(("169.254.169.254", 80)),
    "host_loopback": connect(("127.0.0.1", HOST_PORT)),
    "host_address": connect((HOST_IP, HOST_PORT)) if HOST_IP != "-" else "none",
    # Every IPv4 address of the host's own (a docker bridge's too): pasta would connect to
    # them on the host, were they not walled off.
    "host_addresses": {ip: connect((ip, HOST_PORT)) for ip in HOST_ADDRESSES},
    "host_abstract": connect(b"\0" + HOST_ABSTRACT, socket.AF_UNIX),
}))
"#;

/// The pasta a net-on run here attaches, as the engine finds it; `None` (after printing why)
/// where it is not installed or cannot open `/dev/net/tun` as the user it runs as (no udev:
/// `cargo xtask ci` gives the device udev's mode), so net on is the built-in proxy's.
pub(crate) fn pasta() -> Option<std::path::PathBuf> {
    match engine_detect::pasta(Some(std::ffi::OsStr::new("/usr/local/bin:/usr/bin:/bin"))) {
        Ok(found) => Some(found),
        Err(no) => {
            eprintln!("SKIPPED: native net on with pasta: {}", no.why());
            None
        }
    }
}

/// The host's own IPv4 addresses but its loopback (its local table's: every interface's,
/// a link that is down included).
fn host_addresses() -> Vec<String> {
    let ranges = engine_detect::netlink::host_local_ranges().unwrap();
    ranges
        .iter()
        .filter(|c| c.addr.is_ipv4() && !c.addr.is_loopback() && c.prefix == 32)
        .map(|c| c.addr.to_string())
        .collect()
}

/// The network a net-on test run gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TestNet {
    /// pasta, attached before the script starts.
    PastaUpFront,
    /// pasta, attached at the script's first network call.
    PastaOnDemand,
    /// The built-in relay (no pasta), attached at the script's first network call.
    Relay,
}

/// Net on: PyPI over TLS with the mounted CA bundle, a DNS query over UDP answered; the
/// metadata address unroutable (pasta: 113) or refused (the relay: 111); neither the host's
/// loopback ports, any of its own addresses (walled off inside pasta's namespace) nor its
/// abstract unix sockets reachable; the host's nameserver answers, private or not. Connected up
/// front, or on demand (the script's first call held until the network is attached).
fn net_on_reaches_pypi_only(network: TestNet) {
    let pasta = match network {
        TestNet::Relay if !sandbox_net::relay_available() => {
            eprintln!("SKIPPED: native net on through the relay: /dev/net/tun cannot be opened");
            return;
        }
        TestNet::Relay => None,
        _ => match pasta() {
            Some(pasta) => Some(pasta),
            None => return,
        },
    };
    let on_demand = network != TestNet::PastaUpFront;
    let mut f = fixture();
    f.input.net = true;
    f.input.ca_bundle = std::fs::canonicalize("/etc/ssl/certs/ca-certificates.crt").ok();
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let host_ip = builtin_net::outbound_ip();
    // The variants run at once in this process: one name each.
    let abstract_name = format!("psbx-native-test-{}-{network:?}", std::process::id());
    let abstract_sock = {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(&abstract_name).unwrap();
        std::os::unix::net::UnixListener::bind_addr(&addr).unwrap()
    };
    let code = NET_FACTS
        .replace("HOST_PORT", &port.to_string())
        .replace("HOST_IP", &format!("{host_ip:?}"))
        .replace("HOST_ADDRESSES", &format!("{:?}", host_addresses()))
        .replace("HOST_ABSTRACT", &format!("b{abstract_name:?}"));
    let plan = engine_native::plan(&f.input).unwrap();
    let (r, w) = rustix::pipe::pipe().unwrap();
    let mut env = env();
    env.push(("SSL_CERT_FILE".into(), sandbox_core::SANDBOX_CA_BUNDLE.into()));
    let command = Command {
        argv: [PYTHON, "-I", "-c", &code].iter().map(OsString::from).collect(),
        env,
        stdin: None,
        stdout: Some(w),
        stderr: None,
        net_on_demand: on_demand,
        ..Command::default()
    };
    let mut child = engine_native::spawn(&plan, command).unwrap();
    let how = match &pasta {
        Some(pasta) => engine_native::Network::Pasta(pasta),
        None => engine_native::Network::Relay { nameservers: &[], listed: None },
    };
    let demand =
        engine_native::connect_on_demand(&mut child, how, sandbox_core::Lan::Refused, false)
            .unwrap();
    let supported = engine_native::demand::supported();
    if network == TestNet::Relay && !supported {
        eprintln!("SKIPPED: native net on through the relay: no user notifications here");
        return;
    }
    assert_eq!(demand.is_some(), on_demand && supported);
    let up_front = match (demand.is_some(), &pasta) {
        (true, _) => None,
        (false, Some(pasta)) => Some(engine_native::Attached::Pasta(
            engine_native::connect(&mut child, pasta, &[], sandbox_core::Lan::Refused).unwrap(),
        )),
        (false, None) => unreachable!(),
    };
    let reader = std::thread::spawn(move || read_all(r));
    let exit = child.wait().unwrap();
    let net = match (up_front, demand) {
        (Some(net), _) => net,
        (None, Some(demand)) => demand.finish().unwrap().expect("the script asked for its network"),
        (None, None) => unreachable!(),
    };
    let me = rustix::process::getuid();
    if let engine_native::Attached::Pasta(net) = &net {
        // The pasta of a root caller's sandbox is host nobody, as bwrap's is.
        let pasta_pid = net.pasta_pid().unwrap();
        let pasta_uid = host_uid(i32::try_from(pasta_pid).unwrap()).unwrap();
        assert_eq!(pasta_uid, if me.is_root() { 65534 } else { me.as_raw() });
    }
    drop(net);
    let out = reader.join().unwrap();
    assert_eq!(exit, 0, "{out}");
    assert!(out.contains("\"pypi\": 200"), "{out}");
    assert!(out.contains("\"udp_dns\": \"answered\""), "{out}");
    let metadata = if pasta.is_some() { "EHOSTUNREACH" } else { "ECONNREFUSED" };
    assert!(out.contains(&format!("\"metadata\": \"{metadata}\"")), "{out}");
    assert!(!out.contains("connected"), "{out}");
    assert!(listener.accept().is_err(), "the host's service was reached from the sandbox");
    drop((listener, abstract_sock));
}

#[test]
fn net_on_reaches_pypi_but_not_the_host_or_metadata() {
    as_root_and_rootless("net_on_reaches_pypi_but_not_the_host_or_metadata", || {
        net_on_reaches_pypi_only(TestNet::PastaUpFront)
    });
}

/// The same walls when the network is connected on the script's first call.
#[test]
fn net_on_demand_reaches_pypi_but_not_the_host_or_metadata() {
    as_root_and_rootless("net_on_demand_reaches_pypi_but_not_the_host_or_metadata", || {
        net_on_reaches_pypi_only(TestNet::PastaOnDemand)
    });
}

/// The same walls, and full TCP and UDP, through the built-in relay where pasta is missing.
#[test]
fn without_pasta_the_relay_reaches_pypi_but_not_the_host_or_metadata() {
    as_root_and_rootless(
        "without_pasta_the_relay_reaches_pypi_but_not_the_host_or_metadata",
        || net_on_reaches_pypi_only(TestNet::Relay),
    );
}

/// The sandbox's pasta is ended with the handle (none is left once the run is over).
#[test]
fn a_dropped_network_handle_leaves_no_pasta() {
    let Some(()) = gate() else { return };
    let Some(pasta) = pasta() else { return };
    let mut f = fixture();
    f.input.net = true;
    let plan = engine_native::plan(&f.input).unwrap();
    let mut child = engine_native::spawn(
        &plan,
        Command { argv: vec!["/bin/true".into()], env: env(), ..Command::default() },
    )
    .unwrap();
    let net = engine_native::connect(&mut child, &pasta, &[], sandbox_core::Lan::Refused).unwrap();
    // The init's: the process of the sandbox's network namespace, gone once the run has ended
    // (the monitor may still be finishing its exit then).
    let pid = child.netns_pid();
    assert_eq!(child.wait().unwrap(), 0);
    drop(net);
    let ns = format!("/proc/{pid}/ns/net");
    assert!(!Path::new(&ns).exists());
}

/// A network that cannot be attached ends the sandbox before anything of the command ran.
#[test]
fn a_failed_network_attach_runs_nothing() {
    let Some(()) = gate() else { return };
    let mut f = fixture();
    f.input.net = true;
    let marker = f.workspace.join("ran");
    let plan = engine_native::plan(&f.input).unwrap();
    let script = format!("open({:?}, 'w')", marker.display().to_string());
    let mut child = engine_native::spawn(
        &plan,
        Command {
            argv: [PYTHON, "-I", "-c", &script].iter().map(OsString::from).collect(),
            env: env(),
            ..Command::default()
        },
    )
    .unwrap();
    let err = engine_native::connect(
        &mut child,
        Path::new("/nonexistent/pasta"),
        &[],
        sandbox_core::Lan::Refused,
    )
    .unwrap_err();
    assert!(err.to_string().contains("cannot give the native sandbox its network"), "{err}");
    child.release_abandoned();
    let err = child.wait().unwrap_err();
    assert!(err.to_string().contains("waiting for the network"), "{err}");
    assert!(!marker.exists(), "the command ran without its network");
}

#[test]
fn setup_time_of_true() {
    if gate().is_none() {
        return;
    }
    let f = fixture();
    let mut times: Vec<Duration> = (0..20)
        .map(|_| {
            let started = Instant::now();
            assert_eq!(run(&f, &["/bin/true"]).0, 0);
            started.elapsed()
        })
        .collect();
    times.sort();
    eprintln!("native: `true` in the sandbox, median of 20: {:?}", times[10]);
}

fn ptys() {
    let f = fixture();
    let code = "import os; m, s = os.openpty(); os.write(m, b'hi\\n'); print(os.ttyname(s), os.read(s, 3))";
    let (exit, out) = python(&f, code);
    assert_eq!(exit, 0, "{out}");
    assert!(out.starts_with("/dev/pts/0 b'hi\\n'"), "{out}");
}

/// A pty inside, for every caller (devpts needs uid 0 mapped where it is mounted: an
/// unprivileged caller builds the tree as uid 0 of its first user namespace).
#[test]
fn a_pty_works_for_root_and_unprivileged_callers() {
    as_root_and_rootless("a_pty_works_for_root_and_unprivileged_callers", ptys);
}

fn keyboard_interrupt() {
    let f = fixture();
    // As in a shell's background job: the caller ignores SIGINT, which survives execve.
    #[allow(unsafe_code)]
    // SAFETY: a disposition change of this test process, which never relies on SIGINT.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
    }
    let plan = engine_native::plan(&f.input).unwrap();
    let (r, w) = rustix::pipe::pipe().unwrap();
    let code = "import sys, time\ntry:\n    print('ready', flush=True)\n    time.sleep(30)\nexcept KeyboardInterrupt:\n    print('interrupted', flush=True)\n    sys.exit(5)\n";
    let command = Command {
        argv: [PYTHON, "-I", "-c", code].iter().map(OsString::from).collect(),
        env: env(),
        stdout: Some(w),
        ..Command::default()
    };
    let child = engine_native::spawn(&plan, command).unwrap();
    let mut out = std::fs::File::from(r);
    let mut ready = [0u8; 6];
    std::io::Read::read_exact(&mut out, &mut ready).unwrap();
    assert_eq!(&ready, b"ready\n");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.pid()).unwrap(),
        rustix::process::Signal::INT,
    )
    .unwrap();
    assert_eq!(child.wait().unwrap(), 5);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert_eq!(rest, "interrupted\n");
}

/// A SIGINT to the sandbox reaches the script as `KeyboardInterrupt`, even when the caller
/// itself ignores SIGINT (the script's signals start at their defaults).
#[test]
fn a_forwarded_sigint_is_a_keyboard_interrupt() {
    as_root_and_rootless("a_forwarded_sigint_is_a_keyboard_interrupt", keyboard_interrupt);
}

fn landlock_holds() {
    let f = fixture();
    let code = "import errno\ntry:\n    open('/proc/self/comm', 'w').write('x')\n    print('wrote')\nexcept OSError as e:\n    print(errno.errorcode[e.errno])\ntry:\n    open('/proc/1/mem', 'r+b')\n    print('init memory open')\nexcept OSError as e:\n    print(errno.errorcode[e.errno])\n";
    let (exit, out) = python(&f, code);
    assert_eq!(exit, 0, "{out}");
    let mut lines = out.lines();
    // Landlock: a file outside the writable list (procfs is not in it) does not open for
    // writing, though the mount and the file's mode would let it.
    let expected = if engine_native::landlock_applied().is_some() { "EACCES" } else { "wrote" };
    assert_eq!(lines.next(), Some(expected), "{out}");
    // The init's memory is masked read-only (as bwrap's `--ro-bind /dev/null`).
    assert_ne!(lines.next(), Some("init memory open"), "{out}");
}

/// Landlock is applied (a ruleset with a right it does not handle used to fail as a whole and
/// be dropped silently), and the init's memory files do not open for writing.
#[test]
fn landlock_and_the_init_memory_mask_hold() {
    as_root_and_rootless("landlock_and_the_init_memory_mask_hold", landlock_holds);
}

fn ends_on_the_record() {
    let f = fixture();
    let plan = engine_native::plan(&f.input).unwrap();
    let (stdin_r, stdin_w) = rustix::pipe::pipe().unwrap();
    let (out_r, out_w) = rustix::pipe::pipe().unwrap();
    // A detached grandchild outlives the script inside: the pid namespace must end it.
    let code = "import os, sys, time\n\
if os.fork() == 0:\n    os.setsid()\n    time.sleep(300)\n    os._exit(0)\n\
print('ready', flush=True)\nsys.stdin.read()\nsys.exit(3)\n";
    let command = Command {
        argv: [PYTHON, "-c", code].iter().map(OsString::from).collect(),
        env: env(),
        stdin: Some(stdin_r),
        stdout: Some(out_w),
        ..Command::default()
    };
    let child = engine_native::spawn(&plan, command).unwrap();
    let mut out = std::io::BufReader::new(std::fs::File::from(out_r));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert_eq!(line, "ready\n");
    // The init, the script and its grandchild (and the namespace maker while it is there).
    let tree = descendants(child.pid());
    assert!(tree.len() >= 3, "the run's tree: {tree:?}");
    let init = tree.iter().copied().find(|&p| ns_pid(p) == Some(1));
    let init = init.unwrap_or_else(|| panic!("no init in the run's tree: {tree:?}"));
    drop(stdin_w);
    let mut record = [0u8; 4];
    let mut at = 0;
    while at < record.len() {
        let n = rustix::io::read(child.ended(), &mut record[at..]).unwrap();
        assert_ne!(n, 0, "the done pipe closed without a record");
        at += n;
    }
    assert_eq!(i32::from_ne_bytes(record), 3, "the record is the script's exit code");
    // Reported only once nothing of the run runs (the monitor need not be gone): the init may
    // still be a zombie (the monitor reaps it after writing the record), every other process
    // of its pid namespace is gone already.
    let alive: Vec<i32> = tree
        .iter()
        .copied()
        .filter(|&p| match process_state(p) {
            None => false,
            Some('Z') => p != init,
            Some(_) => true,
        })
        .collect();
    assert!(alive.is_empty(), "alive after the record: {alive:?} of {tree:?} (init {init})");
}

/// `pid`'s number in its own (innermost) pid namespace: 1 for an init.
fn ns_pid(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("NSpid:"))?.split_whitespace().last()?.parse().ok()
}

/// The state letter of `/proc/PID/stat` (`R`, `S`, `Z`, ...), `None` once the pid is gone.
fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: the state follows the last `)`.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// A run ends on the monitor's record of the init's exit code, written once nothing of the
/// run is left (the monitor's own exit, which tears its namespaces down, is not waited for).
#[test]
fn a_run_ends_on_the_monitors_record_once_nothing_of_it_is_left() {
    as_root_and_rootless(
        "a_run_ends_on_the_monitors_record_once_nothing_of_it_is_left",
        ends_on_the_record,
    );
}
