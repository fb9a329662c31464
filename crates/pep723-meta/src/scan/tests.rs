//! Unit tests of the scanner's line splitting and opener recognition.

use super::*;

#[test]
fn split_lines_handles_every_ending_and_a_bom() {
    let text = "\u{feff}a\r\nb\rc\nd";
    let lines: Vec<&str> = split_lines(text).iter().map(|l| &text[l.start..l.end]).collect();
    assert_eq!(lines, ["a", "b", "c", "d"]);
    assert!(split_lines("").is_empty());
    assert_eq!(split_lines("x\n").len(), 1);
}

#[test]
fn opener_kinds() {
    assert_eq!(opener_kind("# /// script"), Some("script"));
    assert_eq!(opener_kind("# /// my-tool2"), Some("my-tool2"));
    for bad in ["# /// ", "# ///", "# /// script ", "#/// script", "# /// a b", "# /// é"] {
        assert_eq!(opener_kind(bad), None, "{bad:?}");
    }
}

#[test]
fn content_map_points_into_the_source() {
    let text = "# /// script\r\n#   a = 1\r\n#\r\n# b = 2\r\n# ///";
    let scan = scan(text);
    let block = &scan.blocks[0];
    assert_eq!(block.content, "  a = 1\n\nb = 2\n");
    assert_eq!(block.line_ending, LineEnding::CrLf);
    let a = block.content.find('a').unwrap();
    assert_eq!(&text[block.source_offset(a)..block.source_offset(a) + 1], "a");
    let b = block.content.find('b').unwrap();
    assert_eq!(&text[block.source_span(b..b + 5)], "b = 2");
}
