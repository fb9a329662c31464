//! Copies a repository's source into a session and runs its tests there:
//! `cargo run -p engine-k8s --example git_repo -- [--engine bwrap|docker|podman|k8s] [SOURCE]
//! [-- TEST COMMAND...]`. SOURCE is a git URL or a local git checkout (cloned on the host with
//! `git clone --depth 1`: the runtime image has no git, and sessions may have no network) or a
//! plain directory; by default the bundled `sample_project`. The tree goes in as a tar through
//! `Sandbox::put` (no `.git`), and the tests run with `python3 -m unittest discover -v` unless a
//! command is given.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod common;

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use sandbox_core::{ExecRequest, Executor, PutSource, Sandbox, SessionInfo, Stream};

struct Tests {
    tar: Vec<u8>,
    command: Vec<String>,
}

impl common::Body for Tests {
    type Output = i32;

    fn run<S: Sandbox, X: Executor>(
        self,
        sandbox: &S,
        executor: &X,
        _: &SessionInfo,
        workspace: &str,
    ) -> Result<i32> {
        let dest = format!("{workspace}/repo");
        executor.block_on(sandbox.put(&PutSource::Tar(self.tar), &dest))?;
        let listed = executor.block_on(sandbox.list_dir(&dest))?;
        let names: Vec<&str> = listed.iter().map(|e| e.name.as_str()).collect();
        println!("{dest}: {}", names.join(" "));
        println!("$ {}", self.command.join(" "));
        let argv: Vec<&str> = self.command.iter().map(String::as_str).collect();
        let request = ExecRequest {
            cwd: Some(dest),
            timeout: Some(std::time::Duration::from_secs(600)),
            ..ExecRequest::new(&argv)
        };
        // Live output: a test run can be long.
        let mut sink = |stream: Stream, chunk: &[u8]| {
            use std::io::Write as _;
            let _ = match stream {
                Stream::Stdout => std::io::stdout().write_all(chunk),
                Stream::Stderr => std::io::stderr().write_all(chunk),
            };
        };
        let outcome = executor.block_on(sandbox.exec(&request, &mut sink))?;
        if outcome.timed_out {
            bail!("the tests timed out after 600 s");
        }
        println!("tests exited with {} in {:?}", outcome.exit_code, outcome.duration);
        Ok(outcome.exit_code)
    }
}

/// Pure: whether `source` names something to clone rather than a directory to copy.
fn is_url(source: &str) -> bool {
    ["https://", "http://", "git://", "ssh://", "file://", "git@"]
        .iter()
        .any(|p| source.starts_with(p))
}

/// The tree to copy: a clone of `source` (in `scratch`) or `source` itself.
fn checkout(source: &str, scratch: &Path) -> Result<PathBuf> {
    let local = Path::new(source);
    if !is_url(source) && !local.join(".git").exists() {
        if !local.is_dir() {
            bail!("`{source}` is neither a directory nor a git URL");
        }
        return Ok(local.to_owned());
    }
    let dest = scratch.join("clone");
    let status = std::process::Command::new("git")
        .args(["clone", "--depth", "1", "--quiet", "--", source])
        .arg(&dest)
        .status()
        .context("running `git clone` on the host\nhint: install git, or pass a plain directory")?;
    if !status.success() {
        bail!("`git clone {source}` failed ({status})");
    }
    Ok(dest)
}

/// A tar of `root`'s tree without `.git`, links kept as links.
fn tar_of(root: &Path) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .collect::<Result<_, _>>()?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for entry in entries {
            if entry.file_name() == ".git" || entry.file_name() == "__pycache__" {
                continue;
            }
            let rel = rel.join(entry.file_name());
            if entry.file_type()?.is_dir() {
                builder.append_dir(&rel, entry.path())?;
                stack.push(rel);
            } else {
                builder.append_path_with_name(entry.path(), &rel)?;
            }
        }
    }
    Ok(builder.into_inner()?)
}

fn main() -> std::process::ExitCode {
    let run = || -> Result<i32> {
        let mut args: Vec<String> = std::env::args().skip(1).collect();
        let engine = common::take_engine(&mut args)?;
        let command = match args.iter().position(|a| a == "--") {
            Some(at) => args.split_off(at).into_iter().skip(1).collect(),
            None => Vec::new(),
        };
        let command = if command.is_empty() {
            ["python3", "-m", "unittest", "discover", "-v"].map(str::to_owned).to_vec()
        } else {
            command
        };
        let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/sample_project");
        let source = args.first().map_or(sample, String::as_str);
        let scratch = tempfile::tempdir().context("creating a scratch directory")?;
        let tree = checkout(source, scratch.path())?;
        let tar = tar_of(&tree)?;
        println!("copying {} ({} KiB as tar) into the sandbox", tree.display(), tar.len() / 1024);
        common::with_session(engine, &[], Tests { tar, command })
    };
    match run() {
        Ok(0) => std::process::ExitCode::SUCCESS,
        Ok(_) => std::process::ExitCode::FAILURE,
        Err(error) => common::exit(Err(error)),
    }
}
