//! `python-sandbox session …` through the binary on every session engine available here: the
//! same CLI code (the registry and the seam) starts, finds, runs in, lists and stops sessions on
//! native, bwrap, docker and podman. An engine that is not available prints `SKIPPED: reason`; one
//! that is and fails, fails.
//!
//! `session exec -i`/`-t`: `-t` without a terminal is refused before any engine is touched;
//! `-i` pipes our stdin through the command, and `-it` run on a pty of this test (Python's
//! `pty` module driving the binary) gives the command a terminal of our size, forwards
//! resizes and Ctrl-C, and leaves our terminal as it found it.

use std::process::Command;

use insta::assert_snapshot;

use crate::{Ctx, transcript};

/// Whether `engine` works here, as `detect` tells (podman's service is started by CI).
pub(crate) fn available(ctx: &Ctx, engine: &str) -> Result<(), String> {
    let out = ctx.run(&["detect", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("detect --json printed no JSON: {e}"))?;
    let probe = json["engines"]
        .as_array()
        .and_then(|all| all.iter().find(|p| p["name"] == engine))
        .ok_or_else(|| format!("detect does not know {engine}"))?;
    if probe["available"] == true {
        Ok(())
    } else {
        Err(probe["reason"].as_str().unwrap_or("unavailable").lines().next().unwrap_or("").into())
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const WRITE_STATE: &str = "# /// script\n# dependencies = []\n# ///\nimport pathlib\npathlib.Path('/tmp/state.txt').write_text('kept')\nprint('wrote')\n";
const READ_STATE: &str = "# /// script\n# dependencies = []\n# ///\nimport os, pathlib\nprint(pathlib.Path('/tmp/state.txt').read_text(), os.environ['GREETING'])\n";
const WANTS_NET: &str = "# /// script\n# dependencies = []\n# [tool.python-sandbox]\n# net = \"on\"\n# ///\nprint('ran')\n";

// The `SKIPPED:` line is how a gated test says it did not run.
#[allow(clippy::print_stdout)]
fn lifecycle(engine: &str) {
    let ctx = Ctx::new();
    if let Err(reason) = available(&ctx, engine) {
        println!("SKIPPED: session lifecycle on {engine}: {reason}");
        return;
    }
    let start = ctx.run(&[
        "session",
        "start",
        "--engine",
        engine,
        "--net",
        "off",
        "--ttl",
        "10m",
        "--env",
        "GREETING=hello",
    ]);
    assert!(start.status.success(), "{engine}: start: {}", text(&start.stderr));
    let id = text(&start.stdout).lines().last().unwrap_or_default().trim().to_owned();
    assert!(!id.is_empty(), "{engine}: no id printed");
    let stop = || ctx.run(&["session", "stop", &id]);

    // Found by id without `--engine`, on whichever engine holds it.
    let exec = ctx.run(&["session", "exec", &id, "--", "sh", "-c", "echo $GREETING; exit 3"]);
    assert_eq!(exec.status.code(), Some(3), "{engine}: exec: {}", text(&exec.stderr));
    assert_eq!(text(&exec.stdout), "hello\n", "{engine}");

    ctx.write("write.py", WRITE_STATE);
    ctx.write("read.py", READ_STATE);
    let first = ctx.run(&["session", "run", &id, "write.py"]);
    assert!(first.status.success(), "{engine}: run: {}", text(&first.stderr));
    let second = ctx.run(&["session", "run", &id, "read.py"]);
    assert_eq!(text(&second.stdout), "kept hello\n", "{engine}: {}", text(&second.stderr));

    // A script asking for what the session lacks is refused before it runs, on every engine.
    ctx.write("net.py", WANTS_NET);
    let misfit = ctx.run(&["session", "run", &id, "net.py"]);
    assert_eq!(misfit.status.code(), Some(2), "{engine}");
    assert!(text(&misfit.stderr).contains("the session has no network"), "{engine}");
    assert!(!text(&misfit.stdout).contains("ran"), "{engine}");

    let list = ctx.run(&["session", "list", "--json", "--engine", engine]);
    let listed: serde_json::Value = serde_json::from_slice(&list.stdout).expect("list json");
    let mine = listed.as_array().and_then(|all| all.iter().find(|s| s["id"] == id.as_str()));
    assert_eq!(mine.map(|s| s["engine"].clone()), Some(engine.into()), "{listed}");

    let stopped = stop();
    assert!(stopped.status.success(), "{engine}: stop: {}", text(&stopped.stderr));
    let after = ctx.run(&["session", "exec", &id, "--", "true"]);
    assert_eq!(after.status.code(), Some(2), "{engine}");
    assert!(text(&after.stderr).contains(&format!("no session `{id}`")), "{}", text(&after.stderr));
}

#[test]
fn a_native_session_through_the_cli() {
    lifecycle("native");
}

#[test]
fn a_bwrap_session_through_the_cli() {
    lifecycle("bwrap");
}

#[test]
fn a_docker_session_through_the_cli() {
    lifecycle("docker");
}

#[test]
fn a_podman_session_through_the_cli() {
    lifecycle("podman");
}

#[test]
fn tty_without_a_terminal_is_refused_with_a_hint() {
    let ctx = Ctx::new();
    let out = ctx.run(&["session", "exec", "-t", "no-such-session", "--", "tty"]);
    assert_snapshot!(transcript(&out), @r"
    exit: 2
    --- stdout
    --- stderr
    error: `-t` needs a terminal
    hint: drop -t or run from a terminal
    ");
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_python-sandbox")
}

/// A session on `engine` in `ctx`'s directory, or `None` (after printing why) when the engine is not here.
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn session(engine: &str, ctx: &Ctx) -> Option<String> {
    let out = ctx.run(&["session", "start", "--engine", engine, "--net", "off", "--ttl", "10m"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(3) {
        println!("SKIPPED: {engine}: {}", stderr.lines().next().unwrap_or_default());
        return None;
    }
    assert_eq!(out.status.code(), Some(0), "{engine}: {stderr}");
    Some(String::from_utf8_lossy(&out.stdout).lines().last().expect("id").to_owned())
}

/// Drives `python-sandbox session exec -it` on a pty of 33x77: types a line, resizes to
/// 50x100, then runs a `sleep` that Ctrl-C ends; prints our terminal settings before and after.
const PTY_DRIVER: &str = r#"
import fcntl, os, pty, select, struct, sys, termios, time
bin, sid = sys.argv[1], sys.argv[2]
inner = "stty size; tty; read x; echo got $x; sleep 1.5; stty size; sleep 30"
pid, fd = pty.fork()
if pid == 0:
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 77, 0, 0))
    print("\n@before", termios.tcgetattr(0), flush=True)
    code = os.spawnv(os.P_WAIT, bin, [bin, "session", "exec", "-it", sid, "--", "sh", "-c", inner])
    print("\n@after", termios.tcgetattr(0), flush=True)
    print("rc", code, flush=True)
    os._exit(0)
out, steps, start = b"", 0, time.time()
while time.time() - start < 60:
    if steps == 0 and b"/dev/pts/" in out:
        os.write(fd, b"hi\r"); steps = 1
    elif steps == 1 and b"got hi" in out:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 100, 0, 0)); steps = 2
    elif steps == 2 and b"50 100" in out:
        time.sleep(0.3); os.write(fd, b"\x03"); steps = 3
    r, _, _ = select.select([fd], [], [], 0.2)
    if r:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
sys.stdout.write(out.decode(errors="replace"))
"#;

#[test]
fn session_exec_interactive_and_tty_end_to_end() {
    for engine in ["native", "bwrap", "docker", "podman"] {
        let ctx = Ctx::new();
        let Some(id) = session(engine, &ctx) else { continue };

        // -i: bytes through `wc -c` and `cat` (more than a frame and a pipe buffer), the end
        // of our stdin reaching the command, and its exit code as ours.
        let big: Vec<u8> = (0..(2 << 20) + 3).map(|i: u32| (i % 253) as u8).collect();
        let out = ctx.run_with_stdin(&["session", "exec", "-i", &id, "--", "wc", "-c"], &big);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "2097155", "{engine}: {out:?}");
        let out = ctx.run_with_stdin(&["session", "exec", "-i", &id, "--", "cat"], &big);
        assert!(out.stdout == big, "{engine}: cat gave back {} bytes", out.stdout.len());
        let script = "cat >/dev/null; echo eof; exit 4";
        let out =
            ctx.run_with_stdin(&["session", "exec", "-i", &id, "--", "sh", "-c", script], b"x");
        assert_eq!(
            (out.status.code(), out.stdout.as_slice()),
            (Some(4), &b"eof\n"[..]),
            "{engine}"
        );
        // Without -i the command's stdin is empty, as before.
        let out = ctx.run_with_stdin(&["session", "exec", &id, "--", "wc", "-c"], b"ignored");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0", "{engine}");

        // -it on a terminal of ours.
        let out = Command::new("/usr/bin/python3.11")
            .args(["-c", PTY_DRIVER, bin(), &id])
            .output()
            .expect("python3.11");
        let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
        assert!(text.contains("33 77\n/dev/pts/"), "{engine}: the size asked for: {text}");
        assert!(text.contains("got hi\n"), "{engine}: typed input: {text}");
        assert!(text.contains("50 100\n"), "{engine}: a resize: {text}");
        assert!(
            text.contains("rc 130\n"),
            "{engine}: Ctrl-C ends `sleep`, our exit is its: {text}"
        );
        let setting = |tag: &str| {
            text.lines().find(|l| l.starts_with(tag)).map(|l| l[tag.len()..].to_owned())
        };
        assert_eq!(
            setting("@before "),
            setting("@after "),
            "{engine}: our terminal restored: {text}"
        );
        assert!(setting("@before ").is_some(), "{engine}: {text}");

        let out = ctx.run(&["session", "stop", &id]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{engine}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

const FETCH: &str = "# /// script\n# dependencies = []\n# ///\nimport socket, urllib.request\n\
print(urllib.request.urlopen('https://pypi.org/simple/six/', timeout=60).status)\n\
try:\n    socket.create_connection(('pypi.org', 443), timeout=10)\n    print('direct: connected')\n\
except OSError:\n    print('direct: refused')\n";

/// The pids in `/proc`.
fn pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// `/proc/PID/WHAT`, empty when it cannot be read.
fn proc_file(pid: u32, what: &str) -> Vec<u8> {
    std::fs::read(format!("/proc/{pid}/{what}")).unwrap_or_default()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The keepers of built-in proxies started with `path` on their `PATH` (so by this test).
fn keepers(path: &str) -> Vec<u32> {
    pids()
        .into_iter()
        .filter(|pid| {
            contains(&proc_file(*pid, "cmdline"), b"__python-sandbox-proxy-keeper")
                && contains(&proc_file(*pid, "environ"), format!("PATH={path}").as_bytes())
        })
        .collect()
}

fn gone_soon(path: &str) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if keepers(path).is_empty() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

/// Without pasta (a machine without the passt package), a warm session with net on gets the
/// built-in network as a run does, served by a keeper process that outlives `session start`:
/// the relay where a tun device can be opened (https and a direct connection work, and nothing
/// is noted), else the HTTP(S) proxy (https works through it, a direct connection
/// finds no route); the keeper ends with the session, by `session stop` or by itself when the
/// sandbox is killed.
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn session_with_the_builtin_network(engine: &str) {
    let ctx = Ctx::new();
    if let Err(reason) = available(&ctx, engine) {
        println!("SKIPPED: a {engine} session without pasta: {reason}");
        return;
    }
    let bin = tempfile::tempdir().expect("tempdir");
    let path = crate::fault::path_without_pasta(bin.path());
    let env = [("PATH", path.as_str())];
    let relay = sandbox_net::relay_available();
    let start = || {
        let out = ctx.run_with_env(
            &["session", "start", "--engine", engine, "--net", "on", "--ttl", "5m"],
            &env,
        );
        assert!(out.status.success(), "{engine}: start: {}", text(&out.stderr));
        assert_eq!(
            text(&out.stderr).contains("no pasta on PATH, so the network is HTTP(S) only"),
            !relay,
            "{engine}: {}",
            text(&out.stderr)
        );
        text(&out.stdout).lines().last().unwrap_or_default().trim().to_owned()
    };
    let id = start();
    assert_eq!(keepers(&path).len(), 1, "{engine}: one keeper serves the session");
    ctx.write("fetch.py", FETCH);
    let fetched = ctx.run_with_env(&["session", "run", &id, "fetch.py"], &env);
    let direct = if relay { "connected" } else { "refused" };
    assert_eq!(
        text(&fetched.stdout),
        format!("200\ndirect: {direct}\n"),
        "{engine}: {}",
        text(&fetched.stderr)
    );
    let stopped = ctx.run_with_env(&["session", "stop", &id], &env);
    assert!(stopped.status.success(), "{engine}: stop: {}", text(&stopped.stderr));
    assert!(gone_soon(&path), "{engine}: the keeper outlived `session stop`");

    // Killed from outside, with no `session stop`: the keeper goes with it all the same.
    let id = start();
    let list = ctx.run_with_env(&["session", "list", "--json", "--engine", engine], &env);
    let listed: serde_json::Value = serde_json::from_slice(&list.stdout).expect("list json");
    let pid = listed
        .as_array()
        .and_then(|all| all.iter().find(|s| s["id"] == id.as_str()))
        .and_then(|s| s["sandbox"].as_str()?.strip_prefix("pid ")?.parse::<i32>().ok())
        .expect("the session's pid");
    assert_eq!(keepers(&path).len(), 1, "{engine}");
    let killed = Command::new("kill").args(["-KILL", &pid.to_string()]).status().expect("kill");
    assert!(killed.success(), "{engine}: kill of the session's process {pid}");
    assert!(gone_soon(&path), "{engine}: the keeper outlived its sandbox");
    let _ = ctx.run_with_env(&["session", "stop", &id], &env);
}

#[test]
fn a_native_session_without_pasta_gets_the_builtin_network() {
    session_with_the_builtin_network("native");
}

#[test]
fn a_bwrap_session_without_pasta_gets_the_builtin_network() {
    session_with_the_builtin_network("bwrap");
}

/// A tightening a session does not hold is refused, never run without (exit 2, the
/// `session start` flags that fit): the script's `net = "off"` in a session with a network, a
/// memory limit below the session's. A cap the session holds (its own is lower) runs.
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn tightenings_a_session_cannot_give(engine: &str) {
    let ctx = Ctx::new();
    if let Err(reason) = available(&ctx, engine) {
        println!("SKIPPED: tightenings in a {engine} session: {reason}");
        return;
    }
    let start = ["session", "start", "--engine", engine, "--net", "on", "--memory", "512m"];
    let out = ctx.run(&[&start[..], &["--ttl", "5m"]].concat());
    assert!(out.status.success(), "{engine}: start: {}", text(&out.stderr));
    let id = text(&out.stdout).lines().last().unwrap_or_default().trim().to_owned();
    let sandbox = |body: &str| {
        format!("# /// script\n# [tool.python-sandbox]\n{body}# ///\nopen('ran', 'a').write('x')\n")
    };

    ctx.write("off.py", &sandbox("# net = \"off\"\n"));
    let out = ctx.run(&["session", "run", &id, "off.py"]);
    let refused = format!(
        "exit: 2\n--- stdout\n--- stderr\nerror: session `{id}` cannot run this script as it asks, so nothing was run:\n"
    );
    assert_eq!(
        transcript(&out),
        format!(
            "{refused}  - `net = \"off\"`: the session has a network\nhint: start a session that fits, `python-sandbox session start --net off`, or run it on its own with `python-sandbox run`\n"
        ),
        "{engine}"
    );

    ctx.write("mem.py", &sandbox("# net = \"on\"\n# memory = \"256m\"\n"));
    let out = ctx.run(&["session", "run", &id, "mem.py"]);
    assert_eq!(
        transcript(&out),
        format!(
            "{refused}  - `memory = \"256m\"`: the session's memory limit is \"512m\", higher\nhint: start a session that fits, `python-sandbox session start --net on --memory 256m`, or run it on its own with `python-sandbox run`\n"
        ),
        "{engine}"
    );
    assert!(!ctx.path().join("ran").exists(), "{engine}: a refused script ran");

    ctx.write("fits.py", &sandbox("# memory = \"1g\"\n"));
    let out = ctx.run(&["session", "run", &id, "fits.py"]);
    assert_eq!(out.status.code(), Some(0), "{engine}: {}", transcript(&out));
    assert_eq!(ctx.read("ran"), "x", "{engine}");

    let stopped = ctx.run(&["session", "stop", &id]);
    assert!(stopped.status.success(), "{engine}: stop: {}", text(&stopped.stderr));
}

#[test]
fn a_native_session_refuses_tightenings_it_cannot_give() {
    tightenings_a_session_cannot_give("native");
}

#[test]
fn a_bwrap_session_refuses_tightenings_it_cannot_give() {
    tightenings_a_session_cannot_give("bwrap");
}

#[test]
fn a_docker_session_refuses_tightenings_it_cannot_give() {
    tightenings_a_session_cannot_give("docker");
}

#[test]
fn a_podman_session_refuses_tightenings_it_cannot_give() {
    tightenings_a_session_cannot_give("podman");
}

/// Where `secret` shows on this host outside a sandbox: the command line of any process (what
/// every local user reads in `/proc`), or the environment of a process in our own pid namespace
/// (a sandbox's own processes, in theirs, hold it by design). Processes we may not inspect
/// are not ours to worry about: their environment is closed to us as to every other user.
fn shown(secret: &str) -> Vec<String> {
    let our_ns = std::fs::read_link("/proc/self/ns/pid").ok();
    let mut found = Vec::new();
    for pid in pids().into_iter().filter(|pid| *pid != std::process::id()) {
        let comm = String::from_utf8_lossy(&proc_file(pid, "comm")).trim().to_owned();
        if contains(&proc_file(pid, "cmdline"), secret.as_bytes()) {
            found.push(format!("the command line of {pid} ({comm})"));
        }
        let same_ns = std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok() == our_ns;
        if same_ns && contains(&proc_file(pid, "environ"), secret.as_bytes()) {
            found.push(format!("the environment of {pid} ({comm})"));
        }
    }
    found
}

/// A warm session lives for its TTL: no process of it shows a `--env NAME=VALUE` value to other
/// users (the native session's monitor and init are forked from `session start` and once kept
/// its command line; bwrap kept the sandbox's environment in its own, readable by every process
/// of nobody's uid for a root caller), and neither does a running `run`.
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn no_secret_in_host_processes(engine: &str) {
    let ctx = Ctx::new();
    if let Err(reason) = available(&ctx, engine) {
        println!("SKIPPED: secrets in host processes on {engine}: {reason}");
        return;
    }
    let secret = format!("argv-secret-{engine}-{}", std::process::id());
    let env = format!("API_TOKEN={secret}");
    for net in ["on", "off"] {
        let args =
            ["session", "start", "--engine", engine, "--net", net, "--ttl", "5m", "--env", &env];
        let start = ctx.run(&args);
        assert!(start.status.success(), "{engine}: start: {}", text(&start.stderr));
        let id = text(&start.stdout).lines().last().unwrap_or_default().trim().to_owned();
        let exec = ctx.run(&["session", "exec", &id, "--", "sh", "-c", "echo $API_TOKEN"]);
        let seen = shown(&secret);
        let _ = ctx.run(&["session", "stop", &id]);
        assert_eq!(text(&exec.stdout), "****\n", "{engine}: the session has the value, masked");
        assert!(seen.is_empty(), "{engine}, net {net}: the session's value shows in {seen:?}");
    }

    ctx.write("wait.py", "import time\nprint('ready', flush=True)\ntime.sleep(30)\n");
    let mut run = Command::new(bin())
        .args(["run", "--engine", engine, "--net", "on", "--env", &env, "wait.py"])
        .current_dir(ctx.path())
        .env("NO_COLOR", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run");
    let mut line = String::new();
    let stdout = run.stdout.take().expect("stdout");
    let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
    let seen = shown(&secret);
    let _ = run.kill();
    let _ = run.wait();
    assert_eq!(line, "ready\n", "{engine}: the run started");
    assert!(seen.is_empty(), "{engine}: a running `run`'s value shows in {seen:?}");
}

#[test]
fn no_native_session_shows_a_secret() {
    no_secret_in_host_processes("native");
}

#[test]
fn no_bwrap_session_shows_a_secret() {
    no_secret_in_host_processes("bwrap");
}

#[test]
fn no_docker_session_shows_a_secret() {
    no_secret_in_host_processes("docker");
}

#[test]
fn no_podman_session_shows_a_secret() {
    no_secret_in_host_processes("podman");
}

/// `session start --with DEP`, with the network off: the dependency is in the session's
/// environment when `start` returns (installed with a network apart from the session and
/// copied in), and `python3` in it is that environment's before any `session run` (it was the
/// image's or the host's interpreter until the first script made the venv).
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn started_with_a_dependency(engine: &str) {
    let ctx = Ctx::new();
    if let Err(reason) = available(&ctx, engine) {
        println!("SKIPPED: session start --with on {engine}: {reason}");
        return;
    }
    let start = ["session", "start", "--engine", engine, "--net", "off", "--with", "six"];
    let out = ctx.run(&[&start[..], &["--ttl", "5m"]].concat());
    assert!(out.status.success(), "{engine}: start: {}", text(&out.stderr));
    let id = text(&out.stdout).lines().last().unwrap_or_default().trim().to_owned();
    let probe = "import six, sys; print(sys.prefix, sys.executable)";
    let ran = ctx.run(&["session", "exec", &id, "--", "python3", "-c", probe]);
    let _ = ctx.run(&["session", "stop", &id]);
    assert_eq!(
        text(&ran.stdout),
        "/home/sandbox/.venv /home/sandbox/.venv/bin/python3\n",
        "{engine}: {}",
        text(&ran.stderr)
    );
}

#[test]
fn a_native_session_starts_with_its_dependency_and_its_own_python() {
    started_with_a_dependency("native");
}

#[test]
fn a_docker_session_starts_with_its_dependency_and_its_own_python() {
    started_with_a_dependency("docker");
}

#[test]
fn a_podman_session_starts_with_its_dependency_and_its_own_python() {
    started_with_a_dependency("podman");
}
