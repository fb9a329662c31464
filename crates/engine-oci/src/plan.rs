//! The pure heart of the engine: from host facts and resolved paths to one container create
//! body (`ContainerCreateBody` with its `HostConfig`). No IO happens here, so every decision is
//! snapshot-tested (see `tests.rs`).
//!
//! Every container gets the same wall: read-only rootfs, tmpfs `/tmp` and home (each capped at
//! the spec's `tmpfs_size`, as tmpfs are memory), `cap_drop ALL`,
//! `no-new-privileges`, a private IPC namespace, an init process, pids/memory/cpu limits,
//! ulimits no higher than the host's hard limits, an unprivileged user, an empty environment
//! plus an allowlist, and labels from the reaper schema. Only the workspace, declared mounts
//! and (for prepare) the environment volume are writable.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountBindOptions, MountBindOptionsPropagationEnum,
    MountType, PortBinding, ResourcesUlimits,
};
use sandbox_core::Publish;

use crate::client::Flavor;
use crate::host::{Bind, HostFacts, SANDBOX_CA_BUNDLE};

/// Home inside every container (the image's user home; always an empty tmpfs).
pub(crate) const HOME: &str = sandbox_core::SANDBOX_HOME;
/// Where a prepared environment volume is mounted read-only at run time.
pub(crate) const ENV_MOUNT: &str = "/opt/python-sandbox/env";
/// Where the prepare container mounts the environment volume (the image's home, so that the
/// engines' volume copy-up gives it to the image user; never a tmpfs there).
pub(crate) const PREPARE_MOUNT: &str = "/home/sandbox";
/// The image's interpreter: prepare builds environments on it, and the image's own empty venv
/// at [`ENV_MOUNT`] (what a script without dependencies runs in) points at it.
pub(crate) const IMAGE_PYTHON: &str = "/usr/bin/python3";
/// Every container's pid 1: the image's tini, execute-only (deploy/image/setup.sh), so the
/// script, another user, cannot open `/proc/1/mem` and hang the init that ends its run (the
/// engines' own `--init` binaries are readable, so that process is dumpable).
pub(crate) const INIT: [&str; 2] = ["/usr/bin/tini", "--"];
/// The image label saying which layout of [`crate::IMAGE_ABI`] the image has.
pub(crate) const IMAGE_ABI_LABEL: &str = "io.python-sandbox.image-abi";
/// PATH of every container (the image's).
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Resource limits of one container. `None` leaves the engine's default (unlimited).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Memory limit in bytes (also the memory+swap limit: no swap).
    pub memory: Option<u64>,
    /// CPUs, fractional (`1.5`).
    pub cpus: Option<f64>,
    /// Maximum number of processes and threads.
    pub pids: Option<i64>,
}

impl Limits {
    /// The defaults of every engine (`sandbox_core::Limits::DEFAULT`): 2 GiB, 2 CPUs, 512
    /// processes. A test holds the two equal.
    pub const DEFAULT: Limits =
        Limits { memory: Some(2 * 1024 * 1024 * 1024), cpus: Some(2.0), pids: Some(512) };

    /// No limits: the engine's defaults.
    pub const NONE: Limits = Limits { memory: None, cpus: None, pids: None };

    /// What the user asked for, and the default for what they neither asked for nor turned
    /// off (`none`).
    pub fn asked_or_default(asked: &sandbox_core::Limits) -> Limits {
        let defaults = asked.defaults();
        Limits {
            memory: asked.memory.or(defaults.memory),
            cpus: asked.cpus.or(defaults.cpus).map(sandbox_core::Cpus::as_f64),
            // `sandbox_core::MAX_PIDS` fits an i64.
            pids: asked.pids.or(defaults.pids).and_then(|p| i64::try_from(p).ok()),
        }
    }
}

/// Refuses limits the user asked for that a rootless engine cannot hold (see [`rootless`]):
/// a run without them would be the silent no-op the flags promise not to be.
pub(crate) fn check_rootless_limits(
    engine: Option<Rootless>,
    asked: &sandbox_core::Limits,
) -> Result<(), crate::Error> {
    match engine {
        Some(Rootless { cgroup_limits: false }) if !asked.is_empty() => {
            let flags: Vec<String> = asked.asked().iter().map(|f| format!("`{f}`")).collect();
            let asked = match flags.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
                _ => flags.concat(),
            };
            Err(crate::Error::LimitsUnenforceable { asked })
        }
        _ => Ok(()),
    }
}

/// What kind of container a [`ContainerPlan`] describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Run,
    Prepare,
    Session,
}

/// One container, decided. [`create_body`] turns it into the API body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ContainerPlan {
    pub(crate) role: Role,
    pub(crate) image: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) cmd: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) working_dir: String,
    /// Host paths and named volumes, parents before children.
    pub(crate) mounts: Vec<PlanMount>,
    pub(crate) net: bool,
    /// (host address, container port, host port; `0` = any free port, the daemon's choice).
    pub(crate) publish: Vec<(IpAddr, u16, u16)>,
    pub(crate) limits: Limits,
    /// Size cap of every tmpfs the container gets, bytes.
    pub(crate) tmpfs_size: u64,
    pub(crate) nofile: i64,
    pub(crate) nproc: i64,
    pub(crate) stdin: bool,
    /// stderr joined to stdout at the source (see [`RunLayout::merge_output`]).
    pub(crate) merge_output: bool,
    /// The command waits for the go line on stdin (`crate::gate`).
    pub(crate) go: bool,
    pub(crate) auto_remove: bool,
    /// What follows `seccomp=` (the wall, see `OciEngine::seccomp_profile`); `None` keeps the
    /// engine's default (pure plans, before `OciEngine::adapt`).
    pub(crate) seccomp: Option<String>,
    /// The user namespace mode (rootless podman: `keep-id`, see [`rootless`]); `None` keeps the
    /// engine's default.
    pub(crate) userns: Option<String>,
}

/// One mount of a container. Structured (the API's `Mounts`), never a `SRC:DEST:MODE` string:
/// a path may contain `:`, which the string form cannot carry (docker refused it, podman cut it
/// there and created the shortened path on the host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PlanMount {
    pub(crate) source: Source,
    pub(crate) target: PathBuf,
    pub(crate) writable: bool,
}

/// What a [`PlanMount`] mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// A host path; it must exist (see `verify::check_sources`: podman would create it).
    Host(PathBuf),
    /// A named volume of the engine.
    Volume(String),
}

impl PlanMount {
    fn host(path: &Path, target: &Path, writable: bool) -> PlanMount {
        PlanMount { source: Source::Host(path.to_owned()), target: target.to_owned(), writable }
    }

    fn volume(name: &str, target: &str, writable: bool) -> PlanMount {
        PlanMount { source: Source::Volume(name.to_owned()), target: target.into(), writable }
    }

    /// The API's form. Binds are recursive and `rprivate` (nothing mounted later on either side
    /// shows through), and docker must not create a missing source.
    fn to_api(&self) -> Mount {
        let (typ, source, bind_options) = match &self.source {
            Source::Host(path) => (
                MountType::BIND,
                path.to_string_lossy().into_owned(),
                Some(MountBindOptions {
                    propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
                    create_mountpoint: Some(false),
                    ..MountBindOptions::default()
                }),
            ),
            Source::Volume(name) => (MountType::VOLUME, name.clone(), None),
        };
        Mount {
            target: Some(self.target.to_string_lossy().into_owned()),
            source: Some(source),
            typ: Some(typ),
            read_only: Some(!self.writable),
            bind_options,
            ..Mount::default()
        }
    }
}

/// An engine whose containers live in an unprivileged user's user namespace (rootless podman),
/// as found when connecting (`client::rootless`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rootless {
    /// Whether the engine can enforce memory, cpu and pids limits: only with cgroup v2 and
    /// those controllers delegated to the user. On cgroup v1 podman ignores them silently.
    pub cgroup_limits: bool,
}

/// Pure: adapts a plan to a rootless engine. The caller's uid is kept as itself inside
/// (`keep-id`): without it the sandbox user maps to a subordinate uid that cannot write the
/// caller's workspace. Limits the engine cannot enforce are removed rather than silently
/// ignored, and the returned warning says so: only the defaults get here, as limits the user
/// asked for are refused before ([`check_rootless_limits`]). (Rootless podman's compat API also ignores the
/// body's ulimits: its containers.conf `default_ulimits`, or its own limits, apply.)
pub(crate) fn rootless(plan: &mut ContainerPlan, engine: Rootless) -> Option<String> {
    plan.userns = Some("keep-id".to_owned());
    if engine.cgroup_limits {
        return None;
    }
    let Limits { memory, cpus, pids } = std::mem::replace(&mut plan.limits, Limits::NONE);
    let lost: Vec<&str> =
        [(memory, "memory"), (cpus.map(|_| 0), "cpu"), (pids.map(|_| 0), "process")]
            .into_iter()
            .filter_map(|(set, name)| set.map(|_| name))
            .collect();
    let (last, rest) = lost.split_last()?;
    let what =
        if rest.is_empty() { (*last).to_owned() } else { format!("{} or {last}", rest.join(", ")) };
    let role = match plan.role {
        Role::Run => "run",
        Role::Prepare => "install",
        Role::Session => "session",
    };
    Some(format!(
        "rootless podman cannot enforce {what} limits here (cgroup v1, or cgroup v2 without \
         those controllers delegated to the user): this {role} has none\n\
         hint: docker or rootful podman enforce them, as does rootless podman on cgroup v2 with \
         delegation"
    ))
}

/// What a run container needs besides host facts.
#[derive(Debug, Clone)]
pub(crate) struct RunLayout {
    pub(crate) image: String,
    pub(crate) labels: BTreeMap<String, String>,
    /// The environment volume, when the script has dependencies.
    pub(crate) env_volume: Option<String>,
    pub(crate) workspace: PathBuf,
    pub(crate) script: PathBuf,
    pub(crate) args: Vec<String>,
    pub(crate) mounts: Vec<Bind>,
    /// Protected paths of the writable trees (`engine_detect::protect`): read-only over
    /// themselves, checked and pinned like every bind.
    pub(crate) protected: Vec<PathBuf>,
    pub(crate) net: bool,
    pub(crate) publish: Vec<Publish>,
    pub(crate) user_env: Vec<(String, String)>,
    pub(crate) limits: Limits,
    pub(crate) tmpfs_size: u64,
    /// stderr into stdout inside the container: the daemon copies the two streams separately,
    /// so their relative order survives only when they are one stream at the source.
    pub(crate) merge_output: bool,
}

/// What a prepare container needs.
#[derive(Debug, Clone)]
pub(crate) struct PrepareLayout {
    pub(crate) image: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) env_volume: String,
    pub(crate) dependencies: Vec<String>,
    pub(crate) requires_python: Option<String>,
    pub(crate) limits: Limits,
    pub(crate) tmpfs_size: u64,
}

/// What a session container needs.
#[derive(Debug, Clone)]
pub(crate) struct SessionLayout {
    pub(crate) image: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) workspace: PathBuf,
    pub(crate) mounts: Vec<Bind>,
    /// See [`RunLayout::protected`].
    pub(crate) protected: Vec<PathBuf>,
    pub(crate) net: bool,
    pub(crate) publish: Vec<Publish>,
    pub(crate) user_env: Vec<(String, String)>,
    pub(crate) limits: Limits,
    pub(crate) tmpfs_size: u64,
    pub(crate) ttl_secs: u64,
}

/// The session's main process: the agent (`agent.rs`) when the image has `python3`, else a
/// shell watchdog that exits (and the auto-removed container disappears) once
/// `/tmp/.last-activity` is older than the TTL and no exec is running. Every API exec registers
/// its shell pid under `/tmp/.active/` and touches the activity file when it ends. `$1` is the
/// TTL in seconds, `$2` the agent's program.
pub(crate) const WATCHDOG: &str = r#"ttl=$1
command -v python3 > /dev/null 2>&1 && exec python3 -I -c "$2" "$ttl"
mkdir -p /tmp/.active
touch /tmp/.last-activity
while :; do
  sleep 2
  for f in /tmp/.active/*; do
    [ -e "$f" ] || continue
    if kill -0 "${f##*/}" 2>/dev/null; then touch /tmp/.last-activity; else rm -f "$f"; fi
  done
  now=$(date +%s)
  last=$(stat -c %Y /tmp/.last-activity 2>/dev/null || echo 0)
  if [ $((now - last)) -ge "$ttl" ]; then exit 0; fi
done"#;

/// The prepare script: a venv in the volume root (from the image's interpreter, which must
/// satisfy `requires-python`: `PYTHON_REQUEST`), then the dependencies (given as `$@`).
pub(crate) const PREPARE_SCRIPT: &str = r#"set -eu
uv venv --quiet --relocatable --allow-existing --python "$PYTHON_REQUEST" /home/sandbox
if [ "$#" -gt 0 ]; then
  uv pip install --quiet --compile-bytecode --python /home/sandbox/bin/python -- "$@"
fi"#;

/// `sandbox_core::run_env` (one contract for every engine) with the image's `PATH`.
fn base_env(host: &HostFacts) -> Vec<(String, String)> {
    let mut env = vec![("PATH".to_owned(), PATH.to_owned())];
    env.extend(sandbox_core::run_env(
        |n| host.env_value(n).map(str::to_owned),
        host.ca_bundle.is_some(),
    ));
    env
}

/// Replaces earlier values of the same name (explicit `--env` wins over the allowlist).
fn set_env(env: &mut Vec<(String, String)>, name: &str, value: &str) {
    env.retain(|(k, _)| k != name);
    env.push((name.to_owned(), value.to_owned()));
}

fn ca_mount(host: &HostFacts) -> Option<PlanMount> {
    host.ca_bundle.as_ref().map(|ca| PlanMount::host(ca, Path::new(SANDBOX_CA_BUNDLE), false))
}

/// Host binds at their real paths, parents first, exact duplicates dropped (later wins).
fn ordered(mut binds: Vec<(PathBuf, bool)>) -> Vec<PlanMount> {
    let mut deduped: Vec<(PathBuf, bool)> = Vec::new();
    for (path, writable) in binds.drain(..) {
        if let Some(existing) = deduped.iter_mut().find(|(p, _)| *p == path) {
            existing.1 = writable;
        } else {
            deduped.push((path, writable));
        }
    }
    deduped.sort_by_key(|(p, _)| p.components().count());
    deduped.iter().map(|(p, w)| PlanMount::host(p, p, *w)).collect()
}

fn ulimit(hard: Option<u64>, want: u64) -> i64 {
    i64::try_from(hard.map_or(want, |h| h.min(want))).unwrap_or(i64::MAX)
}

/// Runs and sessions alike: the same port on the host unless asked otherwise, `0` (the
/// daemon's choice) for `0:PORT` (`sandbox_core::publish`).
fn published(publish: &[Publish]) -> Vec<(IpAddr, u16, u16)> {
    sandbox_core::asked_host_ports(publish)
        .into_iter()
        .map(|p| (p.addr, p.port, p.host_port))
        .collect()
}

/// Run: the environment's interpreter (or the image's) runs the script; nothing writable but
/// the workspace, rw mounts and tmpfs.
pub(crate) fn run_plan(host: &HostFacts, layout: &RunLayout) -> ContainerPlan {
    let (uid, gid) = host.sandbox_ids();
    let mut host_binds = vec![(layout.workspace.clone(), true)];
    host_binds.extend(layout.mounts.iter().map(|m| (m.path.clone(), m.writable)));
    host_binds.extend(layout.protected.iter().map(|p| (p.clone(), false)));
    if !layout.script.starts_with(&layout.workspace) {
        host_binds.push((layout.script.clone(), false));
    }
    let mut mounts: Vec<PlanMount> = ca_mount(host).into_iter().collect();
    let mut env = base_env(host);
    // Without dependencies the image's own empty venv at the same path: one layout either way.
    if let Some(volume) = &layout.env_volume {
        mounts.push(PlanMount::volume(volume, ENV_MOUNT, false));
    }
    set_env(&mut env, "VIRTUAL_ENV", ENV_MOUNT);
    set_env(&mut env, "PATH", &format!("{ENV_MOUNT}/bin:{PATH}"));
    set_env(&mut env, "PWD", &layout.workspace.display().to_string());
    let python = format!("{ENV_MOUNT}/bin/python");
    mounts.extend(ordered(host_binds));
    for (name, value) in &layout.user_env {
        set_env(&mut env, name, value);
    }
    let mut cmd = vec![python, layout.script.display().to_string()];
    cmd.extend(layout.args.iter().cloned());
    // Nothing of the script runs before the host has checked the mounts (`crate::verify`): the
    // gate (`go`) waits for the go line on stdin, which is therefore always attached.
    ContainerPlan {
        role: Role::Run,
        image: layout.image.clone(),
        labels: layout.labels.clone(),
        uid,
        gid,
        cmd,
        env,
        working_dir: layout.workspace.display().to_string(),
        mounts,
        net: layout.net,
        publish: published(&layout.publish),
        limits: layout.limits,
        tmpfs_size: layout.tmpfs_size,
        nofile: ulimit(host.nofile_hard, 65_536),
        nproc: ulimit(host.nproc_hard, 32_768),
        stdin: true,
        merge_output: layout.merge_output,
        go: true,
        auto_remove: false,
        seccomp: None,
        userns: None,
    }
}

/// Prepare: network on, no workspace, no home of the caller; uv writes only into the one
/// environment volume (mounted on the image user's home so it owns it) and `/tmp`.
pub(crate) fn prepare_plan(host: &HostFacts, layout: &PrepareLayout) -> ContainerPlan {
    let mut env = base_env(host);
    set_env(&mut env, "HOME", "/tmp");
    for (name, value) in [
        ("UV_CACHE_DIR", "/tmp/uv-cache"),
        ("UV_NO_CONFIG", "1"),
        ("UV_PYTHON_DOWNLOADS", "never"),
        ("UV_LINK_MODE", "copy"),
        ("UV_SYSTEM_CERTS", "1"),
        ("UV_NATIVE_TLS", "1"),
        ("UV_NO_PROGRESS", "1"),
    ] {
        set_env(&mut env, name, value);
    }
    set_env(&mut env, "PYTHON_REQUEST", layout.requires_python.as_deref().unwrap_or(IMAGE_PYTHON));
    for name in crate::host::PREPARE_ENV_ALLOWLIST {
        if let Some(value) = host.env_value(name) {
            set_env(&mut env, name, value);
        }
    }
    let mut mounts: Vec<PlanMount> = ca_mount(host).into_iter().collect();
    mounts.push(PlanMount::volume(&layout.env_volume, PREPARE_MOUNT, true));
    let mut cmd =
        vec!["sh".to_owned(), "-c".to_owned(), PREPARE_SCRIPT.to_owned(), "sh".to_owned()];
    cmd.extend(layout.dependencies.iter().cloned());
    ContainerPlan {
        role: Role::Prepare,
        image: layout.image.clone(),
        labels: layout.labels.clone(),
        // The image's own unprivileged user: the volume copy-up made it the owner.
        uid: 1000,
        gid: 1000,
        cmd,
        env,
        working_dir: "/tmp".to_owned(),
        mounts,
        net: true,
        publish: Vec::new(),
        limits: layout.limits,
        tmpfs_size: layout.tmpfs_size,
        nofile: ulimit(host.nofile_hard, 65_536),
        nproc: ulimit(host.nproc_hard, 32_768),
        stdin: false,
        merge_output: false,
        go: false,
        auto_remove: false,
        seccomp: None,
        userns: None,
    }
}

/// Session: the agent (or the shell watchdog) is the main process; the workspace and mounts as in a run; the
/// session's own venv and uv cache live in its tmpfs home and die with it.
pub(crate) fn session_plan(host: &HostFacts, layout: &SessionLayout) -> ContainerPlan {
    let (uid, gid) = host.sandbox_ids();
    let mut host_binds = vec![(layout.workspace.clone(), true)];
    host_binds.extend(layout.mounts.iter().map(|m| (m.path.clone(), m.writable)));
    host_binds.extend(layout.protected.iter().map(|p| (p.clone(), false)));
    let mut mounts: Vec<PlanMount> = ca_mount(host).into_iter().collect();
    mounts.extend(ordered(host_binds));
    let mut env = base_env(host);
    for (name, value) in sandbox_core::shell::SESSION_UV_ENV {
        set_env(&mut env, name, value);
    }
    // `python3` is the session's venv's (made at `session start`), as on every engine.
    let venv_bin = format!("{}/bin", sandbox_core::shell::SESSION_VENV);
    set_env(&mut env, "PATH", &format!("{venv_bin}:{PATH}"));
    set_env(&mut env, "PWD", &layout.workspace.display().to_string());
    for (name, value) in &layout.user_env {
        set_env(&mut env, name, value);
    }
    let cmd = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        WATCHDOG.to_owned(),
        "watchdog".to_owned(),
        layout.ttl_secs.to_string(),
        sandbox_core::agent::AGENT_PY.to_owned(),
    ];
    ContainerPlan {
        role: Role::Session,
        image: layout.image.clone(),
        labels: layout.labels.clone(),
        uid,
        gid,
        cmd,
        env,
        working_dir: layout.workspace.display().to_string(),
        mounts,
        net: layout.net,
        publish: published(&layout.publish),
        limits: layout.limits,
        tmpfs_size: layout.tmpfs_size,
        nofile: ulimit(host.nofile_hard, 65_536),
        nproc: ulimit(host.nproc_hard, 32_768),
        stdin: false,
        merge_output: false,
        go: false,
        auto_remove: true,
        seccomp: None,
        userns: None,
    }
}

/// The API body for a plan.
pub(crate) fn create_body(plan: &ContainerPlan, flavor: Flavor) -> ContainerCreateBody {
    let size = plan.tmpfs_size;
    let mut tmpfs = HashMap::new();
    tmpfs.insert("/tmp".to_owned(), format!("rw,nosuid,nodev,mode=1777,size={size}"));
    if plan.role != Role::Prepare {
        // Owned by the sandbox user. Both engines ignore `mode=` on a directory the image has
        // (they copy its mode up); docker takes `uid=`/`gid=`, podman rejects them and has `U`
        // (chown to the container's user) instead.
        let owner = match flavor {
            Flavor::Docker => format!("uid={},gid={}", plan.uid, plan.gid),
            Flavor::Podman => "U".to_owned(),
        };
        tmpfs.insert(HOME.to_owned(), format!("rw,nosuid,nodev,{owner},mode=0700,size={size}"));
    }
    let mut port_bindings = HashMap::new();
    let mut exposed = Vec::new();
    for (addr, port, host_port) in &plan.publish {
        let key = format!("{port}/tcp");
        exposed.push(key.clone());
        let binding = PortBinding {
            host_ip: Some(addr.to_string()),
            host_port: Some(if *host_port == 0 { String::new() } else { host_port.to_string() }),
        };
        port_bindings
            .entry(key)
            .or_insert_with(|| Some(Vec::new()))
            .get_or_insert_default()
            .push(binding);
    }
    let memory = plan.limits.memory.and_then(|m| i64::try_from(m).ok());
    let host_config = HostConfig {
        mounts: Some(plan.mounts.iter().map(PlanMount::to_api).collect()),
        network_mode: Some(if plan.net { "bridge" } else { "none" }.to_owned()),
        port_bindings: (!port_bindings.is_empty()).then_some(port_bindings),
        readonly_rootfs: Some(true),
        cap_drop: Some(vec!["ALL".to_owned()]),
        security_opt: Some(
            std::iter::once("no-new-privileges".to_owned())
                .chain(plan.seccomp.iter().map(|p| format!("seccomp={p}")))
                .collect(),
        ),
        ipc_mode: Some("private".to_owned()),
        privileged: Some(false),
        tmpfs: Some(tmpfs),
        init: Some(false),
        memory,
        memory_swap: memory,
        nano_cpus: plan.limits.cpus.map(|c| (c * 1e9).round() as i64),
        pids_limit: plan.limits.pids,
        ulimits: Some(vec![
            ResourcesUlimits {
                name: Some("nofile".to_owned()),
                soft: Some(plan.nofile),
                hard: Some(plan.nofile),
            },
            ResourcesUlimits {
                name: Some("nproc".to_owned()),
                soft: Some(plan.nproc),
                hard: Some(plan.nproc),
            },
        ]),
        auto_remove: Some(plan.auto_remove),
        userns_mode: plan.userns.clone(),
        ..HostConfig::default()
    };
    let labels: HashMap<String, String> =
        plan.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    ContainerCreateBody {
        image: Some(plan.image.clone()),
        user: Some(format!("{}:{}", plan.uid, plan.gid)),
        cmd: Some(
            INIT.iter()
                .map(|s| (*s).to_owned())
                .chain(crate::gate::command(
                    &plan.cmd,
                    plan.go,
                    plan.net,
                    plan.merge_output,
                    plan.env.iter().any(|(k, _)| k == "PWD"),
                ))
                .collect(),
        ),
        env: Some(plan.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        working_dir: Some(plan.working_dir.clone()),
        labels: Some(labels),
        hostname: Some(sandbox_core::SANDBOX_HOSTNAME.to_owned()),
        attach_stdin: Some(plan.stdin),
        attach_stdout: Some(plan.role != Role::Session),
        attach_stderr: Some(plan.role != Role::Session),
        open_stdin: Some(plan.stdin),
        stdin_once: Some(plan.stdin),
        tty: Some(false),
        exposed_ports: (!exposed.is_empty()).then_some(exposed),
        network_disabled: Some(!plan.net),
        host_config: Some(host_config),
        ..ContainerCreateBody::default()
    }
}
