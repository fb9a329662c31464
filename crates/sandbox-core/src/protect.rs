//! Protected paths: what a host tool runs or trusts later without asking, and so what no
//! sandbox may write even where it may write everything else.
//!
//! A script that may write the workspace could otherwise write `.git/config` (git runs the
//! `core.fsmonitor` it names on the user's next `git status`), `.git/hooks/*`,
//! `.claude/settings.json` (Claude Code's permissions), `.envrc` or `.mcp.json`: code that
//! runs on the host, as the user, after the sandbox is gone. Every engine applies the one list
//! here to every writable tree it mounts (the workspace and each read-write mount): an
//! entry that exists is mounted read-only over itself, and a missing one of the names that
//! count in any directory ([`Scope::Anywhere`]) gets an empty placeholder on the host to hold
//! a read-only mount, removed when the run ends, so creating it fails too. Renaming or
//! deleting a mount point fails (`EBUSY`), so `.git` cannot be moved aside and replaced.
//! k8s syncs nothing below a protected name back to the host.
//!
//! Widening is an explicit decision: a read-write `--mount` of a protected path (or of
//! anything below one) is a boundary crossing ([`crate::CrossingKind::Protected`]) that needs
//! `--approve`, and then that path is writable.
//!
//! Pure: names and decisions only. The walk, the placeholders and the mounts are the engines'.

use std::path::Path;

/// Where a protected name matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// In any directory: a tool run there (git, an editor, Claude Code, direnv) picks it up.
    /// Protected when present at any depth the engines look, and at the top of every writable
    /// tree even when missing (a placeholder holds the mount).
    Anywhere,
    /// Only in a home directory (shell start-up files, git's user config): protected where
    /// present, and held by a placeholder only when the writable tree is the caller's home.
    Home,
}

/// What kind of entry a missing protected name is held open as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory: nothing can be created inside it.
    Dir,
    /// A regular file.
    File,
}

/// One protected name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Protected {
    /// The file name (one path component).
    pub name: &'static str,
    /// What a placeholder for it is.
    pub kind: Kind,
    /// Where it matters.
    pub scope: Scope,
    /// Which host tool runs or trusts it, for messages.
    pub why: &'static str,
}

const fn anywhere(name: &'static str, kind: Kind, why: &'static str) -> Protected {
    Protected { name, kind, scope: Scope::Anywhere, why }
}

const fn home(name: &'static str, why: &'static str) -> Protected {
    Protected { name, kind: Kind::File, scope: Scope::Home, why }
}

/// Every protected name. Claude Code's and sandbox-runtime's mandatory deny-write list, plus
/// what else a host tool runs without asking (`.envrc`, Mercurial's `.hg`). `.git` is
/// protected whole: its config names programs (`core.fsmonitor`, `core.hooksPath`, the
/// filter drivers `.gitattributes` selects), and a `.git` file (a worktree, a submodule) names
/// the directory git trusts instead.
pub const PROTECTED: &[Protected] = &[
    anywhere(".git", Kind::Dir, "git runs its hooks and the programs its config names"),
    anywhere(".hg", Kind::Dir, "Mercurial runs the hooks its hgrc names"),
    anywhere(".claude", Kind::Dir, "Claude Code takes its settings, permissions and hooks"),
    anywhere(".vscode", Kind::Dir, "VS Code runs its tasks and takes its settings"),
    anywhere(".idea", Kind::Dir, "JetBrains IDEs run its run configurations"),
    anywhere(".mcp.json", Kind::File, "Claude Code starts the MCP servers it names"),
    anywhere(".envrc", Kind::File, "direnv runs it on `cd`"),
    anywhere(".gitmodules", Kind::File, "git clones and checks out what it names"),
    home(".gitconfig", "git runs the programs it names"),
    home(".bashrc", "bash runs it"),
    home(".bash_profile", "bash runs it"),
    home(".zshrc", "zsh runs it"),
    home(".zprofile", "zsh runs it"),
    home(".profile", "login shells run it"),
    home(".ripgreprc", "ripgrep takes its flags (`--pre` runs a program)"),
    home(".claude.json", "Claude Code takes its MCP servers and settings"),
];

/// The protected entry named `name`, if any.
pub fn protected_name(name: &str) -> Option<&'static Protected> {
    PROTECTED.iter().find(|p| p.name == name)
}

/// The first component of `path` that is a protected name, with that component: a path at or
/// below it is protected.
pub fn protected_component(path: &Path) -> Option<&'static Protected> {
    path.components().find_map(|c| protected_name(c.as_os_str().to_str()?))
}

/// Whether the `/`-separated relative `path` (a sync listing's) is a protected name or lies
/// below one.
pub fn is_protected_rel(path: &str) -> bool {
    path.split('/').any(|part| protected_name(part).is_some())
}

/// What an entry found in a writable tree is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link: it cannot be mounted over (a mount follows it), and the sandbox could
    /// replace it, so a writable tree holding one at a protected name is refused.
    Symlink,
    /// Anything else (a FIFO, a socket, a device node): refused like a link.
    Other,
}

/// One protected path of a writable tree, relative to its top.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    /// Relative path (`.git`, `sub/.git`).
    pub rel: String,
    /// Whether it exists; else a placeholder of [`Guard::kind`] holds its mount.
    pub exists: bool,
    /// What it is, or what its placeholder is.
    pub kind: Kind,
}

/// How deep below a writable tree's top the engines look for protected entries that exist
/// (`a/b/c/.git` is found, deeper ones are not): a nested repository or a worktree usually
/// sits one or two levels down, and the walk must stay cheap for every run.
pub const WALK_DEPTH: usize = 3;

/// At most this many directories are read per writable tree; what lies beyond is not looked
/// at (said in the docs).
pub const WALK_DIRS: usize = 2_000;

/// Directories the walk does not enter: package trees that hold no repository a user works
/// in, and that are large.
pub const WALK_SKIP: &[&str] = &["node_modules", ".venv", "venv", "__pycache__", ".tox"];

/// A protected path that cannot be protected, for the refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unprotectable {
    /// Relative path.
    pub rel: String,
    /// What it is instead.
    pub found: Found,
}

/// Pure: the guards of one writable tree from what the walk found (`found`: relative path and
/// what it is, for every protected name met at any depth) and whether the tree is the
/// caller's home. `exempt` are relative paths the caller made writable on purpose (an
/// approved `--mount ./.git:rw`): neither they nor anything below them is guarded.
///
/// Every name of [`Scope::Anywhere`] missing at the top gets a placeholder guard; names of
/// [`Scope::Home`] only at the top of a home. A protected name that is a link or a special
/// file is refused: a mount would follow the link, and the sandbox could swap it.
pub fn guards(
    found: &[(String, Found)],
    is_home: bool,
    exempt: &[String],
) -> Result<Vec<Guard>, Unprotectable> {
    let exempted = |rel: &str| exempt.iter().any(|e| rel == e || rel.starts_with(&format!("{e}/")));
    let mut out = Vec::new();
    for (rel, what) in found {
        if exempted(rel) {
            continue;
        }
        let kind = match what {
            Found::Dir => Kind::Dir,
            Found::File => Kind::File,
            Found::Symlink | Found::Other => {
                return Err(Unprotectable { rel: rel.clone(), found: *what });
            }
        };
        out.push(Guard { rel: rel.clone(), exists: true, kind });
    }
    for p in PROTECTED {
        let wanted = match p.scope {
            Scope::Anywhere => true,
            Scope::Home => is_home,
        };
        if wanted && !exempted(p.name) && !found.iter().any(|(rel, _)| rel == p.name) {
            out.push(Guard { rel: p.name.to_owned(), exists: false, kind: p.kind });
        }
    }
    // Parents before children, so a nested guard is mounted inside its parent's.
    out.sort_by_key(|g| g.rel.matches('/').count());
    Ok(out)
}

/// The protected paths a script's error output says it was refused, in order, each once:
/// lines that report `EROFS`, `EBUSY` (a mount point renamed or removed), `EXDEV` (a file
/// renamed onto one) or `EACCES` (a root caller's read-only file shown as nobody's): Python's
/// `[Errno 30] Read-only file system: '.git/x'`, coreutils' `cannot create regular file
/// '.git/x': Read-only file system`, naming a path with a protected component. How a run
/// learns which protected path a script touched: the refusal itself is the kernel's, and
/// leaves no trace but the script's own message.
pub fn refusals_in(text: &str, out: &mut Vec<String>) {
    const REFUSED: &[&str] = &[
        "Read-only file system",
        "Device or resource busy",
        "Invalid cross-device link",
        "Permission denied",
    ];
    for line in text.lines() {
        if !REFUSED.iter().any(|r| line.contains(r)) {
            continue;
        }
        for quoted in quoted_paths(line) {
            let path = quoted.trim_start_matches("./");
            if protected_component(Path::new(path)).is_some()
                && !out.iter().any(|seen| seen == path)
            {
                out.push(path.to_owned());
            }
        }
    }
}

/// The `'…'`, `"…"` and `‘…’` quoted parts of `line`.
fn quoted_paths(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for (open, close) in [('\'', '\''), ('"', '"'), ('‘', '’')] {
        let mut rest = line;
        while let Some(start) = rest.find(open) {
            let after = &rest[start + open.len_utf8()..];
            let Some(end) = after.find(close) else { break };
            out.push(&after[..end]);
            rest = &after[end + close.len_utf8()..];
        }
    }
    out
}

#[cfg(test)]
mod tests;
