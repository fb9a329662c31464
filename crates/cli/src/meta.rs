//! `python-sandbox meta …`: check, show and edit a script's `# /// script` block. The parsing and
//! editing are `pep723-meta`'s; this module only reads and writes files and prints.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;

use anstream::{eprint, eprintln, println};
use anyhow::Result;
use pep723_meta::{Diagnostic, Edit, LineIndex, PositionEncoding, SandboxKey, Severity};

use crate::args::MetaCmd;
use crate::script::{Script, read_script};
use crate::ui;

pub(crate) fn run(cmd: MetaCmd) -> Result<ExitCode> {
    match cmd {
        MetaCmd::Check { files, json } => check(&files, json),
        MetaCmd::Show { file, json: _ } => show(&file),
        MetaCmd::Add { file, requirements } => {
            let edits = requirements.into_iter().map(Edit::AddDependency).collect::<Vec<_>>();
            apply(&file, &edits)
        }
        MetaCmd::Remove { file, names } => {
            let edits = names.into_iter().map(Edit::RemoveDependency).collect::<Vec<_>>();
            apply(&file, &edits)
        }
        // `dependencies` and `requires-python` are the top-level PEP 723 keys; the sandbox's own
        // `dependencies` is spelled `tool.python-sandbox.dependencies`.
        MetaCmd::Set { file, key, value } => {
            let edit = match key.as_str() {
                "requires-python" => Edit::SetRequiresPython(value),
                "dependencies" => Edit::SetDependencies(value),
                _ => Edit::SetSandbox { key: sandbox_key(&key)?, value },
            };
            apply(&file, &[edit])
        }
        MetaCmd::Unset { file, key } => {
            let edit = match key.as_str() {
                "requires-python" => Edit::UnsetRequiresPython,
                "dependencies" => Edit::UnsetDependencies,
                _ => Edit::UnsetSandbox { key: sandbox_key(&key)? },
            };
            apply(&file, &[edit])
        }
        MetaCmd::Init { file } => apply(&file, &[Edit::Init]),
    }
}

fn sandbox_key(key: &str) -> Result<SandboxKey> {
    SandboxKey::from_str(key).map_err(|e| {
        let known = SandboxKey::ALL.map(SandboxKey::as_str).join("`, `");
        let hint = match e {
            pep723_meta::EditError::UnknownKey { suggestion: Some(s), .. } => {
                format!("did you mean `{s}`?")
            }
            _ => format!(
                "keys are `requires-python`, `dependencies` and, in `[tool.python-sandbox]`, `{known}`"
            ),
        };
        ui::hinted(format!("unknown key `{key}`"), hint)
    })
}

/// The one reading of a script's metadata as python-sandbox's policy, for `run`, `session run`,
/// `meta check`, `meta show` and the MCP server alike: strict (`Parsed::strict`: a block, table
/// or key that would not be read is an error), so `meta check` reports as errors exactly what
/// `run` refuses, at the same lines.
pub(crate) fn read_as_policy(bytes: &[u8]) -> pep723_meta::Parsed {
    pep723_meta::parse_bytes(bytes).strict()
}

/// Parses a script about to run ([`read_as_policy`]): every diagnostic is printed, warnings
/// too, and invalid metadata is refused with the diagnostics attached, so nothing runs on a
/// header we could not fully read.
pub(crate) fn parse_for_run(script: &Script) -> Result<pep723_meta::Parsed> {
    let parsed = read_as_policy(&script.bytes);
    let text = String::from_utf8_lossy(&script.bytes);
    let shown = script.display.display();
    anstream::eprint!("{}", render(&script.display, &text, &parsed.diagnostics));
    if parsed.status == pep723_meta::Status::Invalid {
        let hint = if script.path == script.display {
            format!("check it with `python-sandbox meta check {shown}`")
        } else {
            "fix the metadata at the lines above".to_owned()
        };
        return Err(ui::with_diagnostics(
            format!("`{shown}` has invalid metadata; nothing was run"),
            hint,
            diagnostics_json(&text, &parsed.diagnostics),
        ));
    }
    Ok(parsed)
}

fn check(files: &[PathBuf], json: bool) -> Result<ExitCode> {
    let (mut errors, mut warnings, mut unreadable) = (0usize, 0usize, 0usize);
    let mut reports = Vec::new();
    for file in files {
        let bytes = match read_script(file) {
            Ok(b) => b,
            Err(e) => {
                ui::report_error(&e);
                unreadable += 1;
                continue;
            }
        };
        let parsed = read_as_policy(&bytes);
        let text = String::from_utf8_lossy(&bytes);
        errors += parsed.diagnostics.iter().filter(|d| d.is_error()).count();
        warnings += parsed.diagnostics.iter().filter(|d| d.severity == Severity::Warning).count();
        if json {
            reports.push(check_json(file, &bytes));
        } else {
            eprint!("{}", render(file, &text, &parsed.diagnostics));
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        let n = files.len();
        let noun = if n == 1 { "file" } else { "files" };
        let unread =
            if unreadable > 0 { format!(" ({unreadable} unreadable)") } else { String::new() };
        eprintln!(
            "checked {n} {noun}{unread}: {}, {}",
            plural(errors, "error"),
            plural(warnings, "warning")
        );
    }
    Ok(if unreadable > 0 {
        ExitCode::from(crate::exit::USER_ERROR)
    } else if errors > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Pure: one file's entry of `meta check --json` (also the MCP server's `check_script`).
pub(crate) fn check_json(file: &Path, bytes: &[u8]) -> serde_json::Value {
    let parsed = read_as_policy(bytes);
    let text = String::from_utf8_lossy(bytes);
    serde_json::json!({
        "file": file.display().to_string(),
        "status": parsed.status,
        "diagnostics": diagnostics_json(&text, &parsed.diagnostics),
    })
}

fn plural(n: usize, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

/// 1-based line and column (in characters, as editors and rustc count) of a byte offset.
pub(crate) fn line_col(index: &LineIndex, text: &str, offset: usize) -> (usize, usize) {
    let p = index.position(offset, PositionEncoding::Utf8);
    let start = index.line_range(p.line as usize).map_or(0, |r| r.start);
    let end = (start + p.character as usize).min(text.len());
    let chars = text.get(start..end).map_or(p.character as usize, |s| s.chars().count());
    (p.line as usize + 1, chars + 1)
}

/// `FILE:LINE:COL: severity[code]: message` with indented `hint:` and related-location lines.
pub(crate) fn render(file: &Path, text: &str, diagnostics: &[Diagnostic]) -> String {
    let index = LineIndex::new(text);
    let mut out = String::new();
    let f = file.display();
    for d in diagnostics {
        let (line, col) = line_col(&index, text, d.span.start);
        let style = if d.is_error() { ui::ERROR } else { ui::WARNING };
        let sev = d.severity.as_str();
        let _ = writeln!(out, "{f}:{line}:{col}: {style}{sev}[{}]{style:#}: {}", d.code, d.message);
        for r in &d.related {
            let (line, col) = line_col(&index, text, r.span.start);
            let _ =
                writeln!(out, "  {f}:{line}:{col}: {}note{:#}: {}", ui::NOTE, ui::NOTE, r.message);
        }
        if let Some(hint) = &d.hint {
            let _ = writeln!(out, "  {}hint{:#}: {hint}", ui::HINT, ui::HINT);
        }
    }
    out
}

fn diagnostics_json(text: &str, diagnostics: &[Diagnostic]) -> serde_json::Value {
    let index = LineIndex::new(text);
    let items = diagnostics.iter().map(|d| {
        let (line, column) = line_col(&index, text, d.span.start);
        let mut v = serde_json::to_value(d).unwrap_or_default();
        if let Some(obj) = v.as_object_mut() {
            obj.insert("line".into(), line.into());
            obj.insert("column".into(), column.into());
            obj.insert(
                "range".into(),
                serde_json::to_value(index.range(d.span.clone(), PositionEncoding::Utf16))
                    .unwrap_or_default(),
            );
        }
        v
    });
    serde_json::Value::Array(items.collect())
}

fn show(file: &Path) -> Result<ExitCode> {
    let bytes = read_script(file)?;
    let parsed = read_as_policy(&bytes);
    let text = String::from_utf8_lossy(&bytes);
    let out = serde_json::json!({
        "status": parsed.status,
        "metadata": parsed.toml_json(),
        "diagnostics": diagnostics_json(&text, &parsed.diagnostics),
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(if parsed.status == pep723_meta::Status::Invalid {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Applies edits and writes the file back ([`crate::rewrite`]); on any error nothing is written.
fn apply(file: &Path, edits: &[Edit]) -> Result<ExitCode> {
    let bytes = read_script(file)?;
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            return Err(ui::hinted(
                format!("cannot edit `{}`: invalid utf-8 at byte {at}", file.display()),
                "inline script metadata must be utf-8; re-save the file as utf-8",
            ));
        }
    };
    // The library's messages carry their own `hint:` line; `ui::report_error` prints it as a hint.
    let outcome = pep723_meta::edit(&text, edits)
        .map_err(|e| anyhow::anyhow!("cannot edit `{}`: {e}", file.display()))?;
    // Removing what is not there is a typo worth stopping for, not a success: nothing is written.
    let absent: Vec<&str> = outcome
        .unchanged
        .iter()
        .filter_map(|&i| match edits.get(i) {
            Some(Edit::RemoveDependency(name)) => Some(name.as_str()),
            _ => None,
        })
        .collect();
    if !absent.is_empty() {
        let names = absent.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
        let listed = pep723_meta::parse(&text).toml.and_then(|t| match t.get("dependencies") {
            Some(pep723_meta::TomlValue::Array(items)) => Some(
                items
                    .iter()
                    .filter_map(|v| match v {
                        pep723_meta::TomlValue::String(s) => Some(format!("`{s}`")),
                        _ => None,
                    })
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        });
        let hint = match listed {
            Some(l) if !l.is_empty() => format!("its dependencies are {}", l.join(", ")),
            _ => "it declares no dependencies".to_owned(),
        };
        let noun = if absent.len() == 1 { "dependency" } else { "dependencies" };
        return Err(ui::hinted(
            format!("`{}` has no {noun} {names}; nothing was changed", file.display()),
            hint,
        ));
    }
    if !outcome.changed() {
        eprintln!("`{}` already has that metadata; nothing to do", file.display());
        return Ok(ExitCode::SUCCESS);
    }
    crate::rewrite::rewrite(file, text.as_bytes(), outcome.text.as_bytes())?;
    let parsed = read_as_policy(outcome.text.as_bytes());
    let problems: Vec<Diagnostic> =
        parsed.diagnostics.into_iter().filter(|d| d.is_error()).collect();
    if !problems.is_empty() {
        eprint!("{}", render(file, &outcome.text, &problems));
    }
    eprintln!("updated `{}` ({})", file.display(), plural(outcome.edits.len(), "change"));
    Ok(ExitCode::SUCCESS)
}
