//! Keeping a root caller's workspace writable without running as uid 0 in the container.
//!
//! **Decision.** A non-root caller's container runs as the caller's uid:gid, so files land
//! owned by the caller with no help. A root caller's container runs as nobody (65534:65534),
//! never as 0: uid 0 in a container is host root as far as every bind mount is concerned. To
//! let nobody write, the engine adds one POSIX ACL entry `user:65534:rwx` (plus the mask) to
//! the workspace and each read-write mount directory, once, and leaves it there (removing it
//! would break concurrent runs in the same workspace; it grants nothing to anyone but nobody).
//! After the run, entries the sandbox created (owned by 65534, not followed through symlinks)
//! are handed back to root, so files land owned by the caller as with bwrap.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::{Error, Result};
use crate::host::NOBODY;

const ACL_XATTR: &str = "system.posix_acl_access";
const ACL_VERSION: u32 = 2;
const ACL_USER_OBJ: u16 = 0x01;
const ACL_USER: u16 = 0x02;
const ACL_GROUP_OBJ: u16 = 0x04;
const ACL_MASK: u16 = 0x10;
const ACL_OTHER: u16 = 0x20;
const ACL_UNDEFINED_ID: u32 = u32::MAX;

/// Pure: the access ACL for a directory with `mode` plus a rwx entry for `uid`, or `None` if
/// `existing` (an xattr value) already grants it. An existing ACL with other named entries is
/// extended, not replaced.
pub(crate) fn acl_with_user(mode: u32, existing: Option<&[u8]>, uid: u32) -> Option<Vec<u8>> {
    let mut entries: Vec<(u16, u16, u32)> = match existing {
        Some(bytes) if bytes.len() >= 4 => bytes[4..]
            .chunks_exact(8)
            .map(|c| {
                let tag = u16::from_le_bytes([c[0], c[1]]);
                let perm = u16::from_le_bytes([c[2], c[3]]);
                let id = u32::from_le_bytes([c[4], c[5], c[6], c[7]]);
                (tag, perm, id)
            })
            .collect(),
        _ => vec![
            (ACL_USER_OBJ, ((mode >> 6) & 7) as u16, ACL_UNDEFINED_ID),
            (ACL_GROUP_OBJ, ((mode >> 3) & 7) as u16, ACL_UNDEFINED_ID),
            (ACL_OTHER, (mode & 7) as u16, ACL_UNDEFINED_ID),
        ],
    };
    let has_user = entries.iter().any(|&(t, p, id)| t == ACL_USER && id == uid && p & 7 == 7);
    let mask_ok = entries.iter().any(|&(t, p, _)| t == ACL_MASK && p & 7 == 7);
    if has_user && mask_ok {
        return None;
    }
    entries.retain(|&(t, _, id)| !(t == ACL_USER && id == uid) && t != ACL_MASK);
    entries.push((ACL_USER, 7, uid));
    // The mask bounds every named entry and the owning group; it is what `ls -l` shows as the
    // group bits, so keep at least the group's own bits in it.
    entries.push((ACL_MASK, 7, ACL_UNDEFINED_ID));
    entries.sort_by_key(|&(t, _, id)| (t, id));
    let mut out = ACL_VERSION.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    Some(out)
}

/// Grants nobody write access to `dir` (a directory owned by root) if it lacks it.
pub(crate) fn grant_nobody(dir: &Path) -> Result<()> {
    let meta =
        std::fs::metadata(dir).map_err(Error::io(format!("inspecting {}", dir.display())))?;
    if !meta.is_dir() {
        return Ok(());
    }
    let mut buf = vec![0u8; 1024];
    let existing = match rustix::fs::getxattr(dir, ACL_XATTR, &mut buf) {
        Ok(n) => Some(buf[..n].to_vec()),
        Err(_) => None,
    };
    if let Some(acl) = acl_with_user(meta.mode(), existing.as_deref(), NOBODY) {
        rustix::fs::setxattr(dir, ACL_XATTR, &acl, rustix::fs::XattrFlags::empty()).map_err(
            |e| Error::Io {
                context: format!(
                    "granting the sandbox user (65534) write access to {} with a POSIX ACL \
                     (needed because you run as root)",
                    dir.display()
                ),
                source: e.into(),
            },
        )?;
    }
    Ok(())
}

/// Hands entries created by the sandbox (owned by nobody) below `dir` back to root. Does not
/// follow symlinks and does not descend into other filesystems.
pub(crate) fn reclaim(dir: &Path) {
    let Ok(root_meta) = std::fs::symlink_metadata(dir) else { return };
    let dev = root_meta.dev();
    let mut stack = vec![dir.to_owned()];
    while let Some(current) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
            if meta.uid() == NOBODY {
                let _ = rustix::fs::chownat(
                    rustix::fs::CWD,
                    &path,
                    Some(rustix::process::Uid::ROOT),
                    Some(rustix::process::Gid::ROOT),
                    rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
                );
            }
            if meta.is_dir() && meta.dev() == dev {
                stack.push(path);
            }
        }
    }
}
