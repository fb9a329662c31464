//! Interactive execs (`session exec -i` / `-t`): a command whose stdin is streamed while it
//! runs instead of sent whole, optionally on a pseudo-terminal of a given size that the caller
//! can resize. The caller's side is one channel of [`Input`] events (stdin chunks, end of
//! input, size changes), so an engine needs one pump and a test needs no terminal: it sends
//! bytes and an [`Input::Eof`] into the channel and reads the output sink.

use std::future::Future;
use std::sync::mpsc::{Receiver, Sender, channel};

use crate::{ExecRequest, OutputSink, RunOutcome, Sandbox};

/// A terminal size, in character cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TtySize {
    /// Lines.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

/// One event from the caller's side of an interactive exec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Bytes for the command's stdin (any size; engines split them into frames).
    Stdin(Vec<u8>),
    /// The end of stdin: the command's stdin is closed (on a tty: an end-of-file character
    /// is typed, what Ctrl-D does). A channel whose senders all went away means the same.
    Eof,
    /// The caller's terminal changed size (ignored without a tty).
    Resize(TtySize),
}

/// The caller's side of one interactive exec: where its input comes from and whether the
/// command gets a pseudo-terminal (of this initial size) instead of pipes.
#[derive(Debug)]
pub struct Interactive {
    /// Stdin chunks, end of input and resizes, in order; read by a thread of the engine (a
    /// blocking channel: the caller's side is a blocking read of its own stdin).
    pub input: Receiver<Input>,
    /// `Some`: run the command on a pty of this size, its session leader with the pty as
    /// controlling terminal (stdout and stderr are then one stream, reported as stdout).
    pub tty: Option<TtySize>,
}

impl Interactive {
    /// A fresh channel: the sender for the caller's side, the `Interactive` for the engine.
    pub fn channel(tty: Option<TtySize>) -> (Sender<Input>, Interactive) {
        let (sender, input) = channel();
        (sender, Interactive { input, tty })
    }
}

/// A [`Sandbox`] that runs commands with streamed stdin and, where the engine can, a pty.
pub trait InteractiveExec: Sandbox {
    /// Runs `request` to completion like [`Sandbox::exec`], but with its stdin fed from
    /// `io.input` as it arrives (after `request.stdin`, if any) and, with `io.tty`, on a
    /// pseudo-terminal. An implementation that cannot give a tty refuses with a clear error
    /// rather than running the command without one.
    fn exec_interactive(
        &self,
        request: &ExecRequest,
        io: Interactive,
        output: &mut dyn OutputSink,
    ) -> impl Future<Output = Result<RunOutcome, Self::Error>> + Send;
}
