//! The command-line grammar. Kept apart from the commands so that tests (and the plugin check) can
//! parse command lines without running anything.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// Run self-contained Python (PEP 723) scripts in throwaway sandboxes.
#[derive(Debug, Parser)]
#[command(name = "python-sandbox", version, propagate_version = true, max_term_width = 100)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Check and edit a script's inline `# /// script` metadata.
    #[command(subcommand)]
    Meta(MetaCmd),
}

#[derive(Debug, Subcommand)]
pub(crate) enum MetaCmd {
    /// Report problems in the metadata blocks of scripts (exit 1 when any has an error).
    Check {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Print diagnostics as JSON (one array per run).
        #[arg(long)]
        json: bool,
    },
    /// Print a script's metadata as one JSON object.
    Show {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Print JSON (the only format).
        #[arg(long)]
        json: bool,
    },
    /// Add dependencies (PEP 508 requirements) to a script.
    Add {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        #[arg(required = true, value_name = "REQ")]
        requirements: Vec<String>,
    },
    /// Remove dependencies from a script, by package name.
    Remove {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        #[arg(required = true, value_name = "NAME")]
        names: Vec<String>,
    },
    /// Set `requires-python` or a `tool.python-sandbox` key (`net`, `mounts`, `publish`, `env`, …).
    Set {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// `requires-python`, or a `tool.python-sandbox` key such as `net` or `tool.python-sandbox.net`.
        #[arg(value_name = "KEY")]
        key: String,
        /// A TOML value (`off`, `"off"`, `[8000, 8001]`); a bare word is taken as a string.
        #[arg(value_name = "VALUE", allow_hyphen_values = true)]
        value: String,
    },
    /// Remove a `tool.python-sandbox` key (or `requires-python`).
    Unset {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        #[arg(value_name = "KEY")]
        key: String,
    },
    /// Add an empty `# /// script` block to a script that has none.
    Init {
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
}

#[allow(dead_code)]
#[derive(Debug, Args)]
pub(crate) struct Placeholder;
