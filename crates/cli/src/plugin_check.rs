//! The Claude Code plugin is the product's front door, so its files are checked like code: the
//! manifests parse and point at files that exist, and every `python-sandbox …` command line in the
//! skill and the slash command parses with the real CLI grammar.

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

/// Command lines inside fenced code blocks that start with `python-sandbox`.
fn command_lines(markdown: &str) -> Vec<String> {
    let mut in_fence = false;
    let mut out = Vec::new();
    for line in markdown.lines() {
        let t = line.trim();
        if t.starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence && t.starts_with("python-sandbox ") {
            out.push(t.to_owned());
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

#[test]
fn a_wrong_command_line_is_caught() {
    // Guards the check itself: a misspelt flag must not parse.
    assert!(Cli::try_parse_from(argv("python-sandbox run --nett off x.py")).is_err());
    assert!(Cli::try_parse_from(argv("python-sandbox meta check")).is_err());
}
