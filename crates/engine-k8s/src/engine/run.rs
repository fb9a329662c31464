//! `run --engine k8s`: the run side of the seam (`impl sandbox_core::Engine for K8sEngine`).
//!
//! Prepare: the environment claim of the script's key ([`crate::environment`]); a warm one
//! (annotated ready) is one GET and nothing else. A cold one is made, filled by a prepare pod
//! with network (the same hardened pod, the claim mounted read-write, no workspace), marked
//! ready, and the prepare pod deleted.
//!
//! Run: one pod with the script's own network, published ports and limits, the claim mounted
//! read-only; its ports told to `RunIo::published` (the Ingress URL, or a port-forward held
//! for the run); the workspace synced in ([`crate::workspace`]), the script copied in and run
//! with the environment's python in the workdir; then, however it ended (exit, timeout,
//! Ctrl-C, SIGTERM or SIGHUP of the CLI), what it changed synced back out, and the pod deleted. The pod is started with
//! [`api::start`]: one watch per run, from the create's resourceVersion.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use sandbox_core::{
    Capability, Engine, ExecRequest, Executor as _, InteractiveExec as _, Net, Output, OutputSink,
    RunIo, RunOutcome, RunSpec, Sandbox, SessionConfig, Stdin, Stream,
};

use super::{K8sEngine, now_secs, plan, random_id};
use crate::error::{Error, Result};
use crate::failure::{Op, api_error};
use crate::{api, workspace};
use crate::{claims, environment};

/// A ready environment claim.
#[derive(Debug, Clone)]
pub struct PreparedEnv {
    claim: String,
}

/// The session a run's pod is planned as: the script's settings, the TTL its timeout (the
/// agent's watchdog also ends a pod whose CLI was killed).
fn session_of(spec: &RunSpec, net: Net) -> SessionConfig {
    let ttl = spec.timeout.map_or(Duration::from_secs(30 * 60), |t| t + Duration::from_secs(120));
    SessionConfig {
        workspace: spec.workspace.clone(),
        mounts: spec.mounts.clone(),
        net,
        allow: None,
        publish: spec.publish.clone(),
        env: spec.env.clone(),
        ttl,
        tmpfs_size: spec.tmpfs_size,
        limits: spec.limits,
    }
}

/// Where the image's own files, the environment and the pod's other volumes are: a workspace
/// at or below one of these keeps the configured workdir.
const NOT_A_WORKDIR: [&str; 14] = [
    "/bin",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/opt/python-sandbox",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var",
    sandbox_core::SANDBOX_HOME,
];

/// Pure: the workdir of a run's pod for a host workspace: the same path, when it is a plain
/// absolute path that names none of the image's directories ([`NOT_A_WORKDIR`]), `/`, `/tmp`
/// itself or an ancestor of either; `None` otherwise (the configured workdir is used).
fn run_workdir(workspace: &std::path::Path) -> Option<String> {
    let text = workspace.to_str()?.trim_end_matches('/');
    let plain = text.starts_with('/')
        && text[1..].split('/').all(|c| !c.is_empty() && c != "." && c != "..")
        && !text.chars().any(|c| c.is_control() || c == ':' || c == ',');
    let inside = |dir: &str| text == dir || text.starts_with(&format!("{dir}/"));
    let holds = |dir: &str| dir.starts_with(&format!("{text}/"));
    let clashes =
        NOT_A_WORKDIR.iter().any(|d| inside(d) || holds(d)) || text == "/tmp" || holds("/tmp");
    (plain && text.len() > 1 && !clashes).then(|| text.to_owned())
}

/// Pure: the environment of a run's commands (its `--env` values come with the script's
/// request): the contract of every engine ([`crate::manifest::run_env`]) with the prepared
/// environment as `VIRTUAL_ENV` and first on `PATH`, as docker and podman give a run. Not the
/// pod spec's: that is a session's, with uv's settings.
fn script_env(config: &crate::SandboxConfig) -> Vec<(String, String)> {
    let mut env = crate::manifest::run_env(config);
    for (name, value) in &mut env {
        if name == "PATH" {
            *value = format!("{}/bin:{value}", environment::ENV_DIR);
        }
    }
    env.push(("VIRTUAL_ENV".to_owned(), environment::ENV_DIR.to_owned()));
    env
}

/// A run's [`RunIo`] as the pod's side takes it: the output a sink, the status a closure.
struct PodIo<'a, 'p> {
    stdin: Stdin,
    output: &'a mut dyn OutputSink,
    /// Both streams to one place (`Output::Merged`): the script's stderr joins its stdout in
    /// the pod, so their order survives (two pipes read by the agent cannot keep it).
    merged: bool,
    status: &'a mut (dyn FnMut(&str) + Send),
    published: Option<&'a mut sandbox_core::PublishedHook<'p>>,
}

/// This process's stdin to a run's script, chunk by chunk, then its end.
fn forward_stdin(input: &std::sync::mpsc::Sender<sandbox_core::Input>) {
    use std::io::Read as _;
    let mut buf = vec![0u8; 64 << 10];
    let mut stdin = std::io::stdin().lock();
    loop {
        match stdin.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if input.send(sandbox_core::Input::Stdin(buf[..n].to_vec())).is_err() {
                    return;
                }
            }
        }
    }
    let _ = input.send(sandbox_core::Input::Eof);
}

/// Writes a run's output to this process's own streams (`Output::Inherit`), flushed chunk by
/// chunk (a prompt without a newline shows). A reader that went away (`run … | head -1`: a
/// broken pipe, since this process ignores SIGPIPE) closes the sink, and the engine stops the
/// script with 141 as a closed pipe would, instead of relaying into nowhere for ever.
struct Inherit<O, E> {
    stdout: O,
    stderr: E,
    closed: bool,
}

impl Inherit<std::io::Stdout, std::io::Stderr> {
    fn std() -> Self {
        Inherit { stdout: std::io::stdout(), stderr: std::io::stderr(), closed: false }
    }
}

impl<O: std::io::Write + Send, E: std::io::Write + Send> OutputSink for Inherit<O, E> {
    fn write(&mut self, stream: Stream, chunk: &[u8]) {
        if self.closed {
            return;
        }
        let written = match stream {
            Stream::Stdout => self.stdout.write_all(chunk).and_then(|()| self.stdout.flush()),
            Stream::Stderr => self.stderr.write_all(chunk).and_then(|()| self.stderr.flush()),
        };
        if written.is_err_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) {
            self.closed = true;
        }
    }

    fn closed(&self) -> bool {
        self.closed
    }
}

/// The script's argv prefix when both streams go to one place: its stderr is its stdout from
/// the start, one pipe in write order, as bwrap's and the OCI engines' merged output is.
const MERGED: [&str; 4] = ["sh", "-c", "exec \"$@\" 2>&1", "sh"];

/// Both streams as stdout, in arrival order (`Output::Merged`).
struct Merged<'a>(&'a mut dyn OutputSink);

impl OutputSink for Merged<'_> {
    fn write(&mut self, _: Stream, chunk: &[u8]) {
        self.0.write(Stream::Stdout, chunk);
    }

    fn closed(&self) -> bool {
        self.0.closed()
    }
}

impl K8sEngine {
    async fn get_claim(&self, name: &str) -> Result<Option<PersistentVolumeClaim>> {
        let ns = &self.config.namespace;
        let op = Op::new("get", "persistentvolumeclaim", Some(name), ns);
        let claims: kube::Api<PersistentVolumeClaim> =
            kube::Api::namespaced(self.client.clone(), ns);
        claims.get_opt(name).await.map_err(|e| api_error(&op, e))
    }

    fn claims(&self) -> kube::Api<PersistentVolumeClaim> {
        kube::Api::namespaced(self.client.clone(), &self.config.namespace)
    }

    /// A merge patch of the claim's annotations; with `version`, only of that very version
    /// (409 when another run changed it since).
    async fn annotate_claim(
        &self,
        name: &str,
        annotations: serde_json::Value,
        version: Option<&str>,
    ) -> Result<PersistentVolumeClaim> {
        let op = Op::new("patch", "persistentvolumeclaim", Some(name), &self.config.namespace);
        let mut patch = serde_json::json!({ "metadata": { "annotations": annotations } });
        if let Some(version) = version {
            patch["metadata"]["resourceVersion"] = serde_json::json!(version);
        }
        self.claims()
            .patch(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch))
            .await
            .map_err(|e| api_error(&op, e))
    }

    /// Waits (one watch at a time, from `claim`'s version) for another run's prepare of
    /// `claim` for at most `left`: `Some(true)` ready, `Some(false)` gone, `None` not yet.
    async fn wait_claim(
        &self,
        claim: &PersistentVolumeClaim,
        left: Duration,
    ) -> Result<Option<bool>> {
        use futures_util::{StreamExt as _, TryStreamExt as _};
        let name = claim.metadata.name.clone().unwrap_or_default();
        let op = Op::new("watch", "persistentvolumeclaim", Some(&name), &self.config.namespace);
        let mut version = claim.metadata.resource_version.clone().unwrap_or_else(|| "0".to_owned());
        let watched = async {
            loop {
                let params = kube::api::WatchParams::default()
                    .fields(&format!("metadata.name={name}"))
                    .timeout(u32::try_from(left.as_secs().clamp(1, 290)).unwrap_or(290));
                let _open = api::watch_opened("persistentvolumeclaim", &name);
                let mut events = self
                    .claims()
                    .watch(&params, &version)
                    .await
                    .map_err(|e| api_error(&op, e))?
                    .boxed();
                while let Some(event) = events.try_next().await.map_err(|e| api_error(&op, e))? {
                    match event {
                        kube::api::WatchEvent::Added(c) | kube::api::WatchEvent::Modified(c) => {
                            if environment::is_ready(&c) {
                                return Ok(true);
                            }
                            version = c.metadata.resource_version.unwrap_or(version);
                        }
                        kube::api::WatchEvent::Deleted(_) => return Ok(false),
                        kube::api::WatchEvent::Bookmark(b) => version = b.metadata.resource_version,
                        // 410 and the like: the caller reads the claim afresh.
                        kube::api::WatchEvent::Error(_) => return Ok(false),
                    }
                }
            }
        };
        match tokio::time::timeout(left, watched).await {
            Ok(done) => done.map(Some),
            Err(_) => Ok(None),
        }
    }

    /// Starts a pod planned for `session` with the environment claim mounted, and `user`'s.
    async fn start_run_pod(
        &self,
        session: &SessionConfig,
        claim: &str,
        read_only: bool,
        user: &[claims::ClaimMount],
        status: &mut dyn FnMut(&str),
    ) -> Result<(super::Plan, k8s_openapi::api::core::v1::Pod)> {
        let id = random_id();
        // The script's pod has the workspace where the host has it, as every other engine
        // does (scripts print and store paths); a prepare pod keeps the configured workdir.
        let base = match (read_only, run_workdir(&session.workspace)) {
            (true, Some(workdir)) => crate::SandboxConfig { workdir, ..self.config.clone() },
            _ => self.config.clone(),
        };
        let mut plan = plan(&base, session, &id, &self.owner, now_secs(), &self.mark)?;
        self.hold_to_list(&mut plan).await?;
        environment::mount(&mut plan.pod, claim, read_only);
        claims::mount(&mut plan.pod, user);
        let policy = plan.network_policy();
        let pod = self.launch_pod(&plan.pod, policy, status, true).await?;
        Ok((plan, pod))
    }

    /// Ends a run's pod and waits until it is gone (see [`RUN_POD_GONE`]). Its agent first
    /// kills every other process of the pod and checks that none is left ([`EMPTY_POD`]);
    /// then nothing of the run runs, and the pod is removed at once
    /// ([`api::remove_emptied`]), where a delete that has the kubelet stop it is reported
    /// only 1 to 3 s later. A pod the agent could not empty (a process that outlives
    /// `SIGKILL` for a while, an agent that does not answer) is deleted and waited for as any
    /// other ([`api::delete_pod_and_wait`]): its NetworkPolicy stays until it stopped.
    async fn end(&self, pod: &k8s_openapi::api::core::v1::Pod) {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let uid = pod.metadata.uid.as_deref();
        let agent = self.handle(pod, Vec::new());
        let request = ExecRequest {
            argv: EMPTY_POD.map(str::to_owned).to_vec(),
            cwd: Some("/".to_owned()),
            ..Default::default()
        };
        let mut answer = sandbox_core::shell::Capped::new(64);
        let told = tokio::time::timeout(EMPTYING, agent.exec(&request, &mut answer)).await;
        let emptied = matches!(told, Ok(Ok(ref outcome)) if outcome.exit_code == 0)
            && answer.captured.stdout == EMPTIED;
        let ns = &self.config.namespace;
        // Nothing of a run remains when it returns. A failed or slow end leaves the pod to its
        // TTL and the sweep.
        let _ = if emptied {
            api::remove_emptied(&self.client, ns, name, uid).await
        } else {
            api::delete_pod_and_wait(&self.client, ns, name, uid, RUN_POD_GONE).await
        };
    }

    /// The script's environment claim, ready: read (a warm run: one GET), or made and filled
    /// here, or waited for while another run fills it ([`environment::state`]).
    async fn prepare_env(
        &self,
        spec: &RunSpec,
        status: &mut dyn FnMut(&str),
    ) -> Result<PreparedEnv> {
        let key = environment::key(
            &self.config.image,
            spec.requires_python.as_deref(),
            &spec.dependencies,
        );
        let claim = environment::claim_name(&key);
        let ns = &self.config.namespace;
        let mut waited = Duration::ZERO;
        // Each turn reads the claim afresh; a turn ends in a prepare of our own, a wait for
        // another run's, or (a create or a take-over lost) the next read.
        for _ in 0..8 {
            let now = now_secs();
            let Some(found) = self.get_claim(&claim).await? else {
                let labels = self.env_labels(&claim)?;
                let made = environment::claim(&self.config, &key, &labels, now);
                match api::create(&self.client, ns, &made).await {
                    Ok(made) => return self.fill(spec, made, status).await,
                    Err(Error::NameTaken { .. }) => continue,
                    Err(e) => return Err(e),
                }
            };
            match environment::state(&found, now) {
                environment::ClaimState::Ready { refresh } => {
                    if refresh {
                        // Best effort: a missed stamp only makes the claim look older to the sweep.
                        let stamp = serde_json::json!({ environment::LAST_USED_ANNOTATION: now.to_string() });
                        let _ = self.annotate_claim(&claim, stamp, None).await;
                    }
                    return Ok(PreparedEnv { claim });
                }
                environment::ClaimState::Preparing { left } => {
                    status(&format!(
                        "waiting for another run to prepare the environment `{claim}`"
                    ));
                    let started = Instant::now();
                    let done = self.wait_claim(&found, left).await?;
                    waited += started.elapsed();
                    if done == Some(true) {
                        return Ok(PreparedEnv { claim });
                    }
                }
                environment::ClaimState::Stale => {
                    let version = found.metadata.resource_version.as_deref();
                    let stamp =
                        serde_json::json!({ environment::PREPARING_ANNOTATION: now.to_string() });
                    match self.annotate_claim(&claim, stamp, version).await {
                        Ok(taken) => return self.fill(spec, taken, status).await,
                        // Another run took it over (409) or it went (404): read it again.
                        Err(Error::Api { code: 409 | 404, .. } | Error::NotFound { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Err(Error::PrepareWait { claim, namespace: ns.clone(), secs: waited.as_secs() })
    }

    /// Fills `claim` (made or taken over by this run) with a prepare pod, then marks it ready;
    /// on any failure the claim is deleted, so the next run starts clean.
    async fn fill(
        &self,
        spec: &RunSpec,
        claim: PersistentVolumeClaim,
        status: &mut dyn FnMut(&str),
    ) -> Result<PreparedEnv> {
        let name = claim.metadata.name.clone().unwrap_or_default();
        status(&format!("preparing the environment `{name}`"));
        let filled = async {
            let mut session = session_of(spec, Net::On);
            session.publish.clear();
            session.env.clear();
            session.mounts.clear();
            session.limits = sandbox_core::Limits::default();
            let (_, pod) = self.start_run_pod(&session, &name, false, &[], status).await?;
            let sandbox = self.handle(&pod, Vec::new());
            let request = ExecRequest {
                argv: environment::prepare_argv(&spec.dependencies),
                cwd: Some("/".to_owned()),
                ..Default::default()
            };
            let mut capped = sandbox_core::shell::Capped::new(sandbox_core::shell::CAPTURE_LIMIT);
            let prepared = sandbox.exec(&request, &mut capped).await;
            self.end(&pod).await;
            if prepared?.exit_code != 0 {
                return Err(Error::PrepareFailed {
                    claim: name.clone(),
                    message: capped.captured.stderr_lossy().trim().to_owned(),
                });
            }
            // No version precondition: the volume controller updates the claim as it binds.
            self.annotate_claim(&name, environment::ready_annotations(now_secs()), None).await
        }
        .await;
        match filled {
            Ok(_) => Ok(PreparedEnv { claim: name }),
            Err(e) => {
                // The error is the news; a claim left behind is the sweep's (a stale prepare).
                let _ = api::delete::<PersistentVolumeClaim>(
                    &self.client,
                    &self.config.namespace,
                    &name,
                    claim.metadata.uid.as_deref(),
                )
                .await;
                Err(e)
            }
        }
    }

    fn env_labels(&self, claim: &str) -> Result<std::collections::BTreeMap<String, String>> {
        let mut labels =
            reaper::SandboxLabels::new(claim, reaper::Kind::Prepare, &self.owner, now_secs())
                .to_labels()
                .map_err(|e| Error::Host {
                    what: "label the environment".to_owned(),
                    message: e.to_string(),
                })?;
        self.mark.sign(claim, &mut labels);
        Ok(labels)
    }

    async fn run_in_pod(
        &self,
        spec: &RunSpec,
        prepared: &PreparedEnv,
        io: PodIo<'_, '_>,
        warnings: &mut Vec<String>,
    ) -> Result<RunOutcome> {
        let PodIo { stdin, output, merged, status, published } = io;
        // The script's list (the prepare pod keeps its own network: `session_of`).
        let session = SessionConfig { allow: spec.allow.clone(), ..session_of(spec, spec.net) };
        for user in &self.config.run_claims {
            if self.get_claim(&user.claim).await?.is_none() {
                return Err(Error::ClaimMissing {
                    claim: user.claim.clone(),
                    namespace: self.config.namespace.clone(),
                });
            }
        }
        let user = &self.config.run_claims;
        let (plan, pod) =
            self.start_run_pod(&session, &prepared.claim, true, user, &mut *status).await?;
        let outcome = async {
            self.policy_given(&plan, &pod).await?;
            self.publish_all(&plan, &pod).await?;
            // Held until the run ends: dropping a forward closes it.
            let (_forwards, ports) = self.previews(&plan, &pod).await?;
            if let Some(published) = published.filter(|_| !ports.is_empty()) {
                published(&ports);
            }
            // A list's proxy as the pod's spec has it (an exec carries its whole environment).
            let mut env = script_env(&plan.config);
            env.extend(plan.proxy.map(crate::egress::pod_env).unwrap_or_default());
            let sandbox = self.handle(&pod, plan.secret_env.clone()).with_env(env);
            let workdir = plan.config.workdir.clone();
            let limit = self.config.sync_limit;
            let synced =
                workspace::sync_in(&sandbox, &spec.workspace, &workdir, limit, status).await?;
            warnings.extend(synced.warnings.iter().cloned());
            // An empty status line ends the caller's indicator before the script's output.
            status("");
            let mut outcome = self.script(&sandbox, spec, &workdir, stdin, output, merged).await;
            // A list: what the egress proxy refused the script, for the note and `--json`.
            if let (Ok(ran), Some(proxy)) = (outcome.as_mut(), plan.proxy) {
                match refused_by_proxy(&sandbox, proxy).await {
                    Ok(refused) => ran.net_refused = refused,
                    Err(why) => warnings.push(format!(
                        "what the egress proxy refused the script could not be read: {why}"
                    )),
                }
            }
            // Whatever the script did or however it ended, its changes come back.
            let back = workspace::sync_out(
                &sandbox,
                &spec.workspace,
                &workdir,
                &synced.baseline,
                limit,
                status,
            )
            .await;
            status("");
            match back {
                Ok(back) => warnings.extend(back.warnings),
                Err(e) if outcome.is_ok() => return Err(e),
                Err(e) => warnings.push(format!("the workspace was not synced back: {e}")),
            }
            outcome
        }
        .await;
        self.end(&pod).await;
        outcome
    }

    /// Where a run's published ports are served, by the engine's `preview`: the Ingress URL
    /// (`ingress`, or `auto` where anything serves the preview domain), else a local
    /// port-forward per port, held by the returned forwards. Decided before the script
    /// listens, so `auto` asks only whether a controller is there, not whether it routes.
    async fn previews(
        &self,
        plan: &super::Plan,
        pod: &k8s_openapi::api::core::v1::Pod,
    ) -> Result<(Vec<crate::preview::Forward>, Vec<sandbox_core::PublishedPort>)> {
        let mut forwards = Vec::new();
        let mut ports = Vec::new();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        for (i, port) in plan.ports.iter().enumerate() {
            let url = super::preview_url(&plan.config, &plan.id, i, *port);
            let ingress = match self.config.preview {
                crate::Preview::Ingress => true,
                crate::Preview::PortForward => false,
                crate::Preview::Auto => crate::preview::controller_listens(&url).await,
            };
            if ingress {
                ports.push(sandbox_core::PublishedPort::at_url(*port, url));
                continue;
            }
            let forward = crate::preview::Forward::start(
                self.client.clone(),
                &self.config.namespace,
                name,
                *port,
                self.rt().handle(),
            )
            .await?;
            let bound = crate::preview::host_port(forward.url())
                .and_then(|(host, local)| Some((host.parse().ok()?, local)));
            let Some((addr, host_port)) = bound else {
                return Err(Error::Host {
                    what: "listen for a port-forward".to_owned(),
                    message: format!("`{}` is not a local address", forward.url()),
                });
            };
            ports.push(sandbox_core::PublishedPort { port: *port, addr, host_port, preview: None });
            forwards.push(forward);
        }
        Ok((forwards, ports))
    }

    /// The script in the pod with the run's stdin, stopped on Ctrl-C, SIGTERM or SIGHUP
    /// ([`stop_signal`]: dropping the exec closes its stream, and the agent kills what still
    /// runs; its changes still come back).
    async fn script(
        &self,
        sandbox: &crate::PodSandbox,
        spec: &RunSpec,
        workdir: &str,
        stdin: Stdin,
        output: &mut dyn OutputSink,
        merged: bool,
    ) -> Result<RunOutcome> {
        let bytes = std::fs::read(&spec.script).map_err(|e| Error::Host {
            what: format!("read the script `{}`", spec.script.display()),
            message: e.to_string(),
        })?;
        let name = spec
            .script
            .file_name()
            .map_or_else(|| "script.py".to_owned(), |n| n.to_string_lossy().into_owned());
        let inside = format!("/tmp/.scripts/{}/{name}", random_id());
        sandbox.write_file(&inside, &bytes).await?;
        let mut argv = if merged { MERGED.map(str::to_owned).to_vec() } else { Vec::new() };
        argv.extend([environment::python(), inside]);
        argv.extend(spec.args.iter().cloned());
        let mut request = ExecRequest {
            argv,
            env: spec.env.iter().filter_map(|v| Some((v.name.clone(), v.value.clone()?))).collect(),
            cwd: Some(workdir.to_owned()),
            stdin: Vec::new(),
            timeout: spec.timeout,
        };
        let started = Instant::now();
        let ran = async {
            match stdin {
                Stdin::Null => sandbox.exec(&request, output).await,
                Stdin::Bytes(bytes) => {
                    request.stdin = bytes;
                    sandbox.exec(&request, output).await
                }
                // Streamed as it is read (a pipe, or a terminal without a pty: line by line);
                // the thread may outlive the run blocked on a terminal, which costs nothing.
                Stdin::Inherit => {
                    let (input, io) = sandbox_core::Interactive::channel(None);
                    std::thread::spawn(move || forward_stdin(&input));
                    sandbox.exec_interactive(&request, io, output).await
                }
            }
        };
        tokio::select! {
            outcome = ran => outcome,
            signal = stop_signal() => Ok(RunOutcome::exited(128 + signal, started.elapsed())),
        }
    }
}

/// Resolves with the number of the first of SIGINT (Ctrl-C), SIGTERM (a CI timeout, `kill`)
/// and SIGHUP (a closed terminal) this process gets; never where they cannot be handled. A
/// run stopped so still syncs back and deletes its pod, which the default action (dying on
/// the spot) would leave to its TTL.
async fn stop_signal() -> i32 {
    use tokio::signal::unix::{SignalKind, signal};
    let streams = (|| {
        Some([
            signal(SignalKind::interrupt()).ok()?,
            signal(SignalKind::terminate()).ok()?,
            signal(SignalKind::hangup()).ok()?,
        ])
    })();
    match streams {
        Some([mut int, mut term, mut hup]) => tokio::select! {
            _ = int.recv() => 2,
            _ = term.recv() => 15,
            _ = hup.recv() => 1,
        },
        None => std::future::pending().await,
    }
}

impl Engine for K8sEngine {
    type Error = Error;
    type Prepared = PreparedEnv;

    fn name(&self) -> &'static str {
        super::ENGINE_NAME
    }

    fn capability(&self) -> Capability {
        Capability {
            sessions: true,
            host_mounts: false,
            publish: true,
            memory_limit: true,
            cpu_limit: true,
            pids_limit: false,
            pty: false,
            // The agent takes it in-process (`sandbox_core::agent::walled`).
            seccomp_wall: true,
            preview_urls: true,
        }
    }

    fn check(&self, spec: &RunSpec) -> Result<Vec<String>> {
        // The pod's refusals (mounts, a pid limit, values a pod cannot carry) before anything
        // is made; the session's "not synced" warning does not apply to a run.
        let planned = plan(
            &self.config,
            &SessionConfig { allow: spec.allow.clone(), ..session_of(spec, spec.net) },
            "check",
            &self.owner,
            now_secs(),
            &self.mark,
        )?;
        // A cluster already found not to enforce NetworkPolicy refuses net off and lists
        // before any environment or pod is made.
        self.refuse_unenforced(spec.net, spec.allow.is_some())?;
        Ok(planned
            .warnings
            .into_iter()
            .filter(|w| !w.starts_with("the workspace is the pod's"))
            .collect())
    }

    fn prepare(&self, spec: &RunSpec, status: &mut dyn FnMut(&str)) -> Result<PreparedEnv> {
        self.block_on(self.prepare_env(spec, status))
    }

    fn run_prepared(
        &self,
        spec: &RunSpec,
        prepared: &PreparedEnv,
        io: RunIo<'_>,
    ) -> Result<RunOutcome> {
        let RunIo { stdin, output, mut status, published, .. } = io;
        let mut inherit = Inherit::std();
        let mut merged;
        let joined = matches!(output, Output::Merged(_));
        let sink: &mut dyn OutputSink = match output {
            Output::Inherit => &mut inherit,
            Output::Sink(sink) => sink,
            Output::Merged(sink) => {
                merged = Merged(sink);
                &mut merged
            }
        };
        let mut warnings = Vec::new();
        let mut report = |line: &str| {
            if let Some(status) = status.as_mut() {
                status(line);
            }
        };
        let io = PodIo { stdin, output: sink, merged: joined, status: &mut report, published };
        let mut outcome = self.block_on(self.run_in_pod(spec, prepared, io, &mut warnings))?;
        outcome.warnings.extend(warnings);
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests;

/// What the egress proxy at `proxy` refused this pod so far ([`crate::egress::REFUSED_QUERY`]).
async fn refused_by_proxy(
    sandbox: &crate::PodSandbox,
    proxy: std::net::IpAddr,
) -> std::result::Result<Vec<sandbox_core::NetRefused>, String> {
    let request = ExecRequest {
        argv: crate::egress::refused_query(proxy),
        cwd: Some("/".to_owned()),
        timeout: Some(Duration::from_secs(15)),
        ..Default::default()
    };
    let mut answer = sandbox_core::shell::Capped::new(256 * 1024);
    let ran = sandbox.exec(&request, &mut answer).await.map_err(|e| e.to_string())?;
    if answer.over() {
        return Err("its answer is over 256 KiB".to_owned());
    }
    if ran.exit_code != 0 {
        return Err(answer.captured.stderr_lossy().trim().to_owned());
    }
    serde_json::from_slice(&answer.captured.stdout).map_err(|e| e.to_string())
}

/// The command a run pod's agent (its pid 1, which `kill -1` spares) is sent when the run is
/// done: it kills every other process of the pod's (the script's, whatever it left running;
/// all of the sandbox user's, and the pod has no other), until `/proc` shows none alive but
/// itself, then prints [`EMPTIED`]. Builtins and absolute paths only: nothing the script
/// could have left on a `PATH`. A process that outlives 200 rounds (uninterruptible sleep)
/// fails it, and the pod is then stopped by the kubelet ([`K8sEngine::end`]).
pub(crate) const EMPTY_POD: [&str; 3] = [
    "/bin/sh",
    "-c",
    r#"self=$$; n=0
while :; do
  kill -KILL -1 2>/dev/null
  left=0
  for f in /proc/[0-9]*/stat; do
    { read -r line < "$f"; } 2>/dev/null || continue
    pid=${line%% *}
    if [ "$pid" = 1 ] || [ "$pid" = "$self" ]; then continue; fi
    state=${line##*) }
    case $state in Z*|X*) ;; *) left=1 ;; esac
  done
  [ "$left" = 0 ] && break
  n=$((n + 1))
  [ "$n" -lt 200 ] || exit 1
done
echo gone"#,
];

/// What [`EMPTY_POD`] prints once nothing but the agent is left.
const EMPTIED: &[u8] = b"gone\n";

/// How long [`EMPTY_POD`] may take to be answered before the pod is stopped by the kubelet.
const EMPTYING: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a run waits for its pod to be gone once it is told to end ([`K8sEngine::end`]):
/// the kubelet reports its agent's exit within a second on the test cluster, then the
/// object is removed at once; more for the last of 20 runs ending together on its 2 CPUs
/// (the kubelet stops them in turn).
const RUN_POD_GONE: std::time::Duration = std::time::Duration::from_secs(90);
