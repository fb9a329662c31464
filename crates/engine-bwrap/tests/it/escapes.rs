//! Escape attempts from the peers' test lists (symlinks, hardlinks, devices, setuid, host
//! sockets, /dev, mount-point litter), each checked from the host side as well.

use crate::support::fixture;

#[test]
fn symlinks_in_the_workspace_do_not_reach_the_host() {
    let Some(f) = fixture() else { return };
    let outside = tempfile::tempdir().expect("outside");
    let target = outside.path().join("planted");
    std::os::unix::fs::symlink(&target, f.workspace.path().join("pre-existing")).expect("symlink");
    std::os::unix::fs::symlink(f.home.path(), f.workspace.path().join("h")).expect("symlink");
    let script = format!(
        "import os\n\
         def attempt(path):\n\
         \x20   try:\n\
         \x20       open(path, 'w').write('x'); return 'wrote'\n\
         \x20   except OSError: return 'denied'\n\
         os.symlink({target:?}, 'made-inside')\n\
         print(attempt('made-inside'), attempt('pre-existing'))\n\
         print(sorted(os.listdir('h')) if os.path.isdir('h') else 'h hidden')\n\
         try:\n\
         \x20   os.link('/etc/passwd', 'hl'); print('hardlinked')\n\
         except OSError: print('no hardlink')\n",
        target = target.display().to_string()
    );
    let out = f.run_ok(&f.spec(&script));
    // Writes through either link land in the sandbox's /tmp tmpfs (or fail), never on the host.
    assert!(!target.exists(), "a symlink carried a write to the host: {out}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[1], "h hidden", "the host home behind the link does not exist inside");
    assert_eq!(lines[2], "no hardlink");
}

#[test]
fn devices_setuid_and_fifos() {
    let Some(f) = fixture() else { return };
    let script = "import os, shutil, stat, subprocess\n\
        try:\n\
        \x20   os.mknod('dev', stat.S_IFCHR | 0o600, os.makedev(1, 3)); print('mknod worked')\n\
        except OSError: print('no mknod')\n\
        os.mkfifo('fifo'); print('fifo ok')\n\
        shutil.copy('/usr/bin/id', './myid')\n\
        try:\n\
        \x20   os.chmod('./myid', 0o4755)\n\
        except PermissionError: pass\n\
        print('euid', subprocess.run(['./myid', '-u'], capture_output=True, text=True).stdout.strip())\n\
        for d in ['null', 'zero', 'full', 'random', 'urandom', 'tty']:\n\
        \x20   print(d, os.path.exists('/dev/' + d))\n\
        print(open('/dev/urandom', 'rb').read(4) != b'\\0\\0\\0\\0')\n\
        import socket; a, b = socket.socketpair(); a.send(b'p'); print('socketpair', b.recv(1))\n";
    let out = f.run_ok(&f.spec(script));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "no mknod");
    assert_eq!(lines[1], "fifo ok");
    assert_ne!(lines[2], "euid 0", "setuid must not give root");
    assert!(lines[3..9].iter().all(|l| l.ends_with("True")), "{out}");
    assert_eq!(lines[9], "True");
    assert_eq!(lines[10], "socketpair b'p'");
}

#[test]
fn host_sockets_and_runtime_dirs_are_absent() {
    let Some(f) = fixture() else { return };
    let script = "import os\n\
        for p in ['/var/run/docker.sock', '/run/docker.sock', '/run/podman/podman.sock',\n\
        \x20         '/run/containerd/containerd.sock', '/run/user', '/run/dbus', '/var/run', '/sys/fs/cgroup']:\n\
        \x20   print(p, os.path.exists(p))\n";
    let out = f.run_ok(&f.spec(script));
    assert!(out.lines().all(|l| l.ends_with(" False")), "{out}");
}

#[test]
fn no_mount_point_litter_in_the_workspace() {
    let Some(f) = fixture() else { return };
    let data = tempfile::tempdir().expect("data");
    let mut spec = f.spec("print('ok')\n");
    let vendor = f.workspace.path().join("vendor");
    std::fs::create_dir(&vendor).expect("vendor");
    spec.mounts = vec![
        crate::support::mount(data.path(), sandbox_core::MountMode::ReadOnly),
        crate::support::mount(&vendor, sandbox_core::MountMode::ReadOnly),
    ];
    let before: Vec<_> = list(f.workspace.path());
    assert_eq!(f.run_ok(&spec), "ok\n");
    assert_eq!(list(f.workspace.path()), before);
}

fn list(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}
