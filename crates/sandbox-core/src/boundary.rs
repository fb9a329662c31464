//! Boundary classification: does a run reach past the sandbox's safe defaults?
//!
//! A run crosses a boundary when a mount (or the workspace itself, which is mounted
//! read-write) exposes the home directory, a location that holds credentials, or a host
//! socket, whether by mounting that location, something inside it, or a parent "over" it
//! (a read-only `/` still exposes `~/.ssh`); or when it mounts anything read-write outside the
//! workspace, or read-write a protected path ([`crate::protect`]). The CLI refuses such runs
//! without `--approve` and lists each [`Crossing`].
//!
//! Who asked matters ([`Asker`]): what the user typed at the command line is their decision,
//! but an agent (the MCP server's client, which may be prompt-injected) decides nothing for
//! the user. So for an agent, every host path outside the workspace that the sandbox would
//! see (a read-only mount, the script file itself) and every host variable copied in by name
//! is a crossing too; see [`classify_as`], [`classify_script`] and [`classify_copied_env`].
//!
//! Purely lexical: `/data/link-to-home` is not followed. Engines canonicalize mount paths
//! before they mount, so the CLI should classify the canonicalized spec as well.

use std::fmt;
use std::path::Path;

use crate::paths::{is_within, normalize};
use crate::{Mount, MountMode, RunSpec, is_secret_name};

/// Directories and files below `$HOME` that hold credentials.
pub const HOME_SECRETS: &[&str] = &[
    ".ssh",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".kube",
    ".docker",
    ".gnupg",
    ".netrc",
    ".git-credentials",
    ".pypirc",
    ".password-store",
    ".local/share/keyrings",
    ".config/containers",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".npmrc",
    ".vault-token",
];

/// Host sockets and runtime directories that hand out control of the host (container
/// daemons) or of the user session (D-Bus, agents below `/run/user`). `/var/run` is listed
/// too because the classification does not resolve the usual `/var/run -> /run` symlink.
pub const HOST_SOCKETS: &[&str] = &[
    "/run/user",
    "/var/run/user",
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/podman/podman.sock",
    "/var/run/podman/podman.sock",
    "/run/containerd/containerd.sock",
    "/var/run/containerd/containerd.sock",
];

/// File names that are container daemon sockets wherever they live (Docker Desktop puts
/// `docker.sock` under `~/.docker/run`, rootless podman under `$XDG_RUNTIME_DIR`).
const SOCKET_NAMES: &[&str] = &["docker.sock", "podman.sock", "containerd.sock"];

/// Path components that mark a credential store even outside the caller's home (another
/// user's `~/.ssh`, a copied `.aws`).
const SECRET_COMPONENTS: &[&str] = &[".ssh", ".aws", ".gnupg", ".kube", ".docker", ".netrc"];

/// One way a run crosses the boundary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crossing {
    /// The mount that crosses; the workspace appears as a read-write mount.
    pub mount: Mount,
    /// What kind of crossing it is.
    pub kind: CrossingKind,
    /// A human explanation, lower case, no trailing period.
    pub reason: String,
}

/// The kinds of [`Crossing`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CrossingKind {
    /// The mount is the home directory or a parent of it.
    Home,
    /// The mount is, contains or lies inside a credential location.
    Secret,
    /// The mount is, contains or lies inside a host socket or runtime directory.
    HostSocket,
    /// The mount is writable and outside the workspace.
    WritableOutsideWorkspace,
    /// The mount is writable and is, or lies inside, a protected path (`.git`, `.claude`,
    /// ...: [`crate::protect::PROTECTED`]) that every sandbox otherwise sees read-only.
    Protected,
    /// An agent asked for a host path outside the workspace (a read-only mount, the script
    /// file): the user never chose to show it to the sandbox.
    OutsideWorkspace,
}

/// Who asked for a run: what the user types is their decision, what an agent asks for
/// through the MCP server is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asker {
    /// The user, at the command line.
    User,
    /// An agent, through the MCP server.
    Agent,
}

impl CrossingKind {
    /// A stable lower-case identifier for JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            CrossingKind::Home => "home",
            CrossingKind::Secret => "secret",
            CrossingKind::HostSocket => "host-socket",
            CrossingKind::WritableOutsideWorkspace => "writable-outside-workspace",
            CrossingKind::Protected => "protected-path",
            CrossingKind::OutsideWorkspace => "outside-workspace",
        }
    }
}

impl fmt::Display for Crossing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = match self.mount.mode {
            MountMode::ReadOnly => "ro",
            MountMode::ReadWrite => "rw",
        };
        write!(f, "`{}` ({mode}): {}", self.mount.path.display(), self.reason)
    }
}

/// Lists every boundary crossing of `spec`, mounts in order, the workspace first.
///
/// A mount (or the workspace, which is mounted read-write) crosses when it is, lies inside
/// or lies over ("contains") the home directory, a [`HOME_SECRETS`] location, a
/// [`HOST_SOCKETS`] location, any `.ssh`-like directory or a `*.sock` of a container daemon;
/// and separately when it is read-write outside the workspace. Read-only mounts that expose
/// none of these need nothing. Purely lexical: symlinks are not followed, so classify the
/// canonicalized spec too.
///
/// `home` is the caller's home directory, absolute; `None` when unknown (then only the
/// absolute locations, the name rules and writes outside the workspace are checked).
pub fn classify(spec: &RunSpec, home: Option<&Path>) -> Vec<Crossing> {
    let home = home.filter(|home| home.is_absolute()).map(normalize);
    let home = home.as_deref();
    let workspace = normalize(&spec.workspace);
    let mut crossings = Vec::new();

    let workspace_mount = Mount { path: workspace.clone(), mode: MountMode::ReadWrite };
    if let Some((kind, reason)) = exposure(&workspace, home) {
        let reason = format!("the workspace is mounted read-write and {reason}");
        crossings.push(Crossing { mount: workspace_mount, kind, reason });
    }

    for mount in &spec.mounts {
        // Resolved specs hold absolute paths; a relative one is read as resolve would.
        let path = normalize(&workspace.join(&mount.path));
        let mount = Mount { path: path.clone(), mode: mount.mode };
        if let Some((kind, reason)) = exposure(&path, home) {
            crossings.push(Crossing { mount: mount.clone(), kind, reason });
        }
        if mount.mode == MountMode::ReadWrite
            && let Some(protected) = protected_mount(&path, &workspace)
        {
            crossings.push(Crossing {
                mount: mount.clone(),
                kind: CrossingKind::Protected,
                reason: format!(
                    "it is writable and `{}` is protected: {}, so a script could run code on \
                     the host after the run",
                    protected.name, protected.why
                ),
            });
        }
        if mount.mode == MountMode::ReadWrite && !is_within(&path, &workspace) {
            crossings.push(Crossing {
                mount,
                kind: CrossingKind::WritableOutsideWorkspace,
                reason: format!(
                    "writable outside the workspace `{}`: the script could change or delete \
                     host files there",
                    workspace.display()
                ),
            });
        }
    }
    crossings
}

/// The protected name a writable mount of `path` is or lies inside: judged on the part below
/// the workspace for a path inside it (a workspace may itself sit below a `.claude`
/// directory), else on the whole path.
fn protected_mount(path: &Path, workspace: &Path) -> Option<&'static crate::protect::Protected> {
    let below = path.strip_prefix(workspace).unwrap_or(path);
    crate::protect::protected_component(below)
}

/// [`classify`] for `asker`: for an [`Asker::Agent`], a read-only mount outside the workspace
/// that crosses nothing else is a [`CrossingKind::OutsideWorkspace`] crossing as well.
pub fn classify_as(spec: &RunSpec, home: Option<&Path>, asker: Asker) -> Vec<Crossing> {
    let mut crossings = classify(spec, home);
    if asker == Asker::User {
        return crossings;
    }
    let workspace = normalize(&spec.workspace);
    for mount in &spec.mounts {
        let path = normalize(&workspace.join(&mount.path));
        if is_within(&path, &workspace) || crossings.iter().any(|c| c.mount.path == path) {
            continue;
        }
        crossings.push(Crossing {
            mount: Mount { path, mode: mount.mode },
            kind: CrossingKind::OutsideWorkspace,
            reason: outside_reason(&workspace, "the mount"),
        });
    }
    crossings
}

/// The crossing of running the host file `script` (absolute, as a resolved spec holds it):
/// the sandbox sees the file, and its content comes back in a traceback. It crosses as a
/// read-only mount of it would (a credential, a host socket); for an [`Asker::Agent`] also
/// when it lies anywhere outside `workspace`. `None` for a script inside the workspace,
/// which the sandbox sees anyway. Purely lexical: classify the canonical path too.
pub fn classify_script(
    script: &Path,
    workspace: &Path,
    home: Option<&Path>,
    asker: Asker,
) -> Option<Crossing> {
    let home = home.filter(|home| home.is_absolute()).map(normalize);
    let workspace = normalize(workspace);
    let path = normalize(&workspace.join(script));
    if is_within(&path, &workspace) {
        return None;
    }
    let mount = Mount { path, mode: MountMode::ReadOnly };
    if let Some((kind, reason)) = exposure(&mount.path, home.as_deref()) {
        return Some(Crossing { mount, kind, reason: format!("the script: {reason}") });
    }
    (asker == Asker::Agent).then(|| Crossing {
        mount,
        kind: CrossingKind::OutsideWorkspace,
        reason: outside_reason(&workspace, "the script"),
    })
}

/// The crossings of an agent's use of session `id`, started in `theirs` (a real host path,
/// mounted read-write in the session) from `workspace`: none when `theirs` lies in the
/// workspace; else it is written outside the workspace, and exposes what mounting it would.
/// A session's own mounts are not judged again: they were approved when it started.
pub fn classify_session(
    id: &str,
    theirs: &Path,
    workspace: &Path,
    home: Option<&Path>,
) -> Vec<Crossing> {
    let home = home.filter(|home| home.is_absolute()).map(normalize);
    let workspace = normalize(workspace);
    let theirs = normalize(theirs);
    if is_within(&theirs, &workspace) {
        return Vec::new();
    }
    let mount = Mount { path: theirs, mode: MountMode::ReadWrite };
    let mut crossings = Vec::new();
    if let Some((kind, reason)) = exposure(&mount.path, home.as_deref()) {
        let reason = format!("session `{id}` has it as its workspace, and {reason}");
        crossings.push(Crossing { mount: mount.clone(), kind, reason });
    }
    let reason = format!(
        "session `{id}` was started in another workspace: what runs in it reads and changes \
         host files outside this workspace `{}`",
        workspace.display()
    );
    crossings.push(Crossing { mount, kind: CrossingKind::WritableOutsideWorkspace, reason });
    crossings
}

/// Why an agent's path outside the workspace needs the user.
fn outside_reason(workspace: &Path, what: &str) -> String {
    format!(
        "{what} is outside the workspace `{}`: the sandbox would see host files the user did \
         not choose to show it",
        workspace.display()
    )
}

/// A host environment variable copied into a sandbox by name (`env = ["NAME"]`, `NAME`
/// without a value) where an agent asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvCrossing {
    /// The variable's name.
    pub name: String,
    /// Whether the name looks secret ([`is_secret_name`]).
    pub secret: bool,
    /// A human explanation, lower case, no trailing period.
    pub reason: String,
}

impl EnvCrossing {
    /// A stable lower-case identifier for JSON output.
    pub fn kind(&self) -> &'static str {
        if self.secret { "secret-variable" } else { "host-variable" }
    }
}

impl fmt::Display for EnvCrossing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`${}`: {}", self.name, self.reason)
    }
}

/// The crossings of copying the host variables `names` into a sandbox. The user's own
/// `--env NAME` is their decision (none); for an [`Asker::Agent`] every copy is one, whether
/// the host has the variable or not (the answer must not tell which): the agent would learn
/// a value of the user's environment it was never given, and masking the output cannot stop
/// a script that prints it encoded. A value the agent gives itself (`NAME=VALUE`) is no copy.
pub fn classify_copied_env<'a>(
    names: impl IntoIterator<Item = &'a str>,
    asker: Asker,
) -> Vec<EnvCrossing> {
    if asker == Asker::User {
        return Vec::new();
    }
    let mut out: Vec<EnvCrossing> = Vec::new();
    for name in names {
        if out.iter().any(|c| c.name == name) {
            continue;
        }
        let secret = is_secret_name(name);
        let reason = if secret {
            "copies the host's value of a secret-looking variable into the sandbox, where the \
             script can print it encoded, past the output masking"
        } else {
            "copies the host's value of this variable into the sandbox; give the value \
             (`NAME=VALUE`) instead to need no approval"
        };
        out.push(EnvCrossing { name: name.to_owned(), secret, reason: reason.to_owned() });
    }
    out
}

/// The most serious thing mounting `path` exposes, with a reason.
fn exposure(path: &Path, home: Option<&Path>) -> Option<(CrossingKind, String)> {
    if let Some(home) = home
        && is_within(home, path)
    {
        let what = if path == home {
            "it is your home directory".to_owned()
        } else {
            format!("it contains your home directory `{}`", home.display())
        };
        return Some((
            CrossingKind::Home,
            format!("{what}, with credentials such as ~/.ssh, ~/.aws and ~/.gnupg"),
        ));
    }

    if let Some(home) = home {
        for secret in HOME_SECRETS {
            let location = home.join(secret);
            if let Some(relation) = relation(path, &location) {
                let reason = format!("it {relation} ~/{secret}, which holds credentials");
                return Some((CrossingKind::Secret, reason));
            }
        }
    }
    if let Some(component) = path.components().find_map(|component| {
        let name = component.as_os_str().to_str()?;
        SECRET_COMPONENTS.contains(&name).then_some(name)
    }) {
        let reason = format!("it is inside a `{component}` directory, which holds credentials");
        return Some((CrossingKind::Secret, reason));
    }

    let sockets: Vec<(&str, &str)> = HOST_SOCKETS
        .iter()
        .filter_map(|socket| Some((relation(path, Path::new(socket))?, *socket)))
        .collect();
    if let Some((relation, _)) = sockets.first() {
        let mut names: Vec<String> =
            sockets.iter().take(2).map(|(_, socket)| format!("`{socket}`")).collect();
        if sockets.len() > 2 {
            names.push(format!("{} more", sockets.len() - 2));
        }
        let reason = format!("it {relation} {}: {SOCKET_DANGER}", names.join(", "));
        return Some((CrossingKind::HostSocket, reason));
    }
    if path
        .file_name()
        .and_then(|name| name.to_str())
        .is_some_and(|name| SOCKET_NAMES.contains(&name))
    {
        let reason = format!("it is a container daemon socket: {SOCKET_DANGER}");
        return Some((CrossingKind::HostSocket, reason));
    }
    None
}

/// Why host sockets matter, for every [`CrossingKind::HostSocket`] reason.
const SOCKET_DANGER: &str = "host sockets hand out control of the host (container daemons) or of \
     the user session (D-Bus, agents), and a read-only mount does not stop `connect()`";

/// How a mounted `path` relates to a sensitive `location`: it is it, is inside it, or
/// contains it ("over" it). `None` when mounting `path` does not expose `location`.
fn relation(path: &Path, location: &Path) -> Option<&'static str> {
    if path == location {
        Some("is")
    } else if is_within(path, location) {
        Some("is inside")
    } else if is_within(location, path) {
        Some("contains")
    } else {
        None
    }
}
