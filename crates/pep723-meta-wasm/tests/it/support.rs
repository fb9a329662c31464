//! Independent re-implementations of what a JS client does with the output: count UTF-16 units,
//! split lines, slice by offsets, apply text edits.

use pep723_meta_wasm::convert::{JsDiagnostic, JsTextEdit, LspRange, Offsets};

/// The text's UTF-16 code units.
pub(crate) fn units(text: &str) -> Vec<u16> {
    text.encode_utf16().collect()
}

/// UTF-16 offsets where each line starts (LF, CRLF or lone CR).
pub(crate) fn line_starts(units: &[u16]) -> Vec<usize> {
    let mut starts = vec![0];
    let mut i = 0;
    while i < units.len() {
        match units[i] {
            13 if units.get(i + 1) == Some(&10) => {
                starts.push(i + 2);
                i += 2;
            }
            10 | 13 => {
                starts.push(i + 1);
                i += 1;
            }
            _ => i += 1,
        }
    }
    starts
}

/// Checks that a range and its offsets name the same UTF-16 span, in bounds and ordered.
pub(crate) fn assert_consistent(
    units: &[u16],
    starts: &[usize],
    range: &LspRange,
    offset: &Offsets,
    what: &str,
) {
    assert!(offset.start <= offset.end, "{what}: reversed offsets {offset:?}");
    assert!(offset.end as usize <= units.len(), "{what}: offset past the end {offset:?}");
    for (pos, off) in [(range.start, offset.start), (range.end, offset.end)] {
        let line_start = starts[pos.line as usize];
        assert_eq!(
            line_start + pos.character as usize,
            off as usize,
            "{what}: {range:?} vs {offset:?}"
        );
    }
}

/// Every range in a diagnostic (its own, related, fix edits) is consistent.
pub(crate) fn assert_diagnostic_consistent(text: &str, d: &JsDiagnostic) {
    let units = units(text);
    let starts = line_starts(&units);
    assert_consistent(&units, &starts, &d.range, &d.offset, d.code);
    for r in &d.related {
        assert_consistent(&units, &starts, &r.range, &r.offset, d.code);
    }
    for f in &d.fixes {
        for e in &f.edits {
            assert_consistent(&units, &starts, &e.range, &e.offset, d.code);
        }
    }
}

/// Applies UTF-16 offset edits like a JS client would.
pub(crate) fn apply(text: &str, edits: &[JsTextEdit]) -> String {
    let mut units = units(text);
    let mut sorted: Vec<&JsTextEdit> = edits.iter().collect();
    sorted.sort_by_key(|e| std::cmp::Reverse((e.offset.start, e.offset.end)));
    for e in sorted {
        let new: Vec<u16> = e.new_text.encode_utf16().collect();
        units.splice(e.offset.start as usize..e.offset.end as usize, new);
    }
    String::from_utf16(&units).expect("edits keep the text valid utf-16")
}
