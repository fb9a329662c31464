//! Pure readers of what a sandbox's first bytes say about where they go: the server name of a
//! TLS ClientHello, the `Host` of each HTTP/1 request on a connection, and the question and
//! answers of a DNS message. The egress of a sandbox with an allowlist ([`crate::Allow`])
//! decides with them; they read, never rewrite.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::allow::FlowName;

/// How much of a flow's start is read to find its name before giving up.
pub const SNIFF_LIMIT: usize = 16 * 1024;

/// What the bytes seen so far say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sniffed {
    /// Not enough yet: read more (up to [`SNIFF_LIMIT`]).
    More,
    /// The flow's name, or that it has none.
    Done(FlowName),
}

/// The name the first bytes of a TCP flow carry: a TLS ClientHello's SNI (`Hidden` with
/// Encrypted Client Hello), or the `Host` of an HTTP/1 request.
pub fn flow_name(bytes: &[u8]) -> Sniffed {
    match bytes.first() {
        None => Sniffed::More,
        Some(0x16) => client_hello(bytes),
        Some(_) => match http_head(bytes) {
            Head::More => more_or_none(bytes),
            Head::Request(request) => Sniffed::Done(match request.host {
                Some(host) => FlowName::Name(host),
                None => FlowName::None,
            }),
            Head::Invalid => Sniffed::Done(FlowName::None),
        },
    }
}

fn more_or_none(bytes: &[u8]) -> Sniffed {
    if bytes.len() >= SNIFF_LIMIT { Sniffed::Done(FlowName::None) } else { Sniffed::More }
}

/// The SNI of a ClientHello, possibly split over several TLS records.
fn client_hello(bytes: &[u8]) -> Sniffed {
    // Reassemble the handshake message from consecutive handshake records.
    let mut handshake = Vec::new();
    let mut rest = bytes;
    loop {
        if rest.len() < 5 {
            return more_or_none(bytes);
        }
        if rest[0] != 0x16 || rest[1] != 3 {
            return Sniffed::Done(FlowName::None);
        }
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if rest.len() < 5 + len {
            return more_or_none(bytes);
        }
        handshake.extend_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
        if handshake.len() >= 4 {
            let body = usize::from(handshake[1]) << 16
                | usize::from(handshake[2]) << 8
                | usize::from(handshake[3]);
            if handshake[0] != 1 {
                return Sniffed::Done(FlowName::None);
            }
            if handshake.len() >= 4 + body {
                return Sniffed::Done(hello_name(&handshake[4..4 + body]));
            }
        }
    }
}

/// A cursor over a ClientHello's body.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        (self.0.len() >= n).then(|| {
            let (head, tail) = self.0.split_at(n);
            self.0 = tail;
            head
        })
    }
    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| usize::from(b[0]))
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2).map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
    /// A vector with a 16-bit length before it.
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let len = self.u16()?;
        self.take(len)
    }
}

fn hello_name(body: &[u8]) -> FlowName {
    let parse = || -> Option<FlowName> {
        let mut r = Reader(body);
        r.take(2 + 32)?; // version, random
        let session = r.u8()?;
        r.take(session)?;
        r.vec16()?;
        let compression = r.u8()?;
        r.take(compression)?;
        let mut ext = Reader(r.vec16()?);
        let mut name = None;
        while !ext.0.is_empty() {
            let kind = ext.u16()?;
            let data = ext.vec16()?;
            match kind {
                // encrypted_client_hello: the name below would be the public one.
                0xfe0d => return Some(FlowName::Hidden),
                0 => {
                    let mut list = Reader(data);
                    let mut names = Reader(list.vec16()?);
                    while !names.0.is_empty() {
                        let kind = names.u8()?;
                        let host = names.vec16()?;
                        if kind == 0 {
                            let host = std::str::from_utf8(host).ok()?;
                            name = Some(crate::allow::normal_name(host));
                        }
                    }
                }
                _ => {}
            }
        }
        Some(name.map_or(FlowName::None, FlowName::Name))
    };
    parse().unwrap_or(FlowName::None)
}

/// One HTTP/1 request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// Bytes of the head, the blank line included.
    pub len: usize,
    /// The `Host` (lower case, without the port), or the authority of an absolute-form target.
    pub host: Option<String>,
    /// How its body is framed.
    pub body: Body,
}

/// How a request's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// `Content-Length` bytes (0 when neither header is there).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// An upgrade (`Upgrade:` or `CONNECT`): what follows is no longer HTTP/1 requests.
    Opaque,
}

/// What the bytes say about the next request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// Not all of it yet.
    More,
    /// A complete head.
    Request(RequestHead),
    /// Not an HTTP/1 request.
    Invalid,
}

const METHODS: &[&str] =
    &["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT"];

/// Reads one HTTP/1 request head at the start of `bytes`.
pub fn http_head(bytes: &[u8]) -> Head {
    let probe = &bytes[..bytes.len().min(8)];
    let starts = METHODS.iter().any(|m| {
        let m = m.as_bytes();
        let n = probe.len().min(m.len() + 1);
        [m, b" "].concat()[..n] == probe[..n]
    });
    if !starts {
        return Head::Invalid;
    }
    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if bytes.len() >= SNIFF_LIMIT { Head::Invalid } else { Head::More };
    };
    let Ok(text) = std::str::from_utf8(&bytes[..end]) else { return Head::Invalid };
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut words = line.split(' ');
    let (Some(method), Some(target)) = (words.next(), words.next()) else { return Head::Invalid };
    let mut host = None;
    let mut length = None;
    let mut chunked = false;
    let mut upgrade = method == "CONNECT";
    for line in lines {
        let Some((name, value)) = line.split_once(':') else { return Head::Invalid };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "host" => {
                if host.is_some() {
                    // Two Host headers: which one a server takes is its choice.
                    return Head::Invalid;
                }
                host = Some(value.to_owned());
            }
            "content-length" => match value.parse::<u64>() {
                Ok(n) if length.is_none_or(|l| l == n) => length = Some(n),
                _ => return Head::Invalid,
            },
            "transfer-encoding" => chunked = value.to_ascii_lowercase().ends_with("chunked"),
            "upgrade" => upgrade = true,
            _ => {}
        }
    }
    // An absolute-form target names the host the server uses (RFC 9112 3.2.2).
    let authority = target
        .split_once("://")
        .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or_default().to_owned());
    let authority = if method == "CONNECT" { Some(target.to_owned()) } else { authority };
    if let (Some(a), Some(h)) = (&authority, &host)
        && !same_host(a, h)
    {
        return Head::Invalid;
    }
    let host = authority.or(host).map(|h| host_of_authority(&h));
    let body = if upgrade {
        Body::Opaque
    } else if chunked {
        Body::Chunked
    } else {
        Body::Length(length.unwrap_or(0))
    };
    Head::Request(RequestHead { len: end + 4, host, body })
}

fn same_host(a: &str, b: &str) -> bool {
    host_of_authority(a) == host_of_authority(b)
}

/// `Example.COM:8080` → `example.com`; `[::1]:80` → `::1`; userinfo dropped.
fn host_of_authority(authority: &str) -> String {
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    crate::allow::normal_name(host)
}

/// Follows the requests of one HTTP/1 connection, client to server, and yields each
/// request's host: every request on a kept-alive connection is checked, not only the first.
#[derive(Debug, Clone, Default)]
pub struct Requests {
    state: State,
    buffered: Vec<u8>,
}

#[derive(Debug, Clone, Default)]
enum State {
    /// Waiting for a request head.
    #[default]
    Head,
    /// Inside a body of this many more bytes.
    Body(u64),
    /// Inside a chunked body: reading a chunk-size line.
    ChunkSize,
    /// Inside a chunk of this many more bytes (plus its CRLF).
    Chunk(u64),
    /// Reading the trailer section after the last chunk.
    Trailer,
    /// No longer HTTP/1 requests.
    Opaque,
}

/// What [`Requests::feed`] found in the bytes given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The hosts of the request heads completed by these bytes, in order.
    Hosts(Vec<Option<String>>),
    /// The bytes are not HTTP/1 requests: close the connection.
    Invalid,
}

impl Requests {
    /// Feeds the next bytes the client sent.
    pub fn feed(&mut self, bytes: &[u8]) -> Step {
        self.buffered.extend_from_slice(bytes);
        let mut hosts = Vec::new();
        loop {
            match self.state {
                State::Opaque => {
                    self.buffered.clear();
                    return Step::Hosts(hosts);
                }
                State::Body(left) | State::Chunk(left) => {
                    if self.buffered.is_empty() {
                        return Step::Hosts(hosts);
                    }
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(self.buffered.len());
                    self.buffered.drain(..n);
                    let left = left - n as u64;
                    self.state = match (&self.state, left) {
                        (State::Body(_), 0) => State::Head,
                        (State::Body(_), left) => State::Body(left),
                        (_, 0) => State::ChunkSize,
                        (_, left) => State::Chunk(left),
                    };
                }
                State::Head => match http_head(&self.buffered) {
                    Head::More => return Step::Hosts(hosts),
                    Head::Invalid => return Step::Invalid,
                    Head::Request(head) => {
                        hosts.push(head.host);
                        self.buffered.drain(..head.len);
                        self.state = match head.body {
                            Body::Length(0) => State::Head,
                            Body::Length(n) => State::Body(n),
                            Body::Chunked => State::ChunkSize,
                            Body::Opaque => State::Opaque,
                        };
                    }
                },
                State::ChunkSize | State::Trailer => {
                    let Some(end) = self.buffered.windows(2).position(|w| w == b"\r\n") else {
                        if self.buffered.len() > 4096 {
                            return Step::Invalid;
                        }
                        return Step::Hosts(hosts);
                    };
                    let line: Vec<u8> = self.buffered.drain(..end + 2).take(end).collect();
                    if matches!(self.state, State::Trailer) {
                        if line.is_empty() {
                            self.state = State::Head;
                        }
                        continue;
                    }
                    let size = std::str::from_utf8(&line).ok().and_then(|size| {
                        let size = size.split(';').next().unwrap_or_default().trim();
                        u64::from_str_radix(size, 16).ok()
                    });
                    let Some(size) = size else { return Step::Invalid };
                    // A chunk's data is followed by CRLF.
                    self.state = if size == 0 { State::Trailer } else { State::Chunk(size + 2) };
                }
            }
        }
    }
}

/// A DNS question: the message id, the name asked (lower case, no trailing dot) and the
/// record type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The message id.
    pub id: u16,
    /// The name asked.
    pub name: String,
    /// The record type (1 A, 28 AAAA, ...).
    pub kind: u16,
}

/// Reads a DNS query's one question; `None` when it is not a query with exactly one.
pub fn dns_question(message: &[u8]) -> Option<Question> {
    if message.len() < 12 || message[2] & 0x80 != 0 {
        return None;
    }
    let count = u16::from_be_bytes([message[4], message[5]]);
    if count != 1 {
        return None;
    }
    let (name, at) = read_name(message, 12)?;
    let kind = u16::from_be_bytes([*message.get(at)?, *message.get(at + 1)?]);
    Some(Question { id: u16::from_be_bytes([message[0], message[1]]), name, kind })
}

/// The answer to `query` that says the name does not exist (NXDOMAIN), its question echoed.
pub fn dns_nxdomain(query: &[u8]) -> Option<Vec<u8>> {
    dns_question(query)?;
    let (_, end) = read_name(query, 12)?;
    let mut answer = query.get(..end + 4)?.to_vec();
    // QR set, the opcode and RD copied; RA set, RCODE 3 (NXDOMAIN); one question, no records.
    answer[2] = 0x80 | (query[2] & 0x79);
    answer[3] = 0x80 | 3;
    answer[6..12].fill(0);
    Some(answer)
}

/// The addresses of a DNS answer's A and AAAA records, for the name asked (whatever CNAME
/// chain led there: the records answer the question).
pub fn dns_addresses(message: &[u8]) -> Vec<IpAddr> {
    let parse = || -> Option<Vec<IpAddr>> {
        if message.len() < 12 || message[2] & 0x80 == 0 {
            return None;
        }
        let questions = u16::from_be_bytes([message[4], message[5]]);
        let answers = u16::from_be_bytes([message[6], message[7]]);
        let mut at = 12;
        for _ in 0..questions {
            at = read_name(message, at)?.1 + 4;
        }
        let mut out = Vec::new();
        for _ in 0..answers {
            at = read_name(message, at)?.1;
            let head = message.get(at..at + 10)?;
            let kind = u16::from_be_bytes([head[0], head[1]]);
            let len = usize::from(u16::from_be_bytes([head[8], head[9]]));
            let data = message.get(at + 10..at + 10 + len)?;
            match (kind, len) {
                (1, 4) => out.push(IpAddr::V4(Ipv4Addr::new(data[0], data[1], data[2], data[3]))),
                (28, 16) => {
                    let octets: [u8; 16] = data.try_into().ok()?;
                    out.push(IpAddr::V6(Ipv6Addr::from(octets)));
                }
                _ => {}
            }
            at += 10 + len;
        }
        Some(out)
    };
    parse().unwrap_or_default()
}

/// The name a DNS response answers (its question's, lower case) and the addresses of its A
/// and AAAA records; `None` when it is not a response with one question.
pub fn dns_answer(message: &[u8]) -> Option<(String, Vec<IpAddr>)> {
    if message.len() < 12 || message[2] & 0x80 == 0 || message[4..6] != [0, 1] {
        return None;
    }
    let (name, _) = read_name(message, 12)?;
    Some((name, dns_addresses(message)))
}

/// A (possibly compressed) name at `at`: the name and the offset after it in place.
fn read_name(message: &[u8], mut at: usize) -> Option<(String, usize)> {
    let mut labels: Vec<String> = Vec::new();
    let mut end = None;
    for _ in 0..128 {
        let len = usize::from(*message.get(at)?);
        match len {
            0 => {
                let name = labels.join(".").to_ascii_lowercase();
                return Some((name, end.unwrap_or(at + 1)));
            }
            l if l & 0xc0 == 0xc0 => {
                let pointer = (l & 0x3f) << 8 | usize::from(*message.get(at + 1)?);
                end.get_or_insert(at + 2);
                at = pointer;
            }
            l if l < 64 => {
                let label = message.get(at + 1..at + 1 + l)?;
                labels.push(String::from_utf8_lossy(label).into_owned());
                at += 1 + l;
            }
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
#[path = "sniff/tests.rs"]
mod tests;
