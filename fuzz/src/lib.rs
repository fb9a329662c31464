//! Invariants the fuzz targets assert, shared so both targets check the same things.

use std::ops::Range;

use pep723_meta::{
    Edit, LineEnding, LineIndex, Parsed, PositionEncoding, Status, apply_edits, edit, parse,
};

fn span_ok(text: &str, r: &Range<usize>) -> bool {
    r.start <= r.end
        && r.end <= text.len()
        && text.is_char_boundary(r.start)
        && text.is_char_boundary(r.end)
}

/// Parse invariants: valid spans, metadata iff `Ok`, a byte-identical no-op edit, and positions that
/// convert back to the same offsets.
pub fn check_parse(text: &str) -> Parsed {
    let parsed = parse(text);
    assert_eq!(parsed.metadata.is_some(), parsed.status == Status::Ok);
    assert_eq!(parsed.status == Status::Invalid, parsed.diagnostics.iter().any(|d| d.is_error()));
    let index = LineIndex::new(text);
    for d in &parsed.diagnostics {
        assert!(span_ok(text, &d.span), "span {:?} of {}", d.span, d.code);
        assert!(d.related.iter().all(|r| span_ok(text, &r.span)));
        assert!(d.fixes.iter().flat_map(|f| &f.edits).all(|e| span_ok(text, &e.range)));
        assert!(!d.message.ends_with('.'), "message ends with a period: {}", d.message);
        for enc in [PositionEncoding::Utf8, PositionEncoding::Utf16] {
            let p = index.position(d.span.start, enc);
            let back = index.offset(p, enc).expect("line exists");
            assert!(back <= d.span.start, "{p:?} -> {back} > {}", d.span.start);
        }
    }
    if let Some(b) = &parsed.block {
        assert!(span_ok(text, &b.span) && span_ok(text, &b.opener) && span_ok(text, &b.closer));
        assert_eq!(&text[b.opener.clone()], "# /// script");
        assert_eq!(&text[b.closer.clone()], "# ///");
    }
    let same = edit(text, &[]).expect("a no-op edit never fails");
    assert_eq!(same.text, text);
    assert!(same.edits.is_empty());
    parsed
}

/// Edit invariants: text edits reproduce the text, only the block changes, line endings and the
/// BOM stay, each edit is idempotent, and the result parses with a block.
pub fn check_edits(text: &str, edits: &[Edit]) {
    let before = check_parse(text);
    let Ok(outcome) = edit(text, edits) else { return };
    assert_eq!(apply_edits(text, &outcome.edits), outcome.text);
    let after = check_parse(&outcome.text);
    assert_eq!(outcome.text.starts_with('\u{feff}'), text.starts_with('\u{feff}'));
    if text.contains(['\n', '\r']) {
        assert_eq!(LineEnding::detect(&outcome.text), LineEnding::detect(text));
    }
    if outcome.edits.is_empty() {
        assert_eq!(outcome.text, text);
        return;
    }
    let new = after.block.as_ref().expect("an edit leaves a block");
    if let Some(old) = &before.block {
        assert_eq!(&text[..old.span.start], &outcome.text[..new.span.start], "prelude changed");
        assert_eq!(&text[old.span.end..], &outcome.text[new.span.end..], "postlude changed");
    }
    for e in edits {
        if let Ok(once) = edit(&outcome.text, std::slice::from_ref(e)) {
            let twice =
                edit(&once.text, std::slice::from_ref(e)).expect("re-edit of an edited text");
            assert_eq!(twice.text, once.text, "{e:?} is not idempotent");
        }
    }
}
