use std::net::IpAddr;

use super::*;

fn show(result: Result<HostPattern, Error>) -> String {
    match result {
        Ok(p) => format!("{p} ({:?}, port {:?})", p.target, p.port),
        Err(e) => format!("error: {}", e.to_string().replace('\n', " / ")),
    }
}

#[test]
fn patterns_parse_or_say_what_is_wrong() {
    let cases = [
        "pypi.org",
        "PyPI.org.",
        "api.example.com:443",
        "*.githubusercontent.com",
        "*.example.com:8443",
        "10.1.2.3:5432",
        "192.168.7.0/24",
        "192.168.7.0/24:80",
        "fd00::1",
        "[fd00::1]:8080",
        "fd00::/8",
        "[fd00::/8]:53",
        "::ffff:10.1.2.3",
        "*",
        "*:443",
        "*.com",
        "a.*.example.com",
        "https://pypi.org/simple",
        "pypi.org/simple",
        "pypi.org:0",
        "pypi.org:70000",
        "pypi.org:",
        "192.168.7.1/24",
        "-bad.example.com",
        "exa mple.com",
        "",
        "[fd00::1",
        "maybe",
        "of",
        "localhost:80",
    ];
    let out: Vec<String> = cases.iter().map(|c| format!("{c:?}: {}", show(c.parse()))).collect();
    insta::assert_snapshot!(out.join("\n"));
}

fn allow(list: &[&str]) -> Allow {
    Allow::parse(list.iter().copied()).expect("list")
}

fn ip(text: &str) -> IpAddr {
    text.parse().expect("ip")
}

#[test]
fn an_empty_list_is_refused_and_duplicates_collapse() {
    let e = Allow::parse([]).expect_err("empty");
    assert!(e.to_string().contains("allows nothing"), "{e}");
    let a = allow(&["pypi.org", "PYPI.ORG", "pypi.org."]);
    assert_eq!(a.to_string(), "pypi.org");
}

#[test]
fn lookups_are_answered_for_listed_names_and_suffixes_only() {
    let a = allow(&["pypi.org:443", "*.githubusercontent.com", "10.0.0.0/8"]);
    assert!(a.resolves("pypi.org"));
    assert!(a.resolves("PyPI.org."));
    assert!(a.resolves("raw.githubusercontent.com"));
    assert!(a.resolves("a.b.githubusercontent.com"));
    assert!(!a.resolves("githubusercontent.com"), "a suffix is not its own apex");
    assert!(!a.resolves("evilgithubusercontent.com"));
    assert!(!a.resolves("pypi.org.evil.com"));
    assert!(!a.resolves("files.pythonhosted.org"));
    assert!(!a.resolves("10.1.2.3"));
}

#[test]
fn a_flow_needs_a_listed_name_on_an_answered_address_or_a_listed_address() {
    let a = allow(&["pypi.org:443", "*.example.com", "10.1.2.3:5432"]);
    let proxy = ip("203.0.113.80");
    let answered = |name: &str, at: IpAddr| at == proxy && name != "unanswered.example.com";
    let name = |n: &str| FlowName::Name(n.to_owned());
    let verdict =
        |addr: IpAddr, port: u16, flow: FlowName| match a.flow(addr, port, &flow, answered) {
            Ok(p) => format!("allowed by {p}"),
            Err(r) => format!("refused: {r}"),
        };
    let cases = [
        ("listed name", verdict(proxy, 443, name("pypi.org"))),
        ("listed name, other port", verdict(proxy, 80, name("pypi.org"))),
        ("unlisted name on the same address", verdict(proxy, 443, name("registry.npmjs.org"))),
        ("suffix", verdict(proxy, 8443, name("api.example.com"))),
        ("suffix, address never answered", verdict(proxy, 443, name("unanswered.example.com"))),
        ("no name", verdict(proxy, 443, FlowName::None)),
        ("hidden name", verdict(proxy, 443, FlowName::Hidden)),
        ("an address as the name", verdict(proxy, 443, name("203.0.113.80"))),
        ("listed address", verdict(ip("10.1.2.3"), 5432, FlowName::None)),
        ("listed address, other port", verdict(ip("10.1.2.3"), 5433, FlowName::None)),
        ("mapped listed address", verdict(ip("::ffff:10.1.2.3"), 5432, FlowName::None)),
    ];
    let out: Vec<String> = cases.iter().map(|(what, v)| format!("{what}: {v}")).collect();
    insta::assert_snapshot!(out.join("\n"));
}

#[test]
fn refusals_say_what_would_allow_them() {
    assert_eq!(
        Allow::lookup_refused("Evil.COM.").to_string(),
        "evil.com: not in the list (no DNS answer) (`evil.com` in `net` would allow it)"
    );
    assert_eq!(
        Allow::address_refused(ip("fd00::1"), 80).to_string(),
        "[fd00::1]:80: an address not in the list (`[fd00::1]:80` in `net` would allow it)"
    );
}

proptest::proptest! {
    /// What a pattern prints parses back to the same pattern.
    #[test]
    fn display_round_trips(text in "[a-z]{1,8}(\\.[a-z]{1,8}){1,3}(:[1-9][0-9]{0,3})?") {
        let p: HostPattern = text.parse().expect("parses");
        proptest::prop_assert_eq!(p.to_string().parse::<HostPattern>().expect("again"), p);
    }
}
