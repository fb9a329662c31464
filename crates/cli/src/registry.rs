//! The one list of engines: their names, the `auto` ladder (the order of [`ENGINES`]), a cheap
//! probe each, and how to open one. `run` dispatches only through this list and the
//! `sandbox_core::DynEngine` seam; no other CLI module names a concrete engine for runs.
//! Adding an engine is: a crate, its probe, one entry here.

use std::cell::OnceCell;

use anyhow::Result;
use sandbox_core::{DynEngine, EngineError, ErrorClass};

use crate::args::ContainerArgs;

/// What opening an engine may use from the command line.
pub(crate) struct Options<'a> {
    pub(crate) container: &'a ContainerArgs,
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
}

/// One engine.
pub(crate) struct Entry {
    /// `--engine NAME`.
    pub(crate) name: &'static str,
    /// Whether `auto` should try it here (cheap, may be memoized).
    usable: fn(&Probes) -> bool,
    /// Connects; an [`ErrorClass::Unavailable`] error means it cannot sandbox here.
    open: fn(&Options<'_>) -> Result<Box<dyn DynEngine>>,
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
        open: |_| {
            let config = engine_bwrap::BwrapConfig::from_env().map_err(EngineError::new)?;
            Ok(Box::new(engine_bwrap::BwrapEngine::new(config).map_err(EngineError::new)?))
        },
    },
    Entry {
        name: "docker",
        usable: |p| p.oci_usable(engine_detect::EngineName::Docker),
        open: |o| oci(engine_oci::Flavor::Docker, o),
    },
    Entry {
        name: "podman",
        usable: |p| p.oci_usable(engine_detect::EngineName::Podman),
        open: |o| oci(engine_oci::Flavor::Podman, o),
    },
];

fn oci(flavor: engine_oci::Flavor, options: &Options<'_>) -> Result<Box<dyn DynEngine>> {
    Ok(Box::new(crate::session::oci_engine(flavor, options.container)?))
}

/// `--engine` values: `auto` and every engine's name.
pub(crate) fn choices() -> Vec<&'static str> {
    std::iter::once("auto").chain(ENGINES.iter().map(|e| e.name)).collect()
}

/// The engine for `--engine choice` (`auto`: the first usable one of the ladder); `None` when
/// none can sandbox here. An engine that cannot (its daemon does not answer) counts as none.
pub(crate) fn select(choice: &str, options: &Options<'_>) -> Result<Option<Box<dyn DynEngine>>> {
    let open = |entry: &Entry| match (entry.open)(options) {
        Err(e) if crate::exit::class(&e) == Some(ErrorClass::Unavailable) => Ok(None),
        other => other.map(Some),
    };
    if choice == "auto" {
        let probes = Probes::default();
        for entry in ENGINES {
            if (entry.usable)(&probes) {
                return open(entry);
            }
        }
        return Ok(None);
    }
    match ENGINES.iter().find(|e| e.name == choice) {
        Some(entry) => open(entry),
        None => Err(crate::ui::hinted(
            format!("unknown engine `{choice}`"),
            format!("choose one of {}", choices().join(", ")),
        )),
    }
}
