//! Creating a missing read-write mount point on the host, for every engine, without ever
//! following a symlink: the walk holds an `O_PATH | O_DIRECTORY | O_NOFOLLOW` handle of each
//! directory and creates the next component with `mkdirat` relative to it, so a link planted
//! (or swapped in) anywhere on the way cannot redirect the creation outside the path asked for.
//! The rule that says when to create is `sandbox_core::missing_mount`.

use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// Why [`create_dir_all_nofollow`] refused or failed; `at` is the component where it stopped.
#[derive(Debug)]
pub enum CreateDirError {
    /// The path is not absolute and lexically normal (`.`, `..`).
    NotNormal,
    /// A component is a symlink.
    Symlink {
        /// The symlink.
        at: PathBuf,
    },
    /// A component exists and is not a directory.
    NotADirectory {
        /// The non-directory.
        at: PathBuf,
    },
    /// The OS refused (permissions, read-only filesystem, ...).
    Io {
        /// Where.
        at: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

const DIR_HANDLE: OFlags =
    OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// Creates `dir` (absolute, lexically normal) and its missing parents, mode 0755, refusing when
/// any existing component is a symlink or not a directory. Directories already there are kept.
pub fn create_dir_all_nofollow(dir: &Path) -> Result<(), CreateDirError> {
    if !dir.is_absolute() {
        return Err(CreateDirError::NotNormal);
    }
    let io = |at: &Path, e: Errno| CreateDirError::Io {
        at: at.to_owned(),
        source: std::io::Error::from_raw_os_error(e.raw_os_error()),
    };
    let root = Path::new("/");
    let mut handle: OwnedFd =
        rustix::fs::open(root, DIR_HANDLE, Mode::empty()).map_err(|e| io(root, e))?;
    let mut at = PathBuf::from("/");
    for component in dir.components() {
        let name = match component {
            Component::RootDir => continue,
            Component::Normal(name) => name,
            _ => return Err(CreateDirError::NotNormal),
        };
        at.push(name);
        let next = match rustix::fs::openat(&handle, name, DIR_HANDLE, Mode::empty()) {
            Err(Errno::NOENT) => {
                match rustix::fs::mkdirat(&handle, name, Mode::from_raw_mode(0o755)) {
                    // Made by someone else meanwhile: the open below checks what it is.
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(io(&at, e)),
                }
                rustix::fs::openat(&handle, name, DIR_HANDLE, Mode::empty())
            }
            other => other,
        };
        handle = match next {
            Ok(fd) => fd,
            // With O_NOFOLLOW and O_DIRECTORY, a symlink or a file fails with one of these: ask
            // the entry itself (without following it) which one it is.
            Err(Errno::NOTDIR | Errno::LOOP) => {
                let kind = rustix::fs::statat(&handle, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| FileType::from_raw_mode(st.st_mode));
                return Err(match kind {
                    Ok(FileType::Symlink) => CreateDirError::Symlink { at },
                    _ => CreateDirError::NotADirectory { at },
                });
            }
            Err(e) => return Err(io(&at, e)),
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    /// Each row: what exists under a temp dir, the path to create, and the outcome.
    #[test]
    fn creates_missing_directories_and_refuses_links_and_files() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = tmp.path().canonicalize().expect("canonical tempdir");
        let outside = base.join("outside");
        std::fs::create_dir(&outside).expect("outside");
        std::fs::create_dir(base.join("real")).expect("real");
        std::fs::write(base.join("file"), "x").expect("file");
        symlink(&outside, base.join("link")).expect("link");
        symlink(base.join("gone"), base.join("dangling")).expect("dangling");
        let rows: [(&str, &str); 7] = [
            ("new/a/b", "ok"),
            ("real", "ok"),
            ("real/sub", "ok"),
            ("link/x", "symlink link"),
            ("dangling/x", "symlink dangling"),
            ("file/x", "not a directory file"),
            ("real/../x", "not normal"),
        ];
        for (rel, want) in rows {
            let got = match create_dir_all_nofollow(&base.join(rel)) {
                Ok(()) => "ok".to_owned(),
                Err(CreateDirError::Symlink { at }) => format!("symlink {}", name(&base, &at)),
                Err(CreateDirError::NotADirectory { at }) => {
                    format!("not a directory {}", name(&base, &at))
                }
                Err(CreateDirError::NotNormal) => "not normal".to_owned(),
                Err(CreateDirError::Io { at, source }) => format!("io {}: {source}", at.display()),
            };
            assert_eq!(got, want, "{rel}");
        }
        assert!(base.join("new/a/b").is_dir() && base.join("real/sub").is_dir());
        let leaked: Vec<_> = std::fs::read_dir(&outside).expect("ls").collect();
        assert!(leaked.is_empty(), "nothing created through the link: {leaked:?}");
        assert!(!base.join("gone").exists(), "nothing created through the dangling link");
    }

    fn name(base: &Path, at: &Path) -> String {
        at.strip_prefix(base).unwrap_or(at).display().to_string()
    }
}
