//! The script of a `run` or `session run`: a regular file as given, or, as `uv run -` does, one
//! read whole from stdin (`-`) or a pipe (`<(...)`). A read script is written to a private
//! temporary directory outside the workspace (so a run cannot change it and `files_written`
//! never lists it); the engines mount it read-only like any script outside the workspace, and
//! the directory is removed when the run ends.
//!
//! A script file is read through one descriptor, whose real path (links resolved) is kept
//! beside the bytes: what is classified as a boundary crossing is the file that was read. A
//! leading `~` is expanded as the run's own resolution expands it, so the file read is the
//! file run.

use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::ui;

/// A script ready to parse and run.
pub(crate) struct Script {
    /// How messages name it: the path as given, or `<stdin>`.
    pub(crate) display: PathBuf,
    /// The file the engine runs.
    pub(crate) path: PathBuf,
    /// The real path of the host file read (the descriptor's), `None` for a private copy.
    pub(crate) real: Option<PathBuf>,
    pub(crate) bytes: Vec<u8>,
    /// Owns the temporary copy of a script read from stdin or a pipe; dropping removes it.
    _temp: Option<tempfile::TempDir>,
}

/// Reads the script `arg` names; `-` is stdin.
pub(crate) fn load(arg: &Path) -> Result<Script> {
    if arg == Path::new("-") {
        let mut bytes = Vec::new();
        std::io::stdin().read_to_end(&mut bytes).context("cannot read the script from stdin")?;
        return from_stream(PathBuf::from("<stdin>"), bytes);
    }
    let expanded = expand_home(arg)?;
    let arg = expanded.as_path();
    // Follows links on purpose: `<(...)` is a link to a pipe under /dev/fd.
    let kind = std::fs::metadata(arg).map(|m| m.file_type());
    match kind {
        Ok(kind) if kind.is_fifo() || kind.is_socket() => {
            let bytes = read_script(arg)?;
            from_stream(arg.to_owned(), bytes)
        }
        Ok(kind) if !kind.is_file() => Err(ui::hinted(
            format!("`{}` is not a regular file", arg.display()),
            "pass a script file, `-` to read the script from stdin, or a pipe such as `<(...)`",
        )),
        // Missing or unreadable: the reader's message says which.
        _ => {
            let (bytes, real) = read_with_real_path(arg)?;
            Ok(Script {
                display: arg.to_owned(),
                path: arg.to_owned(),
                real: Some(real),
                bytes,
                _temp: None,
            })
        }
    }
}

/// `~/x.py` as the layers' resolution reads it (`$HOME/x.py`); other paths as given.
pub(crate) fn expand_home(arg: &Path) -> Result<PathBuf> {
    if !arg.as_os_str().as_encoded_bytes().starts_with(b"~") {
        return Ok(arg.to_owned());
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    let cwd = std::env::current_dir().context("cannot determine the current directory")?;
    Ok(sandbox_core::absolutize(arg, &cwd, home.as_deref())?)
}

/// The file's bytes and its real path, both from one descriptor: a link swapped between a
/// check of the path and the read cannot make them name different files.
fn read_with_real_path(path: &Path) -> Result<(Vec<u8>, PathBuf)> {
    // std (not fs_err): our message names the path once, and the OS error code survives.
    #[allow(clippy::disallowed_methods)]
    let opened = std::fs::File::open(path);
    let mut file = opened.map_err(|e| unreadable(path, &e))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|e| unreadable(path, &e))?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    let real = std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .or_else(|_| path.canonicalize())
        .map_err(|e| unreadable(path, &e))?;
    Ok((bytes, real))
}

/// A script from bytes (stdin, a pipe, the MCP server's inline code), kept in a private
/// temporary file for as long as the [`Script`] lives.
pub(crate) fn from_stream(display: PathBuf, bytes: Vec<u8>) -> Result<Script> {
    let dir = tempfile::Builder::new()
        .prefix("python-sandbox-script-")
        .tempdir()
        .context("cannot create a temporary directory for the script")?;
    let path = dir.path().join("script.py");
    fs_err::write(&path, &bytes)?;
    // The directory stays private (0700); the file itself is what the engine mounts, and the
    // sandbox user (nobody, for a root caller on docker) must be able to read it.
    fs_err::set_permissions(&path, std::fs::Permissions::from_mode(0o644))?;
    Ok(Script { display, path, real: None, bytes, _temp: Some(dir) })
}

/// Reads a script as bytes, so that invalid UTF-8 becomes a diagnostic instead of an IO error.
pub(crate) fn read_script(path: &Path) -> Result<Vec<u8>> {
    // std (not fs_err): our message names the path once, and the OS error code survives.
    #[allow(clippy::disallowed_methods)]
    std::fs::read(path).map_err(|e| unreadable(path, &e))
}

fn unreadable(path: &Path, e: &std::io::Error) -> anyhow::Error {
    let hint = if e.kind() == std::io::ErrorKind::NotFound {
        "check the path; it is taken relative to the current directory"
    } else {
        "check that the file is readable"
    };
    ui::hinted(format!("cannot read `{}`: {}", path.display(), io_reason(e)), hint)
}

/// The OS reason alone (fs_err's message repeats the path), lower case, without `(os error N)`.
pub(crate) fn io_reason(e: &std::io::Error) -> String {
    let plain = match e.raw_os_error() {
        Some(code) => std::io::Error::from_raw_os_error(code).to_string(),
        None => std::io::Error::from(e.kind()).to_string(),
    };
    let plain = plain.split(" (os error").next().unwrap_or_default();
    plain.to_lowercase()
}
