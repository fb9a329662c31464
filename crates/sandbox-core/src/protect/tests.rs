use super::*;

fn found(entries: &[(&str, Found)]) -> Vec<(String, Found)> {
    entries.iter().map(|(rel, f)| ((*rel).to_owned(), *f)).collect()
}

fn rels(guards: &[Guard]) -> Vec<String> {
    guards
        .iter()
        .map(|g| format!("{}{}", g.rel, if g.exists { "" } else { " (placeholder)" }))
        .collect()
}

#[test]
fn a_workspace_guards_what_exists_and_holds_every_project_name() {
    let g = guards(
        &found(&[(".git", Found::Dir), ("sub/.git", Found::File), (".envrc", Found::File)]),
        false,
        &[],
    )
    .unwrap();
    insta::assert_debug_snapshot!(rels(&g), @r#"
    [
        ".git",
        ".envrc",
        ".hg (placeholder)",
        ".claude (placeholder)",
        ".vscode (placeholder)",
        ".idea (placeholder)",
        ".mcp.json (placeholder)",
        ".gitmodules (placeholder)",
        "sub/.git",
    ]
    "#);
    assert_eq!(g.iter().find(|g| g.rel == "sub/.git").unwrap().kind, Kind::File);
}

#[test]
fn a_home_also_holds_the_shell_files() {
    let g = guards(&found(&[(".bashrc", Found::File)]), true, &[]).unwrap();
    let names = rels(&g);
    for name in
        [".bashrc", ".zshrc (placeholder)", ".gitconfig (placeholder)", ".profile (placeholder)"]
    {
        assert!(names.iter().any(|n| n == name), "{name} missing from {names:?}");
    }
    let g = guards(&[], false, &[]).unwrap();
    assert!(!rels(&g).iter().any(|n| n.starts_with(".bashrc")), "only a home gets shell files");
}

#[test]
fn an_approved_writable_mount_is_exempt_with_what_lies_below() {
    let g = guards(
        &found(&[(".git", Found::Dir), ("vendor/x/.git", Found::Dir)]),
        false,
        &[".git".to_owned(), "vendor".to_owned()],
    )
    .unwrap();
    let names = rels(&g);
    assert!(!names.iter().any(|n| n == ".git" || n.starts_with("vendor/")), "{names:?}");
    assert!(names.iter().any(|n| n == ".claude (placeholder)"));
}

#[test]
fn a_link_or_a_fifo_at_a_protected_name_is_refused() {
    for what in [Found::Symlink, Found::Other] {
        let err = guards(&found(&[("a/.envrc", what)]), false, &[]).unwrap_err();
        assert_eq!(err, Unprotectable { rel: "a/.envrc".into(), found: what });
    }
}

#[test]
fn components_and_sync_paths_are_recognised() {
    assert_eq!(protected_component(Path::new("/w/.git/hooks")).map(|p| p.name), Some(".git"));
    assert_eq!(protected_component(Path::new("./.claude")).map(|p| p.name), Some(".claude"));
    assert!(protected_component(Path::new("/w/.github/workflows")).is_none());
    assert!(protected_component(Path::new("/w/git/x.envrc")).is_none());
    assert!(is_protected_rel("sub/.vscode/tasks.json"));
    assert!(is_protected_rel(".mcp.json"));
    assert!(!is_protected_rel("src/mcp.json"));
}

#[test]
fn refusals_are_read_from_the_scripts_own_errors() {
    let text = "Traceback (most recent call last):\n\
        OSError: [Errno 30] Read-only file system: '.git/config'\n\
        cp: cannot create regular file './.claude/settings.json': Read-only file system\n\
        OSError: [Errno 16] Device or resource busy: '.git' -> 'moved'\n\
        OSError: [Errno 30] Read-only file system: '.git/config'\n\
        PermissionError: [Errno 13] Permission denied: '.envrc'\n\
        OSError: [Errno 18] Invalid cross-device link: 'cfg.tmp' -> 'sub/.git/config'\n\
        OSError: [Errno 30] Read-only file system: '/usr/lib/x'\n\
        FileNotFoundError: [Errno 2] No such file or directory: '.vscode/x'\n";
    let mut out = Vec::new();
    refusals_in(text, &mut out);
    assert_eq!(out, [".git/config", ".claude/settings.json", ".git", ".envrc", "sub/.git/config"]);
}
