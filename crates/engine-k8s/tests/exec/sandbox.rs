//! `PodSandbox`, the session handle, on the same stand-ins: the local kubelet and the real
//! agent. The secret env reaches every command over the exec's stdin and never the exec URL;
//! an error that would carry a secret is masked; files and listings go through the workdir.
//! A service's preview without an ingress is a local port-forward through the kubelet's
//! `portforward` endpoint, closed by `stop_service`.

use std::io::{Read as _, Write as _};

use engine_k8s::{Attached, Error, PodSandbox, Preview};
use sandbox_core::{Captured, ExecRequest, Sandbox as _, ServiceSpec, WarmSession as _};

use crate::kubelet::Kubelet;
use crate::{Agent, V4};

const SECRET: &str = "s3cr3t-token-value";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handle_adds_its_secret_env_over_stdin_and_masks_it_in_errors() {
    let Some(agent) = Agent::start() else { return };
    let kubelet = Kubelet::start(V4).await;
    let workdir = tempdir("secret");
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

/// A plain HTTP GET of `/` at `url` (`http://127.0.0.1:PORT`): the body of a 200.
fn http_get(url: &str) -> std::io::Result<String> {
    let (host, port) = engine_k8s::preview::host_port(url).expect("an http URL");
    let mut tcp = std::net::TcpStream::connect((host.as_str(), port))?;
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    write!(tcp, "GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")?;
    let mut response = String::new();
    tcp.read_to_string(&mut response)?;
    assert!(
        response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200"),
        "{response}"
    );
    Ok(response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default())
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_ingress_the_preview_is_a_port_forward_that_stop_closes() {
    let Some(agent) = Agent::start() else { return };
    let kubelet = Kubelet::start(V4).await;
    let workdir = tempdir("forward");
    std::fs::write(workdir.join("index.html"), "served through the forward\n").expect("page");
    for (preview, ingress) in [
        (Preview::PortForward, "http://unused.invalid".to_owned()),
        // Nothing answers there: `auto` gives up on the ingress and forwards instead.
        (Preview::Auto, format!("http://127.0.0.1:{}", free_port())),
    ] {
        let port = free_port();
        let sandbox = PodSandbox::attach(
            agent.exec(&kubelet),
            Attached {
                id: "fwd".to_owned(),
                workdir: workdir.display().to_string(),
                urls: vec![(port, ingress.clone())],
                preview,
                ..Attached::default()
            },
        );
        let argv = [crate::PYTHON, "-m", "http.server", &port.to_string(), "--bind", "127.0.0.1"];
        let spec = ServiceSpec { argv: argv.map(str::to_owned).to_vec(), port, env: Vec::new() };
        let service = sandbox.start_service(&spec).await.expect("start the service");
        assert!(service.url.starts_with("http://127.0.0.1:"), "{preview:?}: {}", service.url);
        assert_ne!(service.url, ingress, "{preview:?}");
        let url = service.url.clone();
        let body = tokio::task::spawn_blocking(move || http_get(&url)).await.expect("join");
        assert_eq!(body.expect("GET through the forward"), "served through the forward\n");
        let uris = kubelet.uris.lock().expect("uris").join("\n");
        assert!(uris.contains(&format!("/portforward?&ports={port}")), "{uris}");
        sandbox.stop_service(&service).await.expect("stop the service");
        let (host, local) = engine_k8s::preview::host_port(&service.url).expect("url");
        let refused = std::net::TcpStream::connect((host.as_str(), local));
        assert!(refused.is_err(), "{preview:?}: the forward still listens after stop_service");
    }
    let _ = std::fs::remove_dir_all(&workdir);
}

fn tempdir(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("psbx-k8s-handle-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("workdir");
    dir
}
