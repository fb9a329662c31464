//! The built-in relay on its own, in a namespace made with `unshare` (no sandbox around it):
//! a nameserver on the host's loopback answers a DNS query through the door the relay opens at
//! the same address inside, and nothing else of the host's loopback is reached: not a datagram
//! that is no query, not a TCP connection.

use std::io::{BufRead, Write};
use std::net::{SocketAddr, UdpSocket};
use std::process::{Command, Stdio};

/// What runs inside: waits for a line (the relay is attached), then asks the door and tries
/// the host's loopback service over TCP, printing what happened.
const INSIDE: &str = r#"
import socket, sys
door, port = sys.argv[1], int(sys.argv[2])
sys.stdin.readline()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(10)
u.sendto(b"not a query", (door, port))
u.sendto(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x04pypi\x03org\x00\x00\x01\x00\x01", (door, port))
print("door", u.recvfrom(100)[0][:7].decode(), flush=True)
t = socket.socket()
t.settimeout(5)
try:
    t.connect((door, port))
    print("tcp connected")
except OSError as e:
    print("tcp", e.errno)
"#;

#[test]
fn a_nameserver_on_the_hosts_loopback_answers_through_the_relays_door() {
    if !sandbox_net::relay_available() {
        println!("SKIPPED: relay: /dev/net/tun cannot be opened");
        return;
    }
    let userns =
        Command::new("unshare").args(["--user", "--map-root-user", "--net", "true"]).status();
    if !userns.is_ok_and(|s| s.success()) {
        println!("SKIPPED: relay: `unshare --user --net` does not work here");
        return;
    }
    // The "nameserver": answers the first datagram with a prefix and returns it; a TCP
    // listener on the same address and port, which nothing inside may reach.
    let server = UdpSocket::bind("127.0.0.77:0").expect("bind the nameserver");
    let addr: SocketAddr = server.local_addr().expect("addr");
    let tcp = std::net::TcpListener::bind(addr).expect("bind tcp");
    tcp.set_nonblocking(true).expect("nonblocking");
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        let (n, from) = server.recv_from(&mut buf).expect("a datagram");
        let mut answer = b"answer:".to_vec();
        answer.extend_from_slice(&buf[..n]);
        let _ = server.send_to(&answer, from);
        buf[..n].to_vec()
    });
    let mut inside = Command::new("unshare")
        .args(["--user", "--map-root-user", "--net", "--", "sh", "-c"])
        .arg("ip link set lo up && echo up && exec /usr/bin/python3.11 -c \"$0\" \"$@\"")
        .args([INSIDE, &addr.ip().to_string(), &addr.port().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("unshare");
    let mut out = std::io::BufReader::new(inside.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("up");
    assert_eq!(line, "up\n");
    let netns = std::fs::File::open(format!("/proc/{}/ns/net", inside.id())).expect("netns");
    let relay = sandbox_net::Relay::attach(&netns, &[addr], sandbox_core::Lan::Refused)
        .expect("attach the relay");
    inside.stdin.take().expect("stdin").write_all(b"go\n").expect("go");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).expect("output");
    assert!(inside.wait().expect("wait").success(), "{rest}");
    drop(relay);
    let first = echo.join().expect("echo");
    assert_eq!(&first[..2], b"\x12\x34", "the nameserver got something else first: {first:?}");
    // 111: the sandbox's own loopback, where nothing listens on TCP.
    assert_eq!(rest, "door answer:\ntcp 111\n");
    assert!(tcp.accept().is_err(), "the host's loopback service was reached");
}
