//! `kill -9` of the `python-sandbox` process itself, mid-run: nothing of the run may outlive it
//! (the script, a grandchild that detached into its own session, the sandbox's init, the
//! network helper: pasta, or the built-in proxy's listener), on every local engine with its
//! network on, as root and as an unprivileged user. Leftovers are found by pid, by pid
//! namespace and, for pasta (a daemon of its own, no descendant of the CLI), by the network
//! namespace it holds: never by name alone.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The unprivileged user CI makes (`cargo xtask ci`, `xtask/src/rootless.rs`).
pub(crate) const ROOTLESS: &str = "psbx-rootless";

/// Leaves a detached grandchild (its own session, reparented to the sandbox's init), writes
/// its network namespace to `ready`, then sleeps.
const DETACHING: &str = "import os, time\n\
if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(300)\n        os._exit(0)\n    os._exit(0)\n\
os.wait()\nopen('ready.tmp', 'w').write(os.readlink('/proc/self/ns/net'))\nos.rename('ready.tmp', 'ready')\ntime.sleep(300)\n";

struct Proc {
    ppid: i32,
    pid_ns: Option<String>,
}

/// Every live process on the host (zombies left out: they hold nothing).
fn processes() -> BTreeMap<i32, Proc> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return out };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let mut fields = rest.split_whitespace();
        if fields.next() == Some("Z") {
            continue;
        }
        let Some(ppid) = fields.next().and_then(|p| p.parse().ok()) else { continue };
        let pid_ns = std::fs::read_link(format!("/proc/{pid}/ns/pid"))
            .ok()
            .map(|l| l.to_string_lossy().into_owned());
        out.insert(pid, Proc { ppid, pid_ns });
    }
    out
}

/// Processes holding a descriptor of the network namespace `net` (`net:[N]`): pasta keeps the
/// sandbox's open, and outlives nothing else.
fn holders_of(net: &str) -> BTreeSet<i32> {
    processes()
        .keys()
        .copied()
        .filter(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok_and(|fds| {
                fds.flatten().any(|fd| {
                    std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == net)
                })
            })
        })
        .collect()
}

/// `root`'s descendants and the pid namespaces they live in other than ours.
fn tree(root: i32) -> (BTreeSet<i32>, BTreeSet<String>) {
    let all = processes();
    let mut pids = BTreeSet::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        for (child, _) in all.iter().filter(|(_, proc)| proc.ppid == p) {
            if pids.insert(*child) {
                todo.push(*child);
            }
        }
    }
    let ours = all.get(&(std::process::id() as i32)).and_then(|p| p.pid_ns.clone());
    let namespaces = pids
        .iter()
        .filter_map(|p| all.get(p)?.pid_ns.clone())
        .filter(|ns| Some(ns) != ours.as_ref())
        .collect();
    (pids, namespaces)
}

/// What is still alive of `pids`, in `namespaces` or holding `net`, after up to `grace`.
fn leftovers(
    pids: &BTreeSet<i32>,
    namespaces: &BTreeSet<String>,
    net: &str,
    grace: Duration,
) -> Vec<i32> {
    let deadline = Instant::now() + grace;
    loop {
        let mut left: BTreeSet<i32> = processes()
            .iter()
            .filter(|(pid, p)| {
                pids.contains(pid) || p.pid_ns.as_ref().is_some_and(|n| namespaces.contains(n))
            })
            .map(|(pid, _)| *pid)
            .collect();
        left.extend(holders_of(net));
        if left.is_empty() || Instant::now() > deadline {
            return left.into_iter().collect();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A PATH of this machine's tools without pasta (what a host without the passt package has).
pub(crate) fn path_without_pasta(bin: &Path) -> String {
    for entry in std::fs::read_dir("/usr/bin").expect("/usr/bin") {
        let name = entry.expect("entry").file_name();
        if !name.to_string_lossy().starts_with("pasta") {
            let _ = std::os::unix::fs::symlink(Path::new("/usr/bin").join(&name), bin.join(&name));
        }
    }
    format!("{}:/usr/local/bin", bin.display())
}

/// The CLI as `user` (`None`: as we are), exec'd in place (setpriv and env replace
/// themselves), so the child's pid is the CLI's.
pub(crate) fn cli(user: Option<&str>, workspace: &Path, path: &str, args: &[&str]) -> Command {
    let exe = env!("CARGO_BIN_EXE_python-sandbox");
    let mut cmd = match user {
        Some(user) => {
            let mut cmd = Command::new("setpriv");
            cmd.args([
                &format!("--reuid={user}"),
                &format!("--regid={user}"),
                "--init-groups",
                "--",
                "env",
            ]);
            cmd.arg(format!("HOME=/tmp/{user}-home"));
            cmd.env_remove("XDG_RUNTIME_DIR").env_remove("XDG_CACHE_HOME");
            cmd.arg(exe);
            cmd
        }
        None => Command::new(exe),
    };
    cmd.args(args)
        .current_dir(workspace)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// One run killed mid-way: `Err` says what was left or what went wrong.
fn killed_run_leaves_nothing(engine: &str, user: Option<&str>, path: &str) -> Result<(), String> {
    let workspace = tempfile::tempdir().map_err(|e| e.to_string())?;
    let ws: PathBuf = workspace.path().to_owned();
    std::fs::write(ws.join("s.py"), DETACHING).map_err(|e| e.to_string())?;
    hand_to(user, &ws)?;
    let mut child = cli(user, &ws, path, &["run", "--engine", engine, "--net", "on", "s.py"])
        .spawn()
        .map_err(|e| format!("spawn: {e}"))?;
    let cli_pid = child.id() as i32;
    // A fresh cache prepares first.
    let deadline = Instant::now() + Duration::from_secs(180);
    let net = loop {
        if let Ok(net) = std::fs::read_to_string(ws.join("ready")) {
            break net;
        }
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return Err(format!("the run ended before the script was ready: {status}\n{err}"));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err("the script never wrote `ready`".to_owned());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (pids, namespaces) = tree(cli_pid);
    if namespaces.is_empty() || pids.len() < 3 {
        let _ = child.kill();
        return Err(format!("the run's tree is not a sandbox's: {pids:?} in {namespaces:?}"));
    }
    // SIGKILL: no handler, no destructor of the CLI runs.
    child.kill().map_err(|e| format!("kill -9: {e}"))?;
    let _ = child.wait();
    let left = leftovers(&pids, &namespaces, &net, Duration::from_secs(10));
    if left.is_empty() {
        return Ok(());
    }
    let described: Vec<String> = left
        .iter()
        .map(|p| {
            let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            format!("{p} {}", String::from_utf8_lossy(&cmdline).replace('\0', " "))
        })
        .collect();
    // Do not leave them to the next test either.
    for p in &left {
        let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
    }
    Err(format!("alive 10 s after the CLI was SIGKILLed: {described:?}"))
}

/// Gives `user` (`None`: nobody else) the workspace `ws` and the home [`cli`] gives it.
pub(crate) fn hand_to(user: Option<&str>, ws: &Path) -> Result<(), String> {
    let Some(user) = user else { return Ok(()) };
    let home = format!("/tmp/{user}-home");
    let owned = Command::new("chown")
        .args(["-R", &format!("{user}:{user}")])
        .arg(ws)
        .status()
        .is_ok_and(|s| s.success())
        && std::fs::create_dir_all(&home).is_ok()
        && Command::new("chown").args([&format!("{user}:{user}"), &home]).status().is_ok();
    if !owned {
        return Err(format!("could not hand the workspace to {user}"));
    }
    let _ = std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700));
    Ok(())
}

pub(crate) fn runs_here(engine: &str) -> bool {
    let ctx = super::Ctx::new();
    ctx.write("empty.py", "\n");
    ctx.run(&["run", "--engine", engine, "--net", "off", "empty.py"]).status.success()
}

pub(crate) fn user_exists(user: &str) -> bool {
    Command::new("id")
        .arg(user)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// native and bwrap, network on through pasta and through the built-in proxy, as root (or
/// whoever runs the tests) and as [`ROOTLESS`] where we are root and it exists.
#[test]
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn kill_9_of_the_cli_mid_run_leaves_no_process_on_any_local_engine() {
    // In /var/tmp, which the unprivileged user reaches too (a checkout's directory may not
    // be open to it).
    let bin = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let _ = std::fs::set_permissions(bin.path(), std::fs::Permissions::from_mode(0o755));
    let without_pasta = path_without_pasta(bin.path());
    let with_pasta = std::env::var("PATH").unwrap_or_default();
    let has_pasta = with_pasta.split(':').any(|d| Path::new(d).join("pasta").is_file());
    let mut users = vec![None];
    if rustix::process::getuid().is_root() {
        if user_exists(ROOTLESS) {
            users.push(Some(ROOTLESS));
        } else {
            println!("SKIPPED: kill -9 of the CLI as an unprivileged user: no `{ROOTLESS}` user");
        }
    }
    let mut failures = Vec::new();
    let mut ran = 0;
    for engine in ["native", "bwrap"] {
        if !runs_here(engine) {
            println!("SKIPPED: kill -9 of the CLI on {engine}: it cannot run a sandbox here");
            continue;
        }
        let mut networks = vec![("the built-in proxy", without_pasta.as_str())];
        if has_pasta {
            networks.push(("pasta", with_pasta.as_str()));
        } else {
            println!("SKIPPED: kill -9 of the CLI on {engine} with pasta: no pasta on PATH");
        }
        for user in &users {
            for (network, path) in &networks {
                ran += 1;
                if let Err(e) = killed_run_leaves_nothing(engine, *user, path) {
                    failures.push(format!(
                        "{engine}, {network}, as {}: {e}",
                        user.unwrap_or("the test's user")
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    println!("kill -9 of the CLI: {ran} runs, nothing left");
}
