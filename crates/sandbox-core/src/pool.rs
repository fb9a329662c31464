//! The warm pool, in the seam's session layer: ready sandboxes an engine started ahead of
//! time, so `session start` costs one claim instead of a sandbox start. The engine supplies
//! five primitives ([`crate::SessionEngine`]'s `pool_*` methods: its identity, list members,
//! create one, claim one atomically, remove one); the decisions are here, pure, and the same
//! for every engine: which member fits a request ([`pool_key`]), in which order candidates
//! are tried ([`candidates`]), and what a refill creates and evicts ([`refill_plan`]).
//!
//! **Invariant:** a member is handed out only for a request with the same key, and the key
//! covers everything a sandbox fixes at its start. It is a digest of the whole
//! [`SessionConfig`] (workspace, mounts, network, ports, environment, TTL, tmpfs size,
//! limits: its `Debug` text, so a field added to the config is in the key without anyone
//! remembering to add it) and of the engine's identity (image, flavor, namespace, the version
//! of this crate). Two requests that differ in anything only miss the pool, never share a
//! sandbox. Environment values are in the digest only (the key is a label; it holds no value).
//!
//! **Invariant:** a member never ran anything. Engines refuse to open an unclaimed member
//! (so no exec or file write reaches one through the CLI), a claim succeeds once, and a
//! claimed sandbox is a session like any other, removed by `stop` or its TTL, never put back.

use sha2::{Digest, Sha256};

use crate::{EngineError, SessionConfig, SessionInfo};

/// A ready sandbox in an engine's pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolMember {
    /// Its session id once claimed.
    pub id: String,
    /// The [`pool_key`] it was created for.
    pub key: String,
    /// Unix seconds.
    pub created: u64,
    /// The engine's version of the member when listed, for a conditional claim (a Kubernetes
    /// resourceVersion); empty where the claim needs none.
    pub revision: String,
}

/// Pure: the key of the pool members that may serve `config` on an engine whose
/// [`crate::SessionEngine::pool_identity`] is `identity`: 40 hex digits (a valid label value
/// on every engine, Kubernetes' 63-character limit included).
pub fn pool_key(config: &SessionConfig, identity: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(b"python-sandbox pool v1\0");
    hash.update(env!("CARGO_PKG_VERSION").as_bytes());
    hash.update(b"\0");
    hash.update(identity.as_bytes());
    hash.update(b"\0");
    hash.update(format!("{config:?}").as_bytes());
    let digest = hash.finalize();
    digest.iter().take(20).map(|b| format!("{b:02x}")).collect()
}

/// Pure: the members that may serve `key`, the oldest first (the closest to its TTL is used
/// before it expires).
pub fn candidates<'a>(members: &'a [PoolMember], key: &str) -> Vec<&'a PoolMember> {
    let mut out: Vec<&PoolMember> = members.iter().filter(|m| m.key == key).collect();
    out.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.id.cmp(&b.id)));
    out
}

/// What a refill does.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RefillPlan {
    /// How many members of the asked key to create.
    pub create: usize,
    /// Members of other keys to remove, so the pool stays within its size.
    pub remove: Vec<String>,
}

/// Pure: a refill of the pool to `size` members of `key`. The pool follows the last request:
/// it holds up to `size` members per engine, all of the key last asked, so members of other
/// keys are removed (a member of a key nobody asks for any more would only wait for its TTL).
pub fn refill_plan(members: &[PoolMember], key: &str, size: usize) -> RefillPlan {
    let have = members.iter().filter(|m| m.key == key).count();
    let mut others: Vec<&PoolMember> = members.iter().filter(|m| m.key != key).collect();
    others.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.id.cmp(&b.id)));
    RefillPlan {
        create: size.saturating_sub(have),
        remove: others.iter().map(|m| m.id.clone()).collect(),
    }
}

/// Claims a member of `engine`'s pool that fits `config`: `None` when the engine has no pool
/// or no member fits (the caller starts a session the usual way). A candidate another caller
/// claimed first, or that the engine finds unfit at the claim (used, gone, a mount source
/// replaced), is passed over for the next one.
pub fn claim(
    engine: &dyn crate::DynSessionEngine,
    config: &SessionConfig,
) -> Result<Option<SessionInfo>, EngineError> {
    let Some(identity) = engine.pool_identity_dyn() else { return Ok(None) };
    let key = pool_key(config, &identity);
    let members = engine.pool_members_dyn()?;
    for member in candidates(&members, &key) {
        if let Some(info) = engine.pool_claim_dyn(member)? {
            return Ok(Some(info));
        }
    }
    Ok(None)
}

/// Fills `engine`'s pool to `size` members that fit `config` (evicting members of other
/// keys, [`refill_plan`]); the number created.
pub fn refill(
    engine: &dyn crate::DynSessionEngine,
    config: &SessionConfig,
    size: usize,
) -> Result<usize, EngineError> {
    let Some(identity) = engine.pool_identity_dyn() else { return Ok(0) };
    let key = pool_key(config, &identity);
    let plan = refill_plan(&engine.pool_members_dyn()?, &key, size);
    for id in &plan.remove {
        engine.pool_remove_dyn(id)?;
    }
    for _ in 0..plan.create {
        engine.pool_create_dyn(config, &key)?;
    }
    Ok(plan.create)
}

#[cfg(test)]
mod tests;
