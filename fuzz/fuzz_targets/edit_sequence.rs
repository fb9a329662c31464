//! Fuzz target: a script (fuzzed lines biased towards block syntax) and a random edit sequence,
//! checked for round-trip, block-only changes, kept line endings and idempotence.

#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use pep723_meta::{Edit, SandboxKey};

#[derive(Debug, Arbitrary)]
enum Line {
    Opener,
    Closer,
    Empty,
    Hash,
    Toml(String),
    Raw(String),
}

#[derive(Debug, Arbitrary)]
enum Eol {
    Lf,
    CrLf,
    Cr,
}

#[derive(Debug, Arbitrary)]
enum Op {
    Init,
    Add(u8, Option<String>),
    Remove(u8),
    RequiresPython(bool),
    UnsetRequiresPython,
    SandboxAdd(u8),
    SandboxRemove(u8),
    Set(u8, u8, Option<String>),
    Unset(u8),
}

#[derive(Debug, Arbitrary)]
struct Input {
    bom: bool,
    lines: Vec<(Line, Eol)>,
    final_eol: bool,
    ops: Vec<Op>,
}

const REQS: [&str; 5] =
    ["rich", "anyio>=4", "httpx[http2]", "Rich<14", "zstd ; python_version >= '3.9'"];
const VALUES: [&str; 8] =
    ["off", "on", "[8000, 8001]", "30", "./data:ro", "[\"HOME\", \"A=1\"]", "pytest", "\"x\""];

fn pick<T: Copy>(items: &[T], i: u8) -> T {
    items[usize::from(i) % items.len()]
}

fn to_edit(op: &Op) -> Edit {
    match op {
        Op::Init => Edit::Init,
        Op::Add(i, custom) => {
            Edit::AddDependency(custom.clone().unwrap_or_else(|| pick(&REQS, *i).to_owned()))
        }
        Op::Remove(i) => Edit::RemoveDependency(pick(&REQS, *i).to_owned()),
        Op::RequiresPython(b) => {
            Edit::SetRequiresPython(if *b { ">=3.11" } else { "~=3.12" }.to_owned())
        }
        Op::UnsetRequiresPython => Edit::UnsetRequiresPython,
        Op::SandboxAdd(i) => Edit::AddSandboxDependency(pick(&REQS, *i).to_owned()),
        Op::SandboxRemove(i) => Edit::RemoveSandboxDependency(pick(&REQS, *i).to_owned()),
        Op::Set(k, v, custom) => Edit::SetSandbox {
            key: pick(&SandboxKey::ALL, *k),
            value: custom.clone().unwrap_or_else(|| pick(&VALUES, *v).to_owned()),
        },
        Op::Unset(k) => Edit::UnsetSandbox { key: pick(&SandboxKey::ALL, *k) },
    }
}

fuzz_target!(|input: Input| {
    let mut text = String::new();
    if input.bom {
        text.push('\u{feff}');
    }
    let n = input.lines.len();
    for (i, (line, eol)) in input.lines.iter().enumerate() {
        match line {
            Line::Opener => text.push_str("# /// script"),
            Line::Closer => text.push_str("# ///"),
            Line::Empty => {}
            Line::Hash => text.push('#'),
            Line::Toml(s) => {
                text.push_str("# ");
                text.push_str(s);
            }
            Line::Raw(s) => text.push_str(s),
        }
        if i + 1 < n || input.final_eol {
            text.push_str(match eol {
                Eol::Lf => "\n",
                Eol::CrLf => "\r\n",
                Eol::Cr => "\r",
            });
        }
    }
    let edits: Vec<Edit> = input.ops.iter().take(8).map(to_edit).collect();
    pep723_meta_fuzz::check_edits(&text, &edits);
});
