//! Arbitrary text, biased towards PEP 723 fragments and multi-unit characters: the binding never
//! panics and every range stays consistent with its offsets.

use proptest::prelude::*;

use pep723_meta_wasm::api;
use pep723_meta_wasm::convert::{Encoding, Options};

use crate::support::assert_diagnostic_consistent;

fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("# /// script\n".to_owned()),
        Just("# ///\n".to_owned()),
        Just("# dependencies = [\"requests>=\", \"rich\"]\n".to_owned()),
        Just("# requires-python = \">=3.11\"\n".to_owned()),
        Just("# [tool.python-sandbox]\n# net = \"maybe\"\n# mount = [\"/d\"]\n".to_owned()),
        Just("#\r\n".to_owned()),
        Just("\r".to_owned()),
        Just("😀é中\u{2028}\u{feff}".to_owned()),
        Just("# 𝔘 = \"𝔘\"\n".to_owned()),
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn never_panics_and_ranges_match_offsets(parts in prop::collection::vec(fragment(), 0..12)) {
        let text = parts.concat();
        for encoding in [Encoding::Utf16, Encoding::Utf8] {
            let parsed = api::parse(&text, Options { position_encoding: encoding });
            if encoding == Encoding::Utf16 {
                for d in &parsed.diagnostics {
                    assert_diagnostic_consistent(&text, d);
                }
            }
        }
    }
}
