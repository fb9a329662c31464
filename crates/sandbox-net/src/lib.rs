//! The built-in network of python-sandbox's local engines (native and bwrap): how a sandbox
//! with net on gets its outbound network from outside its own network namespace, and what
//! every flow is checked against.
//!
//! * **pasta** ([`UserNet`], `net.rs`): joins the sandbox's network namespace from outside and
//!   walls it in (unreachable routes to link-local, private ranges unless the LAN is allowed,
//!   and the host's own addresses).
//! * **The relay** ([`Relay`], `relay.rs`): without pasta, a tun device in the sandbox's
//!   namespace served by smoltcp from outside, full outbound TCP and UDP.
//! * **The proxy** ([`BuiltinProxy`], `proxy.rs`): where no tun device can be opened, an
//!   HTTP(S) proxy listening on the sandbox's loopback ([`listen_in`], [`proxy_env`]). A
//!   session's relay or proxy is served by a keeper process ([`keeper_main_if_asked`]).
//! * **The egress proxy** ([`EgressProxy`]): the same proxy for many sandboxes that reach it
//!   over a network (a cluster's), each connection held to its client address's list.
//! * **Egress checks** (`egress.rs`, `nat.rs`): every destination the relay and the proxy
//!   connect to, and the address the host's NAT rewrote it to, is refused when it is the
//!   host's, link-local, or private without the LAN allowed.
//!
//! Engines depend on this crate, never it on an engine. Errors are [`Error`].

mod egress;
mod error;
mod nat;
mod net;
mod proxy;
mod relay;
mod spawn;

pub use error::Error;
pub use net::{UserNet, host_loopback_nameservers, listen_in, relay_in, serve_proxy, serve_relay};
pub use proxy::{
    BuiltinProxy, ClientLists, EgressProxy, KEEPER_ARG, PROXY_PORT, ProxyServer, REFUSED_PATH,
    keeper_main_if_asked, proxy_env, proxy_vars,
};
pub use relay::{
    Inbound, Listed, Relay, SANDBOX_IP, journal_end, journal_since, listen_published,
    loopback_nameservers, relay_available,
};
pub use spawn::{drop_to, spawn_guard};
