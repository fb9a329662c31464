//! Integration tests of the `python-sandbox` binary: one test binary for the crate. Each test runs
//! the real executable in a temporary directory and snapshots what a user would see.

mod fault;
mod jobs;
mod k8s;
mod mcp;
mod mcp_rmcp;
mod meta;
mod offterm;
mod pool;
mod reap;
mod run;
mod serve;
mod session;
mod tty;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

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

    /// The names in the temp dir, sorted.
    pub(crate) fn ls(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.path())
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_python-sandbox"));
        cmd.args(args)
            .current_dir(self.dir.path())
            .env("NO_COLOR", "1")
            .env_remove("CLICOLOR_FORCE")
            .stdin(Stdio::null());
        cmd
    }

    /// Runs the CLI with `args` in the temp dir, colours off, and returns its output.
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run python-sandbox")
    }

    /// [`Ctx::run`] with extra environment variables.
    pub(crate) fn run_with_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.command(args).envs(env.iter().copied()).output().expect("run python-sandbox")
    }

    /// [`Ctx::run`] with `stdin` as the CLI's standard input, written by a thread (a CLI that
    /// streams it, `session exec -i … cat`, prints while it is still being written).
    pub(crate) fn run_with_stdin(&self, args: &[&str], stdin: &[u8]) -> Output {
        use std::io::Write as _;
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn python-sandbox");
        let mut pipe = child.stdin.take().expect("stdin");
        let stdin = stdin.to_vec();
        // A CLI that exits without reading all of it closes the pipe: not this helper's error.
        let writer = std::thread::spawn(move || pipe.write_all(&stdin));
        let out = child.wait_with_output().expect("wait for python-sandbox");
        let _ = writer.join();
        out
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
