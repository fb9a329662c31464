//! `python-sandbox run` up to the point where an engine would start: every refusal here happens
//! before any engine is touched, so these run anywhere. Each checks the exit code, the message a
//! user sees, and that nothing was created. What happens inside a sandbox is the conformance
//! suite's (tests/conformance).

use std::path::Path;

use insta::assert_snapshot;

use crate::{Ctx, transcript};

/// Runs `run ARGS` where no engine can be found (no bwrap on PATH, no docker or podman socket):
/// a case that got past the refusal it tests stops at "no engine" (exit 3), never runs anything.
fn run(ctx: &Ctx, args: &[&str]) -> std::process::Output {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    let none = "unix:///nonexistent/engine.sock";
    let env = [("PATH", "/nonexistent"), ("DOCKER_HOST", none), ("CONTAINER_HOST", none)];
    ctx.run_with_env(&all, &env)
}

#[test]
fn an_unknown_inline_key_stops_the_run_with_its_location_and_a_suggestion() {
    let ctx = Ctx::new();
    ctx.write(
        "typo.py",
        "# /// script\n# [tool.python-sandbox]\n# nett = \"off\"\n# ///\nprint(1)\n",
    );
    assert_snapshot!(transcript(&run(&ctx, &["typo.py"])), @r#"
    exit: 2
    --- stdout
    --- stderr
    typo.py:3:3: error[sandbox/unknown-key]: unknown key `nett` in `[tool.python-sandbox]`
      hint: did you mean `net`?
    error: `typo.py` has invalid metadata; nothing was run
    hint: check it with `python-sandbox meta check typo.py`
    "#);
}

#[test]
fn an_unclosed_block_stops_the_run_instead_of_running_without_its_settings() {
    let ctx = Ctx::new();
    ctx.write("open.py", "# /// script\n# [tool.python-sandbox]\n# net = \"off\"\nprint(1)\n");
    assert_snapshot!(transcript(&run(&ctx, &["open.py"])), @r"
    exit: 2
    --- stdout
    --- stderr
    open.py:1:1: error[pep723/unclosed-block]: `# /// script` block is never closed by a `# ///` line, so it is ignored
      open.py:4:1: note: the block ends before this line
      hint: add a `# ///` line after the last metadata line
    open.py:2:3: error[pep723/unread-sandbox-table]: `[tool.python-sandbox]` is outside the `# /// script` block, so it is not read
      hint: move the table into the `# /// script` block, before its closing `# ///` line
    error: `open.py` has invalid metadata; nothing was run
    hint: check it with `python-sandbox meta check open.py`
    ");
}

/// A misspelt opener (two edits from `script`) would drop the whole table, `net = "off"` and
/// all: the run stops at its line with a did-you-mean, and so does a table outside the block.
#[test]
fn a_misspelt_opener_or_a_stray_table_stops_the_run_at_its_line() {
    let ctx = Ctx::new();
    let table = "# [tool.python-sandbox]\n# net = \"off\"\n";
    ctx.write("scritp.py", &format!("# /// scritp\n{table}# ///\nprint(1)\n"));
    assert_snapshot!(transcript(&run(&ctx, &["scritp.py"])), @r"
    exit: 2
    --- stdout
    --- stderr
    scritp.py:1:1: error[pep723/near-miss]: `scritp` is not the `script` block type: did you mean `script`?
      hint: the opener must be exactly `# /// script` in column 0, so this block is not read
    scritp.py:2:3: error[pep723/unread-sandbox-table]: `[tool.python-sandbox]` is in a `scritp` block, so it is not read: python-sandbox reads only the `script` block
      scritp.py:1:1: note: the `scritp` block starts here
      hint: move the table into the `# /// script` block, before its closing `# ///` line
    error: `scritp.py` has invalid metadata; nothing was run
    hint: check it with `python-sandbox meta check scritp.py`
    ");
    ctx.write("sript.py", "#!/usr/bin/env python3\n# /// sript\n# dependencies = []\n# ///\n");
    assert_snapshot!(transcript(&run(&ctx, &["sript.py"])), @r"
    exit: 2
    --- stdout
    --- stderr
    sript.py:2:1: error[pep723/near-miss]: `sript` is not the `script` block type: did you mean `script`?
      hint: the opener must be exactly `# /// script` in column 0, so this block is not read
    error: `sript.py` has invalid metadata; nothing was run
    hint: check it with `python-sandbox meta check sript.py`
    ");
    ctx.write("after.py", &format!("# /// script\n# dependencies = []\n# ///\n{table}print(1)\n"));
    assert_snapshot!(transcript(&run(&ctx, &["after.py"])), @r"
    exit: 2
    --- stdout
    --- stderr
    after.py:4:3: error[pep723/unread-sandbox-table]: `[tool.python-sandbox]` is outside the `# /// script` block, so it is not read
      hint: move the table into the `# /// script` block, before its closing `# ///` line
    error: `after.py` has invalid metadata; nothing was run
    hint: check it with `python-sandbox meta check after.py`
    ");
}

/// `publish` with `net = "off"` is refused at its line, before any engine, as `meta check`
/// flags it.
#[test]
fn publish_with_the_network_off_is_refused_at_its_line() {
    let ctx = Ctx::new();
    let text =
        "# /// script\n# [tool.python-sandbox]\n# net = \"off\"\n# publish = [8000]\n# ///\n";
    ctx.write("p.py", text);
    assert_snapshot!(transcript(&run(&ctx, &["p.py"])), @r"
    exit: 2
    --- stdout
    --- stderr
    p.py:4:14: error[sandbox/conflict]: cannot publish port 8000 with the network off
      p.py:3:9: note: the network is turned off here
      hint: turn the network on or drop the published ports
    error: `p.py` has invalid metadata; nothing was run
    hint: check it with `python-sandbox meta check p.py`
    ");
    // The command line's `--net on` settles nothing: the script's own table contradicts itself.
    let out = run(&ctx, &["--net", "on", "p.py"]);
    assert_eq!(out.status.code(), Some(2), "{}", transcript(&out));
}

#[test]
fn warnings_are_printed_as_meta_check_prints_them() {
    let ctx = Ctx::new();
    // A warning only (tomllib cannot read the trailing comma), then a bad flag stops the run.
    ctx.write("w.py", "# /// script\n# tool.x = {a = 1,}\n# ///\nprint(1)\n");
    assert_snapshot!(transcript(&run(&ctx, &["--mount", "./out:wr", "w.py"])), @r"
    exit: 2
    --- stdout
    --- stderr
    w.py:2:12: warning[toml/toml11-portability]: a trailing comma in an inline table is toml 1.1 syntax that python's `tomllib` rejects
      hint: python 3.14 and older (and tools built on `tomllib`) cannot read this block; use toml 1.0 syntax
    error: unknown mode `wr` in mount `./out:wr`
    hint: the mode is a final `:ro` (read-only) or `:rw` (read-write): `./out:ro` or `./out:rw`; a path that contains `:` needs its mode spelled out, e.g. `./out:wr:rw`
    ");
    let check = ctx.run(&["meta", "check", "w.py"]);
    let ran =
        String::from_utf8_lossy(&run(&ctx, &["--mount", "./out:wr", "w.py"]).stderr).into_owned();
    for line in String::from_utf8_lossy(&check.stderr).lines().filter(|l| !l.starts_with("checked"))
    {
        assert!(ran.contains(line), "`meta check` says {line:?}, `run` does not:\n{ran}");
    }
}

#[test]
fn an_unknown_mount_mode_is_an_error_and_creates_nothing() {
    let ctx = Ctx::new();
    ctx.write("s.py", "print(1)\n");
    ctx.write(
        "inline.py",
        "# /// script\n# [tool.python-sandbox]\n# mounts = [\"./in:xx\"]\n# ///\nprint(1)\n",
    );
    let flag = run(&ctx, &["--mount", "./sub:xx", "s.py"]);
    assert_eq!(flag.status.code(), Some(2), "{}", transcript(&flag));
    let err = String::from_utf8_lossy(&flag.stderr);
    assert!(err.contains("unknown mode `xx` in mount `./sub:xx`"), "{err}");
    assert!(err.contains("`./sub:ro` or `./sub:rw`") && err.contains("`./sub:xx:rw`"), "{err}");
    let inline = run(&ctx, &["inline.py"]);
    assert_snapshot!(transcript(&inline), @r#"
    exit: 2
    --- stdout
    --- stderr
    inline.py:3:13: error[sandbox/invalid-value]: mount `./in:xx` has an unknown mode `xx`
      hint: the mode is a final `:ro` (read-only) or `:rw` (read-write): `./in:ro` or `./in:rw`; a path that contains `:` needs its mode spelled out, e.g. `./in:xx:rw`
    error: `inline.py` has invalid metadata; nothing was run
    hint: check it with `python-sandbox meta check inline.py`
    "#);
    assert_eq!(ctx.ls(), ["inline.py", "s.py"], "no directory was created");
}

#[test]
fn a_missing_read_only_mount_stops_the_run_before_any_read_write_one_is_made() {
    let ctx = Ctx::new();
    ctx.write("s.py", "print(1)\n");
    let out = run(&ctx, &["--mount", "./made:rw", "--mount", "./nothere:ro", "s.py"]);
    let text = transcript(&out).replace(&ctx.path().display().to_string(), "[WS]");
    assert_snapshot!(text, @r"
    exit: 2
    --- stdout
    --- stderr
    error: mount `[WS]/nothere` does not exist
    hint: a read-only mount must exist; create it first, or mount it with `:rw` to have an empty directory made
    ");
    assert_eq!(ctx.ls(), ["s.py"]);
}

#[test]
fn json_prints_one_object_on_every_early_exit() {
    let ctx = Ctx::new();
    ctx.write("bad.py", "# /// script\n# dependencies = [\n# ///\nprint(1)\n");
    ctx.write("ok.py", "print(1)\n");
    let cases: [(&[&str], &str); 4] = [
        (&["--json", "nonexist.py"], "cannot read `nonexist.py`: no such file or directory"),
        (&["--json", "bad.py"], "`bad.py` has invalid metadata; nothing was run"),
        (
            &["--json", "--net", "maybe", "ok.py"],
            "invalid value 'maybe' for '--net <on|off|HOST,...>': invalid network pattern `maybe`",
        ),
        (&["--json", "--timeout", "soon", "ok.py"], "invalid timeout `soon`"),
    ];
    for (args, error) in cases {
        let out = run(&ctx, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", transcript(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("{args:?}: not one JSON object ({e}): {}", transcript(&out))
        });
        assert_eq!(v["exit_code"], 2, "{args:?}: {v}");
        assert_eq!(v["error"], error, "{args:?}: {v}");
        assert!(v["engine"].is_null(), "{args:?}: {v}");
    }
    let v: serde_json::Value =
        serde_json::from_slice(&run(&ctx, &["--json", "bad.py"]).stdout).expect("json");
    let d = &v["diagnostics"][0];
    assert_eq!((d["code"].as_str(), d["line"].as_u64()), (Some("toml/syntax"), Some(2)), "{v}");
}

#[test]
fn a_script_that_is_not_a_regular_file_says_so() {
    let ctx = Ctx::new();
    assert_snapshot!(transcript(&run(&ctx, &["/dev/null"])), @r"
    exit: 2
    --- stdout
    --- stderr
    error: `/dev/null` is not a regular file
    hint: pass a script file, `-` to read the script from stdin, or a pipe such as `<(...)`
    ");
}

#[test]
fn a_script_from_stdin_is_parsed_as_stdin() {
    let ctx = Ctx::new();
    let script = "# /// script\n# [tool.python-sandbox]\n# nett = \"off\"\n# ///\nprint(1)\n";
    let out = ctx.run_with_stdin(&["run", "-"], script.as_bytes());
    assert_snapshot!(transcript(&out), @r#"
    exit: 2
    --- stdout
    --- stderr
    <stdin>:3:3: error[sandbox/unknown-key]: unknown key `nett` in `[tool.python-sandbox]`
      hint: did you mean `net`?
    error: `<stdin>` has invalid metadata; nothing was run
    hint: fix the metadata at the lines above
    "#);
}

#[test]
fn flag_errors_quote_what_was_written() {
    let ctx = Ctx::new();
    ctx.write("s.py", "print(1)\n");
    assert_snapshot!(transcript(&run(&ctx, &["--timeout", "99999999999999999999", "s.py"])), @r"
    exit: 2
    --- stdout
    --- stderr
    error: invalid timeout `99999999999999999999`
    hint: give a positive number of seconds below 1000000000, e.g. `30` or `2.5`
    ");
}

#[test]
fn an_invalid_inline_tmpfs_size_is_located() {
    let ctx = Ctx::new();
    ctx.write("t.py", "# /// script\n# [tool.python-sandbox]\n# tmpfs-size = \"1x\"\n# ///\n");
    assert_snapshot!(transcript(&run(&ctx, &["t.py"])), @r#"
    exit: 2
    --- stdout
    --- stderr
    t.py:3:16: error[sandbox/invalid-value]: `tmpfs-size` `"1x"` is not a size
      hint: write a size such as `"512m"` or `"2g"`, or a whole number of bytes; at least 1m
    error: `t.py` has invalid metadata; nothing was run
    hint: check it with `python-sandbox meta check t.py`
    "#);
}

/// Whether `engine` can run a sandbox here: `run --engine NAME` of an empty script succeeds;
/// if not, the test's `SKIPPED:` line is printed.
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn engine_runs(ctx: &Ctx, engine: &str) -> bool {
    ctx.write("empty.py", "\n");
    let runs = ctx.run(&["run", "--engine", engine, "empty.py"]).status.success();
    if !runs {
        println!("SKIPPED: {engine} cannot run a sandbox here");
    }
    runs
}

/// On bwrap (no images, no runtime classes) the script's `runtime-class` is refused before
/// anything runs, and its `image` is a warning naming where it was written.
#[test]
fn bwrap_refuses_a_scripts_runtime_class_and_warns_about_its_image() {
    let ctx = Ctx::new();
    if !engine_runs(&ctx, "bwrap") {
        return;
    }
    ctx.write(
        "g.py",
        "# /// script\n# [tool.python-sandbox]\n# runtime-class = \"gvisor\"\n# ///\nopen('ran', 'w')\n",
    );
    assert_snapshot!(transcript(&ctx.run(&["run", "--engine", "bwrap", "g.py"])), @r#"
    exit: 2
    --- stdout
    --- stderr
    error: g.py:3:19: the bwrap engine cannot run the script under runtime class `gvisor`, so nothing was run
    hint: choose an engine that can with `--engine` (k8s), or remove `runtime-class` from the script
    "#);
    assert!(!ctx.path().join("ran").exists(), "nothing ran");
    ctx.write(
        "i.py",
        "# /// script\n# [tool.python-sandbox]\n# image = \"registry.example/numpy:2\"\n# ///\nprint('ran')\n",
    );
    // Net off: the warning is the point, and a machine whose pasta cannot run adds a note.
    assert_snapshot!(transcript(&ctx.run(&["run", "--engine", "bwrap", "--net", "off", "i.py"])), @r#"
    exit: 0
    --- stdout
    ran
    --- stderr
    warning: i.py:3:11: the bwrap engine has no image, so the script's `image = "registry.example/numpy:2"` is not used (engines with images: docker, podman, k8s)
    "#);
}

/// On docker and podman the script's `image` is the one the container is made from: a
/// missing one is an error naming it, where the default image would have run the script.
#[test]
fn a_scripts_image_is_the_containers_on_docker_and_podman() {
    let ctx = Ctx::new();
    ctx.write(
        "i.py",
        "# /// script\n# [tool.python-sandbox]\n# image = \"python-sandbox-no-such-image:1\"\n# ///\nprint('ran')\n",
    );
    for engine in ["docker", "podman"] {
        if !engine_runs(&ctx, engine) {
            continue;
        }
        let out = ctx.run(&["run", "--engine", engine, "i.py"]);
        let text = transcript(&out);
        assert_ne!(out.status.code(), Some(0), "{engine}: {text}");
        assert!(!text.contains("\nran\n"), "{engine} ran the default image: {text}");
        assert!(text.contains("python-sandbox-no-such-image:1"), "{engine}: {text}");
    }
}

/// Without pasta a native run with the network on gets the built-in relay (full TCP/UDP) and
/// says nothing, or where the relay cannot be had says, in one `note:` line, that only HTTP(S)
/// through the built-in proxy is there; with the network off it says nothing.
#[test]
fn native_without_pasta_notes_when_net_on_is_http_only() {
    let Some((ctx, _bin, path)) = native_without_pasta() else { return };
    ctx.write("n.py", "print('ran')\n");
    let on =
        ctx.run_with_env(&["run", "--engine", "native", "--net", "on", "n.py"], &[("PATH", &path)]);
    // A host that reaches the world through its own proxy gets the built-in proxy, which
    // chains through it, whether or not the relay could be had.
    let proxied = ctx.run_with_env(
        &["run", "--engine", "native", "--net", "on", "n.py"],
        &[("PATH", &path), ("HTTPS_PROXY", "http://proxy.invalid:3128")],
    );
    assert_snapshot!(transcript(&proxied), @r"
    exit: 0
    --- stdout
    ran
    --- stderr
    note: no pasta on PATH, so the network is HTTP(S) only, through the built-in proxy (`HTTPS_PROXY`); install the `passt` package for full TCP/UDP networking
    ");
    // Without: the relay, which says nothing, where a tun device can be opened.
    if sandbox_net::relay_available() {
        assert_snapshot!(transcript(&on), @r"
        exit: 0
        --- stdout
        ran
        --- stderr
        ");
    } else {
        assert_eq!(transcript(&on), transcript(&proxied));
    }
    let off = ctx
        .run_with_env(&["run", "--engine", "native", "--net", "off", "n.py"], &[("PATH", &path)]);
    assert_snapshot!(transcript(&off), @r"
    exit: 0
    --- stdout
    ran
    --- stderr
    ");
}

/// A scratch directory where native runs, and this machine without the passt package: a
/// `PATH` of every tool of /usr/bin but pasta (and the directory of links, kept while the
/// `PATH` is used). `None` (the test's `SKIPPED:` line printed) where native cannot run.
fn native_without_pasta() -> Option<(Ctx, tempfile::TempDir, String)> {
    let ctx = Ctx::new();
    if !engine_runs(&ctx, "native") {
        return None;
    }
    let bin = tempfile::tempdir().expect("tempdir");
    for entry in std::fs::read_dir("/usr/bin").expect("/usr/bin") {
        let name = entry.expect("entry").file_name();
        if !name.to_string_lossy().starts_with("pasta") {
            let _ = std::os::unix::fs::symlink(
                Path::new("/usr/bin").join(&name),
                bin.path().join(&name),
            );
        }
    }
    let path = format!("{}:/usr/local/bin", bin.path().display());
    Some((ctx, bin, path))
}

/// A bwrap found through a link in a `PATH` directory below /tmp runs: a root caller's bwrap
/// starts in a mount namespace whose /tmp is the stage's tmpfs, so the CLI runs the binary the
/// link names (it failed with "No such file or directory" before).
#[test]
#[allow(clippy::print_stdout, reason = "a `SKIPPED:` line is how a gated test says it skipped")]
fn bwrap_found_through_a_link_below_tmp_runs() {
    let ctx = Ctx::new();
    if !engine_runs(&ctx, "bwrap") {
        return;
    }
    let Some(bwrap) = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("bwrap"))
        .find(|p| p.is_file())
    else {
        println!("SKIPPED: no bwrap on PATH to link to");
        return;
    };
    let bin = tempfile::tempdir_in("/tmp").expect("tempdir");
    std::os::unix::fs::symlink(&bwrap, bin.path().join("bwrap")).expect("link");
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.path().display());
    ctx.write("hi.py", "print('hi from bwrap')\n");
    let out = ctx.run_with_env(&["run", "--engine", "bwrap", "hi.py"], &[("PATH", &path)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi from bwrap\n");
}

/// A script file in a credential location crosses the boundary as a read-only mount of it
/// would, named directly or through a link in the workspace (exit 4, the crossing named);
/// `--approve` takes it past the check (it runs, on native, or stops at "no engine"). A
/// script elsewhere outside the workspace is the user's own choice on the command line (the
/// MCP server asks).
#[test]
fn a_script_in_a_secret_location_needs_approval() {
    let ctx = Ctx::new();
    let home = tempfile::tempdir().expect("home");
    std::fs::create_dir(home.path().join(".ssh")).expect("~/.ssh");
    let secret = home.path().join(".ssh/run_me.py");
    std::fs::write(&secret, "print(1)\n").expect("script");
    std::os::unix::fs::symlink(&secret, ctx.path().join("link.py")).expect("link");
    let elsewhere = tempfile::tempdir().expect("elsewhere");
    let other = elsewhere.path().join("x.py");
    std::fs::write(&other, "print(1)\n").expect("script");
    let none = "unix:///nonexistent/engine.sock";
    let home_dir = home.path().to_str().expect("utf-8");
    let env = [
        ("PATH", "/nonexistent"),
        ("DOCKER_HOST", none),
        ("CONTAINER_HOST", none),
        ("HOME", home_dir),
    ];
    let secret = secret.to_str().expect("utf-8");
    for script in [secret, "link.py", "~/.ssh/run_me.py"] {
        let out = ctx.run_with_env(&["run", script], &env);
        let text = transcript(&out);
        assert_eq!(out.status.code(), Some(4), "{script}: {text}");
        assert!(
            text.contains("the script: it is inside ~/.ssh, which holds credentials"),
            "{text}"
        );
        let approved = ctx.run_with_env(&["run", "--approve", script], &env);
        let past = [Some(0), Some(3)].contains(&approved.status.code());
        assert!(past, "{script}: {}", transcript(&approved));
    }
    let out = ctx.run_with_env(&["run", other.to_str().expect("utf-8")], &env);
    assert!([Some(0), Some(3)].contains(&out.status.code()), "{}", transcript(&out));
}
