//! The real session agent (`sandbox_core::agent::AGENT_PY`) on a socket in a directory of its
//! own, the pod's `/tmp` paths rewritten: what the stand-in kubelet's relay execs reach.

#![allow(clippy::print_stdout)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use engine_k8s::PodExec;

use crate::kubelet::Kubelet;

pub(crate) const PYTHON: &str = "/usr/bin/python3.11";
/// A variable in the agent's own environment, never in a command's.
pub(crate) const OWN_VAR: &str = "PSBX_AGENT_OWN";

/// The real agent, on a socket in a directory of its own (the pod's `/tmp` paths rewritten),
/// and on a loopback port of its own, as in a pod (`tcp=PORT`).
pub(crate) struct Agent {
    pub(crate) dir: std::path::PathBuf,
    #[allow(dead_code, reason = "the stream tier shares this fixture and goes by exec only")]
    pub(crate) port: u16,
    child: std::process::Child,
}

/// A loopback port nothing listens on right now.
pub(crate) fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

impl Agent {
    pub(crate) fn start() -> Option<Agent> {
        if !std::path::Path::new(PYTHON).exists() {
            println!("SKIPPED: no {PYTHON} to run the session agent");
            return None;
        }
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "psbx-k8s-exec-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("agent dir");
        let d = dir.display();
        let source = sandbox_core::agent::AGENT_PY
            .replace("\"/tmp/.python-sandbox-agent.sock\"", &format!("\"{d}/agent.sock\""))
            .replace("\"/tmp/.active\"", &format!("\"{d}/active\""))
            .replace("\"/tmp/.last-activity\"", &format!("\"{d}/last\""));
        assert!(source.contains("agent.sock"), "the agent's socket path moved");
        // As the pod starts it: behind the wall it takes itself (so every command of this
        // tier runs under the real wall, on this host's kernel), giving commands exactly their
        // request's env; [`OWN_VAR`] stands for what the kubelet adds to the pod's.
        let port = free_port();
        let child = std::process::Command::new(PYTHON)
            .args(["-I", "-c", &sandbox_core::agent::walled(&source)])
            .args([
                sandbox_core::agent::wall_arg().as_str(),
                "600",
                sandbox_core::agent::EXACT_ENV_ARG,
                &sandbox_core::agent::tcp_arg(port),
            ])
            .env(OWN_VAR, "the agent's own")
            .spawn()
            .expect("agent");
        let agent = Agent { dir, port, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !agent.socket_path().exists()
            || std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
        {
            assert!(Instant::now() < deadline, "the agent never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(agent)
    }

    fn socket_path(&self) -> std::path::PathBuf {
        self.dir.join("agent.sock")
    }

    /// Every call an exec of the relay (the path the protocol tests cover).
    pub(crate) fn exec(&self, kubelet: &Kubelet) -> PodExec {
        PodExec::new(kubelet.client(), "python-sandbox", "psbx-test")
            .agent_socket(&self.socket_path().display().to_string())
            .agent_port(None)
    }

    /// As a session's handle is made: calls through the port-forward to the agent's loopback
    /// port, the exec of the relay where that reaches nothing.
    #[allow(dead_code, reason = "the stream tier shares this fixture and goes by exec only")]
    pub(crate) fn forwarded(&self, kubelet: &Kubelet) -> PodExec {
        self.exec(kubelet).agent_port(Some(self.port))
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
