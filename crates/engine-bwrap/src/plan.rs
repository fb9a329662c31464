//! The pure heart of the engine: from host facts and resolved paths to one bwrap argv plus the
//! environment bwrap is started with. No filesystem access happens here, so every decision
//! is snapshot-tested (see `tests.rs`).
//!
//! The environment is not put on the argv (`--setenv`) on purpose: argv is world-readable in
//! /proc, and `--env TOKEN=…` values must not be. The launcher hands it over through
//! `--args FD` (`crate::process`), not as bwrap's own environment either.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::host::{HostFacts, RootEntry, SANDBOX_CA_BUNDLE};

/// Read-only or read-write bind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read-only.
    ReadOnly,
    /// Read-write.
    ReadWrite,
}

/// One bind mount at `dest` inside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    /// The host path.
    pub src: PathBuf,
    /// Where it appears in the sandbox.
    pub dest: PathBuf,
    /// Read-only or read-write.
    pub access: Access,
}

impl Bind {
    pub(crate) fn same(path: &Path, access: Access) -> Bind {
        Bind { src: path.to_owned(), dest: path.to_owned(), access }
    }
}

/// A complete sandbox: what a [`crate::Launcher`] builds (bwrap from `Plan::argv`) and what
/// runs in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The network on (else a network namespace with only loopback).
    pub net: bool,
    /// The command in a session of its own.
    pub new_session: bool,
    /// `--die-with-parent`: every run and prepare dies with the process that started it. A
    /// session must outlive `session start`, so its sandbox does not (its agent's idle TTL,
    /// `stop` and the reaper end it instead).
    pub die_with_parent: bool,
    /// uid inside the sandbox.
    pub uid: u32,
    /// gid inside the sandbox.
    pub gid: u32,
    /// Home inside the sandbox: an empty tmpfs.
    pub home: PathBuf,
    /// Applied after the base layout, parents before children.
    pub binds: Vec<Bind>,
    /// (path, target) of symlinks made after the binds, below `/opt/python-sandbox` (a prepare
    /// step's view of the environment it builds inside the package store, so uv can hard-link
    /// from its cache: `BwrapEngine::install_dependencies`).
    pub links: Vec<(PathBuf, PathBuf)>,
    /// The command's working directory.
    pub chdir: PathBuf,
    /// The complete environment of bwrap and therefore of the sandboxed command.
    pub env: Vec<(String, OsString)>,
    /// The program (absolute, as the sandbox sees it) and its arguments.
    pub command: Vec<OsString>,
    /// `--json-status-fd`: lets the caller tell "bwrap failed to set up" from "script exited 1".
    pub status_fd: Option<i32>,
    /// `--seccomp`: a pipe carrying the compiled wall (`sandbox_core::bpf`).
    pub seccomp_fd: Option<i32>,
    /// `--block-fd`: the command starts only once this pipe is written (after pasta attached).
    pub block_fd: Option<i32>,
    /// The bind sources that came from the caller (workspace, mounts, script): canonical and
    /// classified, so each is pinned as a descriptor opened without following any link
    /// (`crate::pin`) and mounted from it. What was checked is what is mounted: a path swapped
    /// for a symlink after the check is refused, never resolved again.
    pub pinned: Vec<PathBuf>,
    /// (source, descriptor) of each pinned source, filled right before the start: bound with
    /// `--bind-fd`/`--ro-bind-fd` instead of by path (a non-root caller; a root caller's are
    /// staged from the same descriptors, see `crate::stage`).
    pub bind_fds: Vec<(PathBuf, i32)>,
    /// Ports pasta forwards into the sandbox (net on only).
    pub publish: Vec<sandbox_core::PublishedPort>,
    /// Size cap in bytes of every tmpfs (`/tmp`, home).
    pub tmpfs_size: u64,
    /// Host uid and gid bwrap is started as. `Some` for a root caller: bwrap maps the sandbox's
    /// user onto the uid it runs as, so started as root it would make the sandbox host root
    /// (able to write `/proc/sys`, and to leave setuid-root files in the workspace). Started as
    /// nobody it cannot reach root's files by path, so every bind source is first mounted, from
    /// a descriptor, into a private staging directory (`Plan::staging`) that bwrap binds from.
    pub run_as: Option<(u32, u32)>,
    /// Host sources (the workspace, read-write mounts) staged as idmapped mounts for a root
    /// caller: root's files appear owned by the sandbox's user, and what it writes lands owned
    /// by root, so nothing of the caller's permissions has to change.
    pub idmapped: Vec<PathBuf>,
    /// The script's resource limits (`crate::limits`); empty for prepare steps.
    pub limits: crate::limits::SandboxLimits,
}

/// Where the staging tmpfs of a root caller's sandbox is mounted, in a mount namespace of the
/// bwrap process alone (the host never sees it). `/tmp` exists on every system, and nothing
/// of the host's `/tmp` is needed once the sources are staged.
pub(crate) const STAGE: &str = "/tmp";

/// One bind source made reachable for an unprivileged bwrap: `src` (canonical host path) is
/// bind-mounted at `at` inside [`STAGE`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Staged {
    pub(crate) src: PathBuf,
    pub(crate) at: PathBuf,
    /// Mounted with root's ids shown as the sandbox user's ([`Plan::idmapped`]).
    pub(crate) idmap: bool,
    /// One of [`Plan::pinned`]: opened without following any link (else only the last
    /// component is not followed: our own cache may sit below a symlinked home).
    pub(crate) exact: bool,
}

/// `/proc` entries that reach host-wide kernel state; read-only in every sandbox (bwrap covers
/// them only where its caller could write them, which it checks by the directory's mode).
const PROC_READ_ONLY: &[&str] = &["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"];

/// The memory of the sandbox's init (bwrap's own pid 1, single-threaded), which reaps the script
/// and so ends the run. It runs as the script's user, so without this the script could rewrite
/// its code through these files (the seccomp wall refuses `ptrace` and `process_vm_writev`, not
/// `open`) and keep the run from ever ending.
const INIT_MEMORY: &[&str] = &["/proc/1/mem", "/proc/1/task/1/mem"];

impl Plan {
    /// The sources an unprivileged bwrap cannot be trusted to reach by path, each with its
    /// staged path; empty unless [`Plan::run_as`] is set. Binds, then the user database, then
    /// the CA bundle.
    pub(crate) fn staging(&self, host: &HostFacts) -> Vec<Staged> {
        if self.run_as.is_none() {
            return Vec::new();
        }
        let stage = Path::new(STAGE);
        let mut out: Vec<Staged> = self
            .binds
            .iter()
            .enumerate()
            .map(|(i, b)| Staged {
                src: b.src.clone(),
                at: stage.join(format!("b{i}")),
                idmap: b.access == Access::ReadWrite && self.idmapped.contains(&b.src),
                exact: self.pinned.contains(&b.src),
            })
            .collect();
        let plain = |src: &Path, name: &str| Staged {
            src: src.to_owned(),
            at: stage.join(name),
            idmap: false,
            exact: false,
        };
        out.push(plain(&host.passwd, "passwd"));
        out.push(plain(&host.group, "group"));
        if let Some(ca) = &host.ca_bundle {
            out.push(plain(ca, "ca"));
        }
        out
    }

    /// The bwrap arguments (without the bwrap binary itself).
    pub(crate) fn argv(&self, host: &HostFacts) -> Vec<OsString> {
        let staging = self.staging(host);
        let source = |src: &Path| -> OsString {
            staging
                .iter()
                .find(|s| s.src == src)
                .map_or_else(|| src.as_os_str().to_owned(), |s| s.at.clone().into_os_string())
        };
        let mut a = Argv::default();
        // Always a network namespace of its own: with net on, pasta connects it to the world
        // from outside ([`sandbox_net::UserNet`]) while bwrap waits on `--block-fd`.
        a.flag("--unshare-all");
        a.flag("--unshare-user");
        a.flag("--disable-userns");
        a.flags(&["--cap-drop", "ALL"]);
        if self.die_with_parent {
            a.flag("--die-with-parent");
        }
        if self.new_session {
            // Without a terminal there is no job control to lose, and a new session stops
            // TIOCSTI from typing into the caller's terminal.
            a.flag("--new-session");
        }
        a.flags(&["--uid", &self.uid.to_string(), "--gid", &self.gid.to_string()]);
        a.flags(&["--hostname", sandbox_core::SANDBOX_HOSTNAME]);
        if let Some(fd) = self.status_fd {
            a.flags(&["--json-status-fd", &fd.to_string()]);
        }
        if let Some(fd) = self.seccomp_fd {
            a.flags(&["--seccomp", &fd.to_string()]);
        }
        if let Some(fd) = self.block_fd {
            a.flags(&["--block-fd", &fd.to_string()]);
        }

        a.flags(&["--ro-bind", "/usr", "/usr"]);
        for entry in &host.root_entries {
            match entry {
                RootEntry::Symlink { name, target } => {
                    a.arg("--symlink");
                    a.arg(target.as_os_str());
                    a.arg(format!("/{name}"));
                }
                RootEntry::Dir { name } => {
                    let path = format!("/{name}");
                    a.flags(&["--ro-bind", &path, &path]);
                }
            }
        }
        for (src, rel) in &host.etc {
            a.arg("--ro-bind");
            a.arg(src.as_os_str());
            a.arg(Path::new("/etc").join(rel).as_os_str());
        }
        a.arg("--ro-bind");
        a.arg(source(&host.passwd));
        a.arg("/etc/passwd");
        a.arg("--ro-bind");
        a.arg(source(&host.group));
        a.arg("/etc/group");
        if let Some(ca) = &host.ca_bundle {
            a.arg("--ro-bind");
            a.arg(source(ca));
            a.arg(SANDBOX_CA_BUNDLE);
        }
        // Mount points below a writable tmpfs (a workspace under /tmp, a prefix under $HOME) need
        // their parent directories created there; bwrap would make them writable by the sandbox,
        // so a script could write "next to" the workspace (privately, but confusingly). Create
        // them ourselves read-only instead, before anything else creates them.
        a.flags(&["--proc", "/proc"]);
        for path in PROC_READ_ONLY {
            // `-try`: /proc/bus and /proc/irq are absent on some kernels.
            a.flags(&["--ro-bind-try", path, path]);
        }
        for path in INIT_MEMORY {
            a.flags(&["--ro-bind", "/dev/null", path]);
        }
        let size = self.tmpfs_size.to_string();
        a.flags(&["--dev", "/dev", "--size", &size, "--tmpfs", "/tmp"]);
        let tmp = Path::new("/tmp");
        let mut scaffolded: Vec<&Path> = Vec::new();
        scaffold(&mut a, &mut scaffolded, &self.home, &[tmp], &[]);
        a.flags(&["--size", &size, "--tmpfs"]);
        a.arg(self.home.as_os_str());
        for (i, bind) in self.binds.iter().enumerate() {
            scaffold(&mut a, &mut scaffolded, &bind.dest, &[&self.home, tmp], &self.binds[..i]);
        }
        for bind in &self.binds {
            match self.bind_fds.iter().find(|(src, _)| *src == bind.src).map(|(_, fd)| fd) {
                Some(fd) => {
                    a.arg(match bind.access {
                        Access::ReadOnly => "--ro-bind-fd",
                        Access::ReadWrite => "--bind-fd",
                    });
                    a.arg(fd.to_string());
                }
                None => {
                    a.arg(match bind.access {
                        Access::ReadOnly => "--ro-bind",
                        Access::ReadWrite => "--bind",
                    });
                    a.arg(source(&bind.src));
                }
            }
            a.arg(bind.dest.as_os_str());
        }
        for (path, target) in &self.links {
            a.arg("--symlink");
            a.arg(target.as_os_str());
            a.arg(path.as_os_str());
        }
        // The root tmpfs holds only mount points and the /etc skeleton; nothing may be added.
        a.flags(&["--remount-ro", "/"]);
        a.arg("--chdir");
        a.arg(self.chdir.as_os_str());
        a.arg("--");
        for arg in &self.command {
            a.arg(arg);
        }
        a.0
    }
}

/// Emits `--perms 0555 --dir` for each ancestor of `dest` strictly below the first of `roots`
/// (writable tmpfs mounts) that contains it, unless it was created already or lies at or below an
/// earlier bind (then it is the host's directory and must not be touched).
fn scaffold<'p>(
    a: &mut Argv,
    scaffolded: &mut Vec<&'p Path>,
    dest: &'p Path,
    roots: &[&Path],
    earlier: &[Bind],
) {
    let Some(root) = roots.iter().find(|r| dest.starts_with(r)) else { return };
    let mut ancestors: Vec<&Path> =
        dest.ancestors().skip(1).take_while(|p| p.starts_with(root) && p != root).collect();
    ancestors.reverse();
    for dir in ancestors {
        let under_bind = earlier.iter().any(|b| dir.starts_with(&b.dest));
        if !under_bind && !scaffolded.contains(&dir) {
            a.flags(&["--perms", "0555", "--dir"]);
            a.arg(dir.as_os_str());
            scaffolded.push(dir);
        }
    }
}

#[derive(Default)]
struct Argv(Vec<OsString>);

impl Argv {
    fn arg(&mut self, arg: impl AsRef<OsStr>) {
        self.0.push(arg.as_ref().to_owned());
    }
    fn flag(&mut self, flag: &str) {
        self.0.push(flag.into());
    }
    fn flags(&mut self, flags: &[&str]) {
        self.0.extend(flags.iter().map(OsString::from));
    }
}

/// Where home is inside the sandbox: the same fixed path on every engine
/// ([`sandbox_core::SANDBOX_HOME`]); the caller's home path does not exist there at all.
pub(crate) fn sandbox_home() -> PathBuf {
    PathBuf::from(sandbox_core::SANDBOX_HOME)
}

/// Where a sandbox sees the prepared environment: the same path as on the container engines.
pub(crate) const SANDBOX_ENV: &str = "/opt/python-sandbox/env";
/// Where a sandbox sees a relocated interpreter prefix (the second one gets `-2`, ...).
const SANDBOX_PYTHON: &str = "/opt/python-sandbox/python";
/// Where a sandbox sees uv (prepare steps and sessions).
pub(crate) const SANDBOX_TOOLS: &str = "/opt/python-sandbox/bin";

/// Where python-sandbox's own host paths appear inside a sandbox. The environment, the
/// interpreter and uv live under the caller's home on most machines (a pyenv interpreter, the
/// cache in `~/.cache`); at their host paths they would show the sandbox the home directory's
/// path and the user's name, so they are mounted at fixed paths below `/opt/python-sandbox`
/// instead, and every path of theirs a plan names (the command, `PATH`, `VIRTUAL_ENV`, the
/// working directory) is translated. Interpreters below `/usr` stay where they are (the
/// base layout shows `/usr` anyway). An environment is built at the path it is run at, so
/// the paths uv writes into it (`pyvenv.cfg`, `bin/python`, entry points) hold inside.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Relocation {
    /// (host, sandbox), deeper host paths first.
    pairs: Vec<(PathBuf, PathBuf)>,
    /// (an empty host directory, a host directory it covers read-only): a relocated
    /// interpreter's own site-packages, which nothing of a run uses.
    masks: Vec<(PathBuf, PathBuf)>,
    /// `LD_LIBRARY_PATH` inside: the relocated library directory of an interpreter linked with
    /// an absolute run path into its host prefix (a pyenv `--enable-shared` build).
    library_path: Option<PathBuf>,
}

impl Relocation {
    /// `env`: the environment directory; `prefixes`: the interpreter's (canonical); `uv`:
    /// its binary. `masks` are (empty directory, site-packages) pairs of the interpreter's;
    /// `library_path`: the interpreter needs its first prefix's `lib` on the loader's path.
    pub(crate) fn new(
        env: Option<&Path>,
        prefixes: &[PathBuf],
        uv: Option<&Path>,
        masks: Vec<(PathBuf, PathBuf)>,
        library_path: bool,
    ) -> Relocation {
        let mut pairs: Vec<(PathBuf, PathBuf)> = Vec::new();
        if let Some(env) = env {
            pairs.push((env.to_owned(), PathBuf::from(SANDBOX_ENV)));
        }
        let mut moved = 0;
        for prefix in prefixes {
            let inside_another = prefixes.iter().any(|p| p != prefix && prefix.starts_with(p));
            if covered_by_base(prefix) || inside_another || pairs.iter().any(|(h, _)| h == prefix) {
                continue;
            }
            moved += 1;
            let dest = match moved {
                1 => PathBuf::from(SANDBOX_PYTHON),
                n => PathBuf::from(format!("{SANDBOX_PYTHON}-{n}")),
            };
            pairs.push((prefix.clone(), dest));
        }
        if let Some(uv) = uv {
            let name = uv.file_name().map_or_else(|| "uv".into(), |n| n.to_owned());
            pairs.push((uv.to_owned(), Path::new(SANDBOX_TOOLS).join(name)));
        }
        pairs.sort_by_key(|(host, _)| std::cmp::Reverse(host.components().count()));
        let mut out = Relocation { pairs, masks: Vec::new(), library_path: None };
        out.masks = masks.into_iter().filter(|(_, site)| out.moves(site)).collect();
        out.library_path = prefixes
            .first()
            .filter(|p| library_path && out.moves(p))
            .map(|p| out.path(&p.join("lib")));
        out
    }

    fn moves(&self, host: &Path) -> bool {
        self.pairs.iter().any(|(h, _)| host.starts_with(h))
    }

    /// Where the sandbox sees the host path `host`.
    pub(crate) fn path(&self, host: &Path) -> PathBuf {
        for (h, dest) in &self.pairs {
            if let Ok(rest) = host.strip_prefix(h) {
                return if rest.as_os_str().is_empty() { dest.clone() } else { dest.join(rest) };
            }
        }
        host.to_owned()
    }

    /// A command-line argument: an absolute path is translated, anything else kept.
    fn arg(&self, arg: &OsStr) -> OsString {
        if arg.as_encoded_bytes().starts_with(b"/") {
            self.path(Path::new(arg)).into_os_string()
        } else {
            arg.to_owned()
        }
    }

    /// A bind of the host path `host` at its place in the sandbox.
    fn bind(&self, host: &Path, access: Access) -> Bind {
        Bind { src: host.to_owned(), dest: self.path(host), access }
    }

    /// The binds that hide the relocated interpreters' own site-packages.
    fn mask_binds(&self) -> impl Iterator<Item = Bind> + '_ {
        self.masks.iter().map(|(empty, site)| Bind {
            src: empty.clone(),
            dest: self.path(site),
            access: Access::ReadOnly,
        })
    }

    /// Sets `LD_LIBRARY_PATH` where the interpreter needs it.
    fn set_library_path(&self, env: &mut Vec<(String, OsString)>) {
        if let Some(lib) = &self.library_path {
            set_env(env, "LD_LIBRARY_PATH", lib.clone().into_os_string());
        }
    }
}

/// Already visible read-only through the base layout.
fn covered_by_base(path: &Path) -> bool {
    path.starts_with("/usr")
}

/// Orders binds so a parent is mounted before anything inside it, and drops exact duplicates
/// (the later, more specific entry wins when the same destination appears twice).
fn order_binds(mut binds: Vec<Bind>) -> Vec<Bind> {
    binds
        .retain(|b| !(b.access == Access::ReadOnly && b.src == b.dest && covered_by_base(&b.dest)));
    let mut deduped: Vec<Bind> = Vec::new();
    for bind in binds {
        if let Some(existing) = deduped.iter_mut().find(|b| b.dest == bind.dest) {
            *existing = bind;
        } else {
            deduped.push(bind);
        }
    }
    deduped.sort_by_key(|b| b.dest.components().count());
    deduped
}

/// `sandbox_core::run_env` (one contract for every engine) with bwrap's `PATH`; bwrap itself
/// adds `PWD` for `--chdir`.
fn base_env(host: &HostFacts, path: String) -> Vec<(String, OsString)> {
    let mut env = vec![("PATH".to_owned(), OsString::from(path))];
    env.extend(sandbox_core::run_env(|n| host.env_value(n).cloned(), host.ca_bundle.is_some()));
    env
}

/// Each protected path read-only over itself, after the writable binds it lies in (so it
/// wins for its own destination: `order_binds` keeps the later entry), and pinned like every
/// caller path: a link swapped in after the walk is refused, never followed.
fn protect(binds: &mut Vec<Bind>, pinned: &mut Vec<PathBuf>, protected: &[PathBuf]) {
    for path in protected {
        binds.push(Bind::same(path, Access::ReadOnly));
        pinned.push(path.clone());
    }
}

/// Replaces earlier values of the same name (explicit `--env` wins over the allowlist).
fn set_env(env: &mut Vec<(String, OsString)>, name: &str, value: OsString) {
    env.retain(|(k, _)| k != name);
    env.push((name.to_owned(), value));
}

/// What the prepare phase mounts: uv, interpreter prefixes, and its writable cache dirs.
#[derive(Debug, Clone)]
pub(crate) struct PrepareLayout {
    /// The uv binary (canonical), mounted read-only at its own path.
    pub(crate) uv: PathBuf,
    pub(crate) ro_dirs: Vec<PathBuf>,
    /// uv cache, python install dir and the one environment being built.
    pub(crate) rw_dirs: Vec<PathBuf>,
    pub(crate) uv_cache: PathBuf,
    pub(crate) python_install_dir: PathBuf,
    /// Working directory (the environment dir): the workspace is never visible here.
    pub(crate) chdir: PathBuf,
    pub(crate) command: Vec<OsString>,
    /// Overrides applied last (e.g. allowing Python downloads for `uv python install`).
    pub(crate) extra_env: Vec<(String, OsString)>,
    /// Size cap of each tmpfs.
    pub(crate) tmpfs_size: u64,
    /// Network (every step but the bytecode compile).
    pub(crate) net: bool,
    /// Where the environment, the interpreter and uv are seen (paths in `command` and
    /// `chdir` are the host's, translated here).
    pub(crate) relocation: Relocation,
    /// See [`Plan::links`].
    pub(crate) links: Vec<(PathBuf, PathBuf)>,
}

/// Prepare: network on, no workspace, no home; uv writes only to its cache and the env.
pub(crate) fn prepare_plan(
    host: &HostFacts,
    layout: &PrepareLayout,
    status_fd: Option<i32>,
) -> Plan {
    let home = sandbox_home();
    let (uid, gid) = host.sandbox_ids();
    let r = &layout.relocation;
    let mut binds = vec![r.bind(&layout.uv, Access::ReadOnly)];
    binds.extend(layout.ro_dirs.iter().map(|d| r.bind(d, Access::ReadOnly)));
    binds.extend(layout.rw_dirs.iter().map(|d| r.bind(d, Access::ReadWrite)));
    binds.extend(r.mask_binds());

    let mut env = base_env(host, "/usr/local/bin:/usr/bin:/bin".to_owned());
    r.set_library_path(&mut env);
    for (name, value) in [
        ("UV_CACHE_DIR", layout.uv_cache.as_os_str()),
        ("UV_PYTHON_INSTALL_DIR", layout.python_install_dir.as_os_str()),
        // Settings files in the (invisible) home or workspace must not steer the install.
        ("UV_NO_CONFIG", OsStr::new("1")),
        // The interpreter was chosen on the host; never download another one here.
        ("UV_PYTHON_DOWNLOADS", OsStr::new("never")),
        // Copies by default: a step whose cache is private (a build) must leave nothing of it
        // behind. The wheels-only install links from the shared cache instead, which only uv
        // ever writes (`BwrapEngine::install_dependencies`).
        ("UV_LINK_MODE", OsStr::new("copy")),
        // Trust the system CA store, so TLS-intercepting corporate proxies work. Newer uv
        // reads UV_SYSTEM_CERTS, older uv UV_NATIVE_TLS; the deprecation note is never shown
        // unless the prepare fails.
        ("UV_SYSTEM_CERTS", OsStr::new("1")),
        ("UV_NATIVE_TLS", OsStr::new("1")),
        ("UV_NO_PROGRESS", OsStr::new("1")),
    ] {
        set_env(&mut env, name, value.to_owned());
    }
    for name in crate::host::PREPARE_ENV_ALLOWLIST {
        if let Some(value) = host.env_value(name) {
            set_env(&mut env, name, value.clone());
        }
    }
    for (name, value) in &layout.extra_env {
        set_env(&mut env, name, value.clone());
    }
    Plan {
        net: layout.net,
        new_session: true,
        die_with_parent: true,
        uid,
        gid,
        home,
        binds: order_binds(binds),
        links: layout.links.clone(),
        chdir: r.path(&layout.chdir),
        env,
        command: layout.command.iter().map(|a| r.arg(a)).collect(),
        status_fd,
        publish: Vec::new(),
        seccomp_fd: None,
        block_fd: None,
        pinned: Vec::new(),
        bind_fds: Vec::new(),
        tmpfs_size: layout.tmpfs_size,
        limits: crate::limits::SandboxLimits::default(),
        run_as: host.run_as(),
        idmapped: Vec::new(),
    }
}

/// What the run phase mounts and executes.
#[derive(Debug, Clone)]
pub(crate) struct RunLayout {
    /// The prepared environment (read-only) and its interpreter.
    pub(crate) env_dir: PathBuf,
    /// Interpreter prefixes, uv cache, python install dir: all read-only.
    pub(crate) ro_dirs: Vec<PathBuf>,
    /// Canonical workspace, read-write at its real path; also the working directory.
    pub(crate) workspace: PathBuf,
    /// Canonical script path.
    pub(crate) script: PathBuf,
    pub(crate) args: Vec<String>,
    /// Canonical extra mounts.
    pub(crate) mounts: Vec<Bind>,
    /// Protected paths of the writable trees (`engine_detect::protect`): read-only over
    /// themselves, pinned like every caller path.
    pub(crate) protected: Vec<PathBuf>,
    pub(crate) net: bool,
    /// Explicit `--env` values, validated.
    pub(crate) user_env: Vec<(String, String)>,
    /// stdin is the caller's terminal: keep the session so job control and resizing work.
    pub(crate) interactive: bool,
    /// Size cap of each tmpfs.
    pub(crate) tmpfs_size: u64,
    /// Published ports (net on).
    pub(crate) publish: Vec<sandbox_core::PublishedPort>,
    /// Where the environment and the interpreter are seen.
    pub(crate) relocation: Relocation,
}

/// Run: the prepared interpreter runs the script directly; no uv, nothing writable but the
/// workspace, rw mounts and tmpfs.
pub(crate) fn run_plan(host: &HostFacts, layout: &RunLayout, status_fd: Option<i32>) -> Plan {
    let home = sandbox_home();
    let (uid, gid) = host.sandbox_ids();
    let r = &layout.relocation;
    let mut binds = vec![r.bind(&layout.env_dir, Access::ReadOnly)];
    binds.extend(layout.ro_dirs.iter().map(|d| r.bind(d, Access::ReadOnly)));
    binds.extend(r.mask_binds());
    binds.push(Bind::same(&layout.workspace, Access::ReadWrite));
    binds.extend(layout.mounts.iter().cloned());
    let mut pinned = vec![layout.workspace.clone()];
    pinned.extend(layout.mounts.iter().map(|m| m.src.clone()));
    protect(&mut binds, &mut pinned, &layout.protected);
    if !layout.script.starts_with(&layout.workspace) {
        binds.push(Bind::same(&layout.script, Access::ReadOnly));
        pinned.push(layout.script.clone());
    }

    let bin = r.path(&layout.env_dir).join("bin");
    let mut env = base_env(host, format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()));
    set_env(&mut env, "VIRTUAL_ENV", r.path(&layout.env_dir).into_os_string());
    r.set_library_path(&mut env);
    for (name, value) in &layout.user_env {
        set_env(&mut env, name, value.into());
    }

    let mut command =
        vec![bin.join("python").into_os_string(), layout.script.clone().into_os_string()];
    command.extend(layout.args.iter().map(OsString::from));
    Plan {
        net: layout.net,
        new_session: !layout.interactive,
        die_with_parent: true,
        uid,
        gid,
        home,
        binds: order_binds(binds),
        links: Vec::new(),
        chdir: layout.workspace.clone(),
        env,
        command,
        status_fd,
        publish: layout.publish.clone(),
        seccomp_fd: None,
        block_fd: None,
        pinned,
        bind_fds: Vec::new(),
        tmpfs_size: layout.tmpfs_size,
        limits: crate::limits::SandboxLimits::default(),
        run_as: host.run_as(),
        idmapped: Vec::new(),
    }
}

/// What a session sandbox mounts and runs.
#[derive(Debug, Clone)]
pub(crate) struct SessionLayout {
    /// The interpreter (canonical) the agent runs on and the session's venv is made from.
    pub(crate) python: PathBuf,
    /// Its prefixes, read-only.
    pub(crate) ro_dirs: Vec<PathBuf>,
    /// uv (canonical), read-only at its own path: it installs dependencies inside.
    pub(crate) uv: PathBuf,
    /// Canonical workspace, read-write at its real path; also the working directory.
    pub(crate) workspace: PathBuf,
    /// Canonical extra mounts.
    pub(crate) mounts: Vec<Bind>,
    /// See [`RunLayout::protected`].
    pub(crate) protected: Vec<PathBuf>,
    pub(crate) net: bool,
    /// Explicit `--env` values, validated.
    pub(crate) user_env: Vec<(String, String)>,
    /// Size cap of each tmpfs (home holds the session's venv and uv cache).
    pub(crate) tmpfs_size: u64,
    /// Published ports (net on).
    pub(crate) publish: Vec<sandbox_core::PublishedPort>,
    /// Idle seconds after which the agent ends the session.
    pub(crate) ttl_secs: u64,
    /// Where the interpreter and uv are seen.
    pub(crate) relocation: Relocation,
}

/// Session: the same wall as a run, with the agent (`sandbox_core::agent::AGENT_PY`) as the
/// main process. The session's venv and uv cache live in its tmpfs home and die with it: uv
/// runs inside with the session's network and writes only there, so no cache shared between
/// environments is ever writable to package code.
pub(crate) fn session_plan(host: &HostFacts, layout: &SessionLayout) -> Plan {
    let home = sandbox_home();
    let (uid, gid) = host.sandbox_ids();
    let r = &layout.relocation;
    let mut binds = vec![r.bind(&layout.uv, Access::ReadOnly)];
    binds.extend(layout.ro_dirs.iter().map(|d| r.bind(d, Access::ReadOnly)));
    binds.extend(r.mask_binds());
    binds.push(Bind::same(&layout.workspace, Access::ReadWrite));
    binds.extend(layout.mounts.iter().cloned());
    let mut pinned = vec![layout.workspace.clone()];
    pinned.extend(layout.mounts.iter().map(|m| m.src.clone()));
    protect(&mut binds, &mut pinned, &layout.protected);

    let venv_bin = Path::new(sandbox_core::shell::SESSION_VENV).join("bin");
    let uv = r.path(&layout.uv);
    let uv_dir = uv.parent().unwrap_or(Path::new("/usr/bin"));
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin:{}", venv_bin.display(), uv_dir.display());
    let mut env = base_env(host, path);
    r.set_library_path(&mut env);
    for (name, value) in sandbox_core::shell::SESSION_UV_ENV {
        set_env(&mut env, name, value.into());
    }
    for name in crate::host::PREPARE_ENV_ALLOWLIST {
        if let Some(value) = host.env_value(name) {
            set_env(&mut env, name, value.clone());
        }
    }
    for (name, value) in &layout.user_env {
        set_env(&mut env, name, value.into());
    }
    // `-I -S`: nothing of the workspace or of a site directory steers the agent.
    let command = vec![
        r.path(&layout.python).into_os_string(),
        "-I".into(),
        "-S".into(),
        "-c".into(),
        sandbox_core::agent::AGENT_PY.into(),
        layout.ttl_secs.max(1).to_string().into(),
    ];
    Plan {
        net: layout.net,
        new_session: true,
        die_with_parent: false,
        uid,
        gid,
        home,
        binds: order_binds(binds),
        links: Vec::new(),
        chdir: layout.workspace.clone(),
        env,
        command,
        status_fd: None,
        publish: layout.publish.clone(),
        seccomp_fd: None,
        block_fd: None,
        pinned,
        bind_fds: Vec::new(),
        tmpfs_size: layout.tmpfs_size,
        run_as: host.run_as(),
        idmapped: Vec::new(),
        limits: crate::limits::SandboxLimits::default(),
    }
}
