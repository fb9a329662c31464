//! The config file's pure parts: what parses, where each error points, and the path.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::{K8sSettings, parse, path_from};

/// The error as the CLI prints it, at `config.toml`.
fn error(text: &str) -> String {
    let (message, hint) = parse(text).expect_err("an error").located(Path::new("config.toml"));
    format!("{message}\nhint: {hint}")
}

fn value(settings: &K8sSettings, key: &str) -> Option<(String, usize, usize)> {
    settings.get(key).map(|s| (s.value.clone(), s.line, s.col))
}

#[test]
fn every_key_of_engine_k8s_parses_with_its_place() {
    let text = "# my cluster\n[engine.k8s]\nnamespace = \"team-a\"\nimage = \"registry.example/psbx:1\"\npreview-domain = \"preview.example.com\"\ningress-class = \"nginx\"\nruntime-class = \"gvisor\"\ncontext = \"kind-psbx\"\n";
    let k8s = parse(text).expect("valid").k8s.expect("[engine.k8s]");
    assert_eq!(value(&k8s, "namespace"), Some(("team-a".into(), 3, 13)));
    assert_eq!(value(&k8s, "preview_domain").map(|v| v.0), Some("preview.example.com".into()));
    assert_eq!(value(&k8s, "runtime-class").map(|v| v.0), Some("gvisor".into()));
    assert_eq!(value(&k8s, "context"), Some(("kind-psbx".into(), 8, 11)));
    assert_eq!(parse("").expect("empty").k8s, None, "no table: no cluster");
    assert_eq!(parse("[engine.k8s]\n").expect("empty table").k8s, Some(K8sSettings::default()));
    assert_eq!(
        parse("engine = { k8s = { namespace = \"x\" } }\n")
            .expect("inline")
            .k8s
            .and_then(|k| k.namespace)
            .map(|s| s.value),
        Some("x".into())
    );
}

#[test]
fn bad_files_are_errors_at_their_line_and_column_with_a_hint() {
    insta::assert_snapshot!(error("[engine.k8s]\nnamspace = \"x\"\n"), @r"
    config.toml:2:1: unknown key `namspace` in `[engine.k8s]`
    hint: did you mean `namespace`?
    ");
    insta::assert_snapshot!(error("[engine.k8s]\npool = \"3\"\n"), @r"
    config.toml:2:8: `pool` must be a whole number from 0 to 16
    hint: write e.g. `pool = 2`: how many ready sandboxes `session start` may claim
    ");
    insta::assert_snapshot!(error("[engine.docker]\npool = 99\n"), @r"
    config.toml:2:8: `pool` must be a whole number from 0 to 16
    hint: write e.g. `pool = 2`: how many ready sandboxes `session start` may claim
    ");
    insta::assert_snapshot!(error("[engine.podman]\npol = 2\n"), @r"
    config.toml:2:1: unknown key `pol` in `[engine.podman]`
    hint: did you mean `pool`?
    ");
    insta::assert_snapshot!(error("[engine.kubernetes]\n"), @r"
    config.toml:1:9: unknown key `kubernetes` in `[engine]`
    hint: the keys of `[engine]` are `k8s`, `docker`, `podman`
    ");
    insta::assert_snapshot!(error("[engines.k8s]\n"), @r"
    config.toml:1:2: unknown key `engines` in `the config file`
    hint: did you mean `engine`?
    ");
    insta::assert_snapshot!(error("[engine.k8s]\nnamespace = 3\n"), @r#"
    config.toml:2:13: `namespace` must be a string
    hint: write it quoted: `namespace = "..."`
    "#);
    insta::assert_snapshot!(error("[engine.k8s]\n\nimage = \" \"\n"), @r"
    config.toml:3:9: `image` is empty
    hint: remove the line to use the default, or give `image` a value
    ");
    insta::assert_snapshot!(error("[engine.k8s]\nnamespace = \"x\n"), @r#"
    config.toml:2:15: invalid TOML: invalid basic string, expected `"`
    hint: see https://toml.io
    "#);
    insta::assert_snapshot!(error("[net]\nlan = \"yes\"\n"), @r"
    config.toml:2:7: `lan` must be true or false
    hint: write `lan = true` to let net-on sandboxes reach private addresses (your LAN; never this machine), or remove the line
    ");
    insta::assert_snapshot!(error("[net]\nlna = true\n"), @r"
    config.toml:2:1: unknown key `lna` in `[net]`
    hint: the keys of `[net]` are `lan`
    ");
    insta::assert_snapshot!(error("[cache]\nmax-size = \"lots\"\n"), @r#"
    config.toml:2:12: `max-size` must be a size
    hint: write e.g. `max-size = "5GiB"` (units k, m, g, t; `0` keeps only what runs use)
    "#);
    insta::assert_snapshot!(error("[cache]\nmax_size = 1\n"), @r"
    config.toml:2:1: unknown key `max_size` in `[cache]`
    hint: did you mean `max-size`?
    ");
    insta::assert_snapshot!(error("engine = 3\n"), @r"
    config.toml:1:10: `engine` must be a table
    hint: write it as `[engine]`
    ");
}

/// The LAN is refused unless the file says `[net] lan = true`.
#[test]
fn the_lan_is_allowed_only_by_the_users_own_file() {
    assert_eq!(parse("").expect("empty").lan, sandbox_core::Lan::Refused);
    assert_eq!(parse("[net]\n").expect("empty table").lan, sandbox_core::Lan::Refused);
    assert_eq!(parse("[net]\nlan = false\n").expect("off").lan, sandbox_core::Lan::Refused);
    assert_eq!(parse("[net]\nlan = true\n").expect("on").lan, sandbox_core::Lan::Allowed);
    assert_eq!(parse("net = { lan = true }\n").expect("inline").lan, sandbox_core::Lan::Allowed);
}

/// The cache's cap: a size as people write it, or bytes; the default without the key.
#[test]
fn the_cache_cap_reads_sizes() {
    assert_eq!(parse("").expect("empty").cache_max_size, None);
    assert_eq!(parse("[cache]\nmax-size = \"2GiB\"\n").expect("2g").cache_max_size, Some(2 << 30));
    assert_eq!(parse("[cache]\nmax-size = 0\n").expect("0").cache_max_size, Some(0));
}

#[test]
fn the_path_follows_xdg_config_home_then_home() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| OsString::from(v))
    };
    let at = |p: Option<PathBuf>| p.map(|p| p.display().to_string());
    assert_eq!(
        at(path_from(&env(&[("XDG_CONFIG_HOME", "/x"), ("HOME", "/h")]))),
        Some("/x/python-sandbox/config.toml".into())
    );
    assert_eq!(
        at(path_from(&env(&[("XDG_CONFIG_HOME", "rel"), ("HOME", "/h")]))),
        Some("/h/.config/python-sandbox/config.toml".into()),
        "a relative XDG_CONFIG_HOME is ignored"
    );
    assert_eq!(at(path_from(&env(&[]))), None);
}

#[test]
fn pool_sizes_of_every_engine_table() {
    let text = "[engine.docker]\npool = 2\n[engine.podman]\npool = 0\n[engine.k8s]\npool = 3\nnamespace = \"x\"\n";
    let parsed = parse(text).expect("valid");
    assert_eq!(
        parsed.pools,
        [("docker".to_owned(), 2), ("podman".to_owned(), 0), ("k8s".to_owned(), 3)]
    );
    let k8s = parsed.k8s.expect("[engine.k8s]");
    assert_eq!(value(&k8s, "namespace").map(|v| v.0), Some("x".into()));
    assert_eq!(parse("[engine.docker]\npool = 1\n").expect("valid").k8s, None, "no cluster");
    let user = super::UserConfig { pools: parsed.pools, ..super::UserConfig::default() };
    assert_eq!((user.pool("docker"), user.pool("k8s"), user.pool("bwrap")), (2, 3, 0));
}
