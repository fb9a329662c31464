//! What the sandbox hides and forbids.

use std::io::Write;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::MetadataExt;

use sandbox_core::{MountMode, Net};

use crate::support::{env, fixture, mount};

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
         print(os.environ['HOME'] == {home:?})\n\
         print(sorted(os.listdir({home:?})))\n\
         for p in ['.ssh/id_rsa', '.aws/credentials', '.netrc']:\n\
         \x20   try:\n\
         \x20       open(os.path.join({home:?}, p)).read(); print('LEAK', p)\n\
         \x20   except OSError as e:\n\
         \x20       print('hidden', p)\n\
         open(os.path.join({home:?}, 'x'), 'w').write('tmpfs')\n\
         print(os.path.exists('/root/.bashrc') or os.path.exists('/root/.cargo'))\n"
    );
    let out = f.run_ok(&f.spec(&script));
    assert_eq!(
        out,
        "True\n[]\nhidden .ssh/id_rsa\nhidden .aws/credentials\nhidden .netrc\nFalse\n"
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
    let Some(f) = fixture() else { return };
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
         print(tcp(), unix(), dns())\n"
    );
    let mut spec = f.spec(&script);
    assert_eq!(f.run_ok(&spec).trim(), "tcp refused abstract refused no dns");
    // The same script with the network on reaches both: the test can fail.
    spec.net = Net::On;
    assert_eq!(f.run_ok(&spec).trim(), "tcp connected abstract connected dns works");
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
fn publish_needs_net_and_warns_on_bwrap() {
    let Some(f) = fixture() else { return };
    let mut spec = f.spec("print('ok')\n");
    spec.publish.push(sandbox_core::Publish { port: 8080, host: None });
    let err = f.engine.check(&spec).expect_err("net off");
    assert!(err.to_string().contains("network off"));
    spec.net = Net::On;
    let (outcome, _) = f.run(&spec);
    assert!(outcome.warnings[0].contains("shares the host network"), "{:?}", outcome.warnings);
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
    };
    let outcome = sandbox_core::Engine::run(&f.engine, &spec, io).expect("run");
    assert_eq!(outcome.exit_code, 0);
    assert_eq!(captured.stdout_lossy(), "HELLO\n");
    let _ = std::io::stdout().flush();
}
