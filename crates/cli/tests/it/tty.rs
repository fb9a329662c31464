//! The caller's terminal after a run (item 16 of issue 30): a script given our terminal
//! that turns echo and canonical input off must not leave them off, however the run ends:
//! by itself, killed by a signal, at its timeout, by a Ctrl-C typed on the terminal, or by
//! SIGTERM or SIGHUP to the CLI. Driven on a real pseudo-terminal, the command's
//! controlling terminal, by `tests/pty_modes.py` (Debian's Python; its `pty` and `termios`
//! modules). A session's `exec -i -t` is checked the same way.

use std::process::Command;

use crate::Ctx;

/// The interpreter of the driver.
const PYTHON: &str = "/usr/bin/python3.11";

/// Turns echo and canonical input off on its stdin (the terminal), says `ready`, then
/// exits, kills itself (`kill`) or sleeps (`sleep`).
const ECHO_OFF: &str = "import os, signal, sys, termios, time
modes = termios.tcgetattr(0)
modes[3] &= ~(termios.ECHO | termios.ICANON)
termios.tcsetattr(0, termios.TCSANOW, modes)
print('ready', flush=True)
how = sys.argv[1] if len(sys.argv) > 1 else 'exit'
if how == 'kill':
    os.kill(os.getpid(), signal.SIGKILL)
if how == 'sleep':
    time.sleep(60)
";

/// The terminal's modes after `argv` ran on it, ended `how`; and the driver's report.
fn modes_after(ctx: &Ctx, how: &str, argv: &[&str]) -> (String, String) {
    let out = Command::new(PYTHON)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pty_modes.py"))
        .arg(how)
        .arg(env!("CARGO_BIN_EXE_python-sandbox"))
        .args(argv)
        .current_dir(ctx.path())
        .env("NO_COLOR", "1")
        .output()
        .expect("run the pty driver");
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    let transcript = format!("{report}{}", String::from_utf8_lossy(&out.stderr));
    (report.lines().next().unwrap_or_default().to_owned(), transcript)
}

const RESTORED: &str = "echo=on icanon=on isig=on";

#[test]
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn a_run_gives_the_terminal_back_as_it_found_it() {
    if !std::path::Path::new(PYTHON).exists() {
        println!("SKIPPED: terminal modes: no {PYTHON}");
        return;
    }
    let ctx = Ctx::new();
    ctx.write("echo_off.py", ECHO_OFF);
    let mut ran = false;
    for engine in ["native", "bwrap"] {
        if let Err(reason) = crate::session::available(&ctx, engine) {
            println!("SKIPPED: terminal modes on {engine}: {reason}");
            continue;
        }
        ran = true;
        let cases: [(&str, &[&str], &str); 6] = [
            ("wait", &[], "status=0"),
            ("wait", &["--", "kill"], "status=137"),
            ("wait", &["--", "sleep"], "status=124"),
            ("ctrl-c", &["--", "sleep"], "status=130"),
            ("sigterm", &["--", "sleep"], "status=143"),
            ("sighup", &["--", "sleep"], "status=129"),
        ];
        for (how, script_args, status) in cases {
            let mut argv = vec!["run", "--engine", engine, "--timeout", "5", "echo_off.py"];
            argv.extend(script_args);
            let (modes, transcript) = modes_after(&ctx, how, &argv);
            assert_eq!(modes, RESTORED, "{engine} {how} {argv:?}:\n{transcript}");
            assert!(transcript.contains(status), "{engine} {how}:\n{transcript}");
        }
    }
    if !ran {
        return;
    }
    // A session's interactive exec puts our terminal in raw mode and back; what the
    // command does to its own pty stays there.
    let Ok(()) = crate::session::available(&ctx, "native") else { return };
    let started = ctx.run(&["session", "start", "--engine", "native", "--ttl", "2m"]);
    let text = String::from_utf8_lossy(&started.stdout).into_owned();
    let id = text.lines().last().expect("an id").trim().to_owned();
    let code = ECHO_OFF.replace("sys.argv[1] if len(sys.argv) > 1 else 'exit'", "'sleep'");
    for how in ["sigterm", "ctrl-c"] {
        let argv = ["session", "exec", "-i", "-t", &id, "--", "python3", "-c", &code];
        let (modes, transcript) = modes_after(&ctx, how, &argv);
        assert_eq!(modes, RESTORED, "session exec -it, {how}:\n{transcript}");
    }
    let stopped = ctx.run(&["session", "stop", &id]);
    assert!(stopped.status.success(), "{}", crate::transcript(&stopped));
}
