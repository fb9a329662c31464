//! A Claude coding agent whose tools are one sandbox session's `Sandbox` methods:
//! `cargo run -p engine-k8s --example coding_agent -- [--engine bwrap|docker|podman|k8s]
//! [--max-turns N] [--model M] [--port P] TASK...` (the task from stdin when none is given).
//! Needs `ANTHROPIC_API_KEY`; `ANTHROPIC_BASE_URL` overrides the endpoint. The loop itself is
//! `agent.rs`, tested in `tests/coding_agent`.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod agent;
#[path = "../common/mod.rs"]
mod common;

use std::io::{IsTerminal as _, Read as _};

use anyhow::{Context as _, Result, bail};
use sandbox_core::{Executor, Sandbox, Secrets, SessionInfo};

use agent::{AgentConfig, Api, Event, Stop, Tools};

const DEFAULT_MODEL: &str = "claude-sonnet-4-5";

struct Args {
    engine: common::EngineChoice,
    model: String,
    max_turns: u32,
    port: u16,
    task: String,
}

fn take_value(args: &mut Vec<String>, flag: &str) -> Result<Option<String>> {
    let Some(at) = args.iter().position(|a| a == flag) else { return Ok(None) };
    if at + 1 >= args.len() {
        bail!("`{flag}` needs a value");
    }
    let value = args.remove(at + 1);
    args.remove(at);
    Ok(Some(value))
}

fn parse_args() -> Result<Args> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let engine = common::take_engine(&mut args)?;
    let model = take_value(&mut args, "--model")?
        .or_else(|| std::env::var("ANTHROPIC_MODEL").ok())
        .unwrap_or_else(|| DEFAULT_MODEL.to_owned());
    let max_turns = match take_value(&mut args, "--max-turns")? {
        Some(n) => n.parse().context("`--max-turns` takes a number")?,
        None => 30,
    };
    let port = match take_value(&mut args, "--port")? {
        Some(p) => p.parse().context("`--port` takes a port number")?,
        None => 8000,
    };
    let mut task = args.join(" ");
    if task.trim().is_empty() || task == "-" {
        if std::io::stdin().is_terminal() {
            eprintln!("task (end with Ctrl-D):");
        }
        task.clear();
        std::io::stdin().read_to_string(&mut task).context("reading the task from stdin")?;
    }
    if task.trim().is_empty() {
        bail!(
            "no task\nhint: pass it as arguments, e.g. `coding_agent -- \"serve a page with today's date\"`, or on stdin"
        );
    }
    Ok(Args { engine, model, max_turns, port, task })
}

struct Agent {
    api: Api,
    args: Args,
}

impl common::Body for Agent {
    type Output = ();

    fn run<S: Sandbox, X: Executor>(
        self,
        sandbox: &S,
        executor: &X,
        info: &SessionInfo,
        workspace: &str,
    ) -> Result<()> {
        let mut secrets = Secrets::new();
        if let Ok(key) = std::env::var("ANTHROPIC_API_KEY") {
            let _ = secrets.register(key.trim());
        }
        let ports = info.ports.iter().map(|(port, _)| *port).collect();
        let mut tools = Tools::new(workspace, ports, secrets);
        let config = AgentConfig::new(&self.args.model, self.args.max_turns, &tools);
        let outcome = agent::run_agent(
            &self.api,
            sandbox,
            executor,
            &mut tools,
            &self.args.task,
            &config,
            &mut print_event,
        )?;
        match &outcome.stop {
            Stop::EndTurn => eprintln!("done after {} turns", outcome.turns),
            Stop::MaxTurns => {
                eprintln!("stopped: the {} turns are spent (`--max-turns`)", outcome.turns)
            }
            Stop::Other(reason) => eprintln!("stopped: the model stopped with `{reason}`"),
        }
        if let Some(service) = tools.services.last() {
            println!("preview: {}", service.url);
            if std::io::stdin().is_terminal() {
                eprintln!("serving until Enter or Ctrl-C (then the session stops)");
                let mut line = String::new();
                let _ = std::io::stdin().read_line(&mut line);
            }
        }
        Ok(())
    }
}

fn print_event(event: Event<'_>) {
    match event {
        Event::Text(text) => println!("{text}"),
        Event::Call { name, input } => {
            let shown = agent::cap_text(&input.to_string(), 300);
            eprintln!("-> {name} {shown}");
        }
        Event::Result { name, result } => {
            let mark = if result.is_error { "error" } else { "ok" };
            eprintln!("<- {name} {mark}: {}", agent::cap_text(&result.content, 600));
        }
        Event::Retry(why) => eprintln!("retry: {why}"),
    }
}

fn main() -> std::process::ExitCode {
    let run = || -> Result<()> {
        let args = parse_args()?;
        // Before any session starts: a missing key is the likeliest first error.
        let api = Api::from_env()?;
        let port = args.port;
        common::with_session(args.engine, &[port], Agent { api, args })
    };
    common::exit(run())
}
