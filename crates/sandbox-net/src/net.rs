//! "Net on" without the host's network namespace: the sandbox always gets its own (`--unshare-all`,
//! never `--share-net`), and pasta (Debian's `passt` package) gives it outbound connectivity
//! from outside, by joining that namespace and forwarding its traffic through ordinary host
//! sockets.
//!
//! **Why pasta.** Sharing the host namespace would hand the script the host's loopback services
//! (databases, Docker's TCP API, X11) and its abstract unix sockets (D-Bus, containerd shims),
//! and let anything the script binds be reached from outside. pasta needs no privilege, no
//! daemon and no setuid helper, and is the fastest of the user-mode stacks (slirp4netns copies
//! every packet through a tap device and a userspace TCP stack; pasta splices TCP sockets).
//!
//! **What it gives.** Outbound TCP, UDP and ICMP to the world, with DNS through the host's
//! resolver (the host's `/etc/resolv.conf` is visible read-only). `--no-map-gw`: the gateway
//! address is not mapped to the host's loopback, so host loopback services stay unreachable.
//! No inbound port is forwarded except published ones (`-t ADDR/HOSTPORT:PORT`, 127.0.0.1
//! unless an address was given, the same port on the host unless `0:PORT` or `HOSTPORT:PORT`).
//! pasta reaches whatever the host's sockets reach, so the namespace is walled in before the
//! script starts ([`wall_in`], [`sandbox_core::net_wall`]): unreachable routes to link-local
//! and metadata addresses, to the private ranges unless the user allows the LAN, and to every
//! address of the host's own (its local table: other interfaces' addresses, AnyIP ranges,
//! which pasta would otherwise connect to on the host), the host's nameservers and the caller's
//! proxies left reachable (on every port: a route cannot say which). What remains is the host's NAT: a DNAT rule on
//! a public destination rewrites pasta's socket too, where nothing here can see it.
//!
//! **Order.** bwrap is started with `--block-fd`: it sets the sandbox up, reports the child's
//! pid on the status pipe, and waits. Then pasta joins the child's network namespace (through
//! the user namespace owning it: bwrap's inner user namespace does not), the routes are added,
//! and only then is bwrap unblocked to exec the script. pasta quits by itself when the
//! namespace goes away (the conformance suite checks that none is left).
//!
//! **Without pasta** the same waiting sandbox gets the built-in relay instead (`serve_relay`,
//! `crate::relay`: a tun device in its namespace, served from outside) where a tun device can
//! be opened, else the built-in HTTP(S) proxy ([`listen_in`], `crate::proxy`): no route at
//! all, one listening socket on its loopback.

#![allow(unsafe_code)]

use std::ffi::OsString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sandbox_core::{Lan, PublishedPort};

use crate::error::{Error, Result};

/// Pure: pasta's arguments for a sandbox whose network namespace is `netns` and whose owning
/// user namespace is `userns` (both `/proc/...` paths; `None`: the namespace is owned by the
/// user namespace pasta starts in, a root caller's native sandbox, and pasta stays root
/// instead of switching to nobody, who could not open it), publishing `publish` (host ports
/// already chosen: pasta takes no "any" and reports nothing back, see
/// `sandbox_core::pick_free`).
pub(crate) fn pasta_args(
    netns: &Path,
    userns: Option<&Path>,
    publish: &[PublishedPort],
    ipv6: bool,
) -> Vec<OsString> {
    let mut args: Vec<OsString> =
        ["--quiet", "--config-net", "--no-map-gw"].iter().map(OsString::from).collect();
    if !ipv6 {
        // A third of pasta's start-up is IPv6 set-up, useless where the host has no route.
        args.push("-4".into());
    }
    if publish.is_empty() {
        args.extend(["-t", "none"].map(OsString::from));
    }
    for port in publish {
        args.push("-t".into());
        // `ADDR/HOSTPORT:PORT`: the host's port first, the namespace's after `:` if it differs.
        let mut spec = format!("{}/{}", port.addr, port.host_port);
        if port.host_port != port.port {
            spec.push_str(&format!(":{}", port.port));
        }
        args.push(spec.into());
    }
    // Nothing from the host's side reaches in over UDP, and nothing in the sandbox reaches the
    // host's own loopback ports (`-T`/`-U` would forward them inward).
    args.extend(["-u", "none", "-T", "none", "-U", "none"].map(OsString::from));
    match userns {
        Some(userns) => {
            args.push("--userns".into());
            args.push(userns.into());
        }
        None => args.extend(["--runas", "0:0"].map(OsString::from)),
    }
    args.push("--netns".into());
    args.push(netns.into());
    args
}

/// pasta attached to one sandbox; it runs in the background and quits when the sandbox's
/// network namespace is gone.
///
/// pasta keeps the namespace alive through the descriptor it was given, so it never notices the
/// sandbox is gone by itself: it is ended with the run (drop), or, for a session, recorded
/// ([`UserNet::keep`]) and ended when the session is stopped or reaped. (Left running, every
/// run leaked a daemon of ~30 MB.) A run's pasta is also on a leash (`Leash`): when this process is
/// SIGKILLed, and no destructor runs, the leash's watcher ends pasta.
#[derive(Debug)]
pub struct UserNet {
    pasta: Option<reaper::ProcPin>,
    leash: Option<Leash>,
}

impl Drop for UserNet {
    fn drop(&mut self) {
        if let Some(pasta) = self.pasta.take() {
            pasta.kill();
        }
        // Then the leash (its watcher finds pasta gone, and is reaped).
        self.leash.take();
    }
}

/// Ends pasta when the process holding the leash dies however it dies: a forked watcher, in a
/// session of its own (a terminal's Ctrl-C is not for it), holds only the read end of a pipe
/// and a pidfd of pasta. End of file on the pipe (every copy of the write end closed: this
/// process exited or was killed) makes it SIGKILL pasta through the pidfd (which names that
/// one process for good, so a recycled pid is never hit); a byte first ([`Leash::release`],
/// for a session's pasta, which outlives the CLI) makes it leave pasta alone.
#[derive(Debug)]
struct Leash {
    write: Option<OwnedFd>,
    watcher: i32,
}

impl Leash {
    /// `None` when pasta is gone already or the watcher cannot be forked (then only the
    /// destructor ends pasta, as before).
    fn new(pasta: &reaper::ProcPin) -> Option<Leash> {
        let pid = i32::try_from(pasta.pid).ok().and_then(rustix::process::Pid::from_raw)?;
        let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()?;
        // The pidfd names whatever had the pid when it was opened: check that is still pasta.
        if !pasta.alive() {
            return None;
        }
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).ok()?;
        let devnull = rustix::fs::open(
            "/dev/null",
            rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ok()?;
        let fds = (read.as_raw_fd(), pidfd.as_raw_fd(), devnull.as_raw_fd());
        // SAFETY: the child runs only async-signal-safe system calls on descriptors it owns
        // and ends in `_exit`, so forking a multi-threaded process is sound; the parent goes on
        // with its own copies, which the `OwnedFd`s close.
        match unsafe { libc::fork() } {
            -1 => None,
            0 => unsafe { watch(fds.0, fds.1, fds.2) },
            watcher => Some(Leash { write: Some(write), watcher }),
        }
    }

    /// Lets pasta outlive this process (a session's network, ended with the session).
    fn release(mut self) {
        if let Some(write) = self.write.take() {
            let _ = rustix::io::write(&write, b"k");
        }
    }
}

impl Drop for Leash {
    fn drop(&mut self) {
        // Closing the write end without a byte: the watcher ends pasta, then exits. It is
        // reaped here, waiting a second at most: a watcher someone stopped never holds up the
        // end of a run (it stays a zombie until the CLI exits).
        self.write.take();
        reaper::reap_child(self.watcher, std::time::Duration::from_secs(1));
    }
}

/// The watcher ([`Leash`]), in the forked child: async-signal-safe calls only, no allocation.
///
/// SAFETY: call only in a freshly forked child, with descriptors open in it.
unsafe fn watch(read: i32, pidfd: i32, devnull: i32) -> ! {
    unsafe {
        libc::setsid();
        // Above the standard descriptors first: a CLI started with one closed may have handed
        // the pipe out as 0, 1 or 2.
        let read = libc::fcntl(read, libc::F_DUPFD_CLOEXEC, 3);
        let pidfd = libc::fcntl(pidfd, libc::F_DUPFD_CLOEXEC, 3);
        if read < 0 || pidfd < 0 {
            libc::_exit(1);
        }
        // Nothing of the CLI's: its stdout may be a pipe whose reader waits for end of file.
        for fd in 0..3 {
            libc::dup2(devnull, fd);
        }
        let (low, high) = (read.min(pidfd), read.max(pidfd));
        for (first, last) in [(3, low - 1), (low + 1, high - 1), (high + 1, i32::MAX)] {
            if first <= last && libc::syscall(libc::SYS_close_range, first, last, 0) != 0 {
                // Before Linux 5.9: one by one, up to a generous limit.
                for fd in first..last.min(65_535) {
                    libc::close(fd);
                }
            }
        }
        let mut byte = 0u8;
        loop {
            match libc::read(read, (&raw mut byte).cast(), 1) {
                1 => libc::_exit(0),
                -1 if *libc::__errno_location() == libc::EINTR => {}
                _ => break,
            }
        }
        let none: *const libc::siginfo_t = std::ptr::null();
        libc::syscall(libc::SYS_pidfd_send_signal, pidfd, libc::SIGKILL, none, 0);
        libc::_exit(0)
    }
}

impl UserNet {
    /// Attaches pasta to the network namespace of `child` (bwrap's sandbox process, blocked
    /// before exec) and walls it in (`wall_in`; private ranges stay reachable when `lan`
    /// allows them). Returns once the namespace has its interface, routes and forwarded ports.
    pub fn attach(
        pasta: &Path,
        child: i32,
        publish: &[PublishedPort],
        run_as: Option<(u32, u32)>,
        lan: Lan,
    ) -> Result<UserNet> {
        wait_for_loopback(child);
        UserNet::attach_blocked(pasta, child, publish, run_as, lan)
    }

    /// `UserNet::attach` for a sandbox that sets nothing up in its network namespace until
    /// this returns (engine-native's monitor waits on a pipe after its `unshare`), so there is
    /// no loopback setup to wait for. `child` is a process in that namespace; `run_as` the host
    /// user pasta runs as (`None`: ours). When the namespace belongs to our own user namespace
    /// (a root caller's native sandbox) pasta joins it without changing user namespace.
    pub fn attach_blocked(
        pasta: &Path,
        child: i32,
        publish: &[PublishedPort],
        run_as: Option<(u32, u32)>,
        lan: Lan,
    ) -> Result<UserNet> {
        let netns_path = PathBuf::from(format!("/proc/{child}/ns/net"));
        let netns = std::fs::File::open(&netns_path)
            .map_err(Error::io(format!("opening {}", netns_path.display())))?;
        UserNet::attach_netns(pasta, netns, publish, run_as, lan)
    }

    /// [`UserNet::attach_blocked`] for the network namespace `netns` (a descriptor of it,
    /// handed over by the sandbox itself: engine-native's init, which is not dumpable, so its
    /// `/proc/PID/ns` stays closed to an unprivileged caller).
    pub fn attach_netns(
        pasta: &Path,
        netns: std::fs::File,
        publish: &[PublishedPort],
        run_as: Option<(u32, u32)>,
        lan: Lan,
    ) -> Result<UserNet> {
        let owner = owning_userns(&netns)?;
        let owner = (!is_own_userns(&owner)).then_some(owner);
        // pasta gets both namespaces as inherited descriptors, and runs as the host user the
        // sandbox runs as (nobody for a root caller: a root pasta would switch to nobody itself
        // before opening them, and nobody owns the namespace then).
        let netns_raw = netns.as_raw_fd();
        let owner_raw = owner.as_ref().map_or(netns_raw, AsRawFd::as_raw_fd);
        let userns = owner.as_ref().map(|_| PathBuf::from(format!("/proc/self/fd/{owner_raw}")));
        let netns_fd = PathBuf::from(format!("/proc/self/fd/{netns_raw}"));
        let mut args = pasta_args(&netns_fd, userns.as_deref(), publish, host_has_ipv6_route());
        // The daemon's pid comes back through a pipe (nothing to write in a directory, which
        // pasta running as nobody could not do for a root caller).
        let (pid_read, pid_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| Error::io("creating the pasta pid pipe")(e.into()))?;
        // pasta reopens it by path after becoming the sandbox's user (nobody for a root caller).
        if let Some((uid, gid)) = run_as {
            rustix::fs::fchown(
                &pid_write,
                Some(rustix::process::Uid::from_raw(uid)),
                Some(rustix::process::Gid::from_raw(gid)),
            )
            .map_err(|e| Error::io("handing the pasta pid pipe over")(e.into()))?;
        }
        let pid_raw = pid_write.as_raw_fd();
        args.splice(0..0, [OsString::from("--pid"), format!("/proc/self/fd/{pid_raw}").into()]);
        let mut command = Command::new(pasta);
        // SAFETY: runs in the forked child before exec; only raw syscalls on descriptors open
        // in the child.
        unsafe {
            use std::os::unix::process::CommandExt;
            command.pre_exec(move || {
                for fd in [netns_raw, owner_raw, pid_raw] {
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                match run_as {
                    Some((uid, gid)) => crate::drop_to(uid, gid),
                    None => Ok(()),
                }
            });
        }
        let guard = crate::spawn_guard();
        let output = command
            .args(&args)
            .env_clear()
            .current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(Error::io(format!("starting {}", pasta.display())))?;
        // pasta forks into the background once the namespace is configured; its exit status
        // says whether that worked.
        drop(guard);
        if !output.status.success() {
            // pasta also reports that it has no syslog; only its real complaint matters.
            let stderr = String::from_utf8_lossy(&output.stderr);
            let reason: Vec<&str> = stderr
                .lines()
                .filter(|l| !l.contains("to syslog") && !l.trim().is_empty())
                .collect();
            let reason = reason.join("\n");
            // Another process took a published host port: the one error every engine gives.
            if let Some(busy) = sandbox_core::busy_host_port(&reason, publish) {
                return Err(busy.into());
            }
            return Err(Error::UserNetwork { reason });
        }
        drop(pid_write);
        let pasta = read_pid(&pid_read).and_then(reaper::ProcPin::of_pid);
        let leash = pasta.as_ref().and_then(Leash::new);
        let net = UserNet { pasta, leash };
        wall_in(&netns, lan)?;
        Ok(net)
    }

    /// The host pid of pasta, while it runs.
    pub fn pasta_pid(&self) -> Option<u32> {
        self.pasta.as_ref().map(|p| p.pid)
    }

    /// Leaves pasta running (a session's network) and returns it, to be ended with the session.
    pub fn keep(mut self) -> Option<reaper::ProcPin> {
        if let Some(leash) = self.leash.take() {
            leash.release();
        }
        self.pasta.take()
    }
}

/// The pid pasta wrote to its pid file (a pipe), once its start-up exited.
fn read_pid(pipe: &OwnedFd) -> Option<u32> {
    let mut buf = [0u8; 32];
    let mut len = 0;
    // The daemon writes it right after forking; its parent has exited by now, so this is short.
    for _ in 0..1000 {
        let mut fds = [rustix::event::PollFd::new(pipe, rustix::event::PollFlags::IN)];
        let ready = rustix::event::poll(
            &mut fds,
            Some(&rustix::event::Timespec { tv_sec: 0, tv_nsec: 2_000_000 }),
        );
        if ready.is_ok_and(|n| n > 0) {
            match rustix::io::read(pipe, &mut buf[len..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => len += n,
            }
            if buf[..len].contains(&b'\n') || len == buf.len() {
                break;
            }
        }
    }
    std::str::from_utf8(&buf[..len]).ok()?.trim().parse().ok()
}

/// Waits (at most 2 s, in 1 ms steps) until bwrap's own loopback setup in the sandbox is done:
/// 127.0.0.1 in the namespace's local table. bwrap reports the child's pid before that child has
/// set up `lo`, and pasta brings `lo` up too, which makes the kernel add 127.0.0.1 itself; if
/// pasta wins, bwrap's own `RTM_NEWADDR` fails and the whole start with it (seen under load).
fn wait_for_loopback(child: i32) {
    let trie = PathBuf::from(format!("/proc/{child}/net/fib_trie"));
    for _ in 0..2000 {
        match std::fs::read_to_string(&trie) {
            Ok(text) if has_loopback(&text) => return,
            // Gone (bwrap failed): its own error explains; pasta's attach reports the rest.
            Err(_) => return,
            Ok(_) => std::thread::sleep(std::time::Duration::from_millis(1)),
        }
    }
}

/// Pure: whether a `fib_trie` listing holds 127.0.0.1 as a local address.
pub(crate) fn has_loopback(fib_trie: &str) -> bool {
    let mut lines = fib_trie.lines().map(str::trim);
    while let Some(line) = lines.next() {
        if line.trim_start_matches("|-- ") == "127.0.0.1"
            && lines.next().is_some_and(|next| next.contains("host LOCAL"))
        {
            return true;
        }
    }
    false
}

/// Whether the host has an IPv6 default route (`/proc/net/ipv6_route`: destination `::/0`
/// via a non-loopback device); without one the sandbox gets IPv4 only.
fn host_has_ipv6_route() -> bool {
    std::fs::read_to_string("/proc/net/ipv6_route").is_ok_and(|routes| {
        routes.lines().any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() >= 10
                && fields[0] == "00000000000000000000000000000000"
                && fields[1] == "00"
                && fields[9] != "lo"
        })
    })
}

/// Whether `userns` is the user namespace this process is in (same inode as
/// `/proc/self/ns/user`).
pub(crate) fn is_own_userns(userns: &OwnedFd) -> bool {
    let ours = std::fs::metadata("/proc/self/ns/user");
    let theirs = rustix::fs::fstat(userns);
    match (ours, theirs) {
        (Ok(ours), Ok(theirs)) => {
            use std::os::unix::fs::MetadataExt;
            ours.ino() == theirs.st_ino && ours.dev() == theirs.st_dev
        }
        _ => false,
    }
}

/// The user namespace that owns `netns` (`NS_GET_USERNS`).
pub(crate) fn owning_userns(netns: &std::fs::File) -> Result<OwnedFd> {
    const NS_GET_USERNS: libc::Ioctl = 0xb701;
    // SAFETY: NS_GET_USERNS takes no argument and returns a new descriptor or -1.
    let fd = unsafe { libc::ioctl(netns.as_raw_fd(), NS_GET_USERNS) };
    if fd < 0 {
        return Err(Error::io("finding the sandbox's user namespace")(
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Walls the network namespace `netns` in, once pasta has configured it: the unreachable
/// routes of [`sandbox_core::net_wall`] for the namespace's own routes, the host's own
/// addresses (its local table) and the host's nameservers and proxies (kept reachable), private ranges
/// left reachable when `lan` allows them. A netlink socket made inside by a short-lived child
/// ([`made_in`], which joins the namespace's owning user namespace and so may change its
/// routes) carries the dump and the routes; everything else runs here.
pub(crate) fn wall_in(netns: &std::fs::File, lan: Lan) -> Result<()> {
    // SAFETY: raw syscalls on descriptors open in the child.
    let (sock, _) = made_in(netns, "the network wall's netlink socket", 0, |chan| unsafe {
        let sock = libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return Err(std::io::Error::last_os_error());
        }
        send_fd(chan, sock)
    })?;
    let failed = || Error::io("walling the sandbox's network in");
    let inside = engine_detect::netlink::routes(&sock).map_err(failed())?;
    let host = engine_detect::netlink::host_local_ranges().map_err(failed())?;
    let mut keep = crate::egress::host_nameservers();
    keep.extend(engine_detect::proxy_addresses());
    let walled = sandbox_core::net_wall(&inside.own(), &host, &keep, lan);
    engine_detect::netlink::apply(&sock, &sandbox_core::wall_messages(&walled)).map_err(failed())
}

/// Runs `body` in a short-lived child that first joins `userns_fd` (when not -1: the network
/// namespace's owning user namespace, which gives it `CAP_NET_ADMIN` there) and `netns_fd`.
/// The child is a forked copy of us that only makes syscalls and exits; it runs `true` so the
/// standard library does the fork and wait.
pub(crate) fn in_netns(
    netns_fd: i32,
    userns_fd: i32,
    mut body: impl FnMut() -> std::io::Result<()> + Send + Sync + 'static,
) -> std::io::Result<std::process::ExitStatus> {
    let mut command = Command::new("/bin/true");
    command.env_clear().current_dir("/").stdin(Stdio::null()).stdout(Stdio::null());
    // SAFETY: runs in the forked child before exec: `setns` on descriptors open in the child,
    // then `body`, which makes raw syscalls only.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(move || {
            if (userns_fd >= 0 && libc::setns(userns_fd, libc::CLONE_NEWUSER) != 0)
                || libc::setns(netns_fd, libc::CLONE_NEWNET) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            body()
        });
    }
    let guard = crate::spawn_guard();
    let status = command.status();
    drop(guard);
    status
}

/// The built-in proxy for bwrap's sandbox process `child` (blocked before exec): once bwrap's
/// own loopback setup is done, its socket in the sandbox's namespace, served from here (a
/// run) or by a keeper that lives as long as bwrap, `session`'s pidfd (a session).
pub fn serve_proxy(
    child: i32,
    session: Option<BorrowedFd<'_>>,
    lan: Lan,
    listed: Option<crate::Listed>,
) -> Result<crate::proxy::ProxyServer> {
    wait_for_loopback(child);
    let listener = listen_in(child, crate::proxy::PROXY_PORT)?;
    crate::proxy::ProxyServer::serve(listener, session, lan, listed)
}

/// The built-in relay for bwrap's sandbox process `child` (blocked before exec), once bwrap's
/// own loopback setup is done: served from here (a run) or by a keeper that lives as long as
/// bwrap, `session`'s pidfd (a session).
pub fn serve_relay(
    child: i32,
    publish: &[PublishedPort],
    session: Option<BorrowedFd<'_>>,
    lan: Lan,
    listed: Option<crate::Listed>,
) -> Result<crate::proxy::ProxyServer> {
    wait_for_loopback(child);
    relay_in(child, &host_loopback_nameservers(), publish, session, lan, listed)
}

/// The built-in relay for the network namespace of `child` (a process of a sandbox that waits
/// before its command), serving `nameservers` at its doors and carrying `publish` in: from
/// this process, or by a keeper that lives as long as the process behind `outlived_by`
/// ([`crate::ProxyServer::relay`]).
pub fn relay_in(
    child: i32,
    nameservers: &[std::net::SocketAddr],
    publish: &[PublishedPort],
    outlived_by: Option<BorrowedFd<'_>>,
    lan: Lan,
    listed: Option<crate::Listed>,
) -> Result<crate::proxy::ProxyServer> {
    let netns = netns_of(child)?;
    crate::proxy::ProxyServer::relay(&netns, nameservers, publish, outlived_by, lan, listed)
}

/// The network namespace of process `child`.
fn netns_of(child: i32) -> Result<std::fs::File> {
    let netns_path = PathBuf::from(format!("/proc/{child}/ns/net"));
    std::fs::File::open(&netns_path).map_err(Error::io(format!("opening {}", netns_path.display())))
}

/// The nameservers of the host's `resolv.conf` (which the sandbox reads) on its loopback,
/// which the relay serves on the sandbox's ([`crate::loopback_nameservers`]).
pub fn host_loopback_nameservers() -> Vec<std::net::SocketAddr> {
    let conf = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    crate::loopback_nameservers(&conf)
}

/// A socket listening on 127.0.0.1:`port` inside the network namespace of `child` (a process
/// of a sandbox that waits before its command: nothing of the script can hold the port), for
/// the built-in proxy ([`crate::BuiltinProxy`]) to accept from outside. Made by a short-lived
/// child that joins the namespace (through its owning user namespace, as the link-local
/// routes are added) and sends the descriptor back over a socket pair.
pub fn listen_in(child: i32, port: u16) -> Result<OwnedFd> {
    let netns = netns_of(child)?;
    // SAFETY: raw syscalls on stack memory and on descriptors that are open in the child.
    let made = made_in(&netns, "the proxy's socket", 0, move |chan| unsafe {
        let sock = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if sock < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_port = port.to_be();
        addr.sin_addr.s_addr = u32::from_ne_bytes([127, 0, 0, 1]);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if libc::bind(sock, (&addr as *const libc::sockaddr_in).cast(), len) != 0
            || libc::listen(sock, 128) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        send_fd(chan, sock)
    });
    made.map(|(sock, _)| sock)
}

/// Runs `body` in a short-lived child inside `netns` (through its owning user namespace,
/// which gives it `CAP_NET_ADMIN` there, [`in_netns`]) and returns the descriptor it sends
/// back ([`send_fd`]) through the socket pair's end it is given: `what`, for messages. Then
/// `extra` more messages, each with a descriptor or without (`None`: that one failed).
pub(crate) fn made_in(
    netns: &std::fs::File,
    what: &str,
    extra: usize,
    mut body: impl FnMut(i32) -> std::io::Result<()> + Send + Sync + 'static,
) -> Result<(OwnedFd, Vec<Option<OwnedFd>>)> {
    let owner = owning_userns(netns)?;
    let owner = (!is_own_userns(&owner)).then_some(owner);
    let (ours, theirs) = rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| Error::io(format!("creating a socket pair for {what}"))(e.into()))?;
    let (netns_fd, userns_fd) = (netns.as_raw_fd(), owner.as_ref().map_or(-1, AsRawFd::as_raw_fd));
    let chan = theirs.as_raw_fd();
    let status = in_netns(netns_fd, userns_fd, move || body(chan));
    drop(theirs);
    let status = status.map_err(Error::io(format!("making {what} in the sandbox")))?;
    if !status.success() {
        return Err(Error::BuiltinNetwork {
            reason: format!("could not make {what} in the sandbox (`/bin/true` failed)"),
        });
    }
    let first = receive_fd(&ours)
        .ok_or_else(|| Error::BuiltinNetwork { reason: format!("{what} was not handed over") })?;
    Ok((first, (0..extra).map(|_| receive_fd(&ours)).collect()))
}

/// In a helper child: sends `fd` through `chan` as one `SCM_RIGHTS` message (-1: a message
/// without one).
///
/// SAFETY: raw syscalls on stack memory; `chan` and `fd` (unless -1) are open descriptors.
pub(crate) unsafe fn send_fd(chan: i32, fd: i32) -> std::io::Result<()> {
    // SAFETY: see above.
    unsafe {
        if fd < 0 {
            let byte = 0u8;
            if libc::send(chan, (&raw const byte).cast(), 1, 0) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            return Ok(());
        }
        let mut control = [0u64; 4];
        let mut byte = 0u8;
        let mut iov = libc::iovec { iov_base: (&mut byte as *mut u8).cast(), iov_len: 1 };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<i32>() as u32) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<i32>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>(), fd);
        if libc::sendmsg(chan, &msg, 0) != 1 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// The descriptor of the one `SCM_RIGHTS` message waiting on `chan`.
pub(crate) fn receive_fd(chan: &OwnedFd) -> Option<OwnedFd> {
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = rustix::net::RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    rustix::net::recvmsg(
        chan,
        &mut [std::io::IoSliceMut::new(&mut byte)],
        &mut control,
        rustix::net::RecvFlags::DONTWAIT | rustix::net::RecvFlags::CMSG_CLOEXEC,
    )
    .ok()?;
    control.drain().find_map(|message| match message {
        rustix::net::RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pasta_arguments_forward_only_published_ports() {
        let show = |publish: &[PublishedPort]| {
            pasta_args(
                Path::new("/proc/self/fd/7"),
                Some(Path::new("/proc/self/fd/8")),
                publish,
                true,
            )
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
        };
        let v6: std::net::IpAddr = "::1".parse().expect("addr");
        let v4_only = pasta_args(Path::new("/n"), Some(Path::new("/u")), &[], false);
        assert!(v4_only.iter().any(|a| a == "-4"));
        // A namespace of our own user namespace (a root caller's native sandbox): pasta joins it
        // as it is and stays root (as nobody it could not open it).
        let own = pasta_args(Path::new("/n"), None, &[], false);
        assert!(!own.iter().any(|a| a == "--userns"));
        assert!(own.windows(2).any(|w| w[0] == "--runas" && w[1] == "0:0"));
        insta::assert_snapshot!(format!(
            "none: {}\npublished: {}",
            show(&[]),
            // The same port; another host port (what `0:PORT` becomes once one is picked).
            show(&[
                PublishedPort {
                    port: 8000,
                    addr: sandbox_core::DEFAULT_PUBLISH_ADDR,
                    host_port: 8000,
                    preview: None
                },
                PublishedPort { port: 9000, addr: v6, host_port: 41234, preview: None },
            ])
        ));
    }

    /// bwrap's loopback is up once 127.0.0.1 is a local address of the namespace.
    #[test]
    fn loopback_is_seen_in_the_local_table_only() {
        let up = "Main:\n  +-- 0.0.0.0/0 3 0 5\nLocal:\n  +-- 127.0.0.0/8 2 0 2\n     +-- 127.0.0.0/31 1 0 0\n        |-- 127.0.0.0\n           /8 host LOCAL\n        |-- 127.0.0.1\n           /32 host LOCAL\n";
        assert!(has_loopback(up));
        assert!(!has_loopback("Main:\nLocal:\n"));
        assert!(!has_loopback("        |-- 127.0.0.1\n           /32 link UNICAST\n"));
    }
}
