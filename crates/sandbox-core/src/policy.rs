//! The environment policy every engine applies, in one place so bwrap and the container engines
//! cannot drift apart: which host variables reach a run, which reach the dependency install, and
//! where the host's CA bundle appears inside a sandbox.

/// Where the host's CA bundle appears inside every sandbox; `SSL_CERT_FILE` points here so uv,
/// Python and `requests` trust what the host trusts (corporate TLS-intercepting proxies included).
pub const SANDBOX_CA_BUNDLE: &str = "/etc/python-sandbox/ca-certificates.crt";

/// Where distributions keep the system CA bundle, in the order engines look for it (Debian and
/// Ubuntu, Fedora and RHEL, Alpine, openSUSE, macOS-style).
pub const CA_BUNDLE_CANDIDATES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// Host variables passed through unchanged to a run (when set on the host). Everything else the
/// script sees is set by the engine or passed explicitly with `--env`.
pub const RUN_ENV_ALLOWLIST: &[&str] = &["LANG", "LC_ALL", "TERM", "TZ"];

/// Extra host variables the prepare phase (uv installing dependencies) sees: proxies and package
/// indexes, so corporate proxies and mirrors work. No code of the script runs there, but package
/// build scripts do, so nothing else of the host environment goes in.
pub const PREPARE_ENV_ALLOWLIST: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "UV_INDEX",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_INDEX_STRATEGY",
    "UV_HTTP_TIMEOUT",
    "UV_CONCURRENT_DOWNLOADS",
    "UV_OFFLINE",
];
