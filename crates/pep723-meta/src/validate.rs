//! From a block's TOML to typed [`Metadata`] plus diagnostics, with every span mapped back to the
//! source through the block's per-line source map.

use std::collections::HashMap;
use std::ops::Range;
use std::str::FromStr;

use toml_edit::{Document, Item, Key, TableLike, Value};

use crate::diagnostic::{Diagnostic, TextEdit, codes};
use crate::model::{
    CLAIM_SCHEME, EnvVar, LimitSetting, Metadata, MountSpec, Net, SandboxConfig, Spanned, TomlValue,
};
use crate::scan::{self, Block, opener_kind};

/// The top-level keys of a `script` block.
pub(crate) const TOP_KEYS: &[&str] = &["dependencies", "requires-python", "tool"];
/// The `[tool.python-sandbox]` keys.
pub(crate) const SANDBOX_KEYS: &[&str] = &[
    "dependencies",
    "mounts",
    "net",
    "publish",
    "env",
    "timeout",
    "tmpfs-size",
    "memory",
    "cpus",
    "pids-limit",
    "image",
    "runtime-class",
];
/// Keys a script may not set because they are the caller's: where it runs (`engine`) and the
/// cluster it would run on (`[engine.k8s]` of the user config). Each with why and what to do.
pub(crate) const CALLER_KEYS: &[(&str, &str, &str)] = &[
    (
        "engine",
        "where a script runs is the caller's choice, not the script's",
        "choose the engine on the command line: `python-sandbox run --engine NAME`",
    ),
    (
        "namespace",
        "the namespace belongs to the cluster the caller runs on, not to the script",
        "use `--namespace`, or `namespace` in `[engine.k8s]` of the user config",
    ),
    (
        "context",
        "the kube context belongs to the caller's kube config, not to the script",
        "set `context` in `[engine.k8s]` of the user config",
    ),
    (
        "preview-domain",
        "the preview domain belongs to the cluster the caller runs on, not to the script",
        "set `preview-domain` in `[engine.k8s]` of the user config",
    ),
    (
        "ingress-class",
        "the ingress class belongs to the cluster the caller runs on, not to the script",
        "set `ingress-class` in `[engine.k8s]` of the user config",
    ),
    (
        "preview",
        "how a published port reaches the caller depends on their cluster, not on the script",
        "`publish` says which ports the script serves; set `preview` in `[engine.k8s]` of the user config",
    ),
    (
        "sync-limit",
        "how much of the caller's workspace may be synced is the caller's limit, not the script's",
        "set `sync-limit` in `[engine.k8s]` of the user config",
    ),
];
/// The tool table this crate validates.
pub(crate) const SANDBOX_TABLE: &str = "python-sandbox";

pub(crate) struct Validation {
    pub(crate) diagnostics: Vec<Diagnostic>,
    pub(crate) toml: Option<TomlValue>,
    pub(crate) metadata: Option<Metadata>,
}

/// Parses and validates a block. `metadata` is best effort: invalid values are left out.
pub(crate) fn validate(block: &Block) -> Validation {
    let doc = match Document::parse(block.content.as_str()) {
        Ok(doc) => doc,
        Err(e) => {
            return Validation { diagnostics: toml_error(block, &e), toml: None, metadata: None };
        }
    };
    let mut cx = Cx { block, content: &block.content, diagnostics: Vec::new() };
    let metadata = cx.metadata(&doc);
    cx.portability(doc.as_item());
    Validation {
        diagnostics: cx.diagnostics,
        toml: TomlValue::from_item(doc.as_item()),
        metadata: Some(metadata),
    }
}

/// Maps a toml_edit error into the source. toml_edit reports a zero-width span at the end of the
/// content for "unexpected end": widen it to the last real character so editors can show it.
fn toml_error(block: &Block, e: &toml_edit::TomlError) -> Vec<Diagnostic> {
    let content = &block.content;
    let mut span = e.span().unwrap_or(content.len()..content.len());
    span.start = floor_char(content, span.start.min(content.len()));
    span.end = floor_char(content, span.end.clamp(span.start, content.len()));
    if span.is_empty() {
        // Step back over line breaks and blanks to the last visible character.
        let before = content[..span.start].trim_end();
        if span.start >= content.trim_end().len() && !before.is_empty() {
            let last = before.chars().next_back().map_or(1, char::len_utf8);
            span = before.len() - last..before.len();
        } else if let Some(c) = content[span.start..].chars().next().filter(|c| *c != '\n') {
            span.end = span.start + c.len_utf8();
        }
    }
    let message = e.message().lines().next().unwrap_or("invalid toml").to_owned();
    let (code, message) = if message.contains("duplicate key") {
        let key = content[span.clone()].trim();
        let message = if key.is_empty() || key.contains('\n') {
            message
        } else {
            format!("duplicate key `{key}`")
        };
        (codes::TOML_DUPLICATE_KEY, message)
    } else {
        (codes::TOML_SYNTAX, format!("invalid toml: {message}"))
    };
    let mut d = Diagnostic::error(code, block.source_span(span.clone()), lower_first(&message));
    // A `# ///` content line means the block swallowed a closer: explain the greedy-closer rule.
    let line_start = content[..span.start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = content[line_start..].find('\n').map_or(content.len(), |i| line_start + i);
    // Openers inside the block explain most syntax errors: two blocks merged into one.
    let mut nested = Vec::new();
    for line in &block.lines {
        let text = &content[line.content_start..line.content_start + line.len];
        if let Some(kind) =
            text.strip_prefix("/// ").filter(|k| opener_kind(&format!("# /// {k}")).is_some())
        {
            nested.push(scan::nested_opener(
                line.line_start..line.source_start + line.len,
                kind,
                block,
            ));
        }
    }
    if content[line_start..line_end].starts_with("///") {
        d = d.with_hint(
            "a block ends at the last `# ///` line before the first non-`#` line, so this `# ///` is \
             read as toml; put a blank line after the real closer",
        );
    }
    nested.insert(0, d);
    nested
}

fn floor_char(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

pub(crate) fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect::<String>().trim_end_matches('.').to_owned(),
        None => String::new(),
    }
}

/// The closest candidate to `word`, when it is close enough to be a likely typo.
pub(crate) fn suggest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (strsim::jaro_winkler(&word.to_ascii_lowercase(), c), *c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

fn type_name(item: &Item) -> &'static str {
    match item {
        Item::None => "nothing",
        Item::Table(_) => "a table",
        Item::ArrayOfTables(_) => "an array of tables",
        Item::Value(v) => value_type(v),
    }
}

fn value_type(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "a string",
        Value::Integer(_) => "an integer",
        Value::Float(_) => "a float",
        Value::Boolean(_) => "a boolean",
        Value::Datetime(_) => "a datetime",
        Value::Array(_) => "an array",
        Value::InlineTable(_) => "an inline table",
    }
}

/// A direct-reference URL (`name @ URL`), checked for shape only. pep508_rs's default
/// `VerbatimUrl` expands `${VAR}` from the environment and reads the working directory (panicking
/// where there is none, as in WASM): not acceptable in a pure parser.
#[derive(Debug)]
struct DirectUrl;

#[derive(Debug)]
struct DirectUrlError;

impl std::fmt::Display for DirectUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("url")
    }
}

impl std::fmt::Display for DirectUrlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("expected a url with a scheme, like `https://...` or `file:///...`")
    }
}

impl std::error::Error for DirectUrlError {}

impl pep508_rs::Pep508Url for DirectUrl {
    type Err = DirectUrlError;

    fn parse_url(url: &str, _working_dir: Option<&std::path::Path>) -> Result<Self, Self::Err> {
        let scheme = url.split_once(':').map_or("", |(s, _)| s);
        let valid = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            && !url.contains(char::is_whitespace);
        if valid { Ok(DirectUrl) } else { Err(DirectUrlError) }
    }
}

type Requirement = pep508_rs::Requirement<DirectUrl>;

/// Names (package and extras) that end in `.`, `-` or `_` before another character make
/// pep508_rs 0.9 panic (its parser and its name validation disagree); reject them first.
fn name_guard(s: &str) -> Result<(), (String, Range<usize>)> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    let check = |from: usize, what: &str| -> Result<usize, (String, Range<usize>)> {
        let len = s[from..].find(|c: char| !is_name(c)).unwrap_or(s.len() - from);
        let end = from + len;
        match s[from..end].chars().next_back() {
            Some(last) if !last.is_ascii_alphanumeric() && end < s.len() => {
                Err((format!("{what} must end with a letter or digit, not `{last}`"), end - 1..end))
            }
            _ => Ok(end),
        }
    };
    let start = s.len() - s.trim_start().len();
    let mut at = check(start, "the package name")?;
    at += s[at..].len() - s[at..].trim_start().len();
    if s[at..].starts_with('[') {
        at += 1;
        loop {
            at += s[at..].len() - s[at..].trim_start().len();
            at = check(at, "an extra name")?;
            at += s[at..].len() - s[at..].trim_start().len();
            if s[at..].starts_with(',') {
                at += 1;
            } else {
                break;
            }
        }
    }
    Ok(())
}

/// Whether a requirement string parses as PEP 508; the error's message and byte span in the string.
pub(crate) fn check_pep508(s: &str) -> Result<(), (String, Range<usize>)> {
    name_guard(s)?;
    match Requirement::from_str(s) {
        Ok(_) => Ok(()),
        Err(e) => {
            let start = floor_char(s, e.start.min(s.len()));
            let mut end = floor_char(s, (e.start + e.len.max(1)).min(s.len())).max(start);
            // pep508_rs reports some one-character errors as one byte; cover the whole character
            // (found by fuzzing: a byte span inside a BOM in `rich[ju \u{feff}...`).
            if end == start
                && let Some(c) = s[start..].chars().next()
            {
                end = start + c.len_utf8();
            }
            Err((lower_first(&e.message.to_string()), start..end))
        }
    }
}

/// The normalized package name of a requirement (PEP 503), when it parses.
pub(crate) fn requirement_name(s: &str) -> Option<String> {
    name_guard(s).ok()?;
    Requirement::from_str(s).ok().map(|r| r.name.to_string())
}

/// Whether packages pinned as `name==version` (a resolution's lines) satisfy every requirement
/// in `requirements`: each names a pinned package at a version its specifiers allow. `None`
/// when that cannot be told without a resolver: a requirement with extras, a URL or a marker,
/// one that does not parse, or one naming a package pinned under a marker (or not as
/// `name==version`). Pure; an environment with these pins may serve the requirements as they
/// are, its other packages included. See [`Wanted`] to ask of many pin lists.
pub fn satisfied_by(requirements: &[String], pins: &[String]) -> Option<bool> {
    Wanted::parse(requirements)?.satisfied_by(pins)
}

/// Requirements parsed once, to ask [`Wanted::satisfied_by`] of many pin lists (an engine's
/// ready environments).
#[derive(Debug, Clone)]
pub struct Wanted {
    /// Normalized name and what versions it allows (`None`: any).
    wanted: Vec<(String, Option<pep508_rs::pep440_rs::VersionSpecifiers>)>,
}

impl Wanted {
    /// `None` when a requirement needs a resolver (extras, a marker, a URL) or does not parse.
    pub fn parse(requirements: &[String]) -> Option<Wanted> {
        let mut wanted = Vec::new();
        for requirement in requirements {
            name_guard(requirement).ok()?;
            let requirement = Requirement::from_str(requirement).ok()?;
            if !requirement.extras.is_empty() || !requirement.marker.is_true() {
                return None;
            }
            let specifiers = match requirement.version_or_url {
                None => None,
                Some(pep508_rs::VersionOrUrl::VersionSpecifier(specs)) => Some(specs),
                Some(pep508_rs::VersionOrUrl::Url(_)) => return None,
            };
            wanted.push((requirement.name.to_string(), specifiers));
        }
        Some(Wanted { wanted })
    }

    /// [`satisfied_by`] with these requirements. Only the pins of wanted names are parsed.
    pub fn satisfied_by(&self, pins: &[String]) -> Option<bool> {
        let mut pinned = HashMap::new();
        for pin in pins {
            let end = pin.find(['=', '<', '>', '!', '~', ';', '[', ' ', '@']).unwrap_or(pin.len());
            let name = normalize(&pin[..end]);
            if !self.wanted.iter().any(|(wanted, _)| *wanted == name) {
                continue;
            }
            let exact = name_guard(pin)
                .ok()
                .and_then(|()| Requirement::from_str(pin).ok())
                .and_then(|pin| match &pin.version_or_url {
                    Some(pep508_rs::VersionOrUrl::VersionSpecifier(specs)) if specs.len() == 1 => {
                        let spec = specs.iter().next()?;
                        let equal = *spec.operator() == pep508_rs::pep440_rs::Operator::Equal;
                        (equal && pin.marker.is_true()).then(|| spec.version().clone())
                    }
                    _ => None,
                });
            pinned.insert(name, exact);
        }
        for (name, specifiers) in &self.wanted {
            let version = match pinned.get(name) {
                None => return Some(false),
                Some(None) => return None,
                Some(Some(version)) => version,
            };
            if specifiers.as_ref().is_some_and(|specs| !specs.contains(version)) {
                return Some(false);
            }
        }
        Some(true)
    }
}

/// A package name as PEP 503 compares it: lower case, runs of `-`, `_` and `.` as one `-`.
fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.trim().chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// Whether a `requires-python` value parses as PEP 440 specifiers; the error message.
pub(crate) fn check_pep440(s: &str) -> Result<(), String> {
    match pep440_rs::VersionSpecifiers::from_str(s) {
        Ok(_) => Ok(()),
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid specifier");
            let first = first.trim_start_matches("Failed to parse version: ").trim_end_matches(':');
            Err(lower_first(first))
        }
    }
}

struct Cx<'a> {
    block: &'a Block,
    content: &'a str,
    diagnostics: Vec<Diagnostic>,
}

impl Cx<'_> {
    fn src(&self, span: Option<Range<usize>>) -> Range<usize> {
        match span {
            Some(s) => self.block.source_span(s),
            None => self.block.opener.clone(),
        }
    }

    fn key_span(&self, key: &Key) -> Range<usize> {
        self.src(key.span())
    }

    fn item_span(&self, key: &Key, item: &Item) -> Range<usize> {
        match item.span() {
            Some(s) => self.block.source_span(s),
            None => self.key_span(key),
        }
    }

    fn push(&mut self, d: Diagnostic) {
        self.diagnostics.push(d);
    }

    /// The source span of the text inside a simple one-line string (no escapes), for pointing at
    /// a character of the value; `None` for strings whose raw text differs from their value.
    fn inner(&self, v: &Value) -> Option<usize> {
        let span = v.span()?;
        let raw = self.content.get(span.clone())?;
        let simple = (raw.starts_with('"') && !raw.starts_with("\"\"\"") && !raw.contains('\\'))
            || (raw.starts_with('\'') && !raw.starts_with("'''"));
        simple.then(|| self.block.source_offset(span.start + 1))
    }

    fn metadata(&mut self, doc: &Document<&str>) -> Metadata {
        let mut meta = Metadata::default();
        let names: Vec<&str> = doc.iter().map(|(name, _)| name).collect();
        for name in names {
            let Some((key, item)) = doc.get_key_value(name) else { continue };
            match name {
                "requires-python" => meta.requires_python = self.requires_python(key, item),
                "dependencies" => meta.dependencies = self.requirements(key, item, "dependencies"),
                "tool" => {
                    if item.is_table_like() {
                        meta.tool = TomlValue::from_item(item);
                        meta.sandbox = self.sandbox(item);
                    } else {
                        let d = Diagnostic::error(
                            codes::META_INVALID_TYPE,
                            self.item_span(key, item),
                            format!("`tool` must be a table, not {}", type_name(item)),
                        );
                        self.push(d);
                    }
                }
                "run" => {
                    let d = Diagnostic::warning(
                        codes::META_OBSOLETE_RUN,
                        self.key_span(key),
                        "the `[run]` table was dropped from pep 723 in january 2024 and is ignored",
                    )
                    .with_hint(
                        "move `dependencies` and `requires-python` to the top level of the block",
                    );
                    self.push(d);
                }
                _ => {
                    let span = self.key_span(key);
                    let mut d = Diagnostic::warning(
                        codes::META_UNKNOWN_KEY,
                        span.clone(),
                        format!(
                            "unknown key `{name}`: pep 723 defines only `dependencies`, `requires-python` and `[tool]`"
                        ),
                    );
                    if let Some(s) = suggest(name, TOP_KEYS) {
                        d = d.with_hint(format!("did you mean `{s}`?"));
                        // Renaming onto a key that exists would only trade this warning for a
                        // duplicate-key error.
                        if !doc.contains_key(s) {
                            d = d.with_fix(
                                format!("rename to `{s}`"),
                                vec![TextEdit { range: span, new_text: s.to_owned() }],
                            );
                        }
                    } else {
                        d = d.with_hint("put tool settings under `[tool.<name>]`");
                    }
                    self.push(d);
                }
            }
        }
        meta
    }

    fn requires_python(&mut self, key: &Key, item: &Item) -> Option<Spanned<String>> {
        let span = self.item_span(key, item);
        let Some(v) = item.as_value() else {
            self.type_error(
                codes::META_INVALID_TYPE,
                span,
                "`requires-python` must be a string, like `\">=3.11\"`",
                item,
            );
            return None;
        };
        let Some(s) = v.as_str() else {
            let mut d = Diagnostic::error(
                codes::META_INVALID_TYPE,
                span.clone(),
                format!("`requires-python` must be a string, not {}", value_type(v)),
            );
            if let Some(raw) = self.content.get(v.span().unwrap_or(0..0)).filter(|r| !r.is_empty())
            {
                let fixed = format!("\">={}\"", raw.trim());
                d = d.with_fix(
                    format!("replace with `{fixed}`"),
                    vec![TextEdit { range: span, new_text: fixed }],
                );
            }
            self.push(d);
            return None;
        };
        if let Err(message) = check_pep440(s) {
            let mut d = Diagnostic::error(
                codes::PYTHON_INVALID_SPECIFIER,
                span.clone(),
                format!("invalid `requires-python` specifier `{s}`: {message}"),
            );
            let trimmed = s.trim().trim_end_matches(',').trim();
            if trimmed.starts_with(|c: char| c.is_ascii_digit())
                && check_pep440(&format!(">={trimmed}")).is_ok()
            {
                let fixed = format!("\">={trimmed}\"");
                d = d
                    .with_hint(format!("a bare version is not a specifier: write `>={trimmed}`"))
                    .with_fix(
                        format!("replace with `{fixed}`"),
                        vec![TextEdit { range: span, new_text: fixed }],
                    );
            } else if trimmed != s.trim() && check_pep440(trimmed).is_ok() {
                let fixed = format!("\"{trimmed}\"");
                d = d.with_fix(
                    format!("replace with `{fixed}`"),
                    vec![TextEdit { range: span, new_text: fixed }],
                );
            }
            self.push(d);
            return None;
        }
        Some(Spanned { value: s.to_owned(), span })
    }

    fn type_error(&mut self, code: &'static str, span: Range<usize>, expected: &str, item: &Item) {
        let d = Diagnostic::error(code, span, format!("{expected}, not {}", type_name(item)));
        self.push(d);
    }

    /// An array of PEP 508 strings (top-level or sandbox `dependencies`).
    fn requirements(&mut self, key: &Key, item: &Item, what: &str) -> Vec<Spanned<String>> {
        let code = if what == "dependencies" {
            codes::META_INVALID_TYPE
        } else {
            codes::SANDBOX_INVALID_TYPE
        };
        let Some(items) = self.string_array(key, item, what, code) else { return Vec::new() };
        let mut out = Vec::new();
        for (s, v, span) in items {
            match check_pep508(&s) {
                Ok(()) => out.push(Spanned { value: s, span }),
                Err((message, at)) => {
                    let span = match self.inner(v) {
                        Some(inner) => {
                            let close = span.end - 1;
                            let start = (inner + at.start).min(close);
                            start..(inner + at.end).clamp(start + 1, span.end)
                        }
                        None => span,
                    };
                    let d = Diagnostic::error(
                        codes::DEPS_INVALID_PEP508,
                        span,
                        format!("invalid requirement `{s}`: {message}"),
                    )
                    .with_hint(
                        "requirements follow pep 508, e.g. `requests>=2.31` or `rich[jupyter]`",
                    );
                    self.push(d);
                }
            }
        }
        out
    }

    /// The strings of an array value; type errors for the array and for each non-string item.
    fn string_array<'v>(
        &mut self,
        key: &Key,
        item: &'v Item,
        what: &str,
        code: &'static str,
    ) -> Option<Vec<(String, &'v Value, Range<usize>)>> {
        let span = self.item_span(key, item);
        let Some(array) = item.as_array() else {
            let mut d = Diagnostic::error(
                code,
                span.clone(),
                format!("`{what}` must be an array of strings, not {}", type_name(item)),
            );
            if let Some(v) = item.as_value().filter(|v| v.is_str()) {
                let raw = self.content.get(v.span().unwrap_or(0..0)).unwrap_or_default();
                if !raw.is_empty() {
                    let fixed = format!("[{raw}]");
                    d = d.with_fix(
                        format!("wrap in an array: `{fixed}`"),
                        vec![TextEdit { range: span, new_text: fixed }],
                    );
                }
            }
            self.push(d);
            return None;
        };
        let mut out = Vec::new();
        for v in array.iter() {
            let span = self.src(v.span());
            match v.as_str() {
                Some(s) => out.push((s.to_owned(), v, span)),
                None => {
                    let d = Diagnostic::error(
                        code,
                        span,
                        format!("each entry of `{what}` must be a string, not {}", value_type(v)),
                    );
                    self.push(d);
                }
            }
        }
        Some(out)
    }

    fn sandbox(&mut self, tool: &Item) -> Option<SandboxConfig> {
        let tool = tool.as_table_like()?;
        let (key, item) = tool.get_key_value(SANDBOX_TABLE)?;
        let Some(table) = item.as_table_like() else {
            let d = Diagnostic::error(
                codes::SANDBOX_INVALID_TYPE,
                self.item_span(key, item),
                format!("`tool.python-sandbox` must be a table, not {}", type_name(item)),
            )
            .with_hint("write a `[tool.python-sandbox]` table header");
            self.push(d);
            return None;
        };
        let mut cfg = SandboxConfig::default();
        let names: Vec<String> = table.iter().map(|(k, _)| k.to_owned()).collect();
        for name in names {
            let Some((key, item)) = table.get_key_value(&name) else { continue };
            match name.as_str() {
                "dependencies" => {
                    cfg.dependencies =
                        self.requirements(key, item, "tool.python-sandbox.dependencies")
                }
                "mounts" => cfg.mounts = self.mounts(key, item),
                "net" => {
                    if item.is_array() {
                        cfg.net_allow = self.net_allow(key, item);
                        let span = self.item_span(key, item);
                        cfg.net = Some(Spanned { value: Net::On, span });
                    } else {
                        cfg.net = self.net(key, item);
                    }
                }
                "publish" => cfg.publish = self.publish(key, item),
                "env" => cfg.env = self.env(key, item),
                "timeout" => cfg.timeout = self.timeout(key, item),
                "tmpfs-size" => cfg.tmpfs_size = self.tmpfs_size(key, item),
                "memory" => cfg.memory = self.memory(key, item),
                "cpus" => cfg.cpu_millis = self.cpus(key, item),
                "pids-limit" => cfg.pids_limit = self.pids_limit(key, item),
                "image" => cfg.image = self.image(key, item),
                "runtime-class" => cfg.runtime_class = self.runtime_class(key, item),
                _ if let Some((_, why, hint)) = CALLER_KEYS.iter().find(|(k, ..)| *k == name) => {
                    let d = Diagnostic::error(
                        codes::SANDBOX_CALLER_KEY,
                        self.key_span(key),
                        format!("`{name}` cannot be set in `[tool.python-sandbox]`: {why}"),
                    )
                    .with_hint(*hint);
                    self.push(d);
                }
                _ => {
                    let span = self.key_span(key);
                    let mut d = Diagnostic::warning(
                        codes::SANDBOX_UNKNOWN_KEY,
                        span.clone(),
                        format!("unknown key `{name}` in `[tool.python-sandbox]`"),
                    );
                    match suggest(&name, SANDBOX_KEYS) {
                        Some(s) => {
                            d = d.with_hint(format!("did you mean `{s}`?"));
                            if !table.contains_key(s) {
                                d = d.with_fix(
                                    format!("rename to `{s}`"),
                                    vec![TextEdit { range: span, new_text: s.to_owned() }],
                                );
                            }
                        }
                        None => d = d.with_hint(format!("known keys: {}", SANDBOX_KEYS.join(", "))),
                    }
                    self.push(d);
                }
            }
        }
        self.publish_needs_net(&cfg);
        Some(cfg)
    }

    /// `publish` with `net = "off"`: `run` would refuse the pair (nothing could reach the
    /// ports), so it is an error here, at the first port, in `run`'s own words.
    fn publish_needs_net(&mut self, cfg: &SandboxConfig) {
        let (Some(net), Some(first)) = (&cfg.net, cfg.publish.first()) else { return };
        let net_value = match net.value {
            Net::On => sandbox_core::Net::On,
            Net::Off => sandbox_core::Net::Off,
        };
        if let Err(e) = sandbox_core::check_publish_net(net_value, [first.value]) {
            let (message, hint) = split_hint(&e);
            let d = Diagnostic::error(codes::SANDBOX_CONFLICT, first.span.clone(), message)
                .with_related(net.span.clone(), "the network is turned off here");
            self.push(match hint {
                Some(hint) => d.with_hint(hint),
                None => d,
            });
        }
    }

    fn duplicate(&mut self, span: Range<usize>, first: Range<usize>, what: String) {
        let d = Diagnostic::warning(
            codes::SANDBOX_DUPLICATE,
            span.clone(),
            format!("{what} is listed twice"),
        )
        .with_related(first, "first listed here")
        .with_fix("remove the duplicate", vec![TextEdit { range: span, new_text: String::new() }]);
        self.push(d);
    }

    fn mounts(&mut self, key: &Key, item: &Item) -> Vec<Spanned<MountSpec>> {
        let what = "tool.python-sandbox.mounts";
        let Some(items) = self.string_array(key, item, what, codes::SANDBOX_INVALID_TYPE) else {
            return Vec::new();
        };
        let mut out: Vec<Spanned<MountSpec>> = Vec::new();
        let mut seen: HashMap<String, Range<usize>> = HashMap::new();
        for (s, _, span) in items {
            let bad = |m: &str| {
                Diagnostic::error(codes::SANDBOX_INVALID_VALUE, span.clone(), m.to_owned())
            };
            if s.is_empty() {
                self.push(
                    bad("mount path is empty")
                        .with_hint("write `\"PATH\"`, `\"PATH:ro\"` or `\"PATH:rw\"`"),
                );
                continue;
            }
            // A volume claim (`pvc:NAME:/path[:ro|:rw]`) keeps its `:` inside; whoever runs the
            // script checks its spelling and whether its engine can mount it.
            let claim = s.starts_with(CLAIM_SCHEME).then(|| MountSpec::claim(&s));
            let spec = match claim.map_or_else(|| MountSpec::split(&s), Ok) {
                Ok(spec) => spec,
                Err(sandbox_core::MountSpellingError::EmptyPath) => {
                    self.push(bad("mount path is empty"));
                    continue;
                }
                Err(sandbox_core::MountSpellingError::UnknownMode) => {
                    let (path, mode) = s.rsplit_once(':').unwrap_or((s.as_str(), ""));
                    let message = if mode.is_empty() {
                        format!("mount `{s}` has an empty mode after `:`")
                    } else {
                        format!("mount `{s}` has an unknown mode `{mode}`")
                    };
                    let mut d = bad(&message).with_hint(sandbox_core::mount_mode_hint(&s));
                    for m in ["ro", "rw"] {
                        d = d.with_fix(
                            format!("use `{path}:{m}`"),
                            vec![TextEdit {
                                range: span.clone(),
                                new_text: format!("\"{}:{m}\"", escape(path)),
                            }],
                        );
                    }
                    self.push(d);
                    continue;
                }
            };
            if !s.starts_with(CLAIM_SCHEME)
                && let Err(e) = sandbox_core::check_home_form(std::path::Path::new(&spec.path))
            {
                let (message, hint) = split_hint(&e);
                let d = bad(&format!("mount {message}"));
                self.push(match hint {
                    Some(hint) => d.with_hint(hint),
                    None => d,
                });
                continue;
            }
            if let Some(first) = seen.get(&spec.path) {
                self.duplicate(span.clone(), first.clone(), format!("mount `{}`", spec.path));
                continue;
            }
            seen.insert(spec.path.clone(), span.clone());
            out.push(Spanned { value: spec, span });
        }
        out
    }

    fn net(&mut self, key: &Key, item: &Item) -> Option<Spanned<Net>> {
        let span = self.item_span(key, item);
        let fixes = |d: Diagnostic, first_on: bool| {
            let order = if first_on { ["on", "off"] } else { ["off", "on"] };
            order.iter().fold(d, |d, v| {
                d.with_fix(
                    format!("replace with `\"{v}\"`"),
                    vec![TextEdit { range: span.clone(), new_text: format!("\"{v}\"") }],
                )
            })
        };
        match item.as_str() {
            Some("on") => Some(Spanned { value: Net::On, span }),
            Some("off") => Some(Spanned { value: Net::Off, span }),
            Some(s) => {
                let first_on =
                    matches!(s.to_ascii_lowercase().as_str(), "on" | "true" | "yes" | "1");
                let d = Diagnostic::error(
                    codes::SANDBOX_INVALID_VALUE,
                    span.clone(),
                    format!("`net` must be `\"on\"`, `\"off\"` or a list of hosts, not `\"{s}\"`"),
                );
                self.push(fixes(d, first_on));
                None
            }
            None => {
                let first_on = item.as_bool() == Some(true);
                let d = Diagnostic::error(
                    codes::SANDBOX_INVALID_TYPE,
                    span.clone(),
                    format!(
                        "`net` must be `\"on\"`, `\"off\"` or a list of hosts like `[\"pypi.org\"]`, not {}",
                        type_name(item)
                    ),
                );
                self.push(fixes(d, first_on));
                None
            }
        }
    }

    /// `net = ["pypi.org", "*.example.com:443", "10.1.2.3:5432"]`: each entry a pattern
    /// `sandbox_core::HostPattern` parses; an empty list is an error (it allows nothing).
    fn net_allow(&mut self, key: &Key, item: &Item) -> Vec<Spanned<String>> {
        let span = self.item_span(key, item);
        let Some(array) = item.as_array() else { return Vec::new() };
        if array.is_empty() {
            let d = Diagnostic::error(
                codes::SANDBOX_INVALID_VALUE,
                span.clone(),
                "`net = []` allows nothing: write `\"off\"` for no network, or list hosts like `\"pypi.org\"`".to_owned(),
            );
            self.push(d);
            return Vec::new();
        }
        let mut out = Vec::new();
        for value in array.iter() {
            let span = self.src(value.span());
            let Some(text) = value.as_str() else {
                let d = Diagnostic::error(
                    codes::SANDBOX_INVALID_TYPE,
                    span,
                    format!(
                        "each `net` entry must be a string like `\"pypi.org\"`, not {}",
                        value_type(value)
                    ),
                );
                self.push(d);
                continue;
            };
            if let Err(e) = text.parse::<sandbox_core::HostPattern>() {
                let message = e.to_string();
                let (first, hint) = message.split_once("\nhint: ").unwrap_or((&message, ""));
                let mut d = Diagnostic::error(codes::SANDBOX_INVALID_VALUE, span, first.to_owned());
                if !hint.is_empty() {
                    d = d.with_hint(hint.to_owned());
                }
                self.push(d);
                continue;
            }
            out.push(Spanned { value: text.to_owned(), span });
        }
        out
    }

    fn publish(&mut self, key: &Key, item: &Item) -> Vec<Spanned<u16>> {
        let span = self.item_span(key, item);
        let Some(array) = item.as_array() else {
            let mut d = Diagnostic::error(
                codes::SANDBOX_INVALID_TYPE,
                span.clone(),
                format!("`publish` must be an array of port numbers, not {}", type_name(item)),
            );
            if let Some(n) = item.as_integer() {
                d = d.with_fix(
                    format!("replace with `[{n}]`"),
                    vec![TextEdit { range: span, new_text: format!("[{n}]") }],
                );
            }
            self.push(d);
            return Vec::new();
        };
        let mut out: Vec<Spanned<u16>> = Vec::new();
        for v in array.iter() {
            let span = self.src(v.span());
            let port = match v {
                Value::Integer(i) => *i.value(),
                other => {
                    let as_int = match other {
                        Value::String(s) => s.value().trim().parse::<i64>().ok(),
                        Value::Float(f) if f.value().fract() == 0.0 && f.value().abs() < 1e6 => {
                            Some(*f.value() as i64)
                        }
                        _ => None,
                    };
                    let mut d = Diagnostic::error(
                        codes::SANDBOX_INVALID_TYPE,
                        span.clone(),
                        format!("a port must be an integer (1-65535), not {}", value_type(other)),
                    );
                    if let Some(n) = as_int.filter(|n| (1..=65535).contains(n)) {
                        d = d.with_fix(
                            format!("replace with `{n}`"),
                            vec![TextEdit { range: span, new_text: n.to_string() }],
                        );
                    }
                    self.push(d);
                    continue;
                }
            };
            let Some(port) = u16::try_from(port).ok().filter(|p| *p != 0) else {
                let d = Diagnostic::error(
                    codes::SANDBOX_INVALID_VALUE,
                    span,
                    format!("port {port} is out of range: ports are 1-65535"),
                );
                self.push(d);
                continue;
            };
            if let Some(first) = out.iter().find(|p| p.value == port) {
                let first = first.span.clone();
                self.duplicate(span, first, format!("port {port}"));
                continue;
            }
            out.push(Spanned { value: port, span });
        }
        out
    }

    fn env(&mut self, key: &Key, item: &Item) -> Vec<Spanned<EnvVar>> {
        let what = "tool.python-sandbox.env";
        let Some(items) = self.string_array(key, item, what, codes::SANDBOX_INVALID_TYPE) else {
            return Vec::new();
        };
        let mut out: Vec<Spanned<EnvVar>> = Vec::new();
        for (s, _, span) in items {
            let (name, value) = match s.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (s.as_str(), None),
            };
            let valid = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                let d = Diagnostic::error(
                    codes::SANDBOX_INVALID_VALUE,
                    span,
                    format!(
                        "`{s}` is not `NAME` or `NAME=VALUE`: names are letters, digits and `_`, not starting with a digit"
                    ),
                );
                self.push(d);
                continue;
            }
            if let Some(first) = out.iter().find(|e| e.value.name == name) {
                let first = first.span.clone();
                self.duplicate(span, first, format!("environment variable `{name}`"));
                continue;
            }
            out.push(Spanned { value: EnvVar { name: name.to_owned(), value }, span });
        }
        out
    }

    fn timeout(&mut self, key: &Key, item: &Item) -> Option<Spanned<u64>> {
        let span = self.item_span(key, item);
        match item.as_integer() {
            Some(n) if n > 0 => Some(Spanned { value: n as u64, span }),
            Some(n) => {
                let d = Diagnostic::error(
                    codes::SANDBOX_INVALID_VALUE,
                    span,
                    format!("`timeout` must be a positive number of seconds, not {n}"),
                );
                self.push(d);
                None
            }
            None => {
                let mut d = Diagnostic::error(
                    codes::SANDBOX_INVALID_TYPE,
                    span.clone(),
                    format!("`timeout` must be a whole number of seconds, not {}", type_name(item)),
                );
                let whole = match item.as_value() {
                    Some(Value::Float(f)) if f.value().is_finite() && *f.value() > 0.0 => {
                        Some(f.value().ceil() as u64)
                    }
                    Some(Value::String(s)) => {
                        s.value().trim().trim_end_matches('s').parse::<u64>().ok()
                    }
                    _ => None,
                };
                if let Some(n) = whole.filter(|n| *n > 0) {
                    d = d.with_fix(
                        format!("replace with `{n}`"),
                        vec![TextEdit { range: span, new_text: n.to_string() }],
                    );
                }
                self.push(d);
                None
            }
        }
    }

    /// `tmpfs-size`: bytes as an integer, or a size string in the `--tmpfs-size` spelling.
    fn tmpfs_size(&mut self, key: &Key, item: &Item) -> Option<Spanned<u64>> {
        let span = self.item_span(key, item);
        let min = sandbox_core::MIN_TMPFS_SIZE;
        let hint =
            "write a size such as `\"512m\"` or `\"2g\"`, or a whole number of bytes; at least 1m";
        let (bytes, shown) = match item.as_value() {
            Some(Value::Integer(i)) => (u64::try_from(*i.value()).ok(), i.value().to_string()),
            Some(Value::String(s)) => {
                (sandbox_core::parse_size(s.value()).ok(), format!("`\"{}\"`", s.value()))
            }
            _ => {
                let d = Diagnostic::error(
                    codes::SANDBOX_INVALID_TYPE,
                    span,
                    format!(
                        "`tmpfs-size` must be a size string or a number of bytes, not {}",
                        type_name(item)
                    ),
                )
                .with_hint(hint);
                self.push(d);
                return None;
            }
        };
        match bytes {
            Some(b) if b >= min => Some(Spanned { value: b, span }),
            _ => {
                let why =
                    if bytes.is_some() { "is below the minimum of 1m" } else { "is not a size" };
                let d = Diagnostic::error(
                    codes::SANDBOX_INVALID_VALUE,
                    span,
                    format!("`tmpfs-size` {shown} {why}"),
                )
                .with_hint(hint);
                self.push(d);
                None
            }
        }
    }

    /// `memory`: bytes as an integer, or a size string in the `--memory` spelling; the same
    /// check as the flag (`sandbox_core::parse_memory`), so the same words.
    fn memory(&mut self, key: &Key, item: &Item) -> Option<Spanned<LimitSetting<u64>>> {
        let span = self.item_span(key, item);
        let checked = match item.as_value() {
            Some(Value::Integer(i)) => sandbox_core::parse_memory_setting(&i.value().to_string()),
            Some(Value::String(s)) => sandbox_core::parse_memory_setting(s.value()),
            _ => {
                return self.limit_type(span, "memory", "a size string or a number of bytes", item);
            }
        };
        self.limit(span, "memory", checked)
    }

    /// `cpus`: a positive number (integer or float), as `--cpus` takes it, or `"none"`.
    fn cpus(&mut self, key: &Key, item: &Item) -> Option<Spanned<LimitSetting<u32>>> {
        let span = self.item_span(key, item);
        let checked = match item.as_value() {
            Some(Value::Integer(i)) => sandbox_core::parse_cpus_setting(&i.value().to_string()),
            Some(Value::Float(f)) => sandbox_core::parse_cpus_setting(&f.value().to_string()),
            Some(Value::String(s)) if s.value() == sandbox_core::NO_LIMIT => Ok(LimitSetting::Off),
            _ => {
                return self.limit_type(
                    span,
                    "cpus",
                    "a number of CPUs such as `0.5` or `2`, or `\"none\"`",
                    item,
                );
            }
        };
        let millis = checked.map(|setting| match setting {
            LimitSetting::Set(cpus) => LimitSetting::Set(cpus.millis()),
            LimitSetting::Off => LimitSetting::Off,
        });
        self.limit(span, "cpus", millis)
    }

    /// `pids-limit`: a positive whole number, as `--pids-limit` takes it, or `"none"`.
    fn pids_limit(&mut self, key: &Key, item: &Item) -> Option<Spanned<LimitSetting<u64>>> {
        let span = self.item_span(key, item);
        let checked = match item.as_value() {
            Some(Value::Integer(i)) => sandbox_core::parse_pids_setting(&i.value().to_string()),
            Some(Value::String(s)) if s.value() == sandbox_core::NO_LIMIT => Ok(LimitSetting::Off),
            _ => {
                return self.limit_type(
                    span,
                    "pids-limit",
                    "a whole number of processes, or `\"none\"`",
                    item,
                );
            }
        };
        self.limit(span, "pids-limit", checked)
    }

    /// `image`: an image reference, as `--image` takes it (no blank or control characters).
    fn image(&mut self, key: &Key, item: &Item) -> Option<Spanned<String>> {
        let hint = "write an image reference such as `\"registry.example/psbx:1\"`";
        self.string_key(key, item, ("image", "an image reference"), hint, |s| {
            s.len() <= 1024 && !s.chars().any(|c| c.is_whitespace() || c.is_control())
        })
    }

    /// `runtime-class`: a RuntimeClass name, which Kubernetes makes a DNS subdomain.
    fn runtime_class(&mut self, key: &Key, item: &Item) -> Option<Spanned<String>> {
        let hint = "a RuntimeClass name is at most 253 lower-case letters, digits, `-` and `.`, \
                    starting and ending with a letter or digit, such as `\"gvisor\"`";
        self.string_key(key, item, ("runtime-class", "a RuntimeClass name"), hint, |s| {
            let edge =
                |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
            s.len() <= 253
                && edge(s.chars().next())
                && edge(s.chars().next_back())
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        })
    }

    /// A string key whose value must pass `valid`; the diagnostics carry `hint`.
    fn string_key(
        &mut self,
        key: &Key,
        item: &Item,
        (name, what): (&str, &str),
        hint: &str,
        valid: impl Fn(&str) -> bool,
    ) -> Option<Spanned<String>> {
        let span = self.item_span(key, item);
        let Some(s) = item.as_str() else {
            let d = Diagnostic::error(
                codes::SANDBOX_INVALID_TYPE,
                span,
                format!("`{name}` must be a string, not {}", type_name(item)),
            )
            .with_hint(hint);
            self.push(d);
            return None;
        };
        if !valid(s) {
            let shown = escape(s);
            let d = Diagnostic::error(
                codes::SANDBOX_INVALID_VALUE,
                span,
                format!("`{name}` `\"{shown}\"` is not {what}"),
            )
            .with_hint(hint);
            self.push(d);
            return None;
        }
        Some(Spanned { value: s.to_owned(), span })
    }

    /// A limit's value, or its error (the flag's message and hint) as a diagnostic.
    fn limit<T>(
        &mut self,
        span: Range<usize>,
        name: &str,
        checked: Result<T, sandbox_core::Error>,
    ) -> Option<Spanned<T>> {
        match checked {
            Ok(value) => Some(Spanned { value, span }),
            Err(e) => {
                let (message, hint) = split_hint(&e);
                let d = Diagnostic::error(
                    codes::SANDBOX_INVALID_VALUE,
                    span,
                    format!("`{name}`: {message}"),
                );
                self.push(match hint {
                    Some(hint) => d.with_hint(hint),
                    None => d,
                });
                None
            }
        }
    }

    fn limit_type<T>(
        &mut self,
        span: Range<usize>,
        name: &str,
        want: &str,
        item: &Item,
    ) -> Option<T> {
        let d = Diagnostic::error(
            codes::SANDBOX_INVALID_TYPE,
            span,
            format!("`{name}` must be {want}, not {}", type_name(item)),
        );
        self.push(d);
        None
    }

    /// TOML 1.1 syntax that toml_edit accepts but Python's `tomllib` (TOML 1.0, Python <= 3.14)
    /// rejects: other tools reading the same script would fail.
    fn portability(&mut self, item: &Item) {
        match item {
            Item::Table(t) => self.portability_table(t),
            Item::ArrayOfTables(a) => a.iter().for_each(|t| self.portability_table(t)),
            Item::Value(v) => self.portability_value(v),
            Item::None => {}
        }
    }

    fn portability_table(&mut self, t: &dyn TableLike) {
        for (name, item) in t.iter() {
            if let Some(key) = t.key(name) {
                let raw = key.span().and_then(|s| self.content.get(s)).unwrap_or_default();
                if !raw.starts_with(['"', '\'']) && !raw.is_ascii() {
                    self.toml11(key.span(), "a bare key with non-ascii characters");
                }
            }
            self.portability(item);
        }
    }

    fn portability_value(&mut self, v: &Value) {
        let raw = v.span().and_then(|s| self.content.get(s)).unwrap_or_default();
        match v {
            Value::String(_) if raw.starts_with('"') => {
                let mut chars = raw.chars();
                while let Some(c) = chars.next() {
                    if c == '\\' {
                        match chars.next() {
                            Some('e') => return self.toml11(v.span(), "the `\\e` escape"),
                            Some('x') => return self.toml11(v.span(), "the `\\x` escape"),
                            _ => {}
                        }
                    }
                }
            }
            Value::Datetime(_) => {
                if let Some(i) = raw.find(':')
                    && raw.as_bytes().get(i + 3) != Some(&b':')
                {
                    self.toml11(v.span(), "a time without seconds");
                }
            }
            Value::Array(a) => a.iter().for_each(|v| self.portability_value(v)),
            Value::InlineTable(t) => {
                let body = raw.strip_suffix('}').unwrap_or(raw);
                if raw.contains('\n') {
                    self.toml11(v.span(), "a multi-line inline table");
                } else if body.trim_end().ends_with(',') {
                    self.toml11(v.span(), "a trailing comma in an inline table");
                }
                self.portability_table(t);
            }
            _ => {}
        }
    }

    fn toml11(&mut self, span: Option<Range<usize>>, what: &str) {
        let d = Diagnostic::warning(
            codes::TOML11_PORTABILITY,
            self.src(span),
            format!("{what} is toml 1.1 syntax that python's `tomllib` rejects"),
        )
        .with_hint("python 3.14 and older (and tools built on `tomllib`) cannot read this block; use toml 1.0 syntax");
        self.push(d);
    }
}

/// A `sandbox_core` error's message and its `hint:` line, apart: a diagnostic in the words the
/// flags and `run` use.
fn split_hint(e: &sandbox_core::Error) -> (String, Option<String>) {
    let text = e.to_string();
    match text.split_once("\nhint: ") {
        Some((message, hint)) => (message.to_owned(), Some(hint.to_owned())),
        None => (text, None),
    }
}

/// Escapes a string for a TOML basic string.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}
