//! Where the engine keeps what it downloads and builds: the layout of `<cache_dir>/bwrap/`,
//! shared by the engine, its environments and its uv.

use std::path::{Path, PathBuf};

/// The directories under `<cache_dir>/bwrap/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CacheLayout {
    root: PathBuf,
}

impl CacheLayout {
    pub(crate) fn new(cache_dir: &Path) -> CacheLayout {
        CacheLayout { root: cache_dir.join("bwrap") }
    }
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }
    pub(crate) fn uv_dir(&self) -> PathBuf {
        self.root.join("uv")
    }
    pub(crate) fn uv_cache(&self) -> PathBuf {
        self.root.join("uv-cache")
    }
    pub(crate) fn python_dir(&self) -> PathBuf {
        self.root.join("python")
    }
    pub(crate) fn envs_dir(&self) -> PathBuf {
        self.root.join("envs")
    }
    pub(crate) fn locks_dir(&self) -> PathBuf {
        self.root.join("locks")
    }
    pub(crate) fn etc_dir(&self) -> PathBuf {
        self.root.join("etc")
    }
    pub(crate) fn tools_file(&self) -> PathBuf {
        self.root.join("tools.json")
    }
}
