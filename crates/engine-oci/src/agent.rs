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
//! Wire format (one request per connection): the client sends a big-endian `u32` length, a JSON
//! header `{argv, env, cwd, timeout, stdin}` and `stdin` bytes of input; the agent answers with
//! frames `kind: u8, len: u32 BE, payload`: `o`/`e` output, `f` "could not start" (message),
//! `x` exit (`{"code": N, "timed_out": bool}`, last). Closing the connection kills the command's
//! process group, which is how Ctrl-C of the CLI reaches it.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::fs::{FileType, Mode, OFlags};
use sandbox_core::{ExecRequest, OutputSink, RunOutcome, Stream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::{Error, Result};

/// The agent program, run by the image's `python3` as the session's main process.
pub(crate) const AGENT_PY: &str = include_str!("agent.py");
/// The agent's socket, inside the container.
pub(crate) const SOCKET: &str = "tmp/.python-sandbox-agent.sock";

/// Where a session's agent lives on this host: its init process, pinned by start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AgentAddr {
    /// Host pid of the container's init process.
    pub pid: u32,
    /// Its start time (field 22 of `/proc/<pid>/stat`, clock ticks since boot).
    pub start_time: u64,
}

/// Pure: field 22 (`starttime`) of a `/proc/<pid>/stat` line. The command name (field 2) may
/// contain spaces and parentheses, so fields are counted after its last `)`.
pub(crate) fn parse_start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After `)`: field 3 (state) is the first; starttime is field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn proc_dir(pid: u32) -> Option<OwnedFd> {
    rustix::fs::open(
        format!("/proc/{pid}"),
        OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()
}

fn start_time_in(dir: &OwnedFd) -> Option<u64> {
    let fd =
        rustix::fs::openat(dir, "stat", OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let mut buf = vec![0u8; 4096];
    let n = rustix::io::read(&fd, &mut buf).ok()?;
    parse_start_time(&String::from_utf8_lossy(&buf[..n]))
}

impl AgentAddr {
    /// The address of the agent of the container whose init has host pid `pid`, now.
    pub(crate) fn of_pid(pid: u32) -> Option<AgentAddr> {
        let dir = proc_dir(pid)?;
        Some(AgentAddr { pid, start_time: start_time_in(&dir)? })
    }

    /// Whether the process is still the one recorded.
    pub(crate) fn alive(&self) -> bool {
        proc_dir(self.pid).and_then(|d| start_time_in(&d)) == Some(self.start_time)
    }

    /// Whether the agent's socket exists yet (the agent binds it right after starting).
    pub(crate) fn listening(&self) -> bool {
        self.socket().is_some()
    }

    /// The socket, opened without following anything the sandbox controls; `None` when the
    /// process is gone or recycled, or no socket is there.
    fn socket(&self) -> Option<OwnedFd> {
        let dir = proc_dir(self.pid)?;
        if start_time_in(&dir)? != self.start_time {
            return None;
        }
        let root = rustix::fs::openat(
            &dir,
            "root",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let fd = rustix::fs::openat(
            &root,
            SOCKET,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let stat = rustix::fs::fstat(&fd).ok()?;
        (FileType::from_raw_mode(stat.st_mode) == FileType::Socket).then_some(fd)
    }

    /// Connects; `None` when the agent cannot be reached (nothing was sent: the caller may
    /// fall back to an exec through the API).
    pub(crate) fn connect(&self) -> Option<tokio::net::UnixStream> {
        let fd = self.socket()?;
        let path = format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd());
        let stream = std::os::unix::net::UnixStream::connect(path).ok()?;
        drop(fd);
        stream.set_nonblocking(true).ok()?;
        tokio::net::UnixStream::from_std(stream).ok()
    }
}

/// Pure: the request bytes for `request` run in `cwd`.
pub(crate) fn encode_request(request: &ExecRequest, cwd: &str) -> Vec<u8> {
    let header = serde_json::json!({
        "argv": request.argv,
        "env": request.env,
        "cwd": cwd,
        "timeout": request.timeout.map(|t| t.as_secs_f64()),
        "stdin": request.stdin.len(),
    })
    .to_string();
    let mut bytes = Vec::with_capacity(4 + header.len() + request.stdin.len());
    bytes.extend_from_slice(&u32::try_from(header.len()).unwrap_or(u32::MAX).to_be_bytes());
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&request.stdin);
    bytes
}

/// How an exec through the agent ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ended {
    Exited {
        code: i32,
        timed_out: bool,
    },
    /// The command could not be started (the agent's message).
    NotStarted(String),
}

/// Pure: the exit frame's payload; `None` unless it is an object with a `code` a process can
/// exit with (0 to 255: the agent reports a signal death as 128 + N).
pub(crate) fn parse_exit(payload: &[u8]) -> Option<(i32, bool)> {
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    let code = value.get("code")?.as_i64().filter(|c| (0..=255).contains(c))?;
    let code = i32::try_from(code).ok()?;
    Some((code, value.get("timed_out").and_then(serde_json::Value::as_bool).unwrap_or(false)))
}

/// The largest frame the host takes from an agent. The real agent sends at most 64 KiB of
/// output per frame and a few bytes of JSON to end; anything near `u32::MAX` is an attempt
/// to make the host allocate it.
pub(crate) const MAX_FRAME: usize = 1 << 20;

/// How long past a request's own timeout the host waits for the agent to report it: the
/// agent enforces the timeout, but it runs as the sandboxed code and may not be ours.
pub(crate) const TIMEOUT_GRACE: Duration = Duration::from_secs(5);

/// Pure: the kind and payload length of a frame header, refusing a payload over
/// [`MAX_FRAME`].
pub(crate) fn frame_len(head: [u8; 5]) -> std::result::Result<(u8, usize), String> {
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
    match usize::try_from(len) {
        Ok(len) if len <= MAX_FRAME => Ok((head[0], len)),
        _ => Err(format!("a frame of {len} bytes (at most {MAX_FRAME} are accepted)")),
    }
}

/// Runs `request` through a connected agent, streaming its output. A sink whose reader went
/// away ([`OutputSink::closed`]) ends the exec at once: dropping the connection kills the
/// command, as a closed pipe would have.
pub(crate) async fn exec(
    stream: tokio::net::UnixStream,
    request: &ExecRequest,
    cwd: &str,
    output: &mut dyn OutputSink,
    session: &str,
) -> Result<RunOutcome> {
    let start = Instant::now();
    let relay = relay(stream, request, cwd, output, session, start);
    match request.timeout {
        None => relay.await,
        Some(timeout) => match tokio::time::timeout(timeout + TIMEOUT_GRACE, relay).await {
            Ok(outcome) => outcome,
            // The agent did not end the command in time; dropping the connection does.
            Err(_) => Ok(RunOutcome {
                exit_code: 137,
                duration: start.elapsed(),
                timed_out: true,
                warnings: Vec::new(),
            }),
        },
    }
}

async fn relay(
    mut stream: tokio::net::UnixStream,
    request: &ExecRequest,
    cwd: &str,
    output: &mut dyn OutputSink,
    session: &str,
    start: Instant,
) -> Result<RunOutcome> {
    let failed = |message: String| Error::Exec {
        what: "exec through the session agent".to_owned(),
        message,
    };
    let hostile = |problem: String| Error::AgentProtocol { id: session.to_owned(), problem };
    stream.write_all(&encode_request(request, cwd)).await.map_err(|e| failed(e.to_string()))?;
    let mut payload = Vec::new();
    loop {
        let mut head = [0u8; 5];
        match stream.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(failed(format!("session `{session}` ended during the command")));
            }
            Err(e) => return Err(failed(e.to_string())),
        }
        let (kind, len) = frame_len(head).map_err(hostile)?;
        payload.resize(len, 0);
        stream.read_exact(&mut payload).await.map_err(|e| failed(e.to_string()))?;
        let ended = match kind {
            b'o' | b'e' => {
                let which = if kind == b'o' { Stream::Stdout } else { Stream::Stderr };
                output.write(which, &payload);
                if output.closed() {
                    return Ok(RunOutcome {
                        exit_code: sandbox_core::EXIT_CLOSED_PIPE,
                        duration: start.elapsed(),
                        timed_out: false,
                        warnings: Vec::new(),
                    });
                }
                continue;
            }
            b'x' => {
                let (code, timed_out) = parse_exit(&payload).ok_or_else(|| {
                    hostile(format!(
                        "an exit frame `{}`",
                        String::from_utf8_lossy(&payload).chars().take(80).collect::<String>()
                    ))
                })?;
                Ended::Exited { code, timed_out }
            }
            b'f' => Ended::NotStarted(String::from_utf8_lossy(&payload).into_owned()),
            other => return Err(hostile(format!("an unknown frame `{}`", other.escape_ascii()))),
        };
        let duration = start.elapsed();
        let (exit_code, timed_out) = match ended {
            Ended::Exited { code, timed_out } => (code, timed_out),
            Ended::NotStarted(message) => {
                // What a shell says and returns for a command it cannot run.
                let program = request.argv.first().map(String::as_str).unwrap_or_default();
                output.write(Stream::Stderr, format!("{program}: {message}\n").as_bytes());
                (if message.contains("No such file") { 127 } else { 126 }, false)
            }
        };
        return Ok(RunOutcome { exit_code, duration, timed_out, warnings: Vec::new() });
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
    fn start_time_survives_odd_command_names() {
        let line = "4242 (we ird) (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 123 4 18446744073709551615";
        assert_eq!(parse_start_time(line), Some(987_654));
        assert_eq!(parse_start_time("garbage"), None);
        assert_eq!(parse_start_time("1 (x) S 1 2"), None);
    }

    #[test]
    fn our_own_start_time_is_readable_and_stable() {
        let me = AgentAddr::of_pid(std::process::id()).expect("own /proc entry");
        assert!(me.alive());
        let recycled = AgentAddr { start_time: me.start_time + 1, ..me };
        assert!(!recycled.alive(), "a different start time is a different process");
        assert!(!me.listening(), "no agent socket in the host's /tmp of this test");
    }

    #[test]
    fn request_is_length_prefixed_json_then_stdin() {
        let request = ExecRequest {
            argv: vec!["echo".to_owned(), "hi".to_owned()],
            env: vec![("A".to_owned(), "1".to_owned())],
            stdin: b"input".to_vec(),
            timeout: Some(Duration::from_millis(1500)),
            ..Default::default()
        };
        let bytes = encode_request(&request, "/ws");
        let len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        let header: serde_json::Value = serde_json::from_slice(&bytes[4..4 + len]).expect("json");
        assert_eq!(header["argv"], serde_json::json!(["echo", "hi"]));
        assert_eq!(header["env"], serde_json::json!([["A", "1"]]));
        assert_eq!(header["cwd"], "/ws");
        assert_eq!(header["timeout"], 1.5);
        assert_eq!(header["stdin"], 5);
        assert_eq!(&bytes[4 + len..], b"input");
    }

    #[test]
    fn frame_lengths_are_capped() {
        assert_eq!(frame_len([b'o', 0, 0, 0, 5]), Ok((b'o', 5)));
        assert_eq!(frame_len([b'o', 0, 0x10, 0, 0]), Ok((b'o', MAX_FRAME)));
        assert!(frame_len([b'o', 0, 0x10, 0, 1]).is_err());
        let giant = frame_len([b'o', 0xff, 0xff, 0xff, 0xff]).expect_err("4 GiB");
        assert!(giant.contains("4294967295 bytes"), "{giant}");
    }

    #[test]
    fn exit_frames() {
        assert_eq!(parse_exit(br#"{"code": 3, "timed_out": false}"#), Some((3, false)));
        assert_eq!(parse_exit(br#"{"code": 137, "timed_out": true}"#), Some((137, true)));
        assert_eq!(parse_exit(br#"{"code": 255}"#), Some((255, false)));
        assert_eq!(parse_exit(b"{}"), None);
        for bogus in [
            r#"{"code": -1}"#,
            r#"{"code": 256}"#,
            r#"{"code": 4294967296}"#,
            r#"{"code": "0"}"#,
            "[]",
        ] {
            assert_eq!(parse_exit(bogus.as_bytes()), None, "{bogus}");
        }
        assert_eq!(parse_exit(b"nope"), None);
    }
}
