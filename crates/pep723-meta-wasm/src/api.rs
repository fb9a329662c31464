//! The binding's behaviour as plain Rust: each export in `lib.rs` is one of these functions plus
//! (de)serialization. Malformed input is data here: every function returns a value, never an error.

use pep723_meta::{Edit, SandboxKey};

use crate::convert::{
    Converter, JsDiagnostic, JsEditErr, JsEditOk, JsEditResult, JsParseResult, Options, edit_error,
};

/// Parses `source`: status, block, metadata, TOML and diagnostics.
pub fn parse(source: &str, options: Options) -> JsParseResult {
    Converter::new(source, options.position_encoding).parsed(&pep723_meta::parse(source))
}

/// The diagnostics of `source`, sorted by position.
pub fn validate(source: &str, options: Options) -> Vec<JsDiagnostic> {
    let conv = Converter::new(source, options.position_encoding);
    pep723_meta::parse(source).diagnostics.iter().map(|d| conv.diagnostic(d)).collect()
}

/// Applies `edits` in order: minimal text edits of `source`, the new text and its diagnostics, or
/// why the edit was refused (the text is then untouched).
pub fn edit(source: &str, edits: &[Edit], options: Options) -> JsEditResult {
    match pep723_meta::edit(source, edits) {
        Ok(outcome) => {
            let old = Converter::new(source, options.position_encoding);
            let edits = outcome.edits.iter().map(|e| old.text_edit(e)).collect();
            let diagnostics = validate(&outcome.text, options);
            JsEditResult::Ok(JsEditOk {
                ok: true,
                changed: outcome.changed(),
                edits,
                text: outcome.text,
                diagnostics,
            })
        }
        Err(e) => JsEditResult::Err(JsEditErr { ok: false, error: edit_error(&e) }),
    }
}

/// `[tool.python-sandbox]` key names come from JS as strings; an unknown one is a refused edit
/// (with a did-you-mean hint), not an exception.
pub fn sandbox_edit(
    source: &str,
    key: &str,
    make: impl FnOnce(SandboxKey) -> Edit,
    options: Options,
) -> JsEditResult {
    match key.parse::<SandboxKey>() {
        Ok(key) => edit(source, &[make(key)], options),
        Err(e) => JsEditResult::Err(JsEditErr { ok: false, error: edit_error(&e) }),
    }
}
