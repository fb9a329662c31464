//! The `restricted` checker: a table of broken pods, each breaking one rule of our hardened pod,
//! and the violation each must yield.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    AppArmorProfile, ContainerPort, EphemeralContainer, HostPathVolumeSource, Pod, SELinuxOptions,
    SeccompProfile, Sysctl, Volume, WindowsSecurityContextOptions,
};

use super::check;
use crate::SandboxConfig;
use crate::manifest::{PodRequest, pod};

fn ours() -> Pod {
    let request = PodRequest {
        id: "example".into(),
        labels: BTreeMap::new(),
        ports: vec![8000],
        env: Vec::new(),
    };
    pod(&SandboxConfig::default(), &request).unwrap()
}

type Break = fn(&mut Pod);

fn spec(p: &mut Pod) -> &mut k8s_openapi::api::core::v1::PodSpec {
    p.spec.as_mut().unwrap()
}
fn csc(p: &mut Pod) -> &mut k8s_openapi::api::core::v1::SecurityContext {
    spec(p).containers[0].security_context.as_mut().unwrap()
}
fn psc(p: &mut Pod) -> &mut k8s_openapi::api::core::v1::PodSecurityContext {
    spec(p).security_context.as_mut().unwrap()
}

const C: &str = "spec.containers[0].securityContext";

#[test]
fn our_pod_has_no_violation() {
    assert_eq!(check(&ours()), vec![]);
}

#[test]
fn each_broken_pod_yields_its_violation() {
    let cases: Vec<(String, Break)> = vec![
        ("spec.hostNetwork".into(), |p| spec(p).host_network = Some(true)),
        ("spec.hostPID".into(), |p| spec(p).host_pid = Some(true)),
        ("spec.hostIPC".into(), |p| spec(p).host_ipc = Some(true)),
        (format!("{C}.privileged"), |p| csc(p).privileged = Some(true)),
        (format!("{C}.capabilities.drop"), |p| csc(p).capabilities = None),
        (format!("{C}.capabilities.drop"), |p| {
            csc(p).capabilities.as_mut().unwrap().drop = Some(vec!["NET_RAW".into()])
        }),
        (format!("{C}.capabilities.add[0]"), |p| {
            csc(p).capabilities.as_mut().unwrap().add = Some(vec!["SYS_ADMIN".into()])
        }),
        (format!("{C}.allowPrivilegeEscalation"), |p| csc(p).allow_privilege_escalation = None),
        (format!("{C}.allowPrivilegeEscalation"), |p| {
            csc(p).allow_privilege_escalation = Some(true)
        }),
        (format!("{C}.runAsNonRoot"), |p| {
            csc(p).run_as_non_root = None;
            psc(p).run_as_non_root = None;
        }),
        (format!("{C}.runAsNonRoot"), |p| csc(p).run_as_non_root = Some(false)),
        (format!("{C}.runAsUser"), |p| csc(p).run_as_user = Some(0)),
        ("spec.securityContext.runAsUser".into(), |p| psc(p).run_as_user = Some(0)),
        (format!("{C}.seccompProfile.type"), |p| {
            csc(p).seccomp_profile = None;
            psc(p).seccomp_profile = None;
        }),
        (format!("{C}.seccompProfile.type"), |p| {
            csc(p).seccomp_profile =
                Some(SeccompProfile { type_: "Unconfined".into(), localhost_profile: None })
        }),
        ("spec.securityContext.seccompProfile.type".into(), |p| {
            psc(p).seccomp_profile =
                Some(SeccompProfile { type_: "Unconfined".into(), localhost_profile: None })
        }),
        (format!("{C}.procMount"), |p| csc(p).proc_mount = Some("Unmasked".into())),
        ("spec.securityContext.sysctls[0].name".into(), |p| {
            psc(p).sysctls = Some(vec![Sysctl { name: "kernel.msgmax".into(), value: "1".into() }])
        }),
        ("spec.volumes[3].hostPath".into(), |p| {
            spec(p).volumes.as_mut().unwrap().push(Volume {
                name: "host".into(),
                host_path: Some(HostPathVolumeSource { path: "/".into(), type_: None }),
                ..Volume::default()
            })
        }),
        ("spec.containers[0].ports".into(), |p| {
            spec(p).containers[0].ports = Some(vec![ContainerPort {
                container_port: 80,
                host_port: Some(80),
                ..ContainerPort::default()
            }])
        }),
        (format!("{C}.appArmorProfile.type"), |p| {
            csc(p).app_armor_profile =
                Some(AppArmorProfile { type_: "Unconfined".into(), localhost_profile: None })
        }),
        (
            "metadata.annotations[container.apparmor.security.beta.kubernetes.io/sandbox]".into(),
            |p| {
                p.metadata.annotations = Some(BTreeMap::from([(
                    "container.apparmor.security.beta.kubernetes.io/sandbox".into(),
                    "unconfined".into(),
                )]))
            },
        ),
        (format!("{C}.seLinuxOptions.type"), |p| {
            csc(p).se_linux_options =
                Some(SELinuxOptions { type_: Some("spc_t".into()), ..SELinuxOptions::default() })
        }),
        ("spec.securityContext.seLinuxOptions.user".into(), |p| {
            psc(p).se_linux_options =
                Some(SELinuxOptions { user: Some("system_u".into()), ..SELinuxOptions::default() })
        }),
        (format!("{C}.windowsOptions.hostProcess"), |p| {
            csc(p).windows_options = Some(WindowsSecurityContextOptions {
                host_process: Some(true),
                ..WindowsSecurityContextOptions::default()
            })
        }),
        ("spec.ephemeralContainers[0].securityContext.allowPrivilegeEscalation".into(), |p| {
            let mut debug = EphemeralContainer {
                name: "debug".into(),
                security_context: spec(p).containers[0].security_context.clone(),
                ..EphemeralContainer::default()
            };
            debug.security_context.as_mut().unwrap().allow_privilege_escalation = None;
            spec(p).ephemeral_containers = Some(vec![debug]);
        }),
        ("spec.initContainers[0].securityContext.capabilities.drop".into(), |p| {
            let mut init = spec(p).containers[0].clone();
            init.name = "init".into();
            init.security_context.as_mut().unwrap().capabilities = None;
            spec(p).init_containers = Some(vec![init]);
        }),
    ];
    let mut wrong = Vec::new();
    for (want, broken) in &cases {
        let mut pod = ours();
        broken(&mut pod);
        let found = check(&pod);
        let paths: Vec<&str> = found.iter().map(|v| v.path.as_str()).collect();
        // Exactly the one rule broken, nothing else flagged by the same edit.
        if paths != [want.as_str()] {
            wrong.push(format!("{want}: got {paths:?}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn allowed_variants_pass() {
    let mut pod = ours();
    csc(&mut pod).capabilities.as_mut().unwrap().add = Some(vec!["NET_BIND_SERVICE".into()]);
    csc(&mut pod).seccomp_profile = None; // the pod's RuntimeDefault covers it
    psc(&mut pod).sysctls =
        Some(vec![Sysctl { name: "net.ipv4.ping_group_range".into(), value: "0 0".into() }]);
    csc(&mut pod).se_linux_options =
        Some(SELinuxOptions { type_: Some("container_t".into()), ..SELinuxOptions::default() });
    csc(&mut pod).proc_mount = Some("Default".into());
    psc(&mut pod).seccomp_profile = Some(SeccompProfile {
        type_: "Localhost".into(),
        localhost_profile: Some("profiles/sandbox.json".into()),
    });
    assert_eq!(check(&pod), vec![]);
}
