//! The host side of a session's agent (`agent.py`, the session container's main process): execs
//! over a unix socket instead of the Docker API, so a warm `session run` is one local connect
//! and one fork (tens of milliseconds) rather than exec create/start/inspect round trips
//! through the daemon (over 100 ms each on podman).
//!
//! Reaching the socket: the agent binds it in the container's own tmpfs `/tmp`, and the host
//! opens it through `/proc/<pid>/root` of the container's init process. No host directory is
//! shared with the sandbox (nothing it could fill, nothing of the host path layout it could
//! see). The path is untrusted (the sandboxed code runs as the same user as the agent and may
//! replace the socket with a symlink to a host socket), so the lookup is pinned:
//!
//! * `/proc/<pid>` is opened once as a directory, and the process start time read through it
//!   must match the one recorded when the session started (a recycled pid is not our session);
//! * the socket is opened relative to that directory with `O_PATH | O_NOFOLLOW` and must be a
//!   socket; `/tmp` is a mount point the sandbox cannot replace. The connect goes through
//!   `/proc/self/fd/N`, so the inode checked is the inode connected to.
//!
//! Wire format and every check of an answer (frame sizes, exit codes, frame kinds) live in
//! [`sandbox_core::agent`], shared with engine-bwrap's sessions; the pin in [`reaper::ProcPin`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sandbox_core::agent::{Answer, TIMEOUT_GRACE};
use sandbox_core::{ExecRequest, Interactive, OutputSink, RunOutcome};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::error::{Error, Result};

/// Where a session's agent lives on this host: its init process, pinned by start time
/// ([`reaper::ProcPin`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AgentAddr {
    /// Host pid of the container's init process.
    pub pid: u32,
    /// Its start time (field 22 of `/proc/<pid>/stat`, clock ticks since boot).
    pub start_time: u64,
}

impl AgentAddr {
    fn pin(&self) -> reaper::ProcPin {
        reaper::ProcPin { pid: self.pid, start_time: self.start_time }
    }

    /// The address of the agent of the container whose init has host pid `pid`, now.
    pub(crate) fn of_pid(pid: u32) -> Option<AgentAddr> {
        let pin = reaper::ProcPin::of_pid(pid)?;
        Some(AgentAddr { pid, start_time: pin.start_time })
    }

    /// Whether the process is still the one recorded.
    pub(crate) fn alive(&self) -> bool {
        self.pin().alive()
    }

    /// Whether the agent's socket exists yet (the agent binds it right after starting).
    pub(crate) fn listening(&self) -> bool {
        self.pin().socket_in_root(sandbox_core::agent::AGENT_SOCKET).is_some()
    }

    /// Connects; `None` when the agent cannot be reached (nothing was sent: the caller may
    /// fall back to an exec through the API).
    pub(crate) fn connect(&self) -> Option<tokio::net::UnixStream> {
        let stream = self.pin().connect_in_root(sandbox_core::agent::AGENT_SOCKET)?;
        stream.set_nonblocking(true).ok()?;
        tokio::net::UnixStream::from_std(stream).ok()
    }
}

/// Runs `request` through a connected agent, streaming its output. A sink whose reader went
/// away ([`OutputSink::closed`]) ends the exec at once: dropping the connection kills the
/// command, as a closed pipe would have.
pub(crate) async fn exec(
    mut stream: tokio::net::UnixStream,
    request: &ExecRequest,
    cwd: &str,
    output: &mut dyn OutputSink,
    session: &str,
) -> Result<RunOutcome> {
    let start = Instant::now();
    let bytes = sandbox_core::agent::encode_request(request, cwd);
    let relay = async {
        stream.write_all(&bytes).await.map_err(failed)?;
        answer(&mut stream, request, false, output, session, start).await
    };
    timed(request, start, relay).await
}

/// An interactive exec through a connected agent: the request (version 2), then `io`'s
/// input, forwarded from its blocking channel by a thread to a task that writes it while
/// this future reads the answer, which must start with the agent's hello (an older agent
/// has none: [`sandbox_core::Error::AgentTooOld`]).
pub(crate) async fn exec_interactive(
    stream: tokio::net::UnixStream,
    request: &ExecRequest,
    cwd: &str,
    io: Interactive,
    output: &mut dyn OutputSink,
    session: &str,
) -> Result<RunOutcome> {
    let start = Instant::now();
    let (mut read, mut write) = stream.into_split();
    let bytes = sandbox_core::agent::encode_interactive_request(request, cwd, io.tty);
    write.write_all(&bytes).await.map_err(failed)?;
    // A bounded hand-off: a fast producer (a piped file) waits for the socket instead of
    // queueing all of its input in memory.
    let (frames, mut queued) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let done = Arc::new(AtomicBool::new(false));
    let forwarding = Arc::clone(&done);
    let input = io.input;
    std::thread::spawn(move || {
        sandbox_core::agent::pump_input(&input, &forwarding, |bytes| {
            frames.blocking_send(bytes).is_ok()
        });
    });
    let writer = tokio::spawn(async move {
        while let Some(bytes) = queued.recv().await {
            if write.write_all(&bytes).await.is_err() {
                break;
            }
        }
        // Handed back, not dropped: dropping a write half shuts the socket's sending side,
        // which the agent takes for the caller going away (and kills the command).
        write
    });
    let result =
        timed(request, start, answer(&mut read, request, true, output, session, start)).await;
    done.store(true, Ordering::Relaxed);
    writer.abort();
    // The agent sees the hang-up at once (the aborted writer's half may live on until the
    // runtime polls it) and kills the command if it still runs.
    let _ = rustix::net::shutdown(read.as_ref(), rustix::net::Shutdown::Both);
    result
}

fn failed(e: std::io::Error) -> Error {
    Error::Exec { what: "exec through the session agent".to_owned(), message: e.to_string() }
}

/// `answer` under the request's timeout ([`TIMEOUT_GRACE`] after it): the agent did not end
/// the command in time; dropping the connection does.
async fn timed(
    request: &ExecRequest,
    start: Instant,
    answer: impl std::future::Future<Output = Result<RunOutcome>>,
) -> Result<RunOutcome> {
    match request.timeout {
        None => answer.await,
        Some(timeout) => match tokio::time::timeout(timeout + TIMEOUT_GRACE, answer).await {
            Ok(outcome) => outcome,
            Err(_) => Ok(RunOutcome {
                exit_code: sandbox_core::agent::EXIT_HOST_TIMEOUT,
                duration: start.elapsed(),
                timed_out: true,
                warnings: Vec::new(),
                net_refused: Vec::new(),
            }),
        },
    }
}

/// The tokio side of the protocol loop; what each frame means is decided in
/// [`sandbox_core::agent`] (engine-bwrap has the blocking twin of this loop). With
/// `interactive`, the first frame must be the agent's hello.
async fn answer(
    stream: &mut (impl AsyncRead + Unpin),
    request: &ExecRequest,
    interactive: bool,
    output: &mut dyn OutputSink,
    session: &str,
    start: Instant,
) -> Result<RunOutcome> {
    let hostile = |problem: String| Error::AgentProtocol { id: session.to_owned(), problem };
    let mut payload = Vec::new();
    let mut greeted = !interactive;
    loop {
        let mut head = [0u8; 5];
        match stream.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(failed(std::io::Error::other(format!(
                    "session `{session}` ended during the command"
                ))));
            }
            Err(e) => return Err(failed(e)),
        }
        let (kind, len) = sandbox_core::agent::frame_len(head).map_err(hostile)?;
        payload.resize(len, 0);
        stream.read_exact(&mut payload).await.map_err(failed)?;
        let frame = sandbox_core::agent::decode_frame(kind, &payload).map_err(hostile)?;
        if !greeted {
            sandbox_core::agent::check_hello(&frame, session)?;
            greeted = true;
            continue;
        }
        let Answer::Ended { exit_code, timed_out } =
            sandbox_core::agent::take_frame(frame, request, output).map_err(hostile)?
        else {
            continue;
        };
        return Ok(RunOutcome {
            exit_code,
            duration: start.elapsed(),
            timed_out,
            warnings: Vec::new(),
            net_refused: Vec::new(),
        });
    }
}

/// Waits until the agent of a freshly started container listens (its python starts in tens of
/// milliseconds); `false` after `patience` (the session then works through exec only).
pub(crate) async fn wait_listening(addr: &AgentAddr, patience: Duration) -> bool {
    let deadline = Instant::now() + patience;
    loop {
        if addr.listening() {
            return true;
        }
        if Instant::now() > deadline || !addr.alive() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_start_time_is_readable_and_stable() {
        let me = AgentAddr::of_pid(std::process::id()).expect("own /proc entry");
        assert!(me.alive());
        let recycled = AgentAddr { start_time: me.start_time + 1, ..me };
        assert!(!recycled.alive(), "a different start time is a different process");
        assert!(!me.listening(), "no agent socket in the host's /tmp of this test");
    }
}
