//! Finding uv: the host's uv on PATH, else a pinned release fetched from PyPI (verified by
//! sha256 before anything is extracted) into our cache. Version lookups are cached by binary
//! identity so warm runs never spawn uv.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::fsutil;
use crate::tools::ToolCache;

/// The uv release fetched when none is on PATH.
pub const PINNED_UV_VERSION: &str = "0.13.9";

/// One pinned wheel from PyPI (the `uv` project's own wheels carry the static binary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinnedWheel {
    /// `std::env::consts::ARCH` this wheel runs on.
    pub arch: &'static str,
    pub url: &'static str,
    pub sha256: &'static str,
}

/// Linux wheels for the supported architectures.
pub const PINNED_WHEELS: &[PinnedWheel] = &[
    PinnedWheel {
        arch: "x86_64",
        url: "https://files.pythonhosted.org/packages/3d/aa/26d64642d808de4a652579ef950d7cd2d37f080a8babf9c67c6b75fc4c3f/uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        sha256: "d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19",
    },
    PinnedWheel {
        arch: "aarch64",
        url: "https://files.pythonhosted.org/packages/57/15/94b6cd62ac3ff6550288328e8035288875197cbc183f51554b266a69877b/uv-0.13.9-py3-none-manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1_aarch64.whl",
        sha256: "5435c5ce14a56431208ca0996416d310f1598e8c2c8ba707688985a16bb82dbe",
    },
];

/// Upper bound for a wheel download (the real ones are ~18 MB).
const MAX_WHEEL_BYTES: u64 = 128 * 1024 * 1024;

/// Where the uv binary came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UvOrigin {
    /// Found on the host PATH (or given explicitly).
    Host,
    /// The pinned release in our cache.
    Pinned,
}

/// A uv binary we will run (only in the prepare sandbox and for `uv python find`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UvBinary {
    /// Canonical path.
    pub path: PathBuf,
    pub version: String,
    pub origin: UvOrigin,
}

/// Where uv is or will be, without network access or spawning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UvLocation {
    Host(PathBuf),
    Pinned { path: PathBuf, wheel: PinnedWheel },
}

impl UvLocation {
    /// The version, from the pin or the version cache (spawns `uv --version` only once per binary).
    pub(crate) fn version(&self, tools: &ToolCache) -> Result<String> {
        match self {
            UvLocation::Pinned { .. } => Ok(PINNED_UV_VERSION.to_owned()),
            UvLocation::Host(path) => tools.version_of(path, || uv_version(path)),
        }
    }
}

/// The pinned wheel for this machine, if there is one.
pub fn pinned_wheel() -> Option<PinnedWheel> {
    PINNED_WHEELS.iter().copied().find(|w| w.arch == std::env::consts::ARCH)
}

/// Cache path of the pinned uv binary.
pub(crate) fn pinned_path(uv_dir: &Path) -> PathBuf {
    uv_dir.join(format!("{PINNED_UV_VERSION}-{}", std::env::consts::ARCH)).join("uv")
}

/// Finds uv without side effects: an explicit path, else `uv` on `path_env`, else the pinned
/// build's cache location (which may not be downloaded yet).
pub(crate) fn locate_uv(
    explicit: Option<&Path>,
    path_env: Option<&OsStr>,
    uv_dir: &Path,
) -> Result<UvLocation> {
    if let Some(path) = explicit {
        let real = std::fs::canonicalize(path)
            .map_err(|_| Error::MissingPath { path: path.to_owned() })?;
        return Ok(UvLocation::Host(real));
    }
    if let Some(found) = engine_detect::which("uv", path_env) {
        let real = std::fs::canonicalize(&found).unwrap_or(found);
        return Ok(UvLocation::Host(real));
    }
    let wheel = pinned_wheel()
        .ok_or_else(|| Error::UvUnsupportedPlatform { arch: std::env::consts::ARCH.to_owned() })?;
    Ok(UvLocation::Pinned { path: pinned_path(uv_dir), wheel })
}

/// Makes sure the located uv exists (downloading the pinned one if needed) and returns it.
pub(crate) fn materialize(
    location: &UvLocation,
    tools: &ToolCache,
    status: &mut dyn FnMut(&str),
) -> Result<UvBinary> {
    match location {
        UvLocation::Host(path) => Ok(UvBinary {
            path: path.clone(),
            version: location.version(tools)?,
            origin: UvOrigin::Host,
        }),
        UvLocation::Pinned { path, wheel } => {
            if !path.is_file() {
                status(&format!("uv is not on PATH; downloading uv {PINNED_UV_VERSION} from PyPI"));
                fetch_uv(wheel, path)?;
            }
            Ok(UvBinary {
                path: path.clone(),
                version: PINNED_UV_VERSION.to_owned(),
                origin: UvOrigin::Pinned,
            })
        }
    }
}

/// Public entry point: uv from PATH, else the pinned release fetched into
/// `<cache_dir>/bwrap/uv/`. `status` receives short progress lines.
pub fn find_or_fetch_uv(
    cache_dir: &Path,
    path_env: Option<&OsStr>,
    status: &mut dyn FnMut(&str),
) -> Result<UvBinary> {
    let layout = crate::cache::CacheLayout::new(cache_dir);
    let tools = ToolCache::new(layout.tools_file());
    let location = locate_uv(None, path_env, &layout.uv_dir())?;
    materialize(&location, &tools, status)
}

fn uv_version(uv: &Path) -> Result<String> {
    let out = Command::new(uv)
        .arg("--version")
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| Error::UvVersion { uv: uv.to_owned(), message: e.to_string() })?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "uv 0.9.5 (d5f39331a 2025-10-21)"
    text.split_whitespace()
        .nth(1)
        .filter(|v| out.status.success() && v.starts_with(|c: char| c.is_ascii_digit()))
        .map(str::to_owned)
        .ok_or_else(|| Error::UvVersion {
            uv: uv.to_owned(),
            message: format!("unexpected output {:?}", text.trim()),
        })
}

/// Downloads `wheel` (honouring `HTTPS_PROXY`, trusting the platform CA store), checks its
/// sha256 before anything is extracted, and writes the `uv` binary to `dest` atomically.
pub fn fetch_uv(wheel: &PinnedWheel, dest: &Path) -> Result<()> {
    let (dir, dest_name) = fsutil::private_parent(dest)?;
    let download_err = |message: String| Error::UvDownload { url: wheel.url.to_owned(), message };

    let tls =
        ureq::tls::TlsConfig::builder().root_certs(ureq::tls::RootCerts::PlatformVerifier).build();
    // The default config already honours HTTPS_PROXY/ALL_PROXY (and their lower-case forms).
    let config = ureq::Agent::config_builder()
        .tls_config(tls)
        .timeout_connect(Some(Duration::from_secs(20)))
        .timeout_global(Some(Duration::from_secs(600)))
        .build();
    let agent = ureq::Agent::new_with_config(config);
    let mut response = agent.get(wheel.url).call().map_err(|e| download_err(e.to_string()))?;
    let mut reader = response.body_mut().with_config().limit(MAX_WHEEL_BYTES).reader();

    let wheel_name = format!(".uv-wheel.{}.tmp", fsutil::unique_suffix());
    let wheel_path = dir.path().join(&wheel_name);
    let result = (|| -> Result<()> {
        let mut file = dir.create_new(&wheel_name)?.ok_or_else(|| {
            Error::io(format!("creating {}", wheel_path.display()))(std::io::Error::from(
                std::io::ErrorKind::AlreadyExists,
            ))
        })?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = reader.read(&mut buf).map_err(|e| download_err(e.to_string()))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            file.write_all(&buf[..n])
                .map_err(Error::io(format!("writing {}", wheel_path.display())))?;
        }
        let actual = fsutil::hex(&hasher.finalize());
        if actual != wheel.sha256 {
            return Err(Error::UvChecksum { expected: wheel.sha256.to_owned(), actual });
        }
        extract_uv(&wheel_path, &dir, &dest_name)
    })();
    let _ = dir.remove(&wheel_name);
    result
}

/// Extracts `<name>.data/scripts/uv` from a verified wheel into `dir/dest` (mode 0755).
fn extract_uv(wheel: &Path, dir: &reaper::PrivateDir, dest: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let wheel_err = |message: String| Error::UvWheel { message };
    let file =
        std::fs::File::open(wheel).map_err(Error::io(format!("opening {}", wheel.display())))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| wheel_err(e.to_string()))?;
    let name = archive
        .file_names()
        .filter_map(Result::ok)
        .find(|n| n.ends_with(".data/scripts/uv"))
        .map(|n| n.into_owned())
        .ok_or_else(|| wheel_err("no `*.data/scripts/uv` entry".to_owned()))?;
    let mut entry = archive.by_name(&name).map_err(|e| wheel_err(e.to_string()))?;
    let tmp = format!(".uv.{}.tmp", fsutil::unique_suffix());
    let mut copy = || -> std::io::Result<()> {
        {
            let mut out = dir
                .create_new(&tmp)
                .map_err(|e| std::io::Error::other(e.to_string()))?
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::AlreadyExists))?;
            std::io::copy(&mut (&mut entry).take(MAX_WHEEL_BYTES), &mut out)?;
            out.set_permissions(std::fs::Permissions::from_mode(0o755))?;
            out.sync_all()?;
        }
        // The write handle is closed before the binary becomes visible: executing a file that
        // is still open for writing fails with ETXTBSY (seen with parallel first runs).
        rustix::fs::renameat(dir.fd(), tmp.as_str(), dir.fd(), dest).map_err(std::io::Error::from)
    };
    copy().map_err(|e| {
        let _ = dir.remove(&tmp);
        Error::Io {
            context: format!("extracting uv to {}", dir.path().join(dest).display()),
            source: e,
        }
    })
}
