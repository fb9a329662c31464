//! Net on, connected on demand: a run's sandbox starts in its own network namespace with only
//! its loopback, and pasta is attached the first time the script reaches for a network, so a
//! script that never does pays nothing for it (pasta's start is most of a net-on run's
//! overhead: about 20 ms of a 35 ms hello, `cargo xtask bench`).
//!
//! **How.** The init installs a second seccomp filter next to the wall ([`gate`]) with a
//! listener (`SECCOMP_FILTER_FLAG_NEW_LISTENER`): `connect`, `sendmsg`, `sendmmsg` and
//! `sendto` with an address (a datagram's destination; `send` on a connected socket passes
//! none) wait for the init's answer (`SECCOMP_RET_USER_NOTIF`). On the first, the init asks the
//! caller through a pipe ([`NetDemand::wait`]); the caller attaches pasta exactly as before a
//! run with the network attached up front, then answers ([`NetDemand::release`]), and the init
//! lets every waiting call and all later ones go on (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`).
//!
//! A held call whose destination stays inside (the sandbox's own loopback, a unix socket,
//! netlink: [`stays_local`], read from the caller's memory through the sandbox's procfs) is
//! let go at once without asking, so a script that only talks to itself starts no pasta
//! either. What each held call costs once the network is attached: the round trip through the
//! init, about 5 µs here with `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6; 42 µs without),
//! paid by `connect` and by datagrams sent with an address (`send` on a connected socket is
//! not held).
//!
//! **Not a wall.** The gate decides nothing: every call it holds is let through unchanged, the
//! kernel then runs it in the sandbox's own network namespace, which is what walls it in
//! (outbound only, no host loopback; [`crate::net`]). So the `CONTINUE` caveat of
//! `seccomp_unotify(2)` (the memory the call points to may change before the kernel reads it)
//! does not apply (nor to the destination read: a script that changes it under the read only
//! changes when its network is attached), and the wall's own answers win over it (`ERRNO` takes precedence over
//! `USER_NOTIF` when filters disagree). If pasta cannot be attached, the calls go on all the
//! same and find no route, as in a sandbox with net off, and the caller reports the failure.
//!
//! **Where not.** Sessions (their caller is gone before the script needs anything), published
//! ports (pasta must hold the host port before the script runs, so a busy port is an error
//! with nothing run) and kernels before 5.5 (no `CONTINUE`) get the network up front.

#![allow(unsafe_code)]

use std::os::fd::OwnedFd;
use std::sync::OnceLock;

use sandbox_core::{Arch, Insn};

/// `SECCOMP_RET_USER_NOTIF`.
const RET_NOTIFY: u32 = 0x7fc0_0000;
/// `SECCOMP_RET_ALLOW`.
const RET_ALLOW: u32 = 0x7fff_0000;
const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;
/// `seccomp_data.args[4]`, low and high halves (both supported arches are little-endian).
const ARG4_LOW: u32 = 16 + 8 * 4;
const ARG4_HIGH: u32 = ARG4_LOW + 4;

/// `[connect, sendto, sendmsg, sendmmsg]` on `arch`.
fn numbers(arch: Arch) -> [u32; 4] {
    match arch {
        Arch::X86_64 => [42, 44, 46, 307],
        Arch::Aarch64 => [203, 206, 211, 269],
    }
}

/// Pure: the gate's program for `arch` (see the module docs). Another architecture's calls
/// (and x32's, whose numbers differ) pass: the wall refuses them.
pub fn gate(arch: Arch) -> Vec<Insn> {
    let [connect, sendto, sendmsg, sendmmsg] = numbers(arch);
    let insn = |code, jt, jf, k| Insn { code, jt, jf, k };
    // Jump offsets count from the next instruction: NOTIFY is at 11, ALLOW at 12.
    vec![
        insn(LD_W_ABS, 0, 0, 4),
        insn(JEQ_K, 0, 10, arch.audit()),
        insn(LD_W_ABS, 0, 0, 0),
        insn(JEQ_K, 7, 0, connect),
        insn(JEQ_K, 6, 0, sendmsg),
        insn(JEQ_K, 5, 0, sendmmsg),
        insn(JEQ_K, 0, 5, sendto),
        // `sendto(..., dest_addr, ...)`: a null destination is a send on a connected socket.
        insn(LD_W_ABS, 0, 0, ARG4_LOW),
        insn(JEQ_K, 0, 2, 0),
        insn(LD_W_ABS, 0, 0, ARG4_HIGH),
        insn(JEQ_K, 1, 0, 0),
        insn(RET_K, 0, 0, RET_NOTIFY),
        insn(RET_K, 0, 0, RET_ALLOW),
    ]
}

/// Pure: whether a kernel `release` (`uname -r`) is at least `major.minor`.
pub fn kernel_at_least(release: &str, (major, minor): (u32, u32)) -> bool {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let mut next = || parts.next().and_then(|p| p.parse::<u32>().ok());
    match (next(), next()) {
        (Some(a), Some(b)) => (a, b) >= (major, minor),
        _ => false,
    }
}

/// Whether this kernel can connect a network on demand: user notifications that can let a
/// call go on (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`, Linux 5.5), and an architecture the gate
/// knows. Checked once per process.
pub fn supported() -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        // SAFETY: uname fills a zeroed local; its release is NUL-terminated.
        let release = unsafe {
            let mut name: libc::utsname = std::mem::zeroed();
            libc::uname(&mut name);
            std::ffi::CStr::from_ptr(name.release.as_ptr()).to_string_lossy().into_owned()
        };
        let action = RET_NOTIFY;
        // SAFETY: `SECCOMP_GET_ACTION_AVAIL` reads one u32 from a local.
        let avail = unsafe {
            libc::syscall(libc::SYS_seccomp, 2u32, 0u32, (&raw const action).cast::<u32>())
        };
        Arch::native().is_some() && avail == 0 && kernel_at_least(&release, (5, 5))
    })
}

/// The caller's side of a sandbox whose network is connected on demand ([`crate::Child`]'s
/// [`take_net_demand`](crate::Child::take_net_demand)): one end of a socket pair whose other
/// end is the init's. The init sends a descriptor of its network namespace first (before it
/// becomes undumpable, after which its `/proc/PID/ns` is closed to an unprivileged caller),
/// then a byte when the script needs its network; the caller answers with a byte (or EOF).
#[derive(Debug)]
pub struct NetDemand {
    pub(crate) sock: OwnedFd,
}

impl NetDemand {
    /// Blocks until the script first needs its network and returns the sandbox's network
    /// namespace, to attach pasta to; `None` once the run has ended without needing it.
    pub fn wait(&self) -> Option<std::fs::File> {
        let netns = self.netns()?;
        let mut byte = [0u8; 1];
        loop {
            match rustix::io::read(&self.sock, &mut byte) {
                Err(rustix::io::Errno::INTR) => {}
                Ok(1) => break,
                _ => return None,
            }
        }
        Some(netns)
    }

    /// The sandbox's network namespace, as soon as its init has it (before the command
    /// starts), whether or not the command will need it: to connect the network up front,
    /// beside the command's start. An answer ([`NetDemand::release`]) given before the
    /// command asks lets every call of its go on at once. `None` when the sandbox ended first.
    pub fn netns(&self) -> Option<std::fs::File> {
        use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut byte = [0u8; 1];
        let got = loop {
            match rustix::net::recvmsg(
                &self.sock,
                &mut [std::io::IoSliceMut::new(&mut byte)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            ) {
                Err(rustix::io::Errno::INTR) => {}
                Ok(got) => break got,
                Err(_) => return None,
            }
        };
        let netns = control.drain().find_map(|m| match m {
            RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
            _ => None,
        });
        if got.bytes != 1 {
            return None;
        }
        netns.map(std::fs::File::from)
    }

    /// Lets the waiting calls go on, whether the network was connected or not (then they find
    /// no route). Dropping the handle does the same.
    pub fn release(self) {
        let _ = rustix::io::write(&self.sock, &[1]);
    }
}

/// In the init, once its network namespace exists and before it becomes undumpable: sends a
/// descriptor of that namespace through `sock` (the first message [`NetDemand::wait`]
/// reads). -1 with `errno` set on failure.
///
/// SAFETY: `sock` is the init's end of the pair.
pub(crate) unsafe fn send_netns(sock: i32) -> libc::c_long {
    // SAFETY: a NUL-terminated path, then `sendmsg` of locals; our copy is closed after.
    unsafe {
        let netns = libc::open(c"/proc/self/ns/net".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if netns < 0 {
            return -1;
        }
        let mut byte = *b"n";
        let mut iov = libc::iovec { iov_base: (&raw mut byte).cast(), iov_len: 1 };
        // `CMSG_SPACE(sizeof(int))`, as u64s for alignment.
        let mut control = [0u64; 4];
        let space = libc::CMSG_SPACE(std::mem::size_of::<i32>() as u32) as usize;
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<i32>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>(), netns);
        let sent = libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL);
        libc::close(netns);
        if sent == 1 { 0 } else { -1 }
    }
}

/// `struct seccomp_notif`.
#[repr(C)]
struct Notif {
    id: u64,
    pid: u32,
    flags: u32,
    /// `struct seccomp_data`: nr, arch, ip, args[6].
    data: [u64; 8],
}

/// `struct seccomp_notif_resp`.
#[repr(C)]
struct Resp {
    id: u64,
    val: i64,
    error: i32,
    flags: u32,
}

const fn iowr(nr: u64, size: usize) -> u64 {
    (3 << 30) | ((size as u64) << 16) | ((b'!' as u64) << 8) | nr
}
const NOTIF_RECV: u64 = iowr(0, std::mem::size_of::<Notif>());
const NOTIF_SEND: u64 = iowr(1, std::mem::size_of::<Resp>());
/// `SECCOMP_IOCTL_NOTIF_ID_VALID` (`_IOW('!', 2, __u64)`).
const NOTIF_ID_VALID: u64 = (1 << 30) | (8 << 16) | ((b'!' as u64) << 8) | 2;
const USER_NOTIF_FLAG_CONTINUE: u32 = 1;
/// `SECCOMP_IOCTL_NOTIF_SET_FLAGS` (`_IOW('!', 4, __u64)`, Linux 6.6).
const NOTIF_SET_FLAGS: u64 = (1 << 30) | (8 << 16) | ((b'!' as u64) << 8) | 4;
/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`.
const FD_SYNC_WAKE_UP: u64 = 1;
const FILTER_FLAG_NEW_LISTENER: u32 = 1 << 3;

/// In the init, after `PR_SET_NO_NEW_PRIVS`: installs `program` (the [`gate`]) and returns its
/// listener (close-on-exec), or -1 with `errno` set.
///
/// SAFETY: `program` outlives the call (the kernel copies it).
pub(crate) unsafe fn install(program: &[libc::sock_filter]) -> i32 {
    let prog = libc::sock_fprog { len: program.len() as u16, filter: program.as_ptr().cast_mut() };
    // SAFETY: see above; `SECCOMP_SET_MODE_FILTER` with a listener returns a descriptor.
    unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            1u32,
            FILTER_FLAG_NEW_LISTENER,
            (&raw const prog).cast::<libc::sock_fprog>(),
        ) as i32
    }
}

/// In the init: asks the kernel to switch straight to the init when a call is held and back
/// when it is let go (`SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`), which is what each held call costs
/// after the network is attached. Kernels before 6.6 refuse it, and wake the usual way.
///
/// SAFETY: `listener` is a seccomp listener.
pub(crate) unsafe fn sync_wake_up(listener: i32) {
    // SAFETY: the request takes its flags by value.
    unsafe { libc::ioctl(listener, NOTIF_SET_FLAGS as _, FD_SYNC_WAKE_UP) };
}

/// A held call: its id, and whether it stays on this host ([`stays_local`]).
pub(crate) struct Held {
    pub(crate) id: u64,
    pub(crate) local: bool,
}

/// In the init: the next held call, or `None` when there is none (it was interrupted and will
/// come again when restarted). Its destination is read only when `look` (before the network
/// is attached: after, every call goes on anyway).
///
/// SAFETY: `listener` is a seccomp listener.
pub(crate) unsafe fn receive(
    listener: i32,
    look: bool,
    doors: &[std::net::SocketAddr],
) -> Option<Held> {
    // SAFETY: the kernel fills a zeroed struct of the size the request encodes.
    unsafe {
        let mut notif: Notif = std::mem::zeroed();
        if libc::ioctl(listener, NOTIF_RECV as _, &raw mut notif) != 0 {
            return None;
        }
        if !look {
            return Some(Held { id: notif.id, local: false });
        }
        let local = destination(&notif).is_some_and(|addr| stays_local(&addr, doors));
        // The address was read from a process that still made this call (a pid reused
        // meanwhile would be another's memory); if not, the answer no longer matters.
        let valid = libc::ioctl(listener, NOTIF_ID_VALID as _, &raw const notif.id) == 0;
        Some(Held { id: notif.id, local: local && valid })
    }
}

/// The first bytes of the address a held call sends to, read from the caller's memory;
/// `Some(empty)` for a call that names none (a `sendmsg` on a connected socket), `None` when
/// it cannot be read.
///
/// SAFETY: reads through the sandbox's procfs only.
unsafe fn destination(notif: &Notif) -> Option<Vec<u8>> {
    let arch = Arch::native()?;
    let [connect, sendto, sendmsg, sendmmsg] = numbers(arch);
    let nr = notif.data[0] as u32;
    let args = &notif.data[2..8];
    let path = std::ffi::CString::new(format!("/proc/{}/mem", notif.pid)).ok()?;
    // SAFETY: open, pread and close of our own descriptor into local buffers.
    unsafe {
        let mem = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if mem < 0 {
            return None;
        }
        let read = |at: u64, len: usize| -> Option<Vec<u8>> {
            let mut buf = vec![0u8; len];
            let n = libc::pread64(mem, buf.as_mut_ptr().cast(), len, at as i64);
            (n == len as isize).then_some(buf)
        };
        let addr = |at: u64, len: u64| -> Option<Vec<u8>> {
            if at == 0 {
                return Some(Vec::new());
            }
            read(at, len.min(28) as usize)
        };
        let found = if nr == connect {
            addr(args[1], args[2])
        } else if nr == sendto {
            addr(args[4], args[5])
        } else if nr == sendmsg || nr == sendmmsg {
            // `struct msghdr` (an `mmsghdr` starts with one): `msg_name`, then `msg_namelen`.
            read(args[1], 12).and_then(|h| {
                let name = u64::from_ne_bytes(h[..8].try_into().ok()?);
                let len = u32::from_ne_bytes(h[8..12].try_into().ok()?);
                addr(name, u64::from(len))
            })
        } else {
            None
        };
        libc::close(mem);
        found
    }
}

/// Pure: whether a call sending to `addr` (a `struct sockaddr`'s bytes; empty: the call names
/// none, its socket connected already, through a call that was held if it needed a network)
/// stays on this host: the sandbox's own loopback (but its `doors`, which the network serves
/// there), a unix socket, netlink to its own kernel, a disconnect. Anything else, or too short
/// to tell, asks for the network.
pub fn stays_local(addr: &[u8], doors: &[std::net::SocketAddr]) -> bool {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    let Some(family) = addr.get(..2).map(|f| u16::from_ne_bytes([f[0], f[1]])) else {
        return addr.is_empty();
    };
    let port = addr.get(2..4).map(|p| u16::from_be_bytes([p[0], p[1]]));
    let ip: Option<IpAddr> = match i32::from(family) {
        libc::AF_UNSPEC | libc::AF_UNIX | libc::AF_NETLINK => return true,
        libc::AF_INET => addr.get(4..8).map(|ip| {
            let ip: [u8; 4] = ip.try_into().unwrap_or_default();
            IpAddr::V4(Ipv4Addr::from(ip))
        }),
        libc::AF_INET6 => addr.get(8..24).map(|ip| {
            let ip: [u8; 16] = ip.try_into().unwrap_or_default();
            let ip = Ipv6Addr::from(ip);
            ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4)
        }),
        _ => return false,
    };
    match (ip, port) {
        (Some(ip), Some(port)) if ip.is_loopback() => !doors.contains(&SocketAddr::new(ip, port)),
        _ => false,
    }
}

/// In the init: lets call `id` go on unchanged. A call whose thread was interrupted meanwhile
/// (`ENOENT`) needs nothing.
///
/// SAFETY: `listener` is a seccomp listener.
pub(crate) unsafe fn let_go(listener: i32, id: u64) {
    let resp = Resp { id, val: 0, error: 0, flags: USER_NOTIF_FLAG_CONTINUE };
    // SAFETY: the kernel reads the struct.
    unsafe { libc::ioctl(listener, NOTIF_SEND as _, &raw const resp) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_holds_network_calls_only() {
        insta::assert_snapshot!(sandbox_core::disassemble(&gate(Arch::X86_64)));
        insta::assert_snapshot!("gate_aarch64", sandbox_core::disassemble(&gate(Arch::Aarch64)));
    }

    #[test]
    fn the_gates_numbers_are_this_targets() {
        let Some(arch) = Arch::native() else { return };
        let want = [libc::SYS_connect, libc::SYS_sendto, libc::SYS_sendmsg, libc::SYS_sendmmsg];
        assert_eq!(numbers(arch).map(i64::from), want);
    }

    #[test]
    fn struct_sizes_match_the_kernels() {
        assert_eq!(std::mem::size_of::<Notif>(), 80);
        assert_eq!(std::mem::size_of::<Resp>(), 24);
        assert_eq!(NOTIF_RECV, 0xc050_2100);
        assert_eq!(NOTIF_SEND, 0xc018_2101);
    }

    #[test]
    fn loopback_unix_and_netlink_stay_local() {
        let v4 = |ip: [u8; 4]| {
            let mut a = vec![0u8; 16];
            a[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            a[2..4].copy_from_slice(&80u16.to_be_bytes());
            a[4..8].copy_from_slice(&ip);
            a
        };
        let v6 = |ip: std::net::Ipv6Addr| {
            let mut a = vec![0u8; 28];
            a[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            a[8..24].copy_from_slice(&ip.octets());
            a
        };
        let family = |f: i32| (f as u16).to_ne_bytes().to_vec();
        for (addr, local) in [
            (v4([127, 0, 0, 1]), true),
            (v4([127, 1, 2, 3]), true),
            (v4([192, 0, 2, 1]), false),
            (v4([169, 254, 169, 254]), false),
            (v4([0, 0, 0, 0]), false),
            (v6(std::net::Ipv6Addr::LOCALHOST), true),
            (v6("::ffff:127.0.0.1".parse().unwrap_or(std::net::Ipv6Addr::UNSPECIFIED)), true),
            (v6("2001:db8::1".parse().unwrap_or(std::net::Ipv6Addr::UNSPECIFIED)), false),
            (family(libc::AF_UNIX), true),
            (family(libc::AF_NETLINK), true),
            (family(libc::AF_UNSPEC), true),
            (family(libc::AF_PACKET), false),
            (vec![], true),
            (vec![2], false),
            (v4([127, 0, 0, 1])[..4].to_vec(), false),
        ] {
            assert_eq!(stays_local(&addr, &[]), local, "{addr:?}");
        }
        // A door the network serves on the sandbox's loopback asks for it; its neighbours
        // do not.
        let door: std::net::SocketAddr =
            "127.0.0.53:53".parse().unwrap_or(([0, 0, 0, 0], 0).into());
        let mut at_door = v4([127, 0, 0, 53]);
        at_door[2..4].copy_from_slice(&53u16.to_be_bytes());
        assert!(!stays_local(&at_door, &[door]));
        assert!(stays_local(&v4([127, 0, 0, 53]), &[door]), "port 80");
        assert!(stays_local(&at_door, &[]));
    }

    #[test]
    fn kernel_releases_compare() {
        for (release, want) in [
            ("6.18.44-fc-v1252", true),
            ("5.5.0", true),
            ("5.4.0-150-generic", false),
            ("5.10", true),
            ("4.19.0-26-amd64", false),
            ("6", false),
            ("", false),
        ] {
            assert_eq!(kernel_at_least(release, (5, 5)), want, "{release}");
        }
    }
}
