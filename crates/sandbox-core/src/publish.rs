//! The one publish contract every engine keeps, for runs and sessions alike.
//!
//! - `PORT` (and `ADDR:PORT`) is served on the same port of the host: `--publish 8000` is
//!   `http://127.0.0.1:8000`, never a port the engine happened to pick. A busy host port is an
//!   error naming it ([`crate::Error::HostPortInUse`]) before anything starts, and the engine's own
//!   bind failure (docker, podman, pasta) is mapped to the same error ([`busy_host_port`]).
//! - `0:PORT` asks for any free host port; `HOSTPORT:PORT` for a given one (docker's order).
//! - What was bound is reported as [`PublishedPort`]s (port inside, address and port on the
//!   host, [`PublishedPort::url`]) once the sandbox is up: [`crate::RunIo::published`] for runs,
//!   the session's listing for sessions.
//!
//! Spellings ([`Publish`]'s `FromStr` and `Display`): `PORT`, `HOSTPORT:PORT`, `ADDR:PORT`,
//! `ADDR:HOSTPORT:PORT`, with an IPv6 address in brackets (`[::1]:0:8000`). An unbracketed IPv6
//! address keeps its old meaning (`::1:8000` is `[::1]:8000`) and cannot carry a host port: its
//! last `:` is always the port's. `auto:PORT` is refused with a hint: `0` is the one spelling
//! of "any", as in docker's `-p 0:8000`.
//!
//! The host's answers (is a port taken, which one is free) come in through closures
//! ([`check_free`], [`choose`]); `reaper::ports` gives them.

use std::net::{IpAddr, Ipv4Addr};

use crate::{Error, Publish};

/// Which host port a published port gets.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
pub enum HostPort {
    /// The port's own number (`PORT`, `ADDR:PORT`).
    #[default]
    Same,
    /// Any free port, chosen when the sandbox starts (`0:PORT`).
    Any,
    /// This port, different from the one inside (`HOSTPORT:PORT`).
    Fixed(u16),
}

/// The address a published port binds when none was given.
pub const DEFAULT_PUBLISH_ADDR: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

impl Publish {
    /// `PORT`: the same port on the host's 127.0.0.1.
    pub fn same(port: u16) -> Publish {
        Publish { port, host: None, host_port: HostPort::Same }
    }

    /// The host address it binds.
    pub fn addr(&self) -> IpAddr {
        self.host.unwrap_or(DEFAULT_PUBLISH_ADDR)
    }

    /// The host port asked for; `None` for any.
    pub fn fixed_host_port(&self) -> Option<u16> {
        match self.host_port {
            HostPort::Same => Some(self.port),
            HostPort::Fixed(port) => Some(port),
            HostPort::Any => None,
        }
    }

    /// The same port inside, on any free host port: what the busy-port hint suggests.
    pub fn with_any_host_port(&self) -> Publish {
        Publish { host_port: HostPort::Any, ..*self }
    }
}

impl std::fmt::Display for Publish {
    /// The canonical spelling, which parses back to the same value.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.host {
            Some(IpAddr::V6(v6)) => write!(f, "[{v6}]:")?,
            Some(v4) => write!(f, "{v4}:")?,
            None => {}
        }
        match self.host_port {
            HostPort::Same => {}
            HostPort::Any => f.write_str("0:")?,
            HostPort::Fixed(port) => write!(f, "{port}:")?,
        }
        write!(f, "{}", self.port)
    }
}

/// A published port as bound on the host, or as an engine serves it elsewhere.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PublishedPort {
    /// The port inside the sandbox.
    pub port: u16,
    /// The host address it is bound on.
    pub addr: IpAddr,
    /// The host port.
    pub host_port: u16,
    /// Where the engine serves the port instead of on a host address (k8s: the pod's Ingress,
    /// `http://<id>.<preview domain>`); `addr` and `host_port` then bind nothing and are
    /// [`Ipv4Addr::UNSPECIFIED`] and 0. `None` for a host binding.
    pub preview: Option<String>,
}

impl PublishedPort {
    /// Served at `url` by the engine, bound on no host address.
    pub fn at_url(port: u16, url: String) -> PublishedPort {
        PublishedPort {
            port,
            addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            host_port: 0,
            preview: Some(url),
        }
    }

    /// Where the host reaches it, e.g. `http://127.0.0.1:8000`; an unspecified address
    /// (`0.0.0.0`, `::`) is reached on the matching loopback; the engine's URL as is.
    pub fn url(&self) -> String {
        if let Some(url) = &self.preview {
            return url.clone();
        }
        let host = match self.addr {
            IpAddr::V4(v4) if v4.is_unspecified() => "127.0.0.1".to_owned(),
            IpAddr::V6(v6) if v6.is_unspecified() => "[::1]".to_owned(),
            IpAddr::V6(v6) => format!("[{v6}]"),
            v4 => v4.to_string(),
        };
        format!("http://{host}:{}", self.host_port)
    }
}

/// Pure: the spelling hint of every invalid publish.
const SPELLINGS: &str = "write `PORT` (the same port on the host), `0:PORT` (any free host port), `HOSTPORT:PORT`, or any of them after `ADDR:` (`[IPV6]:` for IPv6), with ports from 1 to 65535";

/// Pure: parses a publish spelling (see the module docs).
pub(crate) fn parse(text: &str) -> Result<Publish, Error> {
    let invalid =
        || Error::InvalidValue { what: "published port", value: text.to_owned(), hint: SPELLINGS };
    let (host, rest): (Option<IpAddr>, &str) = if let Some(bracketed) = text.strip_prefix('[') {
        let (addr, rest) = bracketed.split_once("]:").ok_or_else(invalid)?;
        let addr: std::net::Ipv6Addr = addr.parse().map_err(|_| invalid())?;
        (Some(IpAddr::V6(addr)), rest)
    } else {
        match text.split(':').count() {
            1 => (None, text),
            2 | 3 => match text.split_once(':') {
                Some((addr, rest)) if addr.parse::<Ipv4Addr>().is_ok() => {
                    (addr.parse::<IpAddr>().ok(), rest)
                }
                // `HOSTPORT:PORT`, or an unbracketed IPv6 address such as `::8000`.
                Some((first, _)) if text.split(':').count() == 2 && !first.is_empty() => {
                    (None, text)
                }
                _ => legacy_v6(text).ok_or_else(invalid)?,
            },
            _ => legacy_v6(text).ok_or_else(invalid)?,
        }
    };
    let port = |p: &str| p.parse::<u16>().map_err(|_| invalid());
    let (host_port, port) = match rest.split_once(':') {
        None => (HostPort::Same, port(rest)?),
        Some(("auto", _)) => {
            return Err(Error::InvalidValue {
                what: "published port",
                value: text.to_owned(),
                hint: "write `0:PORT` for any free host port",
            });
        }
        Some((hp, p)) => match port(hp)? {
            0 => (HostPort::Any, port(p)?),
            hp => {
                let p = port(p)?;
                (if hp == p { HostPort::Same } else { HostPort::Fixed(hp) }, p)
            }
        },
    };
    if port == 0 {
        return Err(Error::InvalidPort);
    }
    Ok(Publish { port, host, host_port })
}

/// `ADDR:PORT` with an unbracketed IPv6 address: the last `:` is the port's.
fn legacy_v6(text: &str) -> Option<(Option<IpAddr>, &str)> {
    let (addr, port) = text.rsplit_once(':')?;
    Some((Some(IpAddr::V6(addr.parse().ok()?)), port))
}

/// Pure: the error for two entries that ask for the same host address and port.
pub(crate) fn check_distinct(publish: &[Publish]) -> Result<(), Error> {
    for (i, a) in publish.iter().enumerate() {
        let Some(host_port) = a.fixed_host_port() else { continue };
        if let Some(b) = publish[..i]
            .iter()
            .find(|b| b.addr() == a.addr() && b.fixed_host_port() == Some(host_port))
        {
            return Err(Error::HostPortTwice {
                host_port,
                first: b.to_string(),
                second: a.to_string(),
            });
        }
    }
    Ok(())
}

/// The error for a host port that is taken, with the hint that asks for a free one.
pub fn port_in_use(entry: &Publish, host_port: u16) -> Error {
    Error::HostPortInUse { host_port, any: entry.with_any_host_port().to_string() }
}

/// Checks that the fixed host ports are free now, asking `in_use` (the host's answer:
/// `reaper::ports::in_use`) for each. The engine binds later, so this only makes the common
/// case clear and early; [`busy_host_port`] maps a port taken in between.
pub fn check_free(
    publish: &[Publish],
    mut in_use: impl FnMut(IpAddr, u16) -> bool,
) -> Result<(), Error> {
    for entry in publish {
        if let Some(host_port) = entry.fixed_host_port()
            && in_use(entry.addr(), host_port)
        {
            return Err(port_in_use(entry, host_port));
        }
    }
    Ok(())
}

/// The host side of each entry, with `pick` (the host's: `reaper::ports::Picker`) choosing a
/// port for [`HostPort::Any`]: for an engine without a port allocator of its own (pasta takes
/// no "any" and reports nothing back).
pub fn choose(
    publish: &[Publish],
    mut pick: impl FnMut(IpAddr) -> std::io::Result<u16>,
) -> Result<Vec<PublishedPort>, Error> {
    publish
        .iter()
        .map(|entry| {
            let host_port = match entry.fixed_host_port() {
                Some(port) => port,
                None => pick(entry.addr())
                    .map_err(|e| Error::NoFreePort { addr: entry.addr(), reason: e.to_string() })?,
            };
            Ok(PublishedPort { port: entry.port, addr: entry.addr(), host_port, preview: None })
        })
        .collect()
}

/// Pure: whether an engine's error `message` is a failed bind of one of the host ports of
/// `bound` (docker: "port is already allocated" or its proxy's "address already in use";
/// podman and rootlessport: "address already in use"; pasta: "Failed to bind any port"), and
/// the [`crate::Error::HostPortInUse`] to report instead. A bind failure that names none of
/// them is blamed on the only fixed one, if there is exactly one.
pub fn busy_host_port(message: &str, bound: &[PublishedPort]) -> Option<Error> {
    let lower = message.to_ascii_lowercase();
    let is_bind_failure = ["already allocated", "address already in use", "failed to bind"]
        .iter()
        .any(|needle| lower.contains(needle));
    if !is_bind_failure {
        return None;
    }
    let names = |port: u16| {
        let text = port.to_string();
        message.match_indices(&text).any(|(at, _)| {
            let before = message[..at].chars().next_back();
            let after = message[at + text.len()..].chars().next();
            matches!(before, Some(':' | '/')) && !after.is_some_and(|c| c.is_ascii_digit())
        })
    };
    // Host port 0 (any, still to be chosen by the engine) cannot be the busy one.
    let fixed: Vec<&PublishedPort> = bound.iter().filter(|b| b.host_port != 0).collect();
    let named = fixed.iter().find(|b| names(b.host_port)).copied();
    let only = match fixed.as_slice() {
        [only] => Some(*only),
        _ => None,
    };
    let blamed = named.or(only)?;
    let entry = Publish {
        port: blamed.port,
        host: (blamed.addr != DEFAULT_PUBLISH_ADDR).then_some(blamed.addr),
        host_port: HostPort::Same,
    };
    Some(port_in_use(&entry, blamed.host_port))
}

/// Pure: what each entry asks the host for, before the engine has bound anything: the fixed
/// host ports as they will be, and `0` for any (what docker and podman take as "any").
pub fn asked(publish: &[Publish]) -> Vec<PublishedPort> {
    publish
        .iter()
        .map(|p| PublishedPort {
            port: p.port,
            addr: p.addr(),
            host_port: p.fixed_host_port().unwrap_or(0),
            preview: None,
        })
        .collect()
}

#[cfg(test)]
mod tests;
