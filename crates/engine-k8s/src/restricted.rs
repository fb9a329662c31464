//! A pure checker of a Pod against the Pod Security Standard `restricted` (the baseline rules plus
//! the restricted ones, as of Kubernetes 1.2x/1.3x), so the engine's pod is known to pass a
//! namespace labelled `pod-security.kubernetes.io/enforce: restricted` before any cluster sees
//! it. Each violation names the field path, as the admission message would.
//!
//! Rules: HostProcess, host namespaces, privileged, capabilities (drop `ALL`, add only
//! `NET_BIND_SERVICE`), hostPath volumes, host ports, AppArmor, SELinux, `/proc` mount type,
//! seccomp (`RuntimeDefault` or `Localhost`, set for every container), sysctls (the safe set),
//! volume types (the allowlist), `allowPrivilegeEscalation: false`, `runAsNonRoot: true`,
//! `runAsUser` not 0.

use k8s_openapi::api::core::v1::{
    AppArmorProfile, Capabilities, Pod, PodSecurityContext, SELinuxOptions, SeccompProfile,
    SecurityContext, Volume, WindowsSecurityContextOptions,
};

/// One broken rule: where and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The field, as `spec.containers[0].securityContext.privileged`.
    pub path: String,
    /// What the rule asks for.
    pub message: String,
}

/// Sysctls the baseline profile allows (namespaced and harmless).
const SAFE_SYSCTLS: [&str; 10] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];
/// SELinux types the baseline profile allows.
const SELINUX_TYPES: [&str; 4] =
    ["container_t", "container_init_t", "container_kvm_t", "container_engine_t"];
/// The AppArmor annotation prefix (before the field existed, and still honoured).
const APPARMOR_ANNOTATION: &str = "container.apparmor.security.beta.kubernetes.io/";

/// One container of any of the three lists, with the fields the rules read.
struct Checked<'a> {
    path: String,
    security: Option<&'a SecurityContext>,
    host_ports: Vec<i32>,
}

/// Every violation of `restricted` in `pod`; empty when it passes.
pub fn check(pod: &Pod) -> Vec<Violation> {
    let mut out = Vec::new();
    let Some(spec) = &pod.spec else {
        return out;
    };
    let mut push =
        |path: String, message: &str| out.push(Violation { path, message: message.to_owned() });
    for (field, value) in
        [("hostNetwork", spec.host_network), ("hostPID", spec.host_pid), ("hostIPC", spec.host_ipc)]
    {
        if value == Some(true) {
            push(format!("spec.{field}"), "host namespaces are forbidden");
        }
    }
    let pod_sc = spec.security_context.as_ref();
    let empty_pod_sc = PodSecurityContext::default();
    let psc = pod_sc.unwrap_or(&empty_pod_sc);
    let base = "spec.securityContext";
    host_process(&mut push, base, psc.windows_options.as_ref());
    selinux(&mut push, base, psc.se_linux_options.as_ref());
    apparmor(&mut push, base, psc.app_armor_profile.as_ref());
    if psc.run_as_user == Some(0) {
        push(format!("{base}.runAsUser"), "must not be 0");
    }
    if psc.seccomp_profile.as_ref().is_some_and(|p| !seccomp_allowed(p)) {
        push(format!("{base}.seccompProfile.type"), "must be RuntimeDefault or Localhost");
    }
    for (i, sysctl) in psc.sysctls.iter().flatten().enumerate() {
        if !SAFE_SYSCTLS.contains(&sysctl.name.as_str()) {
            push(format!("{base}.sysctls[{i}].name"), "only the safe sysctls are allowed");
        }
    }
    for (i, volume) in spec.volumes.iter().flatten().enumerate() {
        if let Some(kind) = forbidden_volume(volume) {
            push(format!("spec.volumes[{i}].{kind}"), "volume type not allowed");
        }
    }
    if let Some(annotations) = &pod.metadata.annotations {
        for (key, value) in annotations {
            let allowed = value == "runtime/default" || value.starts_with("localhost/");
            if key.starts_with(APPARMOR_ANNOTATION) && !allowed {
                push(
                    format!("metadata.annotations[{key}]"),
                    "AppArmor must be runtime/default or localhost/*",
                );
            }
        }
    }
    let containers = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| Checked {
            path: format!("spec.containers[{i}]"),
            security: c.security_context.as_ref(),
            host_ports: c.ports.iter().flatten().filter_map(|p| p.host_port).collect(),
        })
        .chain(spec.init_containers.iter().flatten().enumerate().map(|(i, c)| Checked {
            path: format!("spec.initContainers[{i}]"),
            security: c.security_context.as_ref(),
            host_ports: c.ports.iter().flatten().filter_map(|p| p.host_port).collect(),
        }))
        .chain(spec.ephemeral_containers.iter().flatten().enumerate().map(|(i, c)| Checked {
            path: format!("spec.ephemeralContainers[{i}]"),
            security: c.security_context.as_ref(),
            host_ports: c.ports.iter().flatten().filter_map(|p| p.host_port).collect(),
        }));
    let empty_sc = SecurityContext::default();
    for c in containers {
        let sc = c.security.unwrap_or(&empty_sc);
        let base = format!("{}.securityContext", c.path);
        host_process(&mut push, &base, sc.windows_options.as_ref());
        selinux(&mut push, &base, sc.se_linux_options.as_ref());
        apparmor(&mut push, &base, sc.app_armor_profile.as_ref());
        if c.host_ports.iter().any(|p| *p != 0) {
            push(format!("{}.ports", c.path), "hostPort must be unset or 0");
        }
        if sc.privileged == Some(true) {
            push(format!("{base}.privileged"), "must not be true");
        }
        if sc.proc_mount.as_deref().is_some_and(|m| m != "Default") {
            push(format!("{base}.procMount"), "must be Default");
        }
        if sc.allow_privilege_escalation != Some(false) {
            push(format!("{base}.allowPrivilegeEscalation"), "must be false");
        }
        // A container's value overrides the pod's; unset in both is a violation.
        if sc.run_as_non_root.or(psc.run_as_non_root) != Some(true) {
            push(
                format!("{base}.runAsNonRoot"),
                "must be true (here or in the pod's securityContext)",
            );
        }
        if sc.run_as_user == Some(0) {
            push(format!("{base}.runAsUser"), "must not be 0");
        }
        match sc.seccomp_profile.as_ref().or(psc.seccomp_profile.as_ref()) {
            None => push(
                format!("{base}.seccompProfile.type"),
                "must be RuntimeDefault or Localhost (here or in the pod's securityContext)",
            ),
            Some(p) if !seccomp_allowed(p) && sc.seccomp_profile.is_some() => {
                push(format!("{base}.seccompProfile.type"), "must be RuntimeDefault or Localhost")
            }
            Some(_) => {}
        }
        capabilities(&mut push, &base, sc.capabilities.as_ref());
    }
    out
}

fn capabilities(push: &mut impl FnMut(String, &str), base: &str, caps: Option<&Capabilities>) {
    let drop = caps.and_then(|c| c.drop.as_ref());
    if !drop.is_some_and(|d| d.iter().any(|c| c == "ALL")) {
        push(format!("{base}.capabilities.drop"), "must contain ALL");
    }
    for (i, cap) in caps.and_then(|c| c.add.as_ref()).into_iter().flatten().enumerate() {
        if cap != "NET_BIND_SERVICE" {
            push(format!("{base}.capabilities.add[{i}]"), "only NET_BIND_SERVICE may be added");
        }
    }
}

fn seccomp_allowed(profile: &SeccompProfile) -> bool {
    matches!(profile.type_.as_str(), "RuntimeDefault" | "Localhost")
}

fn host_process(
    push: &mut impl FnMut(String, &str),
    base: &str,
    windows: Option<&WindowsSecurityContextOptions>,
) {
    if windows.and_then(|w| w.host_process) == Some(true) {
        push(format!("{base}.windowsOptions.hostProcess"), "HostProcess containers are forbidden");
    }
}

fn selinux(push: &mut impl FnMut(String, &str), base: &str, options: Option<&SELinuxOptions>) {
    let Some(options) = options else { return };
    if options.type_.as_deref().is_some_and(|t| !t.is_empty() && !SELINUX_TYPES.contains(&t)) {
        push(format!("{base}.seLinuxOptions.type"), "SELinux type not allowed");
    }
    if options.user.as_deref().is_some_and(|u| !u.is_empty()) {
        push(format!("{base}.seLinuxOptions.user"), "must not be set");
    }
    if options.role.as_deref().is_some_and(|r| !r.is_empty()) {
        push(format!("{base}.seLinuxOptions.role"), "must not be set");
    }
}

fn apparmor(push: &mut impl FnMut(String, &str), base: &str, profile: Option<&AppArmorProfile>) {
    if profile.is_some_and(|p| !matches!(p.type_.as_str(), "RuntimeDefault" | "Localhost")) {
        push(format!("{base}.appArmorProfile.type"), "must be RuntimeDefault or Localhost");
    }
}

/// The field of a volume type outside the restricted allowlist (configMap, csi, downwardAPI,
/// emptyDir, ephemeral, image, persistentVolumeClaim, projected, secret).
fn forbidden_volume(v: &Volume) -> Option<&'static str> {
    let forbidden = [
        ("hostPath", v.host_path.is_some()),
        ("gcePersistentDisk", v.gce_persistent_disk.is_some()),
        ("awsElasticBlockStore", v.aws_elastic_block_store.is_some()),
        ("gitRepo", v.git_repo.is_some()),
        ("nfs", v.nfs.is_some()),
        ("iscsi", v.iscsi.is_some()),
        ("glusterfs", v.glusterfs.is_some()),
        ("rbd", v.rbd.is_some()),
        ("flexVolume", v.flex_volume.is_some()),
        ("cinder", v.cinder.is_some()),
        ("cephfs", v.cephfs.is_some()),
        ("flocker", v.flocker.is_some()),
        ("fc", v.fc.is_some()),
        ("azureFile", v.azure_file.is_some()),
        ("vsphereVolume", v.vsphere_volume.is_some()),
        ("quobyte", v.quobyte.is_some()),
        ("azureDisk", v.azure_disk.is_some()),
        ("portworxVolume", v.portworx_volume.is_some()),
        ("scaleIO", v.scale_io.is_some()),
        ("storageos", v.storageos.is_some()),
        ("photonPersistentDisk", v.photon_persistent_disk.is_some()),
    ];
    forbidden.iter().find(|(_, set)| *set).map(|(name, _)| *name)
}

#[cfg(test)]
mod tests;
