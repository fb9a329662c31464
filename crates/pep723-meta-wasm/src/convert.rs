//! The JavaScript-shaped view of pep723-meta's results: byte spans become LSP ranges (0-based line
//! and column in the chosen encoding) plus absolute offsets in the same encoding, so a JS client can
//! both show a range and slice its own string with it.
//!
//! Pure: no wasm-bindgen here, so everything is tested natively.

use std::ops::Range;

use pep723_meta::{
    Diagnostic, EditError, LineEnding, LineIndex, Metadata, MountMode, Net, Parsed,
    PositionEncoding, Severity, Spanned, Status, TextEdit, TomlValue,
};
use serde::{Deserialize, Serialize, Serializer};

/// Options every export takes. Unknown fields are ignored so newer clients work with older builds.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Options {
    /// How columns and offsets are counted; UTF-16 (JavaScript strings, LSP) unless told otherwise.
    pub position_encoding: Encoding,
}

/// The position encodings a client may ask for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum Encoding {
    /// UTF-16 code units: JavaScript string indices and the LSP default.
    #[default]
    #[serde(rename = "utf-16")]
    Utf16,
    /// UTF-8 bytes.
    #[serde(rename = "utf-8")]
    Utf8,
}

impl From<Encoding> for PositionEncoding {
    fn from(e: Encoding) -> Self {
        match e {
            Encoding::Utf16 => PositionEncoding::Utf16,
            Encoding::Utf8 => PositionEncoding::Utf8,
        }
    }
}

/// A 0-based LSP position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Position {
    /// 0-based line; lines end at LF, CRLF or a lone CR.
    pub line: u32,
    /// 0-based column in the chosen encoding.
    pub character: u32,
}

/// An LSP range (end exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LspRange {
    /// Inclusive start.
    pub start: Position,
    /// Exclusive end.
    pub end: Position,
}

/// Absolute offsets from the start of the text, in the chosen encoding (`text.slice(start, end)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Offsets {
    /// Inclusive start.
    pub start: u32,
    /// Exclusive end.
    pub end: u32,
}

/// An LSP `TextEdit` (plus offsets).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JsTextEdit {
    /// What to replace, in the text the edit was computed for.
    pub range: LspRange,
    /// The same span as offsets.
    pub offset: Offsets,
    /// The replacement.
    pub new_text: String,
}

/// A quick fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JsFix {
    /// What the fix does.
    pub title: String,
    /// Non-overlapping edits of the validated text.
    pub edits: Vec<JsTextEdit>,
}

/// A location that explains a diagnostic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JsRelated {
    /// Where.
    pub range: LspRange,
    /// The same span as offsets.
    pub offset: Offsets,
    /// Why it matters.
    pub message: String,
}

/// A diagnostic, shaped like an LSP `Diagnostic`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JsDiagnostic {
    /// A stable code such as `pep723/unclosed-block`.
    pub code: &'static str,
    /// `error`, `warning`, `information` or `hint`.
    pub severity: &'static str,
    /// Lower case, no trailing period.
    pub message: String,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// Where.
    pub range: LspRange,
    /// The same span as offsets.
    pub offset: Offsets,
    /// Other locations that explain the problem.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub related: Vec<JsRelated>,
    /// Quick fixes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fixes: Vec<JsFix>,
}

/// A value with the range it was read from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JsSpanned<T> {
    /// The value.
    pub value: T,
    /// Where the TOML value is (strings include their quotes).
    pub range: LspRange,
    /// The same span as offsets.
    pub offset: Offsets,
}

/// A mount entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JsMount {
    /// The path as written.
    pub path: String,
    /// `ro` or `rw` when written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<&'static str>,
}

/// An `env` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JsEnvVar {
    /// The variable name.
    pub name: String,
    /// The value of `NAME=VALUE`; absent means "copy from the host".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// `[tool.python-sandbox]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JsSandbox {
    /// Extra requirements for the sandbox.
    pub dependencies: Vec<JsSpanned<String>>,
    /// Host paths to mount.
    pub mounts: Vec<JsSpanned<JsMount>>,
    /// `on` or `off` when stated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub net: Option<JsSpanned<&'static str>>,
    /// `net = [patterns]`: the only hosts the script may reach (`net` is then `on`).
    #[serde(rename = "netAllow", skip_serializing_if = "Vec::is_empty")]
    pub net_allow: Vec<JsSpanned<String>>,
    /// Ports to publish.
    pub publish: Vec<JsSpanned<u16>>,
    /// Environment variables passed in.
    pub env: Vec<JsSpanned<JsEnvVar>>,
    /// Wall-clock limit in seconds (a JS number: exact up to 2^53).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<JsSpanned<f64>>,
}

/// The validated metadata.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JsMetadata {
    /// `requires-python` as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requires_python: Option<JsSpanned<String>>,
    /// `dependencies` as written.
    pub dependencies: Vec<JsSpanned<String>>,
    /// The `[tool]` table as plain JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<JsToml>,
    /// `[tool.python-sandbox]`, validated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<JsSandbox>,
}

/// Where the `script` block is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JsBlock {
    /// From the opener's `#` to the end of the closer.
    pub range: LspRange,
    /// The same span as offsets.
    pub offset: Offsets,
    /// The opener line.
    pub opener: LspRange,
    /// The closer line.
    pub closer: LspRange,
    /// The block's TOML text (prefixes stripped, LF line ends).
    pub content: String,
}

/// The result of `parse`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JsParseResult {
    /// `none`, `ok` or `invalid`.
    pub status: &'static str,
    /// The first complete `script` block, valid or not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<JsBlock>,
    /// Set exactly when `status` is `ok`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<JsMetadata>,
    /// The block's TOML as plain JSON whenever it parsed, even when validation failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub toml: Option<JsToml>,
    /// Every diagnostic, sorted by position.
    pub diagnostics: Vec<JsDiagnostic>,
    /// `lf`, `crlf` or `cr`: the style edits write.
    pub line_ending: &'static str,
    /// Whether the text starts with a byte-order mark.
    pub bom: bool,
}

/// A successful edit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JsEditOk {
    /// Always `true`.
    pub ok: bool,
    /// Whether anything changed (`edits` is empty otherwise).
    pub changed: bool,
    /// Minimal edits of the original text.
    pub edits: Vec<JsTextEdit>,
    /// The whole new text.
    pub text: String,
    /// Diagnostics of the new text (ranges in the new text).
    pub diagnostics: Vec<JsDiagnostic>,
}

/// A refused edit: the text was not touched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JsEditErr {
    /// Always `false`.
    pub ok: bool,
    /// Why.
    pub error: JsEditError,
}

/// Why an edit was refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JsEditError {
    /// A stable code such as `edit/duplicate-block`.
    pub code: &'static str,
    /// Lower case, no trailing period.
    pub message: String,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// The result of an edit function: `{ok: true, ...}` or `{ok: false, error}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum JsEditResult {
    /// The edit applied (possibly changing nothing).
    Ok(JsEditOk),
    /// The edit was refused.
    Err(JsEditErr),
}

/// A TOML value as plain JSON. Integers beyond 2^53 become (inexact) numbers, like `JSON.parse`
/// would make them, and NaN or infinities become `null`, so serializing never fails.
#[derive(Debug, Clone, PartialEq)]
pub struct JsToml(pub TomlValue);

impl Serialize for JsToml {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        TomlRef(&self.0).serialize(s)
    }
}

struct TomlRef<'a>(&'a TomlValue);

/// The largest integer a JS number holds exactly.
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

impl Serialize for TomlRef<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.0 {
            TomlValue::String(v) | TomlValue::Datetime(v) => s.serialize_str(v),
            TomlValue::Integer(i) if (-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).contains(i) => {
                s.serialize_i64(*i)
            }
            #[allow(clippy::cast_precision_loss)] // documented: like JSON.parse
            TomlValue::Integer(i) => s.serialize_f64(*i as f64),
            TomlValue::Float(f) if f.is_finite() => s.serialize_f64(*f),
            TomlValue::Float(_) => s.serialize_unit(),
            TomlValue::Boolean(b) => s.serialize_bool(*b),
            TomlValue::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&TomlRef(item))?;
                }
                seq.end()
            }
            TomlValue::Table(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, &TomlRef(v))?;
                }
                map.end()
            }
        }
    }
}

/// Converts byte spans of one text into ranges and offsets of the chosen encoding.
pub struct Converter<'t> {
    text: &'t str,
    index: LineIndex,
    encoding: Encoding,
    /// `(byte, utf16)` right after each non-ASCII character: between two checkpoints every byte is
    /// one UTF-16 unit, so any offset converts with one binary search.
    checkpoints: Vec<(usize, usize)>,
}

impl<'t> Converter<'t> {
    /// Indexes `text` once (linear time).
    pub fn new(text: &'t str, encoding: Encoding) -> Self {
        let mut checkpoints = Vec::new();
        if encoding == Encoding::Utf16 && !text.is_ascii() {
            let mut utf16 = 0;
            for (i, c) in text.char_indices() {
                utf16 += c.len_utf16();
                if !c.is_ascii() {
                    checkpoints.push((i + c.len_utf8(), utf16));
                }
            }
        }
        Self { text, index: LineIndex::new(text), encoding, checkpoints }
    }

    fn floor(&self, byte: usize) -> usize {
        let mut b = byte.min(self.text.len());
        while !self.text.is_char_boundary(b) {
            b -= 1;
        }
        b
    }

    /// The offset of `byte` in the chosen encoding. A byte inside a character counts as its start.
    pub fn offset(&self, byte: usize) -> u32 {
        let b = self.floor(byte);
        let units = match self.encoding {
            Encoding::Utf8 => b,
            Encoding::Utf16 => {
                let at = self.checkpoints.partition_point(|&(cb, _)| cb <= b);
                match at.checked_sub(1).and_then(|i| self.checkpoints.get(i)) {
                    Some(&(cb, cu)) => cu + (b - cb),
                    None => b,
                }
            }
        };
        u32::try_from(units).unwrap_or(u32::MAX)
    }

    /// Both ends of a byte span as offsets.
    pub fn offsets(&self, span: &Range<usize>) -> Offsets {
        Offsets { start: self.offset(span.start), end: self.offset(span.end.max(span.start)) }
    }

    /// A byte span as an LSP range.
    pub fn range(&self, span: &Range<usize>) -> LspRange {
        let r = self.index.range(span.start..span.end.max(span.start), self.encoding.into());
        LspRange {
            start: Position { line: r.start.line, character: r.start.character },
            end: Position { line: r.end.line, character: r.end.character },
        }
    }

    /// A text edit of this text.
    pub fn text_edit(&self, e: &TextEdit) -> JsTextEdit {
        JsTextEdit {
            range: self.range(&e.range),
            offset: self.offsets(&e.range),
            new_text: e.new_text.clone(),
        }
    }

    /// A diagnostic of this text.
    pub fn diagnostic(&self, d: &Diagnostic) -> JsDiagnostic {
        JsDiagnostic {
            code: d.code,
            severity: severity(d.severity),
            message: d.message.clone(),
            hint: d.hint.clone(),
            range: self.range(&d.span),
            offset: self.offsets(&d.span),
            related: d
                .related
                .iter()
                .map(|r| JsRelated {
                    range: self.range(&r.span),
                    offset: self.offsets(&r.span),
                    message: r.message.clone(),
                })
                .collect(),
            fixes: d
                .fixes
                .iter()
                .map(|f| JsFix {
                    title: f.title.clone(),
                    edits: f.edits.iter().map(|e| self.text_edit(e)).collect(),
                })
                .collect(),
        }
    }

    fn spanned<T, U>(&self, s: &Spanned<T>, f: impl FnOnce(&T) -> U) -> JsSpanned<U> {
        JsSpanned { value: f(&s.value), range: self.range(&s.span), offset: self.offsets(&s.span) }
    }

    fn strings(&self, items: &[Spanned<String>]) -> Vec<JsSpanned<String>> {
        items.iter().map(|s| self.spanned(s, String::clone)).collect()
    }

    /// The typed metadata.
    pub fn metadata(&self, m: &Metadata) -> JsMetadata {
        JsMetadata {
            requires_python: m.requires_python.as_ref().map(|s| self.spanned(s, String::clone)),
            dependencies: self.strings(&m.dependencies),
            tool: m.tool.clone().map(JsToml),
            sandbox: m.sandbox.as_ref().map(|c| JsSandbox {
                dependencies: self.strings(&c.dependencies),
                mounts: c
                    .mounts
                    .iter()
                    .map(|s| {
                        self.spanned(s, |m| JsMount {
                            path: m.path.clone(),
                            mode: m.mode.map(|mode| match mode {
                                MountMode::Ro => "ro",
                                MountMode::Rw => "rw",
                            }),
                        })
                    })
                    .collect(),
                net: c.net.as_ref().map(|s| {
                    self.spanned(s, |n| match n {
                        Net::On => "on",
                        Net::Off => "off",
                    })
                }),
                net_allow: c.net_allow.iter().map(|s| self.spanned(s, Clone::clone)).collect(),
                publish: c.publish.iter().map(|s| self.spanned(s, |p| *p)).collect(),
                env: c
                    .env
                    .iter()
                    .map(|s| self.spanned(s, |e| JsEnvVar { name: e.name.clone(), value: e.value.clone() }))
                    .collect(),
                #[allow(clippy::cast_precision_loss)] // documented: exact up to 2^53
                timeout: c.timeout.as_ref().map(|s| self.spanned(s, |t| *t as f64)),
            }),
        }
    }

    /// The whole parse result.
    pub fn parsed(&self, p: &Parsed) -> JsParseResult {
        JsParseResult {
            status: match p.status {
                Status::None => "none",
                Status::Ok => "ok",
                Status::Invalid => "invalid",
            },
            block: p.block.as_ref().map(|b| JsBlock {
                range: self.range(&b.span),
                offset: self.offsets(&b.span),
                opener: self.range(&b.opener),
                closer: self.range(&b.closer),
                content: b.content.clone(),
            }),
            metadata: p.metadata.as_ref().map(|m| self.metadata(m)),
            toml: p.toml.clone().map(JsToml),
            diagnostics: p.diagnostics.iter().map(|d| self.diagnostic(d)).collect(),
            line_ending: match p.line_ending {
                LineEnding::Lf => "lf",
                LineEnding::CrLf => "crlf",
                LineEnding::Cr => "cr",
            },
            bom: p.bom,
        }
    }
}

fn severity(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Information => "information",
        Severity::Hint => "hint",
    }
}

/// A refused edit as a stable code plus the message split from its `hint:` line.
pub fn edit_error(e: &EditError) -> JsEditError {
    let code = match e {
        EditError::DuplicateBlock => "edit/duplicate-block",
        EditError::UnclosedBlock { .. } => "edit/unclosed-block",
        EditError::TomlSyntax { .. } => "edit/toml-syntax",
        EditError::WrongType { .. } => "edit/wrong-type",
        EditError::InvalidRequirement { .. } => "edit/invalid-requirement",
        EditError::InvalidSpecifier { .. } => "edit/invalid-specifier",
        EditError::InvalidValue { .. } => "edit/invalid-value",
        EditError::UnknownKey { .. } => "edit/unknown-key",
        EditError::Invalidates { .. } => "edit/invalidates",
        EditError::Unrepresentable => "edit/unrepresentable",
        _ => "edit/refused",
    };
    let text = e.to_string();
    let (message, hint) = match text.split_once("\nhint: ") {
        Some((m, h)) => (m.to_owned(), Some(h.to_owned())),
        None => (text, None),
    };
    JsEditError { code, message, hint }
}

#[cfg(test)]
mod tests;
