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
//!
//! **Version 2, interactive execs** ([`crate::InteractiveExec`], `session exec -i`/`-t`): the
//! header has `"v": 2`, the command under `cmd` (not `argv`), `"stdin": 0` and `tty`
//! (`{rows, cols}` or null). The agent's first frame is `v` (`{"v": 2}`); then the host sends
//! frames of the same shape while the command runs: `i` stdin bytes (at most
//! [`MAX_INPUT_CHUNK`] each), `c` end of input (the agent closes the command's stdin; on a
//! pty it types the end-of-file character), `w` a window size (rows, cols: two `u16` BE).
//! With a tty the command is a session leader with the pty as controlling terminal and its
//! output comes back as `o` frames. A version-1 agent (a session started before the upgrade)
//! finds no `argv`, starts nothing and answers `f`: no hello first is how the host tells,
//! and refuses with [`crate::Error::AgentTooOld`] instead of running the command without
//! its input or hanging. Version-1 requests are unchanged, so old sessions keep serving them.
//!
//! **Environment.** By default a command's environment is the agent's own (the container's,
//! which the OCI engines and bwrap build from the contract, `crate::run_env`) with the
//! request's `env` on top. Started with [`EXACT_ENV_ARG`] after the TTL, it is exactly the
//! request's `env`: a pod's container environment is not the host's to vouch for (the kubelet
//! adds `KUBERNETES_*` and the pod's name as `HOSTNAME`), so the k8s engine sends the whole
//! environment with every request. A start flag, not a header field: the pod and its agent
//! are made together, so no agent that ignores it can be behind a pod that asks for it, and
//! nothing needs negotiating.

use std::time::Duration;

use crate::{ExecRequest, Input, OutputSink, Stream, TtySize};

/// The agent program, run by the sandbox's `python3` as the session's main process, with the
/// idle TTL in seconds as its one argument.
pub const AGENT_PY: &str = include_str!("agent.py");

/// The agent's optional second argument (after the TTL): a command's environment is exactly
/// its request's `env`, nothing of the agent's own (see the module docs).
pub const EXACT_ENV_ARG: &str = "exact-env";

/// Pure: the agent's argument (after the TTL and [`EXACT_ENV_ARG`]) that makes it serve the
/// same protocol on `127.0.0.1:port` too, loopback of the sandbox's own network namespace
/// (see the module docs of `agent.py`).
pub fn tcp_arg(port: u16) -> String {
    format!("tcp={port}")
}

/// The prologue that takes the seccomp wall in-process (`wall.py`), for a program run where no
/// engine applies the wall from outside (a pod: its seccomp profile is the node's). See
/// [`walled`] and [`wall_arg`].
pub const WALL_PY: &str = include_str!("wall.py");

/// Pure: `program` behind [`WALL_PY`]: run as `python3 -I -c <this> <wall_arg()> ARGS...`, it
/// takes the wall before its first line, or exits 125 without running it.
pub fn walled(program: &str) -> String {
    format!("{WALL_PY}\n{program}")
}

/// Pure: the wall ([`crate::WALL`]) compiled for every architecture the wall supports, as
/// [`WALL_PY`] reads it (`x86_64=HEX;aarch64=HEX`): where a pod lands (and so its node's
/// architecture) is not known when its spec is written.
pub fn wall_arg() -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for (name, arch) in
        [("x86_64", crate::seccomp::Arch::X86_64), ("aarch64", crate::seccomp::Arch::Aarch64)]
    {
        if !out.is_empty() {
            out.push(';');
        }
        out.push_str(name);
        out.push('=');
        for byte in crate::seccomp::bpf(arch) {
            let _ = write!(out, "{byte:02x}");
        }
    }
    out
}

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

/// The protocol version of interactive requests (see the module docs).
pub const PROTOCOL_INTERACTIVE: u64 = 2;

/// The largest stdin frame the host sends (the agent refuses frames over [`MAX_FRAME`]).
pub const MAX_INPUT_CHUNK: usize = 64 << 10;

/// Pure: the request bytes of an interactive exec of `request` in `cwd` (version 2), with
/// `request.stdin` as its first input frames.
pub fn encode_interactive_request(
    request: &ExecRequest,
    cwd: &str,
    tty: Option<TtySize>,
) -> Vec<u8> {
    let header = serde_json::json!({
        "v": PROTOCOL_INTERACTIVE,
        "cmd": request.argv,
        "env": request.env,
        "cwd": cwd,
        "timeout": request.timeout.map(|t| t.as_secs_f64()),
        "stdin": 0,
        "tty": tty.map(|size| serde_json::json!({"rows": size.rows, "cols": size.cols})),
    })
    .to_string();
    let mut bytes = Vec::with_capacity(4 + header.len() + request.stdin.len());
    bytes.extend_from_slice(&u32::try_from(header.len()).unwrap_or(u32::MAX).to_be_bytes());
    bytes.extend_from_slice(header.as_bytes());
    if !request.stdin.is_empty() {
        bytes.extend(encode_input(&Input::Stdin(request.stdin.clone())));
    }
    bytes
}

fn push_frame(bytes: &mut Vec<u8>, kind: u8, payload: &[u8]) {
    bytes.push(kind);
    bytes.extend_from_slice(&u32::try_from(payload.len()).unwrap_or(u32::MAX).to_be_bytes());
    bytes.extend_from_slice(payload);
}

/// Pure: the frames the host sends for one input event (stdin split into frames of at most
/// [`MAX_INPUT_CHUNK`]; empty stdin is no frame, an empty `i` would mean nothing).
pub fn encode_input(input: &Input) -> Vec<u8> {
    let mut bytes = Vec::new();
    match input {
        Input::Stdin(data) => {
            bytes.reserve(data.len() + data.len() / MAX_INPUT_CHUNK * 5 + 5);
            for chunk in data.chunks(MAX_INPUT_CHUNK) {
                push_frame(&mut bytes, b'i', chunk);
            }
        }
        Input::Eof => push_frame(&mut bytes, b'c', b""),
        Input::Resize(size) => {
            let mut payload = [0u8; 4];
            payload[..2].copy_from_slice(&size.rows.to_be_bytes());
            payload[2..].copy_from_slice(&size.cols.to_be_bytes());
            push_frame(&mut bytes, b'w', &payload);
        }
    }
    bytes
}

/// The caller's input events as frames, handed to `send` (false: the connection is gone)
/// until the end of input, or until `done` (the exec ended; checked every 50 ms). A channel
/// whose senders are gone is the end of input. The engines run this on a thread of their
/// own: it waits on the channel, the one blocking thing here, and does no IO itself.
pub fn pump_input(
    input: &std::sync::mpsc::Receiver<Input>,
    done: &std::sync::atomic::AtomicBool,
    mut send: impl FnMut(Vec<u8>) -> bool,
) {
    use std::sync::mpsc::RecvTimeoutError;
    loop {
        let event = match input.recv_timeout(Duration::from_millis(50)) {
            Ok(event) => event,
            Err(RecvTimeoutError::Timeout) if done.load(std::sync::atomic::Ordering::Relaxed) => {
                return;
            }
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => Input::Eof,
        };
        let last = event == Input::Eof;
        if !send(encode_input(&event)) || last {
            return;
        }
    }
}

/// Pure: what one input frame (as [`encode_input`] makes them) means; the agent's reading in
/// Python, for tests and fake agents.
pub fn decode_input(kind: u8, payload: &[u8]) -> Result<Input, String> {
    match (kind, payload) {
        (b'i', data) if data.len() <= MAX_INPUT_CHUNK => Ok(Input::Stdin(data.to_vec())),
        (b'i', data) => Err(format!("a stdin frame of {} bytes", data.len())),
        (b'c', []) => Ok(Input::Eof),
        (b'w', [r0, r1, c0, c1]) => Ok(Input::Resize(TtySize {
            rows: u16::from_be_bytes([*r0, *r1]),
            cols: u16::from_be_bytes([*c0, *c1]),
        })),
        (b'c' | b'w', payload) => {
            Err(format!("a `{}` frame of {} bytes", char::from(kind), payload.len()))
        }
        (other, _) => Err(format!("an unknown input frame `{}`", other.escape_ascii())),
    }
}

/// Pure: whether the first frame of an answer to an interactive request is the agent's hello.
/// Anything else comes from an agent that predates the protocol (it started nothing) or does
/// not speak it: the exec is refused, never run without its input.
pub fn check_hello(frame: &Frame<'_>, session: &str) -> Result<(), crate::Error> {
    match frame {
        Frame::Hello { version } if *version >= PROTOCOL_INTERACTIVE => Ok(()),
        _ => Err(crate::Error::AgentTooOld { id: session.to_owned() }),
    }
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
    /// The first frame of an answer to an interactive request: the agent's protocol version.
    Hello {
        /// At least [`PROTOCOL_INTERACTIVE`] from an agent that speaks it.
        version: u64,
    },
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
        b'v' => serde_json::from_slice::<serde_json::Value>(payload)
            .ok()
            .and_then(|value| value.get("v")?.as_u64())
            .map(|version| Frame::Hello { version })
            .ok_or_else(|| {
                format!(
                    "a hello frame `{}`",
                    String::from_utf8_lossy(payload).chars().take(80).collect::<String>()
                )
            }),
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

/// Where an exec stands after one frame of its answer ([`take_frame`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// More frames follow.
    More,
    /// The exec is over with this exit code (and whether the agent killed it at its timeout).
    Ended {
        /// The exit code to report.
        exit_code: i32,
        /// Whether the agent killed the command at the request's timeout.
        timed_out: bool,
    },
}

/// What one frame after the hello (if any) means for the exec, for every engine's relay:
/// output goes to `output` (a reader that went away ends the exec with
/// [`crate::EXIT_CLOSED_PIPE`]), a command that could not start says so on stderr as a shell
/// would, and a second hello is hostile (`Err`, the problem).
pub fn take_frame(
    frame: Frame<'_>,
    request: &ExecRequest,
    output: &mut dyn OutputSink,
) -> Result<Answer, String> {
    match frame {
        Frame::Output(which, chunk) => {
            output.write(which, chunk);
            if output.closed() {
                return Ok(Answer::Ended { exit_code: crate::EXIT_CLOSED_PIPE, timed_out: false });
            }
            Ok(Answer::More)
        }
        Frame::Exited { code, timed_out } => Ok(Answer::Ended { exit_code: code, timed_out }),
        Frame::NotStarted(message) => {
            let (line, code) = not_started(request, &message);
            output.write(Stream::Stderr, line.as_bytes());
            Ok(Answer::Ended { exit_code: code, timed_out: false })
        }
        Frame::Hello { .. } => Err("an unexpected hello frame".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use proptest::strategy::Strategy as _;

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

    /// Splits the host's input bytes back into frames, as the agent reads them.
    fn decode_all(mut bytes: &[u8]) -> Vec<Input> {
        let mut inputs = Vec::new();
        while !bytes.is_empty() {
            let head: [u8; 5] = bytes[..5].try_into().expect("a whole frame head");
            let (kind, len) = frame_len(head).expect("frame length");
            inputs.push(decode_input(kind, &bytes[5..5 + len]).expect("input frame"));
            bytes = &bytes[5 + len..];
        }
        inputs
    }

    #[test]
    fn interactive_requests_are_version_2_with_the_command_where_old_agents_do_not_look() {
        let request = ExecRequest {
            stdin: b"first".to_vec(),
            timeout: Some(Duration::from_secs(2)),
            ..ExecRequest::new(&["cat"])
        };
        let tty = TtySize { rows: 40, cols: 132 };
        let bytes = encode_interactive_request(&request, "/ws", Some(tty));
        let len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        let header: serde_json::Value = serde_json::from_slice(&bytes[4..4 + len]).expect("json");
        assert_eq!(header["v"], 2);
        assert_eq!(header["cmd"], serde_json::json!(["cat"]));
        // A version-1 agent runs `req["argv"]`: without it, it starts nothing and says so.
        assert!(header.get("argv").is_none(), "{header}");
        assert_eq!(header["stdin"], 0);
        assert_eq!(header["tty"], serde_json::json!({"rows": 40, "cols": 132}));
        assert_eq!(header["timeout"], 2.0);
        assert_eq!(decode_all(&bytes[4 + len..]), vec![Input::Stdin(b"first".to_vec())]);
        let plain = encode_interactive_request(&ExecRequest::new(&["cat"]), "/ws", None);
        let header: serde_json::Value = serde_json::from_slice(&plain[4..]).expect("json");
        assert_eq!(header["tty"], serde_json::Value::Null);
        // Non-interactive requests stay version 1, which every agent serves.
        let old = encode_request(&request, "/ws");
        assert!(!String::from_utf8_lossy(&old).contains(r#""v""#));
    }

    #[test]
    fn input_frames_are_bounded_and_exact() {
        let big = vec![7u8; 3 * MAX_INPUT_CHUNK + 1];
        let bytes = encode_input(&Input::Stdin(big.clone()));
        let decoded = decode_all(&bytes);
        assert_eq!(decoded.len(), 4);
        let joined: Vec<u8> = decoded
            .into_iter()
            .flat_map(|i| match i {
                Input::Stdin(b) => b,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(joined, big);
        assert!(encode_input(&Input::Stdin(Vec::new())).is_empty());
        assert_eq!(encode_input(&Input::Eof), b"c\0\0\0\0");
        let resize = encode_input(&Input::Resize(TtySize { rows: 0x0102, cols: 0xfffe }));
        assert_eq!(resize, b"w\0\0\0\x04\x01\x02\xff\xfe");
        // What no host sends: refused, not guessed at.
        let over = vec![0u8; MAX_INPUT_CHUNK + 1];
        assert_eq!(
            decode_input(b'i', &over),
            Err(format!("a stdin frame of {} bytes", over.len()))
        );
        assert_eq!(decode_input(b'c', b"x"), Err("a `c` frame of 1 bytes".to_owned()));
        assert_eq!(decode_input(b'w', b"\0\0\0"), Err("a `w` frame of 3 bytes".to_owned()));
        assert_eq!(decode_input(b'w', b"\0\0\0\0\0"), Err("a `w` frame of 5 bytes".to_owned()));
        assert_eq!(decode_input(b'o', b""), Err("an unknown input frame `o`".to_owned()));
        // The agent's own bound on a frame from the host is the host's bound on one from it.
        assert!(AGENT_PY.contains("INPUT_LIMIT = 1 << 20"));
        assert_eq!(MAX_FRAME, 1 << 20);
    }

    #[test]
    fn interactive_answers_start_with_a_hello_or_are_refused() {
        assert_eq!(decode_frame(b'v', br#"{"v": 2}"#), Ok(Frame::Hello { version: 2 }));
        for bogus in [&b""[..], b"[]", br#"{"v": -1}"#, br#"{"v": "2"}"#, b"\xff"] {
            assert!(decode_frame(b'v', bogus).is_err(), "{bogus:?}");
        }
        assert_eq!(check_hello(&Frame::Hello { version: 2 }, "s1"), Ok(()));
        assert_eq!(check_hello(&Frame::Hello { version: 3 }, "s1"), Ok(()));
        let too_old = crate::Error::AgentTooOld { id: "s1".to_owned() };
        // What a version-1 agent answers a version-2 request: no hello, a start failure.
        assert_eq!(
            check_hello(&Frame::NotStarted("'argv'".to_owned()), "s1"),
            Err(too_old.clone())
        );
        assert_eq!(check_hello(&Frame::Hello { version: 1 }, "s1"), Err(too_old.clone()));
        assert_eq!(check_hello(&Frame::Output(Stream::Stdout, b"x"), "s1"), Err(too_old.clone()));
        insta::assert_snapshot!(too_old.to_string(), @r"
        the agent of session `s1` predates interactive execs (`session exec -i`/`-t`)
        hint: the session was started by an older python-sandbox; stop it with `python-sandbox session stop s1` and start a new one
        ");
    }

    proptest::proptest! {
        #[test]
        fn input_round_trips(
            events in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::collection::vec(proptest::num::u8::ANY, 0..200_000)
                        .prop_map(Input::Stdin),
                    proptest::strategy::Just(Input::Eof),
                    (proptest::num::u16::ANY, proptest::num::u16::ANY)
                        .prop_map(|(rows, cols)| Input::Resize(TtySize { rows, cols })),
                ],
                0..6,
            ),
        ) {
            let bytes: Vec<u8> = events.iter().flat_map(encode_input).collect();
            // Stdin may come back split, never merged with its neighbours or altered.
            let mut expected = Vec::new();
            for event in &events {
                match event {
                    Input::Stdin(data) => expected.extend(
                        data.chunks(MAX_INPUT_CHUNK).map(|c| Input::Stdin(c.to_vec()))),
                    other => expected.push(other.clone()),
                }
            }
            proptest::prop_assert_eq!(decode_all(&bytes), expected);
        }

        #[test]
        fn hostile_frame_heads_never_ask_for_more_than_the_cap(head: [u8; 5], payload in
            proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            if let Ok((kind, len)) = frame_len(head) {
                proptest::prop_assert!(len <= MAX_FRAME);
                let _ = decode_frame(kind, &payload);
                let _ = decode_input(kind, &payload);
            }
        }
    }

    #[test]
    fn the_agent_is_the_watchdog_and_binds_the_socket() {
        // The engines reach the socket at this path below the sandbox's root.
        assert!(AGENT_PY.contains(&format!("SOCK = \"/{AGENT_SOCKET}\"")));
        assert!(AGENT_PY.contains("TTL = max(1, int(sys.argv[1]))"));
        assert!(AGENT_PY.contains(&format!("sys.argv[2:3] == [\"{EXACT_ENV_ARG}\"]")));
        assert!(AGENT_PY.contains("a.startswith(\"tcp=\")") && tcp_arg(7).starts_with("tcp="));
    }

    /// The real agent (started with `args` after the TTL and `OWN=agent` in its own
    /// environment) runs `env` with `A=1` asked: what the command saw, sorted.
    fn agent_command_env(args: &[&str]) -> Option<Vec<String>> {
        use std::io::{Read as _, Write as _};
        let python = std::path::Path::new("/usr/bin/python3.11");
        if !python.exists() {
            println!("SKIPPED: no /usr/bin/python3.11 to run the agent");
            return None;
        }
        let dir = std::env::temp_dir().join(format!(
            "psbx-agent-env-{}-{}",
            std::process::id(),
            args.len()
        ));
        std::fs::create_dir_all(&dir).expect("dir");
        let sock = dir.join("agent.sock");
        let d = dir.display();
        let source = AGENT_PY
            .replace(&format!("\"/{AGENT_SOCKET}\""), &format!("\"{d}/agent.sock\""))
            .replace("\"/tmp/.active\"", &format!("\"{d}/active\""))
            .replace("\"/tmp/.last-activity\"", &format!("\"{d}/last\""));
        let mut child = std::process::Command::new(python)
            .args(["-I", "-c", &source, "60"])
            .args(args)
            .env("OWN", "agent")
            .spawn()
            .expect("agent");
        // The socket's file exists from `bind`, before the agent listens: retry refusals.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut conn = std::os::unix::net::UnixStream::connect(&sock);
        while conn.is_err() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            conn = std::os::unix::net::UnixStream::connect(&sock);
        }
        let request = ExecRequest {
            argv: vec!["/usr/bin/env".to_owned()],
            env: vec![("A".to_owned(), "1".to_owned())],
            ..ExecRequest::default()
        };
        let mut out = Vec::new();
        let connected = conn.and_then(|mut conn| {
            conn.write_all(&encode_request(&request, "/"))?;
            conn.read_to_end(&mut out)
        });
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&dir);
        connected.expect("the agent answers");
        let mut stdout = Vec::new();
        let mut rest = out.as_slice();
        while rest.len() >= 5 {
            let (kind, len) = frame_len(rest[..5].try_into().expect("5 bytes")).expect("a frame");
            if kind == b'o' {
                stdout.extend_from_slice(&rest[5..5 + len]);
            }
            rest = &rest[5 + len..];
        }
        let mut lines: Vec<String> =
            String::from_utf8_lossy(&stdout).lines().map(str::to_owned).collect();
        lines.sort();
        Some(lines)
    }

    #[test]
    fn with_the_exact_env_flag_a_command_sees_only_its_requests_env() {
        let Some(exact) = agent_command_env(&[EXACT_ENV_ARG]) else { return };
        assert_eq!(exact, ["A=1"]);
        // Without it (docker, podman, bwrap sessions), the container's environment under it.
        let Some(inherited) = agent_command_env(&[]) else { return };
        assert!(inherited.contains(&"OWN=agent".to_owned()), "{inherited:?}");
        assert!(inherited.contains(&"A=1".to_owned()), "{inherited:?}");
    }
}
