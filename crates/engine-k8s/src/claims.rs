//! `--mount pvc:NAME:/path[:ro]`: a user's PersistentVolumeClaim in a run's pod.
//!
//! **Which claims a sandbox may mount:** those named `psbx-data-*` ([`USER_CLAIM_PREFIX`]), made
//! by the user for sandboxes, besides the engine's own `psbx-env-*` environments. A name is
//! what the admission policy (`deploy/policy`) can check: at pod admission it sees the pod, not
//! the claims it names, so a label on the claim could not be enforced there. The CLI refuses
//! other names before anything is sent ([`parse`]) and reads each claim before the pod is made
//! (a missing one is an error, not a pod stuck in `Pending`).
//!
//! Pure: [`parse`] (the flag's spelling) and [`mount`] (the pod's volumes); the engine checks
//! the paths against its workdir ([`check_paths`]).

use k8s_openapi::api::core::v1::{PersistentVolumeClaimVolumeSource, Pod, Volume, VolumeMount};

use crate::Error;

/// The spelling's scheme: `--mount pvc:NAME:/path`.
pub const SCHEME: &str = "pvc:";

/// The name every user claim a sandbox mounts starts with (the admission policy allows these
/// and the engine's `psbx-env-*`).
pub const USER_CLAIM_PREFIX: &str = "psbx-data-";

/// One claim mounted into a run's pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimMount {
    /// The claim's name, in the engine's namespace.
    pub claim: String,
    /// Absolute path in the pod.
    pub path: String,
    /// Mounted read-only (`:ro`); read-write otherwise.
    pub read_only: bool,
}

/// Pure: whether a `--mount` value names a claim rather than a host path.
pub fn is_claim(value: &str) -> bool {
    value.starts_with(SCHEME)
}

const SPELLING: &str = "write `pvc:NAME:/path` or `pvc:NAME:/path:ro`";

fn invalid(value: &str, message: String, hint: String) -> Error {
    Error::ClaimMount { value: value.to_owned(), message, hint }
}

/// Pure: `pvc:NAME:/path[:ro|:rw]`.
pub fn parse(value: &str) -> Result<ClaimMount, Error> {
    let Some(rest) = value.strip_prefix(SCHEME) else {
        return Err(invalid(value, "not a claim mount".to_owned(), SPELLING.to_owned()));
    };
    let (claim, rest) = rest.split_once(':').unwrap_or((rest, ""));
    let (path, read_only) = match rest.rsplit_once(':') {
        Some((path, "ro")) => (path, true),
        Some((path, "rw")) => (path, false),
        Some((_, mode)) => {
            return Err(invalid(
                value,
                format!("unknown mode `{mode}`"),
                format!("{SPELLING} (read-write without a mode, or `:rw`)"),
            ));
        }
        None => (rest, false),
    };
    if claim.is_empty() || path.is_empty() {
        return Err(invalid(
            value,
            "needs a claim name and a path".to_owned(),
            SPELLING.to_owned(),
        ));
    }
    if !crate::config::is_dns_subdomain(claim) {
        return Err(invalid(
            value,
            format!("`{claim}` is not a claim name"),
            "claim names are lower-case DNS names (letters, digits, `-` and `.`)".to_owned(),
        ));
    }
    if !claim.starts_with(USER_CLAIM_PREFIX) {
        return Err(invalid(
            value,
            format!("claim `{claim}` is not one meant for sandboxes"),
            format!(
                "sandboxes mount only claims named `{USER_CLAIM_PREFIX}*` (the admission policy in `deploy/policy` allows no others); make one for the data, e.g. `{USER_CLAIM_PREFIX}{}`",
                claim.trim_start_matches("psbx-env-")
            ),
        ));
    }
    let clean = path.starts_with('/')
        && path != "/"
        && !path.split('/').any(|part| part == ".." || part == ".")
        && !path.contains("//");
    if !clean {
        return Err(invalid(
            value,
            format!("`{path}` is not a clean absolute path in the pod"),
            "give an absolute path without `.` or `..`, other than `/`, e.g. `/data`".to_owned(),
        ));
    }
    Ok(ClaimMount {
        claim: claim.to_owned(),
        path: path.trim_end_matches('/').to_owned(),
        read_only,
    })
}

/// Pure: `a` is `b` or under it.
fn within(a: &str, b: &str) -> bool {
    a == b || a.strip_prefix(b).is_some_and(|rest| rest.starts_with('/'))
}

/// Pure: refuses a claim mounted over or under the workspace (its files would be synced back
/// as the script's), the environment, the pod's `/tmp` and home, or another claim.
pub fn check_paths(mounts: &[ClaimMount], workdir: &str) -> Result<(), Error> {
    let reserved = [
        workdir,
        crate::environment::ENV_DIR,
        "/tmp",
        sandbox_core::SANDBOX_HOME,
        "/opt/python-sandbox",
    ];
    for (i, m) in mounts.iter().enumerate() {
        let value = format!("{SCHEME}{}:{}", m.claim, m.path);
        if let Some(taken) = reserved.iter().find(|r| within(&m.path, r) || within(r, &m.path)) {
            return Err(invalid(
                &value,
                format!("`{}` overlaps `{taken}`, which the sandbox uses itself", m.path),
                "mount the claim elsewhere, e.g. `/data`".to_owned(),
            ));
        }
        if let Some(other) =
            mounts[..i].iter().find(|o| within(&m.path, &o.path) || within(&o.path, &m.path))
        {
            return Err(invalid(
                &value,
                format!("`{}` overlaps the mount of `{}` at `{}`", m.path, other.claim, other.path),
                "give each claim a path of its own".to_owned(),
            ));
        }
    }
    Ok(())
}

/// Pure: the claims as the pod's volumes (`claim-0`, `claim-1`, ...) mounted into every
/// container, read-only both in the volume and the mount when asked.
pub fn mount(pod: &mut Pod, mounts: &[ClaimMount]) {
    let Some(spec) = pod.spec.as_mut() else { return };
    for (i, m) in mounts.iter().enumerate() {
        let name = format!("claim-{i}");
        spec.volumes.get_or_insert_with(Vec::new).push(Volume {
            name: name.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: m.claim.clone(),
                read_only: Some(m.read_only),
            }),
            ..Volume::default()
        });
        for container in &mut spec.containers {
            container.volume_mounts.get_or_insert_with(Vec::new).push(VolumeMount {
                name: name.clone(),
                mount_path: m.path.clone(),
                read_only: Some(m.read_only),
                ..VolumeMount::default()
            });
        }
    }
}

#[cfg(test)]
mod tests;
