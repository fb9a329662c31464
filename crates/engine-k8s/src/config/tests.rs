//! `SandboxConfig::validate`: the defaults pass, and each bad value names its own field.

use std::time::Duration;

use crate::{Error, SandboxConfig};

#[test]
fn the_defaults_are_valid_and_match_deploy() {
    let config = SandboxConfig::default();
    config.validate().unwrap();
    assert_eq!(config.namespace, "python-sandbox");
    assert_eq!(config.image, format!("python-sandbox-runtime:{}-abi4", env!("CARGO_PKG_VERSION")));
    // The ABI in the tag is the image's: the Containerfile label `cargo xtask image` reads.
    let containerfile = include_str!("../../../../deploy/image/Containerfile");
    assert!(
        containerfile.contains("LABEL io.python-sandbox.image-abi=\"4\""),
        "bump DEFAULT_IMAGE with the ABI"
    );
    assert_eq!(config.pull_policy.as_str(), "IfNotPresent");
    assert_eq!(config.preview_domain, "127.0.0.1.nip.io");
    assert_eq!(config.ingress_namespace, "ingress-nginx");
}

#[test]
fn each_bad_value_is_refused_naming_its_field() {
    type Edit = fn(&mut SandboxConfig);
    let cases: &[(&str, Edit)] = &[
        ("namespace", |c| c.namespace = "Python_Sandbox".into()),
        ("namespace", |c| c.namespace = String::new()),
        ("ingress_namespace", |c| c.ingress_namespace = "-x".into()),
        ("workdir", |c| c.workdir = "workspace".into()),
        ("workdir", |c| c.workdir = "/tmp".into()),
        ("workdir", |c| c.workdir = "/home".into()),
        ("workdir", |c| c.workdir = "/".into()),
        ("workdir", |c| c.workdir = "/a/../tmp".into()),
        ("image", |c| c.image = "bad image".into()),
        ("image", |c| c.image = String::new()),
        ("preview_domain", |c| c.preview_domain = "Example.COM".into()),
        ("ingress_class", |c| c.ingress_class = Some("nginx class".into())),
        ("runtime_class", |c| c.runtime_class = Some("gVisor".into())),
        ("service_account", |c| c.service_account = Some("a/b".into())),
        ("cluster_cidrs", |c| c.cluster_cidrs = vec!["10.0.0.0/33".into()]),
        ("cluster_cidrs", |c| c.cluster_cidrs = vec!["fd00::".into()]),
        ("resources.cpu_limit", |c| c.resources.cpu_limit = "two".into()),
        ("resources.cpu_request", |c| c.resources.cpu_request = "3".into()),
        ("resources.memory_limit", |c| c.resources.memory_limit = "0".into()),
        ("resources.memory_request", |c| c.resources.memory_request = "-1Gi".into()),
        ("resources.ephemeral_storage_request", |c| {
            c.resources.ephemeral_storage_request = "5Gi".into()
        }),
        ("volume_sizes.home", |c| c.volume_sizes.home = "2GB".into()),
        ("volume_sizes.tmp", |c| c.volume_sizes.tmp = "0".into()),
        ("volume_sizes", |c| c.volume_sizes.workspace = "8Gi".into()),
        ("node_selector", |c| {
            c.node_selector.insert("bad key!".into(), "x".into());
        }),
        ("extra_labels", |c| {
            c.extra_labels.insert("team".into(), "a b".into());
        }),
        ("extra_labels", |c| {
            c.extra_labels.insert(reaper::labels::TTL.into(), "1".into());
        }),
        ("idle_ttl", |c| c.idle_ttl = Duration::ZERO),
        ("hard_lifetime", |c| c.hard_lifetime = Duration::ZERO),
        ("idle_ttl", |c| c.idle_ttl = c.hard_lifetime + Duration::from_secs(1)),
    ];
    let mut wrong = Vec::new();
    for (want, edit) in cases {
        let mut config = SandboxConfig::default();
        edit(&mut config);
        match config.validate() {
            Err(Error::Config { field, .. }) if field == *want => {}
            other => wrong.push(format!("{want}: {other:?}")),
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn good_unusual_values_pass() {
    let mut config = SandboxConfig { workdir: "/srv/work/".into(), ..SandboxConfig::default() };
    config.resources.cpu_request = "0.5".into();
    config.resources.memory_limit = "2.5Gi".into();
    config.cluster_cidrs = vec!["203.0.113.0/24".into(), "2001:db8::/32".into()];
    config.node_selector.insert("sandbox.gke.io/runtime".into(), "gvisor".into());
    config.extra_labels.insert("example.com/team".into(), "ml".into());
    config.ingress_class = None;
    config.validate().unwrap();
}

#[test]
fn the_message_names_the_field_and_has_a_hint() {
    let mut config = SandboxConfig::default();
    config.resources.cpu_limit = "lots".into();
    let text = config.validate().unwrap_err().to_string();
    insta::assert_snapshot!(text, @r"
    invalid sandbox config `resources.cpu_limit`: `lots` is not a Kubernetes quantity
    hint: write it as `500m`, `2`, `512Mi` or `4Gi`
    ");
}
