//! Secret scrubbing: registered secret values are replaced by [`MASK`] in output and error
//! text, including output that arrives in chunks that split a secret.
//!
//! Every byte that belongs to any occurrence of any secret is masked, and each maximal run
//! of such bytes becomes one [`MASK`]. So overlapping secrets never leak a part: with `abcd`
//! and `abcdef` registered, `abcdef` is masked whole (longest first), and with `abcdef` and
//! `cdefgh`, `abcdefgh` is masked whole. The streaming scrubber holds back only a tail that
//! could still grow into a secret (at most `max_len - 1` bytes) and produces exactly the
//! bytes the one-shot [`Secrets::scrub_bytes`] would.
//!
//! Limitation: a secret that itself contains `*` can re-form across a mask boundary (secret
//! `ab*` next to a masked value); masks are never re-scanned.

use crate::{OutputSink, Stream};

/// What every secret occurrence becomes.
pub const MASK: &str = "****";

/// Words that mark a variable's value as secret when its name contains one (any case):
/// `API_TOKEN`, `db_password`, `AWS_SECRET_ACCESS_KEY`.
pub const SECRET_NAME_MARKERS: [&str; 6] =
    ["TOKEN", "SECRET", "PASSWORD", "PASSWD", "API_KEY", "CREDENTIAL"];

/// Whether an environment variable's name says its value is secret (see
/// [`SECRET_NAME_MARKERS`]).
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_NAME_MARKERS.iter().any(|marker| upper.contains(marker))
}

/// Values with fewer characters than this are not registered: masking every `abc` in ordinary output
/// would garble it without protecting anything worth protecting.
pub const MIN_SECRET_LEN: usize = 4;

/// A set of secret values to mask. Every byte of every occurrence of any secret is masked,
/// each maximal run of such bytes becomes one [`MASK`], so overlapping secrets leak no part.
/// Values shorter than [`MIN_SECRET_LEN`] characters are refused with a reason. A secret that
/// itself contains `*` can re-form next to a mask; masks are never re-scanned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Secrets {
    values: Vec<Vec<u8>>,
}

/// Why [`Secrets::register`] ignored a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ignored {
    /// The value is empty.
    Empty,
    /// The value is shorter than [`MIN_SECRET_LEN`] characters.
    TooShort,
    /// The value is already registered.
    Duplicate,
}

impl Ignored {
    /// A human reason, lower case, no trailing period.
    pub fn reason(self) -> &'static str {
        match self {
            Ignored::Empty => "the value is empty, so there is nothing to mask",
            Ignored::TooShort => {
                "the value is shorter than 4 characters: masking it would garble ordinary output"
            }
            Ignored::Duplicate => "the value is already registered",
        }
    }
}

impl std::fmt::Display for Ignored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reason())
    }
}

impl Secrets {
    /// An empty set; scrubbing with it changes nothing.
    pub fn new() -> Secrets {
        Secrets::default()
    }

    /// Adds a secret value, or says why it was not added.
    pub fn register(&mut self, value: &str) -> Result<(), Ignored> {
        if value.is_empty() {
            return Err(Ignored::Empty);
        }
        if value.chars().count() < MIN_SECRET_LEN {
            return Err(Ignored::TooShort);
        }
        let value = value.as_bytes();
        if self.values.iter().any(|known| known == value) {
            return Err(Ignored::Duplicate);
        }
        // Longest first, so the first match at a position is the longest one.
        let at = self.values.partition_point(|known| known.len() >= value.len());
        self.values.insert(at, value.to_vec());
        Ok(())
    }

    /// The values of the variables among `vars` whose names say they are secret
    /// ([`is_secret_name`]); values too short to mask are left out, as [`Secrets::register`]
    /// leaves them.
    pub fn of_env<'a>(vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> Secrets {
        let mut secrets = Secrets::new();
        for (name, value) in vars {
            if is_secret_name(name) {
                let _ = secrets.register(value);
            }
        }
        secrets
    }

    /// Whether no secret is registered.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The length in bytes of the longest secret, 0 when empty.
    pub fn max_len(&self) -> usize {
        self.values.first().map_or(0, Vec::len)
    }

    /// Masks every secret in a piece of text (an error message, a log line).
    pub fn scrub(&self, text: &str) -> String {
        let scrubbed = self.scrub_bytes(text.as_bytes());
        // Secrets are whole UTF-8 strings, so matches start and end on char boundaries and
        // the result is valid UTF-8; the lossy path is only a belt for the braces.
        match String::from_utf8(scrubbed) {
            Ok(text) => text,
            Err(error) => String::from_utf8_lossy(error.as_bytes()).into_owned(),
        }
    }

    /// Masks every secret in a complete byte buffer.
    pub fn scrub_bytes(&self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(bytes.len());
        let consumed = self.scrub_into(bytes, true, &mut ScrubState::default(), &mut out);
        debug_assert_eq!(consumed, bytes.len());
        out
    }

    /// A scrubber for one stream of chunks.
    pub fn stream(&self) -> StreamScrubber {
        StreamScrubber { secrets: self.clone(), pending: Vec::new(), state: ScrubState::default() }
    }

    /// Scrubs `bytes` into `out`, continuing from `state`, and returns how many input bytes
    /// were decided and consumed. Unless `at_end`, stops at the first position from which the
    /// rest is a proper prefix of some secret: more input might complete a match there, and
    /// that match would cover the bytes from that position on.
    fn scrub_into(
        &self,
        bytes: &[u8],
        at_end: bool,
        state: &mut ScrubState,
        out: &mut Vec<u8>,
    ) -> usize {
        let limit = if at_end { bytes.len() } else { self.undecided_from(bytes) };
        for (i, &byte) in bytes[..limit].iter().enumerate() {
            // Every match starting here is complete (or `i` would be past `limit`); the
            // longest one reaches furthest.
            if let Some(secret) = self.values.iter().find(|secret| bytes[i..].starts_with(secret)) {
                state.cover_end = state.cover_end.max(i + secret.len());
            }
            if i < state.cover_end {
                if !state.in_mask {
                    out.extend_from_slice(MASK.as_bytes());
                    state.in_mask = true;
                }
            } else {
                out.push(byte);
                state.in_mask = false;
            }
        }
        state.cover_end = state.cover_end.saturating_sub(limit);
        limit
    }

    /// The first position whose tail is a proper prefix of a secret, else `bytes.len()`.
    /// Only the last `max_len - 1` positions can qualify.
    fn undecided_from(&self, bytes: &[u8]) -> usize {
        let first_candidate = bytes.len().saturating_sub(self.max_len().saturating_sub(1));
        (first_candidate..bytes.len())
            .find(|&j| {
                let rest = &bytes[j..];
                self.values
                    .iter()
                    .any(|secret| secret.len() > rest.len() && secret.starts_with(rest))
            })
            .unwrap_or(bytes.len())
    }
}

/// Where scrubbing left off: how far already-found matches reach past the consumed bytes,
/// and whether the last emitted byte was part of a mask (so a covered run that spans two
/// chunks still becomes one mask).
#[derive(Debug, Clone, Copy, Default)]
struct ScrubState {
    cover_end: usize,
    in_mask: bool,
}

/// Scrubs one stream that arrives in chunks. Feed chunks with [`push`](Self::push) and call
/// [`finish`](Self::finish) at end of stream to flush the held-back tail. Holds back only a
/// tail that could still grow into a secret (at most `max_len - 1` bytes), and the
/// concatenated output equals [`Secrets::scrub_bytes`] of the whole stream.
#[derive(Debug, Clone)]
pub struct StreamScrubber {
    secrets: Secrets,
    pending: Vec<u8>,
    state: ScrubState,
}

impl StreamScrubber {
    /// Takes the next chunk and returns what can be released safely now.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut input = std::mem::take(&mut self.pending);
        input.extend_from_slice(chunk);
        let mut out = Vec::with_capacity(input.len());
        let consumed = self.secrets.scrub_into(&input, false, &mut self.state, &mut out);
        self.pending = input.split_off(consumed);
        debug_assert!(self.pending.len() < self.secrets.max_len().max(1));
        out
    }

    /// How many bytes are held back, waiting for the next chunk.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Ends the stream: scrubs and returns the held-back tail.
    pub fn finish(&mut self) -> Vec<u8> {
        let pending = std::mem::take(&mut self.pending);
        let mut out = Vec::with_capacity(pending.len());
        self.secrets.scrub_into(&pending, true, &mut self.state, &mut out);
        self.state = ScrubState::default();
        out
    }
}

/// An [`OutputSink`] adapter that scrubs stdout and stderr separately before passing chunks
/// on. Call [`finish`](Self::finish) when the process has exited, or the held-back tails
/// (never a secret, but possibly the start of one) are lost.
#[derive(Debug)]
pub struct ScrubbingSink<S> {
    inner: S,
    stdout: StreamScrubber,
    stderr: StreamScrubber,
}

impl<S: OutputSink> ScrubbingSink<S> {
    /// Wraps `inner`, masking `secrets`.
    pub fn new(secrets: &Secrets, inner: S) -> ScrubbingSink<S> {
        ScrubbingSink { inner, stdout: secrets.stream(), stderr: secrets.stream() }
    }

    /// Flushes both held-back tails and returns the inner sink.
    pub fn finish(mut self) -> S {
        for stream in [Stream::Stdout, Stream::Stderr] {
            let tail = match stream {
                Stream::Stdout => self.stdout.finish(),
                Stream::Stderr => self.stderr.finish(),
            };
            if !tail.is_empty() {
                self.inner.write(stream, &tail);
            }
        }
        self.inner
    }
}

impl<S: OutputSink> OutputSink for ScrubbingSink<S> {
    fn write(&mut self, stream: Stream, chunk: &[u8]) {
        let released = match stream {
            Stream::Stdout => self.stdout.push(chunk),
            Stream::Stderr => self.stderr.push(chunk),
        };
        if !released.is_empty() {
            self.inner.write(stream, &released);
        }
    }

    fn closed(&self) -> bool {
        self.inner.closed()
    }

    fn status(&mut self, line: &str) {
        self.inner.status(line);
    }
}
