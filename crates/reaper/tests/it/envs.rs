//! The environment policy on a fake clock, its properties, and the RFC 3339 reader.

use std::collections::BTreeMap;

use proptest::prelude::*;
use reaper::{EnvAction, EnvUse, MANAGED_BY, human, stale_envs, unix_from_rfc3339};

use crate::support::T0;

const DAY: u64 = 86_400;

fn ids(actions: &[EnvAction]) -> Vec<&str> {
    actions.iter().map(|a| a.id.as_str()).collect()
}

#[test]
fn stale_means_unused_for_max_age_and_not_in_use() {
    let envs = [
        EnvUse::owned("fresh", T0 - DAY, false),
        EnvUse::owned("old", T0 - 31 * DAY, false),
        EnvUse::owned("exactly", T0 - 30 * DAY, false),
        EnvUse::owned("old-but-mounted", T0 - 90 * DAY, true),
        EnvUse::owned("from-the-future", T0 + DAY, false),
    ];
    let actions = stale_envs(T0, 30 * DAY, &envs);
    assert_eq!(ids(&actions), ["old", "exactly"]);
    assert_eq!(actions[0].unused_secs, 31 * DAY);
    assert_eq!(actions[0].to_string(), "unused for 31 d, max age 30 d");
}

#[test]
fn max_age_zero_takes_every_env_not_in_use() {
    let envs = [
        EnvUse::owned("just-used", T0, false),
        EnvUse::owned("future", T0 + 5, false),
        EnvUse::owned("busy", T0 - DAY, true),
    ];
    assert_eq!(ids(&stale_envs(T0, 0, &envs)), ["just-used", "future"]);
}

#[test]
fn never_selects_what_is_not_ours() {
    let mut foreign = EnvUse::owned("foreign", 0, false);
    foreign.labels.insert(MANAGED_BY.into(), "someone-else".into());
    let bare = EnvUse { id: "bare".into(), labels: BTreeMap::new(), last_used: 0, in_use: false };
    assert!(stale_envs(T0, 0, &[foreign, bare]).is_empty());
}

#[test]
fn human_durations() {
    assert_eq!(human(59), "59 s");
    assert_eq!(human(60), "1 min");
    assert_eq!(human(7199), "1 h");
    assert_eq!(human(30 * DAY + 5), "30 d");
}

#[test]
fn rfc3339_as_engines_write_it() {
    assert_eq!(unix_from_rfc3339("2023-11-14T22:13:20Z"), Some(T0));
    assert_eq!(unix_from_rfc3339("2023-11-14T22:13:20.123456789Z"), Some(T0));
    assert_eq!(unix_from_rfc3339("2023-11-15T00:13:20+02:00"), Some(T0));
    assert_eq!(unix_from_rfc3339("2023-11-14T21:13:20.5-01:00"), Some(T0));
    assert_eq!(unix_from_rfc3339("1970-01-01T00:00:00Z"), Some(0));
    assert_eq!(unix_from_rfc3339("2000-02-29T00:00:00Z"), Some(951_782_400));
    for bad in [
        "",
        "2023-11-14",
        "2023-11-14T22:13:20",
        "2023-13-14T22:13:20Z",
        "2023-11-14T24:13:20Z",
        "2023-11-14T22:13:20.Z",
        "2023-11-14T22:13:20+0200",
        "1969-12-31T23:59:59Z",
        "2023-11-14T22:13:2xZ",
        "2023-11-14T22:1é:20Z",
    ] {
        assert_eq!(unix_from_rfc3339(bad), None, "{bad:?}");
    }
}

fn envs() -> impl Strategy<Value = Vec<EnvUse>> {
    prop::collection::vec(
        (0u64..4 * DAY, any::<bool>(), any::<bool>()).prop_map(|(age, in_use, ours)| {
            let mut env = EnvUse::owned(&format!("env-{age}"), T0 - age, in_use);
            if !ours {
                env.labels.clear();
            }
            env
        }),
        0..12,
    )
}

proptest! {
    #[test]
    fn never_selects_in_use_or_foreign(list in envs(), max_age in 0u64..3 * DAY, dt in 0u64..DAY) {
        for action in stale_envs(T0 + dt, max_age, &list) {
            let env = list.iter().find(|e| e.id == action.id).expect("selected from the input");
            prop_assert!(!env.in_use && !env.labels.is_empty(), "selected {}", action.id);
        }
    }

    #[test]
    fn monotone_in_time_and_max_age(list in envs(), max_age in 0u64..3 * DAY, dt in 0u64..DAY, shrink in 0u64..DAY) {
        let base = ids(&stale_envs(T0, max_age, &list)).into_iter().map(str::to_owned).collect::<Vec<_>>();
        let later = stale_envs(T0 + dt, max_age, &list);
        let stricter = stale_envs(T0, max_age.saturating_sub(shrink), &list);
        for id in &base {
            prop_assert!(ids(&later).contains(&id.as_str()), "{id} kept later");
            prop_assert!(ids(&stricter).contains(&id.as_str()), "{id} kept with a smaller max age");
        }
    }

    #[test]
    fn rfc3339_round_trips(secs in 0u64..8_000_000_000) {
        let days = secs / DAY;
        let (y, m, d) = civil_from_days(days as i64);
        let rem = secs % DAY;
        let text = format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem / 60 % 60, rem % 60);
        prop_assert_eq!(unix_from_rfc3339(&text), Some(secs));
    }

    #[test]
    fn rfc3339_never_panics(text in "\\PC{0,40}") {
        let _ = unix_from_rfc3339(&text);
    }
}

/// Howard Hinnant's `civil_from_days`, the inverse the parser is checked against.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}
