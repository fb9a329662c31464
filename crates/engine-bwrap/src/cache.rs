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
    /// The package store: the shared uv cache and, for the length of a wheels-only install,
    /// the environment it installs into. One directory, so one mount in the prepare sandbox:
    /// `link(2)` never crosses mounts, and uv hard-links from its cache only within one.
    pub(crate) fn store(&self) -> PathBuf {
        self.root.join("store")
    }
    pub(crate) fn uv_cache(&self) -> PathBuf {
        self.store().join("uv")
    }
    /// Where an environment is while uv installs into it (see [`CacheLayout::store`]).
    pub(crate) fn building(&self, key: &str) -> PathBuf {
        self.store().join("building").join(key)
    }
    /// `<lock key>` → the key of a ready environment with exactly those packages installed
    /// (`key::lock_key`): a new dependency list that resolves alike links its files.
    pub(crate) fn by_lock(&self, lock: &str) -> PathBuf {
        self.root.join("by-lock").join(lock)
    }
    /// The uv cache of versions before the package store: removed by `reap`.
    pub(crate) fn legacy_uv_cache(&self) -> PathBuf {
        self.root.join("uv-cache")
    }
    /// What each host interpreter said about itself, per identity of its file.
    pub(crate) fn interpreters_dir(&self) -> PathBuf {
        self.root.join("interpreters")
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
    /// Held shared by every prepare step that installs from the package cache, exclusive by a
    /// prune removing packages from it.
    pub(crate) fn store_lock(&self) -> PathBuf {
        self.locks_dir().join("store.lock")
    }
    /// The cache's size as last measured (`detect`, `reap`).
    pub(crate) fn usage_file(&self) -> PathBuf {
        self.root.join("usage.json")
    }
    pub(crate) fn tools_file(&self) -> PathBuf {
        self.root.join("tools.json")
    }
}
