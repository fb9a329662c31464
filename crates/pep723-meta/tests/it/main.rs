//! The one integration-test binary of pep723-meta: data-driven conformance cases (`cases/`, one
//! file per case, snapshots under `snapshots/`) and property tests of the parse/edit invariants.

mod cases;
mod props;
mod satisfy;
#[cfg(feature = "serde")]
mod serde;
mod support;
