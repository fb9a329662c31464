//! Waiting for a preview URL to answer through the cluster's ingress: the pod's port listens
//! before the ingress controller routes to it (its Ingress and the Service's endpoints reach
//! the controller a moment later), so `start_service` returns only once a plain HTTP GET of
//! the URL gets an answer that is the service's, not the controller's.
//!
//! Where no ingress controller serves the domain, [`Forward`] is the preview instead: a local
//! listener on `127.0.0.1:0` whose every connection is one port-forward of the pod's port
//! (kube's `Api::portforward`, the `pods/portforward` subresource, a WebSocket of its own per
//! connection as `kubectl port-forward` does), held by the handle until `stop_service` or drop.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::Error;

/// Pure: host and port of an `http://host[:port][/path]` URL.
pub fn host_port(url: &str) -> Option<(String, u16)> {
    let rest = url.strip_prefix("http://")?;
    let authority = rest.split('/').next()?;
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) => (host, port.parse().ok()?),
        None => (authority, 80),
    };
    (!host.is_empty()).then(|| (host.to_owned(), port))
}

/// Pure: whether an HTTP answer (its first bytes) comes from the service rather than from an
/// ingress controller that cannot route to it yet (502, 503, 504, or its own 404 page).
pub fn answered(response: &[u8]) -> bool {
    let text = String::from_utf8_lossy(response);
    let Some(code) = text.strip_prefix("HTTP/1.").and_then(|r| r.get(2..5)) else {
        return false;
    };
    match code {
        "502" | "503" | "504" => false,
        "404" => !text.to_ascii_lowercase().contains("nginx"),
        _ => code.chars().all(|c| c.is_ascii_digit()),
    }
}

/// Why one GET of the URL did not answer.
enum Attempt {
    /// Nothing can ever answer at this address: the name does not resolve or nothing
    /// listens, so no ingress controller serves the domain.
    Absent(String),
    /// Something listens (a controller not routing yet, a slow service).
    Pending(String),
}

async fn get_once(host: &str, port: u16) -> Result<Vec<u8>, Attempt> {
    let addrs: Vec<_> = match tokio::net::lookup_host((host, port)).await {
        Ok(addrs) => addrs.collect(),
        Err(e) => return Err(Attempt::Absent(format!("`{host}` does not resolve: {e}"))),
    };
    let Some(addr) = addrs.first() else {
        return Err(Attempt::Absent(format!("`{host}` does not resolve")));
    };
    let mut tcp = match tokio::net::TcpStream::connect(addr).await {
        Ok(tcp) => tcp,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(Attempt::Absent(format!("nothing listens at {addr}")));
        }
        Err(e) => return Err(Attempt::Pending(e.to_string())),
    };
    let pending = |e: std::io::Error| Attempt::Pending(e.to_string());
    let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.map_err(pending)?;
    let mut buf = vec![0u8; 4096];
    let mut got = 0;
    while got < buf.len() {
        let n = tcp.read(&mut buf[got..]).await.map_err(pending)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    buf.truncate(got);
    Ok(buf)
}

/// Waits until `url` answers (see [`answered`]), at most `patience`.
pub async fn wait_answers(url: &str, patience: Duration) -> Result<(), Error> {
    wait(url, patience, false).await
}

/// [`wait_answers`], except that it gives up at once when no ingress controller can serve
/// the URL at all (the name does not resolve, or nothing listens there, twice in a row): the
/// `auto` preview then falls back to a port-forward without waiting out its patience, while
/// a controller that answers but does not route yet is still waited for.
pub async fn wait_routed(url: &str, patience: Duration) -> Result<(), Error> {
    wait(url, patience, true).await
}

/// Whether anything serves `url`'s address at all (a controller, routing or not): with the
/// `auto` preview a run decides by this before its script listens, so only an address that
/// cannot answer (no name, nothing listening, twice in a row) makes it a port-forward.
pub async fn controller_listens(url: &str) -> bool {
    let Some((host, port)) = host_port(url) else { return false };
    for attempt in 0..2 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        match tokio::time::timeout(Duration::from_secs(3), get_once(&host, port)).await {
            Ok(Err(Attempt::Absent(_))) => {}
            // An answer, a slow one or none within 3 s: something is there.
            _ => return true,
        }
    }
    false
}

async fn wait(url: &str, patience: Duration, give_up_when_absent: bool) -> Result<(), Error> {
    let Some((host, port)) = host_port(url) else {
        return Err(Error::Host {
            what: format!("reach `{url}`"),
            message: "not an http URL".to_owned(),
        });
    };
    let started = Instant::now();
    let deadline = started + patience;
    let mut last = String::from("no answer");
    let mut absent_in_a_row = 0;
    while Instant::now() < deadline {
        let attempt = tokio::time::timeout(Duration::from_secs(3), get_once(&host, port)).await;
        absent_in_a_row = match &attempt {
            Ok(Err(Attempt::Absent(_))) => absent_in_a_row + 1,
            _ => 0,
        };
        match attempt {
            Ok(Ok(response)) if answered(&response) => return Ok(()),
            Ok(Ok(response)) => {
                last = String::from_utf8_lossy(&response)
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_owned();
            }
            Ok(Err(Attempt::Absent(why) | Attempt::Pending(why))) => last = why,
            Err(_) => last = "no answer within 3 s".to_owned(),
        }
        if give_up_when_absent && absent_in_a_row >= 2 {
            let secs = started.elapsed().as_secs();
            return Err(Error::PreviewSilent { url: url.to_owned(), secs, last });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(Error::PreviewSilent { url: url.to_owned(), secs: patience.as_secs(), last })
}

/// A local port-forward to one port of a pod; dropping it closes the listener and every
/// connection through it.
#[derive(Debug)]
pub struct Forward {
    url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Forward {
    /// Listens on `127.0.0.1:0` and forwards each connection to `port` of `pod`, the accept
    /// loop a task on `runtime` (the engine's, which outlives the call that starts it).
    pub async fn start(
        client: kube::Client,
        namespace: &str,
        pod: &str,
        port: u16,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Forward, Error> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.map_err(|e| {
            Error::Host { what: "listen for a port-forward".to_owned(), message: e.to_string() }
        })?;
        let url = match listener.local_addr() {
            Ok(addr) => format!("http://{addr}"),
            Err(e) => {
                return Err(Error::Host {
                    what: "listen for a port-forward".to_owned(),
                    message: e.to_string(),
                });
            }
        };
        let pods: kube::Api<Pod> = kube::Api::namespaced(client, namespace);
        let pod = pod.to_owned();
        let task = runtime.spawn(async move {
            // Dropped with the task: every connection ends with the listener.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    accepted = listener.accept() => {
                        let Ok((tcp, _)) = accepted else { continue };
                        connections.spawn(pipe(pods.clone(), pod.clone(), port, tcp));
                    }
                    Some(_) = connections.join_next(), if !connections.is_empty() => {}
                }
            }
        });
        Ok(Forward { url, task })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Ends kube's forwarding task with the connection, also when the connection's task is aborted.
struct AbortOnDrop(kube::api::Portforwarder);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One local connection through one port-forward; a refusal just closes the connection (the
/// caller sees what a dead port gives).
async fn pipe(pods: kube::Api<Pod>, pod: String, port: u16, mut tcp: tokio::net::TcpStream) {
    let Ok(forwarder) = pods.portforward(&pod, &[port]).await else { return };
    let mut forwarder = AbortOnDrop(forwarder);
    let Some(mut upstream) = forwarder.0.take_stream(port) else { return };
    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut upstream).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_answers() {
        assert_eq!(
            host_port("http://abc.127.0.0.1.nip.io"),
            Some(("abc.127.0.0.1.nip.io".into(), 80))
        );
        assert_eq!(host_port("http://127.0.0.1:8080/x"), Some(("127.0.0.1".into(), 8080)));
        assert_eq!(host_port("https://x"), None);
        assert!(answered(b"HTTP/1.1 200 OK\r\n"));
        assert!(answered(b"HTTP/1.0 404 File not found\r\n\r\nno such page"));
        assert!(!answered(b"HTTP/1.1 503 Service Temporarily Unavailable\r\n"));
        assert!(!answered(b"HTTP/1.1 404 Not Found\r\n\r\n<center>nginx</center>"));
        assert!(!answered(b"garbage"));
    }

    /// A port nobody listens on: the `auto` preview gives up after two refused attempts
    /// instead of waiting out an hour of patience, and says why.
    #[tokio::test]
    async fn routed_gives_up_when_nothing_listens() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("addr").port()
        };
        let url = format!("http://127.0.0.1:{port}");
        let waited = wait_routed(&url, Duration::from_secs(3600));
        let error = tokio::time::timeout(Duration::from_secs(120), waited)
            .await
            .expect("gave up without waiting out its patience")
            .expect_err("nothing listens");
        let Error::PreviewSilent { last, .. } = error else { panic!("{error:?}") };
        assert!(last.contains("nothing listens"), "{last}");
    }

    /// A run's `auto` preview: an address nobody serves is a port-forward, one where anything
    /// answers (a controller's 503 before it routes) is the Ingress.
    #[tokio::test]
    async fn a_controller_is_whatever_listens_at_the_address() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let url = format!("http://127.0.0.1:{port}");
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                let _ = tcp.write_all(b"HTTP/1.1 503 Service Unavailable\r\n\r\n").await;
            }
        });
        assert!(controller_listens(&url).await);
        let silent = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("addr").port()
        };
        assert!(!controller_listens(&format!("http://127.0.0.1:{silent}")).await);
        assert!(!controller_listens("https://x").await);
    }

    /// Something that listens but never answers like the service is waited for until the
    /// patience runs out, even by `wait_routed` (a controller that does not route yet).
    #[tokio::test]
    async fn routed_waits_for_a_controller_that_listens() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut tcp, _)) = listener.accept().await {
                let mut buf = [0u8; 512];
                let _ = tcp.read(&mut buf).await;
                let _ =
                    tcp.write_all(b"HTTP/1.1 503 Service Temporarily Unavailable\r\n\r\n").await;
            }
        });
        let url = format!("http://127.0.0.1:{port}");
        let error = wait_routed(&url, Duration::from_secs(1)).await.expect_err("never routed");
        let Error::PreviewSilent { last, secs, .. } = error else { panic!("{error:?}") };
        assert_eq!(secs, 1);
        assert!(last.contains("503"), "{last}");
    }
}
