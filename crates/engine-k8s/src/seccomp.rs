//! The project's seccomp wall on a cluster's nodes: `seccomp = "wall"` in `[engine.k8s]` names
//! it as the sandbox container's `Localhost` profile
//! ([`sandbox_core::oci_seccomp::wall_profile_name`]), and `deploy/seccomp/wall.yaml` (made by
//! [`deploy_yaml`], checked against it by a test) puts it on every node: a ConfigMap with the
//! profile, and a DaemonSet that copies it below the kubelet's seccomp directory.
//!
//! The file name carries the profile's digest, so a node that has another version of the wall
//! has no file of that name: the kubelet then fails the container's creation (`cannot load
//! seccomp profile`), and the engine reports it with a hint, rather than running the sandbox
//! under a different wall.

/// Where the DaemonSet and its ConfigMap live: not the sandboxes' namespace, whose admission
/// policy refuses host paths.
pub const NAMESPACE: &str = "kube-system";

/// The kubelet's seccomp directory (its default `--seccomp-profile-root` up to 1.22, and
/// `<--root-dir>/seccomp` from 1.23 on, whose default root dir gives the same path): the
/// DaemonSet's host path.
pub const NODE_SECCOMP_DIR: &str = "/var/lib/kubelet/seccomp";

/// The name of the ConfigMap and the DaemonSet.
const NAME: &str = "python-sandbox-seccomp";

/// The installer's script: each profile copied in atomically (a kubelet never reads half of
/// one), then it idles, so the DaemonSet stays satisfied and a new node gets it too.
const INSTALL: &str = "set -eu; d=/host/python-sandbox; mkdir -p \"$d\"; \
    for f in /profile/*.json; do n=$(basename \"$f\"); cp \"$f\" \"$d/.$n.tmp\"; \
    mv \"$d/.$n.tmp\" \"$d/$n\"; done; exec sleep 2147483647";

/// Pure: `deploy/seccomp/wall.yaml` for this version: the ConfigMap holding the wall's profile
/// under its content-addressed name, and the DaemonSet (running `image`, the runtime image every
/// node already pulls for sandboxes) that installs it.
pub fn deploy_yaml(image: &str) -> String {
    let name = sandbox_core::oci_seccomp::wall_profile_name();
    let file = name.rsplit('/').next().unwrap_or(&name);
    let profile: String = sandbox_core::oci_seccomp::wall_profile()
        .lines()
        .map(|line| format!("    {line}\n"))
        .collect();
    let script = serde_json::to_string(INSTALL).expect("a string");
    format!(
        r#"# Made by python-sandbox ({version}); a test in engine-k8s (`seccomp.rs`) checks it is current.
# The seccomp wall on every node, for `seccomp = "wall"` in `[engine.k8s]`:
#   kubectl apply -f deploy/seccomp/wall.yaml
# A kubelet whose seccomp directory is not /var/lib/kubelet/seccomp needs the host path below changed.
apiVersion: v1
kind: ConfigMap
metadata:
  name: {NAME}
  namespace: {NAMESPACE}
  labels:
    app.kubernetes.io/name: {NAME}
data:
  {file}: |
{profile}---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {NAME}
  namespace: {NAMESPACE}
  labels:
    app.kubernetes.io/name: {NAME}
spec:
  selector:
    matchLabels:
      app.kubernetes.io/name: {NAME}
  template:
    metadata:
      labels:
        app.kubernetes.io/name: {NAME}
    spec:
      automountServiceAccountToken: false
      enableServiceLinks: false
      # `sleep` as pid 1 ignores SIGTERM: nothing to wait for.
      terminationGracePeriodSeconds: 1
      # Every node, tainted sandbox nodes included.
      tolerations:
        - operator: Exists
      containers:
        - name: install
          image: {image}
          imagePullPolicy: IfNotPresent
          command: ["/bin/sh", "-c", {script}]
          securityContext:
            # Root owns the kubelet's directory; no capability is needed to write there.
            runAsUser: 0
            runAsNonRoot: false
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities:
              drop: ["ALL"]
            seccompProfile:
              type: RuntimeDefault
          resources:
            requests:
              cpu: 5m
              memory: 16Mi
            limits:
              cpu: 50m
              memory: 32Mi
          volumeMounts:
            - name: profile
              mountPath: /profile
              readOnly: true
            - name: host
              mountPath: /host
      volumes:
        - name: profile
          configMap:
            name: {NAME}
        - name: host
          hostPath:
            path: {NODE_SECCOMP_DIR}
            type: DirectoryOrCreate
"#,
        version = env!("CARGO_PKG_VERSION"),
    )
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::DaemonSet;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn checked_in() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/seccomp/wall.yaml")
    }

    /// `deploy/seccomp/wall.yaml` is this version's: `PSBX_WRITE_DEPLOY=1` rewrites it.
    #[test]
    fn the_deployed_wall_is_this_versions_and_installs_where_pods_name_it() {
        let made = super::deploy_yaml(crate::config::DEFAULT_IMAGE);
        if std::env::var_os("PSBX_WRITE_DEPLOY").is_some() {
            std::fs::write(checked_in(), &made).unwrap();
        }
        let on_disk = std::fs::read_to_string(checked_in()).unwrap_or_default();
        assert!(
            on_disk == made,
            "deploy/seccomp/wall.yaml is stale: `PSBX_WRITE_DEPLOY=1 cargo test -p engine-k8s --lib seccomp`"
        );
        let mut docs = serde_norway::Deserializer::from_str(&made);
        let map: ConfigMap = serde::Deserialize::deserialize(docs.next().unwrap()).unwrap();
        let set: DaemonSet = serde::Deserialize::deserialize(docs.next().unwrap()).unwrap();
        // The ConfigMap holds the exact profile under the name a pod's `localhostProfile` gives.
        let name = sandbox_core::oci_seccomp::wall_profile_name();
        let (dir, file) = name.split_once('/').unwrap();
        let data = map.data.unwrap();
        let profile = data.get(file).expect("the profile under its name");
        assert_eq!(profile.trim_end(), sandbox_core::oci_seccomp::wall_profile().trim_end());
        let parsed: serde_json::Value = serde_json::from_str(profile).unwrap();
        assert_eq!(parsed["defaultAction"], "SCMP_ACT_ERRNO", "deny by default");
        // The installer writes into `<kubelet seccomp dir>/<dir>/`.
        let spec = set.spec.template.spec.unwrap();
        let host = spec.volumes.unwrap().into_iter().find(|v| v.name == "host").unwrap();
        assert_eq!(host.host_path.unwrap().path, super::NODE_SECCOMP_DIR);
        let command = spec.containers[0].command.clone().unwrap().join(" ");
        assert!(command.contains(&format!("d=/host/{dir};")), "{command}");
        assert_eq!(spec.containers[0].image.as_deref(), Some(crate::config::DEFAULT_IMAGE));
    }
}
