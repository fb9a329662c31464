//! `cargo xtask ci`: the README's test command and the only thing `.ci/run` calls.

use anyhow::Result;
use xshell::{cmd, Shell};

pub(crate) struct Ci;

impl Ci {
    pub(crate) fn run(self, sh: &Shell) -> Result<()> {
        crate::section("fmt");
        cmd!(sh, "cargo fmt --all -- --check").run()?;
        crate::section("clippy");
        cmd!(sh, "cargo clippy --workspace --all-targets --locked -- -D warnings").run()?;
        crate::section("tests");
        cmd!(sh, "cargo test --workspace --locked").run()?;
        Ok(())
    }
}
