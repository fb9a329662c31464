//! Ephemeral runs on real engines: output, exit codes, ownership, the wall, dependencies,
//! timeouts and stdin.

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use sandbox_core::{Captured, EnvVar, Net, Output, RunIo, Stdin};

use crate::support::{containers, engines, name, permissions, run, spec, workspace};

#[test]
fn compute_and_exit_code() {
    for engine in engines() {
        let (_dir, ws) = workspace(
            "import sys\nprint(sum(range(10)))\nprint('err', file=sys.stderr)\nsys.exit(3)\n",
        );
        let (outcome, out) = run(&engine, &spec(&ws));
        assert_eq!(out.stdout_lossy(), "45\n", "{}", name(&engine));
        assert_eq!(out.stderr_lossy(), "err\n", "{}", name(&engine));
        assert_eq!(outcome.exit_code, 3, "{}", name(&engine));
        assert!(!outcome.timed_out);
    }
}

#[test]
fn signal_death_is_128_plus_n() {
    for engine in engines() {
        let (_dir, ws) = workspace("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n");
        let (outcome, _) = run(&engine, &spec(&ws));
        assert_eq!(outcome.exit_code, 143, "{}", name(&engine));
    }
}

#[test]
fn file_lands_on_host_owned_by_caller() {
    let (uid, gid) = (rustix::process::getuid().as_raw(), rustix::process::getgid().as_raw());
    for engine in engines() {
        let (_dir, ws) = workspace(
            "import os\nos.makedirs('sub/deeper', exist_ok=True)\nopen('sub/deeper/out.txt','w').write('hello')\nopen('top.txt','w').write('x')\n",
        );
        let (outcome, out) = run(&engine, &spec(&ws));
        assert_eq!(outcome.exit_code, 0, "{}: {}", name(&engine), out.stderr_lossy());
        for rel in ["sub", "sub/deeper", "sub/deeper/out.txt", "top.txt"] {
            let meta = std::fs::symlink_metadata(ws.join(rel)).expect(rel);
            assert_eq!((meta.uid(), meta.gid()), (uid, gid), "{}: {rel}", name(&engine));
        }
        assert_eq!(std::fs::read_to_string(ws.join("sub/deeper/out.txt")).expect("read"), "hello");
    }
}

/// What the script sees of its own confinement; one line per fact.
const WALL: &str = r#"import os, socket
def attempt(label, fn):
    try:
        fn(); print(label, "open")
    except Exception as e:
        print(label, "blocked")
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
print("uid", os.getuid())
print("capeff", status["CapEff"].strip())
print("nonewprivs", status["NoNewPrivs"].strip())
print("ifaces", ",".join(sorted(os.listdir("/sys/class/net"))))
attempt("rootfs", lambda: open("/usr/x", "w"))
attempt("etc", lambda: open("/etc/x", "w"))
attempt("tcp", lambda: socket.create_connection(("1.1.1.1", 53), 2))
attempt("dns", lambda: socket.getaddrinfo("example.com", 80))
attempt("docker.sock", lambda: socket.socket(socket.AF_UNIX).connect("/var/run/docker.sock"))
attempt("podman.sock", lambda: socket.socket(socket.AF_UNIX).connect("/run/podman/podman.sock"))
attempt("tmp", lambda: open("/tmp/x", "w"))
attempt("home", lambda: open(os.path.expanduser("~/x"), "w"))
# sandbox_core::run_env plus PATH, PWD and VIRTUAL_ENV: no image ENV (UV_*), podman's own
# `container` overridden, nothing of the host but the allowlist.
print("env", ",".join(sorted(k for k in os.environ if k not in ("PATH", "PWD", "VIRTUAL_ENV", "HOME", "LANG", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "LC_ALL", "TERM", "TZ", "HOSTNAME", "container"))))
print("pid1", open("/proc/1/comm").read().strip())
"#;

#[test]
fn net_off_wall() {
    for engine in engines() {
        let (_dir, ws) = workspace(WALL);
        let mut spec = spec(&ws);
        spec.env.push(EnvVar { name: "EXPLICIT".to_owned(), value: Some("1".to_owned()) });
        let (outcome, out) = run(&engine, &spec);
        let text = out.stdout_lossy();
        assert_eq!(outcome.exit_code, 0, "{}: {}", name(&engine), out.stderr_lossy());
        let uid = rustix::process::getuid().as_raw();
        let expected_uid = if uid == 0 { 65534 } else { uid };
        let init = "tini";
        for line in [
            format!("uid {expected_uid}"),
            "capeff 0000000000000000".to_owned(),
            "nonewprivs 1".to_owned(),
            "ifaces lo".to_owned(),
            "rootfs blocked".to_owned(),
            "etc blocked".to_owned(),
            "tcp blocked".to_owned(),
            "dns blocked".to_owned(),
            "docker.sock blocked".to_owned(),
            "podman.sock blocked".to_owned(),
            "tmp open".to_owned(),
            "home open".to_owned(),
            "env EXPLICIT".to_owned(),
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{}: missing `{line}` in:\n{text}",
                name(&engine)
            );
        }
        let pid1 = text.lines().find_map(|l| l.strip_prefix("pid1 ")).unwrap_or_default();
        assert!(pid1.contains("init") || pid1 == init, "{}: pid 1 is {pid1}", name(&engine));
    }
}

#[test]
fn net_on_reaches_the_network() {
    for engine in engines() {
        let (_dir, ws) =
            workspace("import socket\nsocket.getaddrinfo('pypi.org', 443)\nprint('dns ok')\n");
        let mut spec = spec(&ws);
        spec.net = Net::On;
        let (outcome, out) = run(&engine, &spec);
        assert_eq!(
            (outcome.exit_code, out.stdout_lossy().as_str()),
            (0, "dns ok\n"),
            "{}: {}",
            name(&engine),
            out.stderr_lossy()
        );
    }
}

#[test]
fn dependencies_install_once_and_work_with_net_off() {
    for engine in engines() {
        let (_dir, ws) = workspace("import six\nprint('six', six.__version__ != '')\n");
        let mut spec = spec(&ws);
        // A unique marker dependency keeps this test's environment apart from other runs.
        spec.dependencies = vec!["six".to_owned(), "idna".to_owned()];
        // Cold on purpose: drop whatever an earlier run left, so the build path (and its lock
        // hand-over to a second prepare in the same process) is what gets tested.
        let earlier = engine.prepare(&spec, &mut |_| {}).expect("prepare");
        let volume = earlier.volume.clone().expect("an environment volume");
        drop(earlier);
        engine.block_on(async {
            for v in [format!("{volume}-ready"), volume.clone()] {
                let _ = engine
                    .docker()
                    .remove_volume(&v, None::<bollard::query_parameters::RemoveVolumeOptions>)
                    .await;
            }
        });
        let mut lines = Vec::new();
        let env = engine.prepare(&spec, &mut |l| lines.push(l.to_owned())).expect("prepare");
        assert!(
            env.fresh,
            "{}: the environment was removed, so this prepare builds",
            name(&engine)
        );
        let again = engine.prepare(&spec, &mut |_| {}).expect("prepare again");
        assert!(!again.fresh, "{}: second prepare is warm", name(&engine));
        assert_eq!(env.volume, again.volume);
        let mut captured = Captured::default();
        let io = RunIo {
            stdin: Stdin::Null,
            output: Output::Sink(&mut captured),
            status: None,
            published: None,
            started: None,
        };
        let outcome = engine.run_prepared(&spec, &again, io).expect("run");
        assert_eq!(outcome.exit_code, 0, "{}: {}", name(&engine), captured.stderr_lossy());
        assert_eq!(captured.stdout_lossy(), "six True\n");
    }
}

#[test]
fn failing_install_is_an_error_with_uv_output() {
    for engine in engines() {
        let (_dir, ws) = workspace("print(1)\n");
        let mut spec = spec(&ws);
        spec.dependencies = vec!["python-sandbox-no-such-package-h7==0.0.0".to_owned()];
        let err = engine.prepare(&spec, &mut |_| {}).expect_err("must fail");
        let text = err.to_string();
        assert!(text.starts_with("installing the dependencies failed"), "{text}");
        assert!(text.contains("python-sandbox-no-such-package-h7"), "{text}");
    }
}

/// Through the CLI, so that its containers carry its own owner pid: runs of other tests in this
/// process may still be being removed (podman's are handed to the engine after a normal exit),
/// but a timed-out run is removed before `run` returns.
#[test]
fn timeout_kills_and_removes_the_container() {
    let Some(bin) = crate::support::cli_binary() else {
        println!("SKIPPED: python-sandbox binary not built (cargo build -p cli)");
        return;
    };
    for engine in engines() {
        let (_dir, ws) = workspace("import time\nprint('started', flush=True)\ntime.sleep(120)\n");
        let started = std::time::Instant::now();
        let child = std::process::Command::new(&bin)
            .args(["run", "--engine", name(&engine), "--timeout", "3", "main.py"])
            .current_dir(&ws)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn cli");
        let owner = format!("io.python-sandbox.owner-pid={}", child.id());
        let out = child.wait_with_output().expect("cli");
        assert_eq!(
            out.status.code(),
            Some(124),
            "{}: {}",
            name(&engine),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(started.elapsed() < Duration::from_secs(60));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "started\n");
        let left = containers(&engine, &owner);
        assert!(left.is_empty(), "{}: left behind {left:?}", name(&engine));
    }
}

#[test]
fn stdin_bytes_reach_the_script() {
    for engine in engines() {
        let (_dir, ws) = workspace("import sys\nprint(sys.stdin.read().upper())\n");
        let spec = spec(&ws);
        let env = engine.prepare(&spec, &mut |_| {}).expect("prepare");
        let mut captured = Captured::default();
        let io = RunIo {
            stdin: Stdin::Bytes(b"piped in".to_vec()),
            output: Output::Sink(&mut captured),
            status: None,
            published: None,
            started: None,
        };
        let outcome = engine.run_prepared(&spec, &env, io).expect("run");
        assert_eq!(
            (outcome.exit_code, captured.stdout_lossy().as_str()),
            (0, "PIPED IN\n"),
            "{}",
            name(&engine)
        );
    }
}

/// Reads `in.txt` from the read-only mount `argv[1]`, tries to write there, writes `out.txt`
/// into the read-write mount `argv[2]`.
const MOUNTS: &str = "import sys\nro, rw = sys.argv[1:]\nprint(open(ro + '/in.txt').read())\ntry:\n    open(ro + '/x', 'w'); print('ro writable')\nexcept OSError: print('ro blocked')\nopen(rw + '/out.txt', 'w').write('y'); print('rw ok')\n";

/// Runs [`MOUNTS`] from `ws` with `ro` (given an `in.txt`) and `rw` mounted, and checks both.
fn check_ro_rw(
    engine: &engine_oci::OciEngine,
    ws: &std::path::Path,
    ro: &std::path::Path,
    rw: &std::path::Path,
) {
    std::fs::create_dir_all(ro).expect("ro");
    std::fs::write(ro.join("in.txt"), "data").expect("in");
    std::fs::write(ws.join("main.py"), MOUNTS).expect("script");
    let mut spec = spec(ws);
    spec.mounts = vec![
        sandbox_core::Mount { path: ro.to_owned(), mode: sandbox_core::MountMode::ReadOnly },
        sandbox_core::Mount { path: rw.to_owned(), mode: sandbox_core::MountMode::ReadWrite },
    ];
    spec.args = vec![ro.display().to_string(), rw.display().to_string()];
    let (outcome, out) = run(engine, &spec);
    assert_eq!(outcome.exit_code, 0, "{}: {}", name(engine), out.stderr_lossy());
    assert_eq!(out.stdout_lossy(), "data\nro blocked\nrw ok\n", "{}", name(engine));
    assert_eq!(std::fs::read_to_string(rw.join("out.txt")).expect("out"), "y");
}

#[test]
fn mounts_are_ro_or_rw_at_their_real_paths() {
    for engine in engines() {
        let (_dir, ws) = workspace(MOUNTS);
        let extra = tempfile::tempdir().expect("tempdir");
        let extra = extra.path().canonicalize().expect("canonical");
        check_ro_rw(&engine, &ws, &extra.join("ro"), &extra.join("rw"));
    }
}

#[test]
fn requires_python_is_checked_against_the_image() {
    for engine in engines() {
        let (_dir, ws) = workspace("import sys\nprint(sys.version_info[0])\n");
        let mut spec = spec(&ws);
        spec.requires_python = Some(">=3.8".to_owned());
        let (outcome, out) = run(&engine, &spec);
        assert_eq!(
            (outcome.exit_code, out.stdout_lossy().as_str()),
            (0, "3\n"),
            "{}",
            name(&engine)
        );
        spec.requires_python = Some(">=3.99".to_owned());
        let err = engine.prepare(&spec, &mut |_| {}).expect_err("no such python");
        assert!(err.to_string().contains(">=3.99"), "{}: {err}", name(&engine));
    }
}

#[test]
fn missing_image_names_the_build_command() {
    for flavor in [engine_oci::Flavor::Docker, engine_oci::Flavor::Podman] {
        if crate::support::engine(flavor).is_none() {
            continue;
        }
        let mut config = engine_oci::OciConfig::from_env(flavor);
        config.image = "python-sandbox-no-such-image:never".to_owned();
        config.sweep_on_start = false;
        let err = engine_oci::OciEngine::new(config).expect_err("missing image");
        let text = err.to_string();
        assert!(text.contains("python-sandbox-no-such-image:never"), "{text}");
        assert!(text.contains("cargo xtask image") && text.contains("deploy/image"), "{text}");
    }
}

/// Writes 32 MiB into `/tmp` and into home (both tmpfs) and says how far each got.
const FILL_TMPFS: &str = r#"import errno, os
for label, path in [("tmp", "/tmp/fill"), ("home", os.path.expanduser("~/fill"))]:
    try:
        with open(path, "wb") as f:
            for _ in range(32):
                f.write(b"\0" * (1 << 20))
                f.flush()
        print(label, "ok")
    except OSError as e:
        print(label, errno.errorcode.get(e.errno, e.errno))
"#;

#[test]
fn tmpfs_size_caps_every_tmpfs() {
    for engine in engines() {
        let (_dir, ws) = workspace(FILL_TMPFS);
        let mut small = spec(&ws);
        small.tmpfs_size = 16 << 20;
        let (outcome, out) = run(&engine, &small);
        assert_eq!(outcome.exit_code, 0, "{}: {}", name(&engine), out.stderr_lossy());
        assert_eq!(out.stdout_lossy(), "tmp ENOSPC\nhome ENOSPC\n", "{}", name(&engine));
        let (outcome, out) = run(&engine, &spec(&ws));
        assert_eq!(outcome.exit_code, 0, "{}: {}", name(&engine), out.stderr_lossy());
        assert_eq!(out.stdout_lossy(), "tmp ok\nhome ok\n", "{}: default 1 GiB", name(&engine));
    }
}

/// The names directly in `dir`, sorted.
fn listing(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn paths_with_colons_run_and_leave_nothing_behind() {
    for engine in engines() {
        let root = tempfile::Builder::new().prefix("engine-oci-colon-").tempdir().expect("tmp");
        let root = root.path().canonicalize().expect("canonical");
        let ws = root.join("edge:ws");
        std::fs::create_dir(&ws).expect("mkdir");
        check_ro_rw(&engine, &ws, &root.join("edge-out:zz"), &root.join("rw:x"));
        // Nothing cut at a colon appeared next to them (podman used to create `…/edge`).
        assert_eq!(listing(&root), ["edge-out:zz", "edge:ws", "rw:x"], "{}", name(&engine));
    }
}

#[test]
fn missing_mount_source_creates_nothing() {
    for engine in engines() {
        let root = tempfile::Builder::new().prefix("engine-oci-missing-").tempdir().expect("tmp");
        let root = root.path().canonicalize().expect("canonical");
        let ws = root.join("edge:ws");
        std::fs::create_dir(&ws).expect("mkdir");
        std::fs::write(ws.join("main.py"), "open('ran', 'w')\n").expect("script");
        let mut spec = spec(&ws);
        let missing = root.join("in:put").join("zz");
        spec.mounts =
            vec![sandbox_core::Mount { path: missing, mode: sandbox_core::MountMode::ReadOnly }];
        let env = engine.prepare(&spec, &mut |_| {}).expect("prepare");
        let io = RunIo {
            stdin: Stdin::Null,
            output: Output::Sink(&mut Captured::default()),
            status: None,
            published: None,
            started: None,
        };
        let err = engine.run_prepared(&spec, &env, io).expect_err("a missing mount is an error");
        assert!(err.to_string().contains("does not exist"), "{}: {err}", name(&engine));
        assert_eq!(listing(&root), ["edge:ws"], "{}", name(&engine));
        assert_eq!(listing(&ws), ["main.py"], "{}", name(&engine));
    }
}

/// A root caller's run lends the workspace and read-write mounts to uid 65534 and gives them
/// back byte for byte: the same `system.posix_acl_access` (none, or the caller's own) and mode.
#[test]
fn root_run_leaves_acls_and_modes_as_they_were() {
    for engine in engines() {
        let (_dir, ws) = workspace(
            "import os, sys\nos.makedirs('sub/deeper', exist_ok=True)\nopen('sub/f', 'w').write('x')\nopen(sys.argv[1] + '/g', 'w').write('y')\n",
        );
        let out = ws.join("out");
        std::fs::create_dir(&out).expect("out");
        // The caller's own ACL on the mount, as its xattr bytes (version 2, then tag, perm, id):
        // user::rwx user:1000:r-x group::r-x mask::r-x other::---
        #[rustfmt::skip]
        let own: [u8; 44] = [
            2, 0, 0, 0,
            1, 0, 7, 0, 255, 255, 255, 255,
            2, 0, 5, 0, 232, 3, 0, 0,
            4, 0, 5, 0, 255, 255, 255, 255,
            16, 0, 5, 0, 255, 255, 255, 255,
            32, 0, 0, 0, 255, 255, 255, 255,
        ];
        rustix::fs::setxattr(
            &out,
            "system.posix_acl_access",
            &own,
            rustix::fs::XattrFlags::empty(),
        )
        .expect("own acl");
        let before = (permissions(&ws), permissions(&out));
        let mut spec = spec(&ws);
        spec.mounts = vec![sandbox_core::Mount {
            path: out.clone(),
            mode: sandbox_core::MountMode::ReadWrite,
        }];
        spec.args = vec![out.display().to_string()];
        let (outcome, captured) = run(&engine, &spec);
        assert_eq!(outcome.exit_code, 0, "{}: {}", name(&engine), captured.stderr_lossy());
        assert_eq!(std::fs::read_to_string(out.join("g")).expect("g"), "y");
        assert_eq!((permissions(&ws), permissions(&out)), before, "{}", name(&engine));
        for rel in ["sub", "sub/deeper"] {
            assert_eq!(permissions(&ws.join(rel)).0, None, "{}: {rel}", name(&engine));
        }
    }
}
