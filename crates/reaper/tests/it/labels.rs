//! The label schema: what engines write, that it reads back, and that every value is a valid
//! Kubernetes label value too.

use std::collections::BTreeMap;

use reaper::labels::{self, is_label_value, label_value};
use reaper::{
    Error, Kind, SandboxLabels, activity_label, labels_for_prepare, labels_for_run,
    labels_for_session,
};

use crate::support::{ALIVE, T0, owner};

fn render(map: &BTreeMap<String, String>) -> String {
    map.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}

#[test]
fn builders_snapshot() {
    let o = owner(ALIVE);
    let run = labels_for_run("ps-7f3a9c", &o, T0, Some(T0 + 3600)).unwrap();
    let session = labels_for_session("ps-data-2024", &o, T0, 1800).unwrap();
    let prepare = labels_for_prepare("ps-prep-01", &o, T0, None).unwrap();
    let labels = format!(
        "# run\n{}\n# session\n{}\n# prepare\n{}",
        render(&run),
        render(&session),
        render(&prepare)
    );
    insta::assert_snapshot!(labels);
}

#[test]
fn every_key_and_built_value_is_a_kubernetes_label() {
    let o = owner(ALIVE);
    for map in [
        labels_for_run("ps-1", &o, T0, Some(u64::MAX)).unwrap(),
        labels_for_session("ps-1", &o, u64::MAX, u64::MAX).unwrap(),
    ] {
        for (k, v) in &map {
            assert!(k.starts_with("io.python-sandbox.") && is_label_value(k), "{k}");
            assert!(is_label_value(v), "{k}={v}");
        }
    }
    assert_eq!(
        labels::MANAGED_FILTER,
        format!("{}={}", labels::MANAGED_BY, labels::MANAGED_BY_VALUE)
    );
    assert_eq!(activity_label(T0), (labels::LAST_ACTIVITY, T0.to_string()));
}

#[test]
fn invalid_values_are_refused_when_building() {
    let o = owner(ALIVE);
    for id in ["has space", "ends-with-dash-", "-starts", "ünïcode", &"x".repeat(64)] {
        assert_eq!(
            labels_for_run(id, &o, T0, None),
            Err(Error::InvalidLabelValue { value: id.to_owned() }),
            "{id:?}"
        );
    }
    let bad_user = reaper::Owner { user: "alice@laptop".into(), ..o };
    assert!(matches!(
        labels_for_run("ps-1", &bad_user, T0, None),
        Err(Error::InvalidLabelValue { .. })
    ));
}

#[test]
fn label_value_sanitizes_free_text() {
    let cases = [
        ("alice", "alice"),
        ("alice@laptop.local", "alice-laptop.local"),
        ("  -weird name- ", "weird-name"),
        ("ünï", "n"),
        ("", ""),
    ];
    for (input, want) in cases {
        assert_eq!(label_value(input), want, "{input:?}");
        assert!(is_label_value(&label_value(input)));
    }
    let long = format!("{}-{}", "a".repeat(62), "b".repeat(10));
    let v = label_value(&long);
    assert!(v.len() <= 63 && is_label_value(&v), "{v}");
}

#[test]
fn reading_back_errors() {
    let good = labels_for_session("ps-1", &owner(ALIVE), T0, 60).unwrap();
    let with = |key: &str, value: Option<&str>| {
        let mut m = good.clone();
        match value {
            Some(v) => m.insert(key.to_owned(), v.to_owned()),
            None => m.remove(key),
        };
        SandboxLabels::from_labels(&m).map(|l| l.map(|l| l.kind))
    };
    type Case = (&'static str, Option<&'static str>, Result<Option<Kind>, String>);
    let cases: Vec<Case> = vec![
        (labels::TTL, Some("60"), Ok(Some(Kind::Session))),
        (labels::MANAGED_BY, None, Ok(None)),
        (labels::MANAGED_BY, Some("Python-Sandbox"), Ok(None)),
        (labels::CREATED, None, Err("label `io.python-sandbox.created` is missing".into())),
        (labels::CREATED, Some("+5"), Err("is `+5`, expected a decimal number".into())),
        (labels::OWNER_PID, Some("99999999999"), Err("a decimal number in range".into())),
        (labels::KIND, Some("job"), Err("expected `run`, `session` or `prepare`".into())),
        (labels::SCHEMA, Some("2"), Err("label schema 2 is newer than the 1".into())),
        (labels::SCHEMA, Some("0"), Ok(Some(Kind::Session))),
    ];
    for (key, value, want) in cases {
        let got = with(key, value);
        match (&want, &got) {
            (Ok(w), Ok(g)) => assert_eq!(w, g, "{key}={value:?}"),
            (Err(w), Err(g)) => assert!(g.to_string().contains(w.as_str()), "{key}={value:?}: {g}"),
            _ => panic!("{key}={value:?}: want {want:?}, got {got:?}"),
        }
    }
}
