//! `FromStr` for the command-line spellings of spec values, shared by the CLI flags and
//! anything else that reads them (`--mount PATH[:ro|:rw]`, `--publish [ADDR:][HOSTPORT:]PORT`,
//! `--env NAME[=VALUE]`, `--net on|off`). The inline table uses the same mount rule
//! ([`split_mount`]): the mode is read only from a final `:ro`/`:rw`, and any other text after
//! the last `:` is a typo, never part of the path, so a path that contains `:` needs its mode
//! spelled out (`./a:b:rw`).

use std::path::PathBuf;
use std::str::FromStr;

use crate::{EnvVar, Error, LayerMount, MountMode, Net, Publish};

/// Why a mount spelling is refused by [`split_mount`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountSpellingError {
    /// Nothing before the mode (`:ro`) or nothing at all.
    EmptyPath,
    /// Text after the last `:` that is not `ro` or `rw` (`./sub:xx`, `./sub:`, `/x:RO`).
    UnknownMode,
}

/// Splits `PATH[:ro|:rw]` into the path and its mode. The mode is read only from a final `:ro`
/// or `:rw`; anything else after the last `:` is an unknown mode rather than part of the path,
/// because a typo (`./out:rx`) that silently became a path would create or mount the wrong thing.
/// A path that contains `:` is therefore written with its mode: `./a:b:rw` is `./a:b`.
pub fn split_mount(text: &str) -> Result<(&str, Option<MountMode>), MountSpellingError> {
    let (path, mode) = match text.rsplit_once(':') {
        Some((path, "ro")) => (path, Some(MountMode::ReadOnly)),
        Some((path, "rw")) => (path, Some(MountMode::ReadWrite)),
        Some(_) => return Err(MountSpellingError::UnknownMode),
        None => (text, None),
    };
    if path.is_empty() {
        return Err(MountSpellingError::EmptyPath);
    }
    Ok((path, mode))
}

/// The `hint:` for a mount with an unknown mode: the two modes for the path as typed, and how to
/// mount a path that really contains `:`.
pub fn mount_mode_hint(text: &str) -> String {
    let path = text.rsplit_once(':').map_or(text, |(path, _)| path);
    format!(
        "the mode is a final `:ro` (read-only) or `:rw` (read-write): `{path}:ro` or `{path}:rw`; \
         a path that contains `:` needs its mode spelled out, e.g. `{text}:rw`"
    )
}

impl FromStr for LayerMount {
    type Err = Error;

    fn from_str(text: &str) -> Result<LayerMount, Error> {
        match split_mount(text) {
            Ok((path, mode)) => Ok(LayerMount { path: PathBuf::from(path), mode }),
            Err(MountSpellingError::EmptyPath) => Err(Error::InvalidValue {
                what: "mount",
                value: text.to_owned(),
                hint: "write `PATH`, `PATH:ro` or `PATH:rw`",
            }),
            Err(MountSpellingError::UnknownMode) => Err(Error::UnknownMountMode {
                mount: text.to_owned(),
                mode: text.rsplit_once(':').map(|(_, mode)| mode.to_owned()).unwrap_or_default(),
                hint: mount_mode_hint(text),
            }),
        }
    }
}

impl FromStr for Publish {
    type Err = Error;

    /// See `crate::publish` for the spellings.
    fn from_str(text: &str) -> Result<Publish, Error> {
        crate::publish::parse(text)
    }
}

impl FromStr for EnvVar {
    type Err = Error;

    fn from_str(text: &str) -> Result<EnvVar, Error> {
        let (name, value) = match text.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (text, None),
        };
        if name.is_empty() || name.contains('\0') {
            return Err(Error::InvalidEnvName { name: name.to_owned() });
        }
        Ok(EnvVar { name: name.to_owned(), value })
    }
}

impl FromStr for Net {
    type Err = Error;

    fn from_str(text: &str) -> Result<Net, Error> {
        match text {
            "on" => Ok(Net::On),
            "off" => Ok(Net::Off),
            _ => Err(Error::InvalidValue {
                what: "network setting",
                value: text.to_owned(),
                hint: "write `on` or `off`",
            }),
        }
    }
}

/// A byte size as users write it: `1073741824`, `512k`, `512m`, `1g` (binary units, any case,
/// an optional trailing `b` or `ib`: `1GiB`).
pub fn parse_size(text: &str) -> Result<u64, Error> {
    let invalid = || Error::InvalidValue {
        what: "size",
        value: text.to_owned(),
        hint: "write a number of bytes with an optional unit: `512m`, `1g`, `2GiB`",
    };
    let lower = text.trim().to_ascii_lowercase();
    let unit_start = lower.find(|c: char| !c.is_ascii_digit()).unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(unit_start);
    let shift = match unit {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(invalid()),
    };
    let number: u64 = digits.parse().map_err(|_| invalid())?;
    number.checked_mul(1u64 << shift).ok_or_else(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show<T: std::fmt::Debug>(result: Result<T, Error>) -> String {
        match result {
            Ok(value) => format!("{value:?}"),
            Err(error) => format!("error: {}", error.to_string().replace('\n', " / ")),
        }
    }

    #[test]
    fn sizes() {
        let ok = [("1024", 1024), ("512k", 512 << 10), ("512m", 512 << 20), ("1g", 1 << 30)];
        for (text, bytes) in ok.into_iter().chain([("2GiB", 2 << 30), ("1Mb", 1 << 20)]) {
            assert_eq!(parse_size(text), Ok(bytes), "{text}");
        }
        for bad in ["", "g", "1.5g", "-1", "1x", "99999999999t"] {
            let error = show(parse_size(bad));
            assert!(error.starts_with(&format!("error: invalid size `{bad}`")), "{error}");
        }
    }

    #[test]
    fn spellings() {
        let mounts = [
            "/data", "/data:ro", "./out:rw", "C:/x", "/a:b:ro", "/x:RO", "./sub:xx", "./sub:",
            ":ro", "",
        ];
        let envs = ["A=1", "TOKEN", "A==b", "EMPTY=", "=x"];
        let nets = ["on", "off", "OFF", "true"];
        let mut out = Vec::new();
        out.extend(
            mounts.iter().map(|m| format!("mount {m:?}: {}", show(m.parse::<LayerMount>()))),
        );
        // Published ports: `crate::publish`'s own tests.
        out.extend(envs.iter().map(|e| format!("env {e:?}: {}", show(e.parse::<EnvVar>()))));
        out.extend(nets.iter().map(|n| format!("net {n:?}: {}", show(n.parse::<Net>()))));
        let expected = [
            r#"mount "/data": LayerMount { path: "/data", mode: None }"#,
            r#"mount "/data:ro": LayerMount { path: "/data", mode: Some(ReadOnly) }"#,
            r#"mount "./out:rw": LayerMount { path: "./out", mode: Some(ReadWrite) }"#,
            r#"mount "C:/x": error: unknown mode `/x` in mount `C:/x` / hint: the mode is a final `:ro` (read-only) or `:rw` (read-write): `C:ro` or `C:rw`; a path that contains `:` needs its mode spelled out, e.g. `C:/x:rw`"#,
            r#"mount "/a:b:ro": LayerMount { path: "/a:b", mode: Some(ReadOnly) }"#,
            r#"mount "/x:RO": error: unknown mode `RO` in mount `/x:RO` / hint: the mode is a final `:ro` (read-only) or `:rw` (read-write): `/x:ro` or `/x:rw`; a path that contains `:` needs its mode spelled out, e.g. `/x:RO:rw`"#,
            r#"mount "./sub:xx": error: unknown mode `xx` in mount `./sub:xx` / hint: the mode is a final `:ro` (read-only) or `:rw` (read-write): `./sub:ro` or `./sub:rw`; a path that contains `:` needs its mode spelled out, e.g. `./sub:xx:rw`"#,
            r#"mount "./sub:": error: unknown mode `` in mount `./sub:` / hint: the mode is a final `:ro` (read-only) or `:rw` (read-write): `./sub:ro` or `./sub:rw`; a path that contains `:` needs its mode spelled out, e.g. `./sub::rw`"#,
            r#"mount ":ro": error: invalid mount `:ro` / hint: write `PATH`, `PATH:ro` or `PATH:rw`"#,
            r#"mount "": error: invalid mount `` / hint: write `PATH`, `PATH:ro` or `PATH:rw`"#,
            r#"env "A=1": EnvVar { name: "A", value: Some("1") }"#,
            r#"env "TOKEN": EnvVar { name: "TOKEN", value: None }"#,
            r#"env "A==b": EnvVar { name: "A", value: Some("=b") }"#,
            r#"env "EMPTY=": EnvVar { name: "EMPTY", value: Some("") }"#,
            r#"env "=x": error: an empty string is not a valid environment variable name / hint: names are non-empty and contain neither `=` nor NUL"#,
            r#"net "on": On"#,
            r#"net "off": Off"#,
            r#"net "OFF": error: invalid network setting `OFF` / hint: write `on` or `off`"#,
            r#"net "true": error: invalid network setting `true` / hint: write `on` or `off`"#,
        ];
        assert_eq!(out, expected);
    }
}
