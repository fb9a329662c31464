//! The bwrap rung: a real namespace round-trip, and a pure classifier for its failures.

use std::ffi::OsStr;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::probe::{EngineName, Probe, ProbeState};
use crate::which::which;

/// `bwrap --version`, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BwrapVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl BwrapVersion {
    /// `--disable-userns` (no nested user namespaces) appeared in 0.8.0.
    pub const MINIMUM: BwrapVersion = BwrapVersion { major: 0, minor: 8, patch: 0 };
    /// 0.12.0 refuses mount destinations that are symlinks (GHSA-pxhw-h44j-8pfx).
    pub const SYMLINK_SAFE: BwrapVersion = BwrapVersion { major: 0, minor: 12, patch: 0 };

    /// Parses `bubblewrap 0.8.0` (or a bare `0.8.0`).
    pub fn parse(text: &str) -> Option<BwrapVersion> {
        let word = text.split_whitespace().find(|w| w.starts_with(|c: char| c.is_ascii_digit()))?;
        let mut nums = word.split('.').map(|n| n.parse::<u32>());
        let major = nums.next()?.ok()?;
        let minor = nums.next()?.ok()?;
        let patch = nums.next().and_then(Result::ok).unwrap_or(0);
        Some(BwrapVersion { major, minor, patch })
    }
}

impl std::fmt::Display for BwrapVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Runs `bwrap --version`.
pub fn bwrap_version(bwrap: &Path) -> Option<BwrapVersion> {
    let out = Command::new(bwrap)
        .arg("--version")
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    BwrapVersion::parse(&String::from_utf8_lossy(&out.stdout))
}

/// The smallest sandbox with every namespace the engine uses; `--ro-bind / /` keeps it
/// independent of the host's filesystem layout since only `true` runs in it.
const PROBE_ARGS: &[&str] = &[
    "--unshare-all",
    "--unshare-user",
    "--disable-userns",
    "--cap-drop",
    "ALL",
    "--die-with-parent",
    "--new-session",
    "--ro-bind",
    "/",
    "/",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--",
    "true",
];

/// Probes bwrap on `path`: version check, then a real user+mount+pid+net namespace round-trip.
pub fn probe_bwrap(path: Option<&OsStr>) -> Probe {
    let Some(bwrap) = which("bwrap", path) else {
        return Probe::new(
            EngineName::Bwrap,
            ProbeState::NotInstalled,
            "bwrap not found on PATH\nhint: install the `bubblewrap` package".to_owned(),
        );
    };
    with_network(probe_bwrap_binary(&bwrap), path)
}

/// bwrap sandboxes never share the host's network: "net on" (and every dependency install)
/// goes through pasta, or without it through the built-in relay (a tun device to open) or
/// HTTP(S) proxy, which a working probe then names (with passt as the fix).
fn with_network(mut probe: Probe, path: Option<&OsStr>) -> Probe {
    if probe.available
        && let Err(no) = crate::which::pasta(path)
    {
        let network =
            if crate::which::relay_possible() { no.relay_network() } else { no.network() };
        probe.reason = format!("{}\n{}", probe.reason, network);
    }
    probe
}

/// Probes one specific bwrap binary (the one an engine was configured with).
pub fn probe_bwrap_binary(bwrap: &Path) -> Probe {
    let Some(version) = bwrap_version(bwrap) else {
        return failed(format!("`{} --version` did not report a version", bwrap.display()));
    };
    if version < BwrapVersion::MINIMUM {
        return failed(format!(
            "bubblewrap {version} at {} is too old (need >= {} for --disable-userns)\n\
             hint: install a newer bubblewrap",
            bwrap.display(),
            BwrapVersion::MINIMUM
        ));
    }
    match run_with_timeout(bwrap, PROBE_ARGS, Duration::from_secs(5)) {
        Ok(()) => Probe::new(
            EngineName::Bwrap,
            ProbeState::Available { endpoint: None },
            format!(
                "bubblewrap {version} at {} can create user, pid, mount and network namespaces",
                bwrap.display()
            ),
        ),
        Err(stderr) => failed(classify_bwrap_failure(&stderr, apparmor_restricts_userns())),
    }
}

/// [`probe_bwrap`] with a memo of success in `memo_file`, so a warm `run` spawns nothing but
/// the sandbox. The memo is keyed by everything that decides the outcome: the bwrap binary's
/// identity, the boot, the caller's uid and the user-namespace sysctls. Failures are never
/// memoized; a stale success can only turn into a clear setup error later, never into an
/// unsandboxed run.
pub fn probe_bwrap_cached(path: Option<&OsStr>, memo_file: &Path) -> Probe {
    let Some(bwrap) = which("bwrap", path) else { return probe_bwrap(path) };
    let key = memo_key(&bwrap);
    if let Some(key) = &key
        && std::fs::read_to_string(memo_file).is_ok_and(|memo| memo == *key)
    {
        let probe = Probe::new(
            EngineName::Bwrap,
            ProbeState::Available { endpoint: None },
            format!("bubblewrap at {} worked earlier in this boot", bwrap.display()),
        );
        return with_network(probe, path);
    }
    let probe = probe_bwrap_binary(&bwrap);
    if let (true, Some(key)) = (probe.available, key) {
        // Replaced through a temporary file in a directory checked to be the caller's, so
        // concurrent probes never see a torn file and a planted link is never followed; losing
        // the race (or a refused directory) only costs one more probe next time.
        if let (Some(dir), Some(name)) =
            (memo_file.parent(), memo_file.file_name().and_then(|n| n.to_str()))
            && let Ok(dir) = reaper::PrivateDir::open(dir)
        {
            let _ = dir.replace(name, key.as_bytes());
        }
    }
    with_network(probe, path)
}

fn memo_key(bwrap: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(bwrap).ok()?;
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let sysctl =
        |p: &str| std::fs::read_to_string(p).map(|v| v.trim().to_owned()).unwrap_or_default();
    Some(format!(
        "v1 {} {} {} {} uid={} aa={} clone={} max={}",
        bwrap.display(),
        meta.len(),
        meta.mtime(),
        boot.trim(),
        rustix::process::getuid().as_raw(),
        sysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
        sysctl("/proc/sys/kernel/unprivileged_userns_clone"),
        sysctl("/proc/sys/user/max_user_namespaces"),
    ))
}

fn failed(reason: String) -> Probe {
    Probe::new(EngineName::Bwrap, ProbeState::Failed, reason)
}

fn apparmor_restricts_userns() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
        .is_ok_and(|v| v.trim() == "1")
}

fn run_with_timeout(bwrap: &Path, args: &[&str], timeout: Duration) -> Result<(), String> {
    let mut child = Command::new(bwrap)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start bwrap: {e}"))?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let mut stderr = String::new();
                if let Some(mut pipe) = child.stderr.take() {
                    let _ = pipe.read_to_string(&mut stderr);
                }
                return if status.success() { Ok(()) } else { Err(stderr) };
            }
            Ok(None) if started.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("timed out after {}s", timeout.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(format!("waiting for bwrap failed: {e}")),
        }
    }
}

/// Pure: turns bwrap's stderr into a reason with an actionable hint.
pub fn classify_bwrap_failure(stderr: &str, apparmor_restricted: bool) -> String {
    let message = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("no error output").trim();
    let message = message.strip_prefix("bwrap: ").unwrap_or(message);
    let userns_denied = [
        "setting up uid map",
        "Creating new namespace failed",
        "No permissions to creating new namespace",
        "Operation not permitted",
        "Failed RTM_NEWADDR",
        "Failed to make / slave",
    ]
    .iter()
    .any(|needle| message.contains(needle));
    let hint = if apparmor_restricted && userns_denied {
        "hint: AppArmor restricts unprivileged user namespaces \
         (kernel.apparmor_restrict_unprivileged_userns=1); allow bwrap with an AppArmor profile \
         (run `python-sandbox suggest`)"
    } else if userns_denied {
        "hint: this kernel or container does not allow unprivileged user namespaces; \
         run `python-sandbox suggest`"
    } else if message.contains("Unknown option") {
        "hint: this bubblewrap is too old; install >= 0.8"
    } else {
        "hint: run `python-sandbox suggest`"
    };
    format!("bwrap cannot create a sandbox here: {message}\n{hint}")
}
