//! One resolution of a spec for `run`, `session start` and `session run`, so they cannot drift
//! apart: the script's inline layer and the `--timeout` flag read once; the layers (command
//! line > inline table > defaults) with the workspace and the caller's real home; the
//! missing-mount rule; `--env NAME` filled from the host with the same warnings; and the
//! boundary classification of the mounts as written and with links resolved (a `./data` that
//! points at `~/.ssh` is caught either way), refused with exit 4 unless approved; the script
//! file classified the same way (the file read, its link resolved); and, for an agent
//! ([`Asker::Agent`], the MCP server), the variables copied from the host by name. Also the
//! script's engine keys ([`EngineKeys`]: `image`, `runtime-class`), which are not part of a
//! `RunSpec` but of how an engine is opened, and so go to the registry with where they were
//! written.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anstream::{eprintln, println};
use anyhow::{Context, Result};
use pep723_meta::{LimitSetting, Metadata};
use sandbox_core::{
    Asker, Crossing, EnvCrossing, EnvVar, Layer, LayerMount, MissingMount, Mount, MountMode, Net,
    Publish, ResolveCtx, RunSpec,
};

use crate::exit::BOUNDARY as EXIT_BOUNDARY;
use crate::script::Script;
use crate::ui;

/// What a refused crossing would have started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Subject {
    Run,
    Session,
}

/// A resolved spec and the home it was classified against.
pub(crate) struct Resolved {
    pub(crate) spec: RunSpec,
    /// `$HOME` as given, and its real path.
    home: Option<(PathBuf, PathBuf)>,
    /// The variables the layers copy from the host by name (`--env NAME`, `env = ["NAME"]`).
    copied: Vec<String>,
}

impl Resolved {
    /// The boundary crossings of the spec's mounts and workspace, as the user asked.
    pub(crate) fn crossings(&self) -> Vec<Crossing> {
        self.crossings_as(Asker::User)
    }

    /// The boundary crossings of the spec's mounts and workspace for `asker` (see the module
    /// header).
    pub(crate) fn crossings_as(&self, asker: Asker) -> Vec<Crossing> {
        let mut all = Vec::new();
        for home in homes(self.home.as_ref()) {
            for c in crossings(&self.spec, home, asker) {
                push_new(&mut all, c);
            }
        }
        all
    }

    /// The variables copied from the host that `asker` needs approval for.
    pub(crate) fn env_crossings(&self, asker: Asker) -> Vec<EnvCrossing> {
        sandbox_core::classify_copied_env(self.copied.iter().map(String::as_str), asker)
    }

    /// The crossings of running `script` in this spec's workspace (see [`script_crossings`]).
    pub(crate) fn script_crossings(&self, script: &Script, asker: Asker) -> Vec<Crossing> {
        script_crossings(script, &self.spec.workspace, self.home.as_ref(), asker)
    }
}

/// `$HOME` as given and real, or unknown: each is classified against.
pub(crate) fn homes(home: Option<&(PathBuf, PathBuf)>) -> Vec<Option<&Path>> {
    match home {
        Some((given, real)) => vec![Some(given.as_path()), Some(real.as_path())],
        None => vec![None],
    }
}

/// Adds `c` unless a crossing of the same path and kind is there.
pub(crate) fn push_new(all: &mut Vec<Crossing>, c: Crossing) {
    if !all.iter().any(|a| a.mount.path == c.mount.path && a.kind == c.kind) {
        all.push(c);
    }
}

/// The current directory, real: the workspace.
pub(crate) fn workspace() -> Result<PathBuf> {
    std::env::current_dir()
        .and_then(|d| d.canonicalize())
        .context("cannot determine the current directory (the workspace)")
}

/// `$HOME` as given (when absolute), and its real path.
pub(crate) fn home() -> Option<(PathBuf, PathBuf)> {
    let given = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    given.map(|h| {
        let real = h.canonicalize().unwrap_or_else(|_| h.clone());
        (h, real)
    })
}

/// Resolves the layers in the current directory (the workspace).
pub(crate) fn resolve(inline: &Layer, cli: &Layer) -> Result<Resolved> {
    let workspace = workspace()?;
    let home = home();
    let ctx = ResolveCtx { workspace, home: home.as_ref().map(|(_, real)| real.clone()) };
    let mut spec = sandbox_core::resolve(&Layer::default(), inline, cli, &ctx)?;
    check_missing_mounts(&spec.mounts)?;
    let copied = spec.env.iter().filter(|v| v.value.is_none()).map(|v| v.name.clone()).collect();
    fill_env_from_host(&mut spec);
    Ok(Resolved { spec, home, copied })
}

/// The crossings of running the host file `script` in `workspace` for `asker`: the file as
/// named (`~` expanded) and as read (its real path), against `$HOME` as given and real. That
/// it lies outside the workspace is judged on the real paths only, so a workspace reached
/// through a link is no crossing. A private copy (stdin, a pipe, inline code) crosses nothing.
pub(crate) fn script_crossings(
    script: &Script,
    workspace: &Path,
    home: Option<&(PathBuf, PathBuf)>,
    asker: Asker,
) -> Vec<Crossing> {
    let Some(real) = &script.real else { return Vec::new() };
    let mut all = Vec::new();
    for home in homes(home) {
        let named = sandbox_core::classify_script(&script.path, workspace, home, asker)
            .filter(|c| c.kind != sandbox_core::CrossingKind::OutsideWorkspace);
        let read = sandbox_core::classify_script(real, workspace, home, asker);
        for c in named.into_iter().chain(read) {
            push_new(&mut all, c);
        }
    }
    all
}

/// Every missing mount path is checked against `sandbox_core::missing_mount` before an engine
/// starts, so that a missing read-only path stops the run before any read-write one is created.
pub(crate) fn check_missing_mounts(mounts: &[Mount]) -> Result<()> {
    for m in mounts {
        let missing = std::fs::symlink_metadata(&m.path)
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
        if missing && sandbox_core::missing_mount(m.mode) == MissingMount::Refuse {
            return Err(sandbox_core::Error::MissingMount { path: m.path.clone() }.into());
        }
    }
    Ok(())
}

/// `--env NAME` and `env = ["NAME"]` copy the host's value; a name the host lacks is dropped with
/// a warning rather than passed empty.
pub(crate) fn fill_env_from_host(spec: &mut RunSpec) {
    spec.env.retain_mut(|var| {
        if var.value.is_some() {
            return true;
        }
        match std::env::var(&var.name) {
            Ok(value) => {
                var.value = Some(value);
                true
            }
            Err(_) => {
                ui::warn(&format!(
                    "`{}` is not set (or not utf-8) on the host; not passed to the script",
                    var.name
                ));
                false
            }
        }
    });
}

/// Crossings of the spec as written and of its mounts with symlinks resolved, against `home`.
/// What only `asker` makes a crossing (a path outside the workspace) is judged on the real
/// paths, so a mount named through a link to the workspace is no crossing.
fn crossings(spec: &RunSpec, home: Option<&Path>, asker: Asker) -> Vec<Crossing> {
    let mut all = sandbox_core::classify(spec, home);
    let mut real = spec.clone();
    for m in &mut real.mounts {
        if let Ok(p) = m.path.canonicalize() {
            m.path = p;
        }
    }
    let real_home = home.and_then(|h| h.canonicalize().ok());
    for c in sandbox_core::classify_as(&real, real_home.as_deref().or(home), asker) {
        push_new(&mut all, c);
    }
    all
}

/// Refuses unapproved crossings (exit 4): the same message, hint and JSON for runs and sessions.
pub(crate) fn refuse(crossings: &[Crossing], subject: Subject, json: bool) -> ExitCode {
    let (what, nothing) = match subject {
        Subject::Run => ("run", "nothing was run"),
        Subject::Session => ("session", "nothing was started"),
    };
    eprintln!(
        "{}error{:#}: this {what} crosses a boundary and needs your approval:",
        ui::ERROR,
        ui::ERROR
    );
    for c in crossings {
        eprintln!("  - {c}");
    }
    ui::print_hint(&format!("if you mean it, run again with `--approve`; {nothing}"));
    if json {
        let items = crossings_json(crossings);
        println!(
            "{}",
            serde_json::json!({
                "engine": null,
                "exit_code": EXIT_BOUNDARY,
                "error": format!("this {what} crosses a boundary and needs your approval"),
                "crossings": items,
            })
        );
    }
    ExitCode::from(EXIT_BOUNDARY)
}

/// Pure: the copied variables as the MCP server names them among its crossings.
pub(crate) fn env_crossings_json(crossings: &[EnvCrossing]) -> Vec<serde_json::Value> {
    crossings
        .iter()
        .map(|c| serde_json::json!({ "variable": c.name, "kind": c.kind(), "reason": c.reason }))
        .collect()
}

/// Pure: the crossings as `--json` and the MCP server name them.
pub(crate) fn crossings_json(crossings: &[Crossing]) -> Vec<serde_json::Value> {
    crossings
        .iter()
        .map(|c| {
            serde_json::json!({
                "path": c.mount.path.display().to_string(),
                "mode": if c.mount.mode == MountMode::ReadOnly { "ro" } else { "rw" },
                "kind": c.kind.as_str(),
                "reason": c.reason,
            })
        })
        .collect()
}

/// The script's own layer: its `dependencies` and `requires-python` plus `[tool.python-sandbox]`.
pub(crate) fn inline_layer(meta: &Metadata) -> Layer {
    let mut layer = Layer {
        dependencies: meta.dependencies.iter().map(|d| d.value.clone()).collect(),
        requires_python: meta.requires_python.as_ref().map(|r| r.value.clone()),
        ..Layer::default()
    };
    if let Some(sb) = &meta.sandbox {
        layer.dependencies.extend(sb.dependencies.iter().map(|d| d.value.clone()));
        // A volume claim is no host path: `EngineKeys::claims` carries it to the registry.
        layer.mounts = sb
            .mounts
            .iter()
            .filter(|m| !crate::registry::is_claim_mount(&m.value.to_string()))
            .map(|m| LayerMount {
                path: PathBuf::from(&m.value.path),
                mode: m.value.mode.map(|mode| match mode {
                    pep723_meta::MountMode::Ro => MountMode::ReadOnly,
                    pep723_meta::MountMode::Rw => MountMode::ReadWrite,
                }),
            })
            .collect();
        layer.net = sb.net.as_ref().map(|n| match n.value {
            pep723_meta::Net::On => Net::On,
            pep723_meta::Net::Off => Net::Off,
        });
        // Validated entry by entry by pep723-meta with the same parser, so this cannot fail
        // on a script that passed validation; if it did, the run gets no network rather than
        // more of it.
        if !sb.net_allow.is_empty() {
            match sandbox_core::Allow::parse(sb.net_allow.iter().map(|p| p.value.as_str())) {
                Ok(allow) => layer.allow = Some(allow),
                Err(_) => layer.net = Some(Net::Off),
            }
        }
        layer.publish = sb.publish.iter().map(|p| Publish::same(p.value)).collect();
        layer.env = sb
            .env
            .iter()
            .map(|e| EnvVar { name: e.value.name.clone(), value: e.value.value.clone() })
            .collect();
        layer.timeout = sb.timeout.as_ref().map(|t| Duration::from_secs(t.value));
        layer.tmpfs_size = sb.tmpfs_size.as_ref().map(|t| t.value);
        // Validated by pep723-meta with the flags' own checks, so these cannot fail.
        layer.limits = sandbox_core::LayerLimits {
            memory: sb.memory.as_ref().map(|m| m.value),
            cpus: sb.cpu_millis.as_ref().and_then(|c| match c.value {
                LimitSetting::Set(millis) => {
                    sandbox_core::Cpus::from_millis(millis).ok().map(LimitSetting::Set)
                }
                LimitSetting::Off => Some(LimitSetting::Off),
            }),
            pids: sb.pids_limit.as_ref().map(|p| p.value),
        };
    }
    layer
}

/// One engine key of the script's table and where it was written (`FILE:LINE:COL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InlineKey {
    pub(crate) value: String,
    pub(crate) at: String,
}

/// What the script needs from where it runs, beyond the `RunSpec`: the inline `image` and
/// `runtime-class`, and the `mounts` entries that name a volume claim (`pvc:NAME:/path[:ro]`).
/// They sit between the flags and the user config (flags > inline table > user config >
/// defaults); which engines honour them is the registry's business.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EngineKeys {
    pub(crate) image: Option<InlineKey>,
    pub(crate) runtime_class: Option<InlineKey>,
    /// The claim mounts, as written (with their mode), in order.
    pub(crate) claims: Vec<InlineKey>,
}

impl EngineKeys {
    /// Pure: the keys of `meta`, located in `text` (the script `file`).
    pub(crate) fn of(meta: &Metadata, file: &Path, text: &str) -> EngineKeys {
        let Some(sb) = &meta.sandbox else { return EngineKeys::default() };
        let index = pep723_meta::LineIndex::new(text);
        let at = |start: usize| {
            let (line, col) = crate::meta::line_col(&index, text, start);
            format!("{}:{line}:{col}", file.display())
        };
        let located = |s: &pep723_meta::Spanned<String>| InlineKey {
            value: s.value.clone(),
            at: at(s.span.start),
        };
        let claims = sb
            .mounts
            .iter()
            .map(|m| (m.value.to_string(), m.span.start))
            .filter(|(value, _)| crate::registry::is_claim_mount(value))
            .map(|(value, start)| InlineKey { value, at: at(start) })
            .collect();
        EngineKeys {
            image: sb.image.as_ref().map(located),
            runtime_class: sb.runtime_class.as_ref().map(located),
            claims,
        }
    }

    /// The keys of a script parsed for a run (none when it has no metadata).
    pub(crate) fn of_script(
        parsed: &pep723_meta::Parsed,
        script: &crate::script::Script,
    ) -> EngineKeys {
        let text = String::from_utf8_lossy(&script.bytes);
        let of = |m: &Metadata| EngineKeys::of(m, &script.display, &text);
        parsed.metadata.as_ref().map(of).unwrap_or_default()
    }

    /// The keys set, as the script spells them.
    pub(crate) fn set(&self) -> Vec<(&'static str, &InlineKey)> {
        let keys = [("image", &self.image), ("runtime-class", &self.runtime_class)];
        keys.into_iter().filter_map(|(name, key)| Some((name, key.as_ref()?))).collect()
    }

    /// `session run`: a session's sandbox was made at `session start`, so a script's engine
    /// keys come too late. `image` is a warning (the script runs on the session's image);
    /// `runtime-class` is refused, as a tightening the session cannot show it holds, and so is
    /// a claim mount (the session has none).
    pub(crate) fn for_session(&self, id: &str) -> Result<Vec<String>> {
        if let Some(claim) = self.claims.first() {
            return Err(ui::hinted(
                format!(
                    "{}: mount `{}`: a claim is mounted only by `run --engine k8s`, not into session `{id}`, so nothing was run",
                    claim.at, claim.value
                ),
                "run the script with `python-sandbox run --engine k8s`, or copy the data in with `session put`",
            ));
        }
        if let Some(class) = &self.runtime_class {
            return Err(ui::hinted(
                format!(
                    "{}: the script asks for runtime class `{}`, which session `{id}` cannot show it runs under, so nothing was run",
                    class.at, class.value
                ),
                "run it with `python-sandbox run --engine k8s`, where the pod gets that runtime class",
            ));
        }
        Ok(self
            .image
            .iter()
            .map(|image| {
                format!(
                    "{}: the script's `image = \"{}\"` is not used: session `{id}` has the image it was started with",
                    image.at, image.value
                )
            })
            .collect())
    }
}

/// `--timeout SECONDS`, checked; an error quotes the flag as written.
pub(crate) fn timeout_flag(timeout: Option<&str>) -> Result<Option<Duration>> {
    let Some(text) = timeout else { return Ok(None) };
    match text.trim().parse::<f64>() {
        Ok(t) if t.is_finite() && t > 0.0 && t < 1e9 => Ok(Some(Duration::from_secs_f64(t))),
        _ => Err(ui::hinted(
            format!("invalid timeout `{text}`"),
            "give a positive number of seconds below 1000000000, e.g. `30` or `2.5`",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inline engine keys come out with the script's line and column; in a session,
    /// `image` warns and `runtime-class` is refused.
    #[test]
    fn engine_keys_are_located_and_judged_for_a_session() {
        let text = "# /// script\n# [tool.python-sandbox]\n# image = \"registry.example/numpy:2\"\n# runtime-class = \"gvisor\"\n# ///\n";
        let parsed = pep723_meta::parse(text).strict();
        let meta = parsed.metadata.expect("valid");
        let keys = EngineKeys::of(&meta, Path::new("s.py"), text);
        let at = |k: &Option<InlineKey>| k.as_ref().map(|k| (k.value.clone(), k.at.clone()));
        assert_eq!(at(&keys.image), Some(("registry.example/numpy:2".into(), "s.py:3:11".into())));
        assert_eq!(at(&keys.runtime_class), Some(("gvisor".into(), "s.py:4:19".into())));
        let err = keys.for_session("psbx-1").unwrap_err();
        let hint = err.downcast_ref::<ui::Hinted>().map(|h| h.hint.clone()).unwrap_or_default();
        insta::assert_snapshot!(format!("{err}\nhint: {hint}"), @r#"
        s.py:4:19: the script asks for runtime class `gvisor`, which session `psbx-1` cannot show it runs under, so nothing was run
        hint: run it with `python-sandbox run --engine k8s`, where the pod gets that runtime class
        "#);
        let image = EngineKeys { runtime_class: None, ..keys };
        insta::assert_snapshot!(image.for_session("psbx-1").unwrap().join("\n"), @r#"
        s.py:3:11: the script's `image = "registry.example/numpy:2"` is not used: session `psbx-1` has the image it was started with
        "#);
        assert_eq!(EngineKeys::default().for_session("psbx-1").unwrap(), Vec::<String>::new());
    }

    /// An inline claim mount is an engine key, located, and no host mount of the layer; a
    /// session refuses it.
    #[test]
    fn inline_claim_mounts_are_located_and_kept_out_of_the_host_mounts() {
        let text = "# /// script\n# [tool.python-sandbox]\n# mounts = [\"./data:ro\", \"pvc:psbx-data-a:/models:ro\"]\n# ///\n";
        let parsed = pep723_meta::parse(text).strict();
        let meta = parsed.metadata.expect("valid");
        let keys = EngineKeys::of(&meta, Path::new("s.py"), text);
        let claims: Vec<(&str, &str)> =
            keys.claims.iter().map(|k| (k.value.as_str(), k.at.as_str())).collect();
        assert_eq!(claims, [("pvc:psbx-data-a:/models:ro", "s.py:3:26")]);
        let layer = inline_layer(&meta);
        let paths: Vec<&Path> = layer.mounts.iter().map(|m| m.path.as_path()).collect();
        assert_eq!(paths, [Path::new("./data")]);
        let err = keys.for_session("psbx-1").unwrap_err();
        assert!(err.to_string().starts_with("s.py:3:26: mount `pvc:psbx-data-a:/models:ro`: a claim is mounted only by `run --engine k8s`"), "{err}");
    }

    /// The inline `tmpfs-size` reaches the spec, and `--tmpfs-size` beats it.
    #[test]
    fn inline_tmpfs_size_and_the_flag_that_beats_it() {
        let text = "# /// script\n# [tool.python-sandbox]\n# tmpfs-size = \"512m\"\n# ///\n";
        let parsed = pep723_meta::parse(text).strict();
        let inline = parsed.metadata.as_ref().map(inline_layer).unwrap_or_default();
        let ctx = sandbox_core::ResolveCtx { workspace: PathBuf::from("/ws"), home: None };
        let script = Layer { script: Some(PathBuf::from("s.py")), ..Layer::default() };
        let flag = Layer { tmpfs_size: Some(2 << 30), ..script.clone() };
        for (cli, want) in [(script, 512 << 20), (flag, 2 << 30)] {
            let spec = sandbox_core::resolve(&Layer::default(), &inline, &cli, &ctx);
            assert_eq!(spec.map(|s| s.tmpfs_size), Ok(want));
        }
    }
}
