//! The byte-level path for `tools/call`.
//!
//! Decoding a call into rmcp's types, re-encoding it for the child, decoding the child's
//! answer and encoding it again cost the host ~100 µs per call, while moving the bytes
//! through one more process costs ~10 µs. So the host reads every line itself: a plain
//! `tools/call` to a child's tool (either era; a `_meta` of nothing but the 2026-07-28
//! protocol keys and W3C trace context; arguments an object) is forwarded as bytes with only
//! its id and tool name swapped — and, when it carries trace context or the host traces, a
//! `_meta` with the `traceparent` the child should continue — and the child's answer goes
//! back as bytes with the id swapped back. Everything else — the handshake, lists, calls
//! with a progress token, the host's own tools, denied calls — goes to rmcp as before.
//!
//! Both directions share one writer per pipe; rmcp's output is cut into whole lines so
//! the two never interleave inside a message.

use kitbag_shared::lock::LockExt;
use std::borrow::Cow;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use kitbag_shared::otel::Propagate;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, oneshot};

pub use crate::line_out::Line;
use crate::line_out::LineOut;

/// An `AsyncWrite` that hands whole lines to a [`LineOut`] (rmcp's side of a pipe).
pub struct LineWriter {
    out: LineOut,
    buf: Vec<u8>,
}

impl LineWriter {
    pub fn new(out: LineOut) -> Self {
        LineWriter {
            out,
            buf: Vec::new(),
        }
    }
}

impl AsyncWrite for LineWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        this.buf.extend_from_slice(data);
        while let Some(end) = memchr::memchr(b'\n', &this.buf) {
            let rest = this.buf.split_off(end + 1);
            let line = std::mem::replace(&mut this.buf, rest);
            if this.out.send(line).is_err() {
                return Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
            }
        }
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// An `AsyncRead` over lines arriving on a channel; the channel closing is end of input.
pub struct ChannelReader {
    rx: mpsc::UnboundedReceiver<Line>,
    cur: Line,
    pos: usize,
}

impl ChannelReader {
    pub fn new(rx: mpsc::UnboundedReceiver<Line>) -> Self {
        ChannelReader {
            rx,
            cur: Vec::new(),
            pos: 0,
        }
    }
}

impl AsyncRead for ChannelReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        while this.pos >= this.cur.len() {
            match this.rx.poll_recv(cx) {
                Poll::Ready(Some(line)) => {
                    this.cur = line;
                    this.pos = 0;
                }
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
        let n = out.remaining().min(this.cur.len() - this.pos);
        out.put_slice(&this.cur[this.pos..this.pos + n]);
        this.pos += n;
        Poll::Ready(Ok(()))
    }
}

/// What came back for a forwarded call.
pub enum Reply {
    /// The raw `result` object.
    Result(RawResult),
    /// The raw JSON-RPC `error` object.
    Error(Box<RawValue>),
}

/// A raw `result` object: the child's answer line, kept whole, and where the result lies in
/// it (answers of many kilobytes are neither copied nor parsed on their way through).
pub struct RawResult {
    line: String,
    at: std::ops::Range<usize>,
}

impl RawResult {
    /// The result's JSON text.
    pub fn get(&self) -> &str {
        &self.line[self.at.clone()]
    }
}

impl RawResult {
    /// A result object's whole JSON text (one the host wrote itself).
    pub fn whole(text: String) -> Self {
        RawResult {
            at: 0..text.len(),
            line: text,
        }
    }
}

impl From<&RawValue> for RawResult {
    fn from(raw: &RawValue) -> Self {
        RawResult {
            line: raw.get().to_string(),
            at: 0..raw.get().len(),
        }
    }
}

/// How a child's answer lines are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Parsed as JSON (any server).
    Parse,
    /// One of this executable's own servers: kitbag-shared's serializer writes an answer as
    /// `{"jsonrpc":"2.0","id":"kbfast-N","result":{…}}` on one line, so one that starts so is
    /// taken apart by that framing, without parsing the result (35 µs for 65 KB). Anything
    /// else from it is parsed.
    Known,
}

/// The byte-level link to one child: its input, and the calls waiting for an answer.
pub struct FastLink {
    pub server: String,
    to_child: LineOut,
    pending: Mutex<HashMap<String, oneshot::Sender<Reply>>>,
    open: AtomicBool,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Calls forwarded at the byte level so far (reported by `host_status`).
pub fn forwarded() -> u64 {
    NEXT_ID.load(Ordering::Relaxed) - 1
}

impl FastLink {
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::SeqCst)
    }

    /// Send a call; the receiver gets the answer, or is dropped if the child exits.
    /// `trace` goes in the call's `_meta` (W3C trace context for the child's span).
    pub fn call(
        &self,
        tool: &str,
        arguments: Option<&RawValue>,
        trace: Option<&Propagate>,
    ) -> Option<(String, oneshot::Receiver<Reply>)> {
        if !self.is_open() {
            return None;
        }
        let id = format!("kbfast-{}", NEXT_ID.fetch_add(1, Ordering::Relaxed));
        let name = serde_json::to_string(tool).ok()?;
        let args = arguments.map(RawValue::get).unwrap_or("{}");
        let mut line = Vec::with_capacity(192 + name.len() + args.len());
        line.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":\"");
        line.extend_from_slice(id.as_bytes());
        line.extend_from_slice(b"\",\"method\":\"tools/call\",\"params\":{\"name\":");
        line.extend_from_slice(name.as_bytes());
        line.extend_from_slice(b",\"arguments\":");
        line.extend_from_slice(args.as_bytes());
        if let Some(trace) = trace {
            push_trace_meta(&mut line, trace);
        }
        line.extend_from_slice(b"}}\n");
        let (tx, rx) = oneshot::channel();
        self.pending.locked().insert(id.clone(), tx);
        if self.to_child.send(line).is_err() {
            self.pending.locked().remove(&id);
            return None;
        }
        Some((id, rx))
    }

    /// Give up on a call (timeout or the caller cancelled): tell the child.
    pub fn cancel(&self, id: &str, reason: &str) {
        let known = self.pending.locked().remove(id).is_some();
        if known {
            let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": id, "reason": reason}});
            let mut line = note.to_string().into_bytes();
            line.push(b'\n');
            let _ = self.to_child.send(line);
        }
    }
}

/// Tells the child to stop a byte-level call when dropped before its answer is in (the client
/// went away, a parked call expired); a no-op once the answer is in.
pub struct CancelOnDrop {
    pub link: Arc<FastLink>,
    pub child_id: String,
    pub reason: &'static str,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.link.cancel(&self.child_id, self.reason);
    }
}

/// `,"_meta":{"traceparent":…}` (the values JSON-escaped).
fn push_trace_meta(line: &mut Vec<u8>, trace: &Propagate) {
    fn push(line: &mut Vec<u8>, first: bool, key: &str, value: &str) {
        line.extend_from_slice(if first { b"{\"" } else { b",\"" });
        line.extend_from_slice(key.as_bytes());
        line.extend_from_slice(b"\":");
        // A string always serializes.
        line.extend_from_slice(serde_json::to_string(value).unwrap_or_default().as_bytes());
    }
    line.extend_from_slice(b",\"_meta\":");
    push(line, true, "traceparent", &trace.traceparent);
    if let Some(s) = &trace.tracestate {
        push(line, false, "tracestate", s);
    }
    if let Some(b) = &trace.baggage {
        push(line, false, "baggage", b);
    }
    line.push(b'}');
}

#[derive(Deserialize)]
struct PeekResponse<'a> {
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(default)]
    method: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

/// Wire a child's stdio: lines for rmcp go through `(reader, writer)`; answers to
/// byte-level calls are taken out on the way. `stdin` is the child's input, written directly
/// by whoever sends (`line_out.rs`). `watch`: `stdout`'s descriptor watched while it is
/// read (unwatched before it closes). Returns rmcp's pipe ends and the link.
pub fn wire_child<R>(
    server: &str,
    stdout: R,
    stdin: LineOut,
    framing: Framing,
    watch: Option<kitbag_shared::busy_poll::Watch>,
) -> (ChannelReader, LineWriter, Arc<FastLink>)
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let (rmcp_tx, rmcp_rx) = mpsc::unbounded_channel();
    let link = Arc::new(FastLink {
        server: server.to_string(),
        to_child: stdin.clone(),
        pending: Mutex::default(),
        open: AtomicBool::new(true),
    });
    let reader_link = link.clone();
    tokio::spawn(async move {
        let mut r = tokio::io::BufReader::with_capacity(1 << 16, stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let taken = match framing {
                Framing::Known => framed_reply(&mut line),
                Framing::Parse => None,
            };
            if let Some((id, reply)) = taken.or_else(|| fast_reply(&line)) {
                let tx = reader_link.pending.locked().remove(&id);
                if let Some(tx) = tx {
                    let _ = tx.send(reply);
                }
                continue;
            }
            if rmcp_tx.send(std::mem::take(&mut line)).is_err() {
                break;
            }
        }
        drop(watch);
        drop(r);
        // The child is gone: calls waiting on it see their sender dropped.
        reader_link.open.store(false, Ordering::SeqCst);
        reader_link.pending.locked().clear();
    });
    (ChannelReader::new(rmcp_rx), LineWriter::new(stdin), link)
}

/// The answer to one of our byte-level calls, taken apart by kitbag's own framing
/// ([`Framing::Known`]): a whole line (its newline read) of
/// `{"jsonrpc":"2.0","id":"kbfast-N","result":{…}}`. The line is taken (not copied) when it
/// is one; anything else is left for [`fast_reply`].
fn framed_reply(line: &mut Vec<u8>) -> Option<(String, Reply)> {
    const HEAD: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":\"kbfast-";
    const RESULT: &[u8] = b"\",\"result\":{";
    let rest = line.strip_prefix(HEAD)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || !rest[digits..].starts_with(RESULT) {
        return None;
    }
    let id_end = HEAD.len() + digits;
    let body_start = id_end + RESULT.len() - 1;
    // The line ends `}}` and its newline: the result's close, then the envelope's.
    let newline = if line.ends_with(b"\r\n") { 2 } else { 1 };
    let end = line.len() - newline;
    if line.last() != Some(&b'\n') || end < body_start + 2 || &line[end - 2..end] != b"}}" {
        return None;
    }
    let id = std::str::from_utf8(&line[HEAD.len() - 7..id_end])
        .ok()?
        .to_string();
    let text = String::from_utf8(std::mem::take(line)).map_err(|e| *line = e.into_bytes());
    let line = text.ok()?;
    Some((
        id,
        Reply::Result(RawResult {
            line,
            at: body_start..end - 1,
        }),
    ))
}

/// An answer to one of our byte-level calls: its id and the result or error.
fn fast_reply(line: &[u8]) -> Option<(String, Reply)> {
    // Cheap test first: our ids are strings starting with "kbfast-".
    memchr::memmem::find(line, b"\"kbfast-")?;
    let text = std::str::from_utf8(line).ok()?.trim_end();
    let peek: PeekResponse<'_> = serde_json::from_str(text).ok()?;
    if peek.method.is_some() {
        return None;
    }
    let id = peek.id?.into_owned();
    if !id.starts_with("kbfast-") {
        return None;
    }
    let reply = match (peek.result, peek.error) {
        (Some(r), _) => Reply::Result(r.into()),
        (None, Some(e)) => Reply::Error(e.to_owned()),
        _ => return None,
    };
    Some((id, reply))
}

/// A `tools/call` line the host may forward as bytes.
pub struct FastCall<'a> {
    pub id: &'a RawValue,
    pub name: Cow<'a, str>,
    pub arguments: Option<&'a RawValue>,
    /// A 2026-07-28 request (its `_meta` names that version): the answer needs `resultType`.
    pub modern: bool,
    /// W3C trace context from `_meta` (the caller's span).
    pub traceparent: Option<Cow<'a, str>>,
    pub tracestate: Option<Cow<'a, str>>,
    pub baggage: Option<Cow<'a, str>>,
}

impl FastCall<'_> {
    /// The request id as a span shows it (a string without its quotes).
    pub fn id_text(&self) -> Option<Cow<'_, str>> {
        match self.id.get() {
            text if text.starts_with('"') => serde_json::from_str(text).ok(),
            text => Some(Cow::Borrowed(text)),
        }
    }

    /// The caller's trace context, passed on as it came (the host not tracing).
    pub fn passthrough(&self) -> Option<Propagate> {
        Propagate::passthrough(
            self.traceparent.as_deref(),
            self.tracestate.as_deref(),
            self.baggage.as_deref(),
        )
    }
}

/// The protocol revision whose requests carry their own `_meta` and whose results carry
/// `resultType`.
pub const MODERN_VERSION: &str = "2026-07-28";

/// The `_meta` of a plain call: the 2026-07-28 per-request protocol keys and the W3C trace
/// context keys (SEP-414), nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainMeta<'a> {
    #[serde(borrow, rename = "io.modelcontextprotocol/protocolVersion", default)]
    protocol_version: Option<Cow<'a, str>>,
    #[serde(borrow, rename = "io.modelcontextprotocol/clientInfo", default)]
    _client_info: Option<&'a RawValue>,
    #[serde(borrow, rename = "io.modelcontextprotocol/clientCapabilities", default)]
    _client_capabilities: Option<&'a RawValue>,
    #[serde(borrow, default)]
    traceparent: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tracestate: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    baggage: Option<Cow<'a, str>>,
}

/// A call's `_meta` when it is plain: only the 2026-07-28 protocol keys (that version) and
/// trace context; anything else (a progress token, another extension's key, another
/// version, an empty `_meta`) goes through rmcp.
fn plain_meta(meta: &RawValue) -> Option<PlainMeta<'_>> {
    let m = serde_json::from_str::<PlainMeta<'_>>(meta.get()).ok()?;
    let plain = match &m.protocol_version {
        Some(v) => v == MODERN_VERSION,
        None => m.traceparent.is_some(),
    };
    plain.then_some(m)
}

#[derive(Deserialize)]
struct PeekRequest<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PeekCallParams<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<&'a RawValue>,
}

/// What an upstream line is, as far as the byte-level path cares.
pub enum Upstream<'a> {
    Call(FastCall<'a>),
    /// A request answered here at once with this error line (a forbidden id, a call whose
    /// `arguments` is not an object).
    Refuse(Line),
    /// `notifications/cancelled` for this request id (raw JSON).
    Cancelled(String),
    Initialize,
    Discover,
    /// `tools/list` with no parameters beyond an empty object: this request id (raw JSON).
    ListTools(&'a RawValue),
    Other,
}

pub fn classify(line: &str) -> Upstream<'_> {
    let Ok(peek) = serde_json::from_str::<PeekRequest<'_>>(line) else {
        return Upstream::Other;
    };
    if let (Some(_), Some(id)) = (&peek.method, peek.id)
        && !kitbag_shared::salvage::is_valid_id(id.get())
    {
        return Upstream::Refuse(protocol_error_line(
            "null",
            -32600,
            "Invalid request: the id must be a string or an integer",
        ));
    }
    match (peek.method.as_deref(), peek.id, peek.params) {
        (Some("tools/call"), Some(id), Some(params)) => {
            // Only plain calls: a `_meta` beyond the 2026-07-28 protocol keys and the trace
            // context (a progress token, say) or any other field goes through rmcp.
            match serde_json::from_str::<PeekCallParams<'_>>(params.get()) {
                Ok(p) if p.arguments.is_none_or(|a| a.get().starts_with('{')) => {
                    // A `_meta` that is not plain leaves the call to rmcp.
                    let meta = match p.meta {
                        None => None,
                        Some(raw) => match plain_meta(raw) {
                            Some(m) => Some(m),
                            None => return Upstream::Other,
                        },
                    };
                    let (modern, traceparent, tracestate, baggage) = match meta {
                        Some(m) => (
                            m.protocol_version.is_some(),
                            m.traceparent,
                            m.tracestate,
                            m.baggage,
                        ),
                        None => (false, None, None, None),
                    };
                    Upstream::Call(FastCall {
                        id,
                        name: p.name,
                        arguments: p.arguments,
                        modern,
                        traceparent,
                        tracestate,
                        baggage,
                    })
                }
                Ok(p)
                    if p.arguments
                        .is_some_and(|a| !a.get().starts_with('{') && a.get() != "null") =>
                {
                    Upstream::Refuse(protocol_error_line(
                        id.get(),
                        -32602,
                        "Invalid params: arguments must be an object",
                    ))
                }
                _ => Upstream::Other,
            }
        }
        (Some("notifications/cancelled"), None, Some(params)) => {
            match serde_json::from_str::<Value>(params.get()) {
                Ok(v) => Upstream::Cancelled(v["requestId"].to_string()),
                Err(_) => Upstream::Other,
            }
        }
        (Some("tools/list"), Some(id), params)
            if params.is_none_or(|p| matches!(p.get().trim(), "null" | "{}")) =>
        {
            Upstream::ListTools(id)
        }
        (Some("initialize"), Some(_), _) => Upstream::Initialize,
        (Some("server/discover"), Some(_), _) => Upstream::Discover,
        _ => Upstream::Other,
    }
}

/// Whether a result object already names its `resultType` at the top level. The byte test
/// settles the usual case (children answer in the handshake era, without it); only a body
/// that mentions the word anywhere is parsed.
fn has_result_type(body: &str) -> bool {
    if memchr::memmem::find(body.as_bytes(), b"\"resultType\"").is_none() {
        return false;
    }
    serde_json::from_str::<HashMap<Cow<'_, str>, &RawValue>>(body)
        .map_or(true, |m| m.contains_key("resultType"))
}

/// The JSON-RPC response line for a forwarded call; `modern` adds the 2026-07-28 era's
/// `"resultType": "complete"` to a result.
pub fn response_line(id: &str, reply: &Reply, modern: bool) -> Line {
    let (key, body) = match reply {
        Reply::Result(r) => ("result", r.get()),
        Reply::Error(e) => ("error", e.get()),
    };
    let mut line = Vec::with_capacity(64 + id.len() + body.len());
    line.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
    line.extend_from_slice(id.as_bytes());
    line.extend_from_slice(b",\"");
    line.extend_from_slice(key.as_bytes());
    line.extend_from_slice(b"\":");
    match body.strip_prefix('{') {
        Some(fields) if modern && key == "result" && !has_result_type(body) => {
            line.extend_from_slice(b"{\"resultType\":\"complete\"");
            if !fields.trim_start().starts_with('}') {
                line.push(b',');
            }
            line.extend_from_slice(fields.as_bytes());
        }
        _ => line.extend_from_slice(body.as_bytes()),
    }
    line.extend_from_slice(b"}\n");
    line
}

/// A JSON-RPC error response line; `id` is raw JSON (`null` when the request's is unusable).
pub fn protocol_error_line(id: &str, code: i32, message: &str) -> Line {
    let error = json!({"code": code, "message": message});
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{error}}}\n").into_bytes()
}

/// An `isError` result line (the same shape as the rmcp path's errors).
pub fn error_line(id: &str, code: &str, message: &str, modern: bool) -> Line {
    let result = json!({
        "content": [{"type": "text", "text": format!("error [{code}]: {message}")}],
        "structuredContent": {"error": {"code": code, "message": message}},
        "isError": true
    });
    let raw = RawValue::from_string(result.to_string()).ok();
    match raw {
        Some(r) => response_line(id, &Reply::Result(r.as_ref().into()), modern),
        None => Vec::new(),
    }
}

/// Whether `body` may hold `"isError": true`: a text scan, so that a success result — most
/// of them, some of many kilobytes — is not parsed a second time. A `"isError"` key followed
/// by `true` anywhere (also nested) says "maybe", and the parse decides.
fn may_be_error(body: &str) -> bool {
    let bytes = body.as_bytes();
    memchr::memmem::find_iter(bytes, b"\"isError\"").any(|at| {
        let rest = &bytes[at + b"\"isError\"".len()..];
        let rest = rest.trim_ascii_start();
        rest.strip_prefix(b":")
            .is_some_and(|v| v.trim_ascii_start().starts_with(b"true"))
    })
}

/// Whether a raw result is an error result, and its code (for the audit log).
pub fn result_error_code(reply: &Reply) -> Option<String> {
    match reply {
        Reply::Error(_) => Some("server_unavailable".into()),
        Reply::Result(r) if !may_be_error(r.get()) => None,
        Reply::Result(r) => {
            #[derive(Deserialize)]
            struct Peek<'a> {
                #[serde(rename = "isError", default)]
                is_error: Option<bool>,
                #[serde(rename = "structuredContent", borrow, default)]
                structured: Option<&'a RawValue>,
            }
            let p: Peek<'_> = serde_json::from_str(r.get()).ok()?;
            if p.is_error != Some(true) {
                return None;
            }
            let code = p
                .structured
                .and_then(|s| serde_json::from_str::<Value>(s.get()).ok())
                .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
                .unwrap_or_else(|| "tool_error".into());
            Some(code)
        }
    }
}

/// Bookkeeping for calls in flight on the byte-level path, by upstream request id.
pub struct InFlight {
    calls: Mutex<HashMap<String, (Arc<FastLink>, String)>>,
    /// The connection's bound on requests in flight, shared with the rmcp side.
    budget: kitbag_shared::budget::RequestBudget,
}

impl InFlight {
    pub fn new(budget: kitbag_shared::budget::RequestBudget) -> Self {
        InFlight {
            calls: Mutex::new(HashMap::new()),
            budget,
        }
    }

    pub fn insert(&self, upstream_id: String, link: Arc<FastLink>, child_id: String) {
        // The reader waited for room before reading this request; should the rmcp side have
        // taken the last slot meanwhile, the call still goes ahead (the bound is soft by one).
        self.budget.try_begin(upstream_id.clone());
        self.calls.locked().insert(upstream_id, (link, child_id));
    }

    pub fn contains(&self, upstream_id: &str) -> bool {
        self.calls.locked().contains_key(upstream_id)
    }

    pub fn is_empty(&self) -> bool {
        self.calls.locked().is_empty()
    }

    pub fn remove(&self, upstream_id: &str) -> Option<(Arc<FastLink>, String)> {
        self.budget.end(upstream_id);
        self.calls.locked().remove(upstream_id)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt as _;

    fn result(text: &str) -> Reply {
        Reply::Result(RawResult {
            line: text.to_string(),
            at: 0..text.len(),
        })
    }

    #[test]
    fn only_plain_calls_take_the_byte_path() {
        let call = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"file_read","arguments":{"path":"a"}}}"#;
        match classify(call) {
            Upstream::Call(c) => {
                assert_eq!(c.id.get(), "7");
                assert_eq!(c.name, "file_read");
                assert_eq!(c.arguments.unwrap().get(), r#"{"path":"a"}"#);
            }
            _ => panic!("a plain call"),
        }
        let with_meta = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":{},"_meta":{"progressToken":1}}}"#;
        assert!(matches!(classify(with_meta), Upstream::Other));
        // A 2026-07-28 request: only the protocol keys in `_meta` → byte path, marked modern.
        let modern = r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"x","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}"#;
        assert!(matches!(classify(modern), Upstream::Call(c) if c.modern));
        assert!(matches!(classify(call), Upstream::Call(c) if !c.modern));
        for other in [
            // a progress token beside the protocol keys
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","progressToken":"p"}}}"#,
            // another version
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}"#,
            // no version
            r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"x","_meta":{}}}"#,
        ] {
            assert!(matches!(classify(other), Upstream::Other), "{other}");
        }
        // Trace context (SEP-414) keeps a call plain, in either era; anything beside it not.
        let traced = r#"{"jsonrpc":"2.0","id":"t","method":"tools/call","params":{"name":"x","arguments":{},"_meta":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"a=b"}}}"#;
        match classify(traced) {
            Upstream::Call(c) => {
                assert!(!c.modern);
                assert_eq!(c.id_text().as_deref(), Some("t"));
                let p = c.passthrough().unwrap();
                assert!(p.traceparent.starts_with("00-4bf92f35"));
                assert_eq!(p.tracestate.as_deref(), Some("a=b"));
            }
            _ => panic!("a traced call is plain"),
        }
        let modern_traced = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"x","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}}"#;
        assert!(
            matches!(classify(modern_traced), Upstream::Call(c) if c.modern && c.traceparent.is_some())
        );
        let with_progress = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":1,"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}}"#;
        assert!(matches!(classify(with_progress), Upstream::Other));
        let bad_args = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":[1]}}"#;
        // Answered here: -32602 with the request's id.
        match classify(bad_args) {
            Upstream::Refuse(line) => {
                let v: Value = serde_json::from_slice(&line).unwrap();
                assert_eq!(v["id"], 7);
                assert_eq!(v["error"]["code"], -32602);
            }
            _ => panic!("non-object arguments are refused"),
        }
        for id in ["true", "{}", "1.5", "1e400", "[1]"] {
            let forbidden = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"x","arguments":{{}}}}}}"#
            );
            match classify(&forbidden) {
                Upstream::Refuse(line) => {
                    let v: Value = serde_json::from_slice(&line).unwrap();
                    assert_eq!(v["id"], Value::Null, "{id}");
                    assert_eq!(v["error"]["code"], -32600, "{id}");
                }
                _ => panic!("id {id} is refused"),
            }
        }
        let cancel =
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"a-1"}}"#;
        assert!(matches!(classify(cancel), Upstream::Cancelled(id) if id == "\"a-1\""));
        assert!(matches!(classify("not json"), Upstream::Other));
        assert!(matches!(
            classify(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#),
            Upstream::Initialize
        ));
    }

    #[test]
    fn error_results_are_found_without_parsing_every_success() {
        let code = |body: &str| result_error_code(&result(body));
        assert_eq!(code(r#"{"content":[],"isError":false}"#), None);
        assert_eq!(
            code(r#"{"content":[{"type":"text","text":"isError"}]}"#),
            None
        );
        // Escaped inside a string: no key.
        assert_eq!(
            code(r#"{"content":[{"type":"text","text":"\"isError\": true"}]}"#),
            None
        );
        assert_eq!(
            code(r#"{"isError" : true,"structuredContent":{"error":{"code":"not_found"}}}"#),
            Some("not_found".into())
        );
        assert_eq!(code(r#"{"isError":true}"#), Some("tool_error".into()));
        // Nested: a maybe that the parse turns down.
        assert_eq!(code(r#"{"structuredContent":{"isError":true}}"#), None);
    }

    #[test]
    fn replies_are_recognised_and_ids_swapped_back() {
        let line = br#"{"jsonrpc":"2.0","id":"kbfast-3","result":{"content":[],"isError":false}}
"#;
        let (id, reply) = fast_reply(line).unwrap();
        assert_eq!(id, "kbfast-3");
        let out = response_line("\"up-9\"", &reply, false);
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["id"], "up-9");
        assert_eq!(v["result"]["isError"], false);
        assert!(v["result"].get("resultType").is_none());
        // The 2026-07-28 shape: resultType added, once, also to an empty result.
        let modern: Value = serde_json::from_slice(&response_line("1", &reply, true)).unwrap();
        assert_eq!(modern["result"]["resultType"], "complete");
        assert_eq!(modern["result"]["isError"], false);
        let empty = result("{ }");
        let v: Value = serde_json::from_slice(&response_line("1", &empty, true)).unwrap();
        assert_eq!(v["result"], json!({"resultType": "complete"}));
        let already = result(r#"{"resultType":"complete","content":[]}"#);
        let out = response_line("1", &already, true);
        assert_eq!(
            memchr::memmem::find_iter(&out, b"resultType").count(),
            1,
            "{}",
            String::from_utf8_lossy(&out)
        );
        // Only a top-level resultType counts.
        let nested = result(r#"{"structuredContent":{"resultType":"x"}}"#);
        let v: Value = serde_json::from_slice(&response_line("1", &nested, true)).unwrap();
        assert_eq!(v["result"]["resultType"], "complete");
        assert_eq!(v["result"]["structuredContent"]["resultType"], "x");
        assert!(fast_reply(br#"{"jsonrpc":"2.0","id":4,"result":{}}"#).is_none());
        assert!(
            fast_reply(
                br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"x":"kbfast-1"}}"#
            )
            .is_none()
        );
        let err = error_line("5", "server_unavailable", "gone", false);
        let v: Value = serde_json::from_slice(&err).unwrap();
        assert_eq!(
            v["result"]["structuredContent"]["error"]["code"],
            "server_unavailable"
        );
        let r =
            result(r#"{"isError":true,"structuredContent":{"error":{"code":"file_not_found"}}}"#);
        assert_eq!(result_error_code(&r).as_deref(), Some("file_not_found"));
    }

    /// kitbag's own servers' answers are taken apart by their framing, to the same reply the
    /// parse gives; a line in any other shape is left for the parse.
    #[test]
    fn own_answers_are_taken_by_their_framing() {
        let framed = |text: &str| {
            let mut line = text.as_bytes().to_vec();
            let got = framed_reply(&mut line).map(|(id, r)| match r {
                Reply::Result(r) => (id, r.get().to_string()),
                Reply::Error(_) => unreachable!("results only"),
            });
            (got, line)
        };
        let text = "{\"jsonrpc\":\"2.0\",\"id\":\"kbfast-12\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"}}\\n\"}],\"isError\":false}}\n";
        let (got, rest) = framed(text);
        let (id, body) = got.expect("framed");
        assert!(rest.is_empty(), "the line is taken, not copied");
        assert_eq!(id, "kbfast-12");
        let (parsed_id, parsed) = fast_reply(text.as_bytes()).expect("parsed");
        assert_eq!(parsed_id, id);
        let Reply::Result(parsed) = parsed else {
            panic!("a result")
        };
        assert_eq!(body, parsed.get());
        let crlf = text.replace("}}\n", "}}\r\n");
        assert_eq!(framed(&crlf).0.expect("crlf").1, body);
        let out = response_line("7", &result(&body), true);
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["result"]["resultType"], "complete");
        assert_eq!(v["result"]["content"][0]["text"], "}}\n");
        for other in [
            // no newline: a child that died mid-line
            text.trim_end(),
            // an error, a request, another id, another key order: parsed instead
            "{\"jsonrpc\":\"2.0\",\"id\":\"kbfast-1\",\"error\":{\"code\":1,\"message\":\"x\"}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":\"kbfast-1\",\"method\":\"x\",\"params\":{}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":\"kbfast-\",\"result\":{}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":\"other-1\",\"result\":{}}\n",
            "{\"id\":\"kbfast-1\",\"jsonrpc\":\"2.0\",\"result\":{}}\n",
            "{\"jsonrpc\":\"2.0\",\"id\":\"kbfast-1\",\"result\":{}\n",
        ] {
            let (got, rest) = framed(other);
            assert!(got.is_none(), "{other}");
            assert_eq!(rest, other.as_bytes(), "left as it was: {other}");
        }
        // Not UTF-8: left whole for the parse (which turns it down).
        let mut bad =
            b"{\"jsonrpc\":\"2.0\",\"id\":\"kbfast-1\",\"result\":{\"t\":\"\xff\"}}\n".to_vec();
        let before = bad.clone();
        assert!(framed_reply(&mut bad).is_none());
        assert_eq!(bad, before);
    }

    /// A line sender whose lines are read back from the other end of a duplex.
    fn captured() -> (
        LineOut,
        tokio::io::Lines<tokio::io::BufReader<tokio::io::DuplexStream>>,
    ) {
        let (a, b) = tokio::io::duplex(1 << 16);
        let (out, _writer) = crate::line_out::queued(a, std::future::pending());
        (out, tokio::io::BufReader::new(b).lines())
    }

    #[tokio::test]
    async fn a_traced_call_carries_its_context_to_the_child() {
        let (to_child, mut lines) = captured();
        let link = FastLink {
            server: "s".into(),
            to_child,
            pending: Mutex::default(),
            open: AtomicBool::new(true),
        };
        let trace = Propagate {
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
            tracestate: Some("a=\"b\"".into()),
            baggage: None,
        };
        let args = RawValue::from_string(r#"{"path":"a"}"#.into()).unwrap();
        link.call("file_read", Some(&args), Some(&trace)).unwrap();
        let line = lines.next_line().await.unwrap().unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["params"]["arguments"], json!({"path": "a"}));
        assert_eq!(
            v["params"]["_meta"],
            json!({"traceparent": trace.traceparent, "tracestate": "a=\"b\""})
        );
        // Untraced: the line is as it always was.
        link.call("file_read", None, None).unwrap();
        let line = lines.next_line().await.unwrap().unwrap();
        assert!(!line.contains("_meta"));
        assert_eq!(
            serde_json::from_str::<Value>(&line).unwrap()["params"],
            json!({"name": "file_read", "arguments": {}})
        );
    }

    #[tokio::test]
    async fn line_writer_and_channel_reader_keep_whole_lines() {
        let (out, mut lines) = captured();
        let mut w = LineWriter::new(out);
        w.write_all(b"{\"a\":").await.unwrap();
        w.write_all(b"1}\n{\"b\"").await.unwrap();
        assert_eq!(lines.next_line().await.unwrap().unwrap(), "{\"a\":1}");
        // The unfinished line is held back until its newline comes.
        let more = tokio::time::timeout(std::time::Duration::from_millis(20), lines.next_line());
        assert!(more.await.is_err());
        let (tx2, rx2) = mpsc::unbounded_channel();
        let mut r = ChannelReader::new(rx2);
        tx2.send(b"one\n".to_vec()).unwrap();
        tx2.send(b"two\n".to_vec()).unwrap();
        drop(tx2);
        let mut s = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut r, &mut s)
            .await
            .unwrap();
        assert_eq!(s, "one\ntwo\n");
    }
}
