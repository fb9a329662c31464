//! A local stand-in for the apiserver's exec endpoint: plain-HTTP WebSocket upgrades speaking
//! `v4.channel.k8s.io` and/or `v5.channel.k8s.io` as a kubelet does (every channel opened
//! with an empty message, stdout 1, stderr 2, the `metav1.Status` on 3, resizes on 4, v5's
//! `[255, 0]` closing stdin, v4 ending stdin only with the socket), driving a real local
//! process for the `command` parameters of the request. Every request URI is recorded so
//! tests can check what went over the wire. Resize messages are read and ignored, as without a tty.
//! A `.../portforward?ports=N` upgrade is served as the kubelet's port-forward is: channel 0
//! data and 1 errors of the (one) port, each opened with the port as two little-endian bytes,
//! the data piped to a real TCP connection to `127.0.0.1:N` and the socket closed when it ends.

use std::sync::{Arc, Mutex};

use engine_k8s::channel::{self, Protocol};
use futures_util::{SinkExt as _, StreamExt as _};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};

/// A running fake: its URL, and what it saw.
pub(crate) struct Kubelet {
    url: String,
    pub(crate) uris: Arc<Mutex<Vec<String>>>,
}

impl Kubelet {
    /// Serves until the test's runtime ends, offering only `supported`.
    pub(crate) async fn start(supported: &'static [Protocol]) -> Kubelet {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let uris = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&uris);
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(serve(tcp, supported, Arc::clone(&seen)));
            }
        });
        Kubelet { url, uris }
    }

    /// A kube client for this server.
    pub(crate) fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url.parse().expect("url"));
        kube::Client::try_from(config).expect("client")
    }
}

fn decode_query(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).expect("ascii");
                out.push(u8::from_str_radix(hex, 16).expect("hex"));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).expect("utf-8")
}

async fn serve(
    tcp: tokio::net::TcpStream,
    supported: &'static [Protocol],
    seen: Arc<Mutex<Vec<String>>>,
) {
    let mut uri = String::new();
    let mut picked = None;
    // tungstenite's callback type fixes the size of its refusal.
    #[allow(clippy::result_large_err)]
    let callback = |request: &Request, mut response: Response| {
        uri = request.uri().to_string();
        let offer = request
            .headers()
            .get("sec-websocket-protocol")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let Some(protocol) = Protocol::negotiate(offer, supported) else {
            let mut refusal = ErrorResponse::new(Some("no supported protocol".to_owned()));
            *refusal.status_mut() = http::StatusCode::BAD_REQUEST;
            return Err(refusal);
        };
        picked = Some(protocol);
        response
            .headers_mut()
            .insert("sec-websocket-protocol", protocol.name().parse().expect("header"));
        Ok(response)
    };
    let Ok(socket) = tokio_tungstenite::accept_hdr_async(tcp, callback).await else { return };
    seen.lock().expect("lock").push(uri.clone());
    let Some(protocol) = picked else { return };
    if uri.split('?').next().is_some_and(|path| path.ends_with("/portforward")) {
        return forward(socket, &uri).await;
    }
    let query = uri.split_once('?').map(|(_, q)| q).unwrap_or_default();
    let mut argv = Vec::new();
    let mut want_stdin = false;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "command" => argv.push(decode_query(value)),
            "stdin" => want_stdin = value == "true",
            _ => {}
        }
    }
    // `python3` on this machine's PATH is a slow shim; the real interpreter is the same.
    if argv.first().is_some_and(|a| a == "python3")
        && std::path::Path::new("/usr/bin/python3.11").exists()
    {
        argv[0] = "/usr/bin/python3.11".to_owned();
    }
    let (mut sink, mut stream) = socket.split();
    let (out_tx, mut out_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let writer = tokio::spawn(async move {
        while let Some(message) = out_rx.recv().await {
            if sink.send(Message::binary(message)).await.is_err() {
                return;
            }
        }
        let _ = sink.close().await;
    });
    for opened in [channel::STDOUT, channel::STDERR, channel::STATUS] {
        let _ = out_tx.send(vec![opened]).await;
    }
    let Some(program) = argv.first() else { return };
    let mut command = tokio::process::Command::new(program);
    command
        .args(&argv[1..])
        .stdin(if want_stdin { std::process::Stdio::piped() } else { std::process::Stdio::null() })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let status = format!(
                r#"{{"status":"Failure","message":"exec failed: {e}","reason":"InternalError"}}"#
            );
            let _ = out_tx.send([&[channel::STATUS][..], status.as_bytes()].concat()).await;
            drop(out_tx);
            let _ = writer.await;
            return;
        }
    };
    let mut stdin = child.stdin.take();
    // The client's side: stdin written as it comes (a slow reader holds the socket back,
    // as a kubelet's pipe does), closed by v5's close message or the socket's end.
    tokio::spawn(async move {
        while let Some(Ok(message)) = stream.next().await {
            let Message::Binary(bytes) = message else { continue };
            match &bytes[..] {
                [channel::STDIN, data @ ..] => {
                    if let Some(pipe) = stdin.as_mut()
                        && pipe.write_all(data).await.is_err()
                    {
                        stdin = None;
                    }
                }
                [channel::CLOSE, channel::STDIN] if protocol == Protocol::V5 => stdin = None,
                // Resizes (channel 4) change nothing without a tty; the agent's pty has its own.
                _ => {}
            }
        }
    });
    let pump = |mut pipe: Box<dyn tokio::io::AsyncRead + Unpin + Send>, tag: u8| {
        let out = out_tx.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 32 << 10];
            loop {
                match pipe.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        let mut message = vec![tag];
                        message.extend_from_slice(&buf[..n]);
                        if out.send(message).await.is_err() {
                            return;
                        }
                    }
                }
            }
        })
    };
    let stdout = pump(Box::new(child.stdout.take().expect("stdout")), channel::STDOUT);
    let stderr = pump(Box::new(child.stderr.take().expect("stderr")), channel::STDERR);
    let _ = stdout.await;
    let _ = stderr.await;
    let code = child.wait().await.ok().and_then(|s| s.code()).unwrap_or(137);
    let status = if code == 0 {
        r#"{"metadata":{},"status":"Success"}"#.to_owned()
    } else {
        format!(
            r#"{{"metadata":{{}},"status":"Failure","message":"command terminated with non-zero exit code: exit code {code}","reason":"NonZeroExitCode","details":{{"causes":[{{"reason":"ExitCode","message":"{code}"}}]}}}}"#
        )
    };
    let _ = out_tx.send([&[channel::STATUS][..], status.as_bytes()].concat()).await;
    drop(out_tx);
    let _ = writer.await;
}

/// One port-forward connection: the port's two channels opened, then bytes both ways between
/// channel 0 and a TCP connection to the local port, an error on channel 1 if none answers.
async fn forward(socket: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>, uri: &str) {
    let query = uri.split_once('?').map(|(_, q)| q).unwrap_or_default();
    let port: u16 = query
        .split('&')
        .find_map(|pair| pair.strip_prefix("ports="))
        .map(decode_query)
        .and_then(|ports| ports.split(',').next().and_then(|p| p.parse().ok()))
        .expect("one port asked for");
    let (mut sink, mut stream) = socket.split();
    let [lo, hi] = port.to_le_bytes();
    for opened in [0u8, 1] {
        sink.send(Message::binary(vec![opened, lo, hi])).await.expect("open channel");
    }
    let tcp = match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
        Ok(tcp) => tcp,
        Err(e) => {
            let message = format!("an error occurred forwarding {port} -> {port}: {e}");
            let _ = sink.send(Message::binary([&[1u8][..], message.as_bytes()].concat())).await;
            let _ = sink.close().await;
            return;
        }
    };
    let (mut from_port, mut to_port) = tcp.into_split();
    let upstream = tokio::spawn(async move {
        while let Some(Ok(message)) = stream.next().await {
            match message {
                Message::Binary(bytes)
                    if bytes.first() == Some(&0)
                        && bytes.len() > 1
                        && to_port.write_all(&bytes[1..]).await.is_err() =>
                {
                    return;
                }
                Message::Close(_) => return,
                _ => {}
            }
        }
    });
    let mut buf = vec![0u8; 32 << 10];
    loop {
        match from_port.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if sink.send(Message::binary([&[0u8][..], &buf[..n]].concat())).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = sink.close().await;
    upstream.abort();
}
