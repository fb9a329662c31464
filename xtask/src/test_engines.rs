//! `cargo xtask test-engines [--engine NAME]... [FILTER]...`: builds the CLI, then runs the
//! cross-engine conformance suite (tests/conformance), which prints its own engine × case matrix.
//! Engines that are unavailable here show up as `SKIPPED: <engine>: <reason>`, never silently.

use anyhow::{Context, Result};
use xshell::{Shell, cmd};

pub(crate) struct TestEngines {
    /// Empty: every engine `python-sandbox detect --json` lists.
    pub(crate) engines: Vec<String>,
    /// Substrings of case names, as for libtest.
    pub(crate) filters: Vec<String>,
}

impl TestEngines {
    pub(crate) fn run(self, sh: &Shell) -> Result<()> {
        crate::section("build the CLI");
        cmd!(sh, "cargo build -p cli").run()?;
        crate::section("conformance suite");
        let _on = sh.push_env("CONFORMANCE", "1");
        let _engines = (!self.engines.is_empty())
            .then(|| sh.push_env("CONFORMANCE_ENGINES", self.engines.join(",")));
        let filters = &self.filters;
        cmd!(sh, "cargo test -p tests --test conformance -- {filters...}")
            .run()
            .context("the conformance suite failed; see the matrix above")?;
        Ok(())
    }
}
