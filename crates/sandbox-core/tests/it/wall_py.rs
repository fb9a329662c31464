//! `agent::walled`: the in-process wall a pod's agent takes (`wall.py`), run for real by this
//! host's Python: the denied families answer as the wall says, the program keeps its own
//! arguments, and a wall it cannot take means the program never runs.

#![allow(clippy::print_stdout)]

use std::process::{Command, Output};

use sandbox_core::agent::{wall_arg, walled};

const PYTHON: &str = "/usr/bin/python3.11";

fn python() -> Option<&'static str> {
    if std::path::Path::new(PYTHON).exists() {
        return Some(PYTHON);
    }
    println!("SKIPPED: no {PYTHON} to run the wall prologue");
    None
}

fn run(python: &str, program: &str, args: &[&str]) -> Output {
    Command::new(python)
        .arg("-I")
        .arg("-c")
        .arg(walled(program))
        .args(args)
        .output()
        .expect("python")
}

/// What a script under the wall sees: `errno` of a refused `unshare(CLONE_NEWUSER)`, a setuid
/// `chmod`, `ptrace(PTRACE_TRACEME)`, and that ordinary work (a child process) still runs.
const PROBE: &str = r#"
import ctypes, os, subprocess, sys, tempfile
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(rc):
    return ctypes.get_errno() if rc != 0 else 0
print("args", sys.argv[1:])
print("unshare", errno_of(libc.unshare(0x10000000)))
path = tempfile.mktemp()
open(path, "w").close()
try:
    os.chmod(path, 0o4755)
    print("chmod", 0)
except OSError as e:
    print("chmod", e.errno)
os.unlink(path)
print("ptrace", errno_of(libc.ptrace(0, 0, None, None)))
print("child", subprocess.run(["/bin/true"]).returncode)
"#;

#[test]
fn the_program_runs_behind_the_wall_with_its_own_arguments() {
    let Some(python) = python() else { return };
    let out = run(python, PROBE, &[&wall_arg(), "one", "two"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["args ['one', 'two']", "unshare 1", "chmod 1", "ptrace 1", "child 0"],
        "EPERM (1) for each refused family, the arguments without the wall's"
    );
}

#[test]
fn without_a_wall_for_this_machine_nothing_runs() {
    let Some(python) = python() else { return };
    let marker = "print('ran')";
    for spec in ["", "sparc=00", "x86_64=zz;aarch64=zz", "x86_64=0102;aarch64=0102"] {
        let out = run(python, marker, &[spec]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{spec:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{spec:?}: the program ran unwalled");
        assert!(stderr.contains("cannot take the seccomp wall, so nothing runs"), "{stderr}");
    }
}

#[test]
fn the_argument_holds_a_program_per_architecture() {
    let arg = wall_arg();
    let parts: Vec<(&str, &str)> = arg.split(';').filter_map(|p| p.split_once('=')).collect();
    let names: Vec<&str> = parts.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["x86_64", "aarch64"]);
    for (name, hex) in parts {
        assert_eq!(hex.len() % 16, 0, "{name}: whole sock_filter entries");
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
    }
}
