//! Sessions whose code turns on the host: a script replaces the session's agent with one that
//! answers every request with endless 1 MiB frames, and secrets given to a session must not
//! come back in what it prints.

use sandbox_core::SessionEngine as _;
use std::time::{Duration, Instant};

use sandbox_core::{Captured, EXIT_CLOSED_PIPE, ExecRequest, Net, OutputSink, Sandbox, Stream};

use crate::session::start;
use crate::support::{engines, eventually, name, workspace};

/// Unlinks the agent's socket, binds its own and floods every connection.
const FAKE_AGENT: &str = r#"
import os, socket, struct, threading
P = "/tmp/.python-sandbox-agent.sock"
os.unlink(P)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(P)
s.listen(8)
open("/tmp/.fake-ready", "w").close()
frame = b"o" + struct.pack(">I", 1 << 20) + b"A" * (1 << 20)
def flood(c):
    try:
        while True:
            c.sendall(frame)
    except OSError:
        pass
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=flood, args=(c,), daemon=True).start()
"#;

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0);
    kib * 1024
}

#[test]
fn a_script_that_replaces_the_agent_cannot_exhaust_the_host() {
    for engine in engines() {
        let e = name(&engine);
        let (_dir, ws) = workspace("print('x')\n");
        let session = start(&engine, &ws, Net::Off, &[], Duration::from_secs(600));
        let api = engine.open_session(session.id()).expect("session").via_api();
        let plant = ExecRequest::new(&[
            "sh",
            "-c",
            "setsid python3 -c \"$1\" </dev/null >/dev/null 2>&1 &",
            "sh",
            FAKE_AGENT,
        ]);
        engine.block_on(session.exec(&plant, &mut Captured::default())).expect("plant");
        let ready = eventually(Duration::from_secs(15), || {
            let probe = ExecRequest::new(&["test", "-e", "/tmp/.fake-ready"]);
            engine
                .block_on(api.exec(&probe, &mut Captured::default()))
                .is_ok_and(|o| o.exit_code == 0)
        });
        assert!(ready, "{e}: the fake agent did not start");
        assert!(session.uses_agent(), "{e}: the fake's socket is a socket like the agent's");

        let before = rss_bytes();
        let started = Instant::now();
        let read = engine.block_on(session.read_file("/etc/hostname"));
        match &read {
            Err(engine_oci::Error::TooLarge { limit, .. }) => assert_eq!(limit, "64 MiB", "{e}"),
            other => panic!("{e}: expected the read cap, got {other:?}"),
        }
        let listed = engine.block_on(session.list_dir("/tmp"));
        assert!(matches!(listed, Err(engine_oci::Error::TooLarge { .. })), "{e}: {listed:?}");

        struct HeadOne(usize);
        impl OutputSink for HeadOne {
            fn write(&mut self, _: Stream, chunk: &[u8]) {
                self.0 += chunk.len();
            }
            fn closed(&self) -> bool {
                self.0 > 0
            }
        }
        let outcome = engine
            .block_on(session.exec(&ExecRequest::new(&["true"]), &mut HeadOne(0)))
            .expect("exec");
        assert_eq!(outcome.exit_code, EXIT_CLOSED_PIPE, "{e}");
        let grown = rss_bytes().saturating_sub(before);
        assert!(grown < 256 << 20, "{e}: the host grew by {grown} bytes");
        assert!(started.elapsed() < Duration::from_secs(60), "{e}: {:?}", started.elapsed());

        // The API path does not go through the socket, so the session can still be stopped.
        engine.block_on(api.stop()).expect("stop");
    }
}

/// `session run --env`, the session's own `--env` and `session exec` mask secret-looking
/// values as `run` does, and a secret passed into a session that has run scripts is warned
/// about; a closed reader ends `session run` and `session exec` with 141.
#[test]
fn cli_sessions_mask_secrets_and_end_on_a_closed_reader() {
    let Some(bin) = crate::support::cli_binary() else {
        println!("SKIPPED: python-sandbox binary not built (cargo build -p cli)");
        return;
    };
    for engine in engines() {
        let e = name(&engine);
        let (_dir, ws) = workspace(
            "import os\nprint('token', os.environ.get('API_TOKEN'), os.environ.get('SESSION_PASSWORD'))\n",
        );
        std::fs::write(
            ws.join("forever.py"),
            "import itertools\nfor i in itertools.count():\n    print('line', i, flush=True)\n",
        )
        .expect("write");
        let cli = |args: &[&str]| {
            let out = std::process::Command::new(&bin)
                .args(args)
                .current_dir(&ws)
                .env("NO_COLOR", "1")
                .output()
                .expect("cli");
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        };
        let (code, stdout, stderr) = cli(&[
            "session",
            "start",
            "--engine",
            e,
            "--net",
            "off",
            "--ttl",
            "10m",
            "--env",
            "SESSION_PASSWORD=session-secret-value",
        ]);
        assert_eq!(code, Some(0), "{e}: {stderr}");
        let id = stdout.lines().last().expect("id").to_owned();
        let run = ["session", "run", &id, "--env", "API_TOKEN=run-secret-value", "main.py"];
        let (code, stdout, stderr) = cli(&run);
        assert_eq!((code, stdout.as_str()), (Some(0), "token **** ****\n"), "{e}: {stderr}");
        assert!(!stderr.contains("warning:"), "{e}: the first script: {stderr}");
        let (code, stdout, stderr) = cli(&run);
        assert_eq!((code, stdout.as_str()), (Some(0), "token **** ****\n"), "{e}: {stderr}");
        assert!(
            stderr.contains("warning: session `")
                && stderr.contains("has already run 1 script; `API_TOKEN` looks secret"),
            "{e}: {stderr}"
        );
        assert!(stderr.contains("hint: a session is one trust domain"), "{e}: {stderr}");
        let (code, stdout, _) =
            cli(&["session", "exec", &id, "--", "sh", "-c", "echo $SESSION_PASSWORD"]);
        assert_eq!((code, stdout.as_str()), (Some(0), "****\n"), "{e}");

        for command in [
            vec!["session", "run", id.as_str(), "forever.py"],
            vec!["session", "exec", id.as_str(), "--", "yes"],
        ] {
            let started = Instant::now();
            let mut child = std::process::Command::new(&bin)
                .args(&command)
                .current_dir(&ws)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("spawn");
            let mut stdout = child.stdout.take().expect("stdout");
            let mut first = [0u8; 64];
            let n = std::io::Read::read(&mut stdout, &mut first).expect("read");
            assert!(n > 0, "{e}: {command:?} printed nothing");
            drop(stdout);
            let finished =
                eventually(Duration::from_secs(30), || child.try_wait().is_ok_and(|s| s.is_some()));
            if !finished {
                let _ = child.kill();
            }
            let status = child.wait().expect("wait");
            assert!(finished, "{e}: {command:?} kept running after its reader left");
            assert_eq!(status.code(), Some(141), "{e}: {command:?} after {:?}", started.elapsed());
        }
        let (code, _, stderr) = cli(&["session", "stop", &id]);
        assert_eq!(code, Some(0), "{e}: {stderr}");
    }
}
