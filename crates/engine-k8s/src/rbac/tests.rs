//! deploy/: every file parses, typed objects deserialize into `k8s_openapi` types, and the Role
//! grants exactly [`REQUIRED_PERMISSIONS`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};

use super::{REQUIRED_PERMISSIONS, api_group, is_required};

pub(crate) fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

pub(crate) fn load<T: serde::de::DeserializeOwned>(rel: &str) -> T {
    let path = deploy_dir().join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every `.yaml` under deploy/ except the image's directory.
fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

#[test]
fn every_deploy_yaml_parses_and_has_a_kind() {
    let mut files = Vec::new();
    yaml_files(&deploy_dir(), &mut files);
    assert!(files.len() >= 10, "{files:?}");
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        for doc in serde_norway::Deserializer::from_str(&text) {
            let value = <serde_norway::Value as serde::Deserialize>::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(value.get("kind").is_some(), "{}: no kind", path.display());
            assert!(value.get("apiVersion").is_some(), "{}: no apiVersion", path.display());
        }
    }
}

#[test]
fn the_typed_objects_deserialize() {
    let ns: Namespace = load("kind/namespace.yaml");
    let labels = ns.metadata.labels.unwrap();
    assert_eq!(labels["pod-security.kubernetes.io/enforce"], "restricted");
    assert_eq!(ns.metadata.name.as_deref(), Some(crate::config::DEFAULT_NAMESPACE));
    let sa: ServiceAccount = load("rbac/serviceaccount.yaml");
    let binding: RoleBinding = load("rbac/rolebinding.yaml");
    let role: Role = load("rbac/role.yaml");
    assert_eq!(binding.role_ref.name, role.metadata.name.unwrap());
    let subject = &binding.subjects.unwrap()[0];
    assert_eq!(Some(&subject.name), sa.metadata.name.as_ref());
    let rc: RuntimeClass = load("gvisor/runtimeclass.yaml");
    assert_eq!((rc.metadata.name.as_deref(), rc.handler.as_str()), (Some("gvisor"), "runsc"));
    let _: NetworkPolicy = load("policy/networkpolicy-net-off.yaml");
    let _: NetworkPolicy = load("policy/networkpolicy-net-on.yaml");
    let vap: ValidatingAdmissionPolicy = load("policy/validating-admission-policy.yaml");
    let vapb: ValidatingAdmissionPolicyBinding =
        load("policy/validating-admission-policy-binding.yaml");
    assert_eq!(Some(vapb.spec.policy_name), vap.metadata.name);
}

#[test]
fn the_role_grants_exactly_what_the_engine_uses() {
    let role: Role = load("rbac/role.yaml");
    let mut granted = BTreeSet::new();
    for rule in role.rules.unwrap() {
        for group in rule.api_groups.unwrap_or_default() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    granted.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    let required: BTreeSet<_> = REQUIRED_PERMISSIONS
        .iter()
        .map(|(r, v)| (api_group(r).to_owned(), (*r).to_owned(), (*v).to_owned()))
        .collect();
    let extra: Vec<_> = granted.difference(&required).collect();
    let missing: Vec<_> = required.difference(&granted).collect();
    assert!(extra.is_empty() && missing.is_empty(), "extra {extra:?}, missing {missing:?}");
    assert!(is_required("pods/exec", "get"));
    assert!(is_required("pods", "patch"), "the script count of a session is a pod annotation");
    assert!(!is_required("pods", "update"));
}

/// The claims the policy lets a pod mount are exactly the engine's environments and the
/// user's `--mount pvc:` claims, by the prefixes the engine uses.
#[test]
fn the_admission_policy_allows_exactly_the_claims_the_engine_mounts() {
    let vap: ValidatingAdmissionPolicy = load("policy/validating-admission-policy.yaml");
    let validations = vap.spec.unwrap().validations.unwrap();
    let volumes = validations
        .iter()
        .find(|v| v.expression.contains("persistentVolumeClaim"))
        .expect("a validation of claims");
    let allowed: BTreeSet<&str> = volumes
        .expression
        .split("claimName.startsWith('")
        .skip(1)
        .filter_map(|rest| rest.split_once('\'').map(|(prefix, _)| prefix))
        .collect();
    let used = BTreeSet::from([crate::environment::CLAIM_PREFIX, crate::claims::USER_CLAIM_PREFIX]);
    assert_eq!(allowed, used);
}

#[test]
fn the_admission_policy_checks_every_hardening_field() {
    let vap: ValidatingAdmissionPolicy = load("policy/validating-admission-policy.yaml");
    let text: String = vap
        .spec
        .unwrap()
        .validations
        .unwrap()
        .iter()
        .map(|v| v.expression.clone())
        .collect::<Vec<_>>()
        .join("\n");
    for field in [
        "automountServiceAccountToken",
        "enableServiceLinks",
        "hostNetwork",
        "hostPID",
        "hostIPC",
        "runAsNonRoot",
        "runAsUser",
        "fsGroup",
        "seccompProfile",
        "sysctls",
        "activeDeadlineSeconds",
        "ephemeralContainers",
        "emptyDir",
        "sizeLimit",
        "allowPrivilegeEscalation",
        "privileged",
        "readOnlyRootFilesystem",
        "'ALL' in c.securityContext.capabilities.drop",
        "hostPort",
        "'ephemeral-storage' in c.resources.limits",
    ] {
        assert!(text.contains(field), "no validation mentions `{field}`");
    }
}
