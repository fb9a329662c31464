//! The proxy's view of pods: which address is held to which list.

use k8s_openapi::api::core::v1::PodStatus;
use kube::api::ObjectMeta;

use super::*;

fn pod(name: &str, ip: Option<&str>, allow: Option<&[&str]>) -> Pod {
    let policy = sandbox_core::SessionPolicy {
        net: true,
        allow: allow.map(|a| sandbox_core::Allow::parse(a.iter().copied()).unwrap()),
        mounts: Vec::new(),
        publish: Vec::new(),
        tmpfs_size: None,
        limits: sandbox_core::Limits::NONE,
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            annotations: Some(BTreeMap::from([(
                crate::session::POLICY_ANNOTATION.to_owned(),
                serde_json::to_string(&policy).unwrap(),
            )])),
            ..ObjectMeta::default()
        },
        status: Some(PodStatus {
            phase: Some("Running".to_owned()),
            pod_ip: ip.map(str::to_owned),
            ..PodStatus::default()
        }),
        ..Pod::default()
    }
}

#[test]
fn the_pods_environment_names_the_proxy_by_address() {
    let env = pod_env("10.96.0.42".parse().unwrap());
    assert!(env.contains(&("HTTPS_PROXY".to_owned(), "http://10.96.0.42:3128".to_owned())));
    assert!(env.contains(&("http_proxy".to_owned(), "http://10.96.0.42:3128".to_owned())));
    assert!(env.contains(&("NO_PROXY".to_owned(), "localhost,127.0.0.1,::1".to_owned())));
    let v6 = pod_env("fd00::42".parse().unwrap());
    assert!(v6.contains(&("ALL_PROXY".to_owned(), "http://[fd00::42]:3128".to_owned())));
}

#[test]
fn a_pod_is_held_to_its_annotations_list_only_while_it_runs_with_an_address() {
    let listed = pod("psbx-a", Some("10.1.0.5"), Some(&["pypi.org", "*.example.com:443"]));
    let (ip, allow) = pod_list(&listed).expect("a list");
    assert_eq!(ip.to_string(), "10.1.0.5");
    assert_eq!(allow.to_string(), "pypi.org,*.example.com:443");
    assert!(pod_list(&pod("psbx-b", Some("10.1.0.6"), None)).is_none(), "net on: no list");
    assert!(pod_list(&pod("psbx-c", None, Some(&["pypi.org"]))).is_none(), "no address yet");
    let mut done = listed.clone();
    done.status.as_mut().unwrap().phase = Some("Succeeded".to_owned());
    assert!(pod_list(&done).is_none(), "ended");
    let mut deleting = listed.clone();
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()));
    assert!(pod_list(&deleting).is_none(), "being deleted");
    let mut garbled = listed;
    garbled
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(crate::session::POLICY_ANNOTATION.to_owned(), "{\"allow\": 3".to_owned());
    assert!(pod_list(&garbled).is_none(), "a policy that does not parse holds to nothing");
}

#[test]
fn the_lists_follow_pods_as_they_come_change_and_go() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = sandbox_net::EgressProxy::serve(listener, sandbox_core::Lan::Refused).unwrap();
    let lists = proxy.lists();
    let mut pods = Pods::default();
    let a: IpAddr = "10.1.0.5".parse().unwrap();
    let b: IpAddr = "10.1.0.6".parse().unwrap();
    pods.update(&pod("psbx-a", None, Some(&["pypi.org"])), lists);
    assert!(lists.get(a).is_none(), "no address yet");
    pods.update(&pod("psbx-a", Some("10.1.0.5"), Some(&["pypi.org"])), lists);
    assert_eq!(lists.get(a).unwrap().allow().to_string(), "pypi.org");
    pods.update(&pod("psbx-b", Some("10.1.0.6"), Some(&["registry.npmjs.org"])), lists);
    // A pod's address taken by another pod with another list: the new list holds.
    pods.update(&pod("psbx-a", Some("10.1.0.5"), None), lists);
    assert!(lists.get(a).is_none(), "its list gone with the annotation");
    pods.update(&pod("psbx-c", Some("10.1.0.5"), Some(&["crates.io"])), lists);
    assert_eq!(lists.get(a).unwrap().allow().to_string(), "crates.io");
    pods.remove("psbx-a", lists);
    assert!(lists.get(a).is_some(), "psbx-a no longer held it");
    // The same with the old pod's deletion seen after the new pod took its address.
    pods.update(&pod("psbx-d", Some("10.1.0.7"), Some(&["pypi.org"])), lists);
    pods.update(&pod("psbx-e", Some("10.1.0.7"), Some(&["crates.io"])), lists);
    pods.remove("psbx-d", lists);
    let c: IpAddr = "10.1.0.7".parse().unwrap();
    assert_eq!(lists.get(c).unwrap().allow().to_string(), "crates.io");
    pods.remove("psbx-e", lists);
    assert!(lists.get(c).is_none());
    pods.keep_only(&["psbx-c".to_owned()], lists);
    assert!(lists.get(b).is_none(), "psbx-b was not listed again");
    assert!(lists.get(a).is_some());
}

/// The documents of a multi-document file under deploy/, in order.
fn docs(rel: &str) -> Vec<serde_json::Value> {
    let path = crate::rbac::tests::deploy_dir().join(rel);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| <serde_json::Value as serde::Deserialize>::deserialize(doc).unwrap())
        .collect()
}

/// deploy/egress is what this module and the sandboxes' policy name: its namespace (with the
/// name label the sandboxes' NetworkPolicy selects it by), the Service and port, the pods'
/// label, the proxy's read of the sandbox pods, the engine's read of the Service, and ingress
/// to the proxy from the sandbox pods only.
#[test]
fn the_deployed_proxy_is_where_the_engine_and_the_policy_look_for_it() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Namespace, Service};
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let ns: Namespace = crate::rbac::tests::load("egress/00-namespace.yaml");
    assert_eq!(ns.metadata.name.as_deref(), Some(NAMESPACE));
    assert_eq!(ns.metadata.labels.unwrap()["kubernetes.io/metadata.name"], NAMESPACE);
    let proxy = docs("egress/20-proxy.yaml");
    let deployment: Deployment = serde_json::from_value(proxy[0].clone()).unwrap();
    let service: Service = serde_json::from_value(proxy[1].clone()).unwrap();
    let policy: NetworkPolicy = serde_json::from_value(proxy[2].clone()).unwrap();
    assert_eq!(deployment.metadata.namespace.as_deref(), Some(NAMESPACE));
    let template = deployment.spec.template;
    assert_eq!(template.metadata.unwrap().labels.unwrap()[APP_LABEL], SERVICE);
    let pod = template.spec.unwrap();
    let container = &pod.containers[0];
    let argv = [container.command.clone().unwrap(), container.args.clone().unwrap()].concat();
    assert_eq!(
        argv[1..],
        [
            "egress-proxy",
            "--namespace",
            crate::config::DEFAULT_NAMESPACE,
            "--listen",
            &format!("0.0.0.0:{PORT}")
        ]
    );
    assert_eq!(container.security_context.as_ref().unwrap().read_only_root_filesystem, Some(true));
    assert_eq!(
        (service.metadata.name.as_deref(), service.metadata.namespace.as_deref()),
        (Some(SERVICE), Some(NAMESPACE))
    );
    let spec = service.spec.unwrap();
    assert_eq!(spec.selector.unwrap()[APP_LABEL], SERVICE);
    assert_eq!(spec.ports.unwrap()[0].port, i32::from(PORT));
    let from = &policy.spec.unwrap().ingress.unwrap()[0];
    let peer = &from.from.as_ref().unwrap()[0];
    let ns_label = &peer.namespace_selector.as_ref().unwrap().match_labels.as_ref().unwrap();
    assert_eq!(ns_label["kubernetes.io/metadata.name"], crate::config::DEFAULT_NAMESPACE);
    let pods = peer.pod_selector.as_ref().unwrap().match_labels.as_ref().unwrap();
    assert_eq!(pods[reaper::labels::MANAGED_BY], reaper::labels::MANAGED_BY_VALUE);

    let rbac = docs("egress/10-rbac.yaml");
    let reads_pods: Role = serde_json::from_value(rbac[1].clone()).unwrap();
    assert_eq!(reads_pods.metadata.namespace.as_deref(), Some(crate::config::DEFAULT_NAMESPACE));
    let rule = &reads_pods.rules.unwrap()[0];
    assert_eq!(rule.resources.as_deref(), Some(&["pods".to_owned()][..]));
    assert_eq!(rule.verbs, ["get", "list", "watch"], "what `serve` does, and nothing more");
    let reader: Role = serde_json::from_value(rbac[3].clone()).unwrap();
    let rule = &reader.rules.unwrap()[0];
    assert_eq!(rule.resource_names.as_deref(), Some(&[SERVICE.to_owned()][..]));
    assert_eq!(rule.verbs, ["get"]);
    let engine: RoleBinding = serde_json::from_value(rbac[4].clone()).unwrap();
    let subject = &engine.subjects.unwrap()[0];
    let sa: k8s_openapi::api::core::v1::ServiceAccount =
        crate::rbac::tests::load("rbac/serviceaccount.yaml");
    assert_eq!(Some(&subject.name), sa.metadata.name.as_ref(), "the engine's account reads it");
}
