//! Conversions from byte spans to LSP ranges and offsets, and the JSON shape clients see.

use pep723_meta::{EditError, TomlValue};

use super::{Converter, Encoding, JsToml, LspRange, Offsets, Position, edit_error};

fn utf16_slice(text: &str, o: Offsets) -> String {
    let units: Vec<u16> = text.encode_utf16().collect();
    String::from_utf16_lossy(&units[o.start as usize..o.end as usize])
}

#[test]
fn utf16_offsets_count_surrogate_pairs_and_bmp_chars() {
    // 😀 is 4 bytes / 2 units, é 2 bytes / 1 unit, 中 3 bytes / 1 unit.
    let text = "a😀é中\nx😀y";
    let conv = Converter::new(text, Encoding::Utf16);
    let y = text.find('y').unwrap();
    assert_eq!(conv.offset(y), 9);
    assert_eq!(
        conv.range(&(y..y + 1)),
        LspRange {
            start: Position { line: 1, character: 3 },
            end: Position { line: 1, character: 4 },
        }
    );
    assert_eq!(utf16_slice(text, conv.offsets(&(y..y + 1))), "y");
    // Every char boundary round-trips through the JS string.
    for (i, c) in text.char_indices() {
        assert_eq!(utf16_slice(text, conv.offsets(&(i..i + c.len_utf8()))), c.to_string());
    }
}

#[test]
fn offsets_inside_a_character_round_down_and_past_the_end_clamp() {
    let text = "😀a";
    let conv = Converter::new(text, Encoding::Utf16);
    assert_eq!(conv.offset(2), 0);
    assert_eq!(conv.offset(4), 2);
    assert_eq!(conv.offset(99), 3);
    let utf8 = Converter::new(text, Encoding::Utf8);
    assert_eq!(utf8.offset(2), 0);
    assert_eq!(utf8.offset(5), 5);
}

#[test]
fn a_reversed_span_becomes_empty_instead_of_negative() {
    let conv = Converter::new("abc", Encoding::Utf16);
    let reversed = std::ops::Range { start: 2, end: 1 };
    assert_eq!(conv.offsets(&reversed), Offsets { start: 2, end: 2 });
}

#[test]
fn toml_values_serialize_like_json_parse_would_read_them() {
    let v = JsToml(TomlValue::Table(vec![
        ("safe".into(), TomlValue::Integer(9_007_199_254_740_991)),
        ("big".into(), TomlValue::Integer(i64::MAX)),
        ("nan".into(), TomlValue::Float(f64::NAN)),
        ("when".into(), TomlValue::Datetime("1979-05-27".into())),
        (
            "list".into(),
            TomlValue::Array(vec![TomlValue::Boolean(true), TomlValue::String("x".into())]),
        ),
    ]));
    insta::assert_snapshot!(serde_json::to_string(&v).unwrap(), @r#"{"safe":9007199254740991,"big":9.223372036854776e+18,"nan":null,"when":"1979-05-27","list":[true,"x"]}"#);
}

#[test]
fn edit_errors_get_stable_codes_and_split_hints() {
    let e = edit_error(&EditError::UnknownKey {
        key: "mount".into(),
        suggestion: Some("mounts".into()),
    });
    insta::assert_json_snapshot!(e, @r#"
    {
      "code": "edit/unknown-key",
      "message": "unknown sandbox key `mount`",
      "hint": "did you mean `mounts`?"
    }
    "#);
    let e = edit_error(&EditError::Unrepresentable);
    assert_eq!(e.code, "edit/unrepresentable");
    assert_eq!(e.hint, None);
}
