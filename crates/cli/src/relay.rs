//! Sandbox output on its way to our own stdout and stderr. Every path that prints what a
//! sandbox wrote goes through [`Relay`] behind the secret scrubber, and a reader that went
//! away (`run … | head -1`: a write fails with `EPIPE`, which Rust reports instead of dying
//! of SIGPIPE) is reported through [`OutputSink::closed`], so the engine stops the command
//! instead of feeding a pipe nobody reads.

use std::io::Write as _;

use sandbox_core::{OutputSink, ScrubbingSink, Secrets, Stream};

/// Writes chunks to stdout (or, with `--json`, whose stdout is the summary, to stderr) and
/// stderr, flushing each so a closed reader shows at once.
pub(crate) struct Relay {
    json: bool,
    closed: bool,
}

impl Relay {
    /// Through the scrubber, masking `secrets`.
    pub(crate) fn scrubbed(secrets: &Secrets, json: bool) -> ScrubbingSink<Relay> {
        ScrubbingSink::new(secrets, Relay::plain(json))
    }

    /// Without a scrubber, for a caller that puts its own in front.
    pub(crate) fn plain(json: bool) -> Relay {
        Relay { json, closed: false }
    }
}

/// A sink borrowed for one command, behind a scrubber that wants to own its inner sink:
/// forwards the chunks and whether the reader went away.
pub(crate) struct Forward<'a, S: ?Sized>(pub(crate) &'a mut S);

impl<S: OutputSink + ?Sized> OutputSink for Forward<'_, S> {
    fn write(&mut self, stream: Stream, chunk: &[u8]) {
        self.0.write(stream, chunk);
    }

    fn closed(&self) -> bool {
        self.0.closed()
    }

    fn status(&mut self, line: &str) {
        self.0.status(line);
    }
}

impl OutputSink for Relay {
    fn write(&mut self, stream: Stream, chunk: &[u8]) {
        if self.closed {
            return;
        }
        let written = match (stream, self.json) {
            (Stream::Stdout, false) => {
                let mut out = std::io::stdout().lock();
                out.write_all(chunk).and_then(|()| out.flush())
            }
            _ => std::io::stderr().lock().write_all(chunk),
        };
        if written.is_err_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) {
            self.closed = true;
        }
    }

    fn closed(&self) -> bool {
        self.closed
    }
}
