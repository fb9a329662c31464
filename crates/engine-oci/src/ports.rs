//! Published ports on docker and podman (`sandbox_core::publish` is the contract): what the
//! daemon bound, read back from the container once it runs (a `0:PORT` gets the daemon's
//! choice, race-free), and its bind failures turned into the one "host port is in use" error.

use std::collections::HashMap;

use bollard::Docker;
use bollard::models::PortBinding;
use bollard::query_parameters::InspectContainerOptions;
use sandbox_core::{Publish, PublishedPort};

use crate::error::api;
use crate::error::{Error, Result};

/// Pure: the host side of each asked port (`sandbox_core::asked_host_ports`: host port 0 for
/// any) in an inspect's `NetworkSettings.Ports`; an asked port the daemon did not report keeps
/// what was asked.
pub(crate) fn bound(
    asked: &[PublishedPort],
    ports: &HashMap<String, Option<Vec<PortBinding>>>,
) -> Vec<PublishedPort> {
    asked
        .iter()
        .map(|want| {
            let bindings = ports.get(&format!("{}/tcp", want.port)).cloned().flatten();
            let host_port = bindings
                .unwrap_or_default()
                .iter()
                .filter(|b| {
                    // Podman leaves the address empty for 0.0.0.0; docker names it.
                    b.host_ip
                        .as_deref()
                        .is_none_or(|ip| ip.is_empty() || ip.parse().ok() == Some(want.addr))
                })
                .find_map(|b| b.host_port.as_deref()?.parse::<u16>().ok().filter(|p| *p != 0));
            PublishedPort { host_port: host_port.unwrap_or(want.host_port), ..want.clone() }
        })
        .collect()
}

/// What container `name` has bound for `asked`, from one inspect.
pub(crate) async fn inspect_bound(
    docker: &Docker,
    engine: &'static str,
    name: &str,
    asked: &[PublishedPort],
) -> Result<Vec<PublishedPort>> {
    let inspect = docker
        .inspect_container(name, None::<InspectContainerOptions>)
        .await
        .map_err(api(engine, &format!("inspecting {name}")))?;
    let ports = inspect.network_settings.and_then(|n| n.ports).unwrap_or_default();
    Ok(bound(asked, &ports))
}

/// The daemon's failure to bind a host port of `publish` (docker's "port is already
/// allocated", podman's "address already in use", at create, attach or start) as
/// `sandbox_core::Error::HostPortInUse`; any other error unchanged.
pub(crate) fn explain(error: Error, publish: &[Publish]) -> Error {
    match &error {
        Error::Api { message, .. } => {
            match sandbox_core::busy_host_port(message, &sandbox_core::asked_host_ports(publish)) {
                Some(busy) => Error::Sandbox(busy),
                None => error,
            }
        }
        _ => error,
    }
}
