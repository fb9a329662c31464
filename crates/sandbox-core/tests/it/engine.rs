//! The one-shot engine contract: exit code mapping, and an engine implemented over the trait
//! and driven through `DynEngine` the way the CLI picks one at run time.

use std::time::Duration;

use sandbox_core::{
    Capability, Captured, Classify, DynEngine, Engine, ErrorClass, Output, RunIo, RunOutcome,
    RunSpec, Stdin, Stream, exit_code,
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

impl Classify for EchoError {
    fn class(&self) -> ErrorClass {
        ErrorClass::Setup
    }
}

impl Engine for Echo {
    type Error = EchoError;
    type Prepared = usize;

    fn name(&self) -> &'static str {
        "echo"
    }

    fn capability(&self) -> Capability {
        Capability { pty: true, ..Capability::default() }
    }

    fn check(&self, spec: &RunSpec) -> Result<Vec<String>, EchoError> {
        if spec.args.is_empty() {
            return Err(EchoError(spec.script.display().to_string()));
        }
        Ok(Vec::new())
    }

    fn prepare(&self, spec: &RunSpec, status: &mut dyn FnMut(&str)) -> Result<usize, EchoError> {
        status("echoing");
        Ok(spec.args.len())
    }

    fn run_prepared(
        &self,
        spec: &RunSpec,
        prepared: &usize,
        io: RunIo<'_>,
    ) -> Result<RunOutcome, EchoError> {
        let Output::Sink(sink) = io.output else {
            return Ok(RunOutcome::exited(0, Duration::ZERO));
        };
        sink.write(Stream::Stdout, spec.args.join(" ").as_bytes());
        if let Stdin::Bytes(bytes) = io.stdin {
            sink.write(Stream::Stderr, &bytes);
        }
        Ok(RunOutcome::exited(5 + i32::try_from(*prepared).unwrap_or(0), Duration::from_millis(5)))
    }
}

/// Another engine's prepared environment is refused, not misread.
struct Other;

impl Engine for Other {
    type Error = EchoError;
    type Prepared = String;

    fn name(&self) -> &'static str {
        "other"
    }

    fn capability(&self) -> Capability {
        Capability::default()
    }

    fn check(&self, _: &RunSpec) -> Result<Vec<String>, EchoError> {
        Ok(Vec::new())
    }

    fn prepare(&self, _: &RunSpec, _: &mut dyn FnMut(&str)) -> Result<String, EchoError> {
        Ok(String::new())
    }

    fn run_prepared(&self, _: &RunSpec, _: &String, _: RunIo<'_>) -> Result<RunOutcome, EchoError> {
        Ok(RunOutcome::exited(0, Duration::ZERO))
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
        allow: None,
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
        published: None,
        started: None,
    };
    let outcome = engine.run_dyn(&spec(&["a", "b"]), io).expect("runs");
    assert_eq!(outcome.exit_code, 7);
    assert!(!outcome.timed_out);
    assert_eq!(captured.stdout_lossy(), "a b");
    assert_eq!(captured.stderr_lossy(), "in");
    assert_eq!(statuses, ["echoing"]);

    let error = engine.run_dyn(&spec(&[]), RunIo::inherit()).expect_err("no args");
    assert_eq!(error.to_string(), "echo cannot run `/ws/s.py`");
    assert_eq!(error.class(), ErrorClass::Setup);
    assert!(engine.capability().pty && !engine.capability().sessions);

    let other: Box<dyn DynEngine> = Box::new(Other);
    let prepared = engine.prepare_dyn(&spec(&["x"]), &mut |_| {}).expect("prepares");
    let foreign = other.run_prepared_dyn(&spec(&["x"]), &prepared, RunIo::inherit());
    assert_eq!(
        foreign.map_err(|e| e.to_string()),
        Err("other was handed an environment another engine prepared".to_owned())
    );
}
