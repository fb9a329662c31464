//! Facts about the operating system that shape the "no engine" guidance. Parsing is pure;
//! [`OsInfo::detect`] is the thin IO edge.

use std::path::Path;

/// The broad platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OsKind {
    Linux,
    MacOs,
    Other,
}

/// Distribution family, from `ID` then `ID_LIKE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distro {
    Ubuntu,
    Debian,
    Fedora,
    Arch,
    Alpine,
    OpenSuse,
    Unknown,
}

/// Windows Subsystem for Linux generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wsl {
    V1,
    V2,
}

/// Everything [`crate::suggest`] needs to know about the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsInfo {
    pub kind: OsKind,
    pub distro: Distro,
    /// `PRETTY_NAME` (or `NAME VERSION_ID`) for display.
    pub pretty_name: Option<String>,
    pub version_id: Option<String>,
    pub wsl: Option<Wsl>,
    /// `kernel.apparmor_restrict_unprivileged_userns = 1` (Ubuntu 23.10+).
    pub apparmor_restricts_userns: bool,
    /// `kernel.unprivileged_userns_clone = 0` (older Debian kernels) or `user.max_user_namespaces = 0`.
    pub userns_disabled: bool,
}

impl OsInfo {
    /// Pure: a Linux host described by the text of `/etc/os-release` (other facts default off).
    pub fn from_os_release(text: &str) -> OsInfo {
        let mut id = None;
        let mut id_like = String::new();
        let mut pretty_name = None;
        let mut name = None;
        let mut version_id = None;
        for line in text.lines() {
            let Some((key, value)) = line.split_once('=') else { continue };
            let value = unquote(value.trim());
            match key.trim() {
                "ID" => id = Some(value.to_lowercase()),
                "ID_LIKE" => id_like = value.to_lowercase(),
                "PRETTY_NAME" => pretty_name = Some(value),
                "NAME" => name = Some(value),
                "VERSION_ID" => version_id = Some(value),
                _ => {}
            }
        }
        let candidates = id.iter().map(String::as_str).chain(id_like.split_whitespace());
        let distro =
            candidates.map(distro_of).find(|d| *d != Distro::Unknown).unwrap_or(Distro::Unknown);
        let pretty_name = pretty_name.or_else(|| {
            name.map(|n| match &version_id {
                Some(v) => format!("{n} {v}"),
                None => n,
            })
        });
        OsInfo {
            kind: OsKind::Linux,
            distro,
            pretty_name,
            version_id,
            wsl: None,
            apparmor_restricts_userns: false,
            userns_disabled: false,
        }
    }

    /// A macOS host (there is no os-release there).
    pub fn macos() -> OsInfo {
        OsInfo {
            kind: OsKind::MacOs,
            distro: Distro::Unknown,
            pretty_name: Some("macOS".to_owned()),
            version_id: None,
            wsl: None,
            apparmor_restricts_userns: false,
            userns_disabled: false,
        }
    }

    /// Reads `/etc/os-release` and `/proc` of this machine. Whether it is a container is not
    /// asked: what a container allows is found by the probes, not guessed from its markers.
    pub fn detect() -> OsInfo {
        if cfg!(target_os = "macos") {
            return OsInfo::macos();
        }
        if !cfg!(target_os = "linux") {
            let mut info = OsInfo::from_os_release("");
            info.kind = OsKind::Other;
            return info;
        }
        let os_release = read("/etc/os-release").or_else(|| read("/usr/lib/os-release"));
        let mut info = OsInfo::from_os_release(os_release.as_deref().unwrap_or(""));
        info.wsl = wsl_from(
            read("/proc/sys/kernel/osrelease").as_deref(),
            std::env::var_os("WSL_DISTRO_NAME").is_some()
                || Path::new("/proc/sys/fs/binfmt_misc/WSLInterop").exists(),
        );
        info.apparmor_restricts_userns =
            sysctl_is("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1");
        info.userns_disabled = sysctl_is("/proc/sys/kernel/unprivileged_userns_clone", "0")
            || sysctl_is("/proc/sys/user/max_user_namespaces", "0");
        info
    }
}

/// Pure: WSL generation from the kernel release string (`…-microsoft-standard-WSL2` vs `…-Microsoft`).
pub(crate) fn wsl_from(osrelease: Option<&str>, wsl_markers: bool) -> Option<Wsl> {
    let release = osrelease.unwrap_or_default();
    if release.contains("WSL2") || release.contains("microsoft-standard") {
        Some(Wsl::V2)
    } else if release.contains("Microsoft") {
        Some(Wsl::V1)
    } else if wsl_markers {
        Some(Wsl::V2)
    } else {
        None
    }
}

fn distro_of(id: &str) -> Distro {
    match id {
        "ubuntu" | "pop" | "linuxmint" | "elementary" | "zorin" | "neon" => Distro::Ubuntu,
        "debian" | "raspbian" | "kali" => Distro::Debian,
        "fedora" | "rhel" | "centos" | "rocky" | "almalinux" | "ol" | "amzn" => Distro::Fedora,
        "arch" | "archarm" | "manjaro" | "endeavouros" | "cachyos" => Distro::Arch,
        "alpine" | "postmarketos" => Distro::Alpine,
        "opensuse" | "opensuse-tumbleweed" | "opensuse-leap" | "sles" | "suse" => Distro::OpenSuse,
        _ => Distro::Unknown,
    }
}

fn unquote(value: &str) -> String {
    let v = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(value);
    let v = v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')).unwrap_or(v);
    v.replace("\\\"", "\"").replace("\\$", "$").replace("\\\\", "\\")
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn sysctl_is(path: &str, value: &str) -> bool {
    read(path).is_some_and(|v| v.trim() == value)
}
