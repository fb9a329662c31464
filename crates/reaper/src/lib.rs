//! One expiry policy that removes sandboxes outliving their owner
