//! The contract of the [`Sandbox`] protocol, written once and run against every implementation:
//! [`FakeSandbox`] (sandbox-core's own tests) and each real session engine (their `tests/it`),
//! so the fake cannot drift from the real thing.
//!
//! [`check`] is generic over `S: Sandbox` and async: callers drive it with their own executor
//! (a poll loop for the fake and bwrap, a tokio runtime for the OCI engines). Where a real
//! engine legitimately differs from the fake (the fake serves no port the host can reach, copies
//! no host path, unpacks no links), the caller says so in [`Expect`] and the case reports
//! itself as not applicable with the reason, instead of passing silently. The exec cases are a
//! table ([`EXEC_CASES`]); each carries what its command does, which [`programmed_fake`] uses
//! to program a fake with the same commands. The suite ends with [`Sandbox::stop`].
//!
//! No IO here either: whatever needs the host (fetching a service's URL, a host tree for
//! [`PutSource::HostPath`]) comes from the caller through [`Expect`].

use std::path::PathBuf;
use std::time::Duration;

use crate::sandbox::{EntryKind, ExecRequest, PutSource, Sandbox, Service, ServiceSpec};
use crate::{Captured, EXIT_CLOSED_PIPE, Error, FakeReply, FakeSandbox, OutputSink, Stream};

/// The directory below which the suite works (the sandbox's `/tmp`, writable everywhere).
pub const SCRATCH: &str = "/tmp/psbx-contract";

/// The files of the host tree [`Expect::host_tree`] names, relative to it.
pub const HOST_TREE: &[(&str, &[u8])] =
    &[("inner/f.txt", b"from the host\n"), ("top.bin", &[0, 1, 2, 255])];

/// An HTTP GET from the host: the body at a URL, or why there is none.
pub type Fetch = dyn Fn(&str) -> Result<String, String> + Sync;

/// What the sandbox under test can do beyond what every sandbox does.
pub struct Expect<'a> {
    /// A port the sandbox was started publishing: a service on it answers at its URL.
    pub published: u16,
    /// A port it does not publish: a service on it is refused, naming `--publish PORT`.
    pub unpublished: u16,
    /// The working directory of an exec without `cwd` (the session's workspace); `None` for a
    /// sandbox without one (the fake: its execs are programmed answers).
    pub default_cwd: Option<String>,
    /// Whether execs run real POSIX commands (`sh`, `cat`, `python3`), so the suite can look
    /// inside with its own probes (a service gone after its stop); false for the fake.
    pub commands: bool,
    /// Fetches from the host; `None` where nothing on the host reaches the sandbox's services
    /// (the fake).
    pub fetch: Option<&'a Fetch>,
    /// A host directory holding [`HOST_TREE`] when [`PutSource::HostPath`] is supported; `None`
    /// where it is refused as [`Error::Unsupported`].
    pub host_tree: Option<PathBuf>,
    /// Whether the links of a tar archive are unpacked as links; otherwise [`Sandbox::put`]
    /// refuses such an archive as [`Error::Unsupported`] and unpacks nothing.
    pub tar_links: bool,
}

/// What one run of [`check`] found.
#[derive(Debug, Default)]
pub struct Report {
    /// The sandbox's id.
    pub who: String,
    /// Cases that held.
    pub passed: Vec<String>,
    /// Cases that did not, with what came instead.
    pub failed: Vec<String>,
    /// Cases that do not apply to this sandbox, with the [`Expect`] field that says so.
    pub not_applicable: Vec<String>,
}

impl Report {
    /// One line per case that did not pass (failed, then not applicable), then the counts.
    pub fn summary(&self) -> String {
        let mut lines: Vec<String> = self.failed.iter().map(|f| format!("FAILED {f}")).collect();
        lines.extend(self.not_applicable.iter().map(|n| format!("not applicable: {n}")));
        lines.push(format!(
            "contract on `{}`: {} passed, {} failed, {} not applicable",
            self.who,
            self.passed.len(),
            self.failed.len(),
            self.not_applicable.len()
        ));
        lines.join("\n")
    }

    /// Panics with the summary unless every applicable case passed.
    pub fn assert_passed(&self) {
        assert!(self.failed.is_empty() && !self.passed.is_empty(), "{}", self.summary());
    }

    fn check(&mut self, case: &str, held: bool, detail: impl FnOnce() -> String) {
        if held {
            self.passed.push(case.to_owned());
        } else {
            self.failed.push(format!("{case}: {}", detail()));
        }
    }

    /// The case holds when `got` is an error whose message is exactly `want`'s.
    fn error_is<T: std::fmt::Debug, E: std::fmt::Display>(
        &mut self,
        case: &str,
        got: Result<T, E>,
        want: &Error,
    ) {
        let want = want.to_string();
        match got {
            Err(e) => {
                let e = e.to_string();
                self.check(case, e == want, || format!("error `{e}`, want `{want}`"));
            }
            Ok(v) => self.failed.push(format!("{case}: Ok({v:?}), want the error `{want}`")),
        }
    }

    /// The case holds when `got` is an error whose message contains every one of `parts`.
    fn error_with<T: std::fmt::Debug, E: std::fmt::Display>(
        &mut self,
        case: &str,
        got: Result<T, E>,
        parts: &[&str],
    ) {
        match got {
            Err(e) => {
                let e = e.to_string();
                let held = parts.iter().all(|p| e.contains(p));
                self.check(case, held, || format!("error `{e}` lacks one of {parts:?}"));
            }
            Ok(v) => self.failed.push(format!("{case}: Ok({v:?}), want an error with {parts:?}")),
        }
    }

    /// The case holds when `got` lists exactly `want` (name, kind, size), in this order.
    fn listing_is<E: std::fmt::Display>(
        &mut self,
        case: &str,
        got: Result<Vec<crate::DirEntry>, E>,
        want: &[(&str, EntryKind, u64)],
    ) {
        let shown: Result<Vec<(String, EntryKind, u64)>, String> = got
            .map(|l| l.into_iter().map(|e| (e.name, e.kind, e.size)).collect())
            .map_err(|e| e.to_string());
        let held = shown.as_ref().is_ok_and(|shown| {
            shown.len() == want.len()
                && shown.iter().zip(want).all(|(s, w)| s.0 == w.0 && s.1 == w.1 && s.2 == w.2)
        });
        self.check(case, held, || format!("{shown:?}, want {want:?}"));
    }

    /// The case holds when `got` is exactly `want`.
    fn bytes_are<E: std::fmt::Display>(
        &mut self,
        case: &str,
        got: Result<Vec<u8>, E>,
        want: &[u8],
    ) {
        let held = got.as_ref().is_ok_and(|got| got == want);
        self.check(case, held, || {
            let got =
                got.map(|g| String::from_utf8_lossy(&g).into_owned()).map_err(|e| e.to_string());
            format!("{got:?}, want {:?}", String::from_utf8_lossy(want))
        });
    }

    fn ok<T, E: std::fmt::Display>(&mut self, case: &str, got: Result<T, E>) -> Option<T> {
        match got {
            Ok(v) => {
                self.passed.push(case.to_owned());
                Some(v)
            }
            Err(e) => {
                self.failed.push(format!("{case}: {e}"));
                None
            }
        }
    }

    fn not_applicable(&mut self, case: &str, because: &str) {
        self.not_applicable.push(format!("{case} ({because})"));
    }
}

/// Where an exec case runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cwd {
    /// No `cwd`: the sandbox's default ([`Expect::default_cwd`]).
    Default,
    /// [`SCRATCH`], made by the file cases before.
    Scratch,
    /// A directory that does not exist.
    Missing,
}

/// An expectation on one output stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Text {
    /// Exactly these bytes.
    Exactly(&'static [u8]),
    /// Text containing this.
    Contains(&'static str),
    /// The working directory of the exec, then a newline.
    CwdLine,
    /// Anything.
    Any,
}

/// One exec and what must come of it.
#[derive(Debug, Clone, Copy)]
pub struct ExecCase {
    /// What it checks.
    pub name: &'static str,
    /// The command.
    pub argv: &'static [&'static str],
    /// Extra environment.
    pub env: &'static [(&'static str, &'static str)],
    /// Where it runs.
    pub cwd: Cwd,
    /// Its stdin.
    pub stdin: &'static [u8],
    /// Its timeout.
    pub timeout: Option<Duration>,
    /// Whether the output sink reports itself closed after its first chunk.
    pub close_after_first_chunk: bool,
    /// The exit code, if it is fixed.
    pub exit: Option<i32>,
    /// stdout.
    pub stdout: Text,
    /// stderr.
    pub stderr: Text,
    /// Whether the outcome says it timed out.
    pub timed_out: bool,
    /// The longest it may take (a killed command does not run to its end).
    pub within: Duration,
    /// What the command does, for [`programmed_fake`]; `None` where the fake's own answer is
    /// under test (an unknown program, a missing cwd) or the case cannot apply to it.
    pub emulate: Option<fn(&ExecRequest) -> FakeReply>,
}

const CASE: ExecCase = ExecCase {
    name: "",
    argv: &[],
    env: &[],
    cwd: Cwd::Scratch,
    stdin: b"",
    timeout: None,
    close_after_first_chunk: false,
    exit: Some(0),
    stdout: Text::Exactly(b""),
    stderr: Text::Exactly(b""),
    timed_out: false,
    within: Duration::from_secs(30),
    emulate: Some(|_| FakeReply::exit(0)),
};

/// A binary stdin: every byte value, and no trailing newline.
const BINARY: [u8; 256] = {
    let mut bytes = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        bytes[i] = i as u8;
        i += 1;
    }
    bytes
};

/// The exec cases, in order (the timeout case's follow-up needs the timeout case before it).
pub const EXEC_CASES: &[ExecCase] = &[
    ExecCase { name: "exec: exit 0", argv: &["true"], ..CASE },
    ExecCase {
        name: "exec: a non-zero exit is an outcome, not an error",
        argv: &["sh", "-c", "exit 7"],
        exit: Some(7),
        emulate: Some(|_| FakeReply::exit(7)),
        ..CASE
    },
    ExecCase {
        name: "exec: a command killed by a signal exits 128 + N",
        argv: &["sh", "-c", "kill -TERM $$"],
        exit: Some(143),
        emulate: Some(|_| FakeReply::exit(143)),
        ..CASE
    },
    ExecCase {
        name: "exec: stdout and stderr stay apart",
        argv: &["sh", "-c", "printf out; printf err >&2; printf more"],
        stdout: Text::Exactly(b"outmore"),
        stderr: Text::Exactly(b"err"),
        emulate: Some(|_| FakeReply::exit(0).stdout("out").stderr("err").stdout("more")),
        ..CASE
    },
    ExecCase {
        name: "exec: env reaches the command",
        argv: &["sh", "-c", "printf '%s|%s' \"$CONTRACT_A\" \"$CONTRACT_B\""],
        env: &[("CONTRACT_A", "one"), ("CONTRACT_B", "two words")],
        stdout: Text::Exactly(b"one|two words"),
        emulate: Some(|request| {
            let get = |name: &str| {
                request.env.iter().find(|(k, _)| k == name).map_or("", |(_, v)| v.as_str())
            };
            FakeReply::exit(0).stdout(&format!("{}|{}", get("CONTRACT_A"), get("CONTRACT_B")))
        }),
        ..CASE
    },
    ExecCase {
        name: "exec: cwd is where it runs",
        argv: &["pwd"],
        stdout: Text::CwdLine,
        emulate: Some(|request| {
            FakeReply::exit(0).stdout(&format!("{}\n", request.cwd.as_deref().unwrap_or("?")))
        }),
        ..CASE
    },
    ExecCase {
        name: "exec: without cwd it runs in the default directory",
        argv: &["pwd"],
        cwd: Cwd::Default,
        stdout: Text::CwdLine,
        emulate: None,
        ..CASE
    },
    ExecCase {
        name: "exec: stdin bytes arrive whole, then end of file",
        argv: &["cat"],
        stdin: &BINARY,
        stdout: Text::Exactly(&BINARY),
        emulate: Some(|request| FakeReply::exit(0).chunk(Stream::Stdout, &request.stdin)),
        ..CASE
    },
    ExecCase {
        name: "exec: an empty stdin is end of file at once",
        argv: &["cat"],
        within: Duration::from_secs(10),
        emulate: Some(|request| FakeReply::exit(0).chunk(Stream::Stdout, &request.stdin)),
        ..CASE
    },
    ExecCase {
        name: "exec: a missing program exits 127 naming it",
        argv: &["psbx-contract-no-such-program"],
        exit: Some(127),
        stderr: Text::Contains("psbx-contract-no-such-program"),
        emulate: None,
        ..CASE
    },
    ExecCase {
        name: "exec: a missing cwd is a command that cannot start (127) naming it",
        argv: &["true"],
        cwd: Cwd::Missing,
        exit: Some(127),
        stderr: Text::Contains("/tmp/psbx-contract/no-such-dir"),
        emulate: None,
        ..CASE
    },
    ExecCase {
        name: "exec: a timeout kills the command and reports timed_out",
        argv: &["sh", "-c", "sleep 30 & echo $! > /tmp/psbx-contract/child.pid; wait"],
        timeout: Some(Duration::from_millis(1500)),
        exit: None,
        timed_out: true,
        within: Duration::from_secs(15),
        emulate: Some(|_| FakeReply::exit(137).timed_out()),
        ..CASE
    },
    ExecCase {
        name: "exec: a timed-out command's children are gone too",
        argv: &[
            "sh",
            "-c",
            "sleep 1; p=$(cat /tmp/psbx-contract/child.pid) || exit 2; s=$(cat /proc/$p/stat 2>/dev/null) || exit 0; case \"$s\" in *') Z '*) exit 0;; esac; echo \"alive: $s\"; exit 1",
        ],
        emulate: Some(|_| FakeReply::exit(0)),
        ..CASE
    },
    ExecCase {
        name: "exec: a closed output sink stops the command (141)",
        argv: &["sh", "-c", "echo first; sleep 1; echo second; sleep 30"],
        close_after_first_chunk: true,
        exit: Some(EXIT_CLOSED_PIPE),
        stdout: Text::Exactly(b"first\n"),
        within: Duration::from_secs(15),
        emulate: Some(|_| FakeReply::exit(0).stdout("first\n").stdout("second\n")),
        ..CASE
    },
];

/// A [`FakeSandbox`] programmed with what the commands of [`EXEC_CASES`] do, publishing `port`
/// (pass it as [`Expect::published`]).
pub fn programmed_fake(id: &str, port: u16) -> FakeSandbox {
    let fake = FakeSandbox::new(id);
    fake.publish(port);
    for case in EXEC_CASES {
        if let Some(emulate) = case.emulate {
            fake.on_exec(case.argv, move |request, _| emulate(request));
        }
    }
    fake
}

/// A sink that keeps everything and may report itself closed after the first chunk.
struct Sink {
    captured: Captured,
    close_after_first: bool,
}

impl OutputSink for Sink {
    fn write(&mut self, stream: Stream, chunk: &[u8]) {
        self.captured.write(stream, chunk);
    }

    fn closed(&self) -> bool {
        self.close_after_first && !self.captured.chunks.is_empty()
    }
}

/// Runs the whole contract against `sandbox`, ending with its stop.
pub async fn check<S: Sandbox>(sandbox: &S, expect: &Expect<'_>) -> Report {
    let mut report = Report { who: sandbox.id().to_owned(), ..Report::default() };
    report.check("id: not empty", !sandbox.id().is_empty(), || "an empty id".to_owned());
    files(sandbox, &mut report).await;
    for case in EXEC_CASES {
        exec_case(sandbox, expect, case, &mut report).await;
    }
    put(sandbox, expect, &mut report).await;
    services(sandbox, expect, &mut report).await;
    stop(sandbox, &mut report).await;
    report
}

async fn exec_case<S: Sandbox>(
    sandbox: &S,
    expect: &Expect<'_>,
    case: &ExecCase,
    report: &mut Report,
) {
    let cwd = match case.cwd {
        Cwd::Default => None,
        Cwd::Scratch => Some(SCRATCH.to_owned()),
        Cwd::Missing => Some(format!("{SCRATCH}/no-such-dir")),
    };
    let shown_cwd = match (&cwd, &expect.default_cwd) {
        (Some(cwd), _) | (None, Some(cwd)) => cwd.clone(),
        (None, None) => {
            return report.not_applicable(case.name, "`Expect::default_cwd` is `None`");
        }
    };
    let request = ExecRequest {
        argv: case.argv.iter().map(|a| (*a).to_owned()).collect(),
        env: case.env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        cwd,
        stdin: case.stdin.to_vec(),
        timeout: case.timeout,
    };
    let mut sink =
        Sink { captured: Captured::default(), close_after_first: case.close_after_first_chunk };
    let outcome = match sandbox.exec(&request, &mut sink).await {
        Ok(outcome) => outcome,
        Err(e) => return report.failed.push(format!("{}: exec failed: {e}", case.name)),
    };
    let out = &sink.captured;
    let text_ok = |want: Text, got: &[u8]| match want {
        Text::Exactly(bytes) => got == bytes,
        Text::Contains(part) => String::from_utf8_lossy(got).contains(part),
        Text::CwdLine => got == format!("{shown_cwd}\n").as_bytes(),
        Text::Any => true,
    };
    let held = case.exit.is_none_or(|code| outcome.exit_code == code)
        && outcome.timed_out == case.timed_out
        && outcome.duration <= case.within
        && text_ok(case.stdout, &out.stdout)
        && text_ok(case.stderr, &out.stderr);
    report.check(case.name, held, || {
        format!(
            "exit {} timed_out {} in {:?}, stdout {:?}, stderr {:?}",
            outcome.exit_code,
            outcome.timed_out,
            outcome.duration,
            out.stdout_lossy(),
            out.stderr_lossy()
        )
    });
}

/// read_file, write_file and list_dir, below `SCRATCH/files`.
async fn files<S: Sandbox>(sandbox: &S, report: &mut Report) {
    let dir = format!("{SCRATCH}/files");
    let at = |name: &str| format!("{dir}/{name}");
    report.error_is(
        "list_dir: a missing directory is NotFound",
        sandbox.list_dir(SCRATCH).await,
        &Error::NotFound { path: SCRATCH.to_owned() },
    );
    let cases: [(&str, String, &[u8]); 4] = [
        ("write_file + read_file: contents", at("a.txt"), b"alpha"),
        ("write_file + read_file: an empty file", at("empty"), b""),
        ("write_file + read_file: binary bytes", at("bin"), &BINARY),
        ("write_file: missing parents are created", at("d1/d2/deep.txt"), b"deep\n"),
    ];
    for (case, path, contents) in cases {
        if report
            .ok(&format!("{case} (write)"), sandbox.write_file(&path, contents).await)
            .is_some()
        {
            report.bytes_are(case, sandbox.read_file(&path).await, contents);
        }
    }
    let _ = sandbox.write_file(&at("a.txt"), b"longer than before").await;
    let _ = sandbox.write_file(&at("a.txt"), b"b").await;
    report.bytes_are(
        "write_file: replaces the whole file",
        sandbox.read_file(&at("a.txt")).await,
        b"b",
    );
    report.listing_is(
        "list_dir: sorted names, kinds and sizes",
        sandbox.list_dir(&dir).await,
        &[
            ("a.txt", EntryKind::File, 1),
            ("bin", EntryKind::File, 256),
            ("d1", EntryKind::Dir, 0),
            ("empty", EntryKind::File, 0),
        ],
    );

    let errors: [(&str, Result<(), String>, Error); 9] = [
        (
            "read_file: below a regular file is NotADirectory",
            sandbox.read_file(&at("a.txt/x")).await.map(drop).map_err(|e| e.to_string()),
            Error::NotADirectory { path: at("a.txt/x") },
        ),
        (
            "read_file: a missing file is NotFound naming it",
            sandbox.read_file(&at("nope")).await.map(drop).map_err(|e| e.to_string()),
            Error::NotFound { path: at("nope") },
        ),
        (
            "read_file: a directory is IsADirectory naming it",
            sandbox.read_file(&dir).await.map(drop).map_err(|e| e.to_string()),
            Error::IsADirectory { path: dir.clone() },
        ),
        (
            "write_file: onto a directory is IsADirectory naming it",
            sandbox.write_file(&at("d1"), b"x").await.map_err(|e| e.to_string()),
            Error::IsADirectory { path: at("d1") },
        ),
        (
            "write_file: below a regular file is NotADirectory",
            sandbox.write_file(&at("a.txt/x"), b"x").await.map_err(|e| e.to_string()),
            Error::NotADirectory { path: at("a.txt/x") },
        ),
        (
            "list_dir: a regular file is NotADirectory naming it",
            sandbox.list_dir(&at("a.txt")).await.map(drop).map_err(|e| e.to_string()),
            Error::NotADirectory { path: at("a.txt") },
        ),
        (
            "read_file: a relative path is refused",
            sandbox.read_file("tmp/x").await.map(drop).map_err(|e| e.to_string()),
            Error::RelativeSandboxPath { path: "tmp/x".to_owned() },
        ),
        (
            "write_file: a relative path is refused",
            sandbox.write_file("tmp/x", b"x").await.map_err(|e| e.to_string()),
            Error::RelativeSandboxPath { path: "tmp/x".to_owned() },
        ),
        (
            "list_dir: a relative path is refused",
            sandbox.list_dir("tmp").await.map(drop).map_err(|e| e.to_string()),
            Error::RelativeSandboxPath { path: "tmp".to_owned() },
        ),
    ];
    for (case, got, want) in errors {
        report.error_is(case, got, &want);
    }
}

/// One member of a test archive.
enum Member<'a> {
    Dir(&'a str),
    File(&'a str, &'a [u8]),
    Symlink(&'a str, &'a str),
}

/// Pure: a ustar archive of `members` (names below 100 bytes), modes 0755/0644.
fn ustar(members: &[Member<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for member in members {
        let (name, kind, contents, link): (&str, u8, &[u8], &str) = match member {
            Member::Dir(name) => (name, b'5', b"", ""),
            Member::File(name, contents) => (name, b'0', contents, ""),
            Member::Symlink(name, target) => (name, b'2', b"", target),
        };
        let mut header = [0u8; 512];
        header[..name.len()].copy_from_slice(name.as_bytes());
        let mode: &[u8] = if kind == b'0' { b"0000644\0" } else { b"0000755\0" };
        header[100..108].copy_from_slice(mode);
        header[108..116].copy_from_slice(b"0000000\0");
        header[116..124].copy_from_slice(b"0000000\0");
        header[124..136].copy_from_slice(format!("{:011o}\0", contents.len()).as_bytes());
        header[136..148].copy_from_slice(b"00000000000\0");
        header[156] = kind;
        header[157..157 + link.len()].copy_from_slice(link.as_bytes());
        header[257..263].copy_from_slice(b"ustar\0");
        header[263..265].copy_from_slice(b"00");
        header[148..156].fill(b' ');
        let sum: u32 = header.iter().map(|b| u32::from(*b)).sum();
        header[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(contents);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

/// put: tar archives and host paths.
async fn put<S: Sandbox>(sandbox: &S, expect: &Expect<'_>, report: &mut Report) {
    let dest = format!("{SCRATCH}/put/deep");
    let archive = ustar(&[
        Member::Dir("pkg/"),
        Member::Dir("pkg/empty/"),
        Member::File("pkg/sub/mod.py", b"x = 1\n"),
        Member::File("pkg/data.bin", &BINARY),
    ]);
    let put = sandbox.put(&PutSource::Tar(archive), &dest).await;
    if report.ok("put: a tar unpacks below a destination it creates", put).is_some() {
        let module = format!("{dest}/pkg/sub/mod.py");
        report.bytes_are(
            "put: a tar's nested files, parents created",
            sandbox.read_file(&module).await,
            b"x = 1\n",
        );
        report.listing_is(
            "put: a tar's directories and binary files",
            sandbox.list_dir(&format!("{dest}/pkg")).await,
            &[
                ("data.bin", EntryKind::File, 256),
                ("empty", EntryKind::Dir, 0),
                ("sub", EntryKind::Dir, 0),
            ],
        );
        report.listing_is(
            "list_dir: an empty directory lists nothing",
            sandbox.list_dir(&format!("{dest}/pkg/empty")).await,
            &[],
        );
        let again = ustar(&[Member::File("pkg/sub/mod.py", b"x = 2\n")]);
        let _ = sandbox.put(&PutSource::Tar(again), &dest).await;
        report.bytes_are(
            "put: a tar replaces existing files",
            sandbox.read_file(&module).await,
            b"x = 2\n",
        );
    }

    let links = format!("{SCRATCH}/put/links");
    let archive = ustar(&[
        Member::Dir("d/"),
        Member::File("d/f", b"f"),
        Member::Symlink("to-dir", "d"),
        Member::Symlink("dangling", "/nowhere"),
    ]);
    let put = sandbox.put(&PutSource::Tar(archive), &links).await;
    if expect.tar_links {
        if report.ok("put: a tar's symlinks unpack", put).is_some() {
            report.listing_is(
                "list_dir: symlinks are listed as such, not followed",
                sandbox.list_dir(&links).await,
                &[
                    ("d", EntryKind::Dir, 0),
                    ("dangling", EntryKind::Symlink, 0),
                    ("to-dir", EntryKind::Symlink, 0),
                ],
            );
        }
    } else {
        report.error_with(
            "put: a tar with links is refused as unsupported",
            put,
            &["is not supported by"],
        );
        let left = sandbox.list_dir(&links).await;
        report.check(
            "put: a refused tar unpacks nothing",
            left.as_ref().is_err_and(|e| {
                e.to_string() == Error::NotFound { path: links.clone() }.to_string()
            }),
            || format!("{:?}", left.map_err(|e| e.to_string())),
        );
    }

    let host_dest = format!("{SCRATCH}/put/host");
    match &expect.host_tree {
        Some(tree) => {
            let put = sandbox.put(&PutSource::HostPath(tree.clone()), &host_dest).await;
            if report.ok("put: a host tree is copied", put).is_some() {
                let base = tree.file_name().map(|n| n.to_string_lossy().into_owned());
                for (relative, contents) in HOST_TREE {
                    let path = format!("{host_dest}/{}/{relative}", base.as_deref().unwrap_or(""));
                    report.bytes_are(
                        &format!("put: host tree file `{path}`"),
                        sandbox.read_file(&path).await,
                        contents,
                    );
                }
            }
        }
        None => {
            let put = sandbox.put(&PutSource::HostPath(PathBuf::from("/etc")), &host_dest).await;
            report.error_with(
                "put: a host path is refused as unsupported",
                put,
                &["is not supported by", "hint:"],
            );
        }
    }
}

/// start_service and stop_service on the published port, and a refused unpublished one.
async fn services<S: Sandbox>(sandbox: &S, expect: &Expect<'_>, report: &mut Report) {
    let www = format!("{SCRATCH}/www");
    let body = "hello from the contract";
    let _ = sandbox.write_file(&format!("{www}/hello.txt"), body.as_bytes()).await;
    let port = expect.published;
    // The server is a child of the shell: stopping the service stops the whole group.
    let spec = ServiceSpec {
        argv: [
            "sh",
            "-c",
            "python3 -m http.server \"$0\" --bind 0.0.0.0 --directory \"$1\" & wait",
            &port.to_string(),
            &www,
        ]
        .map(str::to_owned)
        .to_vec(),
        port,
        env: Vec::new(),
    };
    let Some(service) =
        report.ok("start_service: on a published port", sandbox.start_service(&spec).await)
    else {
        return;
    };
    report.check(
        "start_service: the service names its port and an http URL",
        service.port == port && url_port(&service.url).is_some(),
        || format!("{service:?}"),
    );
    let url = format!("{}/hello.txt", service.url);
    match expect.fetch {
        Some(fetch) => {
            let got = fetch(&url);
            report.check(
                "start_service: it answers at its URL from the host",
                got.as_ref().is_ok_and(|b| b.contains(body)),
                || format!("{url}: {got:?}"),
            );
        }
        None => report.not_applicable(
            "start_service: it answers at its URL from the host",
            "`Expect::fetch` is `None`",
        ),
    }
    report.error_is(
        "start_service: a port in use is PortInUse",
        sandbox.start_service(&spec).await,
        &Error::PortInUse { port },
    );
    let other = expect.unpublished;
    let unpublished = ServiceSpec { port: other, ..spec.clone() };
    report.error_with(
        "start_service: an unpublished port is refused with a hint",
        sandbox.start_service(&unpublished).await,
        &[&format!("port {other}"), &format!("hint: start the session with `--publish {other}`")],
    );
    report.ok("stop_service: stops it", sandbox.stop_service(&service).await);
    if let Some(fetch) = expect.fetch {
        let got = fetch(&url);
        report.check(
            "stop_service: its URL answers no more",
            !got.as_ref().is_ok_and(|b| b.contains(body)),
            || format!("{url}: {got:?}"),
        );
    }
    if expect.commands {
        let probe = format!(
            "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), 1); print('up')\nexcept OSError: print('down')"
        );
        let mut out = Captured::default();
        let probed = sandbox.exec(&ExecRequest::new(&["python3", "-c", &probe]), &mut out).await;
        report.check(
            "stop_service: the service's children are gone (nothing listens inside)",
            probed.is_ok() && out.stdout == b"down\n",
            || format!("{}{}", out.stdout_lossy(), out.stderr_lossy()),
        );
    } else {
        report.not_applicable(
            "stop_service: the service's children are gone (nothing listens inside)",
            "`Expect::commands` is false",
        );
    }
    report.error_is(
        "stop_service: a stopped service is NoSuchService",
        sandbox.stop_service(&service).await,
        &Error::NoSuchService { id: service.id.clone() },
    );
    // The port is free again.
    if let Some(again) = report.ok(
        "start_service: the port is free after stop_service",
        sandbox.start_service(&spec).await,
    ) {
        let _ = sandbox.stop_service(&again).await;
    }
}

/// Pure: the port of an `http://host:port` URL.
fn url_port(url: &str) -> Option<u16> {
    let rest = url.strip_prefix("http://")?;
    rest.rsplit_once(':')?.1.parse().ok()
}

/// stop: every later call fails as stopped; a second stop is fine.
async fn stop<S: Sandbox>(sandbox: &S, report: &mut Report) {
    if report.ok("stop: stops", sandbox.stop().await).is_none() {
        return;
    }
    let stopped = Error::Stopped { id: sandbox.id().to_owned() };
    let spec = ServiceSpec { argv: vec!["true".to_owned()], port: 1, env: Vec::new() };
    let service = Service { id: "1".to_owned(), port: 1, url: String::new() };
    let path = format!("{SCRATCH}/after-stop");
    let calls: [(&str, Result<(), String>); 7] = [
        (
            "stop: then exec fails as stopped",
            sandbox
                .exec(&ExecRequest::new(&["true"]), &mut Captured::default())
                .await
                .map(drop)
                .map_err(|e| e.to_string()),
        ),
        (
            "stop: then read_file fails as stopped",
            sandbox.read_file(&path).await.map(drop).map_err(|e| e.to_string()),
        ),
        (
            "stop: then write_file fails as stopped",
            sandbox.write_file(&path, b"x").await.map_err(|e| e.to_string()),
        ),
        (
            "stop: then list_dir fails as stopped",
            sandbox.list_dir(SCRATCH).await.map(drop).map_err(|e| e.to_string()),
        ),
        (
            "stop: then put fails as stopped",
            sandbox.put(&PutSource::Tar(ustar(&[])), &path).await.map_err(|e| e.to_string()),
        ),
        (
            "stop: then start_service fails as stopped",
            sandbox.start_service(&spec).await.map(drop).map_err(|e| e.to_string()),
        ),
        (
            "stop: then stop_service fails as stopped",
            sandbox.stop_service(&service).await.map_err(|e| e.to_string()),
        ),
    ];
    for (case, got) in calls {
        report.error_is(case, got, &stopped);
    }
    report.ok("stop: a second stop is fine", sandbox.stop().await);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        loop {
            if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut context) {
                return output;
            }
        }
    }

    #[test]
    fn the_contract_holds_for_the_fake() {
        let fake = programmed_fake("fake", 8000);
        let expect = Expect {
            published: 8000,
            unpublished: 8001,
            default_cwd: None,
            commands: false,
            fetch: None,
            host_tree: None,
            tar_links: false,
        };
        let report = block_on(check(&fake, &expect));
        report.assert_passed();
        assert_eq!(
            report.not_applicable.len(),
            3,
            "what the fake cannot do, said: {}",
            report.summary()
        );
    }

    #[test]
    fn test_archives_read_back() {
        let archive = ustar(&[Member::Dir("d/"), Member::File("d/f", b"abc")]);
        let entries = crate::tar::read(&archive).expect("valid ustar");
        assert_eq!(
            entries,
            [
                crate::tar::TarEntry::Dir { path: "d/".to_owned() },
                crate::tar::TarEntry::File { path: "d/f".to_owned(), contents: b"abc".to_vec() },
            ]
        );
        assert_eq!(url_port("http://127.0.0.1:49153"), Some(49153));
        assert_eq!(url_port("http://[::1]:80"), Some(80));
        assert_eq!(url_port("ftp://x:1"), None);
    }
}
