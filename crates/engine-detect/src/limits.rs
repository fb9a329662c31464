//! Which mechanism holds each resource limit (`--memory`, `--cpus`, `--pids-limit`) on each
//! engine, for `detect` and for the engines themselves: one answer, so what `detect` says is
//! what a run does.
//!
//! - docker, and rootful podman: the container runtime's cgroup limits.
//! - rootless podman: the same, but only on cgroup v2 with the controllers delegated to the
//!   user; elsewhere none (asked-for limits are refused).
//! - bwrap: a cgroup v2 subtree the caller may write (a *delegated* one) gives real limits:
//!   `memory.max` (resident memory), `pids.max`, `cpu.max`. Without one, the kernel's rlimits,
//!   which always work but mean less: `RLIMIT_DATA` caps each process's private writable
//!   memory (not resident memory: untouched thread stacks and BLAS buffers count), and `RLIMIT_NPROC` caps the
//!   processes of the sandbox's user *in its own user namespace* (per sandbox since Linux 5.14,
//!   which counts them per namespace; before, it counted every process of that uid host-wide,
//!   so it is not used there). CPU time has no rlimit that means "N CPUs", and an affinity mask
//!   the script could widen again is no limit, so `--cpus` needs the cgroup.
//!
//! A limit nobody asked for gets its default (`sandbox_core::Limits::DEFAULT`) from the same
//! mechanism ([`DefaultLimits::of`]), where there is one; where there is none, that default does
//! not apply, and `detect` says so. One exception, memory under rlimits: a default must not
//! break ordinary scripts, and an address-space cap does (glibc reserves 64 MiB of address
//! space per malloc arena, OpenBLAS a buffer and a stack per CPU, Chromium and V8 gigabytes of
//! never-touched reservations), so the default is held by `RLIMIT_DATA` (the private writable
//! memory a process maps: heap, anonymous maps, thread stacks; not code, files or
//! reservations) at the default plus [`DATA_PER_CPU`] per CPU of the host
//! ([`rlimit_memory_default`]), room for one BLAS buffer and one thread stack per CPU.
//!
//! The cgroup detection is a pure function over what it reads ([`delegation_in`]), so it is
//! tested with a fake cgroupfs; [`bwrap_limits`] is the thin IO edge.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// How one limit is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mechanism {
    /// A cgroup v2 of the sandbox's own, created under a delegated subtree.
    CgroupV2,
    /// A kernel rlimit set on the sandbox's first process before the script starts.
    Rlimit,
    /// The container runtime (its cgroup).
    ContainerRuntime,
}

impl Mechanism {
    /// For the `detect` table.
    pub fn as_str(self) -> &'static str {
        match self {
            Mechanism::CgroupV2 => "cgroup v2",
            Mechanism::Rlimit => "rlimit",
            Mechanism::ContainerRuntime => "container runtime",
        }
    }
}

/// Per limit, what holds it on an engine; `None`: nothing, and asking for it is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LimitSupport {
    pub memory: Option<Mechanism>,
    pub cpus: Option<Mechanism>,
    pub pids: Option<Mechanism>,
}

impl LimitSupport {
    /// Nothing holds any limit.
    pub const NONE: LimitSupport = LimitSupport { memory: None, cpus: None, pids: None };

    /// Everything by the container runtime.
    pub const RUNTIME: LimitSupport = LimitSupport {
        memory: Some(Mechanism::ContainerRuntime),
        cpus: Some(Mechanism::ContainerRuntime),
        pids: Some(Mechanism::ContainerRuntime),
    };

    /// One line for humans: `memory rlimit, cpus none, pids rlimit`.
    pub fn summary(&self) -> String {
        let show = |m: Option<Mechanism>| m.map_or("none", Mechanism::as_str);
        format!("memory {}, cpus {}, pids {}", show(self.memory), show(self.cpus), show(self.pids))
    }
}

/// A default limit on one engine here: its value and what holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DefaultLimit {
    /// The default, spelt as its flag takes it (`2g`, `2`, `512`).
    pub value: String,
    /// What holds it here; `None`: nothing can, so this default does not apply.
    pub held_by: Option<Mechanism>,
    /// How, where the mechanism alone does not say: the rlimit that stands for memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub how: Option<String>,
}

/// The defaults (`sandbox_core::Limits::DEFAULT`) on one engine here, for `detect`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DefaultLimits {
    pub memory: DefaultLimit,
    pub cpus: DefaultLimit,
    pub pids: DefaultLimit,
}

/// Room per host CPU above the memory default under `RLIMIT_DATA`: an OpenBLAS thread's buffer
/// (32 MiB) and its stack (8 MiB), rounded up. OpenBLAS starts one thread per CPU.
pub const DATA_PER_CPU: u64 = 64 << 20;

/// Pure: the `RLIMIT_DATA` that holds a default memory limit of `bytes` on a host with
/// `host_cpus` CPUs (see the module header).
pub fn rlimit_memory_default(bytes: u64, host_cpus: u32) -> u64 {
    bytes.saturating_add(u64::from(host_cpus).saturating_mul(DATA_PER_CPU))
}

/// Pure: a size as `--memory` takes it (`2g`, `512m`, or bytes).
fn size_flag(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}g", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}m", b >> 20),
        b => b.to_string(),
    }
}

impl DefaultLimits {
    /// Pure: the defaults held by what holds asked limits on an engine (`support`); memory
    /// under rlimits by `RLIMIT_DATA` (see the module header).
    pub fn of(support: &LimitSupport) -> DefaultLimits {
        let d = sandbox_core::Limits::DEFAULT;
        let memory = d.memory.unwrap_or_default();
        let memory_how = (support.memory == Some(Mechanism::Rlimit)).then(|| {
            format!(
                "RLIMIT_DATA of {} plus {} per CPU, per process",
                size_flag(memory),
                size_flag(DATA_PER_CPU)
            )
        });
        let pids_how = (support.pids == Some(Mechanism::Rlimit))
            .then(|| "RLIMIT_NPROC in the sandbox's own user namespace".to_owned());
        DefaultLimits {
            memory: DefaultLimit {
                value: size_flag(memory),
                held_by: support.memory,
                how: memory_how,
            },
            cpus: DefaultLimit {
                value: d.cpus.map(|c| c.to_string()).unwrap_or_default(),
                held_by: support.cpus,
                how: None,
            },
            pids: DefaultLimit {
                value: d.pids.map(|p| p.to_string()).unwrap_or_default(),
                held_by: support.pids,
                how: pids_how,
            },
        }
    }

    /// One line for humans: `memory 2g (rlimit: ...), cpus 2 (not held here), pids 512 (...)`.
    pub fn summary(&self) -> String {
        let show = |name: &str, d: &DefaultLimit| {
            let by = match (d.held_by, &d.how) {
                (None, _) => "not held here".to_owned(),
                (Some(m), None) => m.as_str().to_owned(),
                (Some(m), Some(how)) => format!("{}: {how}", m.as_str()),
            };
            format!("{name} {} ({by})", d.value)
        };
        format!(
            "{}, {}, {}",
            show("memory", &self.memory),
            show("cpus", &self.cpus),
            show("pids", &self.pids)
        )
    }
}

/// The controllers a sandbox's cgroup may use, in the order their files are written.
pub const CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

/// A cgroup v2 directory where the caller may create the sandbox's cgroup, next to its own
/// (a cgroup with processes cannot hand controllers to children, so never below its own),
/// and move a process there (it may write `cgroup.procs` of the common parent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delegation {
    /// Absolute, under the cgroup root.
    pub dir: PathBuf,
    /// The ones of [`CONTROLLERS`] children of `dir` can have.
    pub controllers: Vec<&'static str>,
    /// The ones of `controllers` not yet in `dir`'s `cgroup.subtree_control`: enabled there
    /// by the engine before it creates the sandbox's cgroup.
    pub enable: Vec<&'static str>,
}

/// Pure: the delegated cgroup v2 directory of a process whose `/proc/self/cgroup` is
/// `self_cgroup`, given how to read a file (`None`: absent) and whether a path is writable
/// for the caller. `root` is the cgroup v2 mount (`/sys/fs/cgroup`).
///
/// `None` on cgroup v1 or hybrid hosts (the controllers live on v1 there, which the kernel
/// never delegates safely), without a `0::` line, or when the parent directory, its
/// `cgroup.procs` or its `cgroup.subtree_control` is not writable.
pub fn delegation_in(
    root: &Path,
    self_cgroup: &str,
    read: &dyn Fn(&Path) -> Option<String>,
    writable: &dyn Fn(&Path) -> bool,
) -> Option<Delegation> {
    // On v1 and hybrid hosts the root is a tmpfs of per-controller mounts, with no such file.
    read(&root.join("cgroup.controllers"))?;
    let own = self_cgroup.lines().find_map(|l| l.strip_prefix("0::"))?.trim();
    let own = Path::new(own).strip_prefix("/").ok()?;
    // A cgroup path from the kernel never holds `..`; one that does is not trusted.
    if own.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
        return None;
    }
    let dir = root.join(own.parent().unwrap_or(Path::new("")));
    let files = ["cgroup.procs", "cgroup.subtree_control"];
    if !writable(&dir) || files.iter().any(|f| !writable(&dir.join(f))) {
        return None;
    }
    let available = read(&dir.join("cgroup.controllers"))?;
    let enabled = read(&dir.join("cgroup.subtree_control")).unwrap_or_default();
    // Controllers can be enabled only in a cgroup without processes of its own (the root is
    // exempt); otherwise only those already enabled are usable.
    let is_root = dir == root;
    let empty = read(&dir.join("cgroup.procs")).is_some_and(|p| p.trim().is_empty());
    let mut controllers = Vec::new();
    let mut enable = Vec::new();
    for name in CONTROLLERS {
        let on = enabled.split_whitespace().any(|c| c == name);
        if on {
            controllers.push(name);
        } else if available.split_whitespace().any(|c| c == name) && (is_root || empty) {
            controllers.push(name);
            enable.push(name);
        }
    }
    (!controllers.is_empty()).then_some(Delegation { dir, controllers, enable })
}

/// Pure: whether `RLIMIT_NPROC` counts per user namespace on a kernel of this release
/// (`uname -r`), which makes it a per-sandbox limit for bwrap (Linux 5.14, "Reimplement
/// RLIMIT_NPROC on top of ucounts"). An unreadable release counts as old.
pub fn nproc_per_userns(release: &str) -> bool {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (major, minor) >= (5, 14)
}

/// What bwrap can hold here, and where its cgroups go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BwrapLimits {
    pub support: LimitSupport,
    pub delegation: Option<Delegation>,
    /// The host's CPUs, which size the memory default under rlimits
    /// ([`rlimit_memory_default`]).
    pub host_cpus: u32,
}

/// Pure: bwrap's mechanism per limit from the delegation found and the kernel release. Each
/// limit takes the cgroup when its controller is there, else the rlimit when one means it.
pub fn bwrap_limits_from(
    delegation: Option<Delegation>,
    release: &str,
    host_cpus: u32,
) -> BwrapLimits {
    let has = |name: &str| delegation.as_ref().is_some_and(|d| d.controllers.contains(&name));
    let cgroup_or = |name: &str, fallback: Option<Mechanism>| {
        if has(name) { Some(Mechanism::CgroupV2) } else { fallback }
    };
    let nproc = nproc_per_userns(release).then_some(Mechanism::Rlimit);
    let support = LimitSupport {
        memory: cgroup_or("memory", Some(Mechanism::Rlimit)),
        cpus: cgroup_or("cpu", None),
        pids: cgroup_or("pids", nproc),
    };
    BwrapLimits { support, delegation, host_cpus }
}

/// The IO edge: reads `/proc/self/cgroup`, `/sys/fs/cgroup` and the kernel release.
pub fn bwrap_limits() -> BwrapLimits {
    let root = Path::new("/sys/fs/cgroup");
    let self_cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let read = |path: &Path| std::fs::read_to_string(path).ok();
    let writable = |path: &Path| rustix::fs::access(path, rustix::fs::Access::WRITE_OK).is_ok();
    let delegation = delegation_in(root, &self_cgroup, &read, &writable);
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let host_cpus = cpu_count(&online).unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, |n| u32::try_from(n.get()).unwrap_or(1))
    });
    bwrap_limits_from(delegation, release.trim(), host_cpus)
}

/// Pure: how many CPUs a cpu list (`/sys/devices/system/cpu/online`: `0-3,8,10-11`) names.
/// Every online CPU, not this process's affinity or quota: OpenBLAS sizes its threads so.
pub fn cpu_count(list: &str) -> Option<u32> {
    let mut count = 0u32;
    for part in list.trim().split(',') {
        let (low, high) = part.split_once('-').unwrap_or((part, part));
        let (low, high): (u32, u32) = (low.trim().parse().ok()?, high.trim().parse().ok()?);
        count = count.checked_add(high.checked_sub(low)?.checked_add(1)?)?;
    }
    (count > 0).then_some(count)
}

/// Whether rootless podman can hold limits here: cgroup v2 with memory, cpu and pids in this
/// process's own cgroup (what the user's podman service inherits). Never on cgroup v1.
pub fn rootless_cgroup_limits() -> bool {
    let root = Path::new("/sys/fs/cgroup");
    if std::fs::metadata(root.join("cgroup.controllers")).is_err() {
        return false;
    }
    let Ok(own) = std::fs::read_to_string("/proc/self/cgroup") else { return false };
    let Some(path) = own.lines().find_map(|l| l.strip_prefix("0::")) else { return false };
    let file = root.join(path.trim().trim_start_matches('/')).join("cgroup.controllers");
    std::fs::read_to_string(file).is_ok_and(|text| controllers_for_containers(&text))
}

/// Pure: whether a `cgroup.controllers` line holds every controller a container's limits need.
pub fn controllers_for_containers(controllers: &str) -> bool {
    let have: Vec<&str> = controllers.split_whitespace().collect();
    ["memory", "cpu", "pids"].iter().all(|c| have.contains(c))
}
