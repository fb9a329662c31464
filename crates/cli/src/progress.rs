//! A one-line progress indicator on stderr while dependencies install. Only on a terminal, and
//! only after a short delay, so warm runs (which install nothing) print nothing at all.

use std::io::{IsTerminal as _, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
const DELAY: Duration = Duration::from_millis(150);
const TICK: Duration = Duration::from_millis(90);

pub(crate) struct Progress {
    shared: Option<Ticker>,
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
            return Progress { shared: None };
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
        Progress { shared: Some(Ticker { line, done, handle }) }
    }

    pub(crate) fn set(&mut self, text: &str) {
        if let Some(ticker) = &self.shared
            && let Ok(mut l) = ticker.line.lock()
        {
            text.trim_end().clone_into(&mut l);
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
