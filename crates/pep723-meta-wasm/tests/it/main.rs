//! The binding's JSON as a JS client sees it, checked natively: over pep723-meta's conformance
//! cases (ranges and offsets agree, quick fixes apply and resolve their diagnostic) and over
//! arbitrary text (never a panic, everything in bounds); and the vendored pep508_rs against the
//! crates.io original it patches.

mod cases;
mod props;
mod support;
mod vendor;
