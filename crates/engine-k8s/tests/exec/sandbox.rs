//! `PodSandbox`, the session handle, on the same stand-ins: the local kubelet and the real
//! agent. The secret env reaches every command over the exec's stdin and never the exec URL;
//! an error that would carry a secret is masked; files and listings go through the workdir.

use engine_k8s::{Attached, Error, PodSandbox};
use sandbox_core::{Captured, ExecRequest, Sandbox as _, WarmSession as _};

use crate::kubelet::Kubelet;
use crate::{Agent, V4};

const SECRET: &str = "s3cr3t-token-value";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handle_adds_its_secret_env_over_stdin_and_masks_it_in_errors() {
    let Some(agent) = Agent::start() else { return };
    let kubelet = Kubelet::start(V4).await;
    let workdir = tempdir();
    let sandbox = PodSandbox::attach(
        agent.exec(&kubelet),
        Attached {
            id: "abc".to_owned(),
            workdir: workdir.display().to_string(),
            secret_env: vec![("API_TOKEN".to_owned(), SECRET.to_owned())],
            ..Attached::default()
        },
    );
    assert_eq!(sandbox.secrets(), [SECRET]);
    let mut out = Captured::default();
    let request = ExecRequest::new(&["sh", "-c", "printf '%s|' \"$API_TOKEN\"; pwd"]);
    let outcome = sandbox.exec(&request, &mut out).await.expect("exec");
    assert_eq!(outcome.exit_code, 0);
    assert_eq!(
        out.stdout_lossy(),
        format!("{SECRET}|{}\n", workdir.display()),
        "default cwd is the workdir"
    );
    let file = format!("{}/sub/f.bin", workdir.display());
    sandbox.write_file(&file, b"\x00\xffdata").await.expect("write");
    assert_eq!(sandbox.read_file(&file).await.expect("read"), b"\x00\xffdata");
    let listed = sandbox.list_dir(&format!("{}/sub", workdir.display())).await.expect("list");
    assert_eq!(listed.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["f.bin"]);
    // The error names the path, which here holds the secret: the text is masked.
    let error = sandbox.read_file(&format!("/no/such/{SECRET}")).await.expect_err("missing");
    assert!(matches!(error, Error::Scrubbed { .. }), "{error:?}");
    assert!(!error.to_string().contains(SECRET), "{error}");
    assert!(!format!("{error:?}").contains(SECRET), "{error:?}");
    let uris = kubelet.uris.lock().expect("uris").join("\n");
    assert!(
        !uris.contains(SECRET) && !uris.contains("API_TOKEN"),
        "the exec URL carries the env: {uris}"
    );
    sandbox.stop().await.expect("stop");
    let after = sandbox.exec(&ExecRequest::new(&["true"]), &mut Captured::default()).await;
    assert!(after.is_err(), "a stopped handle runs nothing");
    let _ = std::fs::remove_dir_all(&workdir);
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("psbx-k8s-handle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("workdir");
    dir
}
