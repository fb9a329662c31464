//! Integration tests of the `python-sandbox` binary: one test binary for the crate. Each test runs
//! the real executable in a temporary directory and snapshots what a user would see.

mod meta;
mod reap;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temporary working directory with helpers to write scripts and run the CLI in it.
pub(crate) struct Ctx {
    dir: tempfile::TempDir,
}

impl Ctx {
    pub(crate) fn new() -> Ctx {
        Ctx { dir: tempfile::tempdir().expect("tempdir") }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).expect("write script");
        p
    }

    pub(crate) fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).expect("read script")
    }

    /// Runs the CLI with `args` in the temp dir, colours off, and returns its output.
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_python-sandbox"))
            .args(args)
            .current_dir(self.dir.path())
            .env("NO_COLOR", "1")
            .env_remove("CLICOLOR_FORCE")
            .output()
            .expect("run python-sandbox")
    }
}

/// `exit: N`, then stdout and stderr, for snapshots.
pub(crate) fn transcript(out: &Output) -> String {
    format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        out.status.code().map_or("signal".to_owned(), |c| c.to_string()),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
