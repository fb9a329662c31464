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
    /// Run a PEP 723 script in a throwaway sandbox; the current directory is the workspace.
    Run(RunArgs),
    /// Report which isolation engines (bwrap, docker, podman) work here (exit 3 when none does).
    Detect {
        /// Print `{"selected": NAME|null, "engines": [...]}`.
        #[arg(long)]
        json: bool,
    },
    /// Explain how to get a working isolation engine on this machine.
    Suggest,
    /// Check and edit a script's inline `# /// script` metadata.
    #[command(subcommand)]
    Meta(MetaCmd),
}

/// Flags of `run`. Every flag beats the script's inline `[tool.python-sandbox]` table.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The isolation engine; `auto` takes the first that works of bwrap, docker, podman.
    #[arg(long, value_enum, default_value_t = EngineChoice::Auto)]
    pub(crate) engine: EngineChoice,
    /// Network access at run time (dependencies install with network either way).
    #[arg(long, value_enum)]
    pub(crate) net: Option<NetFlag>,
    /// Mount a host path at its real path: `PATH`, `PATH:ro` or `PATH:rw` (repeatable).
    #[arg(long = "mount", value_name = "PATH[:ro|:rw]")]
    pub(crate) mounts: Vec<String>,
    /// Publish a port of the sandbox on the host, `PORT` or `ADDR:PORT` (repeatable; needs net on).
    #[arg(long = "publish", value_name = "PORT")]
    pub(crate) publish: Vec<String>,
    /// Pass an environment variable: `NAME` copies the host's value, `NAME=VALUE` sets it (repeatable).
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    pub(crate) env: Vec<String>,
    /// Stop the whole run after this many seconds (exit code 124).
    #[arg(long, value_name = "SECONDS")]
    pub(crate) timeout: Option<f64>,
    /// Allow mounts that cross a boundary (secrets, `$HOME`, read-write outside the workspace).
    #[arg(long)]
    pub(crate) approve: bool,
    /// Print a JSON summary on stdout (the script's output goes to stderr).
    #[arg(long)]
    pub(crate) json: bool,
    /// The PEP 723 script.
    #[arg(value_name = "SCRIPT")]
    pub(crate) script: PathBuf,
    /// Arguments for the script, after `--`.
    #[arg(last = true, value_name = "ARGS")]
    pub(crate) args: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum EngineChoice {
    Auto,
    Bwrap,
    Docker,
    Podman,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum NetFlag {
    On,
    Off,
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
