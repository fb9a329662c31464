//! The `note:` for a script that failed because its sandbox has no network. It never guesses:
//! it is given only when the run's network is off, the script failed, and the script's own
//! output (read line by line as it passes through the CLI, `files::Watch`) shows one of the
//! errors a name lookup or a connect gives without a route. A refused connection is not one:
//! loopback works with the network off, so a refusal there is the script's own business.

/// Pure: whether `line` of a script's output is an error Python (or a library over it) gives
/// for a name lookup or a connect in a sandbox without a network.
pub(crate) fn symptom(line: &str) -> bool {
    const SYMPTOMS: [&str; 6] = [
        // getaddrinfo's EAI_AGAIN: no nameserver answers (none is reachable).
        "Temporary failure in name resolution",
        // EAI_NONAME and EAI_NODATA: what some resolvers say when no nameserver is configured.
        "Name or service not known",
        "No address associated with hostname",
        // connect(2) without a route: ENETUNREACH, EHOSTUNREACH.
        "Network is unreachable",
        "No route to host",
        // `socket.gaierror` raised with another message.
        "gaierror",
    ];
    SYMPTOMS.iter().any(|s| line.contains(s))
}

/// The note itself.
pub(crate) const NOTE: &str =
    "the network is off in this sandbox, so the script's name lookups and connections fail";

/// Where the run's network was turned off, for the hint that turns it on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Where {
    /// `run`; `flag`: `--net off` was given (which beats the script's table).
    Run { flag: bool },
    /// The MCP server's `run_script`.
    RunTool,
    /// `session run`: the session was started without a network.
    Session,
    /// The MCP server's `session_run`.
    SessionTool,
}

/// Pure: how to turn the network on, for the `hint:` under [`NOTE`].
pub(crate) fn hint(place: Where) -> &'static str {
    match place {
        Where::Run { flag: true } => {
            "to give it a network, run it with `--net on` instead of `--net off`"
        }
        Where::Run { flag: false } => {
            "to give it a network, run it with `--net on`, or set `net = \"on\"` in its `[tool.python-sandbox]` table"
        }
        Where::RunTool => "to give it a network, repeat the call with `net: \"on\"`",
        Where::Session => {
            "the session was started with the network off: start one with `python-sandbox session start --net on`"
        }
        Where::SessionTool => {
            "the session was started with the network off: start one with `session_start` and `net: \"on\"`"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last lines of real failures in a sandbox with the network off (native and bwrap,
    /// Python 3.11), and of libraries over them; and lines that are not the network's.
    #[test]
    fn symptoms_are_the_errors_of_a_lookup_or_connect_without_a_network() {
        for line in [
            "socket.gaierror: [Errno -3] Temporary failure in name resolution",
            "urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>",
            "OSError: [Errno 101] Network is unreachable",
            "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='pypi.org', port=443): Max retries exceeded with url: / (Caused by NameResolutionError(\"<urllib3.connection.HTTPSConnection object at 0x7f>: Failed to resolve 'pypi.org' ([Errno -3] Temporary failure in name resolution)\"))",
            "httpx.ConnectError: [Errno -2] Name or service not known",
            "OSError: [Errno 113] No route to host",
        ] {
            assert!(symptom(line), "{line}");
        }
        for line in [
            "ConnectionRefusedError: [Errno 111] Connection refused",
            "ZeroDivisionError: division by zero",
            "TimeoutError: timed out",
            "",
        ] {
            assert!(!symptom(line), "{line}");
        }
    }

    #[test]
    fn each_hint_names_the_way_to_turn_the_network_on_where_it_was_turned_off() {
        assert!(hint(Where::Run { flag: true }).contains("instead of `--net off`"));
        assert!(hint(Where::Run { flag: false }).contains("`net = \"on\"`"));
        assert!(hint(Where::RunTool).contains("`net: \"on\"`"));
        assert!(hint(Where::Session).contains("session start --net on"));
        assert!(hint(Where::SessionTool).contains("`session_start`"));
    }
}

/// Pure: the `note:` and `hint:` for what a run's network allowlist refused (`None`: nothing).
pub(crate) fn allowlist_note(
    refused: &[sandbox_core::NetRefused],
    in_session: bool,
) -> Option<(String, String)> {
    if refused.is_empty() {
        return None;
    }
    const SHOWN: usize = 5;
    let mut shown: Vec<String> = refused
        .iter()
        .take(SHOWN)
        .map(|r| sandbox_core::NetRefused { would_allow: None, ..r.clone() }.to_string())
        .collect();
    if refused.len() > SHOWN {
        shown.push(format!("and {} more", refused.len() - SHOWN));
    }
    let note = format!("the network allowlist refused: {}", shown.join("; "));
    let mut wanted: Vec<String> =
        refused.iter().filter_map(|r| r.would_allow.as_ref()).map(|p| format!("\"{p}\"")).collect();
    wanted.dedup();
    if wanted.len() > SHOWN {
        wanted.truncate(SHOWN);
        wanted.push("…".to_owned());
    }
    let hint = if wanted.is_empty() {
        "a connection keeps to the one listed host it named, and a flow without a listed name is refused: list an address for what has none".to_owned()
    } else if in_session {
        // The session's list holds for every script in it: only a new session widens it.
        format!(
            "if the script needs it, start a session with {} added to its `--net`",
            wanted.join(", ")
        )
    } else {
        format!(
            "if the script needs it, add {} to `net` (or pass them with `--net`)",
            wanted.join(", ")
        )
    };
    Some((note, hint))
}

#[cfg(test)]
mod allowlist_tests {
    use sandbox_core::{Allow, NetRefused};

    #[test]
    fn a_refusal_names_the_host_and_the_pattern_that_would_allow_it() {
        assert_eq!(super::allowlist_note(&[], false), None);
        let refused = [
            Allow::lookup_refused("evil.example"),
            NetRefused {
                host: "registry.npmjs.org".into(),
                port: Some(443),
                reason: "not in the list".into(),
                would_allow: Some("registry.npmjs.org:443".into()),
            },
        ];
        let (note, hint) = super::allowlist_note(&refused, false).expect("note");
        insta::assert_snapshot!(format!("note: {note}\nhint: {hint}"), @r#"
        note: the network allowlist refused: evil.example: not in the list (no DNS answer); registry.npmjs.org:443: not in the list
        hint: if the script needs it, add "evil.example", "registry.npmjs.org:443" to `net` (or pass them with `--net`)
        "#);
    }
}
