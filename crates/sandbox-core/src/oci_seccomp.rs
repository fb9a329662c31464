//! The one seccomp wall (`sandbox_core::WALL`) as OCI/Docker seccomp JSON, so docker and podman
//! containers refuse exactly what the bwrap engine refuses. Pure: profile text in, profile text
//! out; engine-oci reads the base file and hands the result to docker or podman, engine-k8s
//! names the node's copy of [`wall_profile`] (installed by `deploy/seccomp/`) as a `Localhost`
//! profile.
//!
//! **Translation.** The wall's rules are first-match per syscall; a JSON profile is a set of
//! entries (one comparison list each, ANDed) that libseccomp merges into a tree. Each
//! [`ArgCheck`] becomes `SCMP_CMP_MASKED_EQ` comparisons on the argument's low 32 bits (masks
//! never exceed `0xffffffff`, so the kernel-ignored upper half cannot dodge a rule): `AnyBit`
//! is one entry per bit (`value=bit, valueTwo=bit`), `Equals` is `mask=0xffffffff`, and a rule
//! with two checks is their cross product. An entry holds at most one comparison per argument
//! because runc and crun turn several comparisons of one argument into alternatives.
//!
//! **Why complements.** Verified on real containers (docker 20.10 and podman 4.3 with runc
//! 1.1.5, libseccomp 2.5.4): a conditional `ERRNO` entry beside the base profile's
//! unconditional `ALLOW` of the same syscall does *not* deny anything (`chmod 4755` succeeded).
//! So every syscall the wall names is removed from every base entry, and the wall's entries
//! cover its whole argument space with disjoint regions: each rule gets the calls it matches
//! and no earlier rule did, and what no rule matches gets an explicit `ALLOW` (for
//! `chmod`: `mode & 06000 == 0`; for `ioctl`: every request but the two, as 34 masked
//! prefixes). Entries of different actions never overlap, so libseccomp's merge order cannot
//! matter; the tests check every rule's outcome against the wall's first-match semantics.
//!
//! **Bases.** Podman: its distribution's default profile (containers-common, deny by default).
//! Docker: its default profile is compiled into dockerd and not on disk, so it gets the same
//! containers-common file when present (it is Docker's default profile, kept current with the
//! host's kernel and libseccomp by the distribution), else [`VENDORED_DEFAULT`], a copy of that
//! file from containers-common 0.50.1 (Apache-2.0, github.com/containers/common,
//! `pkg/seccomp/seccomp.json`). Deny by default, not a permissive base plus a few denials:
//! verified on docker 20.10 with libseccomp 2.5.4, a syscall newer than the host's libseccomp
//! cannot be named in a profile, so under allow-by-default `setxattrat` (463) reached the
//! kernel past the wall, while deny-by-default returns ENOSYS for it. The cost is ENOSYS for
//! syscalls newer than the copy, which libc and Python treat as "not on this kernel".

use crate::{ArgCheck, SeccompAction, SeccompRule, WALL};
use serde_json::{Value, json};

/// Where podman packages put the default profile, in lookup order.
pub const DEFAULT_PROFILES: &[&str] =
    &["/etc/containers/seccomp.json", "/usr/share/containers/seccomp.json"];

const LOW: u32 = 0xffff_ffff;

/// Docker's base where containers-common is not installed (see the header).
pub const VENDORED_DEFAULT: &str = include_str!("seccomp-containers-common-0.50.1.json");

/// `(args[arg] & mask) == value`, on the low 32 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cmp {
    arg: u8,
    mask: u32,
    value: u32,
}

/// A conjunction of comparisons, at most one per argument, sorted by argument.
type Term = Vec<Cmp>;

/// `a AND b` as one term, or `None` when no call satisfies both.
fn and(a: &Term, b: &Term) -> Option<Term> {
    let mut out = a.clone();
    for cb in b {
        match out.iter_mut().find(|ca| ca.arg == cb.arg) {
            Some(ca) => {
                let common = ca.mask & cb.mask;
                if ca.value & common != cb.value & common {
                    return None;
                }
                ca.mask |= cb.mask;
                ca.value |= cb.value;
            }
            None => out.push(*cb),
        }
    }
    out.sort_by_key(|c| c.arg);
    Some(out)
}

/// Whether every call satisfying `a` satisfies `b`.
fn implies(a: &Term, b: &Term) -> bool {
    b.iter().all(|cb| {
        a.iter().any(|ca| {
            ca.arg == cb.arg && ca.mask & cb.mask == cb.mask && ca.value & cb.mask == cb.value
        })
    })
}

/// The union `a OR b` of two unions, without terms another one already covers.
fn union(mut a: Vec<Term>, b: Vec<Term>) -> Vec<Term> {
    for t in b {
        if !a.iter().any(|u| implies(&t, u)) {
            a.retain(|u| !implies(u, &t));
            a.push(t);
        }
    }
    a
}

/// `(OR a) AND (OR b)`, distributed.
fn and_all(a: &[Term], b: &[Term]) -> Vec<Term> {
    let mut out = Vec::new();
    for x in a {
        for y in b {
            if let Some(t) = and(x, y) {
                out = union(out, vec![t]);
            }
        }
    }
    out
}

/// The calls a check matches, as a union of terms.
fn matches(check: &ArgCheck) -> Vec<Term> {
    match *check {
        ArgCheck::AnyBit { arg, mask } => (0..32)
            .map(|b| 1u32 << b)
            .filter(|bit| mask & bit != 0)
            .map(|bit| vec![Cmp { arg, mask: bit, value: bit }])
            .collect(),
        ArgCheck::Equals { arg, value } => vec![vec![Cmp { arg, mask: LOW, value }]],
    }
}

/// The calls a check does not match, as a union of terms.
fn misses(check: &ArgCheck) -> Vec<Term> {
    match *check {
        ArgCheck::AnyBit { arg, mask } => vec![vec![Cmp { arg, mask, value: 0 }]],
        // Not `value`: the first differing bit, counted from the top, with the bits above it
        // equal. One term per bit, pairwise disjoint.
        ArgCheck::Equals { arg, value } => (0..32)
            .rev()
            .map(|b| {
                let mask = LOW << b;
                vec![Cmp { arg, mask, value: (value ^ (1 << b)) & mask }]
            })
            .collect(),
    }
}

/// The calls a rule matches (all checks hold).
fn rule_matches(rule: &SeccompRule) -> Vec<Term> {
    rule.checks.iter().fold(vec![Vec::new()], |acc, c| and_all(&acc, &matches(c)))
}

/// The calls a rule does not match: the first failing check, the ones before it holding.
fn rule_misses(rule: &SeccompRule) -> Vec<Term> {
    let mut out = Vec::new();
    let mut before: Vec<Term> = vec![Vec::new()];
    for check in rule.checks {
        out = union(out, and_all(&before, &misses(check)));
        before = and_all(&before, &matches(check));
    }
    out
}

/// Pure: the regions of one syscall's rules, in the order given (first match decides), then
/// what none matched as `Allow`. Regions of different entries are disjoint.
fn regions<'r>(rules: impl Iterator<Item = &'r SeccompRule>) -> Vec<(Vec<Term>, SeccompAction)> {
    let mut out = Vec::new();
    let mut rest: Vec<Term> = vec![Vec::new()];
    for rule in rules {
        let hit = and_all(&rest, &rule_matches(rule));
        if !hit.is_empty() {
            out.push((hit, rule.action));
        }
        rest = and_all(&rest, &rule_misses(rule));
        if rest.is_empty() {
            return out;
        }
    }
    out.push((rest, SeccompAction::Allow));
    out
}

fn entry(syscall: &str, term: &Term, action: SeccompAction) -> Value {
    let args: Vec<Value> = term
        .iter()
        .map(|c| {
            json!({"index": c.arg, "value": c.mask, "valueTwo": c.value, "op": "SCMP_CMP_MASKED_EQ"})
        })
        .collect();
    match action {
        SeccompAction::Allow => {
            json!({"names": [syscall], "action": "SCMP_ACT_ALLOW", "args": args})
        }
        SeccompAction::Errno(errno) => json!({
            "names": [syscall], "action": "SCMP_ACT_ERRNO", "errnoRet": errno, "args": args
        }),
        SeccompAction::KillProcess => {
            json!({"names": [syscall], "action": "SCMP_ACT_KILL_PROCESS", "args": args})
        }
    }
}

/// Pure: `rules` as profile entries, syscall by syscall in first-appearance order.
pub fn entries(rules: &[SeccompRule]) -> Vec<Value> {
    let mut seen: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for first in rules {
        if seen.contains(&first.syscall) {
            continue;
        }
        seen.push(first.syscall);
        let same = rules.iter().filter(|r| r.syscall == first.syscall);
        for (terms, action) in regions(same) {
            out.extend(terms.iter().map(|t| entry(first.syscall, t, action)));
        }
    }
    out
}

/// Pure: `base` with `rules` in charge of every syscall they name: those names leave every
/// base entry (an entry left without names goes), then the rules' entries follow. `Err(reason)`
/// when `base` is not a profile we understand.
pub fn with_rules(base: &str, rules: &[SeccompRule]) -> Result<String, String> {
    let mut profile: Value = serde_json::from_str(base).map_err(|e| format!("not JSON: {e}"))?;
    let syscalls = profile
        .get_mut("syscalls")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| "no `syscalls` list".to_owned())?;
    let ours = |n: &Value| n.as_str().is_some_and(|n| rules.iter().any(|r| r.syscall == n));
    for rule in syscalls.iter_mut() {
        if let Some(names) = rule.get_mut("names").and_then(Value::as_array_mut) {
            names.retain(|n| !ours(n));
        }
    }
    syscalls.retain(|rule| {
        // The old single-`name` format too: such an entry for one of ours would still allow it.
        rule.get("names").and_then(Value::as_array).is_none_or(|names| !names.is_empty())
            && rule.get("name").is_none_or(|n| !ours(n))
    });
    syscalls.extend(entries(rules));
    native_abi_only(&mut profile);
    serde_json::to_string_pretty(&profile).map_err(|e| e.to_string())
}

/// The 32-bit and x32 ABIs a 64-bit architecture's process can still call into (`int 0x80` on
/// x86-64, bit 30 of the number for x32; AArch32 beside AArch64).
const COMPAT_ABIS: [&str; 3] = ["SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_ARM"];

/// Pure: the profile filters the daemon's own architecture alone. A base lists the compat ABIs
/// beside each (`archMap`'s `subArchitectures`), and the runtime applies every rule, by name,
/// to each: i386 and x32 calls reached the kernel, by another table the wall was never checked
/// against. Without them the runtime's libseccomp kills the calling thread with `SIGSYS` on
/// any call of another ABI, as the wall itself kills the process elsewhere. Which architecture
/// is native stays the daemon's to pick (it may run on another machine): every `archMap`
/// entry is kept, without its compat ABIs.
fn native_abi_only(profile: &mut Value) {
    if let Some(map) = profile.get_mut("archMap").and_then(Value::as_array_mut) {
        for entry in map {
            if let Some(sub) = entry.get_mut("subArchitectures") {
                *sub = json!([]);
            }
        }
    }
    if let Some(list) = profile.get_mut("architectures").and_then(Value::as_array_mut) {
        list.retain(|arch| arch.as_str().is_none_or(|arch| !COMPAT_ABIS.contains(&arch)));
    }
}

/// Pure: the wall on top of `base`.
pub fn with_wall(base: &str) -> Result<String, String> {
    with_rules(base, WALL)
}

/// The wall as a whole profile of its own, for a node's runtime ([`with_wall`] on
/// [`VENDORED_DEFAULT`], deny by default): what `deploy/seccomp/` installs on each node.
pub fn wall_profile() -> String {
    with_wall(VENDORED_DEFAULT).expect("the vendored base profile is valid")
}

/// Where a pod names [`wall_profile`] (`localhostProfile`, below the kubelet's seccomp
/// directory): content-addressed, so a node with another version of the wall has no file of
/// that name and the pod fails to start rather than run under a different wall.
pub fn wall_profile_name() -> String {
    use sha2::Digest as _;
    // Made once per process: every pod spec names it.
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        let digest = sha2::Sha256::digest(wall_profile().as_bytes());
        let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
        format!("python-sandbox/wall-{hex}.json")
    })
    .clone()
}
