//! `PodSandbox`: one session pod as the [`Sandbox`] protocol, what a [`crate::K8sEngine`]
//! hands out. Every command is one exec of the relay to the pod's agent ([`PodExec`]); files,
//! services and scripts are `sandbox_core::shell`'s helpers over that exec, as on the OCI
//! sessions, so the semantics are the same everywhere.
//!
//! Secrets: the values of secret-looking env names never enter the pod spec. The handle holds
//! them and adds them to every exec's env, which travels in the agent's request header over
//! the exec's stdin (never argv, the exec URL or the spec). A handle opened later reads them
//! back from a `0600` file in the pod's `/tmp` that the start wrote over stdin, keeping only
//! the names the pod's annotation (which the pod's code cannot change) lists. Errors whose text
//! carries a secret are masked ([`Error::Scrubbed`]); output is the caller's to scrub with
//! [`sandbox_core::ScrubbingSink`] over [`WarmSession::secrets`].
//!
//! The workspace is the pod's workdir (an `emptyDir`), not a host directory: nothing of the
//! host is synced into the pod (a CLI concern), so scripts are copied in over stdin.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use sandbox_core::{
    AgentShell, DirEntry, ExecRequest, Interactive, InteractiveExec, OutputSink, PutSource,
    RunOutcome, Sandbox, ScriptOptions, Secrets, Service, ServiceSpec, SessionPolicy, WarmSession,
    shell,
};

use sandbox_core::Input;
use sandbox_core::agent::{MAX_INPUT_CHUNK, encode_input};

use crate::config::Preview;
use crate::error::{Error, Result};
use crate::preview::{Forward, wait_answers, wait_routed};
use crate::{PodExec, api};

/// The pod annotation holding the session's [`SessionPolicy`] as JSON.
pub const POLICY_ANNOTATION: &str = "io.python-sandbox.k8s/policy";
/// The pod annotation naming (never valuing) the session's secret env vars, comma-separated.
pub const SECRET_NAMES_ANNOTATION: &str = "io.python-sandbox.k8s/secret-env";
/// The pod annotation counting the scripts `session run` ran in the session.
pub const SCRIPTS_ANNOTATION: &str = "io.python-sandbox.k8s/scripts";
/// Where the start leaves the secret env for later handles (JSON pairs, mode 0600).
pub const SECRET_ENV_FILE: &str = "/tmp/.python-sandbox-secret-env.json";
/// How long `start_service` waits for its preview URL to answer through the ingress.
const PREVIEW_PATIENCE: Duration = Duration::from_secs(30);
/// With [`Preview::Auto`], how long the Ingress URL may stay silent before the preview is a
/// local port-forward instead (a controller that serves the domain routes within seconds).
pub const AUTO_PATIENCE: Duration = Duration::from_secs(15);
/// How long a fresh port-forward may take to answer (the service already listens inside).
const FORWARD_PATIENCE: Duration = Duration::from_secs(10);

/// What a handle knows of its session besides the exec (from the pod's labels and
/// annotations, or given directly to [`PodSandbox::attach`]).
#[derive(Debug, Clone, Default)]
pub struct Attached {
    /// The sandbox id.
    pub id: String,
    /// The pod's workdir (the session's workspace).
    pub workdir: String,
    /// The pod's uid, for deletes and patches of exactly this pod.
    pub uid: Option<String>,
    /// (port, preview URL) of each published port.
    pub urls: Vec<(u16, String)>,
    /// The session's environment (the pod spec's, [`crate::manifest`]), under every exec's own:
    /// the pod's agent gives a command exactly its request's environment.
    pub env: Vec<(String, String)>,
    /// The secret env, added to every exec.
    pub secret_env: Vec<(String, String)>,
    /// What the session was started with.
    pub policy: SessionPolicy,
    /// Scripts run so far.
    pub scripts: u64,
    /// How services get their preview URL.
    pub preview: Preview,
}

/// A running session pod.
pub struct PodSandbox {
    exec: PodExec,
    /// The API side (stop, the script count); `None` for a handle on an exec only.
    api: Option<(kube::Client, String, tokio::runtime::Handle)>,
    session: Attached,
    secrets: Vec<String>,
    masks: Secrets,
    scripts: AtomicU64,
    stopped: AtomicBool,
    /// The port-forwards of running services by service id; dropped (closed) with the handle.
    forwards: Mutex<Vec<(String, Forward)>>,
}

impl std::fmt::Debug for PodSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret values.
        f.debug_struct("PodSandbox")
            .field("pod", &self.exec.pod())
            .field("id", &self.session.id)
            .field("workdir", &self.session.workdir)
            .finish_non_exhaustive()
    }
}

impl PodSandbox {
    /// A handle on `exec` alone: commands, files and services work, `stop` only ends the
    /// handle (nothing to delete without the API). For tests against an exec endpoint.
    pub fn attach(exec: PodExec, session: Attached) -> PodSandbox {
        let exec = exec.cwd(&session.workdir);
        let secrets: Vec<String> = session.secret_env.iter().map(|(_, v)| v.clone()).collect();
        let masks =
            Secrets::of_env(session.secret_env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        PodSandbox {
            exec,
            api: None,
            scripts: AtomicU64::new(session.scripts),
            session,
            secrets,
            masks,
            stopped: AtomicBool::new(false),
            forwards: Mutex::new(Vec::new()),
        }
    }

    /// With the API side: `stop` deletes the pod, `note_script` patches its annotation.
    pub(crate) fn with_api(
        mut self,
        client: kube::Client,
        namespace: &str,
        rt: tokio::runtime::Handle,
    ) -> PodSandbox {
        self.api = Some((client, namespace.to_owned(), rt));
        self
    }

    /// The pod's name.
    pub fn pod(&self) -> &str {
        self.exec.pod()
    }

    /// (port, preview URL) of each published port.
    pub fn urls(&self) -> &[(u16, String)] {
        &self.session.urls
    }

    fn ensure_running(&self) -> Result<()> {
        if self.stopped.load(Ordering::Relaxed) {
            return Err(sandbox_core::Error::Stopped { id: self.session.id.clone() }.into());
        }
        Ok(())
    }

    /// `error` with every secret masked, when its text carries one.
    fn scrub(&self, error: Error) -> Error {
        if self.masks.is_empty() {
            return error;
        }
        let text = error.to_string();
        let masked = self.masks.scrub(&text);
        if masked == text {
            return error;
        }
        Error::Scrubbed { message: masked, class: sandbox_core::Classify::class(&error) }
    }

    /// The request with the session's environment and then its secret env first (the
    /// request's own values win).
    fn with_secrets(&self, request: &ExecRequest) -> ExecRequest {
        let mut request = request.clone();
        let mut env = self.session.env.clone();
        env.extend(self.session.secret_env.iter().cloned());
        env.append(&mut request.env);
        request.env = env;
        request
    }

    /// With `env` as the session's environment instead of the pod spec's (a run's script
    /// sees the run contract, not a session's uv settings).
    pub(crate) fn with_env(mut self, env: Vec<(String, String)>) -> PodSandbox {
        self.session.env = env;
        self
    }

    async fn guarded<T>(&self, work: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        self.ensure_running()?;
        work.await.map_err(|e| self.scrub(e))
    }
}

impl AgentShell for PodSandbox {
    type Error = Error;

    fn shell_id(&self) -> &str {
        &self.session.id
    }

    async fn shell_exec(
        &self,
        request: &ExecRequest,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome> {
        self.ensure_running()?;
        self.exec.exec(&self.with_secrets(request), output).await
    }

    async fn shell_exec_input(
        &self,
        request: &ExecRequest,
        stdin: &[u8],
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome> {
        self.ensure_running()?;
        self.exec.exec_input(&self.with_secrets(request), stdin, output).await
    }
}

impl Sandbox for PodSandbox {
    type Error = Error;

    fn id(&self) -> &str {
        &self.session.id
    }

    async fn exec(&self, request: &ExecRequest, output: &mut dyn OutputSink) -> Result<RunOutcome> {
        self.guarded(self.shell_exec(request, output)).await
    }

    async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        self.guarded(shell::read_file(self, path)).await
    }

    async fn write_file(&self, path: &str, contents: &[u8]) -> Result<()> {
        self.guarded(shell::write_file(self, path, contents)).await
    }

    async fn list_dir(&self, path: &str) -> Result<Vec<DirEntry>> {
        self.guarded(shell::list_dir(self, path)).await
    }

    async fn put(&self, source: &PutSource, dest: &str) -> Result<()> {
        self.guarded(async {
            match source {
                PutSource::Tar(bytes) => {
                    shell::check_abs(dest)?;
                    let request = unpack_request(dest);
                    let mut capped = shell::Capped::new(shell::CAPTURE_LIMIT);
                    let outcome = self.shell_exec_input(&request, bytes, &mut capped).await?;
                    self.unpacked(dest, &outcome, &capped)
                }
                PutSource::HostPath(path) => self.put_host_path(path, dest).await,
            }
        })
        .await
    }

    async fn start_service(&self, service: &ServiceSpec) -> Result<Service> {
        self.guarded(async {
            let port = service.port;
            let Some((_, url)) = self.session.urls.iter().find(|(p, _)| *p == port) else {
                return Err(sandbox_core::Error::Unsupported {
                    what: format!("a service on port {port}"),
                    by: format!("session `{}`", self.session.id),
                    hint: format!(
                        "start the session with `--publish {port}`: a pod's ports get their Service and Ingress when it starts"
                    ),
                }
                .into());
            };
            let started = shell::start_service(self, service, url.clone()).await?;
            let preview = self.session.preview;
            let ingress = match preview {
                Preview::PortForward => None,
                // Only a cluster's URL goes through an ingress that may lag behind the pod.
                Preview::Ingress if self.api.is_none() => return Ok(started),
                Preview::Ingress => Some(wait_answers(url, PREVIEW_PATIENCE).await),
                Preview::Auto => Some(wait_routed(url, AUTO_PATIENCE).await),
            };
            let fallback = match ingress {
                Some(Ok(())) => return Ok(started),
                Some(Err(e)) if preview == Preview::Ingress => Err(e),
                _ => self.forward(port).await,
            };
            match fallback {
                Ok(forward) => {
                    let started = Service { url: forward.url().to_owned(), ..started };
                    self.forwards_lock().push((started.id.clone(), forward));
                    Ok(started)
                }
                Err(e) => {
                    let _ = shell::stop_service(self, &started).await;
                    Err(e)
                }
            }
        })
        .await
    }

    async fn stop_service(&self, service: &Service) -> Result<()> {
        // The forward goes first: nothing reaches a service that is being stopped.
        self.forwards_lock().retain(|(id, _)| *id != service.id);
        self.guarded(shell::stop_service(self, service)).await
    }

    async fn stop(&self) -> Result<()> {
        if self.stopped.swap(true, Ordering::Relaxed) {
            return Ok(());
        }
        self.forwards_lock().clear();
        let Some((client, namespace, _)) = &self.api else { return Ok(()) };
        api::delete_pod(client, namespace, self.exec.pod(), self.session.uid.as_deref())
            .await
            .map(drop)
    }
}

impl InteractiveExec for PodSandbox {
    async fn exec_interactive(
        &self,
        request: &ExecRequest,
        io: Interactive,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome> {
        self.guarded(self.exec.exec_interactive(&self.with_secrets(request), io, output)).await
    }
}

impl WarmSession for PodSandbox {
    fn workspace(&self) -> &str {
        &self.session.workdir
    }

    fn policy(&self) -> Option<SessionPolicy> {
        Some(self.session.policy.clone())
    }

    fn secrets(&self) -> &[String] {
        &self.secrets
    }

    fn scripts_run(&self) -> u64 {
        self.session.scripts
    }

    fn note_script(&self) {
        let count = self.scripts.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        let Some((client, namespace, rt)) = &self.api else { return };
        let (pod, uid) = (self.exec.pod(), self.session.uid.as_deref());
        let count = count.to_string();
        let patch = api::annotate_pod(client, namespace, pod, uid, SCRIPTS_ANNOTATION, &count);
        // Best effort, and callable from inside or outside a runtime: a thread of its own
        // blocks on the engine's runtime.
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let _ = rt.block_on(patch);
            });
        });
    }

    async fn run_script(
        &self,
        script: &Path,
        options: &ScriptOptions,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome> {
        self.guarded(async {
            // The host's workspace is not the pod's: every script is copied in.
            let bytes = std::fs::read(script).map_err(|e| Error::Host {
                what: format!("read the script `{}`", script.display()),
                message: e.to_string(),
            })?;
            let name = script
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .filter(|n| !n.is_empty() && n.chars().all(|c| c != '/'))
                .unwrap_or_else(|| "script.py".to_owned());
            let inside = format!("/tmp/.scripts/{}/{name}", crate::engine::random_id());
            let nonce = crate::engine::random_id();
            let place = sandbox_core::ScriptPlace {
                inside: &inside,
                copy: Some(&bytes),
                nonce: &nonce,
                python: "/usr/bin/python3",
            };
            shell::run_script(self, &place, options, output).await
        })
        .await
    }
}

/// The exec that unpacks a tar on stdin below `dest`.
fn unpack_request(dest: &str) -> ExecRequest {
    ExecRequest {
        argv: ["sh", "-c", shell::UNPACK, "sh", dest].map(str::to_owned).to_vec(),
        cwd: Some("/".to_owned()),
        ..Default::default()
    }
}

impl PodSandbox {
    fn forwards_lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, Forward)>> {
        // A panic while holding it leaves a list that is still a list.
        self.forwards.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A local port-forward to `port`, on the engine's runtime (the caller's for a handle on
    /// an exec only), once it answers.
    async fn forward(&self, port: u16) -> Result<Forward> {
        let runtime = match &self.api {
            Some((_, _, rt)) => rt.clone(),
            None => tokio::runtime::Handle::current(),
        };
        let (client, namespace) = self.exec.api();
        let forward =
            Forward::start(client.clone(), namespace, self.exec.pod(), port, &runtime).await?;
        wait_answers(forward.url(), FORWARD_PATIENCE).await?;
        Ok(forward)
    }

    fn unpacked(&self, dest: &str, outcome: &RunOutcome, capped: &shell::Capped) -> Result<()> {
        if capped.over() {
            let what = format!("the output of unpacking into `{dest}`");
            return Err(shell::too_large(&self.session.id, what, shell::CAPTURE_LIMIT).into());
        }
        if outcome.exit_code != 0 {
            return Err(shell::file_error("unpacking into", dest, outcome, &capped.captured).into());
        }
        Ok(())
    }

    /// `put` of a host file or tree: a tar made on the fly on a blocking thread, written in
    /// agent input frames into a bounded channel the exec drains, so no whole archive is ever
    /// in memory. A packing error ends the exec before its end-of-input frame, so a partial
    /// archive is never unpacked as if it were whole.
    async fn put_host_path(&self, path: &Path, dest: &str) -> Result<()> {
        shell::check_abs(dest)?;
        let (frames, queued) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
        let source = path.to_owned();
        let mut packer = tokio::task::spawn_blocking(move || pack_into(&source, frames));
        let request = self.with_secrets(&unpack_request(dest));
        let mut capped = shell::Capped::new(shell::CAPTURE_LIMIT);
        let outcome = {
            let exec = self.exec.exec_frames(&request, queued, &mut capped);
            tokio::pin!(exec);
            tokio::select! {
            packed = &mut packer => {
                packed.map_err(|e| Error::Host {
                    what: format!("pack `{}` for the pod", path.display()),
                    message: e.to_string(),
                })??;
                exec.await?
            }
            // Unpacking ended first (say `dest` cannot be made): the packer's next send fails.
            outcome = &mut exec => outcome?,
            }
        };
        self.unpacked(dest, &outcome, &capped)
    }
}

/// Agent `i` frames of at most [`MAX_INPUT_CHUNK`] bytes, sent as they fill.
struct FrameWriter {
    frames: tokio::sync::mpsc::Sender<Vec<u8>>,
    pending: Vec<u8>,
}

impl FrameWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.pending, Vec::with_capacity(MAX_INPUT_CHUNK));
        let frame = encode_input(&Input::Stdin(chunk));
        self.frames
            .blocking_send(frame)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the exec ended"))
    }
}

impl std::io::Write for FrameWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let room = MAX_INPUT_CHUNK - self.pending.len();
        let n = bytes.len().min(room);
        self.pending.extend_from_slice(&bytes[..n]);
        if self.pending.len() == MAX_INPUT_CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// Tars a host file or directory tree, rooted at its base name (links kept as links), into
/// `frames`, then the end of input.
fn pack_into(path: &Path, frames: tokio::sync::mpsc::Sender<Vec<u8>>) -> Result<()> {
    let failed = |e: std::io::Error| Error::Host {
        what: format!("pack `{}` for the pod", path.display()),
        message: e.to_string(),
    };
    let writer = FrameWriter { frames, pending: Vec::with_capacity(MAX_INPUT_CHUNK) };
    let mut builder = tar::Builder::new(writer);
    builder.follow_symlinks(false);
    let name = path.file_name().map(std::path::PathBuf::from).unwrap_or_else(|| ".".into());
    let meta = std::fs::symlink_metadata(path).map_err(failed)?;
    if meta.is_dir() {
        builder.append_dir_all(&name, path).map_err(failed)?;
    } else {
        builder.append_path_with_name(path, &name).map_err(failed)?;
    }
    let mut writer = builder.into_inner().map_err(failed)?;
    std::io::Write::flush(&mut writer).map_err(failed)?;
    writer
        .frames
        .blocking_send(encode_input(&Input::Eof))
        .map_err(|_| failed(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the exec ended")))
}
