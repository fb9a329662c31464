//! The Claude Code plugin is the product's front door, so its files are checked like code: the
//! manifests parse and point at files that exist, every command line in the skill and the slash
//! command goes through the plugin's launcher and parses with the real CLI grammar. The launcher
//! itself is tested in `launcher_check.rs`.

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

/// The fenced `python-sandbox …` lines of the README or a page of the book, as a shell would
/// split them: a leading `$ ` prompt, a trailing `# comment`, redirections and pipes dropped,
/// `"$id"` a plain word. A ```` ```text ```` fence is a synopsis (`[--net on|off]`), not a
/// command line.
fn readme_command_lines(markdown: &str) -> Vec<String> {
    let (mut in_fence, mut synopsis) = (false, false);
    let mut out = Vec::new();
    for line in markdown.lines() {
        let t = line.trim();
        if let Some(info) = t.strip_prefix("```") {
            in_fence = !in_fence;
            synopsis = in_fence && info.trim() == "text";
            continue;
        }
        let t = t.strip_prefix("$ ").unwrap_or(t);
        if !in_fence || synopsis || !t.starts_with("python-sandbox ") {
            continue;
        }
        let end = [" #", " < ", " | "].iter().filter_map(|m| t.find(m)).min().unwrap_or(t.len());
        out.push(t[..end].replace("\"$id\"", "id"));
    }
    out
}

#[test]
fn the_readmes_and_the_books_command_lines_parse_with_the_real_cli() {
    // The README and every page of the book under docs/src.
    let root = repo_root();
    let mut files = vec![root.join("README.md")];
    let pages = std::fs::read_dir(root.join("docs/src")).expect("docs/src");
    let mut pages: Vec<PathBuf> = pages.map(|e| e.expect("docs/src entry").path()).collect();
    pages.retain(|p| p.extension().is_some_and(|e| e == "md"));
    pages.sort();
    files.extend(pages);
    let mut lines = Vec::new();
    for file in &files {
        for line in readme_command_lines(&read(file)) {
            if let Err(e) = Cli::try_parse_from(argv(&line)) {
                panic!("{}: `{line}` does not parse:\n{e}", file.display());
            }
            lines.push(line);
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
