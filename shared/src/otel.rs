//! OpenTelemetry traces: one SERVER span per MCP request a process answers, named and
//! attributed as the MCP semantic conventions ask (`tools/call file_read`, `mcp.method.name`,
//! `gen_ai.tool.name`, `jsonrpc.request.id`, `error.type`, …), exported over OTLP/HTTP in the
//! JSON encoding (`export.rs`, cargo feature `otel`).
//!
//! Configured the OpenTelemetry way ([`config`]): `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `--otlp-endpoint`), `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`. Without an endpoint
//! nothing is recorded: every call site asks [`enabled`] (one relaxed atomic load) first.
//!
//! Trace context is W3C Trace Context carried in the request's `params._meta`
//! (`traceparent`, `tracestate`, as SEP-414 and the conventions say), or for HTTP in the
//! `traceparent` header when `_meta` has none. A span's own context is what a process hands
//! on to the next hop ([`Propagate`]): the host puts it in the `_meta` of the call it sends
//! its child, so the child's span is the host span's child.
//!
//! Where spans are made: stdio — [`crate::transport::LineTransport`] when [`Conn`] is given
//! (every server, and the host's rmcp side), the host's byte path for its plain calls; HTTP —
//! the front of [`crate::http`] for every binary. A span is ended exactly once, by whoever
//! writes the answer.

pub mod config;
#[cfg(feature = "otel")]
mod export;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::lock::LockExt;

static ENABLED: AtomicBool = AtomicBool::new(false);
static SAMPLER: OnceLock<config::Sampler> = OnceLock::new();

/// Whether spans are being exported (an endpoint was configured and the exporter started).
#[inline]
pub fn enabled() -> bool {
    cfg!(feature = "otel") && ENABLED.load(Ordering::Relaxed)
}

/// Why telemetry could not be set up as configured.
#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    #[error("{source_name}: {value:?} is not an http(s) URL: {reason}")]
    Endpoint {
        source_name: &'static str,
        value: String,
        reason: String,
    },
    #[error("{name}: {value:?}: {reason}")]
    Setting {
        name: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("the OTLP exporter's HTTP client: {0}")]
    Client(String),
}

/// Start exporting spans when an endpoint is configured (`flag` is `--otlp-endpoint`, which
/// wins over the environment). `default_service` names the process when `OTEL_SERVICE_NAME`
/// does not. Ok(false): nothing configured (or built without the `otel` feature). Must run
/// inside the tokio runtime (the exporter is a task of it).
///
/// A bad `--otlp-endpoint` is an error; a bad environment variable is logged and tracing
/// stays off, so a child that inherited a wrong variable still serves.
pub fn init(flag: Option<&str>, default_service: &str) -> Result<bool, OtelError> {
    let parsed = config::Config::from_env(flag, default_service, |k| std::env::var(k).ok());
    let config = match parsed {
        Ok(Some(c)) => c,
        Ok(None) => return Ok(false),
        Err(e) if flag.is_some() => return Err(e),
        Err(e) => {
            tracing::warn!("OpenTelemetry is off: {e}");
            return Ok(false);
        }
    };
    start(config)
}

#[cfg(feature = "otel")]
fn start(config: config::Config) -> Result<bool, OtelError> {
    let _ = SAMPLER.set(config.sampler);
    export::start(config)?;
    ENABLED.store(true, Ordering::Relaxed);
    Ok(true)
}

#[cfg(not(feature = "otel"))]
fn start(config: config::Config) -> Result<bool, OtelError> {
    tracing::warn!(
        "an OTLP endpoint is configured ({}) but this binary was built without the `otel` feature: no spans are exported",
        config.endpoint
    );
    let _ = SAMPLER.set(config.sampler);
    Ok(false)
}

/// Send what is queued, waiting at most `limit` (at exit, after the last answer).
pub async fn shutdown(limit: Duration) {
    #[cfg(feature = "otel")]
    if enabled() {
        export::flush(limit).await;
    }
    #[cfg(not(feature = "otel"))]
    let _ = limit;
}

/// The exporter's counters for `/metrics`: spans exported, dropped (queue full), failed
/// (the collector refused them or could not be reached).
pub fn render_metrics(out: &mut String) {
    #[cfg(feature = "otel")]
    if enabled() {
        export::render_metrics(out);
    }
    #[cfg(not(feature = "otel"))]
    let _ = out;
}

// ---------------------------------------------------------------------------------------
// Trace context (W3C Trace Context, level 1)

/// A span's identity as W3C `traceparent` carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub sampled: bool,
}

impl SpanContext {
    /// Parse a `traceparent` value: `00-<32 hex>-<16 hex>-<2 hex>` (lower case), a later
    /// version's longer value read by its first four fields; all-zero ids and version `ff`
    /// are invalid.
    pub fn from_traceparent(value: &str) -> Option<Self> {
        let b = value.trim_matches([' ', '\t']).as_bytes();
        if b.len() < 55 {
            return None;
        }
        let version = hex_byte(&b[0..2])?;
        if version == 0xff
            || (version == 0 && b.len() != 55)
            || (b.len() > 55 && b[55] != b'-')
            || b[2] != b'-'
            || b[35] != b'-'
            || b[52] != b'-'
        {
            return None;
        }
        let mut trace_id = [0u8; 16];
        for (i, out) in trace_id.iter_mut().enumerate() {
            *out = hex_byte(&b[3 + 2 * i..5 + 2 * i])?;
        }
        let mut span_id = [0u8; 8];
        for (i, out) in span_id.iter_mut().enumerate() {
            *out = hex_byte(&b[36 + 2 * i..38 + 2 * i])?;
        }
        let flags = hex_byte(&b[53..55])?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(SpanContext {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
        })
    }

    /// The `traceparent` value naming this span (version 00).
    pub fn traceparent(&self) -> String {
        let mut s = String::with_capacity(55);
        s.push_str("00-");
        push_hex(&mut s, &self.trace_id);
        s.push('-');
        push_hex(&mut s, &self.span_id);
        s.push_str(if self.sampled { "-01" } else { "-00" });
        s
    }
}

fn hex_byte(two: &[u8]) -> Option<u8> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    Some(nibble(two[0])? << 4 | nibble(two[1])?)
}

pub(crate) fn push_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(HEX[usize::from(b >> 4)] as char);
        out.push(HEX[usize::from(b & 15)] as char);
    }
}

/// A `tracestate` or `baggage` value fit to pass on: printable ASCII, at most 8 KB.
fn passable(value: &str) -> bool {
    value.len() <= 8192 && value.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// The trace context a process hands on to the next hop, in that request's `params._meta`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Propagate {
    pub traceparent: String,
    pub tracestate: Option<String>,
    /// W3C Baggage is not ours to read: passed on as the client sent it.
    pub baggage: Option<String>,
}

impl Propagate {
    /// The client's own context, passed on unchanged by a process that is not tracing (so
    /// the next hop's spans still join the client's trace). None without a valid
    /// `traceparent`.
    pub fn passthrough(
        traceparent: Option<&str>,
        tracestate: Option<&str>,
        baggage: Option<&str>,
    ) -> Option<Self> {
        let ctx = SpanContext::from_traceparent(traceparent?)?;
        Some(Propagate {
            traceparent: ctx.traceparent(),
            tracestate: tracestate.filter(|s| passable(s)).map(str::to_string),
            baggage: baggage.filter(|s| passable(s)).map(str::to_string),
        })
    }

    /// What a request's `_meta` carries, passed on unchanged.
    pub fn from_meta(meta: &rmcp::model::RequestMetaObject) -> Option<Self> {
        Self::passthrough(
            meta.get_traceparent(),
            meta.get_tracestate(),
            meta.get_baggage(),
        )
    }

    /// Write the keys into an outgoing request's `_meta`.
    pub fn apply(&self, meta: &mut rmcp::model::RequestMetaObject) {
        meta.set_traceparent(self.traceparent.as_str());
        if let Some(s) = &self.tracestate {
            meta.set_tracestate(s.as_str());
        }
        if let Some(b) = &self.baggage {
            meta.set_baggage(b.as_str());
        }
    }
}

/// The context a handler should pass on for the request it is answering: the span the
/// transport opened for it (put in the request's extensions, or over HTTP in the request
/// parts' extensions), else None.
pub fn propagate_of(extensions: &rmcp::model::Extensions) -> Option<&Propagate> {
    extensions.get::<Propagate>().or_else(|| {
        extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Propagate>())
    })
}

// ---------------------------------------------------------------------------------------
// Ids: random per process, unique within it

fn next_u64() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| {
        let mut b = [0u8; 8];
        if crate::random::fill(&mut b).is_ok() {
            u64::from_le_bytes(b)
        } else {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            nanos ^ (u64::from(std::process::id()) << 32)
        }
    });
    // splitmix64 of seed + n·γ: a bijection of the counter, so no two ids of one process
    // repeat, and unpredictable without the seed.
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut z = seed.wrapping_add(n.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn new_span_id() -> [u8; 8] {
    loop {
        let v = next_u64();
        if v != 0 {
            return v.to_be_bytes();
        }
    }
}

fn new_trace_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&next_u64().to_be_bytes());
    id[8..].copy_from_slice(&new_span_id());
    id
}

fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------
// Spans

/// An attribute value (the conventions' attributes are strings and integers).
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Str(String),
    Int(i64),
}

/// What a request says about itself, as far as its span cares.
#[derive(Default, Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    /// The JSON-RPC id as text: a string id without its quotes, a number as written.
    pub id: Option<&'a str>,
    pub tool: Option<&'a str>,
    pub prompt: Option<&'a str>,
    pub uri: Option<&'a str>,
    /// From `params._meta`.
    pub traceparent: Option<&'a str>,
    pub tracestate: Option<&'a str>,
    pub baggage: Option<&'a str>,
    pub protocol_version: Option<&'a str>,
}

/// How the request arrived.
#[derive(Default, Debug, Clone, Copy)]
pub struct Via<'a> {
    /// `network.transport`: `pipe` (stdio), `tcp`, `unix`.
    pub transport: &'static str,
    /// Served over HTTP/1.1.
    pub http: bool,
    pub session: Option<&'a str>,
    pub client: Option<SocketAddr>,
    /// The HTTP `traceparent` / `tracestate` headers (the transport's context).
    pub header_traceparent: Option<&'a str>,
    pub header_tracestate: Option<&'a str>,
}

/// How a request ended, for `error.type` and the span status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    Ok,
    /// An `isError` result: kitbag's error code (`file_not_found`), or `tool_error` when the
    /// result carries none.
    ToolError(&'a str),
    /// A JSON-RPC error answer.
    RpcError {
        code: i64,
        message: &'a str,
    },
    /// An HTTP status other than success, before any JSON-RPC answer.
    Http(u16),
    /// The client cancelled the request (or went away) before its answer.
    Cancelled,
}

/// One SERVER span in progress. Not recorded when the sampler said no (its context still
/// travels, marked not sampled). Ended explicitly with [`Span::end`]; dropping it records
/// nothing.
#[derive(Debug)]
pub struct Span {
    ctx: SpanContext,
    tracestate: Option<String>,
    baggage: Option<String>,
    recording: Option<Box<Recording>>,
}

#[derive(Debug)]
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(crate) struct Recording {
    pub(crate) parent: Option<[u8; 8]>,
    pub(crate) link: Option<SpanContext>,
    pub(crate) name: String,
    pub(crate) start_unix_nanos: u64,
    started: Instant,
    pub(crate) attrs: Vec<(&'static str, AttrValue)>,
}

/// A finished span, as the exporter encodes it.
#[derive(Debug)]
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(crate) struct Finished {
    pub(crate) ctx: SpanContext,
    pub(crate) tracestate: Option<String>,
    pub(crate) rec: Box<Recording>,
    pub(crate) end_unix_nanos: u64,
    /// The status message when the span ended in error.
    pub(crate) error: Option<String>,
}

impl Span {
    /// Open the span of one request. The parent is the `_meta` context, else the HTTP
    /// header's; when both are there the header's is linked (the conventions: MCP context
    /// first, the transport's as a link).
    pub fn start(req: &Request<'_>, via: &Via<'_>) -> Span {
        let meta_parent = req.traceparent.and_then(SpanContext::from_traceparent);
        let header_parent = via
            .header_traceparent
            .and_then(SpanContext::from_traceparent);
        let (parent, tracestate, link) = match (meta_parent, header_parent) {
            (Some(p), header) => (Some(p), req.tracestate, header.filter(|h| *h != p)),
            (None, Some(h)) => (Some(h), via.header_tracestate, None),
            (None, None) => (None, None, None),
        };
        let trace_id = parent.map_or_else(new_trace_id, |p| p.trace_id);
        let sampler = SAMPLER.get().copied().unwrap_or_default();
        let sampled = sampler.sample(parent.map(|p| p.sampled), &trace_id);
        let ctx = SpanContext {
            trace_id,
            span_id: new_span_id(),
            sampled,
        };
        let tracestate = tracestate.filter(|s| passable(s)).map(str::to_string);
        let baggage = req.baggage.filter(|s| passable(s)).map(str::to_string);
        if !sampled || !enabled() {
            return Span {
                ctx,
                tracestate,
                baggage,
                recording: None,
            };
        }
        let target = req.tool.or(req.prompt);
        let name = match target {
            Some(t) => format!("{} {t}", req.method),
            None => req.method.to_string(),
        };
        let mut attrs: Vec<(&'static str, AttrValue)> = Vec::with_capacity(12);
        let mut put = |k: &'static str, v: &str| attrs.push((k, AttrValue::Str(v.to_string())));
        put("mcp.method.name", req.method);
        if let Some(t) = req.tool {
            put("gen_ai.tool.name", t);
            put("gen_ai.operation.name", "execute_tool");
        }
        if let Some(p) = req.prompt {
            put("gen_ai.prompt.name", p);
        }
        if let Some(u) = req.uri {
            put("mcp.resource.uri", u);
        }
        if let Some(id) = req.id {
            put("jsonrpc.request.id", id);
        }
        if let Some(v) = req.protocol_version {
            put("mcp.protocol.version", v);
        }
        if let Some(s) = via.session {
            put("mcp.session.id", s);
        }
        put("network.transport", via.transport);
        if via.http {
            put("network.protocol.name", "http");
            put("network.protocol.version", "1.1");
        }
        if let Some(addr) = via.client {
            put("client.address", &addr.ip().to_string());
            attrs.push(("client.port", AttrValue::Int(i64::from(addr.port()))));
        }
        Span {
            ctx,
            tracestate,
            baggage,
            recording: Some(Box::new(Recording {
                parent: parent.map(|p| p.span_id),
                link,
                name,
                start_unix_nanos: unix_nanos(),
                started: Instant::now(),
                attrs,
            })),
        }
    }

    pub fn context(&self) -> SpanContext {
        self.ctx
    }

    /// This span as the parent of the next hop.
    pub fn propagate(&self) -> Propagate {
        Propagate {
            traceparent: self.ctx.traceparent(),
            tracestate: self.tracestate.clone(),
            baggage: self.baggage.clone(),
        }
    }

    /// Add or replace a string attribute (learnt after the start).
    pub fn set(&mut self, key: &'static str, value: &str) {
        if let Some(rec) = &mut self.recording {
            rec.attrs.retain(|(k, _)| *k != key);
            rec.attrs.push((key, AttrValue::Str(value.to_string())));
        }
    }

    /// Whether this span will be exported.
    pub fn is_recording(&self) -> bool {
        self.recording.is_some()
    }

    /// End the span and hand it to the exporter.
    pub fn end(self, outcome: Outcome<'_>) {
        let Some(mut rec) = self.recording else {
            return;
        };
        let end_unix_nanos = rec
            .start_unix_nanos
            .saturating_add(rec.started.elapsed().as_nanos() as u64);
        let error = match outcome {
            Outcome::Ok => None,
            Outcome::ToolError(code) => {
                rec.attrs
                    .push(("error.type", AttrValue::Str(code.to_string())));
                Some(String::new())
            }
            Outcome::RpcError { code, message } => {
                let code = code.to_string();
                rec.attrs
                    .push(("rpc.response.status_code", AttrValue::Str(code.clone())));
                rec.attrs.push(("error.type", AttrValue::Str(code)));
                Some(message.chars().take(1024).collect())
            }
            Outcome::Http(status) => {
                rec.attrs
                    .push(("error.type", AttrValue::Str(status.to_string())));
                Some(String::new())
            }
            Outcome::Cancelled => {
                rec.attrs
                    .push(("error.type", AttrValue::Str("cancelled".into())));
                Some("cancelled by the client".into())
            }
        };
        let finished = Finished {
            ctx: self.ctx,
            tracestate: self.tracestate,
            rec,
            end_unix_nanos,
            error,
        };
        #[cfg(feature = "otel")]
        export::push(finished);
        #[cfg(not(feature = "otel"))]
        drop(finished);
    }
}

/// The outcome of a result object (`{"isError": true, "structuredContent": {"error":
/// {"code": …}}}`): kitbag's typed code when it has one.
pub fn result_outcome(result: &serde_json::Value) -> Outcome<'_> {
    if result.get("isError").and_then(serde_json::Value::as_bool) != Some(true) {
        return Outcome::Ok;
    }
    let code = result
        .get("structuredContent")
        .and_then(|s| s.get("error")?.get("code")?.as_str())
        .unwrap_or("tool_error");
    Outcome::ToolError(code)
}

// ---------------------------------------------------------------------------------------
// One stdio connection

/// The spans of one line-transport connection (stdio): opened when a request is read,
/// ended when its answer is written. The host's byte path and its rmcp side share one.
#[derive(Debug)]
pub struct Conn {
    pub transport: &'static str,
    /// The protocol version the handshake agreed on (`mcp.protocol.version`), set as its
    /// answer goes out.
    version: tokio::sync::watch::Sender<Option<String>>,
    open: Mutex<HashMap<String, Span>>,
}

/// Spans open on one connection at most; past it a request is not traced (its answer would
/// never come: a client's requests in flight are bounded well below this).
const MAX_OPEN: usize = 4096;

impl Conn {
    /// A stdio connection.
    pub fn pipe() -> Arc<Conn> {
        Arc::new(Conn {
            transport: "pipe",
            version: tokio::sync::watch::Sender::new(None),
            open: Mutex::new(HashMap::new()),
        })
    }

    pub fn protocol_version(&self) -> Option<String> {
        self.version.borrow().clone()
    }

    pub fn set_protocol_version(&self, version: &str) {
        self.version.send_replace(Some(version.to_string()));
    }

    /// Whether the handshake's answer went out within `limit` (at once if it did already).
    pub async fn handshake_answered(&self, limit: std::time::Duration) -> bool {
        let mut rx = self.version.subscribe();
        matches!(
            tokio::time::timeout(limit, rx.wait_for(Option::is_some)).await,
            Ok(Ok(_))
        )
    }

    /// Keep `span` until the answer to request `key` (its id as JSON text) is written.
    pub fn begin(&self, key: String, span: Span) {
        let mut open = self.open.locked();
        if open.len() < MAX_OPEN {
            open.insert(key, span);
        }
    }

    /// The answer to `key` is going out.
    pub fn end(&self, key: &str, outcome: Outcome<'_>) {
        let span = self.open.locked().remove(key);
        if let Some(span) = span {
            span.end(outcome);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips_and_rejects_what_w3c_rejects() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let ctx = SpanContext::from_traceparent(tp).unwrap();
        assert!(ctx.sampled);
        assert_eq!(ctx.traceparent(), tp);
        assert_eq!(
            ctx.span_id,
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
        let unsampled = SpanContext::from_traceparent(&tp.replace("-01", "-00")).unwrap();
        assert!(!unsampled.sampled);
        // A later version may append fields after a dash.
        assert!(
            SpanContext::from_traceparent(
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"
            )
            .is_some()
        );
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert!(SpanContext::from_traceparent(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn ids_are_unique_and_never_zero() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let id = new_span_id();
            assert_ne!(id, [0; 8]);
            assert!(seen.insert(id));
        }
        assert_ne!(new_trace_id(), new_trace_id());
    }

    #[test]
    fn a_span_continues_its_parent_and_hands_on_its_own_context() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let req = Request {
            method: "tools/call",
            tool: Some("file_read"),
            traceparent: Some(parent),
            tracestate: Some("rojo=00f067aa0ba902b7"),
            ..Request::default()
        };
        let span = Span::start(
            &req,
            &Via {
                transport: "pipe",
                ..Via::default()
            },
        );
        let p = span.propagate();
        let child = SpanContext::from_traceparent(&p.traceparent).unwrap();
        assert_eq!(child.trace_id, span.context().trace_id);
        assert_eq!(
            SpanContext::from_traceparent(parent).unwrap().trace_id,
            child.trace_id
        );
        assert_ne!(
            child.span_id,
            [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7]
        );
        assert_eq!(p.tracestate.as_deref(), Some("rojo=00f067aa0ba902b7"));
        // Not sampled upstream: not sampled here either (parent-based by default).
        let off = Request {
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
            ..req
        };
        let span = Span::start(&off, &Via::default());
        assert!(!span.context().sampled);
        assert!(!span.is_recording());
        assert!(span.propagate().traceparent.ends_with("-00"));
    }

    #[test]
    fn passthrough_keeps_only_valid_context() {
        let p = Propagate::passthrough(
            Some(" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            Some("a=b"),
            Some("bad\nvalue"),
        )
        .unwrap();
        assert_eq!(
            p.traceparent,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert_eq!(p.tracestate.as_deref(), Some("a=b"));
        assert_eq!(p.baggage, None);
        assert!(Propagate::passthrough(Some("junk"), None, None).is_none());
        assert!(Propagate::passthrough(None, Some("a=b"), None).is_none());
    }

    #[test]
    fn outcomes_of_results() {
        let ok = serde_json::json!({"content": [], "isError": false});
        assert_eq!(result_outcome(&ok), Outcome::Ok);
        let typed = serde_json::json!({"isError": true,
            "structuredContent": {"error": {"code": "file_not_found"}}});
        assert_eq!(result_outcome(&typed), Outcome::ToolError("file_not_found"));
        let plain = serde_json::json!({"isError": true, "content": []});
        assert_eq!(result_outcome(&plain), Outcome::ToolError("tool_error"));
    }
}
