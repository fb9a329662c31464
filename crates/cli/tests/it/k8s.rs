//! `--engine k8s` without a cluster: what is refused and how, the user config file's errors,
//! and the rule that no command talks to a cluster nobody named. A stand-in apiserver (a
//! plain-HTTP listener answering the few calls of `session list`, `reap` and `detect`) counts
//! the connections, so "no network call" is measured, not assumed. The real cluster tier is
//! engine-k8s's (`cargo xtask test-engines --engine k8s`).

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use insta::assert_snapshot;

use crate::{Ctx, transcript};

/// A fake home (outside the workspace) with no config and no kube config: what a laptop
/// without a cluster has.
struct Laptop {
    home: tempfile::TempDir,
    env: Vec<(String, String)>,
}

fn laptop() -> Laptop {
    let home = tempfile::tempdir().expect("home");
    let at = |p: &str| home.path().join(p).display().to_string();
    let env = vec![
        ("HOME".into(), home.path().display().to_string()),
        ("XDG_CONFIG_HOME".into(), at(".config")),
        ("XDG_CACHE_HOME".into(), at(".cache")),
        ("KUBECONFIG".into(), String::new()),
        ("KUBERNETES_SERVICE_HOST".into(), String::new()),
    ];
    Laptop { home, env }
}

impl Laptop {
    /// Redacts the home directory.
    fn redact(&self, text: String) -> String {
        text.replace(&self.home.path().display().to_string(), "[HOME]")
    }

    fn write_config(&self, text: &str) {
        let dir = self.home.path().join(".config/python-sandbox");
        std::fs::create_dir_all(&dir).expect("config dir");
        std::fs::write(dir.join("config.toml"), text).expect("config");
    }

    fn run(&self, ctx: &Ctx, args: &[&str]) -> std::process::Output {
        let env: Vec<(&str, &str)> =
            self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        ctx.run_with_env(args, &env)
    }
}

#[test]
fn run_on_k8s_without_a_cluster_names_kubeconfig_and_exits_3() {
    let ctx = Ctx::new();
    ctx.write("hello.py", "print('hi')\n");
    let laptop = laptop();
    let out = laptop.run(&ctx, &["run", "--engine", "k8s", "hello.py"]);
    let text = laptop.redact(transcript(&out));
    // The cluster's own error, not the ladder's advice about other engines.
    assert_eq!(out.status.code(), Some(3), "{text}");
    let first = text.lines().find(|l| l.starts_with("error:")).unwrap_or_default();
    assert!(first.starts_with("error: the k8s engine has no cluster to talk to:"), "{text}");
    assert!(!text.contains("bwrap"), "{text}");
}

/// A kube config naming a cluster that does not answer (a port nothing listens on): exit 3,
/// and the error names the engine, as every engine's unavailability does (the conformance
/// suite's `engine-unavailable-exit-3` on k8s).
#[test]
fn run_on_k8s_with_a_cluster_that_does_not_answer_names_the_engine_and_exits_3() {
    let ctx = Ctx::new();
    ctx.write("hello.py", "print('hi')\n");
    let mut laptop = laptop();
    let closed = TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr");
    let kubeconfig = laptop.home.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://{closed}\n\
             users:\n- name: u\n  user: {{}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\n\
             current-context: x\n"
        ),
    )
    .expect("kubeconfig");
    laptop.env.retain(|(k, _)| k != "KUBECONFIG");
    laptop.env.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
    let out = laptop.run(&ctx, &["run", "--engine", "k8s", "hello.py"]);
    let text = laptop.redact(transcript(&out));
    assert_eq!(out.status.code(), Some(3), "{text}");
    let first = text.lines().find(|l| l.starts_with("error:")).unwrap_or_default();
    assert!(first.starts_with("error: the k8s engine cannot reach the cluster"), "{text}");
}

#[test]
fn run_on_k8s_refuses_host_mounts_before_anything_is_made() {
    let ctx = Ctx::new();
    ctx.write("hello.py", "print('hi')\n");
    std::fs::create_dir_all(ctx.path().join("data")).expect("data");
    let server = Apiserver::start();
    let mut laptop = laptop();
    server.kubeconfig(&mut laptop);
    let data = ctx.path().join("data").display().to_string();
    let out =
        laptop.run(&ctx, &["run", "--engine", "k8s", "--mount", &format!("{data}:ro"), "hello.py"]);
    let text = laptop.redact(transcript(&out));
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains(
            "the k8s engine cannot enforce `--mount` (host paths) here, so nothing was run"
        ),
        "{text}"
    );
    assert!(text.contains("hint:"), "{text}");
}

/// `--mount pvc:`: refused off k8s and into sessions, and a claim not meant for sandboxes
/// refused on k8s, each with a hint and before a single call to the cluster.
#[test]
fn claim_mounts_are_refused_where_they_cannot_be_kept_before_anything_is_made() {
    let ctx = Ctx::new();
    ctx.write("hello.py", "print('hi')\n");
    let server = Apiserver::start();
    let mut laptop = laptop();
    server.kubeconfig(&mut laptop);
    ctx.write(
        "inline.py",
        "# /// script\n# [tool.python-sandbox]\n# mounts = [\"pvc:psbx-data-a:/data\"]\n# ///\nprint(1)\n",
    );
    ctx.write(
        "shared.py",
        "# /// script\n# [tool.python-sandbox]\n# mounts = [\"pvc:shared:/data:ro\"]\n# ///\nprint(1)\n",
    );
    let cases: [(&[&str], &str); 7] = [
        (
            &["run", "inline.py"],
            "inline.py:3:13: mount `pvc:psbx-data-a:/data`: a PersistentVolumeClaim is mounted only by the k8s engine (this run is on `auto`)",
        ),
        (
            &["run", "--engine", "podman", "inline.py"],
            "mounted only by the k8s engine (this run is on `podman`)",
        ),
        (
            &["run", "--engine", "k8s", "shared.py"],
            "shared.py:3:13: mount `pvc:shared:/data:ro`: claim `shared` is not one meant for sandboxes",
        ),
        (
            &["run", "--mount", "pvc:psbx-data-a:/data", "hello.py"],
            "a PersistentVolumeClaim is mounted only by the k8s engine (this run is on `auto`)",
        ),
        (
            &["run", "--engine", "docker", "--mount", "pvc:psbx-data-a:/data:ro", "hello.py"],
            "mounted only by the k8s engine (this run is on `docker`)",
        ),
        (
            &["run", "--engine", "k8s", "--mount", "pvc:shared:/data", "hello.py"],
            "--mount `pvc:shared:/data`: claim `shared` is not one meant for sandboxes",
        ),
        (
            &["session", "start", "--engine", "k8s", "--mount", "pvc:psbx-data-a:/data"],
            "a claim is mounted only by `run --engine k8s`, not into a session",
        ),
    ];
    for (args, error) in cases {
        let out = laptop.run(&ctx, args);
        let text = laptop.redact(transcript(&out));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {text}");
        assert!(text.contains(error) && text.contains("hint:"), "{args:?}: {text}");
    }
    assert_eq!(server.connections(), 0, "a refused claim mount talked to the cluster");
}

#[test]
fn an_inline_table_cannot_choose_the_engine() {
    let ctx = Ctx::new();
    ctx.write(
        "s.py",
        "# /// script\n# [tool.python-sandbox]\n# engine = \"k8s\"\n# ///\nprint(1)\n",
    );
    let out = laptop().run(&ctx, &["run", "s.py"]);
    assert_eq!(out.status.code(), Some(2), "{}", transcript(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("s.py:3:3: error[sandbox/caller-key]") && stderr.contains("`engine`"),
        "{stderr}"
    );
    assert!(stderr.contains("where a script runs is the caller's choice"), "{stderr}");
    assert!(stderr.contains("hint: choose the engine on the command line"), "{stderr}");
}

/// The script's `image` and `runtime-class` reach the pod spec (the prepare pod, the first
/// pod a run creates); `--image` beats the script's, and the user config's `runtime-class` is
/// beaten by the script's.
#[test]
fn the_scripts_image_and_runtime_class_reach_the_pod() {
    let ctx = Ctx::new();
    ctx.write(
        "s.py",
        "# /// script\n# [tool.python-sandbox]\n# image = \"registry.example/numpy:2\"\n# runtime-class = \"gvisor\"\n# ///\nprint(1)\n",
    );
    let server = Apiserver::start();
    let mut laptop = laptop();
    server.kubeconfig(&mut laptop);
    laptop.write_config("[engine.k8s]\nruntime-class = \"kata\"\n");
    let pod_of = |args: &[&str]| {
        let before = server.pods().len();
        let out = laptop.run(&ctx, args);
        let text = laptop.redact(transcript(&out));
        assert_ne!(out.status.code(), Some(0), "the stand-in forbids pods: {text}");
        assert!(text.contains("forbidden"), "{text}");
        let pods = server.pods();
        assert_eq!(pods.len(), before + 1, "one pod create: {text}");
        let spec = &pods[before]["spec"];
        let image = spec["containers"][0]["image"].as_str().unwrap_or_default().to_owned();
        (image, spec["runtimeClassName"].as_str().map(str::to_owned))
    };
    assert_eq!(
        pod_of(&["run", "--engine", "k8s", "s.py"]),
        ("registry.example/numpy:2".to_owned(), Some("gvisor".to_owned()))
    );
    assert_eq!(
        pod_of(&["run", "--engine", "k8s", "--image", "mine:3", "s.py"]),
        ("mine:3".to_owned(), Some("gvisor".to_owned()))
    );
    ctx.write("plain.py", "print(1)\n");
    let (_, class) = pod_of(&["run", "--engine", "k8s", "plain.py"]);
    assert_eq!(class.as_deref(), Some("kata"), "the user config's, without the script's");
}

#[test]
fn session_start_on_k8s_without_a_cluster_names_kubeconfig_and_exits_3() {
    let ctx = Ctx::new();
    let laptop = laptop();
    let out = laptop.run(&ctx, &["session", "start", "--engine", "k8s"]);
    let text = laptop.redact(transcript(&out));
    assert_eq!(out.status.code(), Some(3), "{text}");
    let first = text.lines().find(|l| l.starts_with("error:")).unwrap_or_default();
    assert!(first.starts_with("error: the k8s engine has no cluster to talk to:"), "{text}");
    assert_snapshot!(text.lines().filter(|l| l.starts_with("hint:")).collect::<Vec<_>>().join("\n"), @"hint: point `KUBECONFIG` at a kube config (`cargo xtask kind up` makes a local cluster), or run in a pod with a service account");
}

#[test]
fn a_bad_config_file_is_an_error_at_its_line_and_column() {
    let ctx = Ctx::new();
    let laptop = laptop();
    laptop.write_config("[engine.k8s]\nnamespace = \"team-a\"\nimage-name = \"x\"\n");
    let out = laptop.run(&ctx, &["session", "start", "--engine", "k8s"]);
    assert_snapshot!(laptop.redact(transcript(&out)), @"
    exit: 2
    --- stdout
    --- stderr
    error: [HOME]/.config/python-sandbox/config.toml:3:1: unknown key `image-name` in `[engine.k8s]`
    hint: did you mean `image`?
    ");
    laptop.write_config("[engine.k8s]\nnamespace = \"Team_A\"\n");
    let out = laptop.run(&ctx, &["session", "list", "--engine", "k8s"]);
    assert_snapshot!(laptop.redact(transcript(&out)), @"
    exit: 2
    --- stdout
    --- stderr
    error: [HOME]/.config/python-sandbox/config.toml:2:13: `namespace`: `Team_A` is not a DNS label
    hint: use at most 63 lower-case letters, digits and `-`, starting and ending with a letter or digit
    ");
}

/// A stand-in apiserver on 127.0.0.1: `/version`, the namespace, access reviews (allowed),
/// and an empty pod list; counts connections. It keeps what a run creates: an environment
/// claim is made as asked, and a pod is recorded and then forbidden, so a test sees the pod
/// spec the CLI built and the run stops there.
struct Apiserver {
    port: u16,
    connections: Arc<AtomicUsize>,
    /// The bodies of pod creates, in order.
    pods: Arc<Mutex<Vec<String>>>,
}

/// The items of its pod and claim lists (JSON arrays).
#[derive(Clone)]
struct Lists {
    pods: String,
    claims: String,
}

fn answer(stream: TcpStream, lists: &Lists, pods: &Mutex<Vec<String>>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let method = request_line.split_whitespace().next().unwrap_or("GET");
    let path = request_line.split_whitespace().nth(1).unwrap_or("/");
    let claims = "/api/v1/namespaces/python-sandbox/persistentvolumeclaims";
    let json = if method == "POST" && path.starts_with(claims) {
        String::from_utf8_lossy(&body).into_owned()
    } else if method == "POST" && path.starts_with("/api/v1/namespaces/python-sandbox/pods") {
        if let Ok(mut pods) = pods.lock() {
            pods.push(String::from_utf8_lossy(&body).into_owned());
        }
        r#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":403,"reason":"Forbidden","message":"pods is forbidden: the stand-in creates none"}"#.to_owned()
    } else if path.starts_with(&format!("{claims}/")) {
        r#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":404,"reason":"NotFound","message":"not here"}"#.to_owned()
    } else if path == "/version" {
        r#"{"major":"1","minor":"30","gitVersion":"v1.30.2","gitCommit":"","gitTreeState":"","buildDate":"","goVersion":"","compiler":"","platform":""}"#.to_owned()
    } else if path.starts_with("/api/v1/namespaces/python-sandbox/pods") {
        format!(r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{}},"items":{}}}"#, lists.pods)
    } else if path.starts_with("/api/v1/namespaces/python-sandbox/persistentvolumeclaims?") {
        let items = &lists.claims;
        format!(
            r#"{{"kind":"PersistentVolumeClaimList","apiVersion":"v1","metadata":{{}},"items":{items}}}"#
        )
    } else if path.starts_with("/api/v1/namespaces/") {
        r#"{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"python-sandbox"}}"#.to_owned()
    } else if path.contains("selfsubjectaccessreviews") {
        r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{},"status":{"allowed":true}}"#.to_owned()
    } else {
        r#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":404,"reason":"NotFound","message":"not here"}"#.to_owned()
    };
    let status = if json.contains("\"code\":404") {
        "404 Not Found"
    } else if json.contains("\"code\":403") {
        "403 Forbidden"
    } else if method == "POST" {
        "201 Created"
    } else {
        "200 OK"
    };
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{json}",
        json.len()
    )
}

impl Apiserver {
    fn start() -> Apiserver {
        Apiserver::with(Lists { pods: "[]".to_owned(), claims: "[]".to_owned() })
    }

    fn with(lists: Lists) -> Apiserver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let connections = Arc::new(AtomicUsize::new(0));
        let pods = Arc::new(Mutex::new(Vec::new()));
        let (counted, created) = (connections.clone(), pods.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                counted.fetch_add(1, Ordering::SeqCst);
                let _ = answer(stream, &lists, &created);
            }
        });
        Apiserver { port, connections, pods }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The pod creates so far, as JSON.
    fn pods(&self) -> Vec<serde_json::Value> {
        let bodies = self.pods.lock().map(|p| p.clone()).unwrap_or_default();
        bodies.iter().map(|b| serde_json::from_str(b).expect("a pod create is JSON")).collect()
    }

    /// A kube config for it, written into the fake home; `KUBECONFIG` set to it.
    fn kubeconfig(&self, laptop: &mut Laptop) {
        let path = laptop.home.path().join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: me\n    namespace: python-sandbox\ncurrent-context: fake\nusers:\n- name: me\n  user:\n    token: not-a-secret\n",
            self.port
        );
        std::fs::write(&path, text).expect("kubeconfig");
        laptop.env.retain(|(k, _)| k != "KUBECONFIG");
        laptop.env.push(("KUBECONFIG".into(), path.display().to_string()));
    }
}

#[test]
fn no_command_talks_to_a_cluster_nobody_configured_or_named() {
    let ctx = Ctx::new();
    let server = Apiserver::start();
    let mut laptop = laptop();
    server.kubeconfig(&mut laptop);
    // `KUBECONFIG` alone does not make a cluster part of commands over every engine.
    for args in [&["session", "list"][..], &["reap", "--dry-run"], &["session", "stop", "abc"]] {
        let _ = laptop.run(&ctx, args);
        assert_eq!(server.connections(), 0, "`{}` talked to the cluster", args.join(" "));
    }
    // Nor does a run that finds no engine (its advice probes the ladder only). native works
    // even with an empty `PATH` (its network is then the built-in proxy), so bwrap is named.
    let none = format!("unix://{}", ctx.path().join("none.sock").display());
    let empty = ctx.path().join("emptybin");
    std::fs::create_dir_all(&empty).expect("emptybin");
    let mut bare = laptop.env.clone();
    bare.extend([
        ("PATH".to_owned(), empty.display().to_string()),
        ("DOCKER_HOST".to_owned(), none.clone()),
        ("CONTAINER_HOST".to_owned(), none),
    ]);
    ctx.write("hello.py", "print('hi')\n");
    let env: Vec<(&str, &str)> = bare.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let out = ctx.run_with_env(&["run", "--engine", "bwrap", "hello.py"], &env);
    assert_eq!(out.status.code(), Some(3), "{}", transcript(&out));
    assert_eq!(server.connections(), 0, "a run without an engine talked to the cluster");
    // Named, it is asked (the stand-in answers: an empty list).
    let out = laptop.run(&ctx, &["session", "list", "--engine", "k8s", "--json"]);
    assert_eq!(transcript(&out), "exit: 0\n--- stdout\n[]\n--- stderr\n");
    assert!(server.connections() > 0, "the named cluster was not asked");
}

#[test]
fn a_configured_cluster_joins_list_reap_and_detect() {
    let ctx = Ctx::new();
    let server = Apiserver::start();
    let mut laptop = laptop();
    server.kubeconfig(&mut laptop);
    laptop.write_config("[engine.k8s]\ncontext = \"fake\"\n");
    let out = laptop.run(&ctx, &["session", "list", "--json"]);
    assert!(out.status.success(), "{}", transcript(&out));
    let asked = server.connections();
    assert!(asked > 0, "a configured cluster is part of `session list`");
    let out = laptop.run(&ctx, &["reap", "--dry-run", "--engine", "k8s", "--json"]);
    assert_eq!(transcript(&out), "exit: 0\n--- stdout\n[]\n--- stderr\n");
    let out = laptop.run(&ctx, &["detect", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("detect json");
    let k8s = json["engines"].as_array().and_then(|e| e.iter().find(|p| p["name"] == "k8s"));
    let k8s = k8s.expect("detect lists k8s");
    assert_eq!(k8s["available"], true, "{k8s}");
    assert_ne!(json["selected"], "k8s", "auto never selects a cluster");
    assert_eq!(
        k8s["reason"],
        "cluster v1.30.2 answers; may create pods and pods/exec in `python-sandbox`"
    );
}

/// `reap --engine k8s --dry-run`: an unused environment claim is listed as the environment it
/// is (as other engines list theirs) and an idle warm-pool member as a pool member, both
/// signed with this user's key, neither removed.
#[test]
fn a_dry_run_reap_names_environment_claims_and_pool_members() {
    let ctx = Ctx::new();
    let mut laptop = laptop();
    let keys = laptop.home.path().join(".cache/python-sandbox/keys");
    let key = reaper::PrivateDir::open(&keys).and_then(|d| reaper::MarkKey::load(&d)).expect("key");
    let owner = reaper::Owner::current(None).expect("owner");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let old = now - 8 * 86_400;
    let env = "psbx-env-0a1b2c";
    let mut env_labels = reaper::SandboxLabels::new(env, reaper::Kind::Prepare, &owner, old)
        .to_labels()
        .expect("labels");
    key.sign(env, &mut env_labels);
    let claim = serde_json::json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": env, "namespace": "python-sandbox", "uid": "uid-env",
            "labels": env_labels, "annotations": engine_k8s::environment::ready_annotations(old)}});
    let member = "psbx-ab12";
    let mut pod_labels =
        reaper::labels_for_session("ab12", &owner, now - 7200, 600).expect("labels");
    pod_labels.insert(engine_k8s::engine::POOL_LABEL.to_owned(), "k".to_owned());
    pod_labels.insert(
        engine_k8s::engine::POOL_STATE_LABEL.to_owned(),
        engine_k8s::engine::POOL_READY.to_owned(),
    );
    key.sign(member, &mut pod_labels);
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": member, "namespace": "python-sandbox", "uid": "uid-pod",
            "labels": pod_labels},
        "status": {"phase": "Pending"}});
    let server = Apiserver::with(Lists { pods: format!("[{pod}]"), claims: format!("[{claim}]") });
    server.kubeconfig(&mut laptop);
    let out = laptop.run(&ctx, &["reap", "--dry-run", "--engine", "k8s", "--json"]);
    assert!(out.status.success(), "{}", transcript(&out));
    let items: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("json");
    let shown: Vec<String> = items
        .iter()
        .map(|i| {
            let field = if i.get("environment").is_some() { "environment" } else { "container" };
            // The idle time is the clock's: whole seconds since the member started.
            let reason = i["reason"].as_str().unwrap_or_default();
            let reason = reason.split_once(", ").map_or(reason, |(_, ttl)| ttl);
            format!("{} {field}={} ({reason}) removed={}", i["kind"], i[field], i["removed"])
        })
        .collect();
    assert_snapshot!(shown.join("\n"), @r#"
    "pool" container="psbx-ab12" (ttl 600 s) removed=false
    "environment" environment="psbx-env-0a1b2c" (unused for 7 days) removed=false
    "#);
    let out = laptop.run(&ctx, &["reap", "--dry-run", "--engine", "k8s"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("would remove k8s pool member psbx-ab12 (idle for "), "{text}");
    assert!(
        text.contains("would remove k8s environment psbx-env-0a1b2c (unused for 7 days)"),
        "{text}"
    );
}

#[test]
fn detect_says_not_configured_without_a_network_call() {
    let ctx = Ctx::new();
    let laptop = laptop();
    let out = laptop.run(&ctx, &["detect", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("detect json");
    let k8s = json["engines"].as_array().and_then(|e| e.iter().find(|p| p["name"] == "k8s"));
    let reason =
        laptop.redact(k8s.expect("k8s listed")["reason"].as_str().unwrap_or("").to_owned());
    assert_snapshot!(reason, @"no `[engine.k8s]` in [HOME]/.config/python-sandbox/config.toml and `KUBECONFIG` is unset");
}

/// The cluster tier: with the caller's own kube config and user config, when `detect` finds a
/// cluster that can hold sandboxes; `SKIPPED: no cluster (...)` otherwise. A cluster that
/// answers and then fails is a failure.
#[test]
fn a_session_starts_lists_execs_and_stops_on_a_real_cluster() {
    let ctx = Ctx::new();
    let out = ctx.run(&["detect", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let k8s = json["engines"].as_array().and_then(|e| e.iter().find(|p| p["name"] == "k8s"));
    let Some(k8s) = k8s.filter(|p| p["available"] == true) else {
        let reason = k8s.and_then(|p| p["reason"].as_str()).unwrap_or("not listed");
        eprintln!("SKIPPED: no cluster ({})", reason.lines().next().unwrap_or_default());
        return;
    };
    eprintln!("k8s: {}", k8s["reason"]);
    let out = ctx.run(&["session", "start", "--engine", "k8s", "--ttl", "5m", "--json"]);
    assert!(out.status.success(), "{}", transcript(&out));
    let started: serde_json::Value = serde_json::from_slice(&out.stdout).expect("start json");
    let id = started["id"].as_str().expect("an id").to_owned();
    let listed = ctx.run(&["session", "list", "--engine", "k8s", "--json"]);
    // The id alone, as a user was given it: the start recorded where the session is, so no
    // `[engine.k8s]` table is needed to find it (issue 33 item 8: "no session" before).
    let exec = ctx.run(&["session", "exec", &id, "--", "echo", "hi"]);
    let stop = ctx.run(&["session", "stop", &id]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains(&id), "{}", transcript(&listed));
    assert_eq!(String::from_utf8_lossy(&exec.stdout), "hi\n", "{}", transcript(&exec));
    assert!(stop.status.success(), "{}", transcript(&stop));
    let after = ctx.run(&["session", "list", "--engine", "k8s", "--json"]);
    let gone: serde_json::Value = serde_json::from_slice(&after.stdout).expect("list json");
    let still = gone
        .as_array()
        .into_iter()
        .flatten()
        .any(|s| s["id"] == id.as_str() && s["state"] == "running");
    assert!(!still, "{}", transcript(&after));
}
