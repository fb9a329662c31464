//! `detect`'s check of the native engine, found by trying: a forked child unshares a user and
//! a mount namespace, writes its map and mounts a tmpfs ([`crate::userns_probe`], which names
//! the host setting that blocks it); the kernel is asked whether it takes seccomp filters and
//! which Landlock ABI it has. [`verdict`] turns the answers into the probe (pure).
//!
//! **A round trip that worked is remembered** (the fork and the namespaces were about a
//! millisecond of every warm run): under a key naming everything that decides the answer, the
//! boot, the caller's ids, capabilities, namespaces, seccomp state and LSM label, and the
//! sysctls that restrict user namespaces (`context_key`). A run in the same context reads
//! the key instead of forking; any change (a sysctl set, another container, the next boot)
//! is a different key, so the probe runs again. A failure is never remembered, so a fixed
//! host is seen at once. Trusting a stale success could only make a run fail at its setup
//! (which then names the reason, `NativeLauncher::setup_failure`), never weaken the wall.

use std::path::{Path, PathBuf};

use engine_detect::{EngineName, Probe, ProbeState};

/// What the kernel answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answers {
    /// The user-namespace round trip, or why it failed.
    pub userns: Result<(), String>,
    /// Whether seccomp filters can be installed.
    pub seccomp: bool,
    /// The Landlock ABI a sandbox gets ([`crate::landlock_applied`]).
    pub landlock: Option<u32>,
    /// pasta on `PATH` and able to open `/dev/net/tun` (`engine_detect::pasta`): the full
    /// network of `net = "on"` runs and dependency installs, or why not. Without it they get
    /// the built-in HTTP(S) proxy, so it is said, not failed.
    pub pasta: Result<(), engine_detect::NoPasta>,
    /// Without pasta: whether sandboxes get the built-in relay (a tun device this caller may
    /// open), full TCP/UDP, rather than the proxy.
    pub relay: bool,
}

/// Pure: the probe for these answers. Landlock is best effort (the other walls hold without
/// it), so its absence is said but does not make the engine unavailable; seccomp is not.
pub fn verdict(answers: &Answers) -> Probe {
    let landlock = match answers.landlock {
        Some(abi) if abi >= crate::LANDLOCK_ABI => format!("landlock ABI {abi}"),
        Some(abi) => format!(
            "landlock ABI {abi} of {} (abstract sockets and signals unscoped below 6)",
            crate::LANDLOCK_ABI
        ),
        None => "no landlock in this kernel (best effort: the other walls hold)".to_owned(),
    };
    let (state, reason) = match (&answers.userns, answers.seccomp) {
        (Err(reason), _) => (
            ProbeState::Failed,
            format!(
                "{}{reason}\nhint: run `python-sandbox suggest`",
                engine_detect::NATIVE_USERNS_PREFIX
            ),
        ),
        (Ok(()), false) => (
            ProbeState::Failed,
            format!(
                "{} (CONFIG_SECCOMP_FILTER), and the native sandbox never runs without its \
                 seccomp wall\nhint: run `python-sandbox suggest`",
                engine_detect::NO_SECCOMP_FILTERS
            ),
        ),
        (Ok(()), true) => {
            let net = match &answers.pasta {
                Ok(()) => "\nnetwork: pasta (full TCP/UDP for net on)".to_owned(),
                Err(no) if answers.relay => format!("\n{}", no.relay_network()),
                Err(no) => format!("\n{}", no.network()),
            };
            (
                ProbeState::Available { endpoint: None },
                format!("built in: user namespaces work, seccomp wall, {landlock}{net}"),
            )
        }
    };
    let mut probe = Probe::new(EngineName::Native, state, reason);
    if probe.available {
        probe.limits = engine_detect::bwrap_limits().support;
    }
    probe
}

/// Whether this kernel takes seccomp filters: installing a null program fails with `EFAULT`
/// where filters exist (the pointer is read first) and `EINVAL` where they do not; nothing is
/// installed either way.
fn seccomp_filters() -> bool {
    #[allow(unsafe_code)]
    // SAFETY: prctl with a null program pointer, which the kernel rejects before using it.
    let rc = unsafe {
        libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, std::ptr::null::<u8>())
    };
    rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EFAULT)
}

/// The kernel's answers, by trying (the user-namespace round trip remembered, see the module
/// docs).
pub fn answers() -> Answers {
    Answers {
        userns: remembered(memo_path().as_deref(), context_key().as_deref(), crate::userns_probe),
        seccomp: seccomp_filters(),
        landlock: crate::landlock_applied(),
        pasta: engine_detect::pasta(std::env::var_os("PATH").as_deref()).map(|_| ()),
        relay: sandbox_net::relay_available(),
    }
}

/// [`verdict`] of [`answers`]: what `detect` prints for native. Asked once per process: the
/// CLI's engine choice and [`crate::NativeEngine::new`] both need it, and the kernel's
/// settings do not change under a run (a memo read, or a fork and an unshare, each time
/// they did).
pub fn probe() -> Probe {
    static ANSWERS: std::sync::OnceLock<Answers> = std::sync::OnceLock::new();
    verdict(ANSWERS.get_or_init(answers))
}

/// Bumped whenever [`crate::userns_probe`] starts checking something else: an older
/// success then no longer counts.
const PROBE_VERSION: &str = "1";

/// `probe`'s answer, or the remembered success for `key` at `memo` (see the module docs):
/// without a key or a place for the memo, the probe runs every time. The memo is read and
/// replaced only inside a directory checked to be the caller's ([`reaper::PrivateDir`]), so a
/// planted file or link is never trusted.
pub(crate) fn remembered(
    memo: Option<&Path>,
    key: Option<&str>,
    probe: impl FnOnce() -> Result<(), String>,
) -> Result<(), String> {
    let place = memo.and_then(|m| Some((m.parent()?, m.file_name()?.to_str()?)));
    let (Some((dir, name)), Some(key)) = (place, key) else { return probe() };
    let dir = reaper::PrivateDir::open(dir).ok();
    if let Some(dir) = &dir
        && dir.read(name).ok().flatten().is_some_and(|memo| memo == key.as_bytes())
    {
        return Ok(());
    }
    let answer = probe();
    if let (Ok(()), Some(dir)) = (&answer, &dir) {
        // Best effort: without the memo the next run just probes again.
        let _ = dir.replace(name, key.as_bytes());
    }
    answer
}

/// Where the memo lives: the user's runtime directory (gone at reboot), else the user's cache
/// (the key names the boot anyway), next to the engines' own files.
fn memo_path() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    let base = var("XDG_RUNTIME_DIR")
        .filter(|d| d.is_dir())
        .or_else(|| var("XDG_CACHE_HOME"))
        .or_else(|| var("HOME").map(|h| h.join(".cache")))
        .filter(|d| d.is_absolute())?;
    Some(base.join("python-sandbox").join("native-probe"))
}

/// What decides whether the user-namespace round trip works for this process, one `name value`
/// line each; `None` when the boot cannot be named (no memo then).
fn context_key() -> Option<String> {
    let read = |path: &str| std::fs::read_to_string(path).ok().map(|s| s.trim().to_owned());
    let boot = read("/proc/sys/kernel/random/boot_id")?;
    let mut facts = vec![
        ("probe".to_owned(), PROBE_VERSION.to_owned()),
        ("boot".to_owned(), boot),
        ("uid".to_owned(), rustix::process::getuid().as_raw().to_string()),
        ("euid".to_owned(), rustix::process::geteuid().as_raw().to_string()),
    ];
    for sysctl in [
        "user/max_user_namespaces",
        "user/max_mnt_namespaces",
        "kernel/unprivileged_userns_clone",
        "kernel/apparmor_restrict_unprivileged_userns",
    ] {
        let value = read(&format!("/proc/sys/{sysctl}")).unwrap_or_else(|| "-".to_owned());
        facts.push((sysctl.to_owned(), value));
    }
    for ns in ["user", "mnt", "pid", "cgroup"] {
        let link = std::fs::read_link(format!("/proc/self/ns/{ns}")).ok()?;
        facts.push((format!("ns/{ns}"), link.to_string_lossy().into_owned()));
    }
    let status = read("/proc/self/status")?;
    for field in ["CapEff", "CapBnd", "NoNewPrivs", "Seccomp", "Seccomp_filters"] {
        let value = status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .map_or("-", str::trim);
        facts.push((field.to_owned(), value.to_owned()));
    }
    let label = read("/proc/self/attr/current").unwrap_or_else(|| "-".to_owned());
    facts.push(("lsm".to_owned(), label));
    Some(key(&facts))
}

/// Pure: the memo key of these facts.
pub(crate) fn key(facts: &[(String, String)]) -> String {
    facts.iter().map(|(name, value)| format!("{name} {value}\n")).collect()
}
