//! Asking the operator for input in the middle of a tool call (`elicitation/create`, form
//! mode), in both protocol eras:
//!
//! - **handshake era** (2025-11-25): a request to the client on the call's connection, whose
//!   answer the call waits for. The request names its key in `_meta["io.kitbag/inputKey"]`,
//!   which is how `kitbag serve` names it to a 2026-07-28 client when it relays;
//! - **2026-07-28** (SEP-2322, no server-to-client requests): the call answers with an
//!   `InputRequiredResult` naming the request under its key; the client asks its user and
//!   calls again with the answer in `inputResponses[key]`, which the tool then reads. A tool
//!   that elicits is therefore written so that running it again with the same arguments
//!   reaches the same question.
//!
//! A client without the capability (or a host with no client to ask) gets a typed
//! `elicitation_unsupported`.

pub mod answer;

use std::collections::BTreeMap;
use std::sync::Mutex;

use rmcp::model::{ElicitResult, InputRequest, InputRequests, ServerRequest};
use rmcp::service::{Peer, RoleServer, ServiceError};
use serde_json::{Value, json};

use crate::error::{ErrorCode, ToolError, ToolResult};
use crate::lock::LockExt;

/// Where a request names its key (the host's `mrtr.rs` reads the same key).
pub const KEY_META: &str = "io.kitbag/inputKey";

/// Which clients answer elicitation, for the refusal's message.
const WHO_ANSWERS: &str = "clients that declare the `elicitation` capability answer it: \
    the MCP Python SDK (`elicitation_callback`), the TypeScript SDK (an `elicitation/create` \
    handler), `kitbag chat` and `kitbag run`";

/// What one call's client can answer, and what it already answered (2026-07-28 retries).
#[derive(Debug, Default)]
pub struct Input {
    /// The call is of the 2026-07-28 era: ask by answering `input_required`.
    modern: bool,
    /// The client declared `elicitation` (2026-07-28: in the request's `_meta`).
    capable: bool,
    /// `inputResponses` of a 2026-07-28 retry, by key.
    responses: BTreeMap<String, Value>,
    /// What the call asked for and has no answer to yet (2026-07-28): key → params.
    asked: Mutex<BTreeMap<String, Value>>,
}

impl Input {
    pub fn new(modern: bool, capable: bool, responses: BTreeMap<String, Value>) -> Input {
        Input {
            modern,
            capable,
            responses,
            asked: Mutex::default(),
        }
    }

    /// Answers of earlier rounds, carried in `requestState` (the JSON object of them): a
    /// client sends only the last round's `inputResponses`. The state is the client's to
    /// forge, but so are the answers themselves.
    pub fn add_earlier(&mut self, state: Option<&str>) {
        let Some(earlier) =
            state.and_then(|s| serde_json::from_str::<BTreeMap<String, Value>>(s).ok())
        else {
            return;
        };
        for (key, answer) in earlier {
            self.responses.entry(key).or_insert(answer);
        }
    }

    /// The `requestState` to send with a new round: every answer so far.
    pub fn state(&self) -> Option<String> {
        (!self.responses.is_empty())
            .then(|| serde_json::to_string(&self.responses).ok())
            .flatten()
    }

    /// The `inputRequests` of an `InputRequiredResult`, when the call asked for something it
    /// has no answer to (2026-07-28); `None` otherwise.
    pub fn input_requests(&self) -> Option<InputRequests> {
        let asked = std::mem::take(&mut *self.asked.locked());
        if asked.is_empty() {
            return None;
        }
        let mut requests = InputRequests::new();
        for (key, params) in asked {
            let request = json!({"method": "elicitation/create", "params": params});
            match serde_json::from_value::<InputRequest>(request) {
                Ok(r) => {
                    requests.insert(key, r);
                }
                Err(e) => tracing::warn!("elicitation {key} cannot be sent: {e}"),
            }
        }
        Some(requests)
    }
}

/// The form-mode `elicitation/create` params for `message` and `schema`, keyed.
pub fn form_params(key: &str, message: &str, schema: &Value) -> Value {
    json!({
        "mode": "form",
        "message": message,
        "requestedSchema": schema,
        "_meta": { KEY_META: key },
    })
}

/// Ask the call's client `message` with a form of `schema` (an elicitation schema: an object
/// of primitive properties). `key` names the question across a 2026-07-28 retry.
pub async fn ask(
    input: Option<&Input>,
    peer: Option<&Peer<RoleServer>>,
    key: &str,
    message: &str,
    schema: &Value,
) -> ToolResult<ElicitResult> {
    let params = form_params(key, message, schema);
    // The params must be a request the protocol allows (rmcp's types hold its rules).
    let typed: rmcp::model::ElicitRequestParams = serde_json::from_value(params.clone())
        .map_err(|e| ToolError::internal(format!("elicitation schema rejected: {e}")))?;
    match input {
        Some(input) if input.modern => {
            if let Some(answer) = input.responses.get(key) {
                return serde_json::from_value(answer.clone()).map_err(|e| {
                    ToolError::invalid_field(
                        &format!("inputResponses.{key}"),
                        format!("not an elicitation result ({e})"),
                    )
                });
            }
            if !input.capable {
                return Err(unsupported("the client did not declare it"));
            }
            input.asked.locked().insert(key.to_string(), params);
            Err(ToolError::new(
                ErrorCode::InputRequired,
                format!("waiting for the client's answer to `{key}`"),
            ))
        }
        _ => ask_peer(peer, typed).await,
    }
}

async fn ask_peer(
    peer: Option<&Peer<RoleServer>>,
    params: rmcp::model::ElicitRequestParams,
) -> ToolResult<ElicitResult> {
    let Some(peer) = peer else {
        return Err(unsupported("there is no client connection"));
    };
    let declared = peer
        .peer_info()
        .is_some_and(|info| info.capabilities.elicitation.is_some());
    if !declared {
        return Err(unsupported("the client did not declare it"));
    }
    let request = ServerRequest::ElicitRequest(rmcp::model::Request::new(params));
    match peer.send_request(request).await {
        Ok(rmcp::model::ClientResult::ElicitResult(r)) => Ok(r),
        Ok(other) => Err(ToolError::internal(format!(
            "the client answered elicitation/create with {other:?}"
        ))),
        // A client (or a host) that cannot ask anyone refuses the request itself.
        Err(ServiceError::McpError(e))
            if e.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND
                || e.code == rmcp::model::ErrorCode::INVALID_REQUEST =>
        {
            Err(unsupported(&e.message))
        }
        Err(e) => Err(ToolError::internal(format!(
            "elicitation/create failed: {e}"
        ))),
    }
}

fn unsupported(why: &str) -> ToolError {
    ToolError::new(
        ErrorCode::ElicitationUnsupported,
        format!(
            "this tool asks the operator through MCP elicitation, which this client cannot answer ({why}); {WHO_ANSWERS}"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})
    }

    #[tokio::test]
    async fn a_modern_call_asks_by_input_required_and_reads_the_retry() {
        let first = Input::new(true, true, BTreeMap::new());
        let e = ask(Some(&first), None, "q", "Proceed?", &schema())
            .await
            .expect_err("no answer yet");
        assert_eq!(e.code, ErrorCode::InputRequired);
        let requests = first.input_requests().expect("asked");
        let asked = serde_json::to_value(&requests).expect("json");
        assert_eq!(asked["q"]["method"], "elicitation/create");
        assert_eq!(asked["q"]["params"]["message"], "Proceed?");
        assert!(first.input_requests().is_none(), "taken once");

        let answers = BTreeMap::from([(
            "q".to_string(),
            json!({"action": "accept", "content": {"ok": true}}),
        )]);
        let retry = Input::new(true, true, answers);
        let r = ask(Some(&retry), None, "q", "Proceed?", &schema())
            .await
            .expect("answered");
        assert_eq!(r.content, Some(json!({"ok": true})));
        assert!(retry.input_requests().is_none());
    }

    #[tokio::test]
    async fn without_the_capability_the_answer_is_typed() {
        let modern = Input::new(true, false, BTreeMap::new());
        let e = ask(Some(&modern), None, "q", "?", &schema()).await;
        assert_eq!(
            e.expect_err("refused").code,
            ErrorCode::ElicitationUnsupported
        );
        let e = ask(None, None, "q", "?", &schema()).await;
        assert_eq!(
            e.expect_err("refused").code,
            ErrorCode::ElicitationUnsupported
        );
        let bad = Input::new(true, true, BTreeMap::from([("q".into(), json!(7))]));
        let e = ask(Some(&bad), None, "q", "?", &schema()).await;
        assert_eq!(e.expect_err("bad").detail["field"], "inputResponses.q");
    }
}
