//! Pure tests: the argv and environment for many plans (insta snapshots over a fake host),
//! mount policy, environment keys and the synthesized user database.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::host::{HostFacts, RootEntry, user_database};
use crate::key::env_key;
use crate::paths::{Use, check_policy};
use crate::plan::{
    Access, Bind, Plan, PrepareLayout, Relocation, RunLayout, prepare_plan, run_plan,
};

fn host() -> HostFacts {
    let merged =
        |name: &str, target: &str| RootEntry::Symlink { name: name.into(), target: target.into() };
    HostFacts {
        uid: 1000,
        gid: 1000,
        home: "/home/alice".into(),
        root_entries: vec![
            merged("bin", "usr/bin"),
            merged("lib", "usr/lib"),
            merged("lib64", "usr/lib64"),
            merged("sbin", "usr/sbin"),
        ],
        etc: vec![
            ("/run/systemd/resolve/stub-resolv.conf".into(), "resolv.conf".into()),
            ("/etc/hosts".into(), "hosts".into()),
            ("/etc/nsswitch.conf".into(), "nsswitch.conf".into()),
            ("/etc/ssl/certs".into(), "ssl/certs".into()),
            ("/usr/share/zoneinfo/Europe/Berlin".into(), "localtime".into()),
            ("/etc/ld.so.cache".into(), "ld.so.cache".into()),
        ],
        ca_bundle: Some("/etc/ssl/certs/ca-certificates.crt".into()),
        passwd: "/home/alice/.cache/python-sandbox/bwrap/etc/passwd-0123".into(),
        group: "/home/alice/.cache/python-sandbox/bwrap/etc/group-4567".into(),
        env: vec![
            ("LANG".into(), "en_US.UTF-8".into()),
            ("TERM".into(), "xterm-256color".into()),
            ("HTTPS_PROXY".into(), "http://proxy.corp:3128".into()),
            ("UV_INDEX_URL".into(), "https://mirror.corp/simple".into()),
        ],
    }
}

const ENV: &str = "/home/alice/.cache/python-sandbox/bwrap/envs/0f1e2d";

fn run_layout() -> RunLayout {
    RunLayout {
        env_dir: ENV.into(),
        ro_dirs: vec!["/usr".into()],
        workspace: "/home/alice/project".into(),
        script: "/home/alice/project/main.py".into(),
        args: vec![],
        mounts: vec![],
        protected: vec![],
        net: false,
        user_env: vec![],
        interactive: false,
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        publish: vec![],
        relocation: Relocation::new(Some(Path::new(ENV)), &["/usr".into()], None, vec![], false),
    }
}

/// One flag and its operands per line, then the environment bwrap is started with.
fn render(plan: &Plan, host: &HostFacts) -> String {
    let argv = plan.argv(host);
    let mut out = String::from("bwrap");
    let mut in_command = false;
    for arg in &argv {
        let arg = arg.to_string_lossy();
        if !in_command && arg.starts_with("--") {
            out.push_str("\n  ");
        } else {
            out.push(' ');
        }
        if arg == "--" {
            in_command = true;
        }
        out.push_str(&arg);
    }
    out.push_str("\nenv:");
    for (name, value) in &plan.env {
        let _ = write!(out, "\n  {name}={}", value.to_string_lossy());
    }
    if let Some((uid, gid)) = plan.run_as {
        let _ = write!(out, "\nstarted as {uid}:{gid}, staged:");
        for staged in plan.staging(host) {
            let idmap = if staged.idmap { " (idmapped)" } else { "" };
            let exact = if staged.exact { " (pinned)" } else { "" };
            let (at, src) = (staged.at.display(), staged.src.display());
            let _ = write!(out, "\n  {at} <- {src}{idmap}{exact}");
        }
    }
    out
}

fn check_run(name: &str, host: &HostFacts, layout: &RunLayout) {
    insta::assert_snapshot!(name, render(&run_plan(host, layout, None), host));
}

#[test]
fn run_minimal_net_off() {
    check_run("run_minimal_net_off", &host(), &run_layout());
}

#[test]
fn run_net_on_interactive_with_env_and_args() {
    let mut layout = run_layout();
    layout.net = true;
    layout.interactive = true;
    layout.args = vec!["--flag".into(), "two words".into()];
    layout.user_env =
        vec![("API_TOKEN".into(), "s3cret".into()), ("PATH".into(), "/custom/bin".into())];
    let plan = run_plan(&host(), &layout, Some(3));
    // Explicit values travel in the environment, never on the world-readable argv.
    assert!(!plan.argv(&host()).iter().any(|a| a.to_string_lossy().contains("s3cret")));
    insta::assert_snapshot!(render(&plan, &host()));
}

#[test]
fn run_as_root_uses_nobody_and_root_home() {
    let mut host = host();
    host.uid = 0;
    host.gid = 0;
    host.home = "/root".into();
    let mut layout = run_layout();
    layout.env_dir = "/root/.cache/python-sandbox/bwrap/envs/0f1e2d".into();
    layout.workspace = "/srv/app".into();
    layout.script = "/srv/app/job.py".into();
    let mut plan = run_plan(&host, &layout, None);
    plan.idmapped = vec!["/srv/app".into()];
    insta::assert_snapshot!("run_as_root", render(&plan, &host));
}

#[test]
fn run_with_mounts_nested_and_outside_script() {
    let mut layout = run_layout();
    layout.script = "/opt/scripts/tool.py".into();
    layout.mounts = vec![
        Bind::same(Path::new("/home/alice/project/vendor"), Access::ReadOnly),
        Bind::same(Path::new("/data/out"), Access::ReadWrite),
        Bind::same(Path::new("/data"), Access::ReadOnly),
        Bind::same(Path::new("/usr/share/dict"), Access::ReadOnly),
    ];
    let plan = run_plan(&host(), &layout, None);
    let dests: Vec<&Path> = plan.binds.iter().map(|b| b.dest.as_path()).collect();
    let pos = |p: &str| dests.iter().position(|d| *d == Path::new(p)).expect(p);
    assert!(pos("/data") < pos("/data/out"), "parents before children");
    assert!(pos("/home/alice/project") < pos("/home/alice/project/vendor"));
    insta::assert_snapshot!(render(&plan, &host()));
}

/// Protected paths are read-only binds over themselves, after (inside) the writable tree they
/// lie in, pinned like every caller path; an approved read-write mount inside one wins for
/// its own destination.
#[test]
fn run_mounts_protected_paths_read_only_over_themselves() {
    let mut layout = run_layout();
    layout.mounts = vec![
        Bind::same(Path::new("/home/alice/project/.git/hooks"), Access::ReadWrite),
        Bind::same(Path::new("/data/out"), Access::ReadWrite),
    ];
    layout.protected =
        ["/home/alice/project/.git", "/home/alice/project/.claude", "/data/out/.envrc"]
            .iter()
            .map(PathBuf::from)
            .collect();
    let plan = run_plan(&host(), &layout, None);
    let binds: Vec<(&Path, Access)> =
        plan.binds.iter().map(|b| (b.dest.as_path(), b.access)).collect();
    let pos = |p: &str| binds.iter().position(|(d, _)| *d == Path::new(p)).expect(p);
    assert!(pos("/home/alice/project") < pos("/home/alice/project/.git"));
    assert!(pos("/home/alice/project/.git") < pos("/home/alice/project/.git/hooks"));
    assert!(pos("/data/out") < pos("/data/out/.envrc"));
    assert_eq!(binds[pos("/home/alice/project/.claude")].1, Access::ReadOnly);
    assert_eq!(binds[pos("/home/alice/project/.git/hooks")].1, Access::ReadWrite);
    for p in &layout.protected {
        assert!(plan.pinned.contains(p), "{} is not pinned", p.display());
    }
    insta::assert_snapshot!(render(&plan, &host()));
}

/// The caller's sources (workspace, mounts, a script outside the workspace) are bound from the
/// descriptors that pinned them, never by path; our own (environment, prefixes) by path.
#[test]
fn run_binds_pinned_sources_from_descriptors() {
    let mut layout = run_layout();
    layout.script = "/opt/scripts/tool.py".into();
    layout.mounts = vec![
        Bind::same(Path::new("/data/in"), Access::ReadOnly),
        Bind::same(Path::new("/data/out"), Access::ReadWrite),
    ];
    let mut plan = run_plan(&host(), &layout, None);
    let want: Vec<PathBuf> =
        ["/home/alice/project", "/data/in", "/data/out", "/opt/scripts/tool.py"]
            .iter()
            .map(PathBuf::from)
            .collect();
    assert_eq!(plan.pinned, want);
    plan.bind_fds = plan.pinned.iter().cloned().zip(10..).collect();
    insta::assert_snapshot!(render(&plan, &host()));
}

#[test]
fn run_with_pyenv_interpreter_under_home() {
    let mut layout = run_layout();
    let prefix = PathBuf::from("/home/alice/.pyenv/versions/3.12.4");
    layout.ro_dirs = vec![prefix.clone()];
    layout.workspace = "/srv/project".into();
    layout.script = "/srv/project/main.py".into();
    let site = prefix.join("lib/python3.12/site-packages");
    let empty = PathBuf::from("/home/alice/.cache/python-sandbox/bwrap/empty");
    layout.relocation =
        Relocation::new(Some(Path::new(ENV)), &[prefix], None, vec![(empty, site)], true);
    let plan = run_plan(&host(), &layout, None);
    // Nothing of the caller's home is shown at its path: not the interpreter (a pyenv build
    // under it), not the environment in its cache, not the user's name.
    let rendered = render(&plan, &host());
    for bind in &plan.binds {
        assert!(!bind.dest.starts_with("/home/alice"), "{} is shown", bind.dest.display());
    }
    assert!(!plan.env.iter().any(|(_, v)| v.to_string_lossy().contains("alice")), "{rendered}");
    assert!(!plan.command.iter().any(|a| a.to_string_lossy().contains("alice")), "{rendered}");
    insta::assert_snapshot!("run_pyenv_interpreter", rendered);
}

#[test]
fn run_on_a_host_without_merged_usr_and_odd_home() {
    let mut host = host();
    host.root_entries =
        vec![RootEntry::Dir { name: "bin".into() }, RootEntry::Dir { name: "lib".into() }];
    host.home = "/".into();
    host.ca_bundle = None;
    host.env.clear();
    check_run("run_unmerged_usr_root_home", &host, &run_layout());
}

/// Where a plan's read-write binds land.
fn writable_dests(plan: &Plan) -> Vec<&Path> {
    plan.binds.iter().filter(|b| b.access == Access::ReadWrite).map(|b| b.dest.as_path()).collect()
}

#[test]
fn prepare_has_network_no_workspace_and_only_cache_writable() {
    let layout = PrepareLayout {
        uv: "/home/alice/.cache/python-sandbox/bwrap/uv/0.13.9-x86_64/uv".into(),
        ro_dirs: vec!["/home/alice/.pyenv/versions/3.12.4".into()],
        rw_dirs: vec![
            "/home/alice/.cache/python-sandbox/bwrap/uv-cache".into(),
            "/home/alice/.cache/python-sandbox/bwrap/python".into(),
            ENV.into(),
        ],
        uv_cache: "/home/alice/.cache/python-sandbox/bwrap/uv-cache".into(),
        python_install_dir: "/home/alice/.cache/python-sandbox/bwrap/python".into(),
        chdir: ENV.into(),
        command: [
            "uv",
            "pip",
            "install",
            "--python",
            "/x/bin/python",
            "--",
            "requests>=2",
            "-rfoo",
        ]
        .map(OsString::from)
        .to_vec(),
        extra_env: Vec::new(),
        tmpfs_size: 64 << 20,
        net: true,
        relocation: Relocation::new(
            Some(Path::new(ENV)),
            &["/home/alice/.pyenv/versions/3.12.4".into()],
            Some(Path::new("/home/alice/.cache/python-sandbox/bwrap/uv/0.13.9-x86_64/uv")),
            vec![],
            false,
        ),
        links: Vec::new(),
    };
    let plan = prepare_plan(&host(), &layout, None);
    assert!(plan.net);
    assert!(!plan.binds.iter().any(|b| b.dest.starts_with("/home/alice/project")));
    let writable = writable_dests(&plan);
    assert_eq!(writable.len(), 3);
    insta::assert_snapshot!(render(&plan, &host()));
}

/// The wheels-only install: the package store (uv cache and the environment being built) is
/// one writable mount, and the environment is seen where runs see it, through a link.
#[test]
fn the_linked_install_sees_the_environment_in_the_store_through_a_link() {
    let store = "/home/alice/.cache/python-sandbox/bwrap/store";
    let building = format!("{store}/building/abc");
    let layout = PrepareLayout {
        uv: "/home/alice/.cache/python-sandbox/bwrap/uv/0.13.9-x86_64/uv".into(),
        ro_dirs: vec!["/usr/lib/python3.11".into()],
        rw_dirs: vec![store.into()],
        uv_cache: format!("{store}/uv").into(),
        python_install_dir: "/home/alice/.cache/python-sandbox/bwrap/python".into(),
        chdir: ENV.into(),
        command: ["uv", "pip", "install", "--python", &format!("{ENV}/bin/python")]
            .map(OsString::from)
            .to_vec(),
        extra_env: vec![("UV_LINK_MODE".into(), "hardlink".into())],
        tmpfs_size: 64 << 20,
        net: true,
        relocation: Relocation::new(
            Some(Path::new(ENV)),
            &[],
            Some(Path::new("/home/alice/.cache/python-sandbox/bwrap/uv/0.13.9-x86_64/uv")),
            vec![],
            false,
        ),
        links: vec![(PathBuf::from(crate::plan::SANDBOX_ENV), PathBuf::from(&building))],
    };
    let plan = prepare_plan(&host(), &layout, None);
    let writable = writable_dests(&plan);
    assert_eq!(writable, [Path::new(store)], "the store alone is writable");
    assert!(!plan.binds.iter().any(|b| b.src == Path::new(ENV)), "the environment is not bound");
    insta::assert_snapshot!(render(&plan, &host()));
}

#[test]
fn mount_policy() {
    let home = Path::new("/home/alice");
    let cache = Path::new("/home/alice/.cache/python-sandbox/bwrap");
    let cases: &[(&str, Use)] = &[
        ("/", Use::Mount),
        ("/proc/self", Use::Mount),
        ("/run/user/1000", Use::Mount),
        ("/var/run/docker.sock", Use::Mount),
        ("/dev/shm", Use::Mount),
        ("/home/alice/.cache", Use::Mount),
        ("/home/alice/.cache/python-sandbox/bwrap/envs", Use::Mount),
        ("/home/alice", Use::Mount),
        ("/home/alice/data", Use::Mount),
        ("/home/alice", Use::Workspace),
        ("/home", Use::Workspace),
        ("/etc", Use::Workspace),
        ("/usr/src/app", Use::Workspace),
        ("/home/alice/project", Use::Workspace),
        ("/tmp/work", Use::Workspace),
    ];
    let out: Vec<String> = cases
        .iter()
        .map(|(path, usage)| {
            let verdict = match check_policy(Path::new(path), *usage, home, cache) {
                Ok(()) => "ok".to_owned(),
                Err(reason) => format!("refused: {reason}"),
            };
            format!("{usage:?} {path}: {verdict}")
        })
        .collect();
    insta::assert_snapshot!(out.join("\n"));
}

#[test]
fn env_keys() {
    let deps = |d: &[&str]| d.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let base = env_key(Some(">=3.11"), &deps(&["requests", "rich"]), None, "0.13.9");
    assert_eq!(base.len(), 32);
    assert_eq!(
        base,
        env_key(Some(">=3.11"), &deps(&["rich", " requests", "rich"]), None, "0.13.9")
    );
    for other in [
        env_key(None, &deps(&["requests", "rich"]), None, "0.13.9"),
        env_key(Some(">=3.11"), &deps(&["requests"]), None, "0.13.9"),
        env_key(Some(">=3.11"), &deps(&["requests", "rich"]), Some("3.12"), "0.13.9"),
        env_key(Some(">=3.11"), &deps(&["requests", "rich"]), None, "0.13.10"),
        env_key(Some(">=3.11"), &deps(&["requestsrich"]), None, "0.13.9"),
    ] {
        assert_ne!(base, other);
    }
}

#[test]
fn user_database_has_only_the_sandbox_user() {
    let mut out = String::new();
    for (uid, home) in [(1000, "/home/alice"), (0, "/root")] {
        let mut host = host();
        host.uid = uid;
        host.gid = uid;
        host.home = PathBuf::from(home);
        let (passwd, group) = user_database(&host);
        let _ = write!(out, "uid {uid}:\n{passwd}{group}");
    }
    insta::assert_snapshot!(out);
}

#[test]
fn run_workspace_and_home_under_tmp_get_read_only_scaffolding() {
    // A clone under /tmp with a fake HOME beside it (as the conformance suite runs): the
    // directories between /tmp and the mount points are created read-only, and never below a
    // bind.
    let mut host = host();
    host.home = "/tmp/ci/case/home".into();
    let mut layout = run_layout();
    layout.env_dir = "/tmp/ci/case/home/.cache/python-sandbox/bwrap/envs/0f1e2d".into();
    layout.workspace = "/tmp/ci/case/ws".into();
    layout.script = "/tmp/ci/case/ws/job.py".into();
    layout.mounts = vec![Bind::same(Path::new("/tmp/ci/case/ws/sub/data"), Access::ReadOnly)];
    let plan = run_plan(&host, &layout, None);
    let argv: Vec<String> =
        plan.argv(&host).iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let at = |s: &str| argv.iter().position(|a| a == s).unwrap_or_else(|| panic!("{s} missing"));
    // HOME is the fixed sandbox home; the host home path is only a parent of the env's bind.
    assert!(argv.windows(2).any(|w| w[0] == "--tmpfs" && w[1] == "/home/sandbox"));
    assert!(!argv.windows(2).any(|w| w[0] == "--tmpfs" && w[1] == "/tmp/ci/case/home"));
    assert_eq!(argv[at("/tmp/ci/case") - 1], "--dir");
    assert_eq!(argv[at("/tmp/ci/case") - 2], "0555");
    assert!(!argv.iter().any(|a| a == "/tmp/ci/case/ws/sub"), "nothing created inside a bind");
    insta::assert_snapshot!(render(&plan, &host));
}

#[test]
fn session_is_the_run_wall_with_the_agent_and_no_die_with_parent() {
    let host = host();
    let layout = crate::plan::SessionLayout {
        python: PathBuf::from("/usr/bin/python3.11"),
        ro_dirs: vec![PathBuf::from("/usr")],
        uv: PathBuf::from("/opt/uv/bin/uv"),
        workspace: PathBuf::from("/work/proj"),
        mounts: Vec::new(),
        protected: vec![PathBuf::from("/work/proj/.git")],
        net: true,
        user_env: vec![("GREETING".to_owned(), "hi".to_owned())],
        tmpfs_size: sandbox_core::DEFAULT_TMPFS_SIZE,
        publish: Vec::new(),
        ttl_secs: 1800,
        relocation: Relocation::new(
            None,
            &[PathBuf::from("/usr")],
            Some(Path::new("/opt/uv/bin/uv")),
            vec![],
            false,
        ),
    };
    let plan = crate::plan::session_plan(&host, &layout);
    let rendered = render(&plan, &host).replace(sandbox_core::agent::AGENT_PY, "<agent.py>");
    assert!(!rendered.contains("--die-with-parent"), "a session outlives `session start`");
    insta::assert_snapshot!("session", rendered);
}

/// `uv python find` searches the caller's `PATH` first, then the system's directories: a CLI
/// started with a bare `PATH` uses `/usr/bin/python3` rather than downloading a Python.
#[test]
fn interpreters_are_found_on_the_callers_path_then_the_systems() {
    use crate::engine::discovery_path;
    let shown =
        |p: Option<&str>| discovery_path(p.map(std::ffi::OsStr::new)).into_string().unwrap();
    assert_eq!(shown(None), "/usr/local/bin:/usr/bin:/bin");
    assert_eq!(shown(Some("")), "/usr/local/bin:/usr/bin:/bin");
    assert_eq!(shown(Some("/opt/py/bin")), "/opt/py/bin:/usr/local/bin:/usr/bin:/bin");
    assert_eq!(
        shown(Some("/home/u/.pyenv/shims:/usr/bin:/bin")),
        "/home/u/.pyenv/shims:/usr/bin:/bin:/usr/local/bin",
        "the caller's order stands; only what is missing is appended"
    );
}
