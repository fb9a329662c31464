use super::*;

/// ClientHellos made by OpenSSL (Python's `ssl`, memory BIOs): one for `pypi.org`, one without
/// a server name.
const HELLO: &[u8] = include_bytes!("client-hello-pypi.bin");
const HELLO_NO_SNI: &[u8] = include_bytes!("client-hello-no-sni.bin");

fn name(n: &str) -> Sniffed {
    Sniffed::Done(FlowName::Name(n.to_owned()))
}

#[test]
fn a_client_hello_names_its_server_once_it_is_whole() {
    assert_eq!(flow_name(HELLO), name("pypi.org"));
    assert_eq!(flow_name(HELLO_NO_SNI), Sniffed::Done(FlowName::None));
    for cut in [1, 5, 100, HELLO.len() - 1] {
        assert_eq!(flow_name(&HELLO[..cut]), Sniffed::More, "cut at {cut}");
    }
    let mut more = HELLO.to_vec();
    more.extend_from_slice(b"\x14\x03\x03\x00\x01\x01");
    assert_eq!(flow_name(&more), name("pypi.org"), "bytes after the hello are not read");
}

/// The handshake message split over two records, as a client may send it.
fn split_records(hello: &[u8], at: usize) -> Vec<u8> {
    let body = &hello[5..];
    let (a, b) = body.split_at(at);
    let mut out = Vec::new();
    for part in [a, b] {
        out.extend_from_slice(&[0x16, 3, 1]);
        out.extend_from_slice(&u16::try_from(part.len()).expect("len").to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

#[test]
fn a_client_hello_over_two_records_is_read_whole() {
    for at in [2, 40, 300] {
        assert_eq!(flow_name(&split_records(HELLO, at)), name("pypi.org"), "split at {at}");
    }
}

/// `HELLO` with one more extension (`kind`, empty) at the end of its list.
fn with_extension(kind: u16) -> Vec<u8> {
    let mut hello = HELLO.to_vec();
    // record length, handshake length (24 bits), extensions length: each grows by 4.
    let grow = |bytes: &mut [u8]| {
        let mut n = 0usize;
        for b in bytes.iter() {
            n = n << 8 | usize::from(*b);
        }
        n += 4;
        for (i, b) in bytes.iter_mut().rev().enumerate() {
            *b = (n >> (8 * i)) as u8;
        }
    };
    grow(&mut hello[3..5]);
    grow(&mut hello[6..9]);
    let mut at = 9 + 2 + 32;
    at += 1 + usize::from(hello[at]);
    at += 2 + usize::from(u16::from_be_bytes([hello[at], hello[at + 1]]));
    at += 1 + usize::from(hello[at]);
    grow(&mut hello[at..at + 2]);
    hello.extend_from_slice(&kind.to_be_bytes());
    hello.extend_from_slice(&[0, 0]);
    hello
}

#[test]
fn encrypted_client_hello_hides_the_name() {
    assert_eq!(flow_name(&with_extension(0x1234)), name("pypi.org"), "an unknown extension");
    assert_eq!(flow_name(&with_extension(0xfe0d)), Sniffed::Done(FlowName::Hidden));
}

#[test]
fn an_http_request_names_its_host() {
    let cases: &[(&[u8], Sniffed)] = &[
        (b"GET / HTTP/1.1\r\nHost: Example.COM:8080\r\n\r\n", name("example.com")),
        (b"GET http://a.example/x HTTP/1.1\r\nHost: a.example\r\n\r\n", name("a.example")),
        (b"GET / HTTP/1.1\r\nHost: [fd00::1]:80\r\n\r\n", name("fd00::1")),
        (b"GET / HTTP/1.0\r\n\r\n", Sniffed::Done(FlowName::None)),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", Sniffed::Done(FlowName::None)),
        (
            b"GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n",
            Sniffed::Done(FlowName::None),
        ),
        (b"GET / HTTP/1.1\r\nHost: a.example\r\n", Sniffed::More),
        (b"GE", Sniffed::More),
        (b"SSH-2.0-OpenSSH_9.2\r\n", Sniffed::Done(FlowName::None)),
    ];
    for (bytes, want) in cases {
        assert_eq!(&flow_name(bytes), want, "{}", String::from_utf8_lossy(bytes));
    }
}

#[test]
fn every_request_on_a_kept_alive_connection_is_seen() {
    let stream: &[u8] = b"POST /a HTTP/1.1\r\nHost: a.example\r\nContent-Length: 6\r\n\r\nGET /bPOST /c HTTP/1.1\r\nHost: b.example\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nHos\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: c.example\r\nUpgrade: websocket\r\n\r\nGET / HTTP/1.1\r\nHost: d.example\r\n\r\n";
    let want =
        vec![Some("a.example".to_owned()), Some("b.example".into()), Some("c.example".into())];
    // Whole, and one byte at a time: the framing does not depend on how reads fall.
    let mut whole = Requests::default();
    assert_eq!(whole.feed(stream), Step::Hosts(want.clone()));
    let mut bytewise = Requests::default();
    let mut seen = Vec::new();
    for b in stream {
        match bytewise.feed(&[*b]) {
            Step::Hosts(hosts) => seen.extend(hosts),
            Step::Invalid => panic!("invalid at {seen:?}"),
        }
    }
    assert_eq!(seen, want, "after an upgrade the stream is opaque");
    let mut garbage = Requests::default();
    assert_eq!(garbage.feed(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n\x16\x03\x01"), Step::Invalid);
}

/// A query for `pypi.org` A, as glibc sends it, and an answer with a CNAME and two addresses.
fn query() -> Vec<u8> {
    let mut q = vec![0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    q.extend_from_slice(b"\x04PyPI\x03org\x00\x00\x01\x00\x01");
    q
}

#[test]
fn dns_questions_answers_and_refusals() {
    let q = query();
    assert_eq!(dns_question(&q), Some(Question { id: 0xabcd, name: "pypi.org".into(), kind: 1 }));
    let no = dns_nxdomain(&q).expect("nxdomain");
    assert_eq!(&no[..2], &q[..2], "same id");
    assert_eq!(no[2] & 0x80, 0x80, "a response");
    assert_eq!(no[3] & 0x0f, 3, "NXDOMAIN");
    assert_eq!(&no[12..], &q[12..], "the question echoed");
    assert_eq!(dns_question(&no), None, "a response is not a query");
    assert!(dns_addresses(&no).is_empty());

    let mut answer = q.clone();
    answer[2] = 0x81;
    answer[3] = 0x80;
    answer[7] = 3;
    // CNAME pypi.org -> x.fastly (pointer to the question's name), then A and AAAA.
    answer.extend_from_slice(b"\xc0\x0c\x00\x05\x00\x01\x00\x00\x00\x3c\x00\x08\x06fastly\x00");
    answer.extend_from_slice(b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\xcb\x00\x71\x50");
    answer.extend_from_slice(b"\xc0\x0c\x00\x1c\x00\x01\x00\x00\x00\x3c\x00\x10");
    answer.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().expect("v6").octets());
    assert_eq!(
        dns_addresses(&answer),
        vec![IpAddr::V4(Ipv4Addr::new(203, 0, 113, 80)), "2001:db8::1".parse().expect("v6")]
    );
    assert!(dns_addresses(&answer[..answer.len() - 3]).is_empty(), "a cut answer gives nothing");
    let (name, addresses) = dns_answer(&answer).expect("an answer");
    assert_eq!((name.as_str(), addresses.len()), ("pypi.org", 2));
    assert_eq!(dns_answer(&q), None, "a query answers nothing");
}
