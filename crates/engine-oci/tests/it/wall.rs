//! The seccomp wall (`sandbox_core::WALL`) on real containers: what it refuses, with which
//! errno, what ordinary file work still does, and that sessions carry the same profile as runs.

use sandbox_core::SessionEngine as _;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use engine_oci::SessionConfig;
use sandbox_core::{Captured, ExecRequest, Net, Sandbox};

use crate::support::{engines, name, run, spec, workspace};

/// Prints `label errno` (0 = it worked) for each attempt, in the current directory.
const PROBE: &str = r##"import ctypes, fcntl, os, shutil, subprocess, tempfile, zipfile
def attempt(label, fn):
    try:
        fn(); print(label, 0)
    except OSError as e:
        print(label, e.errno)
libc = ctypes.CDLL(None, use_errno=True)
def sys(nr, *args):
    def call():
        if libc.syscall(nr, *args) == -1:
            raise OSError(ctypes.get_errno(), "syscall")
    return call
def unshare(flags):
    def call():
        if libc.unshare(flags) != 0:
            raise OSError(ctypes.get_errno(), "unshare")
    return call
open("f", "w").close()
fd = os.open("f", os.O_RDONLY)
attempt("chmod-4755", lambda: os.chmod("f", 0o4755))
attempt("chmod-2755", lambda: os.chmod("f", 0o2755))
attempt("chmod-755", lambda: os.chmod("f", 0o755))
attempt("fchmod-6755", lambda: os.fchmod(fd, 0o6755))
attempt("fchmod-644", lambda: os.fchmod(fd, 0o644))
attempt("open-creat-4755", lambda: os.close(os.open("g", os.O_CREAT | os.O_WRONLY, 0o4755)))
attempt("open-creat-644", lambda: os.close(os.open("h", os.O_CREAT | os.O_WRONLY, 0o644)))
attempt("open-plain-4755", lambda: os.close(os.open("f", os.O_RDONLY, 0o4755)))
attempt("mkfifo-2644", lambda: os.mkfifo("fifo", 0o2644))
attempt("setxattr", lambda: os.setxattr("f", "user.x", b"1"))
attempt("unshare-user", unshare(0x10000000))
attempt("unshare-ipc", unshare(0x08000000))
attempt("tiocsti", lambda: fcntl.ioctl(fd, 0x5412, b"x"))
attempt("tiocsti-high", lambda: fcntl.ioctl(fd, 0x1_0000_5412, b"x"))
attempt("tcgets", lambda: fcntl.ioctl(fd, 0x5401, b"x" * 64))
attempt("clone3", sys(435, 0, 0))
attempt("openat2", sys(437, -100, b"f", 0, 0))
attempt("io-uring", sys(425, 1, 0))
attempt("keyctl", sys(250, 0, 0, 0, 0, 0))
def pip_like():
    # What an installer does: trees, temp files, renames, usual modes, links, archives, a child.
    os.makedirs("site/pkg/sub", exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir="site", delete=False) as t:
        t.write("x = 1\n")
    os.replace(t.name, "site/pkg/mod.py")
    os.chmod("site/pkg/mod.py", 0o644)
    with open("site/pkg/tool", "w") as t:
        t.write("#!/bin/sh\necho tool\n")
    os.chmod("site/pkg/tool", 0o755)
    os.symlink("mod.py", "site/pkg/alias.py")
    os.utime("site/pkg/mod.py", (1e9, 1e9))
    with zipfile.ZipFile("w.zip", "w") as z:
        z.write("site/pkg/mod.py")
    zipfile.ZipFile("w.zip").extractall("unpacked")
    shutil.copytree("site", "copy", symlinks=True)
    assert subprocess.run(["site/pkg/tool"], capture_output=True).stdout == b"tool\n"
    shutil.rmtree("copy")
attempt("pip-like", pip_like)
"##;

/// The errno each probe must end with (0: it worked).
const EXPECTED: &[(&str, i32)] = &[
    ("chmod-4755", 1),
    ("chmod-2755", 1),
    ("chmod-755", 0),
    ("fchmod-6755", 1),
    ("fchmod-644", 0),
    ("open-creat-4755", 1),
    ("open-creat-644", 0),
    // Without O_CREAT the mode is ignored by the kernel, so the wall lets it be.
    ("open-plain-4755", 0),
    ("mkfifo-2644", 1),
    ("setxattr", 95),
    ("unshare-user", 1),
    // No capabilities: the kernel's own refusal, not the wall's.
    ("unshare-ipc", 1),
    ("tiocsti", 1),
    ("tiocsti-high", 1),
    // Reaches the kernel: not a terminal.
    ("tcgets", 25),
    ("clone3", 38),
    ("openat2", 38),
    ("io-uring", 38),
    ("keyctl", 1),
    ("pip-like", 0),
];

fn check(engine: &str, how: &str, text: &str) {
    for (label, errno) in EXPECTED {
        let line = format!("{label} {errno}");
        assert!(text.lines().any(|l| l == line), "{engine} {how}: missing `{line}` in:\n{text}");
    }
}

/// No file under `dir` may leave the sandbox setuid or setgid.
fn assert_no_set_id_bits(engine: &str, dir: &std::path::Path) {
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("entry").path();
        let meta = std::fs::symlink_metadata(&path).expect("stat");
        assert_eq!(meta.mode() & 0o6000, 0, "{engine}: {} is {:o}", path.display(), meta.mode());
        if meta.is_dir() {
            assert_no_set_id_bits(engine, &path);
        }
    }
}

#[test]
fn seccomp_wall_in_runs() {
    for engine in engines() {
        let (_dir, ws) = workspace(PROBE);
        let (outcome, out) = run(&engine, &spec(&ws));
        assert_eq!(outcome.exit_code, 0, "{}: {}", name(&engine), out.stderr_lossy());

        check(name(&engine), "run", &out.stdout_lossy());
        assert_no_set_id_bits(name(&engine), &ws);
    }
}

#[test]
fn sessions_carry_the_same_wall() {
    for engine in engines() {
        let (_dir, ws) = workspace("");
        std::fs::write(ws.join("probe.py"), PROBE).expect("write probe");
        let config = SessionConfig {
            workspace: ws.clone(),
            mounts: Vec::new(),
            net: Net::Off,
            allow: None,
            publish: Vec::new(),
            env: Vec::new(),
            ttl: Duration::from_secs(300),
            tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
            limits: sandbox_core::Limits::NONE,
        };
        let info = engine.start_session(&config, &mut |_| {}).expect("start");
        // Both exec paths: the agent, and the API exec a session falls back to.
        for via_agent in [true, false] {
            let session = engine.open_session(&info.id).expect("session");
            let session = if via_agent { session } else { session.via_api() };
            let how = if session.uses_agent() { "session via agent" } else { "session via api" };
            let mut out = Captured::default();
            // A fresh directory each time: the probe's files must not exist yet.
            let sub = format!("{}/{}", ws.display(), how.replace(' ', "-"));
            let request = ExecRequest::new(&[
                "sh",
                "-c",
                &format!("mkdir {sub} && cd {sub} && python3 ../probe.py"),
            ]);
            let outcome = engine.block_on(session.exec(&request, &mut out)).expect("exec");
            assert_eq!(outcome.exit_code, 0, "{} {how}: {}", name(&engine), out.stderr_lossy());
            check(name(&engine), how, &out.stdout_lossy());
        }
        engine.stop_session(&info.id).expect("stop");
        assert_no_set_id_bits(name(&engine), &ws);
    }
}
