//! Job control at a terminal, as a shell does it: Ctrl-Z is SIGTSTP to the foreground process
//! group (the CLI and what it forked there), `fg` is SIGCONT to it. On native the script, which
//! leads a session of its own inside the sandbox, must stop and go on with the CLI: a stopped
//! job whose script kept running would write over the shell's prompt and keep its resources.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

/// Writes its pid, then a line per 50 ms to `ticks` for 4 s.
const TICKING: &str = "import os, time\n\
open('pid.tmp', 'w').write(str(os.getpid()))\nos.rename('pid.tmp', 'pid')\n\
with open('ticks', 'a') as f:\n    for i in range(80):\n        f.write('tick\\n'); f.flush(); time.sleep(0.05)\n\
print('finished')\n";

/// The state letter of `/proc/PID/stat` (`T` stopped), as the host sees it.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next())
}

fn ticks(dir: &std::path::Path) -> usize {
    std::fs::read_to_string(dir.join("ticks")).map(|t| t.lines().count()).unwrap_or(0)
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn ctrl_z_stops_the_script_and_fg_continues_it_on_native() {
    let ctx = super::Ctx::new();
    ctx.write("empty.py", "\n");
    if !ctx.run(&["run", "--engine", "native", "empty.py"]).status.success() {
        println!("SKIPPED: native cannot run a sandbox here");
        return;
    }
    ctx.write("tick.py", TICKING);
    let mut cli = Command::new(env!("CARGO_BIN_EXE_python-sandbox"));
    // Its own process group, as a shell puts each job in one.
    std::os::unix::process::CommandExt::process_group(&mut cli, 0);
    let cli = cli
        .args(["run", "--engine", "native", "--net", "off", "tick.py"])
        .current_dir(ctx.path())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn python-sandbox");
    let group = Pid::from_raw(cli.id() as i32).expect("pid");
    // A failed assertion leaves no stopped job behind (the sandbox dies with the CLI).
    struct Reap(Pid);
    impl Drop for Reap {
        fn drop(&mut self) {
            if std::thread::panicking() {
                let _ = rustix::process::kill_process_group(self.0, Signal::KILL);
            }
        }
    }
    let _reap = Reap(group);
    wait_for("the script never wrote its pid", || ctx.path().join("pid").exists());
    // The pid the script saw is its pid namespace's; find the host's by its ticks file.
    let inner: i32 = ctx.read("pid").trim().parse().expect("pid");
    assert!(inner > 1, "the script runs under the sandbox's init");
    let script = std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .find(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let nspid = status.lines().find(|l| l.starts_with("NSpid:")).unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            nspid.split_whitespace().last() == Some(&inner.to_string())
                && String::from_utf8_lossy(&cmdline).contains("tick.py")
        })
        .expect("the script's host pid");

    // Ctrl-Z.
    rustix::process::kill_process_group(group, Signal::TSTP).expect("SIGTSTP");
    wait_for("the script did not stop with the job", || state(script) == Some('T'));
    let stopped_at = ticks(ctx.path());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(ticks(ctx.path()), stopped_at, "the script kept ticking in a stopped job");

    // `fg`.
    rustix::process::kill_process_group(group, Signal::CONT).expect("SIGCONT");
    wait_for("the script did not go on with the job", || ticks(ctx.path()) > stopped_at);
    let out = cli.wait_with_output().expect("the run");
    assert_eq!(
        (out.status.code(), String::from_utf8_lossy(&out.stdout).trim()),
        (Some(0), "finished"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ticks(ctx.path()), 80, "every tick, once");
}
