//! Starts a session, runs `python3 -c 'print(...)'` in it and stops it:
//! `cargo run -p engine-k8s --example hello_exec -- [--engine bwrap|docker|podman|k8s]`.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod common;

use anyhow::{Result, bail};
use sandbox_core::{Captured, ExecRequest, Executor, Sandbox, SessionInfo};

struct Hello;

impl common::Body for Hello {
    type Output = ();

    fn run<S: Sandbox, X: Executor>(
        self,
        sandbox: &S,
        executor: &X,
        _: &SessionInfo,
        _: &str,
    ) -> Result<()> {
        let code = "import platform, sys; print(f'hello from {sys.implementation.name} {platform.python_version()} in', platform.node() or 'the sandbox')";
        let mut out = Captured::default();
        let outcome = executor
            .block_on(sandbox.exec(&ExecRequest::new(&["python3", "-c", code]), &mut out))?;
        print!("{}", out.stdout_lossy());
        eprint!("{}", out.stderr_lossy());
        if outcome.exit_code != 0 {
            bail!("python3 exited with {}", outcome.exit_code);
        }
        println!("exit code 0 in {:?}", outcome.duration);
        Ok(())
    }
}

fn main() -> std::process::ExitCode {
    let run = || -> Result<()> {
        let mut args: Vec<String> = std::env::args().skip(1).collect();
        let engine = common::take_engine(&mut args)?;
        common::with_session(engine, &[], Hello)
    };
    common::exit(run())
}
