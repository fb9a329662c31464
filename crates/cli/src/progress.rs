//! What a run shows while it gets going: on a terminal, a one-line indicator on stderr, only
//! after a short delay, so warm runs (which install nothing) print nothing at all; off a
//! terminal (Claude Code's Bash, a CI log), each step's line once, as it starts, since nobody
//! sees a redrawn line there. Only the steps the engines report print (fetching uv, resolving,
//! installing, a session's install): a warm run prints none.

use std::io::{IsTerminal as _, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
        Progress { shared: Some(Ticker::spawn()), plain: None }
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
            ticker.stop();
        }
    }
}

impl Ticker {
    /// Starts the drawing thread: it draws nothing before [`DELAY`], and stops at once when
    /// told (a warm run's prepare takes milliseconds, and must not wait out the delay).
    fn spawn() -> Ticker {
        let line = Arc::new(Mutex::new(String::from("preparing the environment")));
        let done = Arc::new(AtomicBool::new(false));
        let (l, d) = (Arc::clone(&line), Arc::clone(&done));
        let handle = std::thread::spawn(move || {
            let start = Instant::now();
            while !d.load(Ordering::Relaxed) && start.elapsed() < DELAY {
                std::thread::park_timeout(DELAY.saturating_sub(start.elapsed()));
            }
            let mut i = 0;
            let mut drawn = false;
            while !d.load(Ordering::Relaxed) {
                let text = l.lock().map(|s| s.clone()).unwrap_or_default();
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "\r\x1b[2K{} {text}", FRAMES[i % FRAMES.len()]);
                let _ = err.flush();
                drawn = true;
                i += 1;
                std::thread::park_timeout(TICK);
            }
            if drawn {
                let _ = write!(std::io::stderr().lock(), "\r\x1b[2K");
            }
        });
        Ticker { line, done, handle }
    }

    /// Stops the thread (waking it from its wait) and waits for it to erase its line.
    fn stop(self) {
        self.done.store(true, Ordering::Relaxed);
        self.handle.thread().unpark();
        let _ = self.handle.join();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A run that prepares nothing stops the indicator at once: the thread's wait for the
    /// delay does not hold up the run (it once did, 150 ms of every warm run on a terminal).
    #[test]
    fn stopping_the_indicator_does_not_wait_out_its_delay() {
        let ticker = Ticker::spawn();
        let start = Instant::now();
        ticker.stop();
        assert!(start.elapsed() < DELAY / 3, "{:?}", start.elapsed());
    }
}
