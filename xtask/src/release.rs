//! The CLI as a release ships it: a static musl build (`<arch>-unknown-linux-musl`), for
//! `cargo xtask dist` and for the benchmarks, which time what ships.
//!
//! Why musl: every `python-sandbox run` starts the CLI, and a dynamically linked glibc binary
//! pays for the loader before `main` (three libraries mapped and relocated, glibc's and libgcc's
//! CPU-feature probes, whose `cpuid`s trap in a VM). The static musl binary starts in about
//! half a millisecond less, and a whole warm run is about 1.3 ms shorter (alternating A/B, 100
//! runs each); with dlmalloc as its allocator (`crates/cli/src/main.rs`) 0.7 ms shorter again.
//! It also runs on any Linux whatever its libc, which is what lets one wheel carry both the
//! manylinux and the musllinux tags. Development builds and `cargo install` stay on the host's
//! target.
//!
//! A release is built for each of [`TARGETS`]. The target is installed with rustup when
//! missing; the C parts of the dependencies (ring) are compiled with `musl-gcc` (Debian's
//! `musl-tools`, installed as root when missing), else with the host's `cc`, which works for
//! them because they use compiler headers only. The other architecture is cross-built with
//! Debian's `gcc-<arch>-linux-gnu` as its C compiler and linker (Rust's musl targets bring
//! their own C library and start files).
//!
//! The paths of the build (the checkout, `CARGO_HOME`) are remapped out of the binary, so two
//! machines with the same toolchain build the same bytes: the plugin pins the release's sha256
//! sums (`plugin/SHA256SUMS`), and the release workflow checks that its build matches them.

use std::path::{Path, PathBuf};

use xshell::{Shell, cmd};

/// What a release ships binaries for.
pub(crate) const TARGETS: [&str; 2] = ["x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl"];

/// The release triple for this machine's architecture.
pub(crate) fn triple(sh: &Shell) -> Result<String, String> {
    let machine = cmd!(sh, "uname -m").quiet().read().map_err(|e| format!("uname -m: {e}"))?;
    Ok(format!("{}-unknown-linux-musl", machine.trim()))
}

/// The release triple for this machine, made buildable here, or why it cannot be.
pub(crate) fn ready(sh: &Shell) -> Result<String, String> {
    let triple = triple(sh)?;
    prepare(sh, &triple)?;
    Ok(triple)
}

/// The architecture of a triple: `aarch64` of `aarch64-unknown-linux-musl`.
pub(crate) fn arch(triple: &str) -> &str {
    triple.split('-').next().unwrap_or(triple)
}

/// Debian's cross compiler for `triple` built on another architecture: its command and package.
fn cross_gcc(triple: &str) -> (String, String) {
    let arch = arch(triple);
    (format!("{arch}-linux-gnu-gcc"), format!("gcc-{}-linux-gnu", arch.replace('_', "-")))
}

/// The C library headers that cross compiler builds against (`ring`'s C includes `stdint.h`):
/// Debian's package, only a recommendation of the compiler's, which `apt_install` leaves out,
/// and one of its files.
fn cross_headers(triple: &str) -> (String, PathBuf) {
    let arch = arch(triple);
    let debian = match arch {
        "aarch64" => "arm64",
        "x86_64" => "amd64",
        other => other,
    };
    let header = PathBuf::from(format!("/usr/{arch}-linux-gnu/include/bits/libc-header-start.h"));
    (format!("libc6-dev-{debian}-cross"), header)
}

/// Whether `triple` is built for another architecture than this machine's.
fn is_cross(sh: &Shell, triple: &str) -> bool {
    self::triple(sh).is_ok_and(|host| host != triple)
}

/// The cargo profile of what ships (the workspace manifest says why it is not `release`).
pub(crate) const PROFILE: &str = "ship";

/// Where a release build for `triple` lands in the cargo target dir `target_dir`.
pub(crate) fn binary(target_dir: &Path, triple: &str) -> PathBuf {
    target_dir.join(triple).join(PROFILE).join("python-sandbox")
}

/// Makes `triple` buildable here (rustup target, a C compiler for it), or says why not.
pub(crate) fn prepare(sh: &Shell, triple: &str) -> Result<(), String> {
    let sysroot =
        cmd!(sh, "rustc --print sysroot").quiet().read().map_err(|e| format!("rustc: {e}"))?;
    let installed = Path::new(sysroot.trim()).join("lib/rustlib").join(triple).join("lib");
    if !installed.is_dir() {
        println!("release: installing the {triple} target");
        cmd!(sh, "rustup target add {triple}").run().map_err(|e| {
            format!("the {triple} target is not installed and `rustup target add` failed: {e}")
        })?;
    }
    if is_cross(sh, triple) {
        let (gcc, package) = cross_gcc(triple);
        let (headers, header) = cross_headers(triple);
        if !crate::services::on_path(sh, &gcc) {
            match crate::services::apt_install(sh, &[&package, &headers]) {
                Ok(None) => {}
                Ok(Some(reason)) => {
                    return Err(format!("no `{gcc}` to cross-build with: {reason}"));
                }
                Err(e) => return Err(format!("no `{gcc}` to cross-build with: {e:#}")),
            }
        } else if !header.is_file() {
            // A compiler from elsewhere may keep its headers elsewhere: the build will tell.
            match crate::services::apt_install(sh, &[&headers]) {
                Ok(None) => {}
                Ok(Some(reason)) => println!("release: no {headers} ({reason}); building anyway"),
                Err(e) => println!("release: installing {headers} failed ({e:#}); building anyway"),
            }
        }
    } else if !crate::services::on_path(sh, "musl-gcc") {
        match crate::services::apt_install(sh, &["musl-tools"]) {
            Ok(None) => {}
            Ok(Some(reason)) => println!("release: {reason}; C dependencies build with cc"),
            Err(e) => println!("release: installing musl-tools failed ({e:#}); using cc"),
        }
    }
    Ok(())
}

/// The environment a release build for `triple` needs: cc-rs's compiler for it, the linker when
/// cross-building, and the remapping of the build's paths.
pub(crate) fn build_env(sh: &Shell, triple: &str) -> Vec<(String, String)> {
    let upper = triple.replace('-', "_");
    let cc_var = format!("CC_{upper}");
    let mut env = Vec::new();
    let cc = if is_cross(sh, triple) {
        let (gcc, _) = cross_gcc(triple);
        env.push((format!("CARGO_TARGET_{}_LINKER", upper.to_uppercase()), gcc.clone()));
        gcc
    } else if crate::services::on_path(sh, "musl-gcc") {
        "musl-gcc".to_owned()
    } else {
        "cc".to_owned()
    };
    env.push((cc_var.clone(), sh.var(&cc_var).unwrap_or(cc)));
    let root = crate::project_root();
    let cargo_home = sh
        .var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(sh.var("HOME").unwrap_or_default()).join(".cargo"));
    env.push((
        format!("CARGO_TARGET_{}_RUSTFLAGS", upper.to_uppercase()),
        remap(&root, &cargo_home),
    ));
    env
}

/// rustc flags that write the checkout as `/build` and `CARGO_HOME` as `/cargo` into the binary
/// (panic locations of dependencies), so where it was built does not change its bytes.
fn remap(root: &Path, cargo_home: &Path) -> String {
    format!(
        "--remap-path-prefix={}=/build --remap-path-prefix={}=/cargo",
        root.display(),
        cargo_home.display()
    )
}

/// Builds the release CLI for `triple` into `target/` and returns the binary's path.
fn build(sh: &Shell, triple: &str) -> anyhow::Result<PathBuf> {
    let dir = crate::project_root().join("target");
    let mut build = cmd!(sh, "cargo build --profile {PROFILE} --locked -p cli --target {triple}")
        .env("CARGO_TARGET_DIR", &dir);
    for (key, value) in build_env(sh, triple) {
        build = build.env(key, value);
    }
    build.run()?;
    Ok(binary(&dir, triple))
}

/// The CLI the benchmarks time: the release build, or the host's release build with a note
/// where the release target cannot be built here.
pub(crate) fn bench_cli(sh: &Shell) -> anyhow::Result<PathBuf> {
    match ready(sh) {
        Ok(triple) => {
            let cli = build(sh, &triple)?;
            println!("bench: timing the release build, {}", cli.display());
            Ok(cli)
        }
        Err(reason) => {
            println!("note: timing the host build, not the release build: {reason}");
            cmd!(sh, "cargo build --profile {PROFILE} --locked -p cli").run()?;
            Ok(crate::project_root().join("target").join(PROFILE).join("python-sandbox"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_other_architecture_is_cross_built_with_debians_gcc() {
        assert_eq!(arch("aarch64-unknown-linux-musl"), "aarch64");
        let (gcc, package) = cross_gcc("aarch64-unknown-linux-musl");
        assert_eq!(
            (gcc.as_str(), package.as_str()),
            ("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu")
        );
        let (gcc, package) = cross_gcc("x86_64-unknown-linux-musl");
        assert_eq!(
            (gcc.as_str(), package.as_str()),
            ("x86_64-linux-gnu-gcc", "gcc-x86-64-linux-gnu")
        );
        // The headers are a recommendation of the compiler's, which the install leaves out.
        let (package, header) = cross_headers("aarch64-unknown-linux-musl");
        assert_eq!(package, "libc6-dev-arm64-cross");
        assert!(header.starts_with("/usr/aarch64-linux-gnu/include"), "{}", header.display());
        assert_eq!(cross_headers("x86_64-unknown-linux-musl").0, "libc6-dev-amd64-cross");
    }

    /// The lines of the workspace manifest's `[profile.NAME]` table.
    fn profile(manifest: &str, name: &str) -> String {
        let header = format!("[profile.{name}]");
        let after = manifest.split_once(&header).map(|(_, rest)| rest).unwrap_or_default();
        after.split("\n[").next().unwrap_or_default().to_owned()
    }

    #[test]
    fn cargo_install_builds_without_cross_crate_lto_and_what_ships_keeps_it() {
        let manifest =
            std::fs::read_to_string(crate::project_root().join("Cargo.toml")).expect("read");
        // Thin LTO over 4 codegen units left the CLI's crate compiling on one core for most of
        // a build from source; the shipped binary keeps the settings its benchmarks were met with.
        let release = profile(&manifest, "release");
        assert!(release.contains("strip = true"), "{release}");
        assert!(!release.contains("lto") && !release.contains("codegen-units"), "{release}");
        let ship = profile(&manifest, PROFILE);
        for line in ["inherits = \"release\"", "lto = \"thin\"", "codegen-units = 4"] {
            assert!(ship.contains(line), "[profile.{PROFILE}] has no `{line}`: {ship}");
        }
    }

    #[test]
    fn unused_and_duplicate_crates_stay_out_of_the_build() {
        let lock = std::fs::read_to_string(crate::project_root().join("Cargo.lock")).expect("read");
        // kube's `runtime` feature (watchers, controllers; engine-k8s uses none) brought 28
        // crates into every build of the CLI.
        assert!(!lock.contains("name = \"kube-runtime\""), "kube-runtime is back in Cargo.lock");
        // The vendored pep508 fork was the only user of thiserror 1 (and its proc macro).
        let versions = lock.matches("name = \"thiserror\"\n").count();
        assert_eq!(versions, 1, "two thiserror versions in Cargo.lock");
    }

    #[test]
    fn the_build_paths_are_remapped() {
        let flags = remap(Path::new("/work/x"), Path::new("/root/.cargo"));
        assert_eq!(
            flags,
            "--remap-path-prefix=/work/x=/build --remap-path-prefix=/root/.cargo=/cargo"
        );
    }
}
