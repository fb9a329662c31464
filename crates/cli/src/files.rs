//! What a run did to the workspace, for `run --json` and the MCP server's `run_script`: the
//! files it wrote and deleted (`.git` and every other protected path included: a change there
//! is what a user most needs to see), and the protected paths the script was refused (read
//! from its own error messages as they pass through the CLI: the refusal is the kernel's).
//!
//! Kept cheap for large workspaces: the walk before the run reads directories and stats the
//! first [`STAT_LIMIT`] files only, and the walk after it stats each file once and compares
//! its change time with the run's start on the clock the kernel stamps it with (a script
//! cannot set a change time back). Deleted files are the names of the first walk missing from the
//! second. Symlinks are not followed, and the CLI's own stdout and stderr are left out when
//! they are files in the workspace (`run --json 2>log`): what the CLI writes is not the
//! script's.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::AsFd as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use sandbox_core::{OutputSink, Stream};

/// At most this many entries are looked at, so a huge workspace cannot stall a run.
const MAX_ENTRIES: usize = 50_000;

/// The walk before the run stats at most this many files. When it stats them all and every
/// change time lies before the walk, the run's start is the walk's own tick and no run waits
/// for the clock's next one ([`Snapshot::settle`]); a larger workspace is listed by names only
/// and waits.
const STAT_LIMIT: usize = 4_096;

/// The workspace before the run: every directory's entries, and when the run started.
pub(crate) struct Snapshot {
    /// Relative directory path (`""` for the top) → its modification time and its entries
    /// (name, is a directory). A directory whose time is the same after the run had no entry
    /// added, removed or renamed.
    dirs: BTreeMap<String, (Stamp, Vec<(String, bool)>)>,
    /// When the walk began (the later of the two real-time clocks).
    before: Stamp,
    /// The coarse clock's tick the walk began in, and whether everything the walk saw was
    /// stamped before it (every file statted, none changed in that tick or later): then the
    /// run may start at that tick without waiting for the next.
    tick: Stamp,
    quiet: bool,
    /// The run's start on the coarse real-time clock, which stamps change times: the first
    /// tick after `before` ([`Snapshot::settle`]).
    start: Option<Stamp>,
    own: Vec<(u64, u64)>,
}

/// What the run changed, sorted.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Changes {
    /// Files created or changed (content, mode, owner, or renamed into place).
    pub(crate) written: Vec<String>,
    /// Files that were there before and are gone (a deleted directory lists its files).
    pub(crate) deleted: Vec<String>,
}

pub(crate) fn snapshot(root: &Path) -> Snapshot {
    let mut snapshot = unsettled(root);
    snapshot.settle();
    snapshot
}

/// The walk of [`snapshot`] without the wait for the clock's next tick: [`Snapshot::settle`]
/// follows as the engine lets the script go (`RunIo::started`), by which time the tick has
/// passed (the walk comes before the engine is chosen, the settle after the sandbox is set
/// up), so a warm run does not wait for it.
pub(crate) fn unsettled(root: &Path) -> Snapshot {
    // The later of the coarse clock and the precise one: where the kernel stamps a change with
    // a precise time (multigrain timestamps, once a file's times were read) while the coarse
    // clock lags behind (no tick on an idle CPU), a file written just before the run is
    // stamped past the coarse clock's last tick. A CI run saw `case.py`, written by the
    // harness before it started the CLI, listed as written by the run.
    let tick = coarse_now();
    let before = tick.max(precise_now());
    let mut dirs = BTreeMap::new();
    let mut quiet = true;
    walk(root, STAT_LIMIT, &mut |rel, mtime, entries| {
        quiet &= mtime < tick;
        for (_, kind, ctime) in entries {
            if *kind == FileType::RegularFile {
                quiet &= ctime.is_some_and(|c| c < tick);
            }
        }
        let names = entries.iter().map(|(n, t, _)| (n.clone(), *t == FileType::Directory));
        dirs.insert(rel.to_owned(), (mtime, names.collect()));
    });
    Snapshot { dirs, before, tick, quiet, start: None, own: own_outputs() }
}

/// A run's `RunIo::started`: settles `before`, if the run keeps one.
pub(crate) fn settler(before: Option<&mut Snapshot>) -> impl FnMut() + Send + '_ {
    let mut before = before;
    move || {
        if let Some(before) = before.as_deref_mut() {
            before.settle();
        }
    }
}

impl Snapshot {
    /// Dates the run's start: every change the run makes from now on is stamped at or after
    /// it, every change before the walk before it. Where the walk saw every file stamped
    /// before the tick it began in, that tick is the start (a change the run makes is stamped
    /// at or after it, by either clock); otherwise this waits for the coarse clock's first tick
    /// after the walk began (a median 5 ms here: the coarse clock lags the precise one by up to
    /// a tick), which tells a file written just before the run from one the run wrote.
    pub(crate) fn settle(&mut self) {
        if self.start.is_none() {
            self.start = Some(if self.quiet { self.tick } else { next_tick(self.before) });
        }
    }

    /// The run's start; a snapshot never settled (an engine that does not say when its script
    /// starts: a container's or a pod's, which starts long after the walk's tick) counts from
    /// its walk.
    fn start(&self) -> Stamp {
        self.start.unwrap_or(self.before)
    }
}

fn coarse_now() -> Stamp {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
    (t.tv_sec, t.tv_nsec)
}

fn precise_now() -> Stamp {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Realtime);
    (t.tv_sec, t.tv_nsec)
}

/// The first tick of the coarse clock after `before`, waited for when the walk was quicker
/// than one tick (1 to 10 ms, the kernel's HZ). Every change the run makes is stamped at or
/// after it, by either clock. A file written just before the run, in the
/// tick the snapshot began (`cat > s.py && python-sandbox run --json s.py`), is stamped with
/// that tick, so the run's start must lie past it for the file not to count as written.
fn next_tick(before: Stamp) -> Stamp {
    loop {
        let now = coarse_now();
        if now > before {
            return now;
        }
        std::thread::sleep(std::time::Duration::from_micros(250));
    }
}

/// Files written and deleted since `before`.
pub(crate) fn changes_since(before: &Snapshot, root: &Path) -> Changes {
    let mut written = Vec::new();
    let mut deleted = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    walk(root, usize::MAX, &mut |rel, mtime, entries| {
        for (name, kind, ctime) in entries {
            if *kind == FileType::RegularFile && ctime.is_some_and(|c| c >= before.start()) {
                written.push(join(rel, name));
            }
        }
        seen.insert(rel.to_owned());
        // Only a directory whose entries changed is compared name by name: its time moved,
        // or lies in the tick the run started in (a change then would leave it the same).
        if let Some((was, old)) = before.dirs.get(rel)
            && (*was != mtime || mtime >= before.start())
        {
            let now: BTreeSet<&str> = entries.iter().map(|(n, _, _)| n.as_str()).collect();
            let gone = old.iter().filter(|(n, is_dir)| !is_dir && !now.contains(n.as_str()));
            deleted.extend(gone.map(|(n, _)| join(rel, n)));
        }
    });
    written.retain(|p| !before.own.iter().any(|own| is_own(root, p, *own)));
    // A directory that is gone took its files with it.
    for (dir, (_, entries)) in before.dirs.iter().filter(|(dir, _)| !seen.contains(*dir)) {
        deleted.extend(entries.iter().filter(|(_, is_dir)| !is_dir).map(|(n, _)| join(dir, n)));
    }
    written.sort();
    deleted.sort();
    Changes { written, deleted }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() { name.to_owned() } else { format!("{dir}/{name}") }
}

fn is_own(root: &Path, rel: &str, own: (u64, u64)) -> bool {
    std::fs::symlink_metadata(root.join(rel)).is_ok_and(|m| (m.dev(), m.ino()) == own)
}

/// One directory's entries as the walk saw them: name, type, and a regular file's change time.
type Entries = [(String, FileType, Option<Stamp>)];

/// A time as the kernel stamps it: seconds and nanoseconds.
type Stamp = (i64, i64);

/// Reads every directory below `root` (not following links, not leaving its filesystem),
/// calling `each` with its relative path and entries; stats the first `stat_files` regular
/// files for their change times (the second walk: all of them).
fn walk(root: &Path, stat_files: usize, each: &mut dyn FnMut(&str, Stamp, &Entries)) {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let Ok(top) = rustix::fs::open(root, flags, Mode::empty()) else { return };
    let Ok(dev) = rustix::fs::fstat(&top).map(|s| s.st_dev) else { return };
    let mut stack = vec![(top, String::new())];
    let mut seen = 0usize;
    let mut statted = 0usize;
    while let Some((fd, rel)) = stack.pop() {
        let Ok(st) = rustix::fs::fstat(&fd) else { continue };
        let mtime = (st.st_mtime, i64::try_from(st.st_mtime_nsec).unwrap_or(0));
        let Ok(dir) = rustix::fs::Dir::read_from(&fd) else { continue };
        let mut entries = Vec::new();
        for entry in dir.flatten() {
            let Ok(name) = entry.file_name().to_str() else { continue };
            if name == "." || name == ".." {
                continue;
            }
            seen += 1;
            if seen > MAX_ENTRIES {
                break;
            }
            let mut kind = entry.file_type();
            let mut ctime = None;
            let change_time = kind == FileType::RegularFile && statted < stat_files;
            if kind == FileType::Unknown || change_time {
                // One stat per file: its type where the filesystem gives none, and the
                // change time the walks compare.
                statted += 1;
                if let Ok(st) = rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                    kind = FileType::from_raw_mode(st.st_mode);
                    ctime = Some((st.st_ctime, i64::try_from(st.st_ctime_nsec).unwrap_or(0)));
                }
            }
            if kind == FileType::Directory {
                let child = rustix::fs::openat(&fd, name, flags | OFlags::NOFOLLOW, Mode::empty());
                if let Ok(child) = child
                    && rustix::fs::fstat(&child).is_ok_and(|s| s.st_dev == dev)
                {
                    stack.push((child, join(&rel, name)));
                }
            }
            entries.push((name.to_owned(), kind, ctime));
        }
        each(&rel, mtime, &entries);
        if seen > MAX_ENTRIES {
            return;
        }
    }
}

/// Device and inode of our stdout and stderr where they are regular files.
fn own_outputs() -> Vec<(u64, u64)> {
    let fds = [
        std::io::stdout().as_fd().try_clone_to_owned(),
        std::io::stderr().as_fd().try_clone_to_owned(),
    ];
    fds.into_iter()
        .filter_map(|fd| std::fs::File::from(fd.ok()?).metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| (m.dev(), m.ino()))
        .collect()
}

/// A sink that passes everything on and reads the script's output as it goes, whole lines
/// at a time: the protected paths its error output says it was refused
/// (`sandbox_core::protect::refusals_in`) and, in a run whose network is off, whether it
/// failed on a name lookup or a connect (`crate::netoff::symptom`). At most [`LINE_LIMIT`]
/// bytes of an unfinished line are kept per stream, so a script printing without newlines
/// costs no memory.
pub(crate) struct Watch<S> {
    inner: S,
    partial: [Vec<u8>; 2],
    seen: Seen,
    net_off: bool,
}

/// What a [`Watch`] read in the script's output.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The protected paths the script was refused, in order of appearance.
    pub(crate) refused: Vec<String>,
    /// The run's network is off and the script's output shows a lookup or connect failing.
    pub(crate) net_failure: bool,
}

/// Longer lines are cut to this (an error message naming a path is far shorter).
const LINE_LIMIT: usize = 4096;

impl<S> Watch<S> {
    /// A watch of a run with network `net`.
    pub(crate) fn new(inner: S, net: sandbox_core::Net) -> Watch<S> {
        let net_off = net == sandbox_core::Net::Off;
        Watch { inner, partial: [Vec::new(), Vec::new()], seen: Seen::default(), net_off }
    }

    /// The inner sink and what was read.
    pub(crate) fn finish(mut self) -> (S, Seen) {
        for i in 0..2 {
            let tail = std::mem::take(&mut self.partial[i]);
            self.line(&tail);
        }
        (self.inner, self.seen)
    }

    fn line(&mut self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        sandbox_core::protect::refusals_in(&text, &mut self.seen.refused);
        if self.net_off && !self.seen.net_failure {
            self.seen.net_failure = crate::netoff::symptom(&text);
        }
    }
}

impl<S: OutputSink> OutputSink for Watch<S> {
    fn write(&mut self, stream: Stream, chunk: &[u8]) {
        self.inner.write(stream, chunk);
        let i = usize::from(stream == Stream::Stderr);
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            let take = end.min(LINE_LIMIT.saturating_sub(self.partial[i].len()));
            self.partial[i].extend_from_slice(&rest[..take]);
            let line = std::mem::take(&mut self.partial[i]);
            self.line(&line);
            self.partial[i] = line;
            self.partial[i].clear();
            rest = &rest[end + 1..];
        }
        let take = rest.len().min(LINE_LIMIT.saturating_sub(self.partial[i].len()));
        self.partial[i].extend_from_slice(&rest[..take]);
    }

    fn closed(&self) -> bool {
        self.inner.closed()
    }

    fn status(&mut self, line: &str) {
        self.inner.status(line);
    }
}

/// The closing line of a run off a terminal (without `--json`, whose summary lists them): the
/// files it wrote and deleted, at most [`CLOSING_NAMES`] of each; `None` when it changed
/// nothing, so a run that writes nothing prints nothing.
pub(crate) fn closing_line(changes: &Changes) -> Option<String> {
    let list = |names: &[String]| {
        let mut text = names.iter().take(CLOSING_NAMES).cloned().collect::<Vec<_>>().join(", ");
        if names.len() > CLOSING_NAMES {
            text.push_str(&format!(" and {} more", names.len() - CLOSING_NAMES));
        }
        text
    };
    let parts: Vec<String> =
        [("files written", &changes.written), ("files deleted", &changes.deleted)]
            .into_iter()
            .filter(|(_, names)| !names.is_empty())
            .map(|(what, names)| format!("{what}: {}", list(names)))
            .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Names listed of each kind in [`closing_line`]: the line stays short (Claude Code's Bash
/// shows both streams, and `run --json` lists them all).
const CLOSING_NAMES: usize = 10;

/// The `note:` for the protected paths a script was refused, and the `hint:` that widens.
pub(crate) fn refusal_note(refused: &[String]) -> Option<(String, String)> {
    let first = refused.first()?;
    let top = protected_top(first);
    let why = sandbox_core::protect::protected_component(Path::new(first)).map_or("", |p| p.why);
    let listed: Vec<String> = refused.iter().take(5).map(|p| format!("`{p}`")).collect();
    let more =
        if refused.len() > 5 { format!(" and {} more", refused.len() - 5) } else { String::new() };
    Some((
        format!(
            "the script was refused writing {}{more}: protected paths are read-only in every sandbox ({why})",
            listed.join(", ")
        ),
        format!(
            "to let a script write it on purpose, mount it read-write: `--mount ./{top}:rw --approve`"
        ),
    ))
}

/// `path` up to and including its first protected component (`sub/.git` of `sub/.git/config`).
fn protected_top(path: &str) -> String {
    let mut out = Vec::new();
    for part in path.split('/') {
        out.push(part);
        if sandbox_core::protect::protected_name(part).is_some() {
            break;
        }
    }
    out.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_settled_later_still_tells_writes_before_it_from_writes_after() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::write(root.join("before.txt"), "x").unwrap();
        // As a run does it: the walk, then the engine's choice and prepare, then the settle.
        let mut before = unsettled(root);
        std::fs::write(root.join("meanwhile.txt"), "x").unwrap();
        before.settle();
        let start = before.start.expect("settled");
        // `before.txt` lies in the walk's tick, or before it when a tick passed in between.
        if before.quiet {
            assert_eq!(start, before.tick, "a quiet walk starts the run at its tick");
        } else {
            assert!(start > before.before, "the start is a tick after the walk");
        }
        std::fs::write(root.join("during.txt"), "y").unwrap();
        let changes = changes_since(&before, root);
        assert!(changes.written.contains(&"during.txt".to_owned()), "{changes:?}");
        assert!(!changes.written.contains(&"before.txt".to_owned()), "{changes:?}");
    }

    #[test]
    fn a_workspace_that_changed_before_the_walks_tick_starts_the_run_at_it_without_a_wait() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir(root.join("sub")).unwrap();
        for f in ["old.txt", "edit.txt", "sub/deep.txt"] {
            std::fs::write(root.join(f), "x").unwrap();
        }
        // Past two ticks of the coarse clock (4 ms at HZ=250, 10 ms at HZ=100): every stamp
        // above lies before the tick the walk begins in.
        std::thread::sleep(std::time::Duration::from_millis(25));
        let mut before = unsettled(root);
        assert!(before.quiet, "nothing changed in the walk's tick");
        before.settle();
        assert_eq!(before.start, Some(before.tick), "no wait for the next tick");
        std::fs::write(root.join("edit.txt"), "y").unwrap();
        std::fs::write(root.join("sub/new.txt"), "n").unwrap();
        let changes = changes_since(&before, root);
        assert_eq!(changes.written, ["edit.txt", "sub/new.txt"], "{changes:?}");
        // A file written in the walk's tick makes the next walk wait for the next tick. The
        // write and the walk are tried again when a tick passed between them.
        let mut before = (0..100)
            .map(|_| {
                std::fs::write(root.join("just-now.txt"), "x").unwrap();
                (ctime(&root.join("just-now.txt")), unsettled(root))
            })
            .find(|(stamp, walk)| *stamp >= walk.tick)
            .map(|(_, walk)| walk)
            .expect("a write and a walk in one tick");
        assert!(!before.quiet);
        before.settle();
        assert!(before.start.is_some_and(|s| s > before.before));
        assert!(!changes_since(&before, root).written.contains(&"just-now.txt".to_owned()));
    }

    fn ctime(path: &Path) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).unwrap();
        (meta.ctime(), meta.ctime_nsec())
    }

    #[test]
    fn a_workspace_past_the_stat_limit_waits_for_the_tick() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        for i in 0..=STAT_LIMIT {
            std::fs::write(root.join(format!("f{i}")), "").unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
        assert!(!unsettled(root).quiet, "a file not statted may have changed in the tick");
    }

    #[test]
    fn writes_and_deletions_are_found_in_git_too() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(root.join("data/old")).unwrap();
        for f in ["keep.txt", "edit.txt", "gone.txt", "data/old/a", "data/old/b", ".git/config"] {
            std::fs::write(root.join(f), "x").unwrap();
        }
        // No pause: the files above were stamped in the tick the snapshot begins in, and
        // the writes below come right after it; neither may be mistaken for the other.
        let before = snapshot(root);
        std::fs::write(root.join("edit.txt"), "y").unwrap();
        std::fs::write(root.join("new.txt"), "n").unwrap();
        std::fs::write(root.join(".git/hooks/pre-commit"), "#!/bin/sh").unwrap();
        std::fs::remove_file(root.join("gone.txt")).unwrap();
        std::fs::remove_dir_all(root.join("data/old")).unwrap();
        std::fs::rename(root.join("keep.txt"), root.join("kept.txt")).unwrap();
        let changes = changes_since(&before, root);
        assert_eq!(
            changes,
            Changes {
                written: [".git/hooks/pre-commit", "edit.txt", "kept.txt", "new.txt"]
                    .map(String::from)
                    .to_vec(),
                deleted: ["data/old/a", "data/old/b", "gone.txt", "keep.txt"]
                    .map(String::from)
                    .to_vec(),
            }
        );
    }

    #[test]
    fn the_watch_reads_refusals_from_whole_lines_and_keeps_no_long_line() {
        let mut seen = Vec::new();
        let chunks: [(Stream, &[u8]); 4] = [
            (Stream::Stderr, b"OSError: [Errno 30] Read-only file sys"),
            (Stream::Stderr, b"tem: '.git/config'\nnext"),
            (Stream::Stdout, &[b'a'; 1 << 20]),
            (Stream::Stderr, b" [Errno 30] Read-only file system: '.envrc'"),
        ];
        let mut watch = Watch::new(
            |_: Stream, chunk: &[u8]| seen.extend_from_slice(chunk),
            sandbox_core::Net::On,
        );
        for (stream, chunk) in chunks {
            watch.write(stream, chunk);
            assert!(watch.partial.iter().all(|p| p.len() <= LINE_LIMIT));
        }
        let (_, found) = watch.finish();
        assert_eq!(found.refused, [".git/config", ".envrc"]);
        assert!(!found.net_failure);
        assert_eq!(seen.len(), chunks.iter().map(|(_, c)| c.len()).sum::<usize>());
    }

    #[test]
    fn the_watch_finds_a_failed_lookup_only_with_the_network_off() {
        let chunks: [(Stream, &[u8]); 3] = [
            (Stream::Stdout, b"fetching\n"),
            (Stream::Stderr, b"socket.gaierror: [Errno -3] Temporary fail"),
            (Stream::Stderr, b"ure in name resolution\n"),
        ];
        for (net, expected) in [(sandbox_core::Net::Off, true), (sandbox_core::Net::On, false)] {
            let mut watch = Watch::new(|_: Stream, _: &[u8]| {}, net);
            for (stream, chunk) in chunks {
                watch.write(stream, chunk);
            }
            assert_eq!(watch.finish().1.net_failure, expected, "{net:?}");
        }
        // The last line, without its newline, is read too.
        let mut watch = Watch::new(|_: Stream, _: &[u8]| {}, sandbox_core::Net::Off);
        watch.write(Stream::Stdout, b"OSError: [Errno 101] Network is unreachable");
        assert!(watch.finish().1.net_failure);
    }

    #[test]
    fn the_closing_line_names_what_changed_and_only_that() {
        let names = |n: usize| (0..n).map(|i| format!("f{i}.txt")).collect::<Vec<_>>();
        assert_eq!(closing_line(&Changes::default()), None);
        let written = Changes { written: names(2), deleted: Vec::new() };
        assert_eq!(closing_line(&written).as_deref(), Some("files written: f0.txt, f1.txt"));
        let deleted = Changes { written: Vec::new(), deleted: names(1) };
        assert_eq!(closing_line(&deleted).as_deref(), Some("files deleted: f0.txt"));
        let many = Changes { written: names(12), deleted: names(1) };
        assert_eq!(
            closing_line(&many).as_deref(),
            Some(
                "files written: f0.txt, f1.txt, f2.txt, f3.txt, f4.txt, f5.txt, f6.txt, f7.txt, f8.txt, f9.txt and 2 more; files deleted: f0.txt"
            )
        );
    }

    #[test]
    fn the_note_names_the_paths_and_the_mount_that_widens() {
        let (note, hint) = refusal_note(&["sub/.git/hooks/x".to_owned()]).unwrap();
        assert!(
            note.contains("`sub/.git/hooks/x`") && note.contains("git runs its hooks"),
            "{note}"
        );
        assert_eq!(
            hint,
            "to let a script write it on purpose, mount it read-write: `--mount ./sub/.git:rw --approve`"
        );
        assert!(refusal_note(&[]).is_none());
    }
}
