//! Boundary classification over a table of mounts and workspaces, one snapshot.

use std::path::{Path, PathBuf};

use sandbox_core::{CrossingKind, HOME_SECRETS, HOST_SOCKETS, Mount, MountMode, RunSpec, classify};

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
    ("the workspace's .git read-write", "/w", "/w/.git:rw", Some("/home/me")),
    ("hooks inside .git read-write", "/w", "/w/.git/hooks:rw", Some("/home/me")),
    ("the workspace's .git read-only is fine", "/w", "/w/.git:ro", Some("/home/me")),
    ("a nested .claude read-write", "/w", "/w/sub/.claude:rw", Some("/home/me")),
    ("another repo's .git read-write", "/w", "/srv/repo/.git:rw", Some("/home/me")),
    ("a workspace below .claude mounts its own dir", "/r/.claude/w", "/r/.claude/w/out:rw", None),
    ("~/.bashrc read-write", "/w", "/home/me/.bashrc:rw", Some("/home/me")),
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
        allow: None,
        publish: Vec::new(),
        env: Vec::new(),
        timeout: None,
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        limits: sandbox_core::Limits::NONE,
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

// ---- properties -------------------------------------------------------------------------

use proptest::prelude::*;

/// Paths built from components that hit every rule: home, secrets, sockets, workspace.
fn arb_path() -> impl Strategy<Value = PathBuf> {
    let component = prop::sample::select(
        &[
            "home",
            "me",
            "other",
            ".ssh",
            ".config",
            "gcloud",
            "nvim",
            "run",
            "user",
            "1000",
            "var",
            "docker.sock",
            "ws",
            "out",
            "data",
            "..",
            ".",
        ][..],
    );
    prop::collection::vec(component, 0..5)
        .prop_map(|parts| PathBuf::from(format!("/{}", parts.join("/"))))
}

fn arb_mount() -> impl Strategy<Value = Mount> {
    (arb_path(), any::<bool>()).prop_map(|(path, rw)| Mount {
        path,
        mode: if rw { MountMode::ReadWrite } else { MountMode::ReadOnly },
    })
}

/// Lexical normalization, as the classifier does it (`..` pops, `.` vanishes).
fn normalized(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component.as_os_str().to_str() {
            Some("..") => {
                out.pop();
            }
            Some(".") | Some("/") => {}
            _ => out.push(component),
        }
    }
    out
}

fn with_mounts(workspace: &Path, mounts: Vec<Mount>) -> RunSpec {
    let mut spec = spec(&workspace.to_string_lossy(), "");
    spec.mounts = mounts;
    spec
}

proptest! {
    /// Every mount that is or is inside a `HOME_SECRETS` or `HOST_SOCKETS` location, or is
    /// over one of them or over home, crosses, and so does each of its ancestors. (The name-based rules for
    /// `.ssh` or `docker.sock` elsewhere are extra: lexically, `/x` need not contain `/x/.ssh`.)
    #[test]
    fn known_locations_and_their_ancestors_cross(path in arb_path()) {
        let home = Path::new("/home/me");
        let path = normalized(&path);
        let sensitive: Vec<PathBuf> = HOME_SECRETS
            .iter()
            .map(|secret| home.join(secret))
            .chain(HOST_SOCKETS.iter().map(PathBuf::from))
            .collect();
        // Inside a secret or socket location, or over one of them or over home itself
        // (inside home but outside its secrets is fine: `~/projects/x`).
        let known = sensitive.iter().any(|location| path.starts_with(location))
            || sensitive.iter().chain([&home.to_owned()]).any(|location| location.starts_with(&path));
        prop_assume!(known);
        for ancestor in path.ancestors() {
            let mount = Mount { path: ancestor.to_owned(), mode: MountMode::ReadOnly };
            let crossings = classify(&with_mounts(Path::new("/ws"), vec![mount]), Some(home));
            prop_assert!(
                crossings.iter().any(|crossing| crossing.kind != CrossingKind::WritableOutsideWorkspace),
                "{} (from {}) does not cross", ancestor.display(), path.display()
            );
        }
    }

    /// Adding a mount never removes a crossing.
    #[test]
    fn more_mounts_never_fewer_crossings(
        workspace in arb_path(),
        mounts in prop::collection::vec(arb_mount(), 0..4),
        extra in arb_mount(),
    ) {
        let home = Some(Path::new("/home/me"));
        let before = classify(&with_mounts(&workspace, mounts.clone()), home);
        let mut more = mounts;
        more.push(extra);
        let after = classify(&with_mounts(&workspace, more), home);
        for crossing in &before {
            prop_assert!(after.contains(crossing));
        }
    }

    /// Read-write mounts inside the workspace that expose nothing never cross.
    #[test]
    fn writes_inside_the_workspace_are_fine(suffix in arb_path()) {
        let workspace = Path::new("/srv/ws");
        let path = workspace.join(suffix.strip_prefix("/").unwrap_or(&suffix));
        prop_assume!(!path.components().any(|c| c.as_os_str() == ".."));
        let spec = with_mounts(workspace, vec![Mount { path, mode: MountMode::ReadWrite }]);
        let crossings = classify(&spec, Some(Path::new("/home/me")));
        prop_assert!(crossings.iter().all(|c| c.kind != CrossingKind::WritableOutsideWorkspace));
    }
}

// ---- who asked ----------------------------------------------------------------------------

use sandbox_core::{Asker, classify_as, classify_copied_env, classify_script, classify_session};

/// What the user types is their decision; an agent's host path outside the workspace (a
/// read-only mount, the script file) is a crossing, and so is every variable it copies.
#[test]
fn an_agent_crosses_where_the_user_does_not() {
    let home = Some(Path::new("/home/me"));
    let kinds = |asker, mounts: &str| -> Vec<&'static str> {
        classify_as(&spec("/home/me/proj", mounts), home, asker)
            .iter()
            .map(|c| c.kind.as_str())
            .collect()
    };
    assert_eq!(kinds(Asker::User, "/data:ro|/home/me/proj/in:ro"), Vec::<&str>::new());
    assert_eq!(kinds(Asker::Agent, "/data:ro|/home/me/proj/in:ro"), ["outside-workspace"]);
    assert_eq!(kinds(Asker::Agent, "/home/me/.ssh:ro"), ["secret"], "counted once");
    assert_eq!(kinds(Asker::Agent, "/data:rw"), ["writable-outside-workspace"]);

    let script = |asker, path: &str| {
        classify_script(Path::new(path), Path::new("/home/me/proj"), home, asker)
            .map(|c| format!("[{}] {c}", c.kind.as_str()))
            .unwrap_or_else(|| "fine".to_owned())
    };
    let table = [
        script(Asker::User, "/home/me/proj/s.py"),
        script(Asker::Agent, "s.py"),
        script(Asker::Agent, "sub/../s.py"),
        script(Asker::User, "/home/me/.ssh/id_rsa"),
        script(Asker::Agent, "/home/me/.ssh/id_rsa"),
        script(Asker::Agent, "../.aws/credentials"),
        script(Asker::User, "/tmp/x.py"),
        script(Asker::Agent, "/tmp/x.py"),
        script(Asker::Agent, "../other/x.py"),
    ];
    insta::assert_snapshot!(table.join("\n"), @r"
    fine
    fine
    fine
    [secret] `/home/me/.ssh/id_rsa` (ro): the script: it is inside ~/.ssh, which holds credentials
    [secret] `/home/me/.ssh/id_rsa` (ro): the script: it is inside ~/.ssh, which holds credentials
    [secret] `/home/me/.aws/credentials` (ro): the script: it is inside ~/.aws, which holds credentials
    fine
    [outside-workspace] `/tmp/x.py` (ro): the script is outside the workspace `/home/me/proj`: the sandbox would see host files the user did not choose to show it
    [outside-workspace] `/home/me/other/x.py` (ro): the script is outside the workspace `/home/me/proj`: the sandbox would see host files the user did not choose to show it
    ");

    let names = ["AWS_SECRET_ACCESS_KEY", "LANG", "LANG"];
    assert_eq!(classify_copied_env(names, Asker::User), []);
    let copied: Vec<(String, &str)> = classify_copied_env(names, Asker::Agent)
        .iter()
        .map(|c| (c.name.clone(), c.kind()))
        .collect();
    assert_eq!(
        copied,
        [("AWS_SECRET_ACCESS_KEY".into(), "secret-variable"), ("LANG".into(), "host-variable")]
    );
}

/// A session of the server's own workspace (or below it) is the agent's to use; one started
/// elsewhere writes outside the workspace, and one started in the home exposes it.
#[test]
fn a_session_of_another_workspace_crosses() {
    let home = Some(Path::new("/home/me"));
    let kinds = |theirs: &str| -> Vec<&'static str> {
        classify_session("s1", Path::new(theirs), Path::new("/home/me/proj"), home)
            .iter()
            .map(|c| c.kind.as_str())
            .collect()
    };
    assert_eq!(kinds("/home/me/proj"), Vec::<&str>::new());
    assert_eq!(kinds("/home/me/proj/sub"), Vec::<&str>::new());
    assert_eq!(kinds("/home/me/other"), ["writable-outside-workspace"]);
    assert_eq!(kinds("/home/me/proj2"), ["writable-outside-workspace"]);
    assert_eq!(kinds("/home/me"), ["home", "writable-outside-workspace"]);
}
