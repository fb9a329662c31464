//! Host facts every engine needs and that must not differ between them.

use std::path::PathBuf;

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
