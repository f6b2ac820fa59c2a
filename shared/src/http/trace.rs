//! Spans of MCP requests over HTTP (when [`crate::otel::enabled`]): opened from the POST
//! body (method, id, tool, `params._meta` trace context) and the headers (`traceparent`,
//! `Mcp-Session-Id`, `MCP-Protocol-Version`); ended when the answer's last byte has gone,
//! with the outcome read from the answer (a JSON body or an SSE stream).

use std::borrow::Cow;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::{Body, Frame, SizeHint};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::otel::{Outcome, Request, Span, Via};

/// The most of an answer kept to find its outcome; a longer answer is a success (error
/// results are short).
const KEEP_BYTES: usize = 1 << 20;

#[derive(Deserialize)]
struct PeekRequest<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct PeekParams<'a> {
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    uri: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct PeekMeta<'a> {
    #[serde(borrow, default)]
    traceparent: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tracestate: Option<&'a RawValue>,
    #[serde(borrow, default)]
    baggage: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "io.modelcontextprotocol/protocolVersion")]
    protocol_version: Option<&'a RawValue>,
}

fn string(raw: Option<&RawValue>) -> Option<Cow<'_, str>> {
    serde_json::from_str::<Cow<'_, str>>(raw?.get()).ok()
}

/// A request id as the span shows it: a string without its quotes, a number as written;
/// None for null.
pub(crate) fn id_text(raw: &RawValue) -> Option<Cow<'_, str>> {
    match raw.get() {
        "null" => None,
        text if text.starts_with('"') => serde_json::from_str(text).ok(),
        text => Some(Cow::Borrowed(text)),
    }
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The span of a POSTed JSON-RPC request, and the request's id (None for a notification, a
/// response, a batch or a body that is not JSON).
pub(crate) fn start(
    headers: &HeaderMap,
    body: &[u8],
    transport: &'static str,
    client: Option<std::net::SocketAddr>,
) -> Option<(Span, Option<String>)> {
    let peek: PeekRequest<'_> = serde_json::from_slice(body).ok()?;
    let method = peek.method?;
    let id = id_text(peek.id?);
    let params: PeekParams<'_> = peek
        .params
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or_default();
    let meta: PeekMeta<'_> = params
        .meta
        .and_then(|m| serde_json::from_str(m.get()).ok())
        .unwrap_or_default();
    let name = string(params.name);
    let uri = string(params.uri);
    let traceparent = string(meta.traceparent);
    let tracestate = string(meta.tracestate);
    let baggage = string(meta.baggage);
    let version = string(meta.protocol_version);
    let (tool, prompt) = match method.as_ref() {
        "tools/call" => (name.as_deref(), None),
        "prompts/get" => (None, name.as_deref()),
        _ => (None, None),
    };
    let uri = match method.as_ref() {
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => uri.as_deref(),
        _ => None,
    };
    let request = Request {
        method: &method,
        id: id.as_deref(),
        tool,
        prompt,
        uri,
        traceparent: traceparent.as_deref(),
        tracestate: tracestate.as_deref(),
        baggage: baggage.as_deref(),
        protocol_version: version
            .as_deref()
            .or_else(|| header(headers, "mcp-protocol-version")),
    };
    let via = Via {
        transport,
        http: true,
        session: header(headers, "mcp-session-id"),
        client,
        header_traceparent: header(headers, "traceparent"),
        header_tracestate: header(headers, "tracestate"),
    };
    let span = Span::start(&request, &via);
    Some((span, id.map(Cow::into_owned)))
}

#[derive(Deserialize)]
struct PeekAnswer<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<PeekError>,
}

#[derive(Deserialize)]
struct PeekError {
    code: i64,
    #[serde(default)]
    message: String,
}

/// How one JSON-RPC answer ended; None when `message` is not the answer to `id`.
fn outcome_of(message: &[u8], id: Option<&str>, found: &mut dyn FnMut(Outcome<'_>)) -> bool {
    let Ok(answer) = serde_json::from_slice::<PeekAnswer<'_>>(message) else {
        return false;
    };
    if let (Some(want), Some(got)) = (id, answer.id.and_then(id_text))
        && want != got
    {
        return false;
    }
    match (answer.result, answer.error) {
        (_, Some(e)) => found(Outcome::RpcError {
            code: e.code,
            message: &e.message,
        }),
        (Some(result), None) => {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(result.get()) else {
                return false;
            };
            found(crate::otel::result_outcome(&v));
        }
        (None, None) => return false,
    }
    true
}

/// End `span` by the answer `body` (JSON, or SSE events whose data is JSON).
fn end_by_body(span: Span, id: Option<&str>, body: &[u8], sse: bool) {
    let mut span = Some(span);
    let mut end = |outcome: Outcome<'_>| {
        if let Some(s) = span.take() {
            s.end(outcome);
        }
    };
    if sse {
        let text = String::from_utf8_lossy(body);
        for line in text.lines() {
            if let Some(data) = line.strip_prefix("data:")
                && outcome_of(data.trim_start().as_bytes(), id, &mut end)
            {
                break;
            }
        }
    } else {
        outcome_of(body, id, &mut end);
    }
    // No answer found (an empty 202, a stream that ended early): done without an error.
    end(Outcome::Ok);
}

/// A span ended as cancelled if it is dropped before its answer (the client hung up).
pub(crate) struct EndOnDrop(pub(crate) Option<(Span, Option<String>)>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        if let Some((span, _)) = self.0.take() {
            span.end(Outcome::Cancelled);
        }
    }
}

/// A response body that ends its request's span when its last byte has gone (or, if the
/// client went away first, as cancelled).
pub(crate) struct Traced {
    inner: BoxBody<Bytes, Infallible>,
    span: Option<Span>,
    id: Option<String>,
    sse: bool,
    kept: Vec<Bytes>,
    kept_len: usize,
    overflow: bool,
}

impl Traced {
    pub(crate) fn wrap(
        inner: BoxBody<Bytes, Infallible>,
        span: Span,
        id: Option<String>,
        sse: bool,
    ) -> BoxBody<Bytes, Infallible> {
        Traced {
            inner,
            span: Some(span),
            id,
            sse,
            kept: Vec::new(),
            kept_len: 0,
            overflow: false,
        }
        .boxed()
    }

    fn finish(&mut self) {
        let Some(span) = self.span.take() else { return };
        if self.overflow && !self.sse {
            span.end(Outcome::Ok);
            return;
        }
        let body: Cow<'_, [u8]> = match self.kept.as_slice() {
            [one] => Cow::Borrowed(&one[..]),
            many => Cow::Owned(many.concat()),
        };
        end_by_body(span, self.id.as_deref(), &body, self.sse);
    }
}

impl Drop for Traced {
    fn drop(&mut self) {
        // Dropped before the end: the client went away.
        if let Some(span) = self.span.take() {
            span.end(Outcome::Cancelled);
        }
    }
}

impl Body for Traced {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    if self.kept_len + data.len() <= KEEP_BYTES {
                        self.kept_len += data.len();
                        let data = data.clone();
                        self.kept.push(data);
                    } else {
                        self.overflow = true;
                    }
                }
                if self.inner.is_end_stream() {
                    self.finish();
                }
            }
            Poll::Ready(None) => self.finish(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn outcome(body: &str, id: Option<&str>, sse: bool) -> Option<String> {
        let mut got = None;
        let mut set = |o: Outcome<'_>| got = Some(format!("{o:?}"));
        if sse {
            for line in body.lines() {
                if let Some(d) = line.strip_prefix("data:")
                    && outcome_of(d.trim_start().as_bytes(), id, &mut set)
                {
                    break;
                }
            }
        } else {
            outcome_of(body.as_bytes(), id, &mut set);
        }
        got
    }

    #[test]
    fn outcomes_are_read_from_json_and_sse_answers() {
        let ok = r#"{"jsonrpc":"2.0","id":3,"result":{"content":[],"isError":false}}"#;
        assert_eq!(outcome(ok, Some("3"), false).as_deref(), Some("Ok"));
        let tool = r#"{"jsonrpc":"2.0","id":"a","result":{"isError":true,"structuredContent":{"error":{"code":"file_not_found"}}}}"#;
        assert_eq!(
            outcome(tool, Some("a"), false).as_deref(),
            Some("ToolError(\"file_not_found\")")
        );
        let rpc = r#"{"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"unknown tool"}}"#;
        assert_eq!(
            outcome(rpc, Some("4"), false).as_deref(),
            Some("RpcError { code: -32602, message: \"unknown tool\" }")
        );
        let sse = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":5,\"result\":{\"isError\":true}}\n\n";
        assert_eq!(
            outcome(sse, Some("5"), true).as_deref(),
            Some("ToolError(\"tool_error\")")
        );
        assert_eq!(outcome(ok, Some("9"), false), None, "another id");
    }

    #[test]
    fn ids_read_as_the_span_shows_them() {
        let raw = |s: &str| RawValue::from_string(s.into()).unwrap();
        assert_eq!(id_text(&raw("7")).as_deref(), Some("7"));
        assert_eq!(id_text(&raw("\"req-1\"")).as_deref(), Some("req-1"));
        assert_eq!(id_text(&raw("null")), None);
    }
}
