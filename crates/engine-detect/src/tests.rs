//! Pure tests: os-release parsing, guidance text, socket discovery, ping parsing, bwrap failures.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::Path;

use crate::api::{ApiEndpoint, docker_endpoints, parse_ping_response, podman_endpoints};
use crate::bwrap::{BwrapVersion, classify_bwrap_failure};
use crate::detection::Detection;
use crate::os::{OsInfo, Wsl, wsl_from};
use crate::probe::{EngineName, Probe, ProbeState};
use crate::suggest::suggest;

fn os_release(name: &str) -> OsInfo {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/os-release").join(name);
    OsInfo::from_os_release(&std::fs::read_to_string(path).unwrap())
}

const SAMPLES: &[&str] = &[
    "ubuntu-24.04",
    "ubuntu-22.04",
    "debian-12",
    "fedora-40",
    "arch",
    "alpine-3.20",
    "opensuse-tumbleweed",
    "linuxmint-22",
    "rocky-9",
    "nixos",
    "empty",
];

#[test]
fn parses_os_release_samples() {
    let mut out = String::new();
    for name in SAMPLES {
        let info = os_release(name);
        let _ = writeln!(
            out,
            "{name:<20} {:?} {:?} version={:?}",
            info.distro, info.pretty_name, info.version_id
        );
    }
    insta::assert_snapshot!(out, @r#"
    ubuntu-24.04         Ubuntu Some("Ubuntu 24.04.1 LTS") version=Some("24.04")
    ubuntu-22.04         Ubuntu Some("Ubuntu 22.04.4 LTS") version=Some("22.04")
    debian-12            Debian Some("Debian GNU/Linux 12 (bookworm)") version=Some("12")
    fedora-40            Fedora Some("Fedora Linux 40 (Workstation Edition)") version=Some("40")
    arch                 Arch Some("Arch Linux") version=None
    alpine-3.20          Alpine Some("Alpine Linux v3.20") version=Some("3.20.3")
    opensuse-tumbleweed  OpenSuse Some("openSUSE Tumbleweed") version=Some("20240901")
    linuxmint-22         Ubuntu Some("Linux Mint 22") version=Some("22")
    rocky-9              Fedora Some("Rocky Linux 9.4 (Blue Onyx)") version=Some("9.4")
    nixos                Unknown Some("NixOS 24.05") version=Some("24.05")
    empty                Unknown None version=None
    "#);
}

fn probe(name: EngineName, state: ProbeState, reason: &str) -> Probe {
    Probe::new(name, state, reason.to_owned())
}

fn nothing_installed() -> Detection {
    Detection::from_probes(vec![
        probe(EngineName::Bwrap, ProbeState::NotInstalled, "bwrap not found on PATH"),
        probe(
            EngineName::Docker,
            ProbeState::NotInstalled,
            "docker not found (unix:///var/run/docker.sock: no such socket)",
        ),
        probe(
            EngineName::Podman,
            ProbeState::NotInstalled,
            "podman not found (unix:///run/podman/podman.sock: no such socket)",
        ),
    ])
}

fn bwrap_blocked() -> Detection {
    let mut d = nothing_installed();
    d.engines[0] = probe(
        EngineName::Bwrap,
        ProbeState::Failed,
        &classify_bwrap_failure("bwrap: setting up uid map: Permission denied\n", true),
    );
    d
}

fn podman_no_socket() -> Detection {
    let mut d = nothing_installed();
    d.engines[2] = probe(
        EngineName::Podman,
        ProbeState::InstalledNoSocket,
        "podman is installed but no API socket answers",
    );
    d
}

#[test]
fn suggestions() {
    let mut cases: Vec<(String, OsInfo, Detection)> = Vec::new();
    for name in SAMPLES {
        cases.push((format!("{name}, nothing installed"), os_release(name), nothing_installed()));
    }
    let mut ubuntu = os_release("ubuntu-24.04");
    ubuntu.apparmor_restricts_userns = true;
    cases.push(("ubuntu-24.04, bwrap blocked by apparmor".into(), ubuntu, bwrap_blocked()));
    let mut debian = os_release("debian-12");
    debian.userns_disabled = true;
    cases.push(("debian-12, userns disabled".into(), debian, bwrap_blocked()));
    cases.push((
        "fedora-40, podman without socket".into(),
        os_release("fedora-40"),
        podman_no_socket(),
    ));
    let mut wsl2 = os_release("ubuntu-22.04");
    wsl2.wsl = Some(Wsl::V2);
    cases.push(("wsl2 ubuntu-22.04".into(), wsl2, nothing_installed()));
    let mut wsl1 = os_release("ubuntu-22.04");
    wsl1.wsl = Some(Wsl::V1);
    cases.push(("wsl1".into(), wsl1, nothing_installed()));
    // Each reason the native probe can give leads to its own fix; a container is only what
    // the probes found there (docker's seccomp profile refuses the unshare, or nothing does).
    for (name, reason) in [
        (
            "max_user_namespaces",
            "cannot create user namespaces here: user.max_user_namespaces = 0 (unshare(CLONE_NEWUSER) failed: No space left on device (os error 28))",
        ),
        (
            "unprivileged_userns_clone",
            "cannot create user namespaces here: kernel.unprivileged_userns_clone = 0 (unshare(CLONE_NEWUSER) failed: Operation not permitted (os error 1))",
        ),
        (
            "apparmor",
            "cannot create user namespaces here: kernel.apparmor_restrict_unprivileged_userns = 1 (mounting a tmpfs failed: Permission denied (os error 13))",
        ),
        (
            "refused",
            "cannot create user namespaces here: unshare(CLONE_NEWUSER) failed: Operation not permitted (os error 1)",
        ),
        (
            "no seccomp",
            "this kernel takes no seccomp filters (CONFIG_SECCOMP_FILTER), and the native sandbox never runs without its seccomp wall",
        ),
    ] {
        let mut engines = bwrap_blocked().engines;
        engines.insert(0, probe(EngineName::Native, ProbeState::Failed, reason));
        let detection = Detection::from_probes(engines);
        cases.push((format!("debian-12, native {name}"), os_release("debian-12"), detection));
    }
    let mut engines = nothing_installed().engines;
    engines.insert(
        0,
        probe(
            EngineName::Native,
            ProbeState::Available { endpoint: None },
            "built in: user namespaces work, seccomp wall, landlock ABI 6",
        ),
    );
    cases.push((
        "debian-12 in docker, native works".into(),
        os_release("debian-12"),
        Detection::from_probes(engines.clone()),
    ));
    // Without pasta native still works (HTTP(S) through its proxy): passt is recommended.
    engines[0].reason = format!(
        "built in: user namespaces work, seccomp wall, landlock ABI 6\n{}",
        crate::BUILTIN_NET
    );
    cases.push((
        "fedora, native works without pasta".into(),
        os_release("fedora-40"),
        Detection::from_probes(engines),
    ));
    cases.push(("macos".into(), OsInfo::macos(), nothing_installed()));
    let mut works = nothing_installed();
    works.engines[0] = probe(
        EngineName::Bwrap,
        ProbeState::Available { endpoint: None },
        "bubblewrap 0.8.0 works",
    );
    let works = Detection::from_probes(works.engines);
    cases.push(("debian-12, bwrap works".into(), os_release("debian-12"), works));

    for (name, os, detection) in cases {
        let text = suggest(&os, &detection);
        assert!(!text.contains("--no-sandbox") && !text.contains("unsandboxed)"), "{name}");
        insta::assert_snapshot!(name.replace([' ', ','], "_"), text);
    }
}

#[test]
fn detection_json_shape() {
    let detection = bwrap_blocked();
    insta::assert_snapshot!(serde_json::to_string_pretty(&detection).unwrap(), @r#"
    {
      "selected": null,
      "engines": [
        {
          "name": "bwrap",
          "available": false,
          "reason": "bwrap cannot create a sandbox here: setting up uid map: Permission denied\nhint: AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1); allow bwrap with an AppArmor profile (run `python-sandbox suggest`)",
          "limits": {
            "memory": null,
            "cpus": null,
            "pids": null
          },
          "defaults": {
            "memory": {
              "value": "2g",
              "held_by": null
            },
            "cpus": {
              "value": "2",
              "held_by": null
            },
            "pids": {
              "value": "512",
              "held_by": null
            }
          }
        },
        {
          "name": "docker",
          "available": false,
          "reason": "docker not found (unix:///var/run/docker.sock: no such socket)",
          "limits": {
            "memory": null,
            "cpus": null,
            "pids": null
          },
          "defaults": {
            "memory": {
              "value": "2g",
              "held_by": null
            },
            "cpus": {
              "value": "2",
              "held_by": null
            },
            "pids": {
              "value": "512",
              "held_by": null
            }
          }
        },
        {
          "name": "podman",
          "available": false,
          "reason": "podman not found (unix:///run/podman/podman.sock: no such socket)",
          "limits": {
            "memory": null,
            "cpus": null,
            "pids": null
          },
          "defaults": {
            "memory": {
              "value": "2g",
              "held_by": null
            },
            "cpus": {
              "value": "2",
              "held_by": null
            },
            "pids": {
              "value": "512",
              "held_by": null
            }
          }
        }
      ]
    }
    "#);
    let ok = Detection::from_probes(vec![
        probe(EngineName::Bwrap, ProbeState::Failed, "x"),
        probe(EngineName::Docker, ProbeState::Available { endpoint: None }, "docker API answers"),
        probe(EngineName::Podman, ProbeState::Available { endpoint: None }, "podman API answers"),
    ]);
    assert_eq!(ok.selected, Some(EngineName::Docker));
}

#[test]
fn socket_discovery() {
    let mut out = String::new();
    let show = |v: Vec<Result<ApiEndpoint, String>>| {
        v.into_iter()
            .map(|e| match e {
                Ok(e) => e.to_string(),
                Err(e) => format!("error: {e}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(out, "docker default: {}", show(docker_endpoints(None)));
    let _ = writeln!(out, "docker empty: {}", show(docker_endpoints(Some(OsStr::new("")))));
    let _ = writeln!(
        out,
        "docker unix: {}",
        show(docker_endpoints(Some(OsStr::new("unix:///tmp/d.sock"))))
    );
    let _ = writeln!(
        out,
        "docker tcp: {}",
        show(docker_endpoints(Some(OsStr::new("tcp://10.0.0.1:2375/"))))
    );
    let _ =
        writeln!(out, "docker ssh: {}", show(docker_endpoints(Some(OsStr::new("ssh://me@host")))));
    let _ = writeln!(out, "podman root: {}", show(podman_endpoints(None, None, 0)));
    let _ = writeln!(out, "podman user: {}", show(podman_endpoints(None, None, 1000)));
    let _ = writeln!(
        out,
        "podman xdg: {}",
        show(podman_endpoints(None, Some(OsStr::new("/run/user/7")), 7))
    );
    let _ = writeln!(
        out,
        "podman CONTAINER_HOST: {}",
        show(podman_endpoints(
            Some(OsStr::new("unix:///x/p.sock")),
            Some(OsStr::new("/run/user/7")),
            7
        ))
    );
    insta::assert_snapshot!(out, @"
    docker default: unix:///var/run/docker.sock
    docker empty: unix:///var/run/docker.sock
    docker unix: unix:///tmp/d.sock
    docker tcp: tcp://10.0.0.1:2375
    docker ssh: error: DOCKER_HOST=ssh://me@host is not supported (only unix:// and tcp:// are)
    podman root: unix:///run/podman/podman.sock
    podman user: unix:///run/user/1000/podman/podman.sock, unix:///run/podman/podman.sock
    podman xdg: unix:///run/user/7/podman/podman.sock, unix:///run/podman/podman.sock
    podman CONTAINER_HOST: unix:///x/p.sock
    ");
}

#[test]
fn ping_responses() {
    let cases: &[&[u8]] = &[
        b"HTTP/1.1 200 OK\r\nApi-Version: 1.45\r\n\r\nOK",
        b"HTTP/1.0 200 OK\r\n\r\n",
        b"HTTP/1.1 500 Internal Server Error\r\n\r\n",
        b"SSH-2.0-OpenSSH_9.2\r\n",
        b"",
    ];
    let out: Vec<String> = cases
        .iter()
        .map(|c| {
            format!(
                "{:?} -> {:?}",
                String::from_utf8_lossy(c).lines().next().unwrap_or(""),
                parse_ping_response(c)
            )
        })
        .collect();
    insta::assert_snapshot!(out.join("\n"), @r#"
    "HTTP/1.1 200 OK" -> Ok(())
    "HTTP/1.0 200 OK" -> Ok(())
    "HTTP/1.1 500 Internal Server Error" -> Err("ping answered HTTP 500")
    "SSH-2.0-OpenSSH_9.2" -> Err("not an HTTP API")
    "" -> Err("not an HTTP API")
    "#);
}

#[test]
fn bwrap_versions_and_failures() {
    assert_eq!(
        BwrapVersion::parse("bubblewrap 0.8.0\n"),
        Some(BwrapVersion { major: 0, minor: 8, patch: 0 })
    );
    assert_eq!(
        BwrapVersion::parse("bubblewrap 0.11.1"),
        Some(BwrapVersion { major: 0, minor: 11, patch: 1 })
    );
    assert_eq!(BwrapVersion::parse("0.12"), Some(BwrapVersion { major: 0, minor: 12, patch: 0 }));
    assert_eq!(BwrapVersion::parse("bubblewrap"), None);
    assert!(BwrapVersion::parse("bubblewrap 0.6.2").unwrap() < BwrapVersion::MINIMUM);
    assert!(BwrapVersion::parse("bubblewrap 0.11.0").unwrap() < BwrapVersion::SYMLINK_SAFE);

    let failures = [
        ("bwrap: setting up uid map: Permission denied\n", true),
        ("bwrap: setting up uid map: Permission denied\n", false),
        ("bwrap: loopback: Failed RTM_NEWADDR: Operation not permitted\n", false),
        ("bwrap: Unknown option --disable-userns\n", false),
        ("", false),
    ];
    let out: Vec<String> =
        failures.iter().map(|(stderr, aa)| classify_bwrap_failure(stderr, *aa)).collect();
    insta::assert_snapshot!(out.join("\n---\n"), @"
    bwrap cannot create a sandbox here: setting up uid map: Permission denied
    hint: AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns=1); allow bwrap with an AppArmor profile (run `python-sandbox suggest`)
    ---
    bwrap cannot create a sandbox here: setting up uid map: Permission denied
    hint: this kernel or container does not allow unprivileged user namespaces; run `python-sandbox suggest`
    ---
    bwrap cannot create a sandbox here: loopback: Failed RTM_NEWADDR: Operation not permitted
    hint: this kernel or container does not allow unprivileged user namespaces; run `python-sandbox suggest`
    ---
    bwrap cannot create a sandbox here: Unknown option --disable-userns
    hint: this bubblewrap is too old; install >= 0.8
    ---
    bwrap cannot create a sandbox here: no error output
    hint: run `python-sandbox suggest`
    ");
}

#[test]
fn wsl_markers() {
    assert_eq!(wsl_from(Some("5.15.153.1-microsoft-standard-WSL2"), false), Some(Wsl::V2));
    assert_eq!(wsl_from(Some("4.4.0-19041-Microsoft"), false), Some(Wsl::V1));
    assert_eq!(wsl_from(Some("6.8.0-45-generic"), false), None);
    assert_eq!(wsl_from(None, true), Some(Wsl::V2));
}

/// A fake cgroupfs: `files` are (path under the root, contents); every path is writable unless
/// listed in `read_only`. Returns the detection, rendered.
fn delegation(self_cgroup: &str, files: &[(&str, &str)], read_only: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, text).expect("write");
    }
    let read = |p: &Path| std::fs::read_to_string(p).ok();
    let root = dir.path().to_owned();
    let writable = |p: &Path| {
        let rel = p.strip_prefix(&root).unwrap_or(p);
        !read_only.iter().any(|r| rel == Path::new(r))
    };
    match crate::limits::delegation_in(dir.path(), self_cgroup, &read, &writable) {
        None => "none".to_owned(),
        Some(d) => format!(
            "dir {} controllers {:?} enable {:?}",
            d.dir.strip_prefix(dir.path()).unwrap_or(&d.dir).display(),
            d.controllers,
            d.enable
        ),
    }
}

/// The cgroup v2 detection over a fake cgroupfs: a delegated user slice, the root-owned
/// session scope a login shell sits in, v1 and hybrid hosts, and a parent with processes.
#[test]
fn cgroup_delegation_table() {
    const USER: &str = "user.slice/user-1000.slice/user@1000.service/app.slice";
    let own = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/run-1.scope\n";
    let v2 = ("cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
    let delegated = [
        v2,
        (
            "user.slice/user-1000.slice/user@1000.service/app.slice/cgroup.controllers",
            "cpu memory pids\n",
        ),
        (
            "user.slice/user-1000.slice/user@1000.service/app.slice/cgroup.subtree_control",
            "memory pids\n",
        ),
        ("user.slice/user-1000.slice/user@1000.service/app.slice/cgroup.procs", ""),
    ];
    let procs = format!("{USER}/cgroup.procs");
    let subtree = format!("{USER}/cgroup.subtree_control");
    let busy =
        [v2, (delegated[1].0, "memory pids\n"), (delegated[2].0, "\n"), (delegated[3].0, "4242\n")];
    let rows = [
        ("delegated user slice", delegation(own, &delegated, &[])),
        ("parent procs not writable", delegation(own, &delegated, &[&procs])),
        ("subtree_control not writable", delegation(own, &delegated, &[&subtree])),
        ("parent dir not writable", delegation(own, &delegated, &[USER])),
        (
            "cgroup v1: no cgroup.controllers at the root",
            delegation("12:memory:/user.slice\n0::/user.slice\n", &delegated[1..], &[]),
        ),
        ("no 0:: line", delegation("4:pids:/x\n", &delegated, &[])),
        ("a path with ..", delegation("0::/a/../b\n", &delegated, &[])),
        ("parent has processes, nothing enabled", delegation(own, &busy, &[])),
        ("own cgroup is the root", delegation("0::/\n", &[v2, ("cgroup.procs", "1\n")], &[])),
    ];
    let out: Vec<String> = rows.iter().map(|(name, got)| format!("{name}: {got}")).collect();
    insta::assert_snapshot!(out.join("\n"), @r#"
    delegated user slice: dir user.slice/user-1000.slice/user@1000.service/app.slice controllers ["memory", "pids", "cpu"] enable ["cpu"]
    parent procs not writable: none
    subtree_control not writable: none
    parent dir not writable: none
    cgroup v1: no cgroup.controllers at the root: none
    no 0:: line: none
    a path with ..: none
    parent has processes, nothing enabled: none
    own cgroup is the root: dir  controllers ["memory", "pids", "cpu"] enable ["memory", "pids", "cpu"]
    "#);
}

/// Which mechanism holds each limit under bwrap: the cgroup where its controller is, rlimits
/// for memory always and for pids on kernels that count them per user namespace, nothing
/// for cpus without the cgroup.
#[test]
fn bwrap_limit_mechanisms() {
    use crate::limits::{Delegation, bwrap_limits_from};
    let cgroup = |controllers: Vec<&'static str>| {
        Some(Delegation { dir: "/sys/fs/cgroup/x".into(), controllers, enable: Vec::new() })
    };
    let rows = [
        ("v1, 6.18", bwrap_limits_from(None, "6.18.44-fc-v769", 2)),
        ("v1, 5.10", bwrap_limits_from(None, "5.10.0-28-amd64", 2)),
        ("v1, garbage release", bwrap_limits_from(None, "", 2)),
        ("v2 memory pids, 6.1", bwrap_limits_from(cgroup(vec!["memory", "pids"]), "6.1.0", 2)),
        ("v2 all, 5.4", bwrap_limits_from(cgroup(vec!["memory", "pids", "cpu"]), "5.4.0", 2)),
    ];
    let out: Vec<String> =
        rows.iter().map(|(name, got)| format!("{name}: {}", got.support.summary())).collect();
    insta::assert_snapshot!(out.join("\n"), @r#"
    v1, 6.18: memory rlimit, cpus none, pids rlimit
    v1, 5.10: memory rlimit, cpus none, pids none
    v1, garbage release: memory rlimit, cpus none, pids none
    v2 memory pids, 6.1: memory cgroup v2, cpus none, pids cgroup v2
    v2 all, 5.4: memory cgroup v2, cpus cgroup v2, pids cgroup v2
    "#);
    assert!(crate::limits::nproc_per_userns("5.14.0"));
    assert!(!crate::limits::nproc_per_userns("5.13.19"));
    let summaries: Vec<String> = rows
        .iter()
        .map(|(name, got)| format!("{name}: {}", crate::DefaultLimits::of(&got.support).summary()))
        .collect();
    insta::assert_snapshot!(summaries.join("\n"), @r"
    v1, 6.18: memory 2g (rlimit: RLIMIT_DATA of 2g plus 64m per CPU, per process), cpus 2 (not held here), pids 512 (rlimit: RLIMIT_NPROC in the sandbox's own user namespace)
    v1, 5.10: memory 2g (rlimit: RLIMIT_DATA of 2g plus 64m per CPU, per process), cpus 2 (not held here), pids 512 (not held here)
    v1, garbage release: memory 2g (rlimit: RLIMIT_DATA of 2g plus 64m per CPU, per process), cpus 2 (not held here), pids 512 (not held here)
    v2 memory pids, 6.1: memory 2g (cgroup v2), cpus 2 (not held here), pids 512 (cgroup v2)
    v2 all, 5.4: memory 2g (cgroup v2), cpus 2 (cgroup v2), pids 512 (cgroup v2)
    ");
}

/// The defaults are every engine's one set, each held by what holds an asked limit there.
#[test]
fn defaults_are_held_by_the_engines_own_means() {
    let runtime = crate::DefaultLimits::of(&crate::LimitSupport::RUNTIME);
    let nothing = crate::DefaultLimits::of(&crate::LimitSupport::NONE);
    insta::assert_snapshot!(format!("{}\n{}", runtime.summary(), nothing.summary()), @r"
    memory 2g (container runtime), cpus 2 (container runtime), pids 512 (container runtime)
    memory 2g (not held here), cpus 2 (not held here), pids 512 (not held here)
    ");
    // The memory default under rlimits leaves room for a BLAS buffer and a stack per CPU.
    assert_eq!(crate::rlimit_memory_default(2 << 30, 4), (2 << 30) + (256 << 20));
}

#[test]
fn online_cpu_lists_are_counted() {
    assert_eq!(crate::cpu_count("0-3\n"), Some(4));
    assert_eq!(crate::cpu_count("0-3,8,10-11"), Some(7));
    assert_eq!(crate::cpu_count("0"), Some(1));
    assert_eq!(crate::cpu_count(""), None);
    assert_eq!(crate::cpu_count("3-1"), None);
}

#[test]
fn a_cluster_is_listed_but_never_selected_and_suggest_explains_how_to_get_one() {
    let mut engines = nothing_installed().engines;
    engines.push(probe(EngineName::K8s, ProbeState::Available { endpoint: None }, "answers"));
    assert_eq!(Detection::from_probes(engines.clone()).selected, None, "auto never picks k8s");
    engines[2] = probe(EngineName::Podman, ProbeState::Available { endpoint: None }, "ok");
    assert_eq!(Detection::from_probes(engines).selected, Some(EngineName::Podman));

    let mut works = nothing_installed().engines;
    works[0] = probe(EngineName::Bwrap, ProbeState::Available { endpoint: None }, "works");
    works.push(probe(EngineName::K8s, ProbeState::NotConfigured, "not configured"));
    let text = suggest(&os_release("debian-12"), &Detection::from_probes(works));
    insta::assert_snapshot!(text, @r"
    bwrap works on Debian GNU/Linux 12 (bookworm); nothing to fix
      ok bwrap  works
      no docker docker not found (unix:///var/run/docker.sock: no such socket)
      no podman podman not found (unix:///run/podman/podman.sock: no such socket)
      no k8s    not configured

    k8s (a cluster; `--engine k8s` only, `auto` never picks it):
      a local cluster: `cargo xtask kind up` (kind with ingress-nginx and the `python-sandbox` namespace)
      another cluster: `kubectl apply -n NAMESPACE -f deploy/rbac/` (the engine's Role), bound to your user
      then point `KUBECONFIG` at it, or set `[engine.k8s]` in ~/.config/python-sandbox/config.toml
    ");
}

#[test]
fn tun_is_usable_only_read_write_by_the_user_pasta_runs_as() {
    use crate::which::tun_verdict;
    const CHR: u32 = 0o020000;
    let nobody = 65_534;
    // udev's default: everyone.
    assert_eq!(tun_verdict(Some((CHR | 0o666, 0, 0)), nobody, &[nobody]), Ok(()));
    assert_eq!(tun_verdict(Some((CHR | 0o666, 0, 0)), 1000, &[1000]), Ok(()));
    // Root's only (a VM or container without udev's rule): refused for nobody (a root
    // caller's pasta) and any other user, with the mode named.
    let root_only = Some((CHR | 0o600, 0, 0));
    insta::assert_snapshot!(
        tun_verdict(root_only, nobody, &[nobody]).unwrap_err(),
        @"its mode 0600 does not let nobody (pasta's user for a root caller) read and write it"
    );
    assert_eq!(
        tun_verdict(root_only, 1000, &[1000]).unwrap_err(),
        "its mode 0600 does not let uid 1000 read and write it"
    );
    // Through the group, and not through a group the user is not in.
    assert_eq!(tun_verdict(Some((CHR | 0o660, 0, 108)), 1000, &[1000, 108]), Ok(()));
    assert!(tun_verdict(Some((CHR | 0o660, 0, 108)), 1000, &[1000]).is_err());
    // Read-only is not enough.
    assert!(tun_verdict(Some((CHR | 0o644, 0, 0)), 1000, &[1000]).is_err());
    assert_eq!(tun_verdict(None, 1000, &[]).unwrap_err(), "there is no /dev/net/tun");
}

/// The kernel's own answers, read without privilege: the host's loopback is in its local
/// table, `ip route get` calls it `local`, and a public address (no packet is sent) is routed
/// or unroutable, never the host's.
#[test]
fn the_kernel_says_which_addresses_are_the_hosts() {
    use std::net::IpAddr;
    let local = crate::netlink::host_local_ranges().unwrap();
    let loopback: IpAddr = "127.0.0.1".parse().unwrap();
    assert!(local.iter().any(|c| c.contains(loopback)), "{local:?}");
    let sock = crate::netlink::socket().unwrap();
    assert_eq!(crate::netlink::route_kind(&sock, loopback).unwrap(), sandbox_core::RTN_LOCAL);
    for range in local.iter().filter(|c| c.addr.is_ipv4()) {
        assert_eq!(crate::netlink::route_kind(&sock, range.addr).unwrap(), sandbox_core::RTN_LOCAL);
    }
    let public: IpAddr = "192.0.2.200".parse().unwrap();
    if !local.iter().any(|c| c.contains(public)) {
        let kind = crate::netlink::route_kind(&sock, public);
        assert!(kind.as_ref().map_or(true, |k| *k != sandbox_core::RTN_LOCAL), "{kind:?}");
    }
    // A dump holds both families' main tables.
    let routes = crate::netlink::routes(&sock).unwrap();
    assert!(routes.done && routes.routes.iter().any(|r| r.table == sandbox_core::RT_TABLE_MAIN));
}
