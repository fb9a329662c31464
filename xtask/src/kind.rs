//! `cargo xtask kind up|down|load`: a local kind cluster shaped like production for engine-k8s
//! (deploy/kind: ingress-nginx on the host's 80/443, the `python-sandbox` namespace enforcing Pod
//! Security `restricted`, deploy/rbac and the admission policy of deploy/policy), with the runtime
//! image loaded onto its node. Where kind, kubectl or docker is missing it says which and how to
//! get it, and fails: there is no cluster to fake.

use std::ffi::OsStr;
use std::path::Path;

use anyhow::{Context, Result, bail};
use xshell::{Shell, cmd};

use crate::image::DEFAULT_TAG;

/// The cluster's name (deploy/kind/cluster.yaml).
pub(crate) const CLUSTER: &str = "python-sandbox";
/// ingress-nginx's manifest for kind, pinned; `INGRESS_NGINX_MANIFEST` (a path or URL)
/// overrides it where GitHub is unreachable (it is not vendored: 700 lines of another project).
const INGRESS_NGINX: &str = "https://raw.githubusercontent.com/kubernetes/ingress-nginx/controller-v1.12.1/deploy/static/provider/kind/deploy.yaml";
/// What `up` applies after the controller, in order (the namespace first).
const MANIFESTS: [&str; 6] = [
    "deploy/kind/namespace.yaml",
    "deploy/rbac/serviceaccount.yaml",
    "deploy/rbac/role.yaml",
    "deploy/rbac/rolebinding.yaml",
    "deploy/policy/validating-admission-policy.yaml",
    "deploy/policy/validating-admission-policy-binding.yaml",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Up,
    Down,
    Load,
}

impl Action {
    pub(crate) fn parse(word: &str) -> Option<Action> {
        match word {
            "up" => Some(Action::Up),
            "down" => Some(Action::Down),
            "load" => Some(Action::Load),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Kind {
    pub(crate) action: Action,
    /// The image `load` (and `up`) puts on the node.
    pub(crate) image: String,
}

impl Kind {
    pub(crate) fn new(action: Action) -> Kind {
        Kind { action, image: DEFAULT_TAG.to_owned() }
    }

    pub(crate) fn run(self, sh: &Shell) -> Result<()> {
        let path = std::env::var_os("PATH");
        let tools: &[&str] = match self.action {
            Action::Up => &["docker", "kind", "kubectl"],
            Action::Down => &["kind"],
            Action::Load => &["docker", "kind"],
        };
        for tool in tools {
            if let Some(why) = missing_tool(tool, path.as_deref()) {
                bail!(why);
            }
        }
        match self.action {
            Action::Up => self.up(sh),
            Action::Down => {
                cmd!(sh, "kind delete cluster --name {CLUSTER}").run()?;
                Ok(())
            }
            Action::Load => self.load(sh),
        }
    }

    fn up(&self, sh: &Shell) -> Result<()> {
        let clusters = cmd!(sh, "kind get clusters").read().context(
            "`kind get clusters` failed\nhint: kind needs a running docker (`docker info`)",
        )?;
        if clusters.lines().any(|l| l.trim() == CLUSTER) {
            println!("kind cluster {CLUSTER} exists; applying deploy/ to it");
        } else {
            cmd!(sh, "kind create cluster --config deploy/kind/cluster.yaml").run().context(
                "kind could not create the cluster\nhint: ports 80 and 443 on 127.0.0.1 must be free (deploy/kind/cluster.yaml maps them)",
            )?;
        }
        let context = format!("kind-{CLUSTER}");
        let ingress =
            std::env::var("INGRESS_NGINX_MANIFEST").unwrap_or_else(|_| INGRESS_NGINX.to_owned());
        cmd!(sh, "kubectl --context {context} apply -f {ingress}").run().with_context(|| {
            format!("installing ingress-nginx from {ingress} failed\nhint: set INGRESS_NGINX_MANIFEST to a local copy of ingress-nginx's deploy/static/provider/kind/deploy.yaml")
        })?;
        cmd!(
            sh,
            "kubectl --context {context} wait --namespace ingress-nginx --for=condition=ready pod --selector=app.kubernetes.io/component=controller --timeout=180s"
        )
        .run()?;
        for manifest in MANIFESTS {
            cmd!(sh, "kubectl --context {context} apply -f {manifest}").run()?;
        }
        self.load(sh)?;
        println!("kind cluster {CLUSTER} is up: previews answer at http://<id>.127.0.0.1.nip.io");
        Ok(())
    }

    fn load(&self, sh: &Shell) -> Result<()> {
        let mut images = vec![self.image.clone()];
        // The default image's versioned tag is engine-k8s's default (pulled `IfNotPresent`).
        if self.image == DEFAULT_TAG {
            let containerfile = sh.read_file("deploy/image/Containerfile")?;
            images.push(crate::image::versioned_tag(&containerfile)?);
        }
        for image in &images {
            if cmd!(sh, "docker image inspect {image}")
                .quiet()
                .ignore_stdout()
                .ignore_stderr()
                .run()
                .is_err()
            {
                bail!("docker has no image {image}\nhint: cargo xtask image --engine docker");
            }
            cmd!(sh, "kind load docker-image {image} --name {CLUSTER}").run()?;
        }
        Ok(())
    }
}

/// Why `tool` cannot run from `path` (a `PATH` value), or `None` when an executable is found.
pub(crate) fn missing_tool(tool: &str, path: Option<&OsStr>) -> Option<String> {
    let found = path
        .map(std::env::split_paths)
        .into_iter()
        .flatten()
        .any(|dir| is_executable(&dir.join(tool)));
    if found {
        return None;
    }
    let hint = match tool {
        "kind" => {
            "install kind (https://kind.sigs.k8s.io/docs/user/quick-start/#installation, or `go install sigs.k8s.io/kind@latest`); it runs its node in docker"
        }
        "kubectl" => "install kubectl (Debian: `apt-get install kubernetes-client`)",
        "docker" => "install docker, or run `cargo xtask image`, which starts it here",
        _ => "install it",
    };
    Some(format!("`{tool}` is not on PATH, so there is no kind cluster here\nhint: {hint}"))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_kind_is_named_with_a_hint() {
        let empty = std::env::temp_dir().join(format!("xtask-kind-empty-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        let why = missing_tool("kind", Some(empty.as_os_str())).unwrap();
        assert!(why.starts_with("`kind` is not on PATH"), "{why}");
        assert!(why.contains("\nhint: install kind"), "{why}");
        assert!(missing_tool("kind", None).is_some());
        // Found once an executable of that name is on PATH, not before it is executable.
        let fake = empty.join("kind");
        std::fs::write(&fake, "#!/bin/sh\n").unwrap();
        assert!(missing_tool("kind", Some(empty.as_os_str())).is_some());
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(missing_tool("kind", Some(empty.as_os_str())), None);
        std::fs::remove_dir_all(&empty).unwrap();
    }

    #[test]
    fn up_applies_files_that_exist() {
        let root = crate::project_root();
        for manifest in MANIFESTS.iter().chain(["deploy/kind/cluster.yaml"].iter()) {
            assert!(root.join(manifest).is_file(), "{manifest}");
        }
    }

    #[test]
    fn actions_parse() {
        assert_eq!(Action::parse("up"), Some(Action::Up));
        assert_eq!(Action::parse("down"), Some(Action::Down));
        assert_eq!(Action::parse("load"), Some(Action::Load));
        assert_eq!(Action::parse("start"), None);
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        match crate::flags::parse(args(&["kind", "load", "--image", "img:1"])).unwrap() {
            crate::flags::Cmd::Kind(k) => {
                assert_eq!(k, Kind { action: Action::Load, image: "img:1".to_owned() })
            }
            _ => panic!("not a kind command"),
        }
        assert!(crate::flags::parse(args(&["kind"])).is_err());
        assert!(crate::flags::parse(args(&["kind", "up", "--force"])).is_err());
    }
}
