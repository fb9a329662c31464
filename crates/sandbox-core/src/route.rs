//! What a net-on sandbox may reach, as data, on every engine: the ranges it never reaches
//! ([`NEVER`], [`LINK_LOCAL`]), the private ranges it reaches only when the user allows the
//! LAN ([`PRIVATE`], [`Lan`]), the policy check of one address ([`refusal`]), the unreachable
//! routes that wall a network namespace in ([`wall`]), and the netlink messages that add them
//! or ask the kernel about routes. Sending them is each engine's IO (bwrap and native: a
//! socket made in the sandbox's namespace; docker and podman: a thread in the container's
//! network namespace, or one privileged exec).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `AF_INET` and `AF_INET6` (Linux values; this crate has no libc).
const AF_INET: u8 = 2;
/// `AF_INET6`.
const AF_INET6: u8 = 10;

/// A range of addresses: an address and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    /// The first address of the range (bits past the prefix are zero).
    pub addr: IpAddr,
    /// The prefix length: 0 to 32 for IPv4, 0 to 128 for IPv6.
    pub prefix: u8,
}

impl Cidr {
    /// `a.b.c.d/prefix`.
    pub const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8) -> Cidr {
        Cidr { addr: IpAddr::V4(Ipv4Addr::new(a, b, c, d)), prefix }
    }

    /// An IPv6 range from its eight segments.
    pub const fn v6(segments: [u16; 8], prefix: u8) -> Cidr {
        let [a, b, c, d, e, f, g, h] = segments;
        Cidr { addr: IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h)), prefix }
    }

    /// The range of `addr`'s first `prefix` bits (the rest cleared); `None` when `prefix` is
    /// longer than the address.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Cidr> {
        let bits = bits_of(addr);
        (prefix <= bits).then(|| Cidr { addr: masked(addr, prefix), prefix })
    }

    /// The one address `addr`, as a range (`/32` or `/128`).
    pub fn host(addr: IpAddr) -> Cidr {
        Cidr { addr, prefix: bits_of(addr) }
    }

    /// Parses `10.0.0.0/8` or `fd00::/8` (bits past the prefix must be zero).
    pub fn parse(text: &str) -> Option<Cidr> {
        let (addr, prefix) = text.split_once('/')?;
        let addr: IpAddr = addr.parse().ok()?;
        let prefix: u8 = prefix.parse().ok()?;
        Cidr::new(addr, prefix).filter(|c| c.addr == addr)
    }

    /// `AF_INET` or `AF_INET6`.
    pub fn family(&self) -> u8 {
        if self.addr.is_ipv4() { AF_INET } else { AF_INET6 }
    }

    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address counts as its IPv4 one).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        ip.is_ipv4() == self.addr.is_ipv4() && masked(ip, self.prefix) == self.addr
    }

    /// Whether every address of `other` is in this range.
    pub fn covers(&self, other: &Cidr) -> bool {
        other.prefix >= self.prefix && self.contains(other.addr)
    }

    /// The two ranges one bit longer; `None` for a single address.
    fn halves(&self) -> Option<(Cidr, Cidr)> {
        let bits = bits_of(self.addr);
        if self.prefix >= bits {
            return None;
        }
        let low = Cidr { addr: self.addr, prefix: self.prefix + 1 };
        let high_bit = 1u128 << (bits - self.prefix - 1);
        let high = match self.addr {
            IpAddr::V4(v4) => {
                IpAddr::V4(Ipv4Addr::from(u32::from(v4) | u32::try_from(high_bit).unwrap_or(0)))
            }
            IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) | high_bit)),
        };
        Some((low, Cidr { addr: high, prefix: self.prefix + 1 }))
    }

    /// The address's bytes (4 or 16).
    pub fn octets(&self) -> Vec<u8> {
        match self.addr {
            IpAddr::V4(v4) => v4.octets().to_vec(),
            IpAddr::V6(v6) => v6.octets().to_vec(),
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn bits_of(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

fn masked(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix.min(32))).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix.min(128))).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
    }
}

/// `::ffff:a.b.c.d` is `a.b.c.d` to the kernel.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Whether a net-on sandbox may reach the private ranges ([`PRIVATE`]): the user's LAN, a
/// node's cluster network. Refused unless the user allows it (the user config's
/// `[net] lan = true`); the host itself stays out of reach either way.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
pub enum Lan {
    /// The private ranges are refused (the default).
    #[default]
    Refused,
    /// The private ranges are reachable (the host's own addresses still are not).
    Allowed,
}

/// Link-local destinations that get an unreachable route in every sandbox with a network
/// (cloud metadata services answer at 169.254.169.254, AWS's IPv6 one at `fd00:ec2::254`).
/// IPv6 link-local addresses need no route: they only reach the sandbox's own link. The
/// IPv4 range is the wall's sentinel: added last, and what a container's gate waits for.
pub const LINK_LOCAL: &[Cidr] =
    &[Cidr::v6([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254], 128), Cidr::v4(169, 254, 0, 0, 16)];

/// The private ranges: RFC 1918, carrier-grade NAT (100.64.0.0/10, where some clusters put
/// pods), IPv6 unique-local. A user's router, NAS and internal services, a node's pods and
/// services (Kubernetes's default service range, 10.96.0.0/12, is inside 10.0.0.0/8) live
/// there; a net-on sandbox reaches them only with [`Lan::Allowed`].
pub const PRIVATE: &[Cidr] = &[
    Cidr::v4(10, 0, 0, 0, 8),
    Cidr::v4(100, 64, 0, 0, 10),
    Cidr::v4(172, 16, 0, 0, 12),
    Cidr::v4(192, 168, 0, 0, 16),
    Cidr::v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),
];

/// Never reached with the network on, whatever the user allows: "this network", loopback,
/// link-local (with the metadata addresses). Multicast, broadcast and the host's own
/// addresses are refused too ([`refusal`]; the host's addresses are each engine's to find).
pub const NEVER: &[Cidr] = &[
    Cidr::v4(0, 0, 0, 0, 8),
    Cidr::v4(127, 0, 0, 0, 8),
    Cidr::v4(169, 254, 0, 0, 16),
    Cidr::v6([0, 0, 0, 0, 0, 0, 0, 1], 128),
    Cidr::v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),
    Cidr::v6([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254], 128),
];

/// The ranges a sandbox's egress excludes: [`NEVER`], and [`PRIVATE`] unless `lan` allows it.
pub fn refused_ranges(lan: Lan) -> Vec<Cidr> {
    let mut ranges = NEVER.to_vec();
    if lan == Lan::Refused {
        ranges.extend_from_slice(PRIVATE);
    }
    ranges
}

/// Pure: why a net-on sandbox may not reach `ip` (`None`: it may, as far as the ranges go;
/// the host's own addresses and what its NAT makes of a destination are checked by the engine
/// that connects).
pub fn refusal(ip: IpAddr, lan: Lan) -> Option<&'static str> {
    let ip = canonical(ip);
    let reason = match ip {
        _ if ip.is_unspecified() => "an unspecified address",
        _ if ip.is_loopback() => "the host's loopback",
        _ if LINK_LOCAL.iter().any(|c| c.contains(ip)) => "a link-local or metadata address",
        IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => "a link-local or metadata address",
        _ if ip.is_multicast() => "a multicast address",
        IpAddr::V4(v4) if v4.is_broadcast() => "a broadcast address",
        IpAddr::V4(v4) if v4.octets()[0] == 0 => "an unspecified address",
        _ if lan == Lan::Refused && PRIVATE.iter().any(|c| c.contains(ip)) => {
            "a private (LAN) address"
        }
        _ => return None,
    };
    Some(reason)
}

/// Pure: the nameservers of `resolv_conf` (a `resolv.conf`'s text), at most three, as the
/// resolver reads them (a scoped IPv6 address, `fe80::1%eth0`, is left out).
pub fn nameservers(resolv_conf: &str) -> Vec<IpAddr> {
    resolv_conf
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("nameserver")).then(|| words.next())?
        })
        .take(3)
        .filter_map(|ip| ip.parse::<IpAddr>().ok())
        .collect()
}

/// The proxy variables a sandbox's clients may be given, each spelling: the host's proxies
/// stay reachable like its nameservers (a prepare's uv goes out through them).
pub const PROXY_VARS: &[&str] =
    &["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"];

/// Pure: the host and port of a proxy variable's value
/// (`[scheme://][user[:password]@]host[:port][/]`, port 1080 by default, curl's); `None` when
/// it names no host.
pub fn proxy_authority(value: &str) -> Option<(String, u16)> {
    let value = value.trim();
    let rest = value.split_once("://").map_or(value, |(_, rest)| rest);
    let rest = rest.split('/').next().unwrap_or_default();
    let authority = rest.rsplit_once('@').map_or(rest, |(_, authority)| authority);
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']')?;
            (host, after.strip_prefix(':'))
        }
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let port = match port {
        Some(port) => port.parse().ok()?,
        None => 1080,
    };
    (!host.is_empty()).then(|| (host.to_owned(), port))
}

/// Pure: the unreachable routes that wall a network namespace in, the [`LINK_LOCAL`] sentinel
/// last. `routes` are the destinations of the namespace's own routes ([`Routes::own`]: its
/// connected subnets; a wall route must be more specific than any of them to win, so those
/// are split in halves); `also` more ranges to wall (the host's own addresses, where they
/// would reach the host); `keep` addresses that must stay reachable (the nameservers the
/// sandbox reads, which may be private): the private ranges are cut around them, never the
/// host's own addresses in `also`. A range that cannot be made more specific than a route of
/// the namespace (a single address with a route of its own) is left out.
pub fn wall(routes: &[Cidr], also: &[Cidr], keep: &[IpAddr], lan: Lan) -> Vec<Cidr> {
    let keep: Vec<IpAddr> = keep.iter().map(|ip| canonical(*ip)).collect();
    let mut pieces = Vec::new();
    if lan == Lan::Refused {
        for range in PRIVATE {
            cut(*range, routes, &keep, &mut pieces);
        }
    }
    // Loopback is the namespace's own; an IPv6 link-local address only reaches the
    // namespace's own link, and a route for one would stand between the namespace and its
    // gateway's neighbour entry.
    let link_local =
        |c: &&Cidr| matches!(c.addr, IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80);
    for range in also.iter().filter(|c| !c.addr.is_loopback()).filter(|c| !link_local(c)) {
        cut(*range, routes, &[], &mut pieces);
    }
    // No route of the namespace lies inside a piece, so a piece inside another one adds
    // nothing (the host's 10.x address inside 10.0.0.0/8).
    pieces.sort();
    pieces.dedup();
    let mut walled: Vec<Cidr> = Vec::new();
    for piece in pieces {
        if !walled.iter().any(|w| w.covers(&piece)) {
            walled.push(piece);
        }
    }
    for sentinel in LINK_LOCAL {
        cut(*sentinel, routes, &[], &mut walled);
        // A route of the namespace inside the range (a DNS forwarder's address) keeps its
        // own; the range itself is still the sentinel a container's gate waits for.
        if walled.last() != Some(sentinel) {
            walled.push(*sentinel);
        }
    }
    walled
}

/// `range` minus the `keep` addresses, each piece more specific than every route inside it.
fn cut(range: Cidr, routes: &[Cidr], keep: &[IpAddr], out: &mut Vec<Cidr>) {
    let holds_kept = keep.iter().any(|ip| range.contains(*ip));
    // A route of the namespace as specific as this range or more, inside it, would win.
    let loses = routes.iter().any(|r| range.covers(r));
    if !holds_kept && !loses {
        out.push(range);
        return;
    }
    if let Some((low, high)) = range.halves() {
        cut(low, routes, keep, out);
        cut(high, routes, keep, out);
    }
}

/// The `RTM_NEWROUTE` messages for the unreachable `ranges`, sequence numbers from 1.
pub fn wall_messages(ranges: &[Cidr]) -> Vec<Vec<u8>> {
    ranges
        .iter()
        .zip(1u32..)
        .map(|(range, seq)| unreachable_route(seq, range.family(), &range.octets(), range.prefix))
        .collect()
}

/// Pure: how many of the netlink messages in `buf` ask for an ack (`NLM_F_ACK`).
pub fn acks_asked(buf: &[u8]) -> usize {
    messages(buf).filter(|(_, flags, _)| flags & NLM_F_ACK != 0).count()
}

/// Pure: the error of each ack (`NLMSG_ERROR`) in `buf`, one `recv` of answers: 0 for
/// success, `-errno` for a failure.
pub fn ack_errors(buf: &[u8]) -> Vec<i32> {
    messages(buf)
        .filter(|(kind, _, _)| *kind == NLMSG_ERROR)
        .filter_map(|(_, _, body)| Some(i32::from_ne_bytes(body.get(..4)?.try_into().ok()?)))
        .collect()
}

/// The netlink messages in `buf`: (type, flags, body), a malformed one ending the walk.
fn messages(buf: &[u8]) -> impl Iterator<Item = (u16, u16, &[u8])> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let head = buf.get(at..at + 16)?;
        let len = u32::from_ne_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let body = buf.get(at + 16..at.checked_add(len)?).filter(|_| len >= 16)?;
        let kind = u16::from_ne_bytes([head[4], head[5]]);
        let flags = u16::from_ne_bytes([head[6], head[7]]);
        at += (len + 3) & !3;
        Some((kind, flags, body))
    })
}

const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTA_DST: u16 = 1;
const RTA_GATEWAY: u16 = 5;
const RTA_TABLE: u16 = 15;
/// The main routing table.
pub const RT_TABLE_MAIN: u32 = 254;
/// The local table: the host's own addresses (`local` routes) and broadcast ones.
pub const RT_TABLE_LOCAL: u32 = 255;
/// `rtm_type` of an ordinary route.
pub const RTN_UNICAST: u8 = 1;
/// `rtm_type` of a route to the host itself.
pub const RTN_LOCAL: u8 = 2;
/// `rtm_type` of a broadcast route.
pub const RTN_BROADCAST: u8 = 3;
/// `rtm_type` of a multicast route.
pub const RTN_MULTICAST: u8 = 5;

/// Pure: one netlink message of `kind` with `flags` around `payload` (its family's header,
/// then attributes): the header every netlink protocol shares (route, netfilter).
pub fn netlink_message(kind: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    let total = 16 + payload.len();
    let mut msg = Vec::with_capacity(total);
    msg.extend_from_slice(&(total as u32).to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&flags.to_ne_bytes());
    msg.extend_from_slice(&seq.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(payload);
    msg
}

/// Pure: one netlink attribute: its length and `kind`, `data`, padded to four bytes.
pub fn netlink_attr(kind: u16, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + data.len() + 3);
    out.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(data);
    while out.len() % 4 != 0 {
        out.push(0);
    }
    out
}

/// Pure: one `RTM_NEWROUTE` netlink message adding an unreachable route to `dest/prefix`.
pub fn unreachable_route(seq: u32, family: u8, dest: &[u8], prefix: u8) -> Vec<u8> {
    const NLM_F_CREATE: u16 = 0x400;
    const NLM_F_EXCL: u16 = 0x200;
    const RTPROT_STATIC: u8 = 4;
    const RT_SCOPE_UNIVERSE: u8 = 0;
    const RTN_UNREACHABLE: u8 = 7;
    let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    // struct rtmsg, then RTA_DST.
    let mut payload = vec![family, prefix, 0, 0, RT_TABLE_MAIN as u8, RTPROT_STATIC];
    payload.extend_from_slice(&[RT_SCOPE_UNIVERSE, RTN_UNREACHABLE, 0, 0, 0, 0]);
    payload.extend(netlink_attr(RTA_DST, dest));
    netlink_message(RTM_NEWROUTE, flags, seq, &payload)
}

/// Pure: an `RTM_GETROUTE` dump request of every route of `family`.
pub fn route_dump_request(seq: u32, family: u8) -> Vec<u8> {
    let rtmsg = [family, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    netlink_message(RTM_GETROUTE, NLM_F_REQUEST | NLM_F_DUMP, seq, &rtmsg)
}

/// Pure: an `RTM_GETROUTE` request for the route the kernel would take to `ip` (`ip route
/// get`): its answer's type says whether `ip` is the host's own ([`RTN_LOCAL`]).
pub fn route_get_request(seq: u32, ip: IpAddr) -> Vec<u8> {
    let range = Cidr::host(canonical(ip));
    let mut payload = vec![range.family(), range.prefix, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    payload.extend(netlink_attr(RTA_DST, &range.octets()));
    netlink_message(RTM_GETROUTE, NLM_F_REQUEST, seq, &payload)
}

/// One route of a dump: its destination, table and type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The destination range (`0.0.0.0/0` for a default route).
    pub dst: Cidr,
    /// The table it is in ([`RT_TABLE_MAIN`], [`RT_TABLE_LOCAL`], ...).
    pub table: u32,
    /// `rtm_type` (unicast 1, [`RTN_LOCAL`], [`RTN_BROADCAST`], unreachable 7, ...).
    pub kind: u8,
    /// The next hop, for a route through a gateway.
    pub gateway: Option<IpAddr>,
}

/// What a chunk of netlink answers held.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Routes {
    /// The routes, in order.
    pub routes: Vec<Route>,
    /// `NLMSG_DONE` was seen: the dump is complete.
    pub done: bool,
    /// An `NLMSG_ERROR` with this (negative) errno was seen.
    pub error: Option<i32>,
}

impl Routes {
    /// The destinations of the namespace's own unicast routes in its main table, default
    /// routes left out: what [`wall`] must be more specific than.
    pub fn own(&self) -> Vec<Cidr> {
        self.routes
            .iter()
            .filter(|r| r.table == RT_TABLE_MAIN && r.kind == RTN_UNICAST && r.dst.prefix > 0)
            .map(|r| r.dst)
            .collect()
    }

    /// The gateways of the default routes (a container's: the host's side of its bridge).
    pub fn gateways(&self) -> Vec<IpAddr> {
        self.routes
            .iter()
            .filter(|r| r.table == RT_TABLE_MAIN && r.dst.prefix == 0)
            .filter_map(|r| r.gateway)
            .collect()
    }

    /// The host's own addresses and ranges: the `local` routes of the local table.
    pub fn local(&self) -> Vec<Cidr> {
        self.routes
            .iter()
            .filter(|r| r.table == RT_TABLE_LOCAL && r.kind == RTN_LOCAL)
            .map(|r| r.dst)
            .collect()
    }
}

/// Pure: the routes in `buf`, one `recv` of netlink answers (to a dump or to a
/// [`route_get_request`]), added to `into`. Malformed messages end the walk.
pub fn parse_routes(buf: &[u8], into: &mut Routes) {
    for (kind, _, body) in messages(buf) {
        match kind {
            NLMSG_DONE => into.done = true,
            NLMSG_ERROR => {
                let error = body.get(..4).map(|e| i32::from_ne_bytes([e[0], e[1], e[2], e[3]]));
                if let Some(e) = error.filter(|e| *e != 0) {
                    into.error = Some(e);
                }
                into.done = true;
            }
            RTM_NEWROUTE => {
                if let Some(route) = parse_route(body) {
                    into.routes.push(route);
                }
            }
            _ => {}
        }
    }
}

fn parse_route(body: &[u8]) -> Option<Route> {
    let rtm = body.get(..12)?;
    let (family, prefix, table, kind) = (rtm[0], rtm[1], rtm[4], rtm[7]);
    let mut table = u32::from(table);
    let len = match family {
        AF_INET => 4,
        AF_INET6 => 16,
        _ => return None,
    };
    let mut dst: Option<IpAddr> = None;
    let mut gateway: Option<IpAddr> = None;
    let address = |data: &[u8]| -> Option<IpAddr> {
        match <[u8; 4]>::try_from(data) {
            Ok(v4) => Some(IpAddr::from(v4)),
            Err(_) => Some(IpAddr::from(<[u8; 16]>::try_from(data).ok()?)),
        }
    };
    let mut at = 12;
    while let Some(attr) = body.get(at..at + 4) {
        let attr_len = usize::from(u16::from_ne_bytes([attr[0], attr[1]]));
        let attr_kind = u16::from_ne_bytes([attr[2], attr[3]]);
        if attr_len < 4 {
            break;
        }
        let data = body.get(at + 4..at + attr_len)?;
        match attr_kind {
            RTA_DST if data.len() == len => dst = address(data),
            RTA_GATEWAY if data.len() == len => gateway = address(data),
            RTA_TABLE if data.len() == 4 => {
                table = u32::from_ne_bytes([data[0], data[1], data[2], data[3]]);
            }
            _ => {}
        }
        at += (attr_len + 3) & !3;
    }
    let unspecified = match family {
        AF_INET => IpAddr::from([0u8; 4]),
        _ => IpAddr::from([0u8; 16]),
    };
    let dst = Cidr::new(dst.unwrap_or(unspecified), prefix)?;
    Some(Route { dst, table, kind, gateway })
}

#[cfg(test)]
mod tests;
