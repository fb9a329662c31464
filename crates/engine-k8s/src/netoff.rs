//! `net = "off"` on a cluster is a NetworkPolicy that denies the pod all egress. A cluster
//! whose CNI does not enforce NetworkPolicy (a bare bridge, flannel without a policy
//! controller) accepts the object and lets every packet through: the run would silently get
//! the network it asked to be without. So before the first net-off script on a cluster and
//! namespace, the engine checks from inside that pod, under that policy, whether the one
//! address every pod knows, the apiserver's Service (`KUBERNETES_SERVICE_HOST`), is still
//! reachable: reached means the policy is not enforced, and the run is refused. The verdict is
//! kept on the host per cluster and namespace for [`FRESH_FOR`] and checked again after.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a verdict holds before the next net-off sandbox checks again.
pub const FRESH_FOR: Duration = Duration::from_secs(24 * 3600);

/// The check, run in the pod. Two addresses every pod has: the apiserver's Service
/// (`KUBERNETES_SERVICE_HOST`, where the environment still has it) by TCP, and the nameserver
/// of `/etc/resolv.conf` by a UDP query (any answer counts, even an error: the packet went
/// through). Exit 0 (`reached`) when either answers within 3 s, 1 (`blocked`) when none does,
/// 2 (`unknown`) when the pod has neither address.
pub const PROBE: &str = r#"
import os, socket, sys
targets = []
host = os.environ.get('KUBERNETES_SERVICE_HOST')
if host:
    targets.append(('tcp', host, int(os.environ.get('KUBERNETES_SERVICE_PORT', '443'))))
try:
    for line in open('/etc/resolv.conf'):
        words = line.split()
        if len(words) >= 2 and words[0] == 'nameserver':
            targets.append(('udp', words[1], 53))
except OSError:
    pass
if not targets:
    print('unknown'); sys.exit(2)
query = bytes.fromhex('ab1201000001000000000000') + b'\x09localhost\x00\x00\x01\x00\x01'
for kind, addr, port in targets:
    try:
        family = socket.AF_INET6 if ':' in addr else socket.AF_INET
        if kind == 'tcp':
            socket.create_connection((addr, port), 3).close()
        else:
            s = socket.socket(family, socket.SOCK_DGRAM)
            s.settimeout(3)
            s.sendto(query, (addr, port))
            s.recv(512)
        print('reached', kind, addr, port); sys.exit(0)
    except OSError as e:
        print('blocked', kind, addr, port, type(e).__name__)
sys.exit(1)
"#;

/// What the check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The deny-all policy held: net off is given.
    Enforced,
    /// The pod reached the apiserver through the policy: net off cannot be given here.
    Ignored,
}

/// Pure: the verdict of the probe's exit code; `None` when it could not tell.
pub fn verdict(exit_code: i32) -> Option<Verdict> {
    match exit_code {
        0 => Some(Verdict::Ignored),
        1 => Some(Verdict::Enforced),
        _ => None,
    }
}

/// Pure: the record's file name for a cluster (its apiserver URL) and namespace.
pub fn record_name(cluster: &str, namespace: &str) -> String {
    format!("netpolicy-{}", place_key(cluster, namespace))
}

/// Pure: a short digest naming a cluster (its apiserver URL) and namespace in file names.
pub fn place_key(cluster: &str, namespace: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(format!("{cluster}\n{namespace}").as_bytes());
    digest.iter().take(12).map(|b| format!("{b:02x}")).collect()
}

/// Pure: the record's text.
pub fn render(verdict: Verdict, at: SystemTime) -> String {
    let secs = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let word = match verdict {
        Verdict::Enforced => "enforced",
        Verdict::Ignored => "ignored",
    };
    format!("{word} {secs}\n")
}

/// Pure: a record's verdict while it is fresh at `now`; `None` when stale or unreadable.
pub fn parse(text: &str, now: SystemTime) -> Option<Verdict> {
    let (word, secs) = text.trim().split_once(' ')?;
    let at = UNIX_EPOCH + Duration::from_secs(secs.parse().ok()?);
    let age = now.duration_since(at).ok()?;
    if age > FRESH_FOR {
        return None;
    }
    match word {
        "enforced" => Some(Verdict::Enforced),
        "ignored" => Some(Verdict::Ignored),
        _ => None,
    }
}

/// The refusal of a net-off sandbox on a cluster that does not enforce NetworkPolicy.
pub fn refusal(namespace: &str) -> crate::Error {
    refusal_of("`net = \"off\"`", "deny-all egress policy", namespace)
}

/// The refusal of a sandbox with a list of hosts on a cluster that does not enforce
/// NetworkPolicy: the pod could go around the egress proxy.
pub fn list_refusal(namespace: &str) -> crate::Error {
    refusal_of(
        "a list of hosts (`--net HOST,...`)",
        "policy that allows only the egress proxy",
        namespace,
    )
}

fn refusal_of(asked: &str, policy: &str, namespace: &str) -> crate::Error {
    sandbox_core::Error::Unsupported {
        what: format!(
            "{asked} (the cluster does not enforce NetworkPolicy in namespace `{namespace}`: a pod under a {policy} still reached the cluster's nameserver or apiserver)"
        ),
        by: "the k8s engine".to_owned(),
        hint: "nothing was run; run with the network on explicitly (`--net on`), on another engine (`--engine native`), or on a cluster whose CNI enforces NetworkPolicy (Calico, Cilium, a policy controller beside flannel)".to_owned(),
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_holds_for_a_day_and_says_what_the_probe_saw() {
        let at = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let text = render(Verdict::Ignored, at);
        assert_eq!(text, "ignored 1000000\n");
        assert_eq!(parse(&text, at + Duration::from_secs(60)), Some(Verdict::Ignored));
        assert_eq!(parse(&render(Verdict::Enforced, at), at), Some(Verdict::Enforced));
        assert_eq!(parse(&text, at + FRESH_FOR + Duration::from_secs(1)), None);
        assert_eq!(parse("enforced soon", at), None);
        assert_eq!(parse("", at), None);
        assert_eq!(verdict(0), Some(Verdict::Ignored));
        assert_eq!(verdict(1), Some(Verdict::Enforced));
        assert_eq!(verdict(2), None);
        assert_ne!(record_name("https://a:6443", "ns"), record_name("https://b:6443", "ns"));
        assert_ne!(record_name("https://a:6443", "ns"), record_name("https://a:6443", "other"));
    }
}
