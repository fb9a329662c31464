//! `--memory`, `--cpus` and `--pids-limit` under bwrap, which has no limit flags of its own,
//! and the defaults of the limits nobody set (`sandbox_core::Limits::defaults`).
//! [`decide`] is pure: from what was asked and what this host offers
//! (`engine_detect::bwrap_limits`) to what a run sets up, or a refusal with a `hint:`; never a
//! limit silently dropped. A default is held by the same means where there are any, and left
//! out where there are none (`cpus` without a cgroup: `detect` says so). Only the script's
//! sandbox gets them: prepare steps (uv) never do.
//!
//! - **cgroup v2** (a delegated subtree): the sandbox gets a cgroup of its own next to the
//!   caller's, with `memory.max` (and no swap), `pids.max` and `cpu.max`; the bwrap child
//!   moves itself in before `exec` ([`Cgroup::apply`]), so bwrap and everything below it are
//!   inside, and the cgroup is removed after the run. Over `memory.max` the kernel kills the
//!   script (exit 137).
//! - **rlimits** otherwise, set with `prlimit` on the sandbox's first process while it waits at
//!   `--block-fd`, after bwrap built the namespaces and before anything of the script runs.
//!   Not in a `pre_exec` on bwrap itself: bwrap, its setup and pasta stay unlimited, and
//!   `RLIMIT_NPROC` set before bwrap creates the user namespace would be checked against every
//!   process of the caller's uid on the host (the namespace's ceiling is taken from its
//!   creator), so a user with a busy desktop could not fork at all. Set inside, it counts the
//!   sandbox's user in the sandbox's own user namespace (Linux ≥ 5.14): a per-sandbox limit,
//!   for a non-root caller (whose own processes are outside) and for a root caller's sandbox
//!   running as 65534 alike (other sandboxes of 65534 live in other namespaces). The hard limit
//!   is set too, and raising it needs `CAP_SYS_RESOURCE` in the initial namespace.
//!   Memory is `RLIMIT_DATA`, per process: the private writable memory it maps (heap,
//!   anonymous maps, thread stacks), so an allocation past it fails and the script sees
//!   `MemoryError` (exit 1 unless it catches it). Not `RLIMIT_AS`: address space counts code,
//!   mapped files and reservations never touched (64 MiB per malloc arena, gigabytes for V8 or
//!   Chromium), which ordinary scripts would run into. It is not resident memory either: an
//!   OpenBLAS thread's buffer and stack count whole, so the default gets
//!   `engine_detect::DATA_PER_CPU` more per CPU ([`engine_detect::rlimit_memory_default`]);
//!   an asked `--memory` is the limit itself. `--cpus` has no rlimit, and a CPU affinity mask
//!   the script could widen again is no limit: refused when asked, no default.

#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use engine_detect::{BwrapLimits, Mechanism};
use rustix::fs::{Mode, OFlags};
use sandbox_core::Limits;

use crate::error::{Error, Result};

/// The kernel limits set on the sandbox's first process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rlim {
    /// `RLIMIT_DATA`, bytes.
    Data(u64),
    /// `RLIMIT_NPROC`, processes and threads of the sandbox's user in its namespace.
    Processes(u64),
}

/// What one run sets up; empty for prepare steps and for runs that asked for nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxLimits {
    /// Set on the sandbox's first process, inherited by all of it.
    pub rlimits: Vec<Rlim>,
    /// A cgroup of the run's own (delegated cgroup v2).
    pub cgroup: Option<CgroupPlan>,
}

/// A cgroup of the sandbox's own under `parent` (a delegated directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupPlan {
    /// The delegated directory the run's cgroup is made in.
    pub parent: PathBuf,
    /// Controllers to turn on in `parent`'s `cgroup.subtree_control` first.
    pub enable: Vec<&'static str>,
    /// (file, value) written into the new cgroup, in order.
    pub files: Vec<(&'static str, String)>,
}

/// Pure: what enforces each asked limit, or why it cannot be enforced here, and each default
/// (`limits.defaults()`) where something can hold it.
pub(crate) fn decide(limits: &Limits, here: &BwrapLimits) -> Result<SandboxLimits> {
    let defaults = limits.defaults();
    // (value, asked): what the user set, else the default.
    let pick = |asked: Option<u64>, default: Option<u64>| {
        asked.map(|v| (v, true)).or(default.map(|v| (v, false)))
    };
    let mut out = SandboxLimits::default();
    let mut files = Vec::new();
    let mut used = Vec::new();
    if let Some((bytes, asked)) = pick(limits.memory, defaults.memory) {
        match here.support.memory {
            Some(Mechanism::CgroupV2) => {
                files.push(("memory.max", bytes.to_string()));
                // No swap, as docker's `memory_swap = memory`; absent without swap accounting.
                files.push(("memory.swap.max", "0".to_owned()));
                used.push("memory");
            }
            Some(_) if asked => out.rlimits.push(Rlim::Data(bytes)),
            Some(_) => out
                .rlimits
                .push(Rlim::Data(engine_detect::rlimit_memory_default(bytes, here.host_cpus))),
            None if asked => {
                return Err(Error::LimitUnsupported {
                    flag: "--memory",
                    reason: "nothing holds a memory limit here".to_owned(),
                });
            }
            None => {}
        }
    }
    if let Some((pids, asked)) = pick(limits.pids, defaults.pids) {
        match here.support.pids {
            Some(Mechanism::CgroupV2) => {
                files.push(("pids.max", pids.to_string()));
                used.push("pids");
            }
            Some(_) => out.rlimits.push(Rlim::Processes(pids)),
            None if asked => {
                return Err(Error::LimitUnsupported {
                    flag: "--pids-limit",
                    reason: "there is no delegated cgroup v2 here, and this kernel (before 5.14) \
                             counts RLIMIT_NPROC across all of the user's processes, not per \
                             sandbox"
                        .to_owned(),
                });
            }
            None => {}
        }
    }
    let cpus = limits.cpus.map(|c| (c, true)).or(defaults.cpus.map(|c| (c, false)));
    if let Some((cpus, asked)) = cpus {
        if here.support.cpus == Some(Mechanism::CgroupV2) {
            // `cpu.max` is "QUOTA PERIOD" in microseconds: 1000 millis of a CPU = one period.
            files.push(("cpu.max", format!("{} 100000", u64::from(cpus.millis()) * 100)));
            used.push("cpu");
        } else if asked {
            return Err(Error::LimitUnsupported {
                flag: "--cpus",
                reason: "a CPU quota needs a cgroup v2 subtree delegated to you (cgroup v1 or \
                         no writable cgroup here), and no rlimit means \"N CPUs\""
                    .to_owned(),
            });
        }
    }
    if !files.is_empty() {
        let delegation = here.delegation.as_ref().ok_or_else(|| Error::LimitUnsupported {
            flag: "--memory",
            reason: "the delegated cgroup went away".to_owned(),
        })?;
        out.cgroup = Some(CgroupPlan {
            parent: delegation.dir.clone(),
            enable: delegation.enable.iter().copied().filter(|c| used.contains(c)).collect(),
            files,
        });
    }
    Ok(out)
}

/// Sets the rlimits on `pid` (the sandbox's first process, waiting at `--block-fd`). For a
/// root caller (`run_as`) the sandbox runs as nobody, and root may lack `CAP_SYS_RESOURCE`
/// (containers and some VMs drop it), without which the kernel refuses a `prlimit` on another
/// user's process: a forked helper that is that user does it instead.
pub(crate) fn set_rlimits(pid: i32, rlimits: &[Rlim], run_as: Option<(u32, u32)>) -> Result<()> {
    let fail = |what: &str, e: rustix::io::Errno| Error::LimitSetup {
        reason: format!("setting {what} on the sandbox: {e}"),
    };
    // `as`: glibc gives `RLIMIT_*` a type of its own, musl an `int`; the syscall takes an `int`.
    let resources: Vec<(libc::c_int, u64, &str)> = rlimits
        .iter()
        .map(|limit| match *limit {
            Rlim::Data(v) => (libc::RLIMIT_DATA as libc::c_int, v, "RLIMIT_DATA"),
            Rlim::Processes(v) => (libc::RLIMIT_NPROC as libc::c_int, v, "RLIMIT_NPROC"),
        })
        .collect();
    let Some((uid, gid)) = run_as else {
        for (resource, value, what) in &resources {
            prlimit(pid, *resource, *value).map_err(|e| fail(what, e))?;
        }
        return Ok(());
    };
    // SAFETY: between fork and _exit the child makes only raw syscalls on memory allocated
    // before the fork (no allocation, no locks); the parent only waits for it.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(fail("the limits", rustix::io::Errno::from_raw_os_error(errno())));
    }
    if child == 0 {
        // SAFETY: as above; `_exit` skips every handler of the parent's.
        unsafe {
            let mut code = 0;
            if libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) != 0
                || libc::syscall(libc::SYS_setresgid, gid, gid, gid) != 0
                || libc::syscall(libc::SYS_setresuid, uid, uid, uid) != 0
            {
                code = 100;
            }
            for (i, (resource, value, _)) in resources.iter().enumerate() {
                if code == 0 && prlimit(pid, *resource, *value).is_err() {
                    code = 101 + i as i32;
                }
            }
            libc::_exit(code);
        }
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    while unsafe { libc::waitpid(child, &mut status, 0) } < 0 && errno() == libc::EINTR {}
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { -1 };
    match code {
        0 => Ok(()),
        100 => Err(Error::LimitSetup { reason: format!("becoming {uid}:{gid} to set them") }),
        n => {
            let what = usize::try_from(n - 101).ok().and_then(|i| resources.get(i));
            Err(fail(what.map_or("the limits", |r| r.2), rustix::io::Errno::PERM))
        }
    }
}

/// `prlimit(2)` lowering soft and hard limit of `pid` (0: the caller) to `value`, by the raw
/// syscall (the same on glibc and musl); async-signal-safe.
fn prlimit(pid: i32, resource: libc::c_int, value: u64) -> rustix::io::Result<()> {
    let new = libc::rlimit64 { rlim_cur: value, rlim_max: value };
    // SAFETY: the raw syscall with a valid pointer to a local and a null old-value pointer.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            pid,
            resource,
            &raw const new,
            std::ptr::null_mut::<libc::rlimit64>(),
        )
    };
    if ret == 0 { Ok(()) } else { Err(rustix::io::Errno::from_raw_os_error(errno())) }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The sandbox's cgroup, removed when dropped (after the run's tree is gone).
pub struct Cgroup {
    dir: PathBuf,
    procs: OwnedFd,
}

impl Cgroup {
    /// Creates the cgroup under the plan's parent and writes its limits.
    pub fn create(plan: &CgroupPlan) -> Result<Cgroup, crate::Error> {
        let fail = |what: String| {
            move |e: std::io::Error| Error::LimitSetup { reason: format!("{what}: {e}") }
        };
        if !plan.enable.is_empty() {
            let line: Vec<String> = plan.enable.iter().map(|c| format!("+{c}")).collect();
            let file = plan.parent.join("cgroup.subtree_control");
            std::fs::write(&file, line.join(" ")).map_err(fail(format!(
                "enabling {} in {}",
                line.join(" "),
                file.display()
            )))?;
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = plan.parent.join(format!("python-sandbox-{}-{nanos:x}", std::process::id()));
        std::fs::create_dir(&dir).map_err(fail(format!("creating {}", dir.display())))?;
        let cgroup = Cgroup {
            procs: rustix::fs::open(
                dir.join("cgroup.procs"),
                OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| fail(format!("opening {}/cgroup.procs", dir.display()))(e.into()))?,
            dir,
        };
        for (file, value) in &plan.files {
            let path = cgroup.dir.join(file);
            match std::fs::write(&path, value) {
                Ok(()) => {}
                Err(e)
                    if *file == "memory.swap.max" && e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(fail(format!("writing {}", path.display()))(e)),
            }
        }
        Ok(cgroup)
    }

    /// The bwrap child moves itself into the cgroup before `exec` (and before a root caller's
    /// child drops to nobody: add this first). Writing `0` to `cgroup.procs` moves the writer.
    /// The cgroup's `cgroup.procs`, open for writing: a process that writes `0` to it moves
    /// itself in (before its namespaces, so the whole sandbox is in it).
    pub fn procs(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.procs)
    }

    pub(crate) fn apply(&self, command: &mut Command) {
        let fd = self.procs.as_raw_fd();
        // SAFETY: the closure runs in the forked child before exec and makes one raw write on
        // a descriptor that is open there (close-on-exec closes it only at exec); no
        // allocation, no locks.
        unsafe {
            command.pre_exec(move || {
                let fd = std::os::fd::BorrowedFd::borrow_raw(fd);
                rustix::io::write(fd, b"0")?;
                Ok(())
            });
        }
    }
}

impl Cgroup {
    /// Keeps the cgroup past this handle (a session's, which outlives `session start`): the
    /// directory to remove once the session's tree is gone.
    pub fn keep(mut self) -> PathBuf {
        // The handle's drop then has no directory to remove.
        std::mem::take(&mut self.dir)
    }
}

/// Removes a sandbox's cgroup after its tree is gone. The kernel may still be tearing down the
/// last task, so an `EBUSY` rmdir is retried briefly; a cgroup left behind holds nothing.
pub(crate) fn remove(dir: &Path) {
    let Ok(path) = CString::new(dir.as_os_str().as_bytes()) else { return };
    for _ in 0..50 {
        match rustix::fs::rmdir(path.as_c_str()) {
            Err(rustix::io::Errno::BUSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            _ => return,
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if !self.dir.as_os_str().is_empty() {
            remove(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine_detect::{Delegation, bwrap_limits_from};

    fn show(result: Result<SandboxLimits>) -> String {
        match result {
            Ok(l) => format!("{l:?}"),
            Err(e) => format!("error: {}", e.to_string().replace('\n', " / ")),
        }
    }

    /// Every asked limit is held by something or refused with a hint; nothing asked, nothing set.
    #[test]
    fn decisions() {
        let asked = |text: &str| {
            let mut l = Limits::NONE;
            for part in text.split_whitespace() {
                match part.split_once('=') {
                    Some((name, "none")) => match name {
                        "memory" => l.off.memory = true,
                        "cpus" => l.off.cpus = true,
                        _ => l.off.pids = true,
                    },
                    Some(("memory", v)) => l.memory = sandbox_core::parse_memory(v).ok(),
                    Some(("cpus", v)) => l.cpus = sandbox_core::parse_cpus(v).ok(),
                    Some(("pids", v)) => l.pids = sandbox_core::parse_pids(v).ok(),
                    _ => unreachable!("test notation"),
                }
            }
            l
        };
        let v1 = bwrap_limits_from(None, "6.18.0", 4);
        let v1_old = bwrap_limits_from(None, "5.10.0", 4);
        let delegated = Delegation {
            dir: "/sys/fs/cgroup/user.slice/app.slice".into(),
            controllers: vec!["memory", "pids", "cpu"],
            enable: vec!["cpu"],
        };
        let v2 = bwrap_limits_from(Some(delegated), "6.18.0", 4);
        let rows = [
            ("v1, nothing asked: the defaults as rlimits", &v1, ""),
            ("v1 before 5.14, nothing asked", &v1_old, ""),
            ("v1, all off", &v1, "memory=none cpus=none pids=none"),
            ("v1, memory off", &v1, "memory=none"),
            ("v1, memory and pids", &v1, "memory=256m pids=16"),
            ("v1, cpus", &v1, "cpus=0.5"),
            ("v1 before 5.14, pids", &v1_old, "pids=16"),
            ("v1 before 5.14, memory", &v1_old, "memory=1g"),
            ("v2, all three", &v2, "memory=256m cpus=1.5 pids=16"),
            ("v2, memory only", &v2, "memory=256m"),
            ("v2, nothing asked: the defaults in the cgroup", &v2, ""),
            ("v2, cpus off", &v2, "cpus=none"),
        ];
        let out: Vec<String> = rows
            .iter()
            .map(|(name, here, text)| format!("{name}: {}", show(decide(&asked(text), here))))
            .collect();
        insta::assert_snapshot!(out.join("\n"));
    }
}
