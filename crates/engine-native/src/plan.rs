//! The pure heart of the engine: from the host facts and the resolved run to the ordered list
//! of operations that build the sandbox's mount tree, and the ids it runs as. No IO happens
//! here, so every decision is snapshot-tested (`tests.rs`); [`crate::sandbox`] only performs
//! what a [`Plan`] says, in order.
//!
//! The layout is engine-bwrap's (`engine_bwrap::plan`): the same policy from `sandbox_core`
//! ([`sandbox_core::check_host_path`], [`sandbox_core::SANDBOX_HOME`], the CA bundle path), the
//! same `/usr`, library dirs and allowlisted `/etc`, so the two walls cannot differ in what a
//! script sees.
//!
//! Paths in operations are as the sandbox sees them; [`crate::sandbox`] prefixes them with the
//! staging root while building, and bind sources with the host's old root.

use std::path::{Path, PathBuf};

use sandbox_core::{MountMode, PathUse};

use crate::error::{Error, Result};

/// The unprivileged host user (and group) a root caller's sandbox runs as.
pub const NOBODY: u32 = reaper::idmap::NOBODY;

/// `/proc` entries that reach host-wide kernel state; read-only in every sandbox.
pub const PROC_READ_ONLY: &[&str] = &["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"];

/// The memory of the sandbox's init (our pid 1), masked so a script cannot rewrite the process
/// that reaps it and so ends the run (the wall refuses `ptrace`, not `open`).
pub const INIT_MEMORY: &[&str] = &["/proc/1/mem", "/proc/1/task/1/mem"];

/// Device nodes bound from the host into the sandbox's `/dev` (bwrap's `--dev` set).
pub const DEV_NODES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// The tmpfs dirs (besides home) a sandbox may write.
pub const TMP: &str = "/tmp";

/// Read-only or read-write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read-only (and nosuid, nodev).
    ReadOnly,
    /// Read-write (still nosuid, nodev).
    ReadWrite,
}

/// How a top-level entry (`/bin`, `/lib64`, ...) looks on the host: engine-bwrap's, which
/// gathers the host facts for both engines.
pub use engine_bwrap::RootEntry;

/// Everything the plan needs; gathered by the caller (the engine), built by hand in tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    /// Host uid and gid of the caller.
    pub uid: u32,
    /// See [`Input::uid`].
    pub gid: u32,
    /// The caller's canonical host home (never visible inside; see [`sandbox_core::check_host_path`]).
    pub home: Option<PathBuf>,
    /// python-sandbox's own directory and what it holds: no caller path may overlap it.
    pub own: (PathBuf, String),
    /// `/bin`, `/lib`, ... as the host has them.
    pub root_entries: Vec<RootEntry>,
    /// (canonical host source, path below `/etc`) of each allowlisted `/etc` entry present.
    pub etc: Vec<(PathBuf, PathBuf)>,
    /// The synthesized user database (host paths of files we wrote).
    pub passwd: PathBuf,
    /// See [`Input::passwd`].
    pub group: PathBuf,
    /// The host's canonical CA bundle, shown at [`sandbox_core::SANDBOX_CA_BUNDLE`].
    pub ca_bundle: Option<PathBuf>,
    /// Interpreter prefixes and the prepared environment, read-only: (host path, where the
    /// sandbox sees it), the same path or one below `/opt/python-sandbox`
    /// (`engine_bwrap`'s relocation, which keeps the caller's home out of sight).
    pub ro_dirs: Vec<(PathBuf, PathBuf)>,
    /// The canonical workspace: read-write at its own path, the working directory. `None` for
    /// a prepare step, which sees no caller path at all.
    pub workspace: Option<PathBuf>,
    /// Declared extra mounts (canonical), each at its own path.
    pub mounts: Vec<(PathBuf, MountMode)>,
    /// The engine's own directories a prepare step writes (the uv cache, the environment being
    /// built): (host path, where the sandbox sees it) as for [`Input::ro_dirs`], read-write, and
    /// refused unless the host path lies inside [`Input::own`].
    pub own_writable: Vec<(PathBuf, PathBuf)>,
    /// A root caller's caller paths that are mounted as they are rather than idmapped (on a
    /// filesystem without idmapped mounts the engine lends them to nobody with an ACL).
    pub not_idmapped: Vec<PathBuf>,
    /// The working directory; default the workspace, else `/`.
    pub chdir: Option<PathBuf>,
    /// Whether the sandbox gets a network (else only a loopback of its own).
    pub net: bool,
    /// Size cap in bytes of each tmpfs (`/tmp`, home).
    pub tmpfs_size: u64,
    /// (path, target) of symlinks below `/opt/python-sandbox` into one of
    /// [`Input::own_writable`]'s destinations (`engine_bwrap::Plan::links`).
    pub links: Vec<(PathBuf, PathBuf)>,
}

/// One step of building the tree, in order. Paths are the sandbox's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A directory in the tree being built (a mount point's parent).
    Dir {
        /// Where.
        path: PathBuf,
        /// Its mode (read-only scaffolding under a writable tmpfs is 0555).
        mode: u32,
    },
    /// A symlink.
    Symlink {
        /// Its target.
        target: PathBuf,
        /// Where.
        path: PathBuf,
    },
    /// A recursive bind of a host path; nosuid and nodev always, read-only unless `ReadWrite`.
    Bind {
        /// The host path.
        src: PathBuf,
        /// Where it appears.
        dest: PathBuf,
        /// Read-only or read-write.
        access: Access,
        /// A caller's path (workspace, declared mount): a root caller's is mounted idmapped, so
        /// root's files are the sandbox user's and its writes land as root's.
        caller: bool,
    },
    /// A size-capped tmpfs (nosuid, nodev).
    Tmpfs {
        /// Where.
        path: PathBuf,
        /// Mode of its root.
        mode: u32,
        /// Size cap in bytes.
        size: u64,
        /// Owner of its root (home belongs to the sandbox user; else the builder, root).
        owner: Option<(u32, u32)>,
    },
    /// A fresh procfs for the sandbox's pid namespace.
    Proc,
    /// A device node bound from the host's `/dev`.
    DevNode {
        /// Its name in `/dev`.
        name: String,
    },
    /// A new devpts instance at `/dev/pts` with `/dev/ptmx` linked to it (it needs uid 0
    /// mapped where it is mounted: see [`Ids::builder`]).
    Devpts,
    /// Remount an existing path read-only (skipped when it does not exist).
    ReadOnly {
        /// Where.
        path: PathBuf,
    },
    /// Cover a file with `/dev/null`.
    Mask {
        /// Where.
        path: PathBuf,
    },
    /// The root tmpfs becomes read-only: nothing may be added next to the mount points.
    RootReadOnly,
}

/// Who the sandbox is, inside and on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids {
    /// uid inside the sandbox.
    pub uid: u32,
    /// gid inside the sandbox.
    pub gid: u32,
    /// The host uid that uid is (never 0).
    pub host_uid: u32,
    /// The host gid that gid is.
    pub host_gid: u32,
    /// The caller is root: the tree is built as host root in a mount namespace of its own,
    /// then the sandbox drops to [`Ids::host_uid`] before its user namespace (an unprivileged
    /// caller must create the user namespace first to have the rights to mount).
    pub root_caller: bool,
}

impl Ids {
    /// Who builds the tree, in the ids of the namespace it is built in: an unprivileged
    /// caller is uid 0 of its first user namespace (devpts needs uid 0 mapped; the sandbox's
    /// own user namespace maps [`Ids::uid`] onto it), a root caller's tree is built by host root
    /// for host nobody. Owner of what the sandbox must own (its home).
    pub fn builder(&self) -> (u32, u32) {
        if self.root_caller { (self.host_uid, self.host_gid) } else { (0, 0) }
    }
}

/// A complete sandbox: ids, the tree, what Landlock lets it write, where it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Who runs.
    pub ids: Ids,
    /// The tree, in order.
    pub ops: Vec<Op>,
    /// Paths the sandbox may write (Landlock rules): the workspace, rw mounts, tmpfs dirs,
    /// and the writable devices.
    pub writable: Vec<PathBuf>,
    /// `HOME` inside.
    pub home: PathBuf,
    /// Working directory.
    pub chdir: PathBuf,
    /// Network (net off: an empty network namespace with only loopback up).
    pub net: bool,
}

/// Builds the plan, refusing any caller path the shared policy refuses.
pub fn plan(input: &Input) -> Result<Plan> {
    let own = (input.own.0.as_path(), input.own.1.as_str());
    let home_host = input.home.as_deref();
    let refuse = |path: &Path, usage: PathUse| {
        sandbox_core::check_host_path(path, usage, home_host, own)
            .map_err(|reason| Error::Refused { path: path.to_owned(), reason })
    };
    if let Some(workspace) = &input.workspace {
        refuse(workspace, PathUse::Workspace)?;
    }
    for (path, _) in &input.mounts {
        refuse(path, PathUse::Mount)?;
    }
    for (path, _) in &input.own_writable {
        if !path.starts_with(&input.own.0) || path == &input.own.0 {
            return Err(Error::Refused {
                path: path.clone(),
                reason: format!("it is not inside {}", input.own.1),
            });
        }
    }
    let own_dests =
        input.ro_dirs.iter().chain(&input.own_writable).filter(|(src, dest)| src != dest);
    for (_, dest) in own_dests {
        if !dest.starts_with(RELOCATED) {
            return Err(Error::Refused {
                path: dest.clone(),
                reason: format!("it is shown at another path only below {RELOCATED}"),
            });
        }
    }
    for path in input
        .workspace
        .iter()
        .chain(input.mounts.iter().map(|(p, _)| p))
        .chain(input.ro_dirs.iter().flat_map(|(s, d)| [s, d]))
        .chain(input.own_writable.iter().flat_map(|(s, d)| [s, d]))
        .chain(&input.chdir)
    {
        if !path.is_absolute() || path.components().any(|c| c == std::path::Component::ParentDir) {
            return Err(Error::Refused {
                path: path.clone(),
                reason: "it is not a canonical absolute path".into(),
            });
        }
    }

    let root_caller = input.uid == 0;
    let ids = if root_caller {
        Ids { uid: NOBODY, gid: NOBODY, host_uid: NOBODY, host_gid: NOBODY, root_caller }
    } else {
        Ids {
            uid: input.uid,
            gid: input.gid,
            host_uid: input.uid,
            host_gid: input.gid,
            root_caller,
        }
    };
    let home = PathBuf::from(sandbox_core::SANDBOX_HOME);
    let tmp = PathBuf::from(TMP);

    let mut ops = Vec::new();
    let mut made: Vec<PathBuf> = Vec::new();
    let base_ro = |ops: &mut Vec<Op>, made: &mut Vec<PathBuf>, src: &Path, dest: &Path| {
        scaffold(ops, made, dest, &[]);
        ops.push(Op::Bind {
            src: src.to_owned(),
            dest: dest.to_owned(),
            access: Access::ReadOnly,
            caller: false,
        });
    };
    base_ro(&mut ops, &mut made, Path::new("/usr"), Path::new("/usr"));
    for entry in &input.root_entries {
        match entry {
            RootEntry::Symlink { name, target } => {
                ops.push(Op::Symlink { target: target.clone(), path: Path::new("/").join(name) })
            }
            RootEntry::Dir { name } => {
                let path = Path::new("/").join(name);
                base_ro(&mut ops, &mut made, &path, &path);
            }
        }
    }
    for (src, rel) in &input.etc {
        base_ro(&mut ops, &mut made, src, &Path::new("/etc").join(rel));
    }
    base_ro(&mut ops, &mut made, &input.passwd, Path::new("/etc/passwd"));
    base_ro(&mut ops, &mut made, &input.group, Path::new("/etc/group"));
    if let Some(ca) = &input.ca_bundle {
        base_ro(&mut ops, &mut made, ca, Path::new(sandbox_core::SANDBOX_CA_BUNDLE));
    }

    ops.push(Op::Dir { path: "/proc".into(), mode: 0o555 });
    ops.push(Op::Proc);
    for path in PROC_READ_ONLY {
        ops.push(Op::ReadOnly { path: path.into() });
    }
    for path in INIT_MEMORY {
        ops.push(Op::Mask { path: path.into() });
    }
    ops.push(Op::Dir { path: "/dev".into(), mode: 0o755 });
    ops.push(Op::Tmpfs { path: "/dev".into(), mode: 0o755, size: 64 << 10, owner: None });
    for name in DEV_NODES {
        ops.push(Op::DevNode { name: (*name).to_owned() });
    }
    for (target, link) in [
        ("/proc/self/fd", "/dev/fd"),
        ("/proc/self/fd/0", "/dev/stdin"),
        ("/proc/self/fd/1", "/dev/stdout"),
        ("/proc/self/fd/2", "/dev/stderr"),
        ("/proc/kcore", "/dev/core"),
    ] {
        ops.push(Op::Symlink { target: target.into(), path: link.into() });
    }
    ops.push(Op::Devpts);
    ops.push(Op::Dir { path: "/dev/shm".into(), mode: 0o755 });
    ops.push(Op::Tmpfs {
        path: "/dev/shm".into(),
        mode: 0o1777,
        size: input.tmpfs_size,
        owner: None,
    });

    ops.push(Op::Dir { path: tmp.clone(), mode: 0o755 });
    ops.push(Op::Tmpfs { path: tmp.clone(), mode: 0o1777, size: input.tmpfs_size, owner: None });
    scaffold(&mut ops, &mut made, &home, &[]);
    ops.push(Op::Dir { path: home.clone(), mode: 0o755 });
    ops.push(Op::Tmpfs {
        path: home.clone(),
        mode: 0o700,
        size: input.tmpfs_size,
        owner: Some(ids.builder()),
    });

    let mut binds: Vec<Bound> = input
        .ro_dirs
        .iter()
        .map(|(src, dest)| Bound {
            src: src.clone(),
            dest: dest.clone(),
            access: Access::ReadOnly,
            caller: false,
        })
        .collect();
    binds.extend(input.own_writable.iter().map(|(src, dest)| Bound {
        src: src.clone(),
        dest: dest.clone(),
        access: Access::ReadWrite,
        caller: false,
    }));
    binds.extend(input.workspace.iter().map(|w| Bound::same(w, Access::ReadWrite, true)));
    binds.extend(input.mounts.iter().map(|(p, mode)| {
        let access = match mode {
            MountMode::ReadOnly => Access::ReadOnly,
            MountMode::ReadWrite => Access::ReadWrite,
        };
        Bound::same(p, access, true)
    }));
    for bind in &mut binds {
        bind.caller &= !input.not_idmapped.contains(&bind.src);
    }
    let binds = order_binds(binds);
    let writable_roots = [home.as_path(), tmp.as_path()];
    let mut earlier: Vec<PathBuf> = Vec::new();
    for bind in &binds {
        scaffold_under(&mut ops, &mut made, &bind.dest, &writable_roots, &earlier);
        ops.push(Op::Bind {
            src: bind.src.clone(),
            dest: bind.dest.clone(),
            access: bind.access,
            caller: bind.caller,
        });
        earlier.push(bind.dest.clone());
    }
    for (path, target) in &input.links {
        let inside = input.own_writable.iter().any(|(_, dest)| target.starts_with(dest));
        if !path.starts_with(RELOCATED) || !inside {
            return Err(Error::Unsupported {
                what: format!("refusing to link `{}` to `{}`", path.display(), target.display()),
                hint:
                    "a link lies below /opt/python-sandbox and points into a tree the step writes"
                        .into(),
            });
        }
        scaffold_under(&mut ops, &mut made, path, &writable_roots, &earlier);
        ops.push(Op::Symlink { target: target.clone(), path: path.clone() });
    }
    ops.push(Op::RootReadOnly);

    let mut writable = vec![tmp, home.clone(), "/dev/shm".into()];
    writable
        .extend(["/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/pts"].map(PathBuf::from));
    writable.extend(binds.iter().filter(|b| b.access == Access::ReadWrite).map(|b| b.dest.clone()));
    let chdir = input
        .chdir
        .clone()
        .or_else(|| input.workspace.clone())
        .unwrap_or_else(|| PathBuf::from("/"));
    Ok(Plan { ids, ops, writable, home, chdir, net: input.net })
}

/// Already visible read-only through the base layout.
fn covered_by_base(path: &Path) -> bool {
    path.starts_with("/usr")
}

/// Where python-sandbox's own trees are shown when not at their host path.
const RELOCATED: &str = "/opt/python-sandbox";

/// One bind of the tree being planned.
#[derive(Debug, Clone)]
struct Bound {
    src: PathBuf,
    dest: PathBuf,
    access: Access,
    /// A caller's path (see [`Op::Bind::caller`]).
    caller: bool,
}

impl Bound {
    fn same(path: &Path, access: Access, caller: bool) -> Bound {
        Bound { src: path.to_owned(), dest: path.to_owned(), access, caller }
    }
}

/// Parents before children; the later of two entries for one destination wins (a declared
/// mount overrides the same read-only dir); read-only dirs under `/usr` are already there.
fn order_binds(binds: Vec<Bound>) -> Vec<Bound> {
    let mut out: Vec<Bound> = Vec::new();
    for bind in binds {
        let at_home = bind.src == bind.dest;
        if bind.access == Access::ReadOnly && !bind.caller && at_home && covered_by_base(&bind.dest)
        {
            continue;
        }
        if let Some(existing) = out.iter_mut().find(|b| b.dest == bind.dest) {
            *existing = bind;
        } else {
            out.push(bind);
        }
    }
    out.sort_by_key(|b| b.dest.components().count());
    out
}

/// Creates the missing ancestors of `dest` in the root tmpfs (mode 0755, read-only once the
/// root is remounted).
fn scaffold(ops: &mut Vec<Op>, made: &mut Vec<PathBuf>, dest: &Path, _earlier: &[PathBuf]) {
    let mut ancestors: Vec<&Path> =
        dest.ancestors().skip(1).take_while(|p| p.parent().is_some()).collect();
    ancestors.reverse();
    for dir in ancestors {
        if !made.iter().any(|m| m == dir) {
            ops.push(Op::Dir { path: dir.to_owned(), mode: 0o755 });
            made.push(dir.to_owned());
        }
    }
}

/// Like [`scaffold`], but ancestors strictly inside a writable tmpfs (a workspace under `/tmp`)
/// are 0555 (the script must not write next to its workspace), and ancestors at or below an
/// earlier bind are the host's own directories, never touched.
fn scaffold_under(
    ops: &mut Vec<Op>,
    made: &mut Vec<PathBuf>,
    dest: &Path,
    roots: &[&Path],
    earlier: &[PathBuf],
) {
    let mut ancestors: Vec<&Path> =
        dest.ancestors().skip(1).take_while(|p| p.parent().is_some()).collect();
    ancestors.reverse();
    for dir in ancestors {
        let inside_root = roots.iter().find(|r| dir.starts_with(r));
        if inside_root.is_some_and(|r| dir == *r) || roots.iter().any(|r| r.starts_with(dir)) {
            continue;
        }
        if earlier.iter().any(|b| dir.starts_with(b)) || made.iter().any(|m| m == dir) {
            continue;
        }
        let mode = if inside_root.is_some() { 0o555 } else { 0o755 };
        ops.push(Op::Dir { path: dir.to_owned(), mode });
        made.push(dir.to_owned());
    }
}

/// Pure: the host setting that explains why user namespaces cannot be made, from the sysctls
/// (`name` below `/proc/sys`, `None` when absent), in the order they are checked. Only asked
/// once a probe has failed: the AppArmor restriction lets creation succeed and fails later.
pub fn userns_reason(sysctl: impl Fn(&str) -> Option<String>) -> Option<&'static str> {
    let is = |name: &str, value: &str| sysctl(name).is_some_and(|v| v.trim() == value);
    if is("user/max_user_namespaces", "0") {
        Some(engine_detect::MAX_USER_NAMESPACES_OFF)
    } else if is("kernel/unprivileged_userns_clone", "0") {
        Some(engine_detect::USERNS_CLONE_OFF)
    } else if is("kernel/apparmor_restrict_unprivileged_userns", "1") {
        Some(engine_detect::APPARMOR_USERNS_RESTRICTED)
    } else {
        None
    }
}
