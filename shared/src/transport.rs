//! The stdio transport every server speaks: newline-delimited JSON-RPC, one message per line.
//!
//! rmcp's own line transport is replaced for the write side's sake: answers are written with
//! [`crate::json_out`] (serde_json's bytes, escaped faster) into one reused buffer, and a
//! write interrupted by cancellation is finished before the next message, so a line is never
//! cut. The read side keeps rmcp's rules: CRLF and a leading BOM are accepted, blank lines and
//! text that is not JSON are skipped, notifications we cannot read are dropped, and a request
//! we cannot read gets an `Invalid Request` error (with its id when it has one).

use std::io;
use std::sync::Arc;

use rmcp::model::{
    ClientNotification, ClientRequest, GetExtensions, GetMeta, JsonRpcMessage, RequestId,
    ServerResult,
};
use rmcp::service::{RoleServer, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;

use crate::budget::RequestBudget;
use crate::json_out;
use crate::otel;

/// A line longer than this is discarded (and answered by id when the id comes early enough to
/// be found), so one runaway message cannot exhaust memory. Every binary reads with it.
pub const MAX_LINE_BYTES: usize = 32 << 20;
/// The output buffer is kept between messages up to this size.
const KEEP_BUFFER_BYTES: usize = 1 << 20;
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Newline-delimited JSON-RPC over a reader and a writer (stdin/stdout for a server).
pub struct LineTransport<R, W> {
    reader: R,
    /// Bytes read and not yet consumed.
    input: Vec<u8>,
    /// How much of `input` is known to hold no newline.
    scanned: usize,
    /// Dropping the rest of an over-long line.
    discarding: bool,
    /// The id of the over-long request being dropped, when its start showed one.
    oversize_id: Option<String>,
    /// A line decoded but not yet handed over (see `receive`).
    pending: Option<Line>,
    output: Arc<Mutex<Output<W>>>,
    /// Requests read and not yet answered; reading pauses while it is spent.
    budget: RequestBudget,
    /// The connection's spans, when it is traced (a span per request, ended by its answer).
    trace: Option<Arc<otel::Conn>>,
}

struct Output<W> {
    writer: Option<W>,
    /// The message being written, and how much of it has gone out.
    line: Vec<u8>,
    written: usize,
}

impl<W: AsyncWrite + Unpin> Output<W> {
    /// Write what remains of `line`; progress survives the future being dropped.
    async fn drain(&mut self) -> io::Result<()> {
        let Some(writer) = self.writer.as_mut() else {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the transport is closed",
            ));
        };
        while self.written < self.line.len() {
            let n = writer.write(&self.line[self.written..]).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            self.written += n;
        }
        writer.flush().await
    }

    async fn send(&mut self, message: &impl serde::Serialize) -> io::Result<()> {
        // A previous send cancelled mid-line finishes first.
        self.drain().await?;
        self.start(message)?;
        self.drain().await
    }

    /// Put `message` in the (drained) buffer — no await, so a message taken from somewhere
    /// is never lost to a cancellation before its bytes are here; `drain` sends them.
    fn start(&mut self, message: &impl serde::Serialize) -> io::Result<()> {
        self.line.clear();
        self.written = 0;
        if self.line.capacity() > KEEP_BUFFER_BYTES {
            self.line = Vec::new();
        }
        if let Err(e) = json_out::write(&mut self.line, message) {
            self.line.clear();
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        self.line.push(b'\n');
        Ok(())
    }
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    pub fn new(reader: R, writer: W) -> Self {
        Self {
            reader,
            input: Vec::with_capacity(64 * 1024),
            scanned: 0,
            discarding: false,
            oversize_id: None,
            pending: None,
            output: Arc::new(Mutex::new(Output {
                writer: Some(writer),
                line: Vec::with_capacity(64 * 1024),
                written: 0,
            })),
            budget: RequestBudget::default(),
            trace: None,
        }
    }

    /// Trace this connection's requests (when [`otel::enabled`]): a span per request, its
    /// context put in the request's extensions for the handler to hand on.
    pub fn traced(mut self, conn: Arc<otel::Conn>) -> Self {
        self.trace = Some(conn);
        self
    }

    /// Open the span of a request the handler is about to get.
    fn trace_request(&self, message: &mut RxJsonRpcMessage<RoleServer>) {
        let Some(conn) = &self.trace else { return };
        if !otel::enabled() {
            return;
        }
        let JsonRpcMessage::Request(r) = message else {
            return;
        };
        let key = id_key(&r.id);
        let id = r.id.to_string();
        let meta = r.request.get_meta();
        let (tool, prompt, uri) = match &r.request {
            ClientRequest::CallToolRequest(c) => (Some(c.params.name.as_ref()), None, None),
            ClientRequest::GetPromptRequest(g) => (None, Some(g.params.name.as_str()), None),
            ClientRequest::ReadResourceRequest(rr) => (None, None, Some(rr.params.uri.as_str())),
            #[allow(deprecated)]
            ClientRequest::SubscribeRequest(sr) => (None, None, Some(sr.params.uri.as_str())),
            #[allow(deprecated)]
            ClientRequest::UnsubscribeRequest(ur) => (None, None, Some(ur.params.uri.as_str())),
            _ => (None, None, None),
        };
        let negotiated = conn.protocol_version();
        let modern = meta.protocol_version();
        let request = otel::Request {
            method: r.request.method(),
            id: Some(&id),
            tool,
            prompt,
            uri,
            traceparent: meta.get_traceparent(),
            tracestate: meta.get_tracestate(),
            baggage: meta.get_baggage(),
            protocol_version: modern
                .as_ref()
                .map(|v| v.as_str())
                .or(negotiated.as_deref()),
        };
        let via = otel::Via {
            transport: conn.transport,
            ..otel::Via::default()
        };
        let span = otel::Span::start(&request, &via);
        r.request.extensions_mut().insert(span.propagate());
        conn.begin(key, span);
    }

    /// Share a request budget with another reader of the same connection (the host's
    /// byte-level path counts against the same bound).
    pub fn with_budget(mut self, budget: RequestBudget) -> Self {
        self.budget = budget;
        self
    }

    /// The next line, read and decoded (the bytes are consumed from `input`).
    async fn next_decoded_line(&mut self) -> Option<Line> {
        let end = self.next_line_end().await?;
        let line = if std::mem::take(&mut self.discarding) {
            match self.oversize_id.take() {
                Some(id) => Line::Refuse(Refusal::new(
                    Some(&id),
                    INVALID_REQUEST,
                    format!(
                        "Invalid request: the message is longer than {MAX_LINE_BYTES} bytes, the most one message may carry"
                    ),
                )),
                None => Line::Skip,
            }
        } else {
            read_line(&self.input[..end])
        };
        self.input.drain(..=end);
        self.scanned = 0;
        Some(line)
    }

    /// The next whole line's end in `input`, reading more as needed; `None` at end of input.
    /// Cancel-safe: everything read stays in `input`.
    async fn next_line_end(&mut self) -> Option<usize> {
        loop {
            if let Some(i) = memchr::memchr(b'\n', &self.input[self.scanned..]) {
                return Some(self.scanned + i);
            }
            self.scanned = self.input.len();
            if self.input.len() > MAX_LINE_BYTES {
                tracing::error!(
                    max = MAX_LINE_BYTES,
                    "incoming message longer than the limit; discarding it"
                );
                if !self.discarding {
                    let head = &self.input[..self.input.len().min(64 * 1024)];
                    let head = String::from_utf8_lossy(head);
                    self.oversize_id = crate::salvage::salvage_prefix(&head)
                        .filter(|found| found.method.is_some())
                        .and_then(|found| found.valid_id().map(String::from));
                }
                self.discarding = true;
                self.input.clear();
                self.scanned = 0;
            }
            self.input.reserve(64 * 1024);
            match self.reader.read_buf(&mut self.input).await {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => {
                    tracing::error!("reading the client's messages failed: {e}");
                    return None;
                }
            }
        }
    }
}

/// Learn the protocol version from the handshake's answer (spans and the host's stdio
/// front, which answers some requests itself once the handshake is answered, read it).
fn learn_version(conn: &otel::Conn, item: &TxJsonRpcMessage<RoleServer>) {
    if let JsonRpcMessage::Response(r) = item
        && let ServerResult::InitializeResult(init) = &r.result
    {
        conn.set_protocol_version(init.protocol_version.as_str());
    }
}

/// End the span of the request `item` answers.
fn trace_answer(conn: &otel::Conn, item: &TxJsonRpcMessage<RoleServer>) {
    match item {
        JsonRpcMessage::Response(r) => {
            let outcome = match &r.result {
                ServerResult::CallToolResult(c) if c.is_error == Some(true) => {
                    otel::Outcome::ToolError(
                        c.structured_content
                            .as_ref()
                            .and_then(|s| s.get("error")?.get("code")?.as_str())
                            .unwrap_or("tool_error"),
                    )
                }
                _ => otel::Outcome::Ok,
            };
            conn.end(&id_key(&r.id), outcome);
        }
        JsonRpcMessage::Error(e) => {
            if let Some(id) = &e.id {
                conn.end(
                    &id_key(id),
                    otel::Outcome::RpcError {
                        code: i64::from(e.error.code.0),
                        message: &e.error.message,
                    },
                );
            }
        }
        _ => {}
    }
}

/// A request id as JSON text (`5`, `"abc"`): the budget's key, the same spelling the host's
/// byte-level path uses.
pub fn id_key(id: &RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

/// What one input line turned out to be.
enum Line {
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    Skip,
    /// A request that could not be read: answer it with an error.
    Refuse(Refusal),
}

/// An error answer to a request we could not read, with its id exactly as sent.
#[derive(serde::Serialize)]
struct Refusal {
    jsonrpc: &'static str,
    /// `null` when the request's id is missing or one JSON-RPC forbids.
    id: Option<Box<RawValue>>,
    error: RefusalError,
}

#[derive(serde::Serialize)]
struct RefusalError {
    code: i32,
    message: String,
}

impl Refusal {
    fn new(id: Option<&str>, code: i32, message: String) -> Self {
        Refusal {
            jsonrpc: "2.0",
            id: id.and_then(|id| RawValue::from_string(id.to_string()).ok()),
            error: RefusalError { code, message },
        }
    }
}

/// JSON-RPC's codes for a message that is not valid JSON-RPC, and for JSON we cannot decode.
const INVALID_REQUEST: i32 = -32600;
const INVALID_PARAMS: i32 = -32602;
const PARSE_ERROR: i32 = -32700;

fn read_line(raw: &[u8]) -> Line {
    let line = raw.strip_suffix(b"\r").unwrap_or(raw);
    let line = line.strip_prefix(UTF8_BOM).unwrap_or(line);
    if line.iter().all(|b| b.is_ascii_whitespace()) {
        return Line::Skip;
    }
    let err = match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
        Ok(m) => return Line::Message(Box::new(m)),
        Err(e) => e,
    };
    // Is it JSON at all? Valid JSON the decoder cannot represent (a lone surrogate, a number
    // beyond f64, deep nesting) still gets an answer: its id is found without decoding.
    let decoded = serde_json::from_slice::<serde_json::Value>(line);
    let text = String::from_utf8_lossy(line);
    let Some(found) = crate::salvage::salvage(&text) else {
        // Not a JSON object: nothing to answer (replying could start an error storm with a
        // peer that echoes), as the other MCP SDKs do.
        tracing::debug!("ignoring a line that is not JSON: {err}");
        return Line::Skip;
    };
    let Some(method) = found.method else {
        tracing::debug!("ignoring a response or a message without a method: {err}");
        return Line::Skip;
    };
    if found.id.is_none() {
        tracing::debug!(
            method,
            "ignoring a notification that could not be read: {err}"
        );
        return Line::Skip;
    }
    let Some(id) = found.valid_id() else {
        tracing::debug!(method, "refusing a request with an invalid id");
        return Line::Refuse(Refusal::new(
            None,
            INVALID_REQUEST,
            "Invalid request: the id must be a string or an integer".into(),
        ));
    };
    let (code, message) = match decoded {
        Err(decode) => (
            PARSE_ERROR,
            format!("Parse error: the message could not be decoded: {decode}"),
        ),
        Ok(_) if method == "\"tools/call\"" => (
            INVALID_PARAMS,
            format!("Invalid params: {err} (arguments must be an object)"),
        ),
        Ok(_) => (INVALID_REQUEST, format!("Invalid request: {err}")),
    };
    tracing::debug!(
        method,
        "refusing a request that could not be read: {message}"
    );
    Line::Refuse(Refusal::new(Some(id), code, message))
}

/// The JSON-RPC error answering a message the decoder refused, as stdio answers it: the id
/// salvaged when there is one to echo, -32700 when the JSON cannot be decoded (malformed, a lone
/// surrogate, a number beyond f64, nesting past the limit), -32600 (-32602 for `tools/call`)
/// when it decodes but is no message. For HTTP, which answers every request: where stdio stays
/// silent (not an object, a notification, a response) the answer has a null id.
#[cfg_attr(not(feature = "serving"), allow(dead_code))]
pub(crate) fn unreadable_answer(message: &[u8]) -> Vec<u8> {
    let refusal = match read_line(message) {
        Line::Refuse(refusal) => refusal,
        Line::Skip | Line::Message(_) => {
            let (code, text) = match serde_json::from_slice::<serde_json::Value>(message) {
                Err(e) => (
                    PARSE_ERROR,
                    format!("Parse error: the message could not be decoded: {e}"),
                ),
                Ok(_) => (
                    INVALID_REQUEST,
                    "Invalid request: not a JSON-RPC request, notification or response".into(),
                ),
            };
            Refusal::new(None, code, text)
        }
    };
    serde_json::to_vec(&refusal).unwrap_or_default()
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let output = self.output.clone();
        // An answer gives its request's slot back (after it is written).
        let answered = match &item {
            JsonRpcMessage::Response(r) => Some(id_key(&r.id)),
            JsonRpcMessage::Error(e) => e.id.as_ref().map(id_key),
            _ => None,
        };
        let budget = self.budget.clone();
        if let Some(conn) = &self.trace {
            learn_version(conn, &item);
            if otel::enabled() {
                trace_answer(conn, &item);
            }
        }
        async move {
            let sent = output.lock().await.send(&item).await;
            if let Some(id) = answered {
                budget.end(&id);
            }
            sent
        }
    }

    /// Cancel-safe, as rmcp needs (it races `receive` against its outgoing queue): a line
    /// is read and decoded once, and waits in `pending` while the request budget is spent or
    /// the output is busy.
    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let line = match self.pending.take() {
                Some(line) => line,
                None => self.next_decoded_line().await?,
            };
            match line {
                Line::Message(m) => {
                    match &*m {
                        JsonRpcMessage::Request(r) => {
                            let key = id_key(&r.id);
                            // rmcp would replace the first request's entry and drop its
                            // answer: the second is refused and the first goes on.
                            if self.budget.holds(&key) {
                                let message = format!(
                                    "id {key} is already used by a request in flight; ids must \
                                     be unique among requests in flight"
                                );
                                let refusal = Refusal::new(Some(&key), INVALID_REQUEST, message);
                                self.pending = Some(Line::Refuse(refusal));
                                continue;
                            }
                            self.pending = Some(Line::Message(m));
                            self.budget.begin(key).await;
                            match self.pending.take() {
                                Some(Line::Message(mut m)) => {
                                    self.trace_request(&mut m);
                                    return Some(*m);
                                }
                                other => {
                                    self.pending = other;
                                    continue;
                                }
                            }
                        }
                        // A cancelled request gets no answer: its slot comes back now.
                        JsonRpcMessage::Notification(n) => {
                            if let ClientNotification::CancelledNotification(c) = &n.notification
                                && let Some(id) = &c.params.request_id
                            {
                                self.budget.end(&id_key(id));
                                if let Some(conn) = &self.trace {
                                    conn.end(&id_key(id), otel::Outcome::Cancelled);
                                }
                            }
                        }
                        _ => {}
                    }
                    return Some(*m);
                }
                Line::Skip => {}
                Line::Refuse(answer) => {
                    let output = self.output.clone();
                    self.pending = Some(Line::Refuse(answer));
                    let mut output = output.lock().await;
                    // An earlier write still going out (a slow reader) finishes first, while
                    // the refusal waits in `pending`: `receive` is raced against rmcp's
                    // outgoing queue, and a refusal taken before this await was lost when
                    // the race dropped this future.
                    if let Err(e) = output.drain().await {
                        tracing::error!("writing to the client failed: {e}");
                        return None;
                    }
                    let Some(Line::Refuse(answer)) = self.pending.take() else {
                        continue;
                    };
                    // From here a cancelled write is finished by the next send.
                    let sent = match output.start(&answer) {
                        Ok(()) => output.drain().await,
                        Err(e) => Err(e),
                    };
                    if let Err(e) = sent {
                        tracing::error!("writing to the client failed: {e}");
                        return None;
                    }
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let mut output = self.output.lock().await;
        if let Some(mut w) = output.writer.take() {
            let _ = w.shutdown().await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::{CallCtx, Identity, McpServer, Reply, ToolDef, ToolRouter};
    use crate::{PathPolicy, ToolError};
    use rmcp::ServiceExt;
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};
    use serde_json::{Value, json};
    use tokio::io::{AsyncBufReadExt, BufReader, DuplexStream};

    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct P {
        text: String,
    }

    #[derive(Serialize, JsonSchema)]
    struct O {
        text: String,
    }

    struct Peer {
        to_server: DuplexStream,
        from_server: BufReader<DuplexStream>,
    }

    impl Peer {
        async fn send(&mut self, bytes: &[u8]) {
            self.to_server.write_all(bytes).await.expect("write");
        }

        async fn answer(&mut self) -> Value {
            let mut line = String::new();
            tokio::time::timeout(
                std::time::Duration::from_secs(10),
                self.from_server.read_line(&mut line),
            )
            .await
            .expect("an answer in time")
            .expect("read");
            assert!(line.ends_with('\n'), "one whole line: {line:?}");
            serde_json::from_str(&line).expect("the answer is JSON")
        }
    }

    /// A served echo tool behind a `LineTransport` over in-memory pipes.
    async fn start() -> Peer {
        let router = ToolRouter::new().tool(
            ToolDef::read("echo_text", "Echo", "Echo the text."),
            |_s: Arc<()>, p: P, _ctx: CallCtx| async move {
                if p.text == "slow" {
                    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                }
                if p.text == "fail" {
                    return Err(ToolError::invalid_field("text", "fail is refused"));
                }
                Ok(Reply::new(
                    O {
                        text: p.text.clone(),
                    },
                    p.text,
                ))
            },
        );
        let policy = PathPolicy::new(&std::env::temp_dir(), &[], true).expect("policy");
        let identity = Identity {
            name: "transport-test",
            version: "0",
            instructions: "",
        };
        let server = McpServer::new(identity, (), router, policy);
        let (client_w, server_r) = tokio::io::duplex(1 << 16);
        let (server_w, client_r) = tokio::io::duplex(1 << 16);
        tokio::spawn(async move {
            if let Ok(running) = server.serve(LineTransport::new(server_r, server_w)).await {
                let _ = running.waiting().await;
            }
        });
        let mut peer = Peer {
            to_server: client_w,
            from_server: BufReader::new(client_r),
        };
        peer.send(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}\n").await;
        let init = peer.answer().await;
        assert_eq!(init["result"]["serverInfo"]["name"], "transport-test");
        peer.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")
            .await;
        peer
    }

    fn call(id: u64, text: &str) -> Vec<u8> {
        let mut v = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "echo_text", "arguments": {"text": text}}})).expect("json");
        v.push(b'\n');
        v
    }

    /// A refusal must survive `receive` being dropped while an earlier answer is still going
    /// out to a slow reader (rmcp races `receive` against its outgoing queue): each bad
    /// request is answered exactly once, in order.
    #[tokio::test]
    async fn refusals_survive_a_dropped_receive_while_output_is_blocked() {
        let (mut to_server, server_in) = tokio::io::duplex(1 << 16);
        // A tiny output pipe nobody reads yet: the first refusal's write blocks.
        let (server_out, mut from_server) = tokio::io::duplex(32);
        let mut t = LineTransport::new(server_in, server_out);
        for id in ["a", "b"] {
            let line = format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":\"{id}\",\"method\":\"tools/call\",\"params\":{{\"name\":\"x\",\"arguments\":{{\"path\":\"\\ud800\"}}}}}}\n"
            );
            to_server.write_all(line.as_bytes()).await.expect("write");
        }
        drop(to_server);
        let short = std::time::Duration::from_millis(50);
        // "a" goes into the output and blocks; the race drops `receive`.
        assert!(tokio::time::timeout(short, t.receive()).await.is_err());
        // "b" is read while "a" is still going out; dropped again.
        assert!(tokio::time::timeout(short, t.receive()).await.is_err());
        // Now the reader drains; the transport runs to the end of its input.
        let reader = tokio::spawn(async move {
            let mut all = String::new();
            let _ = from_server.read_to_string(&mut all).await;
            all
        });
        assert!(t.receive().await.is_none());
        t.close().await.expect("close");
        let all = reader.await.expect("reader");
        let ids: Vec<String> = all
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("json")["id"].to_string())
            .collect();
        assert_eq!(ids, ["\"a\"", "\"b\""], "{all}");
    }

    #[tokio::test]
    async fn lines_split_joined_crlf_bom_and_blank_are_read() {
        let mut peer = start().await;
        // One request delivered a byte at a time.
        for b in call(1, "slow") {
            peer.send(&[b]).await;
        }
        assert_eq!(
            peer.answer().await["result"]["structuredContent"]["text"],
            "slow"
        );
        // Two requests in one write, the second with CRLF, then a BOM and blank lines.
        let mut both = call(2, "a");
        let mut crlf = call(3, "b");
        crlf.pop();
        crlf.extend_from_slice(b"\r\n\n   \n\xEF\xBB\xBF");
        both.extend_from_slice(&crlf);
        both.extend_from_slice(&call(4, "c"));
        peer.send(&both).await;
        let mut ids = Vec::new();
        for _ in 0..3 {
            ids.push(peer.answer().await["id"].as_u64().expect("id"));
        }
        ids.sort();
        assert_eq!(ids, [2, 3, 4]);
    }

    #[tokio::test]
    async fn garbage_is_skipped_and_unreadable_requests_are_refused_by_id() {
        let mut peer = start().await;
        peer.send(b"this is not json\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/whatever\",\"params\":5}\n")
            .await;
        // Well-formed JSON that is no valid request: refused, with its id.
        peer.send(b"{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"method\":\"tools/call\",\"params\":7}\n")
            .await;
        let refused = peer.answer().await;
        assert_eq!(refused["id"], "abc");
        assert_eq!(
            refused["error"]["code"], -32602,
            "a call whose params are unreadable"
        );
        // Ids JSON-RPC forbids are answered with a null id.
        for id in ["true", "{}", "1.5", "[1]"] {
            peer.send(
                format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\"}}\n").as_bytes(),
            )
            .await;
            let refused = peer.answer().await;
            assert_eq!(refused["id"], Value::Null, "{id}");
            assert_eq!(refused["error"]["code"], -32600, "{id}");
        }
        // The session goes on.
        peer.send(&call(9, "after")).await;
        let ok = peer.answer().await;
        assert_eq!(ok["id"], 9);
        assert_eq!(ok["result"]["content"][0]["text"], "after");
        // Tool errors still come back as results.
        peer.send(&call(10, "fail")).await;
        let e = peer.answer().await;
        assert_eq!(e["result"]["isError"], true);
        assert_eq!(
            e["result"]["structuredContent"]["error"]["code"],
            "invalid_params"
        );
    }

    #[tokio::test]
    async fn a_second_request_with_an_id_in_flight_is_refused_and_the_first_answered() {
        let mut peer = start().await;
        peer.send(&call(7, "slow")).await;
        peer.send(&call(7, "second")).await;
        let refused = peer.answer().await;
        assert_eq!(refused["id"], 7);
        assert_eq!(refused["error"]["code"], -32600);
        assert!(
            refused["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("in flight")),
            "{refused}"
        );
        let first = peer.answer().await;
        assert_eq!(first["id"], 7);
        assert_eq!(first["result"]["content"][0]["text"], "slow");
        // Once answered, the id may be used again.
        peer.send(&call(7, "again")).await;
        assert_eq!(peer.answer().await["result"]["content"][0]["text"], "again");
    }

    #[tokio::test]
    async fn valid_json_the_decoder_refuses_is_answered_by_id() {
        let mut peer = start().await;
        let deep = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{{\"name\":\"echo_text\",\"arguments\":{{\"text\":{}1{}}}}}}}\n",
            "[".repeat(5000),
            "]".repeat(5000)
        );
        let big_id = "123456789012345678901234567890";
        let cases: Vec<(String, &str)> = vec![
            (
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"echo_text\",\"arguments\":{\"text\":\"\\ud800\"}}}\n".into(),
                "1",
            ),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":\"two\",\"method\":\"tools/call\",\"params\":{\"name\":\"echo_text\",\"arguments\":{\"text\":1e400}}}\n".into(),
                "\"two\"",
            ),
            (deep, "3"),
            (
                format!("{{\"jsonrpc\":\"2.0\",\"id\":{big_id},\"method\":\"ping\",\"params\":{{\"x\":1e400}}}}\n"),
                big_id,
            ),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\",\"params\":{\"x\":1e400}}\n".into(),
                "null",
            ),
        ];
        for (line, id) in cases {
            peer.send(line.as_bytes()).await;
            let mut raw = String::new();
            peer.from_server.read_line(&mut raw).await.expect("answer");
            let answer: Value = serde_json::from_str(&raw).expect("json");
            // A forbidden id is refused as such; the others name the decoding problem.
            let (code, says) = if id == "null" {
                (-32600, "must be a string or an integer")
            } else {
                (-32700, "could not be decoded")
            };
            assert_eq!(answer["error"]["code"], code, "{raw}");
            assert!(
                answer["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(says)),
                "{raw}"
            );
            // The id comes back byte for byte, even past i64.
            assert!(raw.contains(&format!("\"id\":{id}")), "{id} in {raw}");
        }
        // The session goes on.
        peer.send(&call(9, "after")).await;
        assert_eq!(peer.answer().await["id"], 9);
    }

    #[tokio::test]
    async fn large_answers_arrive_as_whole_lines() {
        let mut peer = start().await;
        let text: String = (0..3000)
            .map(|i| format!("{i}: \"quoted\" \\ tab\t é 😀\u{1}\n"))
            .collect();
        peer.send(&call(5, &text)).await;
        let answer = peer.answer().await;
        assert_eq!(answer["result"]["content"][0]["text"], text.as_str());
        assert_eq!(answer["result"]["structuredContent"]["text"], text.as_str());
    }

    /// Takes at most 10 bytes per write and is not ready every other time.
    struct Trickle {
        data: Arc<std::sync::Mutex<Vec<u8>>>,
        calls: usize,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<io::Result<usize>> {
            self.calls += 1;
            if self.calls.is_multiple_of(2) {
                cx.waker().wake_by_ref();
                return std::task::Poll::Pending;
            }
            let n = buf.len().min(10);
            self.data.lock().expect("lock").extend_from_slice(&buf[..n]);
            std::task::Poll::Ready(Ok(n))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_send_dropped_mid_line_is_finished_before_the_next() {
        use futures::FutureExt;
        let data = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut out = Output {
            writer: Some(Trickle {
                data: data.clone(),
                calls: 0,
            }),
            line: Vec::new(),
            written: 0,
        };
        let first = json!({"first": "x".repeat(100)});
        let second = json!({"second": [1, 2, 3]});
        // Polled once: ten bytes go out, then the writer is not ready and the send is dropped.
        assert!(out.send(&first).now_or_never().is_none());
        assert_eq!(data.lock().expect("lock").len(), 10);
        out.send(&second).await.expect("send");
        let written = String::from_utf8(data.lock().expect("lock").clone()).expect("utf8");
        assert_eq!(written, format!("{first}\n{second}\n"));
    }

    #[tokio::test]
    async fn end_of_input_ends_the_session() {
        let peer = start().await;
        let Peer {
            to_server,
            mut from_server,
        } = peer;
        drop(to_server);
        let mut rest = String::new();
        let n = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            from_server.read_line(&mut rest),
        )
        .await
        .expect("closed in time")
        .expect("read");
        assert_eq!(n, 0, "nothing more is written: {rest:?}");
    }
}
