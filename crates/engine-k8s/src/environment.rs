//! The prepared environment of `run --engine k8s`, pure: a content-keyed PersistentVolumeClaim
//! (`psbx-env-<key>`, the key a digest of the image, the interpreter constraint and the sorted
//! dependencies) that a prepare pod, with network, fills once with a venv (`uv venv`, `uv pip
//! install`, the uv cache in the prepare pod's own home, so no package code runs where a
//! cache shared between environments is writable) and marks ready with an annotation; every
//! run pod mounts it read-only at [`ENV_DIR`]. A warm run reads the claim (one GET) and
//! resolves nothing.
//!
//! Why a claim and not an environment image layer: a layer needs a registry the nodes pull
//! from and a builder in the cluster (or on the host, pushing), neither of which a kind
//! cluster or a user's namespace is given; a claim needs only the default StorageClass. The
//! cost: a `ReadWriteOnce` claim is mounted by pods of one node at a time, so on a multi-node
//! cluster runs of one environment share its node (the scheduler sees to that).
//!
//! The create of the claim is the lock ([`state`]): the run whose create succeeds prepares,
//! stamping [`PREPARING_ANNOTATION`]; one that gets 409 waits (a watch on the claim) for the
//! ready annotation. A prepare not finished within [`PREPARE_TIMEOUT`] (its CLI killed) is
//! stale: the next run takes it over with a resourceVersion precondition, so only one does. A
//! failed prepare deletes its claim. [`LAST_USED_ANNOTATION`] is refreshed at most every
//! [`LAST_USED_REFRESH`] (a warm run within that is one GET); the sweep deletes claims unused
//! for [`UNUSED_AFTER`] and stale prepares ([`sweep_reason`]).

use std::collections::BTreeMap;
use std::time::Duration;

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
/// Unix seconds at which the prepare holding the claim began.
pub const PREPARING_ANNOTATION: &str = "io.python-sandbox.k8s/env-preparing-since";
/// Unix seconds at which a run last used the claim (refreshed every [`LAST_USED_REFRESH`]).
pub const LAST_USED_ANNOTATION: &str = "io.python-sandbox.k8s/env-last-used";
/// A prepare older than this never finished: it is taken over, or swept.
pub const PREPARE_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// How stale the last-used stamp may get before a run refreshes it (one PATCH).
pub const LAST_USED_REFRESH: Duration = Duration::from_secs(60 * 60);
/// A ready claim no run used for this long is swept.
pub const UNUSED_AFTER: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// What a read claim means to a run at some moment ([`state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimState {
    /// Prepared; `refresh` when its last-used stamp is due.
    Ready {
        /// Whether to refresh [`LAST_USED_ANNOTATION`].
        refresh: bool,
    },
    /// Another run prepares it, for at most this much longer before it is stale.
    Preparing {
        /// Until [`PREPARE_TIMEOUT`] since the prepare began.
        left: Duration,
    },
    /// A prepare that never finished: to be taken over.
    Stale,
}

fn stamp(claim: &PersistentVolumeClaim, annotation: &str) -> Option<u64> {
    let stamped = claim.metadata.annotations.as_ref().and_then(|a| a.get(annotation));
    stamped.and_then(|v| v.parse().ok()).or_else(|| {
        let created = claim.metadata.creation_timestamp.as_ref()?;
        u64::try_from(created.0.as_second()).ok()
    })
}

/// Pure: what `claim` means at `now` (unix seconds); a stamp that is missing or unreadable
/// counts from the claim's creation.
pub fn state(claim: &PersistentVolumeClaim, now: u64) -> ClaimState {
    if is_ready(claim) {
        let used = stamp(claim, LAST_USED_ANNOTATION).unwrap_or(0);
        return ClaimState::Ready {
            refresh: now.saturating_sub(used) >= LAST_USED_REFRESH.as_secs(),
        };
    }
    let since = stamp(claim, PREPARING_ANNOTATION).unwrap_or(0);
    match PREPARE_TIMEOUT.as_secs().checked_sub(now.saturating_sub(since)) {
        Some(left) if left > 0 => ClaimState::Preparing { left: Duration::from_secs(left) },
        _ => ClaimState::Stale,
    }
}

/// Pure: why the sweep deletes `claim` at `now`, if it does: unused for [`UNUSED_AFTER`], or a
/// prepare that never finished. (A claim still mounted by a pod is only marked for deletion:
/// the `kubernetes.io/pvc-protection` finalizer keeps it until the pod is gone.)
pub fn sweep_reason(claim: &PersistentVolumeClaim, now: u64) -> Option<String> {
    match state(claim, now) {
        ClaimState::Ready { .. } => {
            let used = stamp(claim, LAST_USED_ANNOTATION).unwrap_or(0);
            let days = UNUSED_AFTER.as_secs() / 86_400;
            (now.saturating_sub(used) >= UNUSED_AFTER.as_secs())
                .then(|| format!("unused for {days} days"))
        }
        ClaimState::Preparing { .. } => None,
        ClaimState::Stale => Some("its prepare never finished".to_owned()),
    }
}

/// The annotations that make a claim ready, used at `now`.
pub fn ready_annotations(now: u64) -> serde_json::Value {
    serde_json::json!({ READY_ANNOTATION: "true", LAST_USED_ANNOTATION: now.to_string() })
}

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

/// The claim for `key`, with the reaper's `labels` (signed for its name by the caller), its
/// prepare beginning at `now`.
pub fn claim(
    config: &SandboxConfig,
    key: &str,
    labels: &BTreeMap<String, String>,
    now: u64,
) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name(key)),
            namespace: Some(config.namespace.clone()),
            labels: Some(labels.clone()),
            annotations: Some(BTreeMap::from([(PREPARING_ANNOTATION.to_owned(), now.to_string())])),
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
/// (`$@`), with the pod's network and a cache in its own home: a disk `emptyDir`, where large
/// wheels fit (its `/tmp` is a tmpfs of the run's `--tmpfs-size`, counted against memory).
pub const PREPARE: &str = r#"set -e
export UV_CACHE_DIR=/home/sandbox/.cache/uv
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
    fn the_prepare_cache_is_on_the_disk_backed_home() {
        let cache = format!("UV_CACHE_DIR={}/", sandbox_core::SANDBOX_HOME);
        assert!(PREPARE.contains(&cache), "{PREPARE}");
    }

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
        let mut pod = crate::manifest::bare_pod(&config);
        mount(&mut pod, "psbx-env-1", true);
        let spec = pod.spec.as_ref().expect("spec");
        let volume = spec.volumes.as_ref().expect("volumes").last().expect("env");
        let source = volume.persistent_volume_claim.as_ref().expect("claim");
        assert_eq!((source.claim_name.as_str(), source.read_only), ("psbx-env-1", Some(true)));
        let mounted =
            spec.containers[0].volume_mounts.as_ref().expect("mounts").last().expect("env");
        assert_eq!((mounted.mount_path.as_str(), mounted.read_only), (ENV_DIR, Some(true)));
        assert!(crate::restricted::check(&pod).is_empty(), "{:?}", crate::restricted::check(&pod));
        insta::assert_json_snapshot!(claim(&config, "k", &BTreeMap::new(), 1_700_000_000), @r#"
        {
          "apiVersion": "v1",
          "kind": "PersistentVolumeClaim",
          "metadata": {
            "annotations": {
              "io.python-sandbox.k8s/env-preparing-since": "1700000000"
            },
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

    fn annotated(pairs: &[(&str, &str)]) -> PersistentVolumeClaim {
        let mut claim = claim(&SandboxConfig::default(), "k", &BTreeMap::new(), 0);
        claim.metadata.annotations =
            Some(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
        claim
    }

    #[test]
    fn a_prepare_is_waited_for_until_stale_and_unused_claims_are_swept() {
        let hour = 3600;
        let preparing = annotated(&[(PREPARING_ANNOTATION, "1000")]);
        assert_eq!(
            state(&preparing, 1060),
            ClaimState::Preparing { left: Duration::from_secs(540) }
        );
        assert_eq!(sweep_reason(&preparing, 1060), None, "a live prepare stays");
        assert_eq!(state(&preparing, 1000 + 600), ClaimState::Stale);
        assert_eq!(sweep_reason(&preparing, 1600).as_deref(), Some("its prepare never finished"));
        assert_eq!(state(&annotated(&[]), 600), ClaimState::Stale, "no stamp, no creation time");

        let ready = annotated(&[(READY_ANNOTATION, "true"), (LAST_USED_ANNOTATION, "10000")]);
        assert_eq!(state(&ready, 10000 + hour - 1), ClaimState::Ready { refresh: false });
        assert_eq!(state(&ready, 10000 + hour), ClaimState::Ready { refresh: true });
        assert_eq!(sweep_reason(&ready, 10000 + 7 * 24 * hour - 1), None);
        assert_eq!(
            sweep_reason(&ready, 10000 + 7 * 24 * hour).as_deref(),
            Some("unused for 7 days")
        );
    }
}
