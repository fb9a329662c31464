//! Faults: many runs at once in one workspace, a CLI killed with SIGKILL mid-run (its
//! container is an orphan the next sweep removes), and a sweep that leaves live runs alone.

use std::process::{Command, Stdio};
use std::time::Duration;

use sandbox_core::Net;

use crate::support::{
    cli_binary, containers, engines, eventually, name, permissions, run, spec, workspace,
};

/// All succeed, and (for a root caller, whose runs borrow the workspace through an ACL) the
/// workspace's ACL and mode are what they were once the last one ends.
#[test]
fn twenty_parallel_runs_in_one_workspace() {
    const N: usize = 20;
    for engine in engines() {
        let (_dir, ws) = workspace(
            "import sys, time\ni = sys.argv[1]\nopen(f'out-{i}.txt', 'w').write(i)\ntime.sleep(0.5)\nprint(i)\n",
        );
        let before = permissions(&ws);
        let results: Vec<(i32, String)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..N)
                .map(|i| {
                    let engine = &engine;
                    let ws = &ws;
                    scope.spawn(move || {
                        let mut spec = spec(ws);
                        spec.args = vec![i.to_string()];
                        let (outcome, out) = run(engine, &spec);
                        (outcome.exit_code, out.stdout_lossy())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("thread")).collect()
        });
        for (i, (code, stdout)) in results.iter().enumerate() {
            assert_eq!(
                (*code, stdout.as_str()),
                (0, format!("{i}\n").as_str()),
                "{} run {i}",
                name(&engine)
            );
            assert_eq!(
                std::fs::read_to_string(ws.join(format!("out-{i}.txt"))).expect("out"),
                i.to_string()
            );
        }
        assert_eq!(permissions(&ws), before, "{}: ACL and mode after the last run", name(&engine));
    }
}

#[test]
fn killed_cli_leaves_an_orphan_that_the_sweep_removes() {
    let Some(bin) = cli_binary() else {
        println!("SKIPPED: python-sandbox binary not built (cargo build -p cli)");
        return;
    };
    for engine in engines() {
        let (_dir, ws) = workspace("import time\nprint('up', flush=True)\ntime.sleep(300)\n");
        let before = permissions(&ws);
        let mut child = Command::new(&bin)
            .args(["run", "--engine", name(&engine), "main.py"])
            .current_dir(&ws)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn cli");
        let label = format!("io.python-sandbox.owner-pid={}", child.id());
        let appeared =
            eventually(Duration::from_secs(60), || !containers(&engine, &label).is_empty());
        assert!(appeared, "{}: the run container never appeared", name(&engine));
        child.kill().expect("kill -9");
        let _ = child.wait();
        // Nobody removed it: the CLI died without a chance to. (Other tests running now create
        // engines, and each sweeps: one of them may have reaped it already, which is fine.)
        let left = containers(&engine, &label).len();
        assert!(left <= 1, "{}: {left} containers for one run", name(&engine));
        let swept = engine.reap(false).expect("reap");
        assert!(
            left == 0 || swept.iter().any(|s| s.removed && s.reason.contains("has exited")),
            "{}: {swept:?}",
            name(&engine)
        );
        assert!(
            containers(&engine, &label).is_empty(),
            "{}: orphan survived the sweep",
            name(&engine)
        );
        // A root caller's workspace stayed lent to the sandbox user; the sweep of the next
        // engine (or `reap`) gives it back, and it is never listed twice.
        let left = engine.reap_grants(false).expect("reap grants");
        assert!(left.iter().all(|l| l.restored || l.path != ws), "{}: {left:?}", name(&engine));
        assert_eq!(permissions(&ws), before, "{}: the killed run's grant", name(&engine));
    }
}

#[test]
fn sweep_leaves_live_runs_alone() {
    for engine in engines() {
        let (_dir, ws) = workspace("import time\ntime.sleep(4)\nprint('finished')\n");
        let spec = spec(&ws);
        std::thread::scope(|scope| {
            let runner = scope.spawn(|| run(&engine, &spec));
            let label = format!("io.python-sandbox.owner-pid={}", std::process::id());
            assert!(eventually(Duration::from_secs(30), || !containers(&engine, &label).is_empty()));
            let swept = engine.reap(false).expect("reap");
            assert!(
                swept
                    .iter()
                    .all(|s| !s.container.contains("-run-") || s.reason.contains("has exited")),
                "{swept:?}"
            );
            let (outcome, out) = runner.join().expect("join");
            assert_eq!(
                (outcome.exit_code, out.stdout_lossy().as_str()),
                (0, "finished\n"),
                "{}",
                name(&engine)
            );
        });
    }
}

#[test]
fn publish_needs_net_and_binds_loopback() {
    for engine in engines() {
        let (_dir, ws) = workspace(
            "import socket\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('0.0.0.0', 18777))\ns.listen()\nprint('listening', flush=True)\nc, _ = s.accept()\nc.sendall(b'pong')\nc.close()\n",
        );
        let mut spec = spec(&ws);
        spec.publish = vec![sandbox_core::Publish::same(18777)];
        let err = engine
            .prepare(&spec, &mut |_| {})
            .and_then(|env| engine.run_prepared(&spec, &env, sandbox_core::RunIo::inherit()));
        assert!(err.is_err_and(|e| e.to_string().contains("network off")), "{}", name(&engine));
        spec.net = Net::On;
        std::thread::scope(|scope| {
            let runner = scope.spawn(|| run(&engine, &spec));
            let got = eventually(Duration::from_secs(30), || {
                use std::io::Read as _;
                let Ok(mut stream) = std::net::TcpStream::connect("127.0.0.1:18777") else {
                    return false;
                };
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut buf = String::new();
                let _ = stream.read_to_string(&mut buf);
                buf == "pong"
            });
            assert!(got, "{}: published port not reachable on 127.0.0.1", name(&engine));
            let (outcome, _) = runner.join().expect("join");
            assert_eq!(outcome.exit_code, 0, "{}", name(&engine));
        });
    }
}
