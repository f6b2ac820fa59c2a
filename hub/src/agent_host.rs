//! The gateway as the agent loop's tool host: `kitbag run`, `chat` and `daemon` call tools
//! through the same dispatch as served calls (routes, policy, audit, metrics).

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use kitbag_agent::host::{Heard, Operator, ToolHost};
use kitbag_config::policy::Policy;
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, JsonObject, Tool};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::pipeline::CallMeta;
use crate::serve::HostServer;

impl ToolHost for HostServer {
    fn tools(&self) -> Vec<Tool> {
        HostServer::tools(self)
    }

    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: Option<JsonObject>,
        request_id: String,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<CallToolResult, ErrorData>> {
        let meta = CallMeta {
            request_id,
            progress: None,
            ct: cancel,
            trace: None,
        };
        Box::pin(self.dispatch(name, arguments, meta))
    }

    fn audit(&self, event: &str, fields: serde_json::Value) {
        if let Some(a) = &self.audit {
            a.event(event, fields);
        }
    }

    fn set_policy(&self, policy: Option<std::sync::Arc<Policy>>) {
        self.access.set_configured(policy);
    }

    fn server_of(&self, tool: &str) -> Option<String> {
        let route = self.hub.route(tool)?;
        let children = self.hub.lock();
        children.get(route.child).map(|c| c.spec.name.clone())
    }

    fn set_operator(&self, operator: Option<std::sync::Arc<dyn Operator>>) {
        self.hub.set_operator(operator);
    }

    fn notifications(&self) -> BoxStream<'static, Heard> {
        let events = self.hub.child_events();
        Box::pin(futures::stream::unfold(events, |mut events| async move {
            let heard = match events.recv().await {
                Ok(e) => Heard::Notification {
                    server: e.server,
                    method: e.method,
                    params: e.params,
                },
                Err(RecvError::Lagged(n)) => Heard::Missed(n),
                Err(RecvError::Closed) => return None,
            };
            Some((heard, events))
        }))
    }
}
