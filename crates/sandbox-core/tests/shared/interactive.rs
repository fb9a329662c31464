//! The contract of interactive execs ([`sandbox_core::InteractiveExec`]), shared by the test
//! suites of every implementation (included with `#[path]`, so the fake and the real session
//! engines are held to the same cases): streamed stdin through pipes and, where the engine
//! has one, a pty of the size asked for that resizes, is a tty to Python, and turns Ctrl-C
//! into SIGINT.

use std::time::{Duration, Instant};

use sandbox_core::{Captured, ExecRequest, Input, Interactive, RunOutcome, TtySize};

/// Runs one interactive exec to its end, the way the caller's side of an engine does.
pub(crate) type Exec<'a> = dyn FnMut(&ExecRequest, Interactive) -> (RunOutcome, Captured) + 'a;

/// Sends `events` from a thread (each after its delay in milliseconds); the input stays open
/// until the exec ends (a closed channel is an end of input, which a tty test must not type).
pub(crate) fn interact(
    exec: &mut Exec<'_>,
    argv: &[&str],
    tty: Option<TtySize>,
    events: Vec<(u64, Input)>,
) -> (RunOutcome, Captured) {
    let (input, io) = Interactive::channel(tty);
    let feeder = input.clone();
    std::thread::spawn(move || {
        for (delay, event) in events {
            std::thread::sleep(Duration::from_millis(delay));
            if feeder.send(event).is_err() {
                return;
            }
        }
    });
    let result = exec(&ExecRequest::new(argv), io);
    drop(input);
    result
}

/// Streamed stdin through pipes: more than a frame and more than a pipe buffer, bytes kept
/// exact, the end of input reaching the command, the command's exit code.
pub(crate) fn stdin_contract(who: &str, exec: &mut Exec<'_>) {
    let big: Vec<u8> = (0..(3 << 20) + 1).map(|i: u32| (i % 251) as u8).collect();
    let chunks: Vec<(u64, Input)> =
        big.chunks(100_000).map(|c| (0, Input::Stdin(c.to_vec()))).collect();
    let mut with_eof = chunks.clone();
    with_eof.push((0, Input::Eof));
    let (outcome, out) = interact(exec, &["wc", "-c"], None, with_eof.clone());
    assert_eq!((outcome.exit_code, out.stdout_lossy().trim()), (0, "3145729"), "{who}");
    let (outcome, out) = interact(exec, &["cat"], None, with_eof);
    assert_eq!(outcome.exit_code, 0, "{who}: {}", out.stderr_lossy());
    assert!(out.stdout == big, "{who}: cat gave {} bytes back, not the same", out.stdout.len());
    let (outcome, out) = interact(
        exec,
        &["sh", "-c", "cat >/dev/null; echo eof; read x; exit 3"],
        None,
        vec![(0, Input::Stdin(b"some".to_vec())), (200, Input::Eof)],
    );
    assert_eq!((outcome.exit_code, out.stdout_lossy().as_str()), (3, "eof\n"), "{who}");
}

/// A pty of the size asked for: a `/dev/pts` path, `stty size`, a resize, `isatty()`, the
/// `TERM` of a terminal, and Ctrl-C (the byte 0x03) interrupting `sleep`.
pub(crate) fn tty_contract(who: &str, exec: &mut Exec<'_>) {
    let size = Some(TtySize { rows: 40, cols: 132 });
    let (outcome, out) = interact(exec, &["tty"], size, Vec::new());
    assert_eq!(outcome.exit_code, 0, "{who}: {}", out.stdout_lossy());
    assert!(out.stdout_lossy().starts_with("/dev/pts/"), "{who}: {}", out.stdout_lossy());
    let (_, out) = interact(exec, &["stty", "size"], size, Vec::new());
    assert_eq!(out.stdout_lossy(), "40 132\r\n", "{who}: the pty's output is one stream");
    let resize = vec![(100, Input::Resize(TtySize { rows: 50, cols: 120 }))];
    let (_, out) = interact(exec, &["sh", "-c", "sleep 1; stty size"], size, resize);
    assert_eq!(out.stdout_lossy(), "50 120\r\n", "{who}");
    let isatty = "import os, sys; print(sys.stdin.isatty(), os.environ.get('TERM'))";
    let (_, out) = interact(exec, &["python3", "-c", isatty], size, Vec::new());
    assert_eq!(out.stdout_lossy(), "True xterm\r\n", "{who}");
    let started = Instant::now();
    let (outcome, out) =
        interact(exec, &["sleep", "30"], size, vec![(500, Input::Stdin(vec![0x03]))]);
    assert_eq!(outcome.exit_code, 130, "{who}: 128 + SIGINT: {}", out.stdout_lossy());
    assert!(started.elapsed() < Duration::from_secs(10), "{who}: {:?}", started.elapsed());
    // Typed input is echoed and read by line, and the end of input is the terminal's.
    let typed = vec![(0, Input::Stdin(b"typed\n".to_vec())), (0, Input::Eof)];
    let (outcome, out) = interact(exec, &["cat"], size, typed);
    assert_eq!(
        (outcome.exit_code, out.stdout_lossy().as_str()),
        (0, "typed\r\ntyped\r\n"),
        "{who}"
    );
}
