//! The one-shot engine contract: exit code mapping, and an engine implemented over the trait
//! and driven through `DynEngine` the way the CLI picks one at run time.

use std::time::Duration;

use sandbox_core::{
    Captured, DynEngine, Engine, Output, RunIo, RunOutcome, RunSpec, Stdin, Stream, exit_code,
};

#[test]
fn exit_code_table() {
    let cases = [
        (Some(0), None, 0),
        (Some(42), None, 42),
        (None, Some(15), 143),
        (None, Some(9), 137),
        (Some(3), Some(9), 3),
        (None, None, 1),
    ];
    for (code, signal, expected) in cases {
        assert_eq!(exit_code(code, signal), expected, "{code:?} {signal:?}");
    }
}

/// An engine that echoes the spec's arguments and stdin; it stands in for a real engine
/// only to check that the trait's shape works for callers (boxing, sinks, status lines).
struct Echo;

#[derive(Debug, thiserror::Error)]
#[error("echo cannot run `{0}`")]
struct EchoError(String);

impl Engine for Echo {
    type Error = EchoError;

    fn name(&self) -> &'static str {
        "echo"
    }

    fn run(&self, spec: &RunSpec, io: RunIo<'_>) -> Result<RunOutcome, EchoError> {
        if spec.args.is_empty() {
            return Err(EchoError(spec.script.display().to_string()));
        }
        if let Some(status) = io.status {
            status("echoing");
        }
        let Output::Sink(sink) = io.output else {
            return Ok(RunOutcome::exited(0, Duration::ZERO));
        };
        sink.write(Stream::Stdout, spec.args.join(" ").as_bytes());
        if let Stdin::Bytes(bytes) = io.stdin {
            sink.write(Stream::Stderr, &bytes);
        }
        Ok(RunOutcome::exited(7, Duration::from_millis(5)))
    }
}

fn spec(args: &[&str]) -> RunSpec {
    RunSpec {
        script: "/ws/s.py".into(),
        args: args.iter().map(|arg| (*arg).to_owned()).collect(),
        dependencies: Vec::new(),
        requires_python: None,
        mounts: Vec::new(),
        net: Default::default(),
        publish: Vec::new(),
        env: Vec::new(),
        timeout: None,
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        limits: sandbox_core::Limits::NONE,
        workspace: "/ws".into(),
    }
}

#[test]
fn dyn_engine_boxes_errors_and_streams() {
    let engines: Vec<Box<dyn DynEngine>> = vec![Box::new(Echo)];
    let engine = &engines[0];
    assert_eq!(engine.name(), "echo");

    let mut captured = Captured::default();
    let mut statuses = Vec::new();
    let mut status = |line: &str| statuses.push(line.to_owned());
    let io = RunIo {
        stdin: Stdin::Bytes(b"in".to_vec()),
        output: Output::Sink(&mut captured),
        status: Some(&mut status),
    };
    let outcome = engine.run_dyn(&spec(&["a", "b"]), io).expect("runs");
    assert_eq!(outcome.exit_code, 7);
    assert!(!outcome.timed_out);
    assert_eq!(captured.stdout_lossy(), "a b");
    assert_eq!(captured.stderr_lossy(), "in");
    assert_eq!(statuses, ["echoing"]);

    let error = engine.run_dyn(&spec(&[]), RunIo::inherit()).expect_err("no args");
    assert_eq!(error.to_string(), "echo cannot run `/ws/s.py`");
}
