//! The Claude Code plugin is the product's front door, so its files are checked like code: the
//! manifests parse and point at files that exist, every command line in the skill and the slash
//! command goes through the plugin's launcher and parses with the real CLI grammar, and the
//! launcher (`plugin/bin/python-sandbox`) finds, installs and refuses as it says, against stub
//! `cargo`, `uv` and CLI binaries on a PATH of their own.

use std::path::{Path, PathBuf};

use clap::Parser;

use crate::args::Cli;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// How the skill and the command call the CLI: through the launcher, never a bare name.
const LAUNCHER: &str = "${CLAUDE_PLUGIN_ROOT}/bin/python-sandbox";

/// Command lines inside fenced code blocks that call the launcher, as `python-sandbox …`.
fn command_lines(markdown: &str) -> Vec<String> {
    let mut in_fence = false;
    let mut out = Vec::new();
    for line in markdown.lines() {
        let t = line.trim();
        if t.starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if let Some(rest) = t.strip_prefix(LAUNCHER).filter(|_| in_fence) {
            out.push(format!("python-sandbox{rest}"));
        }
    }
    out
}

/// Splits a documented command line into argv; placeholders like `<file>` become a plain word.
fn argv(line: &str) -> Vec<String> {
    line.split_whitespace()
        .map(|w| if w.contains('<') { w.replace(['<', '>'], "") } else { w.to_owned() })
        .collect()
}

#[test]
fn marketplace_lists_the_plugin_and_its_source_exists() {
    let root = repo_root();
    let market = json(&root.join(".claude-plugin/marketplace.json"));
    assert_eq!(market["name"], "python-sandbox");
    let plugins = market["plugins"].as_array().expect("plugins is an array");
    let entry = plugins.iter().find(|p| p["name"] == "python-sandbox").expect("plugin listed");
    let source = entry["source"].as_str().expect("source is a path");
    let plugin_dir = root.join(source);
    let manifest = json(&plugin_dir.join(".claude-plugin/plugin.json"));
    assert_eq!(manifest["name"], "python-sandbox");
    assert!(manifest["version"].is_string() && manifest["description"].is_string());
    for file in ["commands/python-sandbox.md", "skills/python-sandbox/SKILL.md"] {
        let text = read(&plugin_dir.join(file));
        let front = text.strip_prefix("---\n").and_then(|t| t.split_once("\n---\n"));
        let (front, _) = front.unwrap_or_else(|| panic!("{file}: no front matter"));
        assert!(front.contains("description:"), "{file}: front matter has no description");
    }
}

#[test]
fn documented_command_lines_parse_with_the_real_cli() {
    let dir = repo_root().join("plugin");
    let mut checked = 0;
    for file in ["commands/python-sandbox.md", "skills/python-sandbox/SKILL.md"] {
        let lines = command_lines(&read(&dir.join(file)));
        assert!(!lines.is_empty(), "{file}: no python-sandbox command lines found");
        for line in lines {
            if let Err(e) = Cli::try_parse_from(argv(&line)) {
                panic!("{file}: `{line}` does not parse:\n{e}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 5, "only {checked} command lines checked");
}

/// The README's fenced `python-sandbox …` lines, as a shell would split them: a leading `$ `
/// prompt, a trailing `# comment`, redirections and pipes dropped, `"$id"` a plain word.
fn readme_command_lines(markdown: &str) -> Vec<String> {
    let mut in_fence = false;
    let mut out = Vec::new();
    for line in markdown.lines() {
        let t = line.trim();
        if t.starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        let t = t.strip_prefix("$ ").unwrap_or(t);
        if !in_fence || !t.starts_with("python-sandbox ") {
            continue;
        }
        let end = [" #", " < ", " | "].iter().filter_map(|m| t.find(m)).min().unwrap_or(t.len());
        out.push(t[..end].replace("\"$id\"", "id"));
    }
    out
}

#[test]
fn the_readmes_command_lines_parse_with_the_real_cli() {
    let lines = readme_command_lines(&read(&repo_root().join("README.md")));
    for line in &lines {
        if let Err(e) = Cli::try_parse_from(argv(line)) {
            panic!("README.md: `{line}` does not parse:\n{e}");
        }
    }
    assert!(lines.iter().any(|l| l.contains("--engine k8s")), "no k8s line checked: {lines:?}");
    assert!(lines.len() >= 10, "only {} command lines checked", lines.len());
    let wrong =
        readme_command_lines("```\npython-sandbox session exec --engine kube id -- ls\n```\n");
    assert!(Cli::try_parse_from(argv(&wrong[0])).is_err(), "a wrong line is caught");
}

#[test]
fn no_fenced_command_calls_a_bare_python_sandbox() {
    // A bare name is "command not found" for everyone who installed only the plugin.
    let dir = repo_root().join("plugin");
    for file in ["commands/python-sandbox.md", "skills/python-sandbox/SKILL.md"] {
        let text = read(&dir.join(file));
        let mut in_fence = false;
        for line in text.lines() {
            let t = line.trim();
            if t.starts_with("```") {
                in_fence = !in_fence;
            } else if in_fence {
                assert!(!t.starts_with("python-sandbox"), "{file}: `{t}` bypasses the launcher");
            }
        }
    }
}

#[test]
fn the_plugin_version_is_the_cli_version_and_the_mcp_server_goes_through_the_launcher() {
    // The launcher accepts only a CLI whose `--version` is the plugin's version.
    let dir = repo_root().join("plugin");
    let manifest = json(&dir.join(".claude-plugin/plugin.json"));
    assert_eq!(manifest["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(manifest["repository"], env!("CARGO_PKG_REPOSITORY"));
    let mcp = json(&dir.join(".mcp.json"));
    let server = &mcp["mcpServers"]["python-sandbox"];
    assert_eq!(server["command"], LAUNCHER);
    assert_eq!(server["args"], serde_json::json!(["mcp"]));
}

#[test]
fn a_wrong_command_line_is_caught() {
    // Guards the check itself: a misspelt flag must not parse.
    assert!(Cli::try_parse_from(argv("python-sandbox run --nett off x.py")).is_err());
    assert!(Cli::try_parse_from(argv("python-sandbox meta check")).is_err());
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

    /// A directory of the few system tools the launcher uses, and nothing else (no cargo, no uv).
    fn tools(&self) -> PathBuf {
        let dir = self.0.join("tools");
        std::fs::create_dir_all(&dir).expect("tools dir");
        for tool in ["sh", "tr", "sed", "dirname", "mkdir", "cat", "chmod"] {
            let found =
                ["/usr/bin", "/bin"].iter().map(|d| Path::new(d).join(tool)).find(|p| p.exists());
            let found = found.unwrap_or_else(|| panic!("{tool} not found in /usr/bin or /bin"));
            std::os::unix::fs::symlink(found, dir.join(tool)).expect("symlink a tool");
        }
        dir
    }

    /// An executable sh script at `dir/name`.
    fn script(&self, dir: &str, name: &str, body: &str) -> PathBuf {
        let dir = self.0.join(dir);
        std::fs::create_dir_all(&dir).expect("stub dir");
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write a stub");
        let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(&path, mode).expect("chmod a stub");
        dir
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

/// Runs a launcher with only `path` on PATH, HOME and the plugin data dir inside the scratch.
fn launch(
    scratch: &Scratch,
    launcher: &Path,
    path: &[PathBuf],
    args: &[&str],
) -> std::process::Output {
    let path = std::env::join_paths(path).expect("a PATH");
    std::process::Command::new(launcher)
        .args(args)
        .env_clear()
        .env("PATH", path)
        .env("HOME", scratch.0.join("home"))
        .env("CLAUDE_PLUGIN_DATA", scratch.0.join("data"))
        .output()
        .expect("run the launcher")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn repo_launcher() -> PathBuf {
    repo_root().join("plugin/bin/python-sandbox")
}

const VERSION: &str = env!("CARGO_PKG_VERSION");

#[test]
fn the_launcher_runs_a_matching_cli_from_path_and_skips_other_versions() {
    let s = Scratch::new("match");
    let old = s.script("old", "python-sandbox", &fake_cli("0.0.0-old"));
    let good = s.script("good", "python-sandbox", &fake_cli(VERSION));
    let out = launch(&s, &repo_launcher(), &[old, good, s.tools()], &["detect", "--json"]);
    assert_eq!(text(&out.stdout), "ran: detect --json\n", "stderr: {}", text(&out.stderr));
    assert!(out.status.success());
    assert_eq!(text(&out.stderr), "", "a found CLI runs without a word from the launcher");
}

#[test]
fn the_launcher_without_cargo_or_uv_fails_with_the_manual_commands() {
    let s = Scratch::new("neither");
    let old = s.script("old", "python-sandbox", &fake_cli("0.0.0-old"));
    let out = launch(&s, &repo_launcher(), &[old, s.tools()], &["detect", "--json"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(text(&out.stdout), "");
    assert!(err.contains("neither cargo nor uv is on PATH"), "{err}");
    assert!(err.contains("cargo install --locked --git https://"), "{err}");
    assert!(err.contains(&format!("uv tool install python-sandbox=={VERSION}")), "{err}");
}

/// A stub `cargo` that logs its arguments and "installs" a CLI of `version` under `--root`.
fn fake_cargo(s: &Scratch, version: &str) -> PathBuf {
    let log = s.0.join("cargo.log");
    let cli = fake_cli(version).replace('\'', "'\\''");
    let body = format!(
        "echo \"$*\" >> '{log}'\necho 'cargo output' \n\
         while [ \"$1\" != --root ]; do shift; done\nmkdir -p \"$2/bin\"\n\
         printf '%s\\n' '#!/bin/sh' '{cli}' > \"$2/bin/python-sandbox\"\nchmod +x \"$2/bin/python-sandbox\"",
        log = log.display()
    );
    s.script("cargo", "cargo", &body)
}

#[test]
fn the_launcher_installs_with_cargo_from_the_checkout_once_and_reuses_it() {
    let s = Scratch::new("cargo-path");
    let cargo = fake_cargo(&s, VERSION);
    let path = [cargo, s.tools()];
    let out = launch(&s, &repo_launcher(), &path, &["detect"]);
    let err = text(&out.stderr);
    // The installer's chatter goes to stderr: stdout is the CLI's (and the MCP protocol's).
    assert_eq!(text(&out.stdout), "ran: detect\n", "{err}");
    assert!(err.contains("first use: building") && err.contains("cargo output"), "{err}");
    let log = read(&s.0.join("cargo.log"));
    let root = repo_root().canonicalize().expect("repo root");
    let data = s.0.join("data");
    let want = format!(
        "install --locked --root {} --path {}/crates/cli\n",
        data.display(),
        root.display()
    );
    assert_eq!(log, want);
    let again = launch(&s, &repo_launcher(), &path, &["detect"]);
    assert_eq!(text(&again.stdout), "ran: detect\n");
    assert_eq!(read(&s.0.join("cargo.log")), want, "the second use installs again");
}

/// The launcher as Claude Code's cache holds it: the plugin alone, away from the checkout.
fn copied_plugin(s: &Scratch) -> PathBuf {
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
    plugin.join("bin/python-sandbox")
}

#[test]
fn a_cached_plugin_installs_from_the_known_marketplace_or_else_the_tag() {
    let s = Scratch::new("cargo-known");
    let launcher = copied_plugin(&s);
    let path = [fake_cargo(&s, VERSION), s.tools()];
    let out = launch(&s, &launcher, &path, &["x"]);
    assert_eq!(text(&out.stdout), "ran: x\n", "{}", text(&out.stderr));
    let data = s.0.join("data");
    let tag = format!(
        "install --locked --root {} --git {} --tag v{VERSION} --bin python-sandbox cli\n",
        data.display(),
        env!("CARGO_PKG_REPOSITORY")
    );
    assert_eq!(read(&s.0.join("cargo.log")), tag);

    // The file Claude Code writes for `claude plugin marketplace add ./` (2.1.x).
    std::fs::remove_dir_all(&data).expect("forget the install");
    std::fs::remove_file(s.0.join("cargo.log")).expect("forget the log");
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
    let out = launch(&s, &launcher, &path, &["x"]);
    assert_eq!(text(&out.stdout), "ran: x\n", "{}", text(&out.stderr));
    let want = format!(
        "install --locked --root {} --path {}/crates/cli\n",
        data.display(),
        root.display()
    );
    assert_eq!(read(&s.0.join("cargo.log")), want);
}

#[test]
fn the_launcher_installs_with_uv_when_there_is_no_cargo() {
    let s = Scratch::new("uv");
    let log = s.0.join("uv.log");
    let cli = fake_cli(VERSION).replace('\'', "'\\''");
    let body = format!(
        "echo \"$* $UV_TOOL_BIN_DIR\" >> '{}'\nmkdir -p \"$UV_TOOL_BIN_DIR\"\n\
         printf '%s\\n' '#!/bin/sh' '{cli}' > \"$UV_TOOL_BIN_DIR/python-sandbox\"\nchmod +x \"$UV_TOOL_BIN_DIR/python-sandbox\"",
        log.display()
    );
    let uv = s.script("uv", "uv", &body);
    let out = launch(&s, &repo_launcher(), &[uv, s.tools()], &["run", "a.py"]);
    assert_eq!(text(&out.stdout), "ran: run a.py\n", "{}", text(&out.stderr));
    let bin = s.0.join("data/bin");
    assert_eq!(
        read(&log),
        format!("tool install --force python-sandbox=={VERSION} {}\n", bin.display())
    );
}

#[test]
fn the_launcher_refuses_an_install_of_another_version() {
    let s = Scratch::new("wrong");
    let out = launch(&s, &repo_launcher(), &[fake_cargo(&s, "9.9.9"), s.tools()], &["detect"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(text(&out.stdout), "");
    assert!(
        err.contains(&format!(
            "the install gave python-sandbox 9.9.9, not python-sandbox {VERSION}"
        )),
        "{err}"
    );
}
