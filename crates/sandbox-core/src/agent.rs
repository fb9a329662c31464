//! The session agent's protocol, pure: the agent program (`agent.py`, the main process of every
//! warm session, on every engine), the request encoding, and the checks that treat every
//! answer as untrusted input (frame sizes, exit codes, frame kinds). The engines own the small
//! IO loop around it (engine-oci on tokio, engine-bwrap on blocking std sockets); every
//! decision about what an answer means lives here, so no engine can drift.
//!
//! Wire format (one request per connection): the client sends a big-endian `u32` length, a JSON
//! header `{argv, env, cwd, timeout, stdin}` and `stdin` bytes of input; the agent answers with
//! frames `kind: u8, len: u32 BE, payload`: `o`/`e` output, `f` "could not start" (message),
//! `x` exit (`{"code": N, "timed_out": bool}`, last). Closing the connection kills the command's
//! process group, which is how Ctrl-C of the CLI reaches it.

use std::time::Duration;

use crate::{ExecRequest, Stream};

/// The agent program, run by the sandbox's `python3` as the session's main process, with the
/// idle TTL in seconds as its one argument.
pub const AGENT_PY: &str = include_str!("agent.py");

/// The agent's socket, relative to the sandbox's root (it lives in the sandbox's own `/tmp`).
pub const AGENT_SOCKET: &str = "tmp/.python-sandbox-agent.sock";

/// The largest frame the host takes from an agent. The real agent sends at most 64 KiB of
/// output per frame and a few bytes of JSON to end; anything near `u32::MAX` is an attempt
/// to make the host allocate it.
pub const MAX_FRAME: usize = 1 << 20;

/// How long past a request's own timeout the host waits for the agent to report it: the
/// agent enforces the timeout, but it runs as the sandboxed code and may not be ours.
pub const TIMEOUT_GRACE: Duration = Duration::from_secs(5);

/// The exit code the host reports for a command whose agent did not end it in time.
pub const EXIT_HOST_TIMEOUT: i32 = 137;

/// Pure: the request bytes for `request` run in `cwd`.
pub fn encode_request(request: &ExecRequest, cwd: &str) -> Vec<u8> {
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

/// Pure: the kind and payload length of a frame header, refusing a payload over
/// [`MAX_FRAME`] (the message is the protocol problem, for an error naming the session).
pub fn frame_len(head: [u8; 5]) -> Result<(u8, usize), String> {
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
    match usize::try_from(len) {
        Ok(len) if len <= MAX_FRAME => Ok((head[0], len)),
        _ => Err(format!("a frame of {len} bytes (at most {MAX_FRAME} are accepted)")),
    }
}

/// Pure: the exit frame's payload; `None` unless it is an object with a `code` a process can
/// exit with (0 to 255: the agent reports a signal death as 128 + N).
pub fn parse_exit(payload: &[u8]) -> Option<(i32, bool)> {
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    let code = value.get("code")?.as_i64().filter(|c| (0..=255).contains(c))?;
    let code = i32::try_from(code).ok()?;
    Some((code, value.get("timed_out").and_then(serde_json::Value::as_bool).unwrap_or(false)))
}

/// One frame of an agent's answer, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    /// Output of the command.
    Output(Stream, &'a [u8]),
    /// The command ended (the last frame).
    Exited {
        /// Its exit code, 0 to 255.
        code: i32,
        /// The agent killed it at the request's timeout.
        timed_out: bool,
    },
    /// The command could not be started; the agent's message.
    NotStarted(String),
}

/// Pure: what a frame of `kind` carrying `payload` (at most [`MAX_FRAME`], see [`frame_len`])
/// means; `Err` is the protocol problem (an exit code no process has, an unknown kind).
pub fn decode_frame(kind: u8, payload: &[u8]) -> Result<Frame<'_>, String> {
    match kind {
        b'o' => Ok(Frame::Output(Stream::Stdout, payload)),
        b'e' => Ok(Frame::Output(Stream::Stderr, payload)),
        b'x' => {
            let (code, timed_out) = parse_exit(payload).ok_or_else(|| {
                format!(
                    "an exit frame `{}`",
                    String::from_utf8_lossy(payload).chars().take(80).collect::<String>()
                )
            })?;
            Ok(Frame::Exited { code, timed_out })
        }
        b'f' => Ok(Frame::NotStarted(String::from_utf8_lossy(payload).into_owned())),
        other => Err(format!("an unknown frame `{}`", other.escape_ascii())),
    }
}

/// Pure: what a shell says and returns for a command it cannot run: the stderr line and the
/// exit code (127 for a missing program, 126 otherwise).
pub fn not_started(request: &ExecRequest, message: &str) -> (String, i32) {
    let program = request.argv.first().map(String::as_str).unwrap_or_default();
    let code = if message.contains("No such file") { 127 } else { 126 };
    (format!("{program}: {message}\n"), code)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn frames_decode_or_name_the_problem() {
        assert_eq!(decode_frame(b'o', b"hi"), Ok(Frame::Output(Stream::Stdout, b"hi")));
        assert_eq!(decode_frame(b'e', b""), Ok(Frame::Output(Stream::Stderr, b"")));
        assert_eq!(
            decode_frame(b'x', br#"{"code": 0}"#),
            Ok(Frame::Exited { code: 0, timed_out: false })
        );
        assert_eq!(decode_frame(b'f', b"boom"), Ok(Frame::NotStarted("boom".to_owned())));
        assert_eq!(
            decode_frame(b'x', br#"{"code": 999}"#),
            Err("an exit frame `{\"code\": 999}`".to_owned())
        );
        assert_eq!(decode_frame(0x07, b""), Err("an unknown frame `\\x07`".to_owned()));
        let request = ExecRequest::new(&["nope"]);
        assert_eq!(
            not_started(&request, "[Errno 2] No such file or directory"),
            ("nope: [Errno 2] No such file or directory\n".to_owned(), 127)
        );
        assert_eq!(not_started(&request, "Permission denied").1, 126);
    }

    #[test]
    fn the_agent_is_the_watchdog_and_binds_the_socket() {
        // The engines reach the socket at this path below the sandbox's root.
        assert!(AGENT_PY.contains(&format!("SOCK = \"/{AGENT_SOCKET}\"")));
        assert!(AGENT_PY.contains("TTL = max(1, int(sys.argv[1]))"));
    }
}
