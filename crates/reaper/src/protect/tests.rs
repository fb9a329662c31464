use std::os::unix::fs::symlink;

use super::*;

fn is_protected(name: &str) -> bool {
    matches!(name, ".git" | ".claude" | ".envrc")
}

/// A temporary tree `w` and a state dir beside it.
fn tree() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let (top, state) = (tmp.path().join("w"), tmp.path().join("state"));
    std::fs::create_dir(&top).unwrap();
    (tmp, top, state)
}

fn walk() -> Walk<'static> {
    Walk { protected: &is_protected, skip: &["node_modules"], depth: 2, max_dirs: 100 }
}

#[test]
fn find_reports_protected_entries_to_the_depth_asked_without_following_links() {
    let tmp = tempfile::tempdir().unwrap();
    let top = tmp.path();
    for dir in [".git/hooks", "a/.git", "a/b/.claude", "a/b/c/.git", "node_modules/x/.git", "ok"] {
        std::fs::create_dir_all(top.join(dir)).unwrap();
    }
    std::fs::write(top.join("a/.envrc"), "").unwrap();
    symlink("/etc", top.join("link")).unwrap();
    symlink("/etc/passwd", top.join("ok/.envrc")).unwrap();
    let mut found = find(top, &walk()).unwrap();
    found.sort();
    assert_eq!(
        found,
        [
            (".git".to_owned(), Entry::Dir),
            ("a/.envrc".to_owned(), Entry::File),
            ("a/.git".to_owned(), Entry::Dir),
            ("a/b/.claude".to_owned(), Entry::Dir),
            ("ok/.envrc".to_owned(), Entry::Symlink),
        ]
    );
    let few = Walk { max_dirs: 1, ..walk() };
    assert_eq!(find(top, &few).unwrap(), [(".git".to_owned(), Entry::Dir)]);
}

#[test]
fn placeholders_are_made_once_and_removed_by_the_last_user() {
    let (_tmp, top, state) = tree();
    let mut first = Placeholders::new(&state).unwrap();
    first.lock(&top).unwrap();
    assert_eq!(first.make(&top, ".claude", Placeholder::Dir).unwrap(), Made::Created);
    assert_eq!(first.make(&top, ".envrc", Placeholder::File).unwrap(), Made::Created);
    let mut second = Placeholders::new(&state).unwrap();
    second.lock(&top).unwrap();
    assert_eq!(second.make(&top, ".claude", Placeholder::Dir).unwrap(), Made::There);
    first.release().unwrap();
    assert!(top.join(".claude").is_dir(), "the second run still mounts it");
    second.release().unwrap();
    assert!(!top.join(".claude").exists() && !top.join(".envrc").exists());
    assert_eq!(std::fs::read_dir(&state).unwrap().count(), 0, "no records left");
}

#[test]
fn what_the_host_put_into_a_placeholder_is_kept() {
    let (_tmp, top, state) = tree();
    let mut run = Placeholders::new(&state).unwrap();
    run.lock(&top).unwrap();
    run.make(&top, ".git", Placeholder::Dir).unwrap();
    run.make(&top, ".envrc", Placeholder::File).unwrap();
    std::fs::write(top.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(top.join(".envrc"), "export A=1\n").unwrap();
    drop(run);
    assert!(top.join(".git/HEAD").exists() && top.join(".envrc").exists());
    assert!(reap(&state, false, &|_| false).unwrap().is_empty(), "records were dropped");
}

#[test]
fn a_session_keeps_its_placeholders_until_released_or_reaped() {
    let (_tmp, top, state) = tree();
    for holder in ["native-s1", "native-s2"] {
        let mut session = Placeholders::new(&state).unwrap();
        session.lock(&top).unwrap();
        session.make(&top, ".claude", Placeholder::Dir).unwrap();
        session.hold(holder).unwrap();
    }
    assert!(top.join(".claude").is_dir());
    release_holder(&state, "native-s1").unwrap();
    assert!(top.join(".claude").is_dir(), "s2 still holds it");
    let listed = reap(&state, true, &|_| false).unwrap();
    assert_eq!(listed.len(), 1);
    assert!(!listed[0].removed && top.join(".claude").is_dir(), "a dry run removes nothing");
    let kept = reap(&state, false, &|holder| holder == "native-s2").unwrap();
    assert_eq!(kept[0].kept.as_deref(), Some("in use (a session holds it)"));
    let gone = reap(&state, false, &|_| false).unwrap();
    assert!(gone[0].removed && !top.join(".claude").exists());
}

#[test]
fn a_killed_run_leaves_records_that_the_next_reap_clears() {
    let (_tmp, top, state) = tree();
    let mut run = Placeholders::new(&state).unwrap();
    run.lock(&top).unwrap();
    run.make(&top, ".mcp.json", Placeholder::File).unwrap();
    // A run killed with -9: no release ran, and its lock ended with its descriptor.
    for tree in &mut run.trees {
        drop(tree.lock.take());
    }
    run.trees.clear();
    assert!(top.join(".mcp.json").is_file());
    let reaped = reap(&state, false, &|_| false).unwrap();
    assert_eq!(reaped.len(), 1);
    assert!(reaped[0].removed && !top.join(".mcp.json").exists());
}

#[test]
fn a_placeholder_replaced_since_is_left_alone() {
    let (_tmp, top, state) = tree();
    let mut run = Placeholders::new(&state).unwrap();
    run.lock(&top).unwrap();
    run.make(&top, ".claude", Placeholder::Dir).unwrap();
    // Made while the placeholder still exists, so it cannot reuse its inode number.
    std::fs::create_dir(top.join("theirs")).unwrap();
    std::fs::remove_dir(top.join(".claude")).unwrap();
    std::fs::rename(top.join("theirs"), top.join(".claude")).unwrap();
    run.release().unwrap();
    assert!(top.join(".claude").is_dir(), "a new directory of the same name is not ours");
}

#[test]
fn placeholder_names_are_single_components() {
    let (_tmp, top, state) = tree();
    let mut run = Placeholders::new(&state).unwrap();
    run.lock(&top).unwrap();
    for bad in ["a/b", "..", "."] {
        assert!(run.make(&top, bad, Placeholder::File).is_err(), "{bad}");
    }
    assert!(run.make(&top.join("other"), ".git", Placeholder::Dir).is_err());
}

#[test]
fn only_records_name_a_tree() {
    assert_eq!(record_key("fe00-e0a005.p..claude"), Some("fe00-e0a005"));
    assert_eq!(record_key(".fe00-e0a005.p..claude.4242.0.tmp"), None, "a writer's temporary file");
    assert_eq!(record_key("fe00-e0a005.lock"), None);
    assert_eq!(record_key("fe00-e0a005.hold.native-ab12"), None);
}

#[test]
fn a_tree_the_caller_cannot_write_needs_no_placeholder() {
    use std::os::unix::fs::PermissionsExt as _;
    if rustix::process::geteuid().is_root() {
        // Root writes through any mode; a read-only filesystem is what stops it, and making
        // one needs a mount.
        return;
    }
    let (_tmp, top, state) = tree();
    std::fs::set_permissions(&top, std::fs::Permissions::from_mode(0o555)).unwrap();
    let mut run = Placeholders::new(&state).unwrap();
    run.lock(&top).unwrap();
    assert_eq!(run.make(&top, ".claude", Placeholder::Dir).unwrap(), Made::Unwritable);
    std::fs::set_permissions(&top, std::fs::Permissions::from_mode(0o755)).unwrap();
}
