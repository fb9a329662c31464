//! The warm path: calls through a port-forward to the agent's loopback port (`tcp=PORT`), as
//! a session's handle makes them. The stand-in kubelet pipes the forward to the real agent's
//! port, so the frames, the agent and the forward's channel framing are all production code;
//! the recorded URIs show which way each call went.

use std::time::{Duration, Instant};

use engine_k8s::PodExec;
use sandbox_core::{Captured, Input, Interactive};

use crate::agent::{Agent, free_port};
use crate::kubelet::Kubelet;
use crate::{Count, V4, V5, alive, request, run};

fn ways(kubelet: &Kubelet) -> Vec<&'static str> {
    let uris = kubelet.uris.lock().expect("lock").clone();
    uris.iter()
        .map(|u| {
            if u.contains("/portforward?") {
                "forward"
            } else if u.contains("/exec?") {
                "exec"
            } else {
                "other"
            }
        })
        .collect()
}

/// Output, exit codes, stdin with its end, env and cwd, a timeout that kills the tree, an
/// interactive exec and 66 MiB each way: all through forwards, not one exec.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_go_through_the_forward_without_an_exec() {
    let Some(agent) = Agent::start() else { return };
    let kubelet = Kubelet::start(V4).await;
    let exec = agent.forwarded(&kubelet).cwd("/tmp");
    let (code, out) = run(&exec, &request(&["sh", "-c", "echo out; echo err >&2; exit 7"])).await;
    assert_eq!((code, out.stdout_lossy(), out.stderr_lossy()), (7, "out\n".into(), "err\n".into()));
    let mut cat = request(&["sh", "-c", "cat; echo; pwd; printf %s \"$API_TOKEN\""]);
    cat.stdin = b"hello\x00binary\xff".to_vec();
    cat.env = vec![("API_TOKEN".into(), "s3cr3t".into())];
    let (code, out) = run(&exec, &cat).await;
    assert_eq!((code, out.stdout), (0, b"hello\x00binary\xff\n/tmp\ns3cr3t".to_vec()));

    let mut slow = request(&["sh", "-c", "sleep 300 & echo $!; wait"]);
    slow.timeout = Some(Duration::from_secs(1));
    let mut out = Captured::default();
    let outcome = exec.exec(&slow, &mut out).await.expect("exec");
    assert!(outcome.timed_out && outcome.exit_code == 128 + 9, "{outcome:?}");
    let pid: u32 = out.stdout_lossy().trim().parse().expect("pid");
    let deadline = Instant::now() + Duration::from_secs(3);
    while alive(pid) {
        assert!(Instant::now() < deadline, "the child outlived the timeout");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let (input, io) = Interactive::channel(None);
    let feeder = std::thread::spawn(move || {
        for i in 0..20 {
            let _ = input.send(Input::Stdin(format!("line {i}\n").into_bytes()));
        }
        let _ = input.send(Input::Eof);
    });
    let mut out = Captured::default();
    let outcome = exec.exec_interactive(&request(&["wc", "-l"]), io, &mut out).await.expect("exec");
    feeder.join().expect("feeder");
    assert_eq!((outcome.exit_code, out.stdout_lossy().trim()), (0, "20"));

    let mut big = request(&["sh", "-c", "head -c 52428800 /dev/zero; cat"]);
    big.stdin = vec![b'x'; 16 << 20];
    let mut count = Count::default();
    let started = Instant::now();
    assert_eq!(exec.exec(&big, &mut count).await.expect("exec").exit_code, 0);
    assert_eq!(count.stdout, (50 << 20) + (16 << 20));
    println!("66 MiB through the forward in {:?}", started.elapsed());

    assert!(exec.forwards());
    let ways = ways(&kubelet);
    assert_eq!(ways, vec!["forward"; 5], "{:?}", kubelet.uris.lock().expect("lock"));
    for uri in kubelet.uris.lock().expect("lock").iter() {
        assert!(!uri.contains("s3cr3t") && !uri.contains("API_TOKEN"), "{uri}");
    }
}

/// A forward that reaches nothing (an agent without the loopback port: a pod made before it,
/// or a runtime whose forward does not reach the pod's loopback) costs one try: that call and
/// every later one of the handle are execs, and each runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_that_reaches_nothing_falls_back_to_the_exec_for_good() {
    let Some(agent) = Agent::start() else { return };
    let kubelet = Kubelet::start(V5).await;
    let exec: PodExec = agent.exec(&kubelet).agent_port(Some(free_port()));
    assert!(exec.forwards());
    let mut once = request(&["sh", "-c", "echo ran >> runs; cat runs | wc -l"]);
    once.cwd = Some(agent.dir.display().to_string());
    let (code, out) = run(&exec, &once).await;
    assert_eq!((code, out.stdout_lossy().trim()), (0, "1"), "the command ran exactly once");
    assert!(!exec.forwards());
    let (code, out) = run(&exec.clone(), &once).await;
    assert_eq!((code, out.stdout_lossy().trim()), (0, "2"));
    assert_eq!(ways(&kubelet), ["forward", "exec", "exec"]);
}

/// Ctrl-C of `run --engine k8s` over the forward: the call's future is dropped, the forwarded
/// stream closes, and the agent kills the command and its children.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_call_dropped_mid_run_kills_the_command() {
    let Some(agent) = Agent::start() else { return };
    let kubelet = Kubelet::start(V5).await;
    let exec = agent.forwarded(&kubelet);
    crate::dropping_a_call_kills_its_command(&exec, "forwarded").await;
    assert_eq!(ways(&kubelet), ["forward", "forward"]);
}
