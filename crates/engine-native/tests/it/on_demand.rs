//! Net on, connected on demand (`engine_native::demand`): the script's network calls are held
//! until its caller answers, nothing is asked of a script that makes none, and calls let go
//! without a network find no route.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use engine_native::Command;

use crate::{PYTHON, as_root_and_rootless, env, fixture, read_all};

/// `None` (after printing why) where the kernel cannot hold calls (before Linux 5.5).
fn supported() -> Option<()> {
    if engine_native::demand::supported() {
        Some(())
    } else {
        eprintln!("SKIPPED: native net on demand: this kernel has no seccomp user notifications");
        None
    }
}

/// A sandbox with net on demand running `code`; its stdout's read end.
fn spawn(code: &str) -> (engine_native::Child, std::os::fd::OwnedFd, crate::Fixture) {
    let mut f = fixture();
    f.input.net = true;
    let plan = engine_native::plan(&f.input).unwrap();
    let (r, w) = rustix::pipe::pipe().unwrap();
    let command = Command {
        argv: [PYTHON, "-I", "-c", code].iter().map(OsString::from).collect(),
        env: env(),
        stdout: Some(w),
        net_on_demand: true,
        ..Command::default()
    };
    (engine_native::spawn(&plan, command).unwrap(), r, f)
}

fn never_asks() {
    if supported().is_none() {
        return;
    }
    // Sends on a connected socket (`send` is `sendto` without an address), to its own
    // loopback (TCP and UDP, IPv4 and IPv6) and a unix datagram socket: all stay inside.
    let code = r#"
import os, socket
a, b = socket.socketpair()
a.send(b'hi')
print(b.recv(2).decode())
for family, host in ((socket.AF_INET, '127.0.0.1'), (socket.AF_INET6, '::1')):
    server = socket.socket(family); server.bind((host, 0)); server.listen()
    socket.create_connection(server.getsockname()[:2]).sendall(b'x')
    print(server.accept()[0].recv(1).decode())
    u = socket.socket(family, socket.SOCK_DGRAM); u.bind((host, 0))
    socket.socket(family, socket.SOCK_DGRAM).sendto(b'y', u.getsockname())
    print(u.recv(1).decode())
d = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); d.bind('\0psbx-on-demand-test')
socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b'z', '\0psbx-on-demand-test')
print(d.recv(1).decode())
"#;
    let (exit, out, demand) = run_without_pasta(code, false);
    assert_eq!((exit, out.as_str()), (0, "hi\nx\ny\nx\ny\nz\n"));
    assert!(demand.finish().unwrap().is_none(), "a network was attached for nothing");
}

/// Runs `code` with its network on demand (`early`: connected up front) from a pasta that
/// cannot start (any attempt to attach it ends in an error): exit code, stdout, and the
/// network's handle.
fn run_without_pasta(code: &str, early: bool) -> (i32, String, engine_native::OnDemand) {
    let (mut child, r, _f) = spawn(code);
    let demand = engine_native::connect_on_demand(
        &mut child,
        engine_native::Network::Pasta(Path::new("/nonexistent/pasta")),
        sandbox_core::Lan::Refused,
        early,
    )
    .unwrap()
    .unwrap();
    let reader = std::thread::spawn(move || read_all(r));
    let exit = child.wait().unwrap();
    (exit, reader.join().unwrap(), demand)
}

/// A script that makes no network call never asks for its network: no pasta starts.
#[test]
fn a_script_that_makes_no_network_call_starts_no_pasta() {
    as_root_and_rootless(
        "on_demand::a_script_that_makes_no_network_call_starts_no_pasta",
        never_asks,
    );
}

const HELD: &str = r#"
import errno, socket, threading, time
out = {}
def call(name, f):
    started = time.monotonic()
    try:
        f(); r = "ok"
    except OSError as e:
        r = errno.errorcode.get(e.errno, str(e.errno))
    out[name] = (r, time.monotonic() - started)
def tcp(): socket.create_connection(("192.0.2.1", 80), timeout=5)
def udp(): socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("192.0.2.1", 53))
ts = [threading.Thread(target=call, args=(f"{n}{i}", f)) for i in range(3) for n, f in (("tcp", tcp), ("udp", udp))]
[t.start() for t in ts]; [t.join() for t in ts]
# Once let go, a call is not held again.
call("after", tcp)
for name in sorted(out):
    print(name, out[name][0], "held" if out[name][1] >= 0.25 else "quick")
"#;

fn held_until_answered() {
    if supported().is_none() {
        return;
    }
    let (mut child, r, _f) = spawn(HELD);
    let demand = child.take_net_demand().unwrap();
    let reader = std::thread::spawn(move || read_all(r));
    // The first call asks, with the sandbox's own network namespace.
    let netns = demand.wait().expect("the script's first network call asks");
    let ino = |f: &std::fs::File| std::os::unix::fs::MetadataExt::ino(&f.metadata().unwrap());
    assert_ne!(ino(&netns), ino(&std::fs::File::open("/proc/self/ns/net").unwrap()));
    std::thread::sleep(Duration::from_millis(400));
    // No network attached: the calls go on and find no route.
    demand.release();
    assert_eq!(child.wait().unwrap(), 0);
    let out = reader.join().unwrap();
    let mut lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 7, "{out}");
    assert_eq!(lines.remove(0), "after ENETUNREACH quick", "{out}");
    for line in lines {
        assert!(line.ends_with(" ENETUNREACH held"), "{out}");
    }
}

fn answered_before_asked() {
    if supported().is_none() {
        return;
    }
    // The calls come after the answer: none is held.
    let code = format!("import time\ntime.sleep(0.3)\n{HELD}");
    let (mut child, r, _f) = spawn(&code);
    let demand = child.take_net_demand().unwrap();
    let reader = std::thread::spawn(move || read_all(r));
    let netns = demand.netns().expect("the namespace comes before the command starts");
    let ino = |f: &std::fs::File| std::os::unix::fs::MetadataExt::ino(&f.metadata().unwrap());
    assert_ne!(ino(&netns), ino(&std::fs::File::open("/proc/self/ns/net").unwrap()));
    demand.release();
    assert_eq!(child.wait().unwrap(), 0);
    let out = reader.join().unwrap();
    assert_eq!(out.lines().count(), 7, "{out}");
    for line in out.lines() {
        assert!(line.ends_with(" ENETUNREACH quick"), "{out}");
    }
}

/// A prepare step's network is connected up front (`early`): the caller may answer before
/// the command's first call, which then goes on at once.
#[test]
fn an_answer_before_the_first_call_lets_every_call_go_at_once() {
    as_root_and_rootless(
        "on_demand::an_answer_before_the_first_call_lets_every_call_go_at_once",
        answered_before_asked,
    );
}

fn early_attach() {
    if supported().is_none() {
        return;
    }
    let (exit, out, demand) = run_without_pasta("print('no network used')", true);
    assert_eq!((exit, out.as_str()), (0, "no network used\n"));
    // Tried without being asked: this pasta cannot start.
    assert!(demand.finish().is_err(), "early: the network is attached up front");
}

/// `early`: the network is attached whether or not the command asks for it.
#[test]
fn early_connects_without_waiting_for_a_call() {
    as_root_and_rootless("on_demand::early_connects_without_waiting_for_a_call", early_attach);
}

/// Every network call waits for the caller's answer (from any thread), then goes on
/// unchanged: without a network attached it finds no route, as with net off.
#[test]
fn network_calls_are_held_until_the_caller_answers() {
    as_root_and_rootless(
        "on_demand::network_calls_are_held_until_the_caller_answers",
        held_until_answered,
    );
}

/// A network that cannot be attached is the run's error, and the script's calls fail as with
/// no network at all (they are not held forever).
#[test]
fn a_network_that_cannot_be_attached_is_reported() {
    if crate::gate().is_none() || supported().is_none() {
        return;
    }
    let code = "import socket\ntry:\n    socket.create_connection(('192.0.2.1', 80), timeout=5)\nexcept OSError as e:\n    print(e.errno)\n";
    let (exit, out, demand) = run_without_pasta(code, false);
    assert_eq!((exit, out.trim()), (0, libc::ENETUNREACH.to_string().as_str()));
    let err = demand.finish().unwrap_err();
    assert!(err.to_string().contains("/nonexistent/pasta"), "{err}");
}
