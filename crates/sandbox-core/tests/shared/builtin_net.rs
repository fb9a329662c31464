//! The built-in network's contracts (net on where pasta is not installed), shared by the
//! native and bwrap suites (included with `#[path]`). The proxy's: a dependency installs and
//! the script's HTTPS works through the proxy, the host's loopback and its own addresses are
//! refused through it, a raw socket has no route. The relay's: a dependency installs, a raw
//! TLS connection works with no proxy in the environment, the host's own address is refused.

use std::ffi::OsString;
use std::path::Path;

use sandbox_core::{Net, RunSpec};

/// A directory of links to everything in `/usr/bin` but pasta: this machine as one without
/// the passt package.
pub(crate) fn path_without_pasta(dir: &Path) -> OsString {
    std::fs::create_dir_all(dir).expect("bin dir");
    for entry in std::fs::read_dir("/usr/bin").expect("/usr/bin") {
        let name = entry.expect("entry").file_name();
        let text = name.to_string_lossy();
        if !text.starts_with("pasta") && !text.starts_with("passt") {
            let _ = std::os::unix::fs::symlink(Path::new("/usr/bin").join(&name), dir.join(&name));
        }
    }
    dir.as_os_str().to_owned()
}

const SCRIPT: &str = r#"
import socket, sys, urllib.request
port, host_ip = sys.argv[1], sys.argv[2]
print("pypi", urllib.request.urlopen("https://pypi.org/simple/six/", timeout=60).status)
def via_proxy(request):
    c = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    c.sendall(request.encode() + b"\r\n\r\n")
    return c.recv(200).split(b"\r\n")[0].decode()
print("loopback", via_proxy(f"CONNECT 127.0.0.1:{port} HTTP/1.1"))
print("localhost", via_proxy(f"GET http://localhost:{port}/ HTTP/1.1\r\nHost: localhost"))
if host_ip != "-":
    print("host address", via_proxy(f"CONNECT {host_ip}:{port} HTTP/1.1"))
s = socket.socket()
s.settimeout(10)
try:
    s.connect(("151.101.0.223", 443))
    print("raw connected")
except OSError as e:
    print("raw", e.errno)
import six
print(six.__name__)
"#;

/// The host's address outbound traffic leaves from (no packet is sent), `-` without a route.
pub(crate) fn outbound_ip() -> String {
    std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("151.101.0.223:443").and_then(|()| s.local_addr()))
        .map_or("-".to_owned(), |a| a.ip().to_string())
}

const RELAY_SCRIPT: &str = r#"
import errno, os, socket, ssl, sys
port, host_ip = int(sys.argv[1]), sys.argv[2]
print("proxies", {k: v for k, v in os.environ.items() if k.lower().endswith("_proxy")})
def head(_):
    raw = socket.create_connection(("pypi.org", 443), timeout=20)
    tls = ssl.create_default_context().wrap_socket(raw, server_hostname="pypi.org")
    tls.sendall(b"HEAD /simple/six/ HTTP/1.1\r\nHost: pypi.org\r\nConnection: close\r\n\r\n")
    return tls.recv(100).split()[1].decode()
print("raw", head(0))
# Connections to one destination at once, each paired with its own.
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(8) as pool:
    print("parallel", sorted(set(pool.map(head, range(16)))))
if host_ip != "-":
    try:
        socket.create_connection((host_ip, port), timeout=5)
        print("host connected")
    except OSError as e:
        print("host", errno.errorcode.get(e.errno, str(e)))
else:
    print("host ECONNREFUSED")
import six
print(six.__name__)
"#;

/// A host service on every address, which the sandbox must never reach.
pub(crate) struct HostService {
    listener: std::net::TcpListener,
    host_ip: String,
}

impl HostService {
    pub(crate) fn start() -> HostService {
        let listener = std::net::TcpListener::bind("0.0.0.0:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        HostService { listener, host_ip: outbound_ip() }
    }

    /// `spec` turned into the contract's run: the script, its arguments, `six`, net on.
    pub(crate) fn spec(&self, mut spec: RunSpec) -> RunSpec {
        std::fs::write(&spec.script, SCRIPT).expect("write script");
        let port = self.listener.local_addr().expect("addr").port();
        spec.args = vec![port.to_string(), self.host_ip.clone()];
        spec.dependencies = vec!["six".to_owned()];
        spec.net = Net::On;
        spec
    }

    /// `spec` turned into the relay contract's run: its script, arguments, `six`, net on.
    pub(crate) fn relay_spec(&self, spec: RunSpec) -> RunSpec {
        let spec = self.spec(spec);
        std::fs::write(&spec.script, RELAY_SCRIPT).expect("write script");
        spec
    }

    /// Checks the relay contract's stdout, and that the service was never reached.
    pub(crate) fn relay_check(&self, stdout: &str) {
        assert_eq!(stdout, "proxies {}\nraw 200\nparallel ['200']\nhost ECONNREFUSED\nsix\n");
        assert!(self.listener.accept().is_err(), "the host's service was reached from the sandbox");
    }

    /// Checks the run's stdout, and that the service was never reached.
    pub(crate) fn check(&self, stdout: &str) {
        let refused = "HTTP/1.1 403 Forbidden";
        let mut expected = format!("pypi 200\nloopback {refused}\nlocalhost {refused}\n");
        if self.host_ip != "-" {
            expected.push_str(&format!("host address {refused}\n"));
        }
        // ENETUNREACH: the namespace has its loopback only.
        expected.push_str("raw 101\nsix\n");
        assert_eq!(stdout, expected);
        assert!(self.listener.accept().is_err(), "the host's service was reached from the sandbox");
    }
}
