//! Pinning the caller's bind sources (the workspace, `--mount` paths, a script outside the
//! workspace) before bwrap starts. They were checked by their canonical paths (`crate::paths`),
//! and a path can be swapped for a symlink to anywhere (`renameat2(RENAME_EXCHANGE)`) between that
//! check and the mount. So each one is opened without following any link, and the descriptor
//! is what gets mounted: `--bind-fd`/`--ro-bind-fd` for a non-root caller, the staged clone of
//! its mount for a root caller (`crate::stage`). A source that is a link by then is refused.

use std::os::fd::OwnedFd;
use std::path::Path;

use crate::error::{Error, Result};

/// The descriptor of the canonical, already checked `path`, opened with no link followed.
pub(crate) fn open(path: &Path) -> Result<OwnedFd> {
    engine_detect::open_nofollow(path)
        .map_err(|e| Error::MountChanged { path: path.to_owned(), reason: e.to_string() })
}
