//! The `pvc:` spelling, the paths a claim may take, and the pod it gives.

use super::*;

fn show(value: &str) -> String {
    match parse(value) {
        Ok(m) => format!("{value} => {} at {} ro={}", m.claim, m.path, m.read_only),
        Err(e) => format!("{value} => {e}"),
    }
}

#[test]
fn spellings() {
    let values = [
        "pvc:psbx-data-models:/models",
        "pvc:psbx-data-models:/models:ro",
        "pvc:psbx-data-models:/models/:rw",
        "pvc:psbx-data-models:/models:wo",
        "pvc:psbx-data-models",
        "pvc::/data",
        "pvc:Models:/data",
        "pvc:shared-cache:/data",
        "pvc:psbx-env-abc:/data",
        "pvc:psbx-data-x:data",
        "pvc:psbx-data-x:/",
        "pvc:psbx-data-x:/a/../etc",
    ];
    let shown: Vec<String> = values.iter().map(|v| show(v)).collect();
    insta::assert_snapshot!(shown.join("\n"));
    assert!(is_claim("pvc:x:/y") && !is_claim("./pvc:x:/y") && !is_claim("/data:ro"));
}

#[test]
fn paths_the_sandbox_uses_itself_are_refused() {
    let at =
        |path: &str| ClaimMount { claim: "psbx-data-a".into(), path: path.into(), read_only: true };
    let workdir = "/workspace";
    assert!(check_paths(&[at("/data"), at("/models")], workdir).is_ok());
    for taken in ["/workspace", "/workspace/x", "/tmp/cache", "/opt/python-sandbox/env"] {
        let error = check_paths(&[at(taken)], workdir).expect_err(taken).to_string();
        assert!(error.contains("overlaps") && error.contains("hint:"), "{error}");
    }
    let error = check_paths(&[at("/data"), at("/data/sub")], workdir).expect_err("nested");
    assert!(error.to_string().contains("overlaps the mount of `psbx-data-a`"), "{error}");
    assert!(check_paths(&[at("/workspace2")], workdir).is_ok(), "a sibling is not under it");
}

/// The run pod with one read-only and one read-write claim: the volume and every container's
/// mount agree on the mode, and the pod still passes Pod Security `restricted`.
#[test]
fn the_pod_mounts_each_claim_at_its_path() {
    let config = crate::SandboxConfig::default();
    let mut pod = crate::manifest::bare_pod(&config);
    let before = pod.spec.as_ref().and_then(|s| s.volumes.as_ref()).map_or(0, Vec::len);
    let mounts = [
        parse("pvc:psbx-data-models:/models:ro").expect("ro"),
        parse("pvc:psbx-data-out:/out").expect("rw"),
    ];
    mount(&mut pod, &mounts);
    let spec = pod.spec.as_ref().expect("spec");
    let volumes = &spec.volumes.as_ref().expect("volumes")[before..];
    let container = &spec.containers[0];
    let mounted: Vec<_> =
        container.volume_mounts.iter().flatten().filter(|m| m.name.starts_with("claim-")).collect();
    insta::assert_json_snapshot!(
        serde_json::json!({ "volumes": volumes, "volumeMounts": mounted })
    );
    assert!(crate::restricted::check(&pod).is_empty(), "{:?}", crate::restricted::check(&pod));
}
