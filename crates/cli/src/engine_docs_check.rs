//! The engines are named in one place in code (`registry.rs`) and in many texts a user or an
//! agent reads first: `--help`, the plugin's skill and command, the marketplace and plugin
//! manifests, the README. This check reads the engine list from the registry and holds every
//! such text to it, so a text that drifts (an engine added, dropped or reordered in code; a
//! list that leaves one out) fails here.
//!
//! The rule: every list of three or more engine names in a text (names separated only by
//! commas, `and`, `or`, backticks and spaces; `bubblewrap` and `Kubernetes` count as `bwrap` and
//! `k8s`) is either every engine or the `auto` ladder, in the registry's order; and each text
//! has at least one. Two names (`docker or podman`) are a deliberate subset and left alone.

use std::path::{Path, PathBuf};

use clap::CommandFactory;

use crate::args::Cli;
use crate::registry;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Other spellings of an engine's name in prose.
const ALIASES: &[(&str, &str)] = &[("bubblewrap", "bwrap"), ("kubernetes", "k8s")];

/// The runs of engine names in `text`, each in the order written.
fn engine_lists(text: &str) -> Vec<Vec<&'static str>> {
    let names = registry::names();
    let engine = |word: &str| {
        let word = word.to_ascii_lowercase();
        let word = ALIASES.iter().find(|(alias, _)| *alias == word).map_or(word.as_str(), |a| a.1);
        names.iter().copied().find(|n| *n == word)
    };
    // Words with their byte ranges; a name is a whole word (`k8s` keeps its digit).
    let mut words = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices().chain(std::iter::once((text.len(), ' '))) {
        match (c.is_ascii_alphanumeric(), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                words.push((s, i, &text[s..i]));
                start = None;
            }
            _ => {}
        }
    }
    let joins = |gap: &str| {
        gap.split(|c: char| c.is_whitespace() || matches!(c, ',' | '`'))
            .all(|w| matches!(w, "" | "or" | "and"))
    };
    let mut lists: Vec<Vec<&'static str>> = Vec::new();
    let mut last_end: Option<usize> = None;
    for (s, e, word) in words {
        let Some(name) = engine(word) else { continue };
        match (last_end, lists.last_mut()) {
            (Some(end), Some(list)) if joins(&text[end..s]) => list.push(name),
            _ => lists.push(vec![name]),
        }
        last_end = Some(e);
    }
    lists.retain(|l| l.len() >= 3);
    lists
}

/// Every problem of one text, as lines naming it.
fn drift(label: &str, text: &str) -> Vec<String> {
    let (all, ladder) = (registry::names(), registry::ladder_names());
    let lists = engine_lists(text);
    let mut problems: Vec<String> = lists
        .iter()
        .filter(|l| **l != all && **l != ladder)
        .map(|l| {
            format!(
                "{label}: lists the engines as `{}`; the code has `{}` (the `auto` ladder: `{}`)",
                l.join(", "),
                all.join(", "),
                ladder.join(", ")
            )
        })
        .collect();
    if lists.is_empty() {
        problems.push(format!("{label}: names no list of the engines (`{}`)", all.join(", ")));
    }
    problems
}

/// The long `--help` of every command, subcommands included, as `python-sandbox run --help`.
fn helps() -> Vec<(String, String)> {
    fn walk(cmd: &mut clap::Command, path: String, out: &mut Vec<(String, String)>) {
        out.push((format!("`{path} --help`"), cmd.render_long_help().to_string()));
        for sub in cmd.get_subcommands_mut() {
            if !sub.is_hide_set() && sub.get_name() != "help" {
                let path = format!("{path} {}", sub.get_name());
                walk(sub, path, out);
            }
        }
    }
    let mut cmd = Cli::command();
    cmd.build();
    let mut out = Vec::new();
    walk(&mut cmd, "python-sandbox".to_owned(), &mut out);
    out
}

/// The `description` strings of a JSON manifest, wherever they are.
fn descriptions(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match v {
                    serde_json::Value::String(s) if key == "description" => out.push(s.clone()),
                    _ => descriptions(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| descriptions(v, out)),
        _ => {}
    }
}

/// The plugin's and the README's texts, and whether each must list the engines (the plugin's
/// manifest need not: its description names none, but it may not name them wrong).
fn documents() -> Vec<(String, String, bool)> {
    let root = repo_root();
    let mut out = Vec::new();
    for file in
        ["plugin/skills/python-sandbox/SKILL.md", "plugin/commands/python-sandbox.md", "README.md"]
    {
        out.push((file.to_owned(), read(&root.join(file)), true));
    }
    for (file, must) in
        [(".claude-plugin/marketplace.json", true), ("plugin/.claude-plugin/plugin.json", false)]
    {
        let json: serde_json::Value =
            serde_json::from_str(&read(&root.join(file))).unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut texts = Vec::new();
        descriptions(&json, &mut texts);
        out.push((format!("{file} (descriptions)"), texts.join("\n"), must));
    }
    out
}

/// The problems that count: all of them where the text must list the engines, else only wrong
/// lists.
fn counted(problems: Vec<String>, must: bool) -> impl Iterator<Item = String> {
    problems.into_iter().filter(move |p| must || !p.contains("names no list"))
}

#[test]
fn every_text_lists_the_engines_as_the_registry_does() {
    let mut problems = Vec::new();
    for (label, text, must) in documents() {
        problems.extend(counted(drift(&label, &text), must));
    }
    // Only the commands that are about engines must list them; no command may list them wrong.
    let about_engines =
        ["run", "detect", "session"].map(|c| format!("`python-sandbox {c} --help`"));
    for (label, help) in helps() {
        problems.extend(counted(drift(&label, &help), about_engines.contains(&label)));
    }
    assert!(problems.is_empty(), "texts out of step with registry.rs:\n{}", problems.join("\n"));
}

#[test]
fn the_check_catches_what_drifted_before() {
    // The texts this check was written against: each of these must fail it.
    for old in [
        "The isolation engine; `auto` takes the first that works of bwrap, docker, podman.",
        "Report which isolation engines (bwrap, docker, podman) work here",
        "a throwaway sandbox (bubblewrap, Docker or Podman) that hides $HOME",
        "1. **Detect the engine** (bubblewrap with pasta, Docker or Podman):",
        "the engines are podman, docker, bwrap, native and k8s",
        "no engine named here",
    ] {
        assert!(!drift("old", old).is_empty(), "not caught: {old}");
    }
    let all = registry::names().join(", ");
    let ladder = registry::ladder_names().join(" or ");
    for good in [format!("engines: {all}"), format!("`auto` tries {ladder}; docker or podman")] {
        assert!(drift("good", &good).is_empty(), "refused: {good}");
    }
}
