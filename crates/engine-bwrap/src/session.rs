//! Warm sessions on bwrap and on any other [`crate::Launcher`] (engine-native's): one
//! long-lived sandbox with the same wall as a run (the plan, pinned mounts, pasta with the
//! link-local block, the seccomp wall and tmpfs caps), whose main process is the agent
//! (`sandbox_core::agent::AGENT_PY`), serving the [`Sandbox`] protocol through it, as docker
//! and podman sessions do. Everything here is the launcher's but the start.
//!
//! **Lifetime.** The session's plan has [`crate::Plan::die_with_parent`] off, and the launcher
//! starts it detached (bwrap without `--die-with-parent` and in its own process group; native's
//! monitor without its parent-death signal and in a session of its own), so it outlives
//! `session start`: when the starting process exits, the sandbox's outer process is
//! re-parented to init (or the nearest subreaper), like any orphan. What ends it:
//!
//! * the agent's idle TTL: the agent is the watchdog and exits once nothing ran for the TTL;
//!   its exit ends the sandbox's pid-1, and with it everything in the sandbox's pid namespace,
//!   even if no CLI ever runs again;
//! * [`BwrapEngine::stop_session`]: SIGKILL through a pidfd to the pinned process
//!   ([`crate::Sandboxed::session_pid`]: bwrap's pid-1, native's monitor, which the init dies
//!   with);
//! * [`BwrapEngine::reap_sessions`] (the startup sweep): the same for a session whose host
//!   record says it was not used for longer than its TTL (the agent may have been replaced by
//!   code that never exits), and the record of a session whose process is gone.
//!
//! **Records.** `<runtime dir>/<launcher>-sessions/<id>.json`, written through
//! [`reaper::PrivateDir`] (0700, the caller's own, no link followed): that process pinned by
//! pid and start time ([`reaper::ProcPin`]), the policy it was started with, the network's
//! process (pasta, or the built-in proxy's keeper) and the cgroup that end with it, and the last use by the host. The agent's socket is reached through
//! `/proc/<pid>/root` of that pinned process, opened without following links the sandbox may
//! have planted, and only once that root is the sandbox's (before its `pivot_root` it is the
//! host's, whose `/tmp` is anyone's).
//!
//! **Scripts.** The same contract as OCI sessions (`sandbox_core::shell`): a venv in the
//! session's tmpfs home made from the session's interpreter, dependencies installed inside by
//! uv (bound read-only) with the session's own network and a private cache in that home. The
//! prepared environments of runs are not used: they would have to be mounted into the session
//! (all of them, since mounts are fixed at start) and built with the network the session may
//! not have.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reaper::ProcPin;
use sandbox_core::agent::{AGENT_SOCKET, Answer, TIMEOUT_GRACE};
use sandbox_core::{
    DirEntry, ExecRequest, Interactive, InteractiveExec, Net, OutputSink, PutSource, RunOutcome,
    RunSpec, Sandbox, ScriptOptions, Service, ServiceSpec, SessionEngine, shell,
};

use crate::engine::BwrapEngine;
use crate::error::{Error, Result};
use crate::launcher::Detached;
use crate::plan::{self, Access, SessionLayout};

pub use sandbox_core::{SessionConfig, SessionInfo};

/// The journal of what session `id`'s allowlist refused, beside its record.
fn refusals_name(id: &str) -> String {
    format!("{id}.refused")
}

/// The host-private record of one session.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Record {
    id: String,
    workspace: String,
    pid: u32,
    start_time: u64,
    created: u64,
    ttl: u64,
    /// Unix seconds of the last command the host sent.
    last_used: u64,
    /// The interpreter inside (the venv is made from it).
    python: String,
    net: bool,
    mounts: Vec<(PathBuf, bool)>,
    publish: Vec<(u16, String)>,
    /// Values of the session's own secret-looking environment, masked in what it prints.
    secrets: Vec<String>,
    /// Scripts run so far.
    scripts: u64,
    /// The ACL hold a root caller's session keeps on its directories, if any.
    holder: Option<String>,
    /// The network's process (net on), pinned by pid and start time: pasta, which never ends
    /// by itself (it holds the namespace), or the built-in proxy's keeper (without pasta);
    /// either ends with the session. (`pasta` for the records of earlier versions.)
    #[serde(default)]
    pasta: Option<(u32, u64)>,
    /// The session's own cgroup (limits on a delegated cgroup v2), removed when it ends.
    #[serde(default)]
    cgroup: Option<PathBuf>,
    /// The cap of each tmpfs (`None` in the records of earlier versions).
    #[serde(default)]
    tmpfs_size: Option<u64>,
    /// The resource limits the session was started with (none in earlier records).
    #[serde(default)]
    limits: sandbox_core::Limits,
    /// The only hosts its network reaches (`--net LIST`), held by its keeper.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    allow: Option<sandbox_core::Allow>,
}

impl Record {
    fn pin(&self) -> ProcPin {
        ProcPin { pid: self.pid, start_time: self.start_time }
    }

    fn info(&self, engine: &str) -> SessionInfo {
        SessionInfo {
            id: self.id.clone(),
            engine: engine.to_owned(),
            created: self.created,
            ttl: self.ttl,
            state: "running".to_owned(),
            workspace: self.workspace.clone(),
            ports: self.publish.clone(),
            sandbox: format!("pid {}", self.pid),
            warnings: Vec::new(),
        }
    }
}

/// Pure: whether `id` can name a record (it becomes a file name).
fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Pure: whether a session last used at `last_used` with `ttl` is expired at `now` (a grace
/// of one minute: the agent's own watchdog normally ends it first).
fn expired(last_used: u64, ttl: u64, now: u64) -> bool {
    now.saturating_sub(last_used) > ttl.saturating_add(60)
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(Error::io("reading /dev/urandom"))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// The records' directory of one launcher's sessions (`bwrap-sessions`, `native-sessions`):
/// each engine lists, opens and reaps its own.
struct Records {
    dir: reaper::PrivateDir,
    engine: &'static str,
}

impl Records {
    fn open(runtime_dir: &Path, engine: &'static str) -> Result<Records> {
        let dir = reaper::PrivateDir::open(&runtime_dir.join(format!("{engine}-sessions")))?;
        Ok(Records { dir, engine })
    }

    fn read(&self, id: &str) -> Option<Record> {
        if !valid_id(id) {
            return None;
        }
        let bytes = self.dir.read(&format!("{id}.json")).ok()??;
        serde_json::from_slice(&bytes).ok()
    }

    fn write(&self, record: &Record) -> Result<()> {
        let bytes = serde_json::to_vec(record)
            .map_err(|e| Error::io("encoding a session record")(std::io::Error::other(e)))?;
        Ok(self.dir.replace(&format!("{}.json", record.id), &bytes)?)
    }

    /// [`Records::write`] of a used session's counters (its last use, its scripts), on every
    /// `session run` and `exec`: not flushed to the disk first, since a host crash ends the
    /// session with it (a flush took 0.3 to 1 ms, twice per script).
    fn update(&self, record: &Record) {
        if let Ok(bytes) = serde_json::to_vec(record) {
            let _ = self.dir.replace_unflushed(&format!("{}.json", record.id), &bytes);
        }
    }

    fn remove(&self, id: &str) {
        if valid_id(id) {
            let _ = self.dir.remove(&format!("{id}.json"));
            let _ = self.dir.remove(&refusals_name(id));
        }
    }

    /// Where the keeper of session `id` journals what its allowlist refused.
    fn refusals(&self, id: &str) -> PathBuf {
        self.dir.path().join(refusals_name(id))
    }

    fn ids(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.dir.path()) else { return Vec::new() };
        let mut ids: Vec<String> = entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".json").map(str::to_owned))
            .filter(|id| valid_id(id))
            .collect();
        ids.sort();
        ids
    }
}

/// Ends a session for good: kills its pid namespace (through its pinned init), gives a root
/// caller's directories back, drops the record.
fn end(records: &Records, record: &Record, cache_dir: &Path) {
    record.pin().kill();
    if let Some((pid, start_time)) = record.pasta {
        ProcPin { pid, start_time }.kill();
    }
    if let Some(cgroup) = &record.cgroup {
        crate::limits::remove(cgroup);
    }
    if let Some(holder) = &record.holder {
        let _ = reaper::acl::release_holder(&reaper::acl::state_dir(cache_dir), holder);
    }
    let placeholders = reaper::protect::state_dir(cache_dir);
    let _ = reaper::protect::release_holder(&placeholders, &holder_of(records.engine, &record.id));
    records.remove(&record.id);
}

/// The name a session's holds go by (its ACL grant, its placeholders).
fn holder_of(engine: &str, id: &str) -> String {
    format!("{engine}-{id}")
}

impl SessionEngine for BwrapEngine {
    type Error = crate::Error;
    type Session = Session;

    fn session_engine_name(&self) -> &'static str {
        self.launcher_name()
    }

    /// Starts a session sandbox and returns once its agent listens. The sandbox outlives the
    /// calling process (see the module docs); status lines (a cold interpreter lookup) go to
    /// `status`.
    fn start_session(
        &self,
        config: &SessionConfig,
        status: &mut dyn FnMut(&str),
    ) -> Result<SessionInfo> {
        let runtime_dir = self.config().runtime_dir.clone();
        let records = Records::open(&runtime_dir, self.launcher_name())?;
        let spec = RunSpec {
            script: config.workspace.clone(),
            args: Vec::new(),
            dependencies: Vec::new(),
            requires_python: None,
            mounts: config.mounts.clone(),
            net: config.net,
            allow: config.allow.clone(),
            publish: config.publish.clone(),
            env: config.env.clone(),
            timeout: None,
            tmpfs_size: config.tmpfs_size,
            workspace: config.workspace.clone(),
            limits: config.limits,
        };
        let mut warnings = self.check(&spec)?;
        let (workspace, mounts, user_env) = self.resolve_for_session(&spec)?;
        // The interpreter of the base environment (no dependencies): found, or installed by
        // uv, exactly as for a run; the session builds its own venv from it.
        let (uv, base) = self.session_tools(&spec, status)?;
        let python = base.python.clone();
        let ttl_secs = config.ttl.as_secs().max(1);
        let (placeholders, protected) = self.protect(&workspace, &mounts)?;
        let relocation = self.relocation(
            None,
            crate::engine::Base { prefixes: &base.prefixes, library_path: base.library_path },
            Some(&uv),
        )?;
        let layout = SessionLayout {
            python: python.clone(),
            ro_dirs: base.prefixes.clone(),
            uv,
            workspace: workspace.clone(),
            mounts: mounts.clone(),
            protected,
            net: config.net == Net::On,
            user_env: user_env.clone(),
            tmpfs_size: config.tmpfs_size,
            publish: crate::engine::pick_host_ports(&config.publish)?,
            ttl_secs,
            relocation,
        };
        let mut plan = plan::session_plan(self.host(), &layout);
        // As for a run: rlimits on the sandbox's first process (inherited by all of the
        // session's processes), or the session's own delegated cgroup, kept until it ends.
        plan.limits = crate::engine::limits_for(&spec)?;
        let id = random_hex(6)?;
        let holder = holder_of(records.engine, &id);
        let (plan_idmapped, grant) = self.lend_writable(&workspace, &mounts)?;
        plan.idmapped = plan_idmapped;
        let release = |grant: Option<reaper::acl::Grant>| {
            if let Some(grant) = grant {
                let _ = grant.release();
            }
        };
        // The list is held by the session's keeper (the built-in relay, or proxy), for as
        // long as the session lives; pasta, which checks no names, is not used with one.
        // Its refusals are journaled, for each script run in it to be told of its own.
        let listed = spec
            .allow
            .clone()
            .map(|allow| sandbox_net::Listed::new(allow).journal(records.refusals(&id)));
        let sandbox = match self.start_detached(&plan, listed.as_ref()) {
            Ok(sandbox) => sandbox,
            Err(e) => {
                release(grant);
                return Err(e);
            }
        };
        let pin = sandbox.session_pid().and_then(ProcPin::of_pid);
        let listening = pin.is_some_and(|pin| wait_listening(&pin, Duration::from_secs(10)));
        let Some(pin) = pin.filter(|_| listening) else {
            // The whole tree, then what ends with it (`wait` drops pasta and the cgroup).
            let _ =
                rustix::process::pidfd_send_signal(sandbox.pidfd(), rustix::process::Signal::KILL);
            let known = sandbox.session_pid().is_some();
            let ended = sandbox.wait();
            release(grant);
            return Err(match ended {
                Ok(ended) if ended.setup_error.is_some() || !known => {
                    self.setup_failure(ended.setup_error)
                }
                Err(e) => e,
                Ok(_) => Error::SessionStart {
                    engine: records.engine,
                    reason: "its agent did not start listening within 10 s".to_owned(),
                },
            });
        };
        let Detached { network, cgroup } = sandbox.detach();
        // Kept until the session ends (`end`, or the sweep once it is gone).
        placeholders.hold(&holder)?;
        let holder = match grant {
            Some(grant) => {
                grant.hold(&holder)?;
                Some(holder)
            }
            None => None,
        };
        let created = now_secs();
        let record = Record {
            id: id.clone(),
            workspace: workspace.display().to_string(),
            pid: pin.pid,
            start_time: pin.start_time,
            created,
            ttl: ttl_secs,
            last_used: created,
            python: layout.relocation.path(&python).display().to_string(),
            net: config.net == Net::On,
            mounts: mounts.iter().map(|m| (m.src.clone(), m.access == Access::ReadWrite)).collect(),
            publish: plan.publish.iter().map(|p| (p.port, p.url())).collect(),
            secrets: user_env
                .iter()
                .filter(|(name, _)| sandbox_core::is_secret_name(name))
                .map(|(_, v)| v.clone())
                .collect(),
            scripts: 0,
            holder,
            pasta: network.map(|p| (p.pid, p.start_time)),
            cgroup,
            tmpfs_size: Some(config.tmpfs_size),
            limits: config.limits,
            allow: spec.allow.clone(),
        };
        if let Err(e) = records.write(&record) {
            end(&records, &record, &self.config().cache_dir);
            return Err(e);
        }
        let mut info = record.info(records.engine);
        info.warnings.append(&mut warnings);
        Ok(info)
    }

    /// The running session `id`.
    fn open_session(&self, id: &str) -> Result<Session> {
        open(self.config(), self.launcher_name(), id)
    }

    /// Every running session of this user (records of ended ones are removed on the way).
    fn list_sessions(&self) -> Result<Vec<SessionInfo>> {
        let records = Records::open(&self.config().runtime_dir, self.launcher_name())?;
        let mut out = Vec::new();
        for id in records.ids() {
            match records.read(&id) {
                Some(record) if record.pin().alive() => out.push(record.info(records.engine)),
                _ => records.remove(&id),
            }
        }
        out.sort_by_key(|s| s.created);
        Ok(out)
    }

    /// Stops session `id` and everything in it.
    fn stop_session(&self, id: &str) -> Result<()> {
        let session = self.open_session(id)?;
        end(&session.records, &session.record, &self.config().cache_dir);
        Ok(())
    }
}

impl BwrapEngine {
    /// The startup sweep ([`reap_sessions`]) for this engine's user.
    pub fn reap_sessions(&self, dry_run: bool) -> Result<Vec<String>> {
        reap_sessions(self.config(), self.launcher_name(), dry_run)
    }
}

/// The startup sweep: removes the records of sessions whose process is gone (expired, killed,
/// rebooted) and ends sessions the host has not used for longer than their TTL (their agent
/// should have; code in the session may have replaced it). Returns the ids removed (with
/// `dry_run`, that would be, and nothing is touched). Needs no engine: the records of the
/// sessions `launcher` (`bwrap`, `native`) started.
pub fn reap_sessions(
    config: &crate::BwrapConfig,
    launcher: &'static str,
    dry_run: bool,
) -> Result<Vec<String>> {
    let records = Records::open(&config.runtime_dir, launcher)?;
    let now = now_secs();
    let mut reaped = Vec::new();
    for id in records.ids() {
        let Some(record) = records.read(&id) else {
            if !dry_run {
                records.remove(&id);
            }
            reaped.push(id);
            continue;
        };
        if !record.pin().alive() || expired(record.last_used, record.ttl, now) {
            if !dry_run {
                end(&records, &record, &config.cache_dir);
            }
            reaped.push(id);
        }
    }
    // Placeholders of sessions whose record is gone (a reboot, a record removed by hand):
    // this launcher's holders are judged by their records, anyone else's are left alone.
    let prefix = holder_of(launcher, "");
    let alive = |holder: &str| {
        holder
            .strip_prefix(&prefix)
            .is_none_or(|id| records.read(id).is_some_and(|r| r.pin().alive()))
    };
    let _ = reaper::protect::reap(&reaper::protect::state_dir(&config.cache_dir), dry_run, &alive);
    Ok(reaped)
}

/// The running session `id` of `launcher` from its record: no engine needed (the record pins
/// the sandbox).
pub(crate) fn open(
    config: &crate::BwrapConfig,
    launcher: &'static str,
    id: &str,
) -> Result<Session> {
    let records = Records::open(&config.runtime_dir, launcher)?;
    let missing = || Error::NoSession { engine: launcher, id: id.to_owned() };
    let record = records.read(id).ok_or_else(missing)?;
    if !record.pin().alive() {
        records.remove(id);
        return Err(missing());
    }
    Ok(Session {
        record,
        records,
        cache_dir: config.cache_dir.clone(),
        stopped: AtomicBool::new(false),
    })
}

/// Waits until the agent of a fresh sandbox listens (python starts in tens of milliseconds;
/// a cold start of the sandbox takes longer); `false` after `patience` or if it died.
fn wait_listening(pin: &ProcPin, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    // Until the sandbox has pivoted, the pinned process's root is the host's, whose /tmp
    // anyone can plant a socket in: only a root that is not ours counts.
    let host_root = rustix::fs::stat("/").ok().map(|s| (s.st_dev, s.st_ino));
    let pivoted = || {
        let root = pin.stat_in_root(".").map(|s| (s.st_dev, s.st_ino));
        root.is_some() && root != host_root
    };
    loop {
        if pivoted() && pin.socket_in_root(AGENT_SOCKET).is_some() {
            return true;
        }
        if Instant::now() > deadline || !pin.alive() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A running bwrap session.
#[derive(Debug)]
pub struct Session {
    record: Record,
    records: Records,
    cache_dir: PathBuf,
    stopped: AtomicBool,
}

impl std::fmt::Debug for Records {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Records").field(&self.dir.path()).finish()
    }
}

impl Session {
    /// Whether the session has a network.
    pub fn net(&self) -> bool {
        self.record.net
    }

    /// Its extra mounts (real host paths) and whether each is writable.
    pub fn mounts(&self) -> &[(PathBuf, bool)] {
        &self.record.mounts
    }

    /// (port inside, URL on the host) of its published ports.
    pub fn ports(&self) -> &[(u16, String)] {
        &self.record.publish
    }

    /// The host pid of the process the record pins: bwrap's pid 1 of the sandbox, native's
    /// monitor (outside the sandbox's pid namespace; the init dies with it).
    pub fn pid(&self) -> u32 {
        self.record.pid
    }

    /// Runs the host script in the session's venv after installing `options.dependencies`
    /// there ([`sandbox_core::shell::run_script`]). A script inside the workspace runs at its
    /// real path; any other is copied in first.
    pub async fn run_script_with(
        &self,
        script: &Path,
        options: &ScriptOptions,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome> {
        let real = std::fs::canonicalize(script)
            .map_err(|_| Error::MissingPath { path: script.to_owned() })?;
        let (inside, copy) = if real.starts_with(&self.record.workspace) {
            (real.display().to_string(), None)
        } else {
            let bytes =
                std::fs::read(&real).map_err(Error::io(format!("reading {}", real.display())))?;
            let name = real
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "script.py".to_owned());
            (format!("/tmp/.scripts/{}/{name}", random_hex(6)?), Some(bytes))
        };
        let nonce = random_hex(16)?;
        let place = sandbox_core::ScriptPlace {
            inside: &inside,
            copy: copy.as_deref(),
            nonce: &nonce,
            python: &self.record.python,
        };
        shell::run_script(self, &place, options, output).await
    }

    fn ensure_running(&self) -> Result<()> {
        if self.stopped.load(Ordering::Relaxed) {
            return Err(sandbox_core::Error::Stopped { id: self.record.id.clone() }.into());
        }
        Ok(())
    }

    /// Marks the session used now in its record (what the reaper's TTL counts from).
    fn touch(&self) {
        if let Some(mut record) = self.records.read(&self.record.id) {
            let now = now_secs();
            if record.last_used < now {
                record.last_used = now;
                self.records.update(&record);
            }
        }
    }

    /// One request through the agent, streaming its output.
    fn agent_exec(&self, request: &ExecRequest, output: &mut dyn OutputSink) -> Result<RunOutcome> {
        let (stream, cwd) = self.connect(request)?;
        self.told_refusals(|| relay(stream, request, &cwd, output, &self.record.id))
    }

    /// `command`'s outcome with what the session's allowlist refused meanwhile (its keeper's
    /// journal, read from where it ended before).
    fn told_refusals(&self, command: impl FnOnce() -> Result<RunOutcome>) -> Result<RunOutcome> {
        if self.record.allow.is_none() {
            return command();
        }
        let journal = self.records.refusals(&self.record.id);
        let from = sandbox_net::journal_end(&journal);
        let mut outcome = command()?;
        outcome.net_refused = sandbox_net::journal_since(&journal, from);
        Ok(outcome)
    }

    /// A connection to the agent (pinned, see the module docs) and the request's cwd.
    fn connect(&self, request: &ExecRequest) -> Result<(UnixStream, String)> {
        self.ensure_running()?;
        let id = &self.record.id;
        let stream = self
            .record
            .pin()
            .connect_in_root(AGENT_SOCKET)
            .ok_or_else(|| Error::NoSession { engine: self.records.engine, id: id.clone() })?;
        self.touch();
        Ok((stream, request.cwd.clone().unwrap_or_else(|| self.record.workspace.clone())))
    }
}

/// The blocking side of the protocol loop (engine-oci has the tokio twin); what each frame
/// means is decided in [`sandbox_core::agent`]. The request's timeout is enforced from here
/// too ([`TIMEOUT_GRACE`] after it): dropping the connection makes the agent kill the command.
fn relay(
    stream: UnixStream,
    request: &ExecRequest,
    cwd: &str,
    output: &mut dyn OutputSink,
    session: &str,
) -> Result<RunOutcome> {
    let bytes = sandbox_core::agent::encode_request(request, cwd);
    answer(stream, request, &bytes, false, output, session, &mut || {})
}

/// An interactive exec: the request (version 2), then `io`'s input pumped into the
/// connection by a thread while this one reads the answer, which must start with the agent's
/// hello (an older agent has none: [`sandbox_core::Error::AgentTooOld`]).
fn relay_interactive(
    stream: UnixStream,
    request: &ExecRequest,
    cwd: &str,
    io: Interactive,
    output: &mut dyn OutputSink,
    session: &str,
) -> Result<RunOutcome> {
    let failed =
        |e: std::io::Error| Error::AgentExec { id: session.to_owned(), message: e.to_string() };
    let writer = stream.try_clone().map_err(failed)?;
    let done = Arc::new(AtomicBool::new(false));
    let mut pump = Some({
        let done = Arc::clone(&done);
        let input = io.input;
        let mut writer = writer;
        move || {
            sandbox_core::agent::pump_input(&input, &done, |bytes| writer.write_all(&bytes).is_ok())
        }
    });
    let bytes = sandbox_core::agent::encode_interactive_request(request, cwd, io.tty);
    let shutdown = stream.try_clone().map_err(failed)?;
    // Not joined: the thread ends within 50 ms of `done`, or at once with the connection.
    let result = answer(stream, request, &bytes, true, output, session, &mut || {
        if let Some(pump) = pump.take() {
            std::thread::spawn(pump);
        }
    });
    done.store(true, Ordering::Relaxed);
    // Also ends a pump blocked writing to an agent that stopped reading; the agent sees the
    // hang-up and kills the command if it still runs (a timeout, a closed output).
    let _ = shutdown.shutdown(std::net::Shutdown::Both);
    result
}

/// Sends `request_bytes` and reads the agent's answer; with `interactive`, the first frame
/// must be the agent's hello and `started` runs once the request is out.
fn answer(
    mut stream: UnixStream,
    request: &ExecRequest,
    request_bytes: &[u8],
    interactive: bool,
    output: &mut dyn OutputSink,
    session: &str,
    started: &mut dyn FnMut(),
) -> Result<RunOutcome> {
    let start = Instant::now();
    let deadline = request.timeout.map(|t| start + t + TIMEOUT_GRACE);
    let failed = |message: String| Error::AgentExec { id: session.to_owned(), message };
    let hostile =
        |problem: String| sandbox_core::Error::AgentProtocol { id: session.to_owned(), problem };
    let outcome = |exit_code: i32, timed_out: bool| RunOutcome {
        exit_code,
        duration: start.elapsed(),
        timed_out,
        warnings: Vec::new(),
        net_refused: Vec::new(),
    };
    let arm = |stream: &std::os::unix::net::UnixStream| -> bool {
        let Some(deadline) = deadline else { return true };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        stream.set_read_timeout(Some(left)).is_ok() && stream.set_write_timeout(Some(left)).is_ok()
    };
    let timed_out = |e: &std::io::Error| {
        matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
    };
    if !arm(&stream) {
        return Ok(outcome(sandbox_core::agent::EXIT_HOST_TIMEOUT, true));
    }
    match stream.write_all(request_bytes) {
        Ok(()) => started(),
        Err(e) if timed_out(&e) => {
            return Ok(outcome(sandbox_core::agent::EXIT_HOST_TIMEOUT, true));
        }
        Err(e) => return Err(failed(e.to_string())),
    }
    let mut payload = Vec::new();
    let mut greeted = !interactive;
    loop {
        let mut head = [0u8; 5];
        if !arm(&stream) {
            return Ok(outcome(sandbox_core::agent::EXIT_HOST_TIMEOUT, true));
        }
        match stream.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(failed(format!("session `{session}` ended during the command")));
            }
            Err(e) if timed_out(&e) => {
                return Ok(outcome(sandbox_core::agent::EXIT_HOST_TIMEOUT, true));
            }
            Err(e) => return Err(failed(e.to_string())),
        }
        let (kind, len) = sandbox_core::agent::frame_len(head).map_err(hostile)?;
        payload.resize(len, 0);
        match stream.read_exact(&mut payload) {
            Ok(()) => {}
            Err(e) if timed_out(&e) => {
                return Ok(outcome(sandbox_core::agent::EXIT_HOST_TIMEOUT, true));
            }
            Err(e) => return Err(failed(e.to_string())),
        }
        let frame = sandbox_core::agent::decode_frame(kind, &payload).map_err(hostile)?;
        if !greeted {
            sandbox_core::agent::check_hello(&frame, session)?;
            greeted = true;
            continue;
        }
        match sandbox_core::agent::take_frame(frame, request, output).map_err(hostile)? {
            Answer::More => {}
            Answer::Ended { exit_code, timed_out } => return Ok(outcome(exit_code, timed_out)),
        }
    }
}

impl sandbox_core::AgentShell for Session {
    type Error = Error;

    fn shell_id(&self) -> &str {
        &self.record.id
    }

    async fn shell_exec(
        &self,
        request: &ExecRequest,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome> {
        self.agent_exec(request, output)
    }
}

impl InteractiveExec for Session {
    async fn exec_interactive(
        &self,
        request: &ExecRequest,
        io: Interactive,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome> {
        let (stream, cwd) = self.connect(request)?;
        self.told_refusals(|| relay_interactive(stream, request, &cwd, io, output, &self.record.id))
    }
}

impl Sandbox for Session {
    type Error = Error;

    fn id(&self) -> &str {
        &self.record.id
    }

    async fn exec(&self, request: &ExecRequest, output: &mut dyn OutputSink) -> Result<RunOutcome> {
        self.agent_exec(request, output)
    }

    async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        shell::read_file(self, path).await
    }

    async fn write_file(&self, path: &str, contents: &[u8]) -> Result<()> {
        shell::write_file(self, path, contents).await
    }

    async fn list_dir(&self, path: &str) -> Result<Vec<DirEntry>> {
        shell::list_dir(self, path).await
    }

    async fn put(&self, source: &PutSource, dest: &str) -> Result<()> {
        match source {
            PutSource::Tar(bytes) => shell::put_tar(self, bytes.clone(), dest).await,
            PutSource::HostPath(_) => Err(sandbox_core::Error::Unsupported {
                what: "copying a host path".to_owned(),
                by: format!("{} session `{}`", self.records.engine, self.record.id),
                hint: "pass a tar archive (`PutSource::Tar`), or put the files in the workspace"
                    .to_owned(),
            }
            .into()),
        }
    }

    async fn start_service(&self, service: &ServiceSpec) -> Result<Service> {
        self.ensure_running()?;
        let port = service.port;
        let Some((_, url)) = self.record.publish.iter().find(|(p, _)| *p == port) else {
            return Err(sandbox_core::Error::Unsupported {
                what: format!("a service on port {port}"),
                by: format!("session `{}`", self.record.id),
                hint: format!("start the session with `--publish {port}`"),
            }
            .into());
        };
        shell::start_service(self, service, url.clone()).await
    }

    async fn stop_service(&self, service: &Service) -> Result<()> {
        shell::stop_service(self, service).await
    }

    async fn stop(&self) -> Result<()> {
        self.stopped.store(true, Ordering::Relaxed);
        end(&self.records, &self.record, &self.cache_dir);
        Ok(())
    }
}

impl sandbox_core::WarmSession for Session {
    fn workspace(&self) -> &str {
        &self.record.workspace
    }

    fn policy(&self) -> Option<sandbox_core::SessionPolicy> {
        Some(sandbox_core::SessionPolicy {
            net: self.net(),
            allow: self.record.allow.clone(),
            mounts: self.mounts().to_vec(),
            publish: self.ports().iter().map(|(port, _)| *port).collect(),
            tmpfs_size: self.record.tmpfs_size,
            limits: self.record.limits,
        })
    }

    fn secrets(&self) -> &[String] {
        &self.record.secrets
    }

    fn scripts_run(&self) -> u64 {
        self.record.scripts
    }

    fn note_script(&self) {
        if let Some(mut record) = self.records.read(&self.record.id) {
            record.scripts = record.scripts.max(self.record.scripts).saturating_add(1);
            self.records.update(&record);
        }
    }

    async fn run_script(
        &self,
        script: &Path,
        options: &ScriptOptions,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome> {
        self.run_script_with(script, options, output).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_file_names_of_ours_only() {
        assert!(valid_id("0a1b2c3d4e5f"));
        for bad in ["", "../x", "a/b", "a.json", &"a".repeat(65)] {
            assert!(!valid_id(bad), "{bad}");
        }
    }

    #[test]
    fn expiry_counts_from_the_last_host_use() {
        assert!(!expired(1000, 60, 1000 + 60 + 60));
        assert!(expired(1000, 60, 1000 + 60 + 61));
        assert!(!expired(1000, u64::MAX, u64::MAX));
        assert!(!expired(2000, 60, 1000), "a clock that went back is not expiry");
    }
}
