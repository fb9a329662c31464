//! Which engines to run: `python-sandbox detect --json`, narrowed by `CONFORMANCE_ENGINES`.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Engine {
    pub(crate) name: String,
    pub(crate) available: bool,
    pub(crate) reason: String,
    /// What holds `--memory`, `--cpus`, `--pids-limit` (`detect --json`'s `limits`): a
    /// mechanism name, or `None` where the engine refuses the flag.
    pub(crate) limits: [Option<String>; 3],
}

/// The limit names of [`Engine::limits`], in order.
pub(crate) const LIMITS: [&str; 3] = ["memory", "cpus", "pids"];

/// The engines `detect` listed, for expectations that depend on how an engine holds limits.
static DETECTED: std::sync::OnceLock<Vec<Engine>> = std::sync::OnceLock::new();

pub(crate) fn remember(engines: &[Engine]) {
    let _ = DETECTED.set(engines.to_vec());
}

/// The mechanism that holds `limit` (one of [`LIMITS`]) on `engine`, as `detect` says.
pub(crate) fn limit_mechanism(engine: &str, limit: &str) -> Option<String> {
    let i = LIMITS.iter().position(|l| *l == limit)?;
    DETECTED.get()?.iter().find(|e| e.name == engine)?.limits[i].clone()
}

/// Parses `{"selected": NAME|null, "engines": [{"name", "available", "reason"}...]}` strictly: the
/// suite is also the contract test of `detect --json`.
pub(crate) fn parse_detect(json: &str) -> Result<Vec<Engine>, String> {
    let v: Value = serde_json::from_str(json.trim())
        .map_err(|e| format!("`detect --json` printed no single JSON object ({e}): {json:?}"))?;
    let selected = v.get("selected").ok_or("`detect --json` has no `selected`")?;
    if !(selected.is_null() || selected.is_string()) {
        return Err(format!("`detect --json`: `selected` is {selected}, not a name or null"));
    }
    let list = v
        .get("engines")
        .and_then(Value::as_array)
        .ok_or("`detect --json` has no `engines` array")?;
    let mut engines = Vec::new();
    for e in list {
        let name = e
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("engine without a name: {e}"))?;
        let available = e
            .get("available")
            .and_then(Value::as_bool)
            .ok_or_else(|| format!("engine {name}: no boolean `available`"))?;
        let reason = match e.get("reason") {
            Some(Value::String(r)) => r.clone(),
            Some(Value::Null) | None if available => String::new(),
            _ => return Err(format!("engine {name} is unavailable without a `reason` string")),
        };
        let limits_obj = e
            .get("limits")
            .and_then(Value::as_object)
            .ok_or_else(|| format!("engine {name}: no `limits` object"))?;
        let mut limits: [Option<String>; 3] = Default::default();
        for (slot, key) in limits.iter_mut().zip(LIMITS) {
            *slot = match limits_obj.get(key) {
                Some(Value::String(m)) => Some(m.clone()),
                Some(Value::Null) => None,
                other => {
                    return Err(format!(
                        "engine {name}: `limits.{key}` is {other:?}, not a name or null"
                    ));
                }
            };
        }
        engines.push(Engine { name: name.to_string(), available, reason, limits });
    }
    if let Some(sel) = selected.as_str() {
        if !engines.iter().any(|e| e.name == sel && e.available) {
            return Err(format!(
                "`detect --json` selected `{sel}`, which it does not list as available"
            ));
        }
    } else if engines.iter().any(|e| e.available) {
        return Err("`detect --json` selected nothing although an engine is available".into());
    }
    Ok(engines)
}

/// Engines `auto` never picks (a cluster): without `CONFORMANCE_ENGINES` they join the matrix
/// only where `detect` finds them available, so a laptop's full run has no column of skips
/// for a cluster nobody configured; named in `CONFORMANCE_ENGINES` they always do (and an
/// unavailable one prints its `SKIPPED` line and runs the unavailable-engine case).
pub(crate) const OPT_IN: &[&str] = &["k8s"];

/// `requested` is the comma list from `CONFORMANCE_ENGINES`; without it, every detected engine
/// (the unavailable ones then show up as skipped) but the [`OPT_IN`] ones that are unavailable.
pub(crate) fn select(detected: &[Engine], requested: Option<&str>) -> Result<Vec<Engine>, String> {
    let Some(requested) = requested.map(str::trim).filter(|r| !r.is_empty()) else {
        return Ok(detected
            .iter()
            .filter(|e| e.available || !OPT_IN.contains(&e.name.as_str()))
            .cloned()
            .collect());
    };
    let mut out: Vec<Engine> = Vec::new();
    for name in requested.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let Some(e) = detected.iter().find(|e| e.name == name) else {
            let known: Vec<&str> = detected.iter().map(|e| e.name.as_str()).collect();
            return Err(format!(
                "unknown engine `{name}` in CONFORMANCE_ENGINES (detect knows: {})",
                known.join(", ")
            ));
        };
        if !out.contains(e) {
            out.push(e.clone());
        }
    }
    Ok(out)
}

/// The `SKIPPED: NAME: ...` line of an unavailable engine (its first line; the rest of the
/// reason follows indented): a cluster that does not answer reads `no cluster (...)`, as the
/// end-to-end tier says.
pub(crate) fn unavailable_line(engine: &Engine) -> String {
    let first = engine.reason.lines().next().unwrap_or("unavailable");
    if OPT_IN.contains(&engine.name.as_str()) {
        format!("SKIPPED: {}: no cluster ({first})", engine.name)
    } else {
        format!("SKIPPED: {}: {first}", engine.name)
    }
}

/// What the matrix knows of a case before running it (the fields of `harness::Case` that
/// decide where it runs), so the decision stays pure.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Applies {
    pub(crate) only_on: Option<&'static [&'static str]>,
    pub(crate) unavailable_only: bool,
    pub(crate) skip_on: &'static [(&'static str, &'static str)],
}

/// Why a case does not run on `engine`, or `None` when it runs: not one of its engines, the
/// engine-specific reason it cannot apply there, or the engine's (un)availability.
pub(crate) fn skip_reason(case: Applies, engine: &Engine) -> Option<String> {
    if let Some(only) = case.only_on.filter(|only| !only.contains(&engine.name.as_str())) {
        return Some(format!("only for {}", only.join(", ")));
    }
    if let Some((_, why)) = case.skip_on.iter().find(|(name, _)| *name == engine.name) {
        return Some(format!("{}: {why}", engine.name));
    }
    match (engine.available, case.unavailable_only) {
        (true, false) | (false, true) => None,
        (true, true) => Some("only for an unavailable engine".to_owned()),
        (false, false) => Some(format!("unavailable: {}", engine.reason)),
    }
}

/// Whether the cluster the k8s engine runs on enforces NetworkPolicy, as the CLI finds out
/// (its probe, `engine_k8s::netoff`): one `run --engine k8s --net off` of an empty script,
/// once per suite. `true` unless the CLI refused for exactly that reason, so any other
/// failure shows in the cases themselves.
pub(crate) fn k8s_enforces_network_policy() -> bool {
    static ENFORCED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENFORCED.get_or_init(|| {
        let Ok(bin) = crate::cli::locate() else { return true };
        let Ok(dir) = tempfile::tempdir() else { return true };
        let script = dir.path().join("probe.py");
        if std::fs::write(&script, "print('ok')\n").is_err() {
            return true;
        }
        let out = std::process::Command::new(bin)
            .args(["run", "--engine", "k8s", "--net", "off"])
            .arg(&script)
            .current_dir(dir.path())
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .output();
        let refused = out.is_ok_and(|o| {
            !o.status.success()
                && String::from_utf8_lossy(&o.stderr).contains("does not enforce NetworkPolicy")
        });
        eprintln!("k8s: NetworkPolicy {}", if refused { "not enforced" } else { "enforced" });
        !refused
    })
}
