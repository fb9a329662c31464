//! `cargo xtask vsix`: the VS Code extension (`editors/vscode`) packaged as a `.vsix` with the
//! pinned `@vscode/vsce` (npm, into the tools cache) into `target/vsix`, then tested as shipped:
//! the `.vsix` is unpacked and the extension's node tests run against the unpacked copy
//! (`PEP723_EXTENSION_DIR`): its manifest and `extension.vsixmanifest` agree, it bundles the node
//! WASM build of pep723-meta (and nothing it does not run), and it activates and parses with it.
//!
//! The WASM build comes from `cargo xtask wasm` (built here when the extension has no copy yet).
//! Without node and npm, or when npm cannot install vsce, it prints `SKIPPED: vsix: reason`.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use xshell::{Shell, cmd};

pub(crate) struct Vsix;

/// The last vsce that runs on node 20 (4.x needs node 22).
const VSCE: &str = "3.9.2";
const EXTENSION: &str = "editors/vscode";
/// Where the `.vsix` is written, relative to the repository root.
const OUT: &str = "target/vsix";
/// The file the extension cannot run without, copied in by `cargo xtask wasm`.
const WASM: &str = "wasm/pep723-meta/node/pep723_meta_bg.wasm";

impl Vsix {
    pub(crate) fn run(self, sh: &Shell) -> Result<()> {
        crate::section("vsix: vsce");
        let vsce = match vsce(sh) {
            Ok(vsce) => vsce,
            Err(reason) => {
                crate::skipped("vsix", &reason);
                return Ok(());
            }
        };
        let root = crate::project_root();
        let extension = root.join(EXTENSION);
        if !extension.join(WASM).is_file() {
            crate::wasm::Wasm { check: false }.run(sh)?;
            if !extension.join(WASM).is_file() {
                crate::skipped("vsix", "no WASM build of pep723-meta (the wasm tier was skipped)");
                return Ok(());
            }
        }

        crate::section("vsix: vsce package");
        let out = root.join(OUT);
        sh.remove_path(&out)?;
        sh.create_dir(&out)?;
        let vsix = out.join(file_name(&sh.read_file(extension.join("package.json"))?)?);
        {
            let _dir = sh.push_dir(&extension);
            cmd!(sh, "{vsce} package --no-dependencies --out {vsix}").run()?;
        }

        crate::section("vsix: the extension's tests against the unpacked .vsix");
        let unpacked = sh.create_temp_dir()?;
        let dir = unpacked.path();
        cmd!(sh, "unzip -q {vsix} -d {dir}").run()?;
        let _dir = sh.push_dir(&extension);
        let output = cmd!(sh, "node --test")
            .env("PEP723_EXTENSION_DIR", dir.join("extension"))
            .ignore_status()
            .output()?;
        let report = String::from_utf8_lossy(&output.stdout);
        println!("{report}");
        if !output.status.success() {
            bail!("the extension's tests failed against the unpacked {}", vsix.display());
        }
        if skipped_tests(&report) != Some(0) {
            bail!("tests were skipped against the .vsix (or node printed no count):\n{report}");
        }
        println!("vsix: {}", vsix.display());
        Ok(())
    }
}

/// `<name>-<version>.vsix`, the name vsce gives it, from the manifest's two fields.
fn file_name(package_json: &str) -> Result<String> {
    let field = |key: &str| -> Result<String> {
        let needle = format!("\"{key}\":");
        let Some(at) = package_json.find(&needle) else {
            bail!("{EXTENSION}/package.json has no `{key}`")
        };
        let rest = package_json[at + needle.len()..].trim_start();
        match rest.strip_prefix('"').and_then(|r| r.split_once('"')) {
            Some((value, _)) if !value.is_empty() => Ok(value.to_owned()),
            _ => bail!("{EXTENSION}/package.json: `{key}` is not a string"),
        }
    };
    Ok(format!("{}-{}.vsix", field("name")?, field("version")?))
}

/// The `skipped N` count of node's test runner summary.
fn skipped_tests(report: &str) -> Option<u64> {
    report.lines().find_map(|l| {
        let l = l.trim_start_matches(['ℹ', '#', ' ']);
        l.strip_prefix("skipped ")?.trim().parse().ok()
    })
}

/// The pinned vsce, installed from npm into the tools cache when missing; `Err` is the reason to
/// skip.
fn vsce(sh: &Shell) -> std::result::Result<PathBuf, String> {
    for tool in ["node", "npm"] {
        if cmd!(sh, "{tool} --version").quiet().ignore_stdout().ignore_stderr().run().is_err() {
            return Err(format!("`{tool}` not found (install Node.js 20 or newer)"));
        }
    }
    let prefix = crate::wasm::cache_dir(sh).with_file_name(format!("vsce-{VSCE}"));
    let bin = prefix.join("node_modules/.bin/vsce");
    if !bin.is_file() {
        install(sh, &prefix)?;
    }
    cmd!(sh, "{bin} --version").quiet().read().map_err(|e| format!("vsce does not start: {e}"))?;
    Ok(bin)
}

fn install(sh: &Shell, prefix: &Path) -> std::result::Result<(), String> {
    println!("vsix: installing @vscode/vsce {VSCE} (npm) into {}", prefix.display());
    let spec = format!("@vscode/vsce@{VSCE}");
    cmd!(
        sh,
        "npm install --prefix {prefix} --no-save --no-audit --no-fund --no-package-lock {spec}"
    )
    .run()
    .map_err(|e| format!("`npm install {spec}` failed (registry unreachable?): {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_vsix_like_vsce() {
        let json = "{\n  \"name\": \"python-sandbox-pep723\",\n  \"displayName\": \"x\",\n  \"version\": \"0.1.0\"\n}";
        assert_eq!(file_name(json).expect("name"), "python-sandbox-pep723-0.1.0.vsix");
        assert!(file_name("{ \"name\": \"x\" }").is_err());
        assert!(file_name("{ \"name\": 3, \"version\": \"1\" }").is_err());
    }

    #[test]
    fn the_extension_manifest_gives_a_name() {
        let json =
            std::fs::read_to_string(crate::project_root().join(EXTENSION).join("package.json"))
                .expect("package.json");
        assert!(file_name(&json).expect("name").starts_with("python-sandbox-pep723-"));
    }

    #[test]
    fn reads_the_skipped_count() {
        assert_eq!(skipped_tests("ℹ tests 9\nℹ pass 9\nℹ skipped 0\n"), Some(0));
        assert_eq!(skipped_tests("# tests 9\n# skipped 3\n"), Some(3));
        assert_eq!(skipped_tests("ok 1 - x\n"), None);
    }
}
