//! `net = [patterns]`: the names and addresses a net-on sandbox may reach, as data, and the
//! decisions every engine's egress makes with it.
//!
//! A pattern is a host name (`pypi.org`), a suffix (`*.githubusercontent.com`: any name under
//! it, not the name itself), either optionally with a port (`api.example.com:443`), or an
//! address or range for what has no name (`10.1.2.3:5432`, `192.168.7.0/24`,
//! `[fd00::1]:8080`).
//!
//! Names are checked by name, never by address: where many names share one address (a CDN,
//! a TLS-intercepting proxy) an address says nothing about which name a flow is for. So an
//! engine answers DNS only for listed names ([`Allow::resolves`]), remembers which addresses
//! it answered for which name, and lets a connection through only when the name the flow
//! itself carries (TLS SNI, HTTP `Host`: [`crate::flow_name`]) is listed for its port and the
//! destination is one of the addresses answered for that name ([`Allow::flow`]). Address
//! patterns let a flow through by address alone; they are also the only way to a private
//! or special range (the host, RFC 1918, link-local...): a name never takes a flow there.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use crate::Error;
use crate::route::{Cidr, canonical};

/// One entry of an allowlist.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPattern {
    /// What the entry names.
    pub target: Target,
    /// The one port it allows; `None`: any port.
    pub port: Option<u16>,
}

/// What a [`HostPattern`] names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// Exactly this name (lower case, no trailing dot).
    Name(String),
    /// Any name ending in `.` + this (written `*.example.com`); not the name itself.
    Suffix(String),
    /// An address or a range of them.
    Range(Cidr),
}

/// A non-empty list of [`HostPattern`]s: the only destinations a sandbox may reach. Stored
/// (a session's record and start) as its patterns written out, parsed again when read.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(into = "StoredAllow", try_from = "StoredAllow")]
pub struct Allow {
    patterns: Vec<HostPattern>,
    /// Whether its address patterns may reach private ranges (RFC 1918, CGNAT, ULA): only a
    /// list the caller gave (a flag, the user config), never a script's own.
    private: bool,
}

/// Why a flow or a lookup was refused, for the `note:` and `--json`'s `net_refused`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct NetRefused {
    /// The name the flow carried or the lookup asked, or the address when it had none.
    pub host: String,
    /// The destination port; `None` for a DNS lookup.
    pub port: Option<u16>,
    /// Why, lower case.
    pub reason: String,
    /// A pattern that would allow it, when one may (never for a name-less flow to a name's
    /// address, which no pattern but the address itself allows).
    pub would_allow: Option<String>,
}

impl fmt::Display for NetRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}: {}", host_for_display(&self.host), self.reason)?,
            None => write!(f, "{}: {}", self.host, self.reason)?,
        }
        if let Some(pattern) = &self.would_allow {
            write!(f, " (`{pattern}` in `net` would allow it)")?;
        }
        Ok(())
    }
}

fn host_for_display(host: &str) -> String {
    if host.contains(':') { format!("[{host}]") } else { host.to_owned() }
}

/// What the first bytes of a flow said about where it goes ([`crate::flow_name`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowName {
    /// A TLS ClientHello's server name or an HTTP request's `Host` (lower case, no port).
    Name(String),
    /// A ClientHello with Encrypted Client Hello: the real name is hidden.
    Hidden,
    /// Nothing that names a host (another protocol, a ClientHello without SNI).
    None,
}

/// [`Allow`] as stored: the patterns as written, and whether it reaches private ranges.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredAllow {
    patterns: Vec<String>,
    #[serde(default)]
    private: bool,
}

impl From<Allow> for StoredAllow {
    fn from(allow: Allow) -> StoredAllow {
        StoredAllow {
            patterns: allow.patterns.iter().map(ToString::to_string).collect(),
            private: allow.private,
        }
    }
}

impl TryFrom<StoredAllow> for Allow {
    type Error = Error;
    fn try_from(stored: StoredAllow) -> Result<Allow, Error> {
        Ok(Allow::parse(stored.patterns.iter().map(String::as_str))?
            .opening_private(stored.private))
    }
}

impl Allow {
    /// The list, refused when empty (it would allow nothing: that is `net = "off"`).
    pub fn new(mut patterns: Vec<HostPattern>) -> Result<Allow, Error> {
        if patterns.is_empty() {
            return Err(Error::InvalidValue {
                what: "network allowlist",
                value: "[]".to_owned(),
                hint: "an empty list allows nothing: write `off` for no network, or list hosts like `pypi.org`",
            });
        }
        patterns.sort();
        patterns.dedup();
        Ok(Allow { patterns, private: false })
    }

    /// Parses each entry of a list (`--net a,b` split, or the inline array).
    pub fn parse<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<Allow, Error> {
        Allow::new(entries.into_iter().map(str::parse).collect::<Result<_, _>>()?)
    }

    /// This list, its address patterns reaching private ranges or not ([`Allow::opens_private`]).
    pub fn opening_private(self, private: bool) -> Allow {
        Allow { private, ..self }
    }

    /// Whether a listed private address is reachable: the caller gave the list. A script's
    /// own list reaches private ranges only where the user config allows the LAN.
    pub fn opens_private(&self) -> bool {
        self.private
    }

    /// The patterns, sorted.
    pub fn patterns(&self) -> &[HostPattern] {
        &self.patterns
    }

    /// Whether a DNS lookup of `name` is answered: some name pattern lists it, on any port.
    pub fn resolves(&self, name: &str) -> bool {
        let name = normal_name(name);
        self.patterns.iter().any(|p| p.names(&name))
    }

    /// Whether some name pattern lists `name` on `port`.
    pub fn name_on_port(&self, name: &str, port: u16) -> bool {
        let name = normal_name(name);
        self.patterns.iter().any(|p| p.names(&name) && p.port_ok(port))
    }

    /// The address pattern that lets a flow to `ip:port` through by address alone.
    pub fn by_address(&self, ip: IpAddr, port: u16) -> Option<&HostPattern> {
        let ip = canonical(ip);
        self.patterns.iter().find(|p| {
            matches!(&p.target, Target::Range(range) if range.contains(ip)) && p.port_ok(port)
        })
    }

    /// The decision for a flow to `ip:port` whose first bytes said `name`; `answered` tells
    /// whether this sandbox's DNS answered `ip` for a name. `Ok` with the pattern that allows
    /// it, or why not.
    pub fn flow(
        &self,
        ip: IpAddr,
        port: u16,
        name: &FlowName,
        answered: impl Fn(&str, IpAddr) -> bool,
    ) -> Result<&HostPattern, NetRefused> {
        if let Some(pattern) = self.by_address(ip, port) {
            return Ok(pattern);
        }
        let ip = canonical(ip);
        let refused = |host: String, reason: &str, would_allow: Option<String>| NetRefused {
            host,
            port: Some(port),
            reason: reason.to_owned(),
            would_allow,
        };
        let name = match name {
            FlowName::Name(name) => normal_name(name),
            FlowName::Hidden => {
                return Err(refused(
                    ip.to_string(),
                    "the name is hidden (encrypted client hello)",
                    None,
                ));
            }
            FlowName::None => {
                return Err(refused(
                    ip.to_string(),
                    "no host name in the connection (not TLS with SNI, not HTTP)",
                    Some(would_allow_addr(ip, port)),
                ));
            }
        };
        if name.parse::<IpAddr>().is_ok() {
            return Err(refused(
                name.clone(),
                "an address not in the list",
                Some(would_allow_addr(ip, port)),
            ));
        }
        let Some(pattern) = self.patterns.iter().find(|p| p.names(&name) && p.port_ok(port)) else {
            let would_allow = Some(format!("{name}:{port}"));
            return Err(refused(name, "not in the list", would_allow));
        };
        if !answered(&name, ip) {
            return Err(refused(
                name,
                "the address was not answered for this name by the sandbox's DNS",
                None,
            ));
        }
        Ok(pattern)
    }

    /// The refusal of a lookup of `name`.
    pub fn lookup_refused(name: &str) -> NetRefused {
        let name = normal_name(name);
        NetRefused {
            would_allow: Some(name.clone()),
            host: name,
            port: None,
            reason: "not in the list (no DNS answer)".to_owned(),
        }
    }

    /// The refusal of a flow to an address no DNS answer named and no pattern lists.
    pub fn address_refused(ip: IpAddr, port: u16) -> NetRefused {
        // Loopback, link-local and the like stay refused whatever the list says: no pattern
        // is suggested for them.
        let never = crate::route::refusal(ip, crate::Lan::Allowed).is_some();
        NetRefused {
            host: canonical(ip).to_string(),
            port: Some(port),
            reason: "an address not in the list".to_owned(),
            would_allow: (!never).then(|| would_allow_addr(ip, port)),
        }
    }
}

/// Whether the requests an HTTP/1 connection to `name` carried next (`step`, from
/// [`crate::HttpRequests::feed`]) keep to it: `None`, or the refusal (naming the other host,
/// or saying it was not HTTP).
pub fn other_host(step: &crate::HttpStep, name: &str, port: u16) -> Option<NetRefused> {
    let (host, reason) = match step {
        crate::HttpStep::Hosts(hosts) => match hosts.iter().find(|h| h.as_deref() != Some(name)) {
            None => return None,
            Some(Some(other)) => (other.clone(), format!("asked on a connection to {name}")),
            Some(None) => {
                (name.to_owned(), "a request without a host on its connection".to_owned())
            }
        },
        crate::HttpStep::Invalid => {
            (name.to_owned(), "what followed on its connection was not HTTP".to_owned())
        }
    };
    Some(NetRefused { host, port: Some(port), reason, would_allow: None })
}

/// Refuses `spec`'s allowlist on an engine that cannot hold one (`why`: what it lacks).
pub fn refuse_allowlist(
    spec: &crate::RunSpec,
    engine: &'static str,
    why: &'static str,
) -> Result<(), Error> {
    match &spec.allow {
        Some(_) => Err(Error::AllowlistUnsupported { engine, why }),
        None => Ok(()),
    }
}

fn would_allow_addr(ip: IpAddr, port: u16) -> String {
    match canonical(ip) {
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
        v4 => format!("{v4}:{port}"),
    }
}

impl fmt::Display for Allow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.patterns.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl HostPattern {
    /// Whether this (name or suffix) pattern names `name` (already [`normal_name`]d).
    fn names(&self, name: &str) -> bool {
        match &self.target {
            Target::Name(n) => n == name,
            Target::Suffix(s) => {
                name.len() > s.len() + 1
                    && name.ends_with(s.as_str())
                    && name.as_bytes()[name.len() - s.len() - 1] == b'.'
            }
            Target::Range(_) => false,
        }
    }

    fn port_ok(&self, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
    }
}

/// Lower case, without a trailing dot: how names are compared.
pub fn normal_name(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v6 = matches!(&self.target, Target::Range(c) if c.addr.is_ipv6());
        match &self.target {
            Target::Name(n) => f.write_str(n)?,
            Target::Suffix(s) => write!(f, "*.{s}")?,
            Target::Range(c) if c.prefix == host_bits(c.addr) => {
                if v6 && self.port.is_some() {
                    write!(f, "[{}]", c.addr)?
                } else {
                    write!(f, "{}", c.addr)?
                }
            }
            Target::Range(c) => {
                if v6 && self.port.is_some() {
                    write!(f, "[{}/{}]", c.addr, c.prefix)?
                } else {
                    write!(f, "{}/{}", c.addr, c.prefix)?
                }
            }
        }
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        Ok(())
    }
}

fn host_bits(ip: IpAddr) -> u8 {
    if ip.is_ipv4() { 32 } else { 128 }
}

const PATTERN_HINT: &str = "write a host name (`pypi.org`), a suffix (`*.example.com`), either with an optional `:PORT`, or an address or range (`10.1.2.3:5432`, `192.168.7.0/24`, `[fd00::1]:8080`)";

impl FromStr for HostPattern {
    type Err = Error;

    fn from_str(text: &str) -> Result<HostPattern, Error> {
        let invalid = |hint: &'static str| Error::InvalidValue {
            what: "network pattern",
            value: text.to_owned(),
            hint,
        };
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(invalid(PATTERN_HINT));
        }
        if trimmed == "*" || trimmed.starts_with("*:") {
            return Err(invalid("`*` is every host: write `on` for the whole network"));
        }
        if trimmed.contains("://") || trimmed.contains('/') && !looks_like_range(trimmed) {
            return Err(invalid(
                "write the host alone, without a scheme or a path: `pypi.org`, not `https://pypi.org/simple`",
            ));
        }
        // The port: after `]` for a bracketed IPv6 address; after the one `:` otherwise (a
        // bare IPv6 address or range has several and no port).
        let (host, port) = if let Some(rest) = trimmed.strip_prefix('[') {
            let (host, after) = rest.split_once(']').ok_or_else(|| invalid(PATTERN_HINT))?;
            match after {
                "" => (host, None),
                _ => (host, Some(after.strip_prefix(':').ok_or_else(|| invalid(PATTERN_HINT))?)),
            }
        } else if trimmed.matches(':').count() == 1 {
            let (host, port) = trimmed.split_once(':').unwrap_or((trimmed, ""));
            (host, Some(port))
        } else {
            (trimmed, None)
        };
        let port = match port {
            None => None,
            Some(port) => match port.parse::<u16>() {
                Ok(0) | Err(_) => return Err(invalid("a port is a number from 1 to 65535")),
                Ok(port) => Some(port),
            },
        };
        if let Ok(ip) = host.parse::<IpAddr>() {
            let ip = canonical(ip);
            return Ok(HostPattern { target: Target::Range(Cidr::host(ip)), port });
        }
        if host.contains('/') {
            let range = Cidr::parse(host).ok_or_else(|| {
                invalid("a range is an address and a prefix length with no bits set past it: `192.168.7.0/24`")
            })?;
            return Ok(HostPattern { target: Target::Range(range), port });
        }
        let (suffix, name) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host),
        };
        let name = normal_name(name);
        if name.contains('*') {
            return Err(invalid("`*` may only start a suffix: `*.example.com`"));
        }
        if !valid_name(&name) {
            return Err(invalid(PATTERN_HINT));
        }
        if !suffix && !name.contains('.') {
            // `--net of` is a typo, not the host `of`; a single-label name is one too rarely.
            return Err(invalid(
                "write `on`, `off`, or full host names like `pypi.org` (a name with a dot)",
            ));
        }
        if suffix && !name.contains('.') {
            return Err(invalid(
                "a suffix names a domain, not a top-level one: `*.example.com`, not `*.com`",
            ));
        }
        let target = if suffix { Target::Suffix(name) } else { Target::Name(name) };
        Ok(HostPattern { target, port })
    }
}

fn looks_like_range(text: &str) -> bool {
    let host = text.strip_prefix('[').map_or(text, |t| t.split(']').next().unwrap_or(t));
    let host =
        if host.matches(':').count() == 1 { host.split(':').next().unwrap_or(host) } else { host };
    host.split_once('/').is_some_and(|(addr, bits)| {
        addr.parse::<IpAddr>().is_ok()
            && !bits.is_empty()
            && bits.bytes().all(|b| b.is_ascii_digit())
    })
}

/// A DNS host name: labels of letters, digits and `-` (not at either end; `_` allowed for
/// service names), 1 to 63 bytes each, 253 in all.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
#[path = "allow/tests.rs"]
mod tests;
