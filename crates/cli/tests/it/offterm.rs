//! What `run` and `session run` print when stderr is not a terminal (Claude Code's Bash, a
//! log), on every local engine here: a line per long step of getting the script going
//! (nothing on a warm run), a closing `note:` naming the files the script wrote and deleted
//! (nothing when it changed none), and, when the network is off and the script failed on a
//! name lookup, a `note:` saying so with the way to turn it on. On a terminal a run is as
//! before: the script keeps the terminal and nothing is added. The home of each test is fresh,
//! so its first run prepares an environment (the cache lives below it).

use std::process::{Command, Output, Stdio};

use crate::Ctx;

/// Installs one small package, writes `out.txt` and deletes `gone.txt` if it is there.
const WITH_DEPENDENCY: &str = "# /// script\n# dependencies = [\"six\"]\n# ///\nimport os, six\nopen('out.txt', 'w').write(six.__version__)\nif os.path.exists('gone.txt'):\n    os.remove('gone.txt')\nprint('ran')\n";

/// Looks up a registry's name: with the network off, the lookup fails.
const LOOKUP: &str = "import socket\nsocket.getaddrinfo('pypi.org', 443)\n";

/// Engines that keep their environments below `$HOME`, where a fresh home means a first run.
const LOCAL: [&str; 2] = ["native", "bwrap"];

/// `python-sandbox ARGS` in `ctx` with `home` as `HOME`, both streams pipes.
fn run(ctx: &Ctx, home: &std::path::Path, args: &[&str]) -> Output {
    ctx.run_with_env(args, &[("HOME", home.to_str().expect("utf-8 home"))])
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Whether `engine` works here; if not, the `SKIPPED:` line.
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn here(ctx: &Ctx, engine: &str, what: &str) -> bool {
    match crate::session::available(ctx, engine) {
        Ok(()) => true,
        Err(reason) => {
            println!("SKIPPED: {what} on {engine}: {reason}");
            false
        }
    }
}

/// `test` on each of [`LOCAL`] that works here, each in a scratch directory with a fresh home.
fn on_each_engine(what: &str, test: impl Fn(&str, &Ctx, &std::path::Path)) {
    for engine in LOCAL {
        let ctx = Ctx::new();
        if here(&ctx, engine, what) {
            let home = tempfile::tempdir().expect("home");
            test(engine, &ctx, home.path());
        }
    }
}

#[test]
fn a_run_off_a_terminal_prints_its_steps_and_the_files_it_changed() {
    on_each_engine("run off a terminal", |engine, ctx, home| {
        ctx.write("s.py", WITH_DEPENDENCY);
        ctx.write("gone.txt", "x");
        let args = ["run", "--engine", engine, "s.py"];
        let first = run(ctx, home, &args);
        let stderr = text(&first.stderr);
        assert_eq!(
            (first.status.code(), text(&first.stdout).as_str()),
            (Some(0), "ran\n"),
            "{engine}: {stderr}"
        );
        // Fetching uv happens only where none is on PATH; the interpreter's line names versions.
        let lines: Vec<&str> = stderr.lines().collect();
        let prepare = lines.iter().position(|l| l.starts_with("preparing python "));
        assert!(prepare.is_some(), "{engine}: {stderr}");
        let steps: Vec<&str> = lines[prepare.map_or(0, |p| p + 1)..].to_vec();
        assert_eq!(
            steps,
            [
                "resolving 1 dependency",
                "downloading and installing 1 package",
                "note: files written: out.txt; files deleted: gone.txt",
            ],
            "{engine}: {stderr}"
        );
        assert!(
            lines[..prepare.unwrap_or(0)].iter().all(|l| l.starts_with("uv is not on PATH")),
            "{engine}: {stderr}"
        );

        // Warm: no step, only what changed.
        let warm = run(ctx, home, &args);
        assert_eq!(text(&warm.stderr), "note: files written: out.txt\n", "{engine}");
        // Nothing changed (in the same, warm, environment), nothing said.
        ctx.write("quiet.py", "# /// script\n# dependencies = [\"six\"]\n# ///\nprint('quiet')\n");
        let quiet = run(ctx, home, &["run", "--engine", engine, "quiet.py"]);
        assert_eq!(
            (text(&quiet.stdout).as_str(), text(&quiet.stderr).as_str()),
            ("quiet\n", ""),
            "{engine}"
        );
        // `--json` lists the files in its summary instead.
        let json = run(ctx, home, &["run", "--json", "--engine", engine, "s.py"]);
        let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("one JSON object");
        assert_eq!(v["files_written"], serde_json::json!(["out.txt"]), "{engine}: {v}");
        assert!(!text(&json.stderr).contains("note:"), "{engine}: {}", text(&json.stderr));
    });
}

#[test]
fn a_run_without_a_network_that_fails_on_a_lookup_says_why() {
    const NOTE: &str = "note: the network is off in this sandbox, so the script's name lookups and connections fail\n";
    on_each_engine("the network note", |engine, ctx, home| {
        ctx.write("lookup.py", LOOKUP);
        let out = run(ctx, home, &["run", "--engine", engine, "--net", "off", "lookup.py"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{engine}: {stderr}");
        assert!(stderr.contains("socket.gaierror"), "{engine}: {stderr}");
        assert!(
            stderr.ends_with(&format!(
                "{NOTE}hint: to give it a network, run it with `--net on` instead of `--net off`\n"
            )),
            "{engine}: {stderr}"
        );
        // Off in the script's own table: the hint names both ways.
        ctx.write(
            "table.py",
            &format!("# /// script\n# [tool.python-sandbox]\n# net = \"off\"\n# ///\n{LOOKUP}"),
        );
        let out = run(ctx, home, &["run", "--engine", engine, "table.py"]);
        let stderr = text(&out.stderr);
        assert!(
            stderr.ends_with(&format!("{NOTE}hint: to give it a network, run it with `--net on`, or set `net = \"on\"` in its `[tool.python-sandbox]` table\n")),
            "{engine}: {stderr}"
        );
        // No note where the network is not the reason: a refused connection on the sandbox's own
        // loopback (which works with the network off), a lookup the script survived, another
        // failure, the same failure with the network on.
        let quiet = [
            ("refused.py", "import socket\nsocket.create_connection(('127.0.0.1', 9))\n", "off"),
            (
                "caught.py",
                &format!(
                    "try:\n    {}\nexcept OSError as e:\n    print(e)\n",
                    LOOKUP.replace('\n', "\n    ").trim_end()
                ),
                "off",
            ),
            ("other.py", "1/0\n", "off"),
            (
                "online.py",
                "import socket\nprint('Temporary failure in name resolution')\n1/0\n",
                "on",
            ),
        ];
        for (name, code, net) in quiet {
            ctx.write(name, code);
            let out = run(ctx, home, &["run", "--engine", engine, "--net", net, name]);
            let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
            assert!(!all.contains("network is off"), "{engine} {name}: {all}");
        }
    });
}

/// On a terminal the run is what it was: the script's streams are the terminal (even with
/// the network off, where the note would need them to pass through us) and no line is added.
#[test]
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn a_run_on_a_terminal_keeps_it_and_adds_nothing() {
    const PYTHON: &str = "/usr/bin/python3.11";
    if !std::path::Path::new(PYTHON).exists() {
        println!("SKIPPED: a run on a terminal: no {PYTHON}");
        return;
    }
    let ctx = Ctx::new();
    if !here(&ctx, "native", "a run on a terminal") {
        return;
    }
    ctx.write("t.py", "import os\nopen('made.txt', 'w')\nprint('tty', os.isatty(1), os.isatty(2))\nprint('ready')\nimport socket\nsocket.getaddrinfo('pypi.org', 443)\n");
    let out = Command::new(PYTHON)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pty_modes.py"))
        .args([
            "wait",
            env!("CARGO_BIN_EXE_python-sandbox"),
            "run",
            "--engine",
            "native",
            "--net",
            "off",
            "t.py",
        ])
        .current_dir(ctx.path())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run the pty driver");
    let transcript = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(transcript.contains("status=1"), "{transcript}");
    assert!(transcript.contains("tty True True"), "{transcript}");
    assert!(!transcript.contains("note:"), "{transcript}");
    assert!(ctx.path().join("made.txt").exists(), "{transcript}");
}

#[test]
fn a_session_run_off_a_terminal_prints_its_install_and_the_files_it_changed() {
    on_each_engine("session run off a terminal", |engine, ctx, home| {
        let start = |net: &str| {
            let out = run(
                ctx,
                home,
                &["session", "start", "--engine", engine, "--net", net, "--ttl", "5m"],
            );
            assert!(out.status.success(), "{engine}: {}", text(&out.stderr));
            text(&out.stdout).lines().last().expect("an id").to_owned()
        };
        let id = start("on");
        ctx.write("s.py", WITH_DEPENDENCY);
        ctx.write("gone.txt", "x");
        let first = run(ctx, home, &["session", "run", &id, "s.py"]);
        let second = run(ctx, home, &["session", "run", &id, "s.py"]);
        let _ = run(ctx, home, &["session", "stop", &id]);
        assert_eq!(text(&first.stdout), "ran\n", "{engine}: {}", text(&first.stderr));
        assert_eq!(
            text(&first.stderr),
            "installing 1 dependency in the session\nnote: files written: out.txt; files deleted: gone.txt\n",
            "{engine}"
        );
        assert_eq!(text(&second.stderr), "note: files written: out.txt\n", "{engine}");

        let id = start("off");
        ctx.write("lookup.py", LOOKUP);
        let out = run(ctx, home, &["session", "run", &id, "lookup.py"]);
        let _ = run(ctx, home, &["session", "stop", &id]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{engine}: {stderr}");
        assert!(
            stderr.ends_with("note: the network is off in this sandbox, so the script's name lookups and connections fail\nhint: the session was started with the network off: start one with `python-sandbox session start --net on`\n"),
            "{engine}: {stderr}"
        );
    });
}

/// Appends an fsmonitor to the workspace's `.git/config`, which the host would run later.
const GIT_CONFIG: &str =
    "with open('.git/config', 'a') as f:\n    f.write('[core]\\n\\tfsmonitor = id\\n')\n";

/// Off a terminal, a script refused a protected path gets a `note:` naming it and the mount
/// that widens, by `run` (network on, nothing to mask: the output passed through the CLI only
/// for `--json` before) and by `session run`; the file is left as it was.
#[test]
fn a_refused_protected_path_is_named_off_a_terminal() {
    const NOTE: &str = "note: the script was refused writing `.git/config`: protected paths are read-only in every sandbox";
    const HINT: &str = "hint: to let a script write it on purpose, mount it read-write: `--mount ./.git:rw --approve`\n";
    on_each_engine("the protected path note", |engine, ctx, home| {
        std::fs::create_dir_all(ctx.path().join(".git")).expect(".git");
        ctx.write(".git/config", "[core]\n\tbare = false\n");
        ctx.write("git.py", GIT_CONFIG);
        let out = run(ctx, home, &["run", "--engine", engine, "git.py"]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{engine}: {stderr}");
        assert!(stderr.contains(NOTE) && stderr.contains(HINT), "{engine}: {stderr}");

        let start = ["session", "start", "--engine", engine, "--ttl", "5m"];
        let started = run(ctx, home, &start);
        assert!(started.status.success(), "{engine}: {}", text(&started.stderr));
        let id = text(&started.stdout).lines().last().expect("an id").to_owned();
        let out = run(ctx, home, &["session", "run", &id, "git.py"]);
        let _ = run(ctx, home, &["session", "stop", &id]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{engine}: {stderr}");
        assert!(stderr.contains(NOTE) && stderr.contains(HINT), "{engine}: session: {stderr}");
        assert_eq!(ctx.read(".git/config"), "[core]\n\tbare = false\n", "{engine}");
    });
}
