//! The JSON shape the CLI and the WASM binding print (feature `serde`): lower-case enums, byte
//! spans as `{start, end}`, and the block's TOML even when validation failed.

use pep723_meta::{Status, parse};

fn json(source: &str) -> String {
    serde_json::to_string_pretty(&parse(source)).expect("serializable")
}

#[test]
fn parse_result_as_json() {
    let source = "# /// script\n# dependencies = [\"rich\"]\n#\n# [tool.python-sandbox]\n# net = \"off\"\n# mounts = [\"./out:rw\"]\n# ///\n";
    insta::assert_snapshot!(json(source));
}

#[test]
fn toml_json_survives_validation_errors() {
    let parsed = parse("# /// script\n# [tool.python-sandbox]\n# net = true\n# ///\n");
    assert_eq!(parsed.status, Status::Invalid);
    assert!(parsed.metadata.is_none());
    let toml = parsed.toml_json().expect("toml parsed");
    assert_eq!(toml, serde_json::json!({"tool": {"python-sandbox": {"net": true}}}));
    insta::assert_snapshot!(
        serde_json::to_string_pretty(&parsed.diagnostics).expect("serializable")
    );
}
