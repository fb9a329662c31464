//! The environment policy every engine applies, in one place so bwrap and the container engines
//! cannot drift apart: which host variables reach a run, which reach the dependency install,
//! where the host's CA bundle appears inside a sandbox, and which host paths may be mounted at all.

/// Where the host's CA bundle appears inside every sandbox; `SSL_CERT_FILE` points here so uv,
/// Python and `requests` trust what the host trusts (corporate TLS-intercepting proxies included).
pub const SANDBOX_CA_BUNDLE: &str = "/etc/python-sandbox/ca-certificates.crt";

/// `HOME` inside every sandbox, on every engine: an empty tmpfs. A fixed path rather than the
/// caller's, so scripts see the same environment wherever they run (and learn nothing of the
/// host's user names).
pub const SANDBOX_HOME: &str = "/home/sandbox";

/// The sandbox's host name on every engine.
pub const SANDBOX_HOSTNAME: &str = "python-sandbox";

/// `container` inside every sandbox: the name of the manager, as systemd's container interface
/// asks of every container manager. Podman sets its own name and its API cannot unset it, so
/// every engine sets this one and scripts see one value everywhere.
pub const SANDBOX_CONTAINER: &str = "python-sandbox";

/// The variables every run starts from, on every engine, in order: `HOME`, `HOSTNAME`,
/// `container`, `LANG` (`C.UTF-8` unless the host sets it), the host's [`RUN_ENV_ALLOWLIST`]
/// values and, when the host's CA bundle is mounted (`ca`), `SSL_CERT_FILE` and
/// `REQUESTS_CA_BUNDLE` naming it. Engines add only what is theirs to know (`PATH`, `PWD`,
/// `VIRTUAL_ENV`) and then the explicit `--env` values; nothing else of the host goes in.
pub fn run_env<V: From<&'static str>>(
    host_var: impl Fn(&str) -> Option<V>,
    ca: bool,
) -> Vec<(String, V)> {
    let mut env: Vec<(String, V)> = vec![
        ("HOME".to_owned(), SANDBOX_HOME.into()),
        ("HOSTNAME".to_owned(), SANDBOX_HOSTNAME.into()),
        ("container".to_owned(), SANDBOX_CONTAINER.into()),
    ];
    env.push(("LANG".to_owned(), host_var("LANG").unwrap_or_else(|| "C.UTF-8".into())));
    for name in RUN_ENV_ALLOWLIST.iter().filter(|n| **n != "LANG") {
        if let Some(value) = host_var(name) {
            env.push(((*name).to_owned(), value));
        }
    }
    if ca {
        env.push(("SSL_CERT_FILE".to_owned(), SANDBOX_CA_BUNDLE.into()));
        // requests ignores SSL_CERT_FILE (it ships certifi): the same bundle, so corporate
        // TLS-intercepting proxies work for the most common HTTP library too.
        env.push(("REQUESTS_CA_BUNDLE".to_owned(), SANDBOX_CA_BUNDLE.into()));
    }
    env
}

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

/// What a host path is for; a workspace (read-write, the working directory) has stricter rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathUse {
    /// The read-write workspace.
    Workspace,
    /// An extra mount.
    Mount,
}

/// Host trees never mounted into any sandbox, with what they hold.
pub const NEVER_MOUNTED: &[(&str, &str)] = &[
    ("/proc", "kernel interfaces"),
    ("/sys", "kernel interfaces"),
    ("/dev", "devices"),
    ("/run", "host sockets"),
    ("/var/run", "host sockets"),
    ("/var/lib/docker", "container engine state"),
    ("/var/lib/containers", "container engine state"),
];

/// System trees a workspace may not be (it would be writable).
pub const SYSTEM_DIRS: &[&str] =
    &["/usr", "/etc", "/boot", "/bin", "/sbin", "/lib", "/lib64", "/var/lib"];

/// Pure: `Err(reason)` when the canonical host `path` must not be mounted for `usage`. `own` is
/// python-sandbox's own directory of the engine (its cache or runtime directory) and what it
/// holds: nothing may overlap it. The same rules for every engine, so they cannot drift.
pub fn check_host_path(
    path: &std::path::Path,
    usage: PathUse,
    home: Option<&std::path::Path>,
    own: (&std::path::Path, &str),
) -> Result<(), String> {
    if path.parent().is_none() {
        return Err("it is the root directory".into());
    }
    if let Some((tree, what)) = NEVER_MOUNTED.iter().find(|(p, _)| path.starts_with(p)) {
        return Err(format!("{tree} holds {what}"));
    }
    if usage == PathUse::Workspace {
        if home.is_some_and(|h| h.starts_with(path)) {
            return Err("it would expose your whole home directory".into());
        }
        if let Some(sys) = SYSTEM_DIRS.iter().find(|p| path.starts_with(p)) {
            return Err(format!("{sys} is a system directory"));
        }
    }
    let (own_dir, holds) = own;
    if path.starts_with(own_dir) || own_dir.starts_with(path) {
        return Err(format!(
            "it overlaps python-sandbox's own directory {} ({holds})",
            own_dir.display()
        ));
    }
    Ok(())
}
