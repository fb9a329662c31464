//! Where a flow really goes once the host's NAT has rewritten it. The built-in relay and
//! proxy check a destination, then open a host socket to it; a DNAT rule in the host's
//! `OUTPUT` nat chain (kube-proxy's service rules, docker's published ports, a hand-written
//! `-j DNAT --to 127.0.0.1:PORT`) can send that socket's packets to the host itself, and
//! `getpeername` still names the address asked for. The connection tracker knows: its entry
//! for the flow's original tuple holds the reply tuple, whose source is the real destination
//! ([`real_destination`], ctnetlink's `IPCTNL_MSG_CT_GET`). The entry exists once the first
//! packet has left (a TCP `SYN` leaves within `connect`; a UDP flow sends an empty datagram
//! first), and no entry means no NAT (NAT needs one).
//!
//! Asking needs `CAP_NET_ADMIN` over the host's network namespace: a root caller's relay and
//! proxy check every flow; an unprivileged caller's cannot ([`Conntrack::open`] says so once),
//! and rely on the ranges a NAT rule usually rewrites (private ranges, the host's own
//! addresses) being refused before any socket is made. That residual is documented.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;

use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

const NETLINK_NETFILTER: i32 = 12;
const NFNL_SUBSYS_CTNETLINK: u16 = 1;
const IPCTNL_MSG_CT_NEW: u16 = 0;
const IPCTNL_MSG_CT_GET: u16 = 1;
const NLM_F_REQUEST: u16 = 0x1;
const NLMSG_ERROR: u16 = 2;
const NLA_F_NESTED: u16 = 0x8000;
const NLA_TYPE_MASK: u16 = 0x3fff;
const CTA_TUPLE_ORIG: u16 = 1;
const CTA_TUPLE_REPLY: u16 = 2;
const CTA_TUPLE_IP: u16 = 1;
const CTA_TUPLE_PROTO: u16 = 2;
const CTA_IP_V4_SRC: u16 = 1;
const CTA_IP_V6_SRC: u16 = 3;
const CTA_PROTO_NUM: u16 = 1;
const CTA_PROTO_SRC_PORT: u16 = 2;
const CTA_PROTO_DST_PORT: u16 = 3;
const ENOENT: i32 = 2;

/// The transport of a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proto {
    Tcp,
    Udp,
}

impl Proto {
    fn number(self) -> u8 {
        match self {
            Proto::Tcp => 6,
            Proto::Udp => 17,
        }
    }
}

use sandbox_core::netlink_attr as attr;

fn ip_bytes(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

/// Pure: the ctnetlink request for the entry whose original tuple is `proto` from `local` to
/// `remote` (both of one family).
pub(crate) fn get_request(
    seq: u32,
    proto: Proto,
    local: SocketAddr,
    remote: SocketAddr,
) -> Vec<u8> {
    let v6 = local.is_ipv6();
    let (src, dst) =
        if v6 { (CTA_IP_V6_SRC, CTA_IP_V6_SRC + 1) } else { (CTA_IP_V4_SRC, CTA_IP_V4_SRC + 1) };
    let mut ip = attr(src, &ip_bytes(local.ip()));
    ip.extend(attr(dst, &ip_bytes(remote.ip())));
    let mut ports = attr(CTA_PROTO_NUM, &[proto.number()]);
    ports.extend(attr(CTA_PROTO_SRC_PORT, &local.port().to_be_bytes()));
    ports.extend(attr(CTA_PROTO_DST_PORT, &remote.port().to_be_bytes()));
    let mut tuple = attr(CTA_TUPLE_IP | NLA_F_NESTED, &ip);
    tuple.extend(attr(CTA_TUPLE_PROTO | NLA_F_NESTED, &ports));
    // struct nfgenmsg (family, version 0, resource id 0), then the original tuple.
    let family = if v6 { libc::AF_INET6 } else { libc::AF_INET } as u8;
    let mut payload = vec![family, 0, 0, 0];
    payload.extend(attr(CTA_TUPLE_ORIG | NLA_F_NESTED, &tuple));
    let kind = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET;
    sandbox_core::netlink_message(kind, NLM_F_REQUEST, seq, &payload)
}

/// The attributes in `data`: (type without flags, payload).
fn attrs(data: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(head) = data.get(at..at + 4) {
        let len = usize::from(u16::from_ne_bytes([head[0], head[1]]));
        let kind = u16::from_ne_bytes([head[2], head[3]]) & NLA_TYPE_MASK;
        let Some(payload) = data.get(at + 4..at + len.max(4)) else { break };
        if len < 4 {
            break;
        }
        out.push((kind, payload));
        at += (len + 3) & !3;
    }
    out
}

/// What the tracker answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The entry's reply tuple comes from this address: where the flow really goes.
    Goes(SocketAddr),
    /// No entry: the flow is not tracked, so no NAT rewrote it.
    Untracked,
    /// The kernel refused to answer (`-errno`: `EPERM` without `CAP_NET_ADMIN`).
    Refused(i32),
}

/// Pure: the answer in `buf` (one `recv` after [`get_request`]); `None` when it is none.
pub(crate) fn parse_answer(buf: &[u8]) -> Option<Answer> {
    let head = buf.get(..16)?;
    let len = u32::from_ne_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let kind = u16::from_ne_bytes([head[4], head[5]]);
    let body = buf.get(16..len.min(buf.len()))?;
    if kind == NLMSG_ERROR {
        let e = i32::from_ne_bytes(body.get(..4)?.try_into().ok()?);
        return Some(if e == -ENOENT { Answer::Untracked } else { Answer::Refused(e) });
    }
    if kind != (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW {
        return None;
    }
    let reply = attrs(body.get(4..)?).into_iter().find(|(k, _)| *k == CTA_TUPLE_REPLY)?.1;
    let mut ip = None;
    let mut port = None;
    for (kind, data) in attrs(reply) {
        match kind {
            CTA_TUPLE_IP => {
                for (kind, data) in attrs(data) {
                    ip = match (kind, data.len()) {
                        (CTA_IP_V4_SRC, 4) => Some(IpAddr::from(<[u8; 4]>::try_from(data).ok()?)),
                        (CTA_IP_V6_SRC, 16) => Some(IpAddr::from(<[u8; 16]>::try_from(data).ok()?)),
                        _ => ip,
                    };
                }
            }
            CTA_TUPLE_PROTO => {
                for (kind, data) in attrs(data) {
                    if kind == CTA_PROTO_SRC_PORT && data.len() == 2 {
                        port = Some(u16::from_be_bytes([data[0], data[1]]));
                    }
                }
            }
            _ => {}
        }
    }
    Some(Answer::Goes(SocketAddr::new(ip?, port?)))
}

/// A ctnetlink socket that may ask (the caller holds `CAP_NET_ADMIN` over this namespace).
#[derive(Debug)]
pub(crate) struct Conntrack {
    sock: OwnedFd,
}

impl Conntrack {
    /// A socket in this thread's network namespace, when the kernel answers questions asked
    /// through it; `None` otherwise (an unprivileged caller).
    pub(crate) fn open() -> Option<Conntrack> {
        let sock = rustix::net::socket_with(
            AddressFamily::NETLINK,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            Some(rustix::net::Protocol::from_raw(std::num::NonZeroU32::new(
                NETLINK_NETFILTER as u32,
            )?)),
        )
        .ok()?;
        let conntrack = Conntrack { sock };
        // A tuple no flow has: "no entry" means the kernel answers us.
        let nothing = SocketAddr::from(([0, 0, 0, 0], 0));
        match conntrack.ask(Proto::Tcp, nothing, nothing) {
            Ok(Answer::Untracked | Answer::Goes(_)) => Some(conntrack),
            _ => None,
        }
    }

    fn ask(&self, proto: Proto, local: SocketAddr, remote: SocketAddr) -> io::Result<Answer> {
        let request = get_request(1, proto, local, remote);
        rustix::net::send(&self.sock, &request, SendFlags::empty())?;
        let mut buf = [0u8; 4096];
        loop {
            let (n, _) = rustix::net::recv(&self.sock, &mut buf, RecvFlags::empty())?;
            if let Some(answer) = parse_answer(&buf[..n.min(buf.len())]) {
                return Ok(answer);
            }
        }
    }

    /// Where the flow `proto` from `local` (the host socket's own address) to `remote` (the
    /// checked destination) really goes: `remote` itself unless a NAT rule rewrote it. An
    /// error when the tracker cannot say (then the flow is not to be trusted).
    pub(crate) fn real_destination(
        &self,
        proto: Proto,
        local: SocketAddr,
        remote: SocketAddr,
    ) -> io::Result<SocketAddr> {
        match self.ask(proto, local, remote)? {
            Answer::Goes(real) => Ok(real),
            Answer::Untracked => Ok(remote),
            Answer::Refused(e) => Err(io::Error::from_raw_os_error(-e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_ctnetlinks_layout() {
        let local: SocketAddr = "192.0.2.2:40000".parse().unwrap();
        let remote: SocketAddr = "198.51.100.7:18099".parse().unwrap();
        let msg = get_request(9, Proto::Tcp, local, remote);
        assert_eq!(msg.len(), u32::from_ne_bytes(msg[..4].try_into().unwrap()) as usize);
        assert_eq!(&msg[4..6], &0x0101u16.to_ne_bytes());
        assert_eq!(&msg[16..20], &[libc::AF_INET as u8, 0, 0, 0]);
        let orig = attrs(&msg[20..]);
        assert_eq!(orig.len(), 1);
        assert_eq!(orig[0].0, CTA_TUPLE_ORIG);
        let tuple = attrs(orig[0].1);
        let ip = attrs(tuple[0].1);
        assert_eq!(ip, vec![(1, &[192, 0, 2, 2][..]), (2, &[198, 51, 100, 7][..])]);
        let ports = attrs(tuple[1].1);
        assert_eq!(
            ports,
            vec![
                (1, &[6u8][..]),
                (2, &40000u16.to_be_bytes()[..]),
                (3, &18099u16.to_be_bytes()[..])
            ]
        );
        let v6 = get_request(
            1,
            Proto::Udp,
            "[fd00::2]:5".parse().unwrap(),
            "[fd00::9]:53".parse().unwrap(),
        );
        assert_eq!(v6[16], libc::AF_INET6 as u8);
    }

    /// An answer as the kernel sends it: the original tuple, then the reply tuple, whose
    /// source is the real destination.
    #[test]
    fn an_answer_names_the_real_destination() {
        let tuple = |src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16| {
            let mut ip = attr(CTA_IP_V4_SRC, &src);
            ip.extend(attr(CTA_IP_V4_SRC + 1, &dst));
            let mut ports = attr(CTA_PROTO_NUM, &[6]);
            ports.extend(attr(CTA_PROTO_SRC_PORT, &sport.to_be_bytes()));
            ports.extend(attr(CTA_PROTO_DST_PORT, &dport.to_be_bytes()));
            let mut t = attr(CTA_TUPLE_IP | NLA_F_NESTED, &ip);
            t.extend(attr(CTA_TUPLE_PROTO | NLA_F_NESTED, &ports));
            t
        };
        let mut body = vec![libc::AF_INET as u8, 0, 0, 0];
        body.extend(attr(
            CTA_TUPLE_ORIG | NLA_F_NESTED,
            &tuple([192, 0, 2, 2], [198, 51, 100, 7], 40000, 18099),
        ));
        body.extend(attr(
            CTA_TUPLE_REPLY | NLA_F_NESTED,
            &tuple([127, 0, 0, 1], [192, 0, 2, 2], 18001, 40000),
        ));
        let mut msg = Vec::new();
        msg.extend_from_slice(&(16 + body.len() as u32).to_ne_bytes());
        msg.extend_from_slice(&0x0100u16.to_ne_bytes());
        msg.extend_from_slice(&[0; 10]);
        msg.extend_from_slice(&body);
        assert_eq!(parse_answer(&msg), Some(Answer::Goes("127.0.0.1:18001".parse().unwrap())));
        let error = |errno: i32| {
            let mut m = vec![36, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            m.extend_from_slice(&(-errno).to_ne_bytes());
            m.extend_from_slice(&[0; 16]);
            parse_answer(&m)
        };
        assert_eq!(error(ENOENT), Some(Answer::Untracked));
        assert_eq!(error(1), Some(Answer::Refused(-1)));
        assert_eq!(parse_answer(&msg[..10]), None);
    }
}
