//! The kernel's routing tables over rtnetlink, the one way the engines read them and add a
//! sandbox's wall routes ([`sandbox_core::net_wall`]): a dump of every route (the host's own
//! addresses are its local table's `local` routes, AnyIP ranges included, which `getifaddrs`
//! never lists), the route the kernel would take to one address (`ip route get`, asked per
//! connection by the built-in relay and proxy), and routes added through a socket that may
//! have been made in another network namespace. The messages are `sandbox_core`'s (pure);
//! this is their IO. Reading needs no privilege; adding needs `CAP_NET_ADMIN` over the
//! socket's namespace.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, OwnedFd};

use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};
use sandbox_core::{Routes, parse_routes};

/// A `NETLINK_ROUTE` socket in this thread's network namespace.
pub fn socket() -> io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

/// Sends `request` and reads answers until one ends it (`NLMSG_DONE`, an error, or, for a
/// request that is no dump, the first message).
fn ask(sock: impl AsFd, request: &[u8], dump: bool) -> io::Result<Routes> {
    rustix::net::send(&sock, request, SendFlags::empty())?;
    let mut routes = Routes::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let (n, _) = rustix::net::recv(&sock, &mut buf, RecvFlags::empty())?;
        if n == 0 {
            return Err(io::Error::other("netlink closed"));
        }
        parse_routes(&buf[..n.min(buf.len())], &mut routes);
        if routes.done || !dump {
            return Ok(routes);
        }
    }
}

/// Every route of every table of the socket's namespace, IPv4 and IPv6 (a namespace without
/// IPv6 gives IPv4's only).
pub fn routes(sock: impl AsFd) -> io::Result<Routes> {
    let mut all = Routes::default();
    let (inet, inet6) = (AddressFamily::INET.as_raw() as u8, AddressFamily::INET6.as_raw() as u8);
    for (family, seq) in [(inet, 1), (inet6, 2)] {
        let got = ask(&sock, &sandbox_core::route_dump_request(seq, family), true)?;
        match got.error {
            None => all.routes.extend(got.routes),
            // No IPv6 in the namespace.
            Some(-97) if family == inet6 => {}
            Some(e) => return Err(io::Error::from_raw_os_error(-e)),
        }
    }
    all.done = true;
    Ok(all)
}

/// The host's own addresses and ranges: every `local` route of this thread's namespace (its
/// local table), IPv4 and IPv6.
pub fn host_local_ranges() -> io::Result<Vec<sandbox_core::Cidr>> {
    Ok(routes(socket()?)?.local())
}

/// The type of the route the kernel would take to `ip` from the socket's namespace
/// ([`sandbox_core::RTN_LOCAL`]: the host itself), or the error it answers (no route).
pub fn route_kind(sock: impl AsFd, ip: IpAddr) -> io::Result<u8> {
    let got = ask(&sock, &sandbox_core::route_get_request(1, ip), false)?;
    if let Some(e) = got.error {
        return Err(io::Error::from_raw_os_error(-e));
    }
    got.routes.first().map(|r| r.kind).ok_or_else(|| io::Error::other("no route in the answer"))
}

/// A `NETLINK_NETFILTER` socket in this thread's network namespace (nftables batches).
pub fn netfilter_socket() -> io::Result<OwnedFd> {
    const NETLINK_NETFILTER: u32 = 12;
    let protocol =
        std::num::NonZeroU32::new(NETLINK_NETFILTER).map(rustix::net::Protocol::from_raw);
    Ok(rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        protocol,
    )?)
}

/// Sends each of `messages` through `sock` (a buffer may hold several netlink messages, an
/// nftables batch) and checks the ack of every message in it that asks for one; a route that
/// exists already counts as added, and IPv6 ones are skipped where the namespace has no IPv6.
pub fn apply(sock: impl AsFd, messages: &[Vec<u8>]) -> io::Result<()> {
    const EEXIST: i32 = 17;
    const EAFNOSUPPORT: i32 = 97;
    let mut buf = vec![0u8; 16 * 1024];
    for msg in messages {
        rustix::net::send(&sock, msg, SendFlags::empty())?;
        let mut waiting = sandbox_core::acks_asked(msg);
        while waiting > 0 {
            let (n, _) = rustix::net::recv(&sock, &mut buf, RecvFlags::empty())?;
            let errors = sandbox_core::ack_errors(&buf[..n.min(buf.len())]);
            if errors.is_empty() {
                return Err(io::Error::other("a netlink answer without an ack"));
            }
            for e in errors {
                match e {
                    0 => {}
                    e if e == -EEXIST || e == -EAFNOSUPPORT => {}
                    e => return Err(io::Error::from_raw_os_error(-e)),
                }
                waiting = waiting.saturating_sub(1);
            }
        }
    }
    Ok(())
}
