//! The Kubernetes exec channel protocol, pure: `v4.channel.k8s.io` and `v5.channel.k8s.io`
//! WebSocket messages. Every binary message starts with a channel byte: 0 stdin, 1 stdout,
//! 2 stderr, 3 the error channel (a `metav1.Status` JSON once the command ended), 4 resize
//! (`{"Width": W, "Height": H}`). v5 adds the close message `[255, channel]`, the only way to
//! end one direction (stdin) without ending the socket; v4 has none, and closing the socket
//! there loses the output still in flight (seen live on a 1.20 cluster, kube-rs#1689).
//!
//! Everything that arrives is from the cluster (and the pod's code behind it): unknown
//! channels are ignored, not trusted, and a status is read only up to [`MAX_STATUS`].

/// The subprotocols a client offers, most preferred first (one header value, comma separated:
/// apiservers read only the first `Sec-WebSocket-Protocol` header).
pub const OFFERED: &str = "v5.channel.k8s.io, v4.channel.k8s.io";

/// The largest status message taken from the error channel; a kubelet's is a few hundred bytes.
pub const MAX_STATUS: usize = 64 << 10;

/// The channel byte of stdin.
pub const STDIN: u8 = 0;
/// The channel byte of stdout.
pub const STDOUT: u8 = 1;
/// The channel byte of stderr.
pub const STDERR: u8 = 2;
/// The channel byte of the status (error) channel.
pub const STATUS: u8 = 3;
/// The channel byte of terminal resizes.
pub const RESIZE: u8 = 4;
/// The first byte of a v5 close message; the second names the channel closed.
pub const CLOSE: u8 = 255;

/// The channel protocol the server picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `v4.channel.k8s.io`: no way to close stdin alone.
    V4,
    /// `v5.channel.k8s.io`: stdin can be closed with `[255, 0]`.
    V5,
}

impl Protocol {
    /// Pure: the protocol a server's `Sec-WebSocket-Protocol` answer names; `None` for
    /// anything else (`base64.channel.k8s.io`, older `channel.k8s.io`, nothing).
    pub fn from_header(value: &str) -> Option<Protocol> {
        match value.trim() {
            "v4.channel.k8s.io" => Some(Protocol::V4),
            "v5.channel.k8s.io" => Some(Protocol::V5),
            _ => None,
        }
    }

    /// The protocol's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::V4 => "v4.channel.k8s.io",
            Protocol::V5 => "v5.channel.k8s.io",
        }
    }

    /// Pure: the protocol a server picks from a client's offer (what a kubelet does: the
    /// first offered one it supports), for test servers.
    pub fn negotiate(offer: &str, supported: &[Protocol]) -> Option<Protocol> {
        offer.split(',').filter_map(Protocol::from_header).find(|p| supported.contains(p))
    }
}

/// One message from the server, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Incoming<'a> {
    /// Bytes of the command's stdout (possibly empty: servers open each channel with an
    /// empty message).
    Stdout(&'a [u8]),
    /// Bytes of the command's stderr.
    Stderr(&'a [u8]),
    /// The status JSON (see [`parse_status`]).
    Status(&'a [u8]),
    /// v5: the server closed this channel.
    Closed(u8),
    /// Nothing we read: an empty message or status, stdin or resize echoed, an unknown
    /// channel.
    Ignored,
}

/// Pure: what a binary message from the server means.
pub fn decode(message: &[u8]) -> Incoming<'_> {
    match message {
        [STDOUT, data @ ..] => Incoming::Stdout(data),
        [STDERR, data @ ..] => Incoming::Stderr(data),
        // Servers open every channel with an empty message; a status is never empty.
        [STATUS, data @ ..] if !data.is_empty() => Incoming::Status(data),
        [CLOSE, channel] => Incoming::Closed(*channel),
        _ => Incoming::Ignored,
    }
}

/// Pure: one stdin message carrying `data`.
pub fn stdin(data: &[u8]) -> Vec<u8> {
    let mut message = Vec::with_capacity(data.len() + 1);
    message.push(STDIN);
    message.extend_from_slice(data);
    message
}

/// Pure: the message that closes stdin; `None` on v4, which has no such message.
pub fn close_stdin(protocol: Protocol) -> Option<Vec<u8>> {
    (protocol == Protocol::V5).then(|| vec![CLOSE, STDIN])
}

/// Pure: the resize message for a terminal of `cols` x `rows`.
pub fn resize(cols: u16, rows: u16) -> Vec<u8> {
    let mut message = vec![RESIZE];
    message.extend_from_slice(format!(r#"{{"Width":{cols},"Height":{rows}}}"#).as_bytes());
    message
}

/// How the command ended, as the status channel says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitStatus {
    /// It exited with this code (`Success` is 0; a `NonZeroExitCode` carries its code).
    Exited(i32),
    /// The exec failed without an exit code (container not found, the runtime's error):
    /// the status message, at most a few hundred characters.
    Failed(String),
}

/// Pure: the exit status a `metav1.Status` on the error channel describes. `Success` is 0;
/// `Failure` with reason `NonZeroExitCode` and a cause `{reason: ExitCode, message: "7"}` is 7
/// (a kubelet's exact format); every other failure keeps its message. A status over
/// [`MAX_STATUS`], not JSON, or an exit code outside 0..=255 is `Err` (the problem).
pub fn parse_status(json: &[u8]) -> Result<ExitStatus, String> {
    if json.len() > MAX_STATUS {
        return Err(format!("a status of {} bytes (at most {MAX_STATUS} are read)", json.len()));
    }
    let shown = || String::from_utf8_lossy(json).chars().take(200).collect::<String>();
    let value: serde_json::Value = serde_json::from_slice(json)
        .map_err(|_| format!("a status that is not JSON `{}`", shown()))?;
    let field = |name: &str| value.get(name).and_then(serde_json::Value::as_str);
    match field("status") {
        Some("Success") => return Ok(ExitStatus::Exited(0)),
        Some("Failure") => {}
        _ => return Err(format!("a status without `Success` or `Failure` `{}`", shown())),
    }
    if field("reason") == Some("NonZeroExitCode") {
        let causes = value.pointer("/details/causes").and_then(serde_json::Value::as_array);
        let code = causes.into_iter().flatten().find_map(|cause| {
            // The kubelet sets `reason`; some servers in the wild say `type`.
            let kind = cause.get("reason").or_else(|| cause.get("type"))?.as_str()?;
            (kind == "ExitCode").then(|| cause.get("message")?.as_str())?
        });
        let Some(code) = code else {
            return Err(format!("a non-zero exit status without its code `{}`", shown()));
        };
        return match code.trim().parse::<i32>() {
            Ok(code) if (0..=255).contains(&code) => Ok(ExitStatus::Exited(code)),
            _ => Err(format!("an exit code `{}`", code.chars().take(40).collect::<String>())),
        };
    }
    let message = field("message").unwrap_or("no message").chars().take(500).collect::<String>();
    Ok(ExitStatus::Failed(message))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn negotiation_prefers_the_first_offered_supported_protocol() {
        assert_eq!(Protocol::negotiate(OFFERED, &[Protocol::V4, Protocol::V5]), Some(Protocol::V5));
        assert_eq!(Protocol::negotiate(OFFERED, &[Protocol::V4]), Some(Protocol::V4));
        assert_eq!(Protocol::negotiate("base64.channel.k8s.io", &[Protocol::V4]), None);
        assert_eq!(Protocol::from_header(" v4.channel.k8s.io "), Some(Protocol::V4));
        assert_eq!(Protocol::from_header("channel.k8s.io"), None);
        assert_eq!(Protocol::from_header(Protocol::V5.name()), Some(Protocol::V5));
    }

    #[test]
    fn messages_decode_by_channel() {
        assert_eq!(decode(b"\x01hi"), Incoming::Stdout(b"hi"));
        assert_eq!(decode(b"\x02"), Incoming::Stderr(b""));
        assert_eq!(decode(b"\x03{}"), Incoming::Status(b"{}"));
        assert_eq!(decode(&[255, 1]), Incoming::Closed(1));
        for ignored in [&b""[..], b"\x03", b"\x00echo", b"\x04{}", b"\x09x", &[255], &[255, 0, 0]] {
            assert_eq!(decode(ignored), Incoming::Ignored, "{ignored:?}");
        }
    }

    #[test]
    fn outgoing_messages() {
        assert_eq!(stdin(b"ab"), b"\x00ab");
        assert_eq!(close_stdin(Protocol::V5), Some(vec![255, 0]));
        assert_eq!(close_stdin(Protocol::V4), None);
        assert_eq!(
            resize(80, 24),
            br#"{"Width":80,"Height":24}"#.iter().fold(vec![4], |mut v, b| {
                v.push(*b);
                v
            })
        );
    }

    #[test]
    fn statuses_as_a_kubelet_sends_them() {
        assert_eq!(
            parse_status(br#"{"metadata":{},"status":"Success"}"#),
            Ok(ExitStatus::Exited(0))
        );
        let seven = br#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 7], exit code 7","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"7"}]}}"#;
        assert_eq!(parse_status(seven), Ok(ExitStatus::Exited(7)));
        let typed = br#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"type":"ExitCode","message":"137"}]}}"#;
        assert_eq!(parse_status(typed), Ok(ExitStatus::Exited(137)));
        let failed = br#"{"status":"Failure","message":"container not found (\"main\")","reason":"InternalError"}"#;
        assert_eq!(
            parse_status(failed),
            Ok(ExitStatus::Failed("container not found (\"main\")".to_owned()))
        );
    }

    #[test]
    fn hostile_statuses_are_named_not_trusted() {
        let cases: [&[u8]; 7] = [
            b"",
            b"nope",
            br#"{"status":"Maybe"}"#,
            br#"{"status":"Failure","reason":"NonZeroExitCode"}"#,
            br#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"-1"}]}}"#,
            br#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"4294967296"}]}}"#,
            br#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":7}]}}"#,
        ];
        for case in cases {
            assert!(parse_status(case).is_err(), "{}", String::from_utf8_lossy(case));
        }
        let huge = format!(r#"{{"status":"Failure","message":"{}"}}"#, "x".repeat(MAX_STATUS));
        let problem = parse_status(huge.as_bytes()).expect_err("over the cap");
        assert!(problem.contains("at most 65536"), "{problem}");
        let long = format!(r#"{{"status":"Failure","message":"{}"}}"#, "y".repeat(10_000));
        let Ok(ExitStatus::Failed(message)) = parse_status(long.as_bytes()) else {
            panic!("a long message is still a failure")
        };
        assert_eq!(message.len(), 500);
    }

    proptest! {
        #[test]
        fn stdin_round_trips_and_nothing_panics(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let message = stdin(&data);
            prop_assert_eq!(message[0], STDIN);
            prop_assert_eq!(&message[1..], &data[..]);
            let _ = decode(&data);
            let _ = parse_status(&data);
        }

        #[test]
        fn exit_codes_round_trip(code in 0i32..=255) {
            let status = format!(
                r#"{{"status":"Failure","reason":"NonZeroExitCode","details":{{"causes":[{{"reason":"ExitCode","message":"{code}"}}]}}}}"#
            );
            prop_assert_eq!(parse_status(status.as_bytes()), Ok(ExitStatus::Exited(code)));
        }

        #[test]
        fn output_channels_carry_any_bytes(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut message = vec![STDOUT];
            message.extend_from_slice(&data);
            prop_assert_eq!(decode(&message), Incoming::Stdout(&data));
            message[0] = STDERR;
            prop_assert_eq!(decode(&message), Incoming::Stderr(&data));
        }
    }
}
