//! `cargo xtask bench`: benchmarks printed side by side with their baselines. Each benchmark is a
//! function taking the shell; `Bench::run` calls them in turn.

use std::collections::HashMap;

use anyhow::{Context, Result, bail};
use xshell::{Shell, cmd};

pub(crate) struct Bench {
    /// Only this engine's benchmark (`k8s`, `docker`, `podman`, `native`, `bwrap`).
    pub(crate) engine: Option<String>,
}

impl Bench {
    pub(crate) fn run(self, sh: &Shell) -> Result<()> {
        match self.engine.as_deref() {
            Some("k8s") => return k8s(sh),
            Some(oci @ ("docker" | "podman")) => {
                return crate::bench_run::oci_vs_raw(sh, Some(oci));
            }
            Some("native") => {
                first_use(sh)?;
                return crate::bench_run::local_vs_uv(sh, &["native"]);
            }
            Some("bwrap") => return crate::bench_run::local_vs_uv(sh, &["bwrap"]),
            _ => {}
        }
        meta(sh)?;
        first_use(sh)?;
        crate::bench_run::local_vs_uv(sh, &["native", "bwrap"])?;
        crate::bench_run::oci_vs_raw(sh, None)?;
        Ok(())
    }
}

/// What a new user waits for at most: Claude Code's MCP server start limit.
const FIRST_USE_TARGET: f64 = 30.0;

/// The release's first use through the plugin's launcher, as a new user meets it: the tarball
/// `cargo xtask dist` built, served on loopback, downloaded, checked against the plugin's pinned
/// sums and installed (timed as the launcher's first `--version`), then the first `run
/// examples/hello.py` in that clean `HOME` (the CLI fetches its pinned uv first). No cargo, uv or
/// CLI on `PATH`.
fn first_use(sh: &Shell) -> Result<()> {
    crate::section("bench: the release's first use (download + verify + install, first run)");
    let root = crate::project_root();
    let dist = match crate::dist::local_tarball(sh) {
        Ok((dist, _)) => dist,
        Err(reason) => {
            crate::skipped("bench first use", &reason);
            return Ok(());
        }
    };
    let base = crate::serve::releases(dist, env!("CARGO_PKG_VERSION"))?;
    let home = root.join("target/bench-first-use");
    sh.remove_path(&home)?;
    sh.create_dir(&home)?;
    let path = crate::plugin::without(&sh.var("PATH")?, &["python-sandbox", "cargo", "uv", "uvx"]);
    let env = crate::plugin::launcher_env(&path, &home, &base);
    // A project directory inside that HOME: the HOME itself as the workspace is a boundary.
    let work = home.join("work");
    sh.create_dir(&work)?;
    let launcher = root.join("plugin/bin/python-sandbox");
    let hello = root.join("examples/hello.py");
    let timed = |args: &[&std::path::Path]| -> Result<f64> {
        let mut c = std::process::Command::new(&launcher);
        c.args(args).env_clear().current_dir(&work);
        for (key, value) in &env {
            c.env(key, value);
        }
        let start = std::time::Instant::now();
        let out = c.output().context("running the plugin's launcher")?;
        if !out.status.success() {
            bail!("{} failed:\n{}", launcher.display(), String::from_utf8_lossy(&out.stderr));
        }
        Ok(start.elapsed().as_secs_f64())
    };
    let install = timed(&[std::path::Path::new("--version")])?;
    let first = timed(&[std::path::Path::new("run"), &hello])?;
    let total = install + first;
    let verdict = if total <= FIRST_USE_TARGET { "" } else { " (missed)" };
    println!(
        "| release first use: download + verify + install / first `run hello.py` (clean HOME, served on loopback) | {install:.2} s / {first:.2} s | | | ≤ {FIRST_USE_TARGET:.0} s{verdict} |"
    );
    sh.remove_path(&home)?;
    Ok(())
}

/// Debian's interpreter: the `python3` on PATH is a slow pyenv shim that would distort timings.
const PYTHON: &str = "/usr/bin/python3.11";

/// The spec's reference implementation (packaging.python.org, inline script metadata), timed the
/// same way as ours: best per-parse time within a budget.
const REFERENCE: &str = r#"
import pathlib, re, sys, time, tomllib

REGEX = r'(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$'

def read(script: str) -> dict | None:
    name = 'script'
    matches = list(filter(lambda m: m.group('type') == name, re.finditer(REGEX, script)))
    if len(matches) > 1:
        raise ValueError(f'Multiple {name} blocks found')
    elif len(matches) == 1:
        content = ''.join(
            line[2:] if line.startswith('# ') else line[1:]
            for line in matches[0].group('content').splitlines(keepends=True)
        )
        return tomllib.loads(content)
    else:
        return None

for p in sys.argv[1:]:
    text = pathlib.Path(p).read_text(encoding='utf-8')
    best, spent, n = float('inf'), 0.0, 0
    while n < 1 or (spent < 1.0 and n < 50):
        t = time.perf_counter()
        read(text)
        d = time.perf_counter() - t
        best, spent, n = min(best, d), spent + d, n + 1
    print(f'{pathlib.Path(p).stem}\t{best:.9f}')
"#;

/// Doubling the input may cost at most this factor: the scanner is linear.
const MAX_DOUBLING: f64 = 2.2;
/// The adversarial 4,000 `# /// a` lines must parse in under a millisecond.
const MAX_ADVERSARIAL: f64 = 1e-3;

/// The pep723-meta parser against the spec's reference regex on the same files.
pub(crate) fn meta(sh: &Shell) -> Result<()> {
    crate::section("bench: pep723-meta parse vs the spec's reference regex");
    let dir = crate::project_root().join("target/bench-meta");
    let dir_arg = dir.display().to_string();
    let ours = cmd!(
        sh,
        "cargo run --quiet --release --locked -p pep723-meta --example bench -- {dir_arg}"
    )
    .read()?;
    let rows: Vec<(String, usize, f64)> = ours
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            match f.as_slice() {
                [name, lines, _bytes, secs] => {
                    Ok(((*name).to_owned(), lines.parse()?, secs.parse()?))
                }
                _ => bail!("unexpected bench output line `{l}`"),
            }
        })
        .collect::<Result<_>>()?;
    let reference = reference(sh, &dir, &rows)?;

    println!(
        "{:<16} {:>7} {:>14} {:>18} {:>9}",
        "input", "lines", "pep723-meta", "reference regex", "speedup"
    );
    for (name, lines, secs) in &rows {
        let (base, speedup) = match reference.get(name) {
            Some(b) => (fmt_secs(*b), format!("{:.0}x", b / secs)),
            None => ("-".to_owned(), "-".to_owned()),
        };
        println!("{name:<16} {lines:>7} {:>14} {base:>18} {speedup:>9}", fmt_secs(*secs));
    }

    let get = |n: &str| {
        rows.iter().find(|r| r.0 == n).map(|r| r.2).context(format!("bench input `{n}` missing"))
    };
    let mut failures = Vec::new();
    for (small, big) in [("realistic-10k", "realistic-20k"), ("adversarial-4k", "adversarial-8k")] {
        let ratio = get(big)? / get(small)?;
        println!("linearity {small} -> {big}: {ratio:.2}x (limit {MAX_DOUBLING}x)");
        if ratio > MAX_DOUBLING {
            failures
                .push(format!("doubling `{small}` cost {ratio:.2}x, more than {MAX_DOUBLING}x"));
        }
    }
    let adversarial = get("adversarial-4k")?;
    if adversarial >= MAX_ADVERSARIAL {
        failures.push(format!("adversarial-4k took {}, the budget is 1 ms", fmt_secs(adversarial)));
    }
    if !failures.is_empty() {
        bail!("pep723-meta benchmark failed:\n  {}", failures.join("\n  "));
    }
    Ok(())
}

/// Runs the reference regex with Debian's python on the files the harness wrote.
fn reference(
    sh: &Shell,
    dir: &std::path::Path,
    rows: &[(String, usize, f64)],
) -> Result<HashMap<String, f64>> {
    if !std::path::Path::new(PYTHON).exists() {
        crate::skipped("bench meta baseline", &format!("{PYTHON} not found"));
        return Ok(HashMap::new());
    }
    let script = dir.join("reference.py");
    std::fs::write(&script, REFERENCE).with_context(|| format!("writing {}", script.display()))?;
    let files: Vec<String> =
        rows.iter().map(|r| dir.join(format!("{}.py", r.0)).display().to_string()).collect();
    let out = cmd!(sh, "{PYTHON} {script} {files...}").read()?;
    out.lines()
        .map(|l| match l.split_once('\t') {
            Some((name, secs)) => Ok((name.to_owned(), secs.parse()?)),
            None => bail!("unexpected reference output line `{l}`"),
        })
        .collect()
}

fn fmt_secs(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{:.1} µs", s * 1e6)
    }
}

/// The pod engine against `kubectl` on the same cluster, side by side in one run (the
/// `engine-k8s` example `bench`, which prints `SKIPPED: bench k8s: no cluster (...)` without
/// one and fails when a ratio misses its target). Its CLI rows time the release CLI, built
/// first where `KUBECONFIG` names a cluster (the example says whether it answers).
fn k8s(sh: &Shell) -> Result<()> {
    crate::section("bench: engine-k8s vs kubectl");
    if std::env::var_os("KUBECONFIG").is_some_and(|k| !k.is_empty()) {
        cmd!(sh, "cargo build --release --locked -p cli").run()?;
    }
    cmd!(sh, "cargo run --release --locked -p engine-k8s --example bench").run()?;
    Ok(())
}
