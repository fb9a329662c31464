//! Spellings, canonical forms, URLs and the engine-message mapping of `crate::publish`.

use super::*;
use crate::Publish;

fn show(text: &str) -> String {
    match parse(text) {
        Ok(p) => format!("{text:<22} {p} ({:?})", p.host_port),
        Err(e) => format!("{text:<22} error: {}", e.to_string().replace('\n', " / ")),
    }
}

/// Every spelling, good and bad: the parsed value's canonical form (which parses back to the
/// same value) and host port choice, or the error.
#[test]
fn spellings() {
    let texts = [
        "8000",
        "0:8000",
        "8080:8000",
        "8000:8000",
        "127.0.0.1:8000",
        "0.0.0.0:0:8000",
        "127.0.0.1:8080:8000",
        "[::1]:9000",
        "[::1]:0:9000",
        "[::]:8080:9000",
        "::1:9000",
        "::9000",
        "auto:8000",
        "0",
        "0:0",
        "8080:0",
        "70000",
        "0:70000",
        "localhost:80",
        "x",
        "",
        ":8000",
        "[::1]9000",
        "[127.0.0.1]:80",
        "1:2:3",
        "127.0.0.1:x:80",
        "1.2.3.4:5:6:7",
    ];
    for text in texts {
        if let Ok(p) = parse(text) {
            assert_eq!(parse(&p.to_string()), Ok(p), "{text} does not round-trip");
        }
    }
    let out: Vec<String> = texts.iter().map(|t| show(t)).collect();
    insta::assert_snapshot!(out.join("\n"));
}

#[test]
fn urls() {
    let url = |addr: &str, host_port| {
        PublishedPort { port: 1, addr: addr.parse().expect("addr"), host_port, preview: None }.url()
    };
    assert_eq!(url("127.0.0.1", 8000), "http://127.0.0.1:8000");
    assert_eq!(url("0.0.0.0", 8000), "http://127.0.0.1:8000");
    assert_eq!(url("::", 8000), "http://[::1]:8000");
    assert_eq!(url("::1", 8000), "http://[::1]:8000");
    assert_eq!(url("192.0.2.7", 80), "http://192.0.2.7:80");
    // An engine's own URL (a cluster's Ingress) is the URL, whatever the host binding says.
    let served = PublishedPort::at_url(8000, "http://psbx-a1.127.0.0.1.nip.io".to_owned());
    assert_eq!(served.url(), "http://psbx-a1.127.0.0.1.nip.io");
}

/// The engines' own bind failures, as each words them, become the one error naming the host
/// port; other failures are left alone.
#[test]
fn engine_messages() {
    let bound = [
        PublishedPort { port: 18765, addr: DEFAULT_PUBLISH_ADDR, host_port: 18765, preview: None },
        PublishedPort { port: 9000, addr: DEFAULT_PUBLISH_ADDR, host_port: 41234, preview: None },
    ];
    let messages = [
        // docker, another container holds it
        "driver failed programming external connectivity on endpoint python-sandbox-run-1 (ab): Bind for 127.0.0.1:18765 failed: port is already allocated",
        // docker's userland proxy, a host process holds it
        "driver failed programming external connectivity on endpoint x: Error starting userland proxy: listen tcp4 127.0.0.1:18765: bind: address already in use",
        // podman
        "preparing container 88 for attach: cannot listen on the TCP port: listen tcp4 127.0.0.1:18765: bind: address already in use",
        // pasta, for the port it was given for `0:9000`
        "Failed to bind any port for '-t 127.0.0.1/41234:9000', exiting",
        // a bind failure naming no port of ours: not blamed on one of two
        "rootlessport: bind: address already in use",
        // not a bind failure, though it names the port
        "no such image for 127.0.0.1:18765",
        // a longer number that starts with the port
        "listen tcp4 127.0.0.1:187651: bind: address already in use",
    ];
    let out: Vec<String> = messages
        .iter()
        .map(|m| match busy_host_port(m, &bound) {
            Some(e) => e.to_string().replace('\n', " / "),
            None => "(left alone)".to_owned(),
        })
        .collect();
    insta::assert_snapshot!(out.join("\n"));
    let one = [PublishedPort {
        port: 80,
        addr: "::1".parse().expect("addr"),
        host_port: 80,
        preview: None,
    }];
    let blamed = busy_host_port("rootlessport: bind: address already in use", &one);
    assert_eq!(
        blamed.map(|e| e.to_string()),
        Some("host port 80 is already in use\nhint: publish `[::1]:0:80` for any free host port, or choose another port".to_owned())
    );
}

#[test]
fn distinct_host_ports() {
    let check = |texts: &[&str]| {
        let publish: Vec<Publish> = texts.iter().map(|t| parse(t).expect("p")).collect();
        check_distinct(&publish).map_err(|e| e.to_string())
    };
    assert_eq!(check(&["8000", "9000", "0:8001", "0:8002"]), Ok(()));
    assert_eq!(check(&["8000", "[::1]:8000"]), Ok(()));
    assert_eq!(
        check(&["8080", "8080:8000"]),
        Err("host port 8080 is published twice (`8080` and `8080:8000`)\nhint: give one of them another host port, e.g. `0:PORT` for any free one".to_owned())
    );
}

/// A taken fixed port is refused by name (with its address in the hint); `0:PORT` never
/// asks; `choose` fills in only the `0:PORT` entries.
#[test]
fn check_free_and_choose() {
    let publish: Vec<Publish> =
        ["8000", "[::1]:8080:9000", "0:9100"].iter().map(|t| parse(t).expect("p")).collect();
    let mut asked = Vec::new();
    let free = check_free(&publish, |addr, port| {
        asked.push(format!("{addr}:{port}"));
        false
    });
    assert_eq!(free, Ok(()));
    assert_eq!(asked, ["127.0.0.1:8000", "::1:8080"]);
    let busy = check_free(&publish, |_, port| port == 8080).map_err(|e| e.to_string());
    assert_eq!(
        busy,
        Err("host port 8080 is already in use\nhint: publish `[::1]:0:9000` for any free host port, or choose another port".to_owned())
    );
    let chosen = choose(&publish, |_| Ok(41000)).expect("choose");
    let host_ports: Vec<(u16, u16)> = chosen.iter().map(|p| (p.port, p.host_port)).collect();
    assert_eq!(host_ports, [(8000, 8000), (9000, 8080), (9100, 41000)]);
    let none = choose(&publish, |_| Err(std::io::Error::other("no ports left")));
    assert_eq!(
        none.map_err(|e| e.to_string()),
        Err("no free host port on 127.0.0.1: no ports left".to_owned())
    );
}
