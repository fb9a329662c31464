//! Whether the process that owns a run still exists. The verdict is pure ([`judge`]) over what /proc
//! says; [`ProcLiveness`] and [`Owner::current`] are the thin IO edges that read /proc.
//!
//! A pid is only evidence inside the pid namespace and boot it was taken in: the CLI may run in a
//! container (same boot id as the host, another pid namespace) or on another machine talking to a
//! remote daemon. Outside its own namespace and boot the verdict is [`Liveness::Unknown`], and the
//! policy falls back to the run's `expires` label instead of guessing.

use std::fs;
use std::io::ErrorKind;
use std::path::PathBuf;

use crate::{Error, Owner, labels::label_value};

/// What is known about an owner process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Liveness {
    /// The same process (pid and start time) still runs.
    Alive,
    /// No process has that pid, or it is a zombie: the owner has exited.
    Dead,
    /// The pid belongs to a later process: the owner exited and the pid was reused.
    Reused,
    /// Not checkable from here (another host, boot or pid namespace, or /proc unreadable).
    Unknown,
}

/// The liveness oracle the policy asks. Engines use [`ProcLiveness`]; tests pass a closure.
pub trait OwnerLiveness {
    /// The verdict for one owner.
    fn liveness(&self, owner: &Owner) -> Liveness;
}

impl<F: Fn(&Owner) -> Liveness> OwnerLiveness for F {
    fn liveness(&self, owner: &Owner) -> Liveness {
        self(owner)
    }
}

/// Where the checker runs: the boot and pid namespace its pids are valid in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vantage {
    /// The kernel boot id.
    pub boot_id: String,
    /// The pid namespace inode.
    pub pid_ns: u64,
}

/// What reading `/proc/<pid>/stat` gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat<'a> {
    /// The file exists: its text.
    Found(&'a str),
    /// No such process.
    Missing,
    /// Reading failed otherwise (permissions, a hidepid mount).
    Unreadable,
}

/// The verdict from what `/proc/<owner.pid>/stat` holds, as seen from `here`.
pub fn judge(owner: &Owner, here: &Vantage, stat: Stat<'_>) -> Liveness {
    if owner.boot_id != here.boot_id || owner.pid_ns != here.pid_ns {
        return Liveness::Unknown;
    }
    let stat = match stat {
        Stat::Found(text) => text,
        Stat::Missing => return Liveness::Dead,
        Stat::Unreadable => return Liveness::Unknown,
    };
    match (parse_stat(stat), owner.start_time) {
        (Some((_, start)), wanted) if start != wanted => Liveness::Reused,
        (Some(('Z' | 'X', _)), _) => Liveness::Dead,
        (Some(_), _) => Liveness::Alive,
        (None, _) => Liveness::Unknown,
    }
}

/// State letter and start time (field 22, clock ticks since boot) from `/proc/<pid>/stat`. The
/// command name (field 2) may hold spaces and parentheses, so fields are counted after its last `)`.
pub fn parse_stat(stat: &str) -> Option<(char, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Fields 4..=21 lie between the state (field 3) and the start time (field 22).
    let start = fields.nth(22 - 4)?.parse().ok()?;
    Some((state, start))
}

/// Liveness from this host's /proc.
#[derive(Debug, Clone)]
pub struct ProcLiveness {
    here: Vantage,
    proc_root: PathBuf,
}

impl ProcLiveness {
    /// Reads this process's boot id and pid namespace.
    pub fn new() -> Result<ProcLiveness, Error> {
        Ok(ProcLiveness { here: vantage()?, proc_root: PathBuf::from("/proc") })
    }

    /// The boot and pid namespace verdicts are relative to.
    pub fn vantage(&self) -> &Vantage {
        &self.here
    }
}

impl OwnerLiveness for ProcLiveness {
    fn liveness(&self, owner: &Owner) -> Liveness {
        let path = self.proc_root.join(owner.pid.to_string()).join("stat");
        match fs::read_to_string(path) {
            Ok(stat) => judge(owner, &self.here, Stat::Found(&stat)),
            Err(e) if e.kind() == ErrorKind::NotFound => judge(owner, &self.here, Stat::Missing),
            Err(_) => judge(owner, &self.here, Stat::Unreadable),
        }
    }
}

impl Owner {
    /// This process as an owner. `user` is the name to record (sanitized by [`label_value`]);
    /// `None` records `uid-N` from /proc.
    pub fn current(user: Option<&str>) -> Result<Owner, Error> {
        let here = vantage()?;
        let pid = std::process::id();
        let stat = read("/proc/self/stat")?;
        let (_, start_time) = parse_stat(&stat).ok_or(Error::ProcStat { pid })?;
        let user = match user {
            Some(name) => label_value(name),
            None => format!(
                "uid-{}",
                uid_from_status(&read("/proc/self/status")?).ok_or(Error::ProcStat { pid })?
            ),
        };
        let host = label_value(read("/proc/sys/kernel/hostname")?.trim());
        Ok(Owner { user, host, boot_id: here.boot_id, pid_ns: here.pid_ns, pid, start_time })
    }
}

/// The real uid from `/proc/<pid>/status`.
pub(crate) fn uid_from_status(status: &str) -> Option<u32> {
    status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()
}

/// The inode in a `pid:[4026531836]` namespace link.
pub(crate) fn parse_ns_link(link: &str) -> Option<u64> {
    link.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

fn vantage() -> Result<Vantage, Error> {
    let boot_id = read("/proc/sys/kernel/random/boot_id")?.trim().to_owned();
    let link = fs::read_link("/proc/self/ns/pid").map_err(|e| io_error("/proc/self/ns/pid", &e))?;
    let pid_ns = parse_ns_link(&link.to_string_lossy()).ok_or_else(|| Error::Io {
        path: "/proc/self/ns/pid".to_owned(),
        message: format!("unexpected link `{}`", link.display()),
    })?;
    Ok(Vantage { boot_id, pid_ns })
}

fn read(path: &str) -> Result<String, Error> {
    fs::read_to_string(path).map_err(|e| io_error(path, &e))
}

fn io_error(path: &str, e: &std::io::Error) -> Error {
    Error::Io { path: path.to_owned(), message: e.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "207284 (my (odd) cmd) S 1 207284 207284 0 -1 4194560 115 0 0 0 0 0 0 0 20 0 1 0 5551234 2293760 220 18446744073709551615";

    #[test]
    fn stat_fields_are_counted_after_the_last_parenthesis() {
        assert_eq!(parse_stat(STAT), Some(('S', 5_551_234)));
        assert_eq!(parse_stat("1 (init) S 0"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn status_and_ns_parsing() {
        assert_eq!(uid_from_status("Name:\tx\nUid:\t1000\t1000\t1000\t1000\n"), Some(1000));
        assert_eq!(uid_from_status("Name:\tx\n"), None);
        assert_eq!(parse_ns_link("pid:[4026531836]"), Some(4_026_531_836));
        assert_eq!(parse_ns_link("net:[1]"), None);
    }

    #[test]
    fn verdicts() {
        let here = Vantage { boot_id: "b".into(), pid_ns: 7 };
        let owner = Owner {
            user: "u".into(),
            host: "h".into(),
            boot_id: "b".into(),
            pid_ns: 7,
            pid: 207_284,
            start_time: 5_551_234,
        };
        let zombie = STAT.replace(") S ", ") Z ");
        let later = STAT.replace("5551234", "5559999");
        let cases = [
            (Stat::Found(STAT), Liveness::Alive),
            (Stat::Missing, Liveness::Dead),
            (Stat::Found(&zombie), Liveness::Dead),
            (Stat::Found(&later), Liveness::Reused),
            (Stat::Unreadable, Liveness::Unknown),
            (Stat::Found("nonsense"), Liveness::Unknown),
        ];
        for (stat, want) in cases {
            assert_eq!(judge(&owner, &here, stat), want, "{stat:?}");
        }
        let elsewhere = Owner { pid_ns: 8, ..owner.clone() };
        assert_eq!(judge(&elsewhere, &here, Stat::Missing), Liveness::Unknown);
        let other_boot = Owner { boot_id: "c".into(), ..owner };
        assert_eq!(judge(&other_boot, &here, Stat::Missing), Liveness::Unknown);
    }
}
