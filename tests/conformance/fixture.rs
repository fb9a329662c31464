//! One case's world: a temp workspace, a fake `$HOME` full of marked secrets, marked env secrets,
//! listening host sockets the sandbox must not reach, and a snapshot of everything on the host the
//! run could touch, so that any write through a wall shows up as a diff.

use std::collections::BTreeMap;
use std::collections::hash_map::RandomState;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read};
use std::net::TcpListener;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tempfile::TempDir;

/// The fake secrets in `$HOME`: relative path, and a template whose `@MARKER@` is the marker.
const HOME_SECRETS: &[(&str, &str)] = &[
    (
        ".ssh/id_rsa",
        "-----BEGIN OPENSSH PRIVATE KEY-----\n@MARKER@\n-----END OPENSSH PRIVATE KEY-----\n",
    ),
    (
        ".aws/credentials",
        "[default]\naws_access_key_id = AKIAEXAMPLE\naws_secret_access_key = @MARKER@\n",
    ),
    (".netrc", "machine example.invalid login conformance password @MARKER@\n"),
    (
        ".kube/config",
        "apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n    token: @MARKER@\n",
    ),
    // Valid JSON with a key docker ignores, so a docker client reading it keeps working.
    (".docker/config.json", "{\"auths\": {}, \"pythonSandboxConformance\": \"@MARKER@\"}\n"),
];

/// Host sockets that exist on a typical developer machine; connecting to any must fail.
const SYSTEM_SOCKETS: &[&str] = &[
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/podman/podman.sock",
    "/run/containerd/containerd.sock",
    "/run/dbus/system_bus_socket",
];

/// Directories shared by every case: uv's cache and data, so each case doesn't reinstall.
pub(crate) struct Shared {
    pub(crate) tmp_base: PathBuf,
    pub(crate) cache: PathBuf,
    pub(crate) data: PathBuf,
    pub(crate) keep: bool,
}

/// A secret planted for this case, and where.
pub(crate) struct Secret {
    pub(crate) place: String,
    pub(crate) marker: String,
}

pub(crate) struct Fixture {
    pub(crate) engine: String,
    /// The case's name (set by the runner): data-driven cases find their parameter in it.
    pub(crate) case: &'static str,
    /// Unique per case run; in every path of this case and in the argv of spawned children, so a
    /// surviving process can be found on the host by it.
    pub(crate) tag: String,
    pub(crate) root: PathBuf,
    pub(crate) ws: PathBuf,
    pub(crate) home: PathBuf,
    pub(crate) mnt_ro: PathBuf,
    pub(crate) mnt_rw: PathBuf,
    pub(crate) host_tmp: PathBuf,
    pub(crate) outside_rw: PathBuf,
    pub(crate) conf_pass: String,
    pub(crate) secrets: Vec<Secret>,
    pub(crate) tcp: TcpListener,
    pub(crate) publish_port: u16,
    pub(crate) unix_listeners: Vec<(PathBuf, UnixListener)>,
    pub(crate) abstract_name: String,
    pub(crate) abstract_listener: UnixListener,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) env: Vec<(String, String)>,
    dirs: Vec<TempDir>,
}

/// Unique within the run and across runs: random hasher keys, the clock, the pid and a counter.
pub(crate) fn random_hex() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    format!("{:016x}", h.finish())
}

fn io_err(what: &str, path: &Path, e: io::Error) -> String {
    format!("{what} {}: {e}", path.display())
}

fn mkdir(path: &Path) -> Result<(), String> {
    fs::create_dir_all(path).map_err(|e| io_err("cannot create", path, e))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        mkdir(parent)?;
    }
    fs::write(path, text).map_err(|e| io_err("cannot write", path, e))
}

fn listen_unix(path: &Path) -> Result<UnixListener, String> {
    let l = UnixListener::bind(path).map_err(|e| io_err("cannot listen on", path, e))?;
    l.set_nonblocking(true).map_err(|e| io_err("cannot configure", path, e))?;
    Ok(l)
}

impl Fixture {
    pub(crate) fn new(engine: &str, shared: &Shared) -> Result<Fixture, String> {
        let tag = random_hex();
        let root_dir = tempfile::Builder::new()
            .prefix(&format!("case-{tag}-"))
            .tempdir_in(&shared.tmp_base)
            .map_err(|e| io_err("cannot create a temp dir in", &shared.tmp_base, e))?;
        // In the host's real /tmp, which a sandbox must replace with its own.
        let tmp_dir = tempfile::Builder::new()
            .prefix(&format!("python-sandbox-conformance-{tag}-"))
            .tempdir()
            .map_err(|e| format!("cannot create a temp dir in /tmp: {e}"))?;
        let root = root_dir.path().to_path_buf();
        let host_tmp = tmp_dir.path().to_path_buf();
        let (ws, home) = (root.join("ws"), root.join("home"));
        let (mnt_ro, mnt_rw) = (root.join("mnt").join("ro"), root.join("mnt").join("rw"));
        let outside_rw = host_tmp.join("outside");
        for d in [&ws, &home, &mnt_ro, &mnt_rw, &outside_rw] {
            mkdir(d)?;
        }
        write(&mnt_ro.join("data.txt"), "read-only data\n")?;

        let mut secrets = Vec::new();
        for (rel, template) in HOME_SECRETS {
            let marker = format!("confsecret{}", random_hex());
            write(&home.join(rel), &template.replace("@MARKER@", &marker))?;
            secrets.push(Secret { place: format!("~/{rel}"), marker });
        }
        let tmp_marker = format!("confsecret{}", random_hex());
        write(&host_tmp.join("secret.txt"), &format!("{tmp_marker}\n"))?;
        secrets.push(Secret { place: "host /tmp file".into(), marker: tmp_marker });

        let ssh_agent = host_tmp.join("agent.sock");
        // A daemon-like socket outside both: /tmp is replaced inside, so it must not be reachable.
        let fake_daemon = host_tmp.join("docker.sock");
        let unix_listeners = vec![
            (ssh_agent.clone(), listen_unix(&ssh_agent)?),
            (home.join(".ssh/agent.sock"), listen_unix(&home.join(".ssh/agent.sock"))?),
            (fake_daemon.clone(), listen_unix(&fake_daemon)?),
        ];
        let abstract_name = format!("python-sandbox-test-{tag}");
        let abstract_listener = SocketAddr::from_abstract_name(abstract_name.as_bytes())
            .and_then(|a| UnixListener::bind_addr(&a))
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| format!("cannot bind the abstract socket @{abstract_name}: {e}"))?;
        // On every address of the host: its loopback, and each of its own addresses, which a
        // net-on sandbox must not reach either (`host_addresses`).
        let tcp = TcpListener::bind("0.0.0.0:0")
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| format!("cannot listen on 0.0.0.0: {e}"))?;
        // A free port for --publish: bind, note, release; a race with other processes is unlikely.
        let publish_port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| format!("cannot pick a free port: {e}"))?;
        let meta = fs::metadata(&root).map_err(|e| io_err("cannot stat", &root, e))?;

        let mut env_secrets = Vec::new();
        for name in ["AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "OPENAI_API_KEY"] {
            let marker = format!("confsecret{}", random_hex());
            env_secrets.push((name.to_string(), marker.clone()));
            secrets.push(Secret { place: format!("${name}"), marker });
        }
        let mut env = base_env(shared, &home);
        env.extend(env_secrets);
        env.push(("SSH_AUTH_SOCK".into(), ssh_agent.display().to_string()));
        env.push(("KUBECONFIG".into(), home.join(".kube/config").display().to_string()));
        if engine == "k8s" {
            cluster_access(&home, &mut env)?;
        }
        if engine == "bwrap" {
            // Only where it cannot redirect the engine itself.
            env.push(("DOCKER_HOST".into(), "unix:///var/run/docker.sock".into()));
        }
        let conf_pass = format!("passed-through-{tag}");
        env.push(("CONF_PASS".into(), conf_pass.clone()));

        let dirs = vec![root_dir, tmp_dir];
        let fx = Fixture {
            engine: engine.to_string(),
            case: "",
            tag,
            root,
            ws,
            home,
            mnt_ro,
            mnt_rw,
            host_tmp,
            outside_rw,
            conf_pass,
            secrets,
            tcp,
            publish_port,
            unix_listeners,
            abstract_name,
            abstract_listener,
            uid: meta.uid(),
            gid: meta.gid(),
            env,
            dirs,
        };
        fx.write_context(shared)?;
        Ok(fx)
    }

    /// Everything a case script needs to know, as `.conformance.json` in the workspace. Paths only:
    /// no secret marker ever goes into the sandbox on purpose.
    fn write_context(&self, shared: &Shared) -> Result<(), String> {
        let sockets: Vec<String> = self
            .unix_listeners
            .iter()
            .map(|(p, _)| p.display().to_string())
            .chain(SYSTEM_SOCKETS.iter().map(|s| s.to_string()))
            .collect();
        let runner = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default();
        let ctx = serde_json::json!({
            "tag": self.tag,
            "engine": self.engine,
            "case_root": self.root,
            "workspace": self.ws,
            "fake_home": self.home,
            "home_files": HOME_SECRETS.iter().map(|(rel, _)| *rel).collect::<Vec<_>>(),
            "host_tmp": self.host_tmp,
            "host_tmp_secret": self.host_tmp.join("secret.txt"),
            "sockets": sockets,
            "tcp_port": self.tcp.local_addr().map(|a| a.port()).unwrap_or(0),
            // A pod is not on this host (a cluster's nodes are its own business).
            "host_addresses": if self.engine == "k8s" { Vec::new() } else { host_addresses() },
            "abstract_name": self.abstract_name,
            "publish_port": self.publish_port,
            "mnt_ro": self.mnt_ro,
            "mnt_rw": self.mnt_rw,
            "outside_rw": self.outside_rw,
            "cache_dir": shared.cache,
            "data_dir": shared.data,
            "conf_pass": self.conf_pass,
            // Reversed so that the script's own argv/cmdline never contains it.
            "runner_exe_reversed": runner.chars().rev().collect::<String>(),
            "child_marker": format!("python-sandbox-conformance-child-{}", self.tag),
        });
        write(&self.ws.join(".conformance.json"), &ctx.to_string())
    }

    pub(crate) fn tcp_port(&self) -> u16 {
        self.tcp.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    /// The host side of "nothing connected": a pending connection sits in the accept queue even
    /// after the client closed it.
    pub(crate) fn tcp_connected(&self) -> bool {
        self.tcp.accept().is_ok()
    }

    pub(crate) fn unix_connections(&self) -> Vec<String> {
        let mut hits: Vec<String> = self
            .unix_listeners
            .iter()
            .filter(|(_, l)| l.accept().is_ok())
            .map(|(p, _)| p.display().to_string())
            .collect();
        if self.abstract_listener.accept().is_ok() {
            hits.push(format!("@{}", self.abstract_name));
        }
        hits
    }

    /// Keeps the temp dirs for a post-mortem (CONFORMANCE_KEEP=1).
    pub(crate) fn keep(mut self) -> Vec<PathBuf> {
        self.dirs.drain(..).map(TempDir::keep).collect()
    }
}

/// The host's own IPv4 addresses but its loopback, from the kernel's local table
/// (`/proc/net/fib_trie`: an address followed by `/32 host LOCAL`), each once.
pub(crate) fn host_addresses() -> Vec<String> {
    local_addresses(&fs::read_to_string("/proc/net/fib_trie").unwrap_or_default())
}

/// Pure: [`host_addresses`] of a `fib_trie` listing.
pub(crate) fn local_addresses(fib_trie: &str) -> Vec<String> {
    let lines: Vec<&str> = fib_trie.lines().map(str::trim).collect();
    let mut out: Vec<String> = Vec::new();
    for pair in lines.windows(2) {
        let addr = pair[0].trim_start_matches("|-- ");
        let local = pair[1].contains("/32 host LOCAL");
        if local && !addr.starts_with("127.") && !out.iter().any(|a| a == addr) {
            out.push(addr.to_owned());
        }
    }
    out
}

/// The k8s engine is reached through the caller's kube config and `[engine.k8s]` settings,
/// which the fake home lacks: `KUBECONFIG` names the caller's (not the planted fake, whose
/// marker must still never show), and the caller's user config file is copied into the fake
/// home. The pod sees neither; the CLI needs both to find the cluster `detect` found.
fn cluster_access(home: &Path, env: &mut Vec<(String, String)>) -> Result<(), String> {
    let real_home = std::env::var_os("HOME").map(PathBuf::from);
    let kubeconfig = std::env::var("KUBECONFIG").ok().filter(|k| !k.is_empty()).or_else(|| {
        let default = real_home.as_ref()?.join(".kube/config");
        default.exists().then(|| default.display().to_string())
    });
    if let Some(kubeconfig) = kubeconfig {
        env.retain(|(k, _)| k != "KUBECONFIG");
        env.push(("KUBECONFIG".into(), kubeconfig));
    }
    let config_home = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| real_home.map(|h| h.join(".config")));
    if let Some(user) = config_home.map(|c| c.join("python-sandbox/config.toml"))
        && user.exists()
    {
        let into = home.join(".config/python-sandbox");
        fs::create_dir_all(&into)
            .and_then(|()| fs::copy(&user, into.join("config.toml")))
            .map_err(|e| format!("cannot copy {} into the fake home: {e}", user.display()))?;
    }
    Ok(())
}

/// The CLI's environment: the caller's (PATH, proxy and CA settings matter), minus its real home and
/// XDG dirs, with shared caches so each case doesn't reinstall.
fn base_env(shared: &Shared, home: &Path) -> Vec<(String, String)> {
    const DROP: &[&str] = &[
        "HOME",
        "XDG_CACHE_HOME",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
        "SSH_AUTH_SOCK",
        "DOCKER_HOST",
        "KUBECONFIG",
        "PYTHON_SANDBOX_BIN",
        "CONFORMANCE_ENGINES",
    ];
    let mut env: Vec<(String, String)> =
        std::env::vars().filter(|(k, _)| !DROP.contains(&k.as_str())).collect();
    env.push(("HOME".into(), home.display().to_string()));
    env.push(("XDG_CACHE_HOME".into(), shared.cache.display().to_string()));
    env.push(("XDG_DATA_HOME".into(), shared.data.display().to_string()));
    env.push(("NO_COLOR".into(), "1".into()));
    env
}

/// Kind and content digest of every path under the case root and the host temp dir.
pub(crate) type Snapshot = BTreeMap<String, (char, u64)>;

pub(crate) fn snapshot(fx: &Fixture) -> Snapshot {
    let mut snap = Snapshot::new();
    walk(&fx.root, "", &mut snap);
    walk(&fx.host_tmp, "tmp/", &mut snap);
    snap
}

fn walk(dir: &Path, prefix: &str, snap: &mut Snapshot) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
        let Ok(meta) = fs::symlink_metadata(&path) else { continue };
        let ft = meta.file_type();
        let mut h = std::hash::DefaultHasher::new();
        let kind = if ft.is_symlink() {
            h.write(fs::read_link(&path).unwrap_or_default().as_os_str().as_encoded_bytes());
            'l'
        } else if ft.is_dir() {
            walk(&path, &format!("{name}/"), snap);
            'd'
        } else if ft.is_file() {
            let mut buf = Vec::new();
            let read = fs::File::open(&path).and_then(|f| f.take(1 << 20).read_to_end(&mut buf));
            h.write(&buf);
            h.write_u64(meta.len());
            if read.is_err() {
                h.write_u8(0xff);
            }
            'f'
        } else if ft.is_fifo() {
            'p'
        } else if ft.is_socket() {
            's'
        } else {
            'o'
        };
        // Directory modes are left out: engine-oci documents adding a `user:65534:rwx` ACL to a
        // root caller's workspace and rw mounts (its mask shows as group bits); what a sandbox
        // does inside a directory shows up in its entries.
        if kind != 'd' {
            h.write_u32(meta.mode());
        }
        snap.insert(name, (kind, h.finish()));
    }
}

/// `+path` added, `-path` removed, `~path` changed.
pub(crate) fn diff(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for (path, v) in after {
        match before.get(path) {
            None => out.push(format!("+{path}")),
            Some(old) if old != v => out.push(format!("~{path}")),
            Some(_) => {}
        }
    }
    out.extend(before.keys().filter(|p| !after.contains_key(*p)).map(|p| format!("-{p}")));
    out.sort();
    out
}

/// Host processes whose command line mentions `needle`, waiting up to `grace` for them to go: a
/// killed tree is reaped asynchronously.
pub(crate) fn survivors(needle: &str, grace: Duration) -> Vec<(String, String)> {
    let start = Instant::now();
    loop {
        let found = scan_processes(needle);
        if found.is_empty() || start.elapsed() >= grace {
            return found;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kills reported survivors one by one, by pid: they carry this case's unique tag, so they are
/// descendants of the run this runner started, and must not linger into the next cases.
pub(crate) fn kill(pids: &[(String, String)]) {
    for (pid, _) in pids {
        let _ = std::process::Command::new("kill").args(["-KILL", pid]).status();
    }
}

fn scan_processes(needle: &str) -> Vec<(String, String)> {
    let me = std::process::id().to_string();
    let Ok(entries) = fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_string_lossy().into_owned();
            if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == me {
                return None;
            }
            let raw = fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
            cmd.contains(needle).then(|| (pid, cmd.trim_end().to_string()))
        })
        .collect()
}
