//! The exec tier: `PodExec` against a local WebSocket server speaking `channel.k8s.io` v4 and
//! v5 ([`kubelet`]) that runs real local processes, with the real session agent
//! (`sandbox_core::agent::AGENT_PY`) listening on a socket of its own, so the relay, the
//! agent's framed protocol and the channel framing are all the production code.

#![allow(clippy::print_stdout)]

mod agent;
mod forward;
mod kubelet;
mod sandbox;
mod sync;

use std::time::{Duration, Instant};

use agent::{Agent, OWN_VAR, PYTHON};
use engine_k8s::channel::Protocol;
use engine_k8s::{Error, PodExec};
use kubelet::Kubelet;
use sandbox_core::{Captured, ExecRequest, Input, Interactive, OutputSink, Stream};

pub(crate) const V4: &[Protocol] = &[Protocol::V4];
pub(crate) const V5: &[Protocol] = &[Protocol::V5, Protocol::V4];

pub(crate) fn request(argv: &[&str]) -> ExecRequest {
    ExecRequest::new(argv)
}

pub(crate) async fn run(exec: &PodExec, request: &ExecRequest) -> (i32, Captured) {
    let mut out = Captured::default();
    let outcome = exec.exec(request, &mut out).await.expect("exec");
    (outcome.exit_code, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_stay_apart_and_exit_codes_come_through_on_v4_and_v5() {
    let Some(agent) = Agent::start() else { return };
    for protocol in [V4, V5] {
        let kubelet = Kubelet::start(protocol).await;
        let exec = agent.exec(&kubelet);
        let (code, out) =
            run(&exec, &request(&["sh", "-c", "echo out; echo err >&2; exit 7"])).await;
        assert_eq!(
            (code, out.stdout_lossy(), out.stderr_lossy()),
            (7, "out\n".into(), "err\n".into())
        );
        let (code, _) = run(&exec, &request(&["true"])).await;
        assert_eq!(code, 0);
        let (code, out) = run(&exec, &request(&["no-such-program-here"])).await;
        assert_eq!(code, 127, "{}", out.stderr_lossy());
        assert!(out.stderr_lossy().starts_with("no-such-program-here: "), "{}", out.stderr_lossy());
        let (code, _) = run(&exec, &request(&["sh", "-c", "kill -TERM $$"])).await;
        assert_eq!(code, 128 + 15, "a signal death is 128 + N");
    }
}

/// The agent took the wall itself (as the pod starts it): a command it runs, and that
/// command's children, get `EPERM` from the refused families, whatever the runtime's profile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_run_behind_the_agents_wall() {
    let Some(agent) = Agent::start() else { return };
    let kubelet = Kubelet::start(V5).await;
    let exec = agent.exec(&kubelet);
    let probe = "import ctypes, subprocess, sys\n\
        libc = ctypes.CDLL(None, use_errno=True)\n\
        rc = libc.unshare(0x10000000)\n\
        print('unshare', rc, ctypes.get_errno())\n\
        sys.stdout.flush()\n\
        subprocess.run([sys.executable, '-c', 'import ctypes; l = ctypes.CDLL(None, use_errno=True); print(\"child\", l.setns(0, 0), ctypes.get_errno())'])";
    let (code, out) = run(&exec, &request(&[PYTHON, "-c", probe])).await;
    assert_eq!(code, 0, "{}", out.stderr_lossy());
    assert_eq!(
        out.stdout_lossy(),
        "unshare -1 1\nchild -1 1\n",
        "EPERM in the command and its child"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_reaches_the_command_and_ends_on_v4_and_v5() {
    let Some(agent) = Agent::start() else { return };
    for protocol in [V4, V5] {
        let kubelet = Kubelet::start(protocol).await;
        let exec = agent.exec(&kubelet);
        let mut cat = request(&["sh", "-c", "cat; echo; echo eof-seen"]);
        cat.stdin = b"hello\x00binary\xff".to_vec();
        cat.timeout = Some(Duration::from_secs(20));
        let (code, out) = run(&exec, &cat).await;
        assert_eq!(code, 0);
        assert_eq!(out.stdout, b"hello\x00binary\xff\neof-seen\n", "{protocol:?}");
        // No stdin at all is an immediate end of input too.
        let (code, out) = run(&exec, &request(&["wc", "-c"])).await;
        assert_eq!((code, out.stdout_lossy().trim().to_owned()), (0, "0".to_owned()));
    }
}

/// A sink that counts instead of keeping.
#[derive(Default)]
pub(crate) struct Count {
    pub(crate) stdout: usize,
    pub(crate) stderr: usize,
    pub(crate) close_after: Option<usize>,
}

impl OutputSink for Count {
    fn write(&mut self, stream: Stream, chunk: &[u8]) {
        match stream {
            Stream::Stdout => self.stdout += chunk.len(),
            Stream::Stderr => self.stderr += chunk.len(),
        }
    }

    fn closed(&self) -> bool {
        self.close_after.is_some_and(|n| self.stdout >= n)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_mib_out_while_sixteen_mib_go_in_without_deadlock() {
    let Some(agent) = Agent::start() else { return };
    let kubelet = Kubelet::start(V4).await;
    let exec = agent.exec(&kubelet);
    let mut big =
        request(&["sh", "-c", "head -c 52428800 /dev/zero; cat; head -c 1000 /dev/zero >&2"]);
    big.stdin = vec![b'x'; 16 << 20];
    big.timeout = Some(Duration::from_secs(120));
    let mut count = Count::default();
    let started = Instant::now();
    let outcome = exec.exec(&big, &mut count).await.expect("exec");
    assert_eq!(outcome.exit_code, 0);
    assert_eq!((count.stdout, count.stderr), ((50 << 20) + (16 << 20), 1000));
    println!("66 MiB through the relay in {:?}", started.elapsed());
    // `cat` echoing as it reads: output is read while input is still being written.
    let mut echo = request(&["cat"]);
    echo.stdin = vec![b'y'; 16 << 20];
    let mut count = Count::default();
    exec.exec(&echo, &mut count).await.expect("exec");
    assert_eq!(count.stdout, 16 << 20);
}

pub(crate) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
            !matches!(state, Some(Some('Z' | 'X')))
        })
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_kills_the_process_tree_not_the_agent() {
    let Some(agent) = Agent::start() else { return };
    let kubelet = Kubelet::start(V4).await;
    let exec = agent.exec(&kubelet);
    let mut slow =
        request(&["sh", "-c", "sleep 300 & echo $!; sh -c 'sleep 301 & echo $!; wait' & wait"]);
    slow.timeout = Some(Duration::from_secs(1));
    let mut out = Captured::default();
    let started = Instant::now();
    let outcome = exec.exec(&slow, &mut out).await.expect("exec");
    assert!(outcome.timed_out, "{outcome:?}");
    assert_eq!(outcome.exit_code, 128 + 9);
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    let pids: Vec<u32> =
        out.stdout_lossy().split_whitespace().filter_map(|p| p.parse().ok()).collect();
    assert_eq!(pids.len(), 2, "{}", out.stdout_lossy());
    let deadline = Instant::now() + Duration::from_secs(3);
    while pids.iter().any(|pid| alive(*pid)) {
        assert!(Instant::now() < deadline, "a child outlived the timeout: {pids:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, _) = run(&exec, &request(&["true"])).await;
    assert_eq!(code, 0, "the agent still serves");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_and_cwd_arrive_and_secrets_stay_off_the_wire() {
    let Some(agent) = Agent::start() else { return };
    let kubelet = Kubelet::start(V4).await;
    let exec = agent.exec(&kubelet).cwd("/tmp");
    let secret = "hunter2-s3cr3t-value-$(id)-'\"";
    let mut show = request(&["sh", "-c", r#"pwd; printf '%s|%s' "$API_TOKEN" "$PLAIN""#]);
    show.env = vec![("API_TOKEN".into(), secret.into()), ("PLAIN".into(), "a b;c".into())];
    let (code, out) = run(&exec, &show).await;
    assert_eq!(code, 0, "{}", out.stderr_lossy());
    assert_eq!(out.stdout_lossy(), format!("/tmp\n{secret}|a b;c"));
    show.cwd = Some("/".into());
    let (_, out) = run(&exec, &show).await;
    assert!(out.stdout_lossy().starts_with("/\n"), "{}", out.stdout_lossy());
    let uris = kubelet.uris.lock().expect("lock").clone();
    assert_eq!(uris.len(), 2);
    for uri in uris {
        for leak in ["hunter2", "s3cr3t", "API_TOKEN", "PLAIN"] {
            assert!(!uri.contains(leak), "{leak} in the exec URL {uri}");
        }
        assert!(uri.starts_with("/api/v1/namespaces/python-sandbox/pods/psbx-test/exec?"), "{uri}");
    }
}

/// As the pod starts it, the agent gives a command exactly its request's env: nothing of its
/// own (in a pod the kubelet's `KUBERNETES_*` and the pod's name as `HOSTNAME`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_sees_exactly_its_requests_env() {
    let Some(agent) = Agent::start() else { return };
    let kubelet = Kubelet::start(V5).await;
    let exec = agent.exec(&kubelet);
    let mut show = request(&["/usr/bin/env"]);
    show.env = vec![("ONLY".into(), "this".into()), ("HOSTNAME".into(), "python-sandbox".into())];
    let (code, out) = run(&exec, &show).await;
    assert_eq!(code, 0, "{}", out.stderr_lossy());
    let mut seen: Vec<String> = out.stdout_lossy().lines().map(str::to_owned).collect();
    seen.sort();
    assert_eq!(seen, ["HOSTNAME=python-sandbox", "ONLY=this"], "not {OWN_VAR} or anything else");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactive_stdin_streams_and_ends_in_band() {
    let Some(agent) = Agent::start() else { return };
    let kubelet = Kubelet::start(V4).await;
    let exec = agent.exec(&kubelet);
    let (input, io) = Interactive::channel(None);
    let feeder = std::thread::spawn(move || {
        for i in 0..50 {
            let _ = input.send(Input::Stdin(format!("line {i}\n").into_bytes()));
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = input.send(Input::Eof);
    });
    let mut out = Captured::default();
    let mut cat = request(&["sh", "-c", "wc -l; echo done"]);
    cat.timeout = Some(Duration::from_secs(20));
    let outcome = exec.exec_interactive(&cat, io, &mut out).await.expect("exec");
    feeder.join().expect("feeder");
    assert_eq!((outcome.exit_code, out.stdout_lossy()), (0, "50\ndone\n".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_went_away_stops_the_command() {
    let Some(agent) = Agent::start() else { return };
    let kubelet = Kubelet::start(V5).await;
    let exec = agent.exec(&kubelet);
    let mut count = Count { close_after: Some(1 << 20), ..Count::default() };
    let started = Instant::now();
    let outcome = exec.exec(&request(&["yes"]), &mut count).await.expect("exec");
    assert_eq!(outcome.exit_code, sandbox_core::EXIT_CLOSED_PIPE);
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_without_its_agent_is_named_with_a_hint() {
    let kubelet = Kubelet::start(V5).await;
    let exec = PodExec::new(kubelet.client(), "ns", "lost").agent_socket("/nonexistent/agent.sock");
    let Err(error) = exec.exec(&request(&["true"]), &mut Captured::default()).await else {
        panic!("no agent, no exec")
    };
    assert!(matches!(error, Error::NoAgent { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("/nonexistent/agent.sock") && message.contains("hint:"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_exec_closes_stdin_on_v5_and_refuses_it_on_v4() {
    let argv = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let v5 = Kubelet::start(V5).await;
    let exec = PodExec::new(v5.client(), "ns", "pod");
    let mut out = Captured::default();
    let outcome = exec
        .exec_raw(&argv(&["sh", "-c", "cat; echo end >&2; exit 3"]), b"abc", &mut out)
        .await
        .expect("v5");
    assert_eq!(
        (outcome.exit_code, out.stdout_lossy(), out.stderr_lossy()),
        (3, "abc".into(), "end\n".into())
    );
    let v4 = Kubelet::start(V4).await;
    let exec = PodExec::new(v4.client(), "ns", "pod");
    let refused = exec.exec_raw(&argv(&["cat"]), b"abc", &mut Captured::default()).await;
    assert!(matches!(refused, Err(Error::StdinNeedsV5 { .. })), "{refused:?}");
    let mut out = Captured::default();
    let outcome =
        exec.exec_raw(&argv(&["sh", "-c", "echo hi; exit 7"]), b"", &mut out).await.expect("v4");
    assert_eq!((outcome.exit_code, out.stdout_lossy()), (7, "hi\n".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_go_through_the_shared_session_helpers() {
    let Some(agent) = Agent::start() else { return };
    let kubelet = Kubelet::start(V4).await;
    let exec = agent.exec(&kubelet);
    let root = agent.dir.join("ws");
    let path = root.join("sub/data.bin").display().to_string();
    let contents: Vec<u8> =
        (0..(3 << 20)).map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    sandbox_core::shell::write_file(&exec, &path, &contents).await.expect("write");
    let back = sandbox_core::shell::read_file(&exec, &path).await.expect("read");
    assert!(back == contents, "binary contents round trip");
    let listing = sandbox_core::shell::list_dir(&exec, &root.join("sub").display().to_string())
        .await
        .expect("list");
    assert_eq!(listing.len(), 1);
    assert_eq!((listing[0].name.as_str(), listing[0].size), ("data.bin", 3 << 20));
    let missing =
        sandbox_core::shell::read_file(&exec, &root.join("nope").display().to_string()).await;
    assert!(
        matches!(missing, Err(Error::Sandbox(sandbox_core::Error::NotFound { .. }))),
        "{missing:?}"
    );
    let src = agent.dir.join("src");
    std::fs::create_dir_all(src.join("d")).expect("src");
    std::fs::write(src.join("d/f.txt"), b"in a tar").expect("src file");
    let tar = std::process::Command::new("tar")
        .args(["-cf", "-", "-C"])
        .arg(&src)
        .arg(".")
        .output()
        .expect("tar");
    let dest = root.join("put").display().to_string();
    sandbox_core::shell::put_tar(&exec, tar.stdout, &dest).await.expect("put");
    assert_eq!(std::fs::read(root.join("put/d/f.txt")).expect("unpacked"), b"in a tar");
}

/// Keeps what comes on stdout where the test can read it while the exec still runs.
pub(crate) struct Shared(pub(crate) std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl OutputSink for Shared {
    fn write(&mut self, stream: Stream, chunk: &[u8]) {
        if stream == Stream::Stdout {
            self.0.lock().expect("lock").extend_from_slice(chunk);
        }
    }
}

/// What `run --engine k8s` does on Ctrl-C: the exec's future is dropped mid-run. The stream
/// closes, and the agent must kill the command and its children: checked by their pids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_dropped_mid_run_kills_the_command_in_the_pod() {
    let Some(agent) = Agent::start() else { return };
    for protocol in [V4, V5] {
        let kubelet = Kubelet::start(protocol).await;
        dropping_a_call_kills_its_command(&agent.exec(&kubelet), &format!("{protocol:?}")).await;
    }
}

/// A call of `exec` dropped once its command printed its pids (as `tokio::select!` against
/// Ctrl-C drops it): the command and its child are gone within 5 s, the agent still serves.
pub(crate) async fn dropping_a_call_kills_its_command(exec: &PodExec, what: &str) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut sink = Shared(std::sync::Arc::clone(&seen));
    let slow = request(&["sh", "-c", "sleep 300 & echo $!; echo $$; wait"]);
    let pids = async {
        loop {
            let text = String::from_utf8_lossy(&seen.lock().expect("lock")).into_owned();
            let pids: Vec<u32> = text.split_whitespace().filter_map(|p| p.parse().ok()).collect();
            if pids.len() == 2 {
                return pids;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let pids = tokio::select! {
        ended = exec.exec(&slow, &mut sink) => panic!("the command ended by itself: {ended:?}"),
        pids = tokio::time::timeout(Duration::from_secs(20), pids) => pids.expect("pids"),
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while pids.iter().any(|pid| alive(*pid)) {
        assert!(Instant::now() < deadline, "{what}: still running after the drop: {pids:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, _) = run(exec, &request(&["true"])).await;
    assert_eq!(code, 0, "the agent still serves");
}
