//! `net` as a list of hosts on a cluster: a NetworkPolicy names addresses, never host names,
//! so a sandbox with a list reaches one thing only, the cluster's egress proxy, and the proxy
//! holds each pod to its own list by name (TLS SNI, HTTP `Host`, the name of every tunnel:
//! `sandbox_net::EgressProxy`, the same checks as the local engines' proxy).
//!
//! * **Deployed once per cluster** (`deploy/egress/`): this crate's binary in its proxy mode
//!   (`python-sandbox egress-proxy`, [`serve`]) as a Deployment and a Service in the namespace
//!   [`NAMESPACE`], which the sandbox namespace's admission policy does not cover (the proxy
//!   needs a service account token to read pods).
//! * **Which list.** The proxy watches the sandbox namespace's pods and holds each pod's
//!   address to the list in its policy annotation ([`crate::session::POLICY_ANNOTATION`],
//!   written by the engine when it makes the pod). A sandbox has no token and cannot change
//!   it; an address no pod with a list holds is refused everything.
//! * **The pod.** Its NetworkPolicy allows egress to the proxy's pods on [`PORT`] and nothing
//!   else (no DNS: a name is resolved by the proxy, never in the pod), and its environment
//!   names the proxy by its Service's address ([`pod_env`]), so clients that honour
//!   `HTTPS_PROXY` (uv, pip, urllib, requests, curl) go through it.
//! * **Where it cannot hold.** On a cluster that does not enforce NetworkPolicy the pod could
//!   go around the proxy: a list is refused there, as `net = "off"` is ([`crate::netoff`]).
//!   Without the proxy deployed, a list is refused with the command that deploys it.

use std::collections::BTreeMap;
use std::net::IpAddr;

use futures_util::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};

use crate::error::{Error, Result};

/// The namespace the proxy is deployed in (`deploy/egress/00-namespace.yaml`).
pub const NAMESPACE: &str = "python-sandbox-egress";
/// The proxy's Service, and the `app.kubernetes.io/name` of its pods.
pub const SERVICE: &str = "python-sandbox-egress";
/// The proxy's port (squid's, which clients and users recognise).
pub const PORT: u16 = sandbox_net::PROXY_PORT;
/// The label that selects the proxy's pods.
pub const APP_LABEL: &str = "app.kubernetes.io/name";

/// The command that deploys the proxy, for hints.
pub const DEPLOY_HINT: &str =
    "kubectl apply -f deploy/egress/ (the proxy's image: `cargo xtask image --egress`)";

/// Pure: the environment that points a pod's clients at the proxy at `proxy` (its Service's
/// address: the pod has no DNS to resolve the Service's name).
pub fn pod_env(proxy: IpAddr) -> Vec<(String, String)> {
    let host = match proxy {
        IpAddr::V6(v6) => format!("[{v6}]"),
        v4 => v4.to_string(),
    };
    sandbox_net::proxy_vars(&format!("http://{host}:{PORT}"))
}

/// Run in a pod with a list once its script is done: asks the proxy at `argv[1]:argv[2]`
/// what it refused this pod ([`sandbox_net::REFUSED_PATH`]) and prints the JSON. The image's
/// own interpreter, isolated (`-I`): nothing the script left on a path is read.
pub const REFUSED_QUERY: &str = r#"
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), 5)
s.settimeout(5)
s.sendall(('GET %s HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n' % sys.argv[3]).encode())
data = b''
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
head, _, body = data.partition(b'\r\n\r\n')
if not head.startswith(b'HTTP/1.1 200 '):
    sys.exit(head.split(b'\r\n')[0].decode(errors='replace'))
sys.stdout.write(body.decode())
"#;

/// Pure: the argv of [`REFUSED_QUERY`] for the proxy at `proxy`.
pub fn refused_query(proxy: IpAddr) -> Vec<String> {
    [
        "/usr/bin/python3".to_owned(),
        "-I".to_owned(),
        "-c".to_owned(),
        REFUSED_QUERY.to_owned(),
        proxy.to_string(),
        PORT.to_string(),
        sandbox_net::REFUSED_PATH.to_owned(),
    ]
    .to_vec()
}

/// Pure: the list a pod is held to, read from its policy annotation; `None` for a pod with
/// no list (net on or off), one being deleted, one not running yet, or one whose annotation
/// does not parse (refused everything rather than guessed).
pub fn pod_list(pod: &Pod) -> Option<(IpAddr, sandbox_core::Allow)> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref()?;
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return None;
    }
    let ip: IpAddr = status.pod_ip.as_deref()?.parse().ok()?;
    let annotations = pod.metadata.annotations.as_ref()?;
    let policy = annotations.get(crate::session::POLICY_ANNOTATION)?;
    let policy: sandbox_core::SessionPolicy = serde_json::from_str(policy).ok()?;
    Some((ip, policy.allow?))
}

/// The lists of the pods in view, by pod name (a pod's address is known once it runs), and
/// how many of each pod's refusals were logged.
#[derive(Debug, Default)]
struct Pods {
    lists: BTreeMap<String, Held>,
}

#[derive(Debug, PartialEq)]
struct Held {
    ip: IpAddr,
    allow: sandbox_core::Allow,
    logged: usize,
}

impl Pods {
    /// Takes `pod`'s state; `lists` follows: a pod that holds an address with a new list gets
    /// it, an address no pod holds any more is forgotten.
    fn update(&mut self, pod: &Pod, lists: &sandbox_net::ClientLists) {
        let Some(name) = pod.metadata.name.clone() else { return };
        let now = pod_list(pod);
        self.report(&name, lists);
        let was = self.lists.remove(&name);
        if let Some((ip, allow)) = now.clone() {
            let same = was.as_ref().is_some_and(|w| w.ip == ip && w.allow == allow);
            let logged = if same { was.as_ref().map_or(0, |w| w.logged) } else { 0 };
            if !same {
                lists.set(ip, sandbox_net::Listed::new(allow.clone()));
                log(&format!("pod {name} at {ip} holds to {allow}"));
            }
            self.lists.insert(name.clone(), Held { ip, allow, logged });
        }
        if let Some(was) = was
            && now.as_ref().is_none_or(|(ip, _)| *ip != was.ip)
        {
            self.release(was.ip, lists);
            log(&format!("pod {name} at {} no longer served", was.ip));
        }
    }

    fn remove(&mut self, name: &str, lists: &sandbox_net::ClientLists) {
        self.report(name, lists);
        if let Some(was) = self.lists.remove(name) {
            self.release(was.ip, lists);
            log(&format!("pod {name} at {} gone", was.ip));
        }
    }

    /// Forgets `ip` unless another pod holds it now (an address taken again before the old
    /// pod's deletion was seen).
    fn release(&self, ip: IpAddr, lists: &sandbox_net::ClientLists) {
        if !self.lists.values().any(|held| held.ip == ip) {
            lists.remove(ip);
        }
    }

    /// After a fresh list of every pod: forgets what it did not show.
    fn keep_only(&mut self, names: &[String], lists: &sandbox_net::ClientLists) {
        let gone: Vec<String> = self.lists.keys().filter(|n| !names.contains(n)).cloned().collect();
        for name in gone {
            self.remove(&name, lists);
        }
    }

    /// Logs what `name` was refused since the last time (before its list goes, and every
    /// second).
    fn report(&mut self, name: &str, lists: &sandbox_net::ClientLists) {
        let Some(held) = self.lists.get_mut(name) else { return };
        let Some(listed) = lists.get(held.ip) else { return };
        let refused = listed.refused();
        for refusal in refused.iter().skip(held.logged) {
            log(&format!("pod {name} refused: {refusal}"));
        }
        held.logged = refused.len();
    }

    fn report_all(&mut self, lists: &sandbox_net::ClientLists) {
        let names: Vec<String> = self.lists.keys().cloned().collect();
        for name in names {
            self.report(&name, lists);
        }
    }
}

#[allow(
    clippy::print_stdout,
    reason = "the proxy's log is its standard output, read by kubectl logs"
)]
fn log(line: &str) {
    println!("{line}");
}

/// `python-sandbox egress-proxy`: serves the proxy on `listen` for the sandboxes of
/// `namespace`, with the in-cluster credentials (or `KUBECONFIG`'s), until the process is
/// stopped. Refusals are logged with the pod they came from.
pub fn serve(namespace: &str, listen: std::net::SocketAddr) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| Error::Host {
            what: "start the proxy's runtime".to_owned(),
            message: e.to_string(),
        })?;
    runtime.block_on(async {
        let client = kube::Client::try_default().await.map_err(|e| Error::Host {
            what: "reach the cluster (in-cluster credentials or KUBECONFIG)".to_owned(),
            message: e.to_string(),
        })?;
        let listener = std::net::TcpListener::bind(listen).map_err(|e| Error::Host {
            what: format!("listen on {listen}"),
            message: e.to_string(),
        })?;
        // Private ranges are reached only where a pod's list names them and its caller opened
        // them: the cluster's own addresses are private on every cluster this serves.
        let proxy =
            sandbox_net::EgressProxy::serve(listener, sandbox_core::Lan::Refused).map_err(|e| {
                Error::Host { what: "start the egress proxy".to_owned(), message: e.to_string() }
            })?;
        log(&format!("serving the sandboxes of namespace {namespace} on {listen}"));
        let pods: Api<Pod> = Api::namespaced(client, namespace);
        let known = std::sync::Arc::new(std::sync::Mutex::new(Pods::default()));
        let reporter = {
            let (known, lists) = (std::sync::Arc::clone(&known), proxy.lists().clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    lock(&known).report_all(&lists);
                }
            })
        };
        // As a container's pid 1 it gets no default action for SIGTERM: without this, every
        // rollout and deletion would wait out the grace period for the kill.
        let signal = |kind| {
            tokio::signal::unix::signal(kind).map_err(|e| Error::Host {
                what: "handle the stop signals".to_owned(),
                message: e.to_string(),
            })
        };
        let mut term = signal(tokio::signal::unix::SignalKind::terminate())?;
        let mut int = signal(tokio::signal::unix::SignalKind::interrupt())?;
        loop {
            let next = tokio::select! {
                followed = follow(&pods, &known, proxy.lists()) => Next::Followed(followed),
                _ = term.recv() => Next::Stop("SIGTERM"),
                _ = int.recv() => Next::Stop("SIGINT"),
            };
            match next {
                Next::Stop(signal) => {
                    lock(&known).report_all(proxy.lists());
                    log(&format!("stopping on {signal}"));
                    return Ok(());
                }
                Next::Followed(Ok(())) => {}
                Next::Followed(Err(e)) => {
                    log(&format!("watching pods: {e}; listing again in 2 s"));
                    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                }
            }
            if reporter.is_finished() {
                return Err(Error::Host {
                    what: "report the proxy's refusals".to_owned(),
                    message: "the reporter stopped".to_owned(),
                });
            }
        }
    })
}

/// What ended a wait of [`serve`]'s loop.
enum Next {
    /// A watch ended (its timeout), or failed.
    Followed(std::result::Result<(), String>),
    /// A stop signal.
    Stop(&'static str),
}

fn lock(known: &std::sync::Mutex<Pods>) -> std::sync::MutexGuard<'_, Pods> {
    known.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Lists the namespace's pods, then follows them until the watch ends (the next call lists
/// again, so nothing missed between two watches stays).
async fn follow(
    pods: &Api<Pod>,
    known: &std::sync::Mutex<Pods>,
    lists: &sandbox_net::ClientLists,
) -> std::result::Result<(), String> {
    let selector = format!("{}={}", reaper::labels::MANAGED_BY, reaper::labels::MANAGED_BY_VALUE);
    let listed =
        pods.list(&ListParams::default().labels(&selector)).await.map_err(|e| e.to_string())?;
    {
        let mut known = lock(known);
        let names: Vec<String> =
            listed.items.iter().filter_map(|p| p.metadata.name.clone()).collect();
        for pod in &listed.items {
            known.update(pod, lists);
        }
        known.keep_only(&names, lists);
    }
    let version = listed.metadata.resource_version.unwrap_or_default();
    let params = WatchParams::default().labels(&selector).timeout(290);
    let mut events = pods.watch(&params, &version).await.map_err(|e| e.to_string())?.boxed();
    while let Some(event) = events.next().await {
        match event.map_err(|e| e.to_string())? {
            WatchEvent::Added(pod) | WatchEvent::Modified(pod) => lock(known).update(&pod, lists),
            WatchEvent::Deleted(pod) => {
                if let Some(name) = &pod.metadata.name {
                    lock(known).remove(name, lists);
                }
            }
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(status) => return Err(status.message),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
