//! Net on: the outbound-only network of the "holes in the wall" issue, given exactly as the
//! bwrap engine gives it, by the same code ([`engine_bwrap::UserNet`]): pasta joins the
//! sandbox's network namespace from outside while the sandbox waits (the monitor blocks right
//! after its `unshare`, see [`crate::sandbox::spawn`]), the [`sandbox_core::LINK_LOCAL`]
//! ranges get unreachable routes inside, and pasta forwards neither the host's loopback
//! (`--no-map-gw`, `-T none`) nor anything inbound but published ports. The sandbox's abstract
//! unix sockets are its own network namespace's, so the host's are out of reach too.
//!
//! A root caller's network namespace belongs to the host's user namespace (its tree is built
//! as real root, see `sandbox.rs`), so pasta runs as root there (`--runas 0:0`); an
//! unprivileged caller's belongs to the sandbox's user namespace and pasta runs as the caller.

use std::path::Path;

use sandbox_core::PublishedPort;

use crate::error::{Error, Result};
use crate::sandbox::Child;

/// Connects a sandbox spawned with net on (blocked before its setup) and lets it go on.
/// The returned handle ends pasta when dropped: keep it until the sandbox has exited.
pub fn connect(
    child: &mut Child,
    pasta: &Path,
    publish: &[PublishedPort],
) -> Result<engine_bwrap::UserNet> {
    let net = engine_bwrap::UserNet::attach_blocked(pasta, child.pid(), publish, None)
        .map_err(|e| Error::Network(e.to_string()))?;
    child.release()?;
    Ok(net)
}
