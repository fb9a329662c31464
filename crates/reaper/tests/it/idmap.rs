//! Idmapped copies against this machine's kernel (root only): the trial of `supported` is the
//! copy the next `clone_idmapped` of the same directory returns (made once, never unmounted on
//! the run's path), and only for that directory.

#![allow(clippy::print_stdout)]

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use reaper::idmap;

/// `STATX_MNT_ID_UNIQUE` (Linux 6.8): mount ids that are never reused, so they order mounts
/// by creation.
const MNT_ID_UNIQUE: u32 = 0x4000;

/// The unique mount id of the tree `fd` is the root of, `None` before Linux 6.8.
fn mount_id(fd: &OwnedFd) -> Option<u64> {
    let stat = rustix::fs::statx(
        fd,
        "",
        rustix::fs::AtFlags::EMPTY_PATH,
        rustix::fs::StatxFlags::from_bits_retain(MNT_ID_UNIQUE),
    )
    .expect("statx");
    (stat.stx_mask & MNT_ID_UNIQUE != 0).then_some(stat.stx_mnt_id)
}

fn open_path(path: &std::path::Path) -> OwnedFd {
    rustix::fs::open(
        path,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .expect("open")
}

#[test]
fn the_trial_is_the_copy_of_the_same_directory_only() {
    if !rustix::process::geteuid().is_root() {
        println!("SKIPPED: idmap: idmapped mounts are made for root callers only");
        return;
    }
    let tmp = tempfile::Builder::new().prefix("reaper-idmap-").tempdir().expect("tempdir");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir(&a).expect("a");
    std::fs::create_dir(&b).expect("b");
    if !idmap::supported(&a) {
        println!("SKIPPED: idmap: {} cannot be mounted idmapped here", a.display());
        return;
    }
    // Another directory's clone does not take the trial of `a`...
    let of_b = idmap::clone_idmapped(open_path(&b).as_fd()).expect("clone b");
    // ...which the clone of `a` then gets; a second clone of `a` is a fresh copy.
    let first = idmap::clone_idmapped(open_path(&a).as_fd()).expect("clone a");
    let second = idmap::clone_idmapped(open_path(&a).as_fd()).expect("clone a again");
    match (mount_id(&first), mount_id(&of_b), mount_id(&second)) {
        // The trial was made before `b`'s copy, the second copy of `a` after it.
        (Some(first), Some(of_b), Some(second)) => {
            assert!(first < of_b && of_b < second, "{first} {of_b} {second}");
        }
        _ => println!("SKIPPED: idmap order: no unique mount ids before Linux 6.8"),
    }
    // Every copy is of its own directory, whatever path it came from.
    let ino = |fd: &OwnedFd| rustix::fs::fstat(fd).expect("fstat").st_ino;
    assert_eq!(ino(&first), std::fs::metadata(&a).expect("a").ino());
    assert_eq!(ino(&second), std::fs::metadata(&a).expect("a").ino());
    assert_eq!(ino(&of_b), std::fs::metadata(&b).expect("b").ino());
    // A trial after the directory was replaced is not handed out for the new one.
    assert!(idmap::supported(&a));
    std::fs::remove_dir(&a).expect("rm a");
    std::fs::create_dir(&a).expect("a again");
    let fresh = idmap::clone_idmapped(open_path(&a).as_fd()).expect("clone new a");
    assert_eq!(ino(&fresh), std::fs::metadata(&a).expect("a").ino());
}
