//! `cargo xtask package`: the library crates meant for others, as crates.io would get them
//! (nothing is published from here): `cargo package` with its verify build of each crate against
//! the others' packaged sources, then their docs with warnings denied, as docs.rs builds them.
//!
//! The CLI, xtask, the WASM binding (an npm package) and the conformance suite stay
//! `publish = false`; a test below keeps [`PUBLISHED`] and the manifests in step.

use anyhow::Result;
use xshell::{Shell, cmd};

pub(crate) struct Package;

/// Every crate `cargo package` checks, dependencies first (the order of the report only).
pub(crate) const PUBLISHED: &[&str] = &[
    "pep508-noregex",
    "reaper",
    "sandbox-core",
    "pep723-meta",
    "engine-detect",
    "sandbox-net",
    "engine-bwrap",
    "engine-oci",
    "engine-k8s",
    "engine-native",
];

impl Package {
    pub(crate) fn run(self, sh: &Shell) -> Result<()> {
        let packages: Vec<String> =
            PUBLISHED.iter().flat_map(|p| ["-p".to_owned(), (*p).to_owned()]).collect();
        crate::section("package: cargo package (verify build)");
        // CI's clone is clean; a developer's tree with edits is packaged as it is.
        let dirty = if is_clean(sh) { None } else { Some("--allow-dirty") };
        let args = &packages;
        forget_extracted(sh)?;
        cmd!(sh, "cargo package --locked {dirty...} {args...}").run()?;
        crate::section("package: docs without warnings");
        cmd!(sh, "cargo doc --no-deps --locked {packages...}")
            .env("RUSTDOCFLAGS", "-D warnings")
            .run()?;
        Ok(())
    }
}

/// `cargo package` verifies each crate against the others' packaged sources, served from a
/// local registry under `target/package`; cargo extracts them into
/// `$CARGO_HOME/registry/src/-HASH/` (the hash is of that registry's path) and never extracts
/// them again. A clone at a path packaged before would verify against those stale copies (a
/// fresh clone failed to build engine-k8s against last session's sandbox-core), so ours go.
fn forget_extracted(sh: &Shell) -> Result<()> {
    let home = match sh.var("CARGO_HOME") {
        Ok(home) => std::path::PathBuf::from(home),
        Err(_) => std::path::PathBuf::from(sh.var("HOME")?).join(".cargo"),
    };
    let Ok(registries) = std::fs::read_dir(home.join("registry/src")) else { return Ok(()) };
    for registry in registries.flatten() {
        // Named registries (crates.io) are `NAME-HASH`; the local ones have no name.
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for package in std::fs::read_dir(registry.path())?.flatten() {
            let name = package.file_name().to_string_lossy().into_owned();
            if PUBLISHED.iter().any(|p| is_version_of(&name, p)) {
                std::fs::remove_dir_all(package.path())?;
            }
        }
    }
    Ok(())
}

/// Whether `dir` is `crate-VERSION` (not another crate sharing the prefix, `pep723-meta-wasm`).
fn is_version_of(dir: &str, krate: &str) -> bool {
    dir.strip_prefix(krate)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|version| version.starts_with(|c: char| c.is_ascii_digit()))
}

fn is_clean(sh: &Shell) -> bool {
    cmd!(sh, "git status --porcelain").quiet().read().is_ok_and(|s| s.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_crates_extracted_copies_are_forgotten() {
        assert!(is_version_of("sandbox-core-0.0.0", "sandbox-core"));
        assert!(is_version_of("pep508-noregex-0.9.2", "pep508-noregex"));
        assert!(!is_version_of("pep723-meta-wasm-0.0.0", "pep723-meta"));
        assert!(!is_version_of("sandbox-core", "sandbox-core"));
        assert!(!is_version_of("serde-1.0.0", "sandbox-core"));
    }

    /// `(name, publish = false?)` of a manifest, read by line (xtask has no TOML parser).
    fn manifest(text: &str) -> (String, bool) {
        let name = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("name = \""))
            .and_then(|rest| rest.strip_suffix('"'))
            .unwrap_or_default()
            .to_owned();
        let private = text.lines().any(|l| {
            let l = l.trim();
            l == "publish = false" || l == "publish.workspace = true"
        });
        (name, private)
    }

    #[test]
    fn published_crates_are_exactly_the_ones_without_publish_false() {
        let root = crate::project_root();
        let mut dirs: Vec<_> = std::fs::read_dir(root.join("crates"))
            .expect("crates/")
            .map(|e| e.expect("entry").path())
            .collect();
        dirs.extend(
            ["xtask", "tests", "crates/pep723-meta-wasm/vendor/pep508_rs"].map(|d| root.join(d)),
        );
        let mut published = Vec::new();
        for dir in dirs {
            let text = std::fs::read_to_string(dir.join("Cargo.toml")).expect("Cargo.toml");
            let (name, private) = manifest(&text);
            if !private {
                published.push(name.clone());
                for file in ["README.md", "LICENSE-MIT", "LICENSE-APACHE"] {
                    let has = dir.join(file).is_file()
                        || text.contains("readme = ") && file == "README.md";
                    assert!(has || name == "pep508-noregex", "{name} has no {file}");
                }
                assert!(text.contains("description"), "{name} has no description");
            }
        }
        published.sort();
        let mut want: Vec<String> = PUBLISHED.iter().map(|s| (*s).to_owned()).collect();
        want.sort();
        assert_eq!(published, want);
    }

    #[test]
    fn reads_name_and_publish() {
        let text = "[package]\nname = \"cli\"\npublish = false\n\n[dependencies]\nname = \"x\"\n";
        assert_eq!(manifest(text), ("cli".to_owned(), true));
        assert_eq!(manifest("[package]\nname = \"reaper\"\n"), ("reaper".to_owned(), false));
    }
}
