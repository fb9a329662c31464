//! Environment identity: the key that names a prepared environment (pure), and the marker
//! written next to it once it is complete.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsutil::sha256_hex;

/// Bumped whenever the layout of a prepared environment changes.
const FORMAT: &str = "python-sandbox-bwrap-env-v2";

/// Pure: the directory name of the environment for these inputs. Dependencies are
/// order-insensitive; the interpreter request is either an explicit choice or
/// `requires-python`, and the interpreter actually chosen is checked via the marker.
pub(crate) fn env_key(
    requires_python: Option<&str>,
    dependencies: &[String],
    python_request: Option<&str>,
    uv_version: &str,
) -> String {
    let mut deps: Vec<&str> = dependencies.iter().map(|d| d.trim()).collect();
    deps.sort_unstable();
    deps.dedup();
    let mut text = String::new();
    for part in [
        FORMAT,
        std::env::consts::ARCH,
        requires_python.unwrap_or(""),
        python_request.unwrap_or(""),
        uv_version,
    ] {
        text.push_str(part);
        text.push('\0');
    }
    for dep in deps {
        text.push_str(dep);
        text.push('\n');
    }
    sha256_hex(text.as_bytes())[..32].to_owned()
}

/// Written (atomically, outside the environment directory so nothing running in the prepare
/// sandbox can forge it) once an environment is complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Marker {
    pub(crate) format: String,
    /// The base interpreter, canonical.
    pub(crate) python: PathBuf,
    /// Its identity when the environment was built; a changed interpreter means a rebuild.
    pub(crate) python_identity: String,
    /// `sys.base_prefix` and `sys.base_exec_prefix`, mounted read-only at run time.
    pub(crate) prefixes: Vec<PathBuf>,
    pub(crate) python_version: String,
    pub(crate) uv_version: String,
    pub(crate) dependencies: Vec<String>,
    /// See `PreparedEnv::library_path`.
    #[serde(default)]
    pub(crate) library_path: bool,
    /// The [`lock_key`] of its installed packages (none without dependencies).
    #[serde(default)]
    pub(crate) lock: Option<String>,
    /// Its installed packages, `name==version` as resolved (empty for older environments).
    #[serde(default)]
    pub(crate) pins: Vec<String>,
    /// [`family`] of what it was built for: another dependency list of the same family that
    /// its pins satisfy may run in it.
    #[serde(default)]
    pub(crate) family: Option<String>,
}

/// Pure: what an environment was built for apart from its dependencies (`requires-python`,
/// the interpreter request, uv's version): environments of one family share an interpreter.
pub(crate) fn family(
    requires_python: Option<&str>,
    python_request: Option<&str>,
    uv_version: &str,
) -> String {
    env_key(requires_python, &[], python_request, uv_version)
}

/// Pure: what a set of installed packages is, for reuse across dependency lists that resolve
/// alike (`numpy` and `numpy>=1.20` today): the checked resolution (`lockfile::render`), the
/// interpreter it was installed for (its identity) and uv's version.
pub(crate) fn lock_key(rendered_lock: &str, python_identity: &str, uv_version: &str) -> String {
    let mut text = String::new();
    for part in [FORMAT, std::env::consts::ARCH, python_identity, uv_version, rendered_lock] {
        text.push_str(part);
        text.push('\0');
    }
    sha256_hex(text.as_bytes())[..32].to_owned()
}

impl Marker {
    pub(crate) fn new(
        python: PathBuf,
        python_identity: String,
        prefixes: Vec<PathBuf>,
        python_version: String,
        uv_version: String,
        dependencies: Vec<String>,
    ) -> Marker {
        Marker {
            format: FORMAT.to_owned(),
            python,
            python_identity,
            prefixes,
            python_version,
            uv_version,
            dependencies,
            library_path: false,
            lock: None,
            pins: Vec::new(),
            family: None,
        }
    }

    /// Reads a marker; `None` if absent, unreadable or from another format.
    pub(crate) fn read(path: &Path) -> Option<Marker> {
        let bytes = std::fs::read(path).ok()?;
        let marker: Marker = serde_json::from_slice(&bytes).ok()?;
        (marker.format == FORMAT).then_some(marker)
    }

    /// Still valid: the interpreter it was built with is unchanged.
    pub(crate) fn is_current(&self) -> bool {
        crate::fsutil::identity(&self.python).as_deref() == Some(self.python_identity.as_str())
    }
}
