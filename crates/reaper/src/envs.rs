//! The environment policy: which prepared dependency environments (content-keyed caches that an
//! engine rebuilds on demand: docker/podman volumes, bwrap directories, later Kubernetes PVCs) nobody
//! used for long enough to remove. Pure: the clock and every fact are arguments.
//!
//! An engine reports each environment as an [`EnvUse`]: its labels, when it was last used (its own
//! stamp, else its creation time) and whether anything uses it right now (a container mounts it, a
//! run holds its lock). [`stale_envs`] keeps everything in use, everything without the exact
//! managed-by pair, and everything used within `max_age`; `max_age` 0 selects every environment not
//! in use. Selection is monotone: in time, and against a smaller `max_age` (property-tested).
//!
//! Removing a chosen environment is the engine's job and must stay race-free: it re-checks "in use"
//! under the environment's exclusive lock and lets the engine refuse (a volume still referenced).

use std::collections::BTreeMap;
use std::fmt;

use crate::{MANAGED_BY, MANAGED_BY_VALUE};

/// One prepared environment as an engine sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvUse {
    /// The engine's name for it (volume name, directory key), handed back in [`EnvAction`].
    pub id: String,
    /// Its labels; an environment without the exact managed-by pair is never selected. Engines
    /// whose environments cannot carry labels (directories in our own cache) pass the pair.
    pub labels: BTreeMap<String, String>,
    /// Last use, unix seconds: the engine's last-use stamp, or its creation time without one.
    pub last_used: u64,
    /// Something uses it now (a container references it, a run holds its lock).
    pub in_use: bool,
}

impl EnvUse {
    /// An environment in our own cache: labelled as ours.
    pub fn owned(id: &str, last_used: u64, in_use: bool) -> EnvUse {
        let labels = BTreeMap::from([(MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned())]);
        EnvUse { id: id.to_owned(), labels, last_used, in_use }
    }
}

/// One environment to remove.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EnvAction {
    /// [`EnvUse::id`].
    pub id: String,
    /// Seconds since its last use.
    pub unused_secs: u64,
    /// The maximum age it exceeded, seconds.
    pub max_age: u64,
}

impl fmt::Display for EnvAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unused for {}, max age {}", human(self.unused_secs), human(self.max_age))
    }
}

/// `45 s`, `12 min`, `5 h`, `31 d`: the largest unit that fits, rounded down.
pub fn human(secs: u64) -> String {
    match secs {
        s if s >= 86_400 => format!("{} d", s / 86_400),
        s if s >= 3600 => format!("{} h", s / 3600),
        s if s >= 60 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// The environments to remove at `now` (unix seconds), in input order: ours, not in use, and unused
/// for at least `max_age` seconds. A last use in the future (clock skew) counts as now.
pub fn stale_envs(now: u64, max_age: u64, envs: &[EnvUse]) -> Vec<EnvAction> {
    envs.iter()
        .filter(|e| !e.in_use)
        .filter(|e| e.labels.get(MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_VALUE))
        .filter_map(|e| {
            let unused_secs = now.saturating_sub(e.last_used);
            (unused_secs >= max_age).then(|| EnvAction { id: e.id.clone(), unused_secs, max_age })
        })
        .collect()
}

/// Pure: unix seconds from an RFC 3339 time as docker, podman and Kubernetes report it
/// (`2024-05-01T12:00:00Z`, `2024-05-01T12:00:00.123456789+02:00`); `None` for anything else.
/// Fractions are dropped.
pub fn unix_from_rfc3339(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        part.bytes().all(|b| b.is_ascii_digit()).then(|| part.parse().ok())?
    };
    if bytes.len() < 20 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[13] != b':' {
        return None;
    }
    if !matches!(bytes[10], b'T' | b't' | b' ') || bytes[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let mut rest = &text[19..];
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = &fraction[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return None;
            }
            let h: i64 = rest.get(1..3)?.parse().ok()?;
            let m: i64 = rest.get(4..6)?.parse().ok()?;
            sign * (h * 3600 + m * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    u64::try_from(secs).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}
