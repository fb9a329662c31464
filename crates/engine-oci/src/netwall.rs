//! No link-local or cloud metadata addresses with the network on (169.254.0.0/16, where
//! `169.254.169.254` answers on most clouds, and AWS's `fd00:ec2::254`): the engines' bridges
//! route them like any other address, and neither docker nor podman has an option to stop it.
//!
//! The container cannot do it itself (it has no capabilities, by design), so the CLI does it
//! from outside, before any code of the script runs:
//!
//! * the container's command waits at its gate (`crate::gate`) until the unreachable route is
//!   in its network namespace;
//! * the CLI adds the routes ([`sandbox_core::LINK_LOCAL`]): when it may enter the container's
//!   network namespace (a root caller on a local daemon), from a short-lived thread that joins
//!   it by the init process's `/proc` entry (checked to be that container's, and never our own
//!   namespace); otherwise (docker-group users, rootless podman) with one privileged exec
//!   ([`ROUTE_PY`]: the same netlink messages from the image's Python, `-I -S`, no script code
//!   on its path). It checks the result and kills the container when both ways fail.
//!
//! The gate checks the wall itself, so a script never starts without it, whatever happens to
//! the CLI in between; the CLI kills the container when it cannot add the routes.

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use futures_util::StreamExt;

use crate::error::api;
use crate::error::{Error, Result};

/// The privileged exec: unreachable routes for 169.254.0.0/16 and fd00:ec2::254/128 in the
/// container's network namespace. Exit 0 when both exist afterwards; IPv6 may be off.
pub(crate) const ROUTE_PY: &str = r#"import errno, socket, struct, sys
def route(family, dst, plen):
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    attr = struct.pack("HH", 4 + len(dst), 1) + dst
    rtm = struct.pack("BBBBBBBBI", family, plen, 0, 0, 254, 4, 0, 7, 0)
    hdr = struct.pack("IHHII", 16 + len(rtm) + len(attr), 24, 0x605, 1, 0)
    s.sendto(hdr + rtm + attr, (0, 0))
    err = -struct.unpack_from("i", s.recv(4096), 16)[0]
    return 0 if err == errno.EEXIST else err
v4 = route(socket.AF_INET, socket.inet_pton(socket.AF_INET, "169.254.0.0"), 16)
try:
    v6 = route(socket.AF_INET6, socket.inet_pton(socket.AF_INET6, "fd00:ec2::254"), 128)
except OSError:
    v6 = 0
if v6 in (errno.EAFNOSUPPORT, errno.EACCES):
    v6 = 0
if v4 or v6:
    print("netlink:", errno.errorcode.get(v4 or v6, v4 or v6), file=sys.stderr)
    sys.exit(1)
"#;

/// Adds the routes in running container `name` (whose command waits at the gate).
pub(crate) async fn apply(
    docker: &Docker,
    connection: &crate::client::Connection,
    name: &str,
) -> Result<()> {
    let engine = connection.flavor.as_str();
    let local = matches!(connection.endpoint, engine_detect::ApiEndpoint::Unix(_));
    if local && rustix::process::geteuid().is_root() {
        let inspect = docker
            .inspect_container(name, None::<bollard::query_parameters::InspectContainerOptions>)
            .await
            .map_err(api(engine, &format!("inspecting {name}")))?;
        let pid = inspect.state.and_then(|s| s.pid).and_then(|p| u32::try_from(p).ok());
        if let (Some(pid), Some(id)) = (pid.filter(|p| *p > 0), inspect.id) {
            let joined = tokio::task::spawn_blocking(move || in_namespace_of(pid, &id)).await;
            if let Ok(Ok(())) = joined {
                return Ok(());
            }
        }
    }
    by_exec(docker, engine, name).await
}

/// The routes from a thread inside the network namespace of `pid`, which must be a process
/// of container `id` (its cgroup path names the id) in another namespace than ours.
fn in_namespace_of(pid: u32, id: &str) -> std::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let refuse = |why: &str| std::io::Error::other(why.to_owned());
    // Everything below goes through this one directory: a pid reused meanwhile reads ESRCH.
    let dir = rustix::fs::open(
        format!("/proc/{pid}"),
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let cgroup = std::fs::File::from(rustix::fs::openat(
        &dir,
        "cgroup",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?);
    let cgroup = std::io::read_to_string(std::io::Read::take(cgroup, 64 * 1024))?;
    if id.len() < 32 || !cgroup.contains(id) {
        return Err(refuse("the process is not the container's"));
    }
    // A magic link to the namespace (not a path anyone can plant), so it is followed.
    let netns =
        rustix::fs::openat(&dir, "ns/net", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    let ours = rustix::fs::stat("/proc/thread-self/ns/net")?;
    let theirs = rustix::fs::fstat(&netns)?;
    if (ours.st_dev, ours.st_ino) == (theirs.st_dev, theirs.st_ino) {
        return Err(refuse("the container shares our network namespace"));
    }
    // A thread of its own: the namespace is per thread, and this one ends right after.
    std::thread::spawn(move || -> std::io::Result<()> {
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&netns),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )?;
        let sock = rustix::net::socket_with(
            rustix::net::AddressFamily::NETLINK,
            rustix::net::SocketType::RAW,
            rustix::net::SocketFlags::CLOEXEC,
            None,
        )?;
        for msg in sandbox_core::link_local_messages() {
            rustix::net::send(&sock, &msg, rustix::net::SendFlags::empty())?;
            let mut ack = [0u8; 256];
            let (n, _) = rustix::net::recv(&sock, &mut ack, rustix::net::RecvFlags::empty())?;
            match sandbox_core::ack_error(&ack[..n.min(ack.len())]) {
                Some(0) => {}
                // No IPv6 in the namespace: nothing to block there.
                Some(e) if e == -libc_errno::EAFNOSUPPORT || e == -libc_errno::EEXIST => {}
                Some(e) => return Err(std::io::Error::from_raw_os_error(-e)),
                None => return Err(std::io::Error::other("a short netlink ack")),
            }
        }
        Ok(())
    })
    .join()
    .map_err(|_| std::io::Error::other("the route thread panicked"))?
}

/// Errno values the acks are compared with (Linux).
mod libc_errno {
    pub(super) const EEXIST: i32 = 17;
    pub(super) const EAFNOSUPPORT: i32 = 97;
}

/// The routes through a privileged exec of [`ROUTE_PY`] in the container.
async fn by_exec(docker: &Docker, engine: &'static str, name: &str) -> Result<()> {
    let options = CreateExecOptions::<String> {
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
    let mut said = Vec::new();
    if let StartExecResults::Attached { mut output, .. } = started {
        while let Some(Ok(item)) = output.next().await {
            if let LogOutput::StdOut { message } | LogOutput::StdErr { message } = item {
                // Bounded: the exec is ours, but the container it runs in is not.
                if said.len() < 4096 {
                    said.extend_from_slice(&message);
                }
            }
        }
    }
    for _ in 0..500 {
        let inspect = docker
            .inspect_exec(&exec.id)
            .await
            .map_err(api(engine, "inspecting the network wall exec"))?;
        if inspect.running != Some(true) {
            return match inspect.exit_code {
                Some(0) => Ok(()),
                code => Err(failed(format!(
                    "the route exec exited with {}: {}",
                    code.map_or_else(|| "no code".to_owned(), |c| c.to_string()),
                    String::from_utf8_lossy(&said).trim()
                ))),
            };
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    Err(failed("the route exec did not finish within 5 s".to_owned()))
}
