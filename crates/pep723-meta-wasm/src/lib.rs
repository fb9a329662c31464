//! WASM bindings (wasm-bindgen) of pep723-meta for editors.
//!
//! `cargo xtask wasm` builds this into the npm-style package `target/wasm/pep723-meta`. Every export
//! takes the document text and returns a plain object (serde-wasm-bindgen). Positions are LSP-style:
//! 0-based lines and UTF-16 columns unless `{positionEncoding: "utf-8"}` is passed.
//!
//! **API boundary:** malformed input is data. Bad metadata comes back as diagnostics and refused edits
//! as `{ok: false, error}`; only API misuse (options of the wrong shape) throws. The logic lives in
//! [`api`] and [`convert`], pure and tested natively; this file only crosses the JS boundary.

use serde::Serialize;
use wasm_bindgen::prelude::*;

use pep723_meta::Edit;

pub mod api;
pub mod convert;

use crate::convert::Options;

#[wasm_bindgen(typescript_custom_section)]
const TYPES: &'static str = r#"
/** Options every function takes. */
export interface Options {
  /** How columns and offsets count: UTF-16 code units (JS strings, LSP; the default) or UTF-8 bytes. */
  positionEncoding?: "utf-16" | "utf-8";
}
/** A 0-based position; lines end at LF, CRLF or a lone CR. */
export interface Position { line: number; character: number; }
/** An LSP range, end exclusive. */
export interface Range { start: Position; end: Position; }
/** The same span as absolute offsets: `text.slice(start, end)`. */
export interface Offsets { start: number; end: number; }
/** An LSP TextEdit, plus offsets. */
export interface TextEdit { range: Range; offset: Offsets; newText: string; }
export type Severity = "error" | "warning" | "information" | "hint";
export interface Fix { title: string; edits: TextEdit[]; }
export interface RelatedInformation { range: Range; offset: Offsets; message: string; }
export interface Diagnostic {
  /** Stable code, e.g. "pep723/unclosed-block", "deps/invalid-pep508", "sandbox/unknown-key". */
  code: string;
  severity: Severity;
  /** Lower case, no trailing period. */
  message: string;
  hint?: string;
  range: Range;
  offset: Offsets;
  related?: RelatedInformation[];
  /** Quick fixes; their edits apply to the validated text. */
  fixes?: Fix[];
}
/** A value with where it was written (strings include their quotes). */
export interface Spanned<T> { value: T; range: Range; offset: Offsets; }
export interface SandboxConfig {
  dependencies: Spanned<string>[];
  mounts: Spanned<{ path: string; mode?: "ro" | "rw" }>[];
  net?: Spanned<"on" | "off">;
  /** `net = [patterns]`: the only hosts the script may reach (`net` is then `"on"`). */
  netAllow?: Spanned<string>[];
  publish: Spanned<number>[];
  env: Spanned<{ name: string; value?: string }>[];
  timeout?: Spanned<number>;
}
export interface Metadata {
  requiresPython?: Spanned<string>;
  dependencies: Spanned<string>[];
  tool?: Record<string, unknown>;
  sandbox?: SandboxConfig;
}
export interface BlockInfo { range: Range; offset: Offsets; opener: Range; closer: Range; content: string; }
export interface ParseResult {
  status: "none" | "ok" | "invalid";
  block?: BlockInfo;
  /** Set exactly when status is "ok". */
  metadata?: Metadata;
  /** The block's TOML as JSON whenever it parsed, even if validation failed. */
  toml?: Record<string, unknown>;
  diagnostics: Diagnostic[];
  lineEnding: "lf" | "crlf" | "cr";
  bom: boolean;
}
export interface EditOk {
  ok: true;
  changed: boolean;
  /** Minimal edits of the original text (empty when nothing changed). */
  edits: TextEdit[];
  /** The whole new text. */
  text: string;
  /** Diagnostics of the new text. */
  diagnostics: Diagnostic[];
}
export interface EditError {
  /** e.g. "edit/duplicate-block", "edit/invalid-requirement", "edit/unknown-key". */
  code: string;
  message: string;
  hint?: string;
}
export interface EditErr { ok: false; error: EditError; }
export type EditResult = EditOk | EditErr;
export type SandboxKey = "dependencies" | "mounts" | "net" | "publish" | "env" | "timeout" | "tmpfs-size" | "memory" | "cpus" | "pids-limit" | "image" | "runtime-class";
"#;

fn options(value: JsValue) -> Result<Options, JsError> {
    if value.is_undefined() || value.is_null() {
        return Ok(Options::default());
    }
    serde_wasm_bindgen::from_value(value)
        .map_err(|e| JsError::new(&format!("invalid options: {e}")))
}

fn to_js(value: &impl Serialize) -> Result<JsValue, JsError> {
    // Tables become plain objects, not `Map`s.
    let s = serde_wasm_bindgen::Serializer::new().serialize_maps_as_objects(true);
    value
        .serialize(&s)
        .map_err(|e| JsError::new(&format!("internal error: cannot serialize the result: {e}")))
}

fn edit_js(source: &str, edit: Edit, opts: JsValue) -> Result<JsValue, JsError> {
    to_js(&api::edit(source, &[edit], options(opts)?))
}

/// Parses the script: status, block, metadata, TOML and diagnostics.
#[wasm_bindgen(unchecked_return_type = "ParseResult")]
pub fn parse(
    source: &str,
    #[wasm_bindgen(unchecked_optional_param_type = "Options")] opts: JsValue,
) -> Result<JsValue, JsError> {
    to_js(&api::parse(source, options(opts)?))
}

/// The script's diagnostics, sorted by position.
#[wasm_bindgen(unchecked_return_type = "Diagnostic[]")]
pub fn validate(
    source: &str,
    #[wasm_bindgen(unchecked_optional_param_type = "Options")] opts: JsValue,
) -> Result<JsValue, JsError> {
    to_js(&api::validate(source, options(opts)?))
}

/// Adds a PEP 508 requirement to `dependencies` (replacing one of the same package); creates the
/// block when there is none.
#[wasm_bindgen(js_name = addDependency, unchecked_return_type = "EditResult")]
pub fn add_dependency(
    source: &str,
    requirement: &str,
    #[wasm_bindgen(unchecked_optional_param_type = "Options")] opts: JsValue,
) -> Result<JsValue, JsError> {
    edit_js(source, Edit::AddDependency(requirement.to_owned()), opts)
}

/// Removes every requirement of a package (PEP 503 normalized name) from `dependencies`.
#[wasm_bindgen(js_name = removeDependency, unchecked_return_type = "EditResult")]
pub fn remove_dependency(
    source: &str,
    name: &str,
    #[wasm_bindgen(unchecked_optional_param_type = "Options")] opts: JsValue,
) -> Result<JsValue, JsError> {
    edit_js(source, Edit::RemoveDependency(name.to_owned()), opts)
}

/// Sets `requires-python` (a PEP 440 specifier set such as `>=3.11`).
#[wasm_bindgen(js_name = setRequiresPython, unchecked_return_type = "EditResult")]
pub fn set_requires_python(
    source: &str,
    specifier: &str,
    #[wasm_bindgen(unchecked_optional_param_type = "Options")] opts: JsValue,
) -> Result<JsValue, JsError> {
    edit_js(source, Edit::SetRequiresPython(specifier.to_owned()), opts)
}

/// Removes `requires-python`.
#[wasm_bindgen(js_name = unsetRequiresPython, unchecked_return_type = "EditResult")]
pub fn unset_requires_python(
    source: &str,
    #[wasm_bindgen(unchecked_optional_param_type = "Options")] opts: JsValue,
) -> Result<JsValue, JsError> {
    edit_js(source, Edit::UnsetRequiresPython, opts)
}

/// Adds a requirement to `[tool.python-sandbox] dependencies`.
#[wasm_bindgen(js_name = addSandboxDependency, unchecked_return_type = "EditResult")]
pub fn add_sandbox_dependency(
    source: &str,
    requirement: &str,
    #[wasm_bindgen(unchecked_optional_param_type = "Options")] opts: JsValue,
) -> Result<JsValue, JsError> {
    edit_js(source, Edit::AddSandboxDependency(requirement.to_owned()), opts)
}

/// Removes a package from `[tool.python-sandbox] dependencies`.
#[wasm_bindgen(js_name = removeSandboxDependency, unchecked_return_type = "EditResult")]
pub fn remove_sandbox_dependency(
    source: &str,
    name: &str,
    #[wasm_bindgen(unchecked_optional_param_type = "Options")] opts: JsValue,
) -> Result<JsValue, JsError> {
    edit_js(source, Edit::RemoveSandboxDependency(name.to_owned()), opts)
}

/// Sets a `[tool.python-sandbox]` key. `value` is TOML (`"off"`, `[8000, 8001]`, `30`) or a bare
/// string (`off`, `./data:ro`); a single value for a list key becomes a one-item list.
#[wasm_bindgen(js_name = setSandbox, unchecked_return_type = "EditResult")]
pub fn set_sandbox(
    source: &str,
    #[wasm_bindgen(unchecked_param_type = "SandboxKey")] key: &str,
    value: &str,
    #[wasm_bindgen(unchecked_optional_param_type = "Options")] opts: JsValue,
) -> Result<JsValue, JsError> {
    let opts = options(opts)?;
    to_js(&api::sandbox_edit(
        source,
        key,
        |key| Edit::SetSandbox { key, value: value.to_owned() },
        opts,
    ))
}

/// Removes a `[tool.python-sandbox]` key (and the table once it is empty).
#[wasm_bindgen(js_name = unsetSandbox, unchecked_return_type = "EditResult")]
pub fn unset_sandbox(
    source: &str,
    #[wasm_bindgen(unchecked_param_type = "SandboxKey")] key: &str,
    #[wasm_bindgen(unchecked_optional_param_type = "Options")] opts: JsValue,
) -> Result<JsValue, JsError> {
    let opts = options(opts)?;
    to_js(&api::sandbox_edit(source, key, |key| Edit::UnsetSandbox { key }, opts))
}

/// Creates an empty block (`dependencies = []`) after the shebang and coding lines when the script
/// has none; changes nothing otherwise.
#[wasm_bindgen(js_name = initBlock, unchecked_return_type = "EditResult")]
pub fn init_block(
    source: &str,
    #[wasm_bindgen(unchecked_optional_param_type = "Options")] opts: JsValue,
) -> Result<JsValue, JsError> {
    edit_js(source, Edit::Init, opts)
}

/// The message of the last Rust panic, once. A panic is a bug, never a reaction to input, and the
/// build aborts on panic (a `RuntimeError: unreachable` in JS); the package's `index.js` then reads
/// this, reports it and loads a fresh instance.
#[wasm_bindgen(js_name = takeLastPanic)]
pub fn take_last_panic() -> Option<String> {
    panic_note::take()
}

#[wasm_bindgen(start)]
fn start() {
    panic_note::install();
}

mod panic_note {
    //! Remembers the last panic message so the JS side can report it after the trap.

    use std::sync::Mutex;

    static LAST: Mutex<Option<String>> = Mutex::new(None);

    pub(crate) fn install() {
        std::panic::set_hook(Box::new(|info| {
            if let Ok(mut last) = LAST.lock() {
                *last = Some(info.to_string());
            }
        }));
    }

    pub(crate) fn take() -> Option<String> {
        LAST.lock().ok().and_then(|mut last| last.take())
    }
}
