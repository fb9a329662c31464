//! Faults through the whole native engine (the CLI's pipeline, minus argument parsing): the
//! process that owns a run is SIGKILLed, twenty runs share one workspace, a fork bomb meets
//! `--pids-limit 64`. Leftovers are found by pid and by pid namespace, never by name: a process
//! that renamed itself or was reparented still counts.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sandbox_core::{Engine, Output, RunIo, Stdin};

use super::engine::{engine_fixture, spec};

/// Every process on the host: pid → (parent pid, pid namespace inode). Processes that vanish
/// mid-scan, or whose namespace this caller may not read, are left out.
fn processes() -> BTreeMap<i32, (i32, Option<u64>)> {
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
        out.insert(pid, (ppid, pid_ns(pid)));
    }
    out
}

fn pid_ns(pid: i32) -> Option<u64> {
    let link = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok()?;
    let text = link.to_str()?;
    text.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

/// `root`'s descendants (any thread's children) and the pid namespaces they live in other than
/// ours: the sandbox's.
fn tree(root: i32) -> (BTreeSet<i32>, BTreeSet<u64>) {
    let all = processes();
    let mut pids = BTreeSet::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        for (child, _) in all.iter().filter(|(_, (ppid, _))| *ppid == p) {
            if pids.insert(*child) {
                todo.push(*child);
            }
        }
    }
    let ours = pid_ns(std::process::id() as i32);
    let namespaces =
        pids.iter().filter_map(|p| all.get(p)?.1).filter(|ns| Some(*ns) != ours).collect();
    (pids, namespaces)
}

/// What is still alive of `pids`, plus anything at all in `namespaces`, after up to `grace`.
fn leftovers(pids: &BTreeSet<i32>, namespaces: &BTreeSet<u64>, grace: Duration) -> Vec<i32> {
    let deadline = Instant::now() + grace;
    loop {
        let all = processes();
        let left: Vec<i32> = all
            .iter()
            .filter(|(pid, (_, ns))| {
                pids.contains(pid) || ns.is_some_and(|n| namespaces.contains(&n))
            })
            .map(|(pid, _)| *pid)
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

const KILLED_OWNER: &str = "ENGINE_NATIVE_KILLED_OWNER";

/// A script that leaves a detached grandchild (its own session, reparented to the sandbox's
/// init), then writes `ready` and sleeps.
const DETACHING: &str = "import os, time\n\
if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(300)\n        os._exit(0)\n    os._exit(0)\n\
os.wait()\nopen('ready', 'w').write('1')\ntime.sleep(300)\n";

/// The process that owns a run, as the CLI does: prints its workspace and runs [`DETACHING`]
/// until it is killed.
#[test]
fn killed_owner_helper() {
    if std::env::var_os(KILLED_OWNER).is_none() {
        return;
    }
    let f = engine_fixture();
    println!("WORKSPACE {}", f.workspace.display());
    let mut captured = sandbox_core::Captured::default();
    let io = RunIo {
        stdin: Stdin::Null,
        output: Output::Sink(&mut captured),
        status: None,
        published: None,
        started: None,
    };
    let _ = f.engine.run(&spec(&f, DETACHING), io);
}

fn killed_owner_leaves_nothing() {
    let exe = std::env::current_exe().unwrap();
    let mut owner = std::process::Command::new(exe)
        .args(["--exact", "fault::killed_owner_helper", "--nocapture", "--test-threads=1"])
        .env(KILLED_OWNER, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let owner_pid = owner.id() as i32;
    let mut stdout = std::io::BufReader::new(owner.stdout.take().unwrap());
    let workspace: PathBuf = loop {
        let mut line = String::new();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "the owner printed no workspace");
        // libtest's `test NAME ... ` goes before it on the same line.
        if let Some((_, ws)) = line.trim().split_once("WORKSPACE ") {
            break ws.into();
        }
    };
    // The first run of a fresh cache prepares the environment first.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !workspace.join("ready").exists() {
        assert!(Instant::now() < deadline, "the script never wrote `ready`");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (pids, namespaces) = tree(owner_pid);
    assert!(!namespaces.is_empty(), "no process of the run in a pid namespace of its own");
    // Monitor, init, the script and its detached grandchild at least.
    assert!(pids.len() >= 4, "the run's tree: {pids:?}");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(owner_pid).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    owner.wait().unwrap();
    let left = leftovers(&pids, &namespaces, Duration::from_secs(10));
    assert!(left.is_empty(), "alive 10 s after the owner was SIGKILLed: {left:?}");
}

#[test]
fn sigkill_of_the_runs_owner_leaves_no_process() {
    super::as_root_and_rootless(
        "fault::sigkill_of_the_runs_owner_leaves_no_process",
        killed_owner_leaves_nothing,
    );
}

fn twenty_in_one_workspace() {
    let f = engine_fixture();
    let script = "import hashlib, sys\nn = int(sys.argv[1])\n\
data = hashlib.sha256(str(n).encode()).hexdigest().encode() * 4096\n\
open(f'out-{n}.bin', 'wb').write(data)\nprint(f'run {n}', len(data))\n";
    let base = spec(&f, script);
    // Each run its own engine, as twenty CLIs would be, sharing the cache and the workspace.
    let results: Vec<(i32, String, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..20)
            .map(|n| {
                let mut spec = base.clone();
                spec.args = vec![n.to_string()];
                let config = f.engine.config().clone();
                s.spawn(move || {
                    let engine = engine_native::NativeEngine::new(config).unwrap();
                    let mut captured = sandbox_core::Captured::default();
                    let io = RunIo {
                        stdin: Stdin::Null,
                        output: Output::Sink(&mut captured),
                        status: None,
                        published: None,
                        started: None,
                    };
                    let outcome = engine.run(&spec, io).unwrap();
                    (outcome.exit_code, captured.stdout_lossy(), captured.stderr_lossy())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (n, (code, out, err)) in results.iter().enumerate() {
        assert_eq!(*code, 0, "run {n}: {err}");
        assert_eq!(out, &format!("run {n} 262144\n"), "run {n}: {err}");
        let want = sha2_hex(n).repeat(4096);
        let got = std::fs::read(f.workspace.join(format!("out-{n}.bin"))).unwrap();
        assert!(got == want.as_bytes(), "out-{n}.bin is not what run {n} wrote");
    }
}

/// `hashlib.sha256(str(n)).hexdigest()`, by the host's `sha256sum` (no hash crate needed here).
fn sha2_hex(n: usize) -> String {
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), n.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().split_whitespace().next().unwrap().to_owned()
}

#[test]
fn twenty_parallel_runs_in_one_workspace_all_succeed() {
    super::as_root_and_rootless(
        "fault::twenty_parallel_runs_in_one_workspace_all_succeed",
        twenty_in_one_workspace,
    );
}

/// Every child forks too, forever; failures are ignored, so only the limit and the timeout
/// stop it.
const FORK_BOMB: &str =
    "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n";

fn fork_bomb_ends_the_run() {
    let f = engine_fixture();
    let mut s = spec(&f, FORK_BOMB);
    s.limits.pids = Some(64);
    s.timeout = Some(Duration::from_secs(6));
    let done = AtomicBool::new(false);
    let me = std::process::id() as i32;
    let started = Instant::now();
    let (outcome, seen, peak, slowest) = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            // Other tests of this binary run sandboxes too: the bomb's namespace is the one
            // that fills up, and only its processes count.
            let mut per_ns: BTreeMap<u64, (usize, BTreeSet<i32>)> = BTreeMap::new();
            let mut slowest = Duration::ZERO;
            while !done.load(Ordering::SeqCst) {
                let (_, namespaces) = tree(me);
                let mut now: BTreeMap<u64, BTreeSet<i32>> = BTreeMap::new();
                for (pid, (_, ns)) in processes() {
                    if let Some(ns) = ns.filter(|ns| namespaces.contains(ns)) {
                        now.entry(ns).or_default().insert(pid);
                    }
                }
                for (ns, pids) in now {
                    let seen = per_ns.entry(ns).or_default();
                    seen.0 = seen.0.max(pids.len());
                    seen.1.extend(pids);
                }
                // The host must stay responsive: a fork and exec of /bin/true.
                let t = Instant::now();
                assert!(std::process::Command::new("/bin/true").status().unwrap().success());
                slowest = slowest.max(t.elapsed());
                std::thread::sleep(Duration::from_millis(100));
            }
            let peak = per_ns.values().map(|(n, _)| *n).max().unwrap_or(0);
            let bomb = per_ns.iter().filter(|(_, (n, _))| *n == peak && peak > 0);
            let namespaces: BTreeSet<u64> = bomb.clone().map(|(ns, _)| *ns).collect();
            let pids: BTreeSet<i32> = bomb.flat_map(|(_, (_, p))| p.iter().copied()).collect();
            (pids, namespaces, peak, slowest)
        });
        let mut captured = sandbox_core::Captured::default();
        let io = RunIo {
            stdin: Stdin::Null,
            output: Output::Sink(&mut captured),
            status: None,
            published: None,
            started: None,
        };
        let outcome = f.engine.run(&s, io);
        done.store(true, Ordering::SeqCst);
        let (pids, namespaces, peak, slowest) = watcher.join().unwrap();
        (outcome, (pids, namespaces), peak, slowest)
    });
    let outcome = outcome.unwrap();
    assert!(outcome.timed_out, "the bomb ended by itself? {outcome:?}");
    assert!(started.elapsed() < Duration::from_secs(60), "the run did not end: {outcome:?}");
    assert!(!seen.1.is_empty(), "the watcher never saw the sandbox's pid namespace");
    // 64 tasks of the sandbox's user, plus the init (not counted: it runs before the limit).
    assert!(peak <= 66, "{peak} processes in the sandbox under --pids-limit 64");
    assert!(peak >= 32, "the bomb never got going ({peak} processes)");
    assert!(slowest < Duration::from_secs(2), "the host took {slowest:?} to run /bin/true");
    let left = leftovers(&seen.0, &seen.1, Duration::from_secs(10));
    assert!(left.is_empty(), "alive after the fork bomb's run ended: {left:?}");
}

#[test]
fn a_fork_bomb_under_pids_limit_64_ends_the_run_not_the_host() {
    super::as_root_and_rootless(
        "fault::a_fork_bomb_under_pids_limit_64_ends_the_run_not_the_host",
        fork_bomb_ends_the_run,
    );
}
