//! The objects the engine creates: yaml snapshots of each, a serde round trip of each through the
//! `k8s_openapi` types, one check per hardening field, the secret refusal, the `restricted`
//! checker on our pods, and deploy/policy's templates equal to the builders' output.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Toleration, Volume};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{
    PodEgress, PodOwner, PodRequest, denied_ranges, ingress, network_policy, pod, service,
};
use crate::{Error, SandboxConfig};

fn labels() -> BTreeMap<String, String> {
    let owner = reaper::Owner {
        user: "alice".into(),
        host: "laptop".into(),
        boot_id: "0c3f9a52-7d1e-4b8a-9f00-5e2b1c3d4e5f".into(),
        pid_ns: 4026531836,
        pid: 4242,
        start_time: 123456,
    };
    reaper::labels_for_session("example", &owner, 1_700_000_000, 1800).unwrap()
}

fn request() -> PodRequest {
    PodRequest { id: "example".into(), labels: labels(), ports: Vec::new(), env: Vec::new() }
}

fn owner() -> PodOwner {
    PodOwner { name: "psbx-example".into(), uid: "6f1c2a9e-1111-4c2d-8e3f-000000000001".into() }
}

/// The agent's program (14 KB of Python) and the compiled wall are checked in sandbox-core; the
/// snapshot shows their places.
macro_rules! pod_snapshot {
    ($name:expr, $pod:expr) => {
        insta::assert_yaml_snapshot!($name, $pod, {
            ".spec.containers[0].command[3]" => "[sandbox_core::agent::walled(AGENT_PY)]",
            ".spec.containers[0].command[4]" => "[sandbox_core::agent::wall_arg()]"
        })
    };
}

#[test]
fn pod_default() {
    let pod = pod(&SandboxConfig::default(), &request()).unwrap();
    let command = pod.spec.as_ref().unwrap().containers[0].command.as_ref().unwrap();
    assert_eq!(command[3], sandbox_core::agent::walled(sandbox_core::agent::AGENT_PY));
    assert!(command[3].starts_with(sandbox_core::agent::WALL_PY), "the wall comes first");
    assert_eq!(command[4], sandbox_core::agent::wall_arg());
    pod_snapshot!("pod_default", pod);
}

#[test]
fn the_wall_is_the_pods_localhost_profile_by_its_digest_when_configured() {
    let profile = |config: &SandboxConfig| {
        let pod = pod(config, &request()).unwrap();
        let spec = pod.spec.unwrap();
        let container = spec.containers[0].security_context.clone().unwrap().seccomp_profile;
        let whole = spec.security_context.unwrap().seccomp_profile;
        assert_eq!(container, whole, "the pod and its container name the same profile");
        let p = container.unwrap();
        (p.type_, p.localhost_profile)
    };
    assert_eq!(profile(&SandboxConfig::default()), ("RuntimeDefault".to_owned(), None));
    let walled =
        SandboxConfig { seccomp: crate::config::Seccomp::Wall, ..SandboxConfig::default() };
    let (kind, name) = profile(&walled);
    assert_eq!(kind, "Localhost");
    let name = name.unwrap();
    assert_eq!(name, sandbox_core::oci_seccomp::wall_profile_name());
    assert!(name.starts_with("python-sandbox/wall-") && name.ends_with(".json"), "{name}");
    // Restricted Pod Security allows a Localhost profile.
    let violations = crate::restricted::check(&pod(&walled, &request()).unwrap());
    assert!(violations.is_empty(), "{violations:?}");
}

#[test]
fn pod_with_runtime_class_and_scheduling() {
    let mut config = SandboxConfig {
        runtime_class: Some("gvisor".into()),
        service_account: Some("python-sandbox-engine".into()),
        ..SandboxConfig::default()
    };
    config.node_selector.insert("sandbox.gke.io/runtime".into(), "gvisor".into());
    config.tolerations = vec![Toleration {
        key: Some("sandbox.gke.io/runtime".into()),
        operator: Some("Equal".into()),
        value: Some("gvisor".into()),
        effect: Some("NoSchedule".into()),
        toleration_seconds: None,
    }];
    config.extra_labels.insert("example.com/team".into(), "ml".into());
    config.validate().unwrap();
    pod_snapshot!("pod_gvisor", pod(&config, &request()).unwrap());
}

#[test]
fn pod_with_published_ports_and_env() {
    let mut request = request();
    request.ports = vec![8000, 8080];
    request.env = vec![("DEBUG".into(), "1".into()), ("LANG".into(), "de_DE.UTF-8".into())];
    let pod = pod(&SandboxConfig::default(), &request).unwrap();
    let env = pod.spec.as_ref().unwrap().containers[0].env.clone().unwrap();
    // A later value of a name replaces the base one instead of duplicating it.
    let langs: Vec<_> = env.iter().filter(|e| e.name == "LANG").collect();
    assert_eq!(langs.len(), 1);
    assert_eq!(langs[0].value.as_deref(), Some("de_DE.UTF-8"));
    pod_snapshot!("pod_publish", pod);
}

#[test]
fn network_policies() {
    let config = SandboxConfig::default();
    insta::assert_yaml_snapshot!(
        "netpol_off_closed",
        network_policy(&config, "example", &labels(), &owner(), PodEgress::Off, &[])
    );
    insta::assert_yaml_snapshot!(
        "netpol_on_published",
        network_policy(&config, "example", &labels(), &owner(), PodEgress::On, &[8000])
    );
    // A list: the egress proxy's pods on its port, nothing else (no DNS either).
    insta::assert_yaml_snapshot!(
        "netpol_list_proxy_only",
        network_policy(&config, "example", &labels(), &owner(), PodEgress::Proxy, &[8000])
    );
    let mut config = config;
    config.cluster_cidrs = vec!["203.0.113.0/24".into(), "2001:db8::/32".into()];
    config.ingress_namespace = "ingress-system".into();
    insta::assert_yaml_snapshot!(
        "netpol_on_cluster_cidrs",
        network_policy(&config, "example", &labels(), &owner(), PodEgress::On, &[])
    );
    // The user's LAN allowed: the private ranges are reachable, never loopback, link-local,
    // the metadata addresses or the cluster's own ranges.
    config.lan = sandbox_core::Lan::Allowed;
    insta::assert_yaml_snapshot!(
        "netpol_on_lan_allowed",
        network_policy(&config, "example", &labels(), &owner(), PodEgress::On, &[])
    );
}

#[test]
fn the_denied_ranges_are_every_engines() {
    let (v4, v6) = denied_ranges(sandbox_core::Lan::Refused);
    assert_eq!(
        v4,
        [
            "0.0.0.0/8",
            "10.0.0.0/8",
            "100.64.0.0/10",
            "127.0.0.0/8",
            "169.254.0.0/16",
            "172.16.0.0/12",
            "192.168.0.0/16"
        ]
    );
    assert_eq!(v6, ["::1/128", "fc00::/7", "fe80::/10"]);
    for private in sandbox_core::PRIVATE {
        assert!(v4.contains(&private.to_string()) || v6.contains(&private.to_string()));
    }
}

#[test]
fn service_and_ingress() {
    let config = SandboxConfig::default();
    insta::assert_yaml_snapshot!("service", service(&config, "example", &labels(), &owner(), 8000));
    insta::assert_yaml_snapshot!(
        "ingress",
        ingress(&config, "example", &labels(), &owner(), 8000, "example")
    );
    assert_eq!(super::preview_host(&config, "example-8080"), "example-8080.127.0.0.1.nip.io");
}

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: &T) {
    let json = serde_json::to_string(value).unwrap();
    let back: T = serde_json::from_str(&json).unwrap();
    assert_eq!(&back, value, "{json}");
}

#[test]
fn every_object_round_trips_through_the_api_types() {
    let config = SandboxConfig::default();
    let mut request = request();
    request.ports = vec![8000];
    round_trip(&pod(&config, &request).unwrap());
    round_trip(&network_policy(&config, "example", &labels(), &owner(), PodEgress::Off, &[]));
    round_trip(&network_policy(&config, "example", &labels(), &owner(), PodEgress::On, &[8000]));
    round_trip(&service(&config, "example", &labels(), &owner(), 8000));
    round_trip(&ingress(&config, "example", &labels(), &owner(), 8000, "example"));
}

/// Every hardening field, read from the pod as the apiserver receives it (JSON), one row each.
#[test]
fn every_hardening_field_is_set() {
    let pod = pod(&SandboxConfig::default(), &request()).unwrap();
    let json = serde_json::to_value(&pod).unwrap();
    let c = "/spec/containers/0";
    let rows: Vec<(String, serde_json::Value)> = vec![
        ("/spec/securityContext/runAsNonRoot".into(), true.into()),
        ("/spec/securityContext/runAsUser".into(), 65534.into()),
        ("/spec/securityContext/runAsGroup".into(), 65534.into()),
        ("/spec/securityContext/fsGroup".into(), 65534.into()),
        ("/spec/securityContext/seccompProfile/type".into(), "RuntimeDefault".into()),
        ("/spec/automountServiceAccountToken".into(), false.into()),
        ("/spec/enableServiceLinks".into(), false.into()),
        ("/spec/hostNetwork".into(), false.into()),
        ("/spec/hostPID".into(), false.into()),
        ("/spec/hostIPC".into(), false.into()),
        ("/spec/shareProcessNamespace".into(), false.into()),
        ("/spec/restartPolicy".into(), "Never".into()),
        ("/spec/activeDeadlineSeconds".into(), (12 * 3600).into()),
        (format!("{c}/securityContext/runAsNonRoot"), true.into()),
        (format!("{c}/securityContext/runAsUser"), 65534.into()),
        (format!("{c}/securityContext/runAsGroup"), 65534.into()),
        (format!("{c}/securityContext/readOnlyRootFilesystem"), true.into()),
        (format!("{c}/securityContext/allowPrivilegeEscalation"), false.into()),
        (format!("{c}/securityContext/privileged"), false.into()),
        (format!("{c}/securityContext/capabilities/drop"), serde_json::json!(["ALL"])),
        (format!("{c}/securityContext/seccompProfile/type"), "RuntimeDefault".into()),
        (format!("{c}/imagePullPolicy"), "IfNotPresent".into()),
        (format!("{c}/resources/requests/cpu"), "250m".into()),
        (format!("{c}/resources/requests/memory"), "256Mi".into()),
        (format!("{c}/resources/requests/ephemeral-storage"), "256Mi".into()),
        (format!("{c}/resources/limits/cpu"), "2".into()),
        (format!("{c}/resources/limits/memory"), "2Gi".into()),
        (format!("{c}/resources/limits/ephemeral-storage"), "4Gi".into()),
        ("/spec/volumes/0/emptyDir/sizeLimit".into(), "1Gi".into()),
        ("/spec/volumes/1/emptyDir/sizeLimit".into(), "256Mi".into()),
        ("/spec/volumes/2/emptyDir/sizeLimit".into(), "2Gi".into()),
        (format!("{c}/volumeMounts/0/mountPath"), "/workspace".into()),
        (format!("{c}/volumeMounts/1/mountPath"), "/tmp".into()),
        (format!("{c}/volumeMounts/2/mountPath"), "/home/sandbox".into()),
        // The agent is pid 1 (`INIT`): no tini before it.
        (format!("{c}/command/0"), "python3".into()),
        (format!("{c}/command/5"), "1800".into()),
    ];
    let wrong: Vec<String> = rows
        .iter()
        .filter(|(pointer, want)| json.pointer(pointer) != Some(want))
        .map(|(pointer, want)| format!("{pointer}: want {want}, got {:?}", json.pointer(pointer)))
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
    // What must be absent: no capability added, no host path or port, no other volume kind.
    let spec = pod.spec.as_ref().unwrap();
    let container = &spec.containers[0];
    let caps = container.security_context.as_ref().unwrap().capabilities.as_ref().unwrap();
    assert_eq!(caps.add, None);
    assert!(container.ports.iter().flatten().all(|p| p.host_port.is_none()));
    for volume in spec.volumes.iter().flatten() {
        let only_empty_dir = Volume {
            name: volume.name.clone(),
            empty_dir: volume.empty_dir.clone(),
            ..Volume::default()
        };
        assert_eq!(volume, &only_empty_dir);
    }
    assert!(spec.runtime_class_name.is_none() && spec.service_account_name.is_none());
    assert!(spec.init_containers.is_none() && spec.ephemeral_containers.is_none());
}

#[test]
fn our_pods_pass_the_restricted_profile() {
    let mut config = SandboxConfig::default();
    assert_eq!(crate::restricted::check(&pod(&config, &request()).unwrap()), vec![]);
    config.runtime_class = Some("gvisor".into());
    let mut request = request();
    request.ports = vec![80, 8000];
    assert_eq!(crate::restricted::check(&pod(&config, &request).unwrap()), vec![]);
}

#[test]
fn a_secret_looking_env_name_is_refused_and_its_value_not_shown() {
    for name in ["GITHUB_TOKEN", "aws_secret_access_key", "DB_PASSWORD", "OPENAI_API_KEY"] {
        let mut request = request();
        request.env = vec![("HARMLESS".into(), "1".into()), (name.into(), "hunter2-value".into())];
        let err = pod(&SandboxConfig::default(), &request).unwrap_err();
        assert!(matches!(&err, Error::SecretInPodSpec { name: n } if n == name), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains(name) && text.contains("hint:") && !text.contains("hunter2"),
            "{text}"
        );
    }
}

#[test]
fn ids_that_cannot_be_names_are_refused() {
    let too_long = "a".repeat(super::MAX_ID_LEN + 1);
    for id in ["", "Upper", "under_score", "-lead", "trail-", "dot.ted", too_long.as_str()] {
        let mut request = request();
        request.id = id.to_owned();
        assert!(
            matches!(pod(&SandboxConfig::default(), &request), Err(Error::InvalidId { .. })),
            "{id}"
        );
    }
    let longest = "a".repeat(super::MAX_ID_LEN);
    assert_eq!(super::service_name(&longest, 65535).len(), 63);
}

#[test]
fn dependents_are_owned_by_the_pod_and_labelled() {
    let config = SandboxConfig::default();
    let objects = [
        network_policy(&config, "example", &labels(), &owner(), PodEgress::On, &[]).metadata,
        service(&config, "example", &labels(), &owner(), 8000).metadata,
        ingress(&config, "example", &labels(), &owner(), 8000, "example").metadata,
    ];
    for meta in objects {
        let refs = meta.owner_references.unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!((refs[0].kind.as_str(), refs[0].uid.as_str()), ("Pod", owner().uid.as_str()));
        let labels = meta.labels.unwrap();
        assert!(reaper::labels::is_managed(&labels));
        assert_eq!(labels[reaper::labels::ID], "example");
    }
}

/// deploy/policy's templates are what the builder makes for id `example` with port 8000, less
/// what is per pod (owner reference, the reaper's labels).
#[test]
fn the_network_policy_templates_match_the_builder() {
    for (file, net) in [
        ("policy/networkpolicy-net-off.yaml", PodEgress::Off),
        ("policy/networkpolicy-net-on.yaml", PodEgress::On),
        ("policy/networkpolicy-net-list.yaml", PodEgress::Proxy),
    ] {
        let template: NetworkPolicy = crate::rbac::tests::load(file);
        let mut built =
            network_policy(&SandboxConfig::default(), "example", &labels(), &owner(), net, &[8000]);
        built.metadata.owner_references = None;
        built.metadata.labels = None;
        assert_eq!(template, built, "{file}");
    }
}

#[test]
fn the_pod_deserializes_from_its_own_yaml() {
    let pod = pod(&SandboxConfig::default(), &request()).unwrap();
    let yaml = serde_norway::to_string(&pod).unwrap();
    let back: Pod = serde_norway::from_str(&yaml).unwrap();
    assert_eq!(back, pod);
}
