//! Terminal output in uv's style: lower-case messages, `error:`/`warning:`/`hint:` prefixes, colour
//! only on a terminal and never when `NO_COLOR` is set (anstream strips styles otherwise).

use std::fmt;
use std::process::ExitCode;

use anstream::eprintln;
use anstyle::{AnsiColor, Style};

pub(crate) const ERROR: Style = AnsiColor::Red.on_default().bold();
pub(crate) const WARNING: Style = AnsiColor::Yellow.on_default().bold();
pub(crate) const HINT: Style = AnsiColor::Cyan.on_default().bold();
pub(crate) const NOTE: Style = AnsiColor::Green.on_default().bold();
pub(crate) const BOLD: Style = Style::new().bold();

/// An error with a suggestion for the user; printed as `error: …` then `hint: …`.
#[derive(Debug)]
pub(crate) struct Hinted {
    pub(crate) message: String,
    pub(crate) hint: String,
    /// The script's diagnostics (already printed), for `run --json`.
    pub(crate) diagnostics: Option<serde_json::Value>,
}

impl fmt::Display for Hinted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Hinted {}

/// Builds an [`anyhow::Error`] that prints a `hint:` line under the message.
pub(crate) fn hinted(message: impl Into<String>, hint: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Hinted { message: message.into(), hint: hint.into(), diagnostics: None })
}

/// [`hinted`], carrying the diagnostics that explain it (as `meta check --json` prints them).
pub(crate) fn with_diagnostics(
    message: impl Into<String>,
    hint: impl Into<String>,
    diagnostics: serde_json::Value,
) -> anyhow::Error {
    let (message, hint) = (message.into(), hint.into());
    anyhow::Error::new(Hinted { message, hint, diagnostics: Some(diagnostics) })
}

/// Prints an error chain (`error: outer`, `  caused by: inner`) and any hints, and picks the exit code.
///
/// Library errors may carry their hint in the message itself (`…\nhint: …`); those lines are
/// printed as hints too, so every error looks the same.
pub(crate) fn report_error(err: &anyhow::Error) -> ExitCode {
    let (messages, hints) = parts(err);
    for (i, message) in messages.iter().enumerate() {
        if i == 0 {
            eprintln!("{ERROR}error{ERROR:#}: {message}");
        } else {
            eprintln!("  {BOLD}caused by{BOLD:#}: {message}");
        }
    }
    for hint in hints {
        print_hint(&hint);
    }
    ExitCode::from(crate::exit::for_error(err))
}

/// The error as one JSON object for tools (`run --json`): `error` is the message and its causes,
/// `hint` the hints, `diagnostics` the script's diagnostics when there are any.
pub(crate) fn error_json(err: &anyhow::Error) -> serde_json::Value {
    let (messages, hints) = parts(err);
    let mut v = serde_json::json!({ "error": messages.join(": ") });
    if !hints.is_empty() {
        v["hint"] = hints.join("\n").into();
    }
    if let Some(d) = err.downcast_ref::<Hinted>().and_then(|h| h.diagnostics.clone()) {
        v["diagnostics"] = d;
    }
    v
}

/// Whether `err` carries a `hint:` (it says what to do, not only what went wrong).
pub(crate) fn has_hint(err: &anyhow::Error) -> bool {
    !parts(err).1.is_empty()
}

/// The messages of an error chain (outer first) and its hints.
fn parts(err: &anyhow::Error) -> (Vec<String>, Vec<String>) {
    let mut messages = Vec::new();
    let mut hints = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        let (message, hint) = match text.split_once("\nhint: ") {
            Some((m, h)) => (m.to_owned(), Some(h.to_owned())),
            None => (text, None),
        };
        messages.push(message);
        hints.extend(hint);
    }
    // Searches contexts too, which iterating `chain()` does not.
    if let Some(h) = err.downcast_ref::<Hinted>() {
        hints.push(h.hint.clone());
    }
    (messages, hints)
}

pub(crate) fn print_hint(hint: &str) {
    eprintln!("{HINT}hint{HINT:#}: {hint}");
}

pub(crate) fn warn(message: &str) {
    eprintln!("{WARNING}warning{WARNING:#}: {message}");
}

/// `note: ...` on stderr.
pub(crate) fn note(message: &str) {
    eprintln!("{NOTE}note{NOTE:#}: {message}");
}

/// One note per published port, for runs and sessions alike:
/// `note: port 8000 is published at http://127.0.0.1:8000`.
pub(crate) fn note_published(ports: &[(u16, String)]) {
    for (port, url) in ports {
        eprintln!("{NOTE}note{NOTE:#}: port {port} is published at {url}");
    }
}

/// `--json`'s `urls`, for runs and sessions alike: `[{"port": 8000, "url": "http://…"}]`
/// (`port` is the port inside; the URL carries the host's).
pub(crate) fn urls_json(ports: &[(u16, String)]) -> serde_json::Value {
    ports.iter().map(|(port, url)| serde_json::json!({ "port": port, "url": url })).collect()
}
