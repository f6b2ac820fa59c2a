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

use serde_json::Map;

use crate::asking;
use crate::fastpath;
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
                let agree = |call: &fastpath::FastCall<'_>| headers_agree(headers, call);
                return match asking::input_call(
                    &self.host,
                    text.trim(),
                    principal,
                    trace,
                    &agree,
                    GONE,
                )? {
                    asking::InputCall::Start(call) => Some(call.answer),
                    asking::InputCall::Resume(answer) => Some(answer),
                };
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
            let meta = asking::request_meta(text.trim());
            let from = asking::From {
                principal,
                trace: trace.as_ref(),
                span: None,
                gone: GONE,
            };
            return asking::modern_call(&self.host, &call, &meta, Map::new(), from)
                .map(|call| call.answer);
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
