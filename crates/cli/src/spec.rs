//! One resolution of a spec for `run` and `session start`, so they cannot drift apart: the
//! layers (command line > inline table > defaults) with the workspace and the caller's real
//! home, the missing-mount rule, `--env NAME` filled from the host with the same warnings,
//! and the boundary classification of the mounts as written and with links resolved (a
//! `./data` that points at `~/.ssh` is caught either way), refused with exit 4 unless approved.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anstream::{eprintln, println};
use anyhow::{Context, Result};
use sandbox_core::{Crossing, Layer, MissingMount, Mount, MountMode, ResolveCtx, RunSpec};

use crate::exit::BOUNDARY as EXIT_BOUNDARY;
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
}

impl Resolved {
    /// The boundary crossings of the spec (see the module header).
    pub(crate) fn crossings(&self) -> Vec<Crossing> {
        let Some((given, real)) = &self.home else { return crossings(&self.spec, None) };
        let mut all = crossings(&self.spec, Some(given));
        for c in crossings(&self.spec, Some(real)) {
            if !all.iter().any(|a| a.mount.path == c.mount.path && a.kind == c.kind) {
                all.push(c);
            }
        }
        all
    }
}

/// Resolves the layers in the current directory (the workspace).
pub(crate) fn resolve(inline: &Layer, cli: &Layer) -> Result<Resolved> {
    let workspace = std::env::current_dir()
        .and_then(|d| d.canonicalize())
        .context("cannot determine the current directory (the workspace)")?;
    let given = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    let home = given.map(|h| {
        let real = h.canonicalize().unwrap_or_else(|_| h.clone());
        (h, real)
    });
    let ctx = ResolveCtx { workspace, home: home.as_ref().map(|(_, real)| real.clone()) };
    let mut spec = sandbox_core::resolve(&Layer::default(), inline, cli, &ctx)?;
    check_missing_mounts(&spec.mounts)?;
    fill_env_from_host(&mut spec);
    Ok(Resolved { spec, home })
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
fn crossings(spec: &RunSpec, home: Option<&Path>) -> Vec<Crossing> {
    let mut all = sandbox_core::classify(spec, home);
    let mut real = spec.clone();
    for m in &mut real.mounts {
        if let Ok(p) = m.path.canonicalize() {
            m.path = p;
        }
    }
    let real_home = home.and_then(|h| h.canonicalize().ok());
    for c in sandbox_core::classify(&real, real_home.as_deref().or(home)) {
        if !all.iter().any(|a| a.mount.path == c.mount.path && a.kind == c.kind) {
            all.push(c);
        }
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
        let items: Vec<_> = crossings
            .iter()
            .map(|c| {
                serde_json::json!({
                    "path": c.mount.path.display().to_string(),
                    "mode": if c.mount.mode == MountMode::ReadOnly { "ro" } else { "rw" },
                    "kind": c.kind.as_str(),
                    "reason": c.reason,
                })
            })
            .collect();
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
