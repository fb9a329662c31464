//! Pure guidance for "no engine works here" (`python-sandbox suggest`; the CLI then exits 3).
//! Every path ends in a real sandbox: there is deliberately no advice to run unsandboxed.

use std::fmt::Write as _;

use crate::detection::Detection;
use crate::os::{Distro, OsInfo, OsKind, Wsl};
use crate::probe::{EngineName, ProbeState};

/// An AppArmor profile that lets `/usr/bin/bwrap` (and only it) create user namespaces.
const APPARMOR_PROFILE: &str = "\
sudo tee /etc/apparmor.d/bwrap >/dev/null <<'EOF'
abi <abi/4.0>,
include <tunables/global>

profile bwrap /usr/bin/bwrap flags=(unconfined) {
  userns,
  include if exists <local/bwrap>
}
EOF
sudo apparmor_parser -r /etc/apparmor.d/bwrap";

/// Guidance text for this host. Mentions what each probe found, then the shortest fix; a
/// cluster that does not work gets its own paragraph (it is never `auto`'s choice).
pub fn suggest(os: &OsInfo, detection: &Detection) -> String {
    let local = suggest_local(os, detection);
    match detection.probe(EngineName::K8s).filter(|p| !p.available) {
        Some(_) => format!("{local}\n\n{K8S_ADVICE}"),
        None => local,
    }
}

/// How to get a cluster for `--engine k8s`.
const K8S_ADVICE: &str = "\
k8s (a cluster; `--engine k8s` only, `auto` never picks it):
  a local cluster: `cargo xtask kind up` (kind with ingress-nginx and the `python-sandbox` namespace)
  another cluster: `kubectl apply -n NAMESPACE -f deploy/rbac/` (the engine's Role), bound to your user
  then point `KUBECONFIG` at it, or set `[engine.k8s]` in ~/.config/python-sandbox/config.toml";

fn suggest_local(os: &OsInfo, detection: &Detection) -> String {
    let mut out = String::new();
    let host = os.pretty_name.as_deref().unwrap_or("this system");
    match detection.selected {
        Some(engine) => {
            let _ = writeln!(out, "{engine} works on {host}; nothing to fix");
        }
        None => {
            let _ = writeln!(out, "no isolation engine works on {host}");
        }
    }
    for probe in &detection.engines {
        let first = probe.reason.lines().next().unwrap_or_default();
        let mark = if probe.available { "ok" } else { "no" };
        let _ = writeln!(out, "  {mark:<2} {:<6} {first}", probe.name.as_str());
    }
    if detection.selected.is_some() {
        let builtin_net = detection
            .engines
            .iter()
            .find(|p| Some(p.name) == detection.selected)
            .is_some_and(|p| p.available && p.reason.contains(BUILTIN_NET));
        if builtin_net {
            let _ = write!(
                out,
                "\nrecommended: install passt for full TCP/UDP networking in the sandboxes \
                 (without it, net on is HTTP(S) only, through the built-in proxy):\n  {}\n",
                passt_install(os.distro)
            );
        }
        return out.trim_end().to_owned();
    }
    out.push('\n');

    let bwrap_state = detection.probe(EngineName::Bwrap).map(|p| &p.state);
    let bwrap_installed = !matches!(bwrap_state, Some(ProbeState::NotInstalled) | None);

    if os.kind == OsKind::MacOs {
        out.push_str(
            "bubblewrap is Linux-only; on macOS use a container engine:\n\
             \x20 Docker Desktop: brew install --cask docker, then start Docker.app\n\
             \x20 Podman:         brew install podman && podman machine init && podman machine start\n",
        );
        return finish(out);
    }
    if os.wsl == Some(Wsl::V1) {
        out.push_str(
            "WSL 1 has no Linux kernel namespaces, so no sandbox can run in it\n\
             \x20 convert the distribution to WSL 2 from Windows: wsl --set-version <distro> 2\n",
        );
        return finish(out);
    }
    // What the native probe found decides the advice: it tried what every local sandbox
    // needs (user namespaces, seccomp), so its reason names the one thing to fix here.
    let native = detection.probe(EngineName::Native).filter(|p| !p.available);
    if let Some(native) = native {
        out.push_str(&native_fix(&native.reason));
    }

    let (install, docker, podman) = match os.distro {
        Distro::Ubuntu | Distro::Debian => (
            "sudo apt install bubblewrap passt",
            "sudo apt install docker.io",
            "sudo apt install podman",
        ),
        Distro::Fedora => (
            "sudo dnf install bubblewrap passt",
            "sudo dnf install moby-engine",
            "sudo dnf install podman",
        ),
        Distro::Arch => {
            ("sudo pacman -S bubblewrap passt", "sudo pacman -S docker", "sudo pacman -S podman")
        }
        Distro::Alpine => {
            ("doas apk add bubblewrap passt", "doas apk add docker", "doas apk add podman")
        }
        Distro::OpenSuse => (
            "sudo zypper install bubblewrap passt",
            "sudo zypper install docker",
            "sudo zypper install podman",
        ),
        Distro::Unknown => (
            "install bubblewrap (>= 0.8) and passt (pasta) with your package manager",
            "install docker with your package manager",
            "install podman with your package manager",
        ),
    };
    if os.wsl == Some(Wsl::V2) {
        out.push_str("WSL 2 supports bubblewrap inside the distribution\n");
    }
    // Without a native probe (a library caller's detection) bubblewrap is the local engine to
    // get; with one, bubblewrap needs exactly what native lacks, so only the fix above helps.
    let probed_natively = detection.probe(EngineName::Native).is_some();
    if !probed_natively {
        if !bwrap_installed {
            let _ = writeln!(out, "install bubblewrap (the preferred engine):\n  {install}");
        } else if matches!(bwrap_state, Some(ProbeState::Failed)) {
            out.push_str("bubblewrap is installed but cannot create namespaces\n");
        }
    }

    // Before bwrap is installed its probe cannot show the restriction, so go by the release
    // (only without a native probe, which shows it by trying).
    let restricting_ubuntu =
        os.distro == Distro::Ubuntu && !bwrap_installed && ubuntu_restricts(os);
    if !probed_natively && (os.apparmor_restricts_userns || restricting_ubuntu) {
        let _ = writeln!(
            out,
            "AppArmor restricts unprivileged user namespaces (Ubuntu 23.10 and later); \
             allow them for bwrap only with a profile:\n{}",
            indent(APPARMOR_PROFILE)
        );
        out.push_str(
            "  (the system-wide switch `sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0` \
             also works but lifts the restriction for every program)\n",
        );
    }
    if !probed_natively && os.userns_disabled {
        out.push_str(
            "unprivileged user namespaces are switched off in this kernel; enable them:\n\
             \x20 sudo sysctl -w kernel.unprivileged_userns_clone=1   (older Debian kernels)\n\
             \x20 sudo sysctl -w user.max_user_namespaces=15000       (if it is 0)\n\
             \x20 and persist the setting in /etc/sysctl.d/\n",
        );
    }

    match detection.probe(EngineName::Podman).map(|p| &p.state) {
        Some(ProbeState::InstalledNoSocket) => out.push_str(
            "podman is installed; start its API socket to use it:\n\
             \x20 systemctl --user enable --now podman.socket\n",
        ),
        _ => match detection.probe(EngineName::Docker).map(|p| &p.state) {
            Some(ProbeState::Failed) => out.push_str(
                "docker is installed but its daemon does not answer:\n\
                 \x20 sudo systemctl enable --now docker\n\
                 \x20 and add yourself to the docker group (or use rootless docker)\n",
            ),
            _ => {
                let _ = writeln!(out, "or use a container engine instead:\n  {docker}\n  {podman}");
            }
        },
    }
    if os.wsl == Some(Wsl::V2) {
        out.push_str(
            "  on Windows, Docker Desktop with WSL integration for this distribution also works\n",
        );
    }
    finish(out)
}

/// What a native or bwrap probe's reason says when net-on sandboxes get the built-in HTTP(S)
/// proxy because pasta is not installed (the engine works; passt is a recommendation).
pub const BUILTIN_NET: &str =
    "network: HTTP(S) only, through the built-in proxy (no pasta on PATH)";

/// The command that installs passt (pasta) on `distro`.
fn passt_install(distro: Distro) -> &'static str {
    match distro {
        Distro::Ubuntu | Distro::Debian => "sudo apt install passt",
        Distro::Fedora => "sudo dnf install passt",
        Distro::Arch => "sudo pacman -S passt",
        Distro::Alpine => "doas apk add passt",
        Distro::OpenSuse => "sudo zypper install passt",
        Distro::Unknown => "install passt (pasta) with your package manager",
    }
}

/// How the native probe's reason starts when user namespaces cannot be made (the rest says why).
pub const NATIVE_USERNS_PREFIX: &str = "cannot create user namespaces here: ";

/// The fix for what keeps the native engine from working, from its probe's `reason`.
fn native_fix(reason: &str) -> String {
    let first = reason.lines().next().unwrap_or_default();
    let first = first.trim_start_matches(NATIVE_USERNS_PREFIX);
    let sysctl = |setting: &str, value: &str| {
        format!(
            "user namespaces are switched off here ({first}); enable them:\n\
             \x20 sudo sysctl -w {setting}={value}\n\
             \x20 and persist it: echo '{setting} = {value}' | sudo tee /etc/sysctl.d/60-userns.conf\n"
        )
    };
    if reason.contains(crate::MAX_USER_NAMESPACES_OFF) {
        sysctl("user.max_user_namespaces", "15000")
    } else if reason.contains(crate::USERNS_CLONE_OFF) {
        sysctl("kernel.unprivileged_userns_clone", "1")
    } else if reason.contains(crate::APPARMOR_USERNS_RESTRICTED) {
        format!(
            "AppArmor restricts unprivileged user namespaces ({first}); allow them for \
             python-sandbox only with a profile:\n{}\n\
             \x20 (the system-wide switch `sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0` \
             also works but lifts the restriction for every program)\n",
            indent(NATIVE_APPARMOR_PROFILE)
        )
    } else if reason.contains(crate::NO_SECCOMP_FILTERS) {
        "this kernel has no seccomp filters, which every local sandbox here needs for its wall; \
         use a container engine (below) or a kernel built with CONFIG_SECCOMP_FILTER\n"
            .to_owned()
    } else {
        format!(
            "user namespaces are refused here though no sysctl forbids them ({first}): a seccomp \
             or AppArmor profile (a container's, by default docker's and podman's) or a security \
             module refuses unshare(CLONE_NEWUSER); options:\n\
             \x20 run python-sandbox where user namespaces work (the host)\n\
             \x20 or start the container with profiles that allow them: \
             --security-opt seccomp=unconfined --security-opt apparmor=unconfined\n\
             \x20 or give it a docker API: -v /var/run/docker.sock:/var/run/docker.sock \
             (anyone with that socket controls the host's docker)\n"
        )
    }
}

/// An AppArmor profile that lets the python-sandbox binary (and only it) create user
/// namespaces; its path is the installed binary's.
const NATIVE_APPARMOR_PROFILE: &str = "\
PSBX=\"$(command -v python-sandbox)\"
sudo tee /etc/apparmor.d/python-sandbox >/dev/null <<EOF
abi <abi/4.0>,
include <tunables/global>

profile python-sandbox $PSBX flags=(unconfined) {
  userns,
  include if exists <local/python-sandbox>
}
EOF
sudo apparmor_parser -r /etc/apparmor.d/python-sandbox";

/// Ubuntu 23.10 introduced `kernel.apparmor_restrict_unprivileged_userns=1` by default.
fn ubuntu_restricts(os: &OsInfo) -> bool {
    let Some(version) = os.version_id.as_deref() else { return true };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major, minor) >= (23, 10)
}

fn finish(mut out: String) -> String {
    out.push_str(
        "then check with `python-sandbox detect`; python-sandbox never runs a script without a sandbox",
    );
    out
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| if l.is_empty() { String::new() } else { format!("    {l}") })
        .collect::<Vec<_>>()
        .join("\n")
}
