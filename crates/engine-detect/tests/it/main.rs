//! Real probes on this machine: bwrap when installed, docker/podman against a real unix socket
//! that speaks the `/_ping` protocol, and the JSON shape `python-sandbox detect --json` prints.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::unix::net::UnixListener;

use engine_detect::{EngineName, OsInfo, ProbeState, detect, detect_with, suggest, which};

fn env_with(extra: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| {
            !matches!(k.to_str(), Some("DOCKER_HOST" | "CONTAINER_HOST" | "XDG_RUNTIME_DIR"))
        })
        .collect();
    env.extend(extra.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))));
    env
}

/// A one-request API server on a unix socket, answering with `status_line`.
fn serve_once(status_line: &'static str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("api.sock");
    let listener = UnixListener::bind(&sock).expect("bind");
    std::thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            let mut buf = [0u8; 1024];
            let n = stream.read(&mut buf).unwrap_or(0);
            let request = String::from_utf8_lossy(&buf[..n]).into_owned();
            let body = if request.starts_with("GET /_ping ") { "OK" } else { "bad" };
            let _ = write!(stream, "{status_line}\r\nContent-Length: {}\r\n\r\n{body}", body.len());
        }
    });
    (dir, sock)
}

#[test]
fn ladder_order_and_json_shape() {
    let detection = detect();
    let names: Vec<EngineName> = detection.engines.iter().map(|p| p.name).collect();
    // The ladder without native, whose probe is its own crate's (the CLI's registry adds it).
    assert_eq!(names, EngineName::ALL[1..]);
    let json: serde_json::Value = serde_json::to_value(&detection).unwrap();
    let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["engines", "selected"]);
    for engine in json["engines"].as_array().unwrap() {
        let mut keys: Vec<&String> = engine.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["available", "defaults", "limits", "name", "reason"]);
        let limits: Vec<&String> = engine["limits"].as_object().unwrap().keys().collect();
        assert_eq!(limits, ["cpus", "memory", "pids"]);
        let defaults: Vec<&String> = engine["defaults"].as_object().unwrap().keys().collect();
        assert_eq!(defaults, ["cpus", "memory", "pids"]);
    }
    assert_eq!(detection.selected, detection.engines.iter().find(|p| p.available).map(|p| p.name));
}

#[test]
fn bwrap_probe_is_real() {
    let path = std::env::var_os("PATH");
    if which("bwrap", path.as_deref()).is_none() {
        println!("SKIPPED: bwrap: not installed");
        return;
    }
    let probe = engine_detect::probe_bwrap(path.as_deref());
    println!("bwrap probe: {probe:?}");
    match probe.state {
        ProbeState::Available { .. } => assert!(probe.reason.contains("can create")),
        ProbeState::Failed => {
            assert!(probe.reason.contains("hint:"), "{}", probe.reason);
            println!("SKIPPED: bwrap: cannot create namespaces here");
        }
        other => panic!("unexpected state {other:?}"),
    }
    // A PATH without bwrap is reported as not installed, with an install hint.
    let missing = engine_detect::probe_bwrap(Some(std::ffi::OsStr::new("/nonexistent")));
    assert_eq!(missing.state, ProbeState::NotInstalled);
    assert!(missing.reason.contains("hint: install"));
}

#[test]
fn docker_ping_over_a_real_socket() {
    let (_dir, sock) = serve_once("HTTP/1.1 200 OK");
    let host = format!("unix://{}", sock.display());
    let detection = detect_with(&env_with(&[("DOCKER_HOST", &host)]));
    let docker = detection.probe(EngineName::Docker).unwrap();
    assert!(docker.available, "{docker:?}");
    assert!(docker.reason.contains(&host));
}

#[test]
fn docker_socket_answering_an_error_is_not_available() {
    let (_dir, sock) = serve_once("HTTP/1.1 500 Internal Server Error");
    let host = format!("unix://{}", sock.display());
    let detection = detect_with(&env_with(&[("DOCKER_HOST", &host)]));
    let docker = detection.probe(EngineName::Docker).unwrap();
    assert!(!docker.available);
    assert!(docker.reason.contains("HTTP 500"), "{}", docker.reason);
}

#[test]
fn podman_installed_without_socket_is_distinct() {
    let bin = tempfile::tempdir().unwrap();
    let podman = bin.path().join("podman");
    std::fs::write(&podman, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&podman, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let runtime = tempfile::tempdir().unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.path().display());
    let detection = detect_with(&env_with(&[
        ("PATH", &path),
        ("XDG_RUNTIME_DIR", runtime.path().to_str().unwrap()),
        ("CONTAINER_HOST", &format!("unix://{}/none.sock", runtime.path().display())),
    ]));
    let probe = detection.probe(EngineName::Podman).unwrap();
    assert_eq!(probe.state, ProbeState::InstalledNoSocket, "{probe:?}");
    assert!(probe.reason.contains("podman system service"));
}

#[test]
fn suggest_for_this_host_never_offers_unsandboxed() {
    let os = OsInfo::detect();
    let text = suggest(&os, &detect());
    println!("{text}");
    assert!(
        text.contains("never runs a script without a sandbox") || text.contains("nothing to fix")
    );
}

#[test]
fn bwrap_probe_success_is_memoized_failure_is_not() {
    let path = std::env::var_os("PATH");
    let memo_dir = tempfile::tempdir().expect("memo");
    let memo = memo_dir.path().join("probe-ok");
    if which("bwrap", path.as_deref()).is_some() {
        let first = engine_detect::probe_bwrap_cached(path.as_deref(), &memo);
        if first.available {
            assert!(memo.is_file());
            let second = engine_detect::probe_bwrap_cached(path.as_deref(), &memo);
            assert!(second.available && second.reason.contains("worked earlier"), "{second:?}");
            // A memo written under other conditions (another boot, sysctl, binary) is ignored.
            std::fs::write(&memo, "v1 something else").expect("overwrite");
            let third = engine_detect::probe_bwrap_cached(path.as_deref(), &memo);
            assert!(third.available && third.reason.contains("can create"), "{third:?}");
            // A working bwrap without pasta is usable and says which network its runs get.
            let alone = tempfile::tempdir().expect("bin");
            let real = which("bwrap", path.as_deref()).expect("bwrap");
            std::os::unix::fs::symlink(&real, alone.path().join("bwrap")).expect("link bwrap");
            let no_pasta = engine_detect::probe_bwrap(Some(alone.path().as_os_str()));
            assert!(no_pasta.available, "{no_pasta:?}");
            // The relay where a tun device can be opened, else the proxy.
            let network = if engine_detect::relay_possible() {
                "network: the built-in relay (full TCP/UDP over IPv4, pasta is not installed)"
            } else {
                engine_detect::BUILTIN_NET
            };
            assert!(no_pasta.reason.contains(network), "{no_pasta:?}");
            assert!(no_pasta.reason.contains("passt"), "{no_pasta:?}");
        } else {
            println!("SKIPPED: bwrap: {}", first.reason.lines().next().unwrap_or_default());
        }
    } else {
        println!("SKIPPED: bwrap: not installed");
    }

    // A bwrap that cannot create namespaces is never remembered as working.
    let bin = tempfile::tempdir().expect("bin");
    let fake = bin.path().join("bwrap");
    std::fs::write(&fake, "#!/bin/sh\n[ \"$1\" = --version ] && echo 'bubblewrap 0.9.0' && exit 0\necho 'bwrap: Creating new namespace failed: Operation not permitted' >&2\nexit 1\n")
        .expect("fake");
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let fake_memo = memo_dir.path().join("fake-ok");
    // Without pasta too: the binary decides (net on then goes through the built-in proxy).
    let probe = engine_detect::probe_bwrap_cached(Some(bin.path().as_os_str()), &fake_memo);
    assert_eq!(probe.state, ProbeState::Failed);
    std::os::unix::fs::symlink("/bin/true", bin.path().join("pasta")).expect("fake pasta");
    for _ in 0..2 {
        let probe = engine_detect::probe_bwrap_cached(Some(bin.path().as_os_str()), &fake_memo);
        assert_eq!(probe.state, ProbeState::Failed);
        assert!(probe.reason.contains("Creating new namespace failed"), "{}", probe.reason);
    }
    assert!(!fake_memo.exists());
}
