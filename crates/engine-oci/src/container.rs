//! One container from create to removal: attach before start (no output is lost), stream
//! stdout/stderr live, feed stdin, read the exit code once the output ends (podman: inspect,
//! docker: wait), and remove it on every path: normal exit, timeout, Ctrl-C/SIGTERM/SIGHUP,
//! errors, and panics (a drop guard).

use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, KillContainerOptions, WaitContainerOptions,
};
use futures_util::StreamExt;
use sandbox_core::{OutputSink, Stdin, Stream};
use tokio::io::AsyncWriteExt;

use crate::client::{self, Connection, Flavor};
use crate::error::{Error, Result, api};

/// Where a container's output goes.
pub(crate) enum Sink<'a> {
    /// Our own stdout/stderr.
    Inherit,
    /// A caller's sink.
    Caller(&'a mut dyn OutputSink),
    /// Collected (both streams, in order) for error messages.
    Collect(&'a mut Vec<u8>),
}

impl Sink<'_> {
    /// Passes `bytes` on; `true` when the reader went away (a closed pipe on our stdout, or a
    /// caller's sink that says so).
    fn write(&mut self, stream: Stream, bytes: &[u8]) -> bool {
        use std::io::Write as _;
        match self {
            Sink::Inherit => {
                let written = match stream {
                    Stream::Stdout => {
                        let mut out = std::io::stdout().lock();
                        out.write_all(bytes).and_then(|()| out.flush())
                    }
                    Stream::Stderr => std::io::stderr().lock().write_all(bytes),
                };
                written.is_err_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            }
            Sink::Caller(sink) => {
                sink.write(stream, bytes);
                sink.closed()
            }
            Sink::Collect(buf) => {
                buf.extend_from_slice(bytes);
                false
            }
        }
    }
}

/// How a container ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finished {
    pub(crate) exit_code: i32,
    pub(crate) duration: Duration,
    pub(crate) timed_out: bool,
    /// The signal that made us stop it (Ctrl-C and friends), if any.
    pub(crate) interrupted: Option<i32>,
}

/// Removes the container when dropped unless disarmed: the last line of defence when a future
/// is dropped or a panic unwinds. Runs the removal on its own thread and runtime, since a drop
/// may happen inside (or outside) any runtime.
pub(crate) struct RemoveGuard {
    docker: Docker,
    name: String,
    armed: bool,
}

impl RemoveGuard {
    pub(crate) fn new(docker: &Docker, name: &str) -> RemoveGuard {
        RemoveGuard { docker: docker.clone(), name: name.to_owned(), armed: true }
    }

    /// Hands the removal to the engine without waiting for it (see
    /// [`client::remove_without_waiting`]); removes and waits when even that fails.
    pub(crate) async fn hand_off(mut self, connection: &Connection) {
        if client::remove_without_waiting(connection, &self.name).await.is_ok() {
            self.armed = false;
        } else {
            self.remove().await;
        }
    }

    /// Removes now (awaited) and disarms.
    pub(crate) async fn remove(mut self) {
        let _ = crate::sweep::remove(&self.docker, &self.name).await;
        self.armed = false;
    }
}

impl Drop for RemoveGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let docker = self.docker.clone();
        let name = std::mem::take(&mut self.name);
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
                let _ = rt.block_on(crate::sweep::remove(&docker, &name));
            }
        })
        .join();
    }
}

/// How often a create that failed transiently is tried again.
const CREATE_RETRIES: u32 = 3;

/// Creates the container and returns a guard that removes it.
pub(crate) async fn create(
    docker: &Docker,
    engine: &'static str,
    name: &str,
    body: ContainerCreateBody,
    image: &str,
) -> Result<RemoveGuard> {
    let options = CreateContainerOptions { name: Some(name.to_owned()), ..Default::default() };
    let mut attempt = 0;
    let created = loop {
        let created = docker.create_container(Some(options.clone()), body.clone()).await;
        match &created {
            // Rootless podman under many parallel creates now and then fails to read the
            // user's subordinate ids (`keep-id requires additional UIDs…: %!w(<nil>)`, no
            // underlying error) and succeeds right after; a real misconfiguration still fails
            // after the retries.
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 500,
                message,
            }) if message.contains("keep-id requires additional") && attempt < CREATE_RETRIES => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
            }
            _ => break created,
        }
    };
    match created {
        Ok(_) => Ok(RemoveGuard::new(docker, name)),
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, message })
            if message.contains("image") || message.contains("No such") =>
        {
            Err(Error::MissingImage { image: image.to_owned(), engine })
        }
        Err(e) => Err(api(engine, &format!("creating container {name}"))(e)),
    }
}

/// Signals that stop a run: Ctrl-C, SIGTERM, SIGHUP. `None` when not handling signals.
pub(crate) struct Signals {
    streams: Option<[tokio::signal::unix::Signal; 3]>,
}

impl Signals {
    pub(crate) fn new(handle: bool) -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        if !handle {
            return Signals { streams: None };
        }
        let streams = (|| {
            Some([
                signal(SignalKind::interrupt()).ok()?,
                signal(SignalKind::terminate()).ok()?,
                signal(SignalKind::hangup()).ok()?,
            ])
        })();
        Signals { streams }
    }

    /// Resolves with the signal number when one arrives; never when not handling signals.
    async fn next(&mut self) -> i32 {
        match &mut self.streams {
            Some([int, term, hup]) => tokio::select! {
                _ = int.recv() => 2,
                _ = term.recv() => 15,
                _ = hup.recv() => 1,
            },
            None => std::future::pending().await,
        }
    }
}

/// The built-in relay of container `name`'s network namespace, holding `listed`.
async fn relay(
    docker: &Docker,
    engine: &'static str,
    name: &str,
    listed: &sandbox_net::Listed,
    lan: sandbox_core::Lan,
) -> Result<sandbox_net::Relay> {
    let netns = crate::netwall::netns_of(docker, engine, name).await?;
    let listed = listed.clone();
    let attached = tokio::task::spawn_blocking(move || {
        sandbox_net::Relay::attach_listed(&netns, &[], lan, listed).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|attached| attached);
    attached.map_err(|e| Error::Io {
        context: format!("attaching the relay to {name}"),
        source: std::io::Error::other(e),
    })
}

/// Attaches, starts, streams, waits. The caller removes the container (via the guard). The
/// command waits at its gate (`crate::gate`) while the host walls its network in (`net`:
/// `crate::netwall`, private ranges left reachable when it says the LAN is allowed) and, with `gate` (the pinned sources), checks the started
/// container's mounts against those pins, and tells `published` where its ports are bound;
/// only then does the go line let it run.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn attach_and_run(
    docker: &Docker,
    connection: &Connection,
    name: &str,
    net: Option<crate::netwall::Wall>,
    listed: Option<&sandbox_net::Listed>,
    stdin: &Stdin,
    mut sink: Sink<'_>,
    timeout: Option<Duration>,
    signals: &mut Signals,
    gate: Option<&[crate::verify::Pin]>,
    published: Option<(&[sandbox_core::PublishedPort], &mut sandbox_core::PublishedHook<'_>)>,
) -> Result<Finished> {
    let engine = connection.flavor.as_str();
    let attach_stdin = gate.is_some() || !matches!(stdin, Stdin::Null);
    let options = AttachContainerOptions {
        stream: true,
        stdin: attach_stdin,
        stdout: true,
        stderr: true,
        logs: false,
        ..Default::default()
    };
    let attached = docker
        .attach_container(name, Some(options))
        .await
        .map_err(api(engine, &format!("attaching to {name}")))?;
    let mut output = attached.output;
    let mut input = attached.input;
    let start = Instant::now();
    docker
        .start_container(name, None::<bollard::query_parameters::StartContainerOptions>)
        .await
        .map_err(|e| start_error(engine, name, e))?;
    // An allowlist: the container has no bridge; the built-in relay gives its namespace a tun
    // device and checks every flow by name. Held until the run ends. The wall below is then
    // added over the relay's route, and the gate waits for it as always.
    let _relay = match (listed, &net) {
        (Some(listed), Some(wall)) => match relay(docker, engine, name, listed, wall.lan).await {
            Ok(relay) => Some(relay),
            Err(e) => {
                kill(docker, name).await;
                return Err(e);
            }
        },
        _ => None,
    };
    if let Some(wall) = net
        && let Err(e) = crate::netwall::apply(docker, connection, name, wall).await
    {
        kill(docker, name).await;
        return Err(e);
    }
    let go: &'static [u8] = match gate {
        Some(pins) => {
            if let Err(e) = crate::verify::started(docker, engine, name, pins).await {
                kill(docker, name).await;
                return Err(e);
            }
            crate::gate::GO
        }
        None => b"",
    };
    // Up, walled and checked: where its ports are is known (the daemon's choice for `0:PORT`)
    // and told before the script is let go.
    if let Some((asked, hook)) = published {
        match crate::ports::inspect_bound(docker, engine, name, asked).await {
            Ok(bound) => hook(&bound),
            Err(e) => {
                kill(docker, name).await;
                return Err(e);
            }
        }
    }

    let feeder = match stdin {
        Stdin::Null if go.is_empty() => None,
        Stdin::Null => Some(tokio::spawn(async move {
            let _ = input.write_all(go).await;
            let _ = input.shutdown().await;
        })),
        Stdin::Bytes(bytes) => {
            let bytes = bytes.clone();
            Some(tokio::spawn(async move {
                let _ = input.write_all(go).await;
                let _ = input.write_all(&bytes).await;
                let _ = input.shutdown().await;
            }))
        }
        Stdin::Inherit => Some(tokio::spawn(async move {
            let _ = input.write_all(go).await;
            let mut ours = tokio::io::stdin();
            let _ = tokio::io::copy(&mut ours, &mut input).await;
            let _ = input.shutdown().await;
        })),
    };

    let pump = async {
        while let Some(item) = output.next().await {
            let gone = match item {
                Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                    sink.write(Stream::Stdout, &message)
                }
                Ok(LogOutput::StdErr { message }) => sink.write(Stream::Stderr, &message),
                Ok(LogOutput::StdIn { .. }) => false,
                Err(_) => break,
            };
            // The reader went away (`run … | head -1`): the script's own output pipe is the
            // engine's and never closes, so end it as the closed pipe would have, unless it
            // had already exited (then its own code stands).
            if gone {
                let inspect = client::inspect_container_raw(connection, name).await;
                if let Some(code) = inspect.ok().as_ref().and_then(stopped_exit_code) {
                    return Ok(code);
                }
                kill(docker, name).await;
                return Ok(sandbox_core::EXIT_CLOSED_PIPE);
            }
        }
        exit_code(docker, connection, name).await
    };
    let deadline = async {
        match timeout {
            Some(t) => tokio::time::sleep(t).await,
            None => std::future::pending().await,
        }
    };
    let result = tokio::select! {
        code = pump => code.map(|exit_code| Finished {
            exit_code,
            duration: start.elapsed(),
            timed_out: false,
            interrupted: None,
        }),
        () = deadline => {
            kill(docker, name).await;
            Ok(Finished { exit_code: 137, duration: start.elapsed(), timed_out: true, interrupted: None })
        }
        signal = signals.next() => {
            kill(docker, name).await;
            Ok(Finished {
                exit_code: 128 + signal,
                duration: start.elapsed(),
                timed_out: false,
                interrupted: Some(signal),
            })
        }
    };
    if let Some(feeder) = feeder {
        feeder.abort();
    }
    result
}

/// A failed start, explained (podman without its init binary says so in its message).
pub(crate) fn start_error(engine: &'static str, name: &str, e: bollard::errors::Error) -> Error {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. }
            if message.contains("catatonit") || message.contains("container-init") =>
        {
            Error::NoPodmanInit
        }
        e => api(engine, &format!("starting {name}"))(e),
    }
}

async fn kill(docker: &Docker, name: &str) {
    let options = KillContainerOptions { signal: "KILL".to_owned() };
    let _ = docker.kill_container(name, Some(options)).await;
}

/// The container's exit code once it has stopped (the output stream ends slightly earlier).
/// Podman: inspected (untyped) as soon as the stream ends, because its wait endpoints only
/// answer once the container is `exited`, i.e. after conmon's `podman container cleanup` has
/// run (a second or so of extra latency with the compat endpoint's 250 ms polling), while the
/// exit code is known as soon as it is `stopped`. Docker's wait answers at once.
async fn exit_code(docker: &Docker, connection: &Connection, name: &str) -> Result<i32> {
    let engine = connection.flavor.as_str();
    if connection.flavor == Flavor::Podman {
        for _ in 0..STOPPED_POLLS {
            match client::inspect_container_raw(connection, name).await {
                Ok(inspect) => match stopped_exit_code(&inspect) {
                    Some(code) => return Ok(code),
                    None => tokio::time::sleep(STOPPED_POLL_INTERVAL).await,
                },
                // Gone or unreadable: the wait endpoint knows what happened.
                Err(_) => break,
            }
        }
    }
    let options = WaitContainerOptions { condition: "not-running".to_owned() };
    let mut wait = docker.wait_container(name, Some(options));
    match wait.next().await {
        Some(Ok(response)) => Ok(i32::try_from(response.status_code).unwrap_or(1)),
        Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => {
            Ok(i32::try_from(code).unwrap_or(1))
        }
        Some(Err(e)) => Err(api(engine, &format!("waiting for {name}"))(e)),
        None => Err(Error::Api {
            engine,
            context: format!("waiting for {name}"),
            message: "the wait stream ended without a status".to_owned(),
        }),
    }
}

/// How often, and how many times, podman is asked whether a container whose output ended has
/// stopped before falling back to the (slow) wait endpoint.
const STOPPED_POLLS: u32 = 50;
const STOPPED_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Pure: the exit code in an untyped inspect once the container has stopped; `None` while it
/// has not (still running, or not started yet).
pub(crate) fn stopped_exit_code(inspect: &serde_json::Value) -> Option<i32> {
    let state = inspect.get("State")?;
    if state.get("Running")?.as_bool()? {
        return None;
    }
    match state.get("Status")?.as_str()? {
        "stopped" | "exited" => i32::try_from(state.get("ExitCode")?.as_i64()?).ok(),
        _ => None,
    }
}
