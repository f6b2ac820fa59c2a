//! The pipeline's byte transport: a plain call routed and permitted like any other
//! (`pipeline.rs`), then sent to its child as bytes (`fastpath.rs`), its answer passed back
//! as bytes. Fronts (the stdio demux, HTTP) decide which calls are plain.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::oneshot;

use crate::fastpath::{self, FastCall, FastLink, Reply};
use crate::ledger::{Ledger, Opening};
use crate::pipeline::Pipeline;
use crate::registry::{CUT_OFF_REASON, CallGuard, FastRoute};

/// A plain call sent to its child at the byte level, its answer not yet in.
pub struct BytePending {
    pub link: Arc<FastLink>,
    pub child_id: String,
    rx: oneshot::Receiver<Reply>,
    server: String,
    timeout: Duration,
    upstream_id: String,
    modern: bool,
    /// Held until the answer is in: a reload stops this call's server only after that.
    guard: CallGuard,
    ledger: Ledger,
}

impl Pipeline<'_> {
    /// Send a plain call to its child as bytes, `trace` in its `_meta`; None leaves it to
    /// the rmcp transport (host tools, denied calls, a server not ready), which answers it.
    pub fn start_bytes(
        &self,
        call: &FastCall<'_>,
        trace: Option<&kitbag_shared::otel::Propagate>,
    ) -> Option<BytePending> {
        let mut name = call.name.as_ref();
        if self.own.owns(name) {
            return None;
        }
        let flat = self.hub.flat();
        // A seed's spelling of a child's tool; one that takes its tool from `action` needs
        // its arguments rewritten, which the rmcp transport does.
        let alias = kitbag_shared::aliases::resolve(name, None, |n| flat.routes.contains_key(n));
        if let Some(alias) = &alias {
            if alias.action_named {
                return None;
            }
            name = &alias.name;
        }
        if self.access.permit(&flat, name).is_err() {
            return None;
        }
        let FastRoute {
            link,
            private_args,
            original,
            server,
            timeout,
            guard,
        } = self.hub.fast_route(name)?;
        let (child_id, rx) = link.call(&original, call.arguments, trace)?;
        let upstream_id = call.id.get().to_string();
        let opening = Opening {
            tool: name,
            server: server.clone(),
            request_id: upstream_id.trim_matches('"').to_string(),
            agent: self.access.agent_name(),
            private_args: &private_args,
        };
        let ledger = Ledger::open(self.audit, opening, || {
            call.arguments
                .and_then(|a| serde_json::from_str(a.get()).ok())
                .unwrap_or_else(|| json!({}))
        });
        Some(BytePending {
            link,
            child_id,
            rx,
            server,
            timeout,
            upstream_id,
            modern: call.modern,
            guard,
            ledger,
        })
    }
}

impl BytePending {
    /// The call's span, when the front leaves it to the call (stdio).
    pub fn with_span(mut self, span: Option<kitbag_shared::otel::Span>) -> Self {
        self.ledger = self.ledger.with_span(span);
        self
    }

    /// Wait for the child's answer (bounded by the server's timeout) and render the
    /// response, with the error code of an `isError` result. `claim` says whether the
    /// answer is still wanted; a timeout is answered regardless, and the child is told to
    /// stop.
    pub async fn answer(
        mut self,
        claim: impl FnOnce() -> bool,
    ) -> Option<(fastpath::Line, Option<String>)> {
        // None: a reload stopped waiting for this call (see `Calls::cut_off`).
        let outcome = tokio::select! {
            // An answer already in wins over a cut-off that comes at the same moment.
            biased;
            r = tokio::time::timeout(self.timeout, &mut self.rx) => Some(r),
            _ = self.guard.cut_off() => None,
        };
        let wanted = claim();
        let (upstream_id, modern, server) = (&self.upstream_id, self.modern, &self.server);
        let unavailable = |message: &str| {
            (
                fastpath::error_line(upstream_id, "server_unavailable", message, modern),
                Some("server_unavailable".to_string()),
            )
        };
        let (line, code) = match outcome {
            None => {
                self.link.cancel(&self.child_id, CUT_OFF_REASON);
                if !wanted {
                    self.ledger.cancelled();
                    return None;
                }
                unavailable(&crate::failure::stopped_by_reload_message(server))
            }
            // A call the client cancelled meanwhile is owed no answer.
            Some(Ok(_)) if !wanted => {
                self.ledger.cancelled();
                return None;
            }
            Some(Ok(Ok(reply))) => match &reply {
                Reply::Error(e) => unavailable(&format!("server {server}: {}", e.get())),
                r => (
                    fastpath::response_line(upstream_id, r, modern),
                    fastpath::result_error_code(&reply),
                ),
            },
            Some(Ok(Err(_))) => unavailable(&if self.guard.stopped_by_reload() {
                crate::failure::stopped_by_reload_message(server)
            } else {
                format!(
                    "server {server} exited during the call; it is being restarted — the call did not complete"
                )
            }),
            Some(Err(_)) => {
                self.link.cancel(&self.child_id, "timed out in the host");
                let message = format!(
                    "server {server} did not answer within {} s",
                    self.timeout.as_secs()
                );
                (
                    fastpath::error_line(upstream_id, "timeout", &message, modern),
                    Some("timeout".to_string()),
                )
            }
        };
        self.ledger.finish(code.as_deref());
        Some((line, code))
    }
}
