//! `cargo xtask plugin [--provision]`: the Claude Code plugin as a new user gets it, with the real
//! Claude Code CLI from npm in a scratch `HOME` (`target/plugin-home`): validate the marketplace
//! and the plugin, `marketplace add ./`, `install python-sandbox@python-sandbox`, then the
//! installed launcher answers `detect --json` with the freshly built CLI on `PATH`.
//! `--provision` (CI, after `cargo xtask dist`) proves a new user's first use: a loopback server
//! serves `target/dist` as the release, and with no CLI, cargo or uv on `PATH` and a clean `HOME`
//! the installed plugin's first `detect --json` and its MCP server's `initialize` each answer
//! within Claude Code's 30 s, from the download checked against the plugin's pinned sums; the
//! skill's Bash call then finds the MCP server's install; a tampered tarball is refused.
//!
//! First, shellcheck lints the launcher as POSIX sh. Without npm, or when the npm registry
//! cannot be reached, it prints `SKIPPED: plugin: reason`.

use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use xshell::{Shell, cmd};

pub(crate) struct Plugin {
    pub(crate) provision: bool,
}

/// The Claude Code CLI the checks run, pinned so a new release cannot turn CI red by itself.
const CLAUDE_CODE: &str = "2.1.332";
/// The release target dir of `cargo xtask dist` (and of the plugin's cargo builds before it).
pub(crate) const INSTALL_TARGET: &str = "target/plugin-install";
/// How long Claude Code waits for an MCP server to start (`MCP_TIMEOUT`'s default).
const MCP_START: Duration = Duration::from_secs(30);
/// The launcher's install directory under a `HOME` (no `XDG_DATA_HOME`).
const INSTALL_DIR: &str = ".local/share/python-sandbox/plugin";

impl Plugin {
    pub(crate) fn run(self, sh: &Shell) -> Result<()> {
        lint_launcher(sh)?;
        crate::section("plugin: claude code");
        let claude = match claude_code(sh) {
            Ok(claude) => claude,
            Err(reason) => {
                crate::skipped("plugin", &reason);
                return Ok(());
            }
        };
        cmd!(sh, "cargo build --locked -p cli --bin python-sandbox").run()?;
        let root = crate::project_root();
        let home = root.join("target/plugin-home");
        sh.remove_path(&home)?;
        sh.create_dir(&home)?;
        let _home = sh.push_env("HOME", &home);
        let _updates = sh.push_env("DISABLE_AUTOUPDATER", "1");
        let _config = sh.push_env("CLAUDE_CONFIG_DIR", home.join(".claude"));

        crate::section("plugin: validate, marketplace add, install");
        cmd!(sh, "{claude} plugin validate .").run()?;
        cmd!(sh, "{claude} plugin validate ./plugin").run()?;
        cmd!(sh, "{claude} plugin marketplace add ./").run()?;
        cmd!(sh, "{claude} plugin install python-sandbox@python-sandbox").run()?;
        let version = env!("CARGO_PKG_VERSION");
        let installed =
            home.join(".claude/plugins/cache/python-sandbox/python-sandbox").join(version);
        for file in
            ["bin/python-sandbox", ".mcp.json", "skills/python-sandbox/SKILL.md", "SHA256SUMS"]
        {
            if !installed.join(file).is_file() {
                bail!("the installed plugin at {} has no {file}", installed.display());
            }
        }
        let launcher = installed.join("bin/python-sandbox");

        crate::section("plugin: the installed launcher with the built CLI on PATH");
        let system_path = without(&sh.var("PATH")?, &["python-sandbox"]);
        let debug = root.join("target/debug");
        let path = format!("{}:{system_path}", debug.display());
        let found = home.join("found");
        let env = launcher_env(&path, &found, "http://127.0.0.1:9/unused");
        detect(sh, &launcher, &env)?;
        if sh.path_exists(found.join(INSTALL_DIR)) {
            bail!("the launcher installed a CLI although a matching one was on PATH");
        }
        crate::section("plugin: the MCP server from the installed plugin's .mcp.json");
        mcp_answers(&installed, &env, MCP_START)?;

        if self.provision {
            provision(sh, &installed, &launcher, &home)?;
        } else {
            crate::skipped(
                "plugin provisioning",
                "run `cargo xtask dist`, then `cargo xtask plugin --provision`",
            );
        }
        Ok(())
    }
}

/// The launcher is POSIX sh that runs on machines we never see: shellcheck it as `sh` (Debian's
/// package, installed as root when missing; SKIPPED where it cannot be).
fn lint_launcher(sh: &Shell) -> Result<()> {
    crate::section("plugin: shellcheck the launcher");
    if !crate::services::on_path(sh, "shellcheck")
        && let Some(reason) = crate::services::apt_install(sh, &["shellcheck"])?
    {
        crate::skipped("plugin shellcheck", &reason);
        return Ok(());
    }
    cmd!(sh, "shellcheck --shell=sh plugin/bin/python-sandbox").run()?;
    Ok(())
}

/// A new user's first use, from the release in `target/dist` served on loopback.
fn provision(sh: &Shell, installed: &Path, launcher: &Path, home: &Path) -> Result<()> {
    let version = env!("CARGO_PKG_VERSION");
    let (dist, asset) = crate::dist::local_tarball(sh)
        .map_err(|reason| anyhow::anyhow!("{reason}\nhint: CI runs `dist` before this step"))?;
    let pins = sh.read_file(installed.join("SHA256SUMS"))?;
    if !pins.lines().any(|l| l.ends_with(&format!("  {asset}"))) {
        bail!(
            "the installed plugin pins no sha256 of {asset}\nhint: run `cargo xtask dist`, then this"
        );
    }
    let base = crate::serve::releases(dist.clone(), version)?;
    // A new user's machine: no CLI, no cargo, no uv.
    let path = without(&sh.var("PATH")?, &["python-sandbox", "cargo", "uv", "uvx"]);

    crate::section("plugin: first use from the release: `detect --json` in a clean HOME");
    let first = home.join("first-detect");
    let start = Instant::now();
    detect(sh, launcher, &launcher_env(&path, &first, &base))?;
    within(start, "the first `detect --json`")?;
    if !first.join(INSTALL_DIR).join("bin/python-sandbox").is_file() {
        bail!("`detect --json` answered but nothing is installed in {}", first.display());
    }

    crate::section("plugin: first use from the release: the MCP server in a clean HOME");
    let fresh = home.join("first-mcp");
    let start = Instant::now();
    mcp_answers(installed, &launcher_env(&path, &fresh, &base), MCP_START)?;
    within(start, "the MCP server's first `initialize`")?;
    // The skill's Bash calls get no CLAUDE_PLUGIN_DATA: they find the MCP server's install
    // (the release server unreachable now, so a second download would fail).
    let mut bash = launcher_env(&path, &fresh, "http://127.0.0.1:9/unreachable");
    bash.retain(|(key, _)| *key != "CLAUDE_PLUGIN_DATA");
    detect(sh, launcher, &bash)?;

    crate::section("plugin: a tampered release tarball is refused");
    let tampered = home.join("tampered-release");
    sh.create_dir(&tampered)?;
    let mut bytes = sh.read_binary_file(dist.join(&asset))?;
    if let Some(last) = bytes.last_mut() {
        *last ^= 1;
    }
    sh.write_file(tampered.join(&asset), bytes)?;
    let base = crate::serve::releases(tampered, version)?;
    let victim = home.join("tampered-home");
    let mut refused = std::process::Command::new(launcher);
    refused.arg("detect").arg("--json").env_clear();
    for (key, value) in launcher_env(&path, &victim, &base) {
        refused.env(key, value);
    }
    let out = refused.output().context("running the launcher")?;
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success() || !err.contains("nothing was installed") {
        bail!("the launcher did not refuse a tampered tarball ({}):\n{err}", out.status);
    }
    if victim.join(INSTALL_DIR).join("bin/python-sandbox").exists() {
        bail!("the launcher refused a tampered tarball but installed it anyway");
    }
    println!("plugin: a tampered {asset} was refused:\n{}", err.trim_end());
    Ok(())
}

/// The step finished within Claude Code's MCP start limit.
fn within(start: Instant, what: &str) -> Result<()> {
    let took = start.elapsed();
    println!("plugin: {what} answered in {:.1} s", took.as_secs_f64());
    if took > MCP_START {
        bail!(
            "{what} took {:.1} s, more than Claude Code's {} s",
            took.as_secs_f64(),
            MCP_START.as_secs()
        );
    }
    Ok(())
}

/// The launcher's environment as Claude Code gives it: `PATH`, a `HOME` of its own, the plugin's
/// data dir (which the launcher must not install into), and where releases come from.
pub(crate) fn launcher_env(path: &str, home: &Path, base: &str) -> Vec<(&'static str, String)> {
    vec![
        ("PATH", path.to_owned()),
        ("HOME", home.display().to_string()),
        ("CLAUDE_PLUGIN_DATA", home.join("claude-plugin-data").display().to_string()),
        ("PYTHON_SANDBOX_RELEASE_BASE", base.to_owned()),
    ]
}

/// `detect --json` through the launcher answers with the engines list.
fn detect(sh: &Shell, launcher: &Path, env: &[(&str, String)]) -> Result<()> {
    let mut cmd = cmd!(sh, "{launcher} detect --json").env_clear();
    for (key, value) in env {
        cmd = cmd.env(key, value);
    }
    let out = cmd.read().with_context(|| format!("{} detect --json", launcher.display()))?;
    if !out.trim_start().starts_with('{') || !out.contains("\"engines\"") {
        bail!("`detect --json` through the launcher printed no engines list:\n{out}");
    }
    println!("plugin: detect --json answered through {}", launcher.display());
    Ok(())
}

/// Starts the server the installed plugin's `.mcp.json` declares, as Claude Code does
/// (`${CLAUDE_PLUGIN_ROOT}` expanded, `env` as the launcher's environment), and checks that it
/// answers an MCP `initialize` over stdio as python-sandbox within `limit`; the server ends when
/// its stdin closes.
fn mcp_answers(installed: &Path, env: &[(&str, String)], limit: Duration) -> Result<()> {
    use std::io::{BufRead as _, Write as _};

    let file = installed.join(".mcp.json");
    let text =
        std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let config: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))?;
    let server = &config["mcpServers"]["python-sandbox"];
    let root = installed.display().to_string();
    let expand = |s: &str| s.replace("${CLAUDE_PLUGIN_ROOT}", &root);
    let Some(command) = server["command"].as_str().map(expand) else {
        bail!("{} declares no `mcpServers.python-sandbox.command`", file.display());
    };
    let args: Vec<String> = server["args"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).map(expand).collect())
        .unwrap_or_default();
    let mut child = std::process::Command::new(&command);
    child.args(&args).env_clear().env("CLAUDE_PLUGIN_ROOT", installed);
    for (key, value) in env {
        child.env(key, value);
    }
    let mut child = child
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("starting `{command} {}`", args.join(" ")))?;
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        bail!("the MCP server's stdio is not piped");
    };
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"xtask","version":"0"}}}"#;
    writeln!(stdin, "{initialize}").context("writing to the MCP server")?;
    // A reader thread, so a server that never answers fails the step instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let read = std::io::BufReader::new(stdout).read_line(&mut line).map(|_| line);
        let _ = tx.send(read);
    });
    let answer = rx.recv_timeout(limit);
    drop(stdin);
    let answer = match answer {
        Ok(read) => read.context("reading the MCP server's answer")?,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "the MCP server from {} did not answer `initialize` within {} s",
                file.display(),
                limit.as_secs()
            );
        }
    };
    let status = child.wait().context("waiting for the MCP server")?;
    let v: serde_json::Value = serde_json::from_str(&answer)
        .with_context(|| format!("the MCP server answered no JSON-RPC: {answer}"))?;
    if v["result"]["serverInfo"]["name"] != "python-sandbox" {
        bail!("the MCP server from {} answered `initialize` with {v}", file.display());
    }
    if !status.success() {
        bail!("the MCP server did not end cleanly when its stdin closed: {status}");
    }
    println!("plugin: the MCP server of {} answered initialize", file.display());
    Ok(())
}

/// PATH without the directories that hold any of `names` (a developer's own install, cargo).
pub(crate) fn without(path: &str, names: &[&str]) -> String {
    let keep: Vec<&str> =
        path.split(':').filter(|d| !names.iter().any(|n| Path::new(d).join(n).exists())).collect();
    keep.join(":")
}

/// The pinned Claude Code CLI, installed from npm into the tools cache when missing; `Err` is the
/// reason to skip.
fn claude_code(sh: &Shell) -> std::result::Result<PathBuf, String> {
    if cmd!(sh, "npm --version").quiet().ignore_stdout().ignore_stderr().run().is_err() {
        return Err("`npm` not found (install Node.js to test the plugin)".to_owned());
    }
    let prefix = crate::wasm::cache_dir(sh).with_file_name(format!("claude-code-{CLAUDE_CODE}"));
    let bin = prefix.join("node_modules/.bin/claude");
    if !bin.is_file() {
        println!(
            "plugin: installing @anthropic-ai/claude-code {CLAUDE_CODE} (npm) into {}",
            prefix.display()
        );
        let spec = format!("@anthropic-ai/claude-code@{CLAUDE_CODE}");
        crate::wasm::npm_install(sh, &prefix, &spec)
            .map_err(|e| format!("`npm install {spec}` failed (registry unreachable?): {e}"))?;
    }
    cmd!(sh, "{bin} --version")
        .quiet()
        .read()
        .map_err(|e| format!("the Claude Code CLI does not start: {e}"))?;
    Ok(bin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_the_path_entries_that_hold_a_cli() {
        let dir = std::env::temp_dir().join(format!("xtask-plugin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch");
        std::fs::write(dir.join("python-sandbox"), "").expect("a fake cli");
        let path = format!("/usr/bin:{}:/bin", dir.display());
        assert_eq!(without(&path, &["python-sandbox"]), "/usr/bin:/bin");
        assert_eq!(without(&path, &["cargo", "sh"]), dir.display().to_string());
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
