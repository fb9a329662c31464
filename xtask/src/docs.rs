//! `cargo xtask docs`: the book under `docs/` built with mdBook (a warning fails it), and every
//! internal link and anchor in the book, `README.md` and `ARCHITECTURE.md` checked.
//!
//! mdBook is installed with `cargo install` (crates.io is reachable where GitHub downloads may
//! not be) into `~/.cargo/bin`, once: later runs find it there. The link check is ours, in Rust:
//! no offline checker is at hand, and it must never fetch an outside address. A link to this
//! repository's own files on GitHub (`…/blob/main/PATH#anchor`) is checked against the local
//! file; other `http(s)` links are left alone.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use xshell::{Shell, cmd};

/// The mdBook this step installs (and expects): pinned, so a new release cannot fail CI.
const MDBOOK: &str = "0.5.4";

/// The book's source, relative to the repository.
const BOOK_SRC: &str = "docs/src";

/// The top-level documents checked besides the book.
const DOCUMENTS: &[&str] = &["README.md", "ARCHITECTURE.md"];

pub(crate) struct Docs;

impl Docs {
    pub(crate) fn run(self, sh: &Shell) -> Result<()> {
        let root = crate::project_root();
        let start = Instant::now();
        let problems = check_links(&root)?;
        if !problems.is_empty() {
            bail!("{} broken link(s):\n{}", problems.len(), problems.join("\n"));
        }
        println!("links: every internal link and anchor resolves ({:.1} s)", secs(start));

        let start = Instant::now();
        let mdbook = match ensure_mdbook(sh) {
            Ok(path) => path,
            Err(e) => {
                crate::skipped("docs (mdbook build)", &format!("{e:#}"));
                return Ok(());
            }
        };
        println!("mdbook {MDBOOK} ready ({:.1} s)", secs(start));
        let start = Instant::now();
        let out = cmd!(sh, "{mdbook} build docs").ignore_status().output()?;
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // mdBook logs a warning and still exits 0 (a broken include, a missing page's
        // fallback): warnings are errors here.
        let warnings: Vec<&str> =
            log.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).collect();
        if !out.status.success() || !warnings.is_empty() {
            bail!("mdbook build docs failed or warned:\n{log}");
        }
        println!("book: built into target/book ({:.1} s)", secs(start));
        Ok(())
    }
}

fn secs(start: Instant) -> f64 {
    start.elapsed().as_secs_f64()
}

/// `mdbook` at the pinned version: on `PATH` or where `cargo install` puts it (`~/.cargo/bin`),
/// else installed there.
fn ensure_mdbook(sh: &Shell) -> Result<PathBuf> {
    let root = ["CARGO_INSTALL_ROOT", "CARGO_HOME"]
        .iter()
        .find_map(|v| std::env::var_os(v).map(PathBuf::from))
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .context("none of CARGO_INSTALL_ROOT, CARGO_HOME and HOME is set")?;
    let installed = root.join("bin/mdbook");
    let version = |bin: &Path| {
        cmd!(sh, "{bin} --version").quiet().ignore_stderr().read().ok().filter(|v| {
            v.split_whitespace().nth(1).map(|v| v.trim_start_matches('v')) == Some(MDBOOK)
        })
    };
    for candidate in [PathBuf::from("mdbook"), installed.clone()] {
        if version(&candidate).is_some() {
            return Ok(candidate);
        }
    }
    // Only the `build` command: no search index, no server or watcher (fewer crates to build).
    println!("installing mdbook {MDBOOK} with cargo (once; a few minutes)");
    cmd!(sh, "cargo install mdbook --version {MDBOOK} --locked --no-default-features")
        .run()
        .context("cargo install mdbook")?;
    version(&installed)
        .with_context(|| format!("{} is not mdbook {MDBOOK}", installed.display()))?;
    Ok(installed)
}

/// Every problem with the internal links of the book and the top-level documents, as
/// `FILE:LINE: message` lines. Pure but for reading the files under `root`.
pub(crate) fn check_links(root: &Path) -> Result<Vec<String>> {
    let repository = repository_url(root)?;
    let mut files: Vec<PathBuf> = DOCUMENTS.iter().map(|f| root.join(f)).collect();
    let src = root.join(BOOK_SRC);
    let mut pages = Vec::new();
    for entry in std::fs::read_dir(&src).with_context(|| format!("reading {}", src.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    pages.sort();
    files.extend(pages.iter().cloned());

    let mut anchors: HashMap<PathBuf, Vec<String>> = HashMap::new();
    let mut problems = Vec::new();
    let show = |p: &Path| p.strip_prefix(root).unwrap_or(p).display().to_string();
    for file in &files {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        for link in links(&text) {
            let at = format!("{}:{}", show(file), link.line);
            if let Err(e) = check_link(root, &src, &repository, file, &link.target, &mut anchors) {
                problems.push(format!("{at}: `{}`: {e}", link.target));
            }
        }
    }
    // A page the summary does not list is never rendered: its links would point nowhere.
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).context("docs/src/SUMMARY.md")?;
    let listed: Vec<String> = links(&summary).into_iter().map(|l| l.target).collect();
    for page in &pages {
        let name = page.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name != "SUMMARY.md" && !listed.iter().any(|t| t == name) {
            problems.push(format!("{}: not listed in docs/src/SUMMARY.md", show(page)));
        }
    }
    Ok(problems)
}

/// `repository = "…"` of the workspace manifest: links to it are links to this tree.
fn repository_url(root: &Path) -> Result<String> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).context("Cargo.toml")?;
    manifest
        .lines()
        .find_map(|l| l.strip_prefix("repository = "))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .context("Cargo.toml has no `repository = \"…\"`")
}

fn check_link(
    root: &Path,
    src: &Path,
    repository: &str,
    file: &Path,
    target: &str,
    anchors: &mut HashMap<PathBuf, Vec<String>>,
) -> Result<(), String> {
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let dest = if path.is_empty() {
        file.to_path_buf()
    } else if let Some(rest) = ["blob", "tree"]
        .iter()
        .find_map(|kind| path.strip_prefix(&format!("{repository}/{kind}/main/")))
    {
        root.join(rest)
    } else if path.contains("://") || path.starts_with("mailto:") {
        return Ok(()); // outside: never fetched
    } else if path.starts_with('/') {
        return Err("an absolute path: write it relative to this file".to_owned());
    } else {
        let joined = normalize(&file.parent().unwrap_or(root).join(path));
        if !joined.starts_with(root) {
            return Err("points outside the repository".to_owned());
        }
        // The rendered book holds only docs/src: a page's link out of it would break there.
        if file.starts_with(src) && !joined.starts_with(src) {
            return Err(format!("leaves {BOOK_SRC}: link to {repository}/blob/main/… instead"));
        }
        joined
    };
    if !dest.exists() {
        return Err(format!(
            "{} does not exist",
            dest.strip_prefix(root).unwrap_or(&dest).display()
        ));
    }
    let Some(anchor) = anchor else { return Ok(()) };
    if dest.extension().is_none_or(|e| e != "md") {
        return Err("an anchor into a file that is not markdown".to_owned());
    }
    let ids = match anchors.get(&dest) {
        Some(ids) => ids,
        None => {
            let text = std::fs::read_to_string(&dest).map_err(|e| e.to_string())?;
            anchors.entry(dest.clone()).or_insert(heading_ids(&text))
        }
    };
    if ids.iter().any(|id| id == anchor) {
        Ok(())
    } else {
        Err(format!("no heading with the anchor `#{anchor}` (there are: {})", ids.join(", ")))
    }
}

/// `a/./b/../c` as `a/c`, without touching the filesystem.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// One link in a markdown file.
#[derive(Debug, PartialEq)]
pub(crate) struct Link {
    pub(crate) line: usize,
    pub(crate) target: String,
}

/// The lines of `text` outside fenced code blocks, numbered from 1.
fn prose(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fence: Option<&str> = None;
    text.lines().enumerate().filter_map(move |(i, line)| {
        let t = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| t.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => {
                fence = Some(m);
                None
            }
            (Some(open), Some(m)) if open == m => {
                fence = None;
                None
            }
            (Some(_), _) => None,
            (None, None) => Some((i + 1, line)),
        }
    })
}

/// `line` without its inline code spans (a link written in backticks is an example).
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|c| *c == '`').count();
        let after = &rest[start + ticks..];
        match after.find(&"`".repeat(ticks)) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                rest = after;
                out.push_str(&"`".repeat(ticks));
            }
        }
    }
    out.push_str(rest);
    out
}

/// The inline links (`[text](target)`, images too) and reference definitions (`[x]: target`).
pub(crate) fn links(text: &str) -> Vec<Link> {
    let mut out = Vec::new();
    for (line, raw) in prose(text) {
        let clean = without_code(raw);
        let t = clean.trim_start();
        if t.starts_with('[')
            && let Some((label, def)) = t[1..].split_once("]:")
            && !label.contains(']')
        {
            if let Some(target) = def.split_whitespace().next() {
                out.push(Link { line, target: target.trim_matches(['<', '>']).to_owned() });
            }
            continue;
        }
        let mut rest = clean.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            // `<…>` may hold spaces.
            if let Some((target, _)) = after.strip_prefix('<').and_then(|a| a.split_once('>')) {
                out.push(Link { line, target: target.to_owned() });
                rest = &after[target.len() + 2..];
                continue;
            }
            // The target ends at its closing parenthesis (nested pairs allowed) or a title.
            let mut depth = 0;
            let end = after
                .char_indices()
                .find(|&(_, c)| match c {
                    '(' => {
                        depth += 1;
                        false
                    }
                    ')' if depth == 0 => true,
                    ')' => {
                        depth -= 1;
                        false
                    }
                    c => c.is_whitespace(),
                })
                .map_or(after.len(), |(j, _)| j);
            let target = after[..end].trim_matches(['<', '>']);
            if !target.is_empty() {
                out.push(Link { line, target: target.to_owned() });
            }
            rest = &after[end..];
        }
    }
    out
}

/// The anchors of a markdown file's headings, as GitHub and mdBook both make them: lower
/// case, letters, digits, `-` and `_` kept, spaces as `-`, the rest dropped; a repeated one
/// gets `-1`, `-2`; `{#id}` at a heading's end names it.
pub(crate) fn heading_ids(text: &str) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    for (_, line) in prose(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let heading = line[hashes..].trim();
        if let Some(id) = heading.strip_suffix('}').and_then(|h| h.rsplit_once("{#")).map(|p| p.1) {
            ids.push(id.to_owned());
            continue;
        }
        // `[text](url)` reads as `text`.
        let mut plain = String::new();
        let mut rest = heading;
        while let Some(i) = rest.find("](") {
            plain.push_str(&rest[..i]);
            rest = rest[i..].split_once(')').map_or("", |(_, r)| r);
        }
        plain.push_str(rest);
        let base: String = plain
            .chars()
            .filter_map(|c| match c {
                c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c.to_ascii_lowercase()),
                c if c.is_whitespace() => Some('-'),
                _ => None,
            })
            .collect();
        let mut id = base.clone();
        let mut n = 0;
        while ids.contains(&id) {
            n += 1;
            id = format!("{base}-{n}");
        }
        ids.push(id);
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines of the README a newcomer reads before scrolling (a terminal's pager, the top of
    /// the repository's page).
    const FIRST_SCREEN: usize = 30;

    #[test]
    fn the_readmes_first_screen_has_the_install_lines_the_main_job_and_the_test_command() {
        let readme =
            std::fs::read_to_string(crate::project_root().join("README.md")).expect("read");
        let screen: Vec<&str> = readme.lines().take(FIRST_SCREEN).collect();
        let screen = screen.join("\n");
        for (what, said) in [
            ("the plugin's install", "/plugin install python-sandbox@python-sandbox"),
            ("the release tarball's install", "/releases/download/v"),
            ("uv's install", "`uv tool install python-sandbox`"),
            ("cargo's install", "`cargo install --locked"),
            ("the main job", "-- run examples/hello.py"),
            ("the test command", "$ cargo xtask ci"),
            ("the systems it runs on", "Runs on Linux"),
        ] {
            assert!(
                screen.contains(said),
                "README.md's first {FIRST_SCREEN} lines lack {what} (`{said}`)"
            );
        }
    }

    #[test]
    fn the_repositorys_docs_have_no_broken_link() {
        let problems = check_links(&crate::project_root()).expect("check");
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn links_are_found_outside_code_only() {
        let text = "see [a](a.md#x) and ![i](img/p.png \"title\")\n\
                    `[not](code.md)` [b](<b c.md>)\n```\n[fenced](no.md)\n```\n\
                    [ref]: https://example.org/x\n[p](f(1).md)";
        let targets: Vec<String> = links(text).into_iter().map(|l| l.target).collect();
        assert_eq!(targets, ["a.md#x", "img/p.png", "b c.md", "https://example.org/x", "f(1).md"]);
    }

    #[test]
    fn anchors_are_made_as_github_and_mdbook_make_them() {
        let text = "# The wall\n## On a cluster (k8s)\n## `Sandbox` protocol\n## What the host's NAT can do\n\
                    ## Dup\n## Dup\n## Custom {#mine}\n```\n# not a heading\n```\n#hashtag";
        assert_eq!(
            heading_ids(text),
            [
                "the-wall",
                "on-a-cluster-k8s",
                "sandbox-protocol",
                "what-the-hosts-nat-can-do",
                "dup",
                "dup-1",
                "mine"
            ]
        );
    }

    /// A scratch copy of the checked files' shape, with one planted fault each time.
    fn tree(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-docs-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }
        dir
    }

    #[test]
    fn a_planted_broken_link_or_anchor_fails() {
        let base = [
            ("Cargo.toml", "repository = \"https://github.com/o/r\"\n"),
            ("ARCHITECTURE.md", "# Map\n## Invariants\n"),
            ("docs/src/SUMMARY.md", "[Intro](intro.md)\n- [Page](page.md)\n"),
            ("docs/src/page.md", "# Page\n## A part\n"),
        ];
        let good = "[p](page.md#a-part) [m](https://github.com/o/r/blob/main/ARCHITECTURE.md#invariants) [x](https://example.org/nowhere)";
        let dir = tree(
            "good",
            &[
                base.as_slice(),
                &[("README.md", "[i](docs/src/intro.md)"), ("docs/src/intro.md", good)],
            ]
            .concat(),
        );
        assert_eq!(check_links(&dir).expect("check"), Vec::<String>::new());
        let _ = std::fs::remove_dir_all(&dir);
        for (file, text, fault) in [
            ("docs/src/intro.md", "[p](pages.md)", "pages.md does not exist"),
            ("docs/src/intro.md", "[p](page.md#a-prat)", "no heading with the anchor `#a-prat`"),
            ("docs/src/intro.md", "[s](#nothing)", "no heading with the anchor `#nothing`"),
            ("docs/src/intro.md", "[m](../../ARCHITECTURE.md)", "leaves docs/src"),
            (
                "docs/src/intro.md",
                "[m](https://github.com/o/r/blob/main/ARCH.md)",
                "ARCH.md does not exist",
            ),
            ("README.md", "[p](docs/src/page.md#nope)", "no heading with the anchor `#nope`"),
            ("README.md", "[x](../outside.md)", "outside the repository"),
        ] {
            let mut files = base.to_vec();
            files.push(("docs/src/intro.md", if file == "README.md" { "# Intro" } else { text }));
            files.push(("README.md", if file == "README.md" { text } else { "# Readme" }));
            let dir = tree("fault", &files);
            let problems = check_links(&dir).expect("check");
            assert!(
                problems.iter().any(|p| p.contains(fault) && p.starts_with(file)),
                "{fault}: {problems:?}"
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
        let orphan = tree(
            "orphan",
            &[
                base.as_slice(),
                &[("README.md", ""), ("docs/src/intro.md", ""), ("docs/src/lost.md", "")],
            ]
            .concat(),
        );
        let problems = check_links(&orphan).expect("check");
        assert!(problems.iter().any(|p| p.contains("lost.md: not listed")), "{problems:?}");
        let _ = std::fs::remove_dir_all(&orphan);
    }
}
