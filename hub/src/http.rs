//! The host over MCP Streamable HTTP: kitbag-shared serves `/mcp` through rmcp, and a plain
//! `tools/call` POST is forwarded to its child at the byte level, as on stdio (fastpath.rs).

use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::HeaderMap;
use kitbag_shared::http::{Answer, HttpOptions, Intercept, Principal};
use kitbag_shared::metrics::label;
use kitbag_shared::otel::Propagate;
use kitbag_shared::tier::Tier;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::fastpath;
use crate::mrtr::Caps;
use crate::serve::HostServer;

/// Protocol revisions a handshake-era call may name in `MCP-Protocol-Version`.
const HANDSHAKE_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

pub async fn serve_http(host: HostServer, options: HttpOptions) -> anyhow::Result<()> {
    let fast: Arc<dyn Intercept> = Arc::new(ByteCalls { host: host.clone() });
    kitbag_shared::http::serve(host, options, Some(fast)).await
}

struct ByteCalls {
    host: HostServer,
}

impl Intercept for ByteCalls {
    fn tier_of(&self, tool: &str) -> Option<Tier> {
        self.host.tier_of(tool)
    }

    fn prepare(&self, tool: &str) -> BoxFuture<'static, ()> {
        // Each request is a task of its own here: it may wait out the whole start.
        let (hub, tool) = (self.host.hub.clone(), tool.to_string());
        Box::pin(async move {
            hub.wake_route(&tool, std::time::Duration::from_secs(24 * 3600))
                .await
        })
    }

    fn intercept(
        &self,
        headers: &HeaderMap,
        body: &Bytes,
        principal: Option<&Principal>,
        trace: Option<&Propagate>,
    ) -> Option<BoxFuture<'static, Answer>> {
        let text = std::str::from_utf8(body).ok()?;
        let call = match fastpath::classify(text.trim()) {
            fastpath::Upstream::Call(call) => call,
            // A 2026-07-28 call that carries `inputResponses` / `requestState` (SEP-2322).
            fastpath::Upstream::Other => {
                return self.input_call(headers, text.trim(), principal, trace);
            }
            _ => return None,
        };
        if !headers_agree(headers, &call) {
            // rmcp checks these headers and answers with the exact error.
            return None;
        }
        // The child continues the request's span; without one, the client's own context.
        let trace = trace.cloned().or_else(|| call.passthrough());
        if call.modern {
            let meta = request_meta(text.trim());
            return self.modern_call(&call, principal, &meta, Map::new(), trace.as_ref());
        }
        // The caller's agent and tiers apply (a call they forbid is left to the full path,
        // which answers it with the typed error).
        let pending = crate::access::as_caller_sync(principal.cloned(), || {
            self.host.pipeline().start_bytes(&call, trace.as_ref())
        })?;
        Some(Box::pin(async move {
            // The client hanging up drops this future: the child is told to stop.
            let _stop = fastpath::CancelOnDrop {
                link: pending.link.clone(),
                child_id: pending.child_id.clone(),
                reason: GONE,
            };
            match pending.answer(|| true).await {
                Some((body, error)) => Answer {
                    body,
                    error,
                    unread: false,
                },
                None => Answer::default(),
            }
        }))
    }

    /// The children: up (ready) or not, restarts; and the calls taken at the byte level.
    fn render_metrics(&self, out: &mut String) {
        use std::fmt::Write as _;
        let children = self.host.hub.lock();
        out.push_str("# HELP kitbag_child_up Whether a child server is ready (1) or not: starting, restarting, failed (0).\n# TYPE kitbag_child_up gauge\n");
        for ch in children.iter() {
            let up = u8::from(ch.state == crate::registry::State::Ready);
            let _ = writeln!(
                out,
                "kitbag_child_up{{server=\"{}\"}} {up}",
                label(&ch.spec.name)
            );
        }
        out.push_str("# HELP kitbag_child_restarts_total Times a child server was restarted after it exited.\n# TYPE kitbag_child_restarts_total counter\n");
        for ch in children.iter() {
            let _ = writeln!(
                out,
                "kitbag_child_restarts_total{{server=\"{}\"}} {}",
                label(&ch.spec.name),
                ch.restarts
            );
        }
        drop(children);
        out.push_str("# HELP kitbag_byte_path_calls_total Tool calls forwarded to a child as bytes (stdio and HTTP).\n# TYPE kitbag_byte_path_calls_total counter\n");
        let _ = writeln!(
            out,
            "kitbag_byte_path_calls_total {}",
            fastpath::forwarded()
        );
    }
}

/// Why a child's call is cancelled when its HTTP client hangs up.
const GONE: &str = "the HTTP client went away";

/// A `tools/call` as SEP-2322 shapes its retries.
#[derive(serde::Deserialize)]
struct InputCall<'a> {
    #[serde(borrow)]
    id: &'a RawValue,
    method: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    params: InputCallParams<'a>,
}

#[derive(serde::Deserialize)]
struct InputCallParams<'a> {
    #[serde(borrow)]
    name: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
    #[serde(rename = "_meta", default)]
    meta: Option<Value>,
    /// `Some` also for `null` (a protocol error to answer, not an absent field).
    #[serde(
        rename = "inputResponses",
        borrow,
        default,
        deserialize_with = "present"
    )]
    input_responses: Option<&'a RawValue>,
    #[serde(rename = "requestState", default)]
    request_state: Option<String>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue as serde::Deserialize>::deserialize(d).map(Some)
}

/// A string key of a request's `_meta` (its W3C trace context).
fn meta_text(meta: &Option<Value>, key: &str) -> Option<std::borrow::Cow<'static, str>> {
    let text = meta.as_ref()?.get(key)?.as_str()?;
    Some(std::borrow::Cow::Owned(text.to_owned()))
}

/// A request's `params._meta`, parsed (only on the 2026-07-28 path, which needs its declared
/// client capabilities).
fn request_meta(text: &str) -> Option<Value> {
    #[derive(serde::Deserialize)]
    struct Peek {
        params: PeekParams,
    }
    #[derive(serde::Deserialize)]
    struct PeekParams {
        #[serde(rename = "_meta", default)]
        meta: Option<Value>,
    }
    serde_json::from_str::<Peek>(text).ok()?.params.meta
}

impl ByteCalls {
    /// A 2026-07-28 call through the byte path, its child's requests turned into an
    /// `InputRequiredResult` (mrtr.rs).
    fn modern_call(
        &self,
        call: &fastpath::FastCall<'_>,
        principal: Option<&Principal>,
        meta: &Option<Value>,
        supplied: Map<String, Value>,
        trace: Option<&Propagate>,
    ) -> Option<BoxFuture<'static, Answer>> {
        let registry = self.host.hub.mrtr().clone();
        let child = self.host.hub.route(call.name.as_ref())?.child_id;
        let slot = registry.slot(child, Caps::from_meta(meta.as_ref()), supplied);
        let pending = crate::access::as_caller_sync(principal.cloned(), || {
            self.host.pipeline().start_bytes(call, trace)
        })?;
        let stop = fastpath::CancelOnDrop {
            link: pending.link.clone(),
            child_id: pending.child_id.clone(),
            reason: GONE,
        };
        let tool = bound_tool(call.name.as_ref(), principal);
        let id = call.id.get().to_owned();
        Some(Box::pin(async move {
            let answer: crate::mrtr::CallFuture = Box::pin(pending.answer(|| true));
            registry.drive(answer, slot, &tool, stop, &id).await
        }))
    }

    /// A `tools/call` with `inputResponses` and/or `requestState` (SEP-2322): a retry resumes
    /// its parked call; a first call with responses given in advance starts with them.
    fn input_call(
        &self,
        headers: &HeaderMap,
        text: &str,
        principal: Option<&Principal>,
        trace: Option<&Propagate>,
    ) -> Option<BoxFuture<'static, Answer>> {
        let req: InputCall<'_> = serde_json::from_str(text).ok()?;
        let p = &req.params;
        if req.method != "tools/call" || (p.input_responses.is_none() && p.request_state.is_none())
        {
            return None;
        }
        let modern = p
            .meta
            .as_ref()
            .and_then(|m| m.get("io.modelcontextprotocol/protocolVersion"))
            .and_then(Value::as_str)
            == Some(fastpath::MODERN_VERSION);
        let call = fastpath::FastCall {
            id: req.id,
            name: p.name.clone(),
            arguments: p.arguments,
            modern,
            traceparent: meta_text(&p.meta, "traceparent"),
            tracestate: meta_text(&p.meta, "tracestate"),
            baggage: meta_text(&p.meta, "baggage"),
        };
        if !modern || !headers_agree(headers, &call) {
            return None;
        }
        let id = req.id.get().to_owned();
        let refuse = |message: String| -> Option<BoxFuture<'static, Answer>> {
            let line = fastpath::protocol_error_line(&id, -32602, &message);
            Some(Box::pin(async move { Answer::unread(line) }))
        };
        let responses = match p
            .input_responses
            .map(|r| serde_json::from_str::<Value>(r.get()))
        {
            None => Map::new(),
            Some(Ok(Value::Object(m))) => m,
            Some(_) => {
                return refuse(
                    "inputResponses: must be an object whose keys are the inputRequests keys and whose values are the client's results".into(),
                );
            }
        };
        if let Some((key, _)) = responses.iter().find(|(_, v)| !v.is_object()) {
            return refuse(format!(
                "inputResponses.{key}: must be an object (the result of that input request)"
            ));
        }
        let Some(state) = p.request_state.clone() else {
            let trace = trace.cloned().or_else(|| call.passthrough());
            return self.modern_call(&call, principal, &p.meta, responses, trace.as_ref());
        };
        let registry = self.host.hub.mrtr().clone();
        let tool = bound_tool(&p.name, principal);
        Some(Box::pin(async move {
            match registry.resume(&state, &tool, &responses, &id).await {
                Ok(answer) => answer,
                Err(e) => {
                    Answer::unread(fastpath::protocol_error_line(&id, -32602, &e.to_string()))
                }
            }
        }))
    }
}

/// The tool a parked call's state is sealed to, with who called it: another caller's token
/// cannot resume it (a token without a subject is its own caller: see
/// `kitbag_shared::http::oauth::unnamed_subject`).
fn bound_tool(tool: &str, principal: Option<&Principal>) -> String {
    match principal {
        Some(p) => format!("{tool}\u{0}{}", p.subject),
        None => tool.to_owned(),
    }
}

/// The headers are what rmcp would accept for this call without a word: the protocol
/// version matches the era of the body, and the 2026-07-28 routing headers name this call.
fn headers_agree(headers: &HeaderMap, call: &fastpath::FastCall<'_>) -> bool {
    let header = |name: &str| -> Option<Option<&str>> {
        let mut values = headers.get_all(name).iter();
        let first = values.next();
        if values.next().is_some() {
            return None; // repeated: not ours to judge
        }
        match first {
            None => Some(None),
            Some(v) => v.to_str().ok().map(Some),
        }
    };
    let (Some(version), Some(method), Some(name)) = (
        header("mcp-protocol-version"),
        header("mcp-method"),
        header("mcp-name"),
    ) else {
        return false;
    };
    if headers.keys().any(|k| k.as_str().starts_with("mcp-param-")) {
        return false;
    }
    if call.modern {
        version == Some(fastpath::MODERN_VERSION)
            && method == Some("tools/call")
            && name == Some(call.name.as_ref())
    } else {
        version.is_none_or(|v| HANDSHAKE_VERSIONS.contains(&v))
            && method.is_none_or(|m| m == "tools/call")
            && name.is_none_or(|n| n == call.name.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(body: &str) -> (String, bool) {
        match fastpath::classify(body) {
            fastpath::Upstream::Call(c) => (c.name.to_string(), c.modern),
            _ => panic!("not a plain call: {body}"),
        }
    }

    fn agree(pairs: &[(&'static str, &str)], body: &str) -> bool {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().expect("header"));
        }
        let fastpath::Upstream::Call(c) = fastpath::classify(body) else {
            panic!("not a call")
        };
        headers_agree(&h, &c)
    }

    #[test]
    fn only_calls_whose_headers_match_their_body_take_the_byte_path() {
        let legacy = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"file_read","arguments":{}}}"#;
        let modern = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"file_read","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        assert_eq!(call(modern), ("file_read".into(), true));
        assert!(agree(&[], legacy));
        assert!(agree(&[("mcp-protocol-version", "2025-11-25")], legacy));
        assert!(!agree(&[("mcp-protocol-version", "2026-07-28")], legacy));
        assert!(!agree(&[("mcp-protocol-version", "1999-01-01")], legacy));
        let full = [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/call"),
            ("mcp-name", "file_read"),
        ];
        assert!(agree(&full, modern));
        assert!(!agree(&full[..2], modern), "Mcp-Name missing");
        assert!(!agree(
            &[full[0], full[1], ("mcp-name", "file_write")],
            modern
        ));
        assert!(
            !agree(
                &[full[0], full[1], full[2], ("mcp-name", "file_read")],
                modern
            ),
            "repeated header"
        );
    }
}
