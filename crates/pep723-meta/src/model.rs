//! The typed metadata model: what a valid `script` block means.

use std::fmt;
use std::ops::Range;

pub use sandbox_core::LimitSetting;

/// A value with the byte span (in the source file) it came from, so callers can point at it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Spanned<T> {
    /// The value.
    pub value: T,
    /// Byte span of the TOML value in the source (for strings, including the quotes).
    pub span: Range<usize>,
}

/// The validated contents of a `script` block.
#[derive(Debug, Clone, PartialEq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "camelCase"))]
pub struct Metadata {
    /// `requires-python`: a PEP 440 specifier set, as written.
    pub requires_python: Option<Spanned<String>>,
    /// `dependencies`: PEP 508 requirements, as written.
    pub dependencies: Vec<Spanned<String>>,
    /// The `[tool]` table, passed through unvalidated (except `python-sandbox`).
    pub tool: Option<TomlValue>,
    /// `[tool.python-sandbox]`, validated.
    pub sandbox: Option<SandboxConfig>,
}

/// `[tool.python-sandbox]`: how the script wants to be sandboxed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "camelCase"))]
pub struct SandboxConfig {
    /// Extra PEP 508 requirements installed only inside the sandbox.
    pub dependencies: Vec<Spanned<String>>,
    /// Host paths to mount.
    pub mounts: Vec<Spanned<MountSpec>>,
    /// Network access, when the script states it (`on` for a list too).
    pub net: Option<Spanned<Net>>,
    /// `net = [patterns]`: the only hosts the script may reach, each entry as written
    /// (checked by `sandbox_core::HostPattern`'s parser).
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Vec::is_empty"))]
    pub net_allow: Vec<Spanned<String>>,
    /// Ports to publish (1–65535), in order, duplicates removed.
    pub publish: Vec<Spanned<u16>>,
    /// Environment variables passed in: a name (copied from the host) or `NAME=VALUE`.
    pub env: Vec<Spanned<EnvVar>>,
    /// Wall-clock limit in seconds (positive).
    pub timeout: Option<Spanned<u64>>,
    /// `tmpfs-size`: the size cap of each tmpfs in the sandbox, in bytes (at least 1 MiB).
    pub tmpfs_size: Option<Spanned<u64>>,
    /// `memory`: the memory limit in bytes (at least 4 MiB; `sandbox_core::parse_memory`), or
    /// `"none"`: no limit, not even the default.
    pub memory: Option<Spanned<LimitSetting<u64>>>,
    /// `cpus`: the CPU limit in thousandths of a CPU (`0.5` is 500), so the model stays `Eq`;
    /// or `"none"`.
    pub cpu_millis: Option<Spanned<LimitSetting<u32>>>,
    /// `pids-limit`: the most processes and threads (positive), or `"none"`.
    pub pids_limit: Option<Spanned<LimitSetting<u64>>>,
    /// `image`: the runtime image the script needs (engines with images: docker, podman, k8s).
    pub image: Option<Spanned<String>>,
    /// `runtime-class`: a Kubernetes RuntimeClass the pod must run under (e.g. `gvisor`), a
    /// tightening that an engine without one refuses rather than drops.
    pub runtime_class: Option<Spanned<String>>,
}

/// A mount: `"PATH"`, `"PATH:ro"` or `"PATH:rw"`. The mode is read only from a final `:ro`/`:rw`
/// and any other text after the last `:` is an unknown mode, so a path that contains `:` is
/// written with its mode (`"./a:b:rw"` is `./a:b`, read-write). An entry starting with
/// [`CLAIM_SCHEME`] names a cluster volume claim (`"pvc:NAME:/path"`, `"pvc:NAME:/path:ro"`): its
/// `path` is the text before the mode, and the caller checks the rest.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct MountSpec {
    /// The path as written (relative paths are relative to the script's directory; the caller decides).
    pub path: String,
    /// The mode, when written.
    pub mode: Option<MountMode>,
}

/// How a mount that names a cluster volume claim rather than a host path starts
/// (`pvc:NAME:/path[:ro|:rw]`).
pub const CLAIM_SCHEME: &str = "pvc:";

impl MountSpec {
    /// A [`CLAIM_SCHEME`] entry: the mode split off when the text ends in `:ro` or `:rw`, the
    /// rest kept whole (its `:` separate the claim from the path).
    pub(crate) fn claim(s: &str) -> Self {
        match s.rsplit_once(':') {
            Some((path, "ro")) => Self { path: path.to_owned(), mode: Some(MountMode::Ro) },
            Some((path, "rw")) => Self { path: path.to_owned(), mode: Some(MountMode::Rw) },
            _ => Self { path: s.to_owned(), mode: None },
        }
    }

    /// Parses `PATH[:ro|:rw]`. Returns `None` for an empty path or an unknown mode.
    pub fn parse(s: &str) -> Option<Self> {
        Self::split(s).ok()
    }

    /// [`MountSpec::parse`] with the reason for a refusal.
    pub(crate) fn split(s: &str) -> Result<Self, sandbox_core::MountSpellingError> {
        let (path, mode) = sandbox_core::split_mount(s)?;
        let mode = mode.map(|m| match m {
            sandbox_core::MountMode::ReadOnly => MountMode::Ro,
            sandbox_core::MountMode::ReadWrite => MountMode::Rw,
        });
        Ok(Self { path: path.to_owned(), mode })
    }
}

impl fmt::Display for MountSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.mode {
            Some(m) => write!(f, "{}:{}", self.path, m.as_str()),
            None => f.write_str(&self.path),
        }
    }
}

/// A mount's access mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum MountMode {
    /// Read-only.
    Ro,
    /// Read-write.
    Rw,
}

impl MountMode {
    /// `ro` or `rw`.
    pub fn as_str(self) -> &'static str {
        match self {
            MountMode::Ro => "ro",
            MountMode::Rw => "rw",
        }
    }
}

/// Network access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum Net {
    /// Network on.
    On,
    /// No network at all.
    Off,
}

impl Net {
    /// `on` or `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            Net::On => "on",
            Net::Off => "off",
        }
    }
}

/// One `env` entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct EnvVar {
    /// The variable name (`[A-Za-z_][A-Za-z0-9_]*`).
    pub name: String,
    /// The value for `NAME=VALUE`; `None` means "copy from the host".
    pub value: Option<String>,
}

/// A TOML value, detached from toml_edit so it can be passed around and serialized.
#[derive(Debug, Clone, PartialEq)]
pub enum TomlValue {
    /// A string.
    String(String),
    /// An integer.
    Integer(i64),
    /// A float.
    Float(f64),
    /// A boolean.
    Boolean(bool),
    /// A date, time or date-time, in its TOML spelling.
    Datetime(String),
    /// An array (or array of tables).
    Array(Vec<TomlValue>),
    /// A table (or inline table), keys in document order.
    Table(Vec<(String, TomlValue)>),
}

impl TomlValue {
    /// The value of `key` when this is a table.
    pub fn get(&self, key: &str) -> Option<&TomlValue> {
        match self {
            TomlValue::Table(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Converts to JSON (datetimes become strings; NaN and infinities become `null`).
    #[cfg(feature = "serde")]
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            TomlValue::String(s) | TomlValue::Datetime(s) => Value::String(s.clone()),
            TomlValue::Integer(i) => Value::from(*i),
            TomlValue::Float(f) => {
                serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number)
            }
            TomlValue::Boolean(b) => Value::Bool(*b),
            TomlValue::Array(items) => Value::Array(items.iter().map(TomlValue::to_json).collect()),
            TomlValue::Table(entries) => {
                Value::Object(entries.iter().map(|(k, v)| (k.clone(), v.to_json())).collect())
            }
        }
    }

    pub(crate) fn from_item(item: &toml_edit::Item) -> Option<Self> {
        match item {
            toml_edit::Item::None => None,
            toml_edit::Item::Value(v) => Some(Self::from_value(v)),
            toml_edit::Item::Table(t) => Some(TomlValue::Table(
                t.iter().filter_map(|(k, v)| Some((k.to_owned(), Self::from_item(v)?))).collect(),
            )),
            toml_edit::Item::ArrayOfTables(a) => Some(TomlValue::Array(
                a.iter()
                    .map(|t| {
                        TomlValue::Table(
                            t.iter()
                                .filter_map(|(k, v)| Some((k.to_owned(), Self::from_item(v)?)))
                                .collect(),
                        )
                    })
                    .collect(),
            )),
        }
    }

    pub(crate) fn from_value(v: &toml_edit::Value) -> Self {
        match v {
            toml_edit::Value::String(s) => TomlValue::String(s.value().clone()),
            toml_edit::Value::Integer(i) => TomlValue::Integer(*i.value()),
            toml_edit::Value::Float(f) => TomlValue::Float(*f.value()),
            toml_edit::Value::Boolean(b) => TomlValue::Boolean(*b.value()),
            toml_edit::Value::Datetime(d) => TomlValue::Datetime(d.value().to_string()),
            toml_edit::Value::Array(a) => {
                TomlValue::Array(a.iter().map(Self::from_value).collect())
            }
            toml_edit::Value::InlineTable(t) => TomlValue::Table(
                t.iter().map(|(k, v)| (k.to_owned(), Self::from_value(v))).collect(),
            ),
        }
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for TomlValue {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}
