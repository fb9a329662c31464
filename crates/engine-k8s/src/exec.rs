//! Exec in a pod over the Kubernetes WebSocket channel protocol ([`crate::channel`]), with
//! the frames under our control: the request is kube's own (`Request::exec`, the upgrade by
//! `Client::connect`, offering v5 then v4), the messages are ours.
//!
//! **Design: one exec of a relay to the pod's agent, not a raw exec of the command.** A
//! session pod runs the OCI sessions' agent (`sandbox_core::agent::AGENT_PY`) as its main
//! process. [`PodExec::exec`] execs [`crate::relay::RELAY`] (a stdlib python copy loop to the
//! agent's unix socket) and speaks the agent's framed protocol (version 2) through the exec's
//! stdin and stdout, so on both channel protocols:
//! - **end of stdin is in band** (the agent's `c` frame): v4 cannot close stdin alone, and
//!   closing the socket there loses the output still in flight;
//! - **env and cwd travel in the request header over stdin**, never in the exec URL, so no
//!   value (secret-looking or not) is on argv, in the apiserver's audit log or in `ps`;
//!   no `sh -c 'cd ... && exec env ...'` wrapper exists to get quoting wrong;
//! - **the timeout kills the process tree, not the pod**: the agent runs each command as a
//!   session leader and kills the whole session at the request's timeout; if the agent does
//!   not report in time ([`TIMEOUT_GRACE`] more), the host closes the WebSocket, the relay's
//!   stdin ends, it shuts the socket and the agent kills the session, as on Ctrl-C;
//! - **the exit code is the agent's** (`x` frame, 128 + N for signal N); the status channel
//!   only tells the relay's own fate ([`crate::relay::EXIT_NO_AGENT`]: nothing listens).
//!
//! The relay's stdin and stdout are copied concurrently, and here the input is written while
//! the output is read (one `select!`), so neither direction waits on the other's buffers.
//! [`PodExec::exec_raw`] is the plain exec for pods without the agent: v5 ends its stdin with
//! the close message; on v4 stdin is refused ([`Error::StdinNeedsV5`]) rather than lost.
//!
//! **The warm path: a port-forward to the agent, no process started in the pod.** A pod's
//! agent also listens on [`AGENT_PORT`] of the pod's loopback (`sandbox_core::agent::tcp_arg`):
//! unreachable from other pods (loopback is not routed, and no NetworkPolicy or Service names
//! it), reached from here only through the apiserver's `pods/portforward`, which authenticates
//! and authorizes the caller as it does `pods/exec`. The same frames go over the forwarded
//! stream as over the relay's stdin and stdout, but a call costs one upgrade and a fork in the
//! agent, where an exec costs the runtime's process start in the container plus the relay's
//! python. Where the forward reaches nothing (a pod made before the agent listened there, a
//! runtime such as gVisor or Kata whose port-forward does not reach the pod's loopback, RBAC
//! without `pods/portforward`), not a byte comes back: the call goes through the exec instead,
//! and so does every later call of this handle. A forward that answered and then failed is an
//! error like an exec's; the command is never started twice (the agent's hello, sent before it
//! starts anything, is the first byte of every answer).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use k8s_openapi::api::core::v1::Pod;
use kube::api::AttachParams;
use kube::core::Resource as _;
use sandbox_core::agent::{
    Answer, EXIT_HOST_TIMEOUT, MAX_INPUT_CHUNK, TIMEOUT_GRACE, check_hello,
    encode_interactive_request, pump_input, take_frame,
};
use sandbox_core::{
    EXIT_CLOSED_PIPE, ExecRequest, Interactive, OutputSink, RunOutcome, Stream, TtySize,
};
use tokio_tungstenite::tungstenite::Message;

use crate::Error;
use crate::channel::{self, ExitStatus, Incoming, Protocol};
use crate::relay::{EXIT_NO_AGENT, FrameBuffer, RELAY};

/// Where the agent listens inside a session pod (its own `/tmp`).
pub const AGENT_SOCKET: &str = "/tmp/.python-sandbox-agent.sock";

/// The loopback port the agent also listens on in a pod (see the module docs): below the
/// kernel's ephemeral range and no common service's, so a script's own servers rarely want it
/// (publishing it is refused by name).
pub const AGENT_PORT: u16 = 30_711;

/// How much of the relay's own stderr is kept for an error message.
const DIAGNOSTIC_LIMIT: usize = 4 << 10;

/// How long closing a finished exec's WebSocket may take before it is just dropped.
const CLOSE_PATIENCE: Duration = Duration::from_secs(2);

/// Execs in one container of one pod.
#[derive(Clone)]
pub struct PodExec {
    client: kube::Client,
    namespace: String,
    pod: String,
    container: Option<String>,
    agent_socket: String,
    agent_port: Option<u16>,
    /// Set once a forward reached nothing: this handle's calls go through the exec.
    forward_unreachable: Arc<AtomicBool>,
    python: String,
    cwd: String,
}

impl std::fmt::Debug for PodExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodExec")
            .field("namespace", &self.namespace)
            .field("pod", &self.pod)
            .field("container", &self.container)
            .finish_non_exhaustive()
    }
}

/// One exec's WebSocket and the protocol the server picked.
pub struct ExecChannel {
    /// The channel protocol the server answered with.
    pub protocol: Protocol,
    /// The upgraded connection (`into_stream` gives the WebSocket).
    pub connection: kube::client::Connection,
}

impl PodExec {
    /// Execs in `pod` of `namespace` (its only or default container, the agent at
    /// [`AGENT_SOCKET`], `python3` on the pod's `PATH`, commands in `/` unless asked).
    pub fn new(client: kube::Client, namespace: &str, pod: &str) -> PodExec {
        PodExec {
            client,
            namespace: namespace.to_owned(),
            pod: pod.to_owned(),
            container: None,
            agent_socket: AGENT_SOCKET.to_owned(),
            agent_port: Some(AGENT_PORT),
            forward_unreachable: Arc::new(AtomicBool::new(false)),
            python: "python3".to_owned(),
            cwd: "/".to_owned(),
        }
    }

    /// The agent's loopback port in the pod (`None`: every call an exec of the relay, as for
    /// a pod under a runtime whose port-forward does not reach the pod's loopback).
    pub fn agent_port(mut self, port: Option<u16>) -> PodExec {
        self.agent_port = port;
        self
    }

    /// Whether calls go through the port-forward (false once one reached nothing).
    pub fn forwards(&self) -> bool {
        self.agent_port.is_some() && !self.forward_unreachable.load(Ordering::Relaxed)
    }

    /// The container execs go to.
    pub fn container(mut self, container: &str) -> PodExec {
        self.container = Some(container.to_owned());
        self
    }

    /// The working directory of requests that name none (the sandbox's workdir).
    pub fn cwd(mut self, cwd: &str) -> PodExec {
        self.cwd = cwd.to_owned();
        self
    }

    /// Where the agent listens in the pod (tests run an agent elsewhere).
    pub fn agent_socket(mut self, path: &str) -> PodExec {
        self.agent_socket = path.to_owned();
        self
    }

    /// The pod's name.
    pub fn pod(&self) -> &str {
        &self.pod
    }

    /// The client and namespace the execs go through (a port-forward takes the same way).
    pub(crate) fn api(&self) -> (&kube::Client, &str) {
        (&self.client, &self.namespace)
    }

    /// Opens an exec of `argv` (stdout and stderr attached, stdin with `stdin`): the
    /// WebSocket upgrade through `kube::Client::connect`, offering v5 then v4.
    pub async fn connect(&self, argv: &[String], stdin: bool) -> Result<ExecChannel, Error> {
        let mut params = AttachParams::default().stdin(stdin).stdout(true).stderr(true);
        if let Some(container) = &self.container {
            params = params.container(container.clone());
        }
        let url = Pod::url_path(&(), Some(&self.namespace));
        let mut request = kube::core::Request::new(url)
            .exec(&self.pod, argv.iter().cloned(), &params)
            .map_err(|e| Error::ExecConnect {
                pod: self.pod.clone(),
                source: kube::Error::BuildRequest(e),
            })?;
        request.extensions_mut().insert("exec");
        let connection = self
            .client
            .connect(request)
            .await
            .map_err(|source| Error::ExecConnect { pod: self.pod.clone(), source })?;
        let protocol = if connection.supports_stream_close() { Protocol::V5 } else { Protocol::V4 };
        Ok(ExecChannel { protocol, connection })
    }

    fn relay_argv(&self) -> Vec<String> {
        vec![self.python.clone(), "-c".to_owned(), RELAY.to_owned(), self.agent_socket.clone()]
    }

    /// Runs `request` to completion through the pod's agent (see the module docs), its
    /// output streamed to `output` as it comes.
    pub async fn exec(
        &self,
        request: &ExecRequest,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome, Error> {
        self.relayed(request, &request.stdin, None, None, output).await
    }

    /// [`PodExec::exec`] with `stdin` instead of the request's: framed straight from the
    /// caller's slice, so a large write never sits in memory twice.
    pub async fn exec_input(
        &self,
        request: &ExecRequest,
        stdin: &[u8],
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome, Error> {
        self.relayed(request, stdin, None, None, output).await
    }

    /// [`PodExec::exec`] with stdin from `frames`: agent input frames
    /// ([`sandbox_core::agent::encode_input`]) as a producer makes them, which ends them with
    /// the end-of-input frame. The bounded channel holds the producer back to the socket's pace.
    pub async fn exec_frames(
        &self,
        request: &ExecRequest,
        frames: tokio::sync::mpsc::Receiver<Vec<u8>>,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome, Error> {
        self.relayed(request, &[], None, Some(frames), output).await
    }

    /// [`PodExec::exec`] with stdin streamed from `io.input` (after `request.stdin`) and, with
    /// `io.tty`, on a pty the agent opens (resizes are agent frames too).
    pub async fn exec_interactive(
        &self,
        request: &ExecRequest,
        io: Interactive,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome, Error> {
        // A bounded hand-off: a fast producer waits for the socket instead of queueing.
        let (frames, queued) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
        let done = Arc::new(AtomicBool::new(false));
        let forwarding = Arc::clone(&done);
        let input = io.input;
        std::thread::spawn(move || {
            pump_input(&input, &forwarding, |bytes| frames.blocking_send(bytes).is_ok());
        });
        let result = self.relayed(request, &request.stdin, io.tty, Some(queued), output).await;
        done.store(true, Ordering::Relaxed);
        result
    }

    /// Whether the agent answers on its port now: `true` run through a forward, with no exec
    /// fallback and nothing remembered about the forward. A pod's container is started before
    /// its agent listens, and well before the kubelet's readiness probe has seen it do so.
    pub async fn greet(&self) -> Greeting {
        let Some(port) = self.agent_port else { return Greeting::NoForward };
        let request = ExecRequest { argv: vec!["true".to_owned()], ..ExecRequest::default() };
        let header = encode_interactive_request(&request, "/", None);
        let mut output = sandbox_core::shell::Capped::new(DIAGNOSTIC_LIMIT);
        let answer = self
            .forwarded(port, &header, &[], &mut None, &request, &mut output, Instant::now())
            .await;
        match answer {
            Forwarded::Answered(_) => Greeting::Answered,
            Forwarded::Unreachable { upgraded: true } => Greeting::NotYet,
            Forwarded::Unreachable { upgraded: false } => Greeting::NoForward,
        }
    }

    async fn relayed(
        &self,
        request: &ExecRequest,
        stdin: &[u8],
        tty: Option<TtySize>,
        live: Option<tokio::sync::mpsc::Receiver<Vec<u8>>>,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome, Error> {
        let start = Instant::now();
        let cwd = request.cwd.clone().unwrap_or_else(|| self.cwd.clone());
        // The header without the stdin: that goes as frames straight from the caller's bytes.
        let bare = ExecRequest {
            argv: request.argv.clone(),
            env: request.env.clone(),
            cwd: None,
            stdin: Vec::new(),
            timeout: request.timeout,
        };
        let header = encode_interactive_request(&bare, &cwd, tty);
        let mut live = live;
        if let Some(port) = self.agent_port.filter(|_| self.forwards()) {
            match self.forwarded(port, &header, stdin, &mut live, request, output, start).await {
                Forwarded::Answered(result) => return result,
                Forwarded::Unreachable { .. } => {
                    self.forward_unreachable.store(true, Ordering::Relaxed);
                }
            }
        }
        let ExecChannel { connection, .. } = self.connect(&self.relay_argv(), true).await?;
        let (mut sink, mut stream) = connection.into_stream().split();
        let writer = async {
            let _ = send_input(&mut sink, &header, stdin, live.as_mut(), None).await;
            // Never closed here: on v4 that would end the whole exec.
            std::future::pending::<()>().await;
        };
        let reader = read_relay(&mut stream, request, output, &self.pod, start);
        let both = async {
            tokio::select! {
                outcome = reader => outcome,
                () = writer => unreachable_pending(),
            }
        };
        let result = within_timeout(request.timeout, start, both, Ok).await;
        // Closing ends the relay's stdin, so the agent ends whatever still runs.
        let _ = tokio::time::timeout(CLOSE_PATIENCE, sink.close()).await;
        result
    }

    /// One call through a port-forward to the agent's loopback port (see the module docs):
    /// [`Forwarded::Unreachable`] when not a byte came back (nothing ran; `live` untouched, for
    /// the exec to take over).
    ///
    /// The forward's WebSocket is ours, read and written at once as an exec's is (not kube's
    /// `Portforwarder`, whose one loop stops reading the socket while a send waits: with a
    /// command that echoes its input, both directions then wait on each other for good).
    #[allow(clippy::too_many_arguments, reason = "the relayed call's own pieces, passed through")]
    async fn forwarded(
        &self,
        port: u16,
        header: &[u8],
        stdin: &[u8],
        live: &mut Option<tokio::sync::mpsc::Receiver<Vec<u8>>>,
        request: &ExecRequest,
        output: &mut dyn OutputSink,
        start: Instant,
    ) -> Forwarded {
        let url = Pod::url_path(&(), Some(&self.namespace));
        let Ok(mut upgrade) = kube::core::Request::new(url).portforward(&self.pod, &[port]) else {
            return Forwarded::Unreachable { upgraded: false };
        };
        upgrade.extensions_mut().insert("portforward");
        let Ok(connection) = self.client.connect(upgrade).await else {
            return Forwarded::Unreachable { upgraded: false };
        };
        let (mut sink, mut stream) = connection.into_stream().split();
        let greeted = tokio::sync::Notify::new();
        let writer = async {
            // Channel 0 is the forwarded port's data, framed as an exec's stdin is. Typed input
            // is taken only once the agent answered: a forward that reached nothing leaves
            // every frame to the exec.
            let _ = send_input(&mut sink, header, stdin, live.as_mut(), Some(&greeted)).await;
            // Never closed here: the end of the stream is the caller going away, for the
            // agent (it ends the command's whole session).
            std::future::pending::<()>().await;
        };
        let pod = self.pod.as_str();
        let reader = async {
            let failed = |problem: String| {
                Forwarded::Answered(Err(Error::ExecProtocol { pod: pod.to_owned(), problem }))
            };
            let mut frames = FrameBuffer::default();
            let mut greeted_yet = false;
            let mut received = false;
            // Each channel's first message is its port (two bytes), not data.
            let mut opened = [false; 2];
            while let Some(message) = stream.next().await {
                let Ok(message) = message else { break };
                let Message::Binary(bytes) = message else { continue };
                let Some((&ch, payload)) = bytes.split_first() else { continue };
                let Some(seen) = opened.get_mut(usize::from(ch)) else { continue };
                if !*seen {
                    *seen = true;
                    continue;
                }
                if ch == 1 {
                    if !received {
                        return Forwarded::Unreachable { upgraded: true };
                    }
                    let text = String::from_utf8_lossy(payload).trim().to_owned();
                    return failed(format!("the port-forward to the agent failed: {text}"));
                }
                if payload.is_empty() {
                    continue;
                }
                received = true;
                frames.push(payload);
                match answer(&mut frames, &mut greeted_yet, request, output, pod, start) {
                    Ok(None) => {}
                    Ok(Some(outcome)) => return Forwarded::Answered(Ok(outcome)),
                    Err(e) => return Forwarded::Answered(Err(e)),
                }
                if greeted_yet {
                    greeted.notify_one();
                }
            }
            if received {
                failed("the port-forward to the agent ended before the command's exit".to_owned())
            } else {
                Forwarded::Unreachable { upgraded: true }
            }
        };
        let both = async {
            tokio::select! {
                answered = reader => answered,
                () = writer => unreachable_pending(),
            }
        };
        let answered =
            within_timeout(request.timeout, start, both, |late| Forwarded::Answered(Ok(late)))
                .await;
        // Closing ends the agent's connection: it ends whatever still runs.
        let _ = tokio::time::timeout(CLOSE_PATIENCE, sink.close()).await;
        answered
    }

    /// A plain exec of `argv` without the agent, `stdin` fed then closed. For pods that do not
    /// run the agent: no timeout, no env or cwd, and on v4 non-empty stdin is refused
    /// ([`Error::StdinNeedsV5`]) since it could not be ended without losing the output.
    pub async fn exec_raw(
        &self,
        argv: &[String],
        stdin: &[u8],
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome, Error> {
        let start = Instant::now();
        let ExecChannel { protocol, connection } = self.connect(argv, !stdin.is_empty()).await?;
        let (mut sink, mut stream) = connection.into_stream().split();
        if !stdin.is_empty() && channel::close_stdin(protocol).is_none() {
            let _ = tokio::time::timeout(CLOSE_PATIENCE, sink.close()).await;
            return Err(Error::StdinNeedsV5 { pod: self.pod.clone() });
        }
        let writer = async {
            for chunk in stdin.chunks(MAX_INPUT_CHUNK) {
                if sink.send(Message::binary(channel::stdin(chunk))).await.is_err() {
                    break;
                }
            }
            if let Some(close) = channel::close_stdin(protocol).filter(|_| !stdin.is_empty()) {
                let _ = sink.send(Message::binary(close)).await;
            }
            std::future::pending::<()>().await;
        };
        let pod = &self.pod;
        let reader = async {
            while let Some(message) = stream.next().await {
                let message = message.map_err(|e| stream_error(pod, &e))?;
                let Message::Binary(bytes) = message else { continue };
                match channel::decode(&bytes) {
                    Incoming::Stdout(data) => output.write(Stream::Stdout, data),
                    Incoming::Stderr(data) => output.write(Stream::Stderr, data),
                    Incoming::Status(json) => return exit_of(pod, json, start),
                    Incoming::Closed(_) | Incoming::Ignored => {}
                }
                if output.closed() {
                    return Ok(RunOutcome::exited(EXIT_CLOSED_PIPE, start.elapsed()));
                }
            }
            Err(Error::ExecProtocol {
                pod: pod.clone(),
                problem: "the exec stream ended without the command's status".to_owned(),
            })
        };
        let result = tokio::select! {
            outcome = reader => outcome,
            () = writer => unreachable_pending(),
        };
        let _ = tokio::time::timeout(CLOSE_PATIENCE, sink.close()).await;
        result
    }
}

fn unreachable_pending<T>() -> T {
    unreachable!("the writer never finishes: it waits forever once its input is sent")
}

fn stream_error(pod: &str, e: &tokio_tungstenite::tungstenite::Error) -> Error {
    Error::ExecProtocol { pod: pod.to_owned(), problem: format!("the exec stream failed: {e}") }
}

fn exit_of(pod: &str, json: &[u8], start: Instant) -> Result<RunOutcome, Error> {
    match channel::parse_status(json) {
        Ok(ExitStatus::Exited(code)) => Ok(RunOutcome::exited(code, start.elapsed())),
        Ok(ExitStatus::Failed(message)) => Err(Error::ExecFailed { pod: pod.to_owned(), message }),
        Err(problem) => Err(Error::ExecProtocol { pod: pod.to_owned(), problem }),
    }
}

/// What [`PodExec::greet`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Greeting {
    /// The agent answered through the forward.
    Answered,
    /// The forward opened but reached nothing listening (yet).
    NotYet,
    /// No forward to try: refused by the apiserver (RBAC), or the handle has no agent port.
    NoForward,
}

/// What a call through the port-forward came to.
enum Forwarded {
    /// The agent answered: the call's result, whatever it is.
    Answered(Result<RunOutcome, Error>),
    /// Not a byte came back: nothing ran. `upgraded`: the apiserver opened the forward (what
    /// it reached in the pod answered nothing), rather than refusing it.
    Unreachable { upgraded: bool },
}

/// `work` within the request's `timeout` and the agent's grace: past them the host gives up,
/// and `late` gets the timed-out outcome it reports instead.
async fn within_timeout<T>(
    timeout: Option<Duration>,
    start: Instant,
    work: impl std::future::Future<Output = T>,
    late: impl FnOnce(RunOutcome) -> T,
) -> T {
    let Some(timeout) = timeout else { return work.await };
    match tokio::time::timeout(timeout + TIMEOUT_GRACE, work).await {
        Ok(done) => done,
        Err(_) => late(RunOutcome {
            exit_code: EXIT_HOST_TIMEOUT,
            duration: start.elapsed(),
            timed_out: true,
            warnings: Vec::new(),
            net_refused: Vec::new(),
        }),
    }
}

/// The complete frames in `frames`, in order: the hello first (`greeted` once it came), then
/// output to `output` until the exit frame, whose outcome ends the call.
fn answer(
    frames: &mut FrameBuffer,
    greeted: &mut bool,
    request: &ExecRequest,
    output: &mut dyn OutputSink,
    pod: &str,
    start: Instant,
) -> Result<Option<RunOutcome>, Error> {
    let hostile = |problem: String| Error::ExecProtocol { pod: pod.to_owned(), problem };
    while let Some(frame) = frames.next_frame().map_err(hostile)? {
        if !*greeted {
            check_hello(&frame, pod)?;
            *greeted = true;
            continue;
        }
        let Answer::Ended { exit_code, timed_out } =
            take_frame(frame, request, output).map_err(hostile)?
        else {
            continue;
        };
        return Ok(Some(RunOutcome {
            exit_code,
            duration: start.elapsed(),
            timed_out,
            warnings: Vec::new(),
            net_refused: Vec::new(),
        }));
    }
    Ok(None)
}

/// One stdin message carrying one agent input frame.
fn input_message(kind: u8, payload: &[u8]) -> Message {
    let mut message = Vec::with_capacity(payload.len() + 6);
    message.push(channel::STDIN);
    message.push(kind);
    message.extend_from_slice(&u32::try_from(payload.len()).unwrap_or(u32::MAX).to_be_bytes());
    message.extend_from_slice(payload);
    Message::binary(message)
}

/// The request header, `stdin` as `i` frames (one WebSocket message each, straight from the
/// caller's bytes), then `live` frames as they come (once `greeted` is notified, where given)
/// or, without them, the end of input.
async fn send_input<S>(
    sink: &mut S,
    header: &[u8],
    stdin: &[u8],
    live: Option<&mut tokio::sync::mpsc::Receiver<Vec<u8>>>,
    greeted: Option<&tokio::sync::Notify>,
) -> Result<(), S::Error>
where
    S: futures_util::Sink<Message> + Unpin,
{
    sink.send(Message::binary(channel::stdin(header))).await?;
    for chunk in stdin.chunks(MAX_INPUT_CHUNK) {
        sink.send(input_message(b'i', chunk)).await?;
    }
    match live {
        None => sink.send(input_message(b'c', b"")).await?,
        Some(live) => {
            if let Some(greeted) = greeted {
                greeted.notified().await;
            }
            while let Some(frames) = live.recv().await {
                sink.send(Message::binary(channel::stdin(&frames))).await?;
            }
        }
    }
    Ok(())
}

/// Reads the relay's answer: agent frames on stdout (the first is the hello), the relay's own
/// complaints on stderr, its exit on the status channel.
async fn read_relay<S>(
    stream: &mut S,
    request: &ExecRequest,
    output: &mut dyn OutputSink,
    pod: &str,
    start: Instant,
) -> Result<RunOutcome, Error>
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let hostile = |problem: String| Error::ExecProtocol { pod: pod.to_owned(), problem };
    let mut frames = FrameBuffer::default();
    let mut greeted = false;
    let mut diagnostics = Vec::new();
    while let Some(message) = stream.next().await {
        let message = message.map_err(|e| stream_error(pod, &e))?;
        let Message::Binary(bytes) = message else { continue };
        match channel::decode(&bytes) {
            Incoming::Stdout(data) => frames.push(data),
            Incoming::Stderr(data) => {
                let room = DIAGNOSTIC_LIMIT.saturating_sub(diagnostics.len());
                diagnostics.extend_from_slice(&data[..data.len().min(room)]);
                continue;
            }
            Incoming::Status(json) => {
                let diagnostics = String::from_utf8_lossy(&diagnostics).trim().to_owned();
                return Err(match channel::parse_status(json) {
                    Ok(ExitStatus::Exited(EXIT_NO_AGENT)) => {
                        Error::NoAgent { pod: pod.to_owned(), message: diagnostics }
                    }
                    Ok(status) => hostile(format!(
                        "the relay to the agent ended before the command's exit ({status:?}){}",
                        if diagnostics.is_empty() {
                            String::new()
                        } else {
                            format!(": {diagnostics}")
                        }
                    )),
                    Err(problem) => hostile(problem),
                });
            }
            Incoming::Closed(_) | Incoming::Ignored => continue,
        }
        if let Some(outcome) = answer(&mut frames, &mut greeted, request, output, pod, start)? {
            return Ok(outcome);
        }
    }
    Err(hostile("the exec stream ended before the command's exit".to_owned()))
}

impl sandbox_core::AgentShell for PodExec {
    type Error = Error;

    fn shell_id(&self) -> &str {
        &self.pod
    }

    async fn shell_exec(
        &self,
        request: &ExecRequest,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome, Error> {
        self.exec(request, output).await
    }

    async fn shell_exec_input(
        &self,
        request: &ExecRequest,
        stdin: &[u8],
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome, Error> {
        self.exec_input(request, stdin, output).await
    }
}
