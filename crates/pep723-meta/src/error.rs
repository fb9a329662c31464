//! The crate's one error type: why [`crate::edit`] refused to edit.
//!
//! Parsing never fails (problems are diagnostics); only editing can, when the result would be
//! ambiguous or the requested value is invalid.

/// Why an edit was refused. The source text is never partially edited.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EditError {
    /// More than one `script` block: which one to edit is ambiguous.
    #[error("the file has more than one `script` block\nhint: merge them into one block first")]
    DuplicateBlock,
    /// An unclosed `# /// script` opener and no complete block: a new block would collide with it.
    #[error(
        "the `# /// script` block on line {line} is never closed\nhint: end it with a `# ///` line first"
    )]
    UnclosedBlock {
        /// 1-based line of the opener.
        line: usize,
    },
    /// The block's TOML does not parse.
    #[error("the `script` block is not valid toml: {message}\nhint: fix the syntax error first")]
    TomlSyntax {
        /// The TOML parser's message.
        message: String,
    },
    /// A key to edit exists with a type the edit cannot handle (e.g. `dependencies = "a"`).
    #[error("cannot edit `{key}`: it is not {expected}")]
    WrongType {
        /// Dotted key path, e.g. `tool.python-sandbox`.
        key: String,
        /// What it should be, e.g. `an array`.
        expected: &'static str,
    },
    /// A requirement that is not valid PEP 508.
    #[error("invalid requirement `{requirement}`: {message}")]
    InvalidRequirement {
        /// The requirement as given.
        requirement: String,
        /// Why it is invalid.
        message: String,
    },
    /// A `requires-python` value that is not a valid PEP 440 specifier set.
    #[error("invalid `requires-python` value `{specifier}`: {message}")]
    InvalidSpecifier {
        /// The specifier as given.
        specifier: String,
        /// Why it is invalid.
        message: String,
    },
    /// A `[tool.python-sandbox]` value that does not validate.
    #[error("invalid value for `{key}`: {message}")]
    InvalidValue {
        /// The sandbox key.
        key: String,
        /// Why it is invalid.
        message: String,
    },
    /// An unknown `[tool.python-sandbox]` key name (from [`crate::SandboxKey`]'s `FromStr`).
    #[error("unknown sandbox key `{key}`{}", suggestion.as_ref().map(|s| format!("\nhint: did you mean `{s}`?")).unwrap_or_default())]
    UnknownKey {
        /// The key as given.
        key: String,
        /// The closest known key, if any is close.
        suggestion: Option<String>,
    },
    /// The edited metadata would have an error the original has not, from keys that clash
    /// (`publish` with `net = "off"`).
    #[error("the edit would make the metadata invalid: {message}{}", hint.as_ref().map(|h| format!("\nhint: {h}")).unwrap_or_default())]
    Invalidates {
        /// The new error's message.
        message: String,
        /// Its hint, if any.
        hint: Option<String>,
    },
    /// The edited TOML cannot be written back as a block that reads the same (e.g. a value line
    /// that would read as `# ///`).
    #[error("the edited metadata cannot be written as a `script` block that reads back the same")]
    Unrepresentable,
}
