//! Config precedence: three [`Layer`]s (defaults, the script's inline `[tool.python-sandbox]`
//! table, the command line) resolve into one [`RunSpec`].
//!
//! The law, for every field:
//! - scalars (`script`, `args`, `requires_python`, `net`, `timeout`, `tmpfs_size`, and each
//!   of the three limits on its own): the highest layer that sets the field wins; `net` falls
//!   back to on;
//! - lists (`dependencies`, `mounts`, `publish`, `env`): layers concatenate, lowest first, and
//!   an entry replaces any earlier entry for the same target (mount: normalized absolute path;
//!   publish: port; env: name; dependency: PEP 503 normalized package name). The replacement
//!   keeps the position where the target first appeared, so the order is stable.
//!
//! A resolved spec is consistent: `net = off` with published ports is an error rather than
//! a silently dropped port.

use std::path::PathBuf;
use std::time::Duration;

use crate::paths::{absolutize, is_within, normalize};
use crate::{EnvVar, Error, LayerLimits, Mount, MountMode, Net, Publish, RunSpec};

/// One source of configuration. Every field is optional: `None` and empty lists mean "this
/// layer says nothing".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layer {
    /// The script; relative paths are taken from the workspace.
    pub script: Option<PathBuf>,
    /// Arguments for the script. A scalar, not a list: a higher layer's arguments replace the
    /// lower ones whole, because positional arguments do not merge.
    pub args: Option<Vec<String>>,
    /// PEP 508 requirements.
    pub dependencies: Vec<String>,
    /// PEP 440 specifiers for the interpreter.
    pub requires_python: Option<String>,
    /// Mounts as written: relative to the workspace, `~`-prefixed or absolute.
    pub mounts: Vec<LayerMount>,
    /// Network access.
    pub net: Option<Net>,
    /// An allowlist (`net = [patterns]`): sets `net` to on with the list, as one setting with
    /// `net` (the highest layer that sets either wins, whole).
    pub allow: Option<crate::Allow>,
    /// Published ports.
    pub publish: Vec<Publish>,
    /// Environment variables.
    pub env: Vec<EnvVar>,
    /// Wall-clock limit.
    pub timeout: Option<Duration>,
    /// Size cap of each tmpfs, in bytes.
    pub tmpfs_size: Option<u64>,
    /// Resource limits; each of the three resolves on its own, `none` included.
    pub limits: LayerLimits,
}

/// A mount as a layer spells it, before resolution.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LayerMount {
    /// Host path as written.
    pub path: PathBuf,
    /// `None` when the user wrote no `:ro`/`:rw`. It then resolves to read-write inside the
    /// workspace (which is writable anyway, so a bare `./out` takes nothing away) and to
    /// read-only everywhere else.
    pub mode: Option<MountMode>,
}

/// What resolution needs to know about the caller, gathered by the IO edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolveCtx {
    /// The workspace (the caller's cwd), absolute.
    pub workspace: PathBuf,
    /// The caller's home directory, absolute, for `~` expansion; `None` when unknown.
    pub home: Option<PathBuf>,
}

impl Layer {
    /// The layer that resolves back to exactly `spec` (all values explicit).
    pub fn from_spec(spec: &RunSpec) -> Layer {
        Layer {
            script: Some(spec.script.clone()),
            args: Some(spec.args.clone()),
            dependencies: spec.dependencies.clone(),
            requires_python: spec.requires_python.clone(),
            mounts: spec
                .mounts
                .iter()
                .map(|mount| LayerMount { path: mount.path.clone(), mode: Some(mount.mode) })
                .collect(),
            net: Some(spec.net),
            allow: spec.allow.clone(),
            publish: spec.publish.clone(),
            env: spec.env.clone(),
            timeout: spec.timeout,
            tmpfs_size: Some(spec.tmpfs_size),
            limits: spec.limits.layer(),
        }
    }
}

/// Resolves `defaults < inline < cli` into a [`RunSpec`].
///
/// - Scalars (`script`, `args`, `requires_python`, `net`, `timeout`): the highest layer that
///   sets the field wins; `net` falls back to on.
/// - Lists (`dependencies`, `mounts`, `publish`, `env`): layers concatenate, lowest first, and
///   an entry replaces any earlier entry for the same target (mount: normalized absolute
///   path; publish: port; env: name; dependency: PEP 503 normalized package name), keeping
///   the position where the target first appeared.
/// - Errors: no script, `net = off` with published ports, port 0, one host port twice, a
///   zero timeout, a limit out of range (see [`crate::parse_memory`] and its siblings), an invalid env name or requirement, `~` without a home, `~user`, a relative workspace or home.
///
/// Pure: paths are expanded (`~`), made absolute against `ctx.workspace` and normalized
/// lexically, never canonicalized.
pub fn resolve(
    defaults: &Layer,
    inline: &Layer,
    cli: &Layer,
    ctx: &ResolveCtx,
) -> Result<RunSpec, Error> {
    if !ctx.workspace.is_absolute() {
        return Err(Error::RelativeWorkspace { path: ctx.workspace.clone() });
    }
    if let Some(home) = ctx.home.as_ref().filter(|home| !home.is_absolute()) {
        return Err(Error::RelativeHome { path: home.clone() });
    }
    let workspace = normalize(&ctx.workspace);
    let home = ctx.home.as_deref().map(normalize);
    let home = home.as_deref();
    let layers = [defaults, inline, cli];

    let script = last_set(&layers, |layer| layer.script.as_ref()).ok_or(Error::MissingScript)?;
    let script = absolutize(script, &workspace, home)?;
    let args = last_set(&layers, |layer| layer.args.as_ref()).cloned().unwrap_or_default();
    let requires_python = last_set(&layers, |layer| layer.requires_python.as_ref()).cloned();
    // A list's address patterns open private ranges only when the caller's own layers (the
    // command line, the user config) give it: a script can narrow `on`, never widen it.
    let (net, allow) = layers
        .iter()
        .enumerate()
        .rev()
        .find_map(|(index, layer)| match (&layer.allow, layer.net) {
            (Some(allow), _) => {
                let from_caller = !std::ptr::eq(layers[index], inline);
                Some((Net::On, Some(allow.clone().opening_private(from_caller))))
            }
            (None, Some(net)) => Some((net, None)),
            (None, None) => None,
        })
        .unwrap_or_default();
    let timeout = last_set(&layers, |layer| layer.timeout.as_ref()).copied();
    if timeout == Some(Duration::ZERO) {
        return Err(Error::ZeroTimeout);
    }
    let tmpfs_size = last_set(&layers, |layer| layer.tmpfs_size.as_ref())
        .copied()
        .unwrap_or(crate::DEFAULT_TMPFS_SIZE);
    if tmpfs_size < MIN_TMPFS_SIZE {
        return Err(Error::InvalidValue {
            what: "tmpfs size",
            value: tmpfs_size.to_string(),
            hint: "give at least 1m (one MiB), e.g. `512m` or `2g`",
        });
    }
    let limits = crate::limits::resolve(&layers.map(|layer| &layer.limits));
    crate::limits::check(&limits)?;

    let mut dependencies = Merged::default();
    let mut mounts = Merged::default();
    let mut publish = Merged::default();
    let mut env = Merged::default();
    for layer in layers {
        for requirement in &layer.dependencies {
            dependencies.insert(package_key(requirement)?, requirement.clone());
        }
        for mount in &layer.mounts {
            let path = absolutize(&mount.path, &workspace, home)?;
            let mode = mount.mode.unwrap_or(if is_within(&path, &workspace) {
                MountMode::ReadWrite
            } else {
                MountMode::ReadOnly
            });
            mounts.insert(path.clone(), Mount { path, mode });
        }
        for entry in &layer.publish {
            if entry.port == 0 {
                return Err(Error::InvalidPort);
            }
            publish.insert(entry.port, *entry);
        }
        for var in &layer.env {
            if var.name.is_empty() || var.name.contains(['=', '\0']) {
                return Err(Error::InvalidEnvName { name: var.name.clone() });
            }
            env.insert(var.name.clone(), var.clone());
        }
    }

    let publish = publish.into_values();
    crate::publish::check_distinct(&publish)?;
    check_publish_net(net, publish.iter().map(|p| p.port))?;

    Ok(RunSpec {
        script,
        args,
        dependencies: dependencies.into_values(),
        requires_python,
        mounts: mounts.into_values(),
        net,
        allow,
        publish,
        env: env.into_values(),
        timeout,
        tmpfs_size,
        limits,
        workspace,
    })
}

/// Refuses published ports with the network off: nothing could reach them. Pure: [`resolve`]
/// and the script metadata's validation call this one check, so both say the same.
pub fn check_publish_net(net: Net, ports: impl IntoIterator<Item = u16>) -> Result<(), Error> {
    match ports.into_iter().next() {
        Some(port) if net == Net::Off => Err(Error::PublishWithoutNet { port }),
        _ => Ok(()),
    }
}

/// The smallest [`RunSpec::tmpfs_size`]: below this a tmpfs cannot hold even Python's own
/// temporary files.
pub const MIN_TMPFS_SIZE: u64 = 1 << 20;

/// The value from the highest layer that sets it.
fn last_set<'a, T: ?Sized>(
    layers: &[&'a Layer],
    field: impl Fn(&'a Layer) -> Option<&'a T>,
) -> Option<&'a T> {
    layers.iter().rev().find_map(|layer| field(layer))
}

/// An insertion-ordered map where re-inserting a key replaces the value in place. Lists are
/// short (a handful of mounts), so a linear scan beats hashing and keeps the order obvious.
struct Merged<K, V> {
    entries: Vec<(K, V)>,
}

impl<K, V> Default for Merged<K, V> {
    fn default() -> Self {
        Merged { entries: Vec::new() }
    }
}

impl<K: PartialEq, V> Merged<K, V> {
    fn insert(&mut self, key: K, value: V) {
        match self.entries.iter_mut().find(|(existing, _)| *existing == key) {
            Some(slot) => slot.1 = value,
            None => self.entries.push((key, value)),
        }
    }

    fn into_values(self) -> Vec<V> {
        self.entries.into_iter().map(|(_, value)| value).collect()
    }
}

/// The PEP 503 normalized name a requirement starts with: runs of `-`, `_` and `.` become
/// one `-`, letters are lower-cased. `Requests[socks]>=2` and `requests` share a key.
fn package_key(requirement: &str) -> Result<String, Error> {
    let name: &str = {
        let trimmed = requirement.trim_start();
        let end = trimmed
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
            .unwrap_or(trimmed.len());
        &trimmed[..end]
    };
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(Error::InvalidDependency { requirement: requirement.to_owned() });
    }
    Ok(normalize_package_name(name))
}

/// PEP 503 name normalization.
pub(crate) fn normalize_package_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_separator = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            in_separator = true;
        } else {
            if in_separator {
                out.push('-');
                in_separator = false;
            }
            out.push(c.to_ascii_lowercase());
        }
    }
    if in_separator {
        out.push('-');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pep503_table() {
        let cases = [
            ("requests", "requests"),
            ("Requests", "requests"),
            ("zope.interface", "zope-interface"),
            ("Foo__Bar--baz..Qux", "foo-bar-baz-qux"),
            ("a-_.b", "a-b"),
        ];
        for (input, expected) in cases {
            assert_eq!(normalize_package_name(input), expected, "{input}");
        }
    }

    #[test]
    fn package_key_table() {
        assert_eq!(package_key("Requests[socks]>=2"), Ok("requests".into()));
        assert_eq!(package_key("  numpy ; python_version>'3'"), Ok("numpy".into()));
        assert_eq!(package_key("pkg @ https://x/y.whl"), Ok("pkg".into()));
        assert_eq!(package_key("Zope_Interface==5"), Ok("zope-interface".into()));
        assert_eq!(package_key(">=2"), Err(Error::InvalidDependency { requirement: ">=2".into() }));
        assert_eq!(package_key(""), Err(Error::InvalidDependency { requirement: String::new() }));
    }
}
