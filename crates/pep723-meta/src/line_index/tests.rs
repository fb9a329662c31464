//! Unit tests of [`LineIndex`]: every line-ending style, UTF-16 surrogate pairs, clamping.

use super::*;

#[test]
fn positions_in_both_encodings() {
    let text = "a\r\nb€\rc😀d\n";
    let index = LineIndex::new(text);
    assert_eq!(index.line_count(), 4);
    let at = |o| index.position(o, PositionEncoding::Utf16);
    assert_eq!(at(0), Position { line: 0, character: 0 });
    assert_eq!(at(3), Position { line: 1, character: 0 });
    assert_eq!(at(7), Position { line: 1, character: 2 });
    assert_eq!(at(9), Position { line: 2, character: 1 });
    assert_eq!(at(13), Position { line: 2, character: 3 });
    assert_eq!(index.position(13, PositionEncoding::Utf8), Position { line: 2, character: 5 });
    assert_eq!(at(100), Position { line: 3, character: 0 });
}

#[test]
fn offsets_round_trip_on_char_boundaries() {
    let text = "x😀y\r\n\rz€\n";
    let index = LineIndex::new(text);
    for enc in [PositionEncoding::Utf8, PositionEncoding::Utf16] {
        for (o, _) in text.char_indices().chain([(text.len(), ' ')]) {
            let p = index.position(o, enc);
            let back = index.offset(p, enc).unwrap();
            // A line break's second byte maps to the line end; everything else round-trips.
            assert!(
                back == o || text[back..o].chars().all(|c| c == '\r' || c == '\n'),
                "{o} -> {p:?} -> {back}"
            );
        }
    }
}

#[test]
fn offset_clamps_and_rejects_missing_lines() {
    let index = LineIndex::new("ab\ncd");
    assert_eq!(index.offset(Position { line: 0, character: 99 }, PositionEncoding::Utf16), Some(2));
    assert_eq!(index.offset(Position { line: 1, character: 1 }, PositionEncoding::Utf8), Some(4));
    assert_eq!(index.offset(Position { line: 2, character: 0 }, PositionEncoding::Utf8), None);
}

#[test]
fn line_endings_detected() {
    assert_eq!(LineEnding::detect("a\r\nb\n"), LineEnding::CrLf);
    assert_eq!(LineEnding::detect("a\rb"), LineEnding::Cr);
    assert_eq!(LineEnding::detect("a\nb\r\n"), LineEnding::Lf);
    assert_eq!(LineEnding::detect("ab"), LineEnding::Lf);
}
