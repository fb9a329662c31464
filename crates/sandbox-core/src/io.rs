//! Streamed process output shared by the one-shot [`crate::Engine`] and the long-lived
//! [`crate::Sandbox`]: which stream a chunk came from and where chunks go.

/// The output stream a chunk was written to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stream {
    /// The process's standard output.
    Stdout,
    /// The process's standard error.
    Stderr,
}

/// Receives output chunks as they arrive. Chunks are arbitrary byte slices: a line, a
/// UTF-8 character or a secret may be split across two calls.
///
/// Any `FnMut(Stream, &[u8]) + Send` closure is a sink, so is [`Captured`].
pub trait OutputSink: Send {
    /// Takes one chunk of `stream`.
    fn write(&mut self, stream: Stream, chunk: &[u8]);

    /// Whether whoever reads this sink has gone away (a closed pipe: `run … | head -1`). An
    /// engine that sees it stops the command as a closed pipe would have, and reports 141
    /// (128 + SIGPIPE) unless the command had already exited on its own.
    fn closed(&self) -> bool {
        false
    }

    /// One line saying which long step of getting the command going is under way (a
    /// session installing a script's dependencies): not output of the command, for a
    /// progress display. Ignored unless the sink shows progress.
    fn status(&mut self, _line: &str) {}
}

/// The exit code of a command whose output reader went away: 128 + SIGPIPE, what a shell
/// reports for a process killed by writing to a closed pipe.
pub const EXIT_CLOSED_PIPE: i32 = 141;

impl<F: FnMut(Stream, &[u8]) + Send> OutputSink for F {
    fn write(&mut self, stream: Stream, chunk: &[u8]) {
        self(stream, chunk);
    }
}

/// A sink that keeps everything: both streams separately plus the interleaved chunk order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    /// Everything written to stdout, concatenated.
    pub stdout: Vec<u8>,
    /// Everything written to stderr, concatenated.
    pub stderr: Vec<u8>,
    /// Every chunk in arrival order, for tests that care about interleaving.
    pub chunks: Vec<(Stream, Vec<u8>)>,
}

impl Captured {
    /// stdout as text, with invalid UTF-8 replaced.
    pub fn stdout_lossy(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// stderr as text, with invalid UTF-8 replaced.
    pub fn stderr_lossy(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

impl OutputSink for Captured {
    fn write(&mut self, stream: Stream, chunk: &[u8]) {
        match stream {
            Stream::Stdout => self.stdout.extend_from_slice(chunk),
            Stream::Stderr => self.stderr.extend_from_slice(chunk),
        }
        self.chunks.push((stream, chunk.to_vec()));
    }
}

/// Without unix descriptors to compare (the WASM build), never.
#[cfg(not(unix))]
pub fn same_file_out_err() -> bool {
    false
}

/// Whether this process's stdout and stderr are the same file (one terminal, `2>&1`, one pipe):
/// then the order between the two streams is visible, and engines that cannot pass the
/// descriptors through keep it by merging the streams at the source.
#[cfg(unix)]
pub fn same_file_out_err() -> bool {
    use std::os::fd::AsFd as _;
    use std::os::unix::fs::MetadataExt as _;
    let meta = |fd: std::os::fd::BorrowedFd<'_>| {
        fd.try_clone_to_owned().and_then(|fd| std::fs::File::from(fd).metadata()).ok()
    };
    match (meta(std::io::stdout().as_fd()), meta(std::io::stderr().as_fd())) {
        (Some(out), Some(err)) => {
            out.dev() == err.dev() && out.ino() == err.ino() && out.rdev() == err.rdev()
        }
        _ => false,
    }
}
