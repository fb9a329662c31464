//! Parser benchmark harness, run in release by `cargo xtask bench`: writes each input to the
//! directory given as the first argument (so a baseline can parse the very same bytes) and prints
//! one tab-separated line per input: `name  lines  bytes  seconds-per-parse`.
//!
//! Inputs: a realistic 10,000-line script, the adversarial 4,000 lines of `# /// a` that make the
//! spec's reference regex quadratic, and both at double size to check linear scaling.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn realistic(lines: usize) -> String {
    let mut s = String::from(
        "#!/usr/bin/env -S uv run --script\n# /// script\n# requires-python = \">=3.11\"\n# dependencies = [\n#     \"httpx>=0.27\",\n#     \"rich\",\n# ]\n#\n# [tool.python-sandbox]\n# net = \"off\"\n# mounts = [\"./data:ro\"]\n# ///\n\n",
    );
    let mut i = 0;
    while s.lines().count() < 14 || s.bytes().filter(|&b| b == b'\n').count() < lines {
        s.push_str(&format!(
            "def f{i}(x):\n    # a comment with # /// in it\n    return x * {i}  # done\n\n"
        ));
        i += 1;
    }
    s
}

fn adversarial(lines: usize) -> String {
    "# /// a\n".repeat(lines)
}

/// Per-parse time of one batch of `n` parses.
fn batch(text: &str, n: u32) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        black_box(pep723_meta::parse(black_box(text)));
    }
    t.elapsed().as_secs_f64() / f64::from(n)
}

/// The fastest per-parse time of each input. Rounds interleave the inputs so that load from other
/// processes hits all of them alike (the linearity check compares them); each batch lasts ~2 ms.
fn time_all(texts: &[&str], budget: Duration) -> Vec<f64> {
    let sizes: Vec<u32> = texts
        .iter()
        .map(|t| {
            let once = batch(t, 1).max(1e-7);
            (2e-3 / once).clamp(1.0, 10_000.0) as u32
        })
        .collect();
    let mut best = vec![f64::INFINITY; texts.len()];
    let start = Instant::now();
    while start.elapsed() < budget {
        for (i, t) in texts.iter().enumerate() {
            best[i] = best[i].min(batch(t, sizes[i]));
        }
    }
    best
}

fn main() {
    let out = std::env::args().nth(1).map(PathBuf::from);
    let inputs = [
        ("realistic-10k", realistic(10_000)),
        ("realistic-20k", realistic(20_000)),
        ("adversarial-4k", adversarial(4_000)),
        ("adversarial-8k", adversarial(8_000)),
    ];
    let texts: Vec<&str> = inputs.iter().map(|(_, t)| t.as_str()).collect();
    let times = time_all(&texts, Duration::from_secs(3));
    for ((name, text), seconds) in inputs.iter().zip(times) {
        if let Some(dir) = &out {
            let path = dir.join(format!("{name}.py"));
            if let Err(e) = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, text))
            {
                eprintln!("error: cannot write {}: {e}", path.display());
                std::process::exit(1);
            }
        }
        println!("{name}\t{}\t{}\t{seconds:.9}", text.lines().count(), text.len());
    }
}
