//! A network of the test's own, for what only a host's administrator can set up: a test
//! enters it by running itself again inside new network and mount namespaces (`unshare`; a user
//! namespace too when not root), where it builds
//!
//! - the "host" (this namespace): a veth to the LAN, `192.168.77.2/24`, default route through
//!   `192.168.77.1`; an AnyIP range (`ip route add local 203.0.113.0/24 dev lo`), which no
//!   interface lists; DNAT rules in the `OUTPUT` nat chain, kube-proxy style, sending
//!   `198.51.100.7:18099` to the host's loopback and `198.51.100.8:18099` to its own veth
//!   address (TCP and UDP); `/etc/resolv.conf` naming a private nameserver on the LAN, and
//!   `/etc/hosts` naming `rebind.test` at the public host;
//! - the LAN (another namespace behind the veth): a private host `192.168.77.1` (the
//!   gateway), a nameserver `192.168.77.53`, and a "public" host `198.51.100.1`.
//!
//! Every address gets a TCP listener and a UDP socket on one port (53 for the nameserver);
//! [`Lab::reached`] says which of them saw a connection or a non-empty datagram. Nothing
//! leaves the namespaces the test made; nothing of the real host's tables is touched.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::os::fd::AsFd;
use std::process::{Child, Command, Stdio};

/// The environment variable that marks the re-run (its value: the test's name).
const MARK: &str = "PSBX_NET_LAB";
/// Where `ip`, `iptables` and `nsenter` live, whoever runs the test.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The lab's ports: the DNAT rules' destination port, and every listener's.
pub(crate) const NAT_PORT: u16 = 18099;
pub(crate) const PORT: u16 = 18001;

/// One listening address of the lab.
struct Listener {
    name: &'static str,
    tcp: TcpListener,
    udp: UdpSocket,
}

/// The lab, built inside its namespaces.
pub(crate) struct Lab {
    lan: Child,
    listeners: Vec<Listener>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.lan.kill();
        let _ = self.lan.wait();
    }
}

/// Runs `test` (this binary's test of that name) again in a lab of its own: `Some(lab)` in
/// the re-run, `None` in the caller once the re-run passed (its output printed), or when no
/// lab can be made here (`SKIPPED` printed).
pub(crate) fn enter(test: &str) -> Option<Lab> {
    if std::env::var(MARK).ok().as_deref() == Some(test) {
        return Lab::build();
    }
    let mut unshare = Command::new("unshare");
    if !rustix::process::geteuid().is_root() {
        unshare.args(["--user", "--map-root-user"]);
    }
    let exe = std::env::current_exe().expect("the test binary");
    let out = unshare
        .args(["--net", "--mount", "--"])
        .arg(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(MARK, test)
        .env("PATH", PATH)
        .stdin(Stdio::null())
        .output();
    let Ok(out) = out else {
        println!("SKIPPED: {test}: `unshare` cannot be run");
        return None;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    if !out.status.success() && stderr.contains("unshare failed") {
        println!("SKIPPED: {test}: no namespaces of our own here: {stderr}");
        return None;
    }
    assert!(out.status.success(), "the lab run failed:\n{stdout}\n{stderr}");
    None
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .env("PATH", PATH)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// A TCP listener and a UDP socket on `ip:port`, made in the network namespace `netns`
/// (`None`: this one) by a thread that joins it (sockets keep their namespace).
fn listen(name: &'static str, ip: &str, port: u16, netns: Option<&str>) -> Listener {
    let addr: SocketAddr = format!("{ip}:{port}").parse().expect("address");
    let netns = netns.map(|path| std::fs::File::open(path).expect("the LAN's namespace"));
    std::thread::spawn(move || {
        if let Some(netns) = netns {
            rustix::thread::move_into_link_name_space(
                netns.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .expect("join the LAN's namespace");
        }
        let tcp = TcpListener::bind(addr).unwrap_or_else(|e| panic!("listen on {addr}: {e}"));
        let udp = UdpSocket::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        tcp.set_nonblocking(true).expect("nonblocking");
        udp.set_nonblocking(true).expect("nonblocking");
        Listener { name, tcp, udp }
    })
    .join()
    .expect("the listening thread")
}

impl Lab {
    fn build() -> Option<Lab> {
        let iptables = ["/usr/sbin/iptables", "/sbin/iptables", "/usr/bin/iptables"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists());
        let Some(iptables) = iptables else {
            println!("SKIPPED: lab: no iptables here (`apt-get install iptables`)");
            return None;
        };
        // The LAN: a namespace held by a process of its own.
        let mut lan = Command::new("unshare")
            .args(["--net", "--", "sleep", "600"])
            .stdin(Stdio::null())
            .spawn()
            .expect("the LAN's namespace");
        let pid = lan.id().to_string();
        let lan_ns = format!("/proc/{pid}/ns/net");
        let setup = || -> Result<(), String> {
            // The namespace exists once `sleep` runs in it.
            for _ in 0..200 {
                let ours = std::fs::read_link("/proc/self/ns/net").ok();
                if std::fs::read_link(&lan_ns).ok().is_some_and(|theirs| Some(theirs) != ours) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let host = |args: &str| run("ip", &args.split(' ').collect::<Vec<_>>());
            let inside = |args: &str| {
                let mut all = vec!["-t", &pid, "-n", "ip"];
                all.extend(args.split(' '));
                run("nsenter", &all)
            };
            host("link set lo up")?;
            host(&format!("link add v0 type veth peer name v1 netns {pid}"))?;
            host("addr add 192.168.77.2/24 dev v0")?;
            host("link set v0 up")?;
            host("route add default via 192.168.77.1")?;
            host("route add local 203.0.113.0/24 dev lo")?;
            inside("link set lo up")?;
            inside("addr add 192.168.77.1/24 dev v1")?;
            inside("addr add 192.168.77.53/24 dev v1")?;
            inside("addr add 198.51.100.1/32 dev lo")?;
            inside("link set v1 up")?;
            for (dst, to) in [("198.51.100.7", "127.0.0.1"), ("198.51.100.8", "192.168.77.2")] {
                for proto in ["tcp", "udp"] {
                    let to = format!("{to}:{PORT}");
                    let port = NAT_PORT.to_string();
                    run(
                        iptables,
                        &["-t", "nat", "-A", "OUTPUT", "-d", dst, "-p", proto, "--dport", &port]
                            .into_iter()
                            .chain(["-j", "DNAT", "--to-destination", &to])
                            .collect::<Vec<_>>(),
                    )?;
                }
            }
            let etc = std::env::temp_dir().join(format!("psbx-lab-{}", std::process::id()));
            std::fs::create_dir_all(&etc).map_err(|e| e.to_string())?;
            for (name, text) in [
                ("resolv.conf", "nameserver 192.168.77.53\n"),
                ("hosts", "127.0.0.1 localhost\n198.51.100.1 rebind.test\n"),
            ] {
                let file = etc.join(name);
                std::fs::write(&file, text).map_err(|e| e.to_string())?;
                let target = format!("/etc/{name}");
                run("mount", &["--bind", &file.display().to_string(), &target])?;
            }
            Ok(())
        };
        if let Err(e) = setup() {
            let _ = lan.kill();
            let _ = lan.wait();
            panic!("building the lab: {e}");
        }
        let listeners = vec![
            listen("host loopback", "127.0.0.1", PORT, None),
            listen("host address", "192.168.77.2", PORT, None),
            listen("host anyip", "203.0.113.9", PORT, None),
            listen("lan host", "192.168.77.1", PORT, Some(&lan_ns)),
            listen("lan nameserver", "192.168.77.53", 53, Some(&lan_ns)),
            listen("public host", "198.51.100.1", PORT, Some(&lan_ns)),
        ];
        Some(Lab { lan, listeners })
    }

    /// What the sandbox is asked to reach: `name ip port` for each, the DNAT'd ones too.
    pub(crate) fn targets() -> Vec<String> {
        [
            ("public", "198.51.100.1", PORT),
            ("lan", "192.168.77.1", PORT),
            ("nameserver", "192.168.77.53", 53),
            ("anyip", "203.0.113.9", PORT),
            ("nat-loopback", "198.51.100.7", NAT_PORT),
            ("nat-address", "198.51.100.8", NAT_PORT),
        ]
        .iter()
        .map(|(name, ip, port)| format!("{name}={ip}:{port}"))
        .collect()
    }

    /// Which listeners got something of the sandbox's: bytes over a TCP connection or a
    /// datagram with something in it (`NAME tcp`, `NAME udp`), sorted, each once. The first
    /// packet of a flow the relay or proxy then refuses (a `SYN`, whose handshake the kernel
    /// completes, or the empty datagram the relay sends to ask where the host's NAT sends a
    /// UDP flow) carries nothing of the sandbox's and is not counted.
    pub(crate) fn reached(&self) -> Vec<String> {
        let mut seen = Vec::new();
        for listener in &self.listeners {
            while let Ok((mut stream, _)) = listener.tcp.accept() {
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(std::time::Duration::from_millis(500)));
                let mut buf = [0u8; 64];
                if stream.read(&mut buf).is_ok_and(|n| n > 0) {
                    seen.push(format!("{} tcp", listener.name));
                }
            }
            let mut buf = [0u8; 512];
            while let Ok((n, _)) = listener.udp.recv_from(&mut buf) {
                if n > 0 {
                    seen.push(format!("{} udp", listener.name));
                }
            }
        }
        seen.sort();
        seen.dedup();
        seen
    }
}

/// The sandbox side: tries every target of [`Lab::targets`] over TCP (connect) and UDP (a
/// datagram), printing `NAME tcp RESULT` and `NAME udp RESULT`, after a line on stdin.
pub(crate) const PROBE: &str = r#"
import errno, socket, sys
sys.stdin.readline()
for target in sys.argv[1:]:
    name, addr = target.split("=")
    ip, port = addr.rsplit(":", 1)
    t = socket.socket()
    t.settimeout(3)
    try:
        t.connect((ip, int(port)))
        t.sendall(b"hello")
        print(name, "tcp connected", flush=True)
    except OSError as e:
        print(name, "tcp", errno.errorcode.get(e.errno, str(e)), flush=True)
    t.close()
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        u.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04lab\x00\x00\x01\x00\x01", (ip, int(port)))
        print(name, "udp sent", flush=True)
    except OSError as e:
        print(name, "udp", errno.errorcode.get(e.errno, str(e)), flush=True)
"#;

/// A sandbox-like network namespace (its own user namespace, only its loopback) running
/// [`PROBE`] at `targets` once a line is written to its stdin; `as_nobody`: made by host
/// nobody (the user a root caller's pasta runs as). Its first line of output is `up`.
pub(crate) fn sandbox(targets: &[String], as_nobody: bool) -> Child {
    let mut command = if as_nobody {
        let mut c = Command::new("setpriv");
        c.args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "unshare"]);
        c
    } else {
        Command::new("unshare")
    };
    let mut child = command
        .args(["--user", "--map-root-user", "--net", "--", "sh", "-c"])
        .arg("ip link set lo up && echo up && exec /usr/bin/python3.11 -I -c \"$0\" \"$@\"")
        .arg(PROBE)
        .args(targets)
        .env("PATH", PATH)
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the sandbox's namespace");
    let mut out = child.stdout.take().expect("stdout");
    let mut up = [0u8; 3];
    out.read_exact(&mut up).expect("up");
    assert_eq!(&up, b"up\n");
    child.stdout = Some(out);
    child
}

/// Lets `child` ([`sandbox`]) probe, and returns what it printed.
pub(crate) fn probe(mut child: Child) -> String {
    use std::io::Write;
    child.stdin.take().expect("stdin").write_all(b"go\n").expect("go");
    let mut out = String::new();
    child.stdout.take().expect("stdout").read_to_string(&mut out).expect("output");
    assert!(child.wait().expect("wait").success(), "{out}");
    out
}
