//! Creating a missing read-write mount point on the host, for every engine, without ever
//! following a symlink: the walk holds an `O_PATH | O_DIRECTORY | O_NOFOLLOW` handle of each
//! directory and creates the next component with `mkdirat` relative to it, so a link planted
//! (or swapped in) anywhere on the way cannot redirect the creation outside the path asked for.
//! The rule that says when to create is `sandbox_core::missing_mount`.
//!
//! The same walk opens a mount source to pin it ([`open_nofollow`]): every engine mounts, or
//! checks the mount against, that descriptor, so a path swapped for a symlink between the check
//! and the mount is refused instead of followed.

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
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

impl std::fmt::Display for CreateDirError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CreateDirError::NotNormal => f.write_str("not a normalized absolute path"),
            CreateDirError::Symlink { at } => write!(f, "{} is a symlink", at.display()),
            CreateDirError::NotADirectory { at } => {
                write!(f, "{} is not a directory", at.display())
            }
            CreateDirError::Io { at, source } => write!(f, "{}: {source}", at.display()),
        }
    }
}

impl std::error::Error for CreateDirError {}

const DIR_HANDLE: OFlags =
    OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// Creates `dir` (absolute, lexically normal) and its missing parents, mode 0755, refusing when
/// any existing component is a symlink or not a directory. Directories already there are kept.
pub fn create_dir_all_nofollow(dir: &Path) -> Result<(), CreateDirError> {
    let names = normal_names(dir)?;
    walk_dirs(root_handle()?, PathBuf::from("/"), &names, true).map(drop)
}

/// Opens `path` (absolute, lexically normal) as an `O_PATH` descriptor without following any
/// symlink, the last component included (a link there is [`CreateDirError::Symlink`], never
/// opened as the link itself), and checks the descriptor still names `path`: what a caller
/// classified by its path is what it holds, and what it mounts or compares through the
/// descriptor. (The variants are [`create_dir_all_nofollow`]'s; nothing is created.)
pub fn open_nofollow(path: &Path) -> Result<OwnedFd, CreateDirError> {
    let fd = open_nofollow_in(root_handle()?.as_fd(), Path::new("/"), path)?;
    // A parent renamed while the walk held it: the descriptor no longer names the path that was
    // classified.
    let now = rustix::fs::readlink(format!("/proc/self/fd/{}", fd.as_raw_fd()), Vec::new())
        .map(|p| PathBuf::from(std::ffi::OsString::from_vec(p.into_bytes())));
    match now {
        Ok(now) if now == path => Ok(fd),
        Ok(now) => Err(CreateDirError::Io {
            at: path.to_owned(),
            source: std::io::Error::other(format!(
                "it moved to {} while it was opened",
                now.display()
            )),
        }),
        Err(e) => Err(errno_at(path, e)),
    }
}

/// Opens `path` (absolute, lexically normal) below the directory `dir` as if `dir` were `/`
/// (another mount namespace's root, such as a container's `/proc/<pid>/root`) as an `O_PATH`
/// descriptor, following no symlink. `shown` is how `dir` is named in errors.
pub fn open_nofollow_in(
    dir: BorrowedFd<'_>,
    shown: &Path,
    path: &Path,
) -> Result<OwnedFd, CreateDirError> {
    let names = normal_names(path)?;
    let start =
        rustix::fs::openat(dir, c".", DIR_HANDLE, Mode::empty()).map_err(|e| errno_at(shown, e))?;
    let Some((last, parents)) = names.split_last() else { return Ok(start) };
    let handle = walk_dirs(start, shown.to_owned(), parents, false)?;
    let at = parents.iter().fold(shown.to_owned(), |at, name| at.join(name)).join(last);
    let fd = rustix::fs::openat(&handle, *last, LEAF_HANDLE, Mode::empty())
        .map_err(|e| errno_at(&at, e))?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| errno_at(&at, e))?;
    if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink {
        return Err(CreateDirError::Symlink { at });
    }
    Ok(fd)
}

/// The last component: a file or a directory, and a symlink itself rather than its target.
const LEAF_HANDLE: OFlags = OFlags::PATH.union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

fn errno_at(at: &Path, e: Errno) -> CreateDirError {
    CreateDirError::Io {
        at: at.to_owned(),
        source: std::io::Error::from_raw_os_error(e.raw_os_error()),
    }
}

fn root_handle() -> Result<OwnedFd, CreateDirError> {
    let root = Path::new("/");
    rustix::fs::open(root, DIR_HANDLE, Mode::empty()).map_err(|e| errno_at(root, e))
}

/// The names of an absolute, lexically normal path.
fn normal_names(path: &Path) -> Result<Vec<&OsStr>, CreateDirError> {
    if !path.is_absolute() {
        return Err(CreateDirError::NotNormal);
    }
    path.components()
        .filter(|c| *c != Component::RootDir)
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(CreateDirError::NotNormal),
        })
        .collect()
}

/// Walks `names` down from `handle` (named `at`) one `O_NOFOLLOW` directory handle at a time,
/// creating missing ones when `create`; returns the last handle.
fn walk_dirs(
    mut handle: OwnedFd,
    mut at: PathBuf,
    names: &[&OsStr],
    create: bool,
) -> Result<OwnedFd, CreateDirError> {
    for name in names {
        at.push(name);
        let next = match rustix::fs::openat(&handle, *name, DIR_HANDLE, Mode::empty()) {
            Err(Errno::NOENT) if create => {
                match rustix::fs::mkdirat(&handle, *name, Mode::from_raw_mode(0o755)) {
                    // Made by someone else meanwhile: the open below checks what it is.
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(errno_at(&at, e)),
                }
                rustix::fs::openat(&handle, *name, DIR_HANDLE, Mode::empty())
            }
            other => other,
        };
        handle = match next {
            Ok(fd) => fd,
            // With O_NOFOLLOW and O_DIRECTORY, a symlink or a file fails with one of these: ask
            // the entry itself (without following it) which one it is.
            Err(Errno::NOTDIR | Errno::LOOP) => {
                let kind = rustix::fs::statat(&handle, *name, AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| FileType::from_raw_mode(st.st_mode));
                return Err(match kind {
                    Ok(FileType::Symlink) => CreateDirError::Symlink { at },
                    _ => CreateDirError::NotADirectory { at },
                });
            }
            Err(e) => return Err(errno_at(&at, e)),
        };
    }
    Ok(handle)
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

    /// Each row: the path to pin under a temp dir, and the outcome. A link is refused wherever
    /// it is, the last component included (`O_PATH | O_NOFOLLOW` alone would open the link).
    #[test]
    fn pins_files_and_directories_and_refuses_links() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let base = tmp.path().canonicalize().expect("canonical tempdir");
        std::fs::create_dir_all(base.join("real/sub")).expect("real");
        std::fs::write(base.join("real/file"), "x").expect("file");
        symlink(base.join("real"), base.join("link")).expect("link");
        symlink(base.join("real/file"), base.join("filelink")).expect("filelink");
        let rows: [(&str, &str); 7] = [
            ("real", "dir"),
            ("real/sub", "dir"),
            ("real/file", "file"),
            ("link", "symlink link"),
            ("link/sub", "symlink link"),
            ("filelink", "symlink filelink"),
            ("real/../real", "not normal"),
        ];
        for (rel, want) in rows {
            let got = match open_nofollow(&base.join(rel)) {
                Ok(fd) => {
                    let st = rustix::fs::fstat(&fd).expect("fstat");
                    let real = std::fs::metadata(base.join(rel)).expect("metadata");
                    assert_eq!(std::os::unix::fs::MetadataExt::ino(&real), st.st_ino, "{rel}");
                    match FileType::from_raw_mode(st.st_mode) {
                        FileType::Directory => "dir".to_owned(),
                        FileType::RegularFile => "file".to_owned(),
                        other => format!("{other:?}"),
                    }
                }
                Err(CreateDirError::Symlink { at }) => format!("symlink {}", name(&base, &at)),
                Err(CreateDirError::NotNormal) => "not normal".to_owned(),
                Err(e) => format!("{e:?}"),
            };
            assert_eq!(got, want, "{rel}");
        }
        let missing = open_nofollow(&base.join("real/missing"));
        assert!(matches!(missing, Err(CreateDirError::Io { .. })), "{missing:?}");
    }

    fn name(base: &Path, at: &Path) -> String {
        at.strip_prefix(base).unwrap_or(at).display().to_string()
    }
}
