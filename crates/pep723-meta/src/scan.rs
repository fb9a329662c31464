//! The block scanner: one linear pass over the lines, no regex.
//!
//! The spec's reference regex is quadratic on many openers and misses CRLF and a BOM; this scanner
//! splits lines at LF, CRLF and lone CR (Python's universal newlines minus the exotic separators
//! `splitlines` also uses), skips a leading BOM, and visits every line a bounded number of times.

use std::ops::Range;

use crate::diagnostic::{Diagnostic, TextEdit, codes};
use crate::line_index::LineEnding;

/// The standard block type.
pub(crate) const SCRIPT: &str = "script";
const CLOSER: &str = "# ///";
const BOM: &str = "\u{feff}";

/// A complete metadata block: opener, content lines and closer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "camelCase"))]
pub struct Block {
    /// The block's TYPE (`script` for the block this crate reads).
    pub kind: String,
    /// Bytes from the opener's `#` to the end of the closer's `# ///`, line ending excluded.
    pub span: Range<usize>,
    /// The opener line, line ending excluded.
    pub opener: Range<usize>,
    /// The closer line, line ending excluded.
    pub closer: Range<usize>,
    /// The TOML text: each content line without its `# ` or `#` prefix, joined and ended with `\n`.
    pub content: String,
    /// The line ending of the opener line: edits write new block lines with it.
    pub line_ending: LineEnding,
    #[cfg_attr(feature = "serde", serde(skip))]
    pub(crate) lines: Vec<ContentLine>,
}

/// Where one content line's TOML text sits in the content and in the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ContentLine {
    /// Offset of the line's first TOML byte in [`Block::content`].
    pub(crate) content_start: usize,
    /// Offset of the same byte in the source (after the `# ` or `#` prefix).
    pub(crate) source_start: usize,
    /// Length of the TOML text (no line ending).
    pub(crate) len: usize,
    /// Offset of the source line's `#`.
    pub(crate) line_start: usize,
}

impl Block {
    /// Maps a byte offset of [`Block::content`] to the source. An offset on a content line's `\n`
    /// maps to the end of that source line; offsets past the end map to the closer.
    pub fn source_offset(&self, content_offset: usize) -> usize {
        let i = self.lines.partition_point(|l| l.content_start <= content_offset);
        let Some(line) = i.checked_sub(1).and_then(|i| self.lines.get(i)) else {
            return self.closer.start;
        };
        let delta = content_offset - line.content_start;
        if delta > line.len { self.closer.start } else { line.source_start + delta }
    }

    /// Maps a byte range of [`Block::content`] to the source.
    pub fn source_span(&self, content: Range<usize>) -> Range<usize> {
        let start = self.source_offset(content.start);
        let end = self.source_offset(content.end.max(content.start)).max(start);
        start..end
    }

    /// The number of content lines.
    pub fn content_lines(&self) -> usize {
        self.lines.len()
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Line {
    /// First byte of the line's text (after a BOM on line 0).
    pub(crate) start: usize,
    /// End of the text, line ending excluded.
    pub(crate) end: usize,
}

/// Everything the scanner found.
#[derive(Debug)]
pub(crate) struct Scan {
    /// Complete blocks of every type, in source order.
    pub(crate) blocks: Vec<Block>,
    pub(crate) diagnostics: Vec<Diagnostic>,
    pub(crate) lines: Vec<Line>,
}

/// Splits `text` into lines at LF, CRLF and lone CR. A final line break opens no extra line.
pub(crate) fn split_lines(text: &str) -> Vec<Line> {
    let bytes = text.as_bytes();
    let mut lines = Vec::new();
    let mut start = if text.starts_with(BOM) { BOM.len() } else { 0 };
    loop {
        match memchr::memchr2(b'\n', b'\r', &bytes[start..]) {
            Some(rel) => {
                let end = start + rel;
                let next = if bytes[end] == b'\r' && bytes.get(end + 1) == Some(&b'\n') {
                    end + 2
                } else {
                    end + 1
                };
                lines.push(Line { start, end });
                start = next;
            }
            None => {
                if start < bytes.len() {
                    lines.push(Line { start, end: bytes.len() });
                }
                return lines;
            }
        }
    }
}

/// The TYPE of an exact opener line `# /// TYPE`.
pub(crate) fn opener_kind(line: &str) -> Option<&str> {
    let kind = line.strip_prefix("# /// ")?;
    (!kind.is_empty() && kind.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        .then_some(kind)
}

fn is_content(line: &str) -> bool {
    line == "#" || line.starts_with("# ")
}

fn line_ending_at(text: &str, end: usize) -> LineEnding {
    match text.as_bytes().get(end..end + 2) {
        Some(b"\r\n") => LineEnding::CrLf,
        Some([b'\r', _]) => LineEnding::Cr,
        _ if text.as_bytes().get(end) == Some(&b'\r') => LineEnding::Cr,
        _ => LineEnding::Lf,
    }
}

/// Scans `text` for blocks. Linear: a closed block resumes after its closer, an unclosed one after
/// the line that broke it (every opener inside it would break at the same line).
pub(crate) fn scan(text: &str) -> Scan {
    let lines = split_lines(text);
    let t = |i: usize| &text[lines[i].start..lines[i].end];
    let mut blocks = Vec::new();
    let mut diagnostics = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(kind) = opener_kind(t(i)) else {
            if let Some(d) = near_miss(t(i), lines[i].start) {
                diagnostics.push(d);
            }
            i += 1;
            continue;
        };
        let opener = lines[i].start..lines[i].end;
        if kind == "pyproject" {
            diagnostics.push(
                Diagnostic::warning(
                    codes::LEGACY_PYPROJECT,
                    opener.clone(),
                    "`pyproject` blocks were renamed to `script` in january 2024, so this block is not read",
                )
                .with_hint("rename the block to `# /// script` and move `[run]` keys to the top level")
                .with_fix("rename to `script`", vec![replace(opener.clone(), "# /// script")]),
            );
        } else if kind != SCRIPT && looks_like_script(kind) {
            diagnostics.push(near_miss_diag(opener.clone(), type_message(kind), true));
        }
        let mut j = i + 1;
        let mut closer = None;
        while j < lines.len() && is_content(t(j)) {
            if t(j) == CLOSER {
                closer = Some(j);
            }
            j += 1;
        }
        match closer {
            Some(c) => {
                let block = build_block(text, &lines, i, c, kind);
                nested_openers(text, &lines, &block, i, c, &mut diagnostics);
                blocks.push(block);
                i = c + 1;
            }
            None => {
                if kind == SCRIPT {
                    unclosed(text, &lines, i, j, &mut diagnostics);
                }
                i = j;
            }
        }
    }
    unread_tables(text, &lines, &blocks, &mut diagnostics);
    Scan { blocks, diagnostics, lines }
}

/// Warns about python-sandbox's table on a comment line outside every complete `script` block
/// (in a block of another type, after the closer, in an unclosed block, with no block at all):
/// the settings the author wrote there are not read. One pass over the lines with a cursor over
/// the blocks, which are disjoint and in source order.
fn unread_tables(text: &str, lines: &[Line], blocks: &[Block], out: &mut Vec<Diagnostic>) {
    let mut next = 0;
    for line in lines {
        while blocks.get(next).is_some_and(|b| b.closer.end <= line.start) {
            next += 1;
        }
        let within = blocks.get(next).filter(|b| b.opener.start < line.start);
        if within.is_some_and(|b| b.kind == SCRIPT) {
            continue;
        }
        let Some(at) = sandbox_table_at(&text[line.start..line.end]) else { continue };
        let span = line.start + at..line.end;
        let d = match within {
            Some(b) => Diagnostic::warning(
                codes::UNREAD_SANDBOX_TABLE,
                span,
                format!(
                    "`[tool.python-sandbox]` is in a `{}` block, so it is not read: python-sandbox reads only the `script` block",
                    b.kind
                ),
            )
            .with_related(b.opener.clone(), format!("the `{}` block starts here", b.kind)),
            None => Diagnostic::warning(
                codes::UNREAD_SANDBOX_TABLE,
                span,
                "`[tool.python-sandbox]` is outside the `# /// script` block, so it is not read",
            ),
        };
        out.push(d.with_hint(
            "move the table into the `# /// script` block, before its closing `# ///` line",
        ));
    }
}

/// Where python-sandbox's table starts on a comment line: a `[tool.python-sandbox]` header (or
/// a sub-table's) or a `tool.python-sandbox...` dotted key, spelled with any quotes and blanks
/// TOML allows. `None` for prose that merely names it.
fn sandbox_table_at(line: &str) -> Option<usize> {
    let body = line.trim_start().strip_prefix('#')?.trim_start();
    let (key, needs) = match body.strip_prefix('[') {
        Some(header) => (header.trim_start_matches('['), ']'),
        None => (body, '='),
    };
    let end = key.find(needs)?;
    let name: String =
        key[..end].chars().filter(|c| !matches!(c, ' ' | '\t' | '"' | '\'')).collect();
    let rest = name.strip_prefix("tool.python-sandbox")?;
    (rest.is_empty() || rest.starts_with('.')).then_some(line.len() - body.len())
}

fn build_block(text: &str, lines: &[Line], open: usize, close: usize, kind: &str) -> Block {
    let mut content = String::new();
    let mut map = Vec::with_capacity(close - open);
    for line in &lines[open + 1..close] {
        let l = &text[line.start..line.end];
        let prefix = if l == "#" { 1 } else { 2 };
        map.push(ContentLine {
            content_start: content.len(),
            source_start: line.start + prefix,
            len: l.len() - prefix,
            line_start: line.start,
        });
        content.push_str(&l[prefix..]);
        content.push('\n');
    }
    Block {
        kind: kind.to_owned(),
        span: lines[open].start..lines[close].end,
        opener: lines[open].start..lines[open].end,
        closer: lines[close].start..lines[close].end,
        content,
        line_ending: line_ending_at(text, lines[open].end),
        lines: map,
    }
}

/// Openers inside a complete block of another type: the blocks merged, so the `script` block the
/// author wrote is not read. (Inside a `script` block they are reported only when its TOML fails:
/// `# /// x` lines are legal inside multi-line strings, as in the spec's own example.)
fn nested_openers(
    text: &str,
    lines: &[Line],
    block: &Block,
    open: usize,
    close: usize,
    out: &mut Vec<Diagnostic>,
) {
    if block.kind == SCRIPT {
        return;
    }
    for line in &lines[open + 1..close] {
        let l = &text[line.start..line.end];
        let Some(kind) = opener_kind(l) else { continue };
        out.push(nested_opener(line.start..line.end, kind, block));
    }
}

pub(crate) fn nested_opener(span: Range<usize>, kind: &str, block: &Block) -> Diagnostic {
    let outer = &block.kind;
    let message = if kind == SCRIPT && outer != SCRIPT {
        format!(
            "`# /// script` is inside the `{outer}` block that ends at its last `# ///`, so it is not read"
        )
    } else {
        format!(
            "`# /// {kind}` opens a block inside the `{outer}` block, so the two blocks merged into one"
        )
    };
    Diagnostic::warning(codes::NESTED_OPENER, span, message)
        .with_hint("end the first block with `# ///` and put a blank line before the next opener")
        .with_related(block.opener.clone(), format!("the `{outer}` block starts here"))
}

/// An unclosed `script` block: warn on the opener, explain the line that ended it, and point at a
/// line that was probably meant as the closer.
fn unclosed(text: &str, lines: &[Line], open: usize, brk: usize, out: &mut Vec<Diagnostic>) {
    let t = |i: usize| &text[lines[i].start..lines[i].end];
    let opener = lines[open].start..lines[open].end;
    let mut d = Diagnostic::warning(
        codes::UNCLOSED_BLOCK,
        opener,
        "`# /// script` block is never closed by a `# ///` line, so it is ignored",
    );
    let candidate = (open + 1..brk).rev().find(|&k| {
        let l = t(k);
        l.strip_prefix('#').is_some_and(|r| r.trim_start().starts_with("///"))
            && opener_kind(l) != Some(SCRIPT)
    });
    if let Some(k) = candidate {
        let span = lines[k].start..lines[k].end;
        d = d.with_related(span.clone(), "this line was probably meant to close the block");
        out.push(
            Diagnostic::warning(
                codes::INVALID_CLOSER,
                span.clone(),
                "closer must be exactly `# ///`",
            )
            .with_hint("nothing may follow `# ///` on the closing line, not even spaces")
            .with_fix("replace with `# ///`", vec![replace(span, CLOSER)]),
        );
    }
    match lines.get(brk) {
        None => d = d.with_hint("add a `# ///` line after the last metadata line"),
        Some(line) => {
            let l = t(brk);
            let span = line.start..line.end;
            d = d.with_related(span.clone(), "the block ends before this line");
            let trimmed = l.trim_start();
            let indent = l.len() - trimmed.len();
            let next_is_comment =
                lines.get(brk + 1).is_some_and(|n| text[n.start..n.end].starts_with('#'));
            let broken = if l.trim().is_empty() && next_is_comment {
                Some((
                    "a blank line inside a block ends it",
                    "write `#` for an empty line inside the block".to_owned(),
                    vec![replace(span.clone(), "#")],
                ))
            } else if indent > 0 && trimmed.starts_with('#') {
                Some((
                    "block lines must start in column 0",
                    "remove the indentation".to_owned(),
                    vec![replace(line.start..line.start + indent, "")],
                ))
            } else if let Some(rest) = l.strip_prefix('#') {
                let at = line.start + 1;
                let after = rest.chars().next().map_or(0, char::len_utf8);
                // A tab or no-break space after `#` is a typo for the one required space.
                let edit = if rest.starts_with(['\t', '\u{a0}']) {
                    replace(at..at + after, " ")
                } else {
                    replace(at..at, " ")
                };
                Some((
                    "content lines must be `#` alone or start with `# ` (hash, space)",
                    "insert a space after `#`".to_owned(),
                    vec![edit],
                ))
            } else {
                d = d.with_hint("add a `# ///` line after the last metadata line");
                None
            };
            if let Some((message, fix, edits)) = broken {
                out.push(
                    Diagnostic::warning(codes::INVALID_LINE, span, message)
                        .with_related(lines[open].start..lines[open].end, "the block starts here")
                        .with_fix(fix, edits),
                );
            }
        }
    }
    out.push(d);
}

fn replace(range: Range<usize>, text: &str) -> TextEdit {
    TextEdit { range, new_text: text.to_owned() }
}

/// Folds fullwidth ASCII (U+FF01..U+FF5E) and case, so `ｓcript` and `Script` compare as `script`.
fn fold(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '\u{ff01}'..='\u{ff5e}' => char::from_u32(c as u32 - 0xfee0).unwrap_or(c),
            _ => c,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

/// Whether a block type was meant as `script`: after folding case and fullwidth forms it starts
/// with `script` (`scripts`, `Script`) or is at most two edits from it (Damerau-Levenshtein:
/// `scritp`, `sript`, `skript`). A `script` block misspelt that way would be ignored whole, table
/// and all. Only a word of at most eight characters can be that close, so the distance costs
/// constant time on any line.
fn looks_like_script(kind: &str) -> bool {
    let folded = fold(kind);
    folded.starts_with(SCRIPT)
        || (folded.chars().nth(SCRIPT.len() + 2).is_none()
            && strsim::damerau_levenshtein(&folded, SCRIPT) <= 2)
}

fn type_message(kind: &str) -> String {
    if kind.eq_ignore_ascii_case(SCRIPT) {
        format!("block type `{kind}` is case-sensitive: write `script`")
    } else if !kind.is_ascii() {
        format!("block type `{kind}` contains non-ascii characters: write `script`")
    } else {
        format!("`{kind}` is not the `script` block type: did you mean `script`?")
    }
}

fn near_miss_diag(span: Range<usize>, message: String, fixable: bool) -> Diagnostic {
    let d = Diagnostic::warning(codes::NEAR_MISS, span.clone(), message).with_hint(
        "the opener must be exactly `# /// script` in column 0, so this block is not read",
    );
    if fixable {
        d.with_fix("replace with `# /// script`", vec![replace(span, "# /// script")])
    } else {
        d
    }
}

/// A line that looks like a `script` opener but is not one (the exact-opener case is handled by
/// the caller). `start` is the line's source offset.
fn near_miss(line: &str, start: usize) -> Option<Diagnostic> {
    let p = line.find("///")?;
    let (before, after) = (&line[..p], &line[p + 3..]);
    let before_trim = before.trim_end();
    let code = before_trim.strip_suffix('#')?;
    let word = after.trim();
    let span = start..start + line.len();
    if word.is_empty() {
        // `# /// ` (trailing space, empty type) outside a block.
        return (before == "# " && !after.is_empty() && code.is_empty())
            .then(|| near_miss_diag(span, "opener has no block type".to_owned(), true));
    }
    let first = word.split_whitespace().next().unwrap_or(word);
    if !looks_like_script(first) && fold(first) != "pyproject" {
        return None;
    }
    if code.contains(['"', '\'']) {
        // Inside a string literal (`x = "# /// script"`), most likely on purpose.
        return None;
    }
    if !code.trim().is_empty() {
        let hash = start + code.len();
        return Some(near_miss_diag(
            hash..span.end,
            "`# /// script` must start in column 0 of its own line".to_owned(),
            false,
        ));
    }
    let message = if !code.is_empty() {
        "opener is indented: it must start in column 0".to_owned()
    } else if before != "# " {
        "opener must start with `# ///`: exactly one space between `#` and `///`".to_owned()
    } else if !after.starts_with(' ') {
        "missing space between `///` and the block type".to_owned()
    } else if after[1..].starts_with(char::is_whitespace) {
        "exactly one space must separate `///` and the block type".to_owned()
    } else if after.ends_with(char::is_whitespace) {
        "opener has trailing whitespace".to_owned()
    } else {
        type_message(word)
    };
    Some(near_miss_diag(span, message, true))
}

/// Warns about a PEP 263 coding line (line 1 or 2) that declares something other than UTF-8:
/// PEP 723 metadata is UTF-8.
pub(crate) fn coding_line(text: &str, lines: &[Line]) -> Option<Diagnostic> {
    for line in lines.iter().take(2) {
        let l = &text[line.start..line.end];
        if !l.trim_start_matches([' ', '\t', '\x0c']).starts_with('#') {
            continue;
        }
        let Some(at) = l.find("coding") else { continue };
        let rest = &l[at + 6..];
        let Some(rest) = rest.strip_prefix([':', '=']) else { continue };
        let rest = rest.trim_start_matches([' ', '\t']);
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'))
            .collect();
        if name.is_empty() {
            continue;
        }
        let norm = name.to_ascii_lowercase().replace('_', "-");
        if matches!(norm.as_str(), "utf-8" | "utf8" | "u8" | "utf" | "utf-8-sig")
            || norm.starts_with("utf-8-")
        {
            return None;
        }
        return Some(
            Diagnostic::warning(
                codes::NON_UTF8_CODING,
                line.start..line.end,
                format!("coding line declares `{name}`, but inline script metadata is read as utf-8"),
            )
            .with_hint("save the file as utf-8 and declare `# -*- coding: utf-8 -*-` or remove the coding line"),
        );
    }
    None
}

#[cfg(test)]
mod tests;
