//! The policy as tables (which addresses are refused, which routes wall a namespace in) and
//! the netlink messages as bytes; a property: whatever the namespace's routes and kept
//! nameservers, every private address not kept ends at a wall route.

use std::net::IpAddr;

use proptest::prelude::*;

use super::*;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn cidrs(list: &[&str]) -> Vec<Cidr> {
    list.iter().map(|c| Cidr::parse(c).unwrap()).collect()
}

#[test]
fn ranges_parse_and_contain_their_addresses() {
    let ten = Cidr::parse("10.0.0.0/8").unwrap();
    assert!(ten.contains(ip("10.99.0.55")) && !ten.contains(ip("11.0.0.1")));
    assert!(ten.contains(ip("::ffff:10.1.2.3")));
    assert!(ten.covers(&Cidr::parse("10.96.0.0/12").unwrap()));
    assert!(!Cidr::parse("10.96.0.0/12").unwrap().covers(&ten));
    assert_eq!(Cidr::parse("10.0.0.1/8"), None, "bits past the prefix");
    assert_eq!(Cidr::parse("10.0.0.0/33"), None);
    assert_eq!(Cidr::new(ip("192.168.1.7"), 24), Cidr::parse("192.168.1.0/24"));
    let (low, high) = Cidr::parse("fc00::/7").unwrap().halves().unwrap();
    assert_eq!((low.to_string(), high.to_string()), ("fc00::/8".into(), "fd00::/8".into()));
    assert_eq!(Cidr::host(ip("10.0.0.1")).halves(), None);
    assert_eq!(LINK_LOCAL[0].to_string(), "fd00:ec2::254/128");
    assert_eq!(LINK_LOCAL[1].to_string(), "169.254.0.0/16");
}

#[test]
fn the_policy_refuses_the_host_special_and_private_ranges() {
    let table = [
        "93.184.215.14",
        "2606:4700::6810:84e5",
        "100.63.255.255",
        "100.64.0.1",
        "100.127.255.255",
        "100.128.0.0",
        "10.99.0.55",
        "10.96.0.1",
        "172.15.255.255",
        "172.17.0.1",
        "172.32.0.0",
        "192.168.1.1",
        "fd12::15",
        "fc00::1",
        "fe00::1",
        "::ffff:192.168.1.1",
        "127.0.0.1",
        "::1",
        "0.0.0.0",
        "0.1.2.3",
        "::",
        "169.254.169.254",
        "fd00:ec2::254",
        "fe80::1",
        "224.0.0.1",
        "ff02::1",
        "255.255.255.255",
    ]
    .map(|addr| {
        let (refused, allowed) = (refusal(ip(addr), Lan::Refused), refusal(ip(addr), Lan::Allowed));
        format!("{addr:22} {:38} {}", refused.unwrap_or("allowed"), allowed.unwrap_or("allowed"))
    })
    .join("\n");
    insta::assert_snapshot!(table);
}

fn shown(walled: &[Cidr]) -> String {
    walled.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
}

/// A pasta namespace on a home LAN: the host's subnet is connected (split in halves, so its
/// router is walled too), its router is the nameserver (kept), the host's other addresses
/// (a docker bridge, an AnyIP range, a public second address) are walled.
#[test]
fn a_pasta_namespace_on_a_home_lan() {
    let walled = wall(
        &cidrs(&["192.168.1.0/24", "fd00:1::/64"]),
        &cidrs(&["192.168.1.7/32", "172.17.0.1/32", "10.99.7.0/24", "203.0.113.9/32"]),
        &[ip("192.168.1.1")],
        Lan::Refused,
    );
    insta::assert_snapshot!(shown(&walled));
}

/// A docker container on the default bridge: its subnet is split, its gateway (the host) is
/// walled even when it is also the nameserver; a private nameserver elsewhere is kept.
#[test]
fn a_container_on_a_bridge() {
    let walled = wall(
        &cidrs(&["172.17.0.0/16"]),
        &cidrs(&["172.17.0.1/32"]),
        &[ip("172.17.0.1"), ip("10.255.255.53")],
        Lan::Refused,
    );
    insta::assert_snapshot!(shown(&walled));
}

/// With the LAN allowed only the host's own addresses and the link-local ranges are walled.
#[test]
fn with_the_lan_allowed_only_the_host_and_link_local_are_walled() {
    let walled = wall(
        &cidrs(&["192.168.1.0/24"]),
        &cidrs(&["192.168.1.7/32", "172.17.0.1/32"]),
        &[ip("192.168.1.1")],
        Lan::Allowed,
    );
    assert_eq!(
        shown(&walled),
        "172.17.0.1/32\n192.168.1.7/32\nfd00:ec2::254/128\n169.254.0.0/16",
        "{walled:?}"
    );
    // The sentinel is last.
    assert_eq!(walled.last(), Some(&LINK_LOCAL[1]));
    // A route inside it (a DNS forwarder at 169.254.1.1) keeps its own: the range is cut
    // around it, and still added whole, last.
    let forwarder = wall(&cidrs(&["169.254.1.1/32"]), &cidrs(&["fe80::1/128"]), &[], Lan::Allowed);
    assert!(!forwarder.iter().any(|c| c.contains(ip("169.254.1.1")) && c.prefix == 32));
    assert!(forwarder.contains(&Cidr::parse("169.254.128.0/17").unwrap()));
    assert_eq!(forwarder.last(), Some(&LINK_LOCAL[1]));
    assert!(!forwarder.iter().any(|c| c.addr == ip("fe80::1")), "link-local is the link's own");
}

/// The longest prefix match of `addr` over the namespace's routes and the wall: whether a
/// wall route takes it (a tie goes to the namespace's route, which the kernel keeps).
fn walled_off(addr: IpAddr, routes: &[Cidr], walled: &[Cidr]) -> bool {
    let best = |list: &[Cidr]| list.iter().filter(|c| c.contains(addr)).map(|c| c.prefix).max();
    match (best(walled), best(routes)) {
        (Some(w), Some(r)) => w > r,
        (Some(_), None) => true,
        (None, _) => false,
    }
}

fn private_addr() -> impl Strategy<Value = IpAddr> {
    (0..PRIVATE.len(), any::<u128>()).prop_map(|(i, bits)| {
        let range = PRIVATE[i];
        match range.addr {
            IpAddr::V4(v4) => IpAddr::V4((u32::from(v4) | (bits as u32 >> range.prefix)).into()),
            IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) | (bits >> range.prefix)).into()),
        }
    })
}

proptest! {
    #[test]
    fn every_private_address_not_kept_is_walled_off(
        connected in proptest::collection::vec((private_addr(), 8u8..=30), 0..4),
        keep in proptest::collection::vec(private_addr(), 0..3),
        probes in proptest::collection::vec(private_addr(), 1..20),
    ) {
        let routes: Vec<Cidr> = connected
            .iter()
            .filter_map(|(addr, prefix)| {
                let prefix = if addr.is_ipv4() { *prefix } else { *prefix + 40 };
                Cidr::new(*addr, prefix)
            })
            .collect();
        let walled = wall(&routes, &[], &keep, Lan::Refused);
        for addr in probes.iter().chain(&keep) {
            let kept = keep.contains(addr);
            prop_assert_eq!(walled_off(*addr, &routes, &walled), !kept, "{} in {:?}", addr, walled);
        }
        // The sentinel is last, whatever the namespace's routes.
        prop_assert_eq!(walled.last(), Some(&LINK_LOCAL[1]));
    }
}

#[test]
fn route_messages_are_the_kernels_layout() {
    // RTM_NEWROUTE for unreachable 169.254.0.0/16: header, rtmsg, RTA_DST.
    let msg = unreachable_route(1, AF_INET, &[169, 254, 0, 0], 16);
    assert_eq!(msg.len(), 36);
    assert_eq!(&msg[4..6], &24u16.to_ne_bytes());
    assert_eq!(&msg[16..24], &[AF_INET, 16, 0, 0, 254, 4, 0, 7]);
    assert_eq!(&msg[28..36], &[8, 0, 1, 0, 169, 254, 0, 0]);
    let get = route_get_request(7, ip("::ffff:10.0.0.1"));
    assert_eq!(get.len(), 36);
    assert_eq!(&get[4..6], &26u16.to_ne_bytes());
    assert_eq!(&get[16..18], &[AF_INET, 32]);
    assert_eq!(&get[28..36], &[8, 0, 1, 0, 10, 0, 0, 1]);
    let dump = route_dump_request(3, AF_INET6);
    assert_eq!((dump.len(), &dump[6..8], dump[16]), (28, &0x301u16.to_ne_bytes()[..], AF_INET6));
    let messages = wall_messages(&cidrs(&["10.0.0.0/8", "fc00::/7"]));
    assert_eq!(messages[1], unreachable_route(2, AF_INET6, &Cidr::host(ip("fc00::")).octets(), 7));
}

/// A route as the kernel sends it in a dump: rtmsg, then attributes.
fn route_msg(family: u8, prefix: u8, table: u8, kind: u8, attrs: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut body = vec![family, prefix, 0, 0, table, 2, 0, kind, 0, 0, 0, 0];
    for (attr, data) in attrs {
        body.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
        body.extend_from_slice(&attr.to_ne_bytes());
        body.extend_from_slice(data);
        while body.len() % 4 != 0 {
            body.push(0);
        }
    }
    let mut msg = Vec::new();
    msg.extend_from_slice(&(16 + body.len() as u32).to_ne_bytes());
    msg.extend_from_slice(&24u16.to_ne_bytes());
    msg.extend_from_slice(&[0; 10]);
    msg.extend_from_slice(&body);
    msg
}

#[test]
fn a_dump_parses_into_routes() {
    let mut buf = Vec::new();
    buf.extend(route_msg(AF_INET, 0, 254, 1, &[(RTA_GATEWAY, vec![192, 0, 2, 1])]));
    buf.extend(route_msg(AF_INET, 24, 254, 1, &[(RTA_DST, vec![192, 0, 2, 0])]));
    buf.extend(route_msg(AF_INET, 32, 255, 2, &[(RTA_DST, vec![192, 0, 2, 2])]));
    buf.extend(route_msg(AF_INET, 24, 255, 2, &[(RTA_DST, vec![10, 99, 7, 0])]));
    buf.extend(route_msg(AF_INET, 32, 255, 3, &[(RTA_DST, vec![192, 0, 2, 255])]));
    buf.extend(route_msg(
        AF_INET6,
        64,
        252,
        1,
        &[(RTA_DST, Cidr::host(ip("fd00::")).octets()), (RTA_TABLE, 254u32.to_ne_bytes().to_vec())],
    ));
    buf.extend(route_msg(AF_INET, 8, 254, 7, &[(RTA_DST, vec![10, 0, 0, 0])]));
    let mut done = vec![20, 0, 0, 0, 3, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    done[0] = 20;
    let mut routes = Routes::default();
    parse_routes(&buf, &mut routes);
    assert!(!routes.done);
    parse_routes(&done, &mut routes);
    assert!(routes.done && routes.error.is_none());
    assert_eq!(routes.own(), cidrs(&["192.0.2.0/24", "fd00::/64"]));
    assert_eq!(routes.gateways(), vec![ip("192.0.2.1")]);
    assert_eq!(routes.local(), cidrs(&["192.0.2.2/32", "10.99.7.0/24"]));
    // An error answer (a route get to an address without a route).
    let mut error = vec![36, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0];
    error.extend_from_slice(&(-101i32).to_ne_bytes());
    error.extend_from_slice(&[0; 16]);
    let mut failed = Routes::default();
    parse_routes(&error, &mut failed);
    assert_eq!((failed.done, failed.error), (true, Some(-101)));
    // Truncated input is ignored, not read past.
    let mut partial = Routes::default();
    parse_routes(&buf[..buf.len() - 3], &mut partial);
    assert_eq!(partial.routes.len(), 6);
}

#[test]
fn a_proxy_variable_names_its_host_and_port() {
    let table = [
        ("http://proxy.corp:8080", Some(("proxy.corp", 8080))),
        ("http://alice:s3cr%40t@10.0.0.5:3128/", Some(("10.0.0.5", 3128))),
        ("proxy.corp", Some(("proxy.corp", 1080))),
        ("socks5h://[fd00::5]:1080", Some(("fd00::5", 1080))),
        ("http://[fd00::5]", Some(("fd00::5", 1080))),
        ("http://:8080", None),
        ("http://host:port", None),
        ("", None),
    ];
    for (value, want) in table {
        let got = proxy_authority(value);
        assert_eq!(got.as_ref().map(|(h, p)| (h.as_str(), *p)), want, "{value:?}");
    }
}
