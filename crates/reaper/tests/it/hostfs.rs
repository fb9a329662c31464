//! Files on the host: links planted where python-sandbox keeps locks and stamps are never
//! followed, and a directory someone else owns (the `/tmp` fallback without `HOME`) is refused.
//! Tests that need a second owner chown to 65534 and print SKIPPED unless run as root.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use reaper::{Error, LockMode, MarkKey, PrivateDir, lock_env};

const OTHER: u32 = 65_534;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn give_away(path: &Path) {
    rustix::fs::chownat(
        rustix::fs::CWD,
        path,
        Some(rustix::process::Uid::from_raw(OTHER)),
        Some(rustix::process::Gid::from_raw(OTHER)),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .expect("chown");
}

fn victim(dir: &Path) -> std::path::PathBuf {
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "precious\n").expect("victim");
    victim
}

#[test]
fn a_lock_link_planted_in_the_locks_dir_is_never_followed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let locks = tmp.path().join("locks");
    std::fs::create_dir(&locks).expect("locks");
    let target = tmp.path().join("target");
    std::os::unix::fs::symlink(&target, locks.join("cccc.lock")).expect("plant");
    let got = lock_env(&locks.join("cccc.lock"), LockMode::TryExclusive);
    assert!(got.is_err(), "{got:?}");
    assert!(!target.exists(), "the lock created the link's target");

    // An existing target is not touched either (mtime, size).
    let victim = victim(tmp.path());
    let before = std::fs::metadata(&victim).expect("meta").modified().expect("mtime");
    std::os::unix::fs::symlink(&victim, locks.join("dddd.lock")).expect("plant");
    assert!(lock_env(&locks.join("dddd.lock"), LockMode::Shared).is_err());
    let dir = PrivateDir::open(&locks).expect("own dir");
    assert!(dir.touch("dddd.lock").is_err());
    assert!(dir.replace("dddd.lock", b"").is_ok(), "replacing a link replaces the link");
    assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious\n");
    assert_eq!(std::fs::metadata(&victim).expect("meta").modified().expect("mtime"), before);
}

#[test]
fn a_lock_in_a_missing_dir_creates_it_private() {
    let tmp = tempfile::tempdir().expect("tmp");
    let locks = tmp.path().join("a/b/locks");
    let held = lock_env(&locks.join("k.lock"), LockMode::TryExclusive).expect("lock");
    assert!(held.is_some());
    for dir in ["a", "a/b", "a/b/locks"] {
        let mode = std::fs::metadata(tmp.path().join(dir)).expect("meta").mode();
        assert_eq!(mode & 0o777, 0o700, "{dir}");
    }
    let busy = lock_env(&locks.join("k.lock"), LockMode::TryShared).expect("lock");
    assert!(busy.is_none(), "the first lock is held");
}

#[test]
fn others_writable_dirs_and_their_links_are_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let open = tmp.path().join("open");
    std::fs::create_dir(&open).expect("dir");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let err = PrivateDir::open(&open.join("cache")).expect_err("world-writable parent");
    assert!(matches!(err, Error::UnsafeDir { .. }), "{err}");
    assert!(err.to_string().contains("can be written by others"), "{err}");
    assert!(err.to_string().contains("hint: "), "{err}");
    // A sticky one may be passed through, like /tmp.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    PrivateDir::open(&open.join("cache")).expect("sticky parent");
    // The user's own link (`~/.cache` -> elsewhere) is followed.
    std::os::unix::fs::symlink(open.join("cache"), tmp.path().join("link")).expect("link");
    let dir = PrivateDir::open(&tmp.path().join("link/oci")).expect("own link");
    dir.touch("stamp").expect("touch");
    assert!(open.join("cache/oci/stamp").is_file());
}

/// Issue 9 item 8: without HOME, root's cache falls back to `<tmp>/python-sandbox-0`, which
/// anyone could create first and fill with links. The walk refuses it; a link planted at the
/// stamp's name never truncates its target.
#[test]
fn a_fallback_cache_dir_someone_else_made_is_refused() {
    if !is_root() {
        println!("SKIPPED: needs root to make a directory owned by someone else");
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let get = |_: &str| None;
    let base = reaper::hostfs::cache_base(&get, tmp.path(), 0);
    assert_eq!(base, tmp.path().join("python-sandbox-0"));
    let oci = base.join("python-sandbox/oci");
    std::fs::create_dir_all(&oci).expect("planted dirs");
    for dir in [&base, &base.join("python-sandbox"), &oci] {
        give_away(dir);
    }
    let victim = victim(tmp.path());
    let link = oci.join("last-env-prune-docker");
    std::os::unix::fs::symlink(&victim, &link).expect("plant");
    give_away(&link);

    let err = PrivateDir::open(&oci).expect_err("foreign dir");
    assert!(err.to_string().contains("belongs to uid 65534"), "{err}");
    let err = lock_env(&oci.join("locks/x.lock"), LockMode::Shared).expect_err("foreign dir");
    assert!(matches!(err, Error::UnsafeDir { .. }), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious\n");

    // A link to it planted in the sticky dir is not followed either.
    std::fs::remove_dir_all(&base).expect("clean");
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("dir");
    std::os::unix::fs::symlink(&elsewhere, &base).expect("plant");
    give_away(&base);
    let err = PrivateDir::open(&oci).expect_err("foreign link");
    assert!(err.to_string().contains("symlink made by uid 65534"), "{err}");

    // Made by us, it is used (mode 0700).
    std::fs::remove_file(&base).expect("clean");
    PrivateDir::open(&oci).expect("own dir").touch("last-env-prune-docker").expect("stamp");
    assert_eq!(std::fs::metadata(&base).expect("meta").mode() & 0o7777, 0o700);
}

#[test]
fn a_foreign_leaf_dir_is_refused_even_under_our_own() {
    if !is_root() {
        println!("SKIPPED: needs root to make a directory owned by someone else");
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let locks = tmp.path().join("locks");
    std::fs::create_dir(&locks).expect("dir");
    give_away(&locks);
    let err = lock_env(&locks.join("a.lock"), LockMode::Shared).expect_err("foreign leaf");
    assert!(err.to_string().contains("not to you"), "{err}");
    assert!(!locks.join("a.lock").exists());
}

#[test]
fn the_mark_key_is_made_once_private_and_kept() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = PrivateDir::open(&tmp.path().join("keys")).expect("dir");
    let key = MarkKey::load(&dir).expect("new key");
    assert_eq!(MarkKey::load(&dir).expect("same key"), key);
    let meta = std::fs::symlink_metadata(tmp.path().join("keys/mark.key")).expect("meta");
    assert_eq!((meta.mode() & 0o777, meta.len()), (0o600, 32));
    let other = tempfile::tempdir().expect("tmp");
    let elsewhere = MarkKey::load(&PrivateDir::open(other.path()).expect("dir")).expect("key");
    assert_ne!(elsewhere, key, "keys are random");
    std::fs::write(tmp.path().join("keys/mark.key"), "short").expect("corrupt");
    let err = MarkKey::load(&dir).expect_err("corrupt key");
    assert!(err.to_string().contains("hint: remove it"), "{err}");
}
