//! Unit tests of the pure edit helpers: the minimal diff and the block placement.

use super::*;

#[test]
fn diff_is_minimal_and_on_char_boundaries() {
    assert_eq!(diff("abc", "abc"), None);
    assert_eq!(diff("abc", "abXc"), Some(TextEdit { range: 2..2, new_text: "X".to_owned() }));
    let e = diff("é", "è").unwrap();
    assert_eq!(e.range, 0..2);
    assert_eq!(e.new_text, "è");
}

#[test]
fn coding_lines() {
    assert!(is_coding_line("# -*- coding: utf-8 -*-"));
    assert!(is_coding_line("# vim: set fileencoding=latin-1 :"));
    assert!(!is_coding_line("# just a comment about coding"));
    assert!(!is_coding_line("x = 1"));
}

#[test]
fn sandbox_keys_parse_with_suggestions() {
    assert_eq!("net".parse::<SandboxKey>(), Ok(SandboxKey::Net));
    assert_eq!("tool.python-sandbox.publish".parse::<SandboxKey>(), Ok(SandboxKey::Publish));
    match "mount".parse::<SandboxKey>() {
        Err(EditError::UnknownKey { suggestion, .. }) => {
            assert_eq!(suggestion.as_deref(), Some("mounts"))
        }
        other => panic!("unexpected {other:?}"),
    }
}
