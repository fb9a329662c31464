//! The relay between one exec and the pod's agent, pure: the tiny program an exec runs
//! (`python3 -c RELAY SOCKET`: it connects to the agent's unix socket in the pod and copies its
//! stdin to the socket and the socket to its stdout, nothing else), and the reassembly of the
//! agent's frames from the exec's stdout, which arrives in WebSocket messages of any size.
//!
//! The relay's own problems go to its stderr (the agent's frames never do) and its exit code:
//! [`EXIT_NO_AGENT`] when the socket does not answer. The end of its stdin (the exec's
//! WebSocket closed) shuts the socket, which the agent takes for the caller going away: it
//! kills the command's whole session.

use sandbox_core::agent::{Frame, decode_frame, frame_len};

/// The relay (see the module docs). Written for python 3.6 and up, stdlib only; both copy
/// directions run at once so neither side's buffers can fill while the other waits.
///
/// The relay is started by the container runtime, not by the agent, so it is outside the
/// wall the agent took (`sandbox_core::agent::walled`); it makes itself non-dumpable first, so
/// the pod's commands (same uid, under the wall) cannot write its memory through
/// `/proc/PID/mem` and run code outside the wall. If it cannot, it exits [`EXIT_NOT_SEALED`]
/// before connecting.
pub const RELAY: &str = r#"import ctypes, os, socket, sys, threading
prctl = ctypes.CDLL(None, use_errno=True).prctl
prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
if prctl(4, 0, 0, 0, 0) != 0:
    sys.stderr.write("python-sandbox relay: cannot make itself non-dumpable: %s\n" % os.strerror(ctypes.get_errno()))
    sys.stderr.flush()
    os._exit(126)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
except OSError as e:
    sys.stderr.write("python-sandbox relay: cannot reach the agent at %s: %s\n" % (sys.argv[1], e))
    sys.stderr.flush()
    os._exit(125)
def up():
    try:
        while True:
            b = os.read(0, 65536)
            if not b:
                break
            s.sendall(b)
    except OSError:
        pass
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
threading.Thread(target=up, daemon=True).start()
try:
    while True:
        b = s.recv(65536)
        if not b:
            break
        while b:
            b = b[os.write(1, b):]
except OSError:
    pass
os._exit(0)
"#;

/// The relay's exit code when nothing listens on the agent's socket.
pub const EXIT_NO_AGENT: i32 = 125;

/// The relay's exit code when it cannot make itself non-dumpable (it then never connects).
pub const EXIT_NOT_SEALED: i32 = 126;

/// The agent's frames reassembled from stdout chunks.
#[derive(Debug, Default)]
pub struct FrameBuffer {
    buf: Vec<u8>,
    start: usize,
}

impl FrameBuffer {
    /// Takes one chunk of the relay's stdout.
    pub fn push(&mut self, chunk: &[u8]) {
        // What was taken goes first: what stays is at most one unfinished frame.
        self.buf.drain(..self.start);
        self.start = 0;
        self.buf.extend_from_slice(chunk);
    }

    /// The next complete frame, `Ok(None)` until one is complete; `Err` is the protocol problem
    /// (a frame over the agent's cap, an unknown kind). Frames are consumed as they are taken,
    /// so a long stream of output never accumulates here.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, String> {
        let rest = &self.buf[self.start..];
        let Some(head) = rest.first_chunk::<5>() else { return Ok(None) };
        let (kind, len) = frame_len(*head)?;
        if rest.len() < 5 + len {
            return Ok(None);
        }
        let at = self.start + 5;
        self.start = at + len;
        decode_frame(kind, &self.buf[at..at + len]).map(Some)
    }

    /// Whether bytes of an unfinished frame are waiting.
    pub fn partial(&self) -> bool {
        self.start < self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use sandbox_core::Stream;

    use super::*;

    fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut bytes = vec![kind];
        bytes.extend_from_slice(&u32::try_from(payload.len()).unwrap_or(0).to_be_bytes());
        bytes.extend_from_slice(payload);
        bytes
    }

    #[test]
    fn frames_split_anywhere_come_out_whole() {
        let mut wire = frame(b'v', br#"{"v": 2}"#);
        wire.extend(frame(b'o', b"hello"));
        wire.extend(frame(b'e', b""));
        wire.extend(frame(b'x', br#"{"code": 7, "timed_out": false}"#));
        for split in 0..wire.len() {
            let mut buffer = FrameBuffer::default();
            let mut seen = Vec::new();
            for part in [&wire[..split], &wire[split..]] {
                buffer.push(part);
                while let Some(frame) = buffer.next_frame().expect("valid") {
                    seen.push(format!("{frame:?}"));
                }
            }
            assert_eq!(
                seen,
                [
                    "Hello { version: 2 }",
                    "Output(Stdout, [104, 101, 108, 108, 111])",
                    "Output(Stderr, [])",
                    "Exited { code: 7, timed_out: false }"
                ],
                "split at {split}"
            );
            assert!(!buffer.partial());
        }
    }

    #[test]
    fn hostile_frames_are_refused() {
        let mut buffer = FrameBuffer::default();
        buffer.push(&[b'o', 0xff, 0xff, 0xff, 0xff]);
        assert!(buffer.next_frame().is_err(), "a 4 GiB frame");
        let mut buffer = FrameBuffer::default();
        buffer.push(&frame(b'z', b""));
        assert!(buffer.next_frame().is_err(), "an unknown kind");
        let mut buffer = FrameBuffer::default();
        buffer.push(b"\x6f\x00");
        assert_eq!(buffer.next_frame(), Ok(None));
        assert!(buffer.partial());
    }

    /// Runs the relay's prologue (everything before it connects) with this host's Python: it
    /// leaves the process non-dumpable, and a relay with no agent still ends with its own code.
    #[test]
    fn the_relay_seals_itself_before_connecting() {
        let python = "/usr/bin/python3.11";
        if !std::path::Path::new(python).exists() {
            #[allow(clippy::print_stdout)]
            {
                println!("SKIPPED: no {python} to run the relay");
            }
            return;
        }
        let (prologue, _) = RELAY.split_once("s = socket.socket(").expect("the relay connects");
        let probe = format!("{prologue}print(prctl(3, 0, 0, 0, 0))");
        let out = std::process::Command::new(python).args(["-c", &probe]).output().expect("python");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0", "PR_GET_DUMPABLE");
        assert!(RELAY.contains(&format!("os._exit({EXIT_NOT_SEALED})")));
        let gone = std::env::temp_dir().join(format!("psbx-no-agent-{}.sock", std::process::id()));
        let out = std::process::Command::new(python)
            .args(["-c", RELAY, &gone.display().to_string()])
            .output()
            .expect("python");
        assert_eq!(
            out.status.code(),
            Some(EXIT_NO_AGENT),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    proptest! {
        #[test]
        fn long_output_never_accumulates(chunks in proptest::collection::vec(1usize..70_000, 1..60)) {
            let mut buffer = FrameBuffer::default();
            let mut total = 0;
            let mut expected = 0;
            for size in chunks {
                expected += size;
                buffer.push(&frame(b'o', &vec![7u8; size]));
                while let Some(frame) = buffer.next_frame().expect("valid") {
                    let Frame::Output(Stream::Stdout, data) = frame else { panic!("{frame:?}") };
                    total += data.len();
                }
                prop_assert!(buffer.buf.len() <= 70_005);
            }
            prop_assert_eq!(total, expected);
        }
    }
}
