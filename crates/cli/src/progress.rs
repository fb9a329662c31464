//! What a run shows while it gets going: on a terminal, a one-line indicator on stderr, only
//! after a short delay, so warm runs (which install nothing) print nothing at all; off a
//! terminal (Claude Code's Bash, a CI log), each step's line once, as it starts, since nobody
//! sees a redrawn line there. Only the steps the engines report print (fetching uv, resolving,
//! installing, a session's install): a warm run prints none.

use std::io::{IsTerminal as _, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use sandbox_core::{OutputSink, Stream};

const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
const DELAY: Duration = Duration::from_millis(150);
const TICK: Duration = Duration::from_millis(90);

pub(crate) struct Progress {
    shared: Option<Ticker>,
    /// Off a terminal: the last line printed, so a repeated one is not printed again.
    plain: Option<String>,
}

/// The drawing thread and what it shares with the caller.
struct Ticker {
    line: Arc<Mutex<String>>,
    done: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

impl Progress {
    pub(crate) fn start() -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress { shared: None, plain: Some(String::new()) };
        }
        let line = Arc::new(Mutex::new(String::from("preparing the environment")));
        let done = Arc::new(AtomicBool::new(false));
        let (l, d) = (Arc::clone(&line), Arc::clone(&done));
        let handle = std::thread::spawn(move || {
            std::thread::sleep(DELAY);
            let mut i = 0;
            let mut drawn = false;
            while !d.load(Ordering::Relaxed) {
                let text = l.lock().map(|s| s.clone()).unwrap_or_default();
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "\r\x1b[2K{} {text}", FRAMES[i % FRAMES.len()]);
                let _ = err.flush();
                drawn = true;
                i += 1;
                std::thread::sleep(TICK);
            }
            if drawn {
                let _ = write!(std::io::stderr().lock(), "\r\x1b[2K");
            }
        });
        Progress { shared: Some(Ticker { line, done, handle }), plain: None }
    }

    pub(crate) fn set(&mut self, text: &str) {
        let text = text.trim_end();
        if let Some(ticker) = &self.shared
            && let Ok(mut l) = ticker.line.lock()
        {
            text.clone_into(&mut l);
        }
        if let Some(last) = &mut self.plain
            && !text.is_empty()
            && text != last
        {
            let _ = writeln!(std::io::stderr().lock(), "{text}");
            text.clone_into(last);
        }
    }

    /// Stops and erases the indicator before the script's own output starts.
    pub(crate) fn finish(&mut self) {
        if let Some(ticker) = self.shared.take() {
            ticker.done.store(true, Ordering::Relaxed);
            let _ = ticker.handle.join();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A sink that shows the status lines it is given (a session installing a script's
/// dependencies) as [`Progress`] does, until the command's own output starts.
pub(crate) struct Stepped<S> {
    inner: S,
    progress: Option<Progress>,
}

impl<S> Stepped<S> {
    pub(crate) fn new(inner: S) -> Stepped<S> {
        Stepped { inner, progress: None }
    }

    /// The inner sink, the indicator ended.
    pub(crate) fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: OutputSink> OutputSink for Stepped<S> {
    fn write(&mut self, stream: Stream, chunk: &[u8]) {
        // Erased (on a terminal) before the first byte of the command's output.
        drop(self.progress.take());
        self.inner.write(stream, chunk);
    }

    fn closed(&self) -> bool {
        self.inner.closed()
    }

    fn status(&mut self, line: &str) {
        self.progress.get_or_insert_with(Progress::start).set(line);
    }
}
