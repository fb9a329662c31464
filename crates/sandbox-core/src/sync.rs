//! Workspace sync, the pure half: for an engine whose sandbox cannot see the host (a pod), what
//! of the current directory goes in and how what the script did comes back. The IO edge (the
//! host walk, the archives, the writes) is the engine's; every decision it takes is a call here.
//!
//! In: [`Planner`] is fed the host walk entry by entry and says, per entry, send or skip:
//! `.git`, paths the `.gitignore` and `.python-sandbox-ignore` files met on the way down
//! ignore ([`Ignore`]), links whose target leaves the workspace (never followed, not even
//! sent: in the sandbox they would point at its own files), and anything that is not a file,
//! directory or link. It counts the bytes and refuses a workspace above the limit with the
//! largest paths and the way out.
//!
//! Out: the sandbox lists its workspace twice with [`LIST_PROGRAM`], right after the sync in
//! and after the run, so the baseline is what the sandbox really holds (its umask, its
//! clock), not the host's view. [`changes`] compares the two listings: what is new or changed
//! is fetched as one archive made by [`PACK_PROGRAM`], what is gone is deleted on the host.
//! Both listings and the archive come from the sandbox, so they are untrusted:
//! [`parse_manifest`] and [`check_member`] refuse absolute paths, `..` and unrequested
//! members, and the engine checks the whole archive before it applies anything. A link the
//! script made that points out of the workspace is listed but never fetched: it stays in the
//! sandbox with a warning ([`Changes::outside_links`]), and the rest of the run's changes
//! still come back. Modes come back without setuid, setgid and sticky bits.

mod ignore;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub use ignore::Ignore;

use crate::Error;

/// The default cap on the bytes synced each way.
pub const DEFAULT_SYNC_LIMIT: u64 = 256 << 20;
/// The ignore files read in every directory of the walk, in this order.
pub const IGNORE_FILES: [&str; 2] = [".gitignore", ".python-sandbox-ignore"];
/// Mode bits a synced file may carry back to the host (no setuid, setgid or sticky).
pub const MODE_MASK: u32 = 0o777;
/// The sandbox's python, which runs the programs below.
pub const SANDBOX_PYTHON: &str = "/usr/bin/python3";

/// `python3 -c LIST_PROGRAM ROOT`: the JSON listing of `ROOT` that [`parse_manifest`] reads.
/// Links are not followed; a file's stamp is its mtime and ctime in nanoseconds (ctime
/// cannot be set by the script, so every write shows), names that are not UTF-8 are counted
/// as skipped.
pub const LIST_PROGRAM: &str = r#"import json, os, stat, sys
root = sys.argv[1]
out, skipped = {}, 0
def walk(rel):
    global skipped
    path = os.path.join(root, rel) if rel else root
    with os.scandir(path) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        r = rel + "/" + e.name if rel else e.name
        try:
            r.encode()
        except UnicodeEncodeError:
            skipped += 1
            continue
        st = e.stat(follow_symlinks=False)
        m = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            out[r] = ["d", m]
            walk(r)
        elif stat.S_ISREG(st.st_mode):
            out[r] = ["f", m, st.st_size, "%d.%d" % (st.st_mtime_ns, st.st_ctime_ns)]
        elif stat.S_ISLNK(st.st_mode):
            out[r] = ["l", os.readlink(os.path.join(path, e.name))]
walk("")
sys.stdout.write(json.dumps({"entries": out, "skipped": skipped}))
"#;

/// `python3 -c PACK_PROGRAM ROOT`, NUL-separated relative paths on stdin: a pax tar of those
/// paths (directories without their contents, links as links) on stdout. A path gone since
/// the listing is left out.
pub const PACK_PROGRAM: &str = r#"import os, sys, tarfile
root = sys.argv[1]
names = [n.decode() for n in sys.stdin.buffer.read().split(b"\0") if n]
with tarfile.open(fileobj=sys.stdout.buffer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
    for name in names:
        try:
            tar.add(os.path.join(root, name), arcname=name, recursive=False)
        except FileNotFoundError:
            pass
"#;

/// What the host walk found at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostKind {
    /// A regular file of this size.
    File {
        /// Bytes.
        size: u64,
    },
    /// A directory (entered only when sent).
    Dir,
    /// A symbolic link, never followed.
    Symlink {
        /// Its target, as read.
        target: String,
    },
    /// A socket, fifo or device.
    Other,
}

/// Why a path stays on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Skip {
    /// `.git` (as git never tracks it).
    Git,
    /// An ignore file names it.
    Ignored,
    /// A link whose target leaves the workspace.
    LinkOutside,
    /// Not a file, directory or link.
    Special,
}

/// What to do with one path of the walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Into the archive (a directory: and walk into it).
    Send,
    /// Left out (a directory: not entered).
    Skip(Skip),
}

/// Decides the sync in, entry by entry, as the engine walks the workspace.
#[derive(Debug, Clone)]
pub struct Planner {
    ignore: Ignore,
    limit: u64,
    bytes: u64,
    files: u64,
    skipped: Vec<(String, Skip)>,
    /// The largest files sent so far, largest first, for the error above the limit.
    largest: Vec<(u64, String)>,
}

/// How many of the largest files the error above the limit names.
const LARGEST_NAMED: usize = 3;

impl Planner {
    /// A plan that refuses more than `limit` bytes of file contents.
    pub fn new(limit: u64) -> Planner {
        Planner {
            ignore: Ignore::new(),
            limit,
            bytes: 0,
            files: 0,
            skipped: Vec::new(),
            largest: Vec::new(),
        }
    }

    /// The contents of an ignore file (one of [`IGNORE_FILES`]) in directory `dir` (relative,
    /// `""` the root); call before deciding the directory's entries.
    pub fn rules(&mut self, dir: &str, text: &str) {
        self.ignore.add(dir, text);
    }

    /// Send or skip `path` (relative, `/`-separated); an error once the files sent exceed the
    /// limit.
    pub fn decide(&mut self, path: &str, kind: &HostKind) -> Result<Verdict, Error> {
        let verdict = self.verdict(path, kind);
        match verdict {
            Verdict::Skip(skip) => self.skipped.push((path.to_owned(), skip)),
            Verdict::Send => {
                if let HostKind::File { size } = kind {
                    self.count(path, *size)?;
                }
            }
        }
        Ok(verdict)
    }

    fn verdict(&self, path: &str, kind: &HostKind) -> Verdict {
        if path.rsplit('/').next() == Some(".git") {
            return Verdict::Skip(Skip::Git);
        }
        if self.ignore.is_ignored(path, *kind == HostKind::Dir) {
            return Verdict::Skip(Skip::Ignored);
        }
        match kind {
            HostKind::Symlink { target } if !link_inside(path, target) => {
                Verdict::Skip(Skip::LinkOutside)
            }
            HostKind::Other => Verdict::Skip(Skip::Special),
            _ => Verdict::Send,
        }
    }

    fn count(&mut self, path: &str, size: u64) -> Result<(), Error> {
        self.bytes = self.bytes.saturating_add(size);
        self.files += 1;
        self.largest.push((size, path.to_owned()));
        self.largest.sort_by(|a, b| b.cmp(a));
        self.largest.truncate(LARGEST_NAMED);
        if self.bytes <= self.limit {
            return Ok(());
        }
        Err(Error::WorkspaceTooLarge {
            limit: self.limit,
            largest: self.largest.iter().map(|(size, path)| (path.clone(), *size)).collect(),
        })
    }

    /// Bytes of file contents sent so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Files sent so far.
    pub fn files(&self) -> u64 {
        self.files
    }

    /// Every path left out, in walk order, with why.
    pub fn skipped(&self) -> &[(String, Skip)] {
        &self.skipped
    }

    /// The user-facing warnings of the plan: the links left out (the ignored paths are what
    /// the user asked for; special files cannot be copied anywhere).
    pub fn warnings(&self) -> Vec<String> {
        let links: Vec<&str> = self
            .skipped
            .iter()
            .filter(|(_, skip)| *skip == Skip::LinkOutside)
            .map(|(path, _)| path.as_str())
            .collect();
        if links.is_empty() {
            return Vec::new();
        }
        vec![format!(
            "links that point outside the workspace are left out of the sync: {}",
            list(&links)
        )]
    }
}

/// Up to five paths in backticks, then how many more: for warnings that name paths.
pub fn list(paths: &[&str]) -> String {
    const SHOWN: usize = 5;
    let mut shown: Vec<String> = paths.iter().take(SHOWN).map(|p| format!("`{p}`")).collect();
    if paths.len() > SHOWN {
        shown.push(format!("{} more", paths.len() - SHOWN));
    }
    shown.join(", ")
}

/// Whether a link at `path` (relative) with `target` resolves, lexically, inside the
/// workspace. Absolute targets never do: the sandbox's workspace is not at the host's path.
/// Lexical is enough because links are only ever recreated as links in the sandbox, where a
/// component that is itself a link is the sandbox's own business; the host follows none.
pub fn link_inside(path: &str, target: &str) -> bool {
    if target.is_empty() || target.starts_with('/') || target.contains('\0') {
        return false;
    }
    let mut depth: usize = path.split('/').count().saturating_sub(1);
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            _ => depth += 1,
        }
    }
    true
}

/// Checks a path the sandbox named: relative, normalized (no empty, `.` or `..` component),
/// no NUL; returns it unchanged.
pub fn check_member(path: &str) -> Result<&str, Error> {
    let reason = if path.is_empty() {
        Some("it is empty")
    } else if path.starts_with('/') {
        Some("it is absolute")
    } else if path.contains('\0') {
        Some("it holds a NUL byte")
    } else if path.split('/').any(|part| part.is_empty() || part == "." || part == "..") {
        Some("it is not a plain relative path (empty, `.` or `..` component)")
    } else {
        None
    };
    match reason {
        Some(reason) => {
            Err(Error::UnsafeSyncPath { path: path.escape_debug().to_string(), reason })
        }
        None => Ok(path),
    }
}

/// One entry of a sandbox listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stat {
    /// A regular file.
    File {
        /// Permission bits (already masked with [`MODE_MASK`]).
        mode: u32,
        /// Bytes.
        size: u64,
        /// Changes whenever the file is written (mtime and ctime).
        stamp: String,
    },
    /// A directory.
    Dir {
        /// Permission bits (masked).
        mode: u32,
    },
    /// A symbolic link.
    Symlink {
        /// Its target.
        target: String,
    },
}

/// A listing: relative path → what is there, sorted.
pub type Manifest = BTreeMap<String, Stat>;

/// Reads [`LIST_PROGRAM`]'s output: the listing and how many names it skipped. Every path
/// is checked ([`check_member`]); a link leaving the workspace is kept in the listing (so
/// the host learns the script made it) and [`changes`] never fetches it.
pub fn parse_manifest(bytes: &[u8]) -> Result<(Manifest, u64), Error> {
    let bad = |reason: String| Error::BadSyncListing { reason };
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
    let entries = value
        .get("entries")
        .and_then(serde_json::Value::as_object)
        .ok_or_else(|| bad("no `entries` object".to_owned()))?;
    let skipped = value.get("skipped").and_then(serde_json::Value::as_u64).unwrap_or(0);
    let mut out = Manifest::new();
    for (path, entry) in entries {
        check_member(path)?;
        let fields = entry.as_array().map(Vec::as_slice).unwrap_or_default();
        let mode = |i: usize| {
            fields
                .get(i)
                .and_then(serde_json::Value::as_u64)
                .and_then(|m| u32::try_from(m).ok())
                .map(|m| m & MODE_MASK)
        };
        let text = |i: usize| fields.get(i).and_then(serde_json::Value::as_str).map(str::to_owned);
        let stat = match fields.first().and_then(serde_json::Value::as_str) {
            Some("d") => mode(1).map(|mode| Stat::Dir { mode }),
            Some("f") => {
                match (mode(1), fields.get(2).and_then(serde_json::Value::as_u64), text(3)) {
                    (Some(mode), Some(size), Some(stamp)) => Some(Stat::File { mode, size, stamp }),
                    _ => None,
                }
            }
            Some("l") => text(1).map(|target| Stat::Symlink { target }),
            _ => None,
        };
        let stat =
            stat.ok_or_else(|| bad(format!("entry `{}` is malformed", path.escape_debug())))?;
        if let Stat::Symlink { target } = &stat
            && target.contains('\0')
        {
            return Err(bad(format!("link `{}` has a NUL in its target", path.escape_debug())));
        }
        out.insert(path.clone(), stat);
    }
    Ok((out, skipped))
}

/// What the sync out does on the host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// New or changed paths to fetch, parents before children.
    pub fetch: Vec<String>,
    /// Paths to delete on the host, children before parents (a path whose kind changed is
    /// deleted, then fetched).
    pub delete: Vec<String>,
    /// Protected paths (`.git`, `.claude`, `.envrc`, ...: [`crate::protect`]) and what lies
    /// below them that the script wrote or deleted: never applied to the host, whose tools
    /// would run what lands there (git's hooks, Claude Code's settings).
    pub refused: Vec<String>,
    /// Links the script made or changed that point out of the workspace: kept in the
    /// sandbox, and the host's path left as it was (on the host such a link would reach its
    /// files; in the sandbox it reached the sandbox's).
    pub outside_links: Vec<String>,
}

impl Changes {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.fetch.is_empty() && self.delete.is_empty()
    }
}

fn same_kind(a: &Stat, b: &Stat) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// What changed between the listing right after the sync in (`before`) and after the run.
pub fn changes(before: &Manifest, after: &Manifest) -> Changes {
    let mut out = Changes::default();
    for (path, now) in after {
        let was = before.get(path);
        if was == Some(now) {
            continue;
        }
        if crate::protect::is_protected_rel(path) {
            out.refused.push(path.clone());
            continue;
        }
        if let Stat::Symlink { target } = now
            && !link_inside(path, target)
        {
            out.outside_links.push(path.clone());
            continue;
        }
        if was.is_some_and(|was| !same_kind(was, now)) {
            out.delete.push(path.clone());
        }
        out.fetch.push(path.clone());
    }
    for path in before.keys() {
        // Below a path that became a link out of the workspace the host keeps its own
        // files: the link is not applied, so neither is what it replaced.
        let kept = out.outside_links.iter().any(|l| path.starts_with(&format!("{l}/")));
        if !after.contains_key(path) && !kept {
            if crate::protect::is_protected_rel(path) {
                out.refused.push(path.clone());
            } else {
                out.delete.push(path.clone());
            }
        }
    }
    out.delete.sort_by(|a, b| b.cmp(a));
    out
}

/// The stdin of [`PACK_PROGRAM`] for `paths`.
pub fn pack_input(paths: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for path in paths {
        out.extend_from_slice(path.as_bytes());
        out.push(0);
    }
    out
}

/// The argv of `program` ([`LIST_PROGRAM`] or [`PACK_PROGRAM`]) on the sandbox's `root`.
pub fn program_argv(program: &str, root: &str) -> Vec<String> {
    [SANDBOX_PYTHON, "-c", program, root].map(str::to_owned).to_vec()
}

/// A byte count for people: `812 bytes`, `3.4 KiB`, `256 MiB`, `1.5 GiB`.
pub fn approx_bytes(bytes: u64) -> String {
    const UNITS: [&str; 3] = ["KiB", "MiB", "GiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    let text = format!("{value:.1}");
    let text = text.strip_suffix(".0").unwrap_or(&text);
    format!("{text} {}", UNITS[unit])
}
