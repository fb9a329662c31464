//! `cargo xtask dist [--check]`: what a release ships, built into `target/dist` (nothing is
//! published from here):
//!
//! - the CLI's wheel, built by maturin from the root `pyproject.toml` (`bindings = "bin"`, the way
//!   uv and ruff ship theirs), for `uv tool install`, `uvx` and `pipx`. The binary is the static
//!   musl build ([`crate::release`]), so the one wheel is tagged for both manylinux and
//!   musllinux;
//! - `python-sandbox-<version>-<triple>.tar.gz`: the same binary with its sha256 and the licenses,
//!   and the tarball's own `.sha256` next to it.
//!
//! maturin comes from PyPI (pinned, run by the pinned uv of deploy/image/versions.env), and builds
//! in the plugin step's release target dir (the triple keeps the two builds apart). `--check` (CI)
//! installs the wheel with `uv tool install` into a fresh directory and runs `examples/hello.py`
//! with the installed CLI, and checks that the wheel and the tarball hold the same binary.

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
/// Shipped next to the binary in the tarball (and in the wheel, through `license-files`).
const LICENSES: [&str; 2] = ["LICENSE-MIT", "LICENSE-APACHE"];

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

        crate::section("dist: the release target");
        let triple = match crate::release::ready(sh) {
            Ok(triple) => triple,
            Err(reason) => {
                crate::skipped("dist", &reason);
                return Ok(());
            }
        };

        crate::section(&format!("dist: wheel (maturin {MATURIN}, {triple})"));
        let target = root.join(crate::plugin::INSTALL_TARGET);
        let maturin = format!("maturin=={MATURIN}");
        let (cc_var, cc) = crate::release::compiler_env(sh, &triple);
        // A static binary needs no libc of the host's: both tags are true of it.
        cmd!(
            sh,
            "{uv} tool run --from {maturin} maturin build --release --target {triple} --compatibility manylinux2014 musllinux_1_2 --out {out}"
        )
        .env("CARGO_TARGET_DIR", &target)
        .env(cc_var, cc)
        .run()?;
        let wheel = only_file(sh, &out, ".whl")?;
        let binary = crate::release::binary(&target, &triple);
        static_binary(sh, &binary)?;

        crate::section("dist: tarball");
        let version = env!("CARGO_PKG_VERSION");
        let tarball = tarball(sh, &root, &out, &binary, &Release { version, triple: &triple })?;
        println!("dist: {}\ndist: {}", wheel.display(), tarball.display());

        if self.check {
            crate::section("dist: the wheel and the tarball hold the same binary");
            same_binary(sh, &wheel, &binary)?;
            crate::section("dist: `uv tool install` the wheel into a fresh directory");
            install_and_run(sh, &uv, &wheel, version)?;
        }
        Ok(())
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

/// The tarball and its `.sha256` (in `sha256sum -c` format) in `out`.
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
        let sum = cmd!(sh, "sha256sum {name}").quiet().read()?;
        sh.write_file(out.join(format!("{name}.sha256")), format!("{sum}\n"))?;
        cmd!(sh, "sha256sum --check --quiet {name}.sha256").run()?;
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

/// The one file ending in `suffix` in `dir`.
fn only_file(sh: &Shell, dir: &Path, suffix: &str) -> Result<PathBuf> {
    let found: Vec<PathBuf> =
        sh.read_dir(dir)?.into_iter().filter(|p| p.to_string_lossy().ends_with(suffix)).collect();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        _ => bail!("expected one `*{suffix}` in {}, found {}", dir.display(), found.len()),
    }
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
    fn the_licenses_exist() {
        for file in LICENSES {
            assert!(crate::project_root().join(file).is_file(), "{file}");
        }
    }
}
