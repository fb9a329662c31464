//! `python-sandbox`: the command line entry point. Parses flags (clap lives only here), dispatches to
//! one module per command, and maps error classes to exit codes.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod args;
mod cmdline;
mod config;
mod detect;
#[cfg(test)]
mod engine_docs_check;
mod exit;
mod files;
#[cfg(test)]
mod launcher_check;
mod mcp;
mod meta;
mod netoff;
#[cfg(test)]
mod plugin_check;
mod pool;
mod progress;
mod reap;
mod registry;
mod relay;
mod rewrite;
mod run;
mod script;
mod session;
mod spec;
mod tty;
mod ui;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

/// The allocator of the static musl build (the one releases ship, `xtask/src/release.rs`).
/// musl's own maps and unmaps a page for nearly every first allocation of a size, about 130
/// `mmap`/`munmap` calls before a run's sandbox starts; each `munmap` flushes the TLB, of every
/// core that runs one of our threads. dlmalloc takes its memory in large segments. It is one
/// lock, held across `fork` through `pthread_atfork` (see `main`), so a child forked while
/// another thread allocates finds it free, as it finds glibc's and musl's own.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

fn main() -> ExitCode {
    // First: the engines fork from threads (the native sandbox's monitor and init, probes) and
    // their children allocate.
    #[cfg(target_env = "musl")]
    #[allow(unsafe_code)]
    // SAFETY: called once, before any thread exists or any fork, as the function requires.
    unsafe {
        dlmalloc::enable_alloc_after_fork();
    }
    // Before anything else (a helper forks): an engine's helper process is this binary again.
    registry::helper_main_if_asked();
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let parsed = args::parse_run(&argv).map_or_else(|| Cli::try_parse_from(&argv), Ok);
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            let code = u8::try_from(e.exit_code()).unwrap_or(exit::USER_ERROR);
            if code != 0 && args::wants_run_json(&argv) {
                let text = e.to_string();
                let message = text.lines().next().unwrap_or_default().trim_start_matches("error: ");
                run::print_json_error(&anyhow::anyhow!("{message}"), None);
            }
            return ExitCode::from(code);
        }
    };
    // Parsed: the values now live in `cli` alone, and no thread or child exists yet.
    cmdline::mask_env_values();
    let result = match cli.command {
        Command::Meta(cmd) => meta::run(cmd),
        Command::Detect { json } => detect::detect(json),
        Command::Suggest => detect::suggest(),
        Command::Run(args) => run::run(args),
        Command::Session(cmd) => session::run(cmd),
        Command::Reap(args) => reap::run(args),
        Command::Mcp => mcp::serve(),
        Command::Pool(cmd) => pool::run(cmd),
        Command::EgressProxy { namespace, listen } => {
            registry::egress_proxy(&namespace, listen).map(|()| ExitCode::SUCCESS)
        }
    };
    match result {
        Ok(code) => code,
        Err(err) => ui::report_error(&err),
    }
}
