//! A tiny on-disk cache of tool versions keyed by binary identity (path, size, mtime, inode),
//! so a warm run learns the uv and bwrap versions without spawning either.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::fsutil;

pub(crate) struct ToolCache {
    file: PathBuf,
}

impl ToolCache {
    pub(crate) fn new(file: PathBuf) -> ToolCache {
        ToolCache { file }
    }

    /// The cached version of `binary`, or `compute()` stored for next time.
    pub(crate) fn version_of(
        &self,
        binary: &Path,
        compute: impl FnOnce() -> Result<String>,
    ) -> Result<String> {
        let key = fsutil::identity(binary);
        let mut entries: BTreeMap<String, String> = std::fs::read(&self.file)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        if let Some(version) = key.as_ref().and_then(|k| entries.get(k)) {
            return Ok(version.clone());
        }
        let version = compute()?;
        if let Some(key) = key {
            // Entries for replaced binaries would pile up; one per path is enough.
            let path_prefix = format!("{}|", binary.display());
            entries.retain(|k, _| !k.starts_with(&path_prefix));
            entries.insert(key, version.clone());
            if let Ok(bytes) = serde_json::to_vec_pretty(&entries) {
                // A lost update only costs one extra `--version` call next time.
                let _ = fsutil::write_atomic(&self.file, &bytes);
            }
        }
        Ok(version)
    }
}
