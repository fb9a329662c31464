//! A case is data: a script, flags, an optional setup and an expectation. This module runs one case
//! on one engine and turns the run into a list of failure reasons, applying the checks every run
//! gets (no secret in any output, no host change outside the expected set, no surviving process,
//! no connection to a host socket) on top of the case's own.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cli::{During, Invocation, Output, Running};
use crate::fixture::{self, Fixture, Shared};

/// The script body: a file under tests/cases, or inline text for one-liners.
#[derive(Clone, Copy)]
pub(crate) enum Script {
    File(&'static str),
    Inline(&'static str),
}

pub(crate) type HostCheck = fn(&Fixture, &Run) -> Result<(), String>;
pub(crate) type DuringRun = fn(&Fixture, &Running<'_>) -> Result<(), String>;

#[derive(Clone, Copy)]
pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) script: Script,
    /// The TOML inside `# /// script`, without the `# ` prefixes.
    pub(crate) meta: Option<&'static str>,
    /// `run` flags between `--engine NAME` and the script.
    pub(crate) flags: fn(&Fixture) -> Vec<String>,
    /// Arguments after `--`.
    pub(crate) args: fn(&Fixture) -> Vec<String>,
    /// Extra or overriding variables for the CLI's environment.
    pub(crate) env: fn(&Fixture) -> Vec<(String, String)>,
    /// Host-side preparation before the snapshot (e.g. symlinks in the workspace).
    pub(crate) setup: fn(&Fixture) -> Result<(), String>,
    /// Host-side action while the run is in progress, given the CLI's pid; the flag turns true
    /// when the CLI exited.
    pub(crate) during: Option<DuringRun>,
    pub(crate) expect: fn(&Fixture) -> Expect,
    /// The runner kills the CLI after this long; generous, the expectation can be tighter.
    pub(crate) deadline_secs: u64,
    /// Runs only on engines `detect` reports unavailable (the exit-3 path).
    pub(crate) unavailable_only: bool,
    /// Engines the case applies to; `None`: all.
    pub(crate) only_on: Option<&'static [&'static str]>,
    /// Engines the case cannot apply to, each with the reason the report prints (a pod sees no
    /// host path, for one): data, so that every skip is named and reviewed here.
    pub(crate) skip_on: &'static [(&'static str, &'static str)],
    /// The script goes in on stdin, as `run -`, instead of as `case.py`.
    pub(crate) stdin_script: bool,
    /// The CLI's stderr goes to this file in the workspace (as `2>FILE` would), not to a pipe.
    pub(crate) stderr_to: Option<&'static str>,
    /// The runner closes the CLI's stdout after this many lines, as `| head -N` does.
    pub(crate) stdout_lines: Option<usize>,
    /// `session start` with the same flags instead of `run` (no script): the boundary table
    /// runs both ways, since the two commands once resolved specs differently.
    pub(crate) session_start: bool,
    /// Runs the CLI through this command (see `cli::Invocation::wrap`).
    pub(crate) wrap: &'static [&'static str],
    /// The script runs in a warm session (`session run ID case.py`) started with these flags
    /// (`session start --engine E FLAGS`), stopped after; a start that fails is what the
    /// expectation judges.
    pub(crate) in_session: Option<fn(&Fixture) -> Vec<String>>,
}

pub(crate) const BASE: Case = Case {
    name: "",
    script: Script::Inline(""),
    meta: None,
    flags: no_strings,
    args: no_strings,
    env: no_env,
    setup: no_setup,
    during: None,
    expect: ok,
    deadline_secs: 120,
    unavailable_only: false,
    only_on: None,
    skip_on: &[],
    stdin_script: false,
    stderr_to: None,
    stdout_lines: None,
    session_start: false,
    wrap: &[],
    in_session: None,
};

pub(crate) fn no_strings(_: &Fixture) -> Vec<String> {
    Vec::new()
}

fn no_env(_: &Fixture) -> Vec<(String, String)> {
    Vec::new()
}

fn no_setup(_: &Fixture) -> Result<(), String> {
    Ok(())
}

fn ok(_: &Fixture) -> Expect {
    Expect::ok()
}

pub(crate) struct Expect {
    pub(crate) exit: i32,
    /// Other acceptable exit codes, where the contract allows two readings.
    pub(crate) exit_also: Vec<i32>,
    /// The script must print `DONE`.
    pub(crate) done: bool,
    /// Substrings of the script's stdout (our stdout, or our stderr with `--json`).
    pub(crate) out_has: Vec<String>,
    pub(crate) out_lacks: Vec<String>,
    /// Substrings of the CLI's stderr.
    pub(crate) err_has: Vec<String>,
    /// stderr carries a `case.py:LINE:COL: error` diagnostic.
    pub(crate) err_location: bool,
    /// Exactly these host changes (`+ws/out.txt`, `-...`, `~...`), relative to the case root, or
    /// `tmp/...` in the host temp dir.
    pub(crate) changes: Vec<String>,
    /// How long the host may take to reach [`Expect::changes`] after the CLI exited: what a
    /// CLI killed with SIGKILL cannot clean up itself is cleaned by a process it left for
    /// that (the placeholders' janitor, once the sandbox is gone).
    pub(crate) settle: Duration,
    pub(crate) within: Option<Duration>,
    /// Whether the runner's 127.0.0.1 listener must have got a connection; `None`: either.
    pub(crate) loopback: Option<bool>,
    /// Whether the runner's abstract unix socket must have got a connection; `None`: either.
    pub(crate) abstract_socket: Option<bool>,
    pub(crate) host: Vec<HostCheck>,
}

impl Expect {
    pub(crate) fn ok() -> Expect {
        Expect {
            exit: 0,
            exit_also: Vec::new(),
            done: true,
            out_has: Vec::new(),
            out_lacks: Vec::new(),
            err_has: Vec::new(),
            err_location: false,
            changes: Vec::new(),
            settle: Duration::ZERO,
            within: None,
            loopback: None,
            abstract_socket: None,
            host: Vec::new(),
        }
    }

    /// A run that ends with `code` before printing `DONE`.
    pub(crate) fn exit(code: i32) -> Expect {
        Expect { exit: code, done: false, ..Expect::ok() }
    }

    pub(crate) fn or_exit(mut self, code: i32) -> Expect {
        self.exit_also.push(code);
        self
    }

    pub(crate) fn has(mut self, s: impl Into<String>) -> Expect {
        self.out_has.push(s.into());
        self
    }

    pub(crate) fn lacks(mut self, s: impl Into<String>) -> Expect {
        self.out_lacks.push(s.into());
        self
    }

    pub(crate) fn err(mut self, s: impl Into<String>) -> Expect {
        self.err_has.push(s.into());
        self
    }

    pub(crate) fn located(mut self) -> Expect {
        self.err_location = true;
        self
    }

    pub(crate) fn changes(mut self, c: &[&str]) -> Expect {
        self.changes.extend(c.iter().map(|s| s.to_string()));
        self
    }

    pub(crate) fn settle(mut self, secs: u64) -> Expect {
        self.settle = Duration::from_secs(secs);
        self
    }

    pub(crate) fn within(mut self, secs: u64) -> Expect {
        self.within = Some(Duration::from_secs(secs));
        self
    }

    pub(crate) fn loopback(mut self, connected: bool) -> Expect {
        self.loopback = Some(connected);
        self
    }

    pub(crate) fn abstract_socket(mut self, connected: bool) -> Expect {
        self.abstract_socket = Some(connected);
        self
    }

    pub(crate) fn host(mut self, check: HostCheck) -> Expect {
        self.host.push(check);
        self
    }
}

/// What a host check sees of the run.
pub(crate) struct Run {
    pub(crate) out: Output,
    /// The script's stdout: ours, or our stderr with `--json`.
    pub(crate) script_out: String,
    /// The `--json` object, when the flag was given and the script ran.
    pub(crate) json: Option<Value>,
}

pub(crate) struct Verdict {
    pub(crate) failures: Vec<String>,
    pub(crate) elapsed: Duration,
    /// Command, exit, outputs: printed only for failures.
    pub(crate) transcript: String,
    pub(crate) kept: Vec<PathBuf>,
}

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cases")
}

/// Metadata block, then the shared prelude, then the body.
pub(crate) fn script_text(case: &Case) -> Result<String, String> {
    let read = |name: &str| {
        let path = cases_dir().join(name);
        fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let body = match case.script {
        Script::File(f) => read(f)?,
        Script::Inline(s) => s.to_string(),
    };
    let mut text = String::new();
    if let Some(meta) = case.meta {
        text.push_str("# /// script\n");
        for line in meta.lines() {
            text.push_str(if line.is_empty() { "#" } else { "# " });
            text.push_str(line);
            text.push('\n');
        }
        text.push_str("# ///\n");
    }
    text.push_str(&read("_prelude.py")?);
    text.push_str(&body);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

pub(crate) fn run_case(case: &Case, engine: &str, shared: &Shared, bin: &Path) -> Verdict {
    let mut fx = match Fixture::new(engine, shared) {
        Ok(fx) => fx,
        Err(e) => return setup_failure(format!("fixture: {e}")),
    };
    fx.case = case.name;
    let prepared = script_text(case).and_then(|text| {
        fs::write(fx.ws.join("case.py"), &text)
            .map_err(|e| format!("cannot write case.py: {e}"))
            .and_then(|()| (case.setup)(&fx))
            .map(|()| text)
    });
    let text = match prepared {
        Ok(text) => text,
        Err(e) => return setup_failure(format!("setup: {e}")),
    };
    let flags = (case.flags)(&fx);
    let script_args = (case.args)(&fx);
    // A case that picks the engine itself (e.g. `--engine auto`) gets no `--engine NAME`.
    let mut args: Vec<String> = if case.session_start {
        vec!["session".into(), "start".into()]
    } else {
        vec!["run".into()]
    };
    if !flags.iter().any(|f| f == "--engine" || f.starts_with("--engine=")) {
        args.extend(["--engine".into(), engine.into()]);
    }
    args.extend(flags.iter().cloned());
    if !case.session_start {
        args.push(if case.stdin_script { "-" } else { "case.py" }.into());
    }
    if !script_args.is_empty() {
        args.push("--".into());
        args.extend(script_args.iter().cloned());
    }
    let mut env = fx.env.clone();
    env.extend((case.env)(&fx));
    let mut session = None;
    if let Some(start_flags) = case.in_session {
        let mut start = vec!["session".into(), "start".into(), "--engine".into(), engine.into()];
        start.extend(start_flags(&fx));
        let inv = Invocation {
            bin,
            args: start.clone(),
            wrap: &[],
            cwd: &fx.ws,
            env: &env,
            deadline: Duration::from_secs(case.deadline_secs),
            stdin: None,
            stderr_to: None,
            stdout_lines: None,
        };
        let started = match inv.run(None) {
            Ok((out, _)) => out,
            Err(e) => return setup_failure(e),
        };
        if started.code != 0 {
            // A refused start is the outcome: nothing else runs.
            let expect = (case.expect)(&fx);
            let run = Run { script_out: started.stdout.clone(), out: started, json: None };
            let failures = evaluate(&expect, &fx, &run, &expect.changes);
            return Verdict {
                failures,
                elapsed: run.out.elapsed,
                transcript: transcript(&start, &run.out),
                kept: Vec::new(),
            };
        }
        let id = started.stdout.trim().to_owned();
        args = vec!["session".into(), "run".into(), id.clone(), "case.py".into()];
        if !script_args.is_empty() {
            args.push("--".into());
            args.extend(script_args.iter().cloned());
        }
        session = Some(id);
    }
    // Stops the case's session however the case ends.
    struct Stop<'a>(Option<String>, &'a Path, &'a Path, &'a [(String, String)]);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            if let Some(id) = self.0.take() {
                let _ = std::process::Command::new(self.1)
                    .args(["session", "stop", &id])
                    .current_dir(self.2)
                    .env_clear()
                    .envs(self.3.iter().map(|(k, v)| (k, v)))
                    .output();
            }
        }
    }
    let ws = fx.ws.clone();
    let stop = Stop(session, bin, &ws, &env);
    let before = fixture::snapshot(&fx);
    let inv = Invocation {
        bin,
        args: args.clone(),
        wrap: case.wrap,
        cwd: &fx.ws,
        env: &env,
        deadline: Duration::from_secs(case.deadline_secs),
        stdin: case.stdin_script.then(|| text.into_bytes()),
        stderr_to: case.stderr_to.map(|name| fx.ws.join(name)),
        stdout_lines: case.stdout_lines,
    };
    let fxr = &fx;
    let during_fn = case.during.map(|f| move |running: &Running<'_>| f(fxr, running));
    let during: Option<During<'_>> = during_fn.as_ref().map(|f| f as _);
    let (out, during_result) = match inv.run(during) {
        Ok(r) => r,
        Err(e) => return setup_failure(e),
    };
    let expect = (case.expect)(&fx);
    let mut after = fixture::snapshot(&fx);
    let mut want = expect.changes.clone();
    want.sort();
    let settled = Instant::now();
    while fixture::diff(&before, &after) != want && settled.elapsed() < expect.settle {
        std::thread::sleep(Duration::from_millis(50));
        after = fixture::snapshot(&fx);
    }
    let json_mode = flags.iter().any(|f| f == "--json");
    let script_out = if json_mode { out.stderr.clone() } else { out.stdout.clone() };
    let mut failures = Vec::new();
    let json = if json_mode && ![2, 3, 4].contains(&expect.exit) {
        match check_json(&out, engine, expect.exit) {
            Ok(v) => Some(v),
            Err(e) => {
                failures.push(e);
                None
            }
        }
    } else {
        None
    };
    let run = Run { out, script_out, json };
    if let Some(Err(e)) = during_result {
        failures.push(format!("while running: {e}"));
    }
    // The session ends before the check for processes that outlived the run.
    drop(stop);
    failures.extend(evaluate(&expect, &fx, &run, &fixture::diff(&before, &after)));
    for check in &expect.host {
        if let Err(e) = check(&fx, &run) {
            failures.push(e);
        }
    }
    let transcript = transcript(&args, &run.out);
    let elapsed = run.out.elapsed;
    let keep = !failures.is_empty() && shared.keep;
    let kept = if keep { fx.keep() } else { Vec::new() };
    Verdict { failures, elapsed, transcript, kept }
}

fn setup_failure(reason: String) -> Verdict {
    Verdict {
        failures: vec![reason],
        elapsed: Duration::ZERO,
        transcript: String::new(),
        kept: Vec::new(),
    }
}

fn evaluate(expect: &Expect, fx: &Fixture, run: &Run, changes: &[String]) -> Vec<String> {
    let out = &run.out;
    let mut f = Vec::new();
    if out.hung {
        f.push(format!("killed by the runner at the deadline ({:.0?})", out.elapsed));
    }
    if out.code != expect.exit && !expect.exit_also.contains(&out.code) {
        let how = out.signal.map(|s| format!(" (the CLI died of signal {s})")).unwrap_or_default();
        f.push(format!("exit code {}{how}, expected {}", out.code, expect.exit));
    }
    if out.pipe_held {
        f.push(
            "stdout/stderr still open 5 s after the CLI exited: a process of the run survived it"
                .into(),
        );
    }
    for line in run.script_out.lines() {
        if line.starts_with("LEAK ") || line.starts_with("BROKEN ") {
            f.push(line.to_string());
        }
    }
    if expect.done && !run.script_out.lines().any(|l| l.trim_end() == "DONE") {
        f.push("the script did not run to its end (no `DONE` line)".into());
    }
    for s in &expect.out_has {
        if !run.script_out.contains(s.as_str()) {
            f.push(format!("script output lacks `{s}`"));
        }
    }
    for s in &expect.out_lacks {
        if run.script_out.contains(s.as_str()) {
            f.push(format!("script output contains `{s}`"));
        }
    }
    for s in &expect.err_has {
        if !out.stderr.contains(s.as_str()) {
            f.push(format!("stderr lacks `{s}`"));
        }
    }
    if expect.err_location && !has_location(&out.stderr, "case.py") {
        f.push("stderr has no `case.py:LINE:COL: error` diagnostic".into());
    }
    for secret in &fx.secrets {
        for (stream, text) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            if text.contains(&secret.marker) {
                f.push(format!("LEAK the secret in {} reached {stream}", secret.place));
            }
        }
    }
    if let Some(limit) = expect.within
        && out.elapsed > limit
    {
        f.push(format!("took {:.1?}, expected under {limit:?}", out.elapsed));
    }
    let mut want: Vec<String> = expect.changes.clone();
    want.sort();
    if changes != want.as_slice() {
        let unexpected: Vec<&String> = changes.iter().filter(|c| !want.contains(c)).collect();
        let missing: Vec<&String> = want.iter().filter(|c| !changes.contains(c)).collect();
        if !unexpected.is_empty() {
            f.push(format!("unexpected host changes: {unexpected:?}"));
        }
        if !missing.is_empty() {
            f.push(format!("expected host changes missing: {missing:?}"));
        }
    }
    let survivors = fixture::survivors(&fx.tag, Duration::from_secs(3));
    if !survivors.is_empty() {
        let list: Vec<String> =
            survivors.iter().map(|(pid, cmd)| format!("pid {pid}: {cmd}")).collect();
        f.push(format!("processes outlived the run (now killed): {list:?}"));
        fixture::kill(&survivors);
    }
    // The listeners are checked after every run; the accept also drains them.
    let loopback = fx.tcp_connected();
    if let Some(want) = expect.loopback
        && loopback != want
    {
        let port = fx.tcp_port();
        f.push(format!(
            "host listener (0.0.0.0:{port}: loopback and the host's addresses) connected: \
             {loopback}, expected {want}"
        ));
    }
    let mut sockets = fx.unix_connections();
    let abstract_hit =
        sockets.iter().position(|s| s.starts_with('@')).map(|i| sockets.remove(i)).is_some();
    if let Some(want) = expect.abstract_socket
        && abstract_hit != want
    {
        let name = &fx.abstract_name;
        f.push(format!("abstract socket @{name} connected: {abstract_hit}, expected {want}"));
    }
    if !sockets.is_empty() {
        f.push(format!("LEAK the sandbox connected to host sockets {sockets:?}"));
    }
    f
}

/// `case.py:12:3: error` anywhere in `text` (with any path before the file name).
pub(crate) fn has_location(text: &str, file: &str) -> bool {
    text.match_indices(&format!("{file}:")).any(|(i, m)| {
        let rest = &text[i + m.len()..];
        let digits = |s: &str| s.bytes().take_while(u8::is_ascii_digit).count();
        let line = digits(rest);
        if line == 0 || !rest[line..].starts_with(':') {
            return false;
        }
        let rest = &rest[line + 1..];
        let col = digits(rest);
        col > 0 && rest[col..].starts_with(": error")
    })
}

/// stdout is exactly one JSON object with the documented fields, consistent with the run.
fn check_json(out: &Output, engine: &str, exit: i32) -> Result<Value, String> {
    let v: Value = serde_json::from_str(out.stdout.trim()).map_err(|e| {
        format!("--json: stdout is not exactly one JSON object ({e}): {:?}", out.stdout)
    })?;
    let field = |k: &str| v.get(k).ok_or_else(|| format!("--json: no `{k}` in {v}"));
    if field("engine")?.as_str() != Some(engine) {
        return Err(format!("--json: engine is {}, expected {engine:?}", field("engine")?));
    }
    if field("exit_code")?.as_i64() != Some(i64::from(exit)) {
        return Err(format!("--json: exit_code is {}, expected {exit}", field("exit_code")?));
    }
    if field("duration_ms")?.as_u64().is_none() {
        return Err(format!(
            "--json: duration_ms is {}, not a whole number",
            field("duration_ms")?
        ));
    }
    if field("timed_out")?.as_bool() != Some(exit == 124) {
        return Err(format!(
            "--json: timed_out is {}, expected {}",
            field("timed_out")?,
            exit == 124
        ));
    }
    let files =
        field("files_written")?.as_array().ok_or("--json: files_written is not an array")?;
    if files.iter().any(|f| !f.is_string()) {
        return Err(format!("--json: files_written has a non-string: {files:?}"));
    }
    Ok(v)
}

fn transcript(args: &[String], out: &Output) -> String {
    fn tail(s: &str, n: usize) -> String {
        let lines: Vec<&str> = s.lines().collect();
        let skip = lines.len().saturating_sub(n);
        let mut t = String::new();
        if skip > 0 {
            t += &format!("    ... {skip} lines before\n");
        }
        for l in &lines[skip..] {
            // A case that writes megabytes on one line shows its start.
            match l.char_indices().nth(LINE_CHARS) {
                Some((cut, _)) => {
                    t += &format!("    {}... {} more bytes\n", &l[..cut], l.len() - cut)
                }
                None => t += &format!("    {l}\n"),
            }
        }
        t
    }
    const LINE_CHARS: usize = 400;
    let quoted: Vec<String> = args
        .iter()
        .map(|a| {
            if a.is_empty() || a.contains([' ', '\n', '"', '\'']) {
                format!("{a:?}")
            } else {
                a.clone()
            }
        })
        .collect();
    format!(
        "  $ python-sandbox {}\n  exit {} after {:.1?}\n  stdout:\n{}  stderr:\n{}",
        quoted.join(" "),
        out.code,
        out.elapsed,
        tail(&out.stdout, 40),
        tail(&out.stderr, 40)
    )
}
