//! The case table: what every engine must do, as data. Scripts live in tests/cases (plus a few
//! one-liners inline); the runner adds the checks every run gets (see harness.rs).

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt, symlink};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::cli::Running;
use crate::fixture::{self, Fixture};
use crate::harness::{BASE, Case, Expect, Run, Script};

/// A script that must never start: if it runs, `+ws/ran` shows up as an unexpected host change.
const MUST_NOT_RUN: Script = Script::Inline("write(\"ran\")\ndone()\n");

/// Arguments that a shell-based or flag-parsing launcher would mangle.
const ARGS: &[&str] = &[
    "plain",
    "with space",
    "ünïcödé ✓ 日本",
    "--flag",
    "-x",
    "--",
    "",
    "$HOME",
    "*.py",
    "a\"b'c\\d",
    "line1\nline2",
    "--json",
    "--net=off",
];

/// A bwrap that looks installed but cannot create namespaces (AppArmor, nested containers).
const BROKEN_BWRAP: &str = "#!/bin/sh\n\
    case \"$1\" in --version) echo 'bubblewrap 0.8.0'; exit 0;; esac\n\
    echo 'bwrap: setting up uid map: Permission denied' >&2\n\
    exit 1\n";

/// Prints numbered lines forever, dying of SIGPIPE (as a C program would) rather than
/// Python's BrokenPipeError, so the closed-pipe exit code is the same on every engine.
const CLOSED_READER: &str = "import itertools, signal\nsignal.signal(signal.SIGPIPE, signal.SIG_DFL)\n\
    for i in itertools.count():\n    print(f\"line {i}\", flush=True)\n";

/// 192 MiB on stdout in 1 MiB writes with no newline, then the secret (masked) and a line.
const BIG_OUTPUT: &str = "out = sys.stdout.buffer\nchunk = b\"x\" * (1 << 20)\n\
    for _ in range(192):\n    out.write(chunk)\n    out.flush()\n\
    print(\"\\n\" + os.environ[\"API_TOKEN\"] + \"\\nend big-output\")\ndone()\n";

/// The most resident memory the CLI may reach relaying [`BIG_OUTPUT`]: its own size and a few
/// chunks, far below the 192 MiB it relays.
const CLI_PEAK_MIB: u64 = 96;

/// Runs the CLI in a user namespace of its own whose `user.max_user_namespaces` is 0: no
/// sandbox can make the user namespace it needs there, as on a host with the sysctl set (the
/// setting is per user namespace, so this needs no privilege and changes nothing outside).
const USERNS_OFF: &[&str] = &[
    // Absolute: a case may empty the CLI's `PATH`, which the lookup would use.
    "/usr/bin/unshare",
    "--user",
    "--map-root-user",
    "/bin/sh",
    "-c",
    "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$0\" \"$@\"",
];

const NET_OFF: &str = "[tool.python-sandbox]\nnet = \"off\"";
const NET_ON: &str = "[tool.python-sandbox]\nnet = \"on\"";
const NET_LIST: &str = "[tool.python-sandbox]\nnet = [\"pypi.org\", \"*.pythonhosted.org:443\"]";

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// Engines with warm sessions (`session start`).
const SESSION_ENGINES: &[&str] = &["native", "bwrap", "docker", "podman", "k8s"];

/// A pod runs on a cluster node: no host path reaches it (the engine refuses `--mount` of one,
/// inside the workspace too, before anything is made; PVCs are its mounts).
const K8S_NO_HOST_MOUNTS: (&str, &str) =
    ("k8s", "a pod mounts no host path (refused before anything is made; `pvc:` claims instead)");
/// A pod's port is served at its preview URL (Ingress) or a port-forward on a free local port.
const K8S_NO_HOST_PORT: (&str, &str) = (
    "k8s",
    "a pod's port is served at its Ingress URL or a port-forward on a free local port, never a chosen host port",
);

pub(crate) fn all() -> Vec<Case> {
    let mut cases = run_cases();
    cases.extend(seccomp_family_cases());
    // The boundary table once more through `session start`: refused alike, nothing started.
    let session: Vec<Case> = cases
        .iter()
        .filter(|c| {
            (c.name.starts_with("boundary-") && c.meta.is_none() && !c.name.contains("approve"))
                || c.name == "publish-busy-host-port-refused"
        })
        .map(|c| Case {
            name: Box::leak(format!("session-start-{}", c.name).into_boxed_str()),
            session_start: true,
            only_on: Some(SESSION_ENGINES),
            ..*c
        })
        .collect();
    cases.extend(session);
    cases
}

fn run_cases() -> Vec<Case> {
    vec![
        // Slow on a cold cache (uv resolves and installs), so first in the queue.
        Case {
            name: "deps-six",
            script: Script::File("deps.py"),
            meta: Some("dependencies = [\"six\"]"),
            expect: |_| Expect::ok().has("six: 1.").has("ok write next to six"),
            deadline_secs: 600,
            ..BASE
        },
        Case {
            name: "deps-six-net-off-at-run-time",
            script: Script::File("deps.py"),
            meta: Some("dependencies = [\"six\"]\n\n[tool.python-sandbox]\nnet = \"off\""),
            expect: |fx| {
                refused_net_off(fx)
                    .unwrap_or_else(|| Expect::ok().has("six: 1.").has("dns: failed"))
            },
            deadline_secs: 600,
            ..BASE
        },
        Case {
            // OpenBLAS threads and numpy's import under the wall (memory policy calls are
            // allowed), and uv installing under it on bwrap, where prepare has the same filter.
            name: "deps-numpy-dot-under-the-wall",
            script: Script::Inline(
                "import numpy\na = numpy.arange(40000, dtype=float).reshape(200, 200)\n\
                 print('trace', int(numpy.trace(numpy.dot(a, a.T)) % 1000003))\ndone()\n",
            ),
            meta: Some("dependencies = [\"numpy\"]"),
            expect: |_| Expect::ok().has("trace 342593"),
            // numpy's wheel expects the system's libstdc++ (the runtime image ships it).
            deadline_secs: 600,
            ..BASE
        },
        Case {
            name: "compute",
            script: Script::File("compute.py"),
            expect: |_| {
                Expect::ok().has("sum-of-squares: 332833500").has("sha256: 33ebf5a51539c8cc")
            },
            ..BASE
        },
        Case {
            name: "write-cwd-lands-on-host-json",
            script: Script::File("write_cwd.py"),
            flags: |_| strings(&["--json"]),
            expect: |_| {
                Expect::ok()
                    .changes(&["+ws/out.txt", "+ws/sub", "+ws/sub/nested.txt"])
                    .host(written_by_caller)
            },
            ..BASE
        },
        Case { name: "wall-home-secrets", script: Script::File("wall_home.py"), ..BASE },
        Case {
            name: "wall-env-secrets",
            script: Script::File("wall_env.py"),
            expect: |_| Expect::ok().lacks("env: GITHUB_TOKEN=").lacks("env: CONF_PASS="),
            ..BASE
        },
        Case {
            name: "env-explicit-flags",
            script: Script::File("env_explicit.py"),
            flags: |_| strings(&["--env", "CONF_SET=set by flag", "--env", "CONF_PASS"]),
            ..BASE
        },
        Case {
            name: "wall-fs-outside-cwd",
            script: Script::File("wall_fs.py"),
            expect: |_| Expect::ok().host(no_system_litter).host(not_the_host_shadow),
            ..BASE
        },
        Case {
            name: "wall-links",
            script: Script::File("wall_links.py"),
            setup: plant_links,
            // On a pod the planted links are not synced in (they leave the workspace) and the
            // script's `./l`, which points out of it, stays in the pod with a warning (the
            // run's other changes still come back; `sandbox_core::sync::Changes`).
            expect: |fx| match fx.engine.as_str() {
                "k8s" => Expect::ok().host(no_system_litter),
                _ => Expect::ok().changes(&["+ws/l"]).host(no_system_litter),
            },
            ..BASE
        },
        Case { name: "wall-host-sockets", script: Script::File("sockets.py"), ..BASE },
        Case { name: "caps-nnp-userns-mount", script: Script::File("caps.py"), ..BASE },
        Case { name: "proc-only-sandbox-pids", script: Script::File("proc.py"), ..BASE },
        Case {
            name: "dev-nodes",
            script: Script::File("dev.py"),
            // A pod's workspace is synced, not shared: files, directories and links come back,
            // a FIFO made in the pod stays there (sandbox_core::sync, `Skip::Special`).
            expect: |fx| match fx.engine.as_str() {
                "k8s" => Expect::ok(),
                _ => Expect::ok().changes(&["+ws/p"]).host(fifo_on_host),
            },
            ..BASE
        },
        Case { name: "env-and-cache-read-only", script: Script::File("envwrite.py"), ..BASE },
        Case { name: "ipc-works", script: Script::File("ipc.py"), ..BASE },
        Case {
            name: "git-worktree-cwd-starts",
            script: Script::File("compute.py"),
            setup: |fx| {
                // A worktree's `.git` is a file pointing elsewhere; a sandbox that mounts over
                // `.git` paths must still start (srt#98).
                fs::write(
                    fx.ws.join(".git"),
                    format!("gitdir: {}\n", path(&fx.root.join("main.git/worktrees/ws"))),
                )
                .map_err(|e| format!("cannot write ws/.git: {e}"))
            },
            expect: |_| Expect::ok().has("sum-of-squares: 332833500"),
            ..BASE
        },
        Case {
            name: "protected-paths-read-only",
            script: Script::File("protected.py"),
            setup: plant_protected,
            expect: |fx| match fx.engine.as_str() {
                // A pod writes its own copy; protected paths are never synced back.
                "k8s" => Expect::ok().changes(POD_PROTECTED_CHANGES),
                _ => PROTECTED_ATTEMPTS
                    .iter()
                    .fold(Expect::ok(), |e, label| e.has(format!("refused {label}:")))
                    .lacks("wrote ")
                    .changes(&["+ws/cfg.tmp", "+ws/out.txt"]),
            },
            ..BASE
        },
        Case {
            // The refusals are named in `--json` (`protected_refused`), read from the script's
            // own error messages as they pass through the CLI.
            name: "protected-paths-listed-in-json",
            script: Script::File("protected.py"),
            setup: plant_protected,
            flags: |_| strings(&["--json"]),
            expect: |fx| match fx.engine.as_str() {
                "k8s" => Expect::ok().changes(POD_PROTECTED_CHANGES),
                _ => Expect::ok()
                    .changes(&["+ws/cfg.tmp", "+ws/out.txt"])
                    .host(protected_refused_in_json),
            },
            ..BASE
        },
        Case {
            // Widening is a decision: a read-write mount of `.git` needs `--approve` (exit 4),
            // and then the script writes it.
            name: "protected-path-mount-needs-approval",
            script: Script::Inline(
                "must_work('write .git/description', lambda: open('.git/description', 'w').write('changed'))\ndone()\n",
            ),
            setup: plant_protected,
            flags: |_| strings(&["--mount", "./.git:rw"]),
            expect: |_| Expect::exit(4).err("`.git` is protected"),
            ..BASE
        },
        Case {
            name: "protected-path-mount-approved-writes",
            script: Script::Inline(
                "must_work('write .git/description', lambda: open('.git/description', 'w').write('changed'))\ndone()\n",
            ),
            setup: plant_protected,
            flags: |_| strings(&["--mount", "./.git:rw", "--approve"]),
            expect: |_| Expect::ok().changes(&["~ws/.git/description"]),
            skip_on: &[K8S_NO_HOST_MOUNTS],
            ..BASE
        },
        Case {
            name: "net-off-flag",
            script: Script::File("net.py"),
            flags: |_| strings(&["--net", "off"]),
            expect: net_off,
            ..BASE
        },
        Case { name: "net-default-on", script: Script::File("net.py"), expect: net_on, ..BASE },
        Case {
            name: "net-inline-off",
            script: Script::File("net.py"),
            meta: Some(NET_OFF),
            expect: net_off,
            ..BASE
        },
        Case {
            name: "net-flag-on-beats-inline-off",
            script: Script::File("net.py"),
            meta: Some(NET_OFF),
            flags: |_| strings(&["--net", "on"]),
            expect: net_on,
            ..BASE
        },
        Case {
            name: "net-flag-off-beats-inline-on",
            script: Script::File("net.py"),
            meta: Some(NET_ON),
            flags: |_| strings(&["--net", "off"]),
            expect: net_off,
            ..BASE
        },
        Case {
            name: "net-allowlist-inline",
            script: Script::File("allow.py"),
            meta: Some(NET_LIST),
            expect: allowlist,
            deadline_secs: 180,
            ..BASE
        },
        Case {
            name: "net-allowlist-flag",
            script: Script::File("allow.py"),
            flags: |_| strings(&["--net", "pypi.org,*.pythonhosted.org:443"]),
            expect: allowlist,
            deadline_secs: 180,
            ..BASE
        },
        Case {
            // A session started with a list holds it for every script run in it (its keeper
            // checks each flow by name, as a run's relay does); the script's own list is the
            // same, so it fits.
            name: "net-allowlist-session",
            script: Script::File("allow.py"),
            meta: Some(NET_LIST),
            in_session: Some(|_| strings(&["--net", "pypi.org,*.pythonhosted.org:443"])),
            expect: session_allowlist,
            only_on: Some(SESSION_ENGINES),
            deadline_secs: 180,
            ..BASE
        },
        Case {
            // The flag's `on` replaces the script's list whole, on every engine.
            name: "net-allowlist-widened-by-flag-on",
            script: Script::Inline(
                "print('npm:', attempt(lambda: socket.getaddrinfo('registry.npmjs.org', 443) and 'resolved'))\ndone()\n",
            ),
            meta: Some(NET_LIST),
            flags: |_| strings(&["--net", "on"]),
            expect: |_| Expect::ok().has("npm: resolved"),
            ..BASE
        },
        Case {
            name: "publish-port-reachable",
            script: Script::File("publish.py"),
            flags: |fx| strings(&["--net", "on", "--publish", &fx.publish_port.to_string()]),
            during: Some(greet_published),
            // `PORT` is the same port on the host, and the CLI says where while the run is up.
            expect: |fx| {
                let p = fx.publish_port;
                Expect::ok()
                    .has("served")
                    .has("host-addresses: failed")
                    .err(format!("port {p} is published at http://127.0.0.1:{p}"))
            },
            skip_on: &[K8S_NO_HOST_PORT],
            ..BASE
        },
        Case {
            name: "publish-any-host-port-noted",
            script: Script::Inline(
                "import socket\ns = socket.socket()\ns.bind(('0.0.0.0', CTX['publish_port']))\ns.listen()\ndone()\n",
            ),
            flags: |fx| strings(&["--net", "on", "--publish", &format!("0:{}", fx.publish_port)]),
            expect: |fx| {
                Expect::ok()
                    .err(format!("port {} is published at http://127.0.0.1:", fx.publish_port))
            },
            skip_on: &[K8S_NO_HOST_PORT],
            ..BASE
        },
        Case {
            // The fixture's own loopback listener holds the port: refused by name, nothing runs.
            name: "publish-busy-host-port-refused",
            script: MUST_NOT_RUN,
            flags: |fx| strings(&["--net", "on", "--publish", &busy_port(fx).to_string()]),
            expect: |fx| {
                let p = busy_port(fx);
                Expect::exit(2)
                    .err(format!("host port {p} is already in use"))
                    .err(format!("`0:{p}` for any free host port"))
            },
            skip_on: &[K8S_NO_HOST_PORT],
            ..BASE
        },
        Case {
            name: "mount-ro-rw",
            script: Script::File("mounts.py"),
            flags: |fx| {
                let (ro, rw) = (path(&fx.mnt_ro), path(&fx.mnt_rw));
                strings(&[
                    "--approve",
                    "--mount",
                    &format!("{ro}:ro"),
                    "--mount",
                    &format!("{rw}:rw"),
                ])
            },
            args: |fx| vec![format!("ro:{}", path(&fx.mnt_ro)), format!("rw:{}", path(&fx.mnt_rw))],
            expect: |_| Expect::ok().changes(&["+mnt/rw/written.txt"]),
            skip_on: &[K8S_NO_HOST_MOUNTS],
            ..BASE
        },
        Case {
            name: "mount-inline-ro-subdir",
            script: Script::File("mounts.py"),
            meta: Some("[tool.python-sandbox]\nmounts = [\"./sub:ro\"]"),
            setup: |fx| {
                fs::create_dir(fx.ws.join("sub"))
                    .and_then(|()| fs::write(fx.ws.join("sub/data.txt"), "read-only data\n"))
                    .map_err(|e| format!("cannot create ws/sub: {e}"))
            },
            args: |_| strings(&["ro:sub"]),
            skip_on: &[K8S_NO_HOST_MOUNTS],
            ..BASE
        },
        Case {
            name: "boundary-mount-home-ssh-refused",
            script: MUST_NOT_RUN,
            flags: |fx| strings(&["--mount", &path(&fx.home.join(".ssh"))]),
            expect: |_| Expect::exit(4).err(".ssh"),
            ..BASE
        },
        Case {
            // `./link` is a real-looking name for the fake home's `.ssh`: the crossing is
            // classified with the link resolved (once missed by `session start`).
            name: "boundary-mount-link-to-home-ssh-refused",
            script: MUST_NOT_RUN,
            setup: |fx| {
                symlink(fx.home.join(".ssh"), fx.ws.join("link"))
                    .map_err(|e| format!("cannot plant ./link: {e}"))
            },
            flags: |_| strings(&["--mount", "./link:ro"]),
            expect: |_| Expect::exit(4).err(".ssh"),
            ..BASE
        },
        Case {
            name: "boundary-mount-tmp-rw-refused",
            script: MUST_NOT_RUN,
            flags: |fx| strings(&["--mount", &format!("{}:rw", path(&fx.outside_rw))]),
            expect: |fx| Expect::exit(4).err(path(&fx.outside_rw)),
            ..BASE
        },
        Case {
            // Mounting a parent of $HOME exposes all of it, even read-only.
            name: "boundary-mount-parent-of-home-refused",
            script: MUST_NOT_RUN,
            flags: |fx| strings(&["--mount", &format!("{}:ro", path(&fx.root))]),
            expect: |fx| Expect::exit(4).err(path(&fx.root)),
            ..BASE
        },
        Case {
            // A read-only mount does not stop connect().
            name: "boundary-mount-daemon-socket-refused",
            script: MUST_NOT_RUN,
            flags: |fx| {
                strings(&["--mount", &format!("{}:ro", path(&fx.host_tmp.join("docker.sock")))])
            },
            expect: |_| Expect::exit(4).err("docker.sock"),
            ..BASE
        },
        Case {
            // The script itself asks for the secret, through `..` out of the workspace.
            name: "boundary-inline-mount-home-ssh-refused",
            script: MUST_NOT_RUN,
            meta: Some("[tool.python-sandbox]\nmounts = [\"../home/.ssh\"]"),
            expect: |_| Expect::exit(4).err(".ssh"),
            ..BASE
        },
        Case {
            name: "boundary-approve-runs",
            script: Script::File("mounts.py"),
            flags: |fx| strings(&["--approve", "--mount", &format!("{}:rw", path(&fx.outside_rw))]),
            args: |fx| vec![format!("rw:{}", path(&fx.outside_rw))],
            expect: |_| Expect::ok().changes(&["+tmp/outside/written.txt"]),
            skip_on: &[K8S_NO_HOST_MOUNTS],
            ..BASE
        },
        Case {
            name: "exit-42",
            script: Script::Inline("sys.exit(42)\n"),
            expect: |_| Expect::exit(42),
            ..BASE
        },
        Case {
            name: "exit-42-json",
            script: Script::Inline("print(\"exiting\")\nsys.exit(42)\n"),
            flags: |_| strings(&["--json"]),
            expect: |_| Expect::exit(42).has("exiting"),
            ..BASE
        },
        Case {
            // With --json both streams land on the CLI's stderr: in exactly the order written,
            // even after a burst larger than a pipe (two pipes, or a daemon's two copies, lose
            // it: bwrap once delivered the last ~6 KB of stdout after stderr).
            name: "json-output-order",
            script: Script::Inline(
                "for burst in range(3):\n\
                 \x20   for i in range(1500):\n\
                 \x20       print(f'o{burst} {i:05d} ' + 'x' * 40)\n\
                 \x20   sys.stdout.flush()\n\
                 \x20   print(f'ERR-{burst}', file=sys.stderr, flush=True)\n\
                 done()\n",
            ),
            flags: |_| strings(&["--json"]),
            expect: |_| Expect::ok().host(output_in_write_order),
            ..BASE
        },
        Case {
            name: "exit-sigterm-143",
            script: Script::Inline(
                "import signal, time\nprint(\"about to die\")\nos.kill(os.getpid(), signal.SIGTERM)\n\
                 time.sleep(5)\nprint(\"BROKEN sigterm: still alive 5 s after SIGTERM\")\n",
            ),
            expect: |_| Expect::exit(143).has("about to die"),
            ..BASE
        },
        // A reader that goes away (`run … | head -1`) ends the run as a closed pipe ends a
        // process: 141 on every engine (the script dies of SIGPIPE where it writes to our
        // stdout itself; where its output passes through the CLI, the CLI stops it), and
        // nothing of it survives.
        Case {
            name: "closed-reader-ends-the-run-141",
            script: Script::Inline(CLOSED_READER),
            stdout_lines: Some(1),
            expect: |_| Expect::exit(141).has("line 0").within(60),
            ..BASE
        },
        Case {
            // Through the scrubber (a secret-looking variable): the CLI relays the output.
            name: "closed-reader-ends-the-scrubbed-run-141",
            script: Script::Inline(CLOSED_READER),
            flags: |_| strings(&["--env", "API_TOKEN=closed-reader-token"]),
            stdout_lines: Some(1),
            expect: |_| Expect::exit(141).has("line 0").lacks("closed-reader-token").within(60),
            ..BASE
        },
        Case {
            // A script that had already exited keeps its own code (or dies of the closed
            // pipe, where it still writes after the reader left).
            name: "closed-reader-after-the-script-exited",
            script: Script::Inline(
                "import signal\nsignal.signal(signal.SIGPIPE, signal.SIG_DFL)\nprint(\"line 0\\nline 1\\nline 2\")\nsys.exit(7)\n",
            ),
            stdout_lines: Some(1),
            expect: |_| Expect::exit(7).or_exit(141).has("line 0").within(60),
            ..BASE
        },
        Case {
            // Through the scrubber, output without a newline: what the CLI holds stays a few
            // chunks, not the whole output (a scrubbed gigabyte once queued in it whole).
            name: "scrubbed-output-keeps-the-cli-small",
            script: Script::Inline(BIG_OUTPUT),
            flags: |_| strings(&["--env", "API_TOKEN=big-output-token"]),
            during: Some(|_, running| cli_memory_stays_under(running, CLI_PEAK_MIB)),
            expect: |_| Expect::ok().has("end big-output").lacks("big-output-token").within(240),
            deadline_secs: 300,
            ..BASE
        },
        Case {
            name: "exit-uncaught-exception-1",
            script: Script::Inline("raise RuntimeError(\"boom from the script\")\n"),
            expect: |_| Expect::exit(1).err("RuntimeError: boom from the script"),
            ..BASE
        },
        Case {
            name: "args-verbatim",
            script: Script::File("args.py"),
            args: |_| strings(ARGS),
            expect: |_| Expect::ok().host(args_arrived),
            ..BASE
        },
        Case {
            name: "timeout-flag-kills-tree-json",
            script: Script::File("spawn.py"),
            flags: |_| strings(&["--json", "--timeout", "2"]),
            args: |_| strings(&["hang"]),
            expect: |_| Expect::exit(124).has("ok detached child alive").has("sleeping").within(30),
            ..BASE
        },
        Case {
            name: "timeout-inline",
            script: Script::File("spawn.py"),
            meta: Some("[tool.python-sandbox]\ntimeout = 2"),
            args: |_| strings(&["hang"]),
            expect: |_| Expect::exit(124).has("sleeping").within(30),
            ..BASE
        },
        Case {
            name: "timeout-flag-beats-inline",
            script: Script::File("sleep.py"),
            meta: Some("[tool.python-sandbox]\ntimeout = 1"),
            flags: |_| strings(&["--timeout", "60"]),
            args: |_| strings(&["3"]),
            ..BASE
        },
        Case {
            // The launcher itself is stopped (Ctrl-C, a CI timeout): the sandbox must go with it.
            name: "cli-sigterm-kills-tree",
            script: Script::File("spawn.py"),
            args: |_| strings(&["hang"]),
            during: Some(|fx, running| signal_when_running(fx, running, "TERM")),
            // 143 on every engine: the tree dies, and the exit code names the signal.
            expect: |_| Expect::exit(143).has("sleeping").within(40),
            ..BASE
        },
        Case {
            name: "cli-sigint-kills-tree",
            script: Script::File("spawn.py"),
            args: |_| strings(&["hang"]),
            during: Some(|fx, running| signal_when_running(fx, running, "INT")),
            // native passes the Ctrl-C on: the script ends by its own `KeyboardInterrupt`.
            expect: |fx| {
                let e = Expect::exit(130).has("sleeping").within(40);
                if fx.engine == "native" { e.err("KeyboardInterrupt") } else { e }
            },
            ..BASE
        },
        Case {
            // SIGKILL leaves the CLI no chance to clean up: only bwrap's --die-with-parent (kernel
            // PDEATHSIG) can guarantee this; container engines leave it to the reaper.
            name: "cli-sigkill-kills-tree",
            script: Script::File("spawn.py"),
            args: |_| strings(&["hang"]),
            during: Some(|fx, running| signal_when_running(fx, running, "KILL")),
            // The placeholders of protected paths are removed by the run's janitor once the
            // sandbox is gone (`reaper::protect`), a moment after the CLI's death.
            expect: |_| Expect::exit(137).has("sleeping").within(40).settle(3),
            // native: the same parent-death signal, on its monitor.
            only_on: Some(&["bwrap", "native"]),
            ..BASE
        },
        Case {
            name: "no-orphans-after-exit",
            script: Script::File("spawn.py"),
            expect: |_| Expect::ok().has("ok detached child alive"),
            ..BASE
        },
        Case {
            name: "metadata-error-exit-2",
            script: MUST_NOT_RUN,
            meta: Some("dependencies = ["),
            expect: |_| Expect::exit(2).located(),
            ..BASE
        },
        Case {
            name: "metadata-invalid-net-exit-2",
            script: MUST_NOT_RUN,
            meta: Some("[tool.python-sandbox]\nnet = \"maybe\""),
            expect: |_| Expect::exit(2).located(),
            ..BASE
        },
        Case {
            name: "bad-flag-exit-2",
            script: MUST_NOT_RUN,
            flags: |_| strings(&["--net", "maybe"]),
            expect: |_| Expect::exit(2),
            ..BASE
        },
        Case {
            name: "bad-timeout-exit-2",
            script: MUST_NOT_RUN,
            flags: |_| strings(&["--timeout", "soon"]),
            expect: |_| Expect::exit(2),
            ..BASE
        },
        Case {
            // Never fall back to running unsandboxed (isolation.md (b) 31), nor to another engine.
            name: "engine-broken-exit-3-never-unsandboxed",
            script: MUST_NOT_RUN,
            setup: |fx| {
                let bin = fx.root.join("fakebin");
                fs::create_dir(&bin)
                    .and_then(|()| fs::write(bin.join("bwrap"), BROKEN_BWRAP))
                    .and_then(|()| {
                        fs::set_permissions(bin.join("bwrap"), fs::Permissions::from_mode(0o755))
                    })
                    .map_err(|e| format!("cannot plant a broken bwrap: {e}"))
            },
            env: |fx| match fx.engine.as_str() {
                "bwrap" => {
                    let host_path = std::env::var("PATH").unwrap_or_default();
                    vec![("PATH".into(), format!("{}:{host_path}", path(&fx.root.join("fakebin"))))]
                }
                "docker" => vec![(
                    "DOCKER_HOST".into(),
                    format!("unix://{}", path(&fx.root.join("none.sock"))),
                )],
                _ => vec![(
                    "CONTAINER_HOST".into(),
                    format!("unix://{}", path(&fx.root.join("none.sock"))),
                )],
            },
            // An unreachable daemon is "no engine available" (3). A bwrap that passes the CLI's
            // (memoized) probe but fails while setting up may also end as a setup error (2).
            expect: |fx| {
                let e = Expect::exit(3).err(fx.engine.clone());
                if fx.engine == "bwrap" { e.or_exit(2) } else { e }
            },
            // native has no binary to break: its own variant below blocks user namespaces.
            only_on: Some(&["bwrap", "docker", "podman"]),
            ..BASE
        },
        Case {
            name: "native-blocked-exit-3-never-unsandboxed",
            script: MUST_NOT_RUN,
            wrap: USERNS_OFF,
            // The probe names the setting, and the CLI says so before preparing anything.
            expect: |_| Expect::exit(3).err("native").err("user.max_user_namespaces = 0"),
            only_on: Some(&["native"]),
            ..BASE
        },
        Case {
            // Nothing works here: `auto` must refuse with guidance, never run the script bare.
            name: "no-engine-at-all-exit-3",
            script: MUST_NOT_RUN,
            flags: |_| strings(&["--engine", "auto"]),
            env: |fx| {
                let none = format!("unix://{}", path(&fx.root.join("none.sock")));
                vec![
                    ("PATH".into(), path(&fx.root.join("emptybin"))),
                    ("DOCKER_HOST".into(), none.clone()),
                    ("CONTAINER_HOST".into(), none),
                ]
            },
            // native is built in: only a host without user namespaces stops it.
            wrap: USERNS_OFF,
            expect: |_| Expect::exit(3).err("native").err("bwrap").err("docker").err("podman"),
            // Engine-independent: one column is enough.
            only_on: Some(&["bwrap"]),
            ..BASE
        },
        Case {
            name: "engine-unavailable-exit-3",
            script: MUST_NOT_RUN,
            expect: |fx| Expect::exit(3).err(fx.engine.clone()),
            unavailable_only: true,
            ..BASE
        },
        Case {
            // Our table is a policy: a typo in it must not run the script with the default.
            name: "inline-unknown-key-exit-2",
            script: MUST_NOT_RUN,
            meta: Some("[tool.python-sandbox]\nnett = \"off\""),
            expect: |_| Expect::exit(2).located().err("did you mean `net`?"),
            ..BASE
        },
        Case {
            // An unclosed block would be ignored, settings and all: stop instead.
            name: "unclosed-block-exit-2",
            script: Script::Inline(
                "# /// script\n# [tool.python-sandbox]\n# net = \"off\"\nwrite(\"ran\")\ndone()\n",
            ),
            expect: |_| Expect::exit(2).located().err("never closed"),
            ..BASE
        },
        Case {
            name: "mount-unknown-mode-exit-2-creates-nothing",
            script: MUST_NOT_RUN,
            flags: |_| strings(&["--mount", "./sub:xx"]),
            expect: |_| Expect::exit(2).err("`:ro`").err("`./sub:xx:rw`"),
            ..BASE
        },
        Case {
            // Checked before anything is created, so the rw mount is not made either.
            name: "mount-missing-ro-exit-2-creates-nothing",
            script: MUST_NOT_RUN,
            flags: |_| strings(&["--mount", "./made:rw", "--mount", "./nothere:ro"]),
            expect: |_| Expect::exit(2).err("nothere` does not exist"),
            ..BASE
        },
        Case {
            // Outside the workspace as inside it: a missing rw directory is created.
            name: "mount-missing-rw-outside-created",
            script: Script::File("mounts.py"),
            flags: |fx| {
                let new = path(&fx.outside_rw.join("new/deeper"));
                strings(&["--approve", "--mount", &format!("{new}:rw")])
            },
            args: |fx| vec![format!("rw:{}", path(&fx.outside_rw.join("new/deeper")))],
            expect: |_| {
                Expect::ok().changes(&[
                    "+tmp/outside/new",
                    "+tmp/outside/new/deeper",
                    "+tmp/outside/new/deeper/written.txt",
                ])
            },
            skip_on: &[K8S_NO_HOST_MOUNTS],
            ..BASE
        },
        Case {
            // Creating a missing mount point never follows a symlink out of where it points.
            name: "mount-missing-rw-through-symlink-refused",
            script: MUST_NOT_RUN,
            setup: |fx| {
                symlink(&fx.outside_rw, fx.ws.join("link")).map_err(|e| format!("symlink: {e}"))
            },
            flags: |_| strings(&["--mount", "./link/new:rw"]),
            expect: |_| Expect::exit(2).err("symlink"),
            skip_on: &[K8S_NO_HOST_MOUNTS],
            ..BASE
        },
        Case {
            name: "json-error-exit-2-one-object",
            script: MUST_NOT_RUN,
            meta: Some("dependencies = ["),
            flags: |_| strings(&["--json"]),
            expect: |_| Expect::exit(2).located().host(json_error_with_diagnostics),
            ..BASE
        },
        Case {
            // `run --json 2>jerr`: the CLI's own output file is not something the script wrote.
            name: "json-files-written-not-own-stderr",
            script: Script::File("write_cwd.py"),
            flags: |_| strings(&["--json"]),
            stderr_to: Some("jerr"),
            expect: |_| {
                Expect::ok()
                    .changes(&["+ws/jerr", "+ws/out.txt", "+ws/sub", "+ws/sub/nested.txt"])
                    .host(files_written_by_the_script_only)
            },
            ..BASE
        },
        Case {
            // `run -`: the script read from stdin runs from a private copy outside the
            // workspace (TMPDIR is the host temp dir here), removed when the run ends.
            name: "script-from-stdin",
            script: Script::File("compute.py"),
            stdin_script: true,
            env: |fx| vec![("TMPDIR".into(), path(&fx.host_tmp))],
            expect: |_| Expect::ok().has("sum-of-squares: 332833500"),
            ..BASE
        },
        Case {
            // One environment contract on every engine (sandbox_core::run_env): exactly the
            // same variable names (the host's LC_ALL/TERM/TZ pass through where set), the same
            // HOME, host name, CA variables and `container`, PWD the working directory, and a
            // venv (docker and podman: the image's empty one without dependencies) as VIRTUAL_ENV.
            name: "env-contract",
            script: Script::Inline(
                "import socket\n\
                 names = sorted(set(os.environ) - {'LC_ALL', 'TERM', 'TZ', 'LD_LIBRARY_PATH'})\n\
                 lib = os.environ.get('LD_LIBRARY_PATH', '/opt/python-sandbox/python/lib')\n\
                 print('LIBRARY', lib.startswith('/opt/python-sandbox/'))\n\
                 print('NAMES', ' '.join(names))\n\
                 print('HOME', os.environ.get('HOME'))\n\
                 print('HOSTNAME', os.environ.get('HOSTNAME'), socket.gethostname())\n\
                 print('CONTAINER', os.environ.get('container'))\n\
                 ca = '/etc/python-sandbox/ca-certificates.crt'\n\
                 print('CA', os.environ.get('SSL_CERT_FILE') == os.environ.get('REQUESTS_CA_BUNDLE') == ca)\n\
                 print('VENV', os.environ.get('VIRTUAL_ENV') == sys.prefix != sys.base_prefix)\n\
                 print('PWD', os.environ.get('PWD') == os.getcwd())\n\
                 done()\n",
            ),
            expect: |_| {
                Expect::ok()
                    .has("NAMES HOME HOSTNAME LANG PATH PWD REQUESTS_CA_BUNDLE SSL_CERT_FILE VIRTUAL_ENV container\n")
                    .has("HOME /home/sandbox")
                    .has("HOSTNAME python-sandbox python-sandbox")
                    .has("CONTAINER python-sandbox")
                    .has("CA True")
                    .has("VENV True")
                    .has("PWD True")
                    .has("LIBRARY True")
            },
            ..BASE
        },
        Case {
            // A relocated interpreter (a pyenv build under the caller's home) still finds its
            // library: `LD_LIBRARY_PATH`, set only where its run path is absolute, is the one
            // variable the contract allows beyond the list above.
            name: "own-paths-reveal-no-host-home",
            script: Script::File("own_paths.py"),
            ..BASE
        },
        // The one seccomp wall (sandbox_core::WALL), and the kernel knobs and tmpfs caps every
        // engine must hold alike.
        Case {
            // Files that already exist stay writable to the script, owned by the caller, with
            // their modes and no ACL added (a root caller's sandbox is nobody: idmapped mounts,
            // not a permission change; a non-root caller's is the caller).
            name: "workspace-existing-files-writable-and-unchanged",
            script: Script::Inline(
                "open('mine.txt', 'a').write('appended\\n')\n\
                 open('private/inner.txt', 'a').write('appended\\n')\n\
                 open('private/new.txt', 'w').write('new\\n')\n\
                 done()\n",
            ),
            setup: |fx| {
                let private = fx.ws.join("private");
                fs::write(fx.ws.join("mine.txt"), "original\n")
                    .and_then(|()| {
                        fs::set_permissions(
                            fx.ws.join("mine.txt"),
                            fs::Permissions::from_mode(0o644),
                        )
                    })
                    .and_then(|()| fs::create_dir(&private))
                    .and_then(|()| fs::write(private.join("inner.txt"), "original\n"))
                    .and_then(|()| {
                        fs::set_permissions(
                            private.join("inner.txt"),
                            fs::Permissions::from_mode(0o600),
                        )
                    })
                    .and_then(|()| fs::set_permissions(&private, fs::Permissions::from_mode(0o700)))
                    .map_err(|e| format!("setup: {e}"))
            },
            expect: |_| {
                Expect::ok()
                    .changes(&["~ws/mine.txt", "~ws/private/inner.txt", "+ws/private/new.txt"])
                    .host(existing_files_unchanged)
            },
            ..BASE
        },
        Case {
            name: "wall-no-setuid-setgid-files",
            script: Script::File("setid.py"),
            expect: |_| Expect::ok().changes(&["+ws/f", "+ws/h"]).host(no_set_id_bits),
            ..BASE
        },
        // The wall's rules hold for the native syscall table; a call through another (i386,
        // x32) kills the caller on every engine (on docker and podman the runtime kills the
        // calling thread: the profile lists the native architecture alone).
        Case { name: "wall-foreign-abi-killed", script: Script::File("foreign_abi.py"), ..BASE },
        Case {
            name: "wall-proc-sys-and-sysrq-read-only",
            script: Script::File("proc_sys.py"),
            ..BASE
        },
        Case {
            name: "tmpfs-size-caps-tmp",
            script: Script::File("tmpfs_cap.py"),
            flags: |_| strings(&["--tmpfs-size", "16m"]),
            expect: |_| Expect::ok().has("ok 32 MiB to /tmp fails with ENOSPC"),
            ..BASE
        },
        // Resource limits: every engine holds each asked limit or refuses the run with a hint
        // (exit 2, nothing run); `detect --json` says which (crate::engines::limit_mechanism).
        Case {
            name: "limit-memory-256m-stops-1-gib",
            script: Script::File("limit_memory.py"),
            flags: |_| strings(&["--memory", "256m"]),
            expect: memory_256m,
            ..BASE
        },
        Case {
            name: "limit-inline-memory-256m-stops-1-gib",
            script: Script::File("limit_memory.py"),
            meta: Some("[tool.python-sandbox]\nmemory = \"256m\""),
            expect: memory_256m,
            ..BASE
        },
        Case {
            name: "limit-pids-16-stops-a-fork-bomb",
            script: Script::File("limit_pids.py"),
            flags: |_| strings(&["--pids-limit", "16"]),
            args: |_| strings(&["64", "--pids-limit 16", "16"]),
            expect: |fx| match crate::engines::limit_mechanism(&fx.engine, "pids") {
                Some(_) => Expect::ok().has("ok fork bomb of 64 under --pids-limit 16 stopped"),
                None => refused_limit(),
            },
            ..BASE
        },
        // The defaults (2 GiB, 512 processes) hold where nothing is asked, by what holds an
        // asked limit (`detect --json`); both scripts are bounded, and the host keeps forking.
        Case {
            name: "limit-default-memory-stops-a-memory-hog",
            script: Script::File("default_memory.py"),
            flags: |_| strings(&["--timeout", "120"]),
            during: Some(host_stays_usable),
            expect: |fx| match crate::engines::limit_mechanism(&fx.engine, "memory").as_deref() {
                Some("rlimit") => Expect::ok().has("ok memory hog stopped by the default"),
                Some(_) => Expect::exit(137).lacks("unbounded"),
                // Nothing holds memory there (rootless podman on cgroup v1): no default either.
                None => Expect::ok().has("unbounded"),
            },
            deadline_secs: 180,
            ..BASE
        },
        Case {
            name: "limit-default-pids-stops-a-fork-bomb",
            script: Script::File("limit_pids.py"),
            flags: |_| strings(&["--timeout", "120"]),
            args: |_| strings(&["600", "the default", "512"]),
            during: Some(host_stays_usable),
            expect: |fx| match crate::engines::limit_mechanism(&fx.engine, "pids") {
                Some(_) => Expect::ok()
                    .has("ok fork bomb of 600 under the default stopped")
                    .lacks("unbounded"),
                // A pod's processes are the node's to limit (`podPidsLimit`).
                None => Expect::ok(),
            },
            deadline_secs: 180,
            ..BASE
        },
        Case {
            // `none` lifts a default: the same hog, bounded at 3 GiB, gets it all.
            name: "limit-memory-none-lifts-the-default",
            script: Script::File("default_memory.py"),
            flags: |_| strings(&["--memory", "none", "--timeout", "120"]),
            expect: memory_default_lifted,
            deadline_secs: 180,
            ..BASE
        },
        Case {
            name: "limit-inline-memory-none-lifts-the-default",
            script: Script::File("default_memory.py"),
            meta: Some("[tool.python-sandbox]\nmemory = \"none\""),
            flags: |_| strings(&["--timeout", "120"]),
            expect: memory_default_lifted,
            deadline_secs: 180,
            ..BASE
        },
        Case {
            name: "limit-cpus-accepted-or-refused-with-hint",
            script: Script::File("limit_cpus.py"),
            flags: |_| strings(&["--cpus", "0.5"]),
            expect: |fx| match crate::engines::limit_mechanism(&fx.engine, "cpus") {
                Some(_) => Expect::ok().has("ok ran under --cpus 0.5"),
                None => refused_limit(),
            },
            ..BASE
        },
        Case {
            name: "limit-invalid-memory-refused",
            script: MUST_NOT_RUN,
            flags: |_| strings(&["--memory", "1k"]),
            expect: |_| {
                Expect::exit(2)
                    .err("invalid memory size `1k`")
                    .err("hint: use bytes or a suffix: `512m`, `2g`")
            },
            ..BASE
        },
        Case {
            // Used to hang every engine: the attach stopped init for good once the script,
            // its tracer, was gone.
            name: "ptrace-and-sigstop-init-then-exit-ends-the-run",
            script: Script::File("ptrace_init.py"),
            expect: |_| {
                Expect::ok()
                    .has("ok ptrace attach init")
                    .has("ok ptrace seize init")
                    .has("ok SIGSTOP to init did not stop this script")
                    .within(30)
            },
            deadline_secs: 60,
            ..BASE
        },
        Case {
            // Landlock (native's defence in depth): a file outside the writable list does not
            // open for writing though its mount and mode would allow it.
            name: "landlock-refuses-writes-outside-the-writable-list",
            script: Script::Inline(
                "must_fail(\"write /proc/self/comm\", lambda: open(\"/proc/self/comm\", \"w\").write(\"x\"))\ndone()\n",
            ),
            only_on: Some(&["native"]),
            ..BASE
        },
        Case {
            name: "init-memory-not-writable",
            script: Script::File("init_memory.py"),
            // bwrap hides the files; the containers' init is the image's execute-only tini.
            ..BASE
        },
        Case {
            name: "wall-no-xattrs",
            script: Script::File("xattr.py"),
            expect: |_| Expect::ok().changes(&["+ws/x", "+ws/l"]),
            ..BASE
        },
    ]
}

/// A 1 GiB allocation under a 256 MiB limit, by how the engine holds it (`detect --json`).
fn memory_256m(fx: &Fixture) -> Expect {
    match crate::engines::limit_mechanism(&fx.engine, "memory").as_deref() {
        // RLIMIT_DATA: the allocation fails and the script carries on.
        Some("rlimit") => Expect::ok().has("ok 1 GiB under --memory 256m: MemoryError"),
        // A cgroup's memory.max: the kernel's OOM killer, SIGKILL.
        Some(_) => Expect::exit(137).lacks("LEAK"),
        None => refused_limit(),
    }
}

/// `none` for memory: the bounded hog gets all it asks for; a pod always has a memory limit.
fn memory_default_lifted(fx: &Fixture) -> Expect {
    match fx.engine.as_str() {
        "k8s" => Expect::exit(2).err("`--memory none` is not supported"),
        _ => Expect::ok().has("unbounded: the memory hog got 3072 MiB"),
    }
}

/// A limit the engine cannot hold here: refused before anything runs, with a hint.
fn refused_limit() -> Expect {
    Expect::exit(2).err("cannot enforce").err("hint: ")
}

/// `run --json` that stops early still prints one JSON object, with the diagnostics.
fn json_error_with_diagnostics(_: &Fixture, run: &Run) -> Result<(), String> {
    let v: serde_json::Value = serde_json::from_str(run.out.stdout.trim()).map_err(|e| {
        format!("--json: stdout is not one JSON object ({e}): {:?}", run.out.stdout)
    })?;
    let diagnostics = v["diagnostics"].as_array().map_or(0, Vec::len);
    if v["exit_code"] != 2 || !v["error"].is_string() || diagnostics == 0 {
        return Err(format!("--json: expected exit_code 2, an error and diagnostics: {v}"));
    }
    Ok(())
}

/// Each `ERR-n` line comes right after the last line of burst n, and before burst n+1.
fn output_in_write_order(_: &Fixture, run: &Run) -> Result<(), String> {
    let lines: Vec<&str> = run.script_out.lines().collect();
    for burst in 0..3 {
        let err = format!("ERR-{burst}");
        let at = lines.iter().position(|l| *l == err).ok_or(format!("no `{err}` line"))?;
        let before = format!("o{burst} 01499 ");
        if at == 0 || !lines[at - 1].starts_with(&before) {
            let seen = at.checked_sub(1).map_or("nothing", |i| lines[i]);
            return Err(format!("`{err}` follows {seen:?}, not the last line of burst {burst}"));
        }
    }
    Ok(())
}

/// `--json` names every protected path `protected.py` was refused, and its files as written.
fn protected_refused_in_json(_: &Fixture, run: &Run) -> Result<(), String> {
    let json = run.json.as_ref().ok_or("--json printed no object")?;
    let want = serde_json::json!([
        ".git/config",
        ".git/hooks/pre-commit",
        ".git",
        ".claude/settings.json",
        ".envrc",
        ".mcp.json",
        ".vscode/settings.json",
        "sub/.git"
    ]);
    if json["protected_refused"] != want {
        return Err(format!(
            "--json: protected_refused is {}, expected {want}",
            json["protected_refused"]
        ));
    }
    if json["files_written"] != serde_json::json!(["cfg.tmp", "out.txt"]) {
        return Err(format!("--json: files_written is {}", json["files_written"]));
    }
    Ok(())
}

fn files_written_by_the_script_only(_: &Fixture, run: &Run) -> Result<(), String> {
    let files = run.json.as_ref().map(|v| v["files_written"].clone()).unwrap_or_default();
    let want = serde_json::json!(["out.txt", "sub/nested.txt"]);
    if files != want {
        return Err(format!("--json: files_written is {files}, expected {want}"));
    }
    Ok(())
}

/// No route at all: not the host's loopback, not its abstract sockets, not DNS. A pod always
/// has its interface (its network off is a deny-all NetworkPolicy), so there the interface
/// list is not the test; reachability is.
/// On a cluster that does not enforce NetworkPolicy, what every net-off run gets: refused
/// before anything runs (issue 33 item 2: the script had the network). `None` elsewhere.
fn refused_net_off(fx: &Fixture) -> Option<Expect> {
    (fx.engine == "k8s" && !crate::engines::k8s_enforces_network_policy())
        .then(|| Expect::exit(2).err("does not enforce NetworkPolicy").err("hint:"))
}

/// What `protected.py` changes on the host through a pod. The pod's `.git` is the script's
/// own (never synced in, never back); its rename to `git-aside/` is a plain directory that
/// comes back like any other, and no host tool runs or trusts anything under that name. What
/// the host trusts (`.git`, `.claude`, `.envrc`, `.mcp.json`, `sub/.git`, `.vscode`) stays as
/// it was.
const POD_PROTECTED_CHANGES: &[&str] = &[
    "+ws/cfg.tmp",
    "+ws/out.txt",
    "+ws/git-aside",
    "+ws/git-aside/hooks",
    "+ws/git-aside/hooks/pre-commit",
];

fn net_off(fx: &Fixture) -> Expect {
    if let Some(refused) = refused_net_off(fx) {
        return refused;
    }
    let e = Expect::ok()
        .has("loopback: failed")
        .has("abstract: failed")
        .has("dns: failed")
        .has("metadata: failed")
        .has("host-addresses: failed")
        .loopback(false)
        .abstract_socket(false);
    if fx.engine == "k8s" { e } else { e.has("interfaces: lo-only") }
}

/// Net on is outbound only on every engine: an external interface, never the host's loopback,
/// its own addresses (a bridge's gateway, a docker or podman bridge, its LAN address: private
/// ranges and the host's addresses are walled off) or abstract sockets, and no route to
/// link-local (metadata) addresses. How a refused
/// metadata connect ends is the host's rule here (no route, EHOSTUNREACH); on a pod it is the
/// CNI's enforcement of the NetworkPolicy (a drop times out, a reject refuses).
/// `allow.py` where the engine holds an allowlist (native and bwrap; docker and podman for a
/// root caller, and rootless podman, whose relay joins the container's namespace: every check
/// `ok`, the refusals named in a note); elsewhere refused before anything runs. On k8s a list
/// needs the cluster's egress proxy and NetworkPolicy enforced: the test cluster enforces none
/// (and its proxy is deployed after this suite), so the list is refused there, naming it.
/// (Where both hold, the pod has no DNS of its own: this script's lookups would fail; the
/// end-to-end tier checks the proxy from a pod.)
fn allowlist(fx: &Fixture) -> Expect {
    if fx.engine == "k8s" {
        return Expect::exit(2).err("a list of hosts").err("hint:");
    }
    let holds = match fx.engine.as_str() {
        "native" | "bwrap" | "podman" => true,
        "docker" => fx.uid == 0,
        _ => false,
    };
    if holds {
        Expect::ok()
            .err("the network allowlist refused")
            .err("registry.npmjs.org: not in the list (no DNS answer)")
    } else {
        Expect::exit(2).err("cannot hold a network allowlist").err("hint:")
    }
}

/// `allow.py` in a session started with the same list: native and bwrap hold it (every check
/// `ok`, and what the session's keeper refused meanwhile named in a note whose hint widens the
/// session's list); the other engines refuse the start, naming the list.
fn session_allowlist(fx: &Fixture) -> Expect {
    match fx.engine.as_str() {
        "native" | "bwrap" => Expect::ok()
            .err("the network allowlist refused")
            .err("registry.npmjs.org: not in the list (no DNS answer)")
            .err("start a session with"),
        "k8s" => Expect::exit(2).err("a list of hosts").err("hint:"),
        _ => Expect::exit(2).err("cannot hold a network allowlist").err("hint:"),
    }
}

fn net_on(fx: &Fixture) -> Expect {
    let e = Expect::ok()
        .has("interfaces: external")
        .has("loopback: failed")
        .has("metadata: failed")
        .has("host-addresses: failed")
        .loopback(false)
        .abstract_socket(false);
    if fx.engine == "k8s" { e } else { e.has("metadata: failed (OSError errno=113)") }
}

fn written_by_caller(fx: &Fixture, run: &Run) -> Result<(), String> {
    let out = fx.ws.join("out.txt");
    let meta = fs::metadata(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    if (meta.uid(), meta.gid()) != (fx.uid, fx.gid) {
        return Err(format!(
            "out.txt is owned by {}:{}, not the caller {}:{}",
            meta.uid(),
            meta.gid(),
            fx.uid,
            fx.gid
        ));
    }
    let text = fs::read_to_string(&out).unwrap_or_default();
    if text != format!("written by {}\n", fx.tag) {
        return Err(format!("out.txt holds {text:?}"));
    }
    let files: Vec<&str> = run
        .json
        .as_ref()
        .and_then(|j| j.get("files_written"))
        .and_then(|f| f.as_array())
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    for want in ["out.txt", "sub/nested.txt"] {
        if !files.contains(&want) {
            return Err(format!("--json files_written {files:?} lacks {want:?}"));
        }
    }
    Ok(())
}

/// The labels `protected.py` attempts, each refused on every local engine.
const PROTECTED_ATTEMPTS: &[&str] = &[
    "git-config",
    "git-hook",
    "git-moved-aside",
    "git-config-replaced",
    "claude-settings",
    "envrc",
    "mcp-json",
    "vscode-deleted",
    "nested-worktree-git",
];

/// A repository in the workspace (`.git` with a config and hooks), an editor's settings, and a
/// nested worktree whose `.git` is a file.
fn plant_protected(fx: &Fixture) -> Result<(), String> {
    for dir in [".git/hooks", ".vscode", "sub"] {
        fs::create_dir_all(fx.ws.join(dir)).map_err(|e| format!("setup: {dir}: {e}"))?;
    }
    for (file, text) in [
        (".git/config", "[core]\n\tbare = false\n"),
        (".git/description", "unnamed\n"),
        (".vscode/settings.json", "{}\n"),
        ("sub/.git", "gitdir: ../.git/worktrees/sub\n"),
    ] {
        fs::write(fx.ws.join(file), text).map_err(|e| format!("setup: {file}: {e}"))?;
    }
    Ok(())
}

fn plant_links(fx: &Fixture) -> Result<(), String> {
    for (link, target) in
        [("h", fx.home.as_path()), ("e", Path::new("/etc")), ("t", fx.host_tmp.as_path())]
    {
        symlink(target, fx.ws.join(link)).map_err(|e| format!("cannot plant ./{link}: {e}"))?;
    }
    Ok(())
}

/// Writes the scripts attempted in system directories must not exist on the host. A broken engine
/// running as root could really create them, so they are removed after being reported.
fn no_system_litter(fx: &Fixture, _: &Run) -> Result<(), String> {
    let name = format!("python-sandbox-conformance-{}", fx.tag);
    let mut found = Vec::new();
    for dir in ["/etc", "/usr", "/var", "/", "/tmp"] {
        let p = Path::new(dir).join(&name);
        if p.exists() {
            let _ = fs::remove_file(&p);
            found.push(p.display().to_string());
        }
    }
    if found.is_empty() { Ok(()) } else { Err(format!("LEAK writes reached the host: {found:?}")) }
}

/// A `/etc/shadow` the script could read must not be the host's.
fn not_the_host_shadow(_: &Fixture, run: &Run) -> Result<(), String> {
    let Some(seen) = run.script_out.lines().find_map(|l| l.strip_prefix("shadow-sha256: ")) else {
        return Ok(());
    };
    // Unreadable for the runner means unreadable for a sandbox running as the same user.
    let Ok(host) = fs::read("/etc/shadow") else { return Ok(()) };
    let digest: String = Sha256::digest(&host).iter().map(|b| format!("{b:02x}")).collect();
    if seen.trim() == digest {
        return Err("LEAK the script read the host's /etc/shadow".into());
    }
    Ok(())
}

fn fifo_on_host(fx: &Fixture, _: &Run) -> Result<(), String> {
    let meta = fs::symlink_metadata(fx.ws.join("p")).map_err(|e| format!("./p: {e}"))?;
    if meta.file_type().is_fifo() { Ok(()) } else { Err("./p on the host is not a FIFO".into()) }
}

fn args_arrived(_: &Fixture, run: &Run) -> Result<(), String> {
    let line = run
        .script_out
        .lines()
        .find_map(|l| l.strip_prefix("argv: "))
        .ok_or("the script printed no `argv:` line")?;
    let got: Vec<String> =
        serde_json::from_str(line).map_err(|e| format!("argv line {line:?}: {e}"))?;
    if got != strings(ARGS) {
        return Err(format!("arguments arrived as {got:?}, expected {ARGS:?}"));
    }
    Ok(())
}

/// Waits until the case's detached child runs inside the sandbox (seen on the host, or the
/// script's `sleeping` line, printed once the child is alive: a pod's node may be another
/// machine), then signals the CLI (the process this runner started) the way a terminal or a
/// CI timeout would.
fn signal_when_running(fx: &Fixture, running: &Running<'_>, signal: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let child = format!("conformance-child-{}", fx.tag);
    while fixture::survivors(&child, Duration::ZERO).is_empty()
        && !running.stdout().lines().any(|l| l == "sleeping")
    {
        if running.exited.load(Ordering::SeqCst) || Instant::now() > deadline {
            return Err("the sandboxed child never showed up (on the host or in its output)".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = running.pid;
    // Let the script print `sleeping` before the signal lands.
    std::thread::sleep(Duration::from_millis(500));
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .map_err(|e| format!("cannot run kill: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("kill -{signal} {pid} failed ({status})")) }
}

/// Samples the CLI's peak resident memory (`VmHWM`) until it exits: the last sample before the
/// exit is the run's peak.
fn cli_memory_stays_under(running: &Running<'_>, mib: u64) -> Result<(), String> {
    let status = format!("/proc/{}/status", running.pid);
    let mut peak_kib = 0u64;
    while !running.exited.load(Ordering::SeqCst) {
        let text = fs::read_to_string(&status).unwrap_or_default();
        let hwm = text.lines().find_map(|l| l.strip_prefix("VmHWM:"));
        if let Some(kib) = hwm.and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok()) {
            peak_kib = peak_kib.max(kib);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if peak_kib > mib << 10 {
        return Err(format!(
            "the CLI reached {} MiB of resident memory (at most {mib})",
            peak_kib >> 10
        ));
    }
    Ok(())
}

/// While the run goes on, this host still starts a process every 200 ms: a fork bomb or a
/// memory hog inside took nothing the host needs.
fn host_stays_usable(_: &Fixture, running: &Running<'_>) -> Result<(), String> {
    while !running.exited.load(Ordering::SeqCst) {
        let started = Instant::now();
        let status = std::process::Command::new("/bin/true")
            .status()
            .map_err(|e| format!("the host could not start a process: {e}"))?;
        if !status.success() || started.elapsed() > Duration::from_secs(10) {
            return Err(format!("the host barely starts a process ({:?})", started.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// A host port in use for the whole case: the fixture's loopback listener.
fn busy_port(fx: &Fixture) -> u16 {
    fx.tcp.local_addr().map_or(0, |a| a.port())
}

/// Connects from the host to the published port until the script greets, then says `bye`.
fn greet_published(fx: &Fixture, running: &Running<'_>) -> Result<(), String> {
    let exited = running.exited;
    let want = format!("hello {}\n", fx.tag);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::from("never connected");
    while Instant::now() < deadline && !exited.load(Ordering::SeqCst) {
        match TcpStream::connect(("127.0.0.1", fx.publish_port)) {
            Ok(mut s) => {
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let mut buf = vec![0u8; want.len()];
                match s.read_exact(&mut buf) {
                    Ok(()) if buf == want.as_bytes() => {
                        let _ = s.write_all(b"bye\n");
                        return Ok(());
                    }
                    Ok(()) => last = format!("read {:?}", String::from_utf8_lossy(&buf)),
                    Err(e) => last = format!("read: {e}"),
                }
            }
            Err(e) => last = format!("connect: {e}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!("127.0.0.1:{} never greeted from inside the sandbox ({last})", fx.publish_port))
}

/// Nothing in the workspace may come back setuid or setgid, whatever the script printed.
fn existing_files_unchanged(fx: &Fixture, _: &Run) -> Result<(), String> {
    for (rel, mode) in [
        (".", None),
        ("mine.txt", Some(0o644)),
        ("private", Some(0o700)),
        ("private/inner.txt", Some(0o600)),
        ("private/new.txt", None),
    ] {
        let path = fx.ws.join(rel);
        let meta = fs::symlink_metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if (meta.uid(), meta.gid()) != (fx.uid, fx.gid) {
            return Err(format!("{rel} is owned by {}:{}, not the caller", meta.uid(), meta.gid()));
        }
        if let Some(mode) = mode
            && meta.mode() & 0o7777 != mode
        {
            return Err(format!("{rel} has mode {:o}, was {mode:o}", meta.mode() & 0o7777));
        }
        let mut buf = [0u8; 256];
        if rustix::fs::lgetxattr(&path, "system.posix_acl_access", &mut buf).is_ok() {
            return Err(format!("{rel} carries an ACL after the run"));
        }
    }
    let text = fs::read_to_string(fx.ws.join("private/inner.txt")).map_err(|e| e.to_string())?;
    if text != "original\nappended\n" {
        return Err(format!("private/inner.txt holds {text:?}"));
    }
    Ok(())
}

fn no_set_id_bits(fx: &Fixture, _: &Run) -> Result<(), String> {
    fn walk(dir: &Path, found: &mut Vec<String>) -> Result<(), String> {
        for entry in fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            let path = entry.map_err(|e| e.to_string())?.path();
            let meta =
                fs::symlink_metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            if meta.mode() & 0o6000 != 0 {
                found.push(format!("{} {:o}", path.display(), meta.mode()));
            }
            if meta.is_dir() {
                walk(&path, found)?;
            }
        }
        Ok(())
    }
    let mut found = Vec::new();
    walk(&fx.ws, &mut found)?;
    if found.is_empty() { Ok(()) } else { Err(format!("LEAK setuid/setgid files: {found:?}")) }
}

/// One case per family of the seccomp wall, from the policy's own list
/// (`sandbox_core::FAMILIES`): a new family gets a case, a new syscall a check.
fn seccomp_family_cases() -> Vec<Case> {
    sandbox_core::FAMILIES
        .iter()
        .map(|family| Case {
            name: Box::leak(format!("{SECCOMP_CASE}{}", family.name).into_boxed_str()),
            script: Script::File("syscalls.py"),
            args: seccomp_family_args,
            flags: seccomp_family_flags,
            expect: seccomp_family_expect,
            ..BASE
        })
        .collect()
}

const SECCOMP_CASE: &str = "wall-seccomp-";

/// A syscall of a family, with its number on every architecture that has it (`uname -m`).
type Numbered = (&'static str, Vec<(&'static str, u32)>);

/// The case's family and its syscalls, each with its number on every architecture that has it.
fn seccomp_family(fx: &Fixture) -> (&'static str, Vec<Numbered>) {
    let name = fx.case.strip_prefix(SECCOMP_CASE).unwrap_or_default();
    let Some(family) = sandbox_core::FAMILIES.iter().find(|f| f.name == name) else {
        return (name, Vec::new());
    };
    let calls = family
        .syscalls
        .iter()
        .map(|call| {
            let numbers = sandbox_core::Arch::ALL
                .iter()
                .filter_map(|arch| Some((arch.machine(), arch.syscall(call)?)))
                .collect();
            (*call, numbers)
        })
        .collect();
    (family.name, calls)
}

/// The family's syscalls that the sandbox's architecture (the script's `arch` line) has.
fn seccomp_family_on(fx: &Fixture, run: &Run) -> (&'static str, Vec<&'static str>) {
    let (family, calls) = seccomp_family(fx);
    let machine = run.script_out.lines().find_map(|l| l.strip_prefix("arch ")).unwrap_or_default();
    let present = calls
        .iter()
        .filter(|(_, numbers)| numbers.iter().any(|(arch, _)| *arch == machine))
        .map(|(call, _)| *call)
        .collect();
    (family, present)
}

/// On a pod, the container runtime's own seccomp profile sits under our wall: containerd 1.6's
/// `RuntimeDefault` denies `get_mempolicy` and `set_mempolicy` (EPERM), which ours allows
/// (OpenBLAS and libnuma ask; numpy copes with the refusal, see `deps-numpy-dot-under-the-wall`).
/// The script is told so, and then accepts EPERM there and only there.
fn seccomp_family_flags(fx: &Fixture) -> Vec<String> {
    if fx.engine == "k8s" {
        strings(&["--env", "CONF_RUNTIME_MAY_DENY=mempolicy"])
    } else {
        Vec::new()
    }
}

fn seccomp_family_args(fx: &Fixture) -> Vec<String> {
    let (family, calls) = seccomp_family(fx);
    std::iter::once(family.to_owned())
        .chain(calls.iter().map(|(call, numbers)| {
            let numbers: Vec<String> =
                numbers.iter().map(|(arch, nr)| format!("{arch}:{nr}")).collect();
            format!("{call}={}", numbers.join(","))
        }))
        .collect()
}

fn seccomp_family_expect(fx: &Fixture) -> Expect {
    let (family, _) = seccomp_family(fx);
    // The setid family's neighbour check creates `h` with an ordinary mode.
    let changes: &[&str] = if family == "setid" { &["+ws/f", "+ws/h"] } else { &["+ws/f"] };
    Expect::ok().changes(changes).host(seccomp_family_answers)
}

/// Syscalls newer than the libseccomp of the container engines here: their profiles name the
/// call (engine-oci's wall profile), but a libseccomp that does not know the name drops the
/// rule, and the profile's default answers `ENOSYS`. Still refused; native and bwrap, which
/// load the wall's own BPF, must answer `EPERM` for these too.
const NEWER_THAN_CONTAINER_LIBSECCOMP: &[&str] = &["open_tree_attr"];

fn seccomp_family_answers(fx: &Fixture, run: &Run) -> Result<(), String> {
    let (family, calls) = seccomp_family_on(fx, run);
    let probed = format!("ok {family}: {} calls probed, the script went on", calls.len());
    if !run.script_out.lines().any(|l| l == probed) {
        return Err(format!("the script did not say `{probed}`"));
    }
    let container = matches!(fx.engine.as_str(), "docker" | "podman" | "podman-rootless");
    let wrong: Vec<String> = calls
        .iter()
        .filter(|call| {
            let eperm = format!("ok {family} {call} EPERM");
            let enosys = format!("ok {family} {call} ENOSYS");
            !(run.script_out.lines().any(|l| l == eperm)
                || container
                    && NEWER_THAN_CONTAINER_LIBSECCOMP.contains(call)
                    && run.script_out.lines().any(|l| l == enosys))
        })
        .map(|call| (*call).to_owned())
        .collect();
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("not refused with EPERM ({family} family): {}", wrong.join(", ")))
    }
}
