//! A session whose agent was replaced by the session's own code: a fake agent on a real unix
//! socket that speaks the protocol badly (endless output, a giant length prefix, exit codes no
//! process has, names that climb out of a listing, silence past the timeout). The host must
//! stay bounded in memory and time, never panic, and say what happened.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sandbox_core::{Captured, EXIT_CLOSED_PIPE, ExecRequest, OutputSink, Sandbox, Stream};

use crate::error::Error;
use crate::session::Session;

/// One request as the fake agent read it: its stdin bytes (the JSON header says how many).
struct Request {
    stdin: Vec<u8>,
}

/// What the fake agent does with request number `n` (from 0) on its connection.
type Behaviour = dyn Fn(usize, &Request, &mut UnixStream) -> std::io::Result<()> + Send + Sync;

/// A fake agent serving `behaviour` on a socket in a fresh temporary directory; `sent` counts
/// the output bytes it managed to hand to the host.
struct FakeAgent {
    _dir: tempfile::TempDir,
    session: Session,
    sent: Arc<AtomicUsize>,
}

impl FakeAgent {
    fn start(behaviour: Box<Behaviour>) -> FakeAgent {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("agent.sock");
        let listener = UnixListener::bind(&path).expect("bind");
        let behaviour: Arc<Behaviour> = Arc::from(behaviour);
        std::thread::spawn(move || {
            for (n, conn) in listener.incoming().enumerate() {
                let Ok(mut conn) = conn else { return };
                let behaviour = Arc::clone(&behaviour);
                std::thread::spawn(move || {
                    if let Some(request) = read_request(&mut conn) {
                        let _ = behaviour(n, &request, &mut conn);
                    }
                });
            }
        });
        FakeAgent { _dir: dir, session: Session::fake("hostile", path), sent: Arc::default() }
    }
}

fn read_request(conn: &mut UnixStream) -> Option<Request> {
    let mut len = [0u8; 4];
    conn.read_exact(&mut len).ok()?;
    let mut header = vec![0u8; u32::from_be_bytes(len) as usize];
    conn.read_exact(&mut header).ok()?;
    let header: serde_json::Value = serde_json::from_slice(&header).ok()?;
    let mut stdin = vec![0u8; usize::try_from(header["stdin"].as_u64()?).ok()?];
    conn.read_exact(&mut stdin).ok()?;
    Some(Request { stdin })
}

fn frame(conn: &mut UnixStream, kind: u8, payload: &[u8]) -> std::io::Result<()> {
    let mut bytes = vec![kind];
    bytes.extend_from_slice(&u32::try_from(payload.len()).unwrap_or(u32::MAX).to_be_bytes());
    bytes.extend_from_slice(payload);
    conn.write_all(&bytes)
}

/// Sends 1 MiB output frames until the host hangs up, counting what got through.
fn flood(conn: &mut UnixStream, sent: &AtomicUsize) -> std::io::Result<()> {
    let chunk = vec![b'A'; 1 << 20];
    loop {
        frame(conn, b'o', &chunk)?;
        sent.fetch_add(chunk.len(), Ordering::Relaxed);
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

fn flooding_agent() -> FakeAgent {
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&sent);
    let mut agent = FakeAgent::start(Box::new(move |_, _, conn| flood(conn, &counter)));
    agent.sent = sent;
    agent
}

/// The issue's attack: the first exec of `session run` reports "not ready" and the install
/// that follows is answered with endless 1 MiB frames. The host stops at its capture cap,
/// hangs up (which kills the command) and names the cap.
#[test]
fn endless_frames_during_the_install_stop_at_the_capture_cap() {
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&sent);
    let agent = FakeAgent::start(Box::new(move |n, request, conn| {
        if n == 0 {
            // The warm path's nonce is the first stdin line.
            let stdin = String::from_utf8_lossy(&request.stdin);
            let nonce = stdin.lines().next().unwrap_or_default();
            frame(conn, b'o', format!("python-sandbox-not-ready-{nonce}\n").as_bytes())?;
            return frame(conn, b'x', br#"{"code": 0, "timed_out": false}"#);
        }
        flood(conn, &counter)
    }));
    let script = tempfile::NamedTempFile::new().expect("script");
    let started = Instant::now();
    let result =
        rt().block_on(agent.session.run_script(script.path(), &[], &[], &mut Captured::default()));
    let Err(Error::TooLarge { what, limit, .. }) = &result else {
        panic!("expected the capture cap, got {result:?}")
    };
    assert_eq!(limit, "16 MiB");
    assert!(what.contains("helper command"), "{what}");
    let message = result.as_ref().map(|_| ()).expect_err("error").to_string();
    assert!(message.contains("is larger than the 16 MiB the host reads"), "{message}");
    // What got through is the cap plus what the socket buffers held, not an unbounded stream.
    std::thread::sleep(Duration::from_millis(200));
    let through = sent.load(Ordering::Relaxed);
    assert!(through < 64 << 20, "the host kept reading: {through} bytes");
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
}

#[test]
fn a_file_read_is_capped() {
    let agent = flooding_agent();
    let result = rt().block_on(agent.session.read_file("/tmp/big"));
    match result {
        Err(Error::TooLarge { what, limit, .. }) => {
            assert_eq!((what.as_str(), limit.as_str()), ("the file `/tmp/big`", "64 MiB"));
        }
        other => panic!("expected the read cap, got {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(agent.sent.load(Ordering::Relaxed) < 128 << 20);
}

/// A streamed exec is not capped (a script may print forever), but a reader that went away
/// ends it at once with 141 and the connection closed.
#[test]
fn endless_frames_to_a_closed_reader_end_with_141() {
    struct HeadOne {
        seen: usize,
    }
    impl OutputSink for HeadOne {
        fn write(&mut self, _: Stream, chunk: &[u8]) {
            self.seen += chunk.len();
        }
        fn closed(&self) -> bool {
            self.seen > 0
        }
    }
    let agent = flooding_agent();
    let mut sink = HeadOne { seen: 0 };
    let outcome = rt()
        .block_on(agent.session.exec(&ExecRequest::new(&["yes"]), &mut sink))
        .expect("an outcome");
    assert_eq!(outcome.exit_code, EXIT_CLOSED_PIPE);
    assert_eq!(sink.seen, 1 << 20, "one frame, then the host stopped");
}

fn answer(frames: Vec<(u8, Vec<u8>)>) -> FakeAgent {
    FakeAgent::start(Box::new(move |_, _, conn| {
        for (kind, payload) in &frames {
            frame(conn, *kind, payload)?;
        }
        // Then hold the connection open, as a hostile agent would.
        std::thread::sleep(Duration::from_secs(30));
        Ok(())
    }))
}

fn protocol_problem(agent: &FakeAgent) -> String {
    let result =
        rt().block_on(agent.session.exec(&ExecRequest::new(&["true"]), &mut Captured::default()));
    match result {
        Err(e @ Error::AgentProtocol { .. }) => {
            let text = e.to_string();
            assert!(text.contains("hint: code run in the session may have replaced"), "{text}");
            text
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
}

#[test]
fn a_giant_length_prefix_is_refused_before_any_allocation() {
    let agent = FakeAgent::start(Box::new(|_, _, conn| {
        conn.write_all(&[b'o', 0xff, 0xff, 0xff, 0xff])?;
        std::thread::sleep(Duration::from_secs(30));
        Ok(())
    }));
    let started = Instant::now();
    let text = protocol_problem(&agent);
    assert!(text.contains("a frame of 4294967295 bytes"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn exit_codes_no_process_has_are_refused() {
    for bogus in [r#"{"code": 99999}"#, r#"{"code": -3}"#, r#"{"code": 1e300}"#, "garbage", ""] {
        let agent = answer(vec![(b'x', bogus.as_bytes().to_vec())]);
        let text = protocol_problem(&agent);
        assert!(text.contains("an exit frame"), "{bogus}: {text}");
    }
    let agent = answer(vec![(b'?', Vec::new())]);
    assert!(protocol_problem(&agent).contains("an unknown frame `?`"));
}

#[test]
fn listing_names_that_leave_the_directory_are_refused() {
    for record in [
        "f 1 ../../etc/passwd",
        "f 1 a/b",
        "d 0 ..",
        "d 0 .",
        "f 1 ",
        "f lots name",
        "f -1 name",
        "nonsense",
    ] {
        let mut listing = record.as_bytes().to_vec();
        listing.push(0);
        let agent = answer(vec![(b'o', listing), (b'x', br#"{"code": 0}"#.to_vec())]);
        let result = rt().block_on(agent.session.list_dir("/ws"));
        match result {
            Err(Error::AgentProtocol { problem, .. }) => {
                assert!(problem.starts_with("a listing entry"), "{record}: {problem}")
            }
            other => panic!("{record}: expected a protocol error, got {other:?}"),
        }
    }
    let agent =
        answer(vec![(b'o', b"f 3 ok.txt\0d 9 sub\0".to_vec()), (b'x', br#"{"code": 0}"#.to_vec())]);
    let entries = rt().block_on(agent.session.list_dir("/ws")).expect("a valid listing");
    assert_eq!(entries.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["ok.txt", "sub"]);
}

/// The agent enforces timeouts, but a replaced one need not: the host gives it a grace
/// period past the timeout, then hangs up and reports the timeout itself.
#[test]
fn an_agent_that_ignores_the_timeout_is_cut_off_by_the_host() {
    let agent = answer(Vec::new());
    let request = ExecRequest {
        timeout: Some(Duration::from_millis(200)),
        ..ExecRequest::new(&["sleep", "100"])
    };
    let started = Instant::now();
    let outcome =
        rt().block_on(agent.session.exec(&request, &mut Captured::default())).expect("an outcome");
    assert!(outcome.timed_out);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(200) + sandbox_core::agent::TIMEOUT_GRACE
            && took < Duration::from_secs(15),
        "{took:?}"
    );
}

fn interactive(agent: &FakeAgent, events: Vec<sandbox_core::Input>) -> Result<i32, Error> {
    let (input, io) = sandbox_core::Interactive::channel(None);
    for event in events {
        input.send(event).expect("send");
    }
    // The caller's side stays open (a terminal nobody types in): the answer alone must end it.
    let request = ExecRequest::new(&["cat"]);
    let outcome = rt().block_on(sandbox_core::InteractiveExec::exec_interactive(
        &agent.session,
        &request,
        io,
        &mut Captured::default(),
    ));
    drop(input);
    outcome.map(|o| o.exit_code)
}

/// A session started before interactive execs existed: its agent finds no `argv` in the
/// request, starts nothing and says so. The host names the problem instead of hanging or
/// running the command without its input.
#[test]
fn an_agent_older_than_interactive_execs_is_refused_not_waited_for() {
    let agent = answer(vec![(b'f', b"'argv'".to_vec())]);
    let started = Instant::now();
    let result = interactive(&agent, vec![sandbox_core::Input::Stdin(b"x".to_vec())]);
    let Err(Error::Sandbox(e @ sandbox_core::Error::AgentTooOld { .. })) = &result else {
        panic!("expected the too-old refusal, got {result:?}")
    };
    assert!(e.to_string().contains("session stop hostile"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

/// A hello is the first frame of an interactive answer and nowhere else.
#[test]
fn hello_frames_out_of_place_are_protocol_errors() {
    let hello = br#"{"v": 2}"#.to_vec();
    let twice = answer(vec![(b'v', hello.clone()), (b'v', hello.clone())]);
    let result = interactive(&twice, Vec::new());
    let Err(e @ Error::AgentProtocol { .. }) = &result else { panic!("{result:?}") };
    assert!(e.to_string().contains("an unexpected hello frame"), "{e}");
    let in_v1 = answer(vec![(b'v', hello)]);
    assert!(protocol_problem(&in_v1).contains("an unexpected hello frame"));
}

/// An agent that answers without reading the input (replaced by code that ignores it) while
/// the caller streams 64 MiB: the host's hand-off is bounded, so it neither queues it all
/// nor waits for the socket to drain before reporting the exit.
#[test]
fn input_nobody_reads_does_not_hold_up_the_answer() {
    let agent = answer(vec![
        (b'v', br#"{"v": 2}"#.to_vec()),
        (b'x', br#"{"code": 5, "timed_out": false}"#.to_vec()),
    ]);
    let chunk = vec![b'z'; 1 << 20];
    let events = (0..64).map(|_| sandbox_core::Input::Stdin(chunk.clone())).collect();
    let started = Instant::now();
    assert_eq!(interactive(&agent, events).expect("an outcome"), 5);
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}
