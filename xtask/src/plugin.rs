//! `cargo xtask plugin [--provision]`: the Claude Code plugin as a new user gets it, with the real
//! Claude Code CLI from npm in a scratch `HOME` (`target/plugin-home`): validate the marketplace
//! and the plugin, `marketplace add ./`, `install python-sandbox@python-sandbox`, then the
//! installed launcher answers `detect --json` with the freshly built CLI on `PATH`.
//! `--provision` (CI) also runs it with no CLI on `PATH`, so it builds one with `cargo install
//! --path` from the marketplace checkout (minutes; `target/plugin-install` keeps the build).
//!
//! Without npm, or when the npm registry cannot be reached, it prints `SKIPPED: plugin: reason`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use xshell::{Shell, cmd};

pub(crate) struct Plugin {
    pub(crate) provision: bool,
}

/// The Claude Code CLI the checks run, pinned so a new release cannot turn CI red by itself.
const CLAUDE_CODE: &str = "2.1.332";
/// The release target dir of the provisioning build, shared with `cargo xtask dist`.
pub(crate) const INSTALL_TARGET: &str = "target/plugin-install";

impl Plugin {
    pub(crate) fn run(self, sh: &Shell) -> Result<()> {
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
        for file in ["bin/python-sandbox", ".mcp.json", "skills/python-sandbox/SKILL.md"] {
            if !installed.join(file).is_file() {
                bail!("the installed plugin at {} has no {file}", installed.display());
            }
        }
        let launcher = installed.join("bin/python-sandbox");

        crate::section("plugin: the installed launcher with the built CLI on PATH");
        let system_path = without_cli(&sh.var("PATH")?);
        let debug = root.join("target/debug");
        let path = format!("{}:{system_path}", debug.display());
        let data = home.join("data");
        detect(sh, &launcher, &path, &data.join("found"))?;
        if sh.path_exists(data.join("found/bin")) {
            bail!("the launcher installed a CLI although a matching one was on PATH");
        }
        crate::section("plugin: the MCP server from the installed plugin's .mcp.json");
        mcp_answers(&installed, &path, &data.join("found"))?;

        if self.provision {
            crate::section("plugin: the installed launcher provisions the CLI with cargo");
            let _target = sh.push_env("CARGO_TARGET_DIR", root.join(INSTALL_TARGET));
            let data = data.join("provisioned");
            detect(sh, &launcher, &system_path, &data)?;
            if !data.join("bin/python-sandbox").is_file() {
                bail!("the launcher answered but installed nothing into {}", data.display());
            }
        } else {
            crate::skipped("plugin provisioning", "run `cargo xtask plugin --provision` (minutes)");
        }
        Ok(())
    }
}

/// `detect --json` through the launcher answers with the engines list.
fn detect(sh: &Shell, launcher: &Path, path: &str, data: &Path) -> Result<()> {
    let out = cmd!(sh, "{launcher} detect --json")
        .env("PATH", path)
        .env("CLAUDE_PLUGIN_DATA", data)
        .read()
        .with_context(|| format!("{} detect --json", launcher.display()))?;
    if !out.trim_start().starts_with('{') || !out.contains("\"engines\"") {
        bail!("`detect --json` through the launcher printed no engines list:\n{out}");
    }
    println!("plugin: detect --json answered through {}", launcher.display());
    Ok(())
}

/// Starts the server the installed plugin's `.mcp.json` declares, as Claude Code does
/// (`${CLAUDE_PLUGIN_ROOT}` expanded, the plugin's data dir set), and checks that it answers an
/// MCP `initialize` over stdio as python-sandbox; the server ends when its stdin closes.
fn mcp_answers(installed: &Path, path: &str, data: &Path) -> Result<()> {
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
    let mut child = std::process::Command::new(&command)
        .args(&args)
        .env("PATH", path)
        .env("CLAUDE_PLUGIN_ROOT", installed)
        .env("CLAUDE_PLUGIN_DATA", data)
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
    let answer = rx.recv_timeout(std::time::Duration::from_secs(60));
    drop(stdin);
    let answer = match answer {
        Ok(read) => read.context("reading the MCP server's answer")?,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the MCP server from {} did not answer `initialize` within 60 s", file.display());
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

/// PATH without the directories that hold a `python-sandbox` (a developer's own install).
fn without_cli(path: &str) -> String {
    let keep: Vec<&str> =
        path.split(':').filter(|d| !Path::new(d).join("python-sandbox").exists()).collect();
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
        assert_eq!(without_cli(&path), "/usr/bin:/bin");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
