//! `python-sandbox reap`: run the reaper now on docker and podman (one label-filtered list call
//! per engine, then removal of expired and orphaned containers).

use std::process::ExitCode;

use anstream::println;
use anyhow::Result;
use engine_oci::{Flavor, OciConfig, OciEngine};

use crate::args::{OciChoice, ReapArgs};

pub(crate) fn run(args: ReapArgs) -> Result<ExitCode> {
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
                let verb = if args.dry_run {
                    "would remove"
                } else if swept.removed {
                    "removed"
                } else {
                    "could not remove"
                };
                println!(
                    "{verb} {} {} ({}){}",
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
    }
    if args.json {
        println!("{}", serde_json::Value::Array(items));
    }
    Ok(ExitCode::SUCCESS)
}
