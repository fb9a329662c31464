//! Diagnostics: stable codes, byte spans, related locations and quick fixes as minimal text edits.

use std::fmt::Write as _;
use std::ops::Range;

use crate::line_index::{LineIndex, PositionEncoding};

/// Stable diagnostic codes. Editors filter on these and attach code actions to them, so a code never
/// changes meaning once released.
pub mod codes {
    /// The input is not UTF-8 (bytes API only).
    pub const INVALID_UTF8: &str = "pep723/invalid-utf8";
    /// A `# /// script` opener without a closer: the block is ignored, as the spec requires.
    pub const UNCLOSED_BLOCK: &str = "pep723/unclosed-block";
    /// A line that ended a block early: not `#`, not `# ...` (e.g. `#x`, a blank or an indented line).
    pub const INVALID_LINE: &str = "pep723/invalid-line";
    /// A line meant to close a block that is not exactly `# ///`.
    pub const INVALID_CLOSER: &str = "pep723/invalid-closer";
    /// A second `script` block.
    pub const DUPLICATE_BLOCK: &str = "pep723/duplicate-block";
    /// A line that looks like a `# /// script` opener but is not one.
    pub const NEAR_MISS: &str = "pep723/near-miss";
    /// A `# /// pyproject` block: the pre-2024 name of `script`.
    pub const LEGACY_PYPROJECT: &str = "pep723/legacy-pyproject";
    /// An opener inside another block: the two blocks merged.
    pub const NESTED_OPENER: &str = "pep723/nested-opener";
    /// python-sandbox's `[tool.python-sandbox]` table outside every complete `script` block (in
    /// a block of another type, after the closer, with no block): its settings are not read.
    pub const UNREAD_SANDBOX_TABLE: &str = "pep723/unread-sandbox-table";
    /// A PEP 263 coding line that declares an encoding other than UTF-8.
    pub const NON_UTF8_CODING: &str = "pep723/non-utf8-coding";
    /// The block's TOML does not parse.
    pub const TOML_SYNTAX: &str = "toml/syntax";
    /// A key defined twice.
    pub const TOML_DUPLICATE_KEY: &str = "toml/duplicate-key";
    /// TOML 1.1 syntax that Python's `tomllib` (TOML 1.0) rejects.
    pub const TOML11_PORTABILITY: &str = "toml/toml11-portability";
    /// A standard key (`dependencies`, `requires-python`, `tool`) has the wrong TOML type.
    pub const META_INVALID_TYPE: &str = "meta/invalid-type";
    /// An unknown top-level key.
    pub const META_UNKNOWN_KEY: &str = "meta/unknown-key";
    /// The obsolete `[run]` table of the first PEP 723 draft.
    pub const META_OBSOLETE_RUN: &str = "meta/obsolete-run";
    /// A dependency that is not a valid PEP 508 requirement.
    pub const DEPS_INVALID_PEP508: &str = "deps/invalid-pep508";
    /// `requires-python` that is not a valid PEP 440 specifier set.
    pub const PYTHON_INVALID_SPECIFIER: &str = "python/invalid-specifier";
    /// An unknown key in `[tool.python-sandbox]`.
    pub const SANDBOX_UNKNOWN_KEY: &str = "sandbox/unknown-key";
    /// A `[tool.python-sandbox]` key (or the table itself) with the wrong TOML type.
    pub const SANDBOX_INVALID_TYPE: &str = "sandbox/invalid-type";
    /// A `[tool.python-sandbox]` value of the right type that is not allowed.
    pub const SANDBOX_INVALID_VALUE: &str = "sandbox/invalid-value";
    /// The same mount, port or environment variable listed twice.
    pub const SANDBOX_DUPLICATE: &str = "sandbox/duplicate";
    /// Two `[tool.python-sandbox]` values that cannot hold together (`publish` with
    /// `net = "off"`): `run` would refuse the pair.
    pub const SANDBOX_CONFLICT: &str = "sandbox/conflict";
    /// A key that is the caller's to set, not the script's (`engine`, a cluster's `namespace`).
    pub const SANDBOX_CALLER_KEY: &str = "sandbox/caller-key";

    /// Warnings that mean something the author wrote is not read: a block that is unclosed,
    /// misspelled, renamed or swallowed by another, a `[tool.python-sandbox]` table outside the
    /// `script` block, and an unknown `[tool.python-sandbox]` key. [`crate::Parsed::strict`]
    /// makes them errors.
    pub const UNREAD: &[&str] = &[
        UNCLOSED_BLOCK,
        NEAR_MISS,
        LEGACY_PYPROJECT,
        NESTED_OPENER,
        UNREAD_SANDBOX_TABLE,
        SANDBOX_UNKNOWN_KEY,
    ];
}

/// How serious a diagnostic is. Only `Error` makes a parse [`crate::Status::Invalid`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum Severity {
    /// The metadata cannot be used.
    Error,
    /// Probably a mistake; the metadata is still usable.
    Warning,
    /// Something worth knowing.
    Information,
    /// A style suggestion.
    Hint,
}

impl Severity {
    /// The lower-case name used in rendered output and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Information => "information",
            Severity::Hint => "hint",
        }
    }
}

/// One replacement of a byte range of the source. Ranges of a list of edits never overlap.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "camelCase"))]
pub struct TextEdit {
    /// Bytes of the original text to replace (empty for an insertion).
    pub range: Range<usize>,
    /// The replacement text.
    pub new_text: String,
}

/// Applies non-overlapping edits to `text`. Edits may come in any order.
pub fn apply_edits(text: &str, edits: &[TextEdit]) -> String {
    let mut sorted: Vec<&TextEdit> = edits.iter().collect();
    sorted.sort_by_key(|e| (e.range.start, e.range.end));
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for e in sorted {
        let start = e.range.start.clamp(at, text.len());
        let end = e.range.end.clamp(start, text.len());
        out.push_str(text.get(at..start).unwrap_or_default());
        out.push_str(&e.new_text);
        at = end;
    }
    out.push_str(text.get(at..).unwrap_or_default());
    out
}

/// A quick fix: a titled set of edits that resolves the diagnostic.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Fix {
    /// What the fix does, e.g. "replace with `# ///`".
    pub title: String,
    /// Minimal edits of the source.
    pub edits: Vec<TextEdit>,
}

/// Another location that explains a diagnostic, e.g. the first block of a duplicate.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Related {
    /// Byte span in the source.
    pub span: Range<usize>,
    /// Why this location matters.
    pub message: String,
}

/// A problem found in the source. Spans are byte ranges of the text given to [`crate::parse`],
/// always in bounds and on character boundaries.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Diagnostic {
    /// A stable code from [`codes`].
    pub code: &'static str,
    /// How serious the problem is.
    pub severity: Severity,
    /// Lower case, no trailing period.
    pub message: String,
    /// What to do about it, when that is not obvious from the message.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Option::is_none"))]
    pub hint: Option<String>,
    /// Byte span in the source.
    pub span: Range<usize>,
    /// Other locations that explain the problem.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Vec::is_empty"))]
    pub related: Vec<Related>,
    /// Quick fixes.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Vec::is_empty"))]
    pub fixes: Vec<Fix>,
}

impl Diagnostic {
    pub(crate) fn new(
        code: &'static str,
        severity: Severity,
        span: Range<usize>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            code,
            severity,
            message: message.into(),
            hint: None,
            span,
            related: Vec::new(),
            fixes: Vec::new(),
        }
    }

    pub(crate) fn error(
        code: &'static str,
        span: Range<usize>,
        message: impl Into<String>,
    ) -> Self {
        Self::new(code, Severity::Error, span, message)
    }

    pub(crate) fn warning(
        code: &'static str,
        span: Range<usize>,
        message: impl Into<String>,
    ) -> Self {
        Self::new(code, Severity::Warning, span, message)
    }

    pub(crate) fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub(crate) fn with_related(mut self, span: Range<usize>, message: impl Into<String>) -> Self {
        self.related.push(Related { span, message: message.into() });
        self
    }

    pub(crate) fn with_fix(mut self, title: impl Into<String>, edits: Vec<TextEdit>) -> Self {
        self.fixes.push(Fix { title: title.into(), edits });
        self
    }

    /// Whether this diagnostic is an error.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// Renders diagnostics one per line as `line:col severity[code] message` (1-based line and UTF-8
/// column), followed by indented `hint:`, `related:` and `fix:` lines. Plain text, no colour: the
/// format of the test snapshots and a fallback for tools.
pub fn render_plain(source: &str, diagnostics: &[Diagnostic]) -> String {
    let index = LineIndex::new(source);
    let mut out = String::new();
    for d in diagnostics {
        let p = index.position(d.span.start, PositionEncoding::Utf8);
        let _ = writeln!(
            out,
            "{}:{} {}[{}] {}",
            p.line + 1,
            p.character + 1,
            d.severity.as_str(),
            d.code,
            d.message
        );
        if let Some(hint) = &d.hint {
            let _ = writeln!(out, "    hint: {hint}");
        }
        for r in &d.related {
            let p = index.position(r.span.start, PositionEncoding::Utf8);
            let _ = writeln!(out, "    related {}:{}: {}", p.line + 1, p.character + 1, r.message);
        }
        for f in &d.fixes {
            let edits: Vec<String> = f
                .edits
                .iter()
                .map(|e| format!("{}..{} {:?}", e.range.start, e.range.end, e.new_text))
                .collect();
            let _ = writeln!(out, "    fix: {} [{}]", f.title, edits.join(", "));
        }
    }
    out
}
