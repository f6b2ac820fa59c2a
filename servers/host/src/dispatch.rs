//! One tool call through the host, whoever asked: an MCP client (`call_tool`) or the agent
//! loop (`kitbag run`). The same routes, agent policy and audit either way.

use std::time::Instant;

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, ProgressToken};
use rmcp::service::{Peer, RoleServer};
use serde_json::json;

use crate::hub::protocol_error;
use crate::serve::{HostServer, RELOAD_TOOL, STATUS_TOOL, error_result};

/// Who asked, for the audit log, progress and cancellation.
pub struct CallMeta {
    /// The JSON-RPC id as text (served calls) or the loop's own call id.
    pub request_id: String,
    /// Where progress notifications go: the requesting peer, or `None` for the host's own
    /// local listener (`Hub::local_progress`).
    pub progress: Option<(ProgressToken, Option<Peer<RoleServer>>)>,
    pub ct: tokio_util::sync::CancellationToken,
    /// The trace context the child's call carries in its `_meta` (this request's span).
    pub trace: Option<kitbag_shared::otel::Propagate>,
}

impl HostServer {
    /// Run the tool `name`: the host's own tools, else the child that offers it. An unknown
    /// name is a protocol error (the caller decides how to show it); everything else is a
    /// result, with errors typed in it — and counted for `/metrics`.
    pub async fn dispatch(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        meta: CallMeta,
    ) -> Result<CallToolResult, McpError> {
        let started = Instant::now();
        let result = self.dispatch_uncounted(name, arguments, meta).await;
        if let Ok(r) = &result {
            let code = (r.is_error == Some(true)).then(|| {
                r.structured_content
                    .as_ref()
                    .and_then(|s| s.get("error")?.get("code")?.as_str())
                    .unwrap_or("tool_error")
            });
            kitbag_shared::http::metrics::calls().record(
                name,
                code,
                started.elapsed().as_secs_f64(),
            );
        }
        result
    }

    async fn dispatch_uncounted(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        meta: CallMeta,
    ) -> Result<CallToolResult, McpError> {
        if name == STATUS_TOOL {
            return Ok(self.status_call());
        }
        if name == RELOAD_TOOL && self.loader.is_some() {
            return Ok(self.reload_call().await);
        }
        let route = match self.hub.route(name) {
            Some(route) => Some(route),
            // Perhaps the tool of a server a reload is (re)starting: known once it is ready.
            None => {
                self.hub.settle().await;
                self.hub.route(name)
            }
        };
        let Some(route) = route else {
            return Err(protocol_error(format!(
                "unknown tool `{}`; call tools/list for the available tools",
                name
            )));
        };
        let started = Instant::now();
        let params = serde_json::Value::Object(arguments.clone().unwrap_or_default());
        // The agent policy is enforced on calls as well as on the list.
        let result = match self.permit(name) {
            Err((code, message)) => {
                if let Some(a) = &self.audit {
                    a.denied(
                        name,
                        &meta.request_id,
                        code,
                        &json!({"agent": self.agent_name()}),
                    );
                }
                error_result(code, message)
            }
            Ok(()) => {
                match self
                    .hub
                    .call(
                        &route,
                        arguments,
                        meta.progress,
                        meta.ct.clone(),
                        meta.trace,
                    )
                    .await
                {
                    Ok(r) => r,
                    Err(failure) => error_result(failure.code(), failure.to_string()),
                }
            }
        };
        if let Some(a) = &self.audit {
            let code = result
                .structured_content
                .as_ref()
                .and_then(|s| s["error"]["code"].as_str().map(str::to_string))
                .filter(|_| result.is_error == Some(true));
            a.event(
                "tool.call",
                json!({
                    "agent": self.agent_name(),
                    "server": self.hub.server_name(route.child),
                    "tool": name,
                    "request_id": meta.request_id,
                    "duration_ms": started.elapsed().as_secs_f64() * 1000.0,
                    "ok": code.is_none(),
                    "error_code": code,
                    "params": kitbag_shared::audit::redact_private(&params, &route.private_args),
                }),
            );
        }
        Ok(result)
    }

    /// host_status: each server's state and each agent session's use, as text and structured.
    fn status_call(&self) -> CallToolResult {
        if let Err((code, message)) = self.permit_own(&Self::status_tool(), true) {
            return error_result(code, message);
        }
        let status = self.status();
        let mut text = String::new();
        for s in &status.servers {
            text.push_str(&format!(
                "{}: {:?}, {} tools, {} restarts{}\n",
                s.name,
                s.state,
                s.tools,
                s.restarts,
                s.last_error
                    .as_ref()
                    .map(|e| format!(" — {e}"))
                    .unwrap_or_default()
            ));
        }
        for s in &status.sessions {
            text.push_str(&format!(
                "session {}: {} turns, {} model calls, tokens in {} (cache read {}, write {}) out {}\n",
                s.name,
                s.turns,
                s.model_calls,
                s.input_tokens,
                s.cache_read,
                s.cache_creation,
                s.output_tokens
            ));
        }
        let mut r = CallToolResult::success(vec![ContentBlock::text(text.trim_end().to_string())]);
        r.structured_content = serde_json::to_value(&status).ok();
        r
    }

    /// host_reload: re-read the configuration and say what started, stopped or stayed.
    async fn reload_call(&self) -> CallToolResult {
        if let Err((code, message)) = self.permit_own(&Self::reload_tool(), false) {
            return error_result(code, message);
        }
        match self.reload().await {
            Ok(report) => {
                let text = format!(
                    "reloaded: started [{}], stopped [{}], unchanged [{}]",
                    report.started.join(", "),
                    report.stopped.join(", "),
                    report.unchanged.join(", ")
                );
                let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
                r.structured_content = serde_json::to_value(&report).ok();
                r
            }
            Err(e) => error_result("invalid_params", e.to_string()),
        }
    }
}
