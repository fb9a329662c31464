//! The conformance cases of the PEP 723 reference notes, as data: `cases/NN-name.STATUS.py` is
//! parsed and must have STATUS (`ok`, `none`, `invalid`); `cases/edit/NAME.py` gets the edits of
//! `NAME.edits`. One helper each; every rendering is an insta snapshot.

use std::path::{Path, PathBuf};

use pep723_meta::{Edit, LineEnding, SandboxKey, Status, apply_edits, edit, parse, parse_bytes};

use crate::support::{assert_spans_ok, render_diagnostics, render_parse, visible};

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/cases")
}

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("cases dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    files.sort();
    files
}

fn snapshot(name: &str, text: &str) {
    insta::with_settings!({
        snapshot_path => "snapshots",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!(name, text);
    });
}

#[test]
fn parse_cases() {
    let files = files(&cases_dir(), "py");
    assert!(files.len() >= 80, "conformance cases missing: {}", files.len());
    let mut wrong = Vec::new();
    for path in files {
        let name = path.file_stem().and_then(|s| s.to_str()).expect("utf-8 name").to_owned();
        let expected = match name.rsplit('.').next() {
            Some("ok") => Status::Ok,
            Some("none") => Status::None,
            Some("invalid") => Status::Invalid,
            other => panic!("{name}: file name must end in .ok/.none/.invalid, got {other:?}"),
        };
        let bytes = std::fs::read(&path).expect("read case");
        let parsed = parse_bytes(&bytes);
        if parsed.status != expected {
            wrong.push(format!("{name}: expected {expected:?}, got {:?}", parsed.status));
        }
        let rendered = match std::str::from_utf8(&bytes) {
            Ok(source) => {
                assert_eq!(parse(source), parsed, "{name}: parse and parse_bytes differ");
                assert_spans_ok(source, &parsed);
                assert_eq!(parsed.metadata.is_some(), parsed.status == Status::Ok, "{name}");
                let unedited = edit(source, &[]).expect("no-op edit");
                assert_eq!(unedited.text, source, "{name}: round trip");
                assert!(unedited.edits.is_empty());
                render_parse(source, &parsed)
            }
            Err(_) => format!("{parsed:#?}\n"),
        };
        snapshot(&name, &rendered);
    }
    assert!(wrong.is_empty(), "wrong status:\n{}", wrong.join("\n"));
}

/// `strict` (the parse `run` uses) refuses exactly what would run without settings the author
/// wrote; other warnings stay warnings.
#[test]
fn strict_refuses_unread_metadata() {
    let cases = [
        ("# /// script\n# [tool.python-sandbox]\n# nett = \"off\"\n# ///\n", Status::Invalid),
        ("# /// script\n# [tool.python-sandbox]\n# net = \"off\"\nprint(1)\n", Status::Invalid),
        ("#/// script\n# dependencies = []\n# ///\n", Status::Invalid),
        ("# /// pyproject\n# [run]\n# dependencies = []\n# ///\n", Status::Invalid),
        ("# /// other\n# x\n# ///\n# /// script\n# dependencies = []\n# ///\n", Status::Invalid),
        // A misspelt opener drops the whole table: within two edits of `script`, it is refused.
        ("# /// scritp\n# [tool.python-sandbox]\n# net = \"off\"\n# ///\n", Status::Invalid),
        ("# /// sript\n# dependencies = []\n# ///\n", Status::Invalid),
        // The table in a block of another type, or after the closer, is not read either.
        ("# /// config\n# [tool.python-sandbox]\n# net = \"off\"\n# ///\n", Status::Invalid),
        (
            "# /// script\n# dependencies = []\n# ///\n# [tool.python-sandbox]\n# net = \"off\"\n",
            Status::Invalid,
        ),
        // Other block types without the table are someone else's.
        ("# /// config\n# net = \"off\"\n# ///\n", Status::None),
        ("# /// script\n# dependencies = []\n# ///\n", Status::Ok),
        ("# /// script\n# tool.x = {a = 1,}\n# ///\n", Status::Ok),
        ("# /// script\n# dependencies = []\n# foo = 1\n# ///\n", Status::Ok),
        ("print(1)\n", Status::None),
    ];
    for (source, expected) in cases {
        let loose = parse(source);
        let strict = loose.clone().strict();
        assert_eq!(strict.status, expected, "{source:?}: {:?}", strict.diagnostics);
        assert_eq!(strict.metadata.is_some(), expected == Status::Ok, "{source:?}");
        let codes =
            |p: &pep723_meta::Parsed| p.diagnostics.iter().map(|d| d.code).collect::<Vec<_>>();
        assert_eq!(codes(&strict), codes(&loose), "{source:?}: the same diagnostics, only graver");
    }
}

/// One line of a `.edits` file: `init`, `add REQ`, `remove NAME`, `requires-python SPEC`,
/// `unset-requires-python`, `sandbox-add REQ`, `sandbox-remove NAME`, `set KEY VALUE`, `unset KEY`,
/// `set-dependencies VALUE`, `unset-dependencies`.
fn parse_op(line: &str) -> Edit {
    let (op, arg) = line.split_once(' ').unwrap_or((line, ""));
    let arg = arg.to_owned();
    let key = |k: &str| k.parse::<SandboxKey>().expect("sandbox key");
    match op {
        "init" => Edit::Init,
        "add" => Edit::AddDependency(arg),
        "remove" => Edit::RemoveDependency(arg),
        "requires-python" => Edit::SetRequiresPython(arg),
        "unset-requires-python" => Edit::UnsetRequiresPython,
        "sandbox-add" => Edit::AddSandboxDependency(arg),
        "sandbox-remove" => Edit::RemoveSandboxDependency(arg),
        "set" => {
            let (k, v) = arg.split_once(' ').expect("set KEY VALUE");
            Edit::SetSandbox { key: key(k), value: v.to_owned() }
        }
        "unset" => Edit::UnsetSandbox { key: key(&arg) },
        "set-dependencies" => Edit::SetDependencies(arg),
        "unset-dependencies" => Edit::UnsetDependencies,
        _ => panic!("unknown op {op:?}"),
    }
}

#[test]
fn edit_cases() {
    let dir = cases_dir().join("edit");
    let files = files(&dir, "py");
    assert!(files.len() >= 20, "edit cases missing");
    for path in files {
        let name = path.file_stem().and_then(|s| s.to_str()).expect("utf-8 name").to_owned();
        let source = std::fs::read_to_string(&path).expect("read case");
        let ops_text = std::fs::read_to_string(path.with_extension("edits")).expect("edits file");
        let ops: Vec<Edit> = ops_text.lines().filter(|l| !l.is_empty()).map(parse_op).collect();
        let mut out = format!("edits:\n{ops_text}");
        match edit(&source, &ops) {
            Err(e) => out.push_str(&format!("--- refused\n{e}\n")),
            Ok(outcome) => {
                check_edit_invariants(&name, &source, &ops, &outcome.text);
                assert_eq!(
                    apply_edits(&source, &outcome.edits),
                    outcome.text,
                    "{name}: text edits"
                );
                out.push_str(&format!("--- result\n{}", visible(&outcome.text)));
                out.push_str("--- text edits\n");
                for e in &outcome.edits {
                    out.push_str(&format!("{}..{} {:?}\n", e.range.start, e.range.end, e.new_text));
                }
                let reparsed = parse(&outcome.text);
                out.push_str(&format!("--- reparsed: {:?}\n", reparsed.status));
                out.push_str(&render_diagnostics(&outcome.text, &reparsed.diagnostics));
            }
        }
        snapshot(&format!("edit-{name}"), &out);
    }
}

/// Only block bytes change, line endings and BOM stay, and a second run changes nothing.
pub(crate) fn check_edit_invariants(name: &str, source: &str, ops: &[Edit], text: &str) {
    let again = edit(text, ops).expect("re-edit");
    assert_eq!(again.text, text, "{name}: edits are not idempotent");
    assert!(again.edits.is_empty(), "{name}: idempotent edit reported changes");
    assert_eq!(text.starts_with('\u{feff}'), source.starts_with('\u{feff}'), "{name}: bom");
    if source.contains(['\n', '\r']) {
        assert_eq!(LineEnding::detect(text), LineEnding::detect(source), "{name}: line endings");
    }
    let before = parse(source);
    if let Some(block) = &before.block {
        let after = parse(text);
        let new_block = after.block.as_ref().expect("block kept");
        assert_eq!(
            &source[..block.span.start],
            &text[..new_block.span.start],
            "{name}: prelude changed"
        );
        assert_eq!(
            &source[block.span.end..],
            &text[new_block.span.end..],
            "{name}: postlude changed"
        );
    } else if text != source {
        // A new block is an insertion: the old text is still there around it.
        let added = text.len() - source.len();
        let at = source.bytes().zip(text.bytes()).take_while(|(a, b)| a == b).count();
        let at = (0..=at).rev().find(|&i| source.is_char_boundary(i)).unwrap_or(0);
        assert!(text[..at] == source[..at], "{name}");
        let rest_from = at + added;
        assert!(text.len() >= rest_from && text.get(rest_from..).is_some(), "{name}");
    }
}
