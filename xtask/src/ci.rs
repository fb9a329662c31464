//! `cargo xtask ci`: the README's test command and the only thing `.ci/run` calls.
//!
//! Tiers run least powerful first: formatting and lints (actionlint for the workflows), the book
//! and its links, the pure tests, then the engines that can run here (bubblewrap, docker,
//! podman: installed and started when possible), the cross-engine conformance suite on each (and on podman as an unprivileged user: the
//! `podman-rootless` tier), the Kubernetes tiers on the cluster `KUBECONFIG` names (SKIPPED
//! without one), `cargo package` of the library crates, the WASM build with its node
//! tests and the packaged VS Code extension (`vsix`),
//! the release (`dist`: tarballs, wheels and sums, the wheel installed with `uv tool install`),
//! the Claude Code plugin installed with the real `claude` CLI (its launcher downloading that
//! release from a loopback server), the conformance suite on native and bwrap run by the
//! release build, and a fuzz smoke
//! run. A tier that cannot run prints `SKIPPED: tier: reason` and CI goes on; a tier that runs
//! and fails stops CI.

use std::time::Instant;

use anyhow::{Context, Result};
use xshell::{Shell, cmd};

use crate::image::Image;
use crate::services;
use crate::test_engines::TestEngines;

/// Seconds per fuzz target in CI: a smoke run, not a campaign.
const FUZZ_SECONDS: u64 = 30;

/// What a CI run from a fresh clone writes, with room to spare (about 14 GiB measured: debug,
/// release, musl, WASM and fuzz builds, images, the rootless user's target directory).
const MIN_FREE_GIB: f64 = 20.0;

/// Free space on the disk holding the target directory, in GiB; `None` where `df` cannot say.
fn free_disk(sh: &Shell) -> Option<f64> {
    let root = crate::project_root();
    let out = cmd!(sh, "df --output=avail -B1 {root}").quiet().ignore_status().read().ok()?;
    let bytes: f64 = out.lines().nth(1)?.trim().parse().ok()?;
    Some(bytes / f64::from(1u32 << 30))
}

pub(crate) struct Ci;

impl Ci {
    pub(crate) fn run(self, sh: &Shell) -> Result<()> {
        let start = Instant::now();
        // A fresh clone gains nothing from incremental artifacts, and they were a third of the
        // target directory when a CI run ran out of disk in its WASM tier.
        sh.set_var("CARGO_INCREMENTAL", "0");
        let step = |name: &str| {
            let disk = free_disk(sh).map(|gib| format!(", {gib:.1} GiB free")).unwrap_or_default();
            crate::section(&format!("{name} [{:.0} s{disk}]", start.elapsed().as_secs_f64()));
        };
        if let Some(gib) = free_disk(sh)
            && gib < MIN_FREE_GIB
        {
            println!(
                "warning: {gib:.1} GiB free on the target directory's disk; a fresh CI run needs about {MIN_FREE_GIB} GiB\nhint: remove old target directories (`cargo clean`) or free space elsewhere"
            );
        }

        step("fmt");
        cmd!(sh, "cargo fmt --all -- --check").run()?;
        cmd!(sh, "cargo fmt --manifest-path fuzz/Cargo.toml -- --check").run()?;

        step("clippy");
        cmd!(sh, "cargo clippy --workspace --all-targets --locked -- -D warnings").run()?;

        step("actionlint");
        // The release workflow cannot run here: actionlint reads it as GitHub would.
        crate::actionlint::Actionlint.run(sh)?;

        step("docs");
        // The book and its links: cheap (a second or two once mdBook is installed), so early.
        crate::docs::Docs.run(sh)?;

        step("engines");
        // Built in: it works here or the suite prints `SKIPPED: native: <the probe's reason>`.
        let mut engines = vec!["native".to_owned()];
        match ensure_bwrap(sh)? {
            None => engines.push("bwrap".to_owned()),
            Some(reason) => crate::skipped("bwrap tier", &reason),
        }
        ensure_iptables(sh)?;
        // Starts docker and podman, builds or refreshes the image, prints SKIPPED for the others.
        for engine in Image::all().ready_engines(sh)? {
            engines.push(engine.to_string());
        }
        // Always listed: with no live cluster (`KUBECONFIG`) its suite column and its
        // end-to-end tier print `SKIPPED: k8s: no cluster (...)`; with one, they run on it.
        engines.push(crate::test_engines::K8S.to_owned());

        step("tests");
        // The second user of the shared-daemon tests (engine-oci `forged`); they print SKIPPED
        // without it, so a machine where it cannot be made only loses those.
        if services::is_root(sh)
            && let Err(e) = crate::rootless::account(sh)
        {
            crate::skipped("second user for the shared-daemon tests", &format!("{e:#}"));
        }
        // Every crate's own tests; engine-gated ones print SKIPPED when their engine is missing.
        // The conformance suite runs below, once per engine, with its matrix.
        cmd!(sh, "cargo test --workspace --locked --exclude tests").run()?;

        step("package");
        crate::package::Package.run(sh)?;

        step("conformance");
        TestEngines { engines, filters: Vec::new() }.run(sh)?;

        step("readme without bubblewrap");
        readme_without_bwrap(sh)?;

        step("podman-rootless");
        // The same suite, then engine-oci's session tests, as an unprivileged user on rootless
        // podman (about 50 s, 5 more the first time for the user and the image import);
        // SKIPPED where the host cannot.
        let engines = vec![crate::test_engines::ROOTLESS.to_owned()];
        TestEngines { engines, filters: Vec::new() }.run(sh)?;

        step("wasm");
        crate::wasm::Wasm { check: true }.run(sh)?;
        crate::vsix::Vsix.run(sh)?;

        step("dist");
        // The release: tarballs and wheels of the static musl builds (`release.rs`), for this
        // machine's architecture and cross-built for the other, their sums pinned in the plugin.
        crate::dist::Dist { check: true }.run(sh)?;

        step("plugin");
        // The plugin installed with the real Claude Code CLI; its launcher downloads the release
        // that `dist` built, served on loopback, and refuses a tampered one.
        crate::plugin::Plugin { provision: true }.run(sh)?;

        step("conformance of the release build");
        release_conformance(sh)?;

        step("fuzz smoke");
        crate::fuzz::Fuzz { seconds: FUZZ_SECONDS, target: None }.run(sh)?;

        println!("\nci passed in {:.0} s", start.elapsed().as_secs_f64());
        Ok(())
    }
}

/// The conformance suite on the local engines (native and bwrap), run by the binary `dist`
/// shipped rather than the debug build: a static musl binary differs from the host's build in
/// its libc (resolver, `statvfs`, raw syscalls' types). About 20 s; SKIPPED where dist was.
fn release_conformance(sh: &Shell) -> Result<()> {
    let target = crate::project_root().join(crate::plugin::INSTALL_TARGET);
    let built = crate::release::triple(sh).map(|triple| crate::release::binary(&target, &triple));
    let bin = match built {
        Ok(bin) if bin.is_file() => bin,
        Ok(bin) => {
            crate::skipped("conformance of the release build", &format!("no {}", bin.display()));
            return Ok(());
        }
        Err(reason) => {
            crate::skipped("conformance of the release build", &reason);
            return Ok(());
        }
    };
    cmd!(sh, "cargo test --locked -p tests --test conformance")
        .env("CONFORMANCE", "1")
        .env("CONFORMANCE_ENGINES", "native,bwrap")
        .env("PYTHON_SANDBOX_BIN", &bin)
        .run()
        .context("the conformance suite failed on the release build; see the matrix above")?;
    Ok(())
}

/// The README's first command with nothing on `PATH` (so no bwrap, no uv, no python: what a
/// fresh machine has), checked to have run on the built-in engine.
fn readme_without_bwrap(sh: &Shell) -> Result<()> {
    let empty = services::target_dir(sh).join("empty-path");
    std::fs::create_dir_all(&empty).context("creating an empty PATH directory")?;
    let cli = services::target_dir(sh).join("debug/python-sandbox");
    // `--json` keeps stdout for the one summary object; the script's own output is on stderr.
    let run = cmd!(sh, "{cli} run --json examples/hello.py").env("PATH", &empty).output()?;
    let (out, err) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    let summary = out
        .lines()
        .find(|l| l.starts_with('{'))
        .with_context(|| format!("`run --json` printed no summary:\n{out}{err}"))?;
    anyhow::ensure!(
        summary.contains("\"engine\":\"native\"") && err.contains("hello from python"),
        "the README's first command did not run on native with bwrap off PATH:\n{out}{err}"
    );
    println!("ran on native without bwrap on PATH");
    Ok(())
}

/// Installs iptables when missing: engine-bwrap's network lab (`tests/it/lab.rs`) sets DNAT
/// rules with it, in a network namespace of its own, to check that the built-in relay and
/// proxy hold after the host's NAT; without it those tests print SKIPPED.
fn ensure_iptables(sh: &Shell) -> Result<()> {
    let found = services::on_path(sh, "iptables")
        || ["/usr/sbin/iptables", "/sbin/iptables"]
            .iter()
            .any(|p| std::path::Path::new(p).exists());
    if !found && let Some(reason) = services::apt_install(sh, &["iptables"])? {
        crate::skipped("network lab (DNAT rules)", &reason);
    }
    Ok(())
}

/// Installs bubblewrap and passt when missing; `Some(reason)` when the bwrap tier cannot run.
fn ensure_bwrap(sh: &Shell) -> Result<Option<String>> {
    // pasta (package passt) is bwrap's network: without it bwrap sandboxes cannot install
    // dependencies or run with net on.
    for (tool, package) in [("bwrap", "bubblewrap"), ("pasta", "passt")] {
        if !services::on_path(sh, tool)
            && let Some(reason) = services::apt_install(sh, &[package])
                .with_context(|| format!("installing {package}"))?
        {
            return Ok(Some(reason));
        }
    }
    // pasta runs as nobody for a root caller: a device only root may open (no udev here) would
    // leave native and bwrap on the built-in proxy (HTTP(S) only) and untested with pasta.
    if let Some(reason) = services::tun_for_all(sh)? {
        crate::skipped("pasta", &reason);
    }
    // The same real namespace round trip the CLI's detection does.
    let ok = cmd!(sh, "bwrap --unshare-all --die-with-parent --ro-bind / / true")
        .quiet()
        .ignore_stderr()
        .run();
    Ok(ok.err().map(|_| {
        "bwrap cannot create namespaces here (AppArmor userns restriction or a container without user namespaces)"
            .to_owned()
    }))
}
