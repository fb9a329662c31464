//! Resource limits of a run (`--memory`, `--cpus`, `--pids-limit`, or the inline `memory`,
//! `cpus` and `pids-limit` keys): their one parser and their one validation. Every layer's
//! value passes the same checks, so a flag and an inline key are refused with the same words.
//!
//! A limit that is `None` was not asked for: an engine may apply its own default (docker and
//! podman do, see `engine_oci::Limits::DEFAULT`) or none, but an engine that cannot enforce a
//! limit that *was* asked for refuses the run (exit 2, with a `hint:`), never runs without it.

use std::fmt;

use crate::Error;

/// What the user asked to cap. Each field resolves on its own: the highest layer that sets it
/// wins (see [`crate::resolve`]).
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
}

impl Limits {
    /// Nothing asked for.
    pub const NONE: Limits = Limits { memory: None, cpus: None, pids: None };

    /// Whether any limit was asked for.
    pub fn is_empty(&self) -> bool {
        *self == Limits::NONE
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
        insta::assert_snapshot!(out.join("\n"));
    }

    #[test]
    fn cpus_print_as_written() {
        for (text, shown) in [("0.5", "0.5"), ("2", "2"), ("1.25", "1.25"), ("0.001", "0.001")] {
            assert_eq!(parse_cpus(text).map(|c| c.to_string()), Ok(shown.to_owned()));
        }
        assert_eq!(parse_cpus("1.5").map(Cpus::as_f64), Ok(1.5));
    }
}
