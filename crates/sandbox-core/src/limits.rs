//! Resource limits of a run (`--memory`, `--cpus`, `--pids-limit`, or the inline `memory`,
//! `cpus` and `pids-limit` keys): their one parser, their one validation and their one set of
//! defaults. Every layer's value passes the same checks, so a flag and an inline key are
//! refused with the same words.
//!
//! A limit nobody set gets its default ([`Limits::DEFAULT`]: 2 GiB, 2 CPUs, 512 processes, as
//! docker's and podman's containers always had) on every engine, held by what the engine has
//! there (`engine_detect::LimitSupport`: a cgroup, rlimits, the container runtime); where
//! nothing can hold one, that default is not applied and `detect` says so. A limit that *was*
//! asked for is different: an engine that cannot enforce it refuses the run (exit 2, with a
//! `hint:`), never runs without it. `none` (`--memory none`, inline `memory = "none"`) turns a
//! limit off, default included.

use std::fmt;

use crate::Error;

/// What the user asked to cap, and which limits they turned off. Each limit resolves on its
/// own: the highest layer that sets it (to a value or to `none`) wins (see [`crate::resolve`]).
/// One that is neither asked for nor off gets its default ([`Limits::defaults`]).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Limits {
    /// Memory in bytes (at least [`MIN_MEMORY`]).
    pub memory: Option<u64>,
    /// CPU time, as a fraction of CPUs.
    pub cpus: Option<Cpus>,
    /// Processes and threads together (at least 1, at most [`MAX_PIDS`]).
    pub pids: Option<u64>,
    /// The limits turned off (`none`): no default for them either. Left out of records and
    /// labels when nothing is off, so those of earlier versions read the same.
    #[serde(default, skip_serializing_if = "LimitsOff::is_none")]
    pub off: LimitsOff,
}

/// Which limits a run turned off with `none`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct LimitsOff {
    pub memory: bool,
    pub cpus: bool,
    pub pids: bool,
}

impl LimitsOff {
    /// Nothing turned off.
    pub const NONE: LimitsOff = LimitsOff { memory: false, cpus: false, pids: false };

    /// Whether nothing is turned off.
    pub fn is_none(&self) -> bool {
        *self == LimitsOff::NONE
    }
}

impl Limits {
    /// Nothing asked for, nothing turned off: the defaults apply.
    pub const NONE: Limits = Limits { memory: None, cpus: None, pids: None, off: LimitsOff::NONE };

    /// What a run gets for a limit nobody set, on every engine: 2 GiB of memory, 2 CPUs and
    /// 512 processes, docker's and podman's defaults. Enough for data work (numpy, pandas),
    /// small enough that a runaway script or a fork bomb leaves the host usable.
    pub const DEFAULT: Limits = Limits {
        memory: Some(2 << 30),
        cpus: Some(Cpus { millis: 2000 }),
        pids: Some(512),
        off: LimitsOff::NONE,
    };

    /// Whether any limit was asked for (a value; `none` asks for nothing).
    pub fn is_empty(&self) -> bool {
        self.memory.is_none() && self.cpus.is_none() && self.pids.is_none()
    }

    /// The defaults that apply: [`Limits::DEFAULT`] for each limit neither asked for nor off.
    pub fn defaults(&self) -> Limits {
        let default = Limits::DEFAULT;
        let keep = |asked: bool, off: bool| !asked && !off;
        Limits {
            memory: default.memory.filter(|_| keep(self.memory.is_some(), self.off.memory)),
            cpus: default.cpus.filter(|_| keep(self.cpus.is_some(), self.off.cpus)),
            pids: default.pids.filter(|_| keep(self.pids.is_some(), self.off.pids)),
            off: LimitsOff::NONE,
        }
    }

    /// The layer that resolves back to exactly these limits.
    pub fn layer(&self) -> LayerLimits {
        fn setting<T>(value: Option<T>, off: bool) -> Option<LimitSetting<T>> {
            value.map(LimitSetting::Set).or(off.then_some(LimitSetting::Off))
        }
        LayerLimits {
            memory: setting(self.memory, self.off.memory),
            cpus: setting(self.cpus, self.off.cpus),
            pids: setting(self.pids, self.off.pids),
        }
    }

    /// The flags of the limits that were asked for, in flag order (for messages).
    pub fn asked(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.memory.is_some() {
            out.push("--memory");
        }
        if self.cpus.is_some() {
            out.push("--cpus");
        }
        if self.pids.is_some() {
            out.push("--pids-limit");
        }
        out
    }
}

/// The word that turns a limit off: `--memory none`, inline `memory = "none"`.
pub const NO_LIMIT: &str = "none";

/// A limit as one layer sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LimitSetting<T> {
    /// This value.
    Set(T),
    /// [`NO_LIMIT`]: no limit at all, not even the default.
    Off,
}

impl<T: serde::Serialize> serde::Serialize for LimitSetting<T> {
    /// As written: the value, or `"none"`.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            LimitSetting::Set(value) => value.serialize(serializer),
            LimitSetting::Off => serializer.serialize_str(NO_LIMIT),
        }
    }
}

/// One layer's limits (the flags, the inline table): each set, turned off, or left to the
/// layers below (`None`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct LayerLimits {
    pub memory: Option<LimitSetting<u64>>,
    pub cpus: Option<LimitSetting<Cpus>>,
    pub pids: Option<LimitSetting<u64>>,
}

/// A CPU quota in thousandths of a CPU (`0.5` is 500), so specs stay `Eq` and every engine
/// converts exactly (docker's nano-CPUs, cgroup `cpu.max`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Cpus {
    millis: u32,
}

impl Cpus {
    /// `millis` thousandths of a CPU; checked like a parsed value.
    pub fn from_millis(millis: u32) -> Result<Cpus, Error> {
        let cpus = Cpus { millis };
        check_cpus(cpus, &cpus.to_string())
    }

    /// Thousandths of a CPU.
    pub fn millis(self) -> u32 {
        self.millis
    }

    /// CPUs as a float (`1.5`), for APIs that take one.
    pub fn as_f64(self) -> f64 {
        f64::from(self.millis) / 1000.0
    }
}

impl fmt::Display for Cpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (whole, frac) = (self.millis / 1000, self.millis % 1000);
        if frac == 0 {
            write!(f, "{whole}")
        } else {
            let frac = format!("{frac:03}");
            write!(f, "{whole}.{}", frac.trim_end_matches('0'))
        }
    }
}

/// The smallest memory limit: below it not even the interpreter starts.
pub const MIN_MEMORY: u64 = 4 << 20;
/// The largest CPU count accepted (docker's own ceiling is the host's CPUs; this only catches
/// typos).
pub const MAX_CPUS: u32 = 1024;
/// The largest process limit accepted: the kernel's own `pid_max` ceiling.
pub const MAX_PIDS: u64 = 1 << 22;

fn invalid_memory(text: &str) -> Error {
    Error::InvalidValue {
        what: "memory size",
        value: text.to_owned(),
        hint: "use bytes or a suffix: `512m`, `2g`",
    }
}

fn invalid_cpus(text: &str) -> Error {
    Error::InvalidValue {
        what: "cpu count",
        value: text.to_owned(),
        hint: "give a positive number such as `0.5` or `2`",
    }
}

fn invalid_pids(text: &str) -> Error {
    Error::InvalidValue {
        what: "pids limit",
        value: text.to_owned(),
        hint: "give a positive number of processes",
    }
}

/// `--memory`: a size in the [`crate::parse_size`] spelling, at least [`MIN_MEMORY`].
pub fn parse_memory(text: &str) -> Result<u64, Error> {
    let bytes = crate::parse_size(text).map_err(|_| invalid_memory(text))?;
    check_memory(bytes, text)
}

/// `--cpus`: a positive decimal number of CPUs, in steps of a thousandth.
pub fn parse_cpus(text: &str) -> Result<Cpus, Error> {
    let value: f64 = text.trim().parse().map_err(|_| invalid_cpus(text))?;
    if !(value.is_finite() && value > 0.0 && value <= f64::from(MAX_CPUS)) {
        return Err(invalid_cpus(text));
    }
    // In range, so the cast cannot truncate; rounding keeps `0.1` at 100.
    check_cpus(Cpus { millis: (value * 1000.0).round() as u32 }, text)
}

/// `--pids-limit`: a positive whole number of processes.
pub fn parse_pids(text: &str) -> Result<u64, Error> {
    let pids: u64 = text.trim().parse().map_err(|_| invalid_pids(text))?;
    check_pids(pids, text)
}

/// `text` is [`NO_LIMIT`], or a value `parse` takes.
fn setting<T>(
    text: &str,
    parse: impl Fn(&str) -> Result<T, Error>,
) -> Result<LimitSetting<T>, Error> {
    if text.trim() == NO_LIMIT { Ok(LimitSetting::Off) } else { parse(text).map(LimitSetting::Set) }
}

/// `--memory`: [`parse_memory`], or [`NO_LIMIT`].
pub fn parse_memory_setting(text: &str) -> Result<LimitSetting<u64>, Error> {
    setting(text, parse_memory)
}

/// `--cpus`: [`parse_cpus`], or [`NO_LIMIT`].
pub fn parse_cpus_setting(text: &str) -> Result<LimitSetting<Cpus>, Error> {
    setting(text, parse_cpus)
}

/// `--pids-limit`: [`parse_pids`], or [`NO_LIMIT`].
pub fn parse_pids_setting(text: &str) -> Result<LimitSetting<u64>, Error> {
    setting(text, parse_pids)
}

pub(crate) fn check_memory(bytes: u64, text: &str) -> Result<u64, Error> {
    if bytes < MIN_MEMORY { Err(invalid_memory(text)) } else { Ok(bytes) }
}

pub(crate) fn check_cpus(cpus: Cpus, text: &str) -> Result<Cpus, Error> {
    if cpus.millis == 0 || cpus.millis > MAX_CPUS * 1000 {
        Err(invalid_cpus(text))
    } else {
        Ok(cpus)
    }
}

pub(crate) fn check_pids(pids: u64, text: &str) -> Result<u64, Error> {
    if pids == 0 || pids > MAX_PIDS { Err(invalid_pids(text)) } else { Ok(pids) }
}

/// The checks [`crate::resolve`] applies to a layer's values, whatever built the layer.
pub(crate) fn check(limits: &Limits) -> Result<(), Error> {
    if let Some(bytes) = limits.memory {
        check_memory(bytes, &bytes.to_string())?;
    }
    if let Some(cpus) = limits.cpus {
        check_cpus(cpus, &cpus.to_string())?;
    }
    if let Some(pids) = limits.pids {
        check_pids(pids, &pids.to_string())?;
    }
    Ok(())
}

/// Pure: the limits of `layers` (lowest first), each from the highest layer that sets it.
pub(crate) fn resolve(layers: &[&LayerLimits]) -> Limits {
    fn top<T: Copy>(
        layers: &[&LayerLimits],
        field: impl Fn(&LayerLimits) -> Option<LimitSetting<T>>,
    ) -> (Option<T>, bool) {
        match layers.iter().rev().find_map(|layer| field(layer)) {
            Some(LimitSetting::Set(value)) => (Some(value), false),
            Some(LimitSetting::Off) => (None, true),
            None => (None, false),
        }
    }
    let (memory, memory_off) = top(layers, |l| l.memory);
    let (cpus, cpus_off) = top(layers, |l| l.cpus);
    let (pids, pids_off) = top(layers, |l| l.pids);
    Limits {
        memory,
        cpus,
        pids,
        off: LimitsOff { memory: memory_off, cpus: cpus_off, pids: pids_off },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show<T: fmt::Debug>(result: Result<T, Error>) -> String {
        match result {
            Ok(value) => format!("{value:?}"),
            Err(error) => format!("error: {}", error.to_string().replace('\n', " / ")),
        }
    }

    #[test]
    fn spellings() {
        let mut out = Vec::new();
        for text in ["256m", "2g", "4m", "3m", "1.5g", "lots", "", "0"] {
            out.push(format!("memory {text:?}: {}", show(parse_memory(text))));
        }
        for text in ["0.5", "2", "0.0005", "0", "-1", "1025", "NaN", "inf", "x"] {
            out.push(format!("cpus {text:?}: {}", show(parse_cpus(text))));
        }
        for text in ["16", "1", "0", "-1", "4194305", "1.5"] {
            out.push(format!("pids {text:?}: {}", show(parse_pids(text))));
        }
        out.push(format!("memory \"none\": {}", show(parse_memory_setting("none"))));
        out.push(format!("cpus \"none\": {}", show(parse_cpus_setting("none"))));
        out.push(format!("pids \"none\": {}", show(parse_pids_setting(" none"))));
        out.push(format!("pids \"None\": {}", show(parse_pids_setting("None"))));
        out.push(format!("memory \"1g\" setting: {}", show(parse_memory_setting("1g"))));
        insta::assert_snapshot!(out.join("\n"));
    }

    /// A default applies to each limit neither asked for nor turned off, and a limit resolves
    /// from the highest layer that says anything about it, `none` included.
    #[test]
    fn defaults_and_off() {
        assert_eq!(Limits::NONE.defaults(), Limits::DEFAULT);
        let asked = Limits { memory: Some(1 << 30), ..Limits::NONE };
        assert_eq!(asked.defaults(), Limits { memory: None, ..Limits::DEFAULT });
        let off = Limits { off: LimitsOff { pids: true, ..LimitsOff::NONE }, ..Limits::NONE };
        assert_eq!(off.defaults(), Limits { pids: None, ..Limits::DEFAULT });
        let user =
            LayerLimits { memory: Some(LimitSetting::Set(4 << 30)), ..LayerLimits::default() };
        let inline = LayerLimits {
            memory: Some(LimitSetting::Off),
            pids: Some(LimitSetting::Set(64)),
            ..LayerLimits::default()
        };
        let flags = LayerLimits { pids: Some(LimitSetting::Off), ..LayerLimits::default() };
        let resolved = resolve(&[&user, &inline, &flags]);
        assert_eq!(
            resolved,
            Limits {
                memory: None,
                cpus: None,
                pids: None,
                off: LimitsOff { memory: true, cpus: false, pids: true },
            }
        );
        assert_eq!(resolved.defaults(), Limits { cpus: Limits::DEFAULT.cpus, ..Limits::NONE });
        assert_eq!(resolve(&[&resolved.layer()]), resolved);
    }

    #[test]
    fn cpus_print_as_written() {
        for (text, shown) in [("0.5", "0.5"), ("2", "2"), ("1.25", "1.25"), ("0.001", "0.001")] {
            assert_eq!(parse_cpus(text).map(|c| c.to_string()), Ok(shown.to_owned()));
        }
        assert_eq!(parse_cpus("1.5").map(Cpus::as_f64), Ok(1.5));
    }
}
