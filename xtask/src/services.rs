//! Container engines for the OCI tiers: Docker and Podman installed, configured for the kind of VM CI
//! runs on, and serving their API. Both `ensure_*` functions are idempotent and return in well under a
//! second when the engine is already up, because CI calls them on every run. They return
//! `Ok(Some(reason))` when the engine truly cannot run here, so the caller prints `SKIPPED: …` instead
//! of failing; they return `Err` only for faults worth a red build (a broken install, an unwritable
//! config).
//!
//! Quirks of this VM that shape the code (root without `CAP_SYS_RESOURCE`, cgroup v1, no systemd, no
//! journald) are noted where they matter.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use xshell::{Shell, cmd};

/// Where `podman system service` listens; also the rootful default of bollard's
/// `connect_with_podman_defaults` and of `podman --remote`.
pub(crate) const PODMAN_SOCKET: &str = "/run/podman/podman.sock";
/// The drop-in `ensure_podman` owns. A drop-in rather than an edit of containers.conf, so package
/// upgrades never conflict with it and removing it restores the distribution defaults.
pub(crate) const PODMAN_CONF: &str = "/etc/containers/containers.conf.d/50-python-sandbox.conf";

const DOCKER_START_TIMEOUT: Duration = Duration::from_secs(60);
const PODMAN_START_TIMEOUT: Duration = Duration::from_secs(30);
/// Podman 4.3 lowers its own hard RLIMIT_NPROC to this before starting conmon (seen here: a shell with
/// 96364 starts a `podman` process with 32768), and runc cannot raise a limit above its parent's.
const PODMAN_NPROC_CEILING: u64 = 32_768;
/// The kernel's default `fs.nr_open`: no process gets more open files than this anyway.
const NOFILE_CEILING: u64 = 1_048_576;

/// Makes the Docker daemon answer: `docker version` talks to a server, else install `docker.io` when
/// `dockerd` is missing, start `dockerd` in the background (log `target/dockerd.log`, pidfile
/// `target/dockerd.pid`) and wait up to 60 s for its API.
pub(crate) fn ensure_docker(sh: &Shell) -> Result<Option<String>> {
    if docker_answers(sh) {
        return Ok(None);
    }
    if let Some(host) = sh.var_os("DOCKER_HOST").filter(|h| !h.is_empty()) {
        // Someone chose a daemon for us; starting a local one would silently test another engine.
        return Ok(Some(format!("DOCKER_HOST={} does not answer", host.to_string_lossy())));
    }
    if !on_path(sh, "dockerd")
        && let Some(reason) = apt_install(sh, &["docker.io"])?
    {
        return Ok(Some(reason));
    }
    if !on_path(sh, "docker") {
        return Ok(Some("dockerd is installed but there is no `docker` client on PATH".into()));
    }
    let target = target_dir(sh);
    let pidfile = target.join("dockerd.pid");
    // Still booting, ours or a system one: wait for it instead of starting a second daemon.
    if let Some(pid) = live_pid(&pidfile).or_else(|| live_pid(Path::new("/var/run/docker.pid")))
        && wait_until(DOCKER_START_TIMEOUT, || docker_answers(sh), || pid_alive(pid))
    {
        return Ok(None);
    }
    let log = target.join("dockerd.log");
    let mut last_log = String::new();
    for extra in [Vec::new(), vec!["--storage-driver=vfs"]] {
        if !extra.is_empty() && !dockerd_needs_vfs(&last_log) {
            break;
        }
        let mut args = vec!["--pidfile".to_owned(), pidfile.display().to_string()];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let pid = spawn_daemon("dockerd", &args, &log)?;
        if wait_until(DOCKER_START_TIMEOUT, || docker_answers(sh), || pid_alive(pid)) {
            return Ok(None);
        }
        stop(pid);
        last_log = fs::read_to_string(&log).unwrap_or_default();
    }
    Ok(Some(format!("dockerd did not start: {}", log_tail(&last_log, &log))))
}

/// Makes the Podman API answer `/_ping` on [`PODMAN_SOCKET`]: install `podman` when missing, write
/// [`PODMAN_CONF`] (runc, cgroupfs, file events, ulimits within this process's hard limits), and start
/// `podman system service --time=0` in the background (log `target/podman-service.log`, pidfile
/// `target/podman-service.pid`), restarting the one we started when the config changed.
pub(crate) fn ensure_podman(sh: &Shell) -> Result<Option<String>> {
    // catatonit is podman's init process (`--init`); without it every sandboxed run fails.
    let missing: Vec<&str> = [("podman", "podman"), ("catatonit", "catatonit")]
        .into_iter()
        .filter(|(program, _)| !on_path(sh, program))
        .map(|(_, package)| package)
        .collect();
    if !missing.is_empty()
        && let Some(reason) = apt_install(sh, &missing)?
    {
        return Ok(Some(reason));
    }
    let limits = fs::read_to_string("/proc/self/limits").context("reading /proc/self/limits")?;
    let wanted = podman_conf(&HardLimits::parse(&limits));
    let changed = fs::read_to_string(PODMAN_CONF).ok().as_deref() != Some(wanted.as_str());
    if changed {
        if !is_root(sh) {
            return Ok(Some(format!("{PODMAN_CONF} needs updating and that needs root")));
        }
        write_file(Path::new(PODMAN_CONF), &wanted)?;
    }
    let target = target_dir(sh);
    let pidfile = target.join("podman-service.pid");
    if ping(Path::new(PODMAN_SOCKET)) {
        match live_pid(&pidfile) {
            Some(pid) if changed => stop(pid),
            // Not ours, or nothing changed: a service started elsewhere is left alone.
            _ => return Ok(None),
        }
    }
    if !is_root(sh) {
        return Ok(Some(format!(
            "nothing answers on {PODMAN_SOCKET} and starting the service needs root"
        )));
    }
    fs::create_dir_all("/run/podman").context("creating /run/podman")?;
    let log = target.join("podman-service.log");
    let args =
        ["system", "service", "--time=0", &format!("unix://{PODMAN_SOCKET}")].map(String::from);
    let pid = spawn_daemon("podman", &args, &log)?;
    write_file(&pidfile, &format!("{pid}\n"))?;
    if wait_until(PODMAN_START_TIMEOUT, || ping(Path::new(PODMAN_SOCKET)), || pid_alive(pid)) {
        return Ok(None);
    }
    stop(pid);
    let text = fs::read_to_string(&log).unwrap_or_default();
    Ok(Some(format!("podman system service did not answer /_ping: {}", log_tail(&text, &log))))
}

/// Installs Debian packages non-interactively, waiting for another apt run to release its lock.
/// `Ok(Some(reason))` when this machine cannot install packages at all.
pub(crate) fn apt_install(sh: &Shell, packages: &[&str]) -> Result<Option<String>> {
    let list = packages.join(" ");
    if !is_root(sh) {
        return Ok(Some(format!("`{list}` is not installed and installing it needs root")));
    }
    if !on_path(sh, "apt-get") {
        return Ok(Some(format!("`{list}` is not installed and there is no apt-get")));
    }
    crate::section(&format!("installing {list}"));
    let lock = "DPkg::Lock::Timeout=300";
    let _env = sh.push_env("DEBIAN_FRONTEND", "noninteractive");
    cmd!(sh, "apt-get -o {lock} update -qq").run()?;
    // Recommends would bring needrestart, apparmor and git along: none of them helps a CI daemon.
    cmd!(sh, "apt-get -o {lock} install -y -qq --no-install-recommends {packages...}")
        .run()
        .with_context(|| format!("installing `{list}`"))?;
    Ok(None)
}

/// The hard limits of this process that bound what a container may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HardLimits {
    pub(crate) nofile: Option<u64>,
    pub(crate) nproc: Option<u64>,
}

impl HardLimits {
    /// Reads the "Hard Limit" column of `/proc/<pid>/limits`; `None` for unlimited or unreadable.
    pub(crate) fn parse(proc_limits: &str) -> HardLimits {
        let hard = |name: &str| {
            let line = proc_limits.lines().find(|l| l.starts_with(name))?;
            let mut cols = line[name.len()..].split_whitespace();
            let _soft = cols.next()?;
            cols.next()?.parse::<u64>().ok()
        };
        HardLimits { nofile: hard("Max open files"), nproc: hard("Max processes") }
    }
}

/// The drop-in for containers.conf. Podman's defaults fail here: it asks for nofile 1048576 and an
/// nproc above its own, and without `CAP_SYS_RESOURCE` (this VM's root lacks it) runc gets EPERM.
/// crun is absent on Debian by default, and neither systemd nor journald runs in the VM.
pub(crate) fn podman_conf(limits: &HardLimits) -> String {
    let nofile = limits.nofile.unwrap_or(NOFILE_CEILING).min(NOFILE_CEILING);
    let nproc = limits.nproc.unwrap_or(PODMAN_NPROC_CEILING).min(PODMAN_NPROC_CEILING);
    format!(
        "# Written by `cargo xtask` (xtask/src/services.rs); rewritten when it differs.\n\
         # Container ulimits may not exceed the hard limits podman runs with (no CAP_SYS_RESOURCE).\n\
         [containers]\n\
         default_ulimits = [\"nofile={nofile}:{nofile}\", \"nproc={nproc}:{nproc}\"]\n\
         \n\
         [engine]\n\
         runtime = \"runc\"\n\
         cgroup_manager = \"cgroupfs\"\n\
         events_logger = \"file\"\n"
    )
}

/// Whether a failed dockerd should be retried with the vfs storage driver: overlay2 needs an overlay-capable
/// backing filesystem, which a VM whose root is itself overlayfs (or fuse) does not offer.
pub(crate) fn dockerd_needs_vfs(log: &str) -> bool {
    log.lines().rev().take(40).any(|l| {
        let l = l.to_ascii_lowercase();
        (l.contains("overlay") || l.contains("graphdriver") || l.contains("storage-driver"))
            && (l.contains("error") || l.contains("fatal") || l.contains("not supported"))
    })
}

/// The HTTP `GET /_ping` both engines serve, over a unix socket, with no client dependency.
pub(crate) fn ping(socket: &Path) -> bool {
    let attempt = || -> std::io::Result<bool> {
        let mut stream = UnixStream::connect(socket)?;
        stream.set_read_timeout(Some(Duration::from_secs(2)))?;
        stream.set_write_timeout(Some(Duration::from_secs(2)))?;
        stream.write_all(b"GET /_ping HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply)?;
        Ok(reply.starts_with("HTTP/1.") && reply.split_whitespace().nth(1) == Some("200"))
    };
    attempt().unwrap_or(false)
}

fn docker_answers(sh: &Shell) -> bool {
    let server = "{{.Server.Version}}";
    on_path(sh, "docker")
        && cmd!(sh, "docker version --format {server}")
            .quiet()
            .ignore_stdout()
            .ignore_stderr()
            .run()
            .is_ok()
}

/// Starts a daemon that outlives the xtask: own process group (a Ctrl-C to CI does not reach it), no
/// stdin, and output to a log file so it holds no pipe of the caller open (a CI runner waiting for EOF
/// would hang). xshell cannot spawn in the background, hence `std::process`.
pub(crate) fn spawn_daemon(program: &str, args: &[String], log: &Path) -> Result<u32> {
    if let Some(dir) = log.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let err = out.try_clone()?;
    // `/`: the daemon outlives this checkout (a CI clone may be deleted while it runs), and
    // the runtimes it starts inherit its working directory; a deleted one breaks them.
    let child = Command::new(program)
        .args(args)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    println!("started {program} (pid {}), log {}", child.id(), log.display());
    Ok(child.id())
}

/// Polls `ready` every 250 ms until it holds, the deadline passes, or the process it waits for dies.
pub(crate) fn wait_until(
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
    mut alive: impl FnMut() -> bool,
) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if ready() {
            return true;
        }
        if !alive() {
            return ready();
        }
        sleep(Duration::from_millis(250));
    }
    false
}

pub(crate) fn live_pid(pidfile: &Path) -> Option<u32> {
    let pid = fs::read_to_string(pidfile).ok()?.trim().parse().ok()?;
    pid_alive(pid).then_some(pid)
}

/// A zombie counts as dead: our own spawned daemons stay zombies until the xtask exits.
pub(crate) fn pid_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()) != Some("Z")
        }
        Err(_) => false,
    }
}

/// Ends a daemon we started, by its pid only: SIGTERM, then SIGKILL after 10 s.
pub(crate) fn stop(pid: u32) {
    let pid_s = pid.to_string();
    let _ = Command::new("kill").args(["-TERM", &pid_s]).status();
    if !wait_until(Duration::from_secs(10), || !pid_alive(pid), || true) {
        let _ = Command::new("kill").args(["-KILL", &pid_s]).status();
    }
}

pub(crate) fn log_tail(text: &str, log: &Path) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(3)..].join(" | ");
    format!("{tail} (full log: {})", log.display())
}

pub(crate) fn write_file(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Gives `/dev/net/tun` udev's default mode (0666) when it lacks it, as a VM or container
/// without udev leaves it (root's only): pasta runs as nobody for a root caller and
/// slirp4netns as the rootless user, and both open it. `Ok(Some(reason))` when there is no
/// device at all (no TUN in this kernel); unchanged, and `Ok(None)`, when not root.
pub(crate) fn tun_for_all(sh: &Shell) -> Result<Option<String>> {
    let tun = Path::new("/dev/net/tun");
    match fs::metadata(tun) {
        Ok(meta) if meta.permissions().mode() & 0o666 != 0o666 && is_root(sh) => {
            fs::set_permissions(tun, fs::Permissions::from_mode(0o666))
                .context("making /dev/net/tun read-write for all (mode 0666, udev's default)")?;
            println!(
                "/dev/net/tun was mode {:o} (no udev here): made 0666, udev's default",
                meta.permissions().mode() & 0o777
            );
            Ok(None)
        }
        Ok(_) => Ok(None),
        Err(_) => Ok(Some("no /dev/net/tun: no TUN device in this kernel".into())),
    }
}

pub(crate) fn on_path(sh: &Shell, program: &str) -> bool {
    let path = sh.var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|dir| {
        fs::metadata(dir.join(program))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

pub(crate) fn is_root(sh: &Shell) -> bool {
    cmd!(sh, "id -u").quiet().read().is_ok_and(|uid| uid.trim() == "0")
}

/// `target/` of this checkout (or `CARGO_TARGET_DIR`), where daemon logs and pidfiles go.
pub(crate) fn target_dir(sh: &Shell) -> PathBuf {
    match sh.var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => sh.current_dir().join(dir),
        None => sh.current_dir().join("target"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: &str = "\
Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max processes             96364                96364                processes 
Max open files            20000                20000                files     
Max locked memory         8388608              8388608              bytes     
";

    #[test]
    fn hard_limits_are_read_from_proc() {
        assert_eq!(
            HardLimits::parse(LIMITS),
            HardLimits { nofile: Some(20000), nproc: Some(96364) }
        );
        let unlimited =
            LIMITS.replace("96364                96364", "unlimited            unlimited");
        assert_eq!(HardLimits::parse(&unlimited).nproc, None);
        assert_eq!(HardLimits::parse(""), HardLimits { nofile: None, nproc: None });
    }

    #[test]
    fn podman_conf_stays_within_hard_limits() {
        let conf = podman_conf(&HardLimits::parse(LIMITS));
        assert_eq!(
            conf,
            "# Written by `cargo xtask` (xtask/src/services.rs); rewritten when it differs.\n\
             # Container ulimits may not exceed the hard limits podman runs with (no CAP_SYS_RESOURCE).\n\
             [containers]\n\
             default_ulimits = [\"nofile=20000:20000\", \"nproc=32768:32768\"]\n\
             \n\
             [engine]\n\
             runtime = \"runc\"\n\
             cgroup_manager = \"cgroupfs\"\n\
             events_logger = \"file\"\n"
        );
        let low = podman_conf(&HardLimits { nofile: Some(1024), nproc: Some(512) });
        assert!(low.contains("\"nofile=1024:1024\", \"nproc=512:512\""), "{low}");
        let unlimited = podman_conf(&HardLimits { nofile: None, nproc: None });
        assert!(
            unlimited.contains("\"nofile=1048576:1048576\", \"nproc=32768:32768\""),
            "{unlimited}"
        );
    }

    #[test]
    fn vfs_fallback_only_for_storage_errors() {
        let overlay = "level=error msg=\"failed to mount overlay: invalid argument\" storage-driver=overlay2\n\
                       failed to start daemon: error initializing graphdriver: driver not supported";
        assert!(dockerd_needs_vfs(overlay));
        let iptables =
            "failed to start daemon: Error initializing network controller: iptables failed";
        assert!(!dockerd_needs_vfs(iptables));
        assert!(!dockerd_needs_vfs(""));
    }

    #[test]
    fn ping_fails_cleanly_without_a_socket() {
        assert!(!ping(Path::new("/nonexistent/python-sandbox.sock")));
    }
}
