//! Prompts and resources: the host re-serves its children's prompts, resources and resource
//! templates beside their tools (issue #15 §5).
//!
//! - **Collected** when a child becomes ready (first start, restart, reload) and when it
//!   sends `notifications/{prompts,resources}/list_changed`; `resources/list` also asks the
//!   ready children again, because resource lists are usually data (one resource per open
//!   issue) that servers do not announce.
//! - **Prompts** are named like tools: the entry's `prefix` is prepended; a name two servers
//!   offer stays with the first configured server and the other is reported in
//!   `host_status.collisions` (set `prefix` for it). `prompts/get` goes to the owning
//!   child under its own name.
//! - **Resources** keep their URIs (they are the identity clients hold on to): a URI two
//!   servers list, or a template two servers declare, belongs to the first configured one;
//!   the other is reported.
//! - **`resources/read` / subscribe are routed by URI**, first rule that matches: (1) a URI
//!   a child listed; (2) the first child (config order) with a resource template the URI
//!   matches (RFC 6570 expressions); (3) the first child whose listed resources or
//!   templates use the URI's scheme (`issues:`) — a child owns the URIs of its scheme even
//!   when its list is stale; (4) after asking every child for its list again, (1). A URI no
//!   rule places is `-32002 resource not found`, without asking any child.
//! - **Subscriptions**: `resources/subscribe` (handshake era) and the `resourceSubscriptions`
//!   of a 2026-07-28 `subscriptions/listen` are held at the owning child (one child
//!   subscription per URI however many upstream subscribers; re-sent after the child
//!   restarts), and the child's `notifications/resources/updated` are relayed to the
//!   subscribers of that URI — only from the child holding it.
//! - **Agent profiles**: an agent sees a server's prompts and resources only when it may use
//!   at least one of that server's tools. The profile model is per tool; a server's prompts
//!   and resources expose the same data as its tools (issues' resources are the issues its
//!   root-only tools guard), so a server the agent cannot use at all contributes nothing.
//!   Hidden prompts and resources are absent from the lists and answer as unknown.

use std::collections::HashSet;
use std::sync::Arc;

use kitbag_config::policy::Policy;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    ClientRequest, GetPromptRequestParams, GetPromptResult, Prompt, PromptsCapability,
    ReadResourceRequestParams, ReadResourceResult, Resource, ResourceTemplate, ResourcesCapability,
    ServerCapabilities, ServerResult, SubscriptionFilter,
};
use rmcp::service::{Peer, RoleServer};

use crate::registry::Hub;

/// What a client's request may see: the hub, and the policy of the agent in force.
pub struct Scope<'a> {
    pub hub: &'a Hub,
    pub policy: Option<Arc<Policy>>,
}

/// The servers whose prompts and resources the agent in force may see: those with at least
/// one tool it may use (`None`: no profile, every server).
pub fn visible(scope: &Scope<'_>) -> Option<HashSet<u64>> {
    let policy = scope.policy.as_ref()?;
    let flat = scope.hub.flat();
    let mut ids = HashSet::new();
    for t in flat.tools() {
        if policy.check(t).is_ok()
            && let Some(route) = flat.routes.get(&*t.name)
        {
            ids.insert(route.child_id);
        }
    }
    Some(ids)
}

/// The capabilities the host declares (initialize and `server/discover`).
///
/// Prompts and resources are declared when a server the agent may see declared them in its
/// own handshake — the children's known families, not "always": the host starts every
/// child before it answers its client, so at the handshake this is what is served, and a
/// client never gets a capability whose lists are empty by construction or whose methods
/// would fail (the host answers `prompts/*` and `resources/*` in any case, so no declared
/// capability answers -32601). A server added by a reload after the handshake is announced
/// with list_changed; a handshake-era client that was not told about the family sees it
/// when it reconnects, a 2026-07-28 client at its next `server/discover`. `listChanged` is
/// declared because the host itself sends it (children starting, restarting, reloads, a
/// child's own notification); `subscribe` only when a visible server supports it.
pub fn capabilities(scope: &Scope<'_>) -> ServerCapabilities {
    let mut caps = ServerCapabilities::builder()
        .enable_tools()
        .enable_tool_list_changed()
        .build();
    let f = scope.hub.catalog().families(&visible(scope));
    if f.prompts {
        let p = caps.prompts.insert(PromptsCapability::default());
        p.list_changed = Some(true);
    }
    if f.logging {
        // Served by passing setLevel down and the children's messages up (relay.rs).
        caps.logging = Some(Default::default());
    }
    if f.resources {
        let r = caps.resources.insert(ResourcesCapability::default());
        r.list_changed = Some(true);
        r.subscribe = f.subscribe.then_some(true);
    }
    caps
}

pub fn list_prompts(scope: &Scope<'_>) -> Vec<Prompt> {
    let visible = visible(scope);
    scope
        .hub
        .catalog()
        .prompts
        .iter()
        .filter(|(id, _)| visible.as_ref().is_none_or(|v| v.contains(id)))
        .map(|(_, p)| p.clone())
        .collect()
}

pub async fn get_prompt(
    scope: &Scope<'_>,
    mut request: GetPromptRequestParams,
    cancel: tokio_util::sync::CancellationToken,
    trace: Option<kitbag_shared::otel::Propagate>,
) -> Result<GetPromptResult, McpError> {
    let visible = visible(scope);
    let route = scope
        .hub
        .catalog()
        .prompt_routes
        .get(&request.name)
        .filter(|r| visible.as_ref().is_none_or(|v| v.contains(&r.child_id)))
        .cloned();
    let Some(route) = route else {
        return Err(McpError::invalid_params(
            format!(
                "unknown prompt `{}`; prompts/list gives the available prompts",
                request.name
            ),
            None,
        ));
    };
    request.name = route.original;
    request.meta = None; // children are spoken to in the handshake era
    let mut forwarded = ClientRequest::GetPromptRequest(rmcp::model::Request::new(request));
    if let Some(trace) = &trace {
        trace.apply(rmcp::model::GetMeta::get_meta_mut(&mut forwarded));
    }
    match scope
        .hub
        .forward(route.child_id, forwarded, None, cancel)
        .await?
    {
        ServerResult::GetPromptResult(mut r) => {
            r.result_type = Some(rmcp::model::ResultType::COMPLETE);
            Ok(r)
        }
        other => Err(unexpected(
            &scope.hub.catalog().name_of(route.child_id),
            &other,
        )),
    }
}

fn unexpected(server: &str, other: &ServerResult) -> McpError {
    McpError::internal_error(
        format!("server {server} answered with an unexpected result: {other:?}"),
        None,
    )
}

/// `resources/list`: every visible server's resources, asked again now.
pub async fn list_resources(scope: &Scope<'_>) -> Vec<Resource> {
    let visible = visible(scope);
    scope.hub.refresh_resources(&visible).await;
    scope
        .hub
        .catalog()
        .resources
        .iter()
        .filter(|(id, _)| visible.as_ref().is_none_or(|v| v.contains(id)))
        .map(|(_, r)| r.clone())
        .collect()
}

pub fn list_resource_templates(scope: &Scope<'_>) -> Vec<ResourceTemplate> {
    let visible = visible(scope);
    scope
        .hub
        .catalog()
        .templates
        .iter()
        .filter(|(id, _)| visible.as_ref().is_none_or(|v| v.contains(id)))
        .map(|(_, t)| t.clone())
        .collect()
}

fn not_found(uri: &str) -> McpError {
    McpError::resource_not_found(
        format!(
            "no resource {uri}; resources/list and resources/templates/list give what is offered"
        ),
        Some(serde_json::json!({"uri": uri})),
    )
}

/// Route `uri` (rules 1–4 of the module docs) to a visible child.
async fn route(scope: &Scope<'_>, uri: &str) -> Result<u64, McpError> {
    let visible = visible(scope);
    if let Some(id) = scope.hub.catalog().route_uri(uri, &visible) {
        return Ok(id);
    }
    scope.hub.refresh_resources(&visible).await;
    scope
        .hub
        .catalog()
        .resource_owner
        .get(uri)
        .copied()
        .filter(|id| visible.as_ref().is_none_or(|v| v.contains(id)))
        .ok_or_else(|| not_found(uri))
}

pub async fn read_resource(
    scope: &Scope<'_>,
    mut request: ReadResourceRequestParams,
    cancel: tokio_util::sync::CancellationToken,
    trace: Option<kitbag_shared::otel::Propagate>,
) -> Result<ReadResourceResult, McpError> {
    let id = route(scope, &request.uri).await?;
    request.meta = None;
    let mut forwarded = ClientRequest::ReadResourceRequest(rmcp::model::Request::new(request));
    if let Some(trace) = &trace {
        trace.apply(rmcp::model::GetMeta::get_meta_mut(&mut forwarded));
    }
    match scope.hub.forward(id, forwarded, None, cancel).await? {
        ServerResult::ReadResourceResult(mut r) => {
            r.result_type = Some(rmcp::model::ResultType::COMPLETE);
            Ok(r)
        }
        other => Err(unexpected(&scope.hub.catalog().name_of(id), &other)),
    }
}

/// The child that takes subscriptions for `uri`, from the cached view (no child asked).
fn subscribable(scope: &Scope<'_>, uri: &str) -> Option<u64> {
    let view = scope.hub.catalog();
    let id = view.route_uri(uri, &visible(scope))?;
    view.servers
        .iter()
        .any(|s| s.id == id && s.families.subscribe)
        .then_some(id)
}

/// Handshake-era `resources/subscribe`.
pub async fn subscribe(
    scope: &Scope<'_>,
    peer: &Peer<RoleServer>,
    uri: String,
) -> Result<(), McpError> {
    let id = route(scope, &uri).await?;
    let view = scope.hub.catalog();
    if !view
        .servers
        .iter()
        .any(|s| s.id == id && s.families.subscribe)
    {
        return Err(McpError::invalid_params(
            format!(
                "cannot subscribe to {uri}: its server ({}) offers no resource subscriptions",
                view.name_of(id)
            ),
            None,
        ));
    }
    if scope.hub.upstreams().has(peer, &uri) {
        return Ok(()); // this client already subscribed: once is enough
    }
    scope.hub.hold(id, &uri).await?;
    scope.hub.upstreams().subscribe(peer, uri, id);
    Ok(())
}

/// Handshake-era `resources/unsubscribe` of `peer`'s client (a URI not subscribed to is fine).
pub async fn unsubscribe(
    scope: &Scope<'_>,
    peer: &Peer<RoleServer>,
    uri: String,
) -> Result<(), McpError> {
    if let Some(id) = scope.hub.upstreams().unsubscribe(peer, &uri) {
        scope.hub.release(id, &uri).await;
    }
    Ok(())
}

/// The part of a 2026-07-28 `subscriptions/listen` filter the host accepts: list changes
/// as requested (rmcp drops what `capabilities` does not declare), and the resource URIs a
/// visible server takes subscriptions for.
pub fn accepted_filter(scope: &Scope<'_>, requested: &SubscriptionFilter) -> SubscriptionFilter {
    let mut accepted = SubscriptionFilter::new();
    accepted.tools_list_changed = requested.tools_list_changed;
    accepted.prompts_list_changed = requested.prompts_list_changed;
    accepted.resources_list_changed = requested.resources_list_changed;
    accepted.resource_subscriptions = requested.resource_subscriptions.as_ref().map(|uris| {
        uris.iter()
            .filter(|u| subscribable(scope, u).is_some())
            .cloned()
            .collect()
    });
    accepted
}

/// Serve one `subscriptions/listen` stream: hold its resource subscriptions at the children
/// for as long as it is open.
pub async fn listen(scope: &Scope<'_>, context: rmcp::service::SubscriptionContext) {
    let uris = context
        .accepted()
        .resource_subscriptions
        .clone()
        .unwrap_or_default();
    let mut held = Vec::new();
    for uri in uris {
        match subscribable(scope, &uri) {
            Some(id) => match scope.hub.hold(id, &uri).await {
                Ok(()) => held.push((id, uri)),
                Err(e) => tracing::warn!("subscribing to {uri} failed: {}", e.message),
            },
            None => tracing::debug!("{uri} is no longer subscribable"),
        }
    }
    scope.hub.listen(context).await;
    for (id, uri) in held {
        scope.hub.release(id, &uri).await;
    }
}
