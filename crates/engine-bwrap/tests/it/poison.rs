//! One environment's prepare cannot poison every later one: a dependency whose build script
//! rewrites what it can reach of the shared uv cache and the managed Pythons, and plants a file
//! in each, leaves both exactly as they were (only uv itself writes the shared cache, and only
//! what it downloaded and checked; builds get a private cache). The same package host serves
//! the wheel of the bytecode test below.

use std::io::BufRead as _;
use std::process::{Child, Command, Stdio};

use crate::support::{cache_dir, fixture};

/// A static file server on another "host": a network namespace behind a veth pair, so the
/// sandbox reaches it through pasta like any outside address (the host's own address is the
/// sandbox's own under pasta, and host loopback is unreachable by design). Root only; removed
/// on drop.
struct PackageHost {
    ns: String,
    veth: String,
    server: Option<Child>,
}

impl PackageHost {
    fn start(dir: &std::path::Path) -> Result<(PackageHost, String), String> {
        // Tests of one process start hosts of their own in parallel: a count tells them apart.
        static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 2;
        let tag = std::process::id() % 1_000 * 10 + n;
        let host = PackageHost {
            ns: format!("psbx-pkg-{tag}"),
            veth: format!("psbxp{tag}"),
            server: None,
        };
        let peer = format!("psbxq{tag}");
        // 198.18.X.0/30 per process, so parallel runs do not collide: the benchmarking range,
        // neither private (net on refuses those) nor routed anywhere.
        let net = format!("198.18.{}", (std::process::id() % 125 * 2 + n) % 250);
        let ip = |args: &[&str]| -> Result<(), String> {
            let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr)))
            }
        };
        let ns = host.ns.clone();
        ip(&["netns", "add", &ns])?;
        ip(&["link", "add", &host.veth, "type", "veth", "peer", "name", &peer])?;
        ip(&["link", "set", &peer, "netns", &ns])?;
        ip(&["addr", "add", &format!("{net}.1/30"), "dev", &host.veth])?;
        ip(&["link", "set", &host.veth, "up"])?;
        ip(&["-n", &ns, "addr", "add", &format!("{net}.2/30"), "dev", &peer])?;
        ip(&["-n", &ns, "link", "set", &peer, "up"])?;
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        let mut host = host;
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns, "/usr/bin/python3.11", "-c"])
            .arg(
                "import functools, http.server, sys\n\
                 h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])\n\
                 s = http.server.ThreadingHTTPServer(('0.0.0.0', 8000), h)\n\
                 print('ready', flush=True)\n\
                 s.serve_forever()\n",
            )
            .arg(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("the package server: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        host.server = Some(child);
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line).map_err(|e| e.to_string())?;
        if line.trim() != "ready" {
            return Err("the package server did not start".to_owned());
        }
        Ok((host, format!("{net}.2:8000")))
    }
}

impl Drop for PackageHost {
    fn drop(&mut self) {
        if let Some(mut child) = self.server.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = Command::new("ip").args(["link", "del", &self.veth]).output();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
    }
}

#[test]
fn a_build_script_cannot_touch_the_shared_cache_or_the_managed_pythons() {
    let Some(f) = fixture() else { return };
    if !rustix::process::geteuid().is_root() {
        println!("SKIPPED: poison: the package host (a network namespace) needs root");
        return;
    }
    // Creates the cache directories.
    f.prepare(&f.spec(""));
    let bwrap = cache_dir().join("bwrap");
    let (shared, pythons) = (bwrap.join("store/uv"), bwrap.join("python"));
    let sentinel = shared.join("psbx-sentinel");
    std::fs::write(&sentinel, "original").expect("sentinel");
    for planted in [shared.join("psbx-planted"), pythons.join("psbx-planted")] {
        let _ = std::fs::remove_file(planted);
    }

    let served = tempfile::tempdir().expect("served dir");
    let src = tempfile::tempdir().expect("package source");
    let pkg = src.path().join("psbx_evil-1.0");
    std::fs::create_dir_all(&pkg).expect("mkdir");
    std::fs::write(pkg.join("evil_backend.py"), include_str!("data/evil_backend.py")).expect("w");
    std::fs::write(
        pkg.join("pyproject.toml"),
        "[project]\nname = \"psbx-evil\"\nversion = \"1.0\"\n\n[build-system]\nrequires = []\n\
         build-backend = \"evil_backend\"\nbackend-path = [\".\"]\n",
    )
    .expect("w");
    let targets = serde_json::json!([shared, pythons]).to_string();
    std::fs::write(pkg.join("ATTACK.json"), targets).expect("w");
    std::fs::write(pkg.join("PKG-INFO"), "Metadata-Version: 2.1\nName: psbx-evil\nVersion: 1.0\n")
        .expect("w");
    // A path of its own per run: the same URL would find the environment an earlier run of
    // this test built (the test cache outlives runs) and prove nothing.
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos()
        .to_string();
    std::fs::create_dir(served.path().join(&nonce)).expect("mkdir");
    let archive = served.path().join(&nonce).join("psbx_evil-1.0.tar.gz");
    let status = Command::new("/usr/bin/python3.11")
        .args(["-c", "import sys, tarfile\nwith tarfile.open(sys.argv[1], 'w:gz') as t: t.add(sys.argv[2], 'psbx_evil-1.0')"])
        .arg(&archive)
        .arg(&pkg)
        .status()
        .expect("tar");
    assert!(status.success());
    let (_host, address) = match PackageHost::start(served.path()) {
        Ok(started) => started,
        Err(e) => panic!("cannot start the package host: {e}"),
    };

    let mut spec = f.spec("import psbx_evil\nprint('package', psbx_evil.OK)\n");
    spec.dependencies = vec![format!("psbx-evil @ http://{address}/{nonce}/psbx_evil-1.0.tar.gz")];
    let out = f.run_ok(&spec);
    assert!(out.contains("package built"), "{out}");

    assert_eq!(std::fs::read_to_string(&sentinel).expect("sentinel"), "original");
    for planted in [shared.join("psbx-planted"), pythons.join("psbx-planted")] {
        assert!(!planted.exists(), "the build script planted {}", planted.display());
    }
}

/// The prepare compiles a package's modules to bytecode but not its test suite (`tests/`),
/// which scripts do not import and which is most of what compiling costs (numpy: 250 of 487
/// modules); an imported test module still works, compiled in memory.
#[test]
fn the_prepare_compiles_modules_but_not_test_suites() {
    let Some(f) = fixture() else { return };
    if !rustix::process::geteuid().is_root() {
        println!("SKIPPED: bytecode: the package host (a network namespace) needs root");
        return;
    }
    let served = tempfile::tempdir().expect("served dir");
    let wheel = served.path().join("psbx_bytecode-1.0-py3-none-any.whl");
    let status = Command::new("/usr/bin/python3.11")
        .args(["-c", include_str!("data/make_wheel.py")])
        .arg(&wheel)
        .status()
        .expect("python");
    assert!(status.success());
    let (_host, address) = match PackageHost::start(served.path()) {
        Ok(started) => started,
        Err(e) => panic!("cannot start the package host: {e}"),
    };
    let mut spec = f.spec(
        "import psbx_bytecode, psbx_bytecode.core, psbx_bytecode.tests.test_ok\n\
         print('imported', psbx_bytecode.OK + psbx_bytecode.core.X)\n",
    );
    spec.dependencies =
        vec![format!("psbx-bytecode @ http://{address}/psbx_bytecode-1.0-py3-none-any.whl")];
    let env = f.prepare(&spec);
    let site = std::fs::read_dir(env.dir.join("lib"))
        .expect("lib")
        .flatten()
        .map(|e| e.path().join("site-packages/psbx_bytecode"))
        .find(|p| p.is_dir())
        .expect("the package is installed");
    let compiled = |dir: &str| {
        std::fs::read_dir(site.join(dir).join("__pycache__"))
            .map(|d| {
                d.flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".pyc")).count()
            })
            .unwrap_or(0)
    };
    assert_eq!(
        (compiled(""), compiled("core")),
        (1, 1),
        "modules are compiled in {}",
        site.display()
    );
    assert_eq!(compiled("tests"), 0, "the test suite is not compiled");
    assert_eq!(f.run_ok(&spec), "imported 3\n");
}
