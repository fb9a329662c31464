//! The command-line grammar. Kept apart from the commands so that tests (and the plugin check) can
//! parse command lines without running anything.

use std::path::PathBuf;

use clap::{Args, FromArgMatches, Parser, Subcommand};

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
    // The engines are named by the registry, the one list of them.
    #[command(
        about = "Report which isolation engines work here (exit 3 when none does)",
        long_about = crate::registry::detect_about()
    )]
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
    #[command(subcommand, about = crate::registry::session_about())]
    Session(SessionCmd),
    /// Remove expired and orphaned python-sandbox containers, and environments nobody used for a
    /// while, now.
    Reap(ReapArgs),
    /// Serve the Model Context Protocol on stdin/stdout: typed tools for MCP clients (run_script,
    /// sessions, files, services, detect). Boundary crossings still need the user's approval.
    Mcp,
    /// The warm pool of ready sandboxes `session start` claims from (`pool = N` in the user
    /// config's `[engine.docker]`, `[engine.podman]` or `[engine.k8s]`).
    #[command(subcommand)]
    Pool(PoolCmd),
    /// A cluster's egress proxy (deploy/egress): holds each sandbox pod with a list of hosts
    /// (`--net HOST,...`) to its list, by name. Runs in the cluster, not on a user's machine.
    #[command(hide = true)]
    EgressProxy {
        /// The namespace whose sandbox pods it serves.
        #[arg(long, value_name = "NS", default_value = "python-sandbox")]
        namespace: String,
        /// The address to listen on.
        #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:3128")]
        listen: std::net::SocketAddr,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum PoolCmd {
    /// List the unclaimed members of each engine's pool.
    List {
        /// Print one JSON array.
        #[arg(long)]
        json: bool,
        /// Only this engine.
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(crate::registry::session_choices()))]
        engine: Option<String>,
        /// The namespace on a cluster (k8s).
        #[arg(long, value_name = "NS")]
        namespace: Option<String>,
    },
    /// Remove every unclaimed member of an engine's pool.
    Drain {
        /// The engine.
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(crate::registry::session_choices()))]
        engine: String,
        /// The namespace on a cluster (k8s).
        #[arg(long, value_name = "NS")]
        namespace: Option<String>,
    },
    /// Keep each pooled engine's pool full: start missing members, replace those that died or
    /// passed half their TTL, remove those whose key no longer matches (another image or
    /// other flags). It keeps what `session start` with the same flags, in the same directory,
    /// claims. One line per action on stderr. Ctrl-C or SIGTERM stops the loop and leaves the
    /// members: they are the pool (`pool drain` removes them, their TTL ends them).
    Serve(Box<PoolServeArgs>),
    /// Internal: the detached refill `session start` leaves behind (the session's config as
    /// JSON on stdin).
    #[command(hide = true)]
    Fill {
        #[arg(long)]
        engine: String,
        #[arg(long)]
        size: usize,
        #[arg(long)]
        image: Option<String>,
        #[arg(long)]
        namespace: Option<String>,
    },
}

/// `pool serve`: the loop's flags, and those of `session start` that shape a session.
#[derive(Debug, Args)]
pub(crate) struct PoolServeArgs {
    /// Only this engine's pool (default: every engine with `pool = N` in the user config).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(crate::registry::session_choices()))]
    pub(crate) engine: Option<String>,
    /// One pass, then exit (non-zero when an action failed).
    #[arg(long)]
    pub(crate) once: bool,
    /// The time between passes: `5s`, `1m`, or plain seconds.
    #[arg(long, value_name = "DURATION", default_value = "5s")]
    pub(crate) interval: String,
    /// Also print one JSON object per action (and per failed pass) on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) shape: SessionShape,
}

/// Container flags shared by `run` and `session start` (docker, podman and k8s).
#[derive(Debug, Clone, Args)]
pub(crate) struct ContainerArgs {
    /// The runtime image (default `python-sandbox-runtime:latest`, built by `cargo xtask image`;
    /// on k8s its versioned tag, or the user config's `image`).
    #[arg(long, value_name = "IMAGE")]
    pub(crate) image: Option<String>,
}

/// Resource limits shared by `run` and `session start`, on every engine: each one asked for is
/// enforced or the run is refused with a hint; one left out gets its default where the engine
/// can hold it; `none` lifts it (see `python-sandbox detect` for what holds each one here).
#[derive(Debug, Clone, Args)]
pub(crate) struct LimitArgs {
    /// Memory limit, e.g. `512m`, `2g`, or `none` (default 2g).
    #[arg(long, value_name = "SIZE")]
    pub(crate) memory: Option<String>,
    /// CPU limit, e.g. `0.5`, `2`, or `none` (default 2).
    #[arg(long, value_name = "CPUS", allow_hyphen_values = true)]
    pub(crate) cpus: Option<String>,
    /// Maximum number of processes and threads, or `none` (default 512).
    #[arg(long = "pids-limit", value_name = "N", allow_hyphen_values = true)]
    pub(crate) pids_limit: Option<String>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum SessionCmd {
    /// Start a session; prints its id on the last line.
    Start(SessionStartArgs),
    /// Run a PEP 723 script in a session (dependencies install into the session and stay).
    Run {
        /// The session id.
        #[arg(value_name = "ID")]
        id: String,
        /// The PEP 723 script.
        #[arg(value_name = "SCRIPT")]
        script: PathBuf,
        /// Arguments for the script, after `--`.
        #[arg(last = true, value_name = "ARGS")]
        args: Vec<String>,
        /// Pass an environment variable: `NAME` copies the host's value, `NAME=VALUE` sets it
        /// (repeatable; beats the script's own `env`).
        #[arg(long = "env", value_name = "NAME[=VALUE]")]
        env: Vec<String>,
        /// Stop the script after this many seconds (exit code 124; beats its own `timeout`).
        #[arg(long, value_name = "SECONDS")]
        timeout: Option<String>,
        /// The engine the session runs on (default: whichever has it).
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(crate::registry::session_choices()))]
        engine: Option<String>,
        /// The namespace of the session on a cluster (k8s; default: the user config's, else
        /// `python-sandbox`).
        #[arg(long, value_name = "NS")]
        namespace: Option<String>,
    },
    /// Run a command in a session: `session exec ID -- CMD...`.
    Exec {
        /// The session id.
        #[arg(value_name = "ID")]
        id: String,
        /// The command and its arguments.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
        /// The engine the session runs on (default: whichever has it).
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(crate::registry::session_choices()))]
        engine: Option<String>,
        /// The namespace of the session on a cluster (k8s; default: the user config's, else
        /// `python-sandbox`).
        #[arg(long, value_name = "NS")]
        namespace: Option<String>,
        /// Stream this terminal's stdin into the command.
        #[arg(short = 'i', long)]
        interactive: bool,
        /// Run the command on a pty of this terminal's size (with `-i`: keys go to it raw).
        #[arg(short = 't', long)]
        tty: bool,
    },
    /// Stop and remove a session.
    Stop {
        /// The session id.
        #[arg(value_name = "ID")]
        id: String,
        /// The engine the session runs on (default: whichever has it).
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(crate::registry::session_choices()))]
        engine: Option<String>,
        /// The namespace of the session on a cluster (k8s; default: the user config's, else
        /// `python-sandbox`).
        #[arg(long, value_name = "NS")]
        namespace: Option<String>,
    },
    /// List sessions.
    List {
        /// Print a JSON array.
        #[arg(long)]
        json: bool,
        /// Only this engine (default: every engine that answers, a cluster only when the user
        /// config has `[engine.k8s]`).
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(crate::registry::session_choices()))]
        engine: Option<String>,
        /// The namespace of the session on a cluster (k8s; default: the user config's, else
        /// `python-sandbox`).
        #[arg(long, value_name = "NS")]
        namespace: Option<String>,
    },
}

#[derive(Debug, Args)]
pub(crate) struct SessionStartArgs {
    /// The engine (default: the first that works of the `run --engine auto` ladder, which
    /// never picks a cluster: `--engine k8s` does).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(crate::registry::session_choices()))]
    pub(crate) engine: Option<String>,
    /// Print `{"id", "engine", "sandbox", "urls"}` instead of the bare id (an error as JSON too).
    #[arg(long)]
    pub(crate) json: bool,
    /// Install a dependency (a PEP 508 requirement: `numpy`, `rich>=13`) into the session's
    /// environment before it is handed out (repeatable; with `--net off` too: it installs
    /// with a network apart from the workspace and is copied in).
    #[arg(long = "with", value_name = "DEP")]
    pub(crate) with: Vec<String>,
    #[command(flatten)]
    pub(crate) shape: SessionShape,
}

/// What a session is started with, shared by `session start` and `pool serve` (which keeps
/// ready what `session start` with the same flags claims).
#[derive(Debug, Clone, Args)]
pub(crate) struct SessionShape {
    /// The namespace on a cluster (k8s; beats the user config's `namespace`; default
    /// `python-sandbox`).
    #[arg(long, value_name = "NS")]
    pub(crate) namespace: Option<String>,
    /// Network access of the session: `on` (default: dependencies install inside it), `off`,
    /// or only the listed hosts: `pypi.org,*.example.com:443,10.1.2.3:5432`.
    #[arg(long, value_name = "on|off|HOST,...")]
    pub(crate) net: Option<NetFlag>,
    /// Publish a port of the session on the same host port of 127.0.0.1: `PORT`, `0:PORT` (any
    /// free host port), `HOSTPORT:PORT`, each optionally after `ADDR:` (repeatable; needs net on).
    #[arg(long = "publish", value_name = "PORT")]
    pub(crate) publish: Vec<String>,
    /// Mount a host path at its real path: `PATH`, `PATH:ro` or `PATH:rw` (repeatable).
    #[arg(long = "mount", value_name = "PATH[:ro|:rw]")]
    pub(crate) mounts: Vec<String>,
    /// Pass an environment variable: `NAME` copies the host's value, `NAME=VALUE` sets it (repeatable).
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    pub(crate) env: Vec<String>,
    /// Size cap of each tmpfs in the session (`/tmp`, home): `512m`, `2g` (default 1g).
    #[arg(long, value_name = "SIZE")]
    pub(crate) tmpfs_size: Option<String>,
    /// Remove the session after this long without activity: `90s`, `30m`, `2h` (default 30m).
    #[arg(long, value_name = "DURATION", default_value = "30m")]
    pub(crate) ttl: String,
    /// Allow mounts that cross a boundary (secrets, `$HOME`, read-write outside the workspace).
    #[arg(long)]
    pub(crate) approve: bool,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
    #[command(flatten)]
    pub(crate) container: ContainerArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ReapArgs {
    /// Only report what would be removed.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Print a JSON array of what was (or would be) removed.
    #[arg(long)]
    pub(crate) json: bool,
    /// Only this engine (default: every engine that answers, a cluster only when the user
    /// config has `[engine.k8s]`).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(crate::registry::names()))]
    pub(crate) engine: Option<String>,
    /// The namespace on a cluster (k8s; default: the user config's, else `python-sandbox`).
    #[arg(long, value_name = "NS")]
    pub(crate) namespace: Option<String>,
    /// Also remove prepared environments unused for longer than this: `30d`, `12h`, `90m`, or `0`
    /// for every environment not in use.
    #[arg(long, value_name = "AGE", default_value = "30d")]
    pub(crate) env_max_age: String,
    /// Then, while the cache of native and bwrap is larger than this (`5GiB`, `500m`, `0`),
    /// remove its least recently used environments and packages (default: the user config's
    /// `[cache] max-size`, else 5GiB).
    #[arg(long, value_name = "SIZE")]
    pub(crate) max_size: Option<String>,
}

/// Flags of `run`. Every flag beats the script's inline `[tool.python-sandbox]` table.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[arg(
        long,
        default_value = "auto",
        help = crate::registry::run_engine_help(),
        value_parser = clap::builder::PossibleValuesParser::new(crate::registry::choices())
    )]
    pub(crate) engine: String,
    /// Network access at run time: `on`, `off`, or only the listed hosts:
    /// `pypi.org,*.example.com:443,10.1.2.3:5432` (dependencies install with their own network
    /// either way).
    #[arg(long, value_name = "on|off|HOST,...")]
    pub(crate) net: Option<NetFlag>,
    /// Mount a host path at its real path: `PATH`, `PATH:ro` or `PATH:rw` (repeatable); on
    /// `--engine k8s`, `pvc:NAME:/path[:ro]` mounts a PersistentVolumeClaim named `psbx-data-*`.
    #[arg(long = "mount", value_name = "PATH[:ro|:rw]")]
    pub(crate) mounts: Vec<String>,
    /// Publish a port of the sandbox on the same host port of 127.0.0.1: `PORT`, `0:PORT` (any
    /// free host port), `HOSTPORT:PORT`, each optionally after `ADDR:` (repeatable; needs net on).
    #[arg(long = "publish", value_name = "PORT")]
    pub(crate) publish: Vec<String>,
    /// Pass an environment variable: `NAME` copies the host's value, `NAME=VALUE` sets it (repeatable).
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    pub(crate) env: Vec<String>,
    /// Stop the whole run after this many seconds (exit code 124).
    #[arg(long, value_name = "SECONDS", allow_hyphen_values = true)]
    pub(crate) timeout: Option<String>,
    /// Size cap of each tmpfs in the sandbox (`/tmp`, home): `512m`, `2g` (default 1g).
    #[arg(long, value_name = "SIZE")]
    pub(crate) tmpfs_size: Option<String>,
    /// Allow mounts that cross a boundary (secrets, `$HOME`, read-write outside the workspace).
    #[arg(long)]
    pub(crate) approve: bool,
    /// Print a JSON summary on stdout (the script's output goes to stderr).
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
    #[command(flatten)]
    pub(crate) container: ContainerArgs,
    /// The PEP 723 script: a file, a pipe such as `<(...)`, or `-` to read it from stdin.
    #[arg(value_name = "SCRIPT")]
    pub(crate) script: PathBuf,
    /// Arguments for the script, after `--`.
    #[arg(last = true, value_name = "ARGS")]
    pub(crate) args: Vec<String>,
}

/// A `run` command line parsed against `run`'s grammar alone: building clap's tree of every
/// command and flag is most of the time a warm run spends before it opens an engine. Only a
/// line that parses comes back (as the whole grammar would parse it); anything else (an error,
/// `--help`, `--version`, another command) is `None`, for [`Cli`] to parse and answer.
pub(crate) fn parse_run(argv: &[std::ffi::OsString]) -> Option<Cli> {
    if argv.get(1).is_none_or(|word| word != "run") {
        return None;
    }
    let grammar = clap::Command::new("python-sandbox")
        .subcommand(RunArgs::augment_args(clap::Command::new("run")));
    let matches = grammar.try_get_matches_from(argv).ok()?;
    let (_, run) = matches.subcommand()?;
    let args = RunArgs::from_arg_matches(run).ok()?;
    Some(Cli { command: Command::Run(args) })
}

/// Whether a command line that did not parse asked for `run --json` (a `--json` before any `--`),
/// so that even a flag error answers with the one JSON object tools wait for.
pub(crate) fn wants_run_json(args: &[std::ffi::OsString]) -> bool {
    let mut words = args.iter().skip(1);
    words.next().is_some_and(|w| w == "run")
        && words.take_while(|w| *w != "--").any(|w| w == "--json" || w == "--json=true")
}

/// `--net on`, `--net off`, or `--net HOST[,HOST...]` (an allowlist).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NetFlag {
    On,
    Off,
    Allow(sandbox_core::Allow),
}

impl std::str::FromStr for NetFlag {
    type Err = sandbox_core::Error;

    fn from_str(text: &str) -> Result<NetFlag, sandbox_core::Error> {
        match text {
            "on" => Ok(NetFlag::On),
            "off" => Ok(NetFlag::Off),
            list => sandbox_core::Allow::parse(list.split(',').map(str::trim)).map(NetFlag::Allow),
        }
    }
}

impl NetFlag {
    /// The layer's `net` and `allow`.
    pub(crate) fn layer(&self) -> (Option<sandbox_core::Net>, Option<sandbox_core::Allow>) {
        match self {
            NetFlag::On => (Some(sandbox_core::Net::On), None),
            NetFlag::Off => (Some(sandbox_core::Net::Off), None),
            NetFlag::Allow(allow) => (Some(sandbox_core::Net::On), Some(allow.clone())),
        }
    }
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

impl LimitArgs {
    /// The flags as the command line's limits layer; checked by `sandbox_core`'s one parser,
    /// so a flag and an inline key are refused with the same words.
    pub(crate) fn layer(&self) -> Result<sandbox_core::LayerLimits, sandbox_core::Error> {
        Ok(sandbox_core::LayerLimits {
            memory: self.memory.as_deref().map(sandbox_core::parse_memory_setting).transpose()?,
            cpus: self.cpus.as_deref().map(sandbox_core::parse_cpus_setting).transpose()?,
            pids: self.pids_limit.as_deref().map(sandbox_core::parse_pids_setting).transpose()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{Cli, parse_run};

    /// `run`'s own grammar agrees with the whole one: a line it parses parses the same way
    /// there, and every `run` line the whole grammar accepts, it accepts too.
    #[test]
    fn run_alone_parses_as_the_whole_grammar_does() {
        let lines = [
            "run x.py",
            "run --engine native --net off x.py",
            "run --net on --mount /data:ro --mount ./out:rw --env A --env B=1 x.py -- -v --net off",
            "run --publish 8000 --publish 0:9000 --timeout 1.5 --tmpfs-size 512m x.py",
            "run --memory 512m --pids-limit 64 --cpus 1.5 --approve --json x.py",
            "run --engine docker --image python:3.12-slim x.py",
            "run --timeout -1 x.py",
            "run - -- a b",
            "run x.py -- --help",
            // Not run's, or not valid: the whole grammar answers those.
            "run",
            "run --help",
            "run --version",
            "--version",
            "run --engine nope x.py",
            "run --net maybe x.py",
            "run --nett off x.py",
            "run x.py y.py",
            "detect --json",
            "session list",
        ];
        for line in lines {
            let argv: Vec<std::ffi::OsString> =
                std::iter::once("python-sandbox").chain(line.split(' ')).map(Into::into).collect();
            let whole = Cli::try_parse_from(&argv);
            let whole_run = matches!(&whole, Ok(Cli { command: super::Command::Run(_) }));
            match parse_run(&argv) {
                Some(alone) => assert_eq!(
                    format!("{alone:?}"),
                    format!("{:?}", whole.expect(line)),
                    "`{line}` parses differently"
                ),
                None => assert!(!whole_run, "`{line}` parses as a run, but not alone"),
            }
        }
    }
}
