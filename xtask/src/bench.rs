//! `cargo xtask bench`: benchmarks printed side by side with their baselines.

use anyhow::{bail, Result};
use xshell::Shell;

pub(crate) struct Bench;

impl Bench {
    pub(crate) fn run(self, _sh: &Shell) -> Result<()> {
        bail!("no benchmarks are written yet")
    }
}
