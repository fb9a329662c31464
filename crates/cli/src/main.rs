//! `python-sandbox`: the command line entry point. Parses flags (clap lives only here), dispatches to
//! one module per command, and maps error classes to exit codes.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod args;
mod detect;
mod files;
mod meta;
#[cfg(test)]
mod plugin_check;
mod progress;
mod reap;
mod run;
mod session;
mod ui;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Meta(cmd) => meta::run(cmd),
        Command::Detect { json } => detect::detect(json),
        Command::Suggest => detect::suggest(),
        Command::Run(args) => run::run(args),
        Command::Session(cmd) => session::run(cmd),
        Command::Reap(args) => reap::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => ui::report_error(&err),
    }
}
