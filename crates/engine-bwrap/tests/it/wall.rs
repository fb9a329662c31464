//! What the sandbox hides and forbids.

use std::io::Write;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::MetadataExt;

use sandbox_core::{MountMode, Net};

use crate::support::{env, fixture, mount, pasta_fixture};

#[test]
fn computes_and_writes_workspace_files_owned_by_the_caller() {
    let Some(f) = fixture() else { return };
    let spec =
        f.spec("import os\nprint(6 * 7)\nopen('out.txt', 'w').write('hi')\nprint(os.getuid())\n");
    let out = f.run_ok(&spec);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("42"));
    let uid = rustix::process::getuid().as_raw();
    let inside_uid: u32 = lines.next().expect("uid").parse().expect("number");
    assert_eq!(inside_uid, if uid == 0 { 65534 } else { uid });
    let written = f.workspace.path().join("out.txt");
    assert_eq!(std::fs::read_to_string(&written).expect("out.txt"), "hi");
    assert_eq!(std::fs::metadata(&written).expect("meta").uid(), uid);
}

#[test]
fn home_secrets_are_invisible() {
    let Some(f) = fixture() else { return };
    let home = f.home.path().display().to_string();
    let script = format!(
        "import os\n\
         print(os.environ['HOME'])\n\
         print(sorted(os.listdir(os.environ['HOME'])))\n\
         print(os.path.exists({home:?}))\n\
         for p in ['.ssh/id_rsa', '.aws/credentials', '.netrc']:\n\
         \x20   try:\n\
         \x20       open(os.path.join({home:?}, p)).read(); print('LEAK', p)\n\
         \x20   except OSError as e:\n\
         \x20       print('hidden', p)\n\
         open(os.path.join(os.environ['HOME'], 'x'), 'w').write('tmpfs')\n\
         print(os.path.exists('/root/.bashrc') or os.path.exists('/root/.cargo'))\n"
    );
    let out = f.run_ok(&f.spec(&script));
    assert_eq!(
        out,
        "/home/sandbox\n[]\nFalse\nhidden .ssh/id_rsa\nhidden .aws/credentials\nhidden .netrc\nFalse\n"
    );
    assert!(!f.home.path().join("x").exists(), "home writes must not reach the host");
}

#[test]
fn etc_is_minimal_and_read_only() {
    let Some(f) = fixture() else { return };
    let script = "import os\n\
        for p in ['/etc/shadow', '/etc/gshadow', '/etc/ssh', '/etc/ssl/private', '/etc/sudoers', '/etc/machine-id']:\n\
        \x20   print(p, os.path.exists(p))\n\
        print(open('/etc/passwd').read().count(':x:'))\n\
        try:\n\
        \x20   open('/etc/x', 'w'); print('wrote /etc/x')\n\
        except OSError:\n\
        \x20   print('etc read-only')\n\
        try:\n\
        \x20   open('/usr/x', 'w'); print('wrote /usr/x')\n\
        except OSError:\n\
        \x20   print('usr read-only')\n";
    let out = f.run_ok(&f.spec(script));
    assert!(out.lines().take(6).all(|l| l.ends_with(" False")), "{out}");
    assert!(out.contains("etc read-only") && out.contains("usr read-only"), "{out}");
    assert!(!std::path::Path::new("/usr/x").exists());
}

#[test]
fn environment_is_scrubbed_and_explicit_env_passes() {
    let Some(f) = fixture() else { return };
    let mut spec = f.spec("import os\nfor k in sorted(os.environ): print(k)\nprint('TOKEN=' + os.environ['MY_TOKEN'])\n");
    spec.env.push(env("MY_TOKEN", "s3cret"));
    let out = f.run_ok(&spec);
    let allowed = [
        "HOME",
        "PWD",
        "HOSTNAME",
        "REQUESTS_CA_BUNDLE",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "MY_TOKEN",
        "PATH",
        "SSL_CERT_FILE",
        "TERM",
        "TZ",
        "VIRTUAL_ENV",
        "container",
    ];
    for line in out.lines().filter(|l| !l.starts_with("TOKEN=")) {
        assert!(allowed.contains(&line), "unexpected variable {line} in the sandbox");
    }
    assert!(out.contains("TOKEN=s3cret"));
    // cargo sets these for the test process; none may leak.
    assert!(!out.contains("CARGO"));
}

#[test]
fn no_capabilities_no_new_privileges_no_nested_userns() {
    let Some(f) = fixture() else { return };
    let script = "import subprocess\n\
        status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n\
        print(status['CapEff'].strip(), status['CapPrm'].strip(), status['NoNewPrivs'].strip())\n\
        r = subprocess.run(['unshare', '--user', 'true'], capture_output=True)\n\
        print('nested userns', r.returncode != 0)\n\
        print(sorted(int(p) for p in __import__('os').listdir('/proc') if p.isdigit())[:3])\n";
    let out = f.run_ok(&f.spec(script));
    let mut lines = out.lines();
    let caps = lines.next().expect("caps");
    assert_eq!(caps, "0000000000000000 0000000000000000 1", "CapEff CapPrm NoNewPrivs");
    assert_eq!(lines.next(), Some("nested userns True"));
    // Only sandbox pids: bwrap's pid 1, python and the listing itself stay tiny.
    let pids = lines.next().expect("pids");
    assert!(pids.starts_with("[1, 2"), "{pids}");
}

#[test]
fn net_off_has_no_host_loopback_and_no_abstract_sockets() {
    let Some(f) = pasta_fixture() else { return };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = listener.local_addr().expect("addr").port();
    let name = format!("python-sandbox-test-{}", std::process::id());
    let addr =
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract");
    let _abstract = std::os::unix::net::UnixListener::bind_addr(&addr).expect("bind abstract");
    let script = format!(
        "import socket\n\
         def tcp():\n\
         \x20   s = socket.socket(); s.settimeout(3)\n\
         \x20   try:\n\
         \x20       s.connect(('127.0.0.1', {port})); return 'tcp connected'\n\
         \x20   except OSError: return 'tcp refused'\n\
         def unix():\n\
         \x20   s = socket.socket(socket.AF_UNIX)\n\
         \x20   try:\n\
         \x20       s.connect('\\0{name}'); return 'abstract connected'\n\
         \x20   except OSError: return 'abstract refused'\n\
         def dns():\n\
         \x20   try:\n\
         \x20       socket.getaddrinfo('pypi.org', 443); return 'dns works'\n\
         \x20   except OSError: return 'no dns'\n\
         def metadata():\n\
         \x20   s = socket.socket(); s.settimeout(3)\n\
         \x20   try:\n\
         \x20       s.connect(('169.254.169.254', 80)); return 'metadata connected'\n\
         \x20   except OSError: return 'metadata unreachable'\n\
         def https():\n\
         \x20   import urllib.request\n\
         \x20   try:\n\
         \x20       return 'https %d' % urllib.request.urlopen('https://pypi.org/simple/six/', timeout=30).status\n\
         \x20   except OSError as e: return 'https failed'\n\
         print(tcp(), unix(), dns(), metadata(), https())\n"
    );
    let mut spec = f.spec(&script);
    assert_eq!(
        f.run_ok(&spec).trim(),
        "tcp refused abstract refused no dns metadata unreachable https failed"
    );
    // Net on is outbound only: the world (DNS, HTTPS through the host's proxy and CA bundle),
    // never the host's loopback, abstract sockets or link-local metadata addresses.
    spec.net = Net::On;
    assert_eq!(
        f.run_ok(&spec).trim(),
        "tcp refused abstract refused dns works metadata unreachable https 200"
    );
}

/// A published port reaches a server inside from the host's 127.0.0.1; a port the script binds
/// on 0.0.0.0 without publishing does not.
#[test]
fn only_published_ports_reach_in() {
    let Some(f) = pasta_fixture() else { return };
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
    };
    let (published, unpublished) = (free(), free());
    let script = format!(
        "import socket, time\n\
         socks = []\n\
         for port in ({published}, {unpublished}):\n\
         \x20   s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         \x20   s.bind(('0.0.0.0', port)); s.listen(); socks.append(s)\n\
         print('listening', flush=True)\n\
         s = socks[0]; s.settimeout(20)\n\
         c, _ = s.accept(); c.sendall(b'inside'); c.close()\n"
    );
    let mut spec = f.spec(&script);
    spec.net = Net::On;
    spec.publish.push(sandbox_core::Publish::same(published));
    let (reached, refused) = std::thread::scope(|s| {
        let client = s.spawn(|| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            let mut got = String::new();
            while std::time::Instant::now() < deadline && got.is_empty() {
                if let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", published)) {
                    let _ = std::io::Read::read_to_string(&mut c, &mut got);
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            let refused = std::net::TcpStream::connect(("127.0.0.1", unpublished)).is_err();
            (got, refused)
        });
        let out = f.run_ok(&spec);
        assert_eq!(out, "listening\n");
        client.join().expect("client")
    });
    assert_eq!(reached, "inside");
    assert!(refused, "an unpublished port reached the sandbox");
}

#[test]
fn the_environment_and_interpreter_are_read_only() {
    let Some(f) = fixture() else { return };
    let cache = crate::support::cache_dir();
    let script = format!(
        "import sys, os\n\
         for d in [sys.prefix, sys.base_prefix, {cache:?}]:\n\
         \x20   try:\n\
         \x20       open(os.path.join(d, 'poison'), 'w'); print('WROTE', d)\n\
         \x20   except OSError:\n\
         \x20       print('denied')\n\
         print(os.path.exists({cache:?} + '/bwrap/uv-cache'))\n",
        cache = cache.display().to_string()
    );
    let out = f.run_ok(&f.spec(&script));
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("denied"), "{out}");
    assert_eq!(lines.next(), Some("denied"), "{out}");
    // The cache is simply absent; where its path lies under /tmp, the write lands in the
    // sandbox's own tmpfs. Either way nothing reaches the host.
    lines.next();
    assert_eq!(lines.next(), Some("False"), "{out}");
    assert!(!cache.join("poison").exists());
}

#[test]
fn mounts_ro_rw_and_symlink_refusal() {
    let Some(f) = fixture() else { return };
    let data = tempfile::tempdir().expect("data");
    std::fs::write(data.path().join("in.txt"), "input").expect("write");
    let out_dir = data.path().join("new/out");
    let mut spec = f.spec(&format!(
        "import os\n\
         print(open({ro:?} + '/in.txt').read())\n\
         try:\n\
         \x20   open({ro:?} + '/x', 'w'); print('ro writable')\n\
         except OSError:\n\
         \x20   print('ro denied')\n\
         open({rw:?} + '/result', 'w').write('ok')\n",
        ro = data.path().display().to_string(),
        rw = out_dir.display().to_string()
    ));
    spec.mounts =
        vec![mount(data.path(), MountMode::ReadOnly), mount(&out_dir, MountMode::ReadWrite)];
    assert_eq!(f.run_ok(&spec), "input\nro denied\n");
    assert_eq!(std::fs::read_to_string(out_dir.join("result")).expect("result"), "ok");

    let link = f.workspace.path().join("link");
    std::os::unix::fs::symlink(data.path(), &link).expect("symlink");
    spec.mounts = vec![mount(&link, MountMode::ReadOnly)];
    let err = f
        .engine
        .run_prepared(&spec, &f.prepare(&spec), sandbox_core::RunIo::inherit())
        .expect_err("symlink");
    assert!(err.to_string().contains("goes through a symlink"), "{err}");

    // A read-write mount point is created without following a symlinked parent.
    let outside = tempfile::tempdir().expect("outside");
    let hop = f.workspace.path().join("hop");
    std::os::unix::fs::symlink(outside.path(), &hop).expect("symlink");
    spec.mounts = vec![mount(&hop.join("made"), MountMode::ReadWrite)];
    let err = f
        .engine
        .run_prepared(&spec, &f.prepare(&spec), sandbox_core::RunIo::inherit())
        .expect_err("hop");
    assert!(err.to_string().contains("goes through a symlink"), "{err}");
    assert!(!outside.path().join("made").exists(), "nothing may be created through the link");

    spec.mounts = vec![mount(f.home.path(), MountMode::ReadOnly)];
    spec.workspace = f.home.path().to_owned();
    let err = f
        .engine
        .run_prepared(&spec, &f.prepare(&spec), sandbox_core::RunIo::inherit())
        .expect_err("home");
    assert!(err.to_string().contains("whole home directory"), "{err}");
}

#[test]
fn publish_needs_net() {
    let Some(f) = pasta_fixture() else { return };
    let mut spec = f.spec("print('ok')\n");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    spec.publish.push(sandbox_core::Publish::same(port));
    let err = f.engine.check(&spec).expect_err("net off");
    assert!(err.to_string().contains("network off"));
    spec.net = Net::On;
    let (outcome, _) = f.run(&spec);
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
}

#[test]
fn stdin_bytes_reach_the_script() {
    let Some(f) = fixture() else { return };
    let spec = f.spec("import sys\nprint(sys.stdin.read().upper())\n");
    let mut captured = sandbox_core::Captured::default();
    let io = sandbox_core::RunIo {
        stdin: sandbox_core::Stdin::Bytes(b"hello".to_vec()),
        output: sandbox_core::Output::Sink(&mut captured),
        status: None,
        published: None,
        started: None,
    };
    let outcome = sandbox_core::Engine::run(&f.engine, &spec, io).expect("run");
    assert_eq!(outcome.exit_code, 0);
    assert_eq!(captured.stdout_lossy(), "HELLO\n");
    let _ = std::io::stdout().flush();
}

/// A root caller's sandbox is not host root: every process of it runs as nobody on the host
/// (seen from the host's /proc), so host-wide kernel settings stay out of reach, and /proc/sys
/// is read-only besides.
#[test]
fn never_host_root_and_proc_sys_read_only() {
    let Some(f) = fixture() else { return };
    let script = "import time, sys\n\
        for p in ['/proc/sys/kernel/core_pattern', '/proc/sys/vm/drop_caches', '/proc/sysrq-trigger']:\n\
        \x20   try:\n\
        \x20       open(p, 'w'); print('WRITABLE', p)\n\
        \x20   except OSError:\n\
        \x20       print('read-only', p)\n\
        sys.stdout.flush()\n\
        time.sleep(1.5)\n";
    let mut spec = f.spec(script);
    spec.args = vec!["psbx-uid-probe-4711".to_owned()];
    let host_uids = std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while std::time::Instant::now() < deadline {
                let found = host_uids_of("psbx-uid-probe-4711");
                if !found.is_empty() {
                    return found;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Vec::new()
        });
        let out = f.run_ok(&spec);
        assert_eq!(
            out,
            "read-only /proc/sys/kernel/core_pattern\nread-only /proc/sys/vm/drop_caches\n\
             read-only /proc/sysrq-trigger\n"
        );
        watcher.join().expect("watcher")
    });
    let uid = rustix::process::getuid().as_raw();
    let expected = if uid == 0 { 65534 } else { uid };
    assert!(!host_uids.is_empty(), "the script's process was never seen on the host");
    // Real, effective, saved and filesystem uid, as the host sees them.
    assert!(host_uids.iter().all(|&u| u == expected), "host uids {host_uids:?}");
}

/// The four uids (real, effective, saved, fs) of host processes whose argv contains `needle`.
fn host_uids_of(needle: &str) -> Vec<u32> {
    let mut uids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("proc").flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        if !String::from_utf8_lossy(&cmdline).contains(needle) {
            continue;
        }
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        if let Some(line) = status.lines().find(|l| l.starts_with("Uid:")) {
            uids.extend(line.split_whitespace().skip(1).filter_map(|u| u.parse::<u32>().ok()));
        }
    }
    uids
}

/// No file leaves the sandbox setuid, setgid or with extended attributes (file capabilities),
/// whichever call tries; ordinary modes still work.
#[test]
fn no_setuid_setgid_or_xattr_leaves_the_sandbox() {
    let Some(f) = fixture() else { return };
    let script = "import os, shutil, ctypes\n\
        libc = ctypes.CDLL(None, use_errno=True)\n\
        shutil.copy('/usr/bin/id', 'myid')\n\
        def attempt(what, call):\n\
        \x20   try:\n\
        \x20       call(); print(what, 'ALLOWED')\n\
        \x20   except OSError as e:\n\
        \x20       print(what, 'refused', e.errno)\n\
        attempt('chmod 4755', lambda: os.chmod('myid', 0o4755))\n\
        attempt('chmod 2755', lambda: os.chmod('myid', 0o2755))\n\
        fd = os.open('myid', os.O_RDONLY)\n\
        attempt('fchmod 6755', lambda: os.fchmod(fd, 0o6755))\n\
        attempt('open O_CREAT 4755', lambda: os.open('made', os.O_CREAT | os.O_WRONLY, 0o4755))\n\
        attempt('mknod 4644', lambda: os.mknod('node', 0o104644))\n\
        attempt('setxattr', lambda: os.setxattr('myid', 'user.x', b'1'))\n\
        attempt('setxattr security.capability', lambda: os.setxattr('myid', 'security.capability', b'\\x01\\x00\\x00\\x02' + b'\\x00' * 16))\n\
        os.chmod('myid', 0o750); print('chmod 750 ok')\n\
        r = libc.unshare(0x10000000); print('unshare(CLONE_NEWUSER)', r, ctypes.get_errno())\n";
    let out = f.run_ok(&f.spec(script));
    assert_eq!(
        out,
        "chmod 4755 refused 1\nchmod 2755 refused 1\nfchmod 6755 refused 1\n\
         open O_CREAT 4755 refused 1\nmknod 4644 refused 1\nsetxattr refused 95\n\
         setxattr security.capability refused 95\nchmod 750 ok\nunshare(CLONE_NEWUSER) -1 1\n"
    );
    let mut found = Vec::new();
    for entry in std::fs::read_dir(f.workspace.path()).expect("workspace").flatten() {
        let meta = entry.metadata().expect("meta");
        if meta.mode() & 0o6000 != 0 {
            found.push(entry.file_name());
        }
    }
    assert!(found.is_empty(), "setuid/setgid files left: {found:?}");
}

/// Every tmpfs is capped: writing past `tmpfs_size` fails with ENOSPC instead of filling host
/// memory.
#[test]
fn tmpfs_is_size_capped() {
    let Some(f) = fixture() else { return };
    let script = "import os, errno\n\
        for d in ['/tmp', os.environ['HOME']]:\n\
        \x20   try:\n\
        \x20       with open(os.path.join(d, 'big'), 'wb') as out:\n\
        \x20           for _ in range(32):\n\
        \x20               out.write(b'x' * (1 << 20))\n\
        \x20       print(d, 'UNCAPPED')\n\
        \x20   except OSError as e:\n\
        \x20       print(d, errno.errorcode[e.errno])\n";
    let mut spec = f.spec(script);
    spec.tmpfs_size = 16 << 20;
    assert_eq!(f.run_ok(&spec), "/tmp ENOSPC\n/home/sandbox ENOSPC\n");
}

/// The workspace keeps its owners, modes and ACLs: existing files stay writable and new ones land
/// owned by the caller, with no ACL entry left behind (for a root caller the workspace is an
/// idmapped mount, so the sandbox's nobody acts as root there without any permission change).
#[test]
fn workspace_keeps_owners_modes_and_acls() {
    let Some(f) = fixture() else { return };
    let ws = f.workspace.path();
    std::fs::write(ws.join("existing.txt"), "old\n").expect("existing");
    std::fs::create_dir(ws.join("sub")).expect("sub");
    std::fs::write(ws.join("sub/inner.txt"), "x\n").expect("inner");
    for (rel, mode) in
        [("existing.txt", 0o644), ("sub", 0o755), ("sub/inner.txt", 0o644), ("", 0o755)]
    {
        std::fs::set_permissions(ws.join(rel), std::os::unix::fs::PermissionsExt::from_mode(mode))
            .expect("chmod");
    }
    let acl = |p: &std::path::Path| {
        let mut buf = [0u8; 256];
        rustix::fs::getxattr(p, "system.posix_acl_access", &mut buf).ok()
    };
    let before = (acl(ws), acl(&ws.join("sub")));
    let script = "import os\n\
        open('existing.txt', 'w').write('new\\n')\n\
        open('sub/inner.txt', 'a').write('more\\n')\n\
        open('sub/created.txt', 'w').write('c\\n')\n\
        os.mkdir('made')\n\
        print('ok')\n";
    assert_eq!(f.run_ok(&f.spec(script)), "ok\n");
    let uid = rustix::process::getuid().as_raw();
    assert_eq!(std::fs::read_to_string(ws.join("existing.txt")).expect("read"), "new\n");
    assert_eq!(std::fs::read_to_string(ws.join("sub/inner.txt")).expect("read"), "x\nmore\n");
    for rel in ["existing.txt", "sub", "sub/inner.txt", "sub/created.txt", "made", ""] {
        let meta = std::fs::symlink_metadata(ws.join(rel)).expect("meta");
        assert_eq!(meta.uid(), uid, "{rel} is not the caller's");
    }
    for (rel, mode) in
        [("existing.txt", 0o644), ("sub", 0o755), ("sub/inner.txt", 0o644), ("", 0o755)]
    {
        let meta = std::fs::symlink_metadata(ws.join(rel)).expect("meta");
        assert_eq!(meta.mode() & 0o7777, mode, "{rel} changed its mode");
    }
    assert_eq!((acl(ws), acl(&ws.join("sub"))), before, "an ACL was left behind");
}

/// A network that cannot be set up stops the run before any of the script starts: nothing
/// half-done (the sandbox once went on without a network when pasta failed).
#[test]
fn a_failed_network_setup_starts_nothing() {
    let Some(fx) = pasta_fixture() else { return };
    let fake = tempfile::tempdir().expect("fake pasta dir");
    let pasta = fake.path().join("pasta");
    std::fs::write(&pasta, "#!/bin/sh\nsleep 0.2\necho 'pasta: refused here' >&2\nexit 1\n")
        .expect("fake pasta");
    std::fs::set_permissions(&pasta, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", fake.path().display());
    let config =
        engine_bwrap::BwrapConfig { path: Some(path.into()), ..fx.engine.config().clone() };
    let engine = engine_bwrap::BwrapEngine::new(config).expect("engine");
    let mut spec = fx.spec("open('started', 'w').write('yes')\n");
    spec.net = sandbox_core::Net::On;
    // Prepared with the working pasta (prepare steps have a network too).
    let env = fx.prepare(&spec);
    let io = sandbox_core::RunIo::inherit();
    let err = engine.run_prepared(&spec, &env, io).expect_err("pasta failed");
    assert!(err.to_string().contains("pasta: refused here"), "{err}");
    assert!(!fx.workspace.path().join("started").exists(), "the script ran");
}

/// Net on where pasta is not installed and the relay is off (or no tun device can be opened):
/// bwrap sandboxes get the built-in proxy (the shared contract, `builtin_net.rs`), with a cache
/// of their own so the install goes through it.
#[test]
fn without_pasta_net_on_goes_through_the_builtin_proxy() {
    without_pasta(false);
}

/// Net on where pasta is not installed: bwrap sandboxes get the built-in relay (the shared
/// contract, `builtin_net.rs`), with a cache of their own so the install goes through it.
#[test]
fn without_pasta_net_on_gets_the_relay() {
    if !sandbox_net::relay_available() {
        println!("SKIPPED: bwrap relay: no tun device to open here");
        return;
    }
    without_pasta(true);
}

fn without_pasta(relay: bool) {
    let Some(f) = fixture() else { return };
    let scratch = tempfile::tempdir().expect("scratch");
    let mut config = f.engine.config().clone();
    config.path = Some(crate::builtin_net::path_without_pasta(&scratch.path().join("bin")));
    // The real binary (a root caller's staging covers /tmp, where the links are).
    config.bwrap = engine_detect::which("bwrap", std::env::var_os("PATH").as_deref());
    config.cache_dir = scratch.path().join("cache");
    config.runtime_dir = scratch.path().join("cache/run");
    config.builtin_relay = relay;
    let engine = engine_bwrap::BwrapEngine::new(config).expect("engine");
    let service = crate::builtin_net::HostService::start();
    let spec = if relay { service.relay_spec(f.spec("")) } else { service.spec(f.spec("")) };
    let (outcome, captured) = crate::support::run_on(&engine, &spec);
    assert_eq!(outcome.exit_code, 0, "{}{}", captured.stdout_lossy(), captured.stderr_lossy());
    if relay {
        service.relay_check(&captured.stdout_lossy());
    } else {
        service.check(&captured.stdout_lossy());
    }
}

/// An allowlist where no tun device is used (the relay turned off, as where the host chains
/// through its own proxy): the built-in proxy holds it. The listed name is fetched; a tunnel to
/// another registry at the same address is a 403 and named in the outcome. PyPI and npm are
/// registries this machine reaches by name.
#[test]
fn without_the_relay_the_builtin_proxy_holds_an_allowlist() {
    let Some(f) = fixture() else { return };
    let scratch = tempfile::tempdir().expect("scratch");
    let mut config = f.engine.config().clone();
    config.path = Some(crate::builtin_net::path_without_pasta(&scratch.path().join("bin")));
    config.bwrap = engine_detect::which("bwrap", std::env::var_os("PATH").as_deref());
    config.builtin_relay = false;
    let engine = engine_bwrap::BwrapEngine::new(config).expect("engine");
    let mut spec = f.spec(
        "import urllib.request\n\
         print('pypi', urllib.request.urlopen('https://pypi.org/simple/six/', timeout=30).status)\n\
         try:\n    urllib.request.urlopen('https://registry.npmjs.org/', timeout=30)\n    print('npm reached')\n\
         except OSError as e:\n    print('npm refused', e)\n",
    );
    spec.net = sandbox_core::Net::On;
    spec.allow = Some(sandbox_core::Allow::parse(["pypi.org:443"]).expect("list"));
    let (outcome, captured) = crate::support::run_on(&engine, &spec);
    let out = captured.stdout_lossy();
    assert_eq!(outcome.exit_code, 0, "{out}{}", captured.stderr_lossy());
    assert!(out.contains("pypi 200") && out.contains("npm refused"), "{out}");
    assert!(out.contains("403"), "a refused tunnel is a 403: {out}");
    assert!(
        outcome.net_refused.iter().any(|r| r.host == "registry.npmjs.org" && r.port == Some(443)),
        "{:?}",
        outcome.net_refused
    );
}
