//! One tool call through the host, whoever asked — an MCP client over stdio or HTTP, the
//! agent loop (`kitbag run`), `kitbag call` — and however it travels to its server:
//!
//! route (the host's own tools, else the child that offers the name) → permit (agent policy
//! and the caller's tiers) → record (span, audit, metrics: [`Ledger`]) → forward.
//!
//! Forwarding has two transports: through rmcp here ([`Pipeline::call`]), or as bytes
//! ([`Pipeline::start_bytes`] in `byte_call.rs`) for plain calls, where decoding and
//! re-encoding would cost more than the hop. Both take the same steps above.

use futures::future::BoxFuture;
use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResult, JsonObject, ProgressToken};
use rmcp::service::{Peer, RoleServer};

use crate::access::Access;
use crate::ledger::{HOST_SERVER, Ledger, Opening, error_code, error_result};
use crate::registry::{Hub, Route, protocol_error};

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

/// The host's own tools (`host_status`, `host_reload`), answered without a child.
pub trait OwnTools: Sync {
    /// Whether `name` is one of them (in this configuration).
    fn owns(&self, name: &str) -> bool;

    /// Answer a call of one of them (`meta`: its progress and cancellation).
    fn call_own<'a>(
        &'a self,
        name: &'a str,
        arguments: Option<JsonObject>,
        meta: CallMeta,
    ) -> BoxFuture<'a, CallToolResult>;
}

/// What a call goes through: the registry of children, who may call what, the audit log,
/// and the host's own tools.
pub struct Pipeline<'a> {
    pub hub: &'a std::sync::Arc<Hub>,
    pub access: &'a Access,
    pub audit: Option<&'a kitbag_shared::audit::AuditLog>,
    pub own: &'a dyn OwnTools,
}

impl Pipeline<'_> {
    /// Run the tool `name`. An unknown name is a protocol error (the caller decides how to
    /// show it); everything else is a result, with errors typed in it.
    pub async fn call(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        meta: CallMeta,
    ) -> Result<CallToolResult, McpError> {
        // A seed's spelling (`file.read`, `kaged.issue.list`, `kaged.workflow.list`,
        // `read_file`) is the tool it names from here on — a child's or the host's own: the
        // policy checks that tool, the audit line names it.
        let mut arguments = arguments;
        let resolved = if self.own.owns(name) {
            None
        } else {
            let flat = self.hub.flat();
            kitbag_shared::aliases::resolve_call(name, &mut arguments, |n| {
                self.own.owns(n) || flat.routes.contains_key(n)
            })
        };
        let name = resolved.as_deref().unwrap_or(name);
        if self.own.owns(name) {
            let ledger = self.open(name, HOST_SERVER.into(), &meta.request_id, &[], &arguments);
            let result = self.own.call_own(name, arguments, meta).await;
            ledger.finish(error_code(&result));
            return Ok(result);
        }
        let route = match self.hub.route(name) {
            Some(route) => route,
            // Perhaps the tool of a server a reload is (re)starting: known once it is ready.
            None => {
                self.hub.settle().await;
                self.hub.route(name).ok_or_else(|| {
                    protocol_error(format!(
                        "unknown tool `{name}`; call tools/list for the available tools"
                    ))
                })?
            }
        };
        let ledger = self.open(
            name,
            self.hub.server_name(route.child),
            &meta.request_id,
            &route.private_args,
            &arguments,
        );
        let result = match self.access.permit(&self.hub.flat(), name) {
            Err((code, message)) => {
                ledger.denied(code);
                error_result(code, message)
            }
            Ok(()) => self.forward(&route, arguments, meta).await,
        };
        ledger.finish(error_code(&result));
        Ok(result)
    }

    /// The forward step through rmcp: progress, cancellation and the reload cut-off are the
    /// hub's.
    async fn forward(
        &self,
        route: &Route,
        arguments: Option<JsonObject>,
        meta: CallMeta,
    ) -> CallToolResult {
        // A server waiting for its first call starts now; this call waits for it.
        self.hub.wake(route.child_id).await;
        self.hub
            .call(route, arguments, meta.progress, meta.ct, meta.trace)
            .await
            .unwrap_or_else(|failure| error_result(failure.code(), failure.to_string()))
    }

    fn open(
        &self,
        tool: &str,
        server: String,
        request_id: &str,
        private_args: &[String],
        arguments: &Option<JsonObject>,
    ) -> Ledger {
        let opening = Opening {
            tool,
            server,
            request_id: request_id.to_string(),
            agent: self.access.agent_name(),
            private_args,
        };
        Ledger::open(self.audit, opening, || {
            serde_json::Value::Object(arguments.clone().unwrap_or_default())
        })
    }
}
