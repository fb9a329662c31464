//! The walls of the built-in relay, the built-in proxy and pasta against what a host's
//! administrator sets up, in a network of the test's own ([`crate::lab`]): a private LAN host,
//! an AnyIP range of the host's (no interface lists it), DNAT rules that send a public
//! destination to the host's loopback and to its own address, a private nameserver. Each
//! test runs as root and as an unprivileged user (then inside a user namespace of its own,
//! where it may make the lab; the relay and proxy ask the connection tracker there too).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::time::Duration;

use sandbox_core::Lan;

use crate::lab::{self, Lab, PORT};

/// What reaches whom through the relay: the public host, the nameserver on port 53; the LAN
/// only when allowed; never the host's AnyIP range or what its NAT sends to the host.
#[test]
fn the_relay_holds_against_the_lan_the_hosts_anyip_range_and_its_nat() {
    let Some(lab) =
        lab::enter("netlab::the_relay_holds_against_the_lan_the_hosts_anyip_range_and_its_nat")
    else {
        return;
    };
    if !sandbox_net::relay_available() {
        println!("SKIPPED: relay lab: /dev/net/tun cannot be opened");
        return;
    }
    let lines = [
        "nameserver tcp connected",
        "anyip tcp ECONNREFUSED",
        "nat-loopback tcp ECONNREFUSED",
        "nat-address tcp ECONNREFUSED",
    ];
    each_lan(&lab, &Lab::targets(), false, "ECONNREFUSED", &lines, |netns, lan| {
        sandbox_net::Relay::attach(&netns, &[], lan).expect("attach the relay")
    });
}

/// Runs the lab's sandbox ([`lab::sandbox`] at `targets`) once with the LAN refused and once
/// allowed, its network given by `attach` and kept until what it sent is through: the public
/// host and the nameserver reached, the LAN host only when allowed (else its connect fails
/// with `refused`), nothing of the host's; each of `lines` in what it printed.
fn each_lan<N>(
    lab: &Lab,
    targets: &[String],
    as_nobody: bool,
    refused: &str,
    lines: &[&str],
    attach: impl Fn(std::fs::File, Lan) -> N,
) {
    for lan in [Lan::Refused, Lan::Allowed] {
        let child = lab::sandbox(targets, as_nobody);
        let netns = std::fs::File::open(format!("/proc/{}/ns/net", child.id())).expect("netns");
        let net = attach(netns, lan);
        let out = lab::probe(child);
        std::thread::sleep(Duration::from_millis(300));
        drop(net);
        let mut want =
            vec!["lan nameserver tcp", "lan nameserver udp", "public host tcp", "public host udp"];
        if lan == Lan::Allowed {
            want.extend(["lan host tcp", "lan host udp"]);
        }
        want.sort_unstable();
        assert_eq!(lab.reached(), want, "{lan:?}:\n{out}");
        let lan_tcp = match lan {
            Lan::Allowed => "lan tcp connected".to_owned(),
            Lan::Refused => format!("lan tcp {refused}"),
        };
        for line in lines.iter().copied().chain(["public tcp connected", &lan_tcp]) {
            assert!(out.lines().any(|l| l == line), "{lan:?}: {line:?} not in:\n{out}");
        }
    }
}

/// The proxy's answer to `CONNECT target` and, once open, whether it carried a hello.
fn connect_through(proxy: std::net::SocketAddr, target: &str) -> String {
    let mut stream = TcpStream::connect(proxy).expect("the proxy");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    write!(stream, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").expect("ask");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    if head.starts_with("HTTP/1.1 200") {
        stream.write_all(b"hello").expect("hello");
        return "200".to_owned();
    }
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body);
    format!("{} {}", head.split(' ').nth(1).unwrap_or("none"), body.trim())
}

/// A stand-in for the caller's own HTTP proxy: the first request head it gets.
fn upstream() -> (std::net::SocketAddr, std::sync::mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("upstream");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else { return };
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
            head.push(byte[0]);
        }
        let _ = tx.send(String::from_utf8_lossy(&head).into_owned());
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    });
    (addr, rx)
}

/// The same through the built-in proxy; and a plain request chained through the caller's
/// own `HTTP_PROXY` goes to the address checked here, never to the name again.
#[test]
fn the_proxy_holds_against_the_lan_the_hosts_anyip_range_and_its_nat() {
    let Some(lab) =
        lab::enter("netlab::the_proxy_holds_against_the_lan_the_hosts_anyip_range_and_its_nat")
    else {
        return;
    };
    for lan in [Lan::Refused, Lan::Allowed] {
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
        let addr = listener.local_addr().expect("addr");
        let proxy = sandbox_net::BuiltinProxy::serve(OwnedFd::from(listener), lan).expect("proxy");
        let mut answers = Vec::new();
        for target in Lab::targets() {
            let (name, at) = target.split_once('=').expect("target");
            answers.push(format!("{name}: {}", connect_through(addr, at)));
        }
        std::thread::sleep(Duration::from_millis(300));
        drop(proxy);
        let answers = answers.join("\n");
        let lan_answer = match lan {
            Lan::Allowed => "lan: 200".to_owned(),
            Lan::Refused => format!(
                "lan: 403 python-sandbox proxy: refusing 192.168.77.1:{PORT}: a private (LAN) address"
            ),
        };
        for want in [
            "public: 200".to_owned(),
            "nameserver: 200".to_owned(),
            lan_answer,
            format!("anyip: 403 python-sandbox proxy: refusing 203.0.113.9:{PORT}: one of the host's own addresses"),
            "nat-loopback: 403 python-sandbox proxy: refusing 198.51.100.7:18099: the host's NAT sends it to the host's loopback".to_owned(),
            // The host's own address is a private one here: refused as that first.
            format!("nat-address: 403 python-sandbox proxy: refusing 198.51.100.8:18099: the host's NAT sends it to {}", match lan {
                Lan::Refused => "a private (LAN) address",
                Lan::Allowed => "one of the host's own addresses",
            }),
        ] {
            assert!(answers.lines().any(|l| l == want), "{lan:?}: {want:?} not in:\n{answers}");
        }
        let mut want = vec!["lan nameserver tcp", "public host tcp"];
        if lan == Lan::Allowed {
            want.push("lan host tcp");
        }
        want.sort_unstable();
        assert_eq!(lab.reached(), want, "{lan:?}:\n{answers}");
    }
    // `rebind.test` is the public host here; the caller's proxy must be asked for that
    // address, with the name in `Host`, so it cannot resolve the name to anything else.
    let (upstream, heads) = upstream();
    // SAFETY: no other thread of this process reads the environment meanwhile (the lab's
    // listeners are sockets, the previous proxies are gone).
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("HTTP_PROXY", format!("http://{upstream}"));
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
    let addr = listener.local_addr().expect("addr");
    let _proxy =
        sandbox_net::BuiltinProxy::serve(OwnedFd::from(listener), Lan::Refused).expect("proxy");
    let mut client = TcpStream::connect(addr).expect("the proxy");
    client.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    write!(client, "GET http://rebind.test:{PORT}/x HTTP/1.1\r\nHost: rebind.test:{PORT}\r\n\r\n")
        .expect("ask");
    let mut answer = String::new();
    let _ = client.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    let head = heads.recv_timeout(Duration::from_secs(10)).expect("the upstream was asked");
    assert_eq!(
        head,
        format!(
            "GET http://198.51.100.1:{PORT}/x HTTP/1.1\r\nHost: rebind.test:{PORT}\r\nConnection: close\r\n\r\n"
        )
    );
}

/// pasta's namespace walled in: the public host and the nameserver reached, the LAN only when
/// allowed, the host's AnyIP range never. (pasta's own sockets meet the host's NAT where
/// nothing here can see it: the DNAT targets are left out, see `crate::net`.) Root only: a
/// root caller's pasta runs as host nobody, which a user namespace of ours cannot map.
#[test]
fn pasta_walls_the_lan_and_the_hosts_anyip_range_off() {
    let Some(lab) = lab::enter("netlab::pasta_walls_the_lan_and_the_hosts_anyip_range_off") else {
        return;
    };
    let uid_map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
    if uid_map.split_whitespace().collect::<Vec<_>>() != ["0", "0", "4294967295"] {
        println!("SKIPPED: pasta lab: needs root (pasta runs as host nobody)");
        return;
    }
    let Ok(pasta) = engine_detect::pasta(Some(std::ffi::OsStr::new(
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ))) else {
        println!("SKIPPED: pasta lab: no pasta that can open /dev/net/tun");
        return;
    };
    let targets: Vec<String> =
        Lab::targets().into_iter().filter(|t| !t.starts_with("nat-")).collect();
    let lines = ["anyip tcp EHOSTUNREACH", "anyip udp EHOSTUNREACH"];
    each_lan(&lab, &targets, true, "EHOSTUNREACH", &lines, |netns, lan| {
        sandbox_net::UserNet::attach_netns(&pasta, netns, &[], Some((65534, 65534)), lan)
            .expect("attach pasta")
    });
}
