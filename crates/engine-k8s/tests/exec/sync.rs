//! The workspace sync on the handle of a real run (`PodSandbox` on the stand-in kubelet, the
//! real agent, the real `LIST_PROGRAM`, `PACK_PROGRAM` and `tar -x`): modes kept, links
//! inside kept as links, deletions applied, setuid bits and `.git` never brought back, and the
//! listing baseline makes an untouched workspace come back as nothing.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use engine_k8s::workspace::{sync_in, sync_out};
use engine_k8s::{Attached, PodSandbox};
use sandbox_core::{Captured, ExecRequest, Sandbox as _};

use crate::kubelet::Kubelet;
use crate::{Agent, V4};

fn fresh(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("psbx-k8s-sync-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

fn write(root: &Path, rel: &str, contents: &str, mode: u32) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(&path, contents).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).expect("meta").permissions().mode() & 0o7777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_gets_the_workspace_and_gives_back_what_it_changed() {
    let Some(agent) = Agent::start() else { return };
    let kubelet = Kubelet::start(V4).await;
    let host = fresh("host");
    let pod = fresh("pod");
    write(&host, ".gitignore", "*.log\n", 0o644);
    write(&host, "keep.txt", "same", 0o644);
    write(&host, "edit.txt", "before", 0o644);
    write(&host, "gone.txt", "bye", 0o644);
    write(&host, "tool.sh", "#!/bin/sh\n", 0o755);
    write(&host, "old/inner.txt", "x", 0o644);
    write(&host, "debug.log", "ignored", 0o644);
    std::os::unix::fs::symlink("keep.txt", host.join("alias")).expect("link");
    std::os::unix::fs::symlink("/etc/passwd", host.join("abs")).expect("link");
    let workdir = pod.display().to_string();
    let sandbox = PodSandbox::attach(
        agent.exec(&kubelet),
        Attached { id: "sync".to_owned(), workdir: workdir.clone(), ..Attached::default() },
    );
    let synced = sync_in(&sandbox, &host, &workdir, 1 << 20, &mut |_| {}).await.expect("in");
    assert!(pod.join("keep.txt").exists() && pod.join("old/inner.txt").exists());
    assert!(!pod.join("debug.log").exists(), "ignored");
    assert!(!pod.join("abs").exists(), "an absolute link is left out");
    assert_eq!(std::fs::read_link(pod.join("alias")).expect("alias").to_str(), Some("keep.txt"));
    assert_eq!(mode(&pod.join("tool.sh")) & 0o111, 0o111, "modes go in");

    // Nothing touched: nothing comes back.
    let untouched = sync_out(&sandbox, &host, &workdir, &synced.baseline, 1 << 20, &mut |_| {})
        .await
        .expect("out");
    assert_eq!(untouched, Default::default());

    let script = "printf after > edit.txt && rm gone.txt && rm -r old && mkdir -p new/deep \
        && printf r > new/deep/run.sh && chmod 755 new/deep/run.sh && chmod 600 keep.txt \
        && ln -s new/deep/run.sh latest && mkdir -p .git/hooks && printf x > .git/hooks/pre-commit";
    let mut out = Captured::default();
    let ran =
        sandbox.exec(&ExecRequest::new(&["sh", "-c", script]), &mut out).await.expect("script");
    assert_eq!(ran.exit_code, 0, "{}", out.stderr_lossy());
    // The agent's wall refuses a setuid `chmod` in the pod; a set-id file can still be there
    // (an image's, a volume's), so one is made from outside: it must come back without the bit.
    std::fs::set_permissions(pod.join("new/deep/run.sh"), std::fs::Permissions::from_mode(0o4755))
        .expect("setuid from outside the wall");
    let back = sync_out(&sandbox, &host, &workdir, &synced.baseline, 1 << 20, &mut |_| {})
        .await
        .expect("out");
    assert_eq!(back.written, ["edit.txt", "keep.txt", "latest", "new/deep/run.sh"]);
    assert_eq!(back.deleted, ["old/inner.txt", "old", "gone.txt"]);
    assert_eq!(back.warnings.len(), 1, "{:?}", back.warnings);
    assert!(back.warnings[0].contains(".git/hooks/pre-commit"), "{:?}", back.warnings);
    assert_eq!(std::fs::read_to_string(host.join("edit.txt")).expect("edit"), "after");
    assert!(!host.join("gone.txt").exists() && !host.join("old").exists());
    assert_eq!(mode(&host.join("keep.txt")), 0o600, "a mode change comes back");
    assert_eq!(mode(&host.join("new/deep/run.sh")), 0o755, "without the setuid bit");
    assert_eq!(
        std::fs::read_link(host.join("latest")).expect("link").to_str(),
        Some("new/deep/run.sh")
    );
    assert!(!host.join(".git").exists(), "never into the host's .git");
    assert_eq!(std::fs::read_to_string(host.join("debug.log")).expect("log"), "ignored");
    let _ = std::fs::remove_dir_all(&host);
    let _ = std::fs::remove_dir_all(&pod);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_on_the_host_is_never_followed_by_what_comes_back() {
    let Some(agent) = Agent::start() else { return };
    let kubelet = Kubelet::start(V4).await;
    let host = fresh("hostlink");
    let pod = fresh("podlink");
    let outside = fresh("outside");
    // `out` on the host leads out of the workspace; it is not synced, so in the pod the
    // script can make a real directory of that name and write below it.
    std::os::unix::fs::symlink(&outside, host.join("out")).expect("link");
    let workdir = pod.display().to_string();
    let sandbox = PodSandbox::attach(
        agent.exec(&kubelet),
        Attached { id: "link".to_owned(), workdir: workdir.clone(), ..Attached::default() },
    );
    let synced = sync_in(&sandbox, &host, &workdir, 1 << 20, &mut |_| {}).await.expect("in");
    let mut out = Captured::default();
    let script = "mkdir out && printf pwned > out/planted && printf ok > fine.txt";
    let ran = sandbox.exec(&ExecRequest::new(&["sh", "-c", script]), &mut out).await.expect("run");
    assert_eq!(ran.exit_code, 0, "{}", out.stderr_lossy());
    let back = sync_out(&sandbox, &host, &workdir, &synced.baseline, 1 << 20, &mut |_| {})
        .await
        .expect("out");
    assert!(!outside.join("planted").exists(), "written through the host's link");
    assert_eq!(back.written, ["fine.txt"]);
    assert!(back.warnings.iter().any(|w| w.contains("`out/planted`")), "{:?}", back.warnings);
    for dir in [&host, &pod, &outside] {
        let _ = std::fs::remove_dir_all(dir);
    }
}
