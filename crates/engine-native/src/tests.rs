//! Snapshots of plans and the property that nothing outside the workspace and the declared
//! read-write mounts is ever writable.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use sandbox_core::MountMode;

use crate::plan::{Access, Input, Op, RootEntry, plan};

fn input(uid: u32) -> Input {
    Input {
        uid,
        gid: uid,
        home: Some(PathBuf::from("/home/alice")),
        own: (PathBuf::from("/home/alice/.cache/python-sandbox"), "its cache".into()),
        root_entries: vec![
            RootEntry::Symlink { name: "bin".into(), target: "usr/bin".into() },
            RootEntry::Symlink { name: "lib".into(), target: "usr/lib".into() },
            RootEntry::Dir { name: "lib64".into() },
        ],
        etc: vec![
            ("/etc/resolv.conf".into(), "resolv.conf".into()),
            ("/etc/ssl/certs".into(), "ssl/certs".into()),
        ],
        passwd: "/home/alice/.cache/python-sandbox/etc/passwd-1".into(),
        group: "/home/alice/.cache/python-sandbox/etc/group-1".into(),
        ca_bundle: Some("/etc/ssl/certs/ca-certificates.crt".into()),
        ro_dirs: vec![
            ("/home/alice/.cache/python-sandbox/envs/abc".into(), "/opt/python-sandbox/env".into()),
            ("/usr/lib/python3.11".into(), "/usr/lib/python3.11".into()),
        ],
        workspace: Some("/home/alice/proj".into()),
        mounts: vec![],
        own_writable: vec![],
        not_idmapped: vec![],
        chdir: None,
        net: false,
        tmpfs_size: 1 << 20,
        links: Vec::new(),
    }
}

fn render(input: &Input) -> String {
    let plan = match plan(input) {
        Ok(plan) => plan,
        Err(e) => return format!("error: {e}"),
    };
    let mut out =
        format!("ids: {:?}\nnet: {}\nchdir: {}\n", plan.ids, plan.net, plan.chdir.display());
    for op in &plan.ops {
        let line = match op {
            Op::Dir { path, mode } => format!("dir {} {mode:o}", path.display()),
            Op::Symlink { target, path } => {
                format!("symlink {} -> {}", path.display(), target.display())
            }
            Op::Bind { src, dest, access, caller } => format!(
                "bind {} {} {}{}",
                match access {
                    Access::ReadOnly => "ro",
                    Access::ReadWrite => "rw",
                },
                src.display(),
                dest.display(),
                if *caller { " (caller)" } else { "" }
            ),
            Op::Tmpfs { path, mode, size, owner } => {
                format!("tmpfs {} {mode:o} {size} {owner:?}", path.display())
            }
            Op::Proc => "proc /proc".into(),
            Op::DevNode { name } => format!("dev {name}"),
            Op::Devpts => "devpts /dev/pts".into(),
            Op::ReadOnly { path } => format!("read-only {}", path.display()),
            Op::Mask { path } => format!("mask {}", path.display()),
            Op::RootReadOnly => "read-only /".into(),
        };
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "writable: {:?}", plan.writable);
    out
}

#[test]
fn plan_net_off_unprivileged() {
    insta::assert_snapshot!(render(&input(1000)));
}

#[test]
fn plan_root_caller_runs_as_nobody() {
    let mut i = input(0);
    i.home = Some("/root".into());
    i.own = ("/root/.cache/python-sandbox".into(), "its cache".into());
    i.workspace = Some("/tmp/work/proj".into());
    insta::assert_snapshot!(render(&i));
}

#[test]
fn plan_net_on_with_mounts() {
    let mut i = input(1000);
    i.net = true;
    i.mounts = vec![
        ("/data/in".into(), MountMode::ReadOnly),
        ("/data/out".into(), MountMode::ReadWrite),
        ("/home/alice/proj/sub".into(), MountMode::ReadOnly),
    ];
    insta::assert_snapshot!(render(&i));
}

/// A prepare's wheels-only install: the package store is the one writable tree, and the
/// environment inside it is seen at `/opt/python-sandbox/env` through a link made after the
/// binds; a link anywhere else, or into a tree the step does not write, is refused.
#[test]
fn plan_links_only_into_what_the_step_writes() {
    let store = "/home/alice/.cache/python-sandbox/bwrap/store";
    let linked = |path: &str, target: &str| {
        let mut i = input(1000);
        i.workspace = None;
        i.ro_dirs.retain(|(_, dest)| !dest.ends_with("env"));
        i.own_writable = vec![(store.into(), store.into())];
        i.links = vec![(path.into(), target.into())];
        i
    };
    let ok = render(&linked("/opt/python-sandbox/env", &format!("{store}/building/abc")));
    let tail: Vec<&str> = ok.lines().rev().take(4).collect();
    insta::assert_snapshot!(tail.into_iter().rev().collect::<Vec<_>>().join("\n"), @r#"
    dir /opt/python-sandbox 755
    symlink /opt/python-sandbox/env -> /home/alice/.cache/python-sandbox/bwrap/store/building/abc
    read-only /
    writable: ["/tmp", "/home/sandbox", "/dev/shm", "/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/pts", "/home/alice/.cache/python-sandbox/bwrap/store"]
    "#);
    let refused = [
        linked("/usr/bin/python3", &format!("{store}/building/abc")),
        linked("/opt/python-sandbox/env", "/home/alice"),
    ];
    insta::assert_snapshot!(refused.iter().map(render).collect::<Vec<_>>().join("\n"), @r"
    error: refusing to link `/usr/bin/python3` to `/home/alice/.cache/python-sandbox/bwrap/store/building/abc`
    hint: a link lies below /opt/python-sandbox and points into a tree the step writes
    error: refusing to link `/opt/python-sandbox/env` to `/home/alice`
    hint: a link lies below /opt/python-sandbox and points into a tree the step writes
    ");
}

#[test]
fn plan_refuses_what_the_policy_refuses() {
    let mut home = input(1000);
    home.workspace = Some("/home/alice".into());
    let mut proc_mount = input(1000);
    proc_mount.mounts = vec![("/proc/1".into(), MountMode::ReadOnly)];
    let mut own = input(1000);
    own.mounts = vec![("/home/alice/.cache".into(), MountMode::ReadWrite)];
    let mut relative = input(1000);
    relative.mounts = vec![("/data/../etc".into(), MountMode::ReadWrite)];
    insta::assert_snapshot!(
        [home, proc_mount, own, relative].iter().map(render).collect::<Vec<_>>().join("\n"),
        @r"
    error: refusing to mount `/home/alice`: it would expose your whole home directory
    error: refusing to mount `/proc/1`: /proc holds kernel interfaces
    error: refusing to mount `/home/alice/.cache`: it overlaps python-sandbox's own directory /home/alice/.cache/python-sandbox (its cache)
    error: refusing to mount `/data/../etc`: it is not a canonical absolute path
    "
    );
}

/// Where a plan lets the sandbox write: read-write binds and tmpfs mounts.
fn writable_dests(ops: &[Op]) -> Vec<PathBuf> {
    ops.iter()
        .filter_map(|op| match op {
            Op::Bind { dest, access: Access::ReadWrite, .. } => Some(dest.clone()),
            Op::Tmpfs { path, .. } => Some(path.clone()),
            _ => None,
        })
        .collect()
}

fn path_strategy() -> impl Strategy<Value = PathBuf> {
    let part = prop::sample::select(vec![
        "home",
        "alice",
        "proj",
        "tmp",
        "usr",
        "etc",
        "data",
        ".ssh",
        ".cache",
        "python-sandbox",
        "x",
        "root",
        "var",
        "run",
        "lib",
        "..",
        "sandbox",
    ]);
    prop::collection::vec(part, 1..5).prop_map(|parts| {
        let mut p = PathBuf::from("/");
        for part in parts {
            p.push(part);
        }
        p
    })
}

proptest! {
    #[test]
    fn nothing_outside_the_workspace_and_rw_mounts_is_writable(
        uid in prop::sample::select(vec![0u32, 1000]),
        workspace in path_strategy(),
        mounts in prop::collection::vec((path_strategy(), any::<bool>()), 0..4),
        ro_dirs in prop::collection::vec(path_strategy(), 0..3),
    ) {
        let mut i = input(uid);
        i.workspace = Some(workspace.clone());
        i.ro_dirs = ro_dirs.into_iter().map(|d| (d.clone(), d)).collect();
        i.mounts = mounts
            .iter()
            .map(|(p, rw)| (p.clone(), if *rw { MountMode::ReadWrite } else { MountMode::ReadOnly }))
            .collect();
        let Ok(plan) = plan(&i) else { return Ok(()) };
        let declared: Vec<&Path> = std::iter::once(workspace.as_path())
            .chain(i.mounts.iter().filter(|(_, m)| *m == MountMode::ReadWrite).map(|(p, _)| p.as_path()))
            .collect();
        let tmpfs = [sandbox_core::SANDBOX_HOME, "/tmp", "/dev", "/dev/shm"];
        let home = Path::new("/home/alice");
        for dest in writable_dests(&plan.ops) {
            let allowed = declared.iter().any(|d| dest == *d) || tmpfs.iter().any(|t| dest == Path::new(t));
            prop_assert!(allowed, "writable {} not declared", dest.display());
            prop_assert!(!dest.starts_with(home) || declared.iter().any(|d| dest == *d));
        }
        for w in &plan.writable {
            let allowed = declared.iter().any(|d| w == *d)
                || tmpfs.iter().any(|t| w == Path::new(t))
                || w.starts_with("/dev");
            prop_assert!(allowed, "landlock-writable {} not declared", w.display());
        }
        // Caller paths never come in over a read-only system path they would shadow writable.
        prop_assert!(plan.ops.last() == Some(&Op::RootReadOnly));
        prop_assert!(plan.ids.host_uid != 0);
    }
}

#[test]
fn userns_reasons_name_the_setting() {
    let host = |settings: &'static [(&'static str, &'static str)]| {
        move |name: &str| settings.iter().find(|(n, _)| *n == name).map(|(_, v)| format!("{v}\n"))
    };
    let cases: [&[(&str, &str)]; 4] = [
        &[("user/max_user_namespaces", "0"), ("kernel/unprivileged_userns_clone", "0")],
        &[("user/max_user_namespaces", "96364"), ("kernel/unprivileged_userns_clone", "0")],
        &[("kernel/apparmor_restrict_unprivileged_userns", "1")],
        &[
            ("user/max_user_namespaces", "96364"),
            ("kernel/apparmor_restrict_unprivileged_userns", "0"),
        ],
    ];
    let got: Vec<_> = cases.iter().map(|c| crate::plan::userns_reason(host(c))).collect();
    insta::assert_debug_snapshot!(got, @r#"
    [
        Some(
            "user.max_user_namespaces = 0",
        ),
        Some(
            "kernel.unprivileged_userns_clone = 0",
        ),
        Some(
            "kernel.apparmor_restrict_unprivileged_userns = 1",
        ),
        None,
    ]
    "#);
}

/// `binds`: host path, where the sandbox sees it, access.
fn bwrap_plan(
    binds: &[(&str, &str, engine_bwrap::Access)],
    pinned: &[&str],
    chdir: &str,
) -> engine_bwrap::Plan {
    engine_bwrap::Plan {
        net: true,
        new_session: true,
        die_with_parent: true,
        uid: 65534,
        gid: 65534,
        home: sandbox_core::SANDBOX_HOME.into(),
        binds: binds
            .iter()
            .map(|(src, dest, access)| engine_bwrap::Bind {
                src: src.into(),
                dest: dest.into(),
                access: *access,
            })
            .collect(),
        links: Vec::new(),
        chdir: chdir.into(),
        env: vec![("PATH".into(), "/usr/bin".into())],
        command: vec!["/usr/bin/python3".into()],
        status_fd: None,
        seccomp_fd: None,
        block_fd: None,
        pinned: pinned.iter().map(PathBuf::from).collect(),
        bind_fds: Vec::new(),
        publish: Vec::new(),
        tmpfs_size: 1 << 20,
        run_as: Some((65534, 65534)),
        idmapped: vec!["/root/proj".into()],
        limits: engine_bwrap::SandboxLimits::default(),
    }
}

fn host() -> engine_bwrap::HostFacts {
    engine_bwrap::HostFacts {
        uid: 0,
        gid: 0,
        home: "/root".into(),
        root_entries: vec![engine_bwrap::RootEntry::Symlink {
            name: "bin".into(),
            target: "usr/bin".into(),
        }],
        etc: vec![("/etc/hosts".into(), "hosts".into())],
        ca_bundle: None,
        passwd: "/root/.cache/python-sandbox/bwrap/etc/passwd".into(),
        group: "/root/.cache/python-sandbox/bwrap/etc/group".into(),
        env: Vec::new(),
    }
}

/// The pipeline's abstract plans as this crate's input: a root caller's run (the workspace
/// idmapped, a read-write mount lent by ACL, the script outside the workspace) and a prepare
/// step (no caller path; the cache and environment are the engine's own writable dirs).
#[test]
fn the_pipelines_plans_as_native_input() {
    use engine_bwrap::Access::{ReadOnly, ReadWrite};
    let cache = Path::new("/root/.cache/python-sandbox");
    // Our own trees as the pipeline relocates them (`engine_bwrap`'s `Relocation`).
    let env = "/root/.cache/python-sandbox/bwrap/envs/k";
    let run = bwrap_plan(
        &[
            (env, "/opt/python-sandbox/env", ReadOnly),
            ("/opt/python", "/opt/python-sandbox/python", ReadOnly),
            ("/root/proj", "/root/proj", ReadWrite),
            ("/data/out", "/data/out", ReadWrite),
            ("/srv/script.py", "/srv/script.py", ReadOnly),
        ],
        &["/root/proj", "/data/out", "/srv/script.py"],
        "/root/proj",
    );
    let prepare = bwrap_plan(
        &[
            ("/root/.cache/python-sandbox/bwrap/uv/uv", "/opt/python-sandbox/bin/uv", ReadOnly),
            (
                "/root/.cache/python-sandbox/bwrap/uv-cache",
                "/root/.cache/python-sandbox/bwrap/uv-cache",
                ReadWrite,
            ),
            (env, "/opt/python-sandbox/env", ReadWrite),
        ],
        &[],
        "/opt/python-sandbox/env",
    );
    let show = |plan: &engine_bwrap::Plan| {
        let input = crate::input(plan, &host(), cache);
        format!("{input:#?}\n{}", render(&input))
    };
    insta::assert_snapshot!(format!("{}\n---\n{}", show(&run), show(&prepare)));
}

/// `detect`'s native line for each answer the kernel can give.
#[test]
fn probe_verdicts() {
    use crate::probe::{Answers, verdict};
    use engine_detect::NoPasta;
    let blocked = |why: &str| Err(why.to_owned());
    let cases = [
        Answers { userns: Ok(()), seccomp: true, landlock: Some(6), pasta: Ok(()), relay: true },
        Answers { userns: Ok(()), seccomp: true, landlock: Some(4), pasta: Ok(()), relay: true },
        Answers { userns: Ok(()), seccomp: true, landlock: None, pasta: Ok(()), relay: true },
        Answers {
            userns: Ok(()),
            seccomp: true,
            landlock: Some(6),
            pasta: Err(NoPasta::Missing),
            relay: false,
        },
        Answers {
            userns: Ok(()),
            seccomp: true,
            landlock: Some(6),
            pasta: Err(NoPasta::Missing),
            relay: true,
        },
        Answers {
            userns: Ok(()),
            seccomp: true,
            landlock: Some(6),
            pasta: Err(NoPasta::Tun {
                detail: "its mode 0600 does not let nobody (pasta's user for a root caller) read \
                         and write it"
                    .to_owned(),
            }),
            relay: false,
        },
        Answers { userns: Ok(()), seccomp: false, landlock: Some(6), pasta: Ok(()), relay: true },
        Answers {
            userns: blocked(
                "user.max_user_namespaces = 0 (unshare(CLONE_NEWUSER) failed: No space left on device (os error 28))",
            ),
            seccomp: true,
            landlock: Some(6),
            pasta: Ok(()),
            relay: true,
        },
    ];
    let shown: Vec<String> = cases
        .iter()
        .map(|a| {
            let p = verdict(a);
            format!("{:?} available={} {}", a.landlock, p.available, p.reason.replace('\n', " | "))
        })
        .collect();
    insta::assert_snapshot!(shown.join("\n"));
}

/// The user-namespace round trip is skipped only for a remembered success under the same key;
/// a failure is never remembered, and another key probes again.
#[test]
fn the_probe_memo_remembers_successes_for_their_key_alone() {
    use crate::probe::remembered;
    use std::cell::Cell;
    let dir = tempfile::tempdir().unwrap();
    let memo = dir.path().join("sub/native-probe");
    let calls = Cell::new(0);
    let ok = || {
        calls.set(calls.get() + 1);
        Ok(())
    };
    let blocked = || {
        calls.set(calls.get() + 1);
        Err("blocked".to_owned())
    };
    assert_eq!(remembered(Some(&memo), Some("a\n"), blocked), Err("blocked".to_owned()));
    assert!(!memo.exists(), "a failure was remembered");
    assert_eq!(remembered(Some(&memo), Some("a\n"), ok), Ok(()));
    assert_eq!(remembered(Some(&memo), Some("a\n"), blocked), Ok(()), "the memo was not read");
    assert_eq!(calls.get(), 2);
    assert_eq!(remembered(Some(&memo), Some("b\n"), blocked), Err("blocked".to_owned()));
    assert_eq!(remembered(None, Some("a\n"), blocked), Err("blocked".to_owned()));
    assert_eq!(remembered(Some(&memo), None, blocked), Err("blocked".to_owned()));
    assert_eq!(calls.get(), 5);
    assert_eq!(std::fs::read_to_string(&memo).unwrap(), "a\n");
}

#[test]
fn probe_memo_key() {
    let facts =
        [("boot", "b1"), ("uid", "0"), ("Seccomp", "0")].map(|(k, v)| (k.to_owned(), v.to_owned()));
    insta::assert_snapshot!(crate::probe::key(&facts), @r"
    boot b1
    uid 0
    Seccomp 0
    ");
}
