//! Which files a run wrote into the workspace, for `run --json`: a bounded walk before and after,
//! compared by size and modification time. Symlinks are not followed and `.git` is skipped, and so
//! are the CLI's own stdout and stderr when they are files there (`run --json 2>log`): what the CLI
//! writes is not the script's.

use std::collections::BTreeMap;
use std::os::fd::AsFd as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::time::SystemTime;

/// At most this many entries are looked at, so a huge workspace cannot stall a run.
const MAX_ENTRIES: usize = 50_000;

/// Relative path → (size, modification time).
pub(crate) type Snapshot = BTreeMap<String, (u64, Option<SystemTime>)>;

pub(crate) fn snapshot(root: &Path) -> Snapshot {
    let own = own_outputs();
    let mut out = Snapshot::new();
    let mut stack = vec![root.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                return out;
            }
            let Ok(ft) = entry.file_type() else { continue };
            let path = entry.path();
            if ft.is_dir() {
                if entry.file_name() != ".git" {
                    stack.push(path);
                }
            } else if ft.is_file()
                && let (Ok(meta), Ok(rel)) = (entry.metadata(), path.strip_prefix(root))
                && !own.contains(&(meta.dev(), meta.ino()))
            {
                out.insert(rel.to_string_lossy().into_owned(), (meta.len(), meta.modified().ok()));
            }
        }
    }
    out
}

/// Device and inode of our stdout and stderr where they are regular files.
fn own_outputs() -> Vec<(u64, u64)> {
    let fds = [
        std::io::stdout().as_fd().try_clone_to_owned(),
        std::io::stderr().as_fd().try_clone_to_owned(),
    ];
    fds.into_iter()
        .filter_map(|fd| std::fs::File::from(fd.ok()?).metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| (m.dev(), m.ino()))
        .collect()
}

/// Files that are new or changed since `before`, sorted.
pub(crate) fn written_since(before: &Snapshot, root: &Path) -> Vec<String> {
    snapshot(root)
        .into_iter()
        .filter(|(path, now)| before.get(path) != Some(now))
        .map(|(path, _)| path)
        .collect()
}
