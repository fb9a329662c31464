//! The prepared environment of `run --engine k8s`, pure: a content-keyed PersistentVolumeClaim
//! (`psbx-env-<key>`, the key a digest of the image, the interpreter constraint and the sorted
//! dependencies) that a prepare pod, with network, fills once with a venv (`uv venv`, `uv pip
//! install`, the uv cache in the prepare pod's own `/tmp`, so no package code runs where a
//! cache shared between environments is writable) and marks ready with an annotation; every
//! run pod mounts it read-only at [`ENV_DIR`]. A warm run reads the claim (one GET) and
//! resolves nothing.
//!
//! Why a claim and not an environment image layer: a layer needs a registry the nodes pull
//! from and a builder in the cluster (or on the host, pushing), neither of which a kind
//! cluster or a user's namespace is given; a claim needs only the default StorageClass. The
//! cost: a `ReadWriteOnce` claim is mounted by pods of one node at a time, so on a multi-node
//! cluster runs of one environment share its node (the scheduler sees to that).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, Pod,
    Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sha2::Digest as _;

use crate::SandboxConfig;

/// Where a run pod sees its environment (read-only), and a prepare pod fills it.
pub const ENV_DIR: &str = "/opt/python-sandbox/env";
/// The pod volume of the environment.
pub const ENV_VOLUME: &str = "env";
/// Every environment claim's name starts so (the admission policy allows no other claim).
pub const CLAIM_PREFIX: &str = "psbx-env-";
/// Set to `true` on the claim once its venv is complete.
pub const READY_ANNOTATION: &str = "io.python-sandbox.k8s/env-ready";
/// The storage an environment claim asks for.
pub const CLAIM_SIZE: &str = "4Gi";

/// The environment's key: what makes two environments interchangeable.
pub fn key(image: &str, requires_python: Option<&str>, dependencies: &[String]) -> String {
    let mut deps: Vec<&str> = dependencies.iter().map(|d| d.trim()).collect();
    deps.sort_unstable();
    deps.dedup();
    let mut hash = sha2::Sha256::new();
    for part in [image, requires_python.unwrap_or("")].into_iter().chain(deps) {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    hash.finalize().iter().take(12).map(|b| format!("{b:02x}")).collect()
}

/// The claim's name for `key`.
pub fn claim_name(key: &str) -> String {
    format!("{CLAIM_PREFIX}{key}")
}

/// The claim for `key`, with the reaper's `labels` (signed for its name by the caller).
pub fn claim(
    config: &SandboxConfig,
    key: &str,
    labels: &BTreeMap<String, String>,
) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name(key)),
            namespace: Some(config.namespace.clone()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(CLAIM_SIZE.to_owned()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

/// Whether a prepare pod completed `claim`.
pub fn is_ready(claim: &PersistentVolumeClaim) -> bool {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(READY_ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// Mounts the environment claim at [`ENV_DIR`] in the sandbox container of `pod`: read-write
/// for the prepare pod, read-only (in the volume and the mount) for runs.
pub fn mount(pod: &mut Pod, claim: &str, read_only: bool) {
    let Some(spec) = pod.spec.as_mut() else { return };
    spec.volumes.get_or_insert_with(Vec::new).push(Volume {
        name: ENV_VOLUME.to_owned(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.to_owned(),
            read_only: Some(read_only),
        }),
        ..Volume::default()
    });
    for container in &mut spec.containers {
        container.volume_mounts.get_or_insert_with(Vec::new).push(VolumeMount {
            name: ENV_VOLUME.to_owned(),
            mount_path: ENV_DIR.to_owned(),
            read_only: Some(read_only),
            ..VolumeMount::default()
        });
    }
}

/// The prepare pod's one command: the venv from the image's python, the dependencies into it
/// (`$@`), with the pod's network and a cache in its own `/tmp`.
pub const PREPARE: &str = r#"set -e
export UV_CACHE_DIR=/tmp/uv-cache
[ -x "$0/bin/python" ] || uv venv --quiet --python /usr/bin/python3 "$0"
if [ "$#" -gt 0 ]; then uv pip install --quiet --python "$0/bin/python" "$@"; fi"#;

/// The prepare exec's argv for `dependencies`.
pub fn prepare_argv(dependencies: &[String]) -> Vec<String> {
    let mut argv: Vec<String> = ["sh", "-c", PREPARE, ENV_DIR].map(str::to_owned).to_vec();
    argv.extend(dependencies.iter().cloned());
    argv
}

/// The environment's python, for the run.
pub fn python() -> String {
    format!("{ENV_DIR}/bin/python")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_the_content_not_the_spelling_order() {
        let a = key("img:1", Some(">=3.11"), &["b".to_owned(), "a".to_owned()]);
        assert_eq!(
            a,
            key("img:1", Some(">=3.11"), &["a".to_owned(), " b ".to_owned(), "a".to_owned()])
        );
        assert_ne!(a, key("img:2", Some(">=3.11"), &["a".to_owned(), "b".to_owned()]));
        assert_ne!(a, key("img:1", None, &["a".to_owned(), "b".to_owned()]));
        assert_ne!(
            key("img", None, &["ab".to_owned()]),
            key("img", None, &["a".to_owned(), "b".to_owned()])
        );
        assert_eq!(a.len(), 24);
        assert!(claim_name(&a).len() <= 63);
    }

    #[test]
    fn runs_mount_the_environment_read_only() {
        let config = SandboxConfig::default();
        let mut pod = crate::manifest::pod(
            &config,
            &crate::manifest::PodRequest {
                id: "abc".to_owned(),
                labels: BTreeMap::new(),
                ports: Vec::new(),
                env: Vec::new(),
            },
        )
        .expect("pod");
        mount(&mut pod, "psbx-env-1", true);
        let spec = pod.spec.as_ref().expect("spec");
        let volume = spec.volumes.as_ref().expect("volumes").last().expect("env");
        let source = volume.persistent_volume_claim.as_ref().expect("claim");
        assert_eq!((source.claim_name.as_str(), source.read_only), ("psbx-env-1", Some(true)));
        let mounted =
            spec.containers[0].volume_mounts.as_ref().expect("mounts").last().expect("env");
        assert_eq!((mounted.mount_path.as_str(), mounted.read_only), (ENV_DIR, Some(true)));
        assert!(crate::restricted::check(&pod).is_empty(), "{:?}", crate::restricted::check(&pod));
        insta::assert_json_snapshot!(claim(&config, "k", &BTreeMap::new()), @r#"
        {
          "apiVersion": "v1",
          "kind": "PersistentVolumeClaim",
          "metadata": {
            "labels": {},
            "name": "psbx-env-k",
            "namespace": "python-sandbox"
          },
          "spec": {
            "accessModes": [
              "ReadWriteOnce"
            ],
            "resources": {
              "requests": {
                "storage": "4Gi"
              }
            }
          }
        }
        "#);
    }
}
