//! What a child asks of the client, relayed to the host's own client: sampling
//! (`sampling/createMessage`), elicitation (`elicitation/create`) and log messages
//! (`notifications/message`, with `logging/setLevel` passed down). All three are handshake-era
//! features (deprecated by SEP-2577, absent from 2026-07-28): they reach a client over stdio or
//! an HTTP session (`--http-sessions`), the one heard from last — a child's request names no
//! upstream request, and a stateless HTTP request cannot be asked anything back.

// Sampling and logging are deprecated by SEP-2577: still the handshake era's.
#![allow(deprecated)]

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    LoggingMessageNotificationParam, SetLevelRequestParams,
};
use rmcp::service::{Peer, RoleClient, RoleServer, ServiceError};

use crate::mrtr::Registry;
use crate::upstream::Upstreams;

/// The client to ask for `what`, if it declared the capability.
fn client(
    upstreams: &Upstreams,
    server: &str,
    what: &str,
    declared: impl Fn(&rmcp::model::ClientCapabilities) -> bool,
) -> Result<Peer<RoleServer>, McpError> {
    let peer = upstreams.latest().ok_or_else(|| {
        McpError::invalid_request(
            format!("server {server} asked for {what}, but no client is connected"),
            None,
        )
    })?;
    if !peer
        .peer_info()
        .is_some_and(|info| declared(&info.capabilities))
    {
        return Err(McpError::invalid_request(
            format!("server {server} asked for {what}, which the host's client did not declare"),
            None,
        ));
    }
    Ok(peer)
}

fn answer_error(e: ServiceError) -> McpError {
    match e {
        ServiceError::McpError(e) => e,
        other => McpError::internal_error(format!("the host's client: {other}"), None),
    }
}

/// A child's `sampling/createMessage`, answered by the host's client.
pub async fn sampling(
    upstreams: &Upstreams,
    server: &str,
    params: CreateMessageRequestParams,
) -> Result<CreateMessageResult, McpError> {
    let peer = client(upstreams, server, "sampling", |c| c.sampling.is_some())?;
    peer.create_message(params).await.map_err(answer_error)
}

/// A child's `elicitation/create`, answered by the host's client.
pub async fn elicitation(
    upstreams: &Upstreams,
    server: &str,
    params: ElicitRequestParams,
) -> Result<ElicitResult, McpError> {
    let peer = client(upstreams, server, "elicitation", |c| {
        c.elicitation.is_some()
    })?;
    let request = rmcp::model::ServerRequest::ElicitRequest(rmcp::model::Request::new(params));
    match peer.send_request(request).await.map_err(answer_error)? {
        rmcp::model::ClientResult::ElicitResult(r) => Ok(r),
        other => Err(McpError::internal_error(
            format!("the host's client answered elicitation/create with {other:?}"),
            None,
        )),
    }
}

/// A child's `elicitation/create` when the host runs its own agent loop: its operator answers
/// (`kitbag chat`'s terminal, or `run`/`daemon` pausing the session).
pub async fn to_operator(
    operator: std::sync::Arc<dyn kitbag_agent::host::Operator>,
    server: &str,
    key: Option<String>,
    params: ElicitRequestParams,
) -> Result<ElicitResult, McpError> {
    let ElicitRequestParams::FormElicitationParams {
        message,
        requested_schema,
        ..
    } = params
    else {
        return Err(McpError::invalid_request(
            format!(
                "server {server} asked for a URL elicitation, which the agent loop cannot open"
            ),
            None,
        ));
    };
    let schema = serde_json::to_value(&requested_schema)
        .map_err(|e| McpError::internal_error(format!("elicitation schema: {e}"), None))?;
    let question = kitbag_agent::host::Question {
        server: server.to_owned(),
        message,
        schema,
        key,
    };
    let answer = operator
        .ask(question)
        .await
        .map_err(|why| McpError::invalid_request(why.to_string(), None))?;
    serde_json::from_value(answer).map_err(|e| {
        McpError::internal_error(
            format!("the operator's answer is no elicitation result: {e}"),
            None,
        )
    })
}

/// A child's request while a 2026-07-28 call is in flight at it (mrtr.rs): what that call's
/// client gives, as the typed result; `None` when no such call takes it.
pub async fn to_call<P: serde::Serialize, R: serde::de::DeserializeOwned>(
    mrtr: &Registry,
    child: u64,
    method: &'static str,
    key: Option<String>,
    params: &P,
) -> Option<Result<R, McpError>> {
    let params = serde_json::to_value(params).ok()?;
    let answer = mrtr.ask(child, method, key, params).await?;
    Some(answer.and_then(|v| {
        serde_json::from_value(v).map_err(|e| {
            McpError::invalid_params(format!("the client's answer to {method}: {e}"), None)
        })
    }))
}

/// The key a child gives its request in `_meta["io.kitbag/inputKey"]` (rmcp hands the
/// request's `_meta` over apart from its params).
pub fn input_key(ctx: &rmcp::service::RequestContext<rmcp::RoleClient>) -> Option<String> {
    ctx.meta
        .get(crate::mrtr::KEY_META)
        .and_then(|k| k.as_str())
        .map(str::to_owned)
}

/// A child's log message, to every client (the children filter by the level the client set).
pub async fn log(upstreams: &Upstreams, params: LoggingMessageNotificationParam) {
    for peer in upstreams.all() {
        let _ = peer.notify_logging_message(params.clone()).await;
    }
}

/// The client's `logging/setLevel`, passed to every child that serves logging (`children`).
pub async fn set_level(children: Vec<Peer<RoleClient>>, params: SetLevelRequestParams) {
    for peer in children {
        if let Err(e) = peer.set_level(params.clone()).await {
            tracing::debug!("logging/setLevel at a child: {e}");
        }
    }
}
