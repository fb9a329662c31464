//! Docker/podman API sockets: where to look (pure) and a plain-HTTP `GET /_ping` (IO).

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// Where a docker-compatible API listens.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ApiEndpoint {
    Unix(PathBuf),
    /// `host:port`, plain HTTP (only for an explicit `tcp://` host without TLS).
    Tcp(String),
}

impl std::fmt::Display for ApiEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiEndpoint::Unix(path) => write!(f, "unix://{}", path.display()),
            ApiEndpoint::Tcp(addr) => write!(f, "tcp://{addr}"),
        }
    }
}

/// Parses a `DOCKER_HOST`/`CONTAINER_HOST` value; `Err` carries why it cannot be probed.
fn parse_host(var: &str, value: &OsStr) -> Result<ApiEndpoint, String> {
    let value = value.to_string_lossy();
    if let Some(path) = value.strip_prefix("unix://") {
        Ok(ApiEndpoint::Unix(PathBuf::from(path)))
    } else if let Some(addr) = value.strip_prefix("tcp://") {
        Ok(ApiEndpoint::Tcp(addr.trim_end_matches('/').to_owned()))
    } else {
        Err(format!("{var}={value} is not supported (only unix:// and tcp:// are)"))
    }
}

/// Docker sockets in the order the docker CLI uses them: `DOCKER_HOST`, else the default socket.
pub fn docker_endpoints(docker_host: Option<&OsStr>) -> Vec<Result<ApiEndpoint, String>> {
    match docker_host.filter(|v| !v.is_empty()) {
        Some(host) => vec![parse_host("DOCKER_HOST", host)],
        None => vec![Ok(ApiEndpoint::Unix(PathBuf::from("/var/run/docker.sock")))],
    }
}

/// Podman sockets: `CONTAINER_HOST`, the rootless socket, then the rootful one.
pub fn podman_endpoints(
    container_host: Option<&OsStr>,
    xdg_runtime_dir: Option<&OsStr>,
    uid: u32,
) -> Vec<Result<ApiEndpoint, String>> {
    if let Some(host) = container_host.filter(|v| !v.is_empty()) {
        return vec![parse_host("CONTAINER_HOST", host)];
    }
    let mut out = Vec::new();
    let runtime_dir = match xdg_runtime_dir.filter(|v| !v.is_empty()) {
        Some(dir) => Some(PathBuf::from(dir)),
        None if uid != 0 => Some(PathBuf::from(format!("/run/user/{uid}"))),
        None => None,
    };
    if let Some(dir) = runtime_dir {
        out.push(Ok(ApiEndpoint::Unix(dir.join("podman/podman.sock"))));
    }
    out.push(Ok(ApiEndpoint::Unix(PathBuf::from("/run/podman/podman.sock"))));
    out
}

/// Sends `GET /_ping` and expects `200 OK`. Errors are short human strings.
pub fn ping(endpoint: &ApiEndpoint, timeout: Duration) -> Result<(), String> {
    const REQUEST: &[u8] = b"GET /_ping HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    let response = match endpoint {
        ApiEndpoint::Unix(path) => {
            if !path.exists() {
                return Err("no such socket".to_owned());
            }
            let stream = UnixStream::connect(path).map_err(describe_io)?;
            stream.set_read_timeout(Some(timeout)).map_err(describe_io)?;
            stream.set_write_timeout(Some(timeout)).map_err(describe_io)?;
            exchange(stream, REQUEST)?
        }
        ApiEndpoint::Tcp(addr) => {
            let sock = addr
                .to_socket_addrs()
                .map_err(describe_io)?
                .next()
                .ok_or_else(|| "address does not resolve".to_owned())?;
            let stream = TcpStream::connect_timeout(&sock, timeout).map_err(describe_io)?;
            stream.set_read_timeout(Some(timeout)).map_err(describe_io)?;
            stream.set_write_timeout(Some(timeout)).map_err(describe_io)?;
            exchange(stream, REQUEST)?
        }
    };
    parse_ping_response(&response)
}

fn exchange(mut stream: impl Read + Write, request: &[u8]) -> Result<Vec<u8>, String> {
    stream.write_all(request).map_err(describe_io)?;
    let mut buf = Vec::new();
    // The status line is all we need; cap the read so a hostile socket cannot make us buffer much.
    stream.take(4096).read_to_end(&mut buf).map_err(describe_io)?;
    Ok(buf)
}

/// Pure: checks the status line of a `/_ping` response.
pub(crate) fn parse_ping_response(response: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(response);
    let status_line = text.lines().next().unwrap_or_default();
    let mut parts = status_line.split_whitespace();
    match (parts.next(), parts.next()) {
        (Some(version), Some("200")) if version.starts_with("HTTP/") => Ok(()),
        (Some(version), Some(code)) if version.starts_with("HTTP/") => {
            Err(format!("ping answered HTTP {code}"))
        }
        _ => Err("not an HTTP API".to_owned()),
    }
}

fn describe_io(err: std::io::Error) -> String {
    match err.kind() {
        std::io::ErrorKind::PermissionDenied => {
            "permission denied (your user may not use this socket)".to_owned()
        }
        std::io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => "timed out".to_owned(),
        _ => err.to_string().to_lowercase(),
    }
}
