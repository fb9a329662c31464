//! The sweep and `reap` on a daemon shared by two users, against forged containers: labels are
//! claims anyone with the daemon can make, so only what this user's key marked is removed.
//!
//! Rootful docker, this process (root) as the victim and `psbx-rootless` (made by `cargo xtask
//! ci`'s rootless tier, `xtask/src/rootless.rs`) as the forger, given the socket's group with
//! `setpriv` for its commands. Prints SKIPPED when any of that is missing.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use engine_oci::{Flavor, OciConfig, OciEngine};

const FORGER: &str = "psbx-rootless";

/// `setpriv` arguments that run a command as the forger with the docker socket's group, and
/// the forger's uid.
fn forger_prefix() -> Result<(Vec<String>, u32), String> {
    use std::os::unix::fs::MetadataExt;
    if !rustix::process::geteuid().is_root() {
        return Err("needs root (the victim) to act as a second user".into());
    }
    let id = |flag: &str| -> Result<String, String> {
        let out = Command::new("id").args([flag, FORGER]).output().map_err(|e| e.to_string())?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
            .ok_or_else(|| format!("no user {FORGER} (cargo xtask ci creates it)"))
    };
    let (uid, gid) = (id("-u")?, id("-g")?);
    let socket = std::fs::metadata("/var/run/docker.sock")
        .map_err(|e| format!("no rootful docker socket: {e}"))?;
    let prefix: Vec<String> = [
        "setpriv".to_owned(),
        format!("--reuid={uid}"),
        format!("--regid={gid}"),
        format!("--groups={}", socket.gid()),
        "--".to_owned(),
    ]
    .into();
    let probe = Command::new(&prefix[0]).args(&prefix[1..]).args(["docker", "version"]).output();
    match probe {
        Ok(out) if out.status.success() => Ok((prefix, uid.parse().map_err(|_| "bad uid")?)),
        Ok(out) => Err(format!(
            "{FORGER} cannot reach docker: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Err(format!("setpriv: {e}")),
    }
}

fn ok(out: std::io::Result<Output>, what: &str) -> String {
    let out = out.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `docker create` (as `prefix`'s user) of a container running `sleep`, with `labels`.
fn create(prefix: &[String], name: &str, labels: &BTreeMap<String, String>, image: &str) -> String {
    let mut cmd = match prefix.split_first() {
        Some((first, rest)) => {
            let mut cmd = Command::new(first);
            cmd.args(rest).arg("docker");
            cmd
        }
        None => Command::new("docker"),
    };
    cmd.args(["run", "-d", "--name", name]);
    for (k, v) in labels {
        cmd.args(["--label", &format!("{k}={v}")]);
    }
    cmd.args(["--entrypoint", "sleep", image, "600"]);
    ok(cmd.output(), &format!("creating {name}"))
}

fn exists(id: &str) -> bool {
    Command::new("docker")
        .args(["inspect", "--type", "container", id])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Removes the test's containers however the test ends.
struct Cleanup(Vec<String>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rm", "-f"]).args(&self.0).output();
    }
}

fn engine(cache: &Path) -> Option<OciEngine> {
    let mut config = OciConfig::from_env(Flavor::Docker);
    config.cache_dir = cache.to_owned();
    config.sweep_on_start = false;
    config.handle_signals = false;
    match OciEngine::new(config) {
        Ok(engine) => Some(engine),
        Err(e) => {
            println!("SKIPPED: docker: {}", e.to_string().replace('\n', " / "));
            None
        }
    }
}

#[test]
fn forged_containers_on_a_shared_daemon_are_never_swept() {
    let (prefix, forger_uid) = match forger_prefix() {
        Ok(found) => found,
        Err(why) => {
            println!("SKIPPED: docker shared with {FORGER}: {why}");
            return;
        }
    };
    let xdg = tempfile::tempdir().expect("cache");
    let cache = xdg.path().join("python-sandbox");
    let Some(engine) = engine(&cache) else { return };
    let image = engine_oci::DEFAULT_IMAGE;
    let key = reaper::MarkKey::load(&reaper::PrivateDir::open(&cache.join("keys")).expect("keys"))
        .expect("the engine made this user's key");
    let pid = std::process::id();
    let owner = reaper::Owner::current(None).expect("owner");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();

    // This user's: a leftover run that expired (the sweep must still remove it), and a live
    // session (alive owner, long ttl: nothing of its own makes it go).
    let left_id = format!("left{pid}");
    let left_name = format!("python-sandbox-run-{left_id}");
    let mut left = reaper::labels_for_run(&left_id, &owner, now - 100, Some(now - 10)).expect("l");
    key.sign(&left_name, &mut left);
    let session_id = format!("sess{pid}");
    let session_name = format!("python-sandbox-session-{session_id}");
    let mut session = reaper::labels_for_session(&session_id, &owner, now, 86_400).expect("l");
    key.sign(&session_name, &mut session);
    // An unrelated container of the other user: no python-sandbox labels at all.
    let victim_name = format!("psbx-forge-victim-{pid}");
    let mut cleanup = Cleanup(vec![victim_name.clone(), left_name.clone(), session_name.clone()]);
    let victim = create(&prefix, &victim_name, &BTreeMap::new(), image);
    let left_full = create(&[], &left_name, &left, image);
    let session_full = create(&[], &session_name, &session, image);

    // The forgeries, all made by the other user:
    // 1. named after the victim's id prefix, with our (expired) labels copied;
    let prefix_name = victim[..12].to_owned();
    let forged_prefix = create(&prefix, &prefix_name, &left, image);
    // 2. expired, carrying our live session's id and labels (its mark too);
    let mut companion = session.clone();
    companion.insert(reaper::labels::EXPIRES.to_owned(), (now - 10).to_string());
    let forged_companion =
        create(&prefix, &format!("python-sandbox-run-fake{pid}"), &companion, image);
    // 3. our leftover's labels, mark included, copied onto another name.
    let forged_copy = create(&prefix, &format!("python-sandbox-run-copy{pid}"), &left, image);
    cleanup.0.extend([forged_prefix.clone(), forged_companion.clone(), forged_copy.clone()]);
    let everything = [
        victim.as_str(),
        left_full.as_str(),
        session_full.as_str(),
        forged_prefix.as_str(),
        forged_companion.as_str(),
        forged_copy.as_str(),
    ];

    // The other user's own `reap` (its own cache, so its own key) takes nothing of ours.
    let theirs = tempfile::tempdir().expect("their cache");
    rustix::fs::chown(theirs.path(), Some(rustix::process::Uid::from_raw(forger_uid)), None)
        .expect("chown their cache");
    let their_reap = crate::support::cli_binary().map(|bin| {
        let mut cmd = Command::new(&prefix[0]);
        cmd.args(&prefix[1..]).arg(&bin).args(["reap", "--json", "--engine", "docker"]);
        cmd.env_clear().env("XDG_CACHE_HOME", theirs.path()).env("PATH", "/usr/bin:/bin");
        ok(cmd.output(), "their reap")
    });
    if their_reap.is_none() {
        println!("SKIPPED (part): python-sandbox binary not built: the other user's reap");
    }
    for id in everything {
        assert!(exists(id), "the other user's reap removed {id}: {their_reap:?}");
    }

    // Ours removes our leftover, and nothing else.
    let swept = engine.reap(false);
    let survivors: Vec<bool> = everything.iter().map(|id| exists(id)).collect();
    let swept = swept.expect("reap");
    assert_eq!(
        survivors,
        [true, false, true, true, true, true],
        "victim, leftover, session, prefix-named, companion, copy: {swept:#?}"
    );
    let names: Vec<&str> = swept.iter().map(|s| s.container.as_str()).collect();
    assert_eq!(names, [left_name.as_str()], "{swept:#?}");
    assert!(swept[0].removed, "{swept:#?}");
}

/// Issue 9 item 8 end to end: root without `HOME` falls back to `$TMPDIR/python-sandbox-0`;
/// when another user made it first (with a link where the daily prune stamp goes), `run`
/// refuses with a hint instead of truncating the link's target.
#[test]
fn a_foreign_fallback_cache_is_refused_and_its_links_never_followed() {
    let (_, forger_uid) = match forger_prefix() {
        Ok(found) => found,
        Err(why) => {
            println!("SKIPPED: docker shared with {FORGER}: {why}");
            return;
        }
    };
    let Some(bin) = crate::support::cli_binary() else {
        println!("SKIPPED: python-sandbox binary not built (cargo build -p cli)");
        return;
    };
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().expect("tmp");
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let base = tmp.path().join("python-sandbox-0");
    let oci = base.join("python-sandbox/oci");
    std::fs::create_dir_all(&oci).expect("planted dirs");
    let victim = tmp.path().join("victim.txt");
    std::fs::write(&victim, "precious\n").expect("victim");
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3 * 86_400);
    std::fs::File::options()
        .write(true)
        .open(&victim)
        .and_then(|f| f.set_modified(old))
        .expect("age");
    for flavor in ["docker", "podman"] {
        std::os::unix::fs::symlink(&victim, oci.join(format!("last-env-prune-{flavor}")))
            .expect("plant");
    }
    let other = Some(rustix::process::Uid::from_raw(forger_uid));
    for path in [&base, &base.join("python-sandbox"), &oci] {
        rustix::fs::chown(path, other, None).expect("chown");
    }
    let (_dir, ws) = crate::support::workspace("print('hi')\n");
    let out = Command::new(&bin)
        .args(["run", "--engine", "docker"])
        .arg(ws.join("main.py"))
        .current_dir(&ws)
        .env_remove("HOME")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("XDG_RUNTIME_DIR")
        .env("TMPDIR", tmp.path())
        .output()
        .expect("cli");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "precious\n", "{stderr}");
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("refusing to keep python-sandbox's files"), "{stderr}");
    assert!(stderr.contains("hint: "), "{stderr}");
}
