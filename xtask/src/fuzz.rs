//! `cargo xtask fuzz [--seconds N] [TARGET]`: runs the cargo-fuzz targets in `fuzz/` on nightly,
//! installing cargo-fuzz when it is missing. A per-input timeout turns super-linear behaviour
//! (the quadratic trap of the spec's regex) into a crash.

use anyhow::{Result, bail};
use xshell::{Shell, cmd};

/// Every target in `fuzz/fuzz_targets/`.
const TARGETS: [&str; 2] = ["parse", "edit_sequence"];
/// Seconds one input may take. Linear parsing of `MAX_LEN` bytes takes well under a millisecond.
const INPUT_TIMEOUT: &str = "2";
/// Large enough that a quadratic scan of it would blow the per-input timeout.
const MAX_LEN: &str = "65536";

pub(crate) struct Fuzz {
    pub(crate) seconds: u64,
    pub(crate) target: Option<String>,
}

impl Fuzz {
    pub(crate) fn run(self, sh: &Shell) -> Result<()> {
        crate::section("fuzz");
        let targets: Vec<&str> = match &self.target {
            Some(t) if TARGETS.contains(&t.as_str()) => vec![t.as_str()],
            Some(t) => bail!("unknown fuzz target `{t}`\nhint: targets are {}", TARGETS.join(", ")),
            None => TARGETS.to_vec(),
        };
        if cmd!(sh, "rustup run nightly rustc --version").quiet().ignore_stderr().read().is_err() {
            crate::skipped("fuzz", "no nightly toolchain (rustup toolchain install nightly)");
            return Ok(());
        }
        if cmd!(sh, "cargo fuzz --version").quiet().ignore_stderr().read().is_err() {
            cmd!(sh, "cargo install cargo-fuzz --locked").run()?;
        }
        let _dir = sh.push_dir("fuzz");
        let seconds = self.seconds.to_string();
        for target in targets {
            crate::section(&format!("fuzz {target} ({seconds} s)"));
            let corpus = format!("corpus/{target}");
            // The conformance cases seed the parser; libFuzzer writes new inputs to the first dir only.
            let seeds: Vec<&str> = if target == "parse" {
                vec!["../crates/pep723-meta/tests/it/cases"]
            } else {
                Vec::new()
            };
            sh.create_dir(&corpus)?;
            cmd!(
                sh,
                "cargo +nightly fuzz run {target} {corpus} {seeds...} -- -max_total_time={seconds} -timeout={INPUT_TIMEOUT} -max_len={MAX_LEN}"
            )
            .run()?;
        }
        Ok(())
    }
}
