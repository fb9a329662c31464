//! The size cap: scenarios of environments sharing the package cache's files, and properties.

use proptest::prelude::*;
use reaper::{CacheEntry, CapPlan, EntryKind, FileId, distinct_size, human_bytes, over_cap};

const MIB: u64 = 1 << 20;

fn file(ino: u64) -> FileId {
    FileId { dev: 1, ino }
}

fn entry(id: &str, kind: EntryKind, last_used: u64, files: &[(u64, u64)]) -> CacheEntry {
    CacheEntry {
        id: id.to_owned(),
        kind,
        last_used,
        in_use: false,
        files: files.iter().map(|&(ino, mib)| (file(ino), mib * MIB)).collect(),
    }
}

/// Two packages, three environments linking them, and the cache's own files.
fn cache() -> Vec<CacheEntry> {
    vec![
        // numpy: 60 MiB unpacked; six: 1 MiB.
        entry("archive/numpy", EntryKind::Package, 10, &[(1, 40), (2, 20)]),
        entry("archive/six", EntryKind::Package, 10, &[(3, 1)]),
        // Each environment links what it installs and owns its bytecode.
        entry("env-old-numpy", EntryKind::Environment, 100, &[(1, 40), (2, 20), (10, 5)]),
        entry("env-six", EntryKind::Environment, 200, &[(3, 1), (11, 1)]),
        entry("env-new-numpy", EntryKind::Environment, 300, &[(1, 40), (2, 20), (12, 5)]),
        entry("other", EntryKind::Other, 0, &[(100, 10)]),
    ]
}

fn ids(plan: &CapPlan) -> Vec<&str> {
    plan.actions.iter().map(|a| a.id.as_str()).collect()
}

#[test]
fn each_file_counts_once() {
    // 60 + 1 + 5 + 1 + 5 + 10.
    assert_eq!(distinct_size(&cache()), 82 * MIB);
}

#[test]
fn under_the_cap_nothing_goes() {
    let plan = over_cap(82 * MIB, &cache(), &[]);
    assert!(plan.actions.is_empty());
    assert_eq!(plan.size_after, 82 * MIB);
}

#[test]
fn least_recently_used_first_and_a_linked_package_waits_for_its_environments() {
    // The oldest environment frees only its bytecode: numpy's files are still linked by the
    // newer one.
    let plan = over_cap(80 * MIB, &cache(), &[]);
    assert_eq!(ids(&plan), ["env-old-numpy"]);
    assert_eq!(plan.size_after, 77 * MIB);

    // six's package is as recent as env-six (200) and frees nothing while env-six links it:
    // env-six goes, then six's package.
    let plan = over_cap(75 * MIB, &cache(), &[]);
    assert_eq!(ids(&plan), ["env-old-numpy", "env-six", "archive/six"]);
    assert_eq!(plan.actions[1].freed, MIB);
    assert_eq!(plan.actions[2].freed, MIB);
    assert_eq!(plan.size_after, 75 * MIB);

    // Down to the cache's own files: everything removable goes, numpy's package last (it
    // takes the last use of env-new-numpy, and frees its files only once that is gone).
    let plan = over_cap(0, &cache(), &[]);
    assert_eq!(
        ids(&plan),
        ["env-old-numpy", "env-six", "archive/six", "env-new-numpy", "archive/numpy"]
    );
    assert_eq!(plan.actions[4].freed, 60 * MIB);
    assert_eq!(plan.size_after, 10 * MIB, "the cache's other files stay");
}

#[test]
fn a_package_an_environment_links_stays_though_its_directories_would_free_a_little() {
    // The package's directory (inode 4) is its own: never linked.
    let entries = vec![
        entry("archive/six", EntryKind::Package, 10, &[(3, 1), (4, 1)]),
        entry("env-six", EntryKind::Environment, 200, &[(3, 1), (11, 1)]),
    ];
    let mut held = entries.clone();
    held[1].in_use = true;
    assert!(over_cap(0, &held, &[]).actions.is_empty());
    assert_eq!(ids(&over_cap(0, &entries, &[])), ["env-six", "archive/six"]);
}

#[test]
fn in_use_entries_stay_and_pin_their_files() {
    let mut entries = cache();
    entries.iter_mut().find(|e| e.id == "env-new-numpy").unwrap().in_use = true;
    let plan = over_cap(0, &entries, &[]);
    assert_eq!(ids(&plan), ["env-old-numpy", "env-six", "archive/six"]);
    assert_eq!(plan.size_after, 75 * MIB, "numpy's package stays: a run links it");
}

#[test]
fn entries_an_age_prune_chose_go_first_and_are_not_listed_again() {
    let gone = vec!["env-six".to_owned()];
    let plan = over_cap(75 * MIB, &cache(), &gone);
    // env-six's bytecode is gone already: 81 MiB; then the oldest environment and six's
    // package (nothing links it now).
    assert_eq!(ids(&plan), ["env-old-numpy", "archive/six"]);
    assert_eq!(plan.actions[0].size_before, 81 * MIB);
    assert_eq!(plan.size_after, 75 * MIB);
}

#[test]
fn reasons_and_sizes_read_as_people_write_them() {
    assert_eq!(human_bytes(512), "512 B");
    assert_eq!(human_bytes(1536), "1.5 KiB");
    assert_eq!(human_bytes(5 << 30), "5.0 GiB");
    let plan = over_cap(80 * MIB, &cache(), &[]);
    assert_eq!(
        plan.actions[0].to_string(),
        "least recently used, the cache is 82.0 MiB of its 80.0 MiB cap; frees 5.0 MiB"
    );
}

fn entries() -> impl Strategy<Value = Vec<CacheEntry>> {
    let one = (0usize..3, 0u64..50, any::<bool>(), prop::collection::vec(0u64..20, 0..6));
    prop::collection::vec(one, 0..10).prop_map(|list| {
        list.into_iter()
            .enumerate()
            .map(|(i, (kind, last, in_use, inodes))| {
                let kind = [EntryKind::Environment, EntryKind::Package, EntryKind::Other][kind];
                // One size per file identity, as a file system has it.
                let files: Vec<(u64, u64)> =
                    inodes.into_iter().map(|ino| (ino, ino % 7 + 1)).collect();
                let mut e = entry(&format!("e{i}"), kind, last, &files);
                e.in_use = in_use;
                e
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn a_smaller_cap_removes_a_superset(list in entries(), cap in 0u64..120, shrink in 0u64..120) {
        let loose = over_cap(cap * MIB, &list, &[]);
        let tight = over_cap(cap.saturating_sub(shrink) * MIB, &list, &[]);
        prop_assert!(ids(&tight).starts_with(&ids(&loose)), "{:?} then {:?}", ids(&loose), ids(&tight));
    }

    #[test]
    fn never_in_use_nor_other_and_the_sizes_add_up(list in entries(), cap in 0u64..120) {
        let plan = over_cap(cap * MIB, &list, &[]);
        let mut left: Vec<CacheEntry> = list.clone();
        for action in &plan.actions {
            let e = list.iter().find(|e| e.id == action.id).expect("from the input");
            prop_assert!(!e.in_use && e.kind != EntryKind::Other);
            prop_assert!(action.freed > 0);
            left.retain(|e| e.id != action.id);
            if e.kind == EntryKind::Package {
                let linked = left.iter().flat_map(|o| &o.files).any(|f| e.files.contains(f));
                prop_assert!(!linked, "{} went while linked", e.id);
            }
        }
        prop_assert_eq!(plan.size_after, distinct_size(&left));
        // It stops above the cap only when nothing removable may go.
        if plan.size_after > cap * MIB {
            let rest = over_cap(0, &left, &[]);
            prop_assert!(rest.actions.is_empty(), "could still remove {:?}", ids(&rest));
        }
    }
}
