//! Property tests: the invariants that must hold for every input, not just the fixtures.

use pep723_meta::{
    Edit, LineEnding, LineIndex, PositionEncoding, SandboxKey, Status, apply_edits, edit, parse,
    parse_bytes,
};
use proptest::prelude::*;

use crate::support::assert_spans_ok;

/// Lines biased towards the interesting shapes: markers, near misses, TOML, code, odd whitespace.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("# /// script".to_owned()),
        Just("# ///".to_owned()),
        Just("# /// other".to_owned()),
        Just("# /// script ".to_owned()),
        Just("#/// script".to_owned()),
        Just("#".to_owned()),
        Just("# ".to_owned()),
        Just("# dependencies = [\"rich\", \"anyio\"]".to_owned()),
        Just("# dependencies = [".to_owned()),
        Just("#   \"httpx\",".to_owned()),
        Just("# ]".to_owned()),
        Just("# requires-python = \">=3.11\"".to_owned()),
        Just("# [tool.python-sandbox]".to_owned()),
        Just("# net = \"off\"".to_owned()),
        Just("# publish = [8000, 8000]".to_owned()),
        Just("# s = \"\"\"".to_owned()),
        Just("# \"\"\"".to_owned()),
        Just("#   ".to_owned()),
        Just(String::new()),
        Just("import sys".to_owned()),
        Just("#!/usr/bin/env python".to_owned()),
        Just("# -*- coding: latin-1 -*-".to_owned()),
        "[# a-z=\"\\[\\]{},.:/\u{2028}\u{85}\u{feff}é😀\t\\\\]{0,24}",
        ".{0,12}",
    ]
}

fn eol() -> impl Strategy<Value = &'static str> {
    prop_oneof![4 => Just("\n"), 1 => Just("\r\n"), 1 => Just("\r")]
}

fn script() -> impl Strategy<Value = String> {
    (any::<bool>(), prop::collection::vec((line(), eol()), 0..24), any::<bool>()).prop_map(
        |(bom, lines, final_eol)| {
            let mut s = String::new();
            if bom {
                s.push('\u{feff}');
            }
            let n = lines.len();
            for (i, (l, e)) in lines.into_iter().enumerate() {
                s.push_str(&l);
                if i + 1 < n || final_eol {
                    s.push_str(e);
                }
            }
            s
        },
    )
}

fn an_edit() -> impl Strategy<Value = Edit> {
    let req = prop_oneof![
        Just("rich"),
        Just("anyio>=4"),
        Just("httpx[http2]"),
        Just("Rich<14"),
        Just("zstd")
    ];
    let key = prop::sample::select(SandboxKey::ALL.to_vec());
    let value = prop_oneof![
        Just("off"),
        Just("on"),
        Just("[8000]"),
        Just("30"),
        Just("./data:ro"),
        Just("[\"HOME\", \"A=1\"]"),
        Just("pytest"),
    ];
    prop_oneof![
        Just(Edit::Init),
        req.clone().prop_map(|r| Edit::AddDependency(r.to_owned())),
        req.clone().prop_map(|r| Edit::RemoveDependency(r.to_owned())),
        prop_oneof![Just(">=3.11"), Just("~=3.12")]
            .prop_map(|s| Edit::SetRequiresPython(s.to_owned())),
        Just(Edit::UnsetRequiresPython),
        req.clone().prop_map(|r| Edit::AddSandboxDependency(r.to_owned())),
        req.prop_map(|r| Edit::RemoveSandboxDependency(r.to_owned())),
        (key.clone(), value).prop_map(|(key, v)| Edit::SetSandbox { key, value: v.to_owned() }),
        key.prop_map(|key| Edit::UnsetSandbox { key }),
    ]
}

/// Which key an edit touches, and whether it removes.
fn slot(e: &Edit) -> Option<(&'static str, bool)> {
    match e {
        Edit::Init => None,
        Edit::AddDependency(_) => Some(("dependencies", false)),
        Edit::RemoveDependency(_) => Some(("dependencies", true)),
        Edit::SetRequiresPython(_) => Some(("requires-python", false)),
        Edit::UnsetRequiresPython => Some(("requires-python", true)),
        Edit::AddSandboxDependency(_) => Some(("dependencies-sandbox", false)),
        Edit::RemoveSandboxDependency(_) => Some(("dependencies-sandbox", true)),
        Edit::SetSandbox { key: SandboxKey::Dependencies, .. } => {
            Some(("dependencies-sandbox", false))
        }
        Edit::UnsetSandbox { key: SandboxKey::Dependencies } => {
            Some(("dependencies-sandbox", true))
        }
        Edit::SetSandbox { key, .. } => Some((key.as_str(), false)),
        Edit::UnsetSandbox { key } => Some((key.as_str(), true)),
        _ => None,
    }
}

fn conflicting(edits: &[Edit]) -> bool {
    let slots: Vec<(&str, bool)> = edits.iter().filter_map(slot).collect();
    let sandbox = |s: &str| s != "dependencies" && s != "requires-python";
    let same_slot = slots.iter().any(|(s, r)| *r && slots.iter().any(|(t, u)| s == t && !*u));
    // Removing the last sandbox key drops the table; re-creating it moves the other keys.
    let table =
        slots.iter().any(|(s, r)| *r && sandbox(s)) && slots.iter().any(|(s, r)| !*r && sandbox(s));
    same_slot || table
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn parse_never_panics_and_spans_are_valid(source in script()) {
        let parsed = parse(&source);
        assert_spans_ok(&source, &parsed);
        prop_assert_eq!(parsed.metadata.is_some(), parsed.status == Status::Ok);
        let unedited = edit(&source, &[]).expect("no-op edit");
        prop_assert_eq!(unedited.text, source);
    }

    #[test]
    fn bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let parsed = parse_bytes(&bytes);
        for d in &parsed.diagnostics {
            prop_assert!(d.span.start <= d.span.end && d.span.end <= bytes.len());
        }
    }

    #[test]
    fn edits_touch_only_the_block_and_are_idempotent(
        source in script(),
        edits in prop::collection::vec(an_edit(), 1..5),
    ) {
        let Ok(outcome) = edit(&source, &edits) else { return Ok(()) };
        prop_assert_eq!(apply_edits(&source, &outcome.edits), outcome.text.clone());
        // Re-running a sequence is a no-op unless it both removes and sets the same slot (then the
        // slot moves, by design). Each single edit is always idempotent.
        if !conflicting(&edits) {
            let again = edit(&outcome.text, &edits).expect("re-edit of an edited text");
            prop_assert_eq!(&again.text, &outcome.text, "not idempotent");
        }
        for e in &edits {
            if let Ok(once) = edit(&outcome.text, std::slice::from_ref(e)) {
                let twice = edit(&once.text, std::slice::from_ref(e)).expect("re-edit");
                prop_assert_eq!(&twice.text, &once.text, "{:?} not idempotent", e);
            }
        }
        prop_assert_eq!(outcome.text.starts_with('\u{feff}'), source.starts_with('\u{feff}'));
        if source.contains(['\n', '\r']) {
            prop_assert_eq!(LineEnding::detect(&outcome.text), LineEnding::detect(&source));
        }
        let before = parse(&source);
        let after = parse(&outcome.text);
        let new_block = after.block.as_ref();
        if outcome.edits.is_empty() {
            prop_assert_eq!(&outcome.text, &source);
        } else {
            prop_assert!(new_block.is_some(), "edit left no block");
        }
        if let (Some(old), Some(new)) = (before.block.as_ref(), new_block) {
            prop_assert_eq!(&source[..old.span.start], &outcome.text[..new.span.start]);
            prop_assert_eq!(&source[old.span.end..], &outcome.text[new.span.end..]);
        }
        // The edit is reflected in what the block now says.
        if after.status == Status::Ok
            && let Some(meta) = &after.metadata
        {
            let last = |pred: &dyn Fn(&Edit) -> bool| edits.iter().rev().find(|e| pred(e));
            match last(&|e| matches!(e, Edit::SetRequiresPython(_) | Edit::UnsetRequiresPython)) {
                Some(Edit::SetRequiresPython(s)) => {
                    prop_assert_eq!(meta.requires_python.as_ref().map(|r| r.value.as_str()), Some(s.as_str()));
                }
                Some(_) => prop_assert!(meta.requires_python.is_none()),
                None => {}
            }
            let net = meta.sandbox.as_ref().and_then(|s| s.net.as_ref()).map(|n| n.value.as_str());
            match last(&|e| {
                matches!(e, Edit::SetSandbox { key: SandboxKey::Net, .. } | Edit::UnsetSandbox { key: SandboxKey::Net })
            }) {
                Some(Edit::SetSandbox { value, .. }) => prop_assert_eq!(net, Some(value.as_str())),
                Some(_) => prop_assert_eq!(net, None),
                None => {}
            }
            for e in &edits {
                if let Edit::AddDependency(r) = e
                    && !edits.iter().any(|o| matches!(o, Edit::RemoveDependency(_)))
                {
                    let name = r.split(['<', '>', '=', '[', '~']).next().unwrap_or(r).to_ascii_lowercase();
                    prop_assert!(
                        meta.dependencies.iter().any(|d| d.value.to_ascii_lowercase().starts_with(&name)),
                        "{} missing from {:?}", r, meta.dependencies
                    );
                }
            }
        }
    }
}

/// The obvious implementation: walk the characters from the start.
fn naive_position(text: &str, offset: usize, utf16: bool) -> (u32, u32) {
    let (mut line, mut col) = (0u32, 0u32);
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if i >= offset {
            break;
        }
        match c {
            '\r' if chars.peek().is_some_and(|(_, n)| *n == '\n') => {
                if chars.peek().is_some_and(|(j, _)| *j >= offset) {
                    break;
                }
                chars.next();
                line += 1;
                col = 0;
            }
            '\n' | '\r' => {
                line += 1;
                col = 0;
            }
            c => col += if utf16 { c.len_utf16() as u32 } else { c.len_utf8() as u32 },
        }
    }
    (line, col)
}

proptest! {
    #[test]
    fn line_index_matches_a_naive_walk(text in "[a\r\né😀\u{2028}\t]{0,40}") {
        let index = LineIndex::new(&text);
        for (offset, _) in text.char_indices().chain([(text.len(), ' ')]) {
            for (enc, utf16) in [(PositionEncoding::Utf8, false), (PositionEncoding::Utf16, true)] {
                let p = index.position(offset, enc);
                prop_assert_eq!((p.line, p.character), naive_position(&text, offset, utf16), "offset {}", offset);
                let back = index.offset(p, enc).expect("line exists");
                let in_break = text[..offset].ends_with('\r') && text[offset..].starts_with('\n');
                prop_assert!(back == offset || in_break, "{} -> {:?} -> {}", offset, p, back);
            }
        }
    }
}
