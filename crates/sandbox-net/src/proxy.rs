//! The built-in network of a net-on sandbox where pasta is not installed: an HTTP(S) proxy
//! whose listening socket lives in the sandbox's own network namespace and whose server runs
//! in this process, on the host's side.
//!
//! **Why over the sandbox's loopback.** A socket keeps the network namespace it was created
//! in. A short-lived helper joins the sandbox's namespace, creates a listening socket on its
//! 127.0.0.1 and hands the descriptor back ([`crate::net::listen_in`]); this process then
//! `accept`s connections made inside the sandbox while it stays in the host's namespace. The
//! sandbox keeps no route at all (only its own loopback), no host socket is mounted in and
//! no relay process runs: the namespace wall is the one of net off, with one door.
//!
//! **What it allows.** `CONNECT host:port` (https and any other TCP tunnel a client asks for)
//! and plain `http://` requests in absolute form, sent on as origin-form with
//! `Connection: close`. The name is resolved here, every address is checked
//! ([`crate::egress`]: never the host's loopback or any address the kernel routes to the host
//! itself, unspecified, link-local, metadata or multicast addresses, nor private ranges unless
//! the user allows the LAN), the connection goes to a checked address, never to the name again
//! (no DNS rebinding), and where the host's NAT sent it is checked before anything is sent on.
//! A host that reaches the world only through its own proxy (`HTTPS_PROXY`/`HTTP_PROXY` in
//! the caller's environment, `NO_PROXY` honoured) is chained through: the tunnel to the
//! checked address is asked of that proxy, and a plain request is sent to it in absolute form
//! with that address and the request's `Host` (by name only when the name does not resolve
//! here, so that proxy resolves it), with its credentials added here; they never enter the
//! sandbox or a message.
//!
//! **Limits.** HTTP(S) through clients that honour `HTTPS_PROXY` (uv, pip, urllib, requests,
//! curl): no raw sockets, no UDP, no DNS inside the sandbox, no published ports. pasta gives
//! all of that. A run's proxy is a thread of this process; a warm session's, which outlives
//! it, a keeper process (`keeper`). The
//! socket is IPv4 only (`NO_PROXY` keeps `::1` local); a script cannot take the port over
//! (it is bound before the script starts, without `SO_REUSEPORT`).

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::net::{Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sandbox_core::Lan;

use crate::egress::Egress;
use crate::nat::Proto;

/// The proxy's port on the sandbox's loopback (the namespace is the sandbox's own, so no other
/// process holds it; squid's port, which clients and users recognise).
pub const PROXY_PORT: u16 = 3128;

/// What a client of an [`EgressProxy`] asks (in origin form, `GET` to the proxy itself) to be
/// told its own refusals so far: a JSON array of `sandbox_core::NetRefused`, each once. Only
/// its own: the client is known by its address.
pub const REFUSED_PATH: &str = "/python-sandbox/refused";

/// The longest request head taken (the request line and headers).
const MAX_HEAD: usize = 16 * 1024;
/// Connections served at once; more get a 503 (a script cannot exhaust the CLI's threads).
const MAX_CONNECTIONS: usize = 128;
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Pure: the environment that points a sandbox's clients at the proxy.
pub fn proxy_env() -> Vec<(String, OsString)> {
    let url = format!("http://127.0.0.1:{PROXY_PORT}");
    proxy_vars(&url).into_iter().map(|(name, value)| (name, OsString::from(value))).collect()
}

/// Pure: the variables that point clients at the proxy at `url` (both spellings of each),
/// loopback excepted.
pub fn proxy_vars(url: &str) -> Vec<(String, String)> {
    let mut env = Vec::new();
    for name in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"] {
        env.push((name.to_owned(), url.to_owned()));
        env.push((name.to_ascii_lowercase(), url.to_owned()));
    }
    for name in ["NO_PROXY", "no_proxy"] {
        env.push((name.to_owned(), "localhost,127.0.0.1,::1".to_owned()));
    }
    env
}

/// A request the proxy serves, parsed from its head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    pub(crate) method: String,
    /// A name or an IP literal (without brackets).
    pub(crate) host: String,
    pub(crate) port: u16,
    /// `CONNECT`: a tunnel; else a plain http request to send on.
    pub(crate) connect: bool,
    /// The origin-form target (`/path?query`); empty for `CONNECT`.
    pub(crate) path: String,
    /// The end-to-end headers, in order (hop-by-hop ones and the proxy's dropped).
    pub(crate) headers: Vec<(String, String)>,
}

/// Headers that concern this hop only, never sent on.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

/// Pure: the request in `head` (everything up to and including the empty line), or why it is
/// malformed (answered with a 400 and the connection closed).
pub(crate) fn parse_request(head: &[u8]) -> Result<Request, &'static str> {
    let text = std::str::from_utf8(head).map_err(|_| "the request head is not UTF-8")?;
    let text = text.strip_suffix("\r\n\r\n").ok_or("the request head does not end in CRLF CRLF")?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("the request line is not `METHOD TARGET HTTP/1.x`");
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err("the method is not an upper-case token");
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err("the version is not HTTP/1.0 or HTTP/1.1");
    }
    let mut headers = Vec::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err("a header line has no `:`");
        };
        if name.is_empty() || !name.bytes().all(is_token) {
            return Err("a header name is not a token");
        }
        if value.bytes().any(|b| b.is_ascii_control() && b != b'\t') {
            return Err("a header value holds a control character");
        }
        if !HOP_BY_HOP.contains(&name.to_ascii_lowercase().as_str()) {
            headers.push((name.to_owned(), value.trim().to_owned()));
        }
    }
    let connect = method == "CONNECT";
    let (authority, path, default_port) = if connect {
        (target, String::new(), None)
    } else if let Some(rest) = target.strip_prefix("http://") {
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        let path = path.split('#').next().unwrap_or_default();
        let path = match path {
            "" => "/".to_owned(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_owned(),
        };
        (authority, path, Some(80))
    } else if target.starts_with("https://") {
        return Err("an https:// target must be asked for with CONNECT");
    } else {
        return Err("the target is not an absolute http:// URI (this is a proxy)");
    };
    if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err("the target holds a space or control character");
    }
    let (host, port) = parse_authority(authority, default_port)?;
    Ok(Request { method: method.to_owned(), host, port, connect, path, headers })
}

fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Pure: `host:port` or `[v6]:port` (the port optional when `default_port` is given).
fn parse_authority(
    authority: &str,
    default_port: Option<u16>,
) -> Result<(String, u16), &'static str> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (literal, after) = rest.split_once(']').ok_or("an IPv6 literal has no `]`")?;
        literal.parse::<Ipv6Addr>().map_err(|_| "the IPv6 literal is not an address")?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or("junk after the IPv6 literal")?),
        };
        (literal, port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match (port, default_port) {
        (Some(p), _) => {
            p.parse::<u16>().ok().filter(|p| *p != 0).ok_or("the port is not 1-65535")?
        }
        (None, Some(p)) => p,
        (None, None) => return Err("CONNECT needs `host:port`"),
    };
    let bracketed = authority.starts_with('[');
    let valid_name = !host.is_empty()
        && host.len() <= 253
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
    if !bracketed && !valid_name {
        return Err("the host is not a name or an address");
    }
    Ok((host.to_owned(), port))
}

impl Request {
    /// `host:port`, bracketed for IPv6, with `host` in place of the request's.
    fn authority_of(host: &str, port: u16) -> String {
        match host.contains(':') {
            true => format!("[{host}]:{port}"),
            false => format!("{host}:{port}"),
        }
    }

    /// Pure: the head to send on for a plain http request: origin-form to the server, or
    /// absolute-form to an upstream proxy, for the checked address `via` (`host:port`, the
    /// request's own authority when the name did not resolve here) with the request's
    /// `Host` (so the upstream never resolves the name again), and its `auth`
    /// (`Proxy-Authorization` value).
    pub(crate) fn forward_head(&self, upstream: Option<Forward<'_>>) -> Vec<u8> {
        let target = match &upstream {
            Some(forward) => format!("http://{}{}", forward.via, self.path),
            None => self.path.clone(),
        };
        let mut head = format!("{} {target} HTTP/1.1\r\n", self.method);
        if !self.headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("host")) {
            let host = match self.port {
                80 => Request::authority_of(&self.host, 80).trim_end_matches(":80").to_owned(),
                port => Request::authority_of(&self.host, port),
            };
            head.push_str(&format!("Host: {host}\r\n"));
        }
        for (name, value) in &self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        if let Some(Forward { auth: Some(auth), .. }) = upstream {
            head.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
        }
        head.push_str("Connection: close\r\n\r\n");
        head.into_bytes()
    }
}

/// A plain request sent on through an upstream proxy: for `via`, with `auth`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Forward<'a> {
    /// `host:port` of the checked address (a name only when it did not resolve here).
    pub(crate) via: &'a str,
    /// The upstream's `Proxy-Authorization` value.
    pub(crate) auth: Option<&'a str>,
}

/// Pure: the answer to a request the proxy does not carry out, closing the connection.
pub(crate) fn error_response(status: u16, reason: &str) -> Vec<u8> {
    let phrase = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let body = format!("python-sandbox proxy: {reason}\n");
    format!(
        "HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// An upstream proxy from the caller's environment. Its credentials are only ever written to
/// that proxy: `Debug` leaves them out.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Upstream {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// The `Proxy-Authorization` value (`Basic ...`), from the URL's user info.
    pub(crate) auth: Option<String>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("auth", &self.auth.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Pure: an `HTTPS_PROXY`-style value (`http://[user[:password]@]host[:port][/]`, the scheme
/// optional as curl takes it; port 1080 by default as curl's), or why it cannot be chained
/// through (the message never quotes the value: it may hold a password).
pub(crate) fn parse_upstream(value: &str) -> Result<Upstream, &'static str> {
    let value = value.trim();
    let rest = match value.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some(_) => {
            return Err("is not an http:// proxy, the only kind the built-in proxy chains through");
        }
        None => value,
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (userinfo, authority) = match rest.rsplit_once('@') {
        Some((userinfo, authority)) => (Some(userinfo), authority),
        None => (None, rest),
    };
    let (host, port) =
        parse_authority(authority, Some(1080)).map_err(|_| "does not name a host and port")?;
    let auth = userinfo.map(|userinfo| {
        let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
        let credentials = format!("{}:{}", percent_decode(user), percent_decode(password));
        format!("Basic {}", base64(credentials.as_bytes()))
    });
    Ok(Upstream { host, port, auth })
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Pure: whether `host` is exempt from the upstream proxy by a `NO_PROXY`-style list
/// (comma-separated names, each matching itself and its subdomains; `*` matches all).
pub(crate) fn bypasses(no_proxy: &str, host: &str) -> bool {
    let host = host.to_ascii_lowercase();
    no_proxy.split(',').map(str::trim).filter(|e| !e.is_empty()).any(|entry| {
        let entry = entry.trim_start_matches('.').to_ascii_lowercase();
        entry == "*" || host == entry || host.ends_with(&format!(".{entry}"))
    })
}

/// The caller's own proxies (`HTTPS_PROXY` for tunnels, `HTTP_PROXY` for plain http, either
/// case, and `NO_PROXY`), read once when a sandbox's proxy starts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Upstreams {
    pub(crate) https: Option<Result<Upstream, &'static str>>,
    pub(crate) http: Option<Result<Upstream, &'static str>>,
    pub(crate) no_proxy: String,
}

impl Upstreams {
    fn from_env() -> Upstreams {
        let var = |names: [&str; 2]| {
            names.iter().find_map(|n| std::env::var(n).ok().filter(|v| !v.trim().is_empty()))
        };
        Upstreams {
            https: var(["HTTPS_PROXY", "https_proxy"]).map(|v| parse_upstream(&v)),
            http: var(["HTTP_PROXY", "http_proxy"]).map(|v| parse_upstream(&v)),
            no_proxy: var(["NO_PROXY", "no_proxy"]).unwrap_or_default(),
        }
    }

    /// The upstream for `request`, if one applies.
    fn for_request(&self, request: &Request) -> Option<Result<&Upstream, String>> {
        if bypasses(&self.no_proxy, &request.host) {
            return None;
        }
        let (upstream, name) = match request.connect {
            true => (&self.https, "HTTPS_PROXY"),
            false => (&self.http, "HTTP_PROXY"),
        };
        upstream.as_ref().map(|u| u.as_ref().map_err(|why| format!("the host's {name} {why}")))
    }
}

/// The proxy serving one sandbox; dropping it stops accepting (connections already open end
/// with their sandbox-side sockets, when the sandbox is gone).
#[derive(Debug)]
pub struct BuiltinProxy {
    listener: Arc<TcpListener>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl BuiltinProxy {
    /// Serves the listening socket `listener` (made in the sandbox's network namespace by
    /// [`crate::net::listen_in`]) from a thread of this process; private ranges are reached
    /// only when `lan` allows them.
    pub fn serve(listener: OwnedFd, lan: Lan) -> io::Result<BuiltinProxy> {
        BuiltinProxy::serve_listed(listener, lan, None)
    }

    /// [`BuiltinProxy::serve`] holding an allowlist: a request's host must be listed for its
    /// port, a tunnel's first bytes must name that same host (TLS SNI, HTTP `Host`), and every
    /// request on a plain HTTP connection too; the rest refused into `listed`.
    pub fn serve_listed(
        listener: OwnedFd,
        lan: Lan,
        listed: Option<crate::Listed>,
    ) -> io::Result<BuiltinProxy> {
        let nameservers = crate::egress::host_nameservers();
        let listed = listed
            .map(|listed| Checked { egress: listed.egress(lan, nameservers.clone()), listed });
        let egress = Egress::new(lan, nameservers);
        BuiltinProxy::serve_with(listener, Upstreams::from_env(), egress, listed)
    }

    /// [`BuiltinProxy::serve`] chaining through `upstreams`, checking with `egress` (and
    /// `listed`'s list).
    pub(crate) fn serve_with(
        listener: OwnedFd,
        upstreams: Upstreams,
        egress: Egress,
        listed: Option<Checked>,
    ) -> io::Result<BuiltinProxy> {
        BuiltinProxy::start(
            TcpListener::from(listener),
            Shared { upstreams, egress, lists: Lists::One(listed) },
        )
    }

    fn start(listener: TcpListener, shared: Shared) -> io::Result<BuiltinProxy> {
        let listener = Arc::new(listener);
        let shared = Arc::new(shared);
        let served = Arc::clone(&listener);
        let accept = std::thread::Builder::new()
            .name("sandbox-proxy".into())
            .spawn(move || accept_loop(&served, &shared))?;
        Ok(BuiltinProxy { listener, accept: Some(accept) })
    }
}

impl Drop for BuiltinProxy {
    fn drop(&mut self) {
        // Wakes the blocked `accept` (Linux fails it with EINVAL once the socket is shut down).
        let _ = rustix::net::shutdown(&*self.listener, rustix::net::Shutdown::Both);
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
    }
}

/// An allowlist the proxy holds, and the checks for the addresses it lists (private ones
/// reachable when the caller gave the list).
#[derive(Debug)]
pub(crate) struct Checked {
    pub(crate) listed: crate::Listed,
    pub(crate) egress: Egress,
}

/// What a proxy serves its connections with.
#[derive(Debug)]
struct Shared {
    upstreams: Upstreams,
    /// The checks of a name's addresses (no list, or a name the list holds).
    egress: Egress,
    lists: Lists,
}

/// The list a connection is held to.
#[derive(Debug)]
enum Lists {
    /// One sandbox's proxy: its list, or none (net on).
    One(Option<Checked>),
    /// A proxy shared by many sandboxes ([`EgressProxy`]): each client address's own list; an
    /// address with none is refused everything.
    PerClient(ClientLists),
}

/// The lists of an [`EgressProxy`], by the address its clients connect from: kept current by
/// its owner (a cluster's pods come and go), read by every connection as it is accepted.
#[derive(Debug, Clone)]
pub struct ClientLists {
    lists: Arc<std::sync::RwLock<std::collections::HashMap<std::net::IpAddr, Arc<Checked>>>>,
    lan: Lan,
    nameservers: Vec<std::net::IpAddr>,
}

impl ClientLists {
    /// Holds the client at `client` to `listed` from its next connection on (its connections
    /// already open keep the list they were accepted with).
    pub fn set(&self, client: std::net::IpAddr, listed: crate::Listed) {
        let egress = listed.egress(self.lan, self.nameservers.clone());
        let checked = Arc::new(Checked { listed, egress });
        self.write().insert(sandbox_core::canonical_ip(client), checked);
    }

    /// Forgets `client`: its next connection is refused.
    pub fn remove(&self, client: std::net::IpAddr) {
        self.write().remove(&sandbox_core::canonical_ip(client));
    }

    /// Keeps only the clients `keep` says yes to.
    pub fn retain(&self, mut keep: impl FnMut(std::net::IpAddr) -> bool) {
        self.write().retain(|ip, _| keep(*ip));
    }

    /// The list `client` is held to, if any.
    pub fn get(&self, client: std::net::IpAddr) -> Option<crate::Listed> {
        self.checked(client).map(|checked| checked.listed.clone())
    }

    fn checked(&self, client: std::net::IpAddr) -> Option<Arc<Checked>> {
        let lists = self.lists.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        lists.get(&sandbox_core::canonical_ip(client)).cloned()
    }

    fn write(
        &self,
    ) -> std::sync::RwLockWriteGuard<'_, std::collections::HashMap<std::net::IpAddr, Arc<Checked>>>
    {
        self.lists.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// An HTTP(S) proxy for many sandboxes at once, on a socket they reach over a network (a
/// cluster's egress proxy): each connection is held to the list of the address it comes
/// from ([`ClientLists`]), with every check of [`BuiltinProxy::serve_listed`]'s; a client
/// with no list gets a 403 and nothing else. Dropping it stops accepting.
#[derive(Debug)]
pub struct EgressProxy {
    _proxy: BuiltinProxy,
    lists: ClientLists,
}

impl EgressProxy {
    /// Serves `listener` from a thread of this process, chaining through this process's own
    /// proxy where its environment names one; a listed private address is reached only when
    /// its list opens private ranges, or `lan` allows them.
    pub fn serve(listener: TcpListener, lan: Lan) -> io::Result<EgressProxy> {
        let nameservers = crate::egress::host_nameservers();
        EgressProxy::serve_with(listener, Upstreams::from_env(), lan, nameservers)
    }

    pub(crate) fn serve_with(
        listener: TcpListener,
        upstreams: Upstreams,
        lan: Lan,
        nameservers: Vec<std::net::IpAddr>,
    ) -> io::Result<EgressProxy> {
        let lists = ClientLists { lists: Arc::default(), lan, nameservers: nameservers.clone() };
        let shared = Shared {
            upstreams,
            egress: Egress::new(lan, nameservers),
            lists: Lists::PerClient(lists.clone()),
        };
        Ok(EgressProxy { _proxy: BuiltinProxy::start(listener, shared)?, lists })
    }

    /// The lists, to keep current.
    pub fn lists(&self) -> &ClientLists {
        &self.lists
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let active = Arc::new(AtomicUsize::new(0));
    loop {
        let (mut client, peer) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
                ) =>
            {
                continue;
            }
            Err(e)
                if e.raw_os_error() == Some(libc::EMFILE)
                    || e.raw_os_error() == Some(libc::ENFILE) =>
            {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            Err(_) => return,
        };
        if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::SeqCst);
            let _ = client.write_all(&error_response(503, "too many connections at once"));
            continue;
        }
        let shared = Arc::clone(shared);
        let spawned = std::thread::Builder::new().name("sandbox-proxy-conn".into()).spawn({
            let active = Arc::clone(&active);
            move || {
                let Shared { upstreams, egress, lists } = &*shared;
                let _ = match lists {
                    Lists::One(checked) => {
                        serve_connection(client, upstreams, egress, checked.as_ref())
                    }
                    Lists::PerClient(lists) => match lists.checked(peer.ip()) {
                        Some(checked) => serve_client(client, upstreams, egress, &checked),
                        None => client.write_all(&error_response(
                            403,
                            "this proxy serves only sandboxes with a network list",
                        )),
                    },
                };
                active.fetch_sub(1, Ordering::SeqCst);
            }
        });
        if spawned.is_err() {
            active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// A request or response head and the bytes read past it, or the status that refuses it.
type Head = Result<(Vec<u8>, Vec<u8>), u16>;

/// Reads a head (through the empty line) from `stream`: the head and what came after it.
fn read_head(stream: &mut TcpStream) -> io::Result<Head> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok(Ok((buf, rest)));
        }
        if buf.len() > MAX_HEAD {
            return Ok(Err(431));
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Ok(Err(400));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// An [`EgressProxy`]'s connection from a client with a list: its own refusals when it asks
/// for them ([`REFUSED_PATH`]), else served as any other.
fn serve_client(
    mut client: TcpStream,
    upstreams: &Upstreams,
    egress: &Egress,
    checked: &Checked,
) -> io::Result<()> {
    client.set_read_timeout(Some(HEAD_TIMEOUT))?;
    let mut first = [0u8; 64];
    let ask = format!("GET {REFUSED_PATH} ");
    // The request line as far as it tells: a client may send it in pieces.
    let mut n = client.peek(&mut first)?;
    for _ in 0..100 {
        if n == 0 || n >= ask.len() || !ask.as_bytes().starts_with(&first[..n]) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
        n = client.peek(&mut first)?;
    }
    if first[..n].starts_with(ask.as_bytes()) {
        // Read whole: a socket closed with unread bytes is reset, and the answer lost.
        if read_head(&mut client)?.is_err() {
            return Ok(());
        }
        let body = serde_json::to_vec(&checked.listed.refused()).unwrap_or_default();
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        client.write_all(head.as_bytes())?;
        return client.write_all(&body);
    }
    serve_connection(client, upstreams, egress, Some(checked))
}

fn serve_connection(
    mut client: TcpStream,
    upstreams: &Upstreams,
    egress: &Egress,
    checked: Option<&Checked>,
) -> io::Result<()> {
    client.set_read_timeout(Some(HEAD_TIMEOUT))?;
    let (head, rest) = match read_head(&mut client)? {
        Ok(read) => read,
        Err(status) => {
            let reason =
                if status == 431 { "the request head is too large" } else { "no request head" };
            return client.write_all(&error_response(status, reason));
        }
    };
    let request = match parse_request(&head) {
        Ok(request) => request,
        Err(reason) => return client.write_all(&error_response(400, reason)),
    };
    let target = Request::authority_of(&request.host, request.port);
    // An allowlist: the host asked for must be listed for its port (an address, by address).
    let egress = match checked {
        Some(checked) => match listed_target(checked, &request, egress) {
            Ok(egress) => egress,
            Err(refusal) => {
                let answer = error_response(403, &format!("refusing {target}: {}", refusal.reason));
                checked.listed.refuse(refusal);
                return client.write_all(&answer);
            }
        },
        None => egress,
    };
    let upstream = match upstreams.for_request(&request).transpose() {
        Ok(upstream) => upstream,
        Err(reason) => return client.write_all(&error_response(502, &reason)),
    };
    // The name is resolved here and only a checked address is ever connected to (or asked
    // of the upstream): a name that resolves to the host's loopback again later gets nowhere.
    let resolved: Vec<SocketAddr> = match (request.host.as_str(), request.port).to_socket_addrs() {
        Ok(addrs) => addrs.collect(),
        Err(_) => Vec::new(),
    };
    let allowed: Vec<SocketAddr> =
        resolved.iter().copied().filter(|a| egress.refusal(*a).is_none()).collect();
    if let (Some(first), true) = (resolved.first(), allowed.is_empty()) {
        let why = egress.refusal(*first).unwrap_or("refused");
        return client.write_all(&error_response(403, &format!("refusing {target}: {why}")));
    }
    // The checked address an upstream is asked for (the name only when it does not resolve
    // here: then only the upstream can resolve it).
    let via = allowed
        .first()
        .map_or(target.clone(), |a| Request::authority_of(&a.ip().to_string(), a.port()));
    let mut server = match (&upstream, allowed.is_empty()) {
        // Unresolvable here: only an upstream can resolve it (and it cannot reach our loopback
        // by a name that we could not resolve to it).
        (None, true) => {
            return client
                .write_all(&error_response(502, &format!("cannot resolve {}", request.host)));
        }
        (None, false) => match connect_any(&allowed) {
            Ok((server, addr)) => {
                // Nothing of the sandbox's goes out before the host's NAT is known to have
                // left the destination alone (or sent it nowhere refused).
                if let Some(why) = egress.after_nat(Proto::Tcp, &server, addr) {
                    let refused = format!("refusing {target}: {why}");
                    return client.write_all(&error_response(403, &refused));
                }
                server
            }
            Err(e) => {
                return client
                    .write_all(&error_response(502, &format!("cannot connect to {target}: {e}")));
            }
        },
        (Some(upstream), _) => match through_upstream(upstream, &request, &via) {
            Ok(server) => server,
            Err(reason) => return client.write_all(&error_response(502, &reason)),
        },
    };
    let Some(checked) = checked else {
        if request.connect {
            client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")?;
        } else {
            let forward = upstream.map(|u| Forward { via: &via, auth: u.auth.as_deref() });
            server.write_all(&request.forward_head(forward))?;
        }
        server.write_all(&rest)?;
        client.set_read_timeout(None)?;
        return splice(client, server, None);
    };
    let host = sandbox_core::normal_name(&request.host);
    let by_address = request.host.parse::<std::net::IpAddr>().is_ok();
    let (first, follow) = if request.connect {
        client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")?;
        // The tunnel's first bytes must name the host it was opened to.
        let mut first = rest;
        let name = loop {
            match sandbox_core::flow_name(&first) {
                sandbox_core::Sniffed::Done(name) => break name,
                sandbox_core::Sniffed::More => {
                    let mut chunk = [0u8; 4096];
                    match client.read(&mut chunk) {
                        Ok(0) | Err(_) => return Ok(()),
                        Ok(n) => first.extend_from_slice(&chunk[..n]),
                    }
                }
            }
        };
        let named = match &name {
            sandbox_core::FlowName::Name(named) => *named == host,
            // An address listed by address may carry any protocol.
            sandbox_core::FlowName::None => by_address,
            sandbox_core::FlowName::Hidden => false,
        };
        if !named {
            let (shown, reason) = match name {
                sandbox_core::FlowName::Name(named) => {
                    (named, format!("named in a tunnel opened to {host}"))
                }
                sandbox_core::FlowName::Hidden => {
                    (host.clone(), "the name is hidden (encrypted client hello)".to_owned())
                }
                sandbox_core::FlowName::None => (
                    host.clone(),
                    "no host name in the connection (not TLS with SNI, not HTTP)".to_owned(),
                ),
            };
            checked.listed.refuse(sandbox_core::NetRefused {
                host: shown,
                port: Some(request.port),
                reason,
                would_allow: None,
            });
            return Ok(());
        }
        // Plain HTTP in the tunnel: every request must keep to the host.
        let http = !by_address && first.first().is_some_and(|b| *b != 0x16);
        (first, http)
    } else {
        let forward = upstream.map(|u| Forward { via: &via, auth: u.auth.as_deref() });
        server.write_all(&request.forward_head(forward))?;
        (rest, true)
    };
    let mut requests = sandbox_core::HttpRequests::default();
    if follow {
        // A plain request's own head first, so the framing of what follows is known.
        if !request.connect {
            let _ = requests.feed(&head);
        }
        if let Some(refusal) = keeps_to(&mut requests, &first, &host, request.port) {
            checked.listed.refuse(refusal);
            return Ok(());
        }
    }
    server.write_all(&first)?;
    client.set_read_timeout(None)?;
    let follow =
        follow.then_some(Follow { requests, host, port: request.port, listed: &checked.listed });
    splice(client, server, follow)
}

/// The checks for a request's target under an allowlist: the egress to connect with, or the
/// refusal.
fn listed_target<'a>(
    checked: &'a Checked,
    request: &Request,
    names: &'a Egress,
) -> Result<&'a Egress, sandbox_core::NetRefused> {
    let allow = checked.listed.allow();
    if let Ok(ip) = request.host.parse::<std::net::IpAddr>() {
        return match allow.by_address(ip, request.port) {
            Some(_) => Ok(&checked.egress),
            None => Err(sandbox_core::Allow::address_refused(ip, request.port)),
        };
    }
    if allow.name_on_port(&request.host, request.port) {
        // A name takes a flow to what `on` reaches, never to a private range.
        return Ok(names);
    }
    let host = sandbox_core::normal_name(&request.host);
    Err(sandbox_core::NetRefused {
        would_allow: Some(format!("{host}:{}", request.port)),
        host,
        port: Some(request.port),
        reason: "not in the list".to_owned(),
    })
}

/// A plain HTTP connection under an allowlist: each request the client sends must name `host`.
struct Follow<'a> {
    requests: sandbox_core::HttpRequests,
    host: String,
    port: u16,
    listed: &'a crate::Listed,
}

/// The refusal of the requests in `bytes` that name another host than `host`, if any.
fn keeps_to(
    requests: &mut sandbox_core::HttpRequests,
    bytes: &[u8],
    host: &str,
    port: u16,
) -> Option<sandbox_core::NetRefused> {
    sandbox_core::other_host(&requests.feed(bytes), host, port)
}

/// A connection to the first of `addrs` that answers, and which one it is.
fn connect_any(addrs: &[SocketAddr]) -> io::Result<(TcpStream, SocketAddr)> {
    let mut last = io::Error::other("no address");
    for addr in addrs {
        match TcpStream::connect_timeout(addr, CONNECT_TIMEOUT) {
            Ok(stream) => return Ok((stream, *addr)),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// A connection to `upstream`: for a tunnel, one it has opened to `via` (the checked address
/// when we resolved one); for plain http, ready for the absolute-form request.
fn through_upstream(
    upstream: &Upstream,
    request: &Request,
    via: &str,
) -> Result<TcpStream, String> {
    let failed = |e: io::Error| format!("cannot reach the host's proxy: {e}");
    let addrs: Vec<SocketAddr> =
        (upstream.host.as_str(), upstream.port).to_socket_addrs().map_err(failed)?.collect();
    let (mut stream, _) = connect_any(&addrs).map_err(failed)?;
    if !request.connect {
        return Ok(stream);
    }
    let mut ask = format!("CONNECT {via} HTTP/1.1\r\nHost: {via}\r\n");
    if let Some(auth) = &upstream.auth {
        ask.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
    }
    ask.push_str("\r\n");
    stream.write_all(ask.as_bytes()).map_err(failed)?;
    stream.set_read_timeout(Some(HEAD_TIMEOUT)).map_err(failed)?;
    let (head, rest) = match read_head(&mut stream).map_err(failed)? {
        Ok(read) => read,
        Err(_) => return Err("the host's proxy gave no answer to CONNECT".to_owned()),
    };
    let status = std::str::from_utf8(&head)
        .ok()
        .and_then(|h| h.split(' ').nth(1))
        .and_then(|s| s.parse::<u16>().ok());
    if status != Some(200) {
        let status = status.map_or("no status".to_owned(), |s| s.to_string());
        return Err(format!("the host's proxy refused the tunnel to {via} ({status})"));
    }
    if !rest.is_empty() {
        return Err("the host's proxy sent data before the tunnel was open".to_owned());
    }
    stream.set_read_timeout(None).map_err(failed)?;
    Ok(stream)
}

/// Copies both ways until both sides are done, each direction's end passed on as a shutdown;
/// with `follow`, each request the client sends is checked before it goes on.
fn splice(client: TcpStream, server: TcpStream, follow: Option<Follow<'_>>) -> io::Result<()> {
    let (mut client_r, mut server_w) = (client.try_clone()?, server.try_clone()?);
    std::thread::scope(|scope| -> io::Result<()> {
        let upload = std::thread::Builder::new().name("sandbox-proxy-up".into()).spawn_scoped(
            scope,
            move || {
                match follow {
                    None => {
                        let _ = io::copy(&mut client_r, &mut server_w);
                    }
                    Some(mut follow) => {
                        let mut chunk = vec![0u8; 16 * 1024];
                        loop {
                            let n = match client_r.read(&mut chunk) {
                                Ok(0) | Err(_) => break,
                                Ok(n) => n,
                            };
                            let bytes = &chunk[..n];
                            if let Some(refusal) =
                                keeps_to(&mut follow.requests, bytes, &follow.host, follow.port)
                            {
                                // Nothing of it goes on: both ends are cut.
                                follow.listed.refuse(refusal);
                                let _ = client_r.shutdown(Shutdown::Both);
                                let _ = server_w.shutdown(Shutdown::Both);
                                break;
                            }
                            if server_w.write_all(bytes).is_err() {
                                break;
                            }
                        }
                    }
                }
                let _ = server_w.shutdown(Shutdown::Write);
            },
        )?;
        let (mut server_r, mut client_w) = (server.try_clone()?, client.try_clone()?);
        let _ = io::copy(&mut server_r, &mut client_w);
        let _ = client_w.shutdown(Shutdown::Write);
        // The server is done: a client still sending has nobody to send to.
        let _ = server_r.shutdown(Shutdown::Both);
        let _ = upload.join();
        Ok(())
    })
}

mod keeper;
#[cfg(test)]
mod tests;

pub use keeper::{KEEPER_ARG, keeper_main_if_asked};

/// Where a sandbox's built-in network (the proxy, or the relay) is served from.
#[derive(Debug)]
pub enum ProxyServer {
    /// A thread of this process, stopped when dropped (a run, which ends with its caller).
    Thread(BuiltinProxy),
    /// The built-in relay ([`crate::Relay`]) served by a thread of this process, stopped when
    /// dropped (a run).
    Relay(crate::Relay),
    /// A keeper process (a warm session, which outlives its caller): it ends by itself with
    /// the sandbox; pinned for the session's record.
    Keeper(reaper::ProcPin),
}

impl ProxyServer {
    /// Serves `listener` (from [`crate::net::listen_in`]): from a thread of this process, or,
    /// given the pidfd of a sandbox that outlives this process, from a keeper that ends once
    /// that process has. Private ranges are reached only when `lan` allows them.
    pub fn serve(
        listener: OwnedFd,
        outlived_by: Option<std::os::fd::BorrowedFd<'_>>,
        lan: Lan,
        listed: Option<crate::Listed>,
    ) -> crate::error::Result<ProxyServer> {
        match (outlived_by, listed) {
            (Some(sandbox), listed) => {
                keeper::start(keeper::Served::Proxy(listener), sandbox, lan, listed.as_ref())
                    .map(ProxyServer::Keeper)
            }
            (None, listed) => BuiltinProxy::serve_listed(listener, lan, listed)
                .map(ProxyServer::Thread)
                .map_err(|e| crate::Error::BuiltinNetwork {
                    reason: format!("starting the built-in proxy: {e}"),
                }),
        }
    }

    /// The built-in relay ([`crate::Relay`]) for the network namespace `netns` (a sandbox's,
    /// blocked before its command), serving `nameservers` ([`crate::loopback_nameservers`]) at
    /// its doors: from a thread of this process, or, given the pidfd of a sandbox that outlives
    /// this process (a warm session), from a keeper that ends once that process has. Private
    /// ranges are reached only when `lan` allows them. Each of `publish` is listened for on
    /// the host first (a busy port fails here, before anything runs) and carried in.
    pub fn relay(
        netns: &std::fs::File,
        nameservers: &[std::net::SocketAddr],
        publish: &[sandbox_core::PublishedPort],
        outlived_by: Option<std::os::fd::BorrowedFd<'_>>,
        lan: Lan,
        listed: Option<crate::Listed>,
    ) -> crate::error::Result<ProxyServer> {
        let inbound = crate::relay::listen_published(publish)?;
        let Some(sandbox) = outlived_by else {
            return crate::Relay::attach_publishing(netns, nameservers, inbound, lan, listed)
                .map(ProxyServer::Relay);
        };
        let (tun, doors) = crate::relay::tun_in(netns, nameservers)?;
        keeper::start(keeper::Served::Relay { tun, doors, inbound }, sandbox, lan, listed.as_ref())
            .map(ProxyServer::Keeper)
    }

    /// A keeper's pin, for the session's record (it then lives on with the session); `None`
    /// for a thread.
    pub fn keep(self) -> Option<reaper::ProcPin> {
        match &self {
            // Dropped: it stops serving.
            ProxyServer::Thread(_) | ProxyServer::Relay(_) => None,
            ProxyServer::Keeper(pin) => {
                let pin = *pin;
                // Not dropped: that would end the keeper.
                std::mem::forget(self);
                Some(pin)
            }
        }
    }
}

impl Drop for ProxyServer {
    fn drop(&mut self) {
        // A keeper not handed to a record (a session that failed to start) ends here; it
        // would anyway once its sandbox is gone.
        if let ProxyServer::Keeper(pin) = self {
            pin.kill();
        }
    }
}
