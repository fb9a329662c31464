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
//! The target is installed with rustup when missing; the C parts of the dependencies (ring)
//! are compiled with `musl-gcc` (Debian's `musl-tools`, installed as root when missing), else
//! with the host's `cc`, which works for them because they use compiler headers only.

use std::path::{Path, PathBuf};

use xshell::{Shell, cmd};

/// The release triple for this machine's architecture.
pub(crate) fn triple(sh: &Shell) -> Result<String, String> {
    let machine = cmd!(sh, "uname -m").quiet().read().map_err(|e| format!("uname -m: {e}"))?;
    Ok(format!("{}-unknown-linux-musl", machine.trim()))
}

/// The release triple, made buildable here, or why it cannot be.
pub(crate) fn ready(sh: &Shell) -> Result<String, String> {
    let triple = triple(sh)?;
    prepare(sh, &triple)?;
    Ok(triple)
}

/// Where a release build for `triple` lands in the cargo target dir `target_dir`.
pub(crate) fn binary(target_dir: &Path, triple: &str) -> PathBuf {
    target_dir.join(triple).join("release/python-sandbox")
}

/// Makes `triple` buildable here (rustup target, a C compiler for it), or says why not.
fn prepare(sh: &Shell, triple: &str) -> Result<(), String> {
    let sysroot =
        cmd!(sh, "rustc --print sysroot").quiet().read().map_err(|e| format!("rustc: {e}"))?;
    let installed = Path::new(sysroot.trim()).join("lib/rustlib").join(triple).join("lib");
    if !installed.is_dir() {
        println!("release: installing the {triple} target");
        cmd!(sh, "rustup target add {triple}").run().map_err(|e| {
            format!("the {triple} target is not installed and `rustup target add` failed: {e}")
        })?;
    }
    if !crate::services::on_path(sh, "musl-gcc") {
        match crate::services::apt_install(sh, &["musl-tools"]) {
            Ok(None) => {}
            Ok(Some(reason)) => println!("release: {reason}; C dependencies build with cc"),
            Err(e) => println!("release: installing musl-tools failed ({e:#}); using cc"),
        }
    }
    Ok(())
}

/// The environment a build for `triple` needs: cc-rs's compiler for it.
pub(crate) fn compiler_env(sh: &Shell, triple: &str) -> (String, String) {
    let var = format!("CC_{}", triple.replace('-', "_"));
    let cc = if crate::services::on_path(sh, "musl-gcc") { "musl-gcc" } else { "cc" };
    let value = sh.var(&var).unwrap_or_else(|_| cc.to_owned());
    (var, value)
}

/// Builds the release CLI for `triple` into `target/` and returns the binary's path.
fn build(sh: &Shell, triple: &str) -> anyhow::Result<PathBuf> {
    let (var, cc) = compiler_env(sh, triple);
    let dir = crate::project_root().join("target");
    cmd!(sh, "cargo build --release --locked -p cli --target {triple}")
        .env(&var, cc)
        .env("CARGO_TARGET_DIR", &dir)
        .run()?;
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
            cmd!(sh, "cargo build --release --locked -p cli").run()?;
            Ok(crate::project_root().join("target/release/python-sandbox"))
        }
    }
}
