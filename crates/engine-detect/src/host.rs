//! Host facts every engine needs and that must not differ between them.

use std::net::{IpAddr, ToSocketAddrs};
use std::path::PathBuf;

/// The addresses of the proxies this process's environment names
/// ([`sandbox_core::PROXY_VARS`], a name resolved here): a net-on sandbox's wall keeps them
/// reachable, as it keeps the host's nameservers, since a prepare's uv is given them.
pub fn proxy_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    for name in sandbox_core::PROXY_VARS {
        let Some((host, port)) =
            std::env::var(name).ok().and_then(|v| sandbox_core::proxy_authority(&v))
        else {
            continue;
        };
        let resolved = (host.as_str(), port).to_socket_addrs().map(|a| a.map(|a| a.ip()));
        for ip in resolved.into_iter().flatten() {
            if !out.contains(&ip) {
                out.push(ip);
            }
        }
    }
    out
}

/// The host's CA bundle, handed to uv and Python in every sandbox so that TLS-intercepting
/// (corporate) proxies work: `SSL_CERT_FILE` when set, else the first bundle of
/// [`sandbox_core::CA_BUNDLE_CANDIDATES`] that exists. Canonical, so it can be bind-mounted.
pub fn ca_bundle() -> Option<PathBuf> {
    std::env::var_os("SSL_CERT_FILE")
        .map(PathBuf::from)
        .into_iter()
        .chain(sandbox_core::CA_BUNDLE_CANDIDATES.iter().map(PathBuf::from))
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .find(|p| p.is_file())
}
