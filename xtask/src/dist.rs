//! `cargo xtask dist [--check]`: the release, built into `target/dist` (nothing is published from
//! here; `.github/workflows/release.yml` publishes it on a tag):
//!
//! - `python-sandbox-<version>-<triple>.tar.gz` for each of [`crate::release::TARGETS`] (static
//!   musl builds, [`crate::release`]): the binary with its sha256 and the licenses;
//! - the CLI's wheel for each, built by maturin from the root `pyproject.toml` (`bindings =
//!   "bin"`, the way uv and ruff ship theirs), for `uv tool install`, `uvx` and `pipx`. The binary
//!   is static, so one wheel is tagged for both manylinux and musllinux;
//! - `SHA256SUMS` of all of them, and `plugin/SHA256SUMS`, the tarballs' sums pinned in the
//!   plugin, whose launcher downloads a tarball on first use and checks it against them (never
//!   against sums from the server it downloaded from). Commit it with a release.
//!
//! A target that cannot be built here (no rustup target, no cross compiler) prints
//! `SKIPPED: dist <triple>: reason`. maturin comes from PyPI (pinned, run by the pinned uv of
//! deploy/image/versions.env), and builds in `target/plugin-install`. `--check` (CI) installs this
//! machine's wheel with `uv tool install` into a fresh directory and runs `examples/hello.py` with
//! the installed CLI, checks that each wheel and its tarball hold the same binary, that each binary
//! is static, of its architecture, and names no path of the build machine.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use xshell::{Shell, cmd};

use crate::image::Versions;

pub(crate) struct Dist {
    pub(crate) check: bool,
}

/// The maturin the wheel is built with: a new release cannot change the wheel by itself.
const MATURIN: &str = "1.16.0";
/// Where the artefacts go, relative to the repository root.
pub(crate) const OUT: &str = "target/dist";
/// The tarballs' sums the plugin pins, relative to the repository root.
pub(crate) const PINS: &str = "plugin/SHA256SUMS";
/// Shipped next to the binary in the tarball (and in the wheel, through `license-files`).
const LICENSES: [&str; 2] = ["LICENSE-MIT", "LICENSE-APACHE"];

/// One target's build: its wheel, tarball and binary.
struct Built {
    triple: String,
    wheel: PathBuf,
    tarball: PathBuf,
    binary: PathBuf,
}

impl Dist {
    pub(crate) fn run(self, sh: &Shell) -> Result<()> {
        crate::section("dist: the pinned uv");
        let uv = pinned_uv(sh)?;
        // A TLS-intercepting proxy is trusted through the system store, as a user behind one needs.
        let _certs = sh.push_env("UV_SYSTEM_CERTS", "1");
        let root = crate::project_root();
        let out = root.join(OUT);
        sh.remove_path(&out)?;
        sh.create_dir(&out)?;
        let version = env!("CARGO_PKG_VERSION");

        let mut built = Vec::new();
        for triple in crate::release::TARGETS {
            crate::section(&format!("dist: {triple}"));
            if let Err(reason) = crate::release::prepare(sh, triple) {
                crate::skipped(&format!("dist {triple}"), &reason);
                continue;
            }
            built.push(build(sh, &uv, &root, &out, triple, version)?);
        }
        if built.is_empty() {
            return Ok(());
        }

        crate::section("dist: SHA256SUMS, and the tarballs' sums pinned in the plugin");
        let files: Vec<&Path> =
            built.iter().flat_map(|b| [b.tarball.as_path(), b.wheel.as_path()]).collect();
        let sums = sha256sums(sh, &files)?;
        sh.write_file(out.join("SHA256SUMS"), &sums)?;
        let pins = sha256sums(sh, &built.iter().map(|b| b.tarball.as_path()).collect::<Vec<_>>())?;
        sh.write_file(root.join(PINS), &pins)?;
        print!("{sums}");
        if built.len() < crate::release::TARGETS.len() {
            println!("note: {PINS} pins only the targets built here; a release pins all of them");
        }

        if self.check {
            for b in &built {
                crate::section(&format!("dist: check {}", b.triple));
                of_arch(sh, &b.binary, &b.triple)?;
                no_build_paths(sh, &b.binary)?;
                same_binary(sh, &b.wheel, &b.binary)?;
            }
            let host = crate::release::triple(sh).map_err(anyhow::Error::msg)?;
            match built.iter().find(|b| b.triple == host) {
                Some(b) => {
                    crate::section("dist: `uv tool install` the wheel into a fresh directory");
                    install_and_run(sh, &uv, &b.wheel, version)?;
                }
                None => crate::skipped("dist install check", &format!("no {host} build")),
            }
        }
        Ok(())
    }
}

/// The wheel and the tarball of one target.
fn build(
    sh: &Shell,
    uv: &Path,
    root: &Path,
    out: &Path,
    triple: &str,
    version: &str,
) -> Result<Built> {
    let target = root.join(crate::plugin::INSTALL_TARGET);
    let maturin = format!("maturin=={MATURIN}");
    let profile = crate::release::PROFILE;
    // A static binary needs no libc of the host's: both tags are true of it.
    let mut wheel = cmd!(
        sh,
        "{uv} tool run --from {maturin} maturin build --profile {profile} --target {triple} --compatibility manylinux2014 musllinux_1_2 --out {out}"
    )
    .env("CARGO_TARGET_DIR", &target);
    for (key, value) in crate::release::build_env(sh, triple) {
        wheel = wheel.env(key, value);
    }
    wheel.run()?;
    let arch = crate::release::arch(triple);
    let wheel = only_file(sh, out, &format!("_{arch}"), ".whl")?;
    let binary = crate::release::binary(&target, triple);
    static_binary(sh, &binary)?;
    let tarball = tarball(sh, root, out, &binary, &Release { version, triple })?;
    println!("dist: {}\ndist: {}", wheel.display(), tarball.display());
    Ok(Built { triple: triple.to_owned(), wheel, tarball, binary })
}

/// `sha256sum`'s lines for `files`, named by file name, sorted by name.
fn sha256sums(sh: &Shell, files: &[&Path]) -> Result<String> {
    let mut lines = Vec::new();
    for file in files {
        let (Some(dir), Some(name)) = (file.parent(), file.file_name()) else {
            bail!("{} is not a file path", file.display());
        };
        let _dir = sh.push_dir(dir);
        lines.push(cmd!(sh, "sha256sum {name}").quiet().read()?);
    }
    lines.sort_by(|a, b| a.split_whitespace().nth(1).cmp(&b.split_whitespace().nth(1)));
    Ok(lines.iter().map(|l| format!("{l}\n")).collect())
}

/// This machine's release tarball in `target/dist`: the directory and the tarball's name, or why
/// there is none.
pub(crate) fn local_tarball(sh: &Shell) -> std::result::Result<(PathBuf, String), String> {
    let triple = crate::release::triple(sh)?;
    let version = env!("CARGO_PKG_VERSION");
    let name = format!("{}.tar.gz", Release { version, triple: &triple }.stem());
    let dir = crate::project_root().join(OUT);
    if dir.join(&name).is_file() {
        Ok((dir, name))
    } else {
        Err(format!("no {name} in {}: run `cargo xtask dist` first", dir.display()))
    }
}

/// What the tarball is named after.
struct Release<'a> {
    version: &'a str,
    triple: &'a str,
}

impl Release<'_> {
    /// `python-sandbox-0.1.0-x86_64-unknown-linux-gnu`, the tarball's name and its one directory.
    fn stem(&self) -> String {
        format!("python-sandbox-{}-{}", self.version, self.triple)
    }
}

/// The tarball in `out`.
fn tarball(
    sh: &Shell,
    root: &Path,
    out: &Path,
    binary: &Path,
    release: &Release,
) -> Result<PathBuf> {
    let stem = release.stem();
    let stage = out.join(&stem);
    sh.create_dir(&stage)?;
    sh.copy_file(binary, stage.join("python-sandbox"))?;
    for file in LICENSES.iter().chain(&["README.md"]) {
        sh.copy_file(root.join(file), &stage)?;
    }
    {
        let _dir = sh.push_dir(&stage);
        let sum = cmd!(sh, "sha256sum python-sandbox").quiet().read()?;
        sh.write_file(stage.join("python-sandbox.sha256"), format!("{sum}\n"))?;
    }
    let name = format!("{stem}.tar.gz");
    {
        let _dir = sh.push_dir(out);
        // Fixed owner, order and times: the same binary gives the same tarball.
        cmd!(
            sh,
            "tar --owner=0 --group=0 --numeric-owner --mtime=@0 --sort=name -czf {name} {stem}"
        )
        .run()?;
    }
    sh.remove_path(&stage)?;
    Ok(out.join(name))
}

/// The wheel's `python-sandbox` is byte for byte the tarball's.
fn same_binary(sh: &Shell, wheel: &Path, binary: &Path) -> Result<()> {
    let unpacked = sh.create_temp_dir()?;
    let dir = unpacked.path();
    cmd!(sh, "unzip -q -j {wheel} *.data/scripts/python-sandbox -d {dir}").run()?;
    let ours = sh.read_binary_file(dir.join("python-sandbox"))?;
    if ours != sh.read_binary_file(binary)? {
        bail!(
            "the wheel's python-sandbox differs from {}\nhint: the wheel was packed from another build than the tarball's",
            binary.display()
        );
    }
    Ok(())
}

/// `uv tool install` into a scratch tool dir, then the installed CLI runs a script.
fn install_and_run(sh: &Shell, uv: &Path, wheel: &Path, version: &str) -> Result<()> {
    let scratch = sh.create_temp_dir()?;
    let (tools, bin) = (scratch.path().join("tools"), scratch.path().join("bin"));
    cmd!(sh, "{uv} tool install {wheel}")
        .env("UV_TOOL_DIR", &tools)
        .env("UV_TOOL_BIN_DIR", &bin)
        .run()?;
    let cli = bin.join("python-sandbox");
    let got = cmd!(sh, "{cli} --version").read()?;
    let want = format!("python-sandbox {version}");
    if got.trim() != want {
        bail!("the installed wheel says `{}`, not `{want}`", got.trim());
    }
    let hello = crate::project_root().join("examples/hello.py");
    let out = cmd!(sh, "{cli} run {hello}").read()?;
    if !out.contains("hello from python") {
        bail!("`python-sandbox run examples/hello.py` from the installed wheel printed:\n{out}");
    }
    println!("dist: {} ran examples/hello.py", cli.display());
    // `uvx` takes the same wheel without installing it.
    let got =
        cmd!(sh, "{uv} tool run --isolated --from {wheel} python-sandbox --version").read()?;
    if got.trim() != want {
        bail!("`uvx --from <wheel> python-sandbox --version` says `{}`", got.trim());
    }
    Ok(())
}

/// The one file in `dir` whose name holds `part` and ends in `suffix`.
fn only_file(sh: &Shell, dir: &Path, part: &str, suffix: &str) -> Result<PathBuf> {
    let found: Vec<PathBuf> = sh
        .read_dir(dir)?
        .into_iter()
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            name.contains(part) && name.ends_with(suffix)
        })
        .collect();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        _ => bail!("expected one `*{part}*{suffix}` in {}, found {}", dir.display(), found.len()),
    }
}

/// The ELF header names the triple's machine: a cross build that silently fell back to the host
/// would ship an x86_64 binary in an aarch64 tarball.
fn of_arch(sh: &Shell, binary: &Path, triple: &str) -> Result<()> {
    let header = cmd!(sh, "readelf --file-header {binary}").quiet().read()?;
    let machine = header
        .lines()
        .find_map(|l| l.trim().strip_prefix("Machine:"))
        .map(str::trim)
        .unwrap_or_default();
    let want = elf_machine(crate::release::arch(triple));
    if machine != want {
        bail!("{} is built for `{machine}`, not `{want}` ({triple})", binary.display());
    }
    Ok(())
}

/// readelf's name of an architecture's machine.
fn elf_machine(arch: &str) -> &'static str {
    match arch {
        "aarch64" => "AArch64",
        "x86_64" => "Advanced Micro Devices X86-64",
        _ => "unknown",
    }
}

/// The binary holds no path of this machine's build (the checkout, `CARGO_HOME`): another
/// machine's build of the same commit and toolchain is then the same bytes, which is what lets
/// the release workflow check its build against the sums pinned in the plugin.
fn no_build_paths(sh: &Shell, binary: &Path) -> Result<()> {
    let bytes = sh.read_binary_file(binary)?;
    let root = crate::project_root();
    let home = sh
        .var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(sh.var("HOME").unwrap_or_default()).join(".cargo"));
    for path in [root, home] {
        let needle = path.display().to_string();
        if memmem(&bytes, needle.as_bytes()) {
            bail!(
                "{} names the build path {needle}\nhint: the release build's --remap-path-prefix flags (release::build_env) did not reach it",
                binary.display()
            );
        }
    }
    Ok(())
}

fn memmem(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// The binary asks for no dynamic loader: a static build runs on any Linux libc, as its tags say.
fn static_binary(sh: &Shell, binary: &Path) -> Result<()> {
    let headers = cmd!(sh, "readelf --program-headers --wide {binary}").quiet().read()?;
    if headers.contains("INTERP") {
        bail!(
            "{} asks for a dynamic loader, so its wheel's manylinux and musllinux tags would lie\nhint: the release target must link statically (musl's default)",
            binary.display()
        );
    }
    Ok(())
}

/// The uv that deploy/image/versions.env pins (the runtime image's), from its PyPI wheel, cached
/// next to the other tools.
fn pinned_uv(sh: &Shell) -> Result<PathBuf> {
    let versions = Versions::parse(&sh.read_file("deploy/image/versions.env")?)?;
    let version = versions.get("UV_VERSION")?;
    let dir = crate::wasm::cache_dir(sh).with_file_name(format!("uv-{version}"));
    let uv = dir.join("uv");
    if !uv.is_file() {
        let machine = cmd!(sh, "uname -m").quiet().read()?;
        let arch = crate::image::debian_arch(machine.trim())?;
        let wheel = crate::image::uv_wheel(sh, &versions, arch, &dir)?;
        cmd!(sh, "unzip -q -o -j {wheel} *.data/scripts/uv -d {dir}").run()?;
        sh.remove_path(&wheel)?;
    }
    let got = cmd!(sh, "{uv} --version").quiet().read()?;
    if got.split_whitespace().nth(1) != Some(version) {
        bail!("{} says `{got}`, versions.env pins uv {version}", uv.display());
    }
    Ok(uv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tarball_is_named_after_version_and_platform() {
        let release = Release { version: "0.1.0", triple: "x86_64-unknown-linux-gnu" };
        assert_eq!(release.stem(), "python-sandbox-0.1.0-x86_64-unknown-linux-gnu");
    }

    #[test]
    fn the_maturin_pin_is_exact_and_the_pyproject_allows_it() {
        assert_eq!(MATURIN.split('.').count(), 3, "{MATURIN}");
        let pyproject =
            std::fs::read_to_string(crate::project_root().join("pyproject.toml")).expect("read");
        let major_minor = MATURIN.rsplit_once('.').map(|(mm, _)| mm).unwrap_or(MATURIN);
        assert!(pyproject.contains(&format!("maturin>={major_minor},<2")), "{pyproject}");
        assert!(pyproject.contains("bindings = \"bin\""), "{pyproject}");
        // maturin's `strip` adds a rustc flag that misses the plugin step's build cache.
        assert!(!pyproject.contains("strip ="), "strip through the cargo profile instead");
    }

    #[test]
    fn the_readelf_machine_names_match_the_release_targets() {
        for triple in crate::release::TARGETS {
            assert_ne!(elf_machine(crate::release::arch(triple)), "unknown", "{triple}");
        }
        assert!(memmem(b"a /work/x/src b", b"/work/x"));
        assert!(!memmem(b"a /build/src b", b"/work/x"));
    }

    #[test]
    fn the_readmes_install_lines_name_this_release_and_the_repository() {
        let readme =
            std::fs::read_to_string(crate::project_root().join("README.md")).expect("read");
        let repository = env!("CARGO_PKG_REPOSITORY");
        let version = env!("CARGO_PKG_VERSION");
        let stem = Release { version, triple: crate::release::TARGETS[0] }.stem();
        let url = format!("{repository}/releases/download/v{version}/{stem}.tar.gz");
        let tarball = format!(
            "curl -fsSL {url} | tar -xz -C ~/.local/bin --strip-components=1 {stem}/python-sandbox`"
        );
        let owner_repo = repository.trim_start_matches("https://github.com/");
        for line in [
            tarball.as_str(),
            &format!("`/plugin marketplace add {owner_repo}`"),
            "`uv tool install python-sandbox`",
            "`pipx install python-sandbox`",
            &format!("`cargo install --locked --git {repository} --bin python-sandbox cli`"),
        ] {
            assert!(readme.contains(line), "README.md has no `{line}`");
        }
        assert!(!readme.contains("<owner>/<repo>"), "a placeholder nobody can run");
        // A first build takes minutes: cargo's progress shows it is not a hang.
        assert!(!readme.contains("cargo run -q"), "cargo run without -q");
    }

    #[test]
    fn the_licenses_exist() {
        for file in LICENSES {
            assert!(crate::project_root().join(file).is_file(), "{file}");
        }
    }
}
