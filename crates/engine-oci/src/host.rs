//! Host facts the pure container-spec builder needs, the IO that gathers them, and the mount
//! policy (canonical real paths, no kernel trees, no sockets, not the engine's own cache).

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use sandbox_core::{Mount, MountMode};

pub(crate) use sandbox_core::{PREPARE_ENV_ALLOWLIST, RUN_ENV_ALLOWLIST, SANDBOX_CA_BUNDLE};

use crate::error::{Error, Result};

/// The uid the container runs as when the caller is root: never 0 inside a container.
pub(crate) const NOBODY: u32 = 65534;

/// Everything about the host that shapes a container spec. Tests build it by hand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostFacts {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// Current hard limits; container ulimits never ask for more (podman's defaults do, and
    /// fail without CAP_SYS_RESOURCE).
    pub(crate) nofile_hard: Option<u64>,
    pub(crate) nproc_hard: Option<u64>,
    /// Canonical host CA bundle, if one was found.
    pub(crate) ca_bundle: Option<PathBuf>,
    /// Values of [`RUN_ENV_ALLOWLIST`] and [`PREPARE_ENV_ALLOWLIST`] present on the host.
    pub(crate) env: Vec<(String, String)>,
}

impl HostFacts {
    /// The user the sandbox runs as: the caller, or nobody when the caller is root (see
    /// `crate::workspace` for how a root caller's workspace stays writable).
    pub(crate) fn sandbox_ids(&self) -> (u32, u32) {
        if self.uid == 0 { (NOBODY, NOBODY) } else { (self.uid, self.gid) }
    }

    pub(crate) fn env_value(&self, name: &str) -> Option<&str> {
        self.env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// Reads the facts of this machine.
    pub(crate) fn gather() -> HostFacts {
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        let hard = |resource| {
            let limit = rustix::process::getrlimit(resource);
            limit.maximum
        };
        let ca_bundle = engine_detect::ca_bundle();
        let env = RUN_ENV_ALLOWLIST
            .iter()
            .chain(PREPARE_ENV_ALLOWLIST)
            .filter_map(|name| std::env::var(name).ok().map(|v| ((*name).to_owned(), v)))
            .collect();
        HostFacts {
            uid,
            gid,
            nofile_hard: hard(rustix::process::Resource::Nofile),
            nproc_hard: hard(rustix::process::Resource::Nproc),
            ca_bundle,
            env,
        }
    }
}

/// What the runtime directory holds, for the refusal of paths overlapping it.
const RUNTIME_HOLDS: &str = "the podman socket and session records";

/// Pure: `Err(reason)` when a canonical path must not be mounted (`workspace` adds the rules
/// for the read-write workspace): the rules every engine shares, with the runtime directory as
/// python-sandbox's own directory.
pub(crate) fn check_policy(
    path: &Path,
    workspace: bool,
    home: Option<&Path>,
    private: &Path,
) -> std::result::Result<(), String> {
    let usage =
        if workspace { sandbox_core::PathUse::Workspace } else { sandbox_core::PathUse::Mount };
    sandbox_core::check_host_path(path, usage, home, (private, RUNTIME_HOLDS))
}

/// A host path resolved for mounting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bind {
    pub(crate) path: PathBuf,
    pub(crate) writable: bool,
}

/// The workspace: canonical, existing, allowed.
pub(crate) fn resolve_workspace(
    path: &Path,
    home: Option<&Path>,
    private: &Path,
) -> Result<PathBuf> {
    let real =
        std::fs::canonicalize(path).map_err(|_| Error::MissingPath { path: path.to_owned() })?;
    check_policy(&real, true, home, private)
        .map_err(|reason| Error::RefusedWorkspace { path: real.clone(), reason })?;
    Ok(real)
}

/// One extra mount: already canonical (no symlink on the way, as on bwrap), not a socket,
/// allowed.
/// A missing path follows `sandbox_core::missing_mount`, as on bwrap: read-write ones are created
/// (after the policy check, and never through a symlink), read-only ones are an error.
pub(crate) fn resolve_mount(mount: &Mount, home: Option<&Path>, private: &Path) -> Result<Bind> {
    let writable = mount.mode == MountMode::ReadWrite;
    let missing = std::fs::symlink_metadata(&mount.path).is_err();
    if missing && sandbox_core::missing_mount(mount.mode) == sandbox_core::MissingMount::CreateDir {
        let refused = |reason: String| Error::RefusedMount { path: mount.path.clone(), reason };
        check_policy(&mount.path, false, home, private).map_err(refused)?;
        engine_detect::create_dir_all_nofollow(&mount.path).map_err(|e| match e {
            engine_detect::CreateDirError::Symlink { at } => refused(format!(
                "{} is a symlink; missing mount points are never created through one",
                at.display()
            )),
            engine_detect::CreateDirError::NotADirectory { at } => {
                refused(format!("{} is not a directory", at.display()))
            }
            engine_detect::CreateDirError::NotNormal => {
                refused("not a normalized absolute path".into())
            }
            engine_detect::CreateDirError::Io { at, source } => {
                Error::Io { context: format!("creating {}", at.display()), source }
            }
        })?;
    }
    let real = std::fs::canonicalize(&mount.path)
        .map_err(|_| Error::MissingPath { path: mount.path.clone() })?;
    // As on bwrap: the path must already be real. What the caller classified is this path, and
    // a link swapped in since would otherwise be resolved into something nobody checked.
    if real != mount.path {
        return Err(Error::RefusedMount {
            path: mount.path.clone(),
            reason: format!(
                "it goes through a symlink; mounts must use real paths\nhint: use {}",
                real.display()
            ),
        });
    }
    check_policy(&real, false, home, private)
        .map_err(|reason| Error::RefusedMount { path: real.clone(), reason })?;
    let meta =
        std::fs::metadata(&real).map_err(Error::io(format!("inspecting {}", real.display())))?;
    if meta.file_type().is_socket() {
        return Err(Error::RefusedMount {
            path: real,
            reason: "it is a socket; host sockets never enter the sandbox".into(),
        });
    }
    Ok(Bind { path: real, writable })
}

/// The script, canonical and a regular file.
pub(crate) fn resolve_script(path: &Path) -> Result<PathBuf> {
    let real =
        std::fs::canonicalize(path).map_err(|_| Error::MissingPath { path: path.to_owned() })?;
    if !real.is_file() {
        return Err(Error::MissingPath { path: real });
    }
    Ok(real)
}
