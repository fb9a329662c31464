//! The warm pool, in the seam's session layer: ready sandboxes an engine started ahead of
//! time, so `session start` costs one claim instead of a sandbox start. The engine supplies
//! five primitives ([`crate::SessionEngine`]'s `pool_*` methods: its identity, list members,
//! create one, claim one atomically, remove one); the decisions are here, pure, and the same
//! for every engine: which member fits a request ([`pool_key`]), in which order candidates
//! are tried ([`candidates`]), what a refill creates and evicts ([`refill_plan`]), and what a
//! controller keeping the pool at its size does on each pass ([`reconcile`], carried out by
//! [`serve_pass`]).
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

/// The pool's controller lock as an engine keeps it ([`crate::SessionEngine::pool_lease_take`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolLease {
    /// The pool is this host's alone: the CLI's lock file is its lock.
    Local,
    /// Held by the caller now (taken or renewed), where every host sees it.
    Held,
    /// Held by another controller, named by its holder identity.
    HeldBy(String),
}

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

/// Why a pass removes a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoveReason {
    /// Its key is not the one asked (the image or the config changed since its create).
    OtherKey,
    /// It is past half its TTL: it is replaced before its expiry can race a claim.
    Stale,
    /// The pool holds more fresh members of the key than its size.
    Surplus,
}

impl RemoveReason {
    /// Lower-case words for a log line.
    pub fn as_str(self) -> &'static str {
        match self {
            RemoveReason::OtherKey => "its key is not the configured one",
            RemoveReason::Stale => "past half its ttl",
            RemoveReason::Surplus => "more members than the pool size",
        }
    }
}

/// One step of a pass of [`reconcile`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolAction {
    /// Start one member of the asked key.
    Create,
    /// Remove unclaimed member `id`.
    Remove {
        /// The member.
        id: String,
        /// Why.
        reason: RemoveReason,
    },
}

/// Pure: what one pass of a controller does to keep `size` members of `key`, each of a TTL of
/// `ttl_secs`, at unix time `now`. Members of other keys go first (they hold resources nobody
/// can claim); the missing fresh members are created next, and only then are stale ones
/// removed, so a replacement never leaves the pool short; a surplus (a smaller size, or a
/// refill that ran outside the controller) goes last, the oldest first. A member missing from
/// `members` (claimed, dead, expired) is not counted: its replacement is a create.
pub fn reconcile(
    members: &[PoolMember],
    key: &str,
    size: usize,
    ttl_secs: u64,
    now: u64,
) -> Vec<PoolAction> {
    let stale_after = ttl_secs / 2;
    let mut sorted: Vec<&PoolMember> = members.iter().collect();
    sorted.sort_by(|a, b| a.created.cmp(&b.created).then_with(|| a.id.cmp(&b.id)));
    let remove = |m: &&PoolMember, reason| PoolAction::Remove { id: m.id.clone(), reason };
    let (ours, others): (Vec<&PoolMember>, Vec<&PoolMember>) =
        sorted.into_iter().partition(|m| m.key == key);
    let (stale, fresh): (Vec<&PoolMember>, Vec<&PoolMember>) =
        ours.into_iter().partition(|m| now.saturating_sub(m.created) >= stale_after);
    let mut out: Vec<PoolAction> =
        others.iter().map(|m| remove(m, RemoveReason::OtherKey)).collect();
    out.extend(std::iter::repeat_n(PoolAction::Create, size.saturating_sub(fresh.len())));
    out.extend(stale.iter().map(|m| remove(m, RemoveReason::Stale)));
    let surplus = fresh.len().saturating_sub(size);
    out.extend(fresh.iter().take(surplus).map(|m| remove(m, RemoveReason::Surplus)));
    out
}

/// One pass of a controller over `engine`'s pool: lists it, [`reconcile`]s it against `size`
/// members fitting `config` at unix time `now`, and carries out each action, telling `done` of
/// each once done. The caller holds the pool's fill lock, so no refill lists or creates between
/// this listing and these creates; a claim between them leaves the pool one short until the
/// next pass, never over its size. Stops at the first failing action; the actions taken.
pub fn serve_pass(
    engine: &dyn crate::DynSessionEngine,
    config: &SessionConfig,
    size: usize,
    now: u64,
    done: &mut dyn FnMut(&PoolAction),
) -> Result<usize, EngineError> {
    let Some(identity) = engine.pool_identity_dyn() else { return Ok(0) };
    let key = pool_key(config, &identity);
    let actions = reconcile(&engine.pool_members_dyn()?, &key, size, config.ttl.as_secs(), now);
    for action in &actions {
        match action {
            PoolAction::Create => engine.pool_create_dyn(config, &key)?,
            PoolAction::Remove { id, .. } => engine.pool_remove_dyn(id)?,
        }
        done(action);
    }
    Ok(actions.len())
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
