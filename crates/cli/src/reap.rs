//! `python-sandbox reap`: run the reaper now on every engine (through the registry: expired and
//! orphaned containers and sessions), prune the prepared environments nobody used for longer
//! than `--env-max-age` and, while the cache is over its cap (`--max-size`, `[cache] max-size`),
//! the least recently used environments and packages, and give back the directories that a root caller's killed runs (or
//! expired sessions) left lent to the sandbox user (`"kind": "acl"`).

use std::process::ExitCode;
use std::time::Duration;

use crate::args::ReapArgs;
use crate::registry::{self, Reaped};
use anstream::println;
use anyhow::Result;

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
    let max_bytes = match &args.max_size {
        Some(text) => sandbox_core::parse_size(text).map_err(|_| {
            crate::ui::hinted(
                format!("invalid --max-size `{text}`"),
                "use `5GiB`, `500m`, `0` (everything not in use), or a number of bytes",
            )
        })?,
        None => registry::cache_max_bytes(crate::config::user()?),
    };
    let request = registry::Reap {
        dry_run: args.dry_run,
        env_max_age: max_age,
        max_bytes,
        namespace: args.namespace.clone(),
    };
    let mut items = Vec::new();
    // The grants' state is shared by the container engines: each directory is reported once.
    let mut lent_seen = std::collections::BTreeSet::new();
    for (engine, reaped) in registry::reap(args.engine.as_deref(), &request)? {
        let dry = args.dry_run;
        let err = |e: &Option<String>| e.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
        let item = match reaped {
            Reaped::Sandbox { name, sandbox, kind, reason, removed, error } => {
                if !args.json {
                    let verb = verb(dry, removed, None);
                    let what = if kind == "pool" { "pool member " } else { "" };
                    println!("{verb} {engine} {what}{name} ({reason}){}", err(&error));
                }
                serde_json::json!({
                    "engine": engine,
                    "container": name,
                    "sandbox": sandbox,
                    "kind": kind,
                    "reason": reason,
                    "removed": removed,
                    "error": error,
                })
            }
            Reaped::Lent { path, restored, error } => {
                if !lent_seen.insert(path.clone()) {
                    continue;
                }
                if !args.json {
                    println!(
                        "{} the ACL and mode of {path} (lent to the sandbox user by a run or session \
                         that did not end){}",
                        acl_verb(dry, restored, error.as_deref()),
                        err(&error)
                    );
                }
                serde_json::json!({
                    "engine": engine,
                    "kind": "acl",
                    "path": path,
                    "restored": restored,
                    "error": error,
                })
            }
            Reaped::Environment { kind, name, reason, removed, error } => {
                if !args.json {
                    let verb = verb(dry, removed, error.as_deref());
                    println!("{verb} {engine} {kind} {name} ({reason}){}", err(&error));
                }
                serde_json::json!({
                    "engine": engine,
                    "kind": kind,
                    "environment": name,
                    "reason": reason,
                    "removed": removed,
                    "error": error,
                })
            }
        };
        items.push(item);
    }
    if args.json {
        println!("{}", serde_json::Value::Array(items));
    }
    Ok(ExitCode::SUCCESS)
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
