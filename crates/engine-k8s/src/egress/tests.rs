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
