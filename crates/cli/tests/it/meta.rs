//! `python-sandbox meta …`: diagnostics format, exit codes, JSON shape, and edits that either fully
//! happen or leave the file untouched.

use insta::assert_snapshot;

use crate::{Ctx, transcript};

const BROKEN: &str = r#"#!/usr/bin/env python3
# /// script
# requires-python = ">=3.11"
# dependencies = [
#   "requests>=",
#   "rich",
# ]
#
# [tool.python-sandbox]
# net = "maybe"
# mount = ["/data:ro"]
# publish = [8000, 8000]
# ///
print("héllo")
"#;

#[test]
fn check_reports_file_line_col_with_hints_and_exits_1() {
    let ctx = Ctx::new();
    ctx.write("broken.py", BROKEN);
    assert_snapshot!(transcript(&ctx.run(&["meta", "check", "broken.py"])), @r#"
    exit: 1
    --- stdout
    --- stderr
    broken.py:5:14: error[deps/invalid-pep508]: invalid requirement `requests>=`: unexpected end of version specifier, expected version
      hint: requirements follow pep 508, e.g. `requests>=2.31` or `rich[jupyter]`
    broken.py:10:9: error[sandbox/invalid-value]: `net` must be `"on"`, `"off"` or a list of hosts, not `"maybe"`
    broken.py:11:3: error[sandbox/unknown-key]: unknown key `mount` in `[tool.python-sandbox]`
      hint: did you mean `mounts`?
    broken.py:12:20: warning[sandbox/duplicate]: port 8000 is listed twice
      broken.py:12:14: note: first listed here
    checked 1 file: 3 errors, 1 warning
    "#);
}

#[test]
fn check_passes_clean_files_and_counts_several() {
    let ctx = Ctx::new();
    ctx.write("a.py", "# /// script\n# dependencies = [\"rich\"]\n# ///\n");
    ctx.write("b.py", "print(1)\n");
    let out = ctx.run(&["meta", "check", "a.py", "b.py"]);
    assert_snapshot!(transcript(&out), @r"
    exit: 0
    --- stdout
    --- stderr
    checked 2 files: 0 errors, 0 warnings
    ");
}

#[test]
fn check_warnings_alone_do_not_fail() {
    let ctx = Ctx::new();
    ctx.write("w.py", "# /// script\n# tool.x = {a = 1,}\n# ///\n");
    let out = ctx.run(&["meta", "check", "w.py"]);
    assert_eq!(out.status.code(), Some(0), "{}", transcript(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning[toml/toml11-portability]"));
}

/// `meta check` reads the metadata as `run` does: what would not be read (a misspelt opener,
/// a table outside the block, an unknown key) or would be refused (`publish` with
/// `net = "off"`) is an error at its line, so 0 errors means `run` accepts the header.
#[test]
fn check_calls_errors_what_run_refuses() {
    let ctx = Ctx::new();
    let table = "# [tool.python-sandbox]\n# net = \"off\"\n";
    ctx.write("scritp.py", &format!("# /// scritp\n{table}# ///\n"));
    ctx.write("other.py", &format!("# /// config\n{table}# ///\n"));
    ctx.write("open.py", "# /// script \n# ///\n");
    ctx.write("publish.py", &format!("# /// script\n{table}# publish = [8000]\n# ///\n"));
    let out = ctx.run(&["meta", "check", "scritp.py", "other.py", "open.py", "publish.py"]);
    assert_snapshot!(transcript(&out), @r"
    exit: 1
    --- stdout
    --- stderr
    scritp.py:1:1: error[pep723/near-miss]: `scritp` is not the `script` block type: did you mean `script`?
      hint: the opener must be exactly `# /// script` in column 0, so this block is not read
    scritp.py:2:3: error[pep723/unread-sandbox-table]: `[tool.python-sandbox]` is in a `scritp` block, so it is not read: python-sandbox reads only the `script` block
      scritp.py:1:1: note: the `scritp` block starts here
      hint: move the table into the `# /// script` block, before its closing `# ///` line
    other.py:2:3: error[pep723/unread-sandbox-table]: `[tool.python-sandbox]` is in a `config` block, so it is not read: python-sandbox reads only the `script` block
      other.py:1:1: note: the `config` block starts here
      hint: move the table into the `# /// script` block, before its closing `# ///` line
    open.py:1:1: error[pep723/near-miss]: opener has trailing whitespace
      hint: the opener must be exactly `# /// script` in column 0, so this block is not read
    publish.py:4:14: error[sandbox/conflict]: cannot publish port 8000 with the network off
      publish.py:3:9: note: the network is turned off here
      hint: turn the network on or drop the published ports
    checked 4 files: 5 errors, 0 warnings
    ");
    let out = ctx.run(&["meta", "check", "--json", "scritp.py"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v[0]["status"], "invalid", "{v}");
    let fix = &v[0]["diagnostics"][0]["fixes"][0];
    assert_eq!(fix["title"], "replace with `# /// script`", "{v}");
    assert_eq!(fix["edits"][0]["newText"], "# /// script", "{v}");
}

/// `meta set` refuses an edit that would make two keys clash, and leaves the file as it was.
#[test]
fn set_refuses_publish_with_the_network_off() {
    let ctx = Ctx::new();
    let original = "# /// script\n# [tool.python-sandbox]\n# net = \"off\"\n# ///\n";
    ctx.write("s.py", original);
    assert_snapshot!(transcript(&ctx.run(&["meta", "set", "s.py", "publish", "8000"])), @r"
    exit: 2
    --- stdout
    --- stderr
    error: cannot edit `s.py`: the edit would make the metadata invalid: cannot publish port 8000 with the network off
    hint: turn the network on or drop the published ports
    ");
    assert_eq!(ctx.read("s.py"), original);
    ctx.write("p.py", "# /// script\n# [tool.python-sandbox]\n# publish = [8000]\n# ///\n");
    let out = ctx.run(&["meta", "set", "p.py", "net", "off"]);
    assert_eq!(out.status.code(), Some(2), "{}", transcript(&out));
}

#[test]
fn check_unreadable_file_is_a_usage_error() {
    let ctx = Ctx::new();
    assert_snapshot!(transcript(&ctx.run(&["meta", "check", "missing.py"])), @r"
    exit: 2
    --- stdout
    --- stderr
    error: cannot read `missing.py`: no such file or directory
    hint: check the path; it is taken relative to the current directory
    checked 1 file (1 unreadable): 0 errors, 0 warnings
    ");
}

#[test]
fn check_json_has_lsp_ranges_in_utf16() {
    let ctx = Ctx::new();
    // The emoji is two UTF-16 units and four UTF-8 bytes: the column must count 2.
    ctx.write("e.py", "# /// script\n# dependencies = [\"😀\", \"x>\"]\n# ///\n");
    let out = ctx.run(&["meta", "check", "--json", "e.py"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let diags = v[0]["diagnostics"].as_array().expect("array");
    let bad = diags
        .iter()
        .find(|d| d["message"].as_str().unwrap_or_default().contains("`x>`"))
        .expect("x> error");
    let emoji = diags
        .iter()
        .find(|d| d["message"].as_str().unwrap_or_default().contains('😀'))
        .expect("emoji");
    assert_eq!(emoji["range"]["start"]["character"], 19, "{emoji}");
    assert_eq!(bad["range"]["start"]["character"], 26, "{bad}");
    assert_eq!(bad["column"], 26, "1-based character column: the emoji is one character");
}

#[test]
fn show_prints_one_json_object_even_when_invalid() {
    let ctx = Ctx::new();
    ctx.write("broken.py", BROKEN);
    let out = ctx.run(&["meta", "show", "broken.py", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("exactly one json object");
    assert_eq!(v["status"], "invalid");
    assert_eq!(v["metadata"]["requires-python"], ">=3.11");
    assert_eq!(v["metadata"]["tool"]["python-sandbox"]["net"], "maybe");
    assert_eq!(v["diagnostics"].as_array().map(Vec::len), Some(4));

    ctx.write("none.py", "print(1)\n");
    let v: serde_json::Value =
        serde_json::from_slice(&ctx.run(&["meta", "show", "none.py", "--json"]).stdout)
            .expect("json");
    assert_eq!(v, serde_json::json!({"status": "none", "metadata": null, "diagnostics": []}));
}

#[test]
fn init_add_set_remove_build_a_valid_header() {
    let ctx = Ctx::new();
    ctx.write("s.py", "#!/usr/bin/env python3\n\"\"\"Doc.\"\"\"\nprint(1)\n");
    for args in [
        &["meta", "init", "s.py"][..],
        &["meta", "add", "s.py", "rich", "numpy>=2"],
        &["meta", "set", "s.py", "requires-python", ">=3.11"],
        &["meta", "set", "s.py", "net", "on"],
        &["meta", "set", "s.py", "tool.python-sandbox.publish", "8000"],
        &["meta", "remove", "s.py", "rich"],
    ] {
        let out = ctx.run(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", transcript(&out));
    }
    assert_snapshot!(ctx.read("s.py"), @r#"
    #!/usr/bin/env python3
    # /// script
    # requires-python = ">=3.11"
    # dependencies = [
    #     "numpy>=2",
    # ]
    #
    # [tool.python-sandbox]
    # net = "on"
    # publish = [8000]
    # ///

    """Doc."""
    print(1)
    "#);
    let out = ctx.run(&["meta", "check", "s.py"]);
    assert_eq!(out.status.code(), Some(0), "{}", transcript(&out));
    // Idempotent: the same edit again changes nothing.
    let out = ctx.run(&["meta", "set", "s.py", "net", "on"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to do"));
}

#[test]
fn failed_edits_leave_the_file_untouched() {
    let ctx = Ctx::new();
    let original = "# /// script\r\n# dependencies = []\r\n# ///\r\nprint(1)";
    ctx.write("crlf.py", original);
    for (args, needle) in [
        (&["meta", "add", "crlf.py", "bad req ~~"][..], "invalid requirement"),
        (&["meta", "set", "crlf.py", "net", "maybe"], "invalid value for `net`"),
        (&["meta", "set", "crlf.py", "publish", "70000"], "invalid value for `publish`"),
        (&["meta", "set", "crlf.py", "requires-python", "3.11"], "requires-python"),
        (&["meta", "set", "crlf.py", "nett", "off"], "did you mean `net`?"),
    ] {
        let out = ctx.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", transcript(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(needle),
            "{args:?}: {}",
            transcript(&out)
        );
        assert_eq!(ctx.read("crlf.py"), original, "{args:?} changed the file");
    }
    // A successful edit keeps CRLF and the missing final newline.
    assert_eq!(ctx.run(&["meta", "add", "crlf.py", "six"]).status.code(), Some(0));
    let text = ctx.read("crlf.py");
    assert!(text.ends_with("# ///\r\nprint(1)"), "{text:?}");
    assert!(!text.replace("\r\n", "").contains('\n'), "{text:?}");
    assert!(std::fs::read_dir(ctx.path()).expect("ls").count() == 1, "no temp files left behind");
}

#[test]
fn editing_a_file_with_duplicate_blocks_is_refused() {
    let ctx = Ctx::new();
    let text = "# /// script\n# dependencies = []\n# ///\nx = 1\n# /// script\n# dependencies = []\n# ///\n";
    ctx.write("dup.py", text);
    assert_snapshot!(transcript(&ctx.run(&["meta", "add", "dup.py", "rich"])), @r"
    exit: 2
    --- stdout
    --- stderr
    error: cannot edit `dup.py`: the file has more than one `script` block
    hint: merge them into one block first
    ");
    assert_eq!(ctx.read("dup.py"), text);
}

#[test]
fn dependencies_and_requires_python_are_set_at_the_top_level() {
    let ctx = Ctx::new();
    ctx.write("d.py", "# /// script\n# dependencies = [\"old\"]\n#\n# [tool.python-sandbox]\n# net = \"off\"\n# ///\n");
    for args in [
        &["meta", "set", "d.py", "dependencies", r#"["a", "b>=2"]"#][..],
        &["meta", "set", "d.py", "requires-python", ">=3.11"],
        &["meta", "set", "d.py", "tool.python-sandbox.dependencies", "extra"],
    ] {
        let out = ctx.run(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", transcript(&out));
    }
    assert_snapshot!(ctx.read("d.py"), @r#"
    # /// script
    # requires-python = ">=3.11"
    # dependencies = ["a", "b>=2"]
    #
    # [tool.python-sandbox]
    # net = "off"
    # dependencies = ["extra"]
    # ///
    "#);
    assert_eq!(ctx.run(&["meta", "unset", "d.py", "dependencies"]).status.code(), Some(0));
    assert!(!ctx.read("d.py").contains(r#"["a", "b>=2"]"#), "{}", ctx.read("d.py"));
    assert!(ctx.read("d.py").contains(r#"dependencies = ["extra"]"#), "{}", ctx.read("d.py"));
}

#[test]
fn removing_a_dependency_that_is_not_there_says_so_and_changes_nothing() {
    let ctx = Ctx::new();
    let original = "# /// script\r\n# dependencies = [\"rich\", \"six\"]\r\n# ///\r\nprint(1)";
    ctx.write("crlf.py", original);
    assert_snapshot!(transcript(&ctx.run(&["meta", "remove", "crlf.py", "nothere", "six"])), @r"
    exit: 2
    --- stdout
    --- stderr
    error: `crlf.py` has no dependency `nothere`; nothing was changed
    hint: its dependencies are `rich`, `six`
    ");
    assert_eq!(ctx.read("crlf.py"), original);
    ctx.write("none.py", "print(1)\n");
    let out = ctx.run(&["meta", "remove", "none.py", "a", "b"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("has no dependencies `a`, `b`") && err.contains("it declares no dependencies"),
        "{err}"
    );
}

/// `meta add` edits what a link points to and keeps the link; a file without a write bit is
/// refused (as root too) with nothing changed.
#[test]
fn edits_follow_links_and_refuse_read_only_files() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let ctx = Ctx::new();
    let original = "# /// script\n# dependencies = []\n# ///\n";
    ctx.write("real.py", original);
    std::os::unix::fs::symlink("real.py", ctx.path().join("link.py")).expect("symlink");
    let out = ctx.run(&["meta", "add", "link.py", "six"]);
    assert_eq!(out.status.code(), Some(0), "{}", transcript(&out));
    let link = std::fs::symlink_metadata(ctx.path().join("link.py")).expect("lstat");
    assert!(link.file_type().is_symlink(), "the link was replaced by a file");
    assert!(ctx.read("real.py").contains("\"six\""), "{}", ctx.read("real.py"));

    let ro = ctx.write("ro.py", original);
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o444)).expect("chmod");
    let ino = std::fs::metadata(&ro).expect("stat").ino();
    let out = ctx.run(&["meta", "add", "ro.py", "six"]);
    assert_eq!(out.status.code(), Some(2), "{}", transcript(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot edit `ro.py`: it is read-only (mode 0444)"), "{stderr}");
    assert!(stderr.contains("hint: nothing was changed"), "{stderr}");
    let after = std::fs::metadata(&ro).expect("stat");
    assert_eq!(
        (ctx.read("ro.py").as_str(), after.ino(), after.mode() & 0o777),
        (original, ino, 0o444)
    );
    assert_eq!(ctx.ls(), ["link.py", "real.py", "ro.py"], "no temp files left behind");
}

/// As an unprivileged user in a directory it may write: another user's file it cannot write is
/// refused; one it may write (group or world writable) is edited and stays the other user's.
/// Needs root to set the scene (prints SKIPPED otherwise).
#[test]
fn an_unprivileged_editor_keeps_the_owner_and_cannot_take_over_a_file() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !rustix::process::geteuid().is_root() {
        println!("SKIPPED: needs root to prepare files of another user");
        return;
    }
    let ctx = Ctx::new();
    std::fs::set_permissions(ctx.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let original = "# /// script\n# dependencies = []\n# ///\n";
    for (name, mode) in [("theirs.py", 0o644), ("shared.py", 0o666)] {
        let path = ctx.write(name, original);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }
    let as_nobody = |file: &str| {
        std::process::Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_python-sandbox"))
            .args(["meta", "add", file, "six"])
            .current_dir(ctx.path())
            .env("NO_COLOR", "1")
            .output()
            .expect("setpriv")
    };
    let out = as_nobody("theirs.py");
    assert_eq!(out.status.code(), Some(2), "{}", transcript(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot edit `theirs.py`: permission denied"), "{stderr}");
    let theirs = std::fs::metadata(ctx.path().join("theirs.py")).expect("stat");
    assert_eq!(
        (ctx.read("theirs.py").as_str(), theirs.uid(), theirs.mode() & 0o777),
        (original, 0, 0o644)
    );

    let out = as_nobody("shared.py");
    assert_eq!(out.status.code(), Some(0), "{}", transcript(&out));
    let shared = std::fs::metadata(ctx.path().join("shared.py")).expect("stat");
    assert!(ctx.read("shared.py").contains("\"six\""));
    assert_eq!((shared.uid(), shared.mode() & 0o777), (0, 0o666), "the file changed hands");
    assert_eq!(ctx.ls(), ["shared.py", "theirs.py"], "no temp files left behind");
}
