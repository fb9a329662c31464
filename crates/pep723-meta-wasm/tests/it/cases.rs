//! pep723-meta's conformance cases through the binding.

use std::path::Path;

use pep723_meta::Edit;
use pep723_meta_wasm::api;
use pep723_meta_wasm::convert::{Encoding, JsEditResult, Options};

use crate::support::{apply, assert_consistent, assert_diagnostic_consistent, line_starts, units};

const UTF16: Options = Options { position_encoding: Encoding::Utf16 };

fn cases() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pep723-meta/tests/it/cases");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("pep723-meta's cases")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_owned();
            // The bytes-only case (invalid utf-8) cannot be a JS string.
            Some((name, String::from_utf8(std::fs::read(&p).ok()?).ok()?))
        })
        .collect();
    out.sort();
    assert!(out.len() >= 60, "too few cases: {}", out.len());
    out
}

#[test]
fn every_case_has_its_status_and_consistent_ranges() {
    for (name, text) in cases() {
        let parsed = api::parse(&text, UTF16);
        let expected = name.trim_end_matches(".py").rsplit('.').next().unwrap_or_default();
        assert_eq!(parsed.status, expected, "{name}");
        let units = units(&text);
        let starts = line_starts(&units);
        for d in &parsed.diagnostics {
            assert_diagnostic_consistent(&text, d);
        }
        if let Some(b) = &parsed.block {
            assert_consistent(&units, &starts, &b.range, &b.offset, &name);
        }
        assert_eq!(api::validate(&text, UTF16), parsed.diagnostics, "{name}");
    }
}

#[test]
fn every_quick_fix_resolves_its_diagnostic() {
    let mut fixes = 0;
    for (name, text) in cases() {
        for d in api::validate(&text, UTF16) {
            for fix in &d.fixes {
                fixes += 1;
                let fixed = apply(&text, &fix.edits);
                let count =
                    |t: &str| api::validate(t, UTF16).iter().filter(|x| x.code == d.code).count();
                assert!(
                    count(&fixed) < count(&text),
                    "{name}: fix `{}` left every `{}`:\n{fixed}",
                    fix.title,
                    d.code
                );
            }
        }
    }
    assert!(fixes >= 10, "the cases should exercise quick fixes, saw {fixes}");
}

#[test]
fn utf16_positions_after_emoji_and_non_ascii() {
    let text = "#!/usr/bin/env python3\n# héllo 😀 wörld\ns = \"😀😀\"\n# /// script\n# dependencies = [\"requests>=\"]\n# ///\n";
    let parsed = api::parse(text, UTF16);
    assert_diagnostic_consistent(text, &parsed.diagnostics[0]);
    let units = units(text);
    let at = &parsed.diagnostics[0].offset;
    assert_eq!(String::from_utf16_lossy(&units[at.start as usize..at.end as usize]), ">=");
    insta::assert_json_snapshot!(parsed.diagnostics, @r#"
    [
      {
        "code": "deps/invalid-pep508",
        "severity": "error",
        "message": "invalid requirement `requests>=`: unexpected end of version specifier, expected version",
        "hint": "requirements follow pep 508, e.g. `requests>=2.31` or `rich[jupyter]`",
        "range": {
          "start": {
            "line": 4,
            "character": 27
          },
          "end": {
            "line": 4,
            "character": 29
          }
        },
        "offset": {
          "start": 91,
          "end": 93
        }
      }
    ]
    "#);
}

#[test]
fn utf8_positions_when_asked() {
    let text = "# é\n# /// script\n# dependencies = [\"requests>=\"]\n# ///\n";
    let utf8 = api::validate(text, Options { position_encoding: Encoding::Utf8 });
    let utf16 = api::validate(text, UTF16);
    assert_eq!(utf8.len(), 1);
    assert_eq!(utf8[0].range.start.line, utf16[0].range.start.line);
    assert_eq!(utf8[0].offset.start, utf16[0].offset.start + 1, "é is two bytes, one unit");
}

#[test]
fn edits_round_trip_through_text_edits() {
    let text = "# 😀\nimport os\n";
    let JsEditResult::Ok(added) = api::edit(text, &[Edit::AddDependency("rich>=13".into())], UTF16)
    else {
        panic!("add refused")
    };
    assert_eq!(apply(text, &added.edits), added.text);
    assert!(added.diagnostics.is_empty(), "{:?}", added.diagnostics);
    let JsEditResult::Ok(removed) =
        api::edit(&added.text, &[Edit::RemoveDependency("rich".into())], UTF16)
    else {
        panic!("remove refused")
    };
    assert_eq!(apply(&added.text, &removed.edits), removed.text);
    assert!(removed.text.contains("dependencies = []"), "{}", removed.text);
}
