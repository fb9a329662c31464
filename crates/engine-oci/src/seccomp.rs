//! Podman's default seccomp profile lets unprivileged code create user namespaces (Docker's
//! does not). Nested user namespaces are outside the wall, so podman containers get the
//! distribution's default profile with one change, made here as a pure JSON transform:
//! `clone` and `unshare` are allowed only without `CLONE_NEWUSER`, and `clone3` (whose flags
//! live in memory seccomp cannot read) fails with ENOSYS so libc falls back to `clone`. This is
//! what Docker's default profile does.

use serde_json::{Value, json};

/// Where podman packages put the default profile, in lookup order.
pub(crate) const DEFAULT_PROFILES: &[&str] =
    &["/etc/containers/seccomp.json", "/usr/share/containers/seccomp.json"];

const CLONE_NEWUSER: u64 = 0x1000_0000;
const ENOSYS: u64 = 38;

/// Pure: the hardened profile, or `Err(reason)` when `default` is not a profile we understand.
pub(crate) fn without_user_namespaces(default: &str) -> Result<String, String> {
    let mut profile: Value = serde_json::from_str(default).map_err(|e| format!("not JSON: {e}"))?;
    let syscalls = profile
        .get_mut("syscalls")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| "no `syscalls` list".to_owned())?;
    const GUARDED: [&str; 3] = ["clone", "clone3", "unshare"];
    for rule in syscalls.iter_mut() {
        if let Some(names) = rule.get_mut("names").and_then(Value::as_array_mut) {
            names.retain(|n| !n.as_str().is_some_and(|n| GUARDED.contains(&n)));
        }
    }
    syscalls.retain(|rule| {
        rule.get("names").and_then(Value::as_array).is_none_or(|names| !names.is_empty())
    });
    for name in ["clone", "unshare"] {
        syscalls.push(json!({
            "names": [name],
            "action": "SCMP_ACT_ALLOW",
            "args": [{"index": 0, "value": CLONE_NEWUSER, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}],
        }));
    }
    syscalls.push(json!({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS}));
    serde_json::to_string_pretty(&profile).map_err(|e| e.to_string())
}
