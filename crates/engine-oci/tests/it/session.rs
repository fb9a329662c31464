//! Warm sessions on real engines.
