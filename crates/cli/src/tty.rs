//! The caller's side of `session exec -i`/`-t`: all terminal handling of the CLI. `-i`
//! streams our stdin into the command (a thread reads it into the exec's input channel);
//! `-t` asks for a pty in the sandbox of our terminal's size, forwards SIGWINCH as resizes
//! and, with `-i`, puts our terminal in raw mode so every key (Ctrl-C too) goes to the
//! command's terminal instead of ours, as `docker exec -it` does.
//!
//! Raw mode is undone on every way out: the guard's drop (returns, errors, unwinding
//! panics), and SIGTERM/SIGHUP/SIGQUIT, which restore the terminal before dying of the
//! signal as they would have. Output still goes through the caller's sink (the secret
//! scrubber of `crate::relay`); the pty's output is one stream, reported as stdout.
//!
//! `run` gives the script our terminal itself (stdin, and stdout/stderr when nothing is
//! masked), so the script can change its modes (`stty -echo`, raw mode): [`SavedModes`]
//! puts them back when the run ends, however it ends. A script killed by a signal or the
//! timeout, a Ctrl-C, and SIGTERM/SIGHUP to us all end the run through the engine's own
//! handling (which ends the sandbox and returns), so the guard's drop covers them.

use std::io::Read as _;
use std::os::fd::{AsFd as _, BorrowedFd};
use std::sync::Mutex;

use anyhow::Result;
use rustix::termios::{OptionalActions, Termios};
use sandbox_core::{
    DynSession, EngineError, ExecRequest, Input, Interactive, OutputSink, RunOutcome, TtySize,
};

use crate::ui;

/// The caller's terminal and input, attached for one exec.
pub(crate) struct Attached {
    io: Mutex<Option<Interactive>>,
    _raw: Option<RawMode>,
}

/// Attaches `-i` (stdin) and `-t` (a pty) for `request`; `None` for neither. `-t` sets
/// `TERM` (ours, else `xterm`) unless the request has one.
pub(crate) fn attach(
    request: &mut ExecRequest,
    stdin: bool,
    tty: bool,
) -> Result<Option<Attached>> {
    if !stdin && !tty {
        return Ok(None);
    }
    let fd = std::io::stdin();
    let size = if tty {
        if !rustix::termios::isatty(&fd) {
            return Err(ui::hinted("`-t` needs a terminal", "drop -t or run from a terminal"));
        }
        if !request.env.iter().any(|(name, _)| name == "TERM") {
            let term = std::env::var("TERM").ok().filter(|t| !t.is_empty() && t != "dumb");
            request.env.push(("TERM".to_owned(), term.unwrap_or_else(|| "xterm".to_owned())));
        }
        Some(size_of(fd_of(&fd)))
    } else {
        None
    };
    let (input, io) = Interactive::channel(size);
    let raw = if tty && stdin { Some(RawMode::enter(fd_of(&fd))?) } else { None };
    if tty {
        forward_signals(input.clone(), raw.as_ref().map(|r| r.saved.clone()));
    }
    if stdin {
        std::thread::spawn(move || read_stdin(&input));
    }
    // Without `-i` the sender is dropped here: the command's stdin ends at once (or, on a
    // pty, gets nothing but what the command's terminal itself produces).
    Ok(Some(Attached { io: Mutex::new(Some(io)), _raw: raw }))
}

/// Runs `request` interactively on `session` with the attached input (which one exec
/// consumes: a second attempt, after the first found no agent, cannot replay it).
pub(crate) fn exec(
    session: &dyn DynSession,
    request: &ExecRequest,
    attached: &Attached,
    output: &mut dyn OutputSink,
) -> Result<RunOutcome, EngineError> {
    let io = attached.io.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    match io {
        Some(io) => session.exec_interactive(request, io, output),
        None => Err(EngineError::new(sandbox_core::Error::Unsupported {
            what: "an interactive exec (`-i`/`-t`)".to_owned(),
            by: format!("session `{}`, whose agent this host cannot reach", session.id()),
            hint: "run it on the host that started the session, or start a new session there"
                .to_owned(),
        })),
    }
}

fn fd_of(stdin: &std::io::Stdin) -> BorrowedFd<'_> {
    stdin.as_fd()
}

/// Our terminal's size; 24x80 when it does not say (a serial console reports 0x0).
fn size_of(fd: BorrowedFd<'_>) -> TtySize {
    match rustix::termios::tcgetwinsize(fd) {
        Ok(ws) if ws.ws_row > 0 && ws.ws_col > 0 => TtySize { rows: ws.ws_row, cols: ws.ws_col },
        _ => TtySize { rows: 24, cols: 80 },
    }
}

/// Our stdin into the exec's input until its end (or a read error, the same to the command).
fn read_stdin(input: &std::sync::mpsc::Sender<Input>) {
    let mut stdin = std::io::stdin().lock();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if input.send(Input::Stdin(buf[..n].to_vec())).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = input.send(Input::Eof);
}

/// SIGWINCH as resizes; with raw mode, SIGTERM/SIGHUP/SIGQUIT restore the terminal first and
/// then end us as they would have.
fn forward_signals(input: std::sync::mpsc::Sender<Input>, saved: Option<Termios>) {
    use signal_hook::consts::{SIGHUP, SIGQUIT, SIGTERM, SIGWINCH};
    let mut wanted = vec![SIGWINCH];
    if saved.is_some() {
        wanted.extend([SIGTERM, SIGHUP, SIGQUIT]);
    }
    let Ok(mut signals) = signal_hook::iterator::Signals::new(&wanted) else { return };
    std::thread::spawn(move || {
        for signal in signals.forever() {
            if signal == SIGWINCH {
                // The exec may be over; a resize nobody reads is harmless.
                let _ = input.send(Input::Resize(size_of(fd_of(&std::io::stdin()))));
                continue;
            }
            if let Some(saved) = &saved {
                let _ = rustix::termios::tcsetattr(std::io::stdin(), OptionalActions::Now, saved);
            }
            let _ = signal_hook::low_level::emulate_default_handler(signal);
        }
    });
}

/// Our terminal in raw mode until dropped.
struct RawMode {
    saved: Termios,
}

impl RawMode {
    fn enter(fd: BorrowedFd<'_>) -> Result<RawMode> {
        let saved = rustix::termios::tcgetattr(fd)
            .map_err(|e| anyhow::anyhow!("cannot read the terminal's settings: {e}"))?;
        let mut raw = saved.clone();
        raw.make_raw();
        rustix::termios::tcsetattr(fd, OptionalActions::Now, &raw)
            .map_err(|e| anyhow::anyhow!("cannot put the terminal in raw mode: {e}"))?;
        Ok(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // Output still queued for the terminal is written first (TCSADRAIN), then restored.
        let _ = rustix::termios::tcsetattr(std::io::stdin(), OptionalActions::Drain, &self.saved);
    }
}

/// The modes of our terminals (stdin, stdout, stderr) as they were when saved, put back when
/// dropped.
pub(crate) struct SavedModes {
    saved: Vec<(StdFd, Termios)>,
}

/// One of our standard descriptors.
#[derive(Debug, Clone, Copy)]
enum StdFd {
    In,
    Out,
    Err,
}

impl StdFd {
    fn with<T>(self, f: impl FnOnce(BorrowedFd<'_>) -> T) -> T {
        match self {
            StdFd::In => f(std::io::stdin().as_fd()),
            StdFd::Out => f(std::io::stdout().as_fd()),
            StdFd::Err => f(std::io::stderr().as_fd()),
        }
    }
}

impl SavedModes {
    /// Saves the modes of each terminal among stdin, stdout and stderr (once per terminal).
    pub(crate) fn save() -> SavedModes {
        let mut saved: Vec<(StdFd, Termios)> = Vec::new();
        let mut seen = Vec::new();
        for stdio in [StdFd::In, StdFd::Out, StdFd::Err] {
            let found = stdio.with(|fd| {
                if !rustix::termios::isatty(fd) {
                    return None;
                }
                let device = rustix::fs::fstat(fd).ok().map(|st| st.st_rdev);
                Some((device, rustix::termios::tcgetattr(fd).ok()?))
            });
            if let Some((device, modes)) = found
                && !(device.is_some() && seen.contains(&device))
            {
                seen.push(device);
                saved.push((stdio, modes));
            }
        }
        SavedModes { saved }
    }
}

impl Drop for SavedModes {
    fn drop(&mut self) {
        for (stdio, modes) in &self.saved {
            stdio.with(|fd| {
                // From a background process group, setting our controlling terminal would stop
                // us (SIGTTOU); whoever holds the foreground restores its own modes then.
                let foreground = match rustix::termios::tcgetpgrp(fd) {
                    Ok(group) => group == rustix::process::getpgrp(),
                    Err(_) => true,
                };
                if foreground {
                    // Output still queued is written first (TCSADRAIN), under the script's modes.
                    let _ = rustix::termios::tcsetattr(fd, OptionalActions::Drain, modes);
                }
            });
        }
    }
}
