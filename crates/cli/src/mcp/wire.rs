//! The MCP server's stdio transport: newline-delimited JSON-RPC, as rmcp's own, except that
//! a message naming a key twice in one object, at any depth, is refused with a JSON-RPC
//! error that names the key, and never reaches a tool. serde_json keeps the last of
//! duplicate keys, so `{"approve": false, "approve": true}` would run as approved while a
//! client or a user reading the first key saw a call that was not.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde::de::{DeserializeSeed, Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Stdin, Stdout};
use tokio::sync::Mutex;

/// JSON-RPC's "invalid request" (a duplicate outside `params`) and "invalid params".
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC's "parse error", as rmcp answers a line that is no message.
const PARSE_ERROR: i64 = -32700;

/// stdin and stdout as the server's transport.
pub(crate) struct Stdio {
    read: BufReader<Stdin>,
    line: Vec<u8>,
    write: Arc<Mutex<Option<Stdout>>>,
}

impl Stdio {
    pub(crate) fn new() -> Stdio {
        Stdio {
            read: BufReader::new(tokio::io::stdin()),
            line: Vec::new(),
            write: Arc::new(Mutex::new(Some(tokio::io::stdout()))),
        }
    }
}

/// Writes one message and its newline, whole, before any other.
async fn write_line(write: &Mutex<Option<Stdout>>, mut line: Vec<u8>) -> std::io::Result<()> {
    line.push(b'\n');
    let mut guard = write.lock().await;
    let Some(out) = guard.as_mut() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            "the transport is closed",
        ));
    };
    out.write_all(&line).await?;
    out.flush().await
}

impl Transport<RoleServer> for Stdio {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let write = Arc::clone(&self.write);
        async move { write_line(&write, serde_json::to_vec(&item)?).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            self.line.clear();
            match self.read.read_until(b'\n', &mut self.line).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
            let line = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let answer = match judge(line) {
                Judged::Message(message) => return Some(*message),
                Judged::Ignore => continue,
                Judged::Answer(answer) => answer,
            };
            if write_line(&self.write, answer.to_string().into_bytes()).await.is_err() {
                return None;
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        drop(self.write.lock().await.take());
        Ok(())
    }
}

/// What becomes of one line.
enum Judged {
    /// A message for the server.
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    /// A notification the server does not know (no answer, as rmcp's transport does).
    Ignore,
    /// An error answered here.
    Answer(Value),
}

fn judge(line: &[u8]) -> Judged {
    let loose: Option<Value> = serde_json::from_slice(line).ok();
    let id = loose.as_ref().and_then(|v| v.get("id")).filter(|id| id.is_string() || id.is_number());
    if let Some(dup) = duplicate_key(line) {
        // A notification gets no answer, and neither does a request whose id is in doubt.
        let id = if dup.at.is_empty() && dup.key == "id" { None } else { id };
        let Some(id) = id else { return Judged::Ignore };
        let code = if dup.at.starts_with("params") { INVALID_PARAMS } else { INVALID_REQUEST };
        return Judged::Answer(error(id.clone(), code, &dup.to_string()));
    }
    match serde_json::from_slice(line) {
        Ok(message) => Judged::Message(Box::new(message)),
        Err(_)
            if loose
                .as_ref()
                .is_some_and(|v| v.get("id").is_none() && v.get("method").is_some()) =>
        {
            Judged::Ignore
        }
        Err(e) => Judged::Answer(error(Value::Null, PARSE_ERROR, &format!("parse error: {e}"))),
    }
}

/// Pure: a JSON-RPC error answer.
fn error(id: Value, code: i64, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

/// A key named twice in one object, and where that object is (`params.arguments`; empty for
/// the message itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Duplicate {
    pub(crate) key: String,
    pub(crate) at: String,
}

impl fmt::Display for Duplicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at =
            if self.at.is_empty() { "the message".to_owned() } else { format!("`{}`", self.at) };
        write!(
            f,
            "duplicate key `{}` in {at}: a key may appear once in a JSON object, so the call was refused",
            self.key
        )
    }
}

/// Pure: the first key named twice in one object of the JSON `text` (keys compared after
/// unescaping, so `"a"` and `"\u0061"` are the same key); `None` when there is none or the
/// text is no JSON.
pub(crate) fn duplicate_key(text: &[u8]) -> Option<Duplicate> {
    let mut found = None;
    let mut de = serde_json::Deserializer::from_slice(text);
    let _ = Walk { at: String::new(), found: &mut found }.deserialize(&mut de);
    found
}

/// Visits every value, remembering the first duplicate key in `found` (and stopping there).
struct Walk<'a> {
    at: String,
    found: &'a mut Option<Duplicate>,
}

impl Walk<'_> {
    fn below(&mut self, step: &str) -> Walk<'_> {
        let at = if self.at.is_empty() { step.to_owned() } else { format!("{}.{step}", self.at) };
        Walk { at, found: self.found }
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0usize;
        while seq.next_element_seed(self.below(&index.to_string()))?.is_some() {
            index += 1;
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                *self.found = Some(Duplicate { key, at: self.at.clone() });
                return Err(A::Error::custom("duplicate key"));
            }
            map.next_value_seed(self.below(&key))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_found_at_any_depth_after_unescaping() {
        let dup = |text: &str| duplicate_key(text.as_bytes()).map(|d| (d.key, d.at));
        let call = |args: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"run_script","arguments":{args}}}}}"#
            )
        };
        assert_eq!(dup(&call(r#"{"code":"1","approve":true}"#)), None);
        assert_eq!(
            dup(&call(r#"{"approve":false,"code":"1","approve":true}"#)),
            Some(("approve".into(), "params.arguments".into()))
        );
        assert_eq!(
            dup(&call(r#"{"approve":false,"appr\u006fve":true}"#)),
            Some(("approve".into(), "params.arguments".into()))
        );
        assert_eq!(
            dup(&call(r#"{"mounts":[{"a":1},{"b":2,"b":3}]}"#)),
            Some(("b".into(), "params.arguments.mounts.1".into()))
        );
        assert_eq!(dup(r#"{"id":1,"id":2}"#), Some(("id".into(), String::new())));
        // The same key in two objects is no duplicate; neither is text that is no JSON.
        assert_eq!(dup(r#"[{"a":1},{"a":2}]"#), None);
        assert_eq!(dup(r#"{"a":"#), None);
    }

    #[test]
    fn a_duplicate_is_answered_with_an_error_naming_it() {
        let line = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"run_script","arguments":{"code":"1","approve":false,"approve":true}}}"#;
        let Judged::Answer(answer) = judge(line) else { panic!("not refused") };
        assert_eq!(answer["id"], 7);
        assert_eq!(answer["error"]["code"], INVALID_PARAMS);
        insta::assert_snapshot!(answer["error"]["message"].as_str().unwrap_or_default(), @"duplicate key `approve` in `params.arguments`: a key may appear once in a JSON object, so the call was refused");
        // A notification with a duplicate gets no answer; a clean request reaches the server.
        assert!(matches!(
            judge(
                br#"{"jsonrpc":"2.0","method":"notifications/initialized","params":{"a":1,"a":2}}"#
            ),
            Judged::Ignore
        ));
        let clean = br#"{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{}}"#;
        assert!(matches!(judge(clean), Judged::Message(_)));
    }
}
