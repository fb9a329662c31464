//! `python-sandbox reap`: run the reaper now on docker and podman (one label-filtered list call
//! per engine, then removal of expired and orphaned containers), and prune the prepared
//! environments (docker/podman volumes, bwrap directories) nobody used for longer than
//! `--env-max-age`, and give back the directories that a root caller's killed runs (or expired
//! sessions) left lent to the sandbox user (`"kind": "acl"`).

use std::process::ExitCode;
use std::time::Duration;

use anstream::println;
use anyhow::Result;
use engine_oci::{Flavor, OciConfig, OciEngine};

use crate::args::{OciChoice, ReapArgs};

/// `0` (every environment not in use) or a duration as `session start --ttl` takes it.
fn parse_max_age(text: &str) -> Option<Duration> {
    if text.trim() == "0" {
        return Some(Duration::ZERO);
    }
    crate::session::parse_ttl(text)
}

/// What the text output says about one item.
fn verb(dry_run: bool, removed: bool, error: Option<&str>) -> &'static str {
    match (dry_run, removed, error) {
        (true, _, _) => "would remove",
        (false, true, _) => "removed",
        (false, false, Some(e)) if e.starts_with("in use") => "kept",
        (false, false, _) => "could not remove",
    }
}

/// What the text output says about a lent directory.
fn acl_verb(dry_run: bool, restored: bool, error: Option<&str>) -> &'static str {
    match verb(dry_run, restored, error) {
        "would remove" => "would restore",
        "removed" => "restored",
        "kept" => "kept",
        _ => "could not restore",
    }
}

pub(crate) fn run(args: ReapArgs) -> Result<ExitCode> {
    let max_age = parse_max_age(&args.env_max_age).ok_or_else(|| {
        crate::ui::hinted(
            format!("invalid --env-max-age `{}`", args.env_max_age),
            "use `30d`, `12h`, `90m`, `45s`, or `0` for every environment not in use",
        )
    })?;
    let flavors: Vec<Flavor> = match args.engine {
        Some(OciChoice::Docker) => vec![Flavor::Docker],
        Some(OciChoice::Podman) => vec![Flavor::Podman],
        None => {
            let detection = engine_detect::detect();
            [
                (engine_detect::EngineName::Docker, Flavor::Docker),
                (engine_detect::EngineName::Podman, Flavor::Podman),
            ]
            .into_iter()
            .filter(|(name, _)| {
                detection.probe(*name).is_some_and(|p| {
                    p.available || p.state == engine_detect::ProbeState::InstalledNoSocket
                })
            })
            .map(|(_, f)| f)
            .collect()
        }
    };
    let mut items = Vec::new();
    // The grants' state is shared by both engines: each directory is reported once.
    let mut grants_seen = std::collections::BTreeSet::new();
    for flavor in flavors {
        let mut config = OciConfig::from_env(flavor);
        // The sweep below is the one that reports, and reaping needs no image.
        config.sweep_on_start = false;
        config.image = String::new();
        let engine = match OciEngine::new(config) {
            Ok(engine) => engine,
            Err(e) if args.engine.is_none() => {
                crate::ui::warn(&format!(
                    "{}: {}",
                    flavor.as_str(),
                    e.to_string().lines().next().unwrap_or_default()
                ));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        for swept in engine.reap(args.dry_run)? {
            if !args.json {
                println!(
                    "{} {} {} ({}){}",
                    verb(args.dry_run, swept.removed, None),
                    flavor.as_str(),
                    swept.container,
                    swept.reason,
                    swept.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default()
                );
            }
            items.push(serde_json::json!({
                "engine": flavor.as_str(),
                "container": swept.container,
                "sandbox": swept.sandbox,
                "kind": swept.kind,
                "reason": swept.reason,
                "removed": swept.removed,
                "error": swept.error,
            }));
        }
        for left in engine.reap_grants(args.dry_run)? {
            if !grants_seen.insert(left.path.clone()) {
                continue;
            }
            let path = left.path.display().to_string();
            if !args.json {
                println!(
                    "{} the ACL and mode of {path} (lent to the sandbox user by a run or session \
                     that did not end){}",
                    acl_verb(args.dry_run, left.restored, left.error.as_deref()),
                    left.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default()
                );
            }
            items.push(serde_json::json!({
                "engine": flavor.as_str(),
                "kind": "acl",
                "path": path,
                "restored": left.restored,
                "error": left.error,
            }));
        }
        for pruned in engine.prune_envs(max_age, args.dry_run)? {
            if !args.json {
                println!(
                    "{} {} environment {} ({}){}",
                    verb(args.dry_run, pruned.removed, pruned.error.as_deref()),
                    flavor.as_str(),
                    pruned.volume,
                    pruned.reason,
                    pruned.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default()
                );
            }
            items.push(serde_json::json!({
                "engine": flavor.as_str(),
                "kind": "environment",
                "environment": pruned.volume,
                "reason": pruned.reason,
                "removed": pruned.removed,
                "error": pruned.error,
            }));
        }
    }
    // bwrap keeps its environments in our cache: nothing to connect to, so only `--engine`
    // naming a container engine skips it.
    if args.engine.is_none() {
        prune_bwrap(&args, max_age, &mut items);
    }
    if args.json {
        println!("{}", serde_json::Value::Array(items));
    }
    Ok(ExitCode::SUCCESS)
}

fn prune_bwrap(args: &ReapArgs, max_age: Duration, items: &mut Vec<serde_json::Value>) {
    let pruned = engine_bwrap::BwrapConfig::from_env()
        .and_then(|config| engine_bwrap::prune_envs(&config.cache_dir, max_age, args.dry_run));
    let pruned = match pruned {
        Ok(pruned) => pruned,
        Err(e) => {
            let first = e.to_string().lines().next().unwrap_or_default().to_owned();
            crate::ui::warn(&format!("bwrap: {first}"));
            return;
        }
    };
    for env in pruned {
        let dir = env.dir.display().to_string();
        if !args.json {
            println!(
                "{} bwrap environment {dir} ({}){}",
                verb(args.dry_run, env.removed, env.error.as_deref()),
                env.reason,
                env.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default()
            );
        }
        items.push(serde_json::json!({
            "engine": "bwrap",
            "kind": "environment",
            "environment": dir,
            "reason": env.reason,
            "removed": env.removed,
            "error": env.error,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_ages() {
        assert_eq!(parse_max_age("0"), Some(Duration::ZERO));
        assert_eq!(parse_max_age("30d"), Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_max_age("12h"), Some(Duration::from_secs(12 * 3600)));
        assert_eq!(parse_max_age("0d"), None);
        assert_eq!(parse_max_age("soon"), None);
    }

    #[test]
    fn verbs() {
        assert_eq!(verb(true, false, Some("in use (a container references it)")), "would remove");
        assert_eq!(verb(false, true, None), "removed");
        assert_eq!(verb(false, false, Some("in use (a run or prepare holds its lock)")), "kept");
        assert_eq!(verb(false, false, Some("connection refused")), "could not remove");
        assert_eq!(acl_verb(true, false, None), "would restore");
        assert_eq!(acl_verb(false, true, None), "restored");
        assert_eq!(acl_verb(false, false, Some("in use (a session holds it)")), "kept");
        assert_eq!(acl_verb(false, false, Some("cannot restore")), "could not restore");
    }
}
