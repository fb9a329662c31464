//! Host facts the pure argv builder needs, and the IO that gathers them. Nothing here decides
//! policy; [`crate::plan`] does.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub(crate) use sandbox_core::{PREPARE_ENV_ALLOWLIST, RUN_ENV_ALLOWLIST, SANDBOX_CA_BUNDLE};

use crate::error::{Error, Result};
use crate::fsutil;

/// The unprivileged host user a root caller's sandbox runs as (and its group).
pub(crate) const NOBODY: u32 = 65534;

/// Top-level entries reproduced like the host has them (merged-/usr symlinks or real dirs).
pub(crate) const ROOT_ENTRIES: &[&str] = &["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// The only parts of /etc a sandbox sees. Deliberately absent: shadow files, ssh host keys,
/// sudoers, machine-id, /etc/ssl/private (readable to the sandbox user when the caller is root,
/// because bwrap maps that user onto the caller).
pub(crate) const ETC_ALLOWLIST: &[&str] = &[
    "resolv.conf",
    "hosts",
    "host.conf",
    "nsswitch.conf",
    "gai.conf",
    "services",
    "protocols",
    "localtime",
    "timezone",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "ssl/certs",
    "ssl/openssl.cnf",
    "pki/tls/certs",
    "pki/tls/openssl.cnf",
    "pki/ca-trust/extracted",
    "crypto-policies/back-ends",
    "alternatives",
    "mime.types",
];

/// How a top-level entry looks on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootEntry {
    /// A merged-/usr symlink, reproduced as the same symlink.
    Symlink {
        /// The entry's name below `/`.
        name: String,
        /// Its target, as the host has it.
        target: PathBuf,
    },
    /// A real directory, bound read-only.
    Dir {
        /// The entry's name below `/`.
        name: String,
    },
}

/// Everything about the host that shapes the argv. Built by `HostFacts::gather`; tests
/// build it by hand with fixed paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// The caller's uid.
    pub uid: u32,
    /// The caller's gid.
    pub gid: u32,
    /// Canonical host home; inside the sandbox it is an empty tmpfs.
    pub home: PathBuf,
    /// `/bin`, `/lib`, ... as the host has them.
    pub root_entries: Vec<RootEntry>,
    /// (canonical host source, path under /etc) for the allowlisted entries that exist.
    pub etc: Vec<(PathBuf, PathBuf)>,
    /// Canonical host CA bundle, if one was found.
    pub ca_bundle: Option<PathBuf>,
    /// Synthesized passwd and group files (only the sandbox user, root and nobody).
    pub passwd: PathBuf,
    /// See [`HostFacts::passwd`].
    pub group: PathBuf,
    /// Values of [`RUN_ENV_ALLOWLIST`] and [`PREPARE_ENV_ALLOWLIST`] present on the host.
    pub env: Vec<(String, OsString)>,
}

impl HostFacts {
    /// The uid/gid inside the sandbox: the caller's, or nobody when the caller is root (and
    /// then nobody on the host as well: bwrap is started as nobody, see [`HostFacts::run_as`]).
    pub(crate) fn sandbox_ids(&self) -> (u32, u32) {
        if self.uid == 0 { (NOBODY, NOBODY) } else { (self.uid, self.gid) }
    }

    /// The host uid and gid to start bwrap as: nobody for a root caller (see
    /// [`crate::plan::Plan::run_as`]), else the caller's own (no change).
    pub(crate) fn run_as(&self) -> Option<(u32, u32)> {
        (self.uid == 0).then_some((NOBODY, NOBODY))
    }

    pub(crate) fn env_value(&self, name: &str) -> Option<&OsString> {
        self.env.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// Reads the facts of this machine; writes the synthesized passwd/group under `etc_dir`.
    pub(crate) fn gather(home: &Path, etc_dir: &Path) -> Result<HostFacts> {
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        let home = std::fs::canonicalize(home).unwrap_or_else(|_| home.to_owned());

        let mut root_entries = Vec::new();
        for name in ROOT_ENTRIES {
            let path = Path::new("/").join(name);
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    if let Ok(target) = std::fs::read_link(&path) {
                        root_entries.push(RootEntry::Symlink { name: (*name).to_owned(), target });
                    }
                }
                Ok(meta) if meta.is_dir() => {
                    root_entries.push(RootEntry::Dir { name: (*name).to_owned() })
                }
                _ => {}
            }
        }

        let etc = ETC_ALLOWLIST
            .iter()
            .filter_map(|rel| {
                let src = std::fs::canonicalize(Path::new("/etc").join(rel)).ok()?;
                Some((src, PathBuf::from(rel)))
            })
            .collect();

        let ca_bundle = engine_detect::ca_bundle();

        let env = RUN_ENV_ALLOWLIST
            .iter()
            .chain(PREPARE_ENV_ALLOWLIST)
            .filter_map(|name| std::env::var_os(name).map(|v| ((*name).to_owned(), v)))
            .collect();

        let mut facts = HostFacts {
            uid,
            gid,
            home,
            root_entries,
            etc,
            ca_bundle,
            passwd: PathBuf::new(),
            group: PathBuf::new(),
            env,
        };
        let (passwd, group) = user_database(&facts);
        facts.passwd = fsutil::write_content_addressed(etc_dir, "passwd", passwd.as_bytes())?;
        facts.group = fsutil::write_content_addressed(etc_dir, "group", group.as_bytes())?;
        Ok(facts)
    }
}

/// Pure: the passwd and group files the sandbox sees. Only root, nobody and the sandbox user
/// exist; nothing of the host's user list leaks in.
pub(crate) fn user_database(facts: &HostFacts) -> (String, String) {
    let (uid, gid) = facts.sandbox_ids();
    let home = sandbox_core::SANDBOX_HOME;
    let mut passwd = String::from("root:x:0:0:root:/root:/usr/sbin/nologin\n");
    let mut group = String::from("root:x:0:\n");
    if uid == 65534 {
        passwd.push_str(&format!("sandbox:x:65534:65534:sandbox:{home}:/bin/sh\n"));
        group.push_str("sandbox:x:65534:\n");
    } else {
        passwd.push_str(&format!("sandbox:x:{uid}:{gid}:sandbox:{home}:/bin/sh\n"));
        passwd.push_str("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
        group.push_str(&format!("sandbox:x:{gid}:\nnogroup:x:65534:\n"));
    }
    (passwd, group)
}

/// Whether fd 0 is a terminal.
pub(crate) fn stdin_is_tty() -> bool {
    rustix::termios::isatty(rustix::stdio::stdin())
}

/// `dev.tty.legacy_tiocsti = 0` (Linux 6.2+): TIOCSTI cannot inject input into a terminal.
pub(crate) fn tiocsti_blocked() -> bool {
    std::fs::read_to_string("/proc/sys/dev/tty/legacy_tiocsti").is_ok_and(|v| v.trim() == "0")
}

/// Checks `bwrap` is new enough; the version is cached by binary identity so warm runs
/// do not spawn `bwrap --version`.
pub(crate) fn check_bwrap(bwrap: &Path, cache: &crate::tools::ToolCache) -> Result<()> {
    let version = cache.version_of(bwrap, || {
        engine_detect::bwrap_version(bwrap).map(|v| v.to_string()).ok_or_else(|| Error::Io {
            context: format!("`{} --version`", bwrap.display()),
            source: std::io::Error::other("no version in output"),
        })
    })?;
    match engine_detect::BwrapVersion::parse(&version) {
        Some(v) if v >= engine_detect::BwrapVersion::MINIMUM => Ok(()),
        _ => Err(Error::BwrapTooOld { found: version }),
    }
}
