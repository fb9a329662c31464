//! The vendored pep508_rs (see `vendor/README.md`) replaced the one `regex` it used with a
//! hand-written matcher: it must expand exactly what the original pattern expands.

use std::borrow::Cow;

use proptest::prelude::*;

/// pep508_rs 0.9.2's `expand_env_vars`, as published (its `Lazy` statics inlined).
fn original(s: &str) -> Cow<'_, str> {
    let re =
        regex::Regex::new(r"(?P<var>\$\{(?P<name>[A-Z0-9_]+)})").expect("the original pattern");
    re.replace_all(s, |caps: &regex::Captures<'_>| {
        let name = caps.name("name").map_or("", |m| m.as_str());
        std::env::var(name).unwrap_or_else(|_| match name {
            "PROJECT_ROOT" => {
                std::env::current_dir().map(|p| p.to_string_lossy().to_string()).unwrap_or_default()
            }
            _ => caps["var"].to_owned(),
        })
    })
}

fn text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("${".to_owned()),
        Just("}".to_owned()),
        Just("$".to_owned()),
        Just("{".to_owned()),
        Just("PATH".to_owned()),
        Just("P7_".to_owned()),
        Just("H9_UNSET_VAR".to_owned()),
        Just("a".to_owned()),
        Just("é中".to_owned()),
        Just("/".to_owned()),
        "[A-Z0-9_${}a-z/é]{0,4}",
    ];
    prop::collection::vec(piece, 0..16).prop_map(|p| p.concat())
}

fn assert_same(s: &str) {
    let ours = pep508_rs::expand_env_vars(s);
    let theirs = original(s);
    assert_eq!(ours, theirs, "input {s:?}");
    assert_eq!(
        matches!(ours, Cow::Borrowed(_)),
        matches!(theirs, Cow::Borrowed(_)),
        "borrowed-ness for {s:?}"
    );
}

#[test]
fn expands_like_the_original_pattern() {
    for s in [
        "",
        "plain",
        "${PATH}",
        "a${PATH}b${H9_UNSET_VAR}c",
        "${path}",
        "${}",
        "${PATH",
        "$${PATH}}",
        "${${PATH}}",
        "${P-A}",
        "${PATH}${PATH}",
        "é${PATH}中",
        "$",
        "${",
        "${PROJECT_ROOT}/x",
    ] {
        assert_same(s);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn expands_like_the_original_pattern_on_arbitrary_text(s in text()) {
        assert_same(&s);
    }
}
