//! The built-in relay: full outbound TCP and UDP for a net-on sandbox on a machine without
//! pasta, from this process, with the built-in proxy's policy.
//!
//! **How.** A short-lived helper joins the sandbox's network namespace (through its owning user
//! namespace, which gives it `CAP_NET_ADMIN` there, as [`crate::listen_in`]'s does), makes a
//! tun device (`psbx0`, [`SANDBOX_IP`], the default route), and hands its descriptor back over
//! a socket pair. A thread of this process (a run's) or a keeper process (a session's, which
//! outlives this process: [`crate::ProxyServer::relay_keeper`]) then reads the sandbox's IPv4
//! packets from it:
//!
//! - a TCP `SYN` starts a non-blocking connect from the host's namespace to its destination;
//!   once that connection is up, a smoltcp socket listening on exactly that destination takes
//!   the held `SYN`, and the two are spliced. A refused destination or a failed connect answers
//!   the `SYN` with a reset, so the script sees `ECONNREFUSED` at its `connect`, as it would on
//!   the host.
//! - a UDP datagram goes out through a host socket connected to its destination (one per
//!   source and destination, idle ones closed); what comes back is written to the tun as a
//!   datagram from that destination. DNS is one such flow to the host's nameserver.
//! - a nameserver on the host's loopback (`systemd-resolved`'s `127.0.0.53`, which the
//!   sandbox reads in the host's `resolv.conf`) would be the sandbox's own loopback, so the
//!   helper also binds a datagram socket at that address inside (a door), and the relay
//!   forwards what arrives there to the host's nameserver and the answers back.
//! - anything else (ICMP, IPv6, fragments) is dropped: the script sees no route or a timeout.
//! - a published port (`--publish`) is a listening socket on the host, bound by the caller
//!   before the sandbox starts (a busy port is refused with nothing run). A connection
//!   accepted there becomes a smoltcp socket connecting from the relay's address to the
//!   sandbox's address at the declared port, spliced with the accepted one. A server in the
//!   sandbox listens on `0.0.0.0` (or [`SANDBOX_IP`]), as in a container.
//!
//! **The wall.** The sandbox still has its own network namespace with nothing of the host in
//! it. Every destination is checked ([`crate::egress`], the proxy's checks: unspecified,
//! loopback, link-local and metadata, multicast, broadcast, any address the kernel routes to
//! the host itself, and private ranges unless the user allows the LAN, refused; the host's
//! nameservers reachable on port 53) before a host socket is made for it, each host socket is
//! connected to that one checked address, so nothing the script sends later can redirect it,
//! and where the host's NAT sent the first packet is checked before the flow is opened to the
//! sandbox (a TCP flow's `SYN` answered; a UDP flow sends an empty datagram first). Nothing
//! inbound reaches the sandbox but replies on its own flows and connections to the ports it
//! published, each only to its declared port. No host descriptor enters the
//! sandbox: the tun is this process's, and the device lives in the sandbox's namespace only. The one way to the host's loopback is a door: well-formed DNS
//! queries ([`is_dns_query`]) to the port-53 address of a nameserver the host's `resolv.conf`
//! names there, nothing else (the host's own lookups, which the proxy makes for the sandbox
//! too, go the same way).
//!
//! **Limits.** IPv4 only (a script's IPv6 connects find no route, and clients fall back to
//! IPv4), no ICMP, published ports TCP only, and a door takes DNS over UDP only (an answer too
//! big for a datagram, which the resolver would ask again over TCP, fails).

#![allow(unsafe_code)]

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant as Clock};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{self, Checksum, ChecksumCapabilities, DeviceCapabilities, Medium};
use smoltcp::socket::tcp;
use smoltcp::time::Instant;
use smoltcp::wire::{
    HardwareAddress, IpAddress, IpCidr, IpListenEndpoint, IpProtocol, Ipv4Packet, Ipv4Repr,
    TcpPacket, UdpPacket, UdpRepr,
};

use sandbox_core::{Allow, FlowName, HttpRequests, Lan, NetRefused, Sniffed, other_host};

use crate::egress::Egress;
use crate::error::{Error, Result};
use crate::nat::Proto;

/// The sandbox's address on its tun device (QEMU's and slirp4netns's guest address, which
/// users may recognise).
pub const SANDBOX_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 15);
/// The relay's own address, seen by nothing but smoltcp (it answers for every destination).
const RELAY_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
/// The tun device's name inside the sandbox.
const DEVICE: &[u8] = b"psbx0";
/// pasta's MTU: fewer, larger packets through the relay.
const MTU: usize = 65520;
/// Each direction of a TCP flow (the window the script sees).
const TCP_BUFFER: usize = 128 * 1024;
/// A UDP flow without traffic this long is closed.
const UDP_IDLE: Duration = Duration::from_secs(60);
/// At most this many UDP flows at once; the least recently used goes first.
const UDP_FLOWS: usize = 128;
/// At most this many TCP flows at once (uv downloads through 50); more `SYN`s are reset. Each
/// holds a host descriptor and up to twice [`TCP_BUFFER`] of this process's memory, which the
/// sandbox's limits do not cover.
const TCP_FLOWS: usize = 256;
/// A TCP flow whose sandbox side leaves sent data unacknowledged this long is reset.
const TCP_STALLED: Duration = Duration::from_secs(120);
/// The relay's source ports for connections into the sandbox (the ephemeral range).
const INBOUND_PORTS: (u16, u16) = (49_152, 65_535);

/// A smoltcp socket for one flow, either way.
fn flow_socket() -> tcp::Socket<'static> {
    let mut socket = tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0; TCP_BUFFER]),
        tcp::SocketBuffer::new(vec![0; TCP_BUFFER]),
    );
    socket.set_nagle_enabled(false);
    socket.set_ack_delay(None);
    socket.set_timeout(Some(smoltcp::time::Duration::from_secs(TCP_STALLED.as_secs())));
    socket
}

/// Whether this process gives a sandbox without pasta the relay: a tun device it may open (a
/// root caller's helper opens it as host root, anyone else's as the caller), and no proxy of
/// the host's own to chain through ([`engine_detect::relay_possible`]).
pub fn relay_available() -> bool {
    engine_detect::relay_possible()
}

/// The relay of one sandbox: a thread serving its tun device, ended (and joined) when dropped.
#[derive(Debug)]
pub struct Relay {
    stop: Option<OwnedFd>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Relay {
    /// Gives the network namespace `netns` (a sandbox's, holding nothing but its loopback) a
    /// tun device and serves it (see the module docs). Each of `nameservers` (on the host's
    /// loopback: [`loopback_nameservers`]) is served at the same address on the sandbox's
    /// loopback, its datagrams forwarded to the host's. Private ranges are reached only when
    /// `lan` allows them.
    pub fn attach(netns: &std::fs::File, nameservers: &[SocketAddr], lan: Lan) -> Result<Relay> {
        Relay::attach_publishing(netns, nameservers, Vec::new(), lan, None)
    }

    /// [`Relay::attach`] holding an allowlist: DNS answered only for listed names, each TCP
    /// flow let through only for a listed name (its TLS SNI or HTTP `Host`) on an address the
    /// sandbox's DNS answered for it, or a listed address; the rest refused into `listed`.
    pub fn attach_listed(
        netns: &std::fs::File,
        nameservers: &[SocketAddr],
        lan: Lan,
        listed: Listed,
    ) -> Result<Relay> {
        Relay::attach_publishing(netns, nameservers, Vec::new(), lan, Some(listed))
    }

    /// [`Relay::attach`] that also carries connections to each of `inbound` (from
    /// [`listen_published`]) into the sandbox, to its port.
    pub fn attach_publishing(
        netns: &std::fs::File,
        nameservers: &[SocketAddr],
        inbound: Vec<Inbound>,
        lan: Lan,
        listed: Option<Listed>,
    ) -> Result<Relay> {
        let (tun, doors) = tun_in(netns, nameservers)?;
        let (stop_read, stop_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| Error::io("creating the relay's stop pipe")(e.into()))?;
        let thread = std::thread::Builder::new()
            .name("builtin-relay".into())
            .spawn(move || serve(tun, doors, inbound, stop_read, lan, listed))
            .map_err(Error::io("starting the relay's thread"))?;
        Ok(Relay { stop: Some(stop_write), thread: Some(thread) })
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        // EOF on the pipe ends the loop; every host socket closes with it.
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// An allowlist a relay holds (`net = [patterns]`, see [`sandbox_core::Allow`]) and what it
/// refused, for the run's report. Cloned handles share the refusals.
///
/// A session's list is held by its keeper, another process, for the session's whole life:
/// its refusals go to a journal file as well ([`Listed::journal`]), one JSON line each, which
/// the command that ran a script reads from where it stood before ([`journal_since`]).
#[derive(Debug, Clone)]
pub struct Listed {
    allow: Allow,
    refused: Arc<Mutex<Vec<NetRefused>>>,
    /// Where the keeper writes the journal (passed to it by path).
    journal: Option<std::path::PathBuf>,
    /// The keeper's open journal.
    journal_file: Option<Arc<Mutex<std::fs::File>>>,
}

/// At most this many distinct refusals are kept for the report.
const REFUSALS_KEPT: usize = 64;

/// A journal longer than this starts over (its readers then read it from the start).
const JOURNAL_CAP: u64 = 256 * 1024;

impl Listed {
    /// A relay's hold of `allow`.
    pub fn new(allow: Allow) -> Listed {
        Listed { allow, refused: Arc::default(), journal: None, journal_file: None }
    }

    /// The same hold, its refusals journaled at `path` by the session's keeper (a file in a
    /// directory only the caller may write).
    pub fn journal(self, path: std::path::PathBuf) -> Listed {
        Listed { journal: Some(path), ..self }
    }

    /// The journal's path, for the keeper's arguments.
    pub(crate) fn journal_path(&self) -> Option<&std::path::Path> {
        self.journal.as_deref()
    }

    /// In the keeper: journal every refusal (each time, not once: every script of the session
    /// is told of its own) to `file`, opened for appending.
    pub(crate) fn journaling(self, file: std::fs::File) -> Listed {
        Listed { journal_file: Some(Arc::new(Mutex::new(file))), ..self }
    }

    /// The list.
    pub fn allow(&self) -> &Allow {
        &self.allow
    }

    /// What was refused so far, each once, in order.
    pub fn refused(&self) -> Vec<NetRefused> {
        self.refused.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The checks for the addresses the list names: private ones reachable when the caller
    /// gave the list ([`Allow::opens_private`]), else as `lan` says; the host itself,
    /// loopback and link-local stay refused either way.
    pub(crate) fn egress(&self, lan: Lan, nameservers: Vec<IpAddr>) -> Egress {
        Egress::new(if self.allow.opens_private() { Lan::Allowed } else { lan }, nameservers)
    }

    pub(crate) fn refuse(&self, refusal: NetRefused) {
        if let Some(file) = &self.journal_file {
            let file = file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Ok(mut line) = serde_json::to_vec(&refusal) {
                line.push(b'\n');
                if file.metadata().is_ok_and(|m| m.len() > JOURNAL_CAP) {
                    let _ = file.set_len(0);
                }
                // One write of an appending file: a reader never sees half of another line.
                let _ = std::io::Write::write_all(&mut &*file, &line);
            }
        }
        keep(&mut self.refused.lock().unwrap_or_else(std::sync::PoisonError::into_inner), refusal);
    }
}

/// Adds `refusal` to a report's `refused` unless it is there already or the report is full.
fn keep(refused: &mut Vec<NetRefused>, refusal: NetRefused) {
    if refused.len() < REFUSALS_KEPT && !refused.contains(&refusal) {
        refused.push(refusal);
    }
}

/// The end of a session's refusal journal ([`Listed::journal`]), to read from after a script.
pub fn journal_end(path: &std::path::Path) -> u64 {
    std::fs::symlink_metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The distinct refusals a session's journal got since `from` ([`journal_end`] before the
/// script), at most as many as a run reports; all of it when it started over meanwhile.
pub fn journal_since(path: &std::path::Path, from: u64) -> Vec<NetRefused> {
    use std::io::{Read, Seek};
    let Ok(mut file) = std::fs::File::open(path) else { return Vec::new() };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let from = if len < from { 0 } else { from };
    let mut text = Vec::new();
    if file.seek(std::io::SeekFrom::Start(from)).is_err()
        || file.take(JOURNAL_CAP * 2).read_to_end(&mut text).is_err()
    {
        return Vec::new();
    }
    let mut refused: Vec<NetRefused> = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        if let Ok(refusal) = serde_json::from_slice::<NetRefused>(line) {
            keep(&mut refused, refusal);
        }
    }
    refused
}

/// A published port as the relay serves it: the host's listening socket and the port inside.
#[derive(Debug)]
pub struct Inbound {
    pub(crate) listener: OwnedFd,
    pub(crate) port: u16,
}

/// The host side of each of `publish`: a non-blocking socket listening on its host address
/// and port, for the relay to accept from. Made by the caller before the sandbox's command
/// starts, so a port taken meanwhile is the one error every engine gives for it.
pub fn listen_published(publish: &[sandbox_core::PublishedPort]) -> Result<Vec<Inbound>> {
    publish
        .iter()
        .map(|p| {
            let addr = SocketAddr::new(p.addr, p.host_port);
            let failed = |e: Errno| -> Error {
                if e == Errno::ADDRINUSE
                    && let Some(busy) = sandbox_core::busy_host_port(
                        &format!("address already in use: {addr}"),
                        publish,
                    )
                {
                    return busy.into();
                }
                Error::io(format!("listening on {addr} for published port {}", p.port))(e.into())
            };
            let family = if p.addr.is_ipv4() {
                rustix::net::AddressFamily::INET
            } else {
                rustix::net::AddressFamily::INET6
            };
            let flags = rustix::net::SocketFlags::NONBLOCK | rustix::net::SocketFlags::CLOEXEC;
            let listener =
                rustix::net::socket_with(family, rustix::net::SocketType::STREAM, flags, None)
                    .map_err(failed)?;
            // As any server: a port whose last connection is in TIME_WAIT can be bound again.
            rustix::net::sockopt::set_socket_reuseaddr(&listener, true).map_err(failed)?;
            rustix::net::bind(&listener, &addr).map_err(failed)?;
            rustix::net::listen(&listener, 128).map_err(failed)?;
            Ok(Inbound { listener, port: p.port })
        })
        .collect()
}

/// `struct ifreq`: a name, then a union (flags, an MTU or an address).
#[repr(C)]
struct IfReq {
    name: [u8; 16],
    data: [u8; 24],
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: u16 = 0x0001;
const IFF_NO_PI: u16 = 0x1000;

/// Pure: the nameservers of `resolv_conf` (a `resolv.conf`'s text) on a loopback address, at
/// port 53: the sandbox's own loopback would answer for them, so the relay serves them there.
/// At most three, as the resolver reads.
pub fn loopback_nameservers(resolv_conf: &str) -> Vec<SocketAddr> {
    sandbox_core::nameservers(resolv_conf)
        .into_iter()
        .filter(|ip| ip.is_loopback())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

/// `(family, sockaddr bytes)` of `addr`, made before the helper forks.
fn raw_sockaddr(addr: SocketAddr) -> (i32, Vec<u8>) {
    fn bytes<T>(value: &T) -> Vec<u8> {
        // SAFETY: a plain C struct, read as its bytes.
        unsafe {
            std::slice::from_raw_parts((value as *const T).cast::<u8>(), std::mem::size_of::<T>())
        }
        .to_vec()
    }
    match addr {
        SocketAddr::V4(v4) => {
            // SAFETY: all-zero is a valid sockaddr_in.
            let mut raw: libc::sockaddr_in = unsafe { std::mem::zeroed() };
            raw.sin_family = libc::AF_INET as libc::sa_family_t;
            raw.sin_port = v4.port().to_be();
            raw.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
            (libc::AF_INET, bytes(&raw))
        }
        SocketAddr::V6(v6) => {
            // SAFETY: all-zero is a valid sockaddr_in6.
            let mut raw: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
            raw.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            raw.sin6_port = v6.port().to_be();
            raw.sin6_addr.s6_addr = v6.ip().octets();
            (libc::AF_INET6, bytes(&raw))
        }
    }
}

/// A tun device in `netns`, configured as the module docs say, and a datagram socket bound to
/// each of `doors` there, with its address (one that could not be bound is left out), made by
/// a short-lived child that joins the namespace and sends the descriptors back.
pub(crate) fn tun_in(
    netns: &std::fs::File,
    doors: &[SocketAddr],
) -> Result<(OwnedFd, Vec<(OwnedFd, SocketAddr)>)> {
    let raw: Vec<(i32, Vec<u8>)> = doors.iter().map(|d| raw_sockaddr(*d)).collect();
    // SAFETY: raw syscalls on stack memory and on descriptors that are open in the child.
    let made = crate::net::made_in(netns, "the relay's device", doors.len(), move |chan| unsafe {
        let fail = || Err(std::io::Error::last_os_error());
        let tun =
            libc::open(c"/dev/net/tun".as_ptr(), libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC);
        if tun < 0 {
            return fail();
        }
        let mut req = IfReq { name: [0; 16], data: [0; 24] };
        req.name[..DEVICE.len()].copy_from_slice(DEVICE);
        req.data[..2].copy_from_slice(&(IFF_TUN | IFF_NO_PI).to_ne_bytes());
        if libc::ioctl(tun, TUNSETIFF as _, &raw mut req) != 0 {
            return fail();
        }
        let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return fail();
        }
        let sockaddr = |ip: Ipv4Addr| {
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            addr.sin_family = libc::AF_INET as libc::sa_family_t;
            addr.sin_addr.s_addr = u32::from_ne_bytes(ip.octets());
            addr
        };
        let with = |data: &[u8]| {
            let mut req = IfReq { name: [0; 16], data: [0; 24] };
            req.name[..DEVICE.len()].copy_from_slice(DEVICE);
            req.data[..data.len()].copy_from_slice(data);
            req
        };
        let as_bytes = |addr: &libc::sockaddr_in| {
            std::slice::from_raw_parts(
                (addr as *const libc::sockaddr_in).cast::<u8>(),
                std::mem::size_of::<libc::sockaddr_in>(),
            )
            .to_vec()
        };
        let mtu = MTU as i32;
        let up = (libc::IFF_UP | libc::IFF_RUNNING) as u16;
        for (request, mut req) in [
            (libc::SIOCSIFMTU, with(&mtu.to_ne_bytes())),
            (libc::SIOCSIFADDR, with(&as_bytes(&sockaddr(SANDBOX_IP)))),
            (libc::SIOCSIFNETMASK, with(&as_bytes(&sockaddr(Ipv4Addr::BROADCAST)))),
            (libc::SIOCSIFFLAGS, with(&up.to_ne_bytes())),
        ] {
            if libc::ioctl(sock, request as _, &raw mut req) != 0 {
                return fail();
            }
        }
        // The default route: everything that is not the sandbox's own goes to the device.
        let mut name = [0u8; 16];
        name[..DEVICE.len()].copy_from_slice(DEVICE);
        let mut route: libc::rtentry = std::mem::zeroed();
        let any = sockaddr(Ipv4Addr::UNSPECIFIED);
        std::ptr::write_unaligned((&raw mut route.rt_dst).cast(), any);
        std::ptr::write_unaligned((&raw mut route.rt_genmask).cast(), any);
        route.rt_flags = libc::RTF_UP;
        route.rt_dev = name.as_mut_ptr().cast();
        if libc::ioctl(sock, libc::SIOCADDRT as _, &raw mut route) != 0 {
            return fail();
        }
        libc::close(sock);
        crate::net::send_fd(chan, tun)?;
        for (family, addr) in &raw {
            let flags = libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK;
            let door = libc::socket(*family, flags, 0);
            let bound = door >= 0
                && libc::bind(door, addr.as_ptr().cast(), addr.len() as libc::socklen_t) == 0;
            crate::net::send_fd(chan, if bound { door } else { -1 })?;
        }
        Ok(())
    });
    let (tun, inside) = made?;
    let doors = inside.into_iter().zip(doors).filter_map(|(fd, addr)| Some((fd?, *addr)));
    Ok((tun, doors.collect()))
}

/// The tun device as smoltcp sees it: packets read by [`serve`] wait in `rx`; what smoltcp
/// sends is written straight to the device.
struct Tun {
    fd: OwnedFd,
    rx: VecDeque<Vec<u8>>,
}

struct Rx(Vec<u8>);
struct Tx<'a>(BorrowedFd<'a>);

impl phy::RxToken for Rx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl phy::TxToken for Tx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut packet = vec![0u8; len];
        let result = f(&mut packet);
        // A full device queue drops the packet, as a link would; TCP sends it again.
        let _ = rustix::io::write(self.0, &packet);
        result
    }
}

impl phy::Device for Tun {
    type RxToken<'a> = Rx;
    type TxToken<'a> = Tx<'a>;

    fn receive(&mut self, _: Instant) -> Option<(Rx, Tx<'_>)> {
        let packet = self.rx.pop_front()?;
        Some((Rx(packet), Tx(self.fd.as_fd())))
    }

    fn transmit(&mut self, _: Instant) -> Option<Tx<'_>> {
        Some(Tx(self.fd.as_fd()))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ip;
        caps.max_transmission_unit = MTU;
        // The kernel checksums what it writes to a tun device; smoltcp checksums its own.
        caps.checksum = checksums();
        caps
    }
}

fn checksums() -> ChecksumCapabilities {
    let mut caps = ChecksumCapabilities::default();
    caps.ipv4 = Checksum::Tx;
    caps.tcp = Checksum::Tx;
    caps.udp = Checksum::Tx;
    caps
}

/// The sandbox's end and the destination of one flow.
type Key = (SocketAddrV4, SocketAddrV4);

struct TcpFlow {
    host: OwnedFd,
    state: TcpState,
    /// The sandbox's bytes read from smoltcp and not yet written to the host (what a flow's
    /// name was read from, then what a checked HTTP connection holds back).
    pending: Vec<u8>,
    /// With an allowlist, a plain HTTP connection: every request's `Host` must be `name`.
    http: Option<(HttpRequests, String)>,
    /// The host's side sent its FIN (read returned 0).
    host_eof: bool,
    /// The sandbox's FIN was passed on (`shutdown(SHUT_WR)`).
    shut: bool,
    ready: PollFlags,
}

enum TcpState {
    /// The host's connect is under way; the sandbox's `SYN` waits for it.
    Connecting {
        syn: Vec<u8>,
    },
    Open {
        handle: SocketHandle,
    },
}

struct UdpFlow {
    host: OwnedFd,
    last: Clock,
    ready: PollFlags,
}

impl UdpFlow {
    /// Hands each datagram waiting on the host's socket to `deliver`, if it was ready.
    fn drain(&mut self, buf: &mut [u8], mut deliver: impl FnMut(&[u8])) {
        if std::mem::replace(&mut self.ready, PollFlags::empty()).is_empty() {
            return;
        }
        for _ in 0..64 {
            let n = match rustix::net::recv(&self.host, &mut *buf, rustix::net::RecvFlags::DONTWAIT)
            {
                Ok((n, _)) => n,
                Err(Errno::INTR) => continue,
                Err(_) => break,
            };
            self.last = Clock::now();
            deliver(&buf[..n]);
        }
    }
}

/// With an allowlist, a TCP connection the relay accepted itself to read the name it carries
/// before any host socket is made for it.
struct Sniff {
    handle: SocketHandle,
    buf: Vec<u8>,
    since: Clock,
}

/// How long a connection may take to say where it goes (a protocol whose server speaks first
/// never does).
const SNIFF_WAIT: Duration = Duration::from_secs(10);

/// The allowlist's state in a relay.
struct Policy {
    listed: Listed,
    /// The addresses the sandbox's DNS answered, per name.
    answered: HashMap<String, HashSet<Ipv4Addr>>,
    /// The checks for a listed address: private ones reachable when the caller gave the list
    /// (`Allow::opens_private`); the host itself, loopback and link-local stay refused.
    listed_egress: Egress,
    sniffing: HashMap<Key, Sniff>,
    /// Sockets reset by the policy, removed once their reset is sent.
    dying: Vec<SocketHandle>,
}

impl Policy {
    fn answered(&self, name: &str, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(v4) => self.answered.get(name).is_some_and(|set| set.contains(&v4)),
            IpAddr::V6(_) => false,
        }
    }

    /// Records the addresses of a DNS answer for the name it answers.
    fn learn(&mut self, answer: &[u8]) {
        let Some((name, addresses)) = sandbox_core::dns_answer(answer) else { return };
        if !self.listed.allow.resolves(&name) {
            return;
        }
        for ip in addresses {
            if let IpAddr::V4(v4) = sandbox_core::canonical_ip(ip) {
                self.answered.entry(name.clone()).or_default().insert(v4);
            }
        }
    }

    /// The NXDOMAIN answer to a query for a name not listed (recorded as refused), `Err(())`
    /// for what is not a query; `Ok(None)` lets it through.
    fn screen_query(&self, query: &[u8]) -> std::result::Result<Option<Vec<u8>>, ()> {
        let question = sandbox_core::dns_question(query).ok_or(())?;
        if self.listed.allow.resolves(&question.name) {
            return Ok(None);
        }
        self.listed.refuse(Allow::lookup_refused(&question.name));
        sandbox_core::dns_nxdomain(query).map(Some).ok_or(())
    }
}

/// A nameserver of the host's loopback, served at the same address on the sandbox's.
struct Door {
    /// Bound in the sandbox's namespace.
    inside: OwnedFd,
    upstream: SocketAddr,
}

/// One client of a [`Door`] (its index): a host socket connected to the door's upstream.
type DnsKey = (usize, SocketAddr);

/// Why the relay refuses to reach `dest` for the sandbox (`None`: it may): port 0, then
/// `egress`'s checks.
pub(crate) fn refusal(dest: SocketAddrV4, egress: &Egress) -> Option<&'static str> {
    if dest.port() == 0 {
        return Some("port 0");
    }
    egress.refusal(SocketAddr::V4(dest))
}

/// A host socket of `kind` connecting (non-blocking) to `dest`, if `egress` allows it, and
/// the host's NAT did not send its first packet somewhere refused (a UDP flow's first packet
/// is an empty datagram, sent only to ask where it went).
fn connect_out(
    dest: SocketAddrV4,
    kind: rustix::net::SocketType,
    egress: &Egress,
) -> Option<OwnedFd> {
    if refusal(dest, egress).is_some() {
        return None;
    }
    let flags = rustix::net::SocketFlags::NONBLOCK | rustix::net::SocketFlags::CLOEXEC;
    let sock =
        rustix::net::socket_with(rustix::net::AddressFamily::INET, kind, flags, None).ok()?;
    match rustix::net::connect(&sock, &dest) {
        Ok(()) | Err(Errno::INPROGRESS) => {}
        Err(_) => return None,
    }
    let proto = if kind == rustix::net::SocketType::STREAM { Proto::Tcp } else { Proto::Udp };
    if proto == Proto::Udp && egress.sees_nat() {
        rustix::net::send(&sock, &[], rustix::net::SendFlags::DONTWAIT).ok()?;
    }
    match egress.after_nat(proto, &sock, SocketAddr::V4(dest)) {
        Some(_) => None,
        None => Some(sock),
    }
}

/// With an allowlist, the checks for a `SYN` to `dest` the relay does not read a name for: a
/// listed address's (which may be private), or `None` (refused, and recorded).
fn listed_syn(policy: &Policy, dest: SocketAddrV4) -> Option<&Egress> {
    let ip = IpAddr::V4(*dest.ip());
    if policy.listed.allow.by_address(ip, dest.port()).is_some() {
        if let Some(why) = policy.listed_egress.refusal(SocketAddr::V4(dest)) {
            policy.listed.refuse(NetRefused {
                host: ip.to_string(),
                port: Some(dest.port()),
                reason: match sandbox_core::net_refusal(ip, Lan::Allowed) {
                    // Private: the script's own list cannot open it; the caller's can.
                    None => format!("{why}, which a script's own list cannot open (`--net` can)"),
                    Some(_) => why.to_owned(),
                },
                would_allow: None,
            });
            return None;
        }
        return Some(&policy.listed_egress);
    }
    policy.listed.refuse(Allow::address_refused(ip, dest.port()));
    None
}

/// The relay's state: the device, smoltcp's interface and sockets, and the flows through it.
struct Flows {
    dev: Tun,
    iface: Interface,
    sockets: SocketSet<'static>,
    tcp: HashMap<Key, TcpFlow>,
    udp: HashMap<Key, UdpFlow>,
    doors: Vec<Door>,
    /// Doors with datagrams waiting.
    doors_ready: Vec<bool>,
    dns: HashMap<DnsKey, UdpFlow>,
    /// The published ports' host listeners.
    inbound: Vec<Inbound>,
    /// Listeners with connections waiting.
    inbound_ready: Vec<bool>,
    /// The relay's next source port for a connection into the sandbox.
    next_port: u16,
    start: Clock,
    egress: Egress,
    policy: Option<Policy>,
}

/// The relay's loop (see the module docs) over `tun` and `doors` (bound inside, and their
/// upstream), until `stop` reports EOF (or, a session keeper's pidfd, its process's exit).
pub(crate) fn serve(
    tun: OwnedFd,
    doors: Vec<(OwnedFd, SocketAddr)>,
    inbound: Vec<Inbound>,
    stop: OwnedFd,
    lan: Lan,
    listed: Option<Listed>,
) {
    let nameservers = crate::egress::host_nameservers();
    let policy = listed.map(|listed| Policy {
        listed_egress: listed.egress(lan, nameservers.clone()),
        listed,
        answered: HashMap::new(),
        sniffing: HashMap::new(),
        dying: Vec::new(),
    });
    let doors: Vec<Door> =
        doors.into_iter().map(|(inside, upstream)| Door { inside, upstream }).collect();
    let start = Clock::now();
    let mut dev = Tun { fd: tun, rx: VecDeque::new() };
    let mut config = Config::new(HardwareAddress::Ip);
    config.random_seed = std::collections::hash_map::RandomState::new().build_hasher().finish();
    let mut iface = Interface::new(config, &mut dev, Instant::from_micros(0));
    iface.update_ip_addrs(|addrs| {
        let _ = addrs.push(IpCidr::new(IpAddress::Ipv4(RELAY_IP), 24));
    });
    iface.set_any_ip(true);
    let mut relay = Flows {
        dev,
        iface,
        sockets: SocketSet::new(Vec::new()),
        tcp: HashMap::new(),
        udp: HashMap::new(),
        doors_ready: vec![false; doors.len()],
        doors,
        dns: HashMap::new(),
        inbound_ready: vec![false; inbound.len()],
        inbound,
        next_port: INBOUND_PORTS.0,
        start,
        egress: Egress::new(lan, nameservers),
        policy,
    };
    let mut packet = vec![0u8; MTU];
    let mut timeout = Some(Duration::ZERO);
    loop {
        if !relay.wait(&stop, timeout) {
            return;
        }
        relay.read_device(&mut packet);
        relay.accept_inbound();
        relay.complete_connects();
        relay.poll();
        relay.pump_sniffs();
        relay.pump_tcp();
        relay.poll();
        relay.pump_udp(&mut packet);
        relay.pump_dns(&mut packet);
        relay.sweep();
        let now = relay.now();
        timeout = relay
            .iface
            .poll_delay(now, &relay.sockets)
            .map(|d| Duration::from_micros(d.total_micros()));
        if !relay.udp.is_empty() || !relay.dns.is_empty() {
            timeout = Some(timeout.map_or(UDP_IDLE, |t| t.min(UDP_IDLE)));
        }
        // A connection held for its name is given up after `SNIFF_WAIT` even if nothing
        // else wakes the loop.
        if relay.policy.as_ref().is_some_and(|p| !p.sniffing.is_empty()) {
            let tick = Duration::from_secs(1);
            timeout = Some(timeout.map_or(tick, |t| t.min(tick)));
        }
    }
}

impl Flows {
    fn now(&self) -> Instant {
        Instant::from_micros(i64::try_from(self.start.elapsed().as_micros()).unwrap_or(i64::MAX))
    }

    fn poll(&mut self) {
        let now = self.now();
        self.iface.poll(now, &mut self.dev, &mut self.sockets);
    }

    /// Waits for the device, a flow's host socket or `timeout`, and notes what is ready on
    /// each flow. `false` once `stop` says the run is over.
    fn wait(&mut self, stop: &OwnedFd, timeout: Option<Duration>) -> bool {
        let sockets = &self.sockets;
        let tcp_interest = |flow: &TcpFlow| match &flow.state {
            TcpState::Connecting { .. } => PollFlags::OUT,
            TcpState::Open { handle } => {
                let socket = sockets.get::<tcp::Socket>(*handle);
                let mut want = PollFlags::empty();
                if !flow.host_eof && socket.can_send() {
                    want |= PollFlags::IN;
                }
                if socket.can_recv() || !flow.pending.is_empty() {
                    want |= PollFlags::OUT;
                }
                want
            }
        };
        let mut tcp_keys = Vec::new();
        let mut fds =
            vec![PollFd::new(stop, PollFlags::IN), PollFd::new(&self.dev.fd, PollFlags::IN)];
        // Only sockets with something wanted: a closed one reports POLLHUP whatever it is
        // asked, and would spin the loop.
        for (key, flow) in &self.tcp {
            let want = tcp_interest(flow);
            if !want.is_empty() {
                tcp_keys.push(*key);
                fds.push(PollFd::new(&flow.host, want));
            }
        }
        let udp_keys: Vec<Key> = self.udp.keys().copied().collect();
        fds.extend(self.udp.values().map(|flow| PollFd::new(&flow.host, PollFlags::IN)));
        fds.extend(self.doors.iter().map(|door| PollFd::new(&door.inside, PollFlags::IN)));
        fds.extend(self.inbound.iter().map(|i| PollFd::new(&i.listener, PollFlags::IN)));
        let dns_keys: Vec<DnsKey> = self.dns.keys().copied().collect();
        fds.extend(self.dns.values().map(|flow| PollFd::new(&flow.host, PollFlags::IN)));
        let timespec = timeout.map(|t| Timespec {
            tv_sec: i64::try_from(t.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(t.subsec_nanos()),
        });
        match rustix::event::poll(&mut fds, timespec.as_ref()) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(_) => return false,
        }
        if !fds[0].revents().is_empty() {
            return false;
        }
        let ready: Vec<PollFlags> = fds[2..].iter().map(PollFd::revents).collect();
        drop(fds);
        let (tcp_ready, rest) = ready.split_at(tcp_keys.len());
        let (udp_ready, rest) = rest.split_at(udp_keys.len());
        let (doors_ready, rest) = rest.split_at(self.doors.len());
        let (inbound_ready, dns_ready) = rest.split_at(self.inbound.len());
        for (door, ready) in self.doors_ready.iter_mut().zip(doors_ready) {
            *door = !ready.is_empty();
        }
        for (listener, ready) in self.inbound_ready.iter_mut().zip(inbound_ready) {
            *listener = !ready.is_empty();
        }
        for (key, ready) in dns_keys.iter().zip(dns_ready) {
            if let Some(flow) = self.dns.get_mut(key) {
                flow.ready = *ready;
            }
        }
        for (key, ready) in tcp_keys.iter().zip(tcp_ready) {
            if let Some(flow) = self.tcp.get_mut(key) {
                flow.ready = *ready;
            }
        }
        for (key, ready) in udp_keys.iter().zip(udp_ready) {
            if let Some(flow) = self.udp.get_mut(key) {
                flow.ready = *ready;
            }
        }
        true
    }

    /// Takes in what the sandbox sent: new flows start here, the rest goes to smoltcp.
    fn read_device(&mut self, buf: &mut [u8]) {
        for _ in 0..256 {
            let n = match rustix::io::read(&self.dev.fd, &mut *buf) {
                Ok(n) => n,
                Err(Errno::INTR) => continue,
                Err(_) => return,
            };
            self.packet(&buf[..n]);
        }
    }

    fn packet(&mut self, packet: &[u8]) {
        let Ok(ip) = Ipv4Packet::new_checked(packet) else { return };
        if ip.more_frags() || ip.frag_offset() != 0 {
            return;
        }
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        match ip.next_header() {
            IpProtocol::Tcp => {
                let Ok(tcp) = TcpPacket::new_checked(ip.payload()) else { return };
                let key = (
                    SocketAddrV4::new(src, tcp.src_port()),
                    SocketAddrV4::new(dst, tcp.dst_port()),
                );
                if tcp.syn()
                    && !tcp.ack()
                    && !self.tcp.contains_key(&key)
                    && self.sniff(key, packet)
                {
                    return;
                }
                match self.tcp.get(&key) {
                    // A `SYN` sent again while the host's connect is under way.
                    Some(TcpFlow { state: TcpState::Connecting { .. }, .. }) => {}
                    None if tcp.syn() && !tcp.ack() => {
                        let egress = match &self.policy {
                            Some(policy) => listed_syn(policy, key.1),
                            None => Some(&self.egress),
                        };
                        let host = (self.tcp.len() < TCP_FLOWS)
                            .then_some(egress)
                            .flatten()
                            .and_then(|egress| {
                                connect_out(key.1, rustix::net::SocketType::STREAM, egress)
                            });
                        match host {
                            Some(host) => {
                                let state = TcpState::Connecting { syn: packet.to_vec() };
                                let flow = TcpFlow {
                                    host,
                                    state,
                                    pending: Vec::new(),
                                    http: None,
                                    host_eof: false,
                                    shut: false,
                                    ready: PollFlags::empty(),
                                };
                                self.tcp.insert(key, flow);
                            }
                            // No socket takes it: smoltcp resets it.
                            None => self.dev.rx.push_back(packet.to_vec()),
                        }
                    }
                    _ => self.dev.rx.push_back(packet.to_vec()),
                }
            }
            IpProtocol::Udp => {
                let Ok(udp) = UdpPacket::new_checked(ip.payload()) else { return };
                let key = (
                    SocketAddrV4::new(src, udp.src_port()),
                    SocketAddrV4::new(dst, udp.dst_port()),
                );
                self.udp_out(key, udp.payload());
            }
            _ => {}
        }
    }

    fn udp_out(&mut self, key: Key, payload: &[u8]) {
        if let Some(policy) = &self.policy {
            let dest = SocketAddr::V4(key.1);
            let listed = policy.listed.allow.by_address(dest.ip(), dest.port()).is_some();
            if !listed {
                // Only DNS to the host's nameservers, and only for listed names.
                if key.1.port() != 53 || !self.egress.is_nameserver(dest.ip()) {
                    policy.listed.refuse(Allow::address_refused(dest.ip(), dest.port()));
                    return;
                }
                match policy.screen_query(payload) {
                    Err(()) => return,
                    Ok(Some(nxdomain)) => {
                        if let Some(datagram) = datagram(key.1, key.0, &nxdomain) {
                            let _ = rustix::io::write(&self.dev.fd, &datagram);
                        }
                        return;
                    }
                    Ok(None) => {}
                }
            }
        }
        if !self.udp.contains_key(&key) {
            if self.udp.len() >= UDP_FLOWS
                && let Some(oldest) = self.udp.iter().min_by_key(|(_, f)| f.last).map(|(k, _)| *k)
            {
                self.udp.remove(&oldest);
            }
            let egress = match &self.policy {
                Some(policy) if key.1.port() != 53 => &policy.listed_egress,
                _ => &self.egress,
            };
            let Some(host) = connect_out(key.1, rustix::net::SocketType::DGRAM, egress) else {
                return;
            };
            self.udp.insert(key, UdpFlow { host, last: Clock::now(), ready: PollFlags::empty() });
        }
        if let Some(flow) = self.udp.get_mut(&key) {
            flow.last = Clock::now();
            let _ = rustix::net::send(&flow.host, payload, rustix::net::SendFlags::DONTWAIT);
        }
    }

    /// Host connects that finished: a listener takes the held `SYN`, or a reset answers it.
    /// One held `SYN` per destination at a time, so that each meets its own listener (and a
    /// failed one, none).
    fn complete_connects(&mut self) {
        let mut listening = HashSet::new();
        let mut failed = Vec::new();
        for (key, flow) in &mut self.tcp {
            let TcpState::Connecting { syn } = &mut flow.state else { continue };
            if flow.ready.is_empty() || listening.contains(&key.1) {
                continue;
            }
            let syn = std::mem::take(syn);
            listening.insert(key.1);
            if !matches!(rustix::net::sockopt::socket_error(&flow.host), Ok(Ok(()))) {
                self.dev.rx.push_back(syn);
                failed.push(*key);
                continue;
            }
            let mut socket = flow_socket();
            let endpoint =
                IpListenEndpoint { addr: Some(IpAddress::Ipv4(*key.1.ip())), port: key.1.port() };
            if socket.listen(endpoint).is_err() {
                self.dev.rx.push_back(syn);
                failed.push(*key);
                continue;
            }
            flow.state = TcpState::Open { handle: self.sockets.add(socket) };
            flow.ready = PollFlags::empty();
            self.dev.rx.push_back(syn);
        }
        for key in failed {
            self.tcp.remove(&key);
        }
    }

    /// Connections to a published port: each accepted one becomes a flow whose smoltcp socket
    /// connects from the relay's address to the sandbox's, at the port declared for that
    /// listener and nowhere else.
    fn accept_inbound(&mut self) {
        let mut accepted = Vec::new();
        for (inbound, ready) in self.inbound.iter().zip(self.inbound_ready.iter_mut()) {
            if !std::mem::take(ready) {
                continue;
            }
            for _ in 0..64 {
                let flags = rustix::net::SocketFlags::NONBLOCK | rustix::net::SocketFlags::CLOEXEC;
                match rustix::net::accept_with(&inbound.listener, flags) {
                    Ok(host) => accepted.push((host, inbound.port)),
                    Err(Errno::INTR) => {}
                    Err(_) => break,
                }
            }
        }
        for (host, port) in accepted {
            // Over the limit the connection is closed at once (dropped), as a full backlog.
            if self.tcp.len() >= TCP_FLOWS {
                continue;
            }
            let inside = SocketAddrV4::new(SANDBOX_IP, port);
            let Some(local) = self.free_port(inside) else { continue };
            let mut socket = flow_socket();
            let local_end =
                IpListenEndpoint { addr: Some(IpAddress::Ipv4(RELAY_IP)), port: local.port() };
            let remote = (IpAddress::Ipv4(SANDBOX_IP), port);
            if socket.connect(self.iface.context(), remote, local_end).is_err() {
                continue;
            }
            let handle = self.sockets.add(socket);
            let flow = TcpFlow {
                host,
                state: TcpState::Open { handle },
                pending: Vec::new(),
                http: None,
                host_eof: false,
                shut: false,
                ready: PollFlags::empty(),
            };
            // Keyed as the sandbox's packets of it will be: from its port, to the relay's.
            self.tcp.insert((inside, local), flow);
        }
    }

    /// A source port of the relay's for a new connection to `inside`, not in use for it.
    fn free_port(&mut self, inside: SocketAddrV4) -> Option<SocketAddrV4> {
        let (first, last) = INBOUND_PORTS;
        for _ in first..=last {
            let port = self.next_port;
            self.next_port = if port >= last { first } else { port + 1 };
            let local = SocketAddrV4::new(RELAY_IP, port);
            if !self.tcp.contains_key(&(inside, local)) {
                return Some(local);
            }
        }
        None
    }

    /// With an allowlist, a `SYN` to an address the sandbox's DNS answered for a listed name
    /// (and not listed itself): the relay takes the connection itself and reads its first
    /// bytes for the name before any host socket is made ([`Flows::pump_sniffs`]). `true`
    /// when the packet was taken so (or belongs to such a connection already).
    fn sniff(&mut self, key: Key, packet: &[u8]) -> bool {
        let Some(policy) = self.policy.as_mut() else { return false };
        if policy.sniffing.contains_key(&key) {
            self.dev.rx.push_back(packet.to_vec());
            return true;
        }
        let dest = key.1;
        let listed = policy.listed.allow.by_address(IpAddr::V4(*dest.ip()), dest.port());
        // The names the sandbox's DNS answered with this address (none: not the relay's to
        // read; the SYN path refuses it unless it is listed).
        let names: Vec<&String> = policy
            .answered
            .iter()
            .filter(|(_, at)| at.contains(dest.ip()))
            .map(|(name, _)| name)
            .collect();
        if listed.is_some() || names.is_empty() {
            return false;
        }
        // No name answered at this address is listed on this port: refused at once, as a
        // closed port (`ECONNREFUSED`), before anything is read.
        if !names.iter().any(|name| policy.listed.allow.name_on_port(name, dest.port())) {
            if let Some(name) = names.first() {
                policy.listed.refuse(NetRefused {
                    host: (*name).clone(),
                    port: Some(dest.port()),
                    reason: "not in the list".to_owned(),
                    would_allow: Some(format!("{name}:{}", dest.port())),
                });
            }
            // No socket takes it: smoltcp resets it.
            self.dev.rx.push_back(packet.to_vec());
            return true;
        }
        if self.tcp.len() + policy.sniffing.len() >= TCP_FLOWS {
            self.dev.rx.push_back(packet.to_vec());
            return true;
        }
        let mut socket = flow_socket();
        let endpoint =
            IpListenEndpoint { addr: Some(IpAddress::Ipv4(*dest.ip())), port: dest.port() };
        if socket.listen(endpoint).is_ok() {
            let handle = self.sockets.add(socket);
            policy.sniffing.insert(key, Sniff { handle, buf: Vec::new(), since: Clock::now() });
        }
        self.dev.rx.push_back(packet.to_vec());
        true
    }

    /// Reads what each connection held for its name has sent; once its name is known (or
    /// cannot be), the allowlist decides: a host socket to its destination, the bytes read
    /// sent on first, or a reset (recorded).
    fn pump_sniffs(&mut self) {
        let Some(policy) = self.policy.as_mut() else { return };
        let mut decided = Vec::new();
        for (key, sniff) in &mut policy.sniffing {
            let socket = self.sockets.get_mut::<tcp::Socket>(sniff.handle);
            while socket.can_recv() && sniff.buf.len() < sandbox_core::SNIFF_LIMIT {
                let room = sandbox_core::SNIFF_LIMIT - sniff.buf.len();
                let buf = &mut sniff.buf;
                let _ = socket.recv(|data| {
                    let n = data.len().min(room);
                    buf.extend_from_slice(&data[..n]);
                    (n, ())
                });
            }
            let opening = matches!(socket.state(), tcp::State::Listen | tcp::State::SynReceived);
            let name = match sandbox_core::flow_name(&sniff.buf) {
                Sniffed::Done(name) => Some(name),
                Sniffed::More if sniff.since.elapsed() > SNIFF_WAIT => Some(FlowName::None),
                // Closed before saying anything, or a listener that never took its `SYN`.
                Sniffed::More if !opening && !socket.may_recv() => Some(FlowName::None),
                Sniffed::More if opening && sniff.since.elapsed() > SNIFF_WAIT => {
                    Some(FlowName::None)
                }
                Sniffed::More => None,
            };
            if let Some(name) = name {
                decided.push((*key, name));
            }
        }
        for (key, name) in decided {
            let Some(sniff) = policy.sniffing.remove(&key) else { continue };
            let dest = key.1;
            let ip = IpAddr::V4(*dest.ip());
            let verdict =
                policy.listed.allow.flow(ip, dest.port(), &name, |n, at| policy.answered(n, at));
            let host = match verdict {
                // A name takes a flow to a public address only: `self.egress`.
                Ok(_) => connect_out(dest, rustix::net::SocketType::STREAM, &self.egress),
                Err(refusal) => {
                    policy.listed.refuse(refusal);
                    None
                }
            };
            // A plain HTTP connection: every later request must name the same host.
            let http = match (&name, sniff.buf.first()) {
                (FlowName::Name(name), Some(first)) if *first != 0x16 => {
                    let mut requests = HttpRequests::default();
                    let step = requests.feed(&sniff.buf);
                    match other_host(&step, name, dest.port()) {
                        None => Some((requests, name.clone())),
                        Some(refusal) => {
                            policy.listed.refuse(refusal);
                            self.sockets.get_mut::<tcp::Socket>(sniff.handle).abort();
                            policy.dying.push(sniff.handle);
                            continue;
                        }
                    }
                }
                _ => None,
            };
            match host {
                Some(host) => {
                    let flow = TcpFlow {
                        host,
                        state: TcpState::Open { handle: sniff.handle },
                        pending: sniff.buf,
                        http,
                        host_eof: false,
                        shut: false,
                        ready: PollFlags::empty(),
                    };
                    self.tcp.insert(key, flow);
                }
                None => {
                    self.sockets.get_mut::<tcp::Socket>(sniff.handle).abort();
                    policy.dying.push(sniff.handle);
                }
            }
        }
    }

    /// Moves what each open flow can move, both ways, and passes FINs and resets on.
    fn pump_tcp(&mut self) {
        let listed = self.policy.as_ref().map(|p| &p.listed);
        for (key, flow) in &mut self.tcp {
            let TcpState::Open { handle } = flow.state else { continue };
            let socket = self.sockets.get_mut::<tcp::Socket>(handle);
            // A listener that did not take its `SYN`: nothing will come of it.
            if socket.state() == tcp::State::Listen {
                socket.abort();
                continue;
            }
            // What was held back goes first (a connect still under way says `EAGAIN`).
            if !flow.pending.is_empty() {
                match rustix::io::write(&flow.host, &flow.pending) {
                    Ok(n) => {
                        flow.pending.drain(..n);
                    }
                    Err(Errno::AGAIN | Errno::INTR) => {}
                    Err(_) => {
                        socket.abort();
                        continue;
                    }
                }
            }
            // A checked HTTP connection: each request is read whole before it goes on, and
            // one that names another host resets the connection.
            if let Some((requests, name)) = &mut flow.http {
                let pending = &mut flow.pending;
                let mut other = None;
                while other.is_none() && pending.is_empty() && socket.can_recv() {
                    let _ = socket.recv(|data| {
                        let step = requests.feed(data);
                        other = other_host(&step, name, key.1.port());
                        if other.is_none() {
                            pending.extend_from_slice(data);
                        }
                        (data.len(), ())
                    });
                    if other.is_none()
                        && let Ok(n) = rustix::io::write(&flow.host, pending)
                    {
                        pending.drain(..n);
                    }
                }
                if let Some(refusal) = other {
                    if let Some(listed) = listed {
                        listed.refuse(refusal);
                    }
                    socket.abort();
                    continue;
                }
            }
            // The sandbox to the host.
            while flow.pending.is_empty() && flow.http.is_none() && socket.can_recv() {
                let sent = socket.recv(|data| match rustix::io::write(&flow.host, data) {
                    Ok(n) => (n, Ok(n)),
                    Err(e) => (0, Err(e)),
                });
                match sent {
                    Ok(Ok(n)) if n > 0 => {}
                    Ok(Err(Errno::AGAIN | Errno::INTR)) | Ok(Ok(_)) | Err(_) => break,
                    Ok(Err(_)) => {
                        socket.abort();
                        break;
                    }
                }
            }
            let sandbox_done = matches!(
                socket.state(),
                tcp::State::CloseWait
                    | tcp::State::LastAck
                    | tcp::State::Closing
                    | tcp::State::TimeWait
            );
            if sandbox_done && !flow.shut && socket.recv_queue() == 0 && flow.pending.is_empty() {
                let _ = rustix::net::shutdown(&flow.host, rustix::net::Shutdown::Write);
                flow.shut = true;
            }
            // The host to the sandbox.
            while !flow.host_eof && socket.can_send() {
                let got = socket.send(|space| match rustix::io::read(&flow.host, &mut *space) {
                    Ok(n) => (n, Ok(n)),
                    Err(e) => (0, Err(e)),
                });
                match got {
                    Ok(Ok(0)) => {
                        flow.host_eof = true;
                        socket.close();
                    }
                    Ok(Ok(_)) => {}
                    Ok(Err(Errno::AGAIN | Errno::INTR)) | Err(_) => break,
                    Ok(Err(_)) => {
                        socket.abort();
                        break;
                    }
                }
            }
        }
    }

    /// Replies from the host, written to the device as datagrams from the flow's destination.
    fn pump_udp(&mut self, buf: &mut [u8]) {
        let device = &self.dev.fd;
        let policy = &mut self.policy;
        for (key, flow) in &mut self.udp {
            flow.drain(buf, |payload| {
                if key.1.port() == 53
                    && let Some(policy) = policy.as_mut()
                {
                    policy.learn(payload);
                }
                if let Some(datagram) = datagram(key.1, key.0, payload) {
                    let _ = rustix::io::write(device, &datagram);
                }
            });
        }
    }

    /// Queries at the doors go to their upstream through a socket per client; answers come
    /// back to the client from the door's address.
    fn pump_dns(&mut self, buf: &mut [u8]) {
        for (index, door) in self.doors.iter().enumerate() {
            if !std::mem::take(&mut self.doors_ready[index]) {
                continue;
            }
            for _ in 0..64 {
                let flags = rustix::net::RecvFlags::DONTWAIT;
                let (n, client) = match rustix::net::recvfrom(&door.inside, &mut *buf, flags) {
                    Ok((n, _, Some(client))) => match SocketAddr::try_from(client) {
                        Ok(client) => (n, client),
                        Err(_) => continue,
                    },
                    Ok(_) | Err(Errno::INTR) => continue,
                    Err(_) => break,
                };
                // Nothing but a query reaches the host's loopback.
                if !is_dns_query(&buf[..n]) {
                    continue;
                }
                if let Some(policy) = &self.policy {
                    match policy.screen_query(&buf[..n]) {
                        Err(()) => continue,
                        Ok(Some(nxdomain)) => {
                            let flags = rustix::net::SendFlags::DONTWAIT;
                            let _ = rustix::net::sendto(&door.inside, &nxdomain, flags, &client);
                            continue;
                        }
                        Ok(None) => {}
                    }
                }
                let key = (index, client);
                if !self.dns.contains_key(&key) {
                    if self.dns.len() >= UDP_FLOWS
                        && let Some(oldest) =
                            self.dns.iter().min_by_key(|(_, f)| f.last).map(|(k, _)| *k)
                    {
                        self.dns.remove(&oldest);
                    }
                    let Some(host) = upstream(door.upstream) else { continue };
                    self.dns.insert(
                        key,
                        UdpFlow { host, last: Clock::now(), ready: PollFlags::empty() },
                    );
                }
                if let Some(flow) = self.dns.get_mut(&key) {
                    flow.last = Clock::now();
                    let _ =
                        rustix::net::send(&flow.host, &buf[..n], rustix::net::SendFlags::DONTWAIT);
                }
            }
        }
        let policy = &mut self.policy;
        for ((index, client), flow) in &mut self.dns {
            let Some(door) = self.doors.get(*index) else { continue };
            flow.drain(buf, |answer| {
                if let Some(policy) = policy.as_mut() {
                    policy.learn(answer);
                }
                let flags = rustix::net::SendFlags::DONTWAIT;
                let _ = rustix::net::sendto(&door.inside, answer, flags, client);
            });
        }
    }

    /// Flows that are over: both sides closed (or reset), or UDP left idle.
    fn sweep(&mut self) {
        if let Some(policy) = self.policy.as_mut() {
            let sockets = &mut self.sockets;
            policy.dying.retain(|handle| {
                let over = sockets.get::<tcp::Socket>(*handle).state() == tcp::State::Closed;
                if over {
                    sockets.remove(*handle);
                }
                !over
            });
        }
        let sockets = &mut self.sockets;
        self.tcp.retain(|_, flow| {
            let TcpState::Open { handle } = flow.state else { return true };
            let state = sockets.get::<tcp::Socket>(handle).state();
            let over = matches!(state, tcp::State::Closed | tcp::State::TimeWait);
            if over {
                sockets.remove(handle);
            }
            !over
        });
        let now = Clock::now();
        self.udp.retain(|_, flow| now.duration_since(flow.last) < UDP_IDLE);
        self.dns.retain(|_, flow| now.duration_since(flow.last) < UDP_IDLE);
    }
}

/// Pure: whether `message` is one standard DNS query, all of it: a header asking (not
/// answering) with opcode QUERY, one question of well-formed labels, and at most an EDNS `OPT`
/// record after it. What a door lets through to the host's loopback.
pub(crate) fn is_dns_query(message: &[u8]) -> bool {
    let word = |at: usize| message.get(at..at + 2).map(|w| u16::from_be_bytes([w[0], w[1]]));
    let (Some(flags), Some(qd), Some(an), Some(ns), Some(ar)) =
        (word(2), word(4), word(6), word(8), word(10))
    else {
        return false;
    };
    let opcode = (flags >> 11) & 0xf;
    if flags & 0x8000 != 0 || opcode != 0 || qd != 1 || an != 0 || ns != 0 || ar > 1 {
        return false;
    }
    // The name: labels of 1 to 63 bytes up to the root's empty one, 255 bytes at most.
    let mut at = 12;
    loop {
        match message.get(at) {
            Some(0) => break,
            Some(&len) if len <= 63 && at - 12 + usize::from(len) < 254 => {
                at += 1 + usize::from(len)
            }
            _ => return false,
        }
    }
    // The root label, then the type and class.
    at += 5;
    if at > message.len() {
        return false;
    }
    if ar == 0 {
        return at == message.len();
    }
    // `OPT`: the root name, type 41, class, TTL, then its data, which ends the message.
    let opt_type = word(at + 1);
    let rdlen = word(at + 9);
    match (message.get(at), opt_type, rdlen) {
        (Some(0), Some(41), Some(rdlen)) => at + 11 + usize::from(rdlen) == message.len(),
        _ => false,
    }
}

/// A host datagram socket connected to `nameserver` (one of the host's, on its loopback: the
/// one door through the policy, see [`Relay::attach`]).
fn upstream(nameserver: SocketAddr) -> Option<OwnedFd> {
    let family = match nameserver {
        SocketAddr::V4(_) => rustix::net::AddressFamily::INET,
        SocketAddr::V6(_) => rustix::net::AddressFamily::INET6,
    };
    let flags = rustix::net::SocketFlags::NONBLOCK | rustix::net::SocketFlags::CLOEXEC;
    let sock =
        rustix::net::socket_with(family, rustix::net::SocketType::DGRAM, flags, None).ok()?;
    rustix::net::connect(&sock, &nameserver).ok()?;
    Some(sock)
}

/// Pure: an IPv4 packet carrying `payload` as a UDP datagram from `src` to `dst`, `None` when
/// it would not fit the device.
pub(crate) fn datagram(src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8]) -> Option<Vec<u8>> {
    let udp = UdpRepr { src_port: src.port(), dst_port: dst.port() };
    let ip = Ipv4Repr {
        src_addr: *src.ip(),
        dst_addr: *dst.ip(),
        next_header: IpProtocol::Udp,
        payload_len: udp.header_len() + payload.len(),
        hop_limit: 64,
    };
    let len = ip.buffer_len() + ip.payload_len;
    if len > MTU {
        return None;
    }
    let mut out = vec![0u8; len];
    let caps = ChecksumCapabilities::default();
    let mut packet = Ipv4Packet::new_unchecked(&mut out[..]);
    ip.emit(&mut packet, &caps);
    let mut datagram = UdpPacket::new_unchecked(packet.payload_mut());
    udp.emit(
        &mut datagram,
        &IpAddress::Ipv4(*src.ip()),
        &IpAddress::Ipv4(*dst.ip()),
        payload.len(),
        |space| space.copy_from_slice(payload),
        &caps,
    );
    Some(out)
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    /// A DNS query for `name` (A), and an answer to it with `addr`.
    fn query_and_answer(name: &str, addr: [u8; 4]) -> (Vec<u8>, Vec<u8>) {
        let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            q.push(u8::try_from(label.len()).expect("label"));
            q.extend_from_slice(label.as_bytes());
        }
        q.extend_from_slice(&[0, 0, 1, 0, 1]);
        let mut a = q.clone();
        a[2] = 0x81;
        a[3] = 0x80;
        a[7] = 1;
        a.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]);
        a.extend_from_slice(&addr);
        (q, a)
    }

    #[test]
    fn a_policy_answers_listed_names_and_learns_their_addresses_only() {
        let allow = Allow::parse(["pypi.org:443"]).expect("list");
        let listed = Listed::new(allow);
        let mut policy = Policy {
            listed_egress: Egress::new(Lan::Refused, Vec::new()),
            listed: listed.clone(),
            answered: HashMap::new(),
            sniffing: HashMap::new(),
            dying: Vec::new(),
        };
        let (q, a) = query_and_answer("pypi.org", [203, 0, 113, 80]);
        assert_eq!(policy.screen_query(&q), Ok(None), "a listed name goes to the nameserver");
        policy.learn(&a);
        let at = IpAddr::from([203, 0, 113, 80]);
        assert!(
            policy.answered("pypi.org", at)
                && policy
                    .answered
                    .values()
                    .any(|at| at.contains(&Ipv4Addr::from([203, 0, 113, 80])))
        );
        assert!(!policy.answered("registry.npmjs.org", at), "pinned per name");

        let (q, a) = query_and_answer("registry.npmjs.org", [203, 0, 113, 80]);
        let nx = policy.screen_query(&q).expect("a query").expect("answered here");
        assert_eq!(nx[3] & 0x0f, 3, "NXDOMAIN");
        // An answer for an unlisted name (one the relay never asked for) teaches nothing.
        policy.learn(&a);
        assert!(!policy.answered("registry.npmjs.org", at));
        assert_eq!(policy.screen_query(b"not dns"), Err(()));
        assert_eq!(
            listed.refused(),
            [Allow::lookup_refused("registry.npmjs.org")],
            "the refusal is recorded once, for the run's note"
        );
    }

    #[test]
    fn the_relay_refuses_what_the_proxy_refuses() {
        let refused = Egress::new(Lan::Refused, vec![IpAddr::from([10, 255, 255, 53])]);
        let allowed = Egress::new(Lan::Allowed, Vec::new());
        let at = |ip: [u8; 4], port| SocketAddrV4::new(Ipv4Addr::from(ip), port);
        for (dest, by_default, with_lan) in [
            (at([93, 184, 215, 14], 443), false, false),
            (at([10, 1, 2, 3], 5432), true, false),
            (at([10, 0, 2, 2], 80), true, false),
            (at([10, 255, 255, 53], 53), false, false),
            (at([10, 255, 255, 53], 80), true, false),
            (at([127, 0, 0, 1], 22), true, true),
            (at([127, 0, 0, 53], 53), true, true),
            (at([0, 0, 0, 0], 80), true, true),
            (at([169, 254, 169, 254], 80), true, true),
            (at([224, 0, 0, 251], 5353), true, true),
            (at([255, 255, 255, 255], 67), true, true),
            (at([93, 184, 215, 14], 0), true, true),
        ] {
            assert_eq!(refusal(dest, &refused).is_some(), by_default, "{dest}");
            assert_eq!(refusal(dest, &allowed).is_some(), with_lan, "{dest} with the LAN");
        }
    }

    #[test]
    fn loopback_nameservers_are_served_inside() {
        let at = |ip: &str| SocketAddr::new(ip.parse().unwrap_or(IpAddr::from([0, 0, 0, 0])), 53);
        for (conf, want) in [
            ("nameserver 10.255.255.53\n", vec![]),
            (
                "# resolved\nnameserver 127.0.0.53\noptions edns0 trust-ad\nsearch .\n",
                vec![at("127.0.0.53")],
            ),
            (
                "nameserver ::1\nnameserver 8.8.8.8\nnameserver 127.0.0.1\n",
                vec![at("::1"), at("127.0.0.1")],
            ),
            // The resolver reads three.
            (
                "nameserver 1.1.1.1\nnameserver 1.0.0.1\nnameserver 8.8.8.8\nnameserver 127.0.0.1\n",
                vec![],
            ),
            (
                "nameserver\nnameserver fe80::1%eth0\n  nameserver 127.0.0.2 \n",
                vec![at("127.0.0.2")],
            ),
            ("", vec![]),
        ] {
            assert_eq!(loopback_nameservers(conf), want, "{conf:?}");
        }
    }

    #[test]
    fn only_dns_queries_pass_a_door() {
        let query = |flags: u16, counts: [u16; 4], rest: &[u8]| {
            let mut m = vec![0x12, 0x34];
            m.extend_from_slice(&flags.to_be_bytes());
            for c in counts {
                m.extend_from_slice(&c.to_be_bytes());
            }
            m.extend_from_slice(rest);
            m
        };
        let question = b"\x04pypi\x03org\x00\x00\x01\x00\x01";
        let mut with_opt = question.to_vec();
        with_opt.extend_from_slice(b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x00");
        let mut opt_with_data = question.to_vec();
        opt_with_data.extend_from_slice(b"\x00\x00\x29\x04\xd0\x00\x00\x00\x00\x00\x04abcd");
        let long_label = [&[64u8][..], &[b'a'; 64], b"\x00\x00\x01\x00\x01"].concat();
        let mut long_name = Vec::new();
        for _ in 0..5 {
            long_name.push(63);
            long_name.extend_from_slice(&[b'a'; 63]);
        }
        long_name.extend_from_slice(b"\x00\x00\x01\x00\x01");
        for (message, ok) in [
            (query(0x0100, [1, 0, 0, 0], question), true),
            (query(0x0120, [1, 0, 0, 1], &with_opt), true),
            (query(0x0100, [1, 0, 0, 1], &opt_with_data), true),
            // An answer, another opcode (UPDATE), two questions, answers or authority inside.
            (query(0x8180, [1, 0, 0, 0], question), false),
            (query(0x2800, [1, 0, 0, 0], question), false),
            (query(0x0100, [2, 0, 0, 0], question), false),
            (query(0x0100, [1, 1, 0, 0], question), false),
            (query(0x0100, [1, 0, 1, 0], question), false),
            (query(0x0100, [1, 0, 0, 2], &with_opt), false),
            // Trailing bytes, a truncated question, an OPT that is not one, bad labels.
            (query(0x0100, [1, 0, 0, 0], &[&question[..], b"x"].concat()), false),
            (query(0x0100, [1, 0, 0, 0], &question[..question.len() - 1]), false),
            (query(0x0100, [1, 0, 0, 1], question), false),
            (query(0x0100, [1, 0, 0, 0], b"\xc0\x0c\x00\x01\x00\x01"), false),
            (query(0x0100, [1, 0, 0, 0], &long_label), false),
            (query(0x0100, [1, 0, 0, 0], &long_name), false),
            (query(0x0100, [1, 0, 0, 0], b""), false),
            (vec![0x12, 0x34, 0x01], false),
            (Vec::new(), false),
        ] {
            assert_eq!(is_dns_query(&message), ok, "{message:?}");
        }
    }

    #[test]
    fn datagrams_parse_back() {
        let src = SocketAddrV4::new(Ipv4Addr::new(10, 255, 255, 53), 53);
        let dst = SocketAddrV4::new(SANDBOX_IP, 40000);
        let out = datagram(src, dst, b"answer").expect("fits");
        let ip = Ipv4Packet::new_checked(&out[..]).expect("ipv4");
        assert!(ip.verify_checksum());
        assert_eq!((ip.src_addr(), ip.dst_addr()), (*src.ip(), *dst.ip()));
        let udp = UdpPacket::new_checked(ip.payload()).expect("udp");
        assert!(udp.verify_checksum(&IpAddress::Ipv4(*src.ip()), &IpAddress::Ipv4(*dst.ip())));
        assert_eq!((udp.src_port(), udp.dst_port(), udp.payload()), (53, 40000, &b"answer"[..]));
        assert!(datagram(src, dst, &vec![0; MTU]).is_none());
    }

    #[test]
    fn a_session_journal_tells_each_script_its_own_refusals() {
        let dir = std::env::temp_dir().join(format!("psbx-journal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.refused");
        let file = std::fs::OpenOptions::new().append(true).create(true).open(&path).unwrap();
        let listed = Listed::new(Allow::parse(["pypi.org"]).unwrap()).journaling(file);
        let refusal = |host: &str| NetRefused {
            host: host.to_owned(),
            port: Some(443),
            reason: "not in the list".to_owned(),
            would_allow: Some(format!("{host}:443")),
        };
        assert_eq!(journal_since(&path, journal_end(&path)), vec![]);
        // The first script: two refusals of one host, one of another.
        let from = journal_end(&path);
        for host in ["a.example", "a.example", "b.example"] {
            listed.refuse(refusal(host));
        }
        assert_eq!(journal_since(&path, from), vec![refusal("a.example"), refusal("b.example")]);
        // The next script is told of a host again, though the keeper refused it before.
        let from = journal_end(&path);
        listed.refuse(refusal("a.example"));
        assert_eq!(journal_since(&path, from), vec![refusal("a.example")]);
        // A torn or foreign line is skipped; a journal that started over is read whole.
        std::fs::write(&path, "not json\n").unwrap();
        listed.refuse(refusal("c.example"));
        assert_eq!(journal_since(&path, 1 << 20), vec![refusal("c.example")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
