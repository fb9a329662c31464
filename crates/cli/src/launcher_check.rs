//! The plugin's launcher (`plugin/bin/python-sandbox`, POSIX sh) finds, downloads, installs and
//! refuses as it says. Each test gives it a PATH of its own: the real system tools it may use
//! (curl, wget or python3 to fetch; sha256sum, shasum or python3 to hash; tar), stub CLI, `cargo`
//! and `uv` scripts, and a release tarball served by an HTTP server on loopback.

use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn repo_launcher() -> PathBuf {
    repo_root().join("plugin/bin/python-sandbox")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The tools every launcher run needs; a test adds a fetcher and a hasher of its choice.
const BASE_TOOLS: &[&str] = &[
    "sh", "tr", "sed", "dirname", "mkdir", "cat", "chmod", "uname", "mktemp", "rm", "mv", "tar",
    "gzip", "tail", "sleep", "setsid",
];

/// A system tool, from Debian's directories only (not a developer's own installs).
fn system_tool(name: &str) -> Option<PathBuf> {
    ["/usr/bin", "/bin"].iter().map(|d| Path::new(d).join(name)).find(|p| p.exists())
}

/// The ways to fetch and hash a download the launcher knows, by the tools each needs.
const FETCHERS: [(&str, &[&str]); 3] = [
    ("curl", &["curl", "sha256sum"]),
    ("wget", &["wget", "shasum", "perl"]),
    ("python3", &["python3"]),
];

/// The tools of the first way to fetch and hash that this machine has.
fn a_fetcher() -> &'static [&'static str] {
    let usable = FETCHERS.iter().find(|(_, tools)| tools.iter().all(|t| system_tool(t).is_some()));
    usable.map(|(_, tools)| *tools).expect("no curl, wget or python3 in /usr/bin or /bin")
}

/// A scratch directory for one launcher test, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("psbx-launcher-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }

    /// A directory of the base tools and `extra`, and nothing else (no cargo, no uv).
    fn tools(&self, extra: &[&str]) -> PathBuf {
        let dir = self.0.join("tools");
        std::fs::create_dir_all(&dir).expect("tools dir");
        for tool in BASE_TOOLS.iter().chain(extra) {
            let found = system_tool(tool);
            let found = found.unwrap_or_else(|| panic!("{tool} not found in /usr/bin or /bin"));
            std::os::unix::fs::symlink(found, dir.join(tool)).expect("symlink a tool");
        }
        dir
    }

    /// An executable sh script at `dir/name`; returns `dir`.
    fn script(&self, dir: &str, name: &str, body: &str) -> PathBuf {
        let dir = self.0.join(dir);
        std::fs::create_dir_all(&dir).expect("stub dir");
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write a stub");
        let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(&path, mode).expect("chmod a stub");
        dir
    }

    /// The one install directory, `~/.local/share/python-sandbox/plugin` of the scratch HOME.
    fn data(&self) -> PathBuf {
        self.0.join("home/.local/share/python-sandbox/plugin")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A stub CLI of `version` that prints its arguments.
fn fake_cli(version: &str) -> String {
    format!(
        "if [ \"$1\" = --version ]; then echo 'python-sandbox {version}'; else echo \"ran: $*\"; fi"
    )
}

/// How a launcher run is called: as the MCP server (with Claude Code's plugin data dir, which
/// the launcher must not use) or as the skill's Bash call (without it).
#[derive(Clone, Copy)]
enum Caller {
    Mcp,
    Bash,
}

/// Runs a launcher with only `path` on PATH and HOME inside the scratch; releases come from
/// `base` (a port nothing listens on unless a test serves one).
fn launch(
    s: &Scratch,
    launcher: &Path,
    path: &[PathBuf],
    base: Option<&str>,
    caller: Caller,
    args: &[&str],
) -> std::process::Output {
    let path = std::env::join_paths(path).expect("a PATH");
    let mut cmd = std::process::Command::new(launcher);
    cmd.args(args)
        .env_clear()
        .env("PATH", path)
        .env("HOME", s.0.join("home"))
        .env("PYTHON_SANDBOX_RELEASE_BASE", base.unwrap_or("http://127.0.0.1:9/nothing"));
    if let Caller::Mcp = caller {
        cmd.env("CLAUDE_PLUGIN_DATA", s.0.join("claude-plugin-data"));
    }
    cmd.output().expect("run the launcher")
}

/// The launcher as Claude Code's cache holds it: the plugin alone, away from the checkout, with
/// `pins` as its SHA256SUMS.
fn copied_plugin(s: &Scratch, pins: &str) -> PathBuf {
    let plugin = s.0.join("cache/python-sandbox/0.0.0");
    std::fs::create_dir_all(plugin.join(".claude-plugin")).expect("plugin dir");
    std::fs::create_dir_all(plugin.join("bin")).expect("bin dir");
    let from = repo_root().join("plugin");
    std::fs::copy(
        from.join(".claude-plugin/plugin.json"),
        plugin.join(".claude-plugin/plugin.json"),
    )
    .expect("copy the manifest");
    std::fs::copy(from.join("bin/python-sandbox"), plugin.join("bin/python-sandbox"))
        .expect("copy the launcher");
    std::fs::write(plugin.join("SHA256SUMS"), pins).expect("write the pins");
    plugin.join("bin/python-sandbox")
}

/// The release tarball's name for this machine, as `cargo xtask dist` names it.
fn asset() -> String {
    format!("python-sandbox-{VERSION}-{}-unknown-linux-musl.tar.gz", std::env::consts::ARCH)
}

/// A release tarball laid out as `cargo xtask dist` makes it, holding a stub CLI of `version`.
fn tarball(s: &Scratch, version: &str) -> Vec<u8> {
    let stem = asset().trim_end_matches(".tar.gz").to_owned();
    let stage = s.0.join("stage");
    let _ = std::fs::remove_dir_all(&stage);
    s.script(&format!("stage/{stem}"), "python-sandbox", &fake_cli(version));
    let out = s.0.join("release.tar.gz");
    let status = std::process::Command::new("tar")
        .arg("-czf")
        .arg(&out)
        .arg("-C")
        .arg(&stage)
        .arg(&stem)
        .status()
        .expect("run tar");
    assert!(status.success());
    std::fs::read(&out).expect("read the tarball")
}

/// `sha256sum`'s line for `bytes` named `name`, as the pins file holds it.
fn pin(s: &Scratch, bytes: &[u8], name: &str) -> String {
    let file = s.0.join("to-hash");
    std::fs::write(&file, bytes).expect("write");
    let out = std::process::Command::new("sha256sum").arg(&file).output().expect("sha256sum");
    let hex = text(&out.stdout).split_whitespace().next().expect("a digest").to_owned();
    format!("{hex}  {name}\n")
}

/// A release server on loopback: `files` by URL path, 404 for anything else; counts requests.
struct Server {
    base: String,
    hits: Arc<AtomicUsize>,
}

fn serve(files: Vec<(String, Vec<u8>)>) -> Server {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let base = format!("http://{}/releases", listener.local_addr().expect("addr"));
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&hits);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            counter.fetch_add(1, Ordering::SeqCst);
            let mut reader = std::io::BufReader::new(stream.try_clone().expect("clone"));
            let mut request = String::new();
            let _ = reader.read_line(&mut request);
            // The rest of the head, up to the empty line.
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let path = request.split_whitespace().nth(1).unwrap_or_default();
            let found = files.iter().find(|(p, _)| format!("/releases/{p}") == path);
            let (status, body): (&str, &[u8]) = match found {
                Some((_, body)) => ("200 OK", body),
                None => ("404 Not Found", b"not found"),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body));
        }
    });
    Server { base, hits }
}

/// Leftovers of a download in the install directory.
fn partial_downloads(s: &Scratch) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(s.data()) else { return Vec::new() };
    entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".download"))
        .collect()
}

#[test]
fn the_launcher_runs_a_matching_cli_from_path_and_skips_other_versions() {
    let s = Scratch::new("match");
    let old = s.script("old", "python-sandbox", &fake_cli("0.0.0-old"));
    let good = s.script("good", "python-sandbox", &fake_cli(VERSION));
    let path = [old, good, s.tools(&[])];
    let out = launch(&s, &repo_launcher(), &path, None, Caller::Mcp, &["detect", "--json"]);
    assert_eq!(text(&out.stdout), "ran: detect --json\n", "stderr: {}", text(&out.stderr));
    assert!(out.status.success());
    assert_eq!(text(&out.stderr), "", "a found CLI runs without a word from the launcher");
}

#[test]
fn the_release_download_installs_the_pinned_tarball_with_whatever_tools_the_machine_has() {
    // curl or wget or python3 to fetch, sha256sum or shasum or python3 to hash: a fresh Debian
    // may have python3 and neither curl nor wget.
    let mut tried = 0;
    for (name, tools) in FETCHERS {
        if let Some(missing) = tools.iter().find(|t| system_tool(t).is_none()) {
            println!("SKIPPED: launcher download with {name}: no {missing} on this machine");
            continue;
        }
        tried += 1;
        let s = Scratch::new(&format!("download-{name}"));
        let bytes = tarball(&s, VERSION);
        let launcher = copied_plugin(&s, &pin(&s, &bytes, &asset()));
        let server = serve(vec![(format!("v{VERSION}/{}", asset()), bytes)]);
        let path = [s.tools(tools)];
        let base = Some(server.base.as_str());
        let out = launch(&s, &launcher, &path, base, Caller::Mcp, &["detect", "--json"]);
        let err = text(&out.stderr);
        assert_eq!(text(&out.stdout), "ran: detect --json\n", "{name}: {err}");
        assert!(out.status.success(), "{name}: {err}");
        let url = format!("{}/v{VERSION}/{}", server.base, asset());
        assert!(err.contains(&format!("first use: downloading {url}")), "{name}: {err}");
        assert!(s.data().join("bin/python-sandbox").is_file(), "{name}: not installed");
        assert!(!s.0.join("claude-plugin-data").exists(), "{name}: CLAUDE_PLUGIN_DATA was used");
        assert_eq!(partial_downloads(&s), Vec::<String>::new(), "{name}");
        assert_eq!(server.hits.load(Ordering::SeqCst), 1, "{name}");

        // The skill's Bash call has no CLAUDE_PLUGIN_DATA and finds the same install.
        let again = launch(&s, &launcher, &path, base, Caller::Bash, &["run", "a.py"]);
        assert_eq!(text(&again.stdout), "ran: run a.py\n", "{name}: {}", text(&again.stderr));
        assert_eq!(text(&again.stderr), "", "{name}");
        assert_eq!(server.hits.load(Ordering::SeqCst), 1, "{name}: downloaded twice");
    }
    assert!(tried > 0, "no way to download on this machine");
}

#[test]
fn a_tampered_download_installs_nothing_and_stops() {
    let s = Scratch::new("tampered");
    let bytes = tarball(&s, VERSION);
    let launcher = copied_plugin(&s, &pin(&s, &bytes, &asset()));
    let mut tampered = bytes.clone();
    tampered.push(0);
    let server = serve(vec![(format!("v{VERSION}/{}", asset()), tampered)]);
    // A uv on PATH must not be tried either: a forged download is an error, not a miss.
    let uv = s.script("uv", "uv", &format!("touch '{}'", s.0.join("uv-ran").display()));
    let path = [uv, s.tools(&[a_fetcher(), &["touch"]].concat())];
    let out = launch(&s, &launcher, &path, Some(&server.base), Caller::Mcp, &["detect"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(text(&out.stdout), "");
    assert!(err.contains("but the plugin pins") && err.contains("nothing was installed"), "{err}");
    assert!(err.contains("hint: "), "{err}");
    assert!(!s.data().join("bin/python-sandbox").exists(), "installed a tampered CLI");
    assert!(!s.0.join("uv-ran").exists(), "went on to uv after a forged download");
    assert_eq!(partial_downloads(&s), Vec::<String>::new());
}

/// A stub `uv` that logs its arguments and installs a CLI of `version` into `UV_TOOL_BIN_DIR`.
fn fake_uv(s: &Scratch, version: &str) -> PathBuf {
    let log = s.0.join("uv.log");
    let cli = fake_cli(version).replace('\'', "'\\''");
    let body = format!(
        "echo \"$* $UV_TOOL_BIN_DIR\" >> '{}'\nmkdir -p \"$UV_TOOL_BIN_DIR\"\n\
         printf '%s\\n' '#!/bin/sh' '{cli}' > \"$UV_TOOL_BIN_DIR/python-sandbox\"\nchmod +x \"$UV_TOOL_BIN_DIR/python-sandbox\"",
        log.display()
    );
    s.script("uv", "uv", &body)
}

#[test]
fn without_a_pin_or_a_release_to_download_the_launcher_installs_with_uv() {
    let want = |s: &Scratch| {
        format!(
            "tool install --force python-sandbox=={VERSION} {}\n",
            s.data().join("bin").display()
        )
    };
    // No pin for this platform's tarball: nothing is downloaded, even from a server that has it.
    let s = Scratch::new("no-pin");
    let bytes = tarball(&s, VERSION);
    let other = pin(&s, &bytes, "python-sandbox-0.0.0-riscv64-unknown-linux-musl.tar.gz");
    let launcher = copied_plugin(&s, &other);
    let server = serve(vec![(format!("v{VERSION}/{}", asset()), bytes)]);
    let path = [fake_uv(&s, VERSION), s.tools(a_fetcher())];
    let out = launch(&s, &launcher, &path, Some(&server.base), Caller::Bash, &["run", "a.py"]);
    let err = text(&out.stderr);
    assert_eq!(text(&out.stdout), "ran: run a.py\n", "{err}");
    assert!(err.contains(&format!("no sha256 of {} pinned", asset())), "{err}");
    assert_eq!(server.hits.load(Ordering::SeqCst), 0);
    assert_eq!(read(&s.0.join("uv.log")), want(&s));

    // Pinned, but the server has no such release (404): uv.
    let s = Scratch::new("no-release");
    let bytes = tarball(&s, VERSION);
    let launcher = copied_plugin(&s, &pin(&s, &bytes, &asset()));
    let server = serve(Vec::new());
    let path = [fake_uv(&s, VERSION), s.tools(a_fetcher())];
    let out = launch(&s, &launcher, &path, Some(&server.base), Caller::Mcp, &["run", "a.py"]);
    let err = text(&out.stderr);
    assert_eq!(text(&out.stdout), "ran: run a.py\n", "{err}");
    assert!(err.contains("the download failed"), "{err}");
    assert_eq!(read(&s.0.join("uv.log")), want(&s));
    assert_eq!(partial_downloads(&s), Vec::<String>::new());
}

#[test]
fn the_launcher_with_no_way_to_install_fails_with_the_manual_commands() {
    let s = Scratch::new("neither");
    let launcher = copied_plugin(&s, &pin(&s, b"a release", &asset()));
    let old = s.script("old", "python-sandbox", &fake_cli("0.0.0-old"));
    let out = launch(&s, &launcher, &[old, s.tools(&[])], None, Caller::Mcp, &["detect"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(text(&out.stdout), "");
    assert!(err.contains("neither curl, wget nor python3"), "{err}");
    assert!(err.contains("neither uv nor cargo is on PATH"), "{err}");
    assert!(err.contains(&format!("uv tool install python-sandbox=={VERSION}")), "{err}");
    assert!(err.contains("cargo install --locked --git https://"), "{err}");
}

/// A stub `cargo` that logs its arguments, waits for `s/go` to exist, then "installs" a CLI of
/// `version` under `--root`.
fn fake_cargo(s: &Scratch, version: &str) -> PathBuf {
    let log = s.0.join("cargo.log");
    let go = s.0.join("go");
    let cli = fake_cli(version).replace('\'', "'\\''");
    let body = format!(
        "echo \"$*\" >> '{log}'\necho 'cargo output'\n\
         while [ ! -e '{go}' ]; do sleep 0.05; done\n\
         while [ \"$1\" != --root ]; do shift; done\nmkdir -p \"$2/bin\"\n\
         printf '%s\\n' '#!/bin/sh' '{cli}' > \"$2/bin/python-sandbox\"\nchmod +x \"$2/bin/python-sandbox\"",
        log = log.display(),
        go = go.display()
    );
    s.script("cargo", "cargo", &body)
}

/// Lets the stub cargo finish and waits for the background build to end.
fn finish_build(s: &Scratch) {
    std::fs::write(s.0.join("go"), "").expect("let cargo finish");
    let deadline = Instant::now() + Duration::from_secs(20);
    while s.data().join("build.pid").exists() {
        assert!(Instant::now() < deadline, "the background build did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_cargo_build_runs_in_the_background_and_a_later_call_uses_it() {
    let s = Scratch::new("cargo-path");
    let path = [fake_cargo(&s, VERSION), s.tools(&[])];
    let start = Instant::now();
    let out = launch(&s, &repo_launcher(), &path, None, Caller::Mcp, &["detect"]);
    let err = text(&out.stderr);
    // Claude Code waits 30 s for an MCP server and 120 s for a Bash call: this one answers now.
    assert!(start.elapsed() < Duration::from_secs(10), "{:?}", start.elapsed());
    assert_eq!(out.status.code(), Some(75), "{err}");
    assert_eq!(text(&out.stdout), "");
    assert!(err.contains("in the background") && err.contains("about 6 minutes"), "{err}");
    assert!(err.contains("retry in a few minutes"), "{err}");
    assert!(!err.contains("cargo output"), "the build's output belongs in its log: {err}");

    let during = launch(&s, &repo_launcher(), &path, None, Caller::Bash, &["detect"]);
    assert_eq!(during.status.code(), Some(75));
    assert!(text(&during.stderr).contains("still building"), "{}", text(&during.stderr));

    finish_build(&s);
    let log = read(&s.0.join("cargo.log"));
    let root = repo_root().canonicalize().expect("repo root");
    let want = format!(
        "install --locked --force --root {} --path {}/crates/cli\n",
        s.data().join("build").display(),
        root.display()
    );
    assert_eq!(log, want, "one build, from the checkout");
    assert!(read(&s.data().join("build.log")).contains("cargo output"));
    let after = launch(&s, &repo_launcher(), &path, None, Caller::Bash, &["detect"]);
    assert_eq!(text(&after.stdout), "ran: detect\n", "{}", text(&after.stderr));
    assert_eq!(read(&s.0.join("cargo.log")), want, "built again");
}

#[test]
fn a_cached_plugin_builds_from_the_known_marketplace_or_else_the_tag() {
    let s = Scratch::new("cargo-known");
    let launcher = copied_plugin(&s, "");
    let path = [fake_cargo(&s, VERSION), s.tools(&[])];
    let out = launch(&s, &launcher, &path, None, Caller::Mcp, &["x"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    finish_build(&s);
    let build = s.data().join("build");
    let tag = format!(
        "install --locked --force --root {} --git {} --tag v{VERSION} --bin python-sandbox cli\n",
        build.display(),
        env!("CARGO_PKG_REPOSITORY")
    );
    assert_eq!(read(&s.0.join("cargo.log")), tag);

    // The file Claude Code writes for `claude plugin marketplace add ./` (2.1.x).
    std::fs::remove_dir_all(s.data()).expect("forget the install");
    std::fs::remove_file(s.0.join("cargo.log")).expect("forget the log");
    std::fs::remove_file(s.0.join("go")).expect("hold the next build");
    let root = repo_root().canonicalize().expect("repo root");
    let known = s.0.join("home/.claude/plugins");
    std::fs::create_dir_all(&known).expect("plugins dir");
    let entry = serde_json::json!({"other": {"source": {"source": "github", "repo": "a/b"}, "installLocation": "/nowhere"},
        "python-sandbox": {"source": {"source": "directory", "path": root}, "installLocation": root}});
    std::fs::write(
        known.join("known_marketplaces.json"),
        serde_json::to_string_pretty(&entry).expect("json"),
    )
    .expect("write known_marketplaces.json");
    let out = launch(&s, &launcher, &path, None, Caller::Mcp, &["x"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    finish_build(&s);
    let want = format!(
        "install --locked --force --root {} --path {}/crates/cli\n",
        build.display(),
        root.display()
    );
    assert_eq!(read(&s.0.join("cargo.log")), want);
    let out = launch(&s, &launcher, &path, None, Caller::Bash, &["x"]);
    assert_eq!(text(&out.stdout), "ran: x\n", "{}", text(&out.stderr));
}

#[test]
fn the_launcher_refuses_an_install_of_another_version() {
    // From uv: refused at once.
    let s = Scratch::new("wrong-uv");
    let out = launch(
        &s,
        &repo_launcher(),
        &[fake_uv(&s, "9.9.9"), s.tools(&[])],
        None,
        Caller::Mcp,
        &["x"],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(text(&out.stdout), "");
    let wrong = format!("python-sandbox 9.9.9, not python-sandbox {VERSION}");
    assert!(err.contains(&format!("the install gave {wrong}")), "{err}");

    // From the background build: never put in place; the next call says why.
    let s = Scratch::new("wrong-cargo");
    let path = [fake_cargo(&s, "9.9.9"), s.tools(&[])];
    let out = launch(&s, &repo_launcher(), &path, None, Caller::Mcp, &["x"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    finish_build(&s);
    assert!(!s.data().join("bin/python-sandbox").exists(), "a wrong build was put in place");
    let out = launch(&s, &repo_launcher(), &path, None, Caller::Bash, &["x"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("the last build from source failed"), "{err}");
    assert!(err.contains(&format!("the build gave {wrong}")), "{err}");
}
