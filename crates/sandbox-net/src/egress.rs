//! The destination checks of the built-in relay and proxy, for one sandbox they serve. Both
//! open host sockets for the sandbox, so the host's view decides:
//!
//! 1. **before a socket is made** ([`Egress::refusal`]): the policy's ranges
//!    ([`sandbox_core::net_refusal`]: loopback, link-local and metadata, multicast, private
//!    ranges unless the user allows the LAN), then the kernel's own answer for the address
//!    (`ip route get`): a `local` route is the host itself, whatever interface list would say
//!    (an AnyIP `ip route add local 10.99.7.0/24 dev lo` range has no interface address). The
//!    host's nameservers ([`sandbox_core::nameservers`] of the `resolv.conf` the sandbox reads)
//!    stay reachable on port 53 even when private, so DNS works; never when they are the
//!    host's own address.
//! 2. **after the first packet left** ([`Egress::after_nat`]): where the host's NAT really
//!    sent it ([`crate::nat`]), checked the same way; a flow rewritten to a refused
//!    destination is closed before any byte of the sandbox's goes through it. Only a caller
//!    with `CAP_NET_ADMIN` over the host's namespace (root) can ask.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Mutex;

use sandbox_core::Lan;

use crate::nat::{Conntrack, Proto};

/// The checks for one served sandbox.
#[derive(Debug)]
pub(crate) struct Egress {
    lan: Lan,
    /// The host's nameservers: reachable on port 53 when private.
    nameservers: Vec<IpAddr>,
    /// `None`: this process may not ask the connection tracker.
    conntrack: Option<Mutex<Conntrack>>,
}

/// Pure: why the kernel's route to a destination refuses it (`kind`: the route's type, or
/// the error the lookup failed with; `None`: it may be reached).
pub(crate) fn route_refusal(kind: &io::Result<u8>) -> Option<&'static str> {
    match kind {
        Ok(sandbox_core::RTN_LOCAL) => Some("one of the host's own addresses"),
        Ok(sandbox_core::RTN_BROADCAST) => Some("a broadcast address"),
        Ok(sandbox_core::RTN_MULTICAST) => Some("a multicast address"),
        Ok(_) => None,
        // No route: the connect fails by itself.
        Err(e) if e.raw_os_error().is_some_and(|e| e != libc::EMFILE && e != libc::ENFILE) => None,
        Err(_) => Some("its route cannot be checked"),
    }
}

impl Egress {
    /// The checks for a sandbox that may reach the LAN or not (`lan`), with the host's
    /// `nameservers` ([`host_nameservers`]).
    pub(crate) fn new(lan: Lan, nameservers: Vec<IpAddr>) -> Egress {
        Egress { lan, nameservers, conntrack: Conntrack::open().map(Mutex::new) }
    }

    /// Whether `ip` is one of the host's nameservers.
    pub(crate) fn is_nameserver(&self, ip: IpAddr) -> bool {
        self.nameservers.contains(&sandbox_core::canonical_ip(ip))
    }

    /// Whether flows are checked after the host's NAT (this process may ask the tracker).
    pub(crate) fn sees_nat(&self) -> bool {
        self.conntrack.is_some()
    }

    /// Why `dest` may not be reached (`None`: it may), before any socket is made for it.
    pub(crate) fn refusal(&self, dest: SocketAddr) -> Option<&'static str> {
        let ip = sandbox_core::canonical_ip(dest.ip());
        let nameserver = dest.port() == 53 && self.nameservers.contains(&ip);
        let lan = if nameserver { Lan::Allowed } else { self.lan };
        if let Some(why) = sandbox_core::net_refusal(ip, lan) {
            return Some(why);
        }
        let kind = engine_detect::netlink::socket()
            .and_then(|sock| engine_detect::netlink::route_kind(sock, ip));
        route_refusal(&kind)
    }

    /// Once the first packet of a flow to `dest` has left through `sock` (a TCP connect under
    /// way, or a UDP datagram sent): why the flow must be closed, now that the host's NAT
    /// has had its say (`None`: it goes where it was checked to, or nowhere refused). Without
    /// the tracker, `None`.
    pub(crate) fn after_nat(
        &self,
        proto: Proto,
        sock: impl AsFd,
        dest: SocketAddr,
    ) -> Option<String> {
        let conntrack = self.conntrack.as_ref()?;
        let local =
            rustix::net::getsockname(&sock).ok().and_then(|addr| SocketAddr::try_from(addr).ok());
        let Some(local) = local else {
            return Some("its host socket has no address".to_owned());
        };
        let real = {
            let conntrack = conntrack.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            conntrack.real_destination(proto, local, dest)
        };
        match real {
            Ok(real) if same(real, dest) => None,
            Ok(real) => self.refusal(real).map(|why| format!("the host's NAT sends it to {why}")),
            Err(e) => Some(format!("where the host's NAT sends it cannot be checked: {e}")),
        }
    }
}

fn same(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() == b.port() && sandbox_core::canonical_ip(a.ip()) == sandbox_core::canonical_ip(b.ip())
}

/// The nameservers of the host's `/etc/resolv.conf` (which the sandbox reads).
pub(crate) fn host_nameservers() -> Vec<IpAddr> {
    sandbox_core::nameservers(&std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_route_type_decides_what_is_the_host() {
        let table = [
            (Ok(sandbox_core::RTN_LOCAL), Some("one of the host's own addresses")),
            (Ok(sandbox_core::RTN_BROADCAST), Some("a broadcast address")),
            (Ok(sandbox_core::RTN_MULTICAST), Some("a multicast address")),
            (Ok(sandbox_core::RTN_UNICAST), None),
            (Err(io::Error::from_raw_os_error(libc::ENETUNREACH)), None),
            (Err(io::Error::from_raw_os_error(libc::EMFILE)), Some("its route cannot be checked")),
            (Err(io::Error::other("netlink closed")), Some("its route cannot be checked")),
        ];
        for (kind, want) in table {
            assert_eq!(route_refusal(&kind), want, "{kind:?}");
        }
    }

    /// Only a caller with `CAP_NET_ADMIN` over this namespace may ask the connection tracker
    /// (root here; an unprivileged caller is the documented residual).
    #[test]
    fn only_root_sees_where_the_hosts_nat_sends_a_flow() {
        let egress = Egress::new(Lan::Refused, Vec::new());
        assert_eq!(egress.sees_nat(), rustix::process::geteuid().is_root());
    }

    /// The host's own addresses are refused by the kernel's answer, loopback and private
    /// ranges by the policy; a private nameserver of the host's on port 53 only.
    #[test]
    fn host_addresses_private_ranges_and_nameservers() {
        let egress = Egress::new(Lan::Refused, vec!["10.255.255.53".parse().unwrap()]);
        let at = |text: &str| text.parse::<SocketAddr>().unwrap();
        assert_eq!(egress.refusal(at("127.0.0.1:80")), Some("the host's loopback"));
        assert_eq!(egress.refusal(at("10.99.0.55:18099")), Some("a private (LAN) address"));
        assert_eq!(egress.refusal(at("10.255.255.53:53")), None);
        assert_eq!(egress.refusal(at("10.255.255.53:80")), Some("a private (LAN) address"));
        // Every address of this machine's local table: its own.
        let local = engine_detect::netlink::host_local_ranges().unwrap();
        let public = local.iter().filter(|c| !c.addr.is_loopback());
        for range in public.filter(|c| sandbox_core::net_refusal(c.addr, Lan::Allowed).is_none()) {
            let lan = Egress::new(Lan::Allowed, Vec::new());
            let dest = SocketAddr::new(range.addr, 80);
            assert_eq!(lan.refusal(dest), Some("one of the host's own addresses"), "{dest}");
        }
    }
}
