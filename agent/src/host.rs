//! What the agent loop needs from whatever serves its tools — in kitbag, the gateway. The loop
//! lists tools, calls them, writes audit lines, switches the agent profile whose policy applies,
//! and (as `kitbag daemon`) hears its servers' notifications; nothing else of the gateway
//! reaches it, so it compiles and is tested without one.

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use kitbag_config::policy::Policy;
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, JsonObject, Tool};
use tokio_util::sync::CancellationToken;

/// The tools' side of the loop.
pub trait ToolHost: Send + Sync {
    /// The tools the model may be offered now, as the active policy allows them. Read at every
    /// step: a reload during a turn is seen by the next step.
    fn tools(&self) -> Vec<Tool>;

    /// Run one tool through the same routes, policy and audit as a served call. `request_id`
    /// names the call in logs; `cancel` stops it. `Err` only when no tool has that name.
    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: Option<JsonObject>,
        request_id: String,
        cancel: CancellationToken,
    ) -> BoxFuture<'a, Result<CallToolResult, ErrorData>>;

    /// One line in the host's audit log, when it keeps one.
    fn audit(&self, event: &str, fields: serde_json::Value);

    /// Apply an agent profile's policy to the tools (`None`: every tool) — `/agent` in a chat.
    fn set_policy(&self, policy: Option<std::sync::Arc<Policy>>);

    /// Custom notifications the servers send, from now on, in order.
    fn notifications(&self) -> BoxStream<'static, Heard>;

    /// The server a tool is routed to (as the host names it); `None` for the host's own.
    fn server_of(&self, tool: &str) -> Option<String>;

    /// Who answers the servers' questions to the operator (MCP elicitation) from now on:
    /// `kitbag chat` asks on the terminal, `kitbag run` and `daemon` pause the session
    /// (`None`: nobody; a server asking gets a refusal).
    fn set_operator(&self, operator: Option<std::sync::Arc<dyn Operator>>);
}

/// A server's question to the operator: an `elicitation/create` in form mode.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// The server asking (as the host names it).
    pub server: String,
    pub message: String,
    /// The form: an object schema of primitive properties.
    pub schema: serde_json::Value,
    /// What the server calls the question (`_meta["io.kitbag/inputKey"]`: `ask`, `form`,
    /// `checkpoint-N`), when it says.
    pub key: Option<String>,
}

impl Question {
    /// The checkpoint this question signs off, when it is one (`checkpoint-N`).
    pub fn checkpoint(&self) -> Option<u64> {
        self.key
            .as_deref()?
            .strip_prefix("checkpoint-")?
            .parse()
            .ok()
    }
}

/// Answers [`Question`]s: the result is an `ElicitResult` (`{"action": "accept", "content":
/// {...}}`, `{"action": "decline"}`, `{"action": "cancel"}`).
pub trait Operator: Send + Sync {
    fn ask(&self, question: Question) -> BoxFuture<'static, Result<serde_json::Value, Unanswered>>;
}

/// Why nobody can answer a question (the chat ended, the terminal failed).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct Unanswered(pub String);

/// What [`ToolHost::notifications`] yields.
#[derive(Debug, Clone)]
pub enum Heard {
    /// A server's custom notification.
    Notification {
        server: String,
        method: String,
        params: serde_json::Value,
    },
    /// This many notifications were dropped while the listener was busy.
    Missed(u64),
}
