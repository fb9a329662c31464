//! The proxy's pure parts as tables (request heads, upstream values; the policy is
//! `sandbox_core`'s), and the server on a host socket: malformed heads get a 400, refused
//! targets a 403, and dropping it returns.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

use super::*;

#[test]
fn request_heads_parse_or_are_refused_with_a_reason() {
    let heads: &[&[u8]] = &[
        b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\nProxy-Authorization: Basic eA==\r\n\r\n",
        b"CONNECT [2606:4700::1]:443 HTTP/1.1\r\n\r\n",
        b"GET http://example.org/a/b?c=d HTTP/1.1\r\nHost: example.org\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n",
        b"GET http://example.org?x HTTP/1.0\r\n\r\n",
        b"GET http://example.org:8080 HTTP/1.1\r\n\r\n",
        b"CONNECT pypi.org HTTP/1.1\r\n\r\n",
        b"CONNECT pypi.org:0 HTTP/1.1\r\n\r\n",
        b"CONNECT pypi.org:99999 HTTP/1.1\r\n\r\n",
        b"GET /relative HTTP/1.1\r\n\r\n",
        b"GET https://pypi.org/ HTTP/1.1\r\n\r\n",
        b"GET http://user@example.org/ HTTP/1.1\r\n\r\n",
        b"GET http://exa mple.org/ HTTP/1.1\r\n\r\n",
        b"get http://example.org/ HTTP/1.1\r\n\r\n",
        b"GET http://example.org/ HTTP/2\r\n\r\n",
        b"GET http://example.org/ HTTP/1.1\r\nno colon\r\n\r\n",
        b"GET http://example.org/ HTTP/1.1\r\n folded: x\r\n\r\n",
        b"GET http://example.org/ HTTP/1.1\r\nX: a\x01b\r\n\r\n",
        b"GET http://example.org/ HTTP/1.1\r\n",
        b"\xff\xfe\r\n\r\n",
        b"\r\n\r\n",
        b"CONNECT [::1 HTTP/1.1\r\n\r\n",
        b"CONNECT [nope]:443 HTTP/1.1\r\n\r\n",
    ];
    let table = heads
        .iter()
        .map(|head| format!("{:?}\n  -> {:?}", String::from_utf8_lossy(head), parse_request(head)))
        .collect::<Vec<_>>()
        .join("\n");
    insta::assert_snapshot!(table);
}

#[test]
fn a_plain_request_is_sent_on_without_the_proxy_headers() {
    let head = b"POST http://example.org/up?x=1 HTTP/1.1\r\nHost: example.org\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic c2VjcmV0\r\nContent-Length: 2\r\n\r\n";
    let request = parse_request(head).unwrap();
    let origin = String::from_utf8(request.forward_head(None)).unwrap();
    let forward = Forward { via: "93.184.215.14:80", auth: Some("Basic dTpw") };
    let upstream = String::from_utf8(request.forward_head(Some(forward))).unwrap();
    insta::assert_snapshot!(format!("{origin}---\n{upstream}"));
    assert!(!origin.contains("c2VjcmV0") && !upstream.contains("c2VjcmV0"));
    // Without a `Host` of the client's (HTTP/1.0), the request's own authority is sent, so
    // the checked address in the target never stands for the name.
    let bare = parse_request(b"GET http://example.org:8080/x HTTP/1.0\r\n\r\n").unwrap();
    let forward = Forward { via: "93.184.215.14:8080", auth: None };
    let sent = String::from_utf8(bare.forward_head(Some(forward))).unwrap();
    assert_eq!(
        sent,
        "GET http://93.184.215.14:8080/x HTTP/1.1\r\nHost: example.org:8080\r\nConnection: close\r\n\r\n"
    );
}

#[test]
fn upstream_values_parse_and_never_show_their_credentials() {
    let table = [
        "http://proxy.corp:8080",
        "http://proxy.corp:8080/",
        "proxy.corp:3128",
        "proxy.corp",
        "HTTP://u%40corp:p%3Ass@proxy.corp:8080",
        "http://user@[fd00::1]:8080",
        "https://proxy.corp:443",
        "socks5://proxy.corp:1080",
        "http://:8080",
    ]
    .map(|value| format!("{value:42} {:?}", parse_upstream(value)))
    .join("\n");
    insta::assert_snapshot!(table);
    let upstream = parse_upstream("http://alice:hunter2@proxy.corp:8080").unwrap();
    // "alice:hunter2"
    assert_eq!(upstream.auth.as_deref(), Some("Basic YWxpY2U6aHVudGVyMg=="));
    assert!(!format!("{upstream:?}").contains("YWxp"));
    let refused = parse_upstream("https://alice:hunter2@proxy.corp").unwrap_err();
    assert!(!refused.contains("hunter2"));
}

#[test]
fn base64_matches_the_rfc_vectors() {
    let table = ["", "f", "fo", "foo", "foob", "fooba", "foobar"].map(|s| base64(s.as_bytes()));
    assert_eq!(table, ["", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"]);
}

#[test]
fn no_proxy_lists_match_names_and_their_subdomains() {
    let list = "localhost, .corp.example,internal";
    let table =
        ["localhost", "corp.example", "a.corp.example", "xcorp.example", "internal", "pypi.org"]
            .map(|host| format!("{host:16} {}", bypasses(list, host)))
            .join("\n");
    insta::assert_snapshot!(table);
    assert!(bypasses("*", "pypi.org"));
    assert!(!bypasses("", "pypi.org"));
}

#[test]
fn the_sandbox_environment_points_every_client_at_the_proxy() {
    let env: Vec<String> =
        proxy_env().iter().map(|(k, v)| format!("{k}={}", v.to_string_lossy())).collect();
    insta::assert_snapshot!(env.join("\n"));
}

fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(request).unwrap();
    let mut answer = String::new();
    // The proxy closes the connection after an error answer: read_to_string ends.
    stream.read_to_string(&mut answer).unwrap();
    answer
}

/// The server on a host socket (the sandbox's is the same code): a malformed head gets a 400
/// and the connection closed, the host's loopback a 403, a listener on it is never reached.
#[test]
fn the_server_answers_malformed_and_refused_requests_and_stops_when_dropped() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let target = TcpListener::bind("127.0.0.1:0").unwrap();
    target.set_nonblocking(true).unwrap();
    let proxy = BuiltinProxy::serve(OwnedFd::from(listener), Lan::Refused).unwrap();
    let bad = exchange(addr, b"NONSENSE\r\n\r\n");
    assert!(bad.starts_with("HTTP/1.1 400 "), "{bad}");
    let binary = exchange(addr, b"\x00\xff\x00\r\n\r\n");
    assert!(binary.starts_with("HTTP/1.1 400 "), "{binary}");
    let port = target.local_addr().unwrap().port();
    let tunnel = exchange(addr, format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes());
    assert!(tunnel.starts_with("HTTP/1.1 403 "), "{tunnel}");
    assert!(tunnel.contains("the host's loopback"), "{tunnel}");
    let named = exchange(addr, format!("GET http://localhost:{port}/ HTTP/1.1\r\n\r\n").as_bytes());
    assert!(named.starts_with("HTTP/1.1 403 "), "{named}");
    assert!(target.accept().is_err(), "the host's loopback listener was reached");
    drop(proxy);
    assert!(TcpStream::connect(addr).is_err(), "the proxy still accepts after being dropped");
}

/// A stand-in for the host's own proxy: records each request head, answers `status`, and
/// after a 200 echoes what it gets.
fn fake_upstream(status: u16) -> (std::net::SocketAddr, std::sync::mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let Ok(Ok((head, _))) = read_head(&mut stream) else { continue };
            let head = String::from_utf8_lossy(&head).into_owned();
            let tunnel = head.starts_with("CONNECT ");
            let _ = tx.send(head);
            let answer = match (status, tunnel) {
                (200, true) => "HTTP/1.1 200 Connection established\r\n\r\n".to_owned(),
                (200, false) => "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_owned(),
                (code, _) => format!("HTTP/1.1 {code} Nope\r\nContent-Length: 0\r\n\r\n"),
            };
            let _ = stream.write_all(answer.as_bytes());
            if status == 200 && tunnel {
                let mut echo = stream.try_clone().unwrap();
                let _ = std::io::copy(&mut stream, &mut echo);
            }
        }
    });
    (addr, rx)
}

fn egress() -> Egress {
    Egress::new(Lan::Refused, Vec::new())
}

fn upstream_at(addr: std::net::SocketAddr) -> Upstream {
    parse_upstream(&format!("http://alice:hunter2@127.0.0.1:{}", addr.port())).unwrap()
}

/// With the host's own proxy set, tunnels and plain requests go through it, for the checked
/// address, with its credentials added outside: the sandbox's side never sees them.
#[test]
fn the_hosts_proxy_is_chained_through_with_its_credentials_kept_outside() {
    let (addr, heads) = fake_upstream(200);
    let upstreams = Upstreams {
        https: Some(Ok(upstream_at(addr))),
        http: Some(Ok(upstream_at(addr))),
        no_proxy: String::new(),
    };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_addr = listener.local_addr().unwrap();
    let _proxy =
        BuiltinProxy::serve_with(OwnedFd::from(listener), upstreams, egress(), None).unwrap();
    let mut client = TcpStream::connect(proxy_addr).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    client.write_all(b"CONNECT 93.184.215.14:443 HTTP/1.1\r\nProxy-Authorization: Basic c2FuZGJveA==\r\n\r\n").unwrap();
    let mut answer = [0u8; 39];
    client.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"HTTP/1.1 200 Connection established\r\n\r\n");
    client.write_all(b"ping").unwrap();
    let mut echoed = [0u8; 4];
    client.read_exact(&mut echoed).unwrap();
    assert_eq!(&echoed, b"ping");
    let asked = heads.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(
        asked,
        "CONNECT 93.184.215.14:443 HTTP/1.1\r\nHost: 93.184.215.14:443\r\nProxy-Authorization: Basic YWxpY2U6aHVudGVyMg==\r\n\r\n"
    );
    // The stand-in serves one connection at a time: the tunnel ends with its client.
    drop(client);
    // Plain http: absolute form to the upstream, the sandbox's proxy headers dropped.
    let answer = exchange(
        proxy_addr,
        b"GET http://93.184.215.14/x HTTP/1.1\r\nHost: 93.184.215.14\r\nProxy-Authorization: Basic c2FuZGJveA==\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 200 OK") && !answer.contains("YWxp"), "{answer}");
    let asked = heads.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(
        asked,
        "GET http://93.184.215.14:80/x HTTP/1.1\r\nHost: 93.184.215.14\r\nProxy-Authorization: Basic YWxpY2U6aHVudGVyMg==\r\nConnection: close\r\n\r\n"
    );
    // The host's loopback stays refused before the upstream is asked anything.
    let refused = exchange(proxy_addr, b"CONNECT 127.0.0.1:22 HTTP/1.1\r\n\r\n");
    assert!(refused.starts_with("HTTP/1.1 403 "), "{refused}");
    assert!(heads.recv_timeout(Duration::from_millis(200)).is_err());
}

/// An upstream that refuses the tunnel is a 502 naming its status, never its credentials.
#[test]
fn a_refusing_upstream_is_a_bad_gateway_without_its_credentials() {
    let (addr, _heads) = fake_upstream(407);
    let upstreams =
        Upstreams { https: Some(Ok(upstream_at(addr))), http: None, no_proxy: String::new() };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_addr = listener.local_addr().unwrap();
    let _proxy =
        BuiltinProxy::serve_with(OwnedFd::from(listener), upstreams, egress(), None).unwrap();
    let answer = exchange(proxy_addr, b"CONNECT 93.184.215.14:443 HTTP/1.1\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 502 "), "{answer}");
    assert!(answer.contains("(407)"), "{answer}");
    assert!(!answer.contains("hunter2") && !answer.contains("alice") && !answer.contains("YWxp"));
}

/// OpenSSL's ClientHello naming `pypi.org` (sandbox-core's fixture).
const HELLO_PYPI: &[u8] = include_bytes!("../../../sandbox-core/src/sniff/client-hello-pypi.bin");

/// An allowlist in the proxy: a tunnel to an unlisted host is a 403 before anything is asked
/// of anyone; a tunnel to a listed host goes through only when its first bytes name that host
/// (a ClientHello for another listed name is domain fronting: cut, and recorded).
#[test]
fn a_listed_proxy_checks_the_host_and_the_name_inside_the_tunnel() {
    let (addr, heads) = fake_upstream(200);
    let upstreams =
        Upstreams { https: Some(Ok(upstream_at(addr))), http: None, no_proxy: String::new() };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_addr = listener.local_addr().unwrap();
    let allow = sandbox_core::Allow::parse(["pypi.org:443", "files.pythonhosted.org:443"]).unwrap();
    let listed = crate::Listed::new(allow);
    let checked = Checked { listed: listed.clone(), egress: egress() };
    let _proxy =
        BuiltinProxy::serve_with(OwnedFd::from(listener), upstreams, egress(), Some(checked))
            .unwrap();

    let refused = exchange(proxy_addr, b"CONNECT registry.npmjs.org:443 HTTP/1.1\r\n\r\n");
    assert!(
        refused.starts_with("HTTP/1.1 403 ") && refused.contains("not in the list"),
        "{refused}"
    );
    let refused = exchange(proxy_addr, b"CONNECT pypi.org:80 HTTP/1.1\r\n\r\n");
    assert!(refused.starts_with("HTTP/1.1 403 "), "another port: {refused}");
    assert!(heads.recv_timeout(Duration::from_millis(200)).is_err(), "nothing was asked upstream");

    // The listed host, and a hello naming it: through (the stand-in echoes it back).
    let client = TcpStream::connect(proxy_addr).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    tunnel_to_pypi_echoes(client);
    let mut answer = [0u8; 39];
    heads.recv_timeout(Duration::from_secs(10)).unwrap();

    // Another listed host's tunnel carrying pypi.org's hello: cut, nothing echoed.
    let mut client = TcpStream::connect(proxy_addr).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    client.write_all(b"CONNECT files.pythonhosted.org:443 HTTP/1.1\r\n\r\n").unwrap();
    client.read_exact(&mut answer).unwrap();
    client.write_all(HELLO_PYPI).unwrap();
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest);
    assert!(rest.is_empty(), "the fronted hello went through: {} bytes back", rest.len());
    let refused = listed.refused();
    assert!(
        refused.iter().any(|r| r.host == "pypi.org"
            && r.reason == "named in a tunnel opened to files.pythonhosted.org"),
        "{refused:?}"
    );
    assert!(refused.iter().any(|r| r.host == "registry.npmjs.org"), "{refused:?}");
}

/// `exchange` from the client address `from` (any of 127/8 is this host's).
fn exchange_from(from: &str, addr: std::net::SocketAddr, request: &[u8]) -> String {
    let mut stream = connect_from(from, addr);
    stream.write_all(request).unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
}

fn connect_from(from: &str, addr: std::net::SocketAddr) -> TcpStream {
    let socket = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::STREAM,
        None,
    )
    .unwrap();
    let local: std::net::SocketAddr = format!("{from}:0").parse().unwrap();
    rustix::net::bind(&socket, &local).unwrap();
    rustix::net::connect(&socket, &addr).unwrap();
    let stream = TcpStream::from(socket);
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream
}

/// The egress proxy of a cluster: each client address is held to its own list, an address
/// with none is refused everything, and a client forgotten is refused from then on.
#[test]
fn the_egress_proxy_holds_each_client_to_its_own_list() {
    let (addr, heads) = fake_upstream(200);
    let upstreams =
        Upstreams { https: Some(Ok(upstream_at(addr))), http: None, no_proxy: String::new() };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_addr = listener.local_addr().unwrap();
    let proxy = EgressProxy::serve_with(listener, upstreams, Lan::Refused, Vec::new()).unwrap();
    let pypi = sandbox_core::Allow::parse(["pypi.org:443"]).unwrap();
    let npm = sandbox_core::Allow::parse(["registry.npmjs.org"]).unwrap();
    proxy.lists().set("127.0.0.2".parse().unwrap(), crate::Listed::new(pypi));
    proxy.lists().set("127.0.0.3".parse().unwrap(), crate::Listed::new(npm));

    let stranger = exchange_from("127.0.0.4", proxy_addr, b"CONNECT pypi.org:443 HTTP/1.1\r\n\r\n");
    assert!(
        stranger.starts_with("HTTP/1.1 403 ") && stranger.contains("only sandboxes with a"),
        "{stranger}"
    );
    let other = exchange_from("127.0.0.3", proxy_addr, b"CONNECT pypi.org:443 HTTP/1.1\r\n\r\n");
    assert!(other.starts_with("HTTP/1.1 403 ") && other.contains("not in the list"), "{other}");
    assert!(heads.recv_timeout(Duration::from_millis(200)).is_err(), "nothing was asked upstream");
    let npm_refused = proxy.lists().get("127.0.0.3".parse().unwrap()).unwrap().refused();
    assert_eq!(npm_refused.len(), 1, "{npm_refused:?}");
    assert_eq!(npm_refused[0].host, "pypi.org");
    // Each client is told its own refusals, and only those.
    let ask = format!("GET {REFUSED_PATH} HTTP/1.1\r\nHost: proxy\r\n\r\n");
    let told = exchange_from("127.0.0.3", proxy_addr, ask.as_bytes());
    let body = told.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    let refused: Vec<sandbox_core::NetRefused> = serde_json::from_str(body).expect(&told);
    assert_eq!(refused, npm_refused);
    let told = exchange_from("127.0.0.2", proxy_addr, ask.as_bytes());
    assert!(told.starts_with("HTTP/1.1 200 ") && told.ends_with("\r\n\r\n[]"), "{told}");
    let told = exchange_from("127.0.0.4", proxy_addr, ask.as_bytes());
    assert!(told.starts_with("HTTP/1.1 403 "), "no list, nothing told: {told}");

    // The listed client's tunnel goes through, its hello naming the host echoed back.
    tunnel_to_pypi_echoes(connect_from("127.0.0.2", proxy_addr));
    let head = heads.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(head.starts_with("CONNECT "), "{head}");

    proxy.lists().remove("127.0.0.2".parse().unwrap());
    let gone = exchange_from("127.0.0.2", proxy_addr, b"CONNECT pypi.org:443 HTTP/1.1\r\n\r\n");
    assert!(gone.starts_with("HTTP/1.1 403 "), "{gone}");
    proxy.lists().retain(|_| false);
    assert!(proxy.lists().get("127.0.0.3".parse().unwrap()).is_none());
}

/// A tunnel to `pypi.org:443` is established, and a hello naming it is echoed back by the
/// stand-in upstream.
fn tunnel_to_pypi_echoes(mut client: TcpStream) {
    client.write_all(b"CONNECT pypi.org:443 HTTP/1.1\r\n\r\n").unwrap();
    let mut answer = [0u8; 39];
    client.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"HTTP/1.1 200 Connection established\r\n\r\n");
    client.write_all(HELLO_PYPI).unwrap();
    let mut echoed = vec![0u8; HELLO_PYPI.len()];
    client.read_exact(&mut echoed).unwrap();
    assert_eq!(echoed, HELLO_PYPI);
}
