//! Rootless Podman for the `podman-rootless` tier: a dedicated system user ([`USER`]) with
//! subordinate ids, its own runtime directory, storage and containers.conf, the runtime image in
//! its own storage, and its `podman system service` on the rootless socket
//! (`$XDG_RUNTIME_DIR/podman/podman.sock`), which is where the CLI looks first. Set up by root,
//! idempotent, and well under a second when everything is already in place; `Ok(Some(reason))`
//! when this host cannot run rootless containers, so CI prints `SKIPPED: …`.
//!
//! What this VM needs beyond the packages (`uidmap` for newuidmap, `slirp4netns` for network on):
//! `/dev/net/tun` is root-only here (udev's default is 0666, which slirp4netns relies on), and
//! without a storage.conf rootless podman 4.3 picks vfs (a full copy of the image per container).

use std::fs;
use std::os::unix::fs::{PermissionsExt, chown};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use xshell::{Shell, cmd};

use crate::services::{self, HardLimits};

/// The system user rootless podman runs as.
pub(crate) const USER: &str = "psbx-rootless";
/// Not /var/lib: the CLI refuses workspaces below system directories, and the suite puts its
/// workspaces in this home.
const HOME_BASE: &str = "/home";
/// Subordinate ids per user, as `useradd` gives a regular user.
const SUBID_COUNT: u64 = 65_536;
/// `useradd`'s first subordinate id.
const SUBID_START: u64 = 100_000;
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const STORAGE_CONF: &str = "# Written by `cargo xtask` (xtask/src/rootless.rs).\n\
     # Native overlay (kernel >= 5.13); without it rootless podman 4.3 falls back to vfs.\n\
     [storage]\n\
     driver = \"overlay\"\n";

/// The rootless user as `/etc/passwd` has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Account {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) home: PathBuf,
}

impl Account {
    /// Reads [`USER`] from /etc/passwd; `None` before it exists.
    pub(crate) fn lookup() -> Option<Account> {
        passwd_entry(&fs::read_to_string("/etc/passwd").ok()?, USER)
    }

    /// `/run/user/<uid>`, the user's `XDG_RUNTIME_DIR`.
    pub(crate) fn runtime_dir(&self) -> PathBuf {
        PathBuf::from(format!("/run/user/{}", self.uid))
    }

    /// Where its API service listens, and where the CLI looks first for a rootless podman.
    pub(crate) fn socket(&self) -> PathBuf {
        self.runtime_dir().join("podman/podman.sock")
    }
}

/// Pure: the uid, gid and home of `name` in the text of /etc/passwd.
pub(crate) fn passwd_entry(passwd: &str, name: &str) -> Option<Account> {
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        if fields.len() < 7 || fields[0] != name {
            return None;
        }
        Some(Account {
            uid: fields[2].parse().ok()?,
            gid: fields[3].parse().ok()?,
            home: PathBuf::from(fields[5]),
        })
    })
}

/// Pure: whether /etc/subuid (or subgid) text gives `name` any range.
pub(crate) fn has_subids(text: &str, name: &str) -> bool {
    text.lines().any(|l| l.split(':').next() == Some(name))
}

/// Pure: the first [`SUBID_COUNT`] range at or above [`SUBID_START`] that no entry overlaps.
pub(crate) fn free_subid_range(text: &str) -> u64 {
    let taken: Vec<(u64, u64)> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':').skip(1);
            let start = f.next()?.trim().parse::<u64>().ok()?;
            let count = f.next()?.trim().parse::<u64>().ok()?;
            Some((start, start.saturating_add(count)))
        })
        .collect();
    let mut start = SUBID_START;
    while let Some(&(_, end)) = taken.iter().find(|(s, e)| *s < start + SUBID_COUNT && start < *e) {
        start = end;
    }
    start
}

/// `argv` run as [`USER`] with a clean login-like environment: setpriv (util-linux) switches
/// uid, gid and groups without PAM, so no session or limits module gets in the way.
pub(crate) fn as_user(argv: &[&str]) -> Vec<String> {
    let account = Account::lookup().unwrap_or(Account {
        uid: 0,
        gid: 0,
        home: PathBuf::from("/nonexistent"),
    });
    let mut out: Vec<String> = [
        "setpriv",
        &format!("--reuid={USER}"),
        &format!("--regid={USER}"),
        "--init-groups",
        "env",
        "-i",
        &format!("PATH={PATH}"),
        &format!("HOME={}", account.home.display()),
        &format!("USER={USER}"),
        &format!("LOGNAME={USER}"),
        &format!("XDG_RUNTIME_DIR={}", account.runtime_dir().display()),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    out.extend(argv.iter().map(|s| (*s).to_owned()));
    out
}

/// An [`as_user`] argv as a quiet command (xshell cannot splat the program name).
fn run_as_user<'a>(sh: &'a Shell, argv: &[String]) -> xshell::Cmd<'a> {
    let (program, args) = argv.split_first().map_or(("true", &[][..]), |(p, a)| (p.as_str(), a));
    cmd!(sh, "{program} {args...}").quiet().ignore_stderr()
}

/// The user, created if missing (root only). The engine-oci tests of a daemon shared by two
/// users (`tests/it/forged.rs`) use it as the second user, so `ci` makes it before the tests.
pub(crate) fn account(sh: &Shell) -> Result<Account> {
    if let Some(account) = Account::lookup() {
        return Ok(account);
    }
    let home = format!("{HOME_BASE}/{USER}");
    let nologin = "/usr/sbin/nologin";
    cmd!(sh, "useradd --system --create-home --home-dir {home} --shell {nologin} {USER}")
        .run()
        .with_context(|| format!("creating the user {USER}"))?;
    Account::lookup().with_context(|| format!("{USER} is not in /etc/passwd"))
}

/// Sets up the user, its podman and its API service (see the module header).
pub(crate) fn ensure(sh: &Shell) -> Result<Option<String>> {
    if !services::is_root(sh) {
        return Ok(Some(format!("setting up the rootless user {USER} needs root")));
    }
    let missing: Vec<&str> = [
        ("podman", "podman"),
        ("catatonit", "catatonit"),
        ("newuidmap", "uidmap"),
        ("slirp4netns", "slirp4netns"),
    ]
    .into_iter()
    .filter(|(program, _)| !services::on_path(sh, program))
    .map(|(_, package)| package)
    .collect();
    if !missing.is_empty()
        && let Some(reason) = services::apt_install(sh, &missing)?
    {
        return Ok(Some(reason));
    }
    for program in ["setpriv", "useradd", "usermod"] {
        if !services::on_path(sh, program) {
            return Ok(Some(format!("`{program}` is not installed")));
        }
    }
    let account = account(sh)?;
    // The tier runs binaries from this checkout as the user: a checkout under a private
    // directory (a root home, say) cannot work, which is a reason to skip, not to fail.
    let root = sh.current_dir();
    let manifest = root.join("Cargo.toml").display().to_string();
    if run_as_user(sh, &as_user(&["test", "-r", &manifest])).run().is_err() {
        return Ok(Some(format!(
            "{USER} cannot read this checkout ({}): one of its parent directories is private; clone it under a world-readable path to run this tier",
            root.display()
        )));
    }
    for (file, flag) in [("/etc/subuid", "--add-subuids"), ("/etc/subgid", "--add-subgids")] {
        let text = fs::read_to_string(file).unwrap_or_default();
        if !has_subids(&text, USER) {
            let start = free_subid_range(&text);
            let range = format!("{start}-{}", start + SUBID_COUNT - 1);
            cmd!(sh, "usermod {flag} {range} {USER}")
                .run()
                .with_context(|| format!("giving {USER} subordinate ids in {file}"))?;
        }
    }
    if let Some(reason) = services::tun_for_all(sh)? {
        return Ok(Some(format!("{reason}: slirp4netns cannot give containers a network")));
    }
    let runtime = account.runtime_dir();
    for (dir, mode) in [(&runtime, 0o700), (&runtime.join("podman"), 0o700)] {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(mode))?;
        chown(dir, Some(account.uid), Some(account.gid))?;
    }
    let changed = write_configs(&account)?;
    if changed {
        // A store first created with vfs keeps it; this user's store holds only our image.
        let driver = "{{.Store.GraphDriverName}}";
        let info = as_user(&["podman", "info", "--format", driver]);
        let current = run_as_user(sh, &info).read().unwrap_or_default();
        if current.trim() != "overlay" {
            run_as_user(sh, &as_user(&["podman", "system", "reset", "--force"])).run()?;
        }
    }
    start_service(sh, &account, changed)
}

/// Writes the user's storage.conf and containers.conf drop-in (the rootful drop-in's content:
/// runc, cgroupfs, file events, ulimits within the hard limits); whether either changed.
fn write_configs(account: &Account) -> Result<bool> {
    let limits = fs::read_to_string("/proc/self/limits").context("reading /proc/self/limits")?;
    let config = account.home.join(".config/containers");
    let files = [
        (config.join("storage.conf"), STORAGE_CONF.to_owned()),
        (
            config.join("containers.conf.d/50-python-sandbox.conf"),
            services::podman_conf(&HardLimits::parse(&limits)),
        ),
    ];
    let mut changed = false;
    for (path, text) in &files {
        if fs::read_to_string(path).ok().as_deref() == Some(text.as_str()) {
            continue;
        }
        services::write_file(path, text)?;
        changed = true;
    }
    // Everything from the home down to the files belongs to the user.
    for dir in [account.home.join(".config"), config.clone(), config.join("containers.conf.d")] {
        chown(&dir, Some(account.uid), Some(account.gid))?;
    }
    for (path, _) in &files {
        chown(path, Some(account.uid), Some(account.gid))?;
    }
    Ok(changed)
}

/// The user's `podman system service --time=0` on its rootless socket (log
/// `target/podman-rootless.log`, pidfile `target/podman-rootless.pid`), restarted when its
/// configuration changed.
fn start_service(sh: &Shell, account: &Account, changed: bool) -> Result<Option<String>> {
    let socket = account.socket();
    let target = services::target_dir(sh);
    let pidfile = target.join("podman-rootless.pid");
    if services::ping(&socket) {
        match services::live_pid(&pidfile) {
            Some(pid) if changed => services::stop(pid),
            _ => return Ok(None),
        }
    }
    let address = format!("unix://{}", socket.display());
    let argv = as_user(&["podman", "system", "service", "--time=0", &address]);
    let Some((program, args)) = argv.split_first() else { bail!("empty command") };
    let log = target.join("podman-rootless.log");
    let pid = services::spawn_daemon(program, args, &log)?;
    services::write_file(&pidfile, &format!("{pid}\n"))?;
    let timeout = std::time::Duration::from_secs(30);
    if services::wait_until(timeout, || services::ping(&socket), || services::pid_alive(pid)) {
        return Ok(None);
    }
    services::stop(pid);
    let text = fs::read_to_string(&log).unwrap_or_default();
    Ok(Some(format!(
        "rootless podman system service did not answer /_ping: {}",
        services::log_tail(&text, &log)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_lookup() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      psbx-rootless:x:999:995::/home/psbx-rootless:/usr/sbin/nologin\n\
                      broken:x:nope:1::/x:/bin/sh\n";
        assert_eq!(
            passwd_entry(passwd, USER),
            Some(Account { uid: 999, gid: 995, home: PathBuf::from("/home/psbx-rootless") })
        );
        assert_eq!(passwd_entry(passwd, "broken"), None);
        assert_eq!(passwd_entry(passwd, "psbx"), None, "whole names only");
    }

    #[test]
    fn subordinate_ranges_never_overlap() {
        assert_eq!(free_subid_range(""), 100_000);
        assert_eq!(free_subid_range("alice:100000:65536\n"), 165_536);
        assert_eq!(free_subid_range("alice:100000:65536\nbob:165536:65536\n"), 231_072);
        // A gap too small for a whole range is skipped; one large enough is used.
        assert_eq!(free_subid_range("a:100000:1000\nb:120000:65536\n"), 185_536);
        assert_eq!(free_subid_range("a:300000:65536\n"), 100_000);
        assert!(has_subids("x:1:2\npsbx-rootless:100000:65536\n", USER));
        assert!(!has_subids("psbx-rootless-old:1:2\n", USER));
    }

    #[test]
    fn commands_run_as_the_user_with_a_clean_environment() {
        let argv = as_user(&["podman", "info"]);
        assert_eq!(
            argv[..6],
            [
                "setpriv",
                "--reuid=psbx-rootless",
                "--regid=psbx-rootless",
                "--init-groups",
                "env",
                "-i"
            ]
        );
        assert_eq!(argv[argv.len() - 2..], ["podman", "info"]);
        assert!(argv.iter().any(|a| a.starts_with("XDG_RUNTIME_DIR=/run/user/")), "{argv:?}");
        let engine = crate::image::Engine::parse("podman-rootless");
        assert_eq!(engine, Some(crate::image::Engine::PodmanRootless));
        assert_eq!(engine.map(|e| e.to_string()).as_deref(), Some("podman-rootless"));
        assert!(!crate::image::Engine::ALL.contains(&crate::image::Engine::PodmanRootless));
    }
}
