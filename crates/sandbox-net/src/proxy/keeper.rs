//! The built-in network for a warm session: a session outlives the command that started it,
//! so its proxy or relay cannot be a thread of that command. It is served by a *keeper*, this
//! binary executed again (`/proc/self/exe`) with [`KEEPER_ARG`], which a binary that starts
//! sessions recognises first thing in `main` ([`keeper_main_if_asked`]).
//!
//! The keeper gets what it serves (the proxy's listening socket, or the relay's tun device and
//! its doors, each made in the sandbox's namespace as for a run; whether the LAN is allowed,
//! and `relay` with the doors' upstream addresses and the published ports, in its arguments;
//! the published ports' host listeners after the doors), a pidfd of the sandbox's own long-lived process, and
//! a pipe. It forks once (its parent exits
//! at once and is reaped here, so a long-lived caller such as the MCP server collects no
//! zombies), starts its own session (no terminal signal of the caller reaches it), serves, and
//! writes its pid to the pipe: EOF without a pid means it could not serve (a binary that does
//! not call [`keeper_main_if_asked`], a failed start), which is an error here. It ends by
//! itself once the pidfd says the sandbox is gone, and the session's record pins it so that
//! `session stop` and `reap` end it too.

#![allow(unsafe_code)]

use std::ffi::{OsStr, OsString};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use sandbox_core::Lan;

use crate::Error;
use crate::error::Result;

/// `argv[1]` of a keeper.
pub const KEEPER_ARG: &str = "__python-sandbox-proxy-keeper";

/// The caller's variables a keeper keeps (either case): the upstream proxies the built-in
/// proxy honours (`super::Upstreams`), and `PATH`.
const KEEPER_ENV: [&str; 4] = ["HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "PATH"];

/// Marks a published port in a relay keeper's arguments (`in=PORT`).
const INBOUND_ARG: &str = "in=";

/// A keeper's allowlist, its patterns joined by commas (`allow=a,b`), or a list the caller
/// gave that may reach private ranges (`allow-private=a,b`).
const ALLOW_ARG: &str = "allow=";
const ALLOW_PRIVATE_ARG: &str = "allow-private=";

/// Where a keeper with an allowlist journals its refusals (`refused=PATH`, after the list).
const JOURNAL_ARG: &str = "refused=";

/// The keeper's first argument: whether the sandbox may reach private ranges.
const LAN_ALLOWED: &str = "lan";
const LAN_REFUSED: &str = "no-lan";

/// The descriptors a keeper is started with: what it serves (the proxy's listener or the
/// relay's tun device), the sandbox's pidfd, the ready pipe, then the relay's doors and its
/// published ports' listeners.
const SERVED_FD: i32 = 3;
const SANDBOX_FD: i32 = 4;
const READY_FD: i32 = 5;
const DOORS_FD: i32 = 6;

/// What a keeper serves.
pub(crate) enum Served {
    /// The built-in proxy's listening socket.
    Proxy(OwnedFd),
    /// The relay's tun device, doors (bound inside, and their upstream) and published ports.
    Relay { tun: OwnedFd, doors: Vec<(OwnedFd, SocketAddr)>, inbound: Vec<crate::Inbound> },
}

/// Serves as a session's proxy keeper and exits when this process was started as one
/// (`argv[1]` is [`KEEPER_ARG`]); returns at once otherwise. Call it first in `main`, before
/// any thread starts: the keeper forks.
pub fn keeper_main_if_asked() {
    if std::env::args_os().nth(1).as_deref() == Some(OsStr::new(KEEPER_ARG)) {
        std::process::exit(keeper_main());
    }
}

fn keeper_main() -> i32 {
    // `lan` or `no-lan`, the allowlist if any (`allow=...`), then `relay`, its doors' upstream
    // addresses and its published ports (`in=PORT`), or nothing: the proxy.
    let mut args: Vec<String> = std::env::args().skip(2).collect();
    let lan = match args.first().map(String::as_str) {
        Some(LAN_ALLOWED) => Lan::Allowed,
        Some(LAN_REFUSED) => Lan::Refused,
        _ => return 1,
    };
    args.remove(0);
    let mut listed = match args.first().map(|a| parse_allow(a)) {
        Some(Some(allow)) => {
            args.remove(0);
            match allow {
                Ok(allow) => Some(crate::Listed::new(allow)),
                // A list that does not parse is never served as no list.
                Err(()) => return 1,
            }
        }
        _ => None,
    };
    // Opened after the descriptors the keeper does not own are closed (below).
    let journal = args.first().and_then(|a| a.strip_prefix(JOURNAL_ARG)).map(str::to_owned);
    if journal.is_some() {
        args.remove(0);
    }
    let relay = args.first().map(String::as_str) == Some("relay");
    let upstreams: Vec<SocketAddr> = args.iter().skip(1).filter_map(|a| a.parse().ok()).collect();
    let ports: Vec<u16> =
        args.iter().skip(1).filter_map(|a| a.strip_prefix(INBOUND_ARG)?.parse().ok()).collect();
    if relay && upstreams.len() + ports.len() + 1 != args.len() {
        return 1;
    }
    // SAFETY: single-threaded here (first thing in main); the parent only exits.
    match unsafe { libc::fork() } {
        -1 => return 1,
        0 => {}
        _ => unsafe { libc::_exit(0) },
    }
    // SAFETY: the descriptors were set up by `start` and are this process's alone.
    let (served, sandbox, ready) = unsafe {
        use std::os::fd::FromRawFd;
        (
            OwnedFd::from_raw_fd(SERVED_FD),
            OwnedFd::from_raw_fd(SANDBOX_FD),
            OwnedFd::from_raw_fd(READY_FD),
        )
    };
    let doors: Vec<(OwnedFd, SocketAddr)> = upstreams
        .into_iter()
        .zip(DOORS_FD..)
        // SAFETY: `start` placed one descriptor per upstream from DOORS_FD on.
        .map(|(upstream, fd)| (unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) }, upstream))
        .collect();
    let listeners = DOORS_FD + i32::try_from(doors.len()).unwrap_or(0);
    let inbound: Vec<crate::Inbound> = ports
        .into_iter()
        .zip(listeners..)
        // SAFETY: `start` placed one listener per published port after the doors.
        .map(|(port, fd)| crate::Inbound {
            listener: unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) },
            port,
        })
        .collect();
    // Nothing else of the caller's: a descriptor it leaked to us would live as long as the
    // session.
    let last = listeners + i32::try_from(inbound.len()).unwrap_or(0);
    // SAFETY: closes descriptors no Rust object owns (the ones above are below `last`).
    unsafe { libc::syscall(libc::SYS_close_range, last, u32::MAX, 0) };
    if let Some(path) = journal {
        use std::os::unix::fs::OpenOptionsExt;
        let opened = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path);
        // Without its journal the session still holds its list; its scripts are not told.
        if let (Some(held), Ok(file)) = (&listed, opened) {
            listed = Some(held.clone().journaling(file));
        }
    }
    let _ = rustix::process::setsid();
    // Holding no directory of the caller's busy (a workspace on a mount to unmount).
    let _ = std::env::set_current_dir("/");
    let ready_now = |ready: OwnedFd| {
        let pid = std::process::id().to_ne_bytes();
        rustix::io::write(&ready, &pid) == Ok(pid.len())
    };
    if relay {
        if !ready_now(ready) {
            return 1;
        }
        // Until the sandbox's process has exited (its pidfd readable).
        crate::relay::serve(served, doors, inbound, sandbox, lan, listed);
        return 0;
    }
    let proxy = match super::BuiltinProxy::serve_listed(served, lan, listed) {
        Ok(proxy) => proxy,
        Err(_) => return 1,
    };
    if !ready_now(ready) {
        return 1;
    }
    // Readable once the sandbox's process has exited: then nothing is left to serve.
    loop {
        let mut fds = [rustix::event::PollFd::new(&sandbox, rustix::event::PollFlags::IN)];
        match rustix::event::poll(&mut fds, None) {
            Ok(_) if !fds[0].revents().is_empty() => break,
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
    }
    drop(proxy);
    0
}

/// The allowlist of a keeper's argument: `None` when `arg` is not one, `Some(Err)` when it
/// is one that does not parse.
fn parse_allow(arg: &str) -> Option<Result<sandbox_core::Allow, ()>> {
    let (patterns, private) = match arg.strip_prefix(ALLOW_PRIVATE_ARG) {
        Some(patterns) => (patterns, true),
        None => (arg.strip_prefix(ALLOW_ARG)?, false),
    };
    Some(
        sandbox_core::Allow::parse(patterns.split(','))
            .map(|allow| allow.opening_private(private))
            .map_err(drop),
    )
}

/// The keeper's argument for `allow` ([`parse_allow`] reads it back).
fn allow_arg(allow: &sandbox_core::Allow) -> OsString {
    let prefix = if allow.opens_private() { ALLOW_PRIVATE_ARG } else { ALLOW_ARG };
    OsString::from(format!("{prefix}{allow}"))
}

/// Starts a keeper serving `served` until the process behind `sandbox` (a pidfd) exits; the
/// keeper, pinned for the session's record.
pub(crate) fn start(
    served: Served,
    sandbox: BorrowedFd<'_>,
    lan: Lan,
    listed: Option<&crate::Listed>,
) -> Result<reaper::ProcPin> {
    let which = match &served {
        Served::Proxy(_) => "proxy",
        Served::Relay { .. } => "relay",
    };
    let failed = |reason: String| Error::BuiltinNetwork {
        reason: format!("starting the built-in {which}'s keeper for the session: {reason}"),
    };
    let sandbox = sandbox.try_clone_to_owned().map_err(|e| failed(e.to_string()))?;
    let (ready_r, ready_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| failed(e.to_string()))?;
    let lan = match lan {
        Lan::Allowed => LAN_ALLOWED,
        Lan::Refused => LAN_REFUSED,
    };
    let mut args = vec![OsString::from(KEEPER_ARG), OsString::from(lan)];
    args.extend(listed.map(|l| allow_arg(l.allow())));
    if let Some(journal) = listed.and_then(crate::Listed::journal_path) {
        let mut arg = OsString::from(JOURNAL_ARG);
        arg.push(journal);
        args.push(arg);
    }
    let (first, doors, inbound) = match served {
        Served::Proxy(listener) => (listener, Vec::new(), Vec::new()),
        Served::Relay { tun, doors, inbound } => {
            args.push("relay".into());
            args.extend(doors.iter().map(|(_, upstream)| OsString::from(upstream.to_string())));
            args.extend(inbound.iter().map(|i| OsString::from(format!("{INBOUND_ARG}{}", i.port))));
            (tun, doors, inbound)
        }
    };
    let mut fds = vec![first.as_raw_fd(), sandbox.as_raw_fd(), ready_w.as_raw_fd()];
    fds.extend(doors.iter().map(|(door, _)| door.as_raw_fd()));
    fds.extend(inbound.iter().map(|i| i.listener.as_raw_fd()));
    let mut command = Command::new("/proc/self/exe");
    command.args(&args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    // It lives as long as the session: of the caller's environment (which may hold the very
    // secrets passed with `--env NAME`) only what the proxy reads, and `PATH`.
    command.env_clear().envs(std::env::vars_os().filter(|(name, _)| {
        name.to_str().is_some_and(|name| KEEPER_ENV.contains(&name.to_ascii_uppercase().as_str()))
    }));
    let mut high = vec![0; fds.len()];
    // SAFETY: after the fork, before exec: fcntl and dup2 only, on descriptors open in the
    // child and memory allocated before the fork. Moved high first, so that no dup2
    // overwrites a source not yet placed.
    unsafe {
        command.pre_exec(move || {
            let above = SERVED_FD + i32::try_from(fds.len()).unwrap_or(i32::MAX) + 10;
            for (slot, fd) in high.iter_mut().zip(&fds) {
                *slot = libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, above);
                if *slot < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            for (target, fd) in (SERVED_FD..).zip(&high) {
                // dup2 clears close-on-exec on the copy.
                if libc::dup2(*fd, target) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let guard = crate::spawn_guard();
    let spawned = command.spawn();
    drop(guard);
    let mut child = spawned.map_err(|e| failed(e.to_string()))?;
    drop(ready_w);
    drop((first, doors, inbound));
    // The keeper's first process exits right after its fork.
    let _ = child.wait();
    let mut pid = [0u8; 4];
    if io::Read::read_exact(&mut std::fs::File::from(ready_r), &mut pid).is_err() {
        return Err(failed(
            "it did not start serving (a program that starts sessions calls \
             `sandbox_net::keeper_main_if_asked` first in main)"
                .to_owned(),
        ));
    }
    let pid = u32::from_ne_bytes(pid);
    reaper::ProcPin::of_pid(pid).ok_or_else(|| failed(format!("it (pid {pid}) ended at once")))
}

#[cfg(test)]
mod allow_tests {
    use super::{allow_arg, parse_allow};

    #[test]
    fn a_keepers_list_reads_back_as_given_private_ranges_included() {
        for (list, private) in [("pypi.org,*.pythonhosted.org:443", false), ("10.1.2.3:5432", true)]
        {
            let allow =
                sandbox_core::Allow::parse(list.split(',')).unwrap().opening_private(private);
            let arg = allow_arg(&allow);
            let back = parse_allow(arg.to_str().unwrap()).expect("an allowlist").unwrap();
            assert_eq!(back, allow, "{arg:?}");
        }
        assert!(parse_allow("relay").is_none());
        assert!(parse_allow("allow=").expect("an allowlist").is_err(), "empty is refused");
        assert!(parse_allow("allow=not a host").expect("an allowlist").is_err());
    }
}
