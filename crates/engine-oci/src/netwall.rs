//! The network wall of a container with the network on: unreachable routes, added in its
//! network namespace before any code of the script runs, to the link-local and metadata
//! addresses (169.254.0.0/16, where `169.254.169.254` answers on most clouds, and AWS's
//! `fd00:ec2::254`), to the private ranges unless the user allows the LAN, to the host's side
//! of the bridge (the container's gateway is the host) and, for a daemon on this machine, to
//! the host's own addresses (the bridge routes them to the host's services); the container's
//! nameservers (its `resolv.conf`, which may name a private address) stay reachable, on every
//! port (a route cannot say which), unless one is the host itself. A container that publishes
//! ports keeps its gateway's route (the replies to those connections go there) and gets an
//! nftables rule that refuses new connections to it instead ([`nft`]). [`sandbox_core::net_wall`]
//! computes the routes from the container's own (its bridge subnet, more specific than a
//! private range, is split so the wall wins); neither docker nor podman has an option for any
//! of it.
//!
//! The container cannot do it itself (it has no capabilities, by design), so the CLI does it
//! from outside, before any code of the script runs:
//!
//! * the container's command waits at its gate (`crate::gate`) until the link-local route,
//!   added last, is in its network namespace;
//! * the CLI adds the routes: when it may enter the container's network namespace (a root
//!   caller on a local daemon), from a short-lived thread that joins it by the init process's
//!   `/proc` entry (checked to be that container's, and never our own namespace); otherwise
//!   (docker-group users, rootless podman) with one privileged exec ([`ROUTE_PY`]: the image's
//!   Python, `-I -S`, no script code on its path) that reports the container's routes and
//!   `resolv.conf` and then sends the routes the CLI computed from them. It checks the result
//!   and kills the container when both ways fail.
//!
//! The gate checks the wall itself, so a script never starts without it, whatever happens to
//! the CLI in between; the CLI kills the container when it cannot add the routes.

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use futures_util::StreamExt;
use std::net::{IpAddr, Ipv4Addr};

use sandbox_core::{Cidr, Lan, Routes};
use tokio::io::AsyncWriteExt;

use crate::error::api;
use crate::error::{Error, Result};

/// The privileged exec: prints the container's routes (`routes HEX`, each `recv` of two
/// netlink dumps) and its `resolv.conf` (`resolv HEX`), then `end`; then, for each line on
/// stdin (`PROTOCOL HEX`: a route, or an nftables batch) until an empty one, sends it through
/// a netlink socket of that protocol and checks the ack of every message in it that asks for
/// one. Exit 0 when all were added (or existed); a namespace without IPv6 skips those.
pub(crate) const ROUTE_PY: &str = r#"import errno, socket, struct, sys
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
def dump(family, seq):
    s.send(struct.pack("IHHII", 28, 26, 0x301, seq, 0) + struct.pack("BBBBBBBBI", family, 0, 0, 0, 0, 0, 0, 0, 0))
    while True:
        chunk = s.recv(65536)
        print("routes", chunk.hex(), flush=True)
        at = 0
        while at + 16 <= len(chunk):
            size, kind = struct.unpack_from("IH", chunk, at)
            if kind in (2, 3) or size < 16:
                return
            at += (size + 3) & ~3
dump(socket.AF_INET, 1)
dump(socket.AF_INET6, 2)
try:
    with open("/etc/resolv.conf", "rb") as f:
        conf = f.read(65536)
except OSError:
    conf = b""
print("resolv", conf.hex(), flush=True)
print("end", flush=True)
socks = {0: s}
def messages(data):
    at = 0
    while at + 16 <= len(data):
        size, kind, flags = struct.unpack_from("IHH", data, at)
        if size < 16:
            return
        yield kind, flags, data[at + 16:at + size]
        at += (size + 3) & ~3
for line in sys.stdin:
    line = line.strip()
    if not line:
        break
    proto, hex_msg = line.split(" ", 1)
    proto = int(proto)
    if proto not in socks:
        socks[proto] = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, proto)
    msg = bytes.fromhex(hex_msg)
    socks[proto].send(msg)
    waiting = sum(1 for _, flags, _ in messages(msg) if flags & 4)
    while waiting > 0:
        acks = [body for kind, _, body in messages(socks[proto].recv(65536)) if kind == 2]
        if not acks:
            print("netlink: an answer without an ack", file=sys.stderr)
            sys.exit(1)
        for body in acks:
            err = -struct.unpack_from("i", body)[0]
            if err not in (0, errno.EEXIST, errno.EAFNOSUPPORT):
                print("netlink:", errno.errorcode.get(err, err), file=sys.stderr)
                sys.exit(1)
            waiting -= 1
else:
    print("no end of the routes", file=sys.stderr)
    sys.exit(1)
"#;

/// What a container's wall depends on besides what it reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wall {
    /// Whether private ranges stay reachable.
    pub(crate) lan: Lan,
    /// The container publishes ports: the connections to them come from its gateway, whose
    /// replies must go out, so the gateway keeps its route and an nftables rule refuses new
    /// connections to it instead ([`nft`]).
    pub(crate) inbound: bool,
}

/// What the host's side contributes to a container's wall.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HostNet {
    /// The host's own addresses (its local table), for a daemon on this machine, whose bridge
    /// reaches them; empty for one elsewhere.
    pub(crate) ranges: Vec<Cidr>,
    /// The proxies the caller's environment names (a prepare's uv is given them): kept
    /// reachable, as the nameservers are.
    pub(crate) proxies: Vec<IpAddr>,
}

impl HostNet {
    /// This host's, for a daemon at `connection`.
    fn of(connection: &crate::client::Connection) -> Result<HostNet> {
        let ranges = match connection.endpoint {
            engine_detect::ApiEndpoint::Unix(_) => engine_detect::netlink::host_local_ranges()
                .map_err(|e| Error::NetworkWall {
                    reason: format!("reading the host's own addresses: {e}"),
                })?,
            _ => Vec::new(),
        };
        Ok(HostNet { ranges, proxies: engine_detect::proxy_addresses() })
    }
}

/// Pure: the ranges that wall in a container whose own routes are `inside`, whose
/// `resolv.conf` is `resolv_conf`, on `host`: [`sandbox_core::net_wall`] with the container's
/// gateways (the host's side of its bridge) and the host's own addresses walled too, its
/// nameservers and the host's proxies kept, the sentinel last; and the IPv4 gateways whose new
/// connections an nftables rule refuses instead (`wall.inbound`).
pub(crate) fn wall_ranges(
    inside: &Routes,
    resolv_conf: &str,
    host: &HostNet,
    wall: Wall,
) -> (Vec<Cidr>, Vec<Ipv4Addr>) {
    let gateways = inside.gateways();
    let mut also: Vec<Cidr> = host.ranges.clone();
    also.extend(gateways.iter().copied().map(Cidr::host));
    let mut keep = sandbox_core::nameservers(resolv_conf);
    keep.extend(&host.proxies);
    let mut refused = Vec::new();
    if wall.inbound {
        for gateway in gateways {
            if let IpAddr::V4(v4) = gateway {
                also.retain(|c| *c != Cidr::host(gateway));
                keep.push(gateway);
                refused.push(v4);
            }
        }
    }
    (sandbox_core::net_wall(&inside.own(), &also, &keep, wall.lan), refused)
}

/// One step of the wall: a message (or an nftables batch) for its netlink protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// `NETLINK_ROUTE`: an unreachable route.
    Route(Vec<u8>),
    /// `NETLINK_NETFILTER`: the gateway's rule ([`nft`]).
    Netfilter(Vec<u8>),
}

/// Pure: [`wall_ranges`] as the steps that add it: the nftables rule first, the routes after,
/// the sentinel last (a container's gate waits for it).
pub(crate) fn wall_steps(
    inside: &Routes,
    resolv_conf: &str,
    host: &HostNet,
    wall: Wall,
) -> Vec<Step> {
    let (ranges, refused) = wall_ranges(inside, resolv_conf, host, wall);
    let rule = nft::reject_new_to(&refused).map(Step::Netfilter);
    rule.into_iter()
        .chain(sandbox_core::wall_messages(&ranges).into_iter().map(Step::Route))
        .collect()
}

/// Adds `steps` from this thread's network namespace.
fn apply_steps(steps: &[Step]) -> std::io::Result<()> {
    let route = engine_detect::netlink::socket()?;
    for step in steps {
        match step {
            Step::Route(msg) => engine_detect::netlink::apply(&route, std::slice::from_ref(msg))?,
            Step::Netfilter(batch) => {
                let sock = engine_detect::netlink::netfilter_socket()?;
                engine_detect::netlink::apply(&sock, std::slice::from_ref(batch))?;
            }
        }
    }
    Ok(())
}

/// Walls in running container `name` (whose command waits at the gate).
pub(crate) async fn apply(
    docker: &Docker,
    connection: &crate::client::Connection,
    name: &str,
    wall: Wall,
) -> Result<()> {
    let engine = connection.flavor.as_str();
    let host = HostNet::of(connection)?;
    let local = matches!(connection.endpoint, engine_detect::ApiEndpoint::Unix(_));
    if local && rustix::process::geteuid().is_root() {
        let inspect = docker
            .inspect_container(name, None::<bollard::query_parameters::InspectContainerOptions>)
            .await
            .map_err(api(engine, &format!("inspecting {name}")))?;
        let pid = inspect.state.and_then(|s| s.pid).and_then(|p| u32::try_from(p).ok());
        if let (Some(pid), Some(id)) = (pid.filter(|p| *p > 0), inspect.id) {
            let host = host.clone();
            let joined =
                tokio::task::spawn_blocking(move || in_namespace_of(pid, &id, &host, wall)).await;
            if let Ok(Ok(())) = joined {
                return Ok(());
            }
        }
    }
    by_exec(docker, engine, name, &host, wall).await
}

/// The network namespace of container `name` (root or rootless podman, a local daemon): its
/// init process's, as [`container_netns`] checks it. The built-in relay of a run with an
/// allowlist serves it.
pub(crate) async fn netns_of(
    docker: &Docker,
    engine: &'static str,
    name: &str,
) -> Result<std::fs::File> {
    let joining = format!("joining the network namespace of {name}");
    let (pid, id) = init_of(docker, engine, name).await?;
    let (dir, netns) = match container_netns(pid, &id, Identity::Cgroup) {
        Ok(found) => found,
        // Rootless podman on cgroup v1 makes no cgroup of the container's: its process is
        // held by its directory instead, and is the container's if the engine, asked again,
        // still names that pid for the running container (a pid cannot be reused while the
        // process we hold it by lives, and our containers never restart).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let held = container_netns(pid, &id, Identity::AskedAgain)
                .map_err(Error::io(joining.clone()))?;
            if init_of(docker, engine, name).await? != (pid, id) {
                return Err(Error::Io {
                    context: joining,
                    source: std::io::Error::other("the container's process changed meanwhile"),
                });
            }
            held
        }
        Err(e) => return Err(Error::io(joining)(e)),
    };
    drop(dir);
    Ok(std::fs::File::from(netns))
}

/// The running container `name`'s init process and its full id.
async fn init_of(docker: &Docker, engine: &'static str, name: &str) -> Result<(u32, String)> {
    let inspect = docker
        .inspect_container(name, None::<bollard::query_parameters::InspectContainerOptions>)
        .await
        .map_err(api(engine, &format!("inspecting {name}")))?;
    let running = inspect.state.as_ref().and_then(|s| s.running).unwrap_or(false);
    let pid = inspect.state.and_then(|s| s.pid).and_then(|p| u32::try_from(p).ok());
    match (pid.filter(|p| *p > 0 && running), inspect.id) {
        (Some(pid), Some(id)) => Ok((pid, id)),
        _ => Err(Error::Io {
            context: format!("finding the network namespace of {name}"),
            source: std::io::Error::other("the container has no process"),
        }),
    }
}

/// How [`container_netns`] knows the process is the container's.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Identity {
    /// Its cgroup path names the container's id (a rootful engine, or any on cgroup v2).
    Cgroup,
    /// The caller asks the engine again once it holds the process ([`netns_of`]).
    AskedAgain,
}

/// `/proc/PID` of a process of container `id` (by `identity`), and its network namespace,
/// which must not be ours. A process whose cgroup does not name the id is `NotFound`.
fn container_netns(
    pid: u32,
    id: &str,
    identity: Identity,
) -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use rustix::fs::{Mode, OFlags};
    let refuse = |why: &str| std::io::Error::other(why.to_owned());
    // Everything below goes through this one directory: a pid reused meanwhile reads ESRCH.
    let dir = rustix::fs::open(
        format!("/proc/{pid}"),
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    if identity == Identity::Cgroup {
        let cgroup = std::fs::File::from(rustix::fs::openat(
            &dir,
            "cgroup",
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )?);
        let cgroup = std::io::read_to_string(std::io::Read::take(cgroup, 64 * 1024))?;
        if id.len() < 32 || !cgroup.contains(id) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the process is not the container's",
            ));
        }
    }
    // A magic link to the namespace (not a path anyone can plant), so it is followed.
    let netns =
        rustix::fs::openat(&dir, "ns/net", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    let ours = rustix::fs::stat("/proc/thread-self/ns/net")?;
    let theirs = rustix::fs::fstat(&netns)?;
    if (ours.st_dev, ours.st_ino) == (theirs.st_dev, theirs.st_ino) {
        return Err(refuse("the container shares our network namespace"));
    }
    Ok((dir, netns))
}

/// The routes from a thread inside the network namespace of `pid`, which must be a process
/// of container `id` ([`container_netns`]); its `resolv.conf` read through its root, never
/// leaving it.
fn in_namespace_of(pid: u32, id: &str, host: &HostNet, wall: Wall) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let (dir, netns) = container_netns(pid, id, Identity::Cgroup)?;
    let root = rustix::fs::openat(
        &dir,
        "root",
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    // Resolved inside the container's root: a link there cannot lead out of it.
    let resolv_conf = rustix::fs::openat2(
        &root,
        "etc/resolv.conf",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
        rustix::fs::ResolveFlags::IN_ROOT | rustix::fs::ResolveFlags::NO_MAGICLINKS,
    )
    .ok()
    .map(std::fs::File::from)
    .and_then(|f| std::io::read_to_string(std::io::Read::take(f, 64 * 1024)).ok())
    .unwrap_or_default();
    let host = host.clone();
    // A thread of its own: the namespace is per thread, and this one ends right after.
    std::thread::spawn(move || -> std::io::Result<()> {
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&netns),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )?;
        let inside = engine_detect::netlink::routes(engine_detect::netlink::socket()?)?;
        apply_steps(&wall_steps(&inside, &resolv_conf, &host, wall))
    })
    .join()
    .map_err(|_| std::io::Error::other("the route thread panicked"))?
}

/// What the exec reported before it waits for the routes: its routes and `resolv.conf`.
#[derive(Debug, Default)]
struct Report {
    routes: Routes,
    resolv_conf: String,
    ended: bool,
}

/// Pure: the exec's report lines in `text` (`routes HEX`, `resolv HEX`, `end`).
fn read_report(text: &str) -> Report {
    let mut report = Report::default();
    for line in text.lines() {
        let (what, hex) = line.split_once(' ').unwrap_or((line, ""));
        let bytes = from_hex(hex);
        match what {
            "routes" => sandbox_core::parse_routes(&bytes, &mut report.routes),
            "resolv" => report.resolv_conf = String::from_utf8_lossy(&bytes).into_owned(),
            "end" => report.ended = true,
            _ => {}
        }
    }
    report
}

fn from_hex(hex: &str) -> Vec<u8> {
    hex.as_bytes()
        .chunks(2)
        .filter_map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

/// A line of the exec's input: the netlink protocol's number and the message in hex.
fn step_line(step: &Step) -> String {
    match step {
        Step::Route(msg) => format!("0 {}\n", to_hex(msg)),
        Step::Netfilter(batch) => format!("12 {}\n", to_hex(batch)),
    }
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The routes through a privileged exec of [`ROUTE_PY`] in the container.
async fn by_exec(
    docker: &Docker,
    engine: &'static str,
    name: &str,
    host: &HostNet,
    wall: Wall,
) -> Result<()> {
    let options = CreateExecOptions::<String> {
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        cmd: Some(["python3", "-I", "-S", "-c", ROUTE_PY].map(str::to_owned).to_vec()),
        user: Some("0".to_owned()),
        privileged: Some(true),
        ..Default::default()
    };
    let failed = |reason: String| Error::NetworkWall { reason };
    let exec = docker
        .create_exec(name, options)
        .await
        .map_err(api(engine, &format!("creating the network wall exec in {name}")))?;
    let started = docker
        .start_exec(
            &exec.id,
            Some(StartExecOptions { detach: false, tty: false, output_capacity: None }),
        )
        .await
        .map_err(api(engine, "starting the network wall exec"))?;
    let StartExecResults::Attached { mut output, mut input } = started else {
        return Err(failed("the network wall exec started detached".to_owned()));
    };
    // Bounded: the exec is ours, but the container it runs in is not.
    const MAX_REPORT: usize = 4 << 20;
    let (mut said, mut errors) = (Vec::new(), Vec::new());
    let mut sent = false;
    while let Some(Ok(item)) = output.next().await {
        match item {
            LogOutput::StdOut { message } if said.len() < MAX_REPORT => {
                said.extend_from_slice(&message)
            }
            LogOutput::StdErr { message } if errors.len() < 4096 => {
                errors.extend_from_slice(&message)
            }
            _ => {}
        }
        if !sent && said.ends_with(b"end\n") {
            let report = read_report(&String::from_utf8_lossy(&said));
            if !report.ended || !report.routes.done {
                break;
            }
            let steps = wall_steps(&report.routes, &report.resolv_conf, host, wall);
            let mut lines: String = steps.iter().map(step_line).collect();
            lines.push('\n');
            input
                .write_all(lines.as_bytes())
                .await
                .map_err(|e| failed(format!("sending the routes to the exec: {e}")))?;
            let _ = input.shutdown().await;
            sent = true;
        }
    }
    for _ in 0..500 {
        let inspect = docker
            .inspect_exec(&exec.id)
            .await
            .map_err(api(engine, "inspecting the network wall exec"))?;
        if inspect.running != Some(true) {
            return match (inspect.exit_code, sent) {
                (Some(0), true) => Ok(()),
                (code, _) => Err(failed(format!(
                    "the route exec exited with {}{}: {}",
                    code.map_or_else(|| "no code".to_owned(), |c| c.to_string()),
                    if sent { "" } else { " before it was sent the routes" },
                    String::from_utf8_lossy(&errors).trim()
                ))),
            };
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    Err(failed("the route exec did not finish within 5 s".to_owned()))
}

mod nft;
#[cfg(test)]
mod tests;
