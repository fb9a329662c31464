//! PATH lookup without spawning anything (the warm run path calls it).

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

/// Finds an executable `name` on `path` (a `PATH`-style list); `None` if absent or not executable.
/// A `name` containing `/` is returned as-is when it is an executable file.
pub fn which(name: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    if name.contains('/') {
        let candidate = PathBuf::from(name);
        return is_executable(&candidate).then_some(candidate);
    }
    let path = path?;
    std::env::split_paths(path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &std::path::Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Why pasta cannot give a sandbox its network on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoPasta {
    /// Not on `PATH`.
    Missing,
    /// Found, but the user it runs as cannot open `/dev/net/tun` (pasta would fail with
    /// "Failed to open tun socket in namespace" on every net-on run).
    Tun {
        /// What is wrong with the device, for people.
        detail: String,
    },
}

impl NoPasta {
    /// A clause for "net on needs pasta, but …".
    pub fn why(&self) -> String {
        match self {
            NoPasta::Missing => "pasta is not installed".to_owned(),
            NoPasta::Tun { detail } => format!("pasta cannot open /dev/net/tun here: {detail}"),
        }
    }

    /// The lines a native or bwrap probe adds for this (`network: …` and its `hint:`).
    pub fn network(&self) -> String {
        match self {
            NoPasta::Missing => format!("{}\nhint: {}", crate::BUILTIN_NET, self.hint()),
            NoPasta::Tun { .. } => format!(
                "network: HTTP(S) only, through the built-in proxy: {}\nhint: {}",
                self.why(),
                self.hint()
            ),
        }
    }

    /// The lines a native or bwrap probe adds when its sandboxes get the built-in relay
    /// instead (full TCP/UDP over IPv4, [`relay_possible`]).
    pub fn relay_network(&self) -> String {
        format!(
            "network: the built-in relay (full TCP/UDP over IPv4, {})\nhint: for pasta's \
             network, with IPv6: {}",
            self.why(),
            self.hint()
        )
    }

    /// How to get full networking.
    pub fn hint(&self) -> &'static str {
        match self {
            NoPasta::Missing => {
                "install the `passt` package for full TCP/UDP networking (e.g. `sudo apt install passt`)"
            }
            NoPasta::Tun { .. } => {
                "for full TCP/UDP networking make /dev/net/tun read-write for all, as udev does by default: `sudo chmod 0666 /dev/net/tun`"
            }
        }
    }
}

/// The user pasta runs as for a sandbox of a caller with uid `caller`: the caller, or host
/// nobody for root (sandbox-net never runs pasta as root).
const NOBODY: u32 = 65_534;

/// Whether sandboxes without pasta get the built-in relay here (sandbox-net's
/// `relay_available`): a tun device this process may open (a root caller's relay opens it as
/// root), and no proxy of the host's own in this process's environment (`HTTPS_PROXY` or
/// `HTTP_PROXY`, either case). A host that reaches the world through its proxy gets the
/// built-in HTTP(S) proxy instead, which chains through it (a direct connection from the
/// relay may find no way out there).
pub fn relay_possible() -> bool {
    let host_proxy = ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"]
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()));
    let access = rustix::fs::Access::READ_OK | rustix::fs::Access::WRITE_OK;
    !host_proxy && rustix::fs::access("/dev/net/tun", access).is_ok()
}

/// pasta on `path` if it can give sandboxes their network here: found, and `/dev/net/tun`
/// readable and writable for the user it runs as (a device that udev did not make 0666, as
/// in many VMs and containers, is root's only, and a root caller's pasta runs as nobody).
pub fn pasta(path: Option<&OsStr>) -> Result<PathBuf, NoPasta> {
    let found = which("pasta", path).ok_or(NoPasta::Missing)?;
    let uid = rustix::process::geteuid().as_raw();
    let tun = match rustix::fs::stat("/dev/net/tun") {
        Ok(stat) => Some((stat.st_mode, stat.st_uid, stat.st_gid)),
        Err(_) => None,
    };
    let groups = if uid == 0 { vec![NOBODY] } else { caller_groups() };
    tun_verdict(tun, if uid == 0 { NOBODY } else { uid }, &groups)
        .map(|()| found)
        .map_err(|detail| NoPasta::Tun { detail })
}

fn caller_groups() -> Vec<u32> {
    let mut groups: Vec<u32> =
        rustix::process::getgroups().unwrap_or_default().iter().map(|g| g.as_raw()).collect();
    groups.push(rustix::process::getegid().as_raw());
    groups
}

/// Pure: whether user `uid` in `groups` may open a device with (`mode`, owner, group) for
/// reading and writing; `Err` says why not (`None`: no device at all).
pub(crate) fn tun_verdict(
    tun: Option<(u32, u32, u32)>,
    uid: u32,
    groups: &[u32],
) -> Result<(), String> {
    let Some((mode, owner, group)) = tun else {
        return Err("there is no /dev/net/tun".to_owned());
    };
    let bits = if uid == owner {
        mode >> 6
    } else if groups.contains(&group) {
        mode >> 3
    } else {
        mode
    } & 0o6;
    if bits == 0o6 {
        return Ok(());
    }
    let who = if uid == NOBODY {
        "nobody (pasta's user for a root caller)".to_owned()
    } else {
        format!("uid {uid}")
    };
    Err(format!("its mode {:04o} does not let {who} read and write it", mode & 0o7777))
}
