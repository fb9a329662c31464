//! The user config file, `$XDG_CONFIG_HOME/python-sandbox/config.toml` (default
//! `~/.config/python-sandbox/config.toml`): settings beyond flags, the cluster's
//! (`[engine.k8s]`), each engine's warm pool size (`pool = N` in `[engine.docker]`,
//! `[engine.podman]`, `[engine.k8s]`) and whether net-on sandboxes may reach the user's LAN
//! (`[net] lan = true`: the private ranges; a widening only the user's own file can ask for,
//! never a script or an agent) and the cache's size cap (`[cache] max-size = "5GiB"`: `reap`
//! and a prepare that builds a new environment remove the least recently used environments and
//! packages above it). Flags beat the file, the file beats the defaults. Parsing is pure
//! ([`parse`]) and strict: an unknown key is an error with a did-you-mean, a bad value one with
//! its `file:line:col`, as the inline table's diagnostics are. Which engines a key reaches is
//! the registry's business: this module names none.
//!
//! An `[engine.k8s]` table, even an empty one, is what "a cluster is configured" means: only
//! then do commands that look through every engine (`session list`, `reap`, a session id
//! without `--engine`) talk to a cluster.

use std::ffi::OsString;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::Result;
use toml_edit::{Document, Item, TableLike};

use crate::ui;

/// One setting as written: its value and where, for errors about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Setting {
    pub(crate) value: String,
    /// 1-based line and column of the value.
    pub(crate) line: usize,
    pub(crate) col: usize,
}

/// `[engine.k8s]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct K8sSettings {
    pub(crate) namespace: Option<Setting>,
    pub(crate) image: Option<Setting>,
    pub(crate) preview_domain: Option<Setting>,
    pub(crate) ingress_class: Option<Setting>,
    pub(crate) runtime_class: Option<Setting>,
    /// How preview URLs are served: `auto`, `ingress` or `port-forward`.
    pub(crate) preview: Option<Setting>,
    /// The kube config context (default: its current one).
    pub(crate) context: Option<Setting>,
    /// The most bytes `run` syncs each way (`256MiB` by default).
    pub(crate) sync_limit: Option<Setting>,
    /// The container's seccomp profile: `runtime-default` or `wall`.
    pub(crate) seccomp: Option<Setting>,
}

/// The keys of `[engine.k8s]`.
pub(crate) const K8S_KEYS: &[&str] = &[
    "namespace",
    "image",
    "preview-domain",
    "ingress-class",
    "runtime-class",
    "preview",
    "context",
    "sync-limit",
    "seccomp",
];
/// The engines the file has a table for.
const ENGINE_TABLES: &[&str] = &["k8s", "docker", "podman"];
/// The top-level tables.
const TABLES: &[&str] = &["cache", "engine", "net"];
/// The keys of `[cache]`.
const CACHE_KEYS: &[&str] = &["max-size"];
/// The keys of `[net]`.
const NET_KEYS: &[&str] = &["lan"];
/// The keys of `[engine.docker]` and `[engine.podman]`.
const OCI_KEYS: &[&str] = &["pool"];
/// The largest warm pool (`pool = N`) an engine may keep: each member is a running sandbox.
pub(crate) const MAX_POOL: usize = 16;

impl K8sSettings {
    /// The setting of `key` (one of [`K8S_KEYS`], or its field spelling with `_`).
    pub(crate) fn get(&self, key: &str) -> Option<&Setting> {
        match key.replace('_', "-").as_str() {
            "namespace" => self.namespace.as_ref(),
            "image" => self.image.as_ref(),
            "preview-domain" => self.preview_domain.as_ref(),
            "ingress-class" => self.ingress_class.as_ref(),
            "runtime-class" => self.runtime_class.as_ref(),
            "preview" => self.preview.as_ref(),
            "context" => self.context.as_ref(),
            "sync-limit" => self.sync_limit.as_ref(),
            "seccomp" => self.seccomp.as_ref(),
            _ => None,
        }
    }

    fn slot(&mut self, key: &str) -> Option<&mut Option<Setting>> {
        Some(match key {
            "namespace" => &mut self.namespace,
            "image" => &mut self.image,
            "preview-domain" => &mut self.preview_domain,
            "ingress-class" => &mut self.ingress_class,
            "runtime-class" => &mut self.runtime_class,
            "preview" => &mut self.preview,
            "context" => &mut self.context,
            "sync-limit" => &mut self.sync_limit,
            "seccomp" => &mut self.seccomp,
            _ => return None,
        })
    }
}

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct UserConfig {
    /// Where it is (or would be).
    pub(crate) path: Option<PathBuf>,
    /// `[engine.k8s]`, when present.
    pub(crate) k8s: Option<K8sSettings>,
    /// `pool = N` of each `[engine.NAME]` that sets it.
    pub(crate) pools: Vec<(String, usize)>,
    /// `[net] lan`: whether net-on sandboxes may reach the private ranges.
    pub(crate) lan: sandbox_core::Lan,
    /// `[cache] max-size`, bytes.
    pub(crate) cache_max_size: Option<u64>,
}

impl UserConfig {
    /// The warm pool size of engine `name` (0: no pool).
    pub(crate) fn pool(&self, name: &str) -> usize {
        self.pools.iter().find(|(engine, _)| engine == name).map_or(0, |(_, n)| *n)
    }
}

/// What the file says, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FileSettings {
    /// `[engine.k8s]`, when present (without its `pool`).
    pub(crate) k8s: Option<K8sSettings>,
    /// `pool = N` of each engine table that sets it.
    pub(crate) pools: Vec<(String, usize)>,
    /// `[net] lan`.
    pub(crate) lan: sandbox_core::Lan,
    /// `[cache] max-size`, bytes.
    pub(crate) cache_max_size: Option<u64>,
}

/// An error at a place in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConfigError {
    pub(crate) line: usize,
    pub(crate) col: usize,
    pub(crate) message: String,
    pub(crate) hint: String,
}

impl ConfigError {
    /// As the CLI reports it: `path:line:col: message`, and the hint.
    pub(crate) fn located(self, path: &Path) -> (String, String) {
        (format!("{}:{}:{}: {}", path.display(), self.line, self.col, self.message), self.hint)
    }
}

/// Pure: 1-based line and column (in characters) of byte `offset` of `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[start..].chars().count() + 1)
}

fn error_at(text: &str, span: Option<Range<usize>>, message: String, hint: String) -> ConfigError {
    let (line, col) = line_col(text, span.map_or(0, |s| s.start));
    ConfigError { line, col, message, hint }
}

/// The closest of `known` to `word`, when close enough to be a typo.
fn suggest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (strsim::jaro_winkler(&word.to_ascii_lowercase(), k), *k))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

fn unknown(
    text: &str,
    span: Option<Range<usize>>,
    key: &str,
    table: &str,
    known: &[&str],
) -> ConfigError {
    let hint = match suggest(key, known) {
        Some(s) => format!("did you mean `{s}`?"),
        None => format!("the keys of `{table}` are `{}`", known.join("`, `")),
    };
    error_at(text, span, format!("unknown key `{key}` in `{table}`"), hint)
}

fn table<'a>(
    text: &str,
    item: &'a Item,
    key: &toml_edit::Key,
    name: &str,
) -> Result<&'a dyn TableLike, ConfigError> {
    item.as_table_like().ok_or_else(|| {
        error_at(
            text,
            item.span().or_else(|| key.span()),
            format!("`{name}` must be a table"),
            format!("write it as `[{name}]`"),
        )
    })
}

/// Pure: the settings in `text`; an error names the place and says how to fix it.
pub(crate) fn parse(text: &str) -> Result<FileSettings, ConfigError> {
    let doc = Document::parse(text).map_err(|e| {
        let message = e.message().lines().next().unwrap_or("invalid toml").to_owned();
        error_at(text, e.span(), format!("invalid TOML: {message}"), "see https://toml.io".into())
    })?;
    let mut out = FileSettings::default();
    for (key, item) in doc.as_table().iter() {
        let key_span = doc.as_table().key(key).and_then(|k| k.span());
        if !TABLES.contains(&key) {
            return Err(unknown(text, key_span, key, "the config file", TABLES));
        }
        let table_key = doc.as_table().key(key).cloned().unwrap_or_else(|| key.into());
        if key == "net" {
            out.lan = net_settings(text, table(text, item, &table_key, "net")?)?;
            continue;
        }
        if key == "cache" {
            out.cache_max_size = cache_settings(text, table(text, item, &table_key, "cache")?)?;
            continue;
        }
        let engine_key = table_key;
        let engines = table(text, item, &engine_key, "engine")?;
        for (name, item) in engines.iter() {
            let name_key = engines.key(name).cloned().unwrap_or_else(|| name.into());
            if !ENGINE_TABLES.contains(&name) {
                return Err(unknown(text, name_key.span(), name, "[engine]", ENGINE_TABLES));
            }
            let settings = table(text, item, &name_key, &format!("engine.{name}"))?;
            if let Some(pool) = settings.get("pool") {
                out.pools.push((name.to_owned(), pool_size(text, pool)?));
            }
            if name == "k8s" {
                out.k8s = Some(k8s_settings(text, settings)?);
            } else if let Some((key, _)) = settings.iter().find(|(k, _)| !OCI_KEYS.contains(k)) {
                let span = settings.key(key).and_then(|k| k.span());
                return Err(unknown(text, span, key, &format!("[engine.{name}]"), OCI_KEYS));
            }
        }
    }
    Ok(out)
}

/// Pure: `[net]`: `lan = true` or `false`.
fn net_settings(text: &str, table: &dyn TableLike) -> Result<sandbox_core::Lan, ConfigError> {
    let mut lan = sandbox_core::Lan::Refused;
    for (key, item) in table.iter() {
        let key_span = table.key(key).and_then(|k| k.span());
        if !NET_KEYS.contains(&key) {
            return Err(unknown(text, key_span, key, "[net]", NET_KEYS));
        }
        let allowed = item.as_bool().ok_or_else(|| {
            error_at(
                text,
                item.span().or(key_span),
                "`lan` must be true or false".to_owned(),
                "write `lan = true` to let net-on sandboxes reach private addresses (your LAN; \
                 never this machine), or remove the line"
                    .to_owned(),
            )
        })?;
        lan = if allowed { sandbox_core::Lan::Allowed } else { sandbox_core::Lan::Refused };
    }
    Ok(lan)
}

/// Pure: `[cache]`: `max-size = "5GiB"` (or a number of bytes).
fn cache_settings(text: &str, table: &dyn TableLike) -> Result<Option<u64>, ConfigError> {
    let mut max_size = None;
    for (key, item) in table.iter() {
        let key_span = table.key(key).and_then(|k| k.span());
        if !CACHE_KEYS.contains(&key) {
            return Err(unknown(text, key_span, key, "[cache]", CACHE_KEYS));
        }
        let bytes = match (item.as_str(), item.as_integer()) {
            (Some(size), _) => sandbox_core::parse_size(size).ok(),
            (None, Some(n)) => u64::try_from(n).ok(),
            (None, None) => None,
        };
        max_size = Some(bytes.ok_or_else(|| {
            error_at(
                text,
                item.span().or(key_span),
                "`max-size` must be a size".to_owned(),
                "write e.g. `max-size = \"5GiB\"` (units k, m, g, t; `0` keeps only what runs use)"
                    .to_owned(),
            )
        })?);
    }
    Ok(max_size)
}

/// Pure: `pool = N`, a whole number from 0 to [`MAX_POOL`].
fn pool_size(text: &str, item: &Item) -> Result<usize, ConfigError> {
    item.as_integer().and_then(|n| usize::try_from(n).ok()).filter(|n| *n <= MAX_POOL).ok_or_else(
        || {
            error_at(
                text,
                item.span(),
                format!("`pool` must be a whole number from 0 to {MAX_POOL}"),
                "write e.g. `pool = 2`: how many ready sandboxes `session start` may claim".into(),
            )
        },
    )
}

fn k8s_settings(text: &str, table: &dyn TableLike) -> Result<K8sSettings, ConfigError> {
    let mut out = K8sSettings::default();
    for (key, item) in table.iter() {
        let key_span = table.key(key).and_then(|k| k.span());
        if key == "pool" {
            continue;
        }
        let Some(slot) = out.slot(key) else {
            let mut known = K8S_KEYS.to_vec();
            known.push("pool");
            return Err(unknown(text, key_span, key, "[engine.k8s]", &known));
        };
        let span = item.span().or(key_span);
        let value = item.as_str().ok_or_else(|| {
            error_at(
                text,
                span.clone(),
                format!("`{key}` must be a string"),
                format!("write it quoted: `{key} = \"...\"`"),
            )
        })?;
        if value.trim().is_empty() {
            return Err(error_at(
                text,
                span,
                format!("`{key}` is empty"),
                format!("remove the line to use the default, or give `{key}` a value"),
            ));
        }
        let (line, col) = line_col(text, span.map_or(0, |s| s.start));
        *slot = Some(Setting { value: value.to_owned(), line, col });
    }
    Ok(out)
}

/// Pure: where the file is, from the environment (`XDG_CONFIG_HOME`, else `HOME/.config`;
/// relative values are ignored, as the XDG spec says).
pub(crate) fn path_from(env: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let absolute = |name: &str| env(name).map(PathBuf::from).filter(|p| p.is_absolute());
    let base =
        absolute("XDG_CONFIG_HOME").or_else(|| absolute("HOME").map(|h| h.join(".config")))?;
    Some(base.join("python-sandbox").join("config.toml"))
}

/// Reads and parses the file at `path`; a missing file is an empty config. The error is its
/// message and hint (kept as text: the config is read once and its error reported each time).
pub(crate) fn load_from(path: Option<PathBuf>) -> Result<UserConfig, (String, String)> {
    let Some(path) = path else { return Ok(UserConfig::default()) };
    let text = match fs_err::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(UserConfig { path: Some(path), ..UserConfig::default() });
        }
        Err(e) => {
            return Err((
                format!("cannot read the config file: {e}"),
                "make it readable, or move it away to use the defaults".to_owned(),
            ));
        }
    };
    let parsed = parse(&text).map_err(|e| e.located(&path))?;
    Ok(UserConfig {
        path: Some(path),
        k8s: parsed.k8s,
        pools: parsed.pools,
        lan: parsed.lan,
        cache_max_size: parsed.cache_max_size,
    })
}

/// This user's config, read once per command.
/// The user config read now, not the copy [`user`] keeps (`pool serve` follows `pool = N`
/// edits while it runs).
pub(crate) fn user_now() -> Result<UserConfig> {
    load_from(path_from(&|n| std::env::var_os(n)))
        .map_err(|(message, hint)| ui::hinted(message, hint))
}

pub(crate) fn user() -> Result<&'static UserConfig> {
    static USER: OnceLock<Result<UserConfig, (String, String)>> = OnceLock::new();
    USER.get_or_init(|| load_from(path_from(&|n| std::env::var_os(n))))
        .as_ref()
        .map_err(|(message, hint)| ui::hinted(message.clone(), hint.clone()))
}

#[cfg(test)]
mod tests;
