//! Net on: the outbound-only network of the "holes in the wall" issue, given exactly as the
//! bwrap engine gives it, by the same code ([`sandbox_net::UserNet`]): pasta joins the
//! sandbox's network namespace from outside while the sandbox waits (the init blocks right
//! after its `unshare`, see [`crate::sandbox::spawn`]; a run's script instead waits in its
//! first network call, [`connect_on_demand`] and [`crate::demand`]), the namespace is walled in
//! (unreachable routes to link-local, private unless the user allows the LAN, and the host's own
//! addresses: `sandbox_net`'s `wall_in`), and pasta forwards neither the host's loopback
//! (`--no-map-gw`, `-T none`) nor anything inbound but published ports. The sandbox's abstract
//! unix sockets are its own network namespace's, so the host's are out of reach too.
//!
//! The network namespace is made together with the sandbox's own user namespace (by the
//! namespace maker, as the sandbox's host user, see `sandbox.rs`), so it belongs to that user:
//! pasta joins it as that user, the caller or, for a root caller, host nobody (as bwrap's pasta does), never
//! as root.
//!
//! **Without pasta** (a fresh machine), a sandbox gets the built-in relay
//! ([`sandbox_net::Relay`]): a tun device in the sandbox's namespace, full outbound TCP and
//! UDP with the proxy's policy, a run's attached on demand as pasta is ([`Network::Relay`]) and
//! served from this process, a session's attached up front and served by a keeper
//! (`serve_relay`). Where it cannot be had (no tun device the caller may open,
//! [`BwrapConfig::builtin_relay`] off): the built-in proxy ([`sandbox_net::BuiltinProxy`]). The namespace keeps no route, only its loopback, where a
//! socket made from outside listens on [`sandbox_net::PROXY_PORT`]; this process serves it,
//! and the sandbox's environment points `HTTPS_PROXY` and friends there, so uv's installs and a
//! script's HTTP(S) work. Raw sockets, UDP and published ports then need pasta or the relay.

use std::path::Path;

use engine_bwrap::BwrapConfig;
use sandbox_core::{Lan, PublishedPort};

use crate::error::{Error, Result};
use crate::plan::NOBODY;
use crate::sandbox::Child;

/// Connects a sandbox spawned with net on (blocked before its setup) and lets it go on.
/// The returned handle ends pasta when dropped: keep it until the sandbox has exited.
pub fn connect(
    child: &mut Child,
    pasta: &Path,
    publish: &[PublishedPort],
    lan: Lan,
) -> Result<sandbox_net::UserNet> {
    let net = attach(child, pasta, publish, lan).map_err(|e| Error::Network(e.to_string()))?;
    child.release()?;
    Ok(net)
}

/// How a net-on run's sandbox gets its network when the script first asks for it.
#[derive(Debug, Clone, Copy)]
pub enum Network<'a> {
    /// pasta, at this path.
    Pasta(&'a Path),
    /// The built-in relay ([`sandbox_net::Relay`]): full TCP and UDP without pasta, serving
    /// these nameservers of the host's loopback on the sandbox's
    /// ([`sandbox_net::loopback_nameservers`]; the same as [`crate::Command::net_doors`]).
    Relay {
        nameservers: &'a [std::net::SocketAddr],
        /// A network allowlist it holds.
        listed: Option<&'a sandbox_net::Listed>,
    },
}

/// A network attached on demand: ended when dropped.
#[derive(Debug)]
pub enum Attached {
    Pasta(sandbox_net::UserNet),
    Relay(sandbox_net::Relay),
}

/// Net on, connected on demand ([`crate::demand`]): a thread waits for the sandbox's first
/// network call and attaches `network` then. `Ok(None)` when `child` was not spawned so (net
/// off, [`crate::Command::net_on_demand`] unset, or a kernel without user notifications: then
/// [`connect`] it). Private ranges are reached only when `lan` allows them. `early`: the
/// command needs its network at once (a prepare step), so the thread attaches it as soon as
/// the namespace exists, while the command starts, rather than at its first call (which is
/// held until then either way).
pub fn connect_on_demand(
    child: &mut Child,
    network: Network<'_>,
    lan: Lan,
    early: bool,
) -> Result<Option<OnDemand>> {
    let Some(demand) = child.take_net_demand() else { return Ok(None) };
    let (pasta, nameservers, listed) = match network {
        Network::Pasta(pasta) => (Some(pasta.to_owned()), Vec::new(), None),
        Network::Relay { nameservers, listed } => (None, nameservers.to_vec(), listed.cloned()),
    };
    let thread = std::thread::Builder::new()
        .name("native-net-on-demand".into())
        .spawn(move || {
            let netns = if early { demand.netns() } else { demand.wait() };
            let Some(netns) = netns else { return Ok(None) };
            let attached = match &pasta {
                Some(pasta) => sandbox_net::UserNet::attach_netns(pasta, netns, &[], run_as(), lan)
                    .map(Attached::Pasta),
                None => match listed {
                    Some(listed) => {
                        sandbox_net::Relay::attach_listed(&netns, &nameservers, lan, listed)
                    }
                    None => sandbox_net::Relay::attach(&netns, &nameservers, lan),
                }
                .map(Attached::Relay),
            };
            // Attached or not, the held calls go on (without a network they find no route).
            demand.release();
            attached.map(Some)
        })
        .map_err(Error::io("starting the native sandbox's network thread"))?;
    Ok(Some(OnDemand { thread }))
}

/// The network of a sandbox connected on demand ([`connect_on_demand`]).
#[derive(Debug)]
pub struct OnDemand {
    thread: std::thread::JoinHandle<std::result::Result<Option<Attached>, sandbox_net::Error>>,
}

impl OnDemand {
    /// Once the run has ended: the network, if the script asked for it (end it by dropping
    /// the handle), or why it could not be attached. Returns at once when the script never
    /// asked (the init's end of the socket pair is closed), and after the attach otherwise.
    pub fn finish(self) -> std::result::Result<Option<Attached>, sandbox_net::Error> {
        self.thread.join().unwrap_or_else(|_| {
            Err(sandbox_net::Error::UserNetwork { reason: "the network thread panicked".into() })
        })
    }
}

/// Whether net-on sandboxes of an engine with `config` get the built-in relay: no pasta to be
/// had and a tun device this process may open.
pub fn relay_applies(config: &BwrapConfig) -> bool {
    config.builtin_relay
        && engine_detect::pasta(config.path.as_deref()).is_err()
        && sandbox_net::relay_available()
}

/// [`connect`] without the release, in sandbox-net's error (a busy published port is the one
/// error every engine gives, `sandbox_core::publish`).
pub(crate) fn attach(
    child: &Child,
    pasta: &Path,
    publish: &[PublishedPort],
    lan: Lan,
) -> std::result::Result<sandbox_net::UserNet, sandbox_net::Error> {
    sandbox_net::UserNet::attach_blocked(pasta, child.netns_pid(), publish, run_as(), lan)
}

/// The host user pasta runs as: the sandbox's (host nobody for a root caller), `None` for ours.
fn run_as() -> Option<(u32, u32)> {
    rustix::process::getuid().is_root().then_some((NOBODY, NOBODY))
}

/// The one `note:` a `--net on` run prints when it gets the built-in proxy (pasta missing).
pub const BUILTIN_NET_NOTE: &str = "no pasta on PATH, so the network is HTTP(S) only, through \
     the built-in proxy (`HTTPS_PROXY`); install the `passt` package for full TCP/UDP networking";

/// Whether net-on sandboxes of an engine with `config` get the built-in proxy or relay (no
/// pasta on its `PATH`, or one that cannot open `/dev/net/tun`) rather than pasta.
pub fn builtin_net_applies(config: &BwrapConfig) -> bool {
    builtin_net_note(config).is_some()
}

/// The `note:` of a net-on sandbox of the native or bwrap engine with `config`, when it gets
/// the built-in proxy: one that gets the relay has full TCP/UDP.
pub fn net_note(config: &BwrapConfig) -> Option<String> {
    if relay_applies(config) {
        return None;
    }
    builtin_net_note(config)
}

/// The `note:` of a net-on sandbox of an engine with `config`, when it gets the built-in
/// proxy: why pasta cannot be had, and how to get full TCP/UDP.
pub fn builtin_net_note(config: &BwrapConfig) -> Option<String> {
    // As the engine finds it (`BwrapConfig::from_env` takes the caller's `PATH`).
    match engine_detect::pasta(config.path.as_deref()) {
        Ok(_) => None,
        Err(engine_detect::NoPasta::Missing) => Some(BUILTIN_NET_NOTE.to_owned()),
        Err(no) => Some(format!(
            "{}, so the network is HTTP(S) only, through the built-in proxy (`HTTPS_PROXY`); {}",
            no.why(),
            no.hint()
        )),
    }
}

/// The built-in relay for a sandbox spawned with net on (blocked before its setup), attached
/// before the script starts: served by a thread of this process (a run on a kernel without
/// user notifications), or for a `session` by a keeper that lives as long as the monitor.
pub(crate) fn serve_relay(
    child: &Child,
    nameservers: &[std::net::SocketAddr],
    publish: &[PublishedPort],
    session: bool,
    lan: Lan,
    listed: Option<&sandbox_net::Listed>,
) -> std::result::Result<sandbox_net::ProxyServer, sandbox_net::Error> {
    let outlived_by = session.then(|| child.pidfd());
    let listed = listed.cloned();
    sandbox_net::relay_in(child.netns_pid(), nameservers, publish, outlived_by, lan, listed)
}

/// The built-in proxy for a sandbox spawned with net on (blocked before its setup): its
/// listening socket made in the sandbox's network namespace, served from this process, or
/// for a `session` by a keeper that lives as long as the monitor.
pub(crate) fn serve_proxy(
    child: &Child,
    session: bool,
    lan: Lan,
    listed: Option<&sandbox_net::Listed>,
) -> std::result::Result<sandbox_net::ProxyServer, sandbox_net::Error> {
    let listener = sandbox_net::listen_in(child.netns_pid(), sandbox_net::PROXY_PORT)?;
    let listed = listed.cloned();
    sandbox_net::ProxyServer::serve(listener, session.then(|| child.pidfd()), lan, listed)
}
