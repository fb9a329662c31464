//! Spec-exact PEP 723 inline script metadata: parsing, diagnostics and round-trip editing.
//!
//! **Architecture invariant:** everything here is pure. No IO, no global state, no panics on any
//! input, linear time in the input size. Callers (the CLI, the WASM binding, the fuzzers) bring the
//! bytes and decide what to do with the answer.
//!
//! - [`parse`] / [`parse_bytes`] find the `script` block, validate it and return a [`Parsed`] with
//!   typed [`Metadata`] and [`Diagnostic`]s (byte spans; convert with [`LineIndex`]).
//! - [`edit`] applies [`Edit`]s and returns the new text plus minimal [`TextEdit`]s. Only the block's
//!   bytes ever change; with no edit the text is returned byte for byte.

mod diagnostic;
mod edit;
mod error;
mod line_index;
mod model;
mod scan;
mod validate;

use std::ops::Range;

pub use crate::diagnostic::{
    Diagnostic, Fix, Related, Severity, TextEdit, apply_edits, codes, render_plain,
};
pub use crate::edit::{Edit, EditOutcome, SandboxKey, edit};
pub use crate::error::EditError;
pub use crate::line_index::{LineEnding, LineIndex, Position, PositionEncoding, PositionRange};
pub use crate::model::{
    CLAIM_SCHEME, EnvVar, LimitSetting, Metadata, MountMode, MountSpec, Net, SandboxConfig,
    Spanned, TomlValue,
};
pub use crate::scan::Block;
pub use crate::validate::{Wanted, satisfied_by};

/// The overall outcome of a parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum Status {
    /// No `script` block (and no error): the script declares no metadata.
    None,
    /// One valid `script` block; [`Parsed::metadata`] is set. Warnings may exist.
    Ok,
    /// At least one error diagnostic: the metadata must not be used.
    Invalid,
}

/// The result of [`parse`].
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "camelCase"))]
pub struct Parsed {
    /// `None`, `Ok` or `Invalid`.
    pub status: Status,
    /// The first complete `script` block, when there is one (even if it is invalid).
    pub block: Option<Block>,
    /// The validated metadata; set exactly when `status` is `Ok`.
    pub metadata: Option<Metadata>,
    /// The block's TOML as a plain value whenever it parsed, even when validation failed.
    pub toml: Option<TomlValue>,
    /// All diagnostics, sorted by position.
    pub diagnostics: Vec<Diagnostic>,
    /// The file's line-ending style (of its first line break).
    pub line_ending: LineEnding,
    /// Whether the text starts with a byte-order mark.
    pub bom: bool,
}

impl Parsed {
    /// The block's TOML as JSON whenever it parsed, even when validation failed.
    #[cfg(feature = "serde")]
    pub fn toml_json(&self) -> Option<serde_json::Value> {
        self.toml.as_ref().map(TomlValue::to_json)
    }

    /// The error diagnostics.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.is_error())
    }

    /// The parse as a tool must see it that enforces the metadata as policy (python-sandbox's
    /// `run`): the [`codes::UNREAD`] warnings become errors, so that a typo can never make a script
    /// run without settings it declares (`nett = "off"` running with the network on, an unclosed
    /// block running with none of its settings); `meta check` reads the same way, so its errors
    /// are what `run` refuses. Editors keep them warnings: the spec says such blocks are
    /// ignored, not invalid.
    pub fn strict(mut self) -> Parsed {
        for d in &mut self.diagnostics {
            if codes::UNREAD.contains(&d.code) {
                d.severity = Severity::Error;
            }
        }
        if self.diagnostics.iter().any(Diagnostic::is_error) {
            self.status = Status::Invalid;
            self.metadata = None;
        }
        self
    }
}

/// Parses PEP 723 metadata from a script's text. Pure; never panics; linear time.
pub fn parse(source: &str) -> Parsed {
    let scan = scan::scan(source);
    let mut diagnostics = scan.diagnostics;
    diagnostics.extend(scan::coding_line(source, &scan.lines));
    let mut scripts = scan.blocks.into_iter().filter(|b| b.kind == scan::SCRIPT);
    let block = scripts.next();
    if let Some(first) = &block {
        for dup in scripts {
            diagnostics.push(
                Diagnostic::error(
                    codes::DUPLICATE_BLOCK,
                    dup.opener.clone(),
                    "a second `script` block: a script may declare only one",
                )
                .with_hint("merge its contents into the first block and delete this one")
                .with_related(first.opener.clone(), "the first `script` block starts here"),
            );
        }
    }
    let mut toml = None;
    let mut metadata = None;
    if let Some(block) = &block {
        let v = validate::validate(block);
        diagnostics.extend(v.diagnostics);
        toml = v.toml;
        metadata = v.metadata;
    }
    diagnostics.sort_by_key(|d| (d.span.start, d.span.end));
    let status = if diagnostics.iter().any(Diagnostic::is_error) {
        Status::Invalid
    } else if block.is_some() {
        Status::Ok
    } else {
        Status::None
    };
    if status != Status::Ok {
        metadata = None;
    }
    Parsed {
        status,
        block,
        metadata,
        toml,
        diagnostics,
        line_ending: LineEnding::detect(source),
        bom: source.starts_with('\u{feff}'),
    }
}

/// Parses raw bytes. Invalid UTF-8 is an `invalid-utf8` error at the first bad byte and nothing else
/// is read (spans would not be byte offsets of the input otherwise).
pub fn parse_bytes(bytes: &[u8]) -> Parsed {
    match std::str::from_utf8(bytes) {
        Ok(text) => parse(text),
        Err(e) => {
            let at = e.valid_up_to();
            let len = e.error_len().unwrap_or(bytes.len() - at).max(1);
            let span: Range<usize> = at..(at + len).min(bytes.len());
            let d =
                Diagnostic::error(codes::INVALID_UTF8, span, format!("invalid utf-8 at byte {at}"))
                    .with_hint("inline script metadata must be utf-8; re-save the file as utf-8");
            Parsed {
                status: Status::Invalid,
                block: None,
                metadata: None,
                toml: None,
                diagnostics: vec![d],
                line_ending: LineEnding::Lf,
                bom: bytes.starts_with(b"\xef\xbb\xbf"),
            }
        }
    }
}
