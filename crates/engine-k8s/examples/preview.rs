//! Serves a page from the session at its preview URL and fetches it from the host:
//! `cargo run -p engine-k8s --example preview -- [--engine bwrap|docker|podman|k8s] [--wait]`
//! (`--wait` keeps serving until Enter).

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod common;

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use sandbox_core::{Executor, Sandbox, ServiceSpec, SessionInfo};

const PORT: u16 = 8000;

struct Preview {
    wait: bool,
}

impl common::Body for Preview {
    type Output = ();

    fn run<S: Sandbox, X: Executor>(
        self,
        sandbox: &S,
        executor: &X,
        _: &SessionInfo,
        workspace: &str,
    ) -> Result<()> {
        let page =
            format!("<!doctype html><title>preview</title><h1>hello from {}</h1>\n", sandbox.id());
        executor.block_on(
            sandbox.write_file(&format!("{workspace}/site/index.html"), page.as_bytes()),
        )?;
        let service = ServiceSpec {
            argv: [
                "python3",
                "-m",
                "http.server",
                &PORT.to_string(),
                "--bind",
                "0.0.0.0",
                "--directory",
                &format!("{workspace}/site"),
            ]
            .map(str::to_owned)
            .to_vec(),
            port: PORT,
            env: Vec::new(),
        };
        let started = executor.block_on(sandbox.start_service(&service))?;
        println!("preview: {}", started.url);
        let body = fetch(&started.url)?;
        if body != page {
            bail!("the preview served something else:\n{body}");
        }
        println!("fetched {} bytes: {}", body.len(), body.trim());
        if self.wait {
            eprintln!("serving until Enter");
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
        }
        executor.block_on(sandbox.stop_service(&started))?;
        Ok(())
    }
}

/// GETs `url`, retrying briefly: a published port may take a moment to forward.
fn fetch(url: &str) -> Result<String> {
    let agent: ureq::Agent =
        ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(10))).build().into();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match agent.get(url).call() {
            Ok(mut response) => {
                return response.body_mut().read_to_string().context("reading the page");
            }
            Err(error) if Instant::now() > deadline => {
                return Err(error).context(format!("fetching {url}"));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

fn main() -> std::process::ExitCode {
    let run = || -> Result<()> {
        let mut args: Vec<String> = std::env::args().skip(1).collect();
        let engine = common::take_engine(&mut args)?;
        let wait = args.iter().any(|a| a == "--wait");
        common::with_session(engine, &[PORT], Preview { wait })
    };
    common::exit(run())
}
