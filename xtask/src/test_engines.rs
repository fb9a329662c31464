//! `cargo xtask test-engines [--engine NAME]... [FILTER]...`: builds the CLI, brings up the container
//! engines it will test (daemon and runtime image, via `image::Image::ready_engines`), then runs the
//! cross-engine conformance suite (tests/conformance), which prints its own engine × case matrix.
//! Engines that cannot run here show up as `SKIPPED: <engine>: <reason>`, never silently.

use anyhow::{Context, Result};
use xshell::{Shell, cmd};

use crate::image::{Engine, Image};

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
        let oci: Vec<Engine> = if self.engines.is_empty() {
            Engine::ALL.to_vec()
        } else {
            self.engines.iter().filter_map(|e| Engine::parse(e)).collect()
        };
        if !oci.is_empty() {
            // What cannot start prints its own SKIPPED line; the suite then skips it too.
            Image { engines: oci, ..Image::all() }.ready_engines(sh)?;
        }
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
