//! The workspace sync through the `Sandbox` protocol on `FakeSandbox`: what goes in (ignore
//! files, `.git`, links leaving the workspace, the limit before anything is sent), what comes
//! back, and archives or listings from the sandbox that would leave the workspace, refused
//! before anything is applied. Modes, links and deletions need a real filesystem: the exec
//! tier's stand-in kubelet runs the same sync on real processes (`tests/exec/sync.rs`).

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use sandbox_core::sync::{LIST_PROGRAM, PACK_PROGRAM, SANDBOX_PYTHON};
use sandbox_core::{FakeFs, FakeReply, FakeSandbox, Stream};

use crate::workspace::{sync_in, sync_out};

const DEST: &str = "/workspace";

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("psbx-sync-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("tempdir");
    dir
}

fn write(root: &Path, rel: &str, contents: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, contents).expect("write");
}

/// The fake's stand-in for `LIST_PROGRAM` over its filesystem (no modes there: 0644/0755;
/// the stamp is the contents, so every write shows).
fn listing(
    fs: &FakeFs,
    dir: &str,
    rel: &str,
    out: &mut serde_json::Map<String, serde_json::Value>,
) {
    for entry in fs.list(dir).unwrap_or_default() {
        let path =
            if rel.is_empty() { entry.name.clone() } else { format!("{rel}/{}", entry.name) };
        let full = format!("{dir}/{}", entry.name);
        match entry.kind {
            sandbox_core::EntryKind::Dir => {
                out.insert(path.clone(), serde_json::json!(["d", 0o755]));
                listing(fs, &full, &path, out);
            }
            _ => {
                let contents = fs.read(&full).unwrap_or_default();
                let stamp = String::from_utf8_lossy(contents).into_owned();
                out.insert(path, serde_json::json!(["f", 0o644, contents.len(), stamp]));
            }
        }
    }
}

/// The fake's stand-in for `PACK_PROGRAM`.
fn pack(fs: &FakeFs, stdin: &[u8]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for name in stdin.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let name = String::from_utf8_lossy(name).into_owned();
        let full = format!("{DEST}/{name}");
        let mut header = tar::Header::new_gnu();
        match fs.read(&full) {
            Ok(contents) => {
                header.set_size(contents.len() as u64);
                header.set_mode(0o644);
                builder.append_data(&mut header, &name, contents).expect("pack");
            }
            Err(_) => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(0o755);
                header.set_size(0);
                builder.append_data(&mut header, &name, std::io::empty()).expect("pack");
            }
        }
    }
    builder.into_inner().expect("tar")
}

fn fake() -> FakeSandbox {
    let sandbox = FakeSandbox::new("sync");
    sandbox.on_exec(&[SANDBOX_PYTHON, "-c", LIST_PROGRAM], |_, fs| {
        let mut entries = serde_json::Map::new();
        listing(fs, DEST, "", &mut entries);
        let json = serde_json::json!({ "entries": entries, "skipped": 0 });
        FakeReply::exit(0).stdout(&json.to_string())
    });
    sandbox.on_exec(&[SANDBOX_PYTHON, "-c", PACK_PROGRAM], |request, fs| {
        FakeReply::exit(0).chunk(Stream::Stdout, &pack(fs, &request.stdin))
    });
    sandbox
}

fn files_below(fs: &FakeFs) -> Vec<String> {
    fs.files().keys().filter_map(|p| p.strip_prefix("/workspace/")).map(str::to_owned).collect()
}

#[tokio::test]
async fn what_goes_in_and_what_comes_back_through_the_protocol() {
    let root = tempdir("fake");
    write(&root, ".gitignore", "/out/\n*.log\n");
    write(&root, "a.txt", "a");
    write(&root, "x.log", "log");
    write(&root, "out/old", "old");
    write(&root, "sub/.python-sandbox-ignore", "secret.key\n");
    write(&root, "sub/d.txt", "d");
    write(&root, "sub/secret.key", "k");
    write(&root, ".git/config", "[core]");
    std::os::unix::fs::symlink("../../etc/passwd", root.join("sub/escape")).expect("link");
    let sandbox = fake();
    let mut lines = Vec::new();
    let synced = sync_in(&sandbox, &root, DEST, 1 << 20, &mut |l| lines.push(l.to_owned()))
        .await
        .expect("in");
    assert_eq!(
        files_below(&sandbox.fs()),
        [".gitignore", "a.txt", "sub/.python-sandbox-ignore", "sub/d.txt"],
        "ignored paths, `.git` and the outbound link stay on the host"
    );
    assert_eq!((synced.files, synced.bytes), (4, 12 + 1 + 11 + 1));
    assert_eq!(
        synced.warnings,
        ["links that point outside the workspace are left out of the sync: `sub/escape`"]
    );

    // The script: one file changed, one new in a new directory.
    sandbox.add_file("/workspace/a.txt", b"changed").expect("edit");
    sandbox.add_file("/workspace/new/out.json", b"{}").expect("new");
    let back =
        sync_out(&sandbox, &root, DEST, &synced.baseline, 1 << 20, &mut |_| {}).await.expect("out");
    assert_eq!(back.written, ["a.txt", "new/out.json"]);
    assert!(back.deleted.is_empty());
    assert_eq!(std::fs::read_to_string(root.join("a.txt")).expect("a"), "changed");
    assert_eq!(std::fs::read_to_string(root.join("new/out.json")).expect("new"), "{}");
    assert_eq!(std::fs::read_to_string(root.join("out/old")).expect("kept"), "old");
    let mode = std::fs::metadata(root.join("new/out.json")).expect("meta").permissions().mode();
    assert_eq!(mode & 0o777, 0o644);
    // Nothing left behind by the replace-by-rename.
    let names: Vec<String> = std::fs::read_dir(&root)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("python-sandbox-"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test]
async fn above_the_limit_nothing_is_sent() {
    let root = tempdir("limit");
    write(&root, "big.bin", &"x".repeat(2000));
    write(&root, "small", "s");
    let sandbox = fake();
    let err = sync_in(&sandbox, &root, DEST, 1000, &mut |_| {}).await.expect_err("too large");
    assert!(err.to_string().contains("larger than the sync limit of 1000 bytes"), "{err}");
    assert!(err.to_string().contains("`big.bin`"), "{err}");
    assert!(sandbox.calls().is_empty(), "refused before anything was sent: {:?}", sandbox.calls());
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test]
async fn a_returned_archive_that_leaves_the_workspace_changes_nothing() {
    let root = tempdir("evil");
    write(&root, "a.txt", "a");
    let sandbox = fake();
    let synced = sync_in(&sandbox, &root, DEST, 1 << 20, &mut |_| {}).await.expect("in");
    sandbox.add_file("/workspace/a.txt", b"changed").expect("edit");
    // A packer (the sandbox's code can replace it) that adds members nobody asked for.
    for member in ["../escaped.txt", "/tmp/abs.txt", "other.txt"] {
        let raw = member.to_owned();
        sandbox.on_exec(&[SANDBOX_PYTHON, "-c", PACK_PROGRAM], move |_, _| {
            let mut archive = Vec::new();
            let mut header = tar::Header::new_gnu();
            header.set_size(4);
            header.set_mode(0o644);
            // `set_path` refuses `..` and absolute paths itself: write the name raw.
            let name = &mut header.as_old_mut().name;
            name[..raw.len()].copy_from_slice(raw.as_bytes());
            header.set_cksum();
            let mut builder = tar::Builder::new(&mut archive);
            builder.append(&header, &b"evil"[..]).expect("append");
            builder.into_inner().expect("tar");
            FakeReply::exit(0).chunk(Stream::Stdout, &archive)
        });
        let err = sync_out(&sandbox, &root, DEST, &synced.baseline, 1 << 20, &mut |_| {})
            .await
            .expect_err("refused");
        assert!(err.to_string().starts_with("refused `"), "{member}: {err}");
        assert!(err.to_string().ends_with("nothing was applied"), "{err}");
        assert_eq!(std::fs::read_to_string(root.join("a.txt")).expect("a"), "a", "{member}");
    }
    assert!(!root.join("../escaped.txt").exists() && !root.join("other.txt").exists());
    // A listing that names a path outside is refused the same way.
    sandbox.on_exec(&[SANDBOX_PYTHON, "-c", LIST_PROGRAM], |_, _| {
        FakeReply::exit(0).stdout(r#"{"entries": {"../x": ["f", 420, 1, "1"]}}"#)
    });
    let err = sync_out(&sandbox, &root, DEST, &synced.baseline, 1 << 20, &mut |_| {})
        .await
        .expect_err("refused");
    assert!(err.to_string().starts_with("refused `../x`"), "{err}");
    let _ = std::fs::remove_dir_all(&root);
}

#[tokio::test]
async fn a_link_out_of_the_workspace_stays_in_the_sandbox_and_the_rest_comes_back() {
    let root = tempdir("outlink");
    write(&root, "a.txt", "a");
    let sandbox = fake();
    let synced = sync_in(&sandbox, &root, DEST, 1 << 20, &mut |_| {}).await.expect("in");
    // What the conformance case `wall-links` does in a pod: a link to a host-looking path,
    // next to ordinary output.
    // (The fake's filesystem has no links: the listing names them, as the pod's would.)
    sandbox.on_exec(&[SANDBOX_PYTHON, "-c", LIST_PROGRAM], |_, fs| {
        let mut entries = serde_json::Map::new();
        listing(fs, DEST, "", &mut entries);
        entries.insert("l".to_owned(), serde_json::json!(["l", "/tmp/host-dir"]));
        entries.insert("up".to_owned(), serde_json::json!(["l", "../../home/u/.ssh"]));
        FakeReply::exit(0).stdout(&serde_json::json!({ "entries": entries }).to_string())
    });
    sandbox.add_file("/workspace/out.txt", b"result").expect("out");
    sandbox.add_file("/workspace/a.txt", b"changed").expect("edit");
    let out = sync_out(&sandbox, &root, DEST, &synced.baseline, 1 << 20, &mut |_| {})
        .await
        .expect("the run's outputs come back");
    assert_eq!(out.written, ["a.txt", "out.txt"]);
    assert_eq!(std::fs::read_to_string(root.join("out.txt")).expect("out"), "result");
    assert_eq!(std::fs::read_to_string(root.join("a.txt")).expect("a"), "changed");
    assert!(std::fs::symlink_metadata(root.join("l")).is_err(), "the link is not made on the host");
    assert!(std::fs::symlink_metadata(root.join("up")).is_err());
    insta::assert_snapshot!(out.warnings.join("\n"), @"kept in the sandbox, links that point outside the workspace: `l`, `up`");
    let _ = std::fs::remove_dir_all(&root);
}
