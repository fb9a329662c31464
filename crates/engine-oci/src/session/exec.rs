//! One command in a session: through the agent's socket when this host reaches it (plain or
//! interactive), else through the engine's API behind the activity wrapper.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::query_parameters::InspectContainerOptions;
use futures_util::StreamExt;
use sandbox_core::{ExecRequest, OutputSink, RunOutcome, Stream};
use tokio::io::AsyncWriteExt;

use crate::agent::{self, AgentAddr};
use crate::error::api;
use crate::error::{Error, Result};

use super::{Session, strings};

/// Wraps every exec: registers it as activity while it runs (shell builtins only), then
/// becomes the command. Its pid is the command's, so the watchdog counts the exec as activity
/// while that pid lives and drops the file once it is gone. Exec-ing, not waiting, is what
/// makes it answer as the agent does (the `Sandbox` contract holds both to it): no shell is
/// left to print `Terminated` or `Killed` into the command's stderr. `$1` is the working
/// directory: one that is not there is a command that cannot start (127, or 126 for a
/// non-directory), not the runtime's own failure message on stdout.
const EXEC_WRAPPER: &str = r#"cd -- "$1" || { [ -e "$1" ] && exit 126; exit 127; }
shift
[ -d /tmp/.active ] || mkdir -p /tmp/.active 2>/dev/null
: > /tmp/.active/$$ 2>/dev/null
: > /tmp/.last-activity 2>/dev/null
exec "$@""#;

impl Session {
    /// A connection to the session's agent, if it can be reached.
    pub(super) fn connect_agent(&self) -> Option<tokio::net::UnixStream> {
        #[cfg(test)]
        if let Some(path) = &self.test_socket {
            let stream = std::os::unix::net::UnixStream::connect(path).ok()?;
            stream.set_nonblocking(true).ok()?;
            return tokio::net::UnixStream::from_std(stream).ok();
        }
        self.agent.as_ref().and_then(AgentAddr::connect)
    }

    pub(super) fn ensure_running(&self) -> Result<()> {
        if self.stopped.load(Ordering::Relaxed) {
            return Err(sandbox_core::Error::Stopped { id: self.id.clone() }.into());
        }
        Ok(())
    }

    /// An interactive exec: through the agent only (see [`sandbox_core::InteractiveExec`]).
    pub(super) async fn exec_interactive_raw(
        &self,
        request: &ExecRequest,
        io: sandbox_core::Interactive,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome> {
        self.ensure_running()?;
        let cwd = request.cwd.clone().unwrap_or_else(|| self.workspace.clone());
        match self.connect_agent() {
            Some(stream) => {
                agent::exec_interactive(stream, request, &cwd, io, output, &self.id).await
            }
            // The API's exec has stdin and a tty too, but not the agent's kill on hang-up:
            // an interactive command left behind by a dropped CLI would run on unseen.
            None if self.docker.is_some() => Err(sandbox_core::Error::Unsupported {
                what: "an interactive exec (`-i`/`-t`)".to_owned(),
                by: format!("session `{}`, whose agent this host cannot reach", self.id),
                hint: "run it on the host that started the session, or start a new session there"
                    .to_owned(),
            }
            .into()),
            None => Err(Error::NoSession { id: self.id.clone() }),
        }
    }

    /// Runs one command through the activity wrapper, streaming to `output`.
    pub(super) async fn exec_raw(
        &self,
        request: &ExecRequest,
        output: &mut dyn OutputSink,
    ) -> Result<RunOutcome> {
        self.ensure_running()?;
        let cwd = request.cwd.clone().unwrap_or_else(|| self.workspace.clone());
        if let Some(stream) = self.connect_agent() {
            return agent::exec(stream, request, &cwd, output, &self.id).await;
        }
        let Some(docker) = &self.docker else {
            return Err(Error::NoSession { id: self.id.clone() });
        };
        let mut cmd = strings(&["sh", "-c", EXEC_WRAPPER, "exec", &cwd]);
        if let Some(timeout) = request.timeout {
            // Inside the container: exec has no kill endpoint, and this kills the whole command.
            let secs = format!("{:.3}", timeout.as_secs_f64());
            cmd.extend(strings(&["timeout", "-s", "KILL", &secs]));
        }
        cmd.extend(request.argv.iter().cloned());
        let options = CreateExecOptions::<String> {
            attach_stdin: Some(!request.stdin.is_empty()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            env: Some(request.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            cmd: Some(cmd),
            ..Default::default()
        };
        let exec = docker.create_exec(&self.container, options).await.map_err(|e| match e {
            bollard::errors::Error::DockerResponseServerError {
                status_code: 404 | 409, ..
            } => Error::NoSession { id: self.id.clone() },
            e => api(self.engine, "creating an exec")(e),
        })?;
        let start = Instant::now();
        let started = docker
            .start_exec(
                &exec.id,
                Some(StartExecOptions { detach: false, tty: false, output_capacity: None }),
            )
            .await
            .map_err(api(self.engine, "starting an exec"))?;
        let StartExecResults::Attached { output: mut stream, mut input } = started else {
            return Err(Error::Exec {
                what: "exec".to_owned(),
                message: "started detached".to_owned(),
            });
        };
        let feeder = (!request.stdin.is_empty()).then(|| {
            let bytes = request.stdin.clone();
            tokio::spawn(async move {
                let _ = input.write_all(&bytes).await;
                let _ = input.shutdown().await;
            })
        });
        while let Some(item) = stream.next().await {
            match item {
                Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                    output.write(Stream::Stdout, &message)
                }
                Ok(LogOutput::StdErr { message }) => output.write(Stream::Stderr, &message),
                Ok(LogOutput::StdIn { .. }) => {}
                Err(_) => break,
            }
            if output.closed() {
                // The API has no way to end an exec; the closed stream leaves the command
                // blocked on its full output pipe at worst (the agent path kills it).
                if let Some(feeder) = feeder {
                    feeder.abort();
                }
                return Ok(RunOutcome {
                    exit_code: sandbox_core::EXIT_CLOSED_PIPE,
                    duration: start.elapsed(),
                    timed_out: false,
                    warnings: Vec::new(),
                    net_refused: Vec::new(),
                });
            }
        }
        if let Some(feeder) = feeder {
            feeder.abort();
        }
        let mut exit_code = None;
        for _ in 0..200 {
            let inspect = docker
                .inspect_exec(&exec.id)
                .await
                .map_err(api(self.engine, "inspecting an exec"))?;
            if inspect.running != Some(true) {
                exit_code = inspect.exit_code;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let exit_code = i32::try_from(exit_code.unwrap_or(1)).unwrap_or(1);
        let duration = start.elapsed();
        let timed_out = request.timeout.is_some_and(|t| exit_code == 137 && duration >= t);
        Ok(RunOutcome {
            net_refused: Vec::new(),
            exit_code,
            duration,
            timed_out,
            warnings: Vec::new(),
        })
    }

    /// The API client; sessions opened with [`Session::local`] have none.
    pub(super) fn api(&self, what: &str) -> Result<&Docker> {
        self.docker.as_ref().ok_or_else(|| Error::Exec {
            what: what.to_owned(),
            message:
                "this session handle has no engine connection (open it with `OciEngine::session`)"
                    .to_owned(),
        })
    }

    /// Where the host reaches the session's `port`: asked of the engine when connected, else
    /// what `session start` recorded (a handle opened from its record has no connection).
    pub(super) async fn host_port(&self, port: u16) -> Result<Option<String>> {
        let Some(docker) = &self.docker else {
            return Ok(self.ports.iter().find(|(p, _)| *p == port).map(|(_, url)| url.clone()));
        };
        published_url(docker, self.engine, &self.container, port).await
    }
}

/// Where the host reaches `port` of `container`, as the engine published it; `None` when the
/// port is not published.
pub(super) async fn published_url(
    docker: &Docker,
    engine: &'static str,
    container: &str,
    port: u16,
) -> Result<Option<String>> {
    let inspect = docker
        .inspect_container(container, None::<InspectContainerOptions>)
        .await
        .map_err(api(engine, "inspecting the session"))?;
    let ports = inspect.network_settings.and_then(|n| n.ports).unwrap_or_default();
    let binding = ports.get(&format!("{port}/tcp")).cloned().flatten().and_then(|b| {
        b.into_iter().find(|b| b.host_port.as_deref().is_some_and(|p| !p.is_empty()))
    });
    Ok(binding.map(|b| {
        let ip = b
            .host_ip
            .filter(|ip| !ip.is_empty() && ip != "0.0.0.0")
            .unwrap_or_else(|| "127.0.0.1".to_owned());
        let ip = if ip.contains(':') { format!("[{ip}]") } else { ip };
        format!("http://{ip}:{}", b.host_port.unwrap_or_default())
    }))
}
