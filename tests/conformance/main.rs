//! The cross-engine conformance suite: runs the `python-sandbox` binary as a black box, every case
//! on every selected engine, each in its own temp workspace with a fake `$HOME` full of marked
//! secrets, and prints an engine × case matrix closed by `N passed, N failed, N skipped`.
//!
//! A custom runner (`harness = false`): the matrix, per-engine skips and the thread pool don't fit
//! libtest. Usage: `cargo xtask test-engines [--engine NAME]`, or directly
//! `cargo test -p tests --test conformance -- [FILTER...] [--exact] [--list] [--verbose] [--test-threads N]`.
//! Environment: `CONFORMANCE=1` runs it at all (a plain `cargo test --workspace` only prints
//! `SKIPPED`; setting `CONFORMANCE_ENGINES` also enables it),
//! `CONFORMANCE_ENGINES=bwrap,docker` (default: every engine `detect` lists, k8s only where a
//! cluster answers),
//! `CONFORMANCE_JOBS=N` (default 3), `CONFORMANCE_KEEP=1` keeps a failed case's temp dirs,
//! `PYTHON_SANDBOX_BIN` (default `target/debug/python-sandbox`, built if missing).

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod cases;
mod cli;
mod engines;
mod fixture;
mod harness;
mod report;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use engines::Engine;
use fixture::Shared;
use harness::Case;
use report::Status;

struct Options {
    filters: Vec<String>,
    exact: bool,
    list: bool,
    /// Transcripts of passing cases too (`--verbose` or CONFORMANCE_VERBOSE=1).
    verbose: bool,
    jobs: usize,
}

/// libtest-like arguments; flags a test runner may pass that mean nothing here are ignored.
fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Options, String> {
    let mut o = Options {
        filters: Vec::new(),
        exact: false,
        list: false,
        verbose: std::env::var_os("CONFORMANCE_VERBOSE").is_some(),
        jobs: 3,
    };
    if let Ok(j) = std::env::var("CONFORMANCE_JOBS") {
        o.jobs = j.parse().map_err(|_| format!("CONFORMANCE_JOBS={j} is not a number"))?;
    }
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--exact" => o.exact = true,
            "--list" => o.list = true,
            "--verbose" => o.verbose = true,
            "--test-threads" => {
                let v = args.next().unwrap_or_default();
                o.jobs =
                    v.parse().map_err(|_| format!("--test-threads needs a number, got `{v}`"))?;
            }
            s if s.starts_with("--test-threads=") => {
                let v = &s["--test-threads=".len()..];
                o.jobs =
                    v.parse().map_err(|_| format!("--test-threads needs a number, got `{v}`"))?;
            }
            s if s.starts_with('-') => {}
            _ => o.filters.push(a),
        }
    }
    o.jobs = o.jobs.clamp(1, 8);
    Ok(o)
}

fn selected(o: &Options, case: &str) -> bool {
    o.filters.is_empty()
        || o.filters.iter().any(|f| if o.exact { case == f } else { case.contains(f.as_str()) })
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One cell of the matrix.
struct Job {
    engine: usize,
    case: usize,
}

struct Outcome {
    status: Status,
    detail: Option<String>,
}

fn run() -> Result<bool, String> {
    let o = parse_args(std::env::args().skip(1))?;
    let cases: Vec<Case> = cases::all().into_iter().filter(|c| selected(&o, c.name)).collect();
    if o.list {
        for c in &cases {
            println!("{}: test", c.name);
        }
        return Ok(true);
    }
    let enabled = std::env::var("CONFORMANCE").is_ok_and(|v| !v.is_empty() && v != "0")
        || std::env::var_os("CONFORMANCE_ENGINES").is_some();
    if !enabled {
        println!(
            "SKIPPED: conformance: spawns real sandboxes; run `cargo xtask test-engines` or set CONFORMANCE=1"
        );
        return Ok(true);
    }
    let bin = cli::locate()?;
    let detected = detect(&bin)?;
    engines::remember(&detected);
    let engines = engines::select(&detected, std::env::var("CONFORMANCE_ENGINES").ok().as_deref())?;
    println!(
        "conformance: {} cases on {} engines with {}, {} at a time",
        cases.len(),
        engines.len(),
        bin.display(),
        o.jobs
    );
    for e in engines.iter().filter(|e| !e.available) {
        println!("{}", engines::unavailable_line(e));
        for more in e.reason.lines().skip(1) {
            println!("  {more}");
        }
    }
    let shared = shared_dirs()?;

    let mut outcomes: Vec<Vec<Option<Outcome>>> =
        (0..engines.len()).map(|_| (0..cases.len()).map(|_| None).collect()).collect();
    let mut jobs = Vec::new();
    for (ei, e) in engines.iter().enumerate() {
        for (ci, c) in cases.iter().enumerate() {
            let applies = engines::Applies {
                only_on: c.only_on,
                unavailable_only: c.unavailable_only,
                skip_on: c.skip_on,
            };
            let skip = engines::skip_reason(applies, e);
            match skip {
                Some(reason) => {
                    outcomes[ei][ci] =
                        Some(Outcome { status: Status::Skipped(reason), detail: None })
                }
                None => jobs.push(Job { engine: ei, case: ci }),
            }
        }
    }

    let results = run_pool(&jobs, o.jobs, &|job: &Job| {
        let (engine, case) = (&engines[job.engine], &cases[job.case]);
        let verdict = harness::run_case(case, &engine.name, &shared, &bin);
        let id = format!("{}/{}", engine.name, case.name);
        if verdict.failures.is_empty() {
            if o.verbose {
                println!("test {id} ... ok ({:.1?})\n{}", verdict.elapsed, verdict.transcript);
            } else {
                println!("test {id} ... ok ({:.1?})", verdict.elapsed);
            }
            return Outcome { status: Status::Pass, detail: None };
        }
        println!("test {id} ... FAILED ({:.1?})", verdict.elapsed);
        let mut detail = format!("---- {id} ----\n");
        for f in &verdict.failures {
            detail += &format!("  - {f}\n");
        }
        for k in &verdict.kept {
            detail += &format!("  kept: {}\n", k.display());
        }
        detail += &verdict.transcript;
        Outcome { status: Status::Fail, detail: Some(detail) }
    });
    for (job, outcome) in jobs.iter().zip(results) {
        outcomes[job.engine][job.case] = Some(outcome);
    }

    let details: Vec<&str> =
        outcomes.iter().flatten().flatten().filter_map(|o| o.detail.as_deref()).collect();
    if !details.is_empty() {
        println!("\nfailures:\n");
        for d in &details {
            println!("{d}");
        }
    }
    let status = |c: usize, e: usize| {
        outcomes[e][c].as_ref().map_or(Status::Skipped("not run".into()), |o| o.status.clone())
    };
    let case_names: Vec<&str> = cases.iter().map(|c| c.name).collect();
    let engine_names: Vec<&str> = engines.iter().map(|e| e.name.as_str()).collect();
    println!("\n{}", report::matrix(&case_names, &engine_names, &status));
    // The matrix shortens its cells; an engine-specific skip is printed whole, as it was decided.
    let skipped_on: Vec<(&str, &str, &str)> = cases
        .iter()
        .flat_map(|c| c.skip_on.iter().map(move |(e, why)| (c.name, *e, *why)))
        .filter(|(_, e, _)| engine_names.contains(e))
        .collect();
    if !skipped_on.is_empty() {
        println!("{}", report::engine_skips(&skipped_on));
    }
    let all: Vec<Status> = (0..cases.len())
        .flat_map(|c| (0..engines.len()).map(move |e| (c, e)))
        .map(|(c, e)| status(c, e))
        .collect();
    println!("{}", report::summary(&all));
    Ok(!all.contains(&Status::Fail))
}

/// `jobs` in order over `threads` workers; results in job order.
fn run_pool<T: Send>(jobs: &[Job], threads: usize, work: &(dyn Fn(&Job) -> T + Sync)) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let slots: Mutex<Vec<Option<T>>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads.min(jobs.len()) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(job) = jobs.get(i) else { break };
                    let r = work(job);
                    if let Ok(mut s) = slots.lock() {
                        s[i] = Some(r);
                    }
                }
            });
        }
    });
    slots.into_inner().unwrap_or_default().into_iter().flatten().collect()
}

fn detect(bin: &Path) -> Result<Vec<Engine>, String> {
    let started = Instant::now();
    let out = std::process::Command::new(bin)
        .args(["detect", "--json"])
        .env("NO_COLOR", "1")
        .output()
        .map_err(|e| format!("cannot run {} detect --json: {e}", bin.display()))?;
    if !out.status.success() {
        return Err(format!(
            "`python-sandbox detect --json` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    if started.elapsed() > Duration::from_secs(30) {
        eprintln!("conformance: note: `detect --json` took {:.1?}", started.elapsed());
    }
    engines::parse_detect(&String::from_utf8_lossy(&out.stdout))
}

/// Per-case temp dirs live under target/ (not /tmp, which a sandbox replaces anyway, so a fake
/// home there would prove nothing); uv's cache and data are shared by all cases.
fn shared_dirs() -> Result<Shared, String> {
    let target = cli::target_dir();
    let mk = |name: &str| -> Result<PathBuf, String> {
        let p = target.join(name);
        std::fs::create_dir_all(&p).map_err(|e| format!("cannot create {}: {e}", p.display()))?;
        Ok(p)
    };
    Ok(Shared {
        tmp_base: mk("conformance-tmp")?,
        cache: mk("conformance-cache")?,
        data: mk("conformance-data")?,
        keep: std::env::var_os("CONFORMANCE_KEEP").is_some(),
    })
}
