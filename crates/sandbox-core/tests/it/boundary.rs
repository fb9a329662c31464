//! Boundary classification over a table of mounts and workspaces, one snapshot.

use std::path::{Path, PathBuf};

use sandbox_core::{CrossingKind, Mount, MountMode, RunSpec, classify};

/// (name, workspace, mounts as `PATH:ro|PATH:rw`, home)
const CASES: &[(&str, &str, &str, Option<&str>)] = &[
    ("nothing mounted", "/home/me/proj", "", Some("/home/me")),
    ("root mounted read-only", "/home/me/proj", "/:ro", Some("/home/me")),
    ("root mounted read-only, home unknown", "/srv/proj", "/:ro", None),
    ("root mounted read-write", "/home/me/proj", "/:rw", Some("/home/me")),
    ("/home read-only", "/home/me/proj", "/home:ro", Some("/home/me")),
    ("home read-only", "/home/me/proj", "/home/me:ro", Some("/home/me")),
    ("home with trailing slash and dots", "/home/me/proj", "/home/me/./x/../:ro", Some("/home/me")),
    ("~/.ssh read-only", "/home/me/proj", "/home/me/.ssh:ro", Some("/home/me")),
    ("a key inside ~/.ssh", "/home/me/proj", "/home/me/.ssh/id_ed25519:ro", Some("/home/me")),
    (
        "~/.aws, ~/.kube, ~/.docker, ~/.gnupg, ~/.netrc",
        "/w",
        "/home/me/.aws:ro|/home/me/.kube/config:ro|/home/me/.docker:ro|/home/me/.gnupg:ro|/home/me/.netrc:ro",
        Some("/home/me"),
    ),
    ("~/.config/gcloud", "/w", "/home/me/.config/gcloud:ro", Some("/home/me")),
    ("~/.config is over gcloud", "/w", "/home/me/.config:ro", Some("/home/me")),
    ("~/.config/nvim is fine", "/w", "/home/me/.config/nvim:ro", Some("/home/me")),
    ("~/projects/x read-only is fine", "/home/me/proj", "/home/me/projects/x:ro", Some("/home/me")),
    (
        "~/projects/x read-write is a write outside",
        "/home/me/proj",
        "/home/me/projects/x:rw",
        Some("/home/me"),
    ),
    ("/data read-only is fine", "/home/me/proj", "/data:ro", Some("/home/me")),
    ("/data read-write outside the workspace", "/home/me/proj", "/data:rw", Some("/home/me")),
    (
        "workspace subdir read-write is fine",
        "/home/me/proj",
        "/home/me/proj/out:rw",
        Some("/home/me"),
    ),
    ("workspace itself read-write is fine", "/home/me/proj", "/home/me/proj:rw", Some("/home/me")),
    (
        "sibling with a shared name prefix is outside",
        "/home/me/proj",
        "/home/me/proj2:rw",
        Some("/home/me"),
    ),
    (
        "dotdot out of the workspace is lexical",
        "/home/me/proj",
        "/home/me/proj/../other:rw",
        Some("/home/me"),
    ),
    (
        "symlink-looking path is taken literally",
        "/home/me/proj",
        "/home/me/proj/link-to-ssh:ro",
        Some("/home/me"),
    ),
    ("another user's .ssh", "/w", "/home/other/.ssh:ro", Some("/home/me")),
    ("/run/user/1000", "/w", "/run/user/1000:ro", Some("/home/me")),
    ("/run is over /run/user", "/w", "/run:ro", Some("/home/me")),
    ("/var/run/docker.sock", "/w", "/var/run/docker.sock:ro", Some("/home/me")),
    ("/run/docker.sock", "/w", "/run/docker.sock:rw", Some("/home/me")),
    (
        "podman and containerd sockets",
        "/w",
        "/run/podman/podman.sock:ro|/run/containerd/containerd.sock:ro",
        Some("/home/me"),
    ),
    ("a docker.sock anywhere", "/w", "/home/me/.local/run/docker.sock:ro", Some("/home/me")),
    ("/var is over the sockets", "/w", "/var:ro", Some("/home/me")),
    ("/etc read-only is fine", "/w", "/etc:ro", Some("/home/me")),
    ("workspace == home (!)", "/home/me", "", Some("/home/me")),
    ("workspace == home, ~/.ssh mounted too", "/home/me", "/home/me/.ssh:ro", Some("/home/me")),
    ("workspace is /", "/", "/data:rw", Some("/home/me")),
    ("workspace inside ~/.aws", "/home/me/.aws/tmp", "", Some("/home/me")),
    ("workspace /tmp/x, home unknown, rw elsewhere", "/tmp/x", "/tmp/y:rw", None),
];

fn spec(workspace: &str, mounts: &str) -> RunSpec {
    let mounts = mounts
        .split('|')
        .filter(|item| !item.is_empty())
        .map(|item| {
            let (path, mode) = item.rsplit_once(':').expect("PATH:MODE");
            let mode = if mode == "rw" { MountMode::ReadWrite } else { MountMode::ReadOnly };
            Mount { path: PathBuf::from(path), mode }
        })
        .collect();
    RunSpec {
        script: PathBuf::from(workspace).join("s.py"),
        args: Vec::new(),
        dependencies: Vec::new(),
        requires_python: None,
        mounts,
        net: Default::default(),
        publish: Vec::new(),
        env: Vec::new(),
        timeout: None,
        workspace: PathBuf::from(workspace),
    }
}

#[test]
fn classification_table() {
    let mut out = String::new();
    for (name, workspace, mounts, home) in CASES {
        let crossings = classify(&spec(workspace, mounts), home.map(Path::new));
        out.push_str(&format!(
            "## {name}\nworkspace: {workspace}  home: {}  mounts: {mounts}\n",
            home.unwrap_or("-")
        ));
        if crossings.is_empty() {
            out.push_str("  fine\n");
        }
        for crossing in &crossings {
            out.push_str(&format!("  [{}] {crossing}\n", crossing.kind.as_str()));
        }
        out.push('\n');
    }
    insta::assert_snapshot!(out);
}

#[test]
fn kinds_of_key_cases() {
    let kinds = |workspace: &str, mounts: &str| -> Vec<CrossingKind> {
        classify(&spec(workspace, mounts), Some(Path::new("/home/me")))
            .into_iter()
            .map(|crossing| crossing.kind)
            .collect()
    };
    assert_eq!(kinds("/w", "/:ro"), [CrossingKind::Home]);
    assert_eq!(kinds("/w", "/:rw"), [CrossingKind::Home, CrossingKind::WritableOutsideWorkspace]);
    assert_eq!(kinds("/w", "/home/me/.ssh:ro"), [CrossingKind::Secret]);
    assert_eq!(kinds("/w", "/run/user/1000:ro"), [CrossingKind::HostSocket]);
    assert_eq!(kinds("/w", "/var/run/docker.sock:ro"), [CrossingKind::HostSocket]);
    assert_eq!(kinds("/w", "/data:rw"), [CrossingKind::WritableOutsideWorkspace]);
    assert_eq!(kinds("/w", "/w/out:rw|/home/me/projects/x:ro"), []);
    assert_eq!(kinds("/home/me", ""), [CrossingKind::Home]);
}
