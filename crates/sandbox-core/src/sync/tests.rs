//! The sync's decisions: what goes in, what comes back, what is refused.

use super::*;

/// A walk as the engine does it: (path, kind) in walk order, ignore files fed first.
fn plan(limit: u64, ignores: &[(&str, &str)], walk: &[(&str, HostKind)]) -> Result<String, Error> {
    let mut planner = Planner::new(limit);
    for (dir, text) in ignores {
        planner.rules(dir, text);
    }
    let mut out = String::new();
    for (path, kind) in walk {
        let verdict = planner.decide(path, kind)?;
        out.push_str(&format!("{path}: {verdict:?}\n"));
    }
    out.push_str(&format!("{} files, {} bytes\n", planner.files(), planner.bytes()));
    for warning in planner.warnings() {
        out.push_str(&format!("warning: {warning}\n"));
    }
    Ok(out)
}

fn file(size: u64) -> HostKind {
    HostKind::File { size }
}

fn link(target: &str) -> HostKind {
    HostKind::Symlink { target: target.to_owned() }
}

#[test]
fn what_goes_in() {
    let walk = [
        (".git", HostKind::Dir),
        (".gitignore", file(20)),
        ("data.csv", file(1000)),
        ("out", HostKind::Dir),
        ("keep.log", file(5)),
        ("run.log", file(5)),
        ("src", HostKind::Dir),
        ("src/.python-sandbox-ignore", file(10)),
        ("src/main.py", file(300)),
        ("src/big.bin", file(9000)),
        ("src/up", link("../data.csv")),
        ("src/away", link("../../etc/passwd")),
        ("src/abs", link("/etc/passwd")),
        ("src/fifo", HostKind::Other),
    ];
    let ignores = [("", "/out/\n*.log\n!keep.log\n"), ("src", "*.bin\n")];
    insta::assert_snapshot!(plan(DEFAULT_SYNC_LIMIT, &ignores, &walk).unwrap(), @r"
    .git: Skip(Git)
    .gitignore: Send
    data.csv: Send
    out: Skip(Ignored)
    keep.log: Send
    run.log: Skip(Ignored)
    src: Send
    src/.python-sandbox-ignore: Send
    src/main.py: Send
    src/big.bin: Skip(Ignored)
    src/up: Send
    src/away: Skip(LinkOutside)
    src/abs: Skip(LinkOutside)
    src/fifo: Skip(Special)
    5 files, 1335 bytes
    warning: links that point outside the workspace are left out of the sync: `src/away`, `src/abs`
    ");
}

#[test]
fn above_the_limit_names_the_largest_files_and_the_way_out() {
    let walk = [("a", file(600)), ("b", file(300)), ("c", file(10)), ("d", file(200))];
    let err = plan(1000, &[], &walk).unwrap_err();
    insta::assert_snapshot!(err, @r"
    the workspace is larger than the sync limit of 1000 bytes (largest: `a` 600 bytes, `b` 300 bytes, `d` 200 bytes)
    hint: leave large paths out with `.gitignore` or `.python-sandbox-ignore`, or raise the limit (`sync-limit` in `[engine.k8s]` of the user config)
    ");
    assert_eq!(approx_bytes(DEFAULT_SYNC_LIMIT), "256 MiB");
    assert_eq!(approx_bytes(1536), "1.5 KiB");
}

#[test]
fn links_stay_inside_lexically() {
    assert!(link_inside("a", "b"));
    assert!(link_inside("d/a", "../b"));
    assert!(link_inside("d/a", "./x/../../b"));
    assert!(!link_inside("a", "../b"));
    assert!(!link_inside("d/a", "../../b"));
    assert!(!link_inside("a", "/abs"));
    assert!(!link_inside("a", ""));
    assert!(!link_inside("d/a", "x/../../../b"), "no climbing back in later");
}

#[test]
fn members_must_be_plain_relative_paths() {
    for bad in ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/.", "a\0b"] {
        assert!(check_member(bad).is_err(), "{bad:?}");
    }
    for good in ["a", "a/b", "..a", "a..", ".hidden/x"] {
        assert_eq!(check_member(good).unwrap(), good);
    }
    insta::assert_snapshot!(check_member("../../.bashrc").unwrap_err(), @"refused `../../.bashrc` coming back from the sandbox: it is not a plain relative path (empty, `.` or `..` component); nothing was applied");
}

fn f(mode: u32, size: u64, stamp: &str) -> Stat {
    Stat::File { mode, size, stamp: stamp.to_owned() }
}

fn manifest<const N: usize>(entries: [(&str, Stat); N]) -> Manifest {
    entries.into_iter().map(|(p, s)| (p.to_owned(), s)).collect()
}

#[test]
fn what_comes_back() {
    let before = manifest([
        ("same.txt", f(0o644, 3, "1.1")),
        ("edited.txt", f(0o644, 3, "1.1")),
        ("chmod.sh", f(0o644, 3, "1.1")),
        ("gone.txt", f(0o644, 3, "1.1")),
        ("olddir", Stat::Dir { mode: 0o755 }),
        ("olddir/x", f(0o644, 1, "1.1")),
        ("became-dir", f(0o644, 1, "1.1")),
        ("ln", Stat::Symlink { target: "same.txt".to_owned() }),
        (".vscode", Stat::Dir { mode: 0o755 }),
        (".vscode/settings.json", f(0o644, 2, "1.1")),
    ]);
    let after = manifest([
        ("same.txt", f(0o644, 3, "1.1")),
        ("edited.txt", f(0o644, 3, "2.2")),
        ("chmod.sh", f(0o755, 3, "1.2")),
        ("new", Stat::Dir { mode: 0o755 }),
        ("new/out.json", f(0o600, 9, "3.3")),
        ("became-dir", Stat::Dir { mode: 0o755 }),
        ("became-dir/y", f(0o644, 1, "3.3")),
        ("ln", Stat::Symlink { target: "edited.txt".to_owned() }),
        (".git/hooks/post-checkout", f(0o755, 9, "3.3")),
        (".vscode", Stat::Dir { mode: 0o755 }),
        ("sub/.claude/settings.json", f(0o644, 9, "3.3")),
        (".envrc", f(0o644, 9, "3.3")),
    ]);
    insta::assert_debug_snapshot!(changes(&before, &after), @r#"
    Changes {
        fetch: [
            "became-dir",
            "became-dir/y",
            "chmod.sh",
            "edited.txt",
            "ln",
            "new",
            "new/out.json",
        ],
        delete: [
            "olddir/x",
            "olddir",
            "gone.txt",
            "became-dir",
        ],
        refused: [
            ".envrc",
            ".git/hooks/post-checkout",
            "sub/.claude/settings.json",
            ".vscode/settings.json",
        ],
        outside_links: [],
    }
    "#);
    assert!(changes(&before, &before).is_empty());
}

#[test]
fn listings_are_untrusted() {
    let good = br#"{"entries": {"a": ["f", 36333, 3, "1.2"], "d": ["d", 493], "d/l": ["l", "../a"]}, "skipped": 1}"#;
    let (manifest, skipped) = parse_manifest(good).unwrap();
    assert_eq!(skipped, 1);
    assert_eq!(manifest["a"], f(0o755, 3, "1.2"), "setuid and sticky bits dropped (0o106755)");
    assert_eq!(manifest["d/l"], Stat::Symlink { target: "../a".to_owned() });
    let refused = [
        br#"{"entries": {"/etc/passwd": ["f", 420, 1, "1"]}}"#.as_slice(),
        br#"{"entries": {"../x": ["f", 420, 1, "1"]}}"#,
        br#"{"entries": {"l": ["l", "a\u0000b"]}}"#,
        br#"{"entries": {"a": ["x"]}}"#,
        br#"{"entries": {"a": ["f", "rw", 1, "1"]}}"#,
        br#"[]"#,
        b"not json",
    ];
    for listing in refused {
        assert!(parse_manifest(listing).is_err(), "{}", String::from_utf8_lossy(listing));
    }
    // A link out of the workspace is listed (so `changes` can keep it in the sandbox by name),
    // never a reason to lose the rest of the listing.
    let outside =
        br#"{"entries": {"l": ["l", "../../home"], "m": ["l", "/etc"], "a": ["f", 420, 1, "1"]}}"#;
    let (manifest, _) = parse_manifest(outside).unwrap();
    assert_eq!(manifest.len(), 3);
}

#[test]
fn links_out_of_the_workspace_stay_in_the_sandbox() {
    let link = |t: &str| Stat::Symlink { target: t.to_owned() };
    let before = manifest([
        ("was-file", f(0o644, 3, "1.1")),
        ("was-dir", Stat::Dir { mode: 0o755 }),
        ("was-dir/kept.txt", f(0o644, 1, "1.1")),
        ("inside", link("was-file")),
    ]);
    let after = manifest([
        ("was-file", link("/etc/passwd")),
        ("was-dir", link("../../home/u")),
        ("inside", link("../outside")),
        ("l", link("/tmp/host")),
        ("d", Stat::Dir { mode: 0o755 }),
        ("d/up", link("../was-file")),
        ("d/out", link("../../x")),
        ("out.txt", f(0o644, 2, "2.2")),
    ]);
    insta::assert_debug_snapshot!(changes(&before, &after), @r#"
    Changes {
        fetch: [
            "d",
            "d/up",
            "out.txt",
        ],
        delete: [],
        refused: [],
        outside_links: [
            "d/out",
            "inside",
            "l",
            "was-dir",
            "was-file",
        ],
    }
    "#);
}

#[test]
fn the_pack_input_is_nul_separated() {
    assert_eq!(pack_input(&["a b".to_owned(), "c/d".to_owned()]), b"a b\0c/d\0");
    let argv = program_argv(LIST_PROGRAM, "/workspace");
    assert_eq!(argv[0], SANDBOX_PYTHON);
    assert_eq!(argv[3], "/workspace");
}

proptest::proptest! {
    #[test]
    fn unchanged_listings_change_nothing(names in proptest::collection::btree_set("[a-z]{1,4}(/[a-z]{1,4}){0,2}", 0..12)) {
        let manifest: Manifest = names.iter().map(|n| (n.clone(), f(0o644, 1, "1"))).collect();
        proptest::prop_assert!(changes(&manifest, &manifest).is_empty());
        let emptied = changes(&manifest, &Manifest::new());
        proptest::prop_assert_eq!(emptied.delete.len(), manifest.len());
        // Children before parents: no deleted path is followed by one below it.
        for (i, path) in emptied.delete.iter().enumerate() {
            let prefix = format!("{path}/");
            proptest::prop_assert!(!emptied.delete[i + 1..].iter().any(|p| p.starts_with(&prefix)));
        }
    }

    #[test]
    fn an_accepted_member_never_leaves_the_root(path in "[a-z./]{1,16}") {
        if check_member(&path).is_ok() {
            proptest::prop_assert!(!path.starts_with('/'));
            proptest::prop_assert!(!path.split('/').any(|p| p == ".." || p.is_empty()));
        }
    }
}
