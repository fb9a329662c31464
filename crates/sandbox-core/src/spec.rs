//! The fully resolved description of one run, shared by every engine.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::Limits;

/// Everything an engine needs to run one PEP 723 script. Built by resolving the layers
/// (command line > inline table > defaults); engines never look at the layers themselves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSpec {
    /// The script, absolute: lexically normalized by [`crate::resolve`], canonicalized by the
    /// engine before use.
    pub script: PathBuf,
    /// Arguments passed to the script after `--`.
    pub args: Vec<String>,
    /// PEP 508 requirements: the script's `dependencies` plus `[tool.python-sandbox].dependencies`.
    pub dependencies: Vec<String>,
    /// PEP 440 specifier set from `requires-python`, if any.
    pub requires_python: Option<String>,
    /// Extra mounts, each at its real path inside the sandbox.
    pub mounts: Vec<Mount>,
    /// Whether the sandbox has a network.
    pub net: Net,
    /// With the network on: the only names and addresses it may reach (`net = [patterns]`);
    /// `None`: everything `on` reaches. An engine that cannot enforce a list refuses the run.
    pub allow: Option<crate::Allow>,
    /// Ports reachable from the host; needs `net = on`.
    pub publish: Vec<Publish>,
    /// Explicit environment; the sandbox starts empty plus a small allowlist.
    pub env: Vec<EnvVar>,
    /// Wall-clock limit for the whole process tree.
    pub timeout: Option<Duration>,
    /// Size cap, in bytes, of every tmpfs the sandbox gets (`/tmp`, home): writes past it fail
    /// with `ENOSPC` instead of filling host memory.
    pub tmpfs_size: u64,
    /// Memory, CPU and process limits the user asked for; an engine enforces each or refuses
    /// the run.
    pub limits: Limits,
    /// The workspace (the caller's cwd), mounted read-write at its real path.
    pub workspace: PathBuf,
}

/// The default [`RunSpec::tmpfs_size`]: 1 GiB, what docker and podman allow by default too.
pub const DEFAULT_TMPFS_SIZE: u64 = 1 << 30;

/// A host path made visible inside the sandbox at the same path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Mount {
    /// Host path; absolute after resolution (relative paths are taken from the workspace).
    pub path: PathBuf,
    /// Whether the sandbox may write through the mount.
    pub mode: MountMode,
}

/// Access the sandbox gets to a [`Mount`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum MountMode {
    /// Readable, not writable (`:ro`).
    ReadOnly,
    /// Readable and writable (`:rw`).
    ReadWrite,
}

/// Network access of the sandbox. Defaults to on.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
pub enum Net {
    /// The sandbox can reach the network.
    #[default]
    On,
    /// No route at all: no host loopback, no abstract unix sockets.
    Off,
}

/// A port inside the sandbox made reachable from the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Publish {
    /// Port inside the sandbox.
    pub port: u16,
    /// Host address to bind; `None` is [`crate::DEFAULT_PUBLISH_ADDR`] (127.0.0.1).
    pub host: Option<IpAddr>,
    /// The port on the host: the same as inside unless asked otherwise (see `crate::publish`).
    pub host_port: crate::HostPort,
}

/// One explicit environment variable for the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct EnvVar {
    /// The variable name.
    pub name: String,
    /// `None` until the CLI edge fills it from the host environment (`--env NAME`).
    pub value: Option<String>,
}
