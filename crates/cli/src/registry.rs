//! The one list of engines: their names, the `auto` ladder (the order of [`ENGINES`]), a cheap
//! probe each, how to open one for runs and for sessions, and what `reap` does on each. `run`,
//! `session *` and `reap` dispatch only through this list and the `sandbox_core` seam
//! (`DynEngine`, `DynSessionEngine`, `DynSession`); this is the only CLI module that names a
//! concrete engine. Adding an engine is: a crate, its probe, one entry here.

use std::cell::OnceCell;
use std::time::Duration;

use anyhow::Result;
use sandbox_core::{DynEngine, DynSession, DynSessionEngine, EngineError, ErrorClass};

use crate::ui;

/// What an engine is opened for: the container engines connect differently for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// `run` or `session start`: the image is needed, the startup sweep runs.
    Start,
    /// A command on existing sessions (`session run/exec/stop/list`): no image; the sweep at
    /// most once a minute (the interactive hot path).
    Attach,
    /// `reap`: no image, no sweep (reap's own sweep is the one that reports).
    Maintain,
}

/// What opening an engine may use from the command line.
pub(crate) struct Options<'a> {
    /// `--image` (container engines).
    pub(crate) image: Option<&'a str>,
    pub(crate) purpose: Purpose,
}

impl Options<'_> {
    /// For commands on existing sessions.
    pub(crate) const ATTACH: Options<'static> = Options { image: None, purpose: Purpose::Attach };
    /// For `reap`.
    pub(crate) const MAINTAIN: Options<'static> =
        Options { image: None, purpose: Purpose::Maintain };
}

/// Facts the probes share, computed at most once per command.
#[derive(Default)]
pub(crate) struct Probes {
    detection: OnceCell<engine_detect::Detection>,
}

impl Probes {
    fn detection(&self) -> &engine_detect::Detection {
        self.detection.get_or_init(engine_detect::detect)
    }

    /// Whether `name` answers (or, podman, can be started: a private service).
    fn oci_usable(&self, name: engine_detect::EngineName) -> bool {
        self.detection()
            .probe(name)
            .is_some_and(|p| p.available || p.state == engine_detect::ProbeState::InstalledNoSocket)
    }

    /// `detect`'s probe of `name`, with its reason and limits.
    fn probe(&self, name: engine_detect::EngineName) -> engine_detect::Probe {
        match self.detection().probe(name) {
            Some(probe) => probe.clone(),
            None => engine_detect::Probe {
                name,
                available: false,
                reason: "not probed".to_owned(),
                state: engine_detect::ProbeState::Failed,
                limits: engine_detect::LimitSupport::NONE,
            },
        }
    }
}

/// What `detect` and `suggest` report: every engine's full probe, in ladder order.
pub(crate) fn detection() -> engine_detect::Detection {
    let probes = Probes::default();
    engine_detect::Detection::from_probes(ENGINES.iter().map(|e| (e.probe)(&probes)).collect())
}

/// One engine.
pub(crate) struct Entry {
    /// `--engine NAME`.
    pub(crate) name: &'static str,
    /// Whether `auto` (and commands looking through every engine) should try it here: cheap,
    /// may be memoized.
    usable: fn(&Probes) -> bool,
    /// The full probe `detect` prints (slower than `usable`: it may really try the engine).
    probe: fn(&Probes) -> engine_detect::Probe,
    /// Connects for runs; an [`ErrorClass::Unavailable`] error means it cannot sandbox here.
    open: fn(&Options<'_>) -> Result<Box<dyn DynEngine>>,
    /// The session side, for engines with warm sessions.
    sessions: Option<Sessions>,
    /// What `reap` removes on this engine.
    reap: fn(&Reap) -> Result<Vec<Reaped>>,
}

/// An engine's session side.
struct Sessions {
    /// Connects for sessions.
    open: fn(&Options<'_>) -> Result<Box<dyn DynSessionEngine>>,
    /// Session `id` without connecting (from its host record), for the warm path; `None`
    /// sends the caller to `open`.
    local: fn(&str) -> Option<Box<dyn DynSession>>,
}

/// The engines, in `auto` order.
pub(crate) const ENGINES: &[Entry] = &[
    Entry {
        name: "bwrap",
        // The probe creates real namespaces, so a bwrap that is installed but blocked
        // (AppArmor, a container without user namespaces) is skipped rather than failing
        // mid-run. Its success is memoized per bwrap binary: warm runs spawn nothing extra.
        usable: |_| {
            engine_bwrap::BwrapConfig::from_env()
                .is_ok_and(|config| engine_bwrap::probe_cached(&config).available)
        },
        probe: |p| p.probe(engine_detect::EngineName::Bwrap),
        open: |o| Ok(bwrap(o)?),
        sessions: Some(Sessions {
            open: |o| Ok(bwrap(o)?),
            local: |id| {
                let config = engine_bwrap::BwrapConfig::from_env().ok()?;
                engine_bwrap::local_session(&config, id)
            },
        }),
        reap: reap_bwrap,
    },
    Entry {
        name: "docker",
        usable: |p| p.oci_usable(engine_detect::EngineName::Docker),
        probe: |p| p.probe(engine_detect::EngineName::Docker),
        open: |o| Ok(oci(engine_oci::Flavor::Docker, o)?),
        sessions: Some(Sessions {
            open: |o| Ok(oci(engine_oci::Flavor::Docker, o)?),
            local: |id| oci_local(engine_oci::Flavor::Docker, id),
        }),
        reap: |r| reap_oci(engine_oci::Flavor::Docker, r),
    },
    Entry {
        name: "podman",
        usable: |p| p.oci_usable(engine_detect::EngineName::Podman),
        probe: |p| p.probe(engine_detect::EngineName::Podman),
        open: |o| Ok(oci(engine_oci::Flavor::Podman, o)?),
        sessions: Some(Sessions {
            open: |o| Ok(oci(engine_oci::Flavor::Podman, o)?),
            local: |id| oci_local(engine_oci::Flavor::Podman, id),
        }),
        reap: |r| reap_oci(engine_oci::Flavor::Podman, r),
    },
];

/// bwrap, with the session records swept on the way (a read of one directory: cheap enough
/// for every command, and what ends a session whose agent was replaced by code that never
/// exits).
fn bwrap(options: &Options<'_>) -> Result<Box<engine_bwrap::BwrapEngine>> {
    let config = engine_bwrap::BwrapConfig::from_env().map_err(EngineError::new)?;
    if options.purpose != Purpose::Maintain {
        let _ = engine_bwrap::reap_sessions(&config, false);
    }
    Ok(Box::new(engine_bwrap::BwrapEngine::new(config).map_err(EngineError::new)?))
}

/// A sweep at most this often from commands on existing sessions: they are the interactive
/// hot path, and a session's own expiry does not depend on the sweep.
const SESSION_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Pure: whether a sweep last recorded at `last` is older than the interval at `now`.
fn sweep_due(last: Option<std::time::SystemTime>, now: std::time::SystemTime) -> bool {
    last.and_then(|t| now.duration_since(t).ok()).is_none_or(|age| age >= SESSION_SWEEP_INTERVAL)
}

/// docker or podman, connected for `options.purpose` (sweeping on connect as it asks).
fn oci(flavor: engine_oci::Flavor, options: &Options<'_>) -> Result<Box<engine_oci::OciEngine>> {
    let mut config = engine_oci::OciConfig::from_env(flavor);
    let mut stamp = None;
    match options.purpose {
        Purpose::Start => {
            if let Some(image) = options.image {
                config.image = image.to_owned();
            }
        }
        Purpose::Attach => {
            config.image = String::new();
            // The stamp lives in a directory checked to be the caller's and is touched
            // without following a link; a refused directory just means sweeping every time.
            let dir = reaper::PrivateDir::open(&config.cache_dir.join("oci")).ok();
            let name = format!("last-sweep-{}", flavor.as_str());
            let last = dir.as_ref().and_then(|d| d.modified(&name).ok().flatten());
            config.sweep_on_start = sweep_due(last, std::time::SystemTime::now());
            stamp = dir.filter(|_| config.sweep_on_start).map(|d| (d, name));
        }
        Purpose::Maintain => {
            config.image = String::new();
            config.sweep_on_start = false;
        }
    }
    let engine = engine_oci::OciEngine::new(config).map_err(EngineError::new)?;
    // Only what was still running is news (a script a killed CLI left behind); exited leftovers
    // are routine (a podman run hands its removal to the engine and returns).
    for swept in engine.swept() {
        if swept.removed && !swept.exited {
            ui::warn(&format!("removed leftover container {} ({})", swept.container, swept.reason));
        }
    }
    // Best effort: without the stamp the next command just sweeps again.
    if let Some((dir, name)) = stamp {
        let _ = dir.touch(&name);
    }
    Ok(Box::new(engine))
}

fn oci_local(flavor: engine_oci::Flavor, id: &str) -> Option<Box<dyn DynSession>> {
    let runtime_dir = engine_oci::OciConfig::from_env(flavor).runtime_dir;
    engine_oci::local_session(&runtime_dir, id, flavor)
}

/// `--engine` values of `run`: `auto` and every engine's name.
pub(crate) fn choices() -> Vec<&'static str> {
    std::iter::once("auto").chain(ENGINES.iter().map(|e| e.name)).collect()
}

/// `--engine` values of the session commands: the engines with sessions.
pub(crate) fn session_choices() -> Vec<&'static str> {
    ENGINES.iter().filter(|e| e.sessions.is_some()).map(|e| e.name).collect()
}

/// `--engine` values of `reap`: every engine.
pub(crate) fn names() -> Vec<&'static str> {
    ENGINES.iter().map(|e| e.name).collect()
}

fn entry(name: &str) -> Result<&'static Entry> {
    ENGINES.iter().find(|e| e.name == name).ok_or_else(|| {
        ui::hinted(
            format!("unknown engine `{name}`"),
            format!("choose one of {}", names().join(", ")),
        )
    })
}

/// `Ok(None)` for an engine that cannot sandbox here (its daemon does not answer).
fn available<T>(opened: Result<T>) -> Result<Option<T>> {
    match opened {
        Err(e) if crate::exit::class(&e) == Some(ErrorClass::Unavailable) => Ok(None),
        other => other.map(Some),
    }
}

/// The engine for `--engine choice` (`auto`: the first usable one of the ladder); `None` when
/// none can sandbox here. An engine that cannot (its daemon does not answer) counts as none.
pub(crate) fn select(choice: &str, options: &Options<'_>) -> Result<Option<Box<dyn DynEngine>>> {
    if choice == "auto" {
        let probes = Probes::default();
        return match ENGINES.iter().find(|e| (e.usable)(&probes)) {
            Some(entry) => available((entry.open)(options)),
            None => Ok(None),
        };
    }
    available((entry(choice)?.open)(options))
}

/// The session engine for `session start --engine choice` (`None`: the first usable one with
/// sessions); `None` when none can hold a session here.
pub(crate) fn select_sessions(
    choice: Option<&str>,
    options: &Options<'_>,
) -> Result<Option<Box<dyn DynSessionEngine>>> {
    let entry = match choice {
        Some(name) => Some(entry(name)?),
        None => {
            let probes = Probes::default();
            ENGINES.iter().find(|e| e.sessions.is_some() && (e.usable)(&probes))
        }
    };
    let Some(entry) = entry else { return Ok(None) };
    match &entry.sessions {
        // A named engine that cannot start says why (its own error, exit 3), as `run` does
        // through `no_engine`'s table; `auto` just found none.
        Some(sessions) if choice.is_some() => (sessions.open)(options).map(Some),
        Some(sessions) => available((sessions.open)(options)),
        None => Err(ui::hinted(
            format!("the {} engine has no sessions", entry.name),
            format!("choose one of {}", session_choices().join(", ")),
        )),
    }
}

/// The engines a command on existing sessions looks through: the one named, or every one
/// with sessions (in ladder order).
fn session_entries(choice: Option<&str>) -> Result<Vec<&'static Entry>> {
    Ok(match choice {
        Some(name) => vec![entry(name)?],
        None => ENGINES.iter().filter(|e| e.sessions.is_some()).collect(),
    })
}

/// Runs `work` on session `id`: first opened from its host record when the engine can (no
/// connection, no API call), else through a connected engine. Only "no such session" moves
/// on (to the connected path, then the next engine), so nothing runs twice. Without
/// `--engine` no engine is probed first: a full detection costs more than a warm run.
pub(crate) fn with_session<T>(
    id: &str,
    choice: Option<&str>,
    mut work: impl FnMut(&dyn DynSession) -> Result<T, EngineError>,
) -> Result<T> {
    let entries = session_entries(choice)?;
    let not_found =
        |r: &Result<T, EngineError>| matches!(r, Err(e) if e.class() == ErrorClass::NotFound);
    for entry in &entries {
        let Some(sessions) = &entry.sessions else { continue };
        if let Some(session) = (sessions.local)(id) {
            let result = work(&*session);
            if !not_found(&result) {
                return Ok(result?);
            }
        }
    }
    through_engines(id, choice, |engine| work(&*engine.open_session_dyn(id)?))
}

/// `op` on each session engine asked, connected, until one does not answer "no such session".
fn through_engines<T>(
    id: &str,
    choice: Option<&str>,
    mut op: impl FnMut(&dyn DynSessionEngine) -> Result<T, EngineError>,
) -> Result<T> {
    let mut unreachable = None;
    for entry in session_entries(choice)? {
        let Some(sessions) = &entry.sessions else { continue };
        let engine = match (sessions.open)(&Options::ATTACH) {
            Ok(engine) => engine,
            Err(e) => {
                unreachable = Some(e);
                continue;
            }
        };
        match op(&*engine) {
            Err(e) if e.class() == ErrorClass::NotFound => {}
            other => return Ok(other?),
        }
    }
    Err(no_session(id, choice, unreachable))
}

/// The error when no engine has session `id`. An engine that answered "no such session" says
/// more than one this user cannot reach (a podman-only user has no docker socket), unless it
/// was the only one asked.
fn no_session(id: &str, choice: Option<&str>, unreachable: Option<anyhow::Error>) -> anyhow::Error {
    match unreachable {
        Some(e) if choice.is_some() => e,
        _ => ui::hinted(
            format!("no session `{id}`"),
            "`python-sandbox session list` shows the running sessions",
        ),
    }
}

/// Stops session `id` through its engine (which also releases what it kept on the host).
pub(crate) fn stop_session(id: &str, choice: Option<&str>) -> Result<()> {
    through_engines(id, choice, |engine| engine.stop_session_dyn(id))
}

/// Every session of the engines asked (all usable ones by default: one that does not answer
/// is skipped, unless it was named).
pub(crate) fn list_sessions(choice: Option<&str>) -> Result<Vec<sandbox_core::SessionInfo>> {
    let probes = Probes::default();
    let mut all = Vec::new();
    for entry in session_entries(choice)? {
        let Some(sessions) = &entry.sessions else { continue };
        if choice.is_none() && !(entry.usable)(&probes) {
            continue;
        }
        match (sessions.open)(&Options::ATTACH).and_then(|e| Ok(e.list_sessions_dyn()?)) {
            Ok(mut listed) => all.append(&mut listed),
            Err(e) if choice.is_some() => return Err(e),
            Err(_) => {}
        }
    }
    Ok(all)
}

/// What `reap` asks of each engine.
pub(crate) struct Reap {
    pub(crate) dry_run: bool,
    /// Prepared environments unused for longer than this go.
    pub(crate) env_max_age: Duration,
}

/// One thing `reap` removed (or would have), as it reports it.
pub(crate) enum Reaped {
    /// A sandbox (container, session) of a run that did not end, or an expired session.
    Sandbox {
        /// What the engine calls it (container name, session id).
        name: String,
        /// The sandbox id.
        sandbox: String,
        /// `run`, `session` or `prepare`.
        kind: String,
        reason: String,
        removed: bool,
        error: Option<String>,
    },
    /// A directory a root caller's run lent to the sandbox user (ACL and mode given back).
    Lent { path: String, restored: bool, error: Option<String> },
    /// A prepared environment.
    Environment { name: String, reason: String, removed: bool, error: Option<String> },
}

/// The engines `reap` works on: the one named, or every one that is usable here; bwrap's
/// state is only files of ours, so it is always looked at.
pub(crate) fn reap(choice: Option<&str>, request: &Reap) -> Result<Vec<(&'static str, Reaped)>> {
    let probes = Probes::default();
    let entries: Vec<&Entry> = match choice {
        Some(name) => vec![entry(name)?],
        None => ENGINES.iter().collect(),
    };
    let mut out = Vec::new();
    for entry in entries {
        match (entry.reap)(request) {
            Ok(items) => out.extend(items.into_iter().map(|item| (entry.name, item))),
            Err(e) if choice.is_some() => return Err(e),
            // Not installed, not answering: nothing of ours can be there to reap, unless it
            // answers (then its error is news).
            Err(_) if !(entry.usable)(&probes) => {}
            Err(e) => {
                let first = e.to_string().lines().next().unwrap_or_default().to_owned();
                ui::warn(&format!("{}: {first}", entry.name));
            }
        }
    }
    Ok(out)
}

fn reap_bwrap(request: &Reap) -> Result<Vec<Reaped>> {
    let config = engine_bwrap::BwrapConfig::from_env().map_err(EngineError::new)?;
    let mut out = Vec::new();
    for id in engine_bwrap::reap_sessions(&config, request.dry_run).map_err(EngineError::new)? {
        out.push(Reaped::Sandbox {
            name: id.clone(),
            sandbox: id,
            kind: "session".to_owned(),
            reason: "expired, or its sandbox is gone".to_owned(),
            removed: !request.dry_run,
            error: None,
        });
    }
    let pruned = engine_bwrap::prune_envs(&config.cache_dir, request.env_max_age, request.dry_run)
        .map_err(EngineError::new)?;
    out.extend(pruned.into_iter().map(|env| Reaped::Environment {
        name: env.dir.display().to_string(),
        reason: env.reason,
        removed: env.removed,
        error: env.error,
    }));
    Ok(out)
}

fn reap_oci(flavor: engine_oci::Flavor, request: &Reap) -> Result<Vec<Reaped>> {
    let engine = oci(flavor, &Options::MAINTAIN)?;
    let mut out = Vec::new();
    for swept in engine.reap(request.dry_run).map_err(EngineError::new)? {
        out.push(Reaped::Sandbox {
            name: swept.container,
            sandbox: swept.sandbox,
            kind: swept.kind,
            reason: swept.reason,
            removed: swept.removed,
            error: swept.error,
        });
    }
    for left in engine.reap_grants(request.dry_run).map_err(EngineError::new)? {
        out.push(Reaped::Lent {
            path: left.path.display().to_string(),
            restored: left.restored,
            error: left.error,
        });
    }
    let pruned = engine.prune_envs(request.env_max_age, request.dry_run);
    for pruned in pruned.map_err(EngineError::new)? {
        out.push(Reaped::Environment {
            name: pruned.volume,
            reason: pruned.reason,
            removed: pruned.removed,
            error: pruned.error,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_choices_follow_the_ladder() {
        let names = names();
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        assert_eq!(choices()[0], "auto");
        assert_eq!(&choices()[1..], &names[..]);
        assert!(session_choices().iter().all(|n| names.contains(n)));
    }

    #[test]
    fn session_sweeps_are_throttled() {
        let now = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert!(sweep_due(None, now), "never swept");
        assert!(!sweep_due(Some(now - Duration::from_secs(5)), now));
        assert!(sweep_due(Some(now - SESSION_SWEEP_INTERVAL), now));
        assert!(sweep_due(Some(now - Duration::from_secs(3600)), now));
        assert!(sweep_due(Some(now + Duration::from_secs(5)), now), "a stamp from the future");
    }
}
