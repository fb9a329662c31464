//! `cargo xtask wasm`: builds the pep723-meta npm package (owned by the WASM work).

use anyhow::{bail, Result};
use xshell::Shell;

pub(crate) struct Wasm {
    pub(crate) check: bool,
}

impl Wasm {
    pub(crate) fn run(self, _sh: &Shell) -> Result<()> {
        let _ = self.check;
        bail!("the wasm build is not written yet")
    }
}
