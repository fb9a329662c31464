//! Connecting to Docker or Podman through the Docker Engine API. Podman is reached through its
//! Docker-compatible socket: `CONTAINER_HOST`, the rootless socket, the rootful one; when Podman
//! is installed but no API socket answers, a private `podman system service --time=60` is
//! started on a socket under our runtime directory, so Podman stays daemonless (it exits when
//! idle).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bollard::{ClientVersion, Docker};
use engine_detect::ApiEndpoint;

use crate::error::{Error, Result};

/// Which engine answers the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// The Docker daemon.
    Docker,
    /// Podman's Docker-compatible API service.
    Podman,
}

impl Flavor {
    /// `docker` or `podman`.
    pub fn as_str(self) -> &'static str {
        match self {
            Flavor::Docker => "docker",
            Flavor::Podman => "podman",
        }
    }
}

/// API version we speak: the newest both Docker 20.10 and Podman 4 understand.
const API_VERSION: ClientVersion = ClientVersion { major_version: 1, minor_version: 41 };
/// Per-request timeout (response headers); streams after an upgrade are not limited by it.
const REQUEST_TIMEOUT_SECS: u64 = 300;
const PING_TIMEOUT: Duration = Duration::from_millis(1500);
const SERVICE_START_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a private podman service stays up without requests.
const SERVICE_IDLE_SECS: u32 = 60;

/// Where the API answered, and how we got there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// The engine.
    pub flavor: Flavor,
    /// The endpoint that answered `/_ping`.
    pub endpoint: ApiEndpoint,
    /// Whether we started a private `podman system service` for it.
    pub started_service: bool,
}

/// Pure: the private podman socket path under a runtime directory.
pub(crate) fn private_socket(runtime_dir: &Path) -> PathBuf {
    runtime_dir.join("podman.sock")
}

/// Finds an answering endpoint for `flavor`, starting a private podman service when needed.
pub(crate) fn find_endpoint(
    flavor: Flavor,
    env: &dyn Fn(&str) -> Option<OsString>,
    runtime_dir: &Path,
    path: Option<&std::ffi::OsStr>,
) -> Result<Connection> {
    let uid = rustix::process::getuid().as_raw();
    let candidates = match flavor {
        Flavor::Docker => engine_detect::docker_endpoints(env("DOCKER_HOST").as_deref()),
        Flavor::Podman => {
            let mut c = engine_detect::podman_endpoints(
                env("CONTAINER_HOST").as_deref(),
                env("XDG_RUNTIME_DIR").as_deref(),
                uid,
            );
            c.push(Ok(ApiEndpoint::Unix(private_socket(runtime_dir))));
            c
        }
    };
    let mut tried = Vec::new();
    for candidate in &candidates {
        match candidate {
            Ok(endpoint) => match engine_detect::ping(endpoint, PING_TIMEOUT) {
                Ok(()) => {
                    return Ok(Connection {
                        flavor,
                        endpoint: endpoint.clone(),
                        started_service: false,
                    });
                }
                Err(why) => tried.push(format!("{endpoint}: {why}")),
            },
            Err(why) => tried.push(why.clone()),
        }
    }
    if flavor == Flavor::Podman
        && env("CONTAINER_HOST").is_none_or(|v| v.is_empty())
        && let Some(podman) = engine_detect::which("podman", path)
    {
        let socket = private_socket(runtime_dir);
        // Concurrent invocations must not start two services on one socket (the second would
        // unlink the first's): serialize on a lock and look again once we hold it.
        let lock = reaper::lock_env(&runtime_dir.join("podman.lock"), reaper::LockMode::Exclusive)?;
        let endpoint = ApiEndpoint::Unix(socket.clone());
        if engine_detect::ping(&endpoint, PING_TIMEOUT).is_err() {
            start_podman_service(&podman, &socket)?;
        }
        drop(lock);
        return Ok(Connection {
            flavor,
            endpoint: ApiEndpoint::Unix(socket),
            started_service: true,
        });
    }
    let hint = match flavor {
        Flavor::Docker => {
            "start the Docker daemon (e.g. `sudo systemctl start docker`), or set DOCKER_HOST"
                .to_owned()
        }
        Flavor::Podman => {
            "install podman, or start its API with `podman system service`".to_owned()
        }
    };
    Err(Error::Unreachable { engine: flavor.as_str(), detail: tried.join("; "), hint })
}

/// `podman system service --time=60 unix://SOCKET` in its own process group, detached from
/// us: it outlives this process and exits after a minute without requests.
fn start_podman_service(podman: &Path, socket: &Path) -> Result<()> {
    let dir = socket.parent().unwrap_or(Path::new("/"));
    let _ = std::fs::remove_file(socket);
    let mut command = std::process::Command::new(podman);
    command
        .arg("system")
        .arg("service")
        .arg(format!("--time={SERVICE_IDLE_SECS}"))
        .arg(format!("unix://{}", socket.display()))
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    let mut child = command
        .spawn()
        .map_err(Error::io(format!("starting `{} system service`", podman.display())))?;
    let endpoint = ApiEndpoint::Unix(socket.to_owned());
    let deadline = Instant::now() + SERVICE_START_TIMEOUT;
    loop {
        if engine_detect::ping(&endpoint, PING_TIMEOUT).is_ok() {
            // Reaped by nobody on purpose: it is meant to outlive us (init adopts it).
            drop(child);
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(Error::Unreachable {
                engine: "podman",
                detail: format!("`podman system service` exited with {status}"),
                hint: "run `podman system service --time=60` yourself to see why".to_owned(),
            });
        }
        if Instant::now() > deadline {
            return Err(Error::Unreachable {
                engine: "podman",
                detail: format!("`podman system service` did not answer on {}", socket.display()),
                hint: "run `podman system service --time=60` yourself to see why".to_owned(),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether the server behind `endpoint` runs rootless. Free: the server's uid comes from the
/// socket's peer credentials (`SO_PEERCRED`), not from `GET /info`, which podman answers in
/// half a second. False for a root server, and for TCP endpoints, whose server cannot be seen
/// (they keep the rootful behaviour).
pub(crate) fn rootless(endpoint: &ApiEndpoint) -> bool {
    let ApiEndpoint::Unix(path) = endpoint else { return false };
    let Ok(stream) = std::os::unix::net::UnixStream::connect(path) else { return false };
    rustix::net::sockopt::socket_peercred(&stream).is_ok_and(|server| !server.uid.is_root())
}

/// A bollard client for an endpoint. Needs a tokio runtime when used, not when built.
pub(crate) fn client(connection: &Connection) -> Result<Docker> {
    let engine = connection.flavor.as_str();
    let api = |e: bollard::errors::Error| Error::Api {
        engine,
        context: format!("connecting to {}", connection.endpoint),
        message: e.to_string(),
    };
    match &connection.endpoint {
        ApiEndpoint::Unix(path) => Docker::connect_with_unix(
            &path.display().to_string(),
            REQUEST_TIMEOUT_SECS,
            &API_VERSION,
        )
        .map_err(api),
        ApiEndpoint::Tcp(addr) => {
            Docker::connect_with_http(&format!("tcp://{addr}"), REQUEST_TIMEOUT_SECS, &API_VERSION)
                .map_err(api)
        }
    }
}

/// `GET /containers/json?all=1&filters=…` as untyped JSON. Typed listing fails as a whole on
/// podman, whose compat API reports states (`stopped`) the Docker models do not know, and a
/// sweep must never fail because one container is mid-exit.
pub(crate) async fn list_containers_raw(
    connection: &Connection,
    label_filters: &[String],
) -> Result<Vec<serde_json::Value>> {
    let filters = serde_json::json!({ "label": label_filters }).to_string();
    let path = format!("/containers/json?all=1&filters={}", percent_encode(&filters));
    let response =
        raw_request(connection, "GET", &path, "listing python-sandbox containers").await?;
    parse_list_response(&response).map_err(|message| Error::Api {
        engine: connection.flavor.as_str(),
        context: "listing python-sandbox containers".to_owned(),
        message,
    })
}

/// `GET /containers/{name}/json` as untyped JSON, for the same reason as the listing: podman's
/// `stopped` state (exited, not yet cleaned up) makes the typed inspect fail.
pub(crate) async fn inspect_container_raw(
    connection: &Connection,
    name: &str,
) -> Result<serde_json::Value> {
    let context = format!("inspecting {name}");
    let path = format!("/containers/{}/json", percent_encode(name));
    let response = raw_request(connection, "GET", &path, &context).await?;
    parse_json_response(&response).map_err(|message| Error::Api {
        engine: connection.flavor.as_str(),
        context,
        message,
    })
}

/// Hands a container's removal to the engine: the DELETE is sent, not awaited. Podman finishes
/// a removal whose client has gone (it has to wait for its own cleanup process first, ~200 ms
/// that the caller need not sit through); should it not, the owner is dead by then and the
/// next sweep removes the container.
pub(crate) async fn remove_without_waiting(connection: &Connection, name: &str) -> Result<()> {
    let path = format!("/containers/{}?force=true&v=true", percent_encode(name));
    let context = format!("removing {name}");
    exchange(connection, "DELETE", &path, &context, false, Duration::from_secs(5)).await?;
    Ok(())
}

/// Pure: `text` with everything but RFC 3986's unreserved characters percent-encoded.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// One request without a body on a fresh connection, for answers bollard cannot type. `path`
/// is below the versioned API root. HTTP/1.0, so the body comes unchunked and ends with the
/// connection; the whole response is returned.
async fn raw_request(
    connection: &Connection,
    method: &str,
    path: &str,
    context: &str,
) -> Result<Vec<u8>> {
    let limit = Duration::from_secs(REQUEST_TIMEOUT_SECS);
    exchange(connection, method, path, context, true, limit).await
}

/// A stream to the API, whichever transport the endpoint has.
trait Duplex: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Duplex for T {}

/// Sends one bodiless request on a fresh connection and, with `read`, returns the whole
/// response (empty without: the request is only handed over).
async fn exchange(
    connection: &Connection,
    method: &str,
    path: &str,
    context: &str,
    read: bool,
    limit: Duration,
) -> Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let failed = |message: String| Error::Api {
        engine: connection.flavor.as_str(),
        context: context.to_owned(),
        message,
    };
    let request = format!(
        "{method} /v{}.{}{path} HTTP/1.0\r\nHost: localhost\r\n\r\n",
        API_VERSION.major_version, API_VERSION.minor_version
    );
    let mut response = Vec::new();
    let io = async {
        let mut stream: Box<dyn Duplex> = match &connection.endpoint {
            ApiEndpoint::Unix(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
            ApiEndpoint::Tcp(addr) => {
                Box::new(tokio::net::TcpStream::connect(addr.as_str()).await?)
            }
        };
        stream.write_all(request.as_bytes()).await?;
        if read { stream.read_to_end(&mut response).await.map(drop) } else { stream.flush().await }
    };
    tokio::time::timeout(limit, io)
        .await
        .map_err(|_| failed("timed out".to_owned()))?
        .map_err(|e| failed(e.to_string()))?;
    Ok(response)
}

/// Pure: the JSON array out of a whole HTTP/1.0 response.
pub(crate) fn parse_list_response(
    response: &[u8],
) -> std::result::Result<Vec<serde_json::Value>, String> {
    serde_json::from_value(parse_json_response(response)?)
        .map_err(|e| format!("unexpected answer: {e}"))
}

/// Pure: the JSON body of a whole HTTP/1.0 response; any status but 200 is an error that
/// carries the status and the body (the engine's message).
pub(crate) fn parse_json_response(
    response: &[u8],
) -> std::result::Result<serde_json::Value, String> {
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| "truncated HTTP response".to_owned())?;
    let head = String::from_utf8_lossy(&response[..split]);
    let status = head.split_whitespace().nth(1).unwrap_or_default();
    let body = &response[split + 4..];
    if status != "200" {
        return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(body).trim()));
    }
    serde_json::from_slice(body).map_err(|e| format!("unexpected answer: {e}"))
}
