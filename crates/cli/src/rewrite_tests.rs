//! `rewrite` on real files: links followed, mode, owner, links and attributes kept, read-only
//! files refused with nothing changed (as root too), and the in-place fallback.

use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
use std::path::Path;

use super::rewrite;

const OLD: &[u8] = b"print('old')\n";
const NEW: &[u8] = b"print('new')\n";

fn file(dir: &Path, name: &str, mode: u32) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, OLD).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    path
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_symlink_stays_a_link_and_its_target_is_edited() {
    let dir = tempfile::tempdir().expect("tempdir");
    let real = file(dir.path(), "real.py", 0o640);
    let link = dir.path().join("link.py");
    symlink("real.py", &link).expect("symlink");
    rewrite(&link, OLD, NEW).expect("rewrite");
    assert!(std::fs::symlink_metadata(&link).expect("lstat").file_type().is_symlink());
    assert_eq!(std::fs::read(&real).expect("read"), NEW);
    assert_eq!(std::fs::metadata(&real).expect("stat").mode() & 0o7777, 0o640);
    assert_eq!(names(dir.path()), ["link.py", "real.py"], "no temporary file left");
}

#[test]
fn mode_and_owner_are_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = file(dir.path(), "s.py", 0o751);
    let root = rustix::process::geteuid().is_root();
    if root {
        // Root edits another user's file: it stays theirs.
        let nobody = (rustix::fs::Uid::from_raw(65534), rustix::fs::Gid::from_raw(65534));
        rustix::fs::chown(&path, Some(nobody.0), Some(nobody.1)).expect("chown");
    }
    let before = std::fs::metadata(&path).expect("stat");
    rewrite(&path, OLD, NEW).expect("rewrite");
    let after = std::fs::metadata(&path).expect("stat");
    assert_eq!(std::fs::read(&path).expect("read"), NEW);
    assert_eq!(
        (after.mode() & 0o7777, after.uid(), after.gid()),
        (0o751, before.uid(), before.gid())
    );
    if root {
        assert_eq!(after.uid(), 65534);
    }
}

/// A file with no write bit is refused, as root too, and nothing changes; so is one the caller
/// cannot write (root can write any mode, so that half runs only unprivileged).
#[test]
fn read_only_files_are_refused_with_nothing_changed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = file(dir.path(), "ro.py", 0o444);
    let ino = std::fs::metadata(&path).expect("stat").ino();
    let error = rewrite(&path, OLD, NEW).expect_err("a read-only file");
    let text = format!("{error}");
    assert!(text.contains("it is read-only (mode 0444)"), "{text}");
    let hint =
        error.downcast_ref::<crate::ui::Hinted>().map(|h| h.hint.clone()).unwrap_or_default();
    assert!(hint.starts_with("nothing was changed; if you mean to edit it"), "{hint}");
    let meta = std::fs::metadata(&path).expect("stat");
    assert_eq!((std::fs::read(&path).expect("read").as_slice(), meta.ino()), (OLD, ino));
    assert_eq!(meta.mode() & 0o7777, 0o444);
    assert_eq!(names(dir.path()), ["ro.py"]);
}

/// Hard links would be split by a rename: the same inode is rewritten instead, so every name
/// sees the edit.
#[test]
fn hard_links_are_edited_in_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = file(dir.path(), "a.py", 0o644);
    let other = dir.path().join("b.py");
    std::fs::hard_link(&path, &other).expect("link");
    let ino = std::fs::metadata(&path).expect("stat").ino();
    rewrite(&path, OLD, b"x\n").expect("rewrite");
    assert_eq!(std::fs::read(&other).expect("read"), b"x\n", "shorter: truncated");
    assert_eq!(std::fs::metadata(&path).expect("stat").ino(), ino);
    assert_eq!(names(dir.path()), ["a.py", "b.py"]);
}

/// Extended attributes (POSIX ACLs are some) come along through the atomic replace.
#[test]
fn extended_attributes_are_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = file(dir.path(), "x.py", 0o644);
    let name = "user.python-sandbox-test";
    if let Err(e) = rustix::fs::setxattr(&path, name, b"kept", rustix::fs::XattrFlags::empty()) {
        println!("SKIPPED: no user xattrs on {}: {e}", dir.path().display());
        return;
    }
    rewrite(&path, OLD, NEW).expect("rewrite");
    let mut value = [0u8; 16];
    let n = rustix::fs::getxattr(&path, name, &mut value[..]).expect("xattr kept");
    assert_eq!(&value[..n], b"kept");
    assert_eq!(std::fs::read(&path).expect("read"), NEW);
}
