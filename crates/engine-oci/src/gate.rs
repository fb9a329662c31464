//! The one shell in front of a container's command, which holds it until the host has done
//! what must happen before any code of the script runs, then `exec`s it (so the shell is gone
//! and the arguments stay positional, never re-parsed):
//!
//! * **go line** (runs, see `crate::verify`): reads one line from stdin (the shell's `read`
//!   takes exactly that line and leaves the rest to the script) and goes on only if it is
//!   [`GO`], which the host writes after checking the mounts;
//! * **network wall** (every container with a network, see `crate::netwall`): the
//!   unreachable link-local route, the wall's last, must be in the container's namespace.
//!   Behind a go line one check suffices (the host walls before it writes the line); without
//!   one (prepare, sessions) the shell waits for it, 20 s at most. Either way the container checks the wall
//!   itself, so a script never starts without it whatever happens to the CLI in between;
//! * **merged output**: stderr joined to stdout, for callers that need the order between them.
//!
//! A failed gate exits 125 before the command starts.

/// The go line the host writes once its checks passed.
pub(crate) const GO: &[u8] = b"go\n";

const GO_LINE: &str = r#"read -r go && [ "$go" = go ] || exit 125; "#;

/// `169.254.0.0/16` as an unreachable route in `/proc/net/route` (interface `*`, destination
/// little-endian).
const ROUTE: &str = "grep -q '^[*].0000FEA9.' /proc/net/route";

/// Pure: `cmd` behind the gate. `pwd`: the plan's environment sets `PWD` (otherwise the shell
/// would export one of its own, and the command's environment must be exactly the plan's).
pub(crate) fn command(cmd: &[String], go: bool, net: bool, merge: bool, pwd: bool) -> Vec<String> {
    if !go && !net && !merge {
        return cmd.to_vec();
    }
    let mut script = String::new();
    if go {
        script.push_str(GO_LINE);
    }
    if net && go {
        script.push_str(&format!(
            "{ROUTE} || {{ echo 'python-sandbox: the network wall is not up' >&2; exit 125; }}; "
        ));
    } else if net {
        script.push_str(&format!(
            "n=0; until {ROUTE}; do n=$((n+1)); if [ \"$n\" -gt 4000 ]; then \
             echo 'python-sandbox: the network wall did not come up' >&2; exit 125; fi; \
             sleep 0.005; done; "
        ));
    }
    if !pwd {
        script.push_str("unset PWD; ");
    }
    script.push_str("exec \"$@\"");
    if merge {
        script.push_str(" 2>&1");
    }
    let mut out = vec!["sh".to_owned(), "-c".to_owned(), script, "gate".to_owned()];
    out.extend(cmd.iter().cloned());
    out
}
