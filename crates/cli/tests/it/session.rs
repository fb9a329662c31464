//! `python-sandbox session …` through the binary on every session engine available here: the
//! same CLI code (the registry and the seam) starts, finds, runs in, lists and stops sessions on
//! bwrap, docker and podman. An engine that is not available prints `SKIPPED: reason`; one
//! that is and fails, fails.

use crate::Ctx;

/// Whether `engine` works here, as `detect` tells (podman's service is started by CI).
fn available(ctx: &Ctx, engine: &str) -> Result<(), String> {
    let out = ctx.run(&["detect", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("detect --json printed no JSON: {e}"))?;
    let probe = json["engines"]
        .as_array()
        .and_then(|all| all.iter().find(|p| p["name"] == engine))
        .ok_or_else(|| format!("detect does not know {engine}"))?;
    if probe["available"] == true {
        Ok(())
    } else {
        Err(probe["reason"].as_str().unwrap_or("unavailable").lines().next().unwrap_or("").into())
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const WRITE_STATE: &str = "# /// script\n# dependencies = []\n# ///\nimport pathlib\npathlib.Path('/tmp/state.txt').write_text('kept')\nprint('wrote')\n";
const READ_STATE: &str = "# /// script\n# dependencies = []\n# ///\nimport os, pathlib\nprint(pathlib.Path('/tmp/state.txt').read_text(), os.environ['GREETING'])\n";
const WANTS_NET: &str = "# /// script\n# dependencies = []\n# [tool.python-sandbox]\n# net = \"on\"\n# ///\nprint('ran')\n";

// The `SKIPPED:` line is how a gated test says it did not run.
#[allow(clippy::print_stdout)]
fn lifecycle(engine: &str) {
    let ctx = Ctx::new();
    if let Err(reason) = available(&ctx, engine) {
        println!("SKIPPED: session lifecycle on {engine}: {reason}");
        return;
    }
    let start = ctx.run(&[
        "session",
        "start",
        "--engine",
        engine,
        "--net",
        "off",
        "--ttl",
        "10m",
        "--env",
        "GREETING=hello",
    ]);
    assert!(start.status.success(), "{engine}: start: {}", text(&start.stderr));
    let id = text(&start.stdout).lines().last().unwrap_or_default().trim().to_owned();
    assert!(!id.is_empty(), "{engine}: no id printed");
    let stop = || ctx.run(&["session", "stop", &id]);

    // Found by id without `--engine`, on whichever engine holds it.
    let exec = ctx.run(&["session", "exec", &id, "--", "sh", "-c", "echo $GREETING; exit 3"]);
    assert_eq!(exec.status.code(), Some(3), "{engine}: exec: {}", text(&exec.stderr));
    assert_eq!(text(&exec.stdout), "hello\n", "{engine}");

    ctx.write("write.py", WRITE_STATE);
    ctx.write("read.py", READ_STATE);
    let first = ctx.run(&["session", "run", &id, "write.py"]);
    assert!(first.status.success(), "{engine}: run: {}", text(&first.stderr));
    let second = ctx.run(&["session", "run", &id, "read.py"]);
    assert_eq!(text(&second.stdout), "kept hello\n", "{engine}: {}", text(&second.stderr));

    // A script asking for what the session lacks is refused before it runs, on every engine.
    ctx.write("net.py", WANTS_NET);
    let misfit = ctx.run(&["session", "run", &id, "net.py"]);
    assert_eq!(misfit.status.code(), Some(2), "{engine}");
    assert!(text(&misfit.stderr).contains("the session has no network"), "{engine}");
    assert!(!text(&misfit.stdout).contains("ran"), "{engine}");

    let list = ctx.run(&["session", "list", "--json", "--engine", engine]);
    let listed: serde_json::Value = serde_json::from_slice(&list.stdout).expect("list json");
    let mine = listed.as_array().and_then(|all| all.iter().find(|s| s["id"] == id.as_str()));
    assert_eq!(mine.map(|s| s["engine"].clone()), Some(engine.into()), "{listed}");

    let stopped = stop();
    assert!(stopped.status.success(), "{engine}: stop: {}", text(&stopped.stderr));
    let after = ctx.run(&["session", "exec", &id, "--", "true"]);
    assert_eq!(after.status.code(), Some(2), "{engine}");
    assert!(text(&after.stderr).contains(&format!("no session `{id}`")), "{}", text(&after.stderr));
}

#[test]
fn a_bwrap_session_through_the_cli() {
    lifecycle("bwrap");
}

#[test]
fn a_docker_session_through_the_cli() {
    lifecycle("docker");
}

#[test]
fn a_podman_session_through_the_cli() {
    lifecycle("podman");
}
