//! Round-trip editing: change the `script` block through toml_edit and splice back only the lines
//! that changed, so comments, spacing, line endings, the BOM and everything outside the block
//! survive byte for byte.

use std::fmt;
use std::str::FromStr;

use toml_edit::{Array, DocumentMut, Item, Table, TableLike, Value};

use crate::diagnostic::{TextEdit, codes};
use crate::error::EditError;
use crate::line_index::LineEnding;
use crate::scan::{self, Block, SCRIPT};
use crate::validate::{
    SANDBOX_KEYS, SANDBOX_TABLE, check_pep440, check_pep508, requirement_name, suggest,
};

/// One change to a script's metadata. Each edit is idempotent: applying it to its own result changes
/// nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Edit {
    /// Creates an empty block (`dependencies = []`) when the script has none; otherwise nothing.
    Init,
    /// Adds a PEP 508 requirement to `dependencies`, or replaces the one with the same package name.
    /// Goes in sorted position when the list is sorted, else at the end.
    AddDependency(String),
    /// Removes every requirement of this package name (PEP 503 normalized) from `dependencies`.
    RemoveDependency(String),
    /// Sets `requires-python` (a PEP 440 specifier set, e.g. `>=3.11`).
    SetRequiresPython(String),
    /// Removes `requires-python`.
    UnsetRequiresPython,
    /// Sets the top-level `dependencies` to a list, given as TOML text like [`Edit::SetSandbox`]
    /// (`["a", "b>=2"]`; a single requirement is wrapped in a list). Every entry must be PEP 508.
    SetDependencies(String),
    /// Removes the top-level `dependencies`.
    UnsetDependencies,
    /// Adds a requirement to `[tool.python-sandbox] dependencies`, like [`Edit::AddDependency`].
    AddSandboxDependency(String),
    /// Removes a package from `[tool.python-sandbox] dependencies`.
    RemoveSandboxDependency(String),
    /// Sets a `[tool.python-sandbox]` key. `value` is TOML (`"off"`, `[8000, 8001]`, `30`); text that
    /// is not TOML is taken as a string (`off`, `./data:ro`), and a single value for a list key is
    /// wrapped in a list. The value is validated like a parsed block.
    SetSandbox {
        /// The key.
        key: SandboxKey,
        /// The value as TOML text (or a bare string).
        value: String,
    },
    /// Removes a `[tool.python-sandbox]` key (and the table when it becomes empty).
    UnsetSandbox {
        /// The key.
        key: SandboxKey,
    },
}

/// A `[tool.python-sandbox]` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SandboxKey {
    /// `dependencies`: extra PEP 508 requirements.
    Dependencies,
    /// `mounts`: `PATH[:ro|:rw]` strings.
    Mounts,
    /// `net`: `"on"` or `"off"`.
    Net,
    /// `publish`: ports.
    Publish,
    /// `env`: `NAME` or `NAME=VALUE` strings.
    Env,
    /// `timeout`: seconds.
    Timeout,
    /// `tmpfs-size`: bytes, or a size string such as `"512m"`.
    TmpfsSize,
    /// `memory`: bytes, or a size string such as `"512m"`.
    Memory,
    /// `cpus`: a positive number of CPUs (`0.5`, `2`).
    Cpus,
    /// `pids-limit`: the most processes and threads.
    PidsLimit,
    /// `image`: the runtime image.
    Image,
    /// `runtime-class`: the Kubernetes RuntimeClass.
    RuntimeClass,
}

impl SandboxKey {
    /// Every key, in documentation order.
    pub const ALL: [SandboxKey; 12] = [
        SandboxKey::Dependencies,
        SandboxKey::Mounts,
        SandboxKey::Net,
        SandboxKey::Publish,
        SandboxKey::Env,
        SandboxKey::Timeout,
        SandboxKey::TmpfsSize,
        SandboxKey::Memory,
        SandboxKey::Cpus,
        SandboxKey::PidsLimit,
        SandboxKey::Image,
        SandboxKey::RuntimeClass,
    ];

    /// The key as written in TOML.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxKey::Dependencies => "dependencies",
            SandboxKey::Mounts => "mounts",
            SandboxKey::Net => "net",
            SandboxKey::Publish => "publish",
            SandboxKey::Env => "env",
            SandboxKey::Timeout => "timeout",
            SandboxKey::TmpfsSize => "tmpfs-size",
            SandboxKey::Memory => "memory",
            SandboxKey::Cpus => "cpus",
            SandboxKey::PidsLimit => "pids-limit",
            SandboxKey::Image => "image",
            SandboxKey::RuntimeClass => "runtime-class",
        }
    }

    /// Whether the key holds a list.
    pub fn is_list(self) -> bool {
        matches!(
            self,
            SandboxKey::Dependencies | SandboxKey::Mounts | SandboxKey::Publish | SandboxKey::Env
        )
    }
}

impl fmt::Display for SandboxKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SandboxKey {
    type Err = EditError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bare = s.strip_prefix("tool.python-sandbox.").unwrap_or(s);
        SandboxKey::ALL.into_iter().find(|k| k.as_str() == bare).ok_or_else(|| {
            EditError::UnknownKey {
                key: s.to_owned(),
                suggestion: suggest(bare, SANDBOX_KEYS).map(str::to_owned),
            }
        })
    }
}

/// The result of [`edit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditOutcome {
    /// The whole new text.
    pub text: String,
    /// Minimal edits turning the old text into the new one (empty when nothing changed).
    pub edits: Vec<TextEdit>,
    /// Indices (into the edits given) of the edits that changed nothing: the value was already
    /// there, or there was nothing to remove (`RemoveDependency` of a package not listed).
    pub unchanged: Vec<usize>,
}

impl EditOutcome {
    /// Whether the edits changed anything.
    pub fn changed(&self) -> bool {
        !self.edits.is_empty()
    }
}

/// Applies `edits` in order. Only the `script` block's bytes change (or a new block is inserted
/// after the shebang and coding lines); with no effective change the text comes back unchanged.
///
/// Refuses (never partially edits) when the target is ambiguous: duplicate `script` blocks, a TOML
/// syntax error, an unclosed opener where a block would be created, or an invalid value.
pub fn edit(source: &str, edits: &[Edit]) -> Result<EditOutcome, EditError> {
    if edits.is_empty() {
        return Ok(unchanged(source, Vec::new()));
    }
    for e in edits {
        validate_input(e)?;
    }
    let scan = scan::scan(source);
    let mut scripts = scan.blocks.iter().filter(|b| b.kind == SCRIPT);
    let block = scripts.next();
    if scripts.next().is_some() {
        return Err(EditError::DuplicateBlock);
    }
    let mut doc = match block {
        Some(b) => b.content.parse::<DocumentMut>().map_err(|e| EditError::TomlSyntax {
            message: e.message().lines().next().unwrap_or_default().to_owned(),
        })?,
        None => {
            if let Some(d) = scan.diagnostics.iter().find(|d| d.code == codes::UNCLOSED_BLOCK) {
                let line = scan.lines.iter().position(|l| l.start == d.span.start).unwrap_or(0) + 1;
                return Err(EditError::UnclosedBlock { line });
            }
            DocumentMut::new()
        }
    };
    let before = doc.to_string();
    let mut init = false;
    let mut noops = Vec::new();
    for (i, e) in edits.iter().enumerate() {
        init |= matches!(e, Edit::Init);
        let was = doc.to_string();
        apply(&mut doc, e)?;
        // Init's change is the block itself, made below.
        let made_block = matches!(e, Edit::Init) && block.is_none();
        if doc.to_string() == was && !made_block {
            noops.push(i);
        }
    }
    if block.is_none() && init && !doc.contains_key("dependencies") {
        doc.insert("dependencies", Item::Value(Value::Array(Array::new())));
    }
    let toml = doc.to_string();
    if toml == before && (block.is_some() || !init) {
        return Ok(unchanged(source, noops));
    }
    let text = match block {
        Some(b) => splice_block(source, b, &toml),
        None => insert_block(source, &toml),
    };
    // Refuse rather than write a block that reads back differently (e.g. a value line `///`).
    let reread = scan::scan(&text);
    let mut again = reread.blocks.iter().filter(|b| b.kind == SCRIPT);
    match (again.next(), again.next()) {
        (Some(b), None) if b.content == toml => {}
        _ => return Err(EditError::Unrepresentable),
    }
    refuse_new_errors(source, &text)?;
    let edits = diff(source, &text).into_iter().collect();
    Ok(EditOutcome { text, edits, unchanged: noops })
}

/// Refuses an edit whose result has an error the source has not: each value is checked on its
/// own before, but two keys can clash (`publish` with `net = "off"`), and `run` would refuse
/// the file that came out. Errors already there do not block an unrelated edit.
fn refuse_new_errors(source: &str, text: &str) -> Result<(), EditError> {
    let before = crate::parse(source);
    let known: Vec<(&str, &str)> = before.errors().map(|d| (d.code, d.message.as_str())).collect();
    let after = crate::parse(text);
    match after.errors().find(|d| !known.contains(&(d.code, d.message.as_str()))) {
        Some(d) => Err(EditError::Invalidates { message: d.message.clone(), hint: d.hint.clone() }),
        None => Ok(()),
    }
}

fn unchanged(source: &str, noops: Vec<usize>) -> EditOutcome {
    EditOutcome { text: source.to_owned(), edits: Vec::new(), unchanged: noops }
}

fn validate_input(e: &Edit) -> Result<(), EditError> {
    match e {
        Edit::AddDependency(r) | Edit::AddSandboxDependency(r) => {
            check_pep508(r).map_err(|(message, _)| EditError::InvalidRequirement {
                requirement: r.clone(),
                message,
            })
        }
        Edit::SetRequiresPython(s) => check_pep440(s)
            .map_err(|message| EditError::InvalidSpecifier { specifier: s.clone(), message }),
        Edit::SetSandbox { key, value } => sandbox_value(*key, value).map(|_| ()),
        Edit::SetDependencies(value) => dependencies_value(value).map(|_| ()),
        _ => Ok(()),
    }
}

/// Turns `SetSandbox` text into a TOML value and validates it by parsing a one-key block.
fn sandbox_value(key: SandboxKey, text: &str) -> Result<Value, EditError> {
    let value = toml_value(text, key.is_list());
    probe(Some("[tool.python-sandbox]"), key.as_str(), &value)?;
    Ok(value)
}

/// Turns `SetDependencies` text into a TOML list and validates it like a parsed block.
fn dependencies_value(text: &str) -> Result<Value, EditError> {
    let value = toml_value(text, true);
    probe(None, "dependencies", &value)?;
    Ok(value)
}

/// TOML text, or a bare string when it is not TOML; wrapped in a list for a list key.
fn toml_value(text: &str, list: bool) -> Value {
    let mut value = match text.trim().parse::<Value>() {
        Ok(v) => v,
        Err(_) => Value::from(text.trim()),
    };
    if list && !value.is_array() {
        let mut a = Array::new();
        a.push(value);
        value = Value::Array(a);
    }
    if let Value::Array(a) = &mut value {
        a.fmt();
    }
    value.decor_mut().clear();
    value
}

/// Validates `key = value` by parsing a block that holds only it (under `header`, when given).
fn probe(header: Option<&str>, key: &str, value: &Value) -> Result<(), EditError> {
    let line = value.to_string();
    let header_line = header.map(|h| format!("# {h}\n")).unwrap_or_default();
    let probe = format!("# /// script\n{header_line}# {key} = {}\n# ///\n", line.trim());
    let parsed = crate::parse(&probe);
    let invalid = |message: String| EditError::InvalidValue { key: key.to_owned(), message };
    if let Some(d) = parsed.errors().next() {
        return Err(invalid(d.message.clone()));
    }
    let lines = 1 + usize::from(header.is_some());
    if parsed.block.as_ref().map(|b| b.content_lines()) != Some(lines) {
        return Err(invalid("the value must fit on one line".to_owned()));
    }
    Ok(())
}

fn apply(doc: &mut DocumentMut, e: &Edit) -> Result<(), EditError> {
    match e {
        Edit::Init => Ok(()),
        Edit::AddDependency(r) => {
            let item = doc.entry("dependencies").or_insert(Item::Value(Value::Array(Array::new())));
            let array = item.as_array_mut().ok_or(EditError::WrongType {
                key: "dependencies".to_owned(),
                expected: "an array",
            })?;
            add_requirement(array, r);
            Ok(())
        }
        Edit::RemoveDependency(name) => {
            if let Some(item) = doc.get_mut("dependencies") {
                let array = item.as_array_mut().ok_or(EditError::WrongType {
                    key: "dependencies".to_owned(),
                    expected: "an array",
                })?;
                remove_requirement(array, name);
            }
            Ok(())
        }
        Edit::SetRequiresPython(spec) => {
            let mut value = Value::from(spec.as_str());
            match doc.get_mut("requires-python") {
                Some(Item::Value(old)) => {
                    *value.decor_mut() = old.decor().clone();
                    if old.as_str() != Some(spec.as_str()) {
                        *old = value;
                    }
                }
                _ => {
                    doc.insert("requires-python", Item::Value(value));
                    // Conventionally first; a stable sort keeps everything else in place.
                    doc.sort_values_by(|k1, _, k2, _| {
                        (k1.get() != "requires-python").cmp(&(k2.get() != "requires-python"))
                    });
                }
            }
            Ok(())
        }
        Edit::UnsetRequiresPython => {
            doc.remove("requires-python");
            Ok(())
        }
        Edit::SetDependencies(text) => {
            let value = dependencies_value(text)?;
            replace_value(doc.as_table_mut(), "dependencies", value);
            Ok(())
        }
        Edit::UnsetDependencies => {
            doc.remove("dependencies");
            Ok(())
        }
        Edit::AddSandboxDependency(r) => {
            let table = sandbox_table(doc, true)?.ok_or(EditError::Unrepresentable)?;
            let item =
                table.entry("dependencies").or_insert(Item::Value(Value::Array(Array::new())));
            let array = item.as_array_mut().ok_or(EditError::WrongType {
                key: "tool.python-sandbox.dependencies".to_owned(),
                expected: "an array",
            })?;
            add_requirement(array, r);
            Ok(())
        }
        Edit::RemoveSandboxDependency(name) => {
            if let Some(table) = sandbox_table(doc, false)?
                && let Some(item) = table.get_mut("dependencies")
            {
                let array = item.as_array_mut().ok_or(EditError::WrongType {
                    key: "tool.python-sandbox.dependencies".to_owned(),
                    expected: "an array",
                })?;
                remove_requirement(array, name);
            }
            Ok(())
        }
        Edit::SetSandbox { key, value } => {
            let value = sandbox_value(*key, value)?;
            let table = sandbox_table(doc, true)?.ok_or(EditError::Unrepresentable)?;
            replace_value(table, key.as_str(), value);
            Ok(())
        }
        Edit::UnsetSandbox { key } => {
            if let Some(table) = sandbox_table(doc, false)? {
                table.remove(key.as_str());
                if table.is_empty() {
                    remove_empty_sandbox(doc);
                }
            }
            Ok(())
        }
    }
}

/// Sets `key` to `value`, keeping the old value's decor (comments, spacing) and leaving an equal
/// value untouched.
fn replace_value(table: &mut dyn TableLike, key: &str, mut value: Value) {
    match table.get_mut(key) {
        Some(Item::Value(old)) => {
            if old.to_string().trim() != value.to_string().trim() {
                *value.decor_mut() = old.decor().clone();
                *old = value;
            }
        }
        _ => {
            table.insert(key, Item::Value(value));
        }
    }
}

/// Removes an empty `[tool.python-sandbox]` and then an empty implicit `[tool]`.
fn remove_empty_sandbox(doc: &mut DocumentMut) {
    let Some(tool) = doc.get_mut("tool").and_then(Item::as_table_like_mut) else { return };
    tool.remove(SANDBOX_TABLE);
    let implicit = doc.get("tool").and_then(Item::as_table).is_some_and(Table::is_implicit);
    if implicit && doc.get("tool").and_then(Item::as_table_like).is_some_and(TableLike::is_empty) {
        doc.remove("tool");
    }
}

/// The `[tool.python-sandbox]` table, created as a real header (never inline, with an empty TOML
/// line before it so it reads as its own section) when `create` is set.
fn sandbox_table(
    doc: &mut DocumentMut,
    create: bool,
) -> Result<Option<&mut dyn TableLike>, EditError> {
    let has_content = !doc.is_empty();
    let tool_is_inline = doc.get("tool").is_some_and(Item::is_inline_table);
    if !doc.contains_key("tool") {
        if !create {
            return Ok(None);
        }
        let mut tool = Table::new();
        tool.set_implicit(true);
        doc.insert("tool", Item::Table(tool));
    }
    let tool = doc
        .get_mut("tool")
        .and_then(Item::as_table_like_mut)
        .ok_or(EditError::WrongType { key: "tool".to_owned(), expected: "a table" })?;
    if !tool.contains_key(SANDBOX_TABLE) {
        if !create {
            return Ok(None);
        }
        let item = if tool_is_inline {
            Item::Value(Value::InlineTable(toml_edit::InlineTable::new()))
        } else {
            Item::Table(new_header(has_content))
        };
        tool.insert(SANDBOX_TABLE, item);
    }
    let item = tool.get_mut(SANDBOX_TABLE).ok_or(EditError::Unrepresentable)?;
    item.as_table_like_mut()
        .map(Some)
        .ok_or(EditError::WrongType { key: "tool.python-sandbox".to_owned(), expected: "a table" })
}

fn new_header(blank_line_before: bool) -> Table {
    let mut t = Table::new();
    if blank_line_before {
        t.decor_mut().set_prefix("\n");
    }
    t
}

/// The sort key of a requirement: its normalized name, or the lower-cased text.
fn sort_name(s: &str) -> String {
    requirement_name(s).unwrap_or_else(|| s.trim().to_ascii_lowercase())
}

fn is_multiline(array: &Array) -> bool {
    array
        .iter()
        .any(|v| v.decor().prefix().and_then(|p| p.as_str()).is_some_and(|p| p.contains('\n')))
        || array.trailing().as_str().is_some_and(|t| t.contains('\n'))
}

fn prefix_of(v: &Value) -> String {
    v.decor().prefix().and_then(|p| p.as_str()).unwrap_or_default().to_owned()
}

fn suffix_of(v: &Value) -> String {
    v.decor().suffix().and_then(|p| p.as_str()).unwrap_or_default().to_owned()
}

/// Splits a multi-line prefix into the previous item's same-line comment and the rest.
fn split_same_line_comment(prefix: &str) -> (&str, &str) {
    match prefix.find('\n') {
        Some(nl) if prefix[..nl].trim_start().starts_with('#') => (&prefix[..nl], &prefix[nl..]),
        _ => ("", prefix),
    }
}

fn add_requirement(array: &mut Array, req: &str) {
    let name = sort_name(req);
    let existing =
        array.iter().position(|v| v.as_str().map(sort_name).as_deref() == Some(name.as_str()));
    if let Some(i) = existing {
        if array.get(i).and_then(Value::as_str) == Some(req) {
            return;
        }
        let mut v = Value::from(req);
        if let Some(old) = array.get(i) {
            *v.decor_mut() = old.decor().clone();
        }
        array.replace_formatted(i, v);
        return;
    }
    let mut v = Value::from(req);
    if array.is_empty() {
        // An empty list becomes the multi-line, 4-space, trailing-comma layout uv writes.
        v.decor_mut().set_prefix("\n    ");
        v.decor_mut().set_suffix("");
        array.push_formatted(v);
        array.set_trailing_comma(true);
        array.set_trailing("\n");
        return;
    }
    let names: Vec<String> =
        array.iter().map(|v| v.as_str().map(sort_name).unwrap_or_default()).collect();
    let sorted = names.windows(2).all(|w| w[0] <= w[1]);
    let pos = if sorted {
        names.iter().position(|n| *n > name).unwrap_or(names.len())
    } else {
        names.len()
    };
    if is_multiline(array) {
        let first = array.get(0).map(prefix_of).unwrap_or_default();
        let indent =
            first.rsplit('\n').next().filter(|s| s.trim().is_empty()).unwrap_or("    ").to_owned();
        let mut prefix = format!("\n{indent}");
        if pos < array.len() {
            if let Some(next) = array.get_mut(pos) {
                let p = prefix_of(next);
                let (comment, rest) = split_same_line_comment(&p);
                if !comment.is_empty() {
                    prefix = format!("{comment}\n{indent}");
                    next.decor_mut().set_prefix(rest.to_owned());
                }
            }
        } else {
            let last = array.len() - 1;
            if let Some(prev) = array.get_mut(last) {
                // Without a trailing comma the last item's same-line comment sits in its suffix.
                let s = suffix_of(prev);
                if s.contains('\n') {
                    prefix = format!("{}{indent}", s.trim_end_matches([' ', '\t']));
                    prev.decor_mut().set_suffix("");
                }
            }
            let trailing = array.trailing().as_str().unwrap_or_default().to_owned();
            let (comment, rest) = split_same_line_comment(&trailing);
            if !comment.is_empty() {
                prefix = format!("{comment}\n{indent}");
                array.set_trailing(rest.to_owned());
            }
            if !array.trailing().as_str().unwrap_or_default().contains('\n') {
                array.set_trailing("\n");
            }
            array.set_trailing_comma(true);
        }
        v.decor_mut().set_prefix(prefix);
        v.decor_mut().set_suffix("");
    } else {
        v.decor_mut().set_prefix(if pos == 0 { "" } else { " " });
        v.decor_mut().set_suffix("");
        if pos == 0
            && let Some(first) = array.get_mut(0)
        {
            first.decor_mut().set_prefix(" ");
        }
    }
    array.insert_formatted(pos, v);
}

fn remove_requirement(array: &mut Array, name: &str) {
    let target = sort_name(name);
    let multiline = is_multiline(array);
    let mut i = 0;
    while i < array.len() {
        let hit = array
            .get(i)
            .and_then(Value::as_str)
            .is_some_and(|s| sort_name(s) == target || s.trim() == name.trim());
        if !hit {
            i += 1;
            continue;
        }
        let removed = array.remove(i);
        let p = prefix_of(&removed);
        // The removed prefix may start with the previous item's same-line comment (keep it); the
        // next prefix may start with the removed item's own same-line comment (drop it).
        let (kept, _) = split_same_line_comment(&p);
        if let Some(next) = array.get_mut(i) {
            let np = prefix_of(next);
            let np = if multiline {
                format!("{kept}{}", split_same_line_comment(&np).1)
            } else if i == 0 {
                String::new()
            } else {
                np
            };
            next.decor_mut().set_prefix(np);
        } else if multiline {
            let t = array.trailing().as_str().unwrap_or_default().to_owned();
            array.set_trailing(format!("{kept}{}", split_same_line_comment(&t).1));
        }
    }
    if array.is_empty() {
        array.set_trailing("");
        array.set_trailing_comma(false);
    }
}

fn render_line(line: &str) -> String {
    // `#` only for truly empty lines: whitespace-only lines keep their spaces (multi-line strings).
    if line.is_empty() { "#".to_owned() } else { format!("# {line}") }
}

fn toml_lines(toml: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = toml.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    lines
}

/// Replaces only the changed content lines of an existing block.
fn splice_block(source: &str, block: &Block, toml: &str) -> String {
    let old = toml_lines(&block.content);
    let new = toml_lines(toml);
    let p = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let max_s = old.len().min(new.len()) - p;
    let s = old.iter().rev().zip(new.iter().rev()).take(max_s).take_while(|(a, b)| a == b).count();
    let line_start = |k: usize| block.lines.get(k).map_or(block.closer.start, |l| l.line_start);
    let start = line_start(p);
    let end = line_start(old.len() - s);
    let eol = block.line_ending.as_str();
    let mut middle = String::new();
    for line in &new[p..new.len() - s] {
        middle.push_str(&render_line(line));
        middle.push_str(eol);
    }
    let mut text = String::with_capacity(source.len() + middle.len());
    text.push_str(&source[..start]);
    text.push_str(&middle);
    text.push_str(&source[end..]);
    text
}

/// Inserts a new block after the shebang and a PEP 263 coding line (which must stay on line 1 or
/// 2), before everything else, separated from what follows by a blank line.
fn insert_block(source: &str, toml: &str) -> String {
    let lines = scan::split_lines(source);
    let eol = LineEnding::detect(source).as_str();
    let text_of = |i: usize| lines.get(i).map(|l| &source[l.start..l.end]);
    let mut idx = 0;
    if text_of(0).is_some_and(|t| t.starts_with("#!")) {
        idx = 1;
    }
    if text_of(idx).is_some_and(is_coding_line) {
        idx += 1;
    }
    let (at, needs_eol_before) = match lines.get(idx) {
        Some(l) => (l.start, false),
        None => {
            let body_start = if source.starts_with('\u{feff}') { 3 } else { 0 };
            let ends_with_eol = source.ends_with(['\n', '\r']);
            (source.len(), source.len() > body_start && !ends_with_eol)
        }
    };
    let mut block = String::new();
    if needs_eol_before {
        block.push_str(eol);
    }
    block.push_str("# /// script");
    block.push_str(eol);
    for line in toml_lines(toml) {
        block.push_str(&render_line(line));
        block.push_str(eol);
    }
    block.push_str("# ///");
    block.push_str(eol);
    if text_of(idx).is_some_and(|t| !t.trim().is_empty()) {
        block.push_str(eol);
    }
    let mut text = String::with_capacity(source.len() + block.len());
    text.push_str(&source[..at]);
    text.push_str(&block);
    text.push_str(&source[at..]);
    text
}

fn is_coding_line(line: &str) -> bool {
    let l = line.trim_start_matches([' ', '\t', '\x0c']);
    l.starts_with('#') && l.find("coding").is_some_and(|i| l[i + 6..].starts_with([':', '=']))
}

/// The single minimal edit between two texts (common prefix and suffix removed), or none.
pub(crate) fn diff(old: &str, new: &str) -> Option<TextEdit> {
    if old == new {
        return None;
    }
    let mut p = old.bytes().zip(new.bytes()).take_while(|(a, b)| a == b).count();
    while !old.is_char_boundary(p) || !new.is_char_boundary(p) {
        p -= 1;
    }
    let max_s = old.len().min(new.len()) - p;
    let mut s =
        old.bytes().rev().zip(new.bytes().rev()).take(max_s).take_while(|(a, b)| a == b).count();
    while !old.is_char_boundary(old.len() - s) || !new.is_char_boundary(new.len() - s) {
        s -= 1;
    }
    Some(TextEdit { range: p..old.len() - s, new_text: new[p..new.len() - s].to_owned() })
}

#[cfg(test)]
mod tests;
