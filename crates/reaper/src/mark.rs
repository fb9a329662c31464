//! The proof that this user's python-sandbox made a resource, which labels alone cannot give:
//! anyone who can reach the daemon can put any label on anything, including copies of ours.
//!
//! Each user has a secret [`MarkKey`] (32 random bytes, `0600`, in a [`PrivateDir`] under the
//! cache). At create time the engine adds [`MARK`]: an HMAC-SHA256 under that key over the
//! resource's own name and its [`crate::labels::ID`] label. A sweep acts only on resources whose
//! mark verifies, each on its own: a forged container can copy every label, mark included, but
//! not pair it with a name it does not have, and a name is unique on a daemon while its owner
//! exists. So a forgery never passes for ours, and never takes one of ours along as a
//! companion (it is not ours, so it is not in the sandbox at all).
//!
//! Pure except [`MarkKey::load`]: the HMAC is computed here (RFC 2104 over `sha2`).

use std::collections::BTreeMap;
use std::io::Read;

use sha2::{Digest, Sha256};

use crate::Error;
use crate::hostfs::PrivateDir;

/// The label that carries the mark.
pub const MARK: &str = "io.python-sandbox.mark";
/// The key file's name in its directory.
const KEY_FILE: &str = "mark.key";
/// Hex digits of the HMAC kept in the label (128 bits; a label value holds at most 63).
const MARK_HEX: usize = 32;

/// One user's secret for marking what their python-sandbox creates.
#[derive(Clone, PartialEq, Eq)]
pub struct MarkKey([u8; 32]);

impl std::fmt::Debug for MarkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MarkKey(..)")
    }
}

impl MarkKey {
    /// A key from its bytes (tests, and [`MarkKey::load`]).
    pub fn from_bytes(bytes: [u8; 32]) -> MarkKey {
        MarkKey(bytes)
    }

    /// The key in `dir` (see [`PrivateDir`]), created from `/dev/urandom` on first use. Two
    /// first uses at once agree: the key is linked into place, never replaced.
    pub fn load(dir: &PrivateDir) -> Result<MarkKey, Error> {
        let path = dir.path().join(KEY_FILE);
        let invalid = |message: &str| Error::HostFile {
            path: path.display().to_string(),
            message: format!(
                "{message}\nhint: remove it; python-sandbox makes a new one (containers marked \
                 with the old one are then left for `docker rm`)"
            ),
        };
        if let Some(bytes) = dir.read(KEY_FILE)? {
            return <[u8; 32]>::try_from(bytes.as_slice())
                .map(MarkKey)
                .map_err(|_| invalid("is not a key python-sandbox wrote"));
        }
        let mut fresh = [0u8; 32];
        std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut fresh)).map_err(
            |e| Error::HostFile { path: "/dev/urandom".to_owned(), message: e.to_string() },
        )?;
        dir.write_once(KEY_FILE, &fresh, 0o600)?;
        let bytes = dir.read(KEY_FILE)?.ok_or_else(|| invalid("vanished after being written"))?;
        <[u8; 32]>::try_from(bytes.as_slice())
            .map(MarkKey)
            .map_err(|_| invalid("is not a key python-sandbox wrote"))
    }

    /// The mark of a resource named `name` whose id label is `id`.
    pub fn mark(&self, name: &str, id: &str) -> String {
        // Length-prefixed, so no two (name, id) pairs give the same message.
        let mut message = Vec::with_capacity(name.len() + id.len() + 16);
        message.extend_from_slice(&(name.len() as u64).to_be_bytes());
        message.extend_from_slice(name.as_bytes());
        message.extend_from_slice(&(id.len() as u64).to_be_bytes());
        message.extend_from_slice(id.as_bytes());
        let mac = hmac_sha256(&self.0, &message);
        let mut hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        hex.truncate(MARK_HEX);
        hex
    }

    /// Adds [`MARK`] for `name` to `labels`, over their id label (empty when there is none).
    pub fn sign(&self, name: &str, labels: &mut BTreeMap<String, String>) {
        let id = labels.get(crate::labels::ID).cloned().unwrap_or_default();
        labels.insert(MARK.to_owned(), self.mark(name, &id));
    }

    /// Whether `labels` carry this key's mark for `name`. Compared in constant time.
    pub fn verifies(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        let Some(mark) = labels.get(MARK) else { return false };
        // Volumes carry no id label: their name alone is signed.
        let id = labels.get(crate::labels::ID).map_or("", String::as_str);
        let want = self.mark(name, id);
        want.len() == mark.len()
            && want.bytes().zip(mark.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

/// HMAC-SHA256 (RFC 2104) with a key of at most one block.
fn hmac_sha256(key: &[u8; 32], message: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(key);
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new().chain_update(pad(0x36)).chain_update(message).finalize();
    Sha256::new().chain_update(pad(0x5c)).chain_update(inner).finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test case 2 of RFC 4231, its key zero-padded to 32 bytes (the same HMAC key).
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(b"Jefe");
        let mac = hmac_sha256(&key, b"what do ya want for nothing?");
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

    #[test]
    fn a_mark_binds_name_and_id() {
        let key = MarkKey::from_bytes([7; 32]);
        let mut labels = BTreeMap::from([(crate::labels::ID.to_owned(), "abc".to_owned())]);
        key.sign("python-sandbox-run-abc", &mut labels);
        assert!(crate::labels::is_label_value(&labels[MARK]));
        assert!(key.verifies("python-sandbox-run-abc", &labels));
        // Copied labels on another name, or another id under the same mark: not ours.
        assert!(!key.verifies("python-sandbox-run-abd", &labels));
        let mut moved = labels.clone();
        moved.insert(crate::labels::ID.to_owned(), "abd".to_owned());
        assert!(!key.verifies("python-sandbox-run-abc", &moved));
        // Another user's key, or no mark at all.
        assert!(!MarkKey::from_bytes([8; 32]).verifies("python-sandbox-run-abc", &labels));
        labels.remove(MARK);
        assert!(!key.verifies("python-sandbox-run-abc", &labels));
        // The length prefix keeps `ab`+`c` and `a`+`bc` apart.
        assert_ne!(key.mark("ab", "c"), key.mark("a", "bc"));
    }
}
