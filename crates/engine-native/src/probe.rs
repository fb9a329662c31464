//! `detect`'s check of the native engine, found by trying: a forked child unshares a user and
//! a mount namespace, writes its map and mounts a tmpfs ([`crate::userns_probe`], which names
//! the host setting that blocks it); the kernel is asked whether it takes seccomp filters and
//! which Landlock ABI it has. [`verdict`] turns the answers into the probe (pure).

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
    /// Whether pasta is on `PATH`: the full network of `net = "on"` runs and dependency
    /// installs. Without it they get the built-in HTTP(S) proxy, so it is said, not failed.
    pub pasta: bool,
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
            let net = if answers.pasta {
                "\nnetwork: pasta (full TCP/UDP for net on)".to_owned()
            } else {
                format!(
                    "\n{}\nhint: install the `passt` package for full TCP/UDP networking (e.g. \
                     `sudo apt install passt`)",
                    engine_detect::BUILTIN_NET
                )
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

/// The kernel's answers, by trying.
pub fn answers() -> Answers {
    Answers {
        userns: crate::userns_probe(),
        seccomp: seccomp_filters(),
        landlock: crate::landlock_applied(),
        pasta: engine_detect::which("pasta", std::env::var_os("PATH").as_deref()).is_some(),
    }
}

/// [`verdict`] of [`answers`]: what `detect` prints for native. Asked once per process: the
/// CLI's engine choice and [`crate::NativeEngine::new`] both need it, and the kernel's
/// settings do not change under a run (a fork and an unshare each time they did).
pub fn probe() -> Probe {
    static ANSWERS: std::sync::OnceLock<Answers> = std::sync::OnceLock::new();
    verdict(ANSWERS.get_or_init(answers))
}
