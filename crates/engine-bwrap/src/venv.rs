//! A fresh environment written directly, as `uv venv` would write it for a CPython, without
//! starting uv and the interpreter in a sandbox for it (about 70 ms of every new environment:
//! uv's start, and its query of the interpreter, which an empty uv cache cannot answer).
//!
//! What `uv venv` (0.13) writes for CPython on Linux, less its activation scripts (nothing
//! sources them: runs start the environment's `bin/python` directly): `pyvenv.cfg`,
//! `bin/python` pointing at the base interpreter where the sandbox sees it, `python3` and
//! `python3.X` pointing at `python`, an empty `lib/python3.X/site-packages`, `lib64 -> lib`,
//! and the `.gitignore` and `CACHEDIR.TAG` that keep it out of version control and backups.
//! Other implementations and free-threaded builds lay out their environments differently:
//! uv still makes those ([`layout`] says `None`).

use std::path::{Path, PathBuf};

/// One entry of an environment, relative to its root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    Dir(PathBuf),
    File(PathBuf, String),
    Symlink(PathBuf, PathBuf),
}

/// What the sandbox's interpreter says about itself that the layout depends on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Base<'a> {
    /// The interpreter's executable as the sandbox sees it (relocated).
    pub(crate) python: &'a Path,
    /// `major.minor.micro`.
    pub(crate) version: &'a str,
    /// `sys.implementation.name`.
    pub(crate) implementation: &'a str,
    /// `sys.abiflags`.
    pub(crate) abiflags: &'a str,
}

/// Pure: the entries of a fresh environment for `base`, recorded as made by uv `uv_version`;
/// `None` when `base` is not a plain CPython 3 (uv lays those out).
pub(crate) fn layout(base: Base<'_>, uv_version: &str) -> Option<Vec<Entry>> {
    let mut parts = base.version.split('.');
    let (major, minor) = (parts.next()?, parts.next()?);
    let plain = base.implementation == "cpython" && !base.abiflags.contains('t');
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !plain || major != "3" || !numeric(minor) || !base.python.is_absolute() {
        return None;
    }
    let home = base.python.parent()?;
    let lib = PathBuf::from(format!("lib/python{major}.{minor}"));
    let p = PathBuf::from;
    Some(vec![
        Entry::File(p(".gitignore"), "*".to_owned()),
        Entry::File(p("CACHEDIR.TAG"), "Signature: 8a477f597d28d172789f06886806bc55".to_owned()),
        Entry::File(
            p("pyvenv.cfg"),
            format!(
                "home = {}\nimplementation = CPython\nuv = {uv_version}\nversion_info = {}\n\
                 include-system-site-packages = false\n",
                home.display(),
                base.version
            ),
        ),
        Entry::Dir(p("bin")),
        Entry::Symlink(p("bin/python"), base.python.to_owned()),
        Entry::Symlink(p("bin/python3"), p("python")),
        Entry::Symlink(PathBuf::from(format!("bin/python{major}.{minor}")), p("python")),
        Entry::Dir(p("lib")),
        Entry::Dir(lib.clone()),
        Entry::Dir(lib.join("site-packages")),
        Entry::Symlink(p("lib64"), p("lib")),
    ])
}

/// Makes `entries` below the existing, empty directory `root` (directories 0755, files 0644).
pub(crate) fn write(root: &Path, entries: &[Entry]) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    for entry in entries {
        match entry {
            Entry::Dir(rel) => std::fs::DirBuilder::new().mode(0o755).create(root.join(rel))?,
            Entry::File(rel, text) => {
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o644)
                    .open(root.join(rel))?;
                std::io::Write::write_all(&mut file, text.as_bytes())?;
            }
            Entry::Symlink(rel, target) => std::os::unix::fs::symlink(target, root.join(rel))?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base<'a>(python: &'a str, version: &'a str, implementation: &'a str) -> Base<'a> {
        Base { python: Path::new(python), version, implementation, abiflags: "" }
    }

    #[test]
    fn a_cpython_environment_is_laid_out_as_uv_lays_it_out() {
        let entries = layout(
            base("/opt/python-sandbox/python/bin/python3.11", "3.11.7", "cpython"),
            "0.13.9",
        )
        .unwrap();
        insta::assert_debug_snapshot!(entries);
    }

    #[test]
    fn other_interpreters_are_left_to_uv() {
        let python = "/usr/bin/python3";
        assert!(layout(base(python, "3.10.14", "pypy"), "0.13.9").is_none());
        let threaded = Base { abiflags: "t", ..base(python, "3.13.1", "cpython") };
        assert!(layout(threaded, "0.13.9").is_none());
        assert!(layout(base(python, "2.7.18", "cpython"), "0.13.9").is_none());
        assert!(layout(base(python, "3", "cpython"), "0.13.9").is_none());
        assert!(layout(base("python3", "3.12.1", "cpython"), "0.13.9").is_none());
    }

    #[test]
    fn the_written_environment_starts_the_interpreter_as_a_venv() {
        let Some(python) = ["/usr/bin/python3.11", "/usr/bin/python3"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.exists())
        else {
            eprintln!("SKIPPED: no /usr/bin/python3 here");
            return;
        };
        let python = std::fs::canonicalize(python).unwrap();
        let out = std::process::Command::new(&python)
            .args(["-I", "-S", "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
            .output()
            .unwrap();
        let version = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        let root = tempfile::tempdir().unwrap();
        let entries =
            layout(base(python.to_str().unwrap(), &version, "cpython"), "0.13.9").unwrap();
        write(root.path(), &entries).unwrap();
        let out = std::process::Command::new(root.path().join("bin/python"))
            .args([
                "-I",
                "-c",
                "import sys, site; print(sys.prefix); print(site.getsitepackages()[0])",
            ])
            .env_clear()
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let minor = version.rsplit_once('.').unwrap().0;
        let root_text = root.path().to_str().unwrap();
        assert_eq!(lines[0], root_text, "{text}");
        assert_eq!(lines[1], format!("{root_text}/lib/python{minor}/site-packages"), "{text}");
    }
}
