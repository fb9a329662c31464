//! `cargo xtask`: the one binary for all automation. Each subcommand is a struct with
//! `run(self, sh)`; every command runs from one `Shell` rooted at the repository.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod actionlint;
mod bench;
mod bench_run;
mod ci;
mod dist;
mod docs;
mod egress;
mod flags;
mod fuzz;
mod image;
mod kind;
mod package;
mod plugin;
mod release;
mod rootless;
mod serve;
mod services;
mod test_engines;
mod vsix;
mod wasm;
#[cfg(test)]
mod workflow_check;

use std::path::{Path, PathBuf};

use xshell::Shell;

fn main() -> anyhow::Result<()> {
    let cmd = flags::parse(std::env::args().skip(1).collect())?;
    // `cargo run` describes xtask's package in the environment (`CARGO_MANIFEST_DIR`,
    // `CARGO_PKG_NAME`, ...), and ring's build script watches several of those: every cargo
    // build from here would rebuild ring (and all above it) after one from a plain shell, and
    // the other way round.
    let described = |key: &str| {
        key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_MANIFEST_")
            || matches!(key, "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE")
    };
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(described) {
            #[allow(unsafe_code)]
            // SAFETY: first thing in `main` after the argument parse, before any thread exists.
            unsafe {
                std::env::remove_var(&key);
            }
        }
    }
    let sh = Shell::new()?;
    sh.change_dir(project_root());
    match cmd {
        flags::Cmd::Help => {
            print!("{}", flags::USAGE);
            Ok(())
        }
        flags::Cmd::Ci(c) => c.run(&sh),
        flags::Cmd::Actionlint(c) => c.run(&sh),
        flags::Cmd::Wasm(c) => c.run(&sh),
        flags::Cmd::Plugin(c) => c.run(&sh),
        flags::Cmd::Dist(c) => c.run(&sh),
        flags::Cmd::Docs(c) => c.run(&sh),
        flags::Cmd::Package(c) => c.run(&sh),
        flags::Cmd::Vsix(c) => c.run(&sh),
        flags::Cmd::Bench(c) => c.run(&sh),
        flags::Cmd::Fuzz(c) => c.run(&sh),
        flags::Cmd::TestEngines(c) => c.run(&sh),
        flags::Cmd::Image(c) => c.run(&sh),
        flags::Cmd::EgressImage => egress::build(&sh),
        flags::Cmd::Kind(c) => c.run(&sh),
    }
}

/// The repository root: xtask lives one level below it.
pub(crate) fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// A tier that cannot run here prints one visible line, so a green CI never hides a gap.
pub(crate) fn skipped(tier: &str, reason: &str) {
    println!("SKIPPED: {tier}: {reason}");
}

/// A section header in CI output.
pub(crate) fn section(name: &str) {
    println!("\n==> {name}");
}
