//! Protected paths on the host, for every engine that mounts host trees writable (native,
//! bwrap, docker, podman): `sandbox_core::protect`'s decisions over `reaper::protect`'s walk
//! and placeholders. An engine calls [`protect`] with its writable trees before its sandbox
//! starts, mounts every returned path read-only over itself, and releases (or, for a
//! session, holds) the placeholders once the sandbox is gone.

use std::path::{Path, PathBuf};

use reaper::protect::{Entry, Made, Placeholder, Placeholders, Walk};
use sandbox_core::protect::{Found, Kind};

/// One tree a sandbox may write: the workspace or a read-write directory mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WritableTree {
    /// Canonical host path of its top.
    pub top: PathBuf,
    /// It is the caller's home directory (its shell start-up files count too).
    pub is_home: bool,
    /// Paths relative to `top` that the caller made writable on purpose (an approved
    /// read-write mount of a protected path): not guarded, nor what lies below them.
    pub exempt: Vec<String>,
}

/// Why a run's trees cannot be protected.
#[derive(Debug)]
pub enum ProtectError {
    /// A protected name is a link or a special file.
    Unprotectable {
        /// The host path.
        path: PathBuf,
        /// `symbolic link` or `special file`.
        what: &'static str,
    },
    /// The walk, a placeholder or the state dir failed.
    Host(reaper::Error),
}

impl std::fmt::Display for ProtectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProtectError::Unprotectable { path, what } => write!(
                f,
                "`{}` is a {what} at a protected name, which cannot be made read-only in the sandbox\nhint: protected paths (`.git`, `.claude`, `.envrc`, ...) are read-only in every sandbox because host tools run what they hold; replace the {what} with a regular file or directory, or remove it",
                path.display()
            ),
            ProtectError::Host(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ProtectError {}

impl From<reaper::Error> for ProtectError {
    fn from(e: reaper::Error) -> ProtectError {
        ProtectError::Host(e)
    }
}

/// The trees of a run: the workspace, then each read-write directory mount (`mounts`:
/// canonical source and whether it is read-write). A read-write mount inside another tree is
/// exempt there (its own tree is guarded on its own terms).
pub fn writable_trees(
    workspace: &Path,
    mounts: &[(PathBuf, bool)],
    home: &Path,
) -> Vec<WritableTree> {
    let mut tops: Vec<&Path> = vec![workspace];
    tops.extend(mounts.iter().filter(|(p, rw)| *rw && p.is_dir()).map(|(p, _)| p.as_path()));
    let mut out: Vec<WritableTree> = Vec::new();
    for top in tops {
        if out.iter().any(|t| t.top == top) {
            continue;
        }
        let exempt = mounts
            .iter()
            .filter(|(_, rw)| *rw)
            .filter_map(|(p, _)| p.strip_prefix(top).ok())
            .filter(|rel| !rel.as_os_str().is_empty())
            .map(|rel| rel.to_string_lossy().into_owned())
            .collect();
        out.push(WritableTree { top: top.to_owned(), is_home: top == home, exempt });
    }
    out
}

/// Locks each tree's placeholders, finds its protected entries, makes the missing
/// placeholders, and returns them with every host path to mount read-only over itself
/// (parents before children, each once). `state_dir` is `reaper::protect::state_dir` of the
/// cache root every engine shares.
pub fn protect(
    trees: &[WritableTree],
    state_dir: &Path,
) -> Result<(Placeholders, Vec<PathBuf>), ProtectError> {
    use sandbox_core::protect::{WALK_DEPTH, WALK_DIRS, WALK_SKIP, guards, protected_name};
    let mut held = Placeholders::new(state_dir)?;
    let mut paths: Vec<PathBuf> = Vec::new();
    let is_protected = |name: &str| protected_name(name).is_some();
    let walk =
        Walk { protected: &is_protected, skip: WALK_SKIP, depth: WALK_DEPTH, max_dirs: WALK_DIRS };
    for tree in trees {
        held.lock(&tree.top)?;
        let found: Vec<(String, Found)> = reaper::protect::find(&tree.top, &walk)?
            .into_iter()
            .map(|(rel, entry)| {
                let found = match entry {
                    Entry::Dir => Found::Dir,
                    Entry::File => Found::File,
                    Entry::Symlink => Found::Symlink,
                    Entry::Other => Found::Other,
                };
                (rel, found)
            })
            .collect();
        let guards = guards(&found, tree.is_home, &tree.exempt).map_err(|u| {
            let what = match u.found {
                Found::Symlink => "symbolic link",
                _ => "special file",
            };
            ProtectError::Unprotectable { path: tree.top.join(&u.rel), what }
        })?;
        for guard in guards {
            if !guard.exists {
                let kind = match guard.kind {
                    Kind::Dir => Placeholder::Dir,
                    Kind::File => Placeholder::File,
                };
                if held.make(&tree.top, &guard.rel, kind)? == Made::Unwritable {
                    continue;
                }
            }
            let path = tree.top.join(&guard.rel);
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
    }
    paths.sort_by_key(|p| p.components().count());
    Ok((held, paths))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_are_the_workspace_and_writable_directory_mounts_with_their_exemptions() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        let other = tmp.path().join("other");
        for dir in [&ws.join(".git"), &ws.join("out"), &other] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let mounts = vec![(ws.join(".git"), true), (other.clone(), true), (ws.join("out"), false)];
        let trees = writable_trees(&ws, &mounts, &other);
        assert_eq!(trees.len(), 3, "{trees:?}");
        assert_eq!(trees[0].exempt, [".git"]);
        assert!(trees[2].is_home && trees[2].top == other);
    }

    #[test]
    fn protect_holds_missing_names_and_refuses_links() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join("sub/.git")).unwrap();
        let state = tmp.path().join("state");
        let trees = writable_trees(&ws, &[], Path::new("/nonexistent-home"));
        let (held, paths) = protect(&trees, &state).unwrap();
        assert!(ws.join(".claude").is_dir() && ws.join(".envrc").is_file());
        assert!(paths.contains(&ws.join("sub/.git")) && paths.contains(&ws.join(".git")));
        assert!(!ws.join(".bashrc").exists(), "no shell files outside a home");
        held.release().unwrap();
        assert!(!ws.join(".claude").exists() && !ws.join(".git").exists());
        assert!(ws.join("sub/.git").is_dir(), "what existed stays");

        std::os::unix::fs::symlink("/etc/passwd", ws.join(".envrc")).unwrap();
        let err = protect(&trees, &state).unwrap_err();
        assert!(err.to_string().contains("is a symbolic link at a protected name"), "{err}");
        assert!(!ws.join(".claude").exists(), "nothing half-done: the failed call's drop released");
    }
}
