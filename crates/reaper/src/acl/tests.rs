//! Tests of the ACL codec, the record codec and the release decision (pure), and of the
//! no-follow walk every grant goes through.

use std::path::PathBuf;

use super::*;

#[test]
fn a_fresh_grant_adds_the_user_and_a_full_mask() {
    let acl = with_user(0o755, None, 65534).expect("new acl");
    let entries = decode(&acl).expect("decodes");
    assert_eq!(
        entries,
        [
            (ACL_USER_OBJ, 7, ACL_UNDEFINED_ID),
            (ACL_USER, 7, 65534),
            (ACL_GROUP_OBJ, 5, ACL_UNDEFINED_ID),
            (ACL_MASK, 7, ACL_UNDEFINED_ID),
            (ACL_OTHER, 5, ACL_UNDEFINED_ID),
        ]
    );
    assert_eq!(encode(&entries), acl, "round trip");
    assert_eq!(with_user(0o755, Some(&entries), 65534), None, "granted once");
}

#[test]
fn other_named_entries_are_kept_and_a_weak_grant_is_raised() {
    let existing = [
        (ACL_USER_OBJ, 7, ACL_UNDEFINED_ID),
        (ACL_USER, 5, 1000),
        (ACL_USER, 4, 65534),
        (ACL_GROUP_OBJ, 5, ACL_UNDEFINED_ID),
        (ACL_MASK, 5, ACL_UNDEFINED_ID),
        (ACL_OTHER, 0, ACL_UNDEFINED_ID),
    ];
    let acl = with_user(0o750, Some(&existing), 65534).expect("raised");
    assert_eq!(
        decode(&acl).expect("decodes"),
        [
            (ACL_USER_OBJ, 7, ACL_UNDEFINED_ID),
            (ACL_USER, 5, 1000),
            (ACL_USER, 7, 65534),
            (ACL_GROUP_OBJ, 5, ACL_UNDEFINED_ID),
            (ACL_MASK, 7, ACL_UNDEFINED_ID),
            (ACL_OTHER, 0, ACL_UNDEFINED_ID),
        ]
    );
}

#[test]
fn malformed_acls_do_not_decode() {
    assert_eq!(decode(b""), None);
    assert_eq!(decode(&1u32.to_le_bytes()), None, "version 1");
    let mut odd = encode(&[(ACL_USER_OBJ, 7, ACL_UNDEFINED_ID)]);
    odd.push(0);
    assert_eq!(decode(&odd), None, "not whole entries");
    assert_eq!(decode(&2u32.to_le_bytes()), Some(Vec::new()));
}

#[test]
fn records_round_trip_any_path_and_acl() {
    use std::os::unix::ffi::OsStringExt;
    let odd = PathBuf::from(std::ffi::OsString::from_vec(b"/tmp/edge:ws/\xff\n x".to_vec()));
    for (path, acl) in [
        (PathBuf::from("/home/me/project"), None),
        (odd, Some(encode(&[(ACL_USER_OBJ, 7, ACL_UNDEFINED_ID), (ACL_USER, 7, 42)]))),
    ] {
        let record = Record { path, dev: 64769, ino: 1_234_567, mode: 0o2755, acl };
        let text = record.encode();
        assert_eq!(Record::decode(&text), Some(record), "{text}");
    }
    let good = Record { path: "/w".into(), dev: 1, ino: 2, mode: 0o755, acl: None }.encode();
    assert_eq!(good, "python-sandbox acl v1\ndev 1\nino 2\nmode 755\nacl -\npath 2f77\n");
    for bad in [
        "",
        "python-sandbox acl v2\ndev 1\nino 2\nmode 755\nacl -\npath 2f77\n",
        "python-sandbox acl v1\ndev 1\nino 2\nmode 17777\nacl -\npath 2f77\n",
        "python-sandbox acl v1\ndev 1\nino 2\nmode 755\nacl 0100\npath 2f77\n",
        "python-sandbox acl v1\ndev 1\nino 2\nmode 755\nacl -\npath 77\n",
        "python-sandbox acl v1\nino 2\ndev 1\nmode 755\nacl -\npath 2f77\n",
        "python-sandbox acl v1\ndev 1\nino 2\nmode 755\nacl -\npath 2f7\n",
    ] {
        assert_eq!(Record::decode(bad), None, "{bad:?}");
    }
}

#[test]
fn only_the_last_user_restores() {
    assert_eq!(step(false, 0, true), Step::InUse, "another run holds the lock");
    assert_eq!(step(false, 3, false), Step::InUse);
    assert_eq!(step(true, 1, true), Step::Held, "a live session holds it");
    assert_eq!(step(true, 0, true), Step::Restore);
    assert_eq!(step(true, 0, false), Step::Nothing, "nothing was changed");
}

#[test]
fn holders_are_plain_names() {
    assert!(check_holder("docker-0123abcd").is_ok());
    for bad in ["", "../x", "a/b", "a b", "x\0"] {
        assert!(check_holder(bad).is_err(), "{bad:?}");
    }
}

/// A symlink in the workspace to a directory outside (swapped in for a mount, say) is never
/// granted: neither as the directory itself nor as a component on the way.
#[test]
fn a_symlink_to_a_directory_outside_is_not_granted() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = tmp.path().canonicalize().expect("canonical");
    let (ws, outside) = (base.join("ws"), base.join("outside"));
    std::fs::create_dir_all(outside.join("sub")).expect("outside");
    std::fs::create_dir(&ws).expect("ws");
    std::os::unix::fs::symlink(&outside, ws.join("link")).expect("link");
    let state = base.join("state");
    for dir in [ws.join("link"), ws.join("link/sub")] {
        let taken = super::Grant::take(&[dir.as_path()], 65534, &state);
        assert!(taken.is_err(), "{} was granted", dir.display());
    }
    for dir in [&outside, &outside.join("sub")] {
        let mut buf = [0u8; 256];
        let acl = rustix::fs::getxattr(dir, "system.posix_acl_access", &mut buf[..]);
        assert!(acl.is_err(), "{} got an ACL", dir.display());
    }
}
