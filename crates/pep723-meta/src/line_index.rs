//! Byte offsets <-> 0-based (line, column) positions, in UTF-8 bytes or UTF-16 code units.
//!
//! Lines end at LF, CRLF or a lone CR: the same rule the block scanner uses, so a diagnostic's line
//! number always matches the line the scanner saw.

use std::ops::Range;

/// How a position's column is counted. LSP and JavaScript strings use UTF-16 code units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum PositionEncoding {
    /// Columns in UTF-8 bytes.
    Utf8,
    /// Columns in UTF-16 code units (the LSP default).
    #[default]
    Utf16,
}

/// A 0-based position: `line` counts line ends before it, `character` counts columns in the
/// chosen [`PositionEncoding`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Position {
    /// 0-based line.
    pub line: u32,
    /// 0-based column in the chosen encoding.
    pub character: u32,
}

/// An LSP-style range of two [`Position`]s (end exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct PositionRange {
    /// Start position (inclusive).
    pub start: Position,
    /// End position (exclusive).
    pub end: Position,
}

/// Maps byte offsets of one text to line/column positions and back.
///
/// Built once per text in linear time. Lookups are binary searches: ASCII columns are byte
/// arithmetic and only non-ASCII characters are recorded, so an editor can convert every
/// diagnostic on every keystroke without rescanning long lines.
#[derive(Debug, Clone)]
pub struct LineIndex {
    text: String,
    /// Byte offset where each line starts; always begins with 0.
    line_starts: Vec<usize>,
    /// Every non-ASCII character: its byte offset, UTF-8 length and UTF-16 length.
    wide: Vec<Wide>,
    /// `saved[i]`: UTF-8 bytes minus UTF-16 units of `wide[..i]` (one longer than `wide`).
    saved: Vec<usize>,
}

#[derive(Debug, Clone, Copy)]
struct Wide {
    offset: usize,
    len8: u8,
    len16: u8,
}

impl LineIndex {
    /// Indexes `text`. Lines end at LF, CRLF or a lone CR.
    pub fn new(text: &str) -> Self {
        let bytes = text.as_bytes();
        let mut line_starts = vec![0];
        let mut i = 0;
        while let Some(rel) = memchr::memchr2(b'\n', b'\r', &bytes[i..]) {
            let at = i + rel;
            let next = if bytes[at] == b'\r' && bytes.get(at + 1) == Some(&b'\n') {
                at + 2
            } else {
                at + 1
            };
            line_starts.push(next);
            i = next;
        }
        let mut wide = Vec::new();
        let mut saved = vec![0];
        if !text.is_ascii() {
            for (offset, c) in text.char_indices().filter(|(_, c)| !c.is_ascii()) {
                let w = Wide { offset, len8: c.len_utf8() as u8, len16: c.len_utf16() as u8 };
                saved.push(saved[saved.len() - 1] + usize::from(w.len8 - w.len16));
                wide.push(w);
            }
        }
        Self { text: text.to_owned(), line_starts, wide, saved }
    }

    /// The number of lines (a text ending in a line break has an empty last line).
    pub fn line_count(&self) -> usize {
        self.line_starts.len()
    }

    /// The byte range of line `line` without its line ending, or `None` past the last line.
    pub fn line_range(&self, line: usize) -> Option<Range<usize>> {
        let start = *self.line_starts.get(line)?;
        let mut end = self.line_starts.get(line + 1).copied().unwrap_or(self.text.len());
        let bytes = self.text.as_bytes();
        if end > start && bytes[end - 1] == b'\n' {
            end -= 1;
        }
        if end > start && bytes[end - 1] == b'\r' {
            end -= 1;
        }
        Some(start..end)
    }

    /// The position of byte `offset`. Offsets past the end clamp to the end; an offset inside a
    /// multi-byte character counts as that character's start, one inside a line break as the
    /// line's end.
    pub fn position(&self, offset: usize, encoding: PositionEncoding) -> Position {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.line_starts.partition_point(|&s| s <= offset) - 1;
        let range = self.line_range(line).unwrap_or(offset..offset);
        let offset = offset.min(range.end);
        let bytes = offset - range.start;
        let character = match encoding {
            PositionEncoding::Utf8 => bytes,
            PositionEncoding::Utf16 => {
                let from = self.wide.partition_point(|w| w.offset < range.start);
                let to = self.wide.partition_point(|w| w.offset < offset);
                bytes - (self.saved[to] - self.saved[from])
            }
        };
        Position { line: line as u32, character: character as u32 }
    }

    /// The positions of both ends of a byte range.
    pub fn range(&self, range: Range<usize>, encoding: PositionEncoding) -> PositionRange {
        PositionRange {
            start: self.position(range.start, encoding),
            end: self.position(range.end, encoding),
        }
    }

    /// The byte offset of a position, or `None` when the line does not exist. A column past the end
    /// of its line clamps to the line end (before the line break), as LSP requires; a column inside
    /// a character rounds down to its start.
    pub fn offset(&self, position: Position, encoding: PositionEncoding) -> Option<usize> {
        let range = self.line_range(position.line as usize)?;
        let want = position.character as usize;
        match encoding {
            PositionEncoding::Utf8 => {
                let mut at = (range.start + want).min(range.end);
                while !self.text.is_char_boundary(at) {
                    at -= 1;
                }
                Some(at)
            }
            PositionEncoding::Utf16 => {
                let (mut at8, mut at16) = (range.start, 0usize);
                let from = self.wide.partition_point(|w| w.offset < range.start);
                for w in self.wide[from..].iter().take_while(|w| w.offset < range.end) {
                    let ascii = w.offset - at8;
                    if at16 + ascii >= want {
                        return Some(at8 + (want - at16));
                    }
                    at16 += ascii;
                    if at16 + usize::from(w.len16) > want {
                        return Some(w.offset);
                    }
                    at8 = w.offset + usize::from(w.len8);
                    at16 += usize::from(w.len16);
                }
                Some((at8 + want.saturating_sub(at16)).min(range.end))
            }
        }
    }
}

#[cfg(test)]
mod tests;

/// The line-ending style of a text, remembered so that edits write new lines the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum LineEnding {
    /// `\n` (also the default for a text without line breaks).
    #[default]
    Lf,
    /// `\r\n`.
    CrLf,
    /// A lone `\r`.
    Cr,
}

impl LineEnding {
    /// The line ending's characters.
    pub fn as_str(self) -> &'static str {
        match self {
            LineEnding::Lf => "\n",
            LineEnding::CrLf => "\r\n",
            LineEnding::Cr => "\r",
        }
    }

    /// The style of the first line break in `text`, or LF when it has none.
    pub fn detect(text: &str) -> Self {
        let bytes = text.as_bytes();
        match memchr::memchr2(b'\n', b'\r', bytes) {
            Some(i) if bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n') => LineEnding::CrLf,
            Some(i) if bytes[i] == b'\r' => LineEnding::Cr,
            _ => LineEnding::Lf,
        }
    }
}
