//! `python-sandbox detect` and `python-sandbox suggest`: which engines work here, and what to do
//! when none does. The engines and their order are the registry's; the probes and the advice
//! are `engine-detect`'s.

use std::process::ExitCode;

use anstream::println;
use anyhow::Result;
use engine_detect::Detection;

use crate::ui;

pub(crate) fn detect(json: bool) -> Result<ExitCode> {
    let detection = crate::registry::detection();
    let cache = crate::registry::cache_report();
    if json {
        let mut value = serde_json::to_value(&detection)?;
        if let Some(object) = value.as_object_mut() {
            object.insert("cache".to_owned(), cache_json(cache.as_ref()));
        }
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print_table(&detection);
        if let Some(cache) = &cache {
            println!(
                "cache: {} of {} ({}; `python-sandbox reap` trims it)",
                reaper::human_bytes(cache.bytes),
                reaper::human_bytes(cache.max_bytes),
                cache.dir.display()
            );
        }
    }
    Ok(exit_for(&detection))
}

/// `"cache"` of `detect --json`: where, how large (as last measured: `measured`, unix seconds)
/// and its cap, bytes.
fn cache_json(cache: Option<&crate::registry::CacheReport>) -> serde_json::Value {
    match cache {
        Some(cache) => serde_json::json!({
            "dir": cache.dir.display().to_string(),
            "bytes": cache.bytes,
            "measured": cache.measured,
            "max_bytes": cache.max_bytes,
        }),
        None => serde_json::Value::Null,
    }
}

pub(crate) fn suggest() -> Result<ExitCode> {
    let detection = crate::registry::detection();
    let os = engine_detect::OsInfo::detect();
    println!("{}", engine_detect::suggest(&os, &detection));
    Ok(exit_for(&detection))
}

fn exit_for(detection: &Detection) -> ExitCode {
    if detection.selected.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::exit::NO_ENGINE)
    }
}

fn print_table(detection: &Detection) {
    for probe in &detection.engines {
        let (style, mark) = match probe.state {
            _ if probe.available => (ui::NOTE, "available"),
            engine_detect::ProbeState::NotConfigured => (ui::BOLD, "not configured"),
            _ => (ui::WARNING, "unavailable"),
        };
        let mut lines = probe.reason.lines();
        println!(
            "{:<7}{style}{mark:<14}{style:#} {}",
            probe.name.as_str(),
            lines.next().unwrap_or_default()
        );
        for rest in lines {
            println!("{:<22}{rest}", "");
        }
        // What holds `--memory`, `--cpus` and `--pids-limit` here; `none` is refused if asked.
        // Then the defaults a run gets without them, and what holds each here.
        if probe.available {
            println!("{:<22}limits: {}", "", probe.limits.summary());
            println!("{:<22}defaults: {}", "", probe.defaults.summary());
        }
    }
    println!(
        "defaults apply where no flag or inline key sets a limit; `--memory none` (or `--cpus`, \
         `--pids-limit`, or the inline key) lifts one"
    );
    match detection.selected {
        Some(name) => println!("selected: {}{name}{:#}", ui::BOLD, ui::BOLD),
        None => {
            println!("selected: none");
            ui::print_hint("run `python-sandbox suggest` for how to get one on this machine");
        }
    }
}
