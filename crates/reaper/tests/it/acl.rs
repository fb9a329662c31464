//! The ACL grant against this machine's filesystem: what a release and a reap put back is
//! byte for byte what was there (`system.posix_acl_access` and the mode), concurrent grants
//! restore once after the last, and nothing is ever done through a symlink.

#![allow(clippy::print_stdout)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use reaper::acl::{self, Grant};

const XATTR: &str = "system.posix_acl_access";
const UID: u32 = 65534;

/// The directory's access ACL (as `getfattr -n system.posix_acl_access` reads it) and mode.
fn snapshot(dir: &Path) -> (Option<Vec<u8>>, u32) {
    let mut buf = vec![0u8; 4096];
    let acl = rustix::fs::getxattr(dir, XATTR, &mut buf[..]).ok().map(|n| buf[..n].to_vec());
    (acl, std::fs::symlink_metadata(dir).expect("stat").mode())
}

fn grants_uid(dir: &Path) -> bool {
    let (acl, _) = snapshot(dir);
    acl.is_some_and(|a| a[4..].chunks(8).any(|c| c[..2] == [2, 0] && c[4..] == UID.to_le_bytes()))
}

/// A directory to lend and a state dir, or `None` (SKIPPED) where the filesystem has no ACLs.
fn setup() -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    let tmp = tempfile::Builder::new().prefix("reaper-acl-").tempdir().expect("tempdir");
    let root = tmp.path().canonicalize().expect("canonical");
    let ws = root.join("edge:ws");
    std::fs::create_dir(&ws).expect("ws");
    std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let probe = rustix::fs::setxattr(&ws, XATTR, &[2, 0, 0, 0], rustix::fs::XattrFlags::empty());
    // An empty ACL is invalid (EINVAL) where ACLs work; anything else means no ACLs here.
    if let Err(e) = probe
        && e != rustix::io::Errno::INVAL
    {
        println!("SKIPPED: acl: no POSIX ACLs on {}: {e}", root.display());
        return None;
    }
    Some((tmp, ws, root.join("state")))
}

#[test]
fn release_puts_back_no_acl_and_the_mode() {
    let Some((_tmp, ws, state)) = setup() else { return };
    let before = snapshot(&ws);
    assert_eq!(before.0, None);
    let grant = Grant::take(&[&ws], UID, &state).expect("take");
    assert!(grants_uid(&ws));
    assert_ne!(snapshot(&ws).1, before.1, "the mask shows in the group bits");
    grant.release().expect("release");
    assert_eq!(snapshot(&ws), before);
    assert_eq!(std::fs::metadata(&state).expect("state").mode() & 0o777, 0o700);
    assert_eq!(std::fs::read_dir(&state).expect("state").count(), 0, "no state left");
}

#[test]
fn release_puts_back_an_existing_acl_byte_for_byte() {
    let Some((_tmp, ws, state)) = setup() else { return };
    // user::rwx user:1000:r-x group::r-x mask::r-x other::---
    let mut own = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (1u16, 7u16, u32::MAX),
        (2, 5, 1000),
        (4, 5, u32::MAX),
        (0x10, 5, u32::MAX),
        (0x20, 0, u32::MAX),
    ] {
        own.extend_from_slice(&tag.to_le_bytes());
        own.extend_from_slice(&perm.to_le_bytes());
        own.extend_from_slice(&id.to_le_bytes());
    }
    rustix::fs::setxattr(&ws, XATTR, &own, rustix::fs::XattrFlags::empty()).expect("own acl");
    let before = snapshot(&ws);
    drop(Grant::take(&[&ws], UID, &state).expect("take"));
    assert_eq!(snapshot(&ws), before, "drop releases too");
}

#[test]
fn concurrent_grants_restore_after_the_last() {
    let Some((_tmp, ws, state)) = setup() else { return };
    let before = snapshot(&ws);
    let first = Grant::take(&[&ws], UID, &state).expect("first");
    let second = Grant::take(&[&ws], UID, &state).expect("second");
    first.release().expect("first release");
    assert!(grants_uid(&ws), "the second run still needs it");
    second.release().expect("second release");
    assert_eq!(snapshot(&ws), before);
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (ws, state) = (ws.clone(), state.clone());
            std::thread::spawn(move || {
                let grant = Grant::take(&[&ws], UID, &state).expect("take");
                assert!(grants_uid(&ws));
                grant.release().expect("release");
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    assert_eq!(snapshot(&ws), before);
}

#[test]
fn reap_restores_a_leftover_once_its_holder_is_gone() {
    let Some((_tmp, ws, state)) = setup() else { return };
    let before = snapshot(&ws);
    // What a killed CLI or an expired session leaves: the record and the changed ACL.
    Grant::take(&[&ws], UID, &state).expect("take").hold("docker-0123abcd").expect("hold");
    assert!(grants_uid(&ws));
    let kept = acl::reap(&state, false, &|h| h == "docker-0123abcd").expect("reap");
    assert_eq!(kept.len(), 1);
    assert!(!kept[0].restored && kept[0].error.as_deref() == Some("in use (a session holds it)"));
    let listed = acl::reap(&state, true, &|_| false).expect("dry run");
    assert_eq!((listed[0].path.as_path(), listed[0].restored), (ws.as_path(), false));
    assert!(grants_uid(&ws), "a dry run changes nothing");
    let busy = Grant::take(&[&ws], UID, &state).expect("a run in progress");
    let in_use = acl::reap(&state, false, &|_| false).expect("reap");
    assert_eq!(in_use[0].error.as_deref(), Some("in use (a run holds its lock)"));
    drop(busy);
    let reaped = acl::reap(&state, false, &|_| false).expect("reap");
    assert_eq!(reaped.len(), 1);
    assert!(reaped[0].restored, "{reaped:?}");
    assert_eq!(snapshot(&ws), before);
    assert_eq!(acl::reap(&state, false, &|_| false).expect("again"), Vec::new());
}

#[test]
fn release_holder_gives_back_a_session_grant() {
    let Some((_tmp, ws, state)) = setup() else { return };
    let before = snapshot(&ws);
    Grant::take(&[&ws], UID, &state).expect("take").hold("podman-1").expect("hold");
    let run = Grant::take(&[&ws], UID, &state).expect("run");
    drop(run);
    assert!(grants_uid(&ws), "the session still holds it");
    acl::release_holder(&state, "podman-1").expect("release holder");
    assert_eq!(snapshot(&ws), before);
}

#[test]
fn a_swapped_directory_is_never_followed() {
    let Some((_tmp, ws, state)) = setup() else { return };
    let target = ws.join("real");
    std::fs::create_dir(&target).expect("real");
    let before = snapshot(&target);
    let link = ws.join("sub");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    assert!(Grant::take(&[&link], UID, &state).is_err(), "a symlink is refused");
    let nested = link.join("deeper");
    std::fs::create_dir(&nested).expect("deeper");
    assert!(Grant::take(&[&nested], UID, &state).is_err(), "a symlink on the way too");
    assert_eq!(snapshot(&target), before);
    // A recorded directory replaced by a link is dropped from the state, not restored through it.
    Grant::take(&[&target], UID, &state).expect("take").hold("x").expect("hold");
    let moved = ws.join("moved");
    std::fs::rename(&target, &moved).expect("rename");
    let other = ws.join("other");
    std::fs::create_dir(&other).expect("other");
    std::os::unix::fs::symlink(&other, &target).expect("swap");
    let other_before = snapshot(&other);
    acl::reap(&state, false, &|_| false).expect("reap");
    assert_eq!(snapshot(&other), other_before, "nothing done through the link");
}

#[test]
fn reclaim_hands_back_only_the_uid_and_never_follows_links() {
    if !rustix::process::getuid().is_root() {
        println!("SKIPPED: reclaim: needs root to chown");
        return;
    }
    let Some((_tmp, ws, _state)) = setup() else { return };
    let outside = tempfile::tempdir().expect("outside");
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "x").expect("victim");
    let chown =
        |p: &Path, uid: u32| std::os::unix::fs::lchown(p, Some(uid), Some(uid)).expect("chown");
    chown(&victim, UID);
    std::fs::create_dir_all(ws.join("a/b")).expect("tree");
    std::fs::write(ws.join("a/b/f"), "y").expect("file");
    std::os::unix::fs::symlink(&victim, ws.join("a/link")).expect("link");
    for p in ["a", "a/b", "a/b/f", "a/link"] {
        chown(&ws.join(p), UID);
    }
    std::fs::write(ws.join("mine"), "z").expect("mine");
    chown(&ws.join("mine"), 1000);
    acl::reclaim(&ws, UID);
    for p in ["a", "a/b", "a/b/f", "a/link"] {
        assert_eq!(std::fs::symlink_metadata(ws.join(p)).expect(p).uid(), 0, "{p}");
    }
    assert_eq!(std::fs::symlink_metadata(ws.join("mine")).expect("mine").uid(), 1000);
    assert_eq!(
        std::fs::metadata(&victim).expect("victim").uid(),
        UID,
        "the link's target is not touched"
    );
}
