//! Finding and fetching uv for real (PyPI through this machine's proxy), and how prepare
//! failures are reported.

use std::ffi::OsStr;

use engine_bwrap::{
    Error, PINNED_UV_VERSION, PinnedWheel, UvOrigin, find_or_fetch_uv, pinned_wheel,
};

use crate::support::{cache_dir, fixture};

#[test]
fn pinned_uv_is_fetched_verified_and_then_found_on_path() {
    if fixture().is_none() {
        return;
    }
    if pinned_wheel().is_none() {
        println!("SKIPPED: uv: no pinned wheel for {}", std::env::consts::ARCH);
        return;
    }
    let mut lines = Vec::new();
    let pinned = find_or_fetch_uv(&cache_dir(), Some(OsStr::new("/nonexistent")), &mut |l| {
        lines.push(l.to_owned())
    })
    .expect("fetch uv");
    assert_eq!(pinned.origin, UvOrigin::Pinned);
    assert_eq!(pinned.version, PINNED_UV_VERSION);
    assert!(pinned.path.is_file());

    // The same binary on PATH counts as the host's uv; its version comes from `uv --version`.
    let dir = pinned.path.parent().expect("dir").as_os_str().to_owned();
    let host = find_or_fetch_uv(&cache_dir(), Some(&dir), &mut |_| {}).expect("host uv");
    assert_eq!(host.origin, UvOrigin::Host);
    assert_eq!(host.version, PINNED_UV_VERSION);
}

#[test]
fn a_tampered_wheel_is_rejected_before_extraction() {
    if fixture().is_none() {
        return;
    }
    let Some(wheel) = pinned_wheel() else {
        println!("SKIPPED: uv: no pinned wheel for {}", std::env::consts::ARCH);
        return;
    };
    let bad = PinnedWheel {
        sha256: "0000000000000000000000000000000000000000000000000000000000000000",
        ..wheel
    };
    let dir = tempfile::tempdir().expect("dir");
    let dest = dir.path().join("uv");
    match engine_bwrap::fetch_uv(&bad, &dest) {
        Err(Error::UvChecksum { expected, actual }) => {
            assert_eq!(expected, bad.sha256);
            assert_eq!(actual, wheel.sha256, "the real wheel still hashes to its pin");
        }
        Err(Error::UvDownload { message, .. }) => {
            println!("SKIPPED: uv: PyPI unreachable: {message}")
        }
        other => panic!("expected a checksum error, got {other:?}"),
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).expect("read_dir").collect();
    assert!(leftovers.is_empty(), "nothing may be left behind: {leftovers:?}");
}

#[test]
fn prepare_failures_are_reported_with_uv_output() {
    let Some(f) = fixture() else { return };
    let mut spec = f.spec("print('never')\n");
    spec.dependencies = vec!["python-sandbox-no-such-package-xyz==1.0".to_owned()];
    let err = f.engine.prepare(&spec, &mut |_| {}).expect_err("unknown package");
    assert!(matches!(err, Error::Prepare { .. }), "{err}");
    assert!(err.to_string().contains("python-sandbox-no-such-package-xyz"), "{err}");

    spec.dependencies.clear();
    spec.requires_python = Some(">=3.99".to_owned());
    let err = f.engine.prepare(&spec, &mut |_| {}).expect_err("no such python");
    assert!(matches!(err, Error::PythonNotFound { .. }), "{err}");
    assert!(err.to_string().contains("hint:"));
}
