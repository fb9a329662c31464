//! Fuzz target: any bytes through `parse_bytes`, and valid UTF-8 through every parse invariant.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let parsed = pep723_meta::parse_bytes(data);
    assert!(
        parsed.diagnostics.iter().all(|d| d.span.start <= d.span.end && d.span.end <= data.len())
    );
    if let Ok(text) = std::str::from_utf8(data) {
        assert_eq!(pep723_meta_fuzz::check_parse(text), parsed);
    }
});
