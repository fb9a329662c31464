//! What was checked is what is mounted, on an engine that resolves bind sources itself.
//!
//! The daemon resolves each host path again when it starts the container, so a path swapped
//! for a symlink (`renameat2(RENAME_EXCHANGE)`) after our check would mount whatever the link
//! names. So: each source is pinned right before the create (`verify::check_sources`: opened
//! without following any link), and once the container has started, every bind is looked up
//! through the container's own root (`/proc/<pid>/root`, walked without following links) and
//! its device and inode compared with the pinned descriptor's. A mismatch is refused
//! ([`Error::MountChanged`]) and the container removed. No script code runs before that: a run
//! container's command waits at its gate (`crate::gate`) for a go line on its stdin that the host
//! writes only after the check; a session's main process is the agent, and scripts come later.
//!
//! This works wherever the container's processes are visible in this host's `/proc`: rootful
//! docker and podman (the caller is root or owns the container's processes) and rootless
//! podman (the caller owns the container's user namespace). A daemon in a VM is refused.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use bollard::Docker;
use bollard::query_parameters::InspectContainerOptions;
use rustix::fs::{Mode, OFlags};

use crate::error::{Error, Result};

/// One host bind source, pinned: the descriptor is kept open until the check, so its inode
/// cannot be reused meanwhile.
#[derive(Debug)]
pub(crate) struct Pin {
    pub(crate) source: PathBuf,
    pub(crate) target: PathBuf,
    dev: u64,
    ino: u64,
    _fd: OwnedFd,
}

impl Pin {
    /// Pins the canonical, checked `source` mounted at `target`.
    pub(crate) fn open(source: &Path, target: &Path) -> Result<Pin> {
        let fd = engine_detect::open_nofollow(source).map_err(|e| match e {
            engine_detect::CreateDirError::Io { source: io, .. }
                if io.kind() == std::io::ErrorKind::NotFound =>
            {
                Error::MissingPath { path: source.to_owned() }
            }
            e => Error::MountChanged { path: source.to_owned(), reason: e.to_string() },
        })?;
        let stat = rustix::fs::fstat(&fd)
            .map_err(|e| Error::io(format!("inspecting {}", source.display()))(e.into()))?;
        Ok(Pin {
            source: source.to_owned(),
            target: target.to_owned(),
            dev: stat.st_dev,
            ino: stat.st_ino,
            _fd: fd,
        })
    }
}

/// Checks every pinned bind of the started container `name` (see the module header).
pub(crate) async fn started(
    docker: &Docker,
    engine: &'static str,
    name: &str,
    pins: &[Pin],
) -> Result<()> {
    if pins.is_empty() {
        return Ok(());
    }
    let inspect = docker
        .inspect_container(name, None::<InspectContainerOptions>)
        .await
        .map_err(crate::error::api(engine, &format!("inspecting {name}")))?;
    let pid = inspect.state.and_then(|s| s.pid).filter(|p| *p > 0);
    let pid = pid.ok_or_else(|| Error::MountUnverified {
        reason: format!("{engine} reported no process for {name}"),
    })?;
    mounts(pid, pins)
}

/// Compares each pin with what the process `pid` sees at its target.
pub(crate) fn mounts(pid: i64, pins: &[Pin]) -> Result<()> {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let unverified = |what: &str, e: rustix::io::Errno| Error::MountUnverified {
        reason: format!("{what} {}: {}", proc.display(), std::io::Error::from(e)),
    };
    let dir =
        rustix::fs::open(&proc, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| unverified("cannot open", e))?;
    // A process of this mount namespace is not the container (a daemon in a VM reports its own
    // pids): its `/` is ours, and the comparison would prove nothing.
    let ns = |at: &OwnedFd| rustix::fs::statat(at, "ns/mnt", rustix::fs::AtFlags::empty());
    let ours = rustix::fs::open(
        "/proc/self",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .and_then(|own| ns(&own));
    let theirs = ns(&dir).map_err(|e| unverified("cannot read the mount namespace of", e))?;
    if ours.is_ok_and(|o| (o.st_dev, o.st_ino) == (theirs.st_dev, theirs.st_ino)) {
        return Err(Error::MountUnverified {
            reason: format!("{} is not in a container's mount namespace", proc.display()),
        });
    }
    let root = rustix::fs::openat(
        &dir,
        "root",
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| unverified("cannot open the root of", e))?;
    let shown = proc.join("root");
    let mountinfo =
        rustix::fs::openat(&dir, "mountinfo", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| unverified("cannot read the mounts of", e))
            .and_then(|fd| {
                std::io::read_to_string(std::fs::File::from(fd)).map_err(|e| {
                    Error::MountUnverified {
                        reason: format!("cannot read the mounts of {}: {e}", proc.display()),
                    }
                })
            })?;
    for pin in pins {
        let changed = |reason: String| Error::MountChanged { path: pin.source.clone(), reason };
        let seen = engine_detect::open_nofollow_in(root.as_fd(), &shown, &pin.target)
            .map_err(|e| changed(e.to_string()))?;
        let stat =
            rustix::fs::fstat(&seen).map_err(|e| changed(std::io::Error::from(e).to_string()))?;
        if (stat.st_dev, stat.st_ino) != (pin.dev, pin.ino) {
            return Err(changed(format!(
                "the container got another file at {} than the one that was checked",
                pin.target.display()
            )));
        }
        // The path walk goes through directories the host may still be swapping (the
        // workspace is live): the mount must also be the one at the target, not one the
        // runtime put where a swapped-in link pointed.
        let id = mount_id(&seen).map_err(|e| changed(format!("reading its mount id: {e}")))?;
        if mount_point(&mountinfo, id).as_deref() != Some(pin.target.as_path()) {
            return Err(changed(format!("it is not what is mounted at {}", pin.target.display())));
        }
    }
    Ok(())
}

/// The mount id of an open descriptor (`/proc/self/fdinfo`, every kernel since 3.15).
fn mount_id(fd: &OwnedFd) -> std::io::Result<u64> {
    let raw = std::os::fd::AsRawFd::as_raw_fd(fd);
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{raw}"))?;
    info.lines()
        .find_map(|l| l.strip_prefix("mnt_id:")?.trim().parse().ok())
        .ok_or_else(|| std::io::Error::other("no mnt_id in fdinfo"))
}

/// Pure: the mount point of mount `id` in a `mountinfo` text (octal escapes undone).
pub(crate) fn mount_point(mountinfo: &str, id: u64) -> Option<PathBuf> {
    let line = mountinfo
        .lines()
        .find(|l| l.split(' ').next().and_then(|f| f.parse::<u64>().ok()) == Some(id))?;
    let escaped = line.split(' ').nth(4)?;
    let mut out = Vec::with_capacity(escaped.len());
    let bytes = escaped.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push(d.iter().fold(0u8, |n, b| n.wrapping_mul(8).wrapping_add(b - b'0')));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some(PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(out)))
}

/// Every host source of a plan, right before its create: it must exist, and be UTF-8 (the API
/// carries paths as JSON strings, a lossy one would name another path). Podman's compat API
/// creates a missing bind source on the host as an empty root-owned directory (docker refuses
/// it), so a path that vanished since it was resolved must never reach the engine. Each one is
/// pinned without following links, for the check of the started container (below).
pub(crate) fn check_sources(mounts: &[crate::plan::PlanMount]) -> Result<Vec<Pin>> {
    let mut pins = Vec::new();
    for mount in mounts {
        let crate::plan::Source::Host(path) = &mount.source else { continue };
        if path.to_str().is_none() {
            return Err(Error::RefusedMount {
                path: path.clone(),
                reason: "its path is not valid UTF-8, which the docker API cannot carry".into(),
            });
        }
        pins.push(Pin::open(path, &mount.target)?);
    }
    Ok(pins)
}
