//! Our own command line as every local user sees it (`/proc/PID/cmdline`, `ps`): once the flags
//! are parsed, the values of `--env NAME=VALUE` are overwritten in place, so that neither this
//! process (a `run` with a long timeout) nor what it forks and leaves running (a native
//! session's monitor and init live for the whole TTL) shows them.
//!
//! The kernel reads a process's command line from its own memory, the range
//! `arg_start..arg_end` of the stack where `execve` put the arguments (fields 48 and 49 of
//! `/proc/self/stat`), whatever the libc. We write the masked arguments over it through
//! `/proc/self/mem` (the process's own, writable memory: no `unsafe`) and pad with NULs; the
//! last byte stays NUL, so the kernel keeps to that range. A value is visible for the few
//! milliseconds before `main` gets here: argv cannot be hidden from the start.

use std::os::unix::fs::FileExt as _;

use sandbox_core::MASK;

/// Pure: the argument area `region` (NUL-terminated arguments) with the value of every
/// `--env NAME=VALUE` and `--env=NAME=VALUE` masked, padded with NULs to the same length;
/// `None` when nothing needs masking. Every `--env` counts, after `--` too: masking a script's
/// argument in our own command line changes nothing for the script, which got it already.
pub(crate) fn masked(region: &[u8]) -> Option<Vec<u8>> {
    if region.last() != Some(&0) {
        return None;
    }
    let args: Vec<&[u8]> = region[..region.len() - 1].split(|b| *b == 0).collect();
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(args.len());
    let mut changed = false;
    let mut after_env = false;
    for arg in args {
        let (prefix, assignment) = match arg.strip_prefix(b"--env=") {
            Some(rest) => (&b"--env="[..], rest),
            None if after_env => (&b""[..], arg),
            None => (&b""[..], &b""[..]),
        };
        after_env = arg == b"--env";
        match assignment.iter().position(|b| *b == b'=') {
            Some(eq) if eq + 1 < assignment.len() => {
                let value = &assignment[eq + 1..];
                // Never longer than the value, so the area can hold the result.
                let mask = &MASK.as_bytes()[..MASK.len().min(value.len())];
                out.push([prefix, &assignment[..=eq], mask].concat());
                changed = true;
            }
            _ => out.push(arg.to_vec()),
        }
    }
    if !changed {
        return None;
    }
    let mut bytes = out.join(&0u8);
    bytes.resize(region.len(), 0);
    Some(bytes)
}

/// Pure: `arg_start` and `arg_end` from the text of `/proc/self/stat` (fields 48 and 49, after
/// the command name in parentheses, which may itself hold spaces and parentheses).
pub(crate) fn arg_range(stat: &str) -> Option<(u64, u64)> {
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts with field 3 (the state).
    let mut fields = rest.split_whitespace().skip(48 - 3);
    let start = fields.next()?.parse().ok()?;
    let end = fields.next()?.parse().ok()?;
    (start < end).then_some((start, end))
}

/// Masks the `--env` values in this process's command line (see the module header). Best
/// effort: without `/proc` nothing can be done, and nothing else depends on it.
pub(crate) fn mask_env_values() {
    let Some((start, end)) =
        std::fs::read_to_string("/proc/self/stat").ok().as_deref().and_then(arg_range)
    else {
        return;
    };
    let Ok(mem) = std::fs::OpenOptions::new().read(true).write(true).open("/proc/self/mem") else {
        return;
    };
    let Ok(len) = usize::try_from(end - start) else { return };
    let mut region = vec![0u8; len];
    if mem.read_exact_at(&mut region, start).is_err() {
        return;
    }
    // Only the area as `execve` left it: our own arguments, in order.
    let ours: Vec<u8> = std::env::args_os()
        .flat_map(|a| {
            let mut bytes = std::os::unix::ffi::OsStringExt::into_vec(a);
            bytes.push(0);
            bytes
        })
        .collect();
    if ours != region {
        return;
    }
    if let Some(masked) = masked(&region) {
        let _ = mem.write_all_at(&masked, start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(args: &[&str]) -> String {
        let region: Vec<u8> = args.iter().flat_map(|a| [a.as_bytes(), b"\0"].concat()).collect();
        match masked(&region) {
            None => "unchanged".to_owned(),
            Some(bytes) => {
                assert_eq!(bytes.len(), region.len());
                String::from_utf8_lossy(&bytes).trim_end_matches('\0').replace('\0', " ")
            }
        }
    }

    #[test]
    fn env_values_are_masked_and_nothing_else() {
        let rows = [
            &[
                "python-sandbox",
                "session",
                "start",
                "--env",
                "API_TOKEN=supersecret",
                "--ttl",
                "5m",
            ][..],
            &["python-sandbox", "run", "--env=DB_PASSWORD=hunter22", "--env", "PLAIN", "x.py"],
            &["python-sandbox", "run", "--env", "A=1", "--env", "B=", "--env", "C=a=b=c", "x.py"],
            &["python-sandbox", "run", "x.py", "--", "--env", "K=script-arg"],
            &["python-sandbox", "run", "--mount", "a=b", "x.py", "--", "NAME=VALUE"],
            &["python-sandbox", "run", "--env"],
        ];
        let out: Vec<String> =
            rows.iter().map(|args| format!("{} => {}", args.join(" "), show(args))).collect();
        insta::assert_snapshot!(out.join("\n"), @r"
        python-sandbox session start --env API_TOKEN=supersecret --ttl 5m => python-sandbox session start --env API_TOKEN=**** --ttl 5m
        python-sandbox run --env=DB_PASSWORD=hunter22 --env PLAIN x.py => python-sandbox run --env=DB_PASSWORD=**** --env PLAIN x.py
        python-sandbox run --env A=1 --env B= --env C=a=b=c x.py => python-sandbox run --env A=* --env B= --env C=**** x.py
        python-sandbox run x.py -- --env K=script-arg => python-sandbox run x.py -- --env K=****
        python-sandbox run --mount a=b x.py -- NAME=VALUE => unchanged
        python-sandbox run --env => unchanged
        ");
    }

    #[test]
    fn the_arg_range_is_read_past_a_name_with_parentheses() {
        let tail: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
        let stat = format!("1234 (a) (b c) {}", tail.join(" "));
        assert_eq!(arg_range(&stat), Some((48, 49)));
        assert_eq!(arg_range("1234 (x) S 1"), None);
    }

    /// The area read from this very process is what the kernel shows as its command line.
    #[test]
    fn the_arg_range_of_this_process_holds_its_arguments() {
        let stat = std::fs::read_to_string("/proc/self/stat").expect("stat");
        let (start, end) = arg_range(&stat).expect("arg range");
        let mem = std::fs::File::open("/proc/self/mem").expect("mem");
        let mut region = vec![0u8; usize::try_from(end - start).expect("len")];
        mem.read_exact_at(&mut region, start).expect("read the area");
        assert_eq!(region, std::fs::read("/proc/self/cmdline").expect("cmdline"));
    }
}
