//! A small, pure reader for tar archives (ustar, pax `path` records, GNU long names), enough
//! for [`crate::FakeSandbox`] to unpack [`crate::PutSource::Tar`] without IO or dependencies.

use crate::Error;

const BLOCK: usize = 512;

/// One regular file or directory from an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TarEntry {
    File { path: String, contents: Vec<u8> },
    Dir { path: String },
}

/// Reads all entries. Links and device nodes are refused: the fake filesystem has no such
/// things, and silently dropping them would make tests lie.
pub(crate) fn read(archive: &[u8]) -> Result<Vec<TarEntry>, Error> {
    let mut entries = Vec::new();
    let mut offset = 0;
    let mut long_name: Option<String> = None;
    while offset + BLOCK <= archive.len() {
        let header = &archive[offset..offset + BLOCK];
        if header.iter().all(|&byte| byte == 0) {
            return Ok(entries);
        }
        verify_checksum(header, offset)?;
        let size = usize::try_from(number(&header[124..136], offset)?)
            .map_err(|_| invalid(format!("entry at byte {offset} is too large")))?;
        let data_start = offset + BLOCK;
        let data_end = data_start
            .checked_add(size)
            .filter(|end| *end <= archive.len())
            .ok_or_else(|| invalid(format!("entry at byte {offset} runs past the end")))?;
        let data = &archive[data_start..data_end];
        offset = data_start + size.div_ceil(BLOCK) * BLOCK;

        let path = match long_name.take() {
            Some(name) => name,
            None => header_path(header),
        };
        match header[156] {
            b'0' | 0 | b'7' => entries.push(TarEntry::File { path, contents: data.to_vec() }),
            b'5' => entries.push(TarEntry::Dir { path }),
            b'x' => long_name = pax_path(data, offset)?,
            b'L' => long_name = Some(text(data)),
            b'g' => {}
            b'1' | b'2' => {
                return Err(Error::Unsupported {
                    what: format!("link entry `{path}` in a tar archive"),
                    by: "the fake sandbox".to_owned(),
                    hint: "put regular files and directories only".to_owned(),
                });
            }
            other => {
                return Err(invalid(format!(
                    "entry `{path}` has unsupported type `{}`",
                    char::from(other).escape_default()
                )));
            }
        }
    }
    if offset == archive.len() {
        Ok(entries)
    } else {
        Err(invalid(format!("truncated header at byte {offset}")))
    }
}

fn invalid(reason: String) -> Error {
    Error::InvalidTar { reason }
}

fn verify_checksum(header: &[u8], offset: usize) -> Result<(), Error> {
    let expected = number(&header[148..156], offset)?;
    let actual: u64 = header
        .iter()
        .enumerate()
        .map(|(i, &byte)| if (148..156).contains(&i) { u64::from(b' ') } else { u64::from(byte) })
        .sum();
    if expected == actual {
        Ok(())
    } else {
        Err(invalid(format!("bad header checksum at byte {offset}")))
    }
}

/// A numeric field: NUL/space padded octal, or GNU base-256 when the top bit is set.
fn number(field: &[u8], offset: usize) -> Result<u64, Error> {
    if field.first().is_some_and(|&byte| byte & 0x80 != 0) {
        let mut value: u64 = u64::from(field[0] & 0x7f);
        for &byte in &field[1..] {
            value = value
                .checked_mul(256)
                .and_then(|value| value.checked_add(u64::from(byte)))
                .ok_or_else(|| invalid(format!("number overflows at byte {offset}")))?;
        }
        return Ok(value);
    }
    let digits: Vec<u8> = field
        .iter()
        .copied()
        .skip_while(|&byte| byte == b' ')
        .take_while(|&byte| byte != 0 && byte != b' ')
        .collect();
    if digits.is_empty() {
        return Ok(0);
    }
    let digits = std::str::from_utf8(&digits)
        .map_err(|_| invalid(format!("bad number at byte {offset}")))?;
    u64::from_str_radix(digits, 8).map_err(|_| invalid(format!("bad number at byte {offset}")))
}

fn text(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&byte| byte == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

fn header_path(header: &[u8]) -> String {
    let name = text(&header[..100]);
    // Only POSIX ustar (`ustar\0`) has a prefix field; old GNU headers (`ustar  `) keep
    // access and change times there.
    let is_ustar = &header[257..263] == b"ustar\0";
    let prefix = if is_ustar { text(&header[345..500]) } else { String::new() };
    if prefix.is_empty() { name } else { format!("{prefix}/{name}") }
}

/// The `path` record of a pax extended header, if any. Records are `LEN key=value\n`.
fn pax_path(data: &[u8], offset: usize) -> Result<Option<String>, Error> {
    let mut rest = data;
    let mut path = None;
    while !rest.is_empty() {
        let space = rest
            .iter()
            .position(|&byte| byte == b' ')
            .ok_or_else(|| invalid(format!("bad pax record before byte {offset}")))?;
        let len: usize = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|len| len.parse().ok())
            .filter(|&len| len > space + 1 && len <= rest.len())
            .ok_or_else(|| invalid(format!("bad pax record length before byte {offset}")))?;
        let record = &rest[space + 1..len];
        let record = record.strip_suffix(b"\n").unwrap_or(record);
        if let Some(value) = record.strip_prefix(b"path=") {
            path = Some(String::from_utf8_lossy(value).into_owned());
        }
        rest = &rest[len..];
    }
    Ok(path)
}
