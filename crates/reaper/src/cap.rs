//! The size cap of a cache whose entries share files: which entries to remove, least recently
//! used first, to bring the cache under its cap. Pure: every fact is an argument.
//!
//! A prepared environment's files are hard links into the package cache, so an environment
//! alone frees little (its bytecode, its scripts) and a package entry that an environment
//! still links frees nothing. Sizes are therefore counted per file identity: an entry frees
//! the files that no remaining entry links, and a package goes only once no remaining entry
//! links any of its files (it would free little more than its directories, which are never
//! linked). An engine reports each removable entry as a
//! [`CacheEntry`] with the identities of its files, and pins what may not go (a run's
//! environment, the cache's other files) as an entry [`CacheEntry::in_use`].
//!
//! The choice ([`over_cap`]) is a sequence that does not depend on the cap, cut where the
//! cache fits: a smaller cap removes a superset (property-tested). A package entry is as
//! recent as the most recent environment that links one of its files.

use std::collections::HashMap;
use std::fmt;

/// A file by identity: device and inode. Hard links share one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

/// What an entry is; package entries take their last use from the environments linking them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A prepared environment.
    Environment,
    /// One package unpacked in the package cache.
    Package,
    /// Anything else of the cache: never removed, only counted.
    Other,
}

impl EntryKind {
    /// Lower case, for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Environment => "environment",
            EntryKind::Package => "package",
            EntryKind::Other => "other",
        }
    }
}

/// One part of the cache as an engine sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheEntry {
    /// The engine's name for it, handed back in [`CapAction`].
    pub id: String,
    /// What it is.
    pub kind: EntryKind,
    /// Last use, unix seconds (for a package: when it was unpacked).
    pub last_used: u64,
    /// Something uses it now, or it may never go: kept.
    pub in_use: bool,
    /// Its files (a file linked twice in the entry appears twice) and the disk each takes.
    pub files: Vec<(FileId, u64)>,
}

/// One entry to remove for the cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapAction {
    /// [`CacheEntry::id`].
    pub id: String,
    /// [`CacheEntry::kind`].
    pub kind: EntryKind,
    /// The bytes its removal frees (files no remaining entry links).
    pub freed: u64,
    /// The cache's size before its removal.
    pub size_before: u64,
    /// The cap.
    pub cap: u64,
}

impl fmt::Display for CapAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "least recently used, the cache is {} of its {} cap; frees {}",
            human_bytes(self.size_before),
            human_bytes(self.cap),
            human_bytes(self.freed)
        )
    }
}

/// What the cap decides: the entries to remove, in order, and the size the cache has after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapPlan {
    /// Entries to remove, least recently used first.
    pub actions: Vec<CapAction>,
    /// The cache's size once `gone` and `actions` are removed.
    pub size_after: u64,
}

/// `512 B`, `12.0 KiB`, `3.4 GiB`: binary units, one decimal.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// The size of everything in `entries`, each file once.
pub fn distinct_size(entries: &[CacheEntry]) -> u64 {
    let mut seen: HashMap<FileId, u64> = HashMap::new();
    for (id, bytes) in entries.iter().flat_map(|e| &e.files) {
        seen.insert(*id, *bytes);
    }
    seen.values().sum()
}

/// The entries to remove, least recently used first, until the cache (each file counted once,
/// every entry given, in use or not) is at most `cap` bytes. Entries named in `gone` are removed
/// first (an age-based prune chose them) and are not listed again. An entry whose removal would
/// free nothing now, or a package another entry links a file of, is passed over and looked at again after each removal. When nothing more
/// can go, the plan stops above the cap; [`CapPlan::size_after`] says where.
pub fn over_cap(cap: u64, entries: &[CacheEntry], gone: &[String]) -> CapPlan {
    // How many links of each file the remaining entries hold, and its size.
    let mut links: HashMap<FileId, (u32, u64)> = HashMap::new();
    for (id, bytes) in entries.iter().flat_map(|e| &e.files) {
        let slot = links.entry(*id).or_insert((0, *bytes));
        slot.0 += 1;
    }
    let mut size: u64 = links.values().map(|(_, bytes)| bytes).sum();
    let counted: Vec<HashMap<FileId, u32>> = entries
        .iter()
        .map(|e| {
            let mut own = HashMap::new();
            for (id, _) in &e.files {
                *own.entry(*id).or_insert(0) += 1;
            }
            own
        })
        .collect();
    let freed_by = |links: &HashMap<FileId, (u32, u64)>, own: &HashMap<FileId, u32>| -> u64 {
        own.iter()
            .filter(|(id, n)| links.get(*id).is_some_and(|(left, _)| left == *n))
            .map(|(id, _)| links[id].1)
            .sum()
    };
    let remove = |links: &mut HashMap<FileId, (u32, u64)>, own: &HashMap<FileId, u32>| {
        for (id, n) in own {
            if let Some(slot) = links.get_mut(id) {
                slot.0 = slot.0.saturating_sub(*n);
            }
        }
    };
    for (i, entry) in entries.iter().enumerate() {
        if gone.contains(&entry.id) {
            size -= freed_by(&links, &counted[i]);
            remove(&mut links, &counted[i]);
        }
    }

    let recency = last_uses(entries);
    let mut order: Vec<usize> = (0..entries.len())
        .filter(|&i| {
            let e = &entries[i];
            !e.in_use && e.kind != EntryKind::Other && !gone.contains(&e.id)
        })
        .collect();
    order.sort_by(|&a, &b| {
        recency[a].cmp(&recency[b]).then_with(|| entries[a].id.cmp(&entries[b].id))
    });

    let mut actions = Vec::new();
    while size > cap {
        let next = order.iter().position(|&i| {
            let linked = entries[i].kind == EntryKind::Package && shared(&links, &counted[i]);
            !linked && freed_by(&links, &counted[i]) > 0
        });
        let Some(pos) = next else { break };
        let i = order.remove(pos);
        let freed = freed_by(&links, &counted[i]);
        actions.push(CapAction {
            id: entries[i].id.clone(),
            kind: entries[i].kind,
            freed,
            size_before: size,
            cap,
        });
        remove(&mut links, &counted[i]);
        size -= freed;
    }
    CapPlan { actions, size_after: size }
}

/// Whether another remaining entry links one of `own`'s files. A package an environment links
/// stays: removing it would free only its directories and cost a download later.
fn shared(links: &HashMap<FileId, (u32, u64)>, own: &HashMap<FileId, u32>) -> bool {
    own.iter().any(|(id, n)| links.get(id).is_some_and(|(left, _)| left > n))
}

/// Each entry's last use for the order: its own, and for a package the latest of the
/// environments that link one of its files.
fn last_uses(entries: &[CacheEntry]) -> Vec<u64> {
    let mut env_use: HashMap<FileId, u64> = HashMap::new();
    for e in entries.iter().filter(|e| e.kind == EntryKind::Environment) {
        for (id, _) in &e.files {
            let slot = env_use.entry(*id).or_insert(0);
            *slot = (*slot).max(e.last_used);
        }
    }
    entries
        .iter()
        .map(|e| match e.kind {
            EntryKind::Package => e
                .files
                .iter()
                .filter_map(|(id, _)| env_use.get(id))
                .copied()
                .fold(e.last_used, u64::max),
            _ => e.last_used,
        })
        .collect()
}
