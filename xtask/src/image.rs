//! `cargo xtask image`: the sandbox runtime image (Debian's python3, uv from its PyPI wheel, CA
//! certificates, non-root user `sandbox`) built without any registry and imported into Docker and Podman.
//!
//! mmdebstrap makes a minimal root filesystem (variant `essential` plus `DEBIAN_PACKAGES`: no apt),
//! deploy/image/setup.sh finishes it chrooted (the same script the Containerfile runs), and the tarball is
//! imported with the Containerfile's own ENV/USER/WORKDIR/CMD/LABEL lines as `--change`s. Everything that
//! shapes the image is hashed into a content key stored as the label [`KEY_LABEL`]: an engine whose
//! image carries the current key is left alone, so CI pays for a build only when an input changed. The
//! tarball is cached under `target/image/`, so the second engine imports without rebuilding.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use xshell::{Shell, cmd};

use crate::services;

pub(crate) const DEFAULT_TAG: &str = "python-sandbox-runtime:latest";

/// The versioned tag the default image also gets: `python-sandbox-runtime:<version>-abi<N>`
/// (`N` from the Containerfile's `io.python-sandbox.image-abi` label). Kubernetes pulls a
/// `:latest` image `Always`, which fails without a registry; engine-k8s's default image is this
/// tag (its `DEFAULT_IMAGE`, kept equal by a test there).
pub(crate) fn versioned_tag(containerfile: &str) -> Result<String> {
    let abi = containerfile
        .lines()
        .find_map(|l| l.trim().strip_prefix("LABEL io.python-sandbox.image-abi="))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .context("deploy/image/Containerfile has no `LABEL io.python-sandbox.image-abi=\"N\"`")?;
    Ok(format!("python-sandbox-runtime:{}-abi{abi}", env!("CARGO_PKG_VERSION")))
}
/// The label holding the content key of the inputs an image was built from.
pub(crate) const KEY_LABEL: &str = "io.python-sandbox.image-key";
const IMAGE_DIR: &str = "deploy/image";
/// Where Debian keeps locally added CAs; the build host's are copied into the image.
const HOST_CA_DIR: &str = "/usr/local/share/ca-certificates";
/// Containerfile instructions `docker import --change` and `podman import --change` both accept.
const IMPORTABLE: [&str; 9] =
    ["CMD", "ENTRYPOINT", "ENV", "EXPOSE", "LABEL", "STOPSIGNAL", "USER", "VOLUME", "WORKDIR"];
/// A PEP 723 script with one small pure-Python dependency: fetching it proves the image's CA handling.
const PEP723_PROBE: &str = "# /// script\n# dependencies = [\"six\"]\n# ///\nimport six\nprint(\"six\", six.__version__)\n";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Engine {
    Docker,
    Podman,
    /// Podman as the unprivileged user `rootless::USER`, with its own storage and API socket.
    PodmanRootless,
}

impl Engine {
    pub(crate) const ALL: [Engine; 2] = [Engine::Docker, Engine::Podman];

    pub(crate) fn parse(name: &str) -> Option<Engine> {
        match name {
            "docker" => Some(Engine::Docker),
            "podman" => Some(Engine::Podman),
            "podman-rootless" => Some(Engine::PodmanRootless),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Engine::Docker => "docker",
            Engine::Podman => "podman",
            Engine::PodmanRootless => "podman-rootless",
        }
    }

    /// The engine's CLI as a program and its leading arguments: for rootless podman, `podman`
    /// run as its user.
    fn program(self) -> (String, Vec<String>) {
        match self {
            Engine::Docker => ("docker".to_owned(), Vec::new()),
            Engine::Podman => ("podman".to_owned(), Vec::new()),
            Engine::PodmanRootless => {
                let mut argv = crate::rootless::as_user(&["podman"]).into_iter();
                (argv.next().unwrap_or_default(), argv.collect())
            }
        }
    }

    /// Starts the engine when needed; `Some(reason)` when it cannot run here.
    pub(crate) fn ensure(self, sh: &Shell) -> Result<Option<String>> {
        match self {
            Engine::Docker => services::ensure_docker(sh),
            Engine::Podman => services::ensure_podman(sh),
            Engine::PodmanRootless => crate::rootless::ensure(sh),
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

pub(crate) struct Image {
    pub(crate) engines: Vec<Engine>,
    pub(crate) tag: String,
    /// Rebuild the rootfs (once, for all engines) and re-import even when the content key matches.
    pub(crate) force: bool,
    /// Run the image afterwards: python, uv, non-root, and a PEP 723 script that installs from PyPI.
    pub(crate) verify: bool,
}

impl Image {
    /// The default: both engines, the default tag, no forced rebuild, no verification.
    pub(crate) fn all() -> Image {
        Image {
            engines: Engine::ALL.to_vec(),
            tag: DEFAULT_TAG.to_owned(),
            force: false,
            verify: false,
        }
    }

    pub(crate) fn run(self, sh: &Shell) -> Result<()> {
        self.ready_engines(sh).map(drop)
    }

    /// The one call for CI's OCI tiers: start each engine, make its image current (and verify it when
    /// asked), print `SKIPPED: …` for an engine that cannot run here, and return the engines that are
    /// ready. `Image::all().ready_engines(sh)` costs about 0.2 s when everything is already up.
    pub(crate) fn ready_engines(self, sh: &Shell) -> Result<Vec<Engine>> {
        if self.force {
            // Once for all engines: every engine then imports the same fresh tarball.
            discard_rootfs_cache(&services::target_dir(sh).join("image"))?;
        }
        let mut ready = Vec::new();
        for engine in self.engines {
            crate::section(&format!("image {} on {engine}", self.tag));
            if let Some(reason) = engine.ensure(sh)? {
                crate::skipped(&format!("{engine} tier"), &reason);
                continue;
            }
            if let Some(reason) = ensure_image(sh, engine, &self.tag, self.force)? {
                crate::skipped(
                    &format!("{engine} tier"),
                    &format!("cannot build {}: {reason}", self.tag),
                );
                continue;
            }
            if self.verify {
                verify(sh, engine, &self.tag)?;
            }
            ready.push(engine);
        }
        Ok(ready)
    }
}

/// The default image also gets its [`versioned_tag`] (the same image id).
fn tag_versioned(sh: &Shell, engine: Engine, tag: &str, containerfile: &str) -> Result<()> {
    if tag != DEFAULT_TAG {
        return Ok(());
    }
    let versioned = versioned_tag(containerfile)?;
    let (program, pre) = engine.program();
    let pre = &pre;
    cmd!(sh, "{program} {pre...} tag {tag} {versioned}").quiet().ignore_stdout().run()?;
    Ok(())
}

/// Makes `tag` on `engine` (already running) the image of the current deploy/image inputs: nothing to
/// do when its [`KEY_LABEL`] matches (unless `force`), else build the rootfs (or reuse the cached
/// tarball) and import it. `Some(reason)` when the build cannot run on this machine (no mmdebstrap
/// and no way to install it). CI calls this after [`Engine::ensure`], or simply runs [`Image`].
pub(crate) fn ensure_image(
    sh: &Shell,
    engine: Engine,
    tag: &str,
    force: bool,
) -> Result<Option<String>> {
    let inputs = Inputs::read(sh)?;
    let versions = Versions::parse(&inputs.versions_env)?;
    check_in_sync(&versions, &inputs.containerfile)?;
    let changes = import_changes(&inputs.containerfile)?;
    let work = services::target_dir(sh).join("image");
    let key = sha256_hex(
        sh,
        key_material(&inputs, &mmdebstrap_args(&versions, &inputs.arch), &changes).as_bytes(),
    )?;
    let current = image_label(sh, engine, tag, KEY_LABEL);
    if !force && current.as_deref() == Some(key.as_str()) {
        println!("{tag} on {engine} is up to date (key {})", &key[..12]);
        tag_versioned(sh, engine, tag, &inputs.containerfile)?;
        return Ok(None);
    }
    let tarball = work.join(format!("rootfs-{}.tar", &key[..16]));
    if !tarball.is_file()
        && let Some(reason) = build_rootfs(sh, &inputs, &versions, &work, &tarball)?
    {
        return Ok(Some(reason));
    }
    let started = Instant::now();
    let (program, pre) = engine.program();
    let pre = &pre;
    let previous = image_id(sh, engine, tag);
    let mut args = Vec::new();
    for change in changes.iter().cloned().chain([format!("LABEL {KEY_LABEL}={key}")]) {
        args.push("--change".to_owned());
        args.push(change);
    }
    // Only podman has --quiet (for its progress lines on stderr); docker prints just the image id.
    let quiet = (engine != Engine::Docker).then_some("--quiet");
    cmd!(sh, "{program} {pre...} import {quiet...} {args...} {tarball} {tag}")
        .quiet()
        .ignore_stdout()
        .run()?;
    if image_label(sh, engine, tag, KEY_LABEL).as_deref() != Some(key.as_str()) {
        bail!("{engine} imported {tag} but it does not carry {KEY_LABEL}={key}");
    }
    tag_versioned(sh, engine, tag, &inputs.containerfile)?;
    // The image the tag pointed at is now untagged, 130 MiB each rebuild; one still used by a
    // container stays, and that refusal is not an error.
    if let Some(old) = previous.filter(|old| image_id(sh, engine, tag).as_ref() != Some(old)) {
        let _ = cmd!(sh, "{program} {pre...} image rm {old}")
            .quiet()
            .ignore_stdout()
            .ignore_stderr()
            .run();
    }
    println!(
        "imported {tag} into {engine} in {:.1} s (key {})",
        started.elapsed().as_secs_f64(),
        &key[..12]
    );
    Ok(None)
}

/// Runs the image the way the sandbox will: python and uv answer, the user is `SANDBOX_UID`, and uv
/// installs a PEP 723 script's dependency from PyPI (through whatever TLS-intercepting proxy the build
/// host trusts).
pub(crate) fn verify(sh: &Shell, engine: Engine, tag: &str) -> Result<()> {
    let inputs = Inputs::read(sh)?;
    let versions = Versions::parse(&inputs.versions_env)?;
    let (program, pre) = engine.program();
    let pre = &pre;
    let run = |argv: &[&str]| -> Result<String> {
        let out = cmd!(sh, "{program} {pre...} run --rm {tag} {argv...}")
            .quiet()
            .read()
            .with_context(|| format!("running `{}` in {tag} on {engine}", argv.join(" ")))?;
        Ok(out.trim().to_owned())
    };
    let checks: [(&[&str], String); 3] = [
        (&["python3", "-c", "print(1)"], "1".to_owned()),
        (&["uv", "--version"], format!("uv {} ", versions.get("UV_VERSION")?)),
        (&["id", "-u"], versions.get("SANDBOX_UID")?.to_owned()),
    ];
    for (argv, expected) in checks {
        let out = run(argv)?;
        let ok = if expected.ends_with(' ') { out.starts_with(&expected) } else { out == expected };
        if !ok {
            bail!(
                "`{}` in {tag} on {engine} printed `{out}`, expected `{}`",
                argv.join(" "),
                expected.trim()
            );
        }
    }
    // What the image must not contain: a package manager or a program that gains privileges.
    let hardening =
        "command -v apt-get apt dpkg; find / -xdev -type f -perm /6000 2>/dev/null; true";
    let found = run(&["sh", "-c", hardening])?;
    if !found.is_empty() {
        bail!("{tag} on {engine} still has package managers or setuid/setgid programs:\n{found}");
    }
    let started = Instant::now();
    let script =
        format!("printf '%s' '{PEP723_PROBE}' > /tmp/probe.py && uv run --quiet /tmp/probe.py");
    let out = run(&["sh", "-c", &script])?;
    if !out.starts_with("six ") {
        bail!("the PEP 723 probe in {tag} on {engine} printed `{out}`");
    }
    println!(
        "verified {tag} on {engine}: python3, uv {}, uid {}, no apt/dpkg/setuid, PEP 723 install from PyPI ({:.1} s)",
        versions.get("UV_VERSION")?,
        versions.get("SANDBOX_UID")?,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Everything read from disk that shapes the image.
pub(crate) struct Inputs {
    pub(crate) versions_env: String,
    pub(crate) setup_sh: String,
    pub(crate) containerfile: String,
    /// Extra CA certificates, file name → PEM: deploy/image/ca-certificates/ and the build host's.
    pub(crate) extra_cas: BTreeMap<String, String>,
    /// Debian's name for the build architecture (`amd64`, `arm64`).
    pub(crate) arch: String,
}

impl Inputs {
    fn read(sh: &Shell) -> Result<Inputs> {
        let dir = sh.current_dir().join(IMAGE_DIR);
        let read = |name: &str| {
            fs::read_to_string(dir.join(name))
                .with_context(|| format!("reading {IMAGE_DIR}/{name}"))
        };
        let mut extra_cas = BTreeMap::new();
        for ca_dir in [dir.join("ca-certificates"), PathBuf::from(HOST_CA_DIR)] {
            let Ok(entries) = fs::read_dir(&ca_dir) else { continue };
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.ends_with(".crt") {
                    let pem = fs::read_to_string(entry.path())
                        .with_context(|| format!("reading {}", entry.path().display()))?;
                    extra_cas.insert(name, pem);
                }
            }
        }
        let machine = cmd!(sh, "uname -m").quiet().read()?;
        Ok(Inputs {
            versions_env: read("versions.env")?,
            setup_sh: read("setup.sh")?,
            containerfile: read("Containerfile")?,
            extra_cas,
            arch: debian_arch(machine.trim())?.to_owned(),
        })
    }
}

pub(crate) fn debian_arch(machine: &str) -> Result<&'static str> {
    Ok(match machine {
        "x86_64" => "amd64",
        "aarch64" | "arm64" => "arm64",
        _ => bail!(
            "no pinned uv wheel for `{machine}`\nhint: add UV_WHEEL_* and UV_SHA256_* for it to {IMAGE_DIR}/versions.env"
        ),
    })
}

/// deploy/image/versions.env: `KEY=value` or `KEY="value"` lines, `#` comments, no expansion, so the
/// shell that sources it and this parser cannot disagree.
#[derive(Debug)]
pub(crate) struct Versions(BTreeMap<String, String>);

impl Versions {
    pub(crate) fn parse(text: &str) -> Result<Versions> {
        let mut map = BTreeMap::new();
        for (n, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = || format!("{IMAGE_DIR}/versions.env:{}: `{line}`", n + 1);
            let Some((key, value)) = line.split_once('=') else {
                bail!("{} is not KEY=value", at())
            };
            if key.is_empty()
                || !key.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            {
                bail!("{} has a key that is not an UPPER_SNAKE name", at());
            }
            let value = match value.strip_prefix('"') {
                Some(rest) => rest
                    .strip_suffix('"')
                    .with_context(|| format!("{} has an unclosed quote", at()))?,
                None => value,
            };
            if value.contains(['"', '\'', '$', '`', '\\'])
                || (!raw.contains('"') && value.contains(' '))
            {
                bail!("{} needs shell expansion or quoting this parser does not do", at());
            }
            if map.insert(key.to_owned(), value.to_owned()).is_some() {
                bail!("{} sets {key} twice", at());
            }
        }
        Ok(Versions(map))
    }

    pub(crate) fn get(&self, key: &str) -> Result<&str> {
        self.0
            .get(key)
            .map(String::as_str)
            .with_context(|| format!("{IMAGE_DIR}/versions.env does not set {key}"))
    }

    /// The pinned wheel URL and sha256 for a Debian architecture.
    fn uv_wheel(&self, arch: &str) -> Result<(&str, &str)> {
        let suffix = arch.to_ascii_uppercase();
        Ok((self.get(&format!("UV_WHEEL_{suffix}"))?, self.get(&format!("UV_SHA256_{suffix}"))?))
    }
}

/// The instructions of the Containerfile's final stage that `import --change` takes, continuation
/// lines joined. Variables are refused: an import has no build args to expand them with.
pub(crate) fn import_changes(containerfile: &str) -> Result<Vec<String>> {
    let mut instructions = Vec::new();
    let mut pending = String::new();
    for raw in containerfile.lines() {
        let line = raw.trim();
        if pending.is_empty() && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head.trim_end());
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        instructions.push(std::mem::take(&mut pending));
    }
    if !pending.is_empty() {
        instructions.push(pending);
    }
    let last_from = instructions.iter().rposition(|i| keyword(i) == "FROM");
    let Some(last_from) = last_from else { bail!("{IMAGE_DIR}/Containerfile has no FROM") };
    let mut changes = Vec::new();
    for instruction in &instructions[last_from + 1..] {
        let word = keyword(instruction);
        if !IMPORTABLE.contains(&word.as_str()) {
            continue;
        }
        if instruction.contains('$') {
            bail!(
                "{IMAGE_DIR}/Containerfile: `{instruction}` uses a variable, which an import cannot expand"
            );
        }
        changes.push(format!("{word}{}", &instruction[word.len()..]));
    }
    Ok(changes)
}

fn keyword(instruction: &str) -> String {
    instruction.split_whitespace().next().unwrap_or_default().to_ascii_uppercase()
}

/// The Containerfile must build what versions.env describes: its base is `debian:<suite>-slim` and its
/// user is `SANDBOX_UID`. Checked on every build and by a test, since the file is kept in sync by hand.
pub(crate) fn check_in_sync(versions: &Versions, containerfile: &str) -> Result<()> {
    let suite = versions.get("DEBIAN_SUITE")?;
    let uid = versions.get("SANDBOX_UID")?;
    let from =
        containerfile.lines().map(str::trim).rfind(|l| keyword(l) == "FROM").unwrap_or_default();
    if from.split_whitespace().nth(1) != Some(&format!("debian:{suite}-slim")) {
        bail!(
            "{IMAGE_DIR}/Containerfile: `{from}` does not match DEBIAN_SUITE={suite} in versions.env\nhint: use `FROM debian:{suite}-slim`"
        );
    }
    let users: Vec<String> =
        import_changes(containerfile)?.into_iter().filter(|c| keyword(c) == "USER").collect();
    if users != [format!("USER {uid}:{uid}")] {
        bail!(
            "{IMAGE_DIR}/Containerfile: its USER lines {users:?} do not match SANDBOX_UID={uid} in versions.env\nhint: end with `USER {uid}:{uid}`"
        );
    }
    Ok(())
}

/// Paths mmdebstrap's hooks read and write, relative to the repository root (its working directory),
/// so the argv, and with it the content key, is the same in every checkout.
const STAGE: &str = "target/image/stage";
const APT_ARCHIVES: &str = "target/image/apt-archives";

/// The mmdebstrap command line minus its output path. Variant `essential` has no apt; the merged-usr
/// hook avoids the `usrmerge` package (and the full perl it drags in); documentation except copyright
/// files is never unpacked; downloaded .debs are kept in target/image/apt-archives for the next build.
pub(crate) fn mmdebstrap_args(versions: &Versions, arch: &str) -> Vec<String> {
    let get = |k: &str| versions.get(k).unwrap_or_default().to_owned();
    let suite = get("DEBIAN_SUITE");
    let mirror = get("DEBIAN_MIRROR");
    let security = get("DEBIAN_SECURITY_MIRROR");
    let packages = get("DEBIAN_PACKAGES").split_whitespace().collect::<Vec<_>>().join(",");
    let mut args: Vec<String> = [
        "--mode=root",
        "--variant=essential",
        "--format=tar",
        "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
        "--skip=download/empty",
        "--skip=essential/unlink",
        // No fsync per unpacked file: a half-written rootfs is discarded anyway, never used.
        "--dpkgopt=force-unsafe-io",
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/info/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-include=/usr/share/doc/*/copyright",
    ]
    .map(String::from)
    .to_vec();
    args.push(format!("--architectures={arch}"));
    args.push(format!("--include={packages}"));
    args.push(format!("--setup-hook=mkdir -p \"$1/var/cache/apt/archives\" {APT_ARCHIVES}"));
    args.push(format!("--setup-hook=sync-in {APT_ARCHIVES} /var/cache/apt/archives"));
    args.push(format!("--customize-hook=sync-out /var/cache/apt/archives {APT_ARCHIVES}"));
    args.push("--customize-hook=mkdir -p \"$1/tmp/image-build\"".to_owned());
    args.push(format!("--customize-hook=sync-in {STAGE}/ca /usr/local/share/ca-certificates"));
    args.push(format!("--customize-hook=sync-in {STAGE}/build /tmp/image-build"));
    args.push("--customize-hook=chroot \"$1\" sh /tmp/image-build/setup.sh".to_owned());
    args.push("--customize-hook=rm -rf \"$1/tmp/image-build\"".to_owned());
    // setup.sh removed /etc/apt and apt's state along with apt: mmdebstrap's own cleanup of its apt
    // lists, cache and /etc/apt/apt.conf.d/00mmdebstrap would fail on files that are already gone.
    args.push("--skip=cleanup/apt".to_owned());
    args.push("--skip=cleanup/mmdebstrap".to_owned());
    args.push(suite.clone());
    args.push(String::new()); // the output path goes here
    args.push(format!("deb {mirror} {suite} main"));
    args.push(format!("deb {mirror} {suite}-updates main"));
    args.push(format!("deb {security} {suite}-security main"));
    args
}

/// The text whose sha256 is the content key: every input in a fixed order with its name and length,
/// so no two different input sets can produce the same text.
pub(crate) fn key_material(inputs: &Inputs, mmdebstrap: &[String], changes: &[String]) -> String {
    let mut parts: Vec<(String, &str)> = vec![
        ("versions.env".into(), &inputs.versions_env),
        ("setup.sh".into(), &inputs.setup_sh),
        ("arch".into(), &inputs.arch),
    ];
    let argv = mmdebstrap.join("\n");
    let changes = changes.join("\n");
    parts.push(("mmdebstrap".into(), &argv));
    parts.push(("changes".into(), &changes));
    for (name, pem) in &inputs.extra_cas {
        parts.push((format!("ca/{name}"), pem));
    }
    let mut material = String::from("python-sandbox-runtime image key v1\n");
    for (name, text) in parts {
        material.push_str(&format!("{name} {}\n{text}\n", text.len()));
    }
    material
}

fn build_rootfs(
    sh: &Shell,
    inputs: &Inputs,
    versions: &Versions,
    work: &Path,
    tarball: &Path,
) -> Result<Option<String>> {
    if !services::on_path(sh, "mmdebstrap")
        && let Some(reason) = services::apt_install(sh, &["mmdebstrap"])?
    {
        return Ok(Some(reason));
    }
    let started = Instant::now();
    let stage = sh.current_dir().join(STAGE);
    if stage.exists() {
        fs::remove_dir_all(&stage).with_context(|| format!("removing {}", stage.display()))?;
    }
    fs::create_dir_all(stage.join("ca"))?;
    fs::create_dir_all(stage.join("build"))?;
    for (name, pem) in &inputs.extra_cas {
        fs::write(stage.join("ca").join(name), pem)?;
    }
    fs::write(stage.join("build/versions.env"), &inputs.versions_env)?;
    fs::write(stage.join("build/setup.sh"), &inputs.setup_sh)?;
    let wheel = uv_wheel(sh, versions, &inputs.arch, work)?;
    fs::copy(&wheel, stage.join("build/uv.whl")).context("staging the uv wheel")?;

    let part = tarball.with_extension("tar.part");
    let mut args = mmdebstrap_args(versions, &inputs.arch);
    if let Some(out) = args.iter_mut().find(|a| a.is_empty()) {
        *out = part.display().to_string();
    }
    crate::section(&format!("mmdebstrap {} rootfs", versions.get("DEBIAN_SUITE")?));
    // dpkg chatter would bury CI's output: it goes to a log that a failure points at.
    let log = work.join("mmdebstrap.log");
    let out = cmd!(sh, "mmdebstrap --quiet {args...}").ignore_status().output()?;
    fs::write(&log, [out.stdout.as_slice(), out.stderr.as_slice()].concat())?;
    if !out.status.success() {
        let text = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> =
            text.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect();
        bail!(
            "mmdebstrap failed ({}):\n{}\nhint: full log in {}",
            out.status,
            tail.join("\n"),
            log.display()
        );
    }
    fs::rename(&part, tarball)?;
    fs::remove_dir_all(&stage)?;
    // One tarball is all a later import needs; older ones are 150 MiB each.
    for entry in fs::read_dir(work)?.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("rootfs-") && path != tarball {
            let _ = fs::remove_file(&path);
        }
    }
    let size = fs::metadata(tarball)?.len() / (1024 * 1024);
    println!(
        "built {} ({size} MiB) in {:.0} s",
        tarball.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(None)
}

fn discard_rootfs_cache(work: &Path) -> Result<()> {
    let Ok(entries) = fs::read_dir(work) else { return Ok(()) };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with("rootfs-") {
            fs::remove_file(entry.path())
                .with_context(|| format!("removing {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// The pinned uv wheel for `arch`, downloaded once into `work` and checked against versions.env.
pub(crate) fn uv_wheel(
    sh: &Shell,
    versions: &Versions,
    arch: &str,
    work: &Path,
) -> Result<PathBuf> {
    let (url, sha256) = versions.uv_wheel(arch)?;
    let wheel = work.join(format!("uv-{}-{arch}.whl", versions.get("UV_VERSION")?));
    if wheel.is_file() && sha256_file(sh, &wheel)? == sha256 {
        return Ok(wheel);
    }
    fs::create_dir_all(work)?;
    let part = wheel.with_extension("whl.part");
    cmd!(sh, "curl --fail --silent --show-error --location --retry 3 --output {part} {url}")
        .run()
        .with_context(|| format!("downloading {url}"))?;
    let got = sha256_file(sh, &part)?;
    if got != sha256 {
        bail!(
            "{url} has sha256 {got}, versions.env pins {sha256}\nhint: a proxy rewrote it, or the pin is wrong"
        );
    }
    fs::rename(&part, &wheel)?;
    Ok(wheel)
}

fn sha256_file(sh: &Shell, path: &Path) -> Result<String> {
    let out = cmd!(sh, "sha256sum {path}").quiet().read()?;
    Ok(out.split_whitespace().next().unwrap_or_default().to_owned())
}

/// coreutils' sha256sum instead of a hashing crate: xtask is built first in CI and keeps its
/// dependencies to anyhow and xshell.
fn sha256_hex(sh: &Shell, bytes: &[u8]) -> Result<String> {
    let out = cmd!(sh, "sha256sum").stdin(bytes).quiet().read()?;
    match out.split_whitespace().next() {
        Some(hex) if hex.len() == 64 => Ok(hex.to_owned()),
        _ => bail!("unexpected sha256sum output `{out}`"),
    }
}

fn image_id(sh: &Shell, engine: Engine, tag: &str) -> Option<String> {
    let (program, pre) = engine.program();
    let pre = &pre;
    let format = "{{.Id}}";
    let out = cmd!(sh, "{program} {pre...} image inspect --format {format} {tag}")
        .quiet()
        .ignore_stderr()
        .read()
        .ok()?;
    Some(out.trim().to_owned()).filter(|id| !id.is_empty())
}

/// A label of a local image, `None` when the image or the label is missing.
fn image_label(sh: &Shell, engine: Engine, tag: &str, label: &str) -> Option<String> {
    let (program, pre) = engine.program();
    let pre = &pre;
    let format = format!("{{{{index .Config.Labels \"{label}\"}}}}");
    let out = cmd!(sh, "{program} {pre...} image inspect --format {format} {tag}")
        .quiet()
        .ignore_stderr()
        .read()
        .ok()?;
    let value = out.trim();
    (!value.is_empty() && value != "<no value>").then(|| value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_file(name: &str) -> String {
        let path = crate::project_root().join(IMAGE_DIR).join(name);
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn versions() -> Versions {
        Versions::parse(&repo_file("versions.env")).expect("versions.env parses")
    }

    #[test]
    fn the_containerfile_agrees_with_versions_env() {
        check_in_sync(&versions(), &repo_file("Containerfile")).expect("in sync");
    }

    #[test]
    fn versions_env_pins_a_wheel_per_architecture() {
        let v = versions();
        for arch in ["amd64", "arm64"] {
            let (url, sha) = v.uv_wheel(arch).expect(arch);
            assert!(url.starts_with("https://files.pythonhosted.org/"), "{url}");
            assert!(url.contains(&format!("uv-{}-", v.get("UV_VERSION").unwrap())), "{url}");
            assert!(sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit()), "{sha}");
        }
        for key in [
            "DEBIAN_SUITE",
            "DEBIAN_MIRROR",
            "DEBIAN_SECURITY_MIRROR",
            "DEBIAN_PACKAGES",
            "SANDBOX_USER",
        ] {
            v.get(key).expect(key);
        }
    }

    #[test]
    fn the_repository_containerfile_yields_these_changes() {
        let changes = import_changes(&repo_file("Containerfile")).unwrap();
        assert_eq!(
            changes.join("\n"),
            "\
LABEL org.opencontainers.image.title=\"python-sandbox-runtime\"
LABEL org.opencontainers.image.description=\"Debian python3 and uv for running PEP 723 scripts in python-sandbox\"
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ENV LANG=C.UTF-8
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
LABEL io.python-sandbox.image-abi=\"4\"
USER 1000:1000
WORKDIR /home/sandbox
CMD [\"python3\"]"
        );
    }

    #[test]
    fn the_default_image_gets_a_versioned_tag() {
        let containerfile = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/image/Containerfile"),
        )
        .expect("the Containerfile");
        let tag = versioned_tag(&containerfile).expect("a tag");
        assert_eq!(tag, format!("python-sandbox-runtime:{}-abi4", env!("CARGO_PKG_VERSION")));
        assert!(versioned_tag("FROM x\n").is_err());
    }

    #[test]
    fn import_changes_cases() {
        let cases: &[(&str, Result<&str, &str>)] = &[
            ("FROM a\nRUN x\nENV A=1", Ok("ENV A=1")),
            ("FROM a AS build\nENV X=1\nFROM b\nuser 7", Ok("USER 7")),
            ("FROM a\nLABEL a=1 \\\n      b=2\nCOPY x y", Ok("LABEL a=1 b=2")),
            ("FROM a\n# ENV HIDDEN=1\n\nCMD [\"sh\"]", Ok("CMD [\"sh\"]")),
            ("FROM a\nENV P=$HOME/bin", Err("uses a variable")),
            ("ENV A=1", Err("has no FROM")),
        ];
        for (input, expected) in cases {
            let got = import_changes(input).map(|c| c.join("|")).map_err(|e| e.to_string());
            match (expected, &got) {
                (Ok(want), Ok(have)) => assert_eq!(want, have, "{input:?}"),
                (Err(want), Err(have)) => assert!(have.contains(want), "{input:?}: {have}"),
                _ => panic!("{input:?}: expected {expected:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn check_in_sync_names_the_mismatch() {
        let v = Versions::parse("DEBIAN_SUITE=bookworm\nSANDBOX_UID=1000\n").unwrap();
        let err = |cf: &str| check_in_sync(&v, cf).unwrap_err().to_string();
        assert!(
            err("FROM debian:trixie-slim\nUSER 1000:1000")
                .contains("hint: use `FROM debian:bookworm-slim`")
        );
        assert!(
            err("FROM debian:bookworm-slim\nUSER 0").contains("hint: end with `USER 1000:1000`")
        );
        assert!(err("FROM debian:bookworm-slim").contains("[]"));
        check_in_sync(&v, "FROM debian:bookworm-slim\nUSER 1000:1000").unwrap();
    }

    #[test]
    fn command_line() {
        let parse = |args: &[&str]| match crate::flags::parse(
            args.iter().map(|a| (*a).to_owned()).collect(),
        ) {
            Ok(crate::flags::Cmd::Image(i)) => Ok((i.engines, i.tag, i.force, i.verify)),
            Ok(_) => Err("another command".to_owned()),
            Err(e) => Err(e.to_string()),
        };
        let all = Engine::ALL.to_vec();
        assert_eq!(parse(&["image"]), Ok((all, DEFAULT_TAG.to_owned(), false, false)));
        assert_eq!(
            parse(&[
                "image", "--engine", "podman", "--engine", "podman", "--tag", "x:1", "--force",
                "--verify"
            ]),
            Ok((vec![Engine::Podman], "x:1".to_owned(), true, true))
        );
        let err = |args: &[&str]| parse(args).unwrap_err();
        assert!(
            err(&["image", "--engine", "lxc"])
                .starts_with("`--engine` needs `docker`, `podman` or `podman-rootless`")
        );
        assert!(err(&["image", "--tag"]).starts_with("`--tag` needs an image name"));
        assert!(err(&["image", "--quick"]).starts_with("unknown option `--quick` for `image`"));
        let defaults = Image::all();
        assert_eq!(
            (defaults.engines, defaults.tag),
            (Engine::ALL.to_vec(), DEFAULT_TAG.to_owned())
        );
    }

    #[test]
    fn versions_parse_cases() {
        let ok = Versions::parse("# c\nA=1\n\nB_2=\"x y\"\nC=\n").unwrap();
        assert_eq!(
            (ok.get("A").unwrap(), ok.get("B_2").unwrap(), ok.get("C").unwrap()),
            ("1", "x y", "")
        );
        assert!(ok.get("D").unwrap_err().to_string().contains("does not set D"));
        for (bad, msg) in [
            ("A", "is not KEY=value"),
            ("a=1", "UPPER_SNAKE"),
            ("A=\"1", "unclosed quote"),
            ("A=$B", "expansion"),
            ("A=x y", "expansion"),
            ("A=1\nA=2", "sets A twice"),
        ] {
            let err = Versions::parse(bad).unwrap_err().to_string();
            assert!(err.contains(msg), "{bad:?}: {err}");
        }
    }

    #[test]
    fn mmdebstrap_argv_is_checkout_independent() {
        let args = mmdebstrap_args(&versions(), "amd64");
        assert!(
            args.iter().all(|a| !a.contains(&*crate::project_root().to_string_lossy())),
            "{args:?}"
        );
        assert_eq!(
            args.iter().filter(|a| a.is_empty()).count(),
            1,
            "exactly one output placeholder"
        );
        assert!(
            args.contains(&"--include=python3,ca-certificates,tini,libstdc++6".to_owned()),
            "{args:?}"
        );
        let setup = args.iter().position(|a| a.contains("setup.sh")).unwrap();
        let sync_out = args.iter().position(|a| a.contains("sync-out")).unwrap();
        assert!(
            sync_out < setup,
            "the apt cache must be saved before setup.sh removes apt's state"
        );
    }

    #[test]
    fn every_input_moves_the_key_material() {
        let inputs = || Inputs {
            versions_env: "A=1\n".into(),
            setup_sh: "true\n".into(),
            containerfile: String::new(),
            extra_cas: BTreeMap::new(),
            arch: "amd64".into(),
        };
        let argv = vec!["--mode=root".to_owned()];
        let changes = vec!["USER 1".to_owned()];
        let base = key_material(&inputs(), &argv, &changes);
        let mut variants = vec![
            key_material(&Inputs { versions_env: "A=2\n".into(), ..inputs() }, &argv, &changes),
            key_material(&Inputs { setup_sh: "false\n".into(), ..inputs() }, &argv, &changes),
            key_material(&Inputs { arch: "arm64".into(), ..inputs() }, &argv, &changes),
            key_material(&inputs(), &["--mode=unshare".to_owned()], &changes),
            key_material(&inputs(), &argv, &["USER 2".to_owned()]),
        ];
        let mut with_ca = inputs();
        with_ca.extra_cas.insert("corp.crt".into(), "PEM".into());
        variants.push(key_material(&with_ca, &argv, &changes));
        for v in &variants {
            assert_ne!(&base, v);
        }
        variants.sort();
        variants.dedup();
        assert_eq!(variants.len(), 6);
        assert_eq!(base, key_material(&inputs(), &argv, &changes), "deterministic");
    }
}
