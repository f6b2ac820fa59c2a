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

use kitbag_shared::lock::LockExt;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{
    ClientRequest, GetPromptRequestParams, GetPromptResult, Prompt, PromptsCapability,
    ReadResourceRequestParams, ReadResourceResult, Resource, ResourceTemplate,
    ResourceUpdatedNotificationParam, ResourcesCapability, ServerCapabilities, ServerResult,
    SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{Peer, RoleClient, RoleServer};

use crate::hub::{Hub, State};
use crate::serve::HostServer;

/// How long the host waits for a child's prompt or resource list.
const LIST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a `resources/subscribe` to a child may take.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(10);
/// URIs longer than this are matched against listed URIs and schemes only, not templates.
const MAX_TEMPLATE_MATCH_URI: usize = 8 * 1024;

/// The MCP families a child declared in its handshake (beyond tools).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Families {
    pub prompts: bool,
    pub resources: bool,
    pub subscribe: bool,
    pub logging: bool,
}

impl Families {
    fn of(peer: &Peer<RoleClient>) -> Self {
        let Some(info) = peer.peer_info() else {
            return Self::default();
        };
        let caps = &info.capabilities;
        Self {
            prompts: caps.prompts.is_some(),
            resources: caps.resources.is_some(),
            subscribe: caps
                .resources
                .as_ref()
                .is_some_and(|r| r.subscribe == Some(true)),
            logging: caps.logging.is_some(),
        }
    }
}

/// What one child serves besides tools, as of its last handshake and lists. Kept while the
/// child restarts, like its tools.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ChildCatalog {
    pub families: Families,
    pub prompts: Vec<Prompt>,
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
}

async fn bounded<T>(
    what: &str,
    server: &str,
    f: impl std::future::Future<Output = Result<T, rmcp::service::ServiceError>>,
) -> Option<T> {
    match tokio::time::timeout(LIST_TIMEOUT, f).await {
        Ok(Ok(v)) => Some(v),
        Ok(Err(e)) => {
            tracing::warn!(server = %server, "{what} failed: {e}");
            None
        }
        Err(_) => {
            tracing::warn!(server = %server, "{what}: no answer within {} s", LIST_TIMEOUT.as_secs());
            None
        }
    }
}

/// Ask a freshly connected child for everything it declared. A list it cannot give is left
/// empty (its tools still work) and logged.
pub async fn fetch(server: &str, peer: &Peer<RoleClient>) -> ChildCatalog {
    let families = Families::of(peer);
    let mut c = ChildCatalog {
        families,
        ..Default::default()
    };
    if families.prompts {
        c.prompts = bounded("prompts/list", server, peer.list_all_prompts())
            .await
            .unwrap_or_default();
    }
    if families.resources {
        let (r, t) = tokio::join!(
            bounded("resources/list", server, peer.list_all_resources()),
            bounded(
                "resources/templates/list",
                server,
                peer.list_all_resource_templates()
            ),
        );
        c.resources = r.unwrap_or_default();
        c.templates = t.unwrap_or_default();
    }
    c
}

/// One server's part in the merged view.
#[derive(Debug, Clone)]
pub struct ServerFamilies {
    pub id: u64,
    pub name: String,
    pub families: Families,
}

#[derive(Debug, Clone)]
pub struct PromptRoute {
    pub child_id: u64,
    pub original: String,
}

/// Every child's prompts and resources merged, collisions resolved by config order.
#[derive(Debug, Default)]
pub struct View {
    /// Offered prompts (prefix applied), sorted by name, with their owners.
    pub prompts: Vec<(u64, Prompt)>,
    pub prompt_routes: BTreeMap<String, PromptRoute>,
    /// Resources in config order, each URI once.
    pub resources: Vec<(u64, Resource)>,
    pub resource_owner: HashMap<String, u64>,
    /// Templates in config order, each template once.
    pub templates: Vec<(u64, ResourceTemplate)>,
    /// Servers in config order.
    pub servers: Vec<ServerFamilies>,
    /// "prompt b.x → x: already offered by a; ..." and "resources of b: ..." reports.
    pub collisions: Vec<String>,
}

impl View {
    fn build(hub: &Hub) -> View {
        let c = hub.lock();
        let mut v = View::default();
        let mut prompt_owner: HashMap<String, String> = HashMap::new();
        let mut uri_owner_name: HashMap<String, String> = HashMap::new();
        let mut template_owner: HashMap<String, String> = HashMap::new();
        for child in c.iter() {
            let name = &child.spec.name;
            let cat = &child.catalog;
            v.servers.push(ServerFamilies {
                id: child.id,
                name: name.clone(),
                families: cat.families,
            });
            for p in &cat.prompts {
                let offered = format!(
                    "{}{}",
                    child.spec.entry.prefix.clone().unwrap_or_default(),
                    p.name
                );
                if let Some(first) = prompt_owner.get(&offered) {
                    v.collisions.push(format!(
                        "prompt {name}.{} → {offered}: already offered by {first}; set `prefix` for {name}",
                        p.name
                    ));
                    continue;
                }
                prompt_owner.insert(offered.clone(), name.clone());
                let mut offered_prompt = p.clone();
                offered_prompt.name = offered.clone();
                v.prompts.push((child.id, offered_prompt));
                v.prompt_routes.insert(
                    offered,
                    PromptRoute {
                        child_id: child.id,
                        original: p.name.clone(),
                    },
                );
            }
            // Resource collisions are reported once per pair of servers: two servers on one
            // store would otherwise report every URI.
            let mut taken: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for r in &cat.resources {
                if let Some(first) = uri_owner_name.get(&r.uri) {
                    if first != name {
                        taken.entry(first.clone()).or_default().push(r.uri.clone());
                    }
                    continue;
                }
                uri_owner_name.insert(r.uri.clone(), name.clone());
                v.resource_owner.insert(r.uri.clone(), child.id);
                v.resources.push((child.id, r.clone()));
            }
            for t in &cat.templates {
                if let Some(first) = template_owner.get(&t.uri_template) {
                    if first != name {
                        taken
                            .entry(first.clone())
                            .or_default()
                            .push(t.uri_template.clone());
                    }
                    continue;
                }
                template_owner.insert(t.uri_template.clone(), name.clone());
                v.templates.push((child.id, t.clone()));
            }
            for (first, uris) in taken {
                let shown: Vec<&str> = uris.iter().take(3).map(String::as_str).collect();
                v.collisions.push(format!(
                    "resources of {name}: {} already offered by {first} ({}{}); {first} answers them",
                    if uris.len() == 1 {
                        "1 URI".to_string()
                    } else {
                        format!("{} URIs", uris.len())
                    },
                    shown.join(", "),
                    if uris.len() > shown.len() { ", …" } else { "" },
                ));
            }
        }
        v.prompts.sort_by(|a, b| a.1.name.cmp(&b.1.name));
        v
    }

    /// The owner of `uri` by the routing rules (1)–(3) in the module docs.
    fn route_uri(&self, uri: &str, visible: &Option<HashSet<u64>>) -> Option<u64> {
        let seen = |id: &u64| visible.as_ref().is_none_or(|v| v.contains(id));
        if let Some(id) = self.resource_owner.get(uri).filter(|id| seen(id)) {
            return Some(*id);
        }
        if uri.len() <= MAX_TEMPLATE_MATCH_URI
            && let Some((id, _)) = self
                .templates
                .iter()
                .find(|(id, t)| seen(id) && template_matches(&t.uri_template, uri))
        {
            return Some(*id);
        }
        let scheme = scheme_of(uri)?;
        self.servers
            .iter()
            .filter(|s| seen(&s.id))
            .map(|s| s.id)
            .find(|id| {
                self.resources
                    .iter()
                    .any(|(o, r)| o == id && scheme_of(&r.uri) == Some(scheme))
                    || self
                        .templates
                        .iter()
                        .any(|(o, t)| o == id && scheme_of(&t.uri_template) == Some(scheme))
            })
    }

    /// What this view says is served, for the servers in `visible`.
    fn families(&self, visible: &Option<HashSet<u64>>) -> Families {
        let mut f = Families::default();
        for s in &self.servers {
            if visible.as_ref().is_some_and(|v| !v.contains(&s.id)) {
                continue;
            }
            f.prompts |= s.families.prompts;
            f.resources |= s.families.resources;
            f.subscribe |= s.families.resources && s.families.subscribe;
            f.logging |= s.families.logging;
        }
        f
    }

    fn name_of(&self, id: u64) -> String {
        self.servers
            .iter()
            .find(|s| s.id == id)
            .map(|s| s.name.clone())
            .unwrap_or_default()
    }

    /// What the list-changed fingerprint compares: prompt names and descriptions, resource
    /// URIs and templates.
    pub fn fingerprint(&self) -> (Vec<(String, Option<String>)>, Vec<String>) {
        (
            self.prompts
                .iter()
                .map(|(_, p)| (p.name.clone(), p.description.clone()))
                .collect(),
            self.resources
                .iter()
                .map(|(_, r)| r.uri.clone())
                .chain(self.templates.iter().map(|(_, t)| t.uri_template.clone()))
                .collect(),
        )
    }

    /// Whether any server offers prompts / resources at all (whom to tell about changes).
    pub fn any(&self) -> Families {
        self.families(&None)
    }
}

/// `scheme` of `scheme:rest` (RFC 3986: a letter, then letters, digits, `+`, `-`, `.`).
fn scheme_of(uri: &str) -> Option<&str> {
    let (scheme, _) = uri.split_once(':')?;
    let mut chars = scheme.chars();
    (chars.next()?.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
}

#[derive(Debug, PartialEq)]
enum Part<'a> {
    Literal(&'a str),
    /// An expression's operator (`'\0'` for a simple `{var}`).
    Expr(char),
}

fn parse_template(t: &str) -> Option<Vec<Part<'_>>> {
    let mut parts = Vec::new();
    let mut rest = t;
    while !rest.is_empty() {
        match rest.find('{') {
            Some(0) => {
                let end = rest.find('}')?;
                let body = &rest[1..end];
                let op = match body.chars().next()? {
                    c @ ('+' | '#' | '.' | '/' | ';' | '?' | '&') => c,
                    _ => '\0',
                };
                parts.push(Part::Expr(op));
                rest = &rest[end + 1..];
            }
            Some(i) => {
                parts.push(Part::Literal(&rest[..i]));
                rest = &rest[i..];
            }
            None => {
                parts.push(Part::Literal(rest));
                rest = "";
            }
        }
    }
    // Backtracking is exponential in the number of expressions; real templates have few.
    (parts.iter().filter(|p| matches!(p, Part::Expr(_))).count() <= 8).then_some(parts)
}

/// What an expression with operator `op` may expand to.
fn expansion_fits(op: char, v: &str) -> bool {
    let no = |set: &[char]| !v.contains(set);
    match op {
        '\0' => !v.is_empty() && no(&['/', '?', '#', '&']),
        '+' => true,
        '#' => v.is_empty() || v.starts_with('#'),
        '.' => v.is_empty() || (v.starts_with('.') && no(&['/', '?', '#'])),
        '/' => v.is_empty() || (v.starts_with('/') && no(&['?', '#'])),
        ';' => v.is_empty() || (v.starts_with(';') && no(&['/', '?', '#'])),
        '?' => v.is_empty() || (v.starts_with('?') && no(&['#'])),
        '&' => v.is_empty() || (v.starts_with('&') && no(&['#'])),
        _ => false,
    }
}

fn parts_match(parts: &[Part<'_>], s: &str) -> bool {
    match parts.split_first() {
        None => s.is_empty(),
        Some((Part::Literal(l), rest)) => s
            .strip_prefix(l)
            .is_some_and(|tail| parts_match(rest, tail)),
        Some((Part::Expr(op), rest)) => (0..=s.len()).rev().any(|i| {
            s.is_char_boundary(i) && expansion_fits(*op, &s[..i]) && parts_match(rest, &s[i..])
        }),
    }
}

/// Whether `uri` is an expansion of the RFC 6570 template `template`.
pub fn template_matches(template: &str, uri: &str) -> bool {
    parse_template(template).is_some_and(|parts| parts_match(&parts, uri))
}

/// The host's share of prompt/resource state: the merged view and who subscribed to what.
#[derive(Default)]
pub struct Relay {
    view: Mutex<Option<Arc<View>>>,
    /// Subscriptions held at children for upstream subscribers: (child id, URI) → how many.
    held: Mutex<HashMap<(u64, String), usize>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.locked()
}

impl Relay {
    pub fn invalidate(&self) {
        *lock(&self.view) = None;
    }
}

impl Hub {
    /// The merged prompts and resources (cached until a child's catalog changes).
    pub fn catalog(&self) -> Arc<View> {
        if let Some(v) = lock(&self.relay.view).as_ref() {
            return v.clone();
        }
        let v = Arc::new(View::build(self));
        *lock(&self.relay.view) = Some(v.clone());
        v
    }

    /// A child announced a new prompt or resource list: ask it again.
    pub async fn refresh_catalog(&self, name: &str) {
        let peer = {
            let c = self.lock();
            c.iter()
                .find(|c| c.spec.name == name)
                .and_then(|c| c.peer.clone())
        };
        let Some(peer) = peer else { return };
        let fresh = fetch(name, &peer).await;
        let changed = {
            let mut c = self.lock();
            match c.iter_mut().find(|c| c.spec.name == name) {
                Some(child) if child.catalog != fresh => {
                    child.catalog = fresh;
                    true
                }
                _ => false,
            }
        };
        if changed {
            self.relay.invalidate();
            self.notify_list_changed().await;
        }
    }

    /// Ask every ready child in `visible` that serves resources for its list again (a
    /// child that does not answer keeps its last list).
    async fn refresh_resources(&self, visible: &Option<HashSet<u64>>) {
        let peers: Vec<(u64, String, Peer<RoleClient>)> = {
            let c = self.lock();
            c.iter()
                .filter(|c| c.state == State::Ready && c.catalog.families.resources)
                .filter(|c| visible.as_ref().is_none_or(|v| v.contains(&c.id)))
                .filter_map(|c| c.peer.clone().map(|p| (c.id, c.spec.name.clone(), p)))
                .collect()
        };
        let lists =
            futures::future::join_all(peers.into_iter().map(|(id, name, peer)| async move {
                (
                    id,
                    bounded("resources/list", &name, peer.list_all_resources()).await,
                )
            }))
            .await;
        let mut changed = false;
        {
            let mut c = self.lock();
            for (id, list) in lists {
                if let (Some(list), Some(child)) = (list, c.iter_mut().find(|c| c.id == id))
                    && child.catalog.resources != list
                {
                    child.catalog.resources = list;
                    changed = true;
                }
            }
        }
        if changed {
            self.relay.invalidate();
            // Other clients learn of it too (debounced, and only if the offer changed).
            self.notify_list_changed().await;
        }
    }

    /// A ready child's peer, its name and request timeout, and the request's place among the
    /// child's calls in flight (a reload waits for it); or why there is none.
    fn peer_of(
        &self,
        id: u64,
    ) -> Result<(Peer<RoleClient>, String, Duration, crate::hub::CallGuard), McpError> {
        let c = self.lock();
        let Some(child) = c.iter().find(|c| c.id == id) else {
            return Err(McpError::internal_error(
                "the server of this item was removed by a reload",
                None,
            ));
        };
        let name = child.spec.name.clone();
        let timeout = child
            .spec
            .entry
            .tool_timeout_sec
            .map(Duration::from_secs)
            .unwrap_or(kitbag_config::settings::DEFAULT_TOOL_TIMEOUT);
        match (&child.peer, &child.state) {
            (Some(p), _) => Ok((p.clone(), name, timeout, child.calls.begin())),
            (None, State::Restarting | State::Starting) => Err(McpError::internal_error(
                format!("server {name} is restarting; try again in a few seconds"),
                None,
            )),
            (None, _) => Err(McpError::internal_error(
                format!("server {name} is not running"),
                None,
            )),
        }
    }

    /// Send one request to child `id` and wait for its answer; the child's own JSON-RPC
    /// errors pass through unchanged, the client's cancellation is passed on.
    async fn forward(
        &self,
        id: u64,
        request: ClientRequest,
        timeout: Option<Duration>,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<ServerResult, McpError> {
        let (peer, name, tool_timeout, guard) = self.peer_of(id)?;
        let options =
            rmcp::service::PeerRequestOptions::with_timeout(timeout.unwrap_or(tool_timeout));
        let handle = peer
            .send_cancellable_request(request, options)
            .await
            .map_err(|e| McpError::internal_error(format!("server {name}: {e}"), None))?;
        let request_id = handle.id.clone();
        let outcome = tokio::select! {
            // An answer already in wins over a cut-off that comes at the same moment.
            biased;
            r = handle.await_response() => r,
            _ = cancel.cancelled() => {
                let _ = peer
                    .notify_cancelled(rmcp::model::CancelledNotificationParam::new(
                        Some(request_id),
                        Some("cancelled by the client".into()),
                    ))
                    .await;
                return Err(McpError::internal_error("the request was cancelled", None));
            }
            _ = guard.cut_off() => {
                let _ = peer
                    .notify_cancelled(rmcp::model::CancelledNotificationParam::new(
                        Some(request_id),
                        Some(crate::hub::CUT_OFF_REASON.into()),
                    ))
                    .await;
                return Err(McpError::internal_error(
                    crate::failure::stopped_by_reload_message(&name),
                    None,
                ));
            }
        };
        match outcome {
            Ok(r) => Ok(r),
            Err(rmcp::service::ServiceError::McpError(e)) => Err(e),
            Err(rmcp::service::ServiceError::TransportClosed) if guard.stopped_by_reload() => Err(
                McpError::internal_error(crate::failure::stopped_by_reload_message(&name), None),
            ),
            Err(rmcp::service::ServiceError::TransportClosed) => Err(McpError::internal_error(
                format!(
                    "server {name} exited during the request; it is being restarted — try again"
                ),
                None,
            )),
            Err(e) => Err(McpError::internal_error(
                format!("server {name}: {e}"),
                None,
            )),
        }
    }

    /// Subscribe at the child for one more upstream subscriber of (`id`, `uri`).
    async fn hold(&self, id: u64, uri: &str) -> Result<(), McpError> {
        let first = {
            let held = lock(&self.relay.held);
            !held.contains_key(&(id, uri.to_string()))
        };
        if first {
            let request = ClientRequest::SubscribeRequest(rmcp::model::Request::new(
                SubscribeRequestParams::new(uri),
            ));
            self.forward(id, request, Some(SUBSCRIBE_TIMEOUT), Default::default())
                .await?;
        }
        *lock(&self.relay.held)
            .entry((id, uri.to_string()))
            .or_insert(0) += 1;
        Ok(())
    }

    /// One upstream subscriber of (`id`, `uri`) less; the last one unsubscribes at the child.
    pub(crate) async fn release(&self, id: u64, uri: &str) {
        let last = {
            let mut held = lock(&self.relay.held);
            let key = (id, uri.to_string());
            match held.get_mut(&key) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                Some(_) => {
                    held.remove(&key);
                    true
                }
                None => false,
            }
        };
        if last {
            let request = ClientRequest::UnsubscribeRequest(rmcp::model::Request::new(
                UnsubscribeRequestParams::new(uri),
            ));
            if let Err(e) = self
                .forward(id, request, Some(SUBSCRIBE_TIMEOUT), Default::default())
                .await
            {
                tracing::debug!("resources/unsubscribe {uri}: {}", e.message);
            }
        }
    }

    /// A child (re)started: it holds no subscriptions yet; subscribe again to what the
    /// host's clients are subscribed to there.
    pub async fn resubscribe(&self, id: u64) {
        let uris: Vec<String> = lock(&self.relay.held)
            .keys()
            .filter(|(child, _)| *child == id)
            .map(|(_, uri)| uri.clone())
            .collect();
        for uri in uris {
            let request = ClientRequest::SubscribeRequest(rmcp::model::Request::new(
                SubscribeRequestParams::new(uri.as_str()),
            ));
            if let Err(e) = self
                .forward(id, request, Some(SUBSCRIBE_TIMEOUT), Default::default())
                .await
            {
                tracing::warn!(
                    "re-subscribing to {uri} after a restart failed: {}",
                    e.message
                );
            }
        }
    }

    /// `notifications/resources/updated` from child `name`: to every upstream subscriber
    /// of the URI, if this child holds that subscription.
    pub async fn relay_updated(&self, name: &str, uri: String) {
        let Some(id) = self
            .lock()
            .iter()
            .find(|c| c.spec.name == name)
            .map(|c| c.id)
        else {
            return;
        };
        if !lock(&self.relay.held).contains_key(&(id, uri.clone())) {
            return; // not ours to relay (or no longer wanted)
        }
        for peer in self.upstreams.subscribers(&uri, id) {
            let _ = peer
                .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri.clone()))
                .await;
        }
        for sink in self.listener_sinks() {
            let wanted = sink
                .accepted()
                .resource_subscriptions
                .as_ref()
                .is_some_and(|u| u.contains(&uri));
            if wanted {
                let _ = sink.notify_resource_updated(uri.clone()).await;
            }
        }
    }
}

/// The servers whose prompts and resources the agent in force may see: those with at least
/// one tool it may use (`None`: no profile, every server).
pub fn visible(host: &HostServer) -> Option<HashSet<u64>> {
    let policy = host.policy()?;
    let flat = host.hub.flat();
    let mut ids = HashSet::new();
    for t in &flat.tools {
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
pub fn capabilities(host: &HostServer) -> ServerCapabilities {
    let mut caps = ServerCapabilities::builder()
        .enable_tools()
        .enable_tool_list_changed()
        .build();
    let f = host.hub.catalog().families(&visible(host));
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

pub fn list_prompts(host: &HostServer) -> Vec<Prompt> {
    let visible = visible(host);
    host.hub
        .catalog()
        .prompts
        .iter()
        .filter(|(id, _)| visible.as_ref().is_none_or(|v| v.contains(id)))
        .map(|(_, p)| p.clone())
        .collect()
}

pub async fn get_prompt(
    host: &HostServer,
    mut request: GetPromptRequestParams,
    cancel: tokio_util::sync::CancellationToken,
    trace: Option<kitbag_shared::otel::Propagate>,
) -> Result<GetPromptResult, McpError> {
    let visible = visible(host);
    let route = host
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
    match host
        .hub
        .forward(route.child_id, forwarded, None, cancel)
        .await?
    {
        ServerResult::GetPromptResult(mut r) => {
            r.result_type = Some(rmcp::model::ResultType::COMPLETE);
            Ok(r)
        }
        other => Err(unexpected(
            &host.hub.catalog().name_of(route.child_id),
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
pub async fn list_resources(host: &HostServer) -> Vec<Resource> {
    let visible = visible(host);
    host.hub.refresh_resources(&visible).await;
    host.hub
        .catalog()
        .resources
        .iter()
        .filter(|(id, _)| visible.as_ref().is_none_or(|v| v.contains(id)))
        .map(|(_, r)| r.clone())
        .collect()
}

pub fn list_resource_templates(host: &HostServer) -> Vec<ResourceTemplate> {
    let visible = visible(host);
    host.hub
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
async fn route(host: &HostServer, uri: &str) -> Result<u64, McpError> {
    let visible = visible(host);
    if let Some(id) = host.hub.catalog().route_uri(uri, &visible) {
        return Ok(id);
    }
    host.hub.refresh_resources(&visible).await;
    host.hub
        .catalog()
        .resource_owner
        .get(uri)
        .copied()
        .filter(|id| visible.as_ref().is_none_or(|v| v.contains(id)))
        .ok_or_else(|| not_found(uri))
}

pub async fn read_resource(
    host: &HostServer,
    mut request: ReadResourceRequestParams,
    cancel: tokio_util::sync::CancellationToken,
    trace: Option<kitbag_shared::otel::Propagate>,
) -> Result<ReadResourceResult, McpError> {
    let id = route(host, &request.uri).await?;
    request.meta = None;
    let mut forwarded = ClientRequest::ReadResourceRequest(rmcp::model::Request::new(request));
    if let Some(trace) = &trace {
        trace.apply(rmcp::model::GetMeta::get_meta_mut(&mut forwarded));
    }
    match host.hub.forward(id, forwarded, None, cancel).await? {
        ServerResult::ReadResourceResult(mut r) => {
            r.result_type = Some(rmcp::model::ResultType::COMPLETE);
            Ok(r)
        }
        other => Err(unexpected(&host.hub.catalog().name_of(id), &other)),
    }
}

/// The child that takes subscriptions for `uri`, from the cached view (no child asked).
fn subscribable(host: &HostServer, uri: &str) -> Option<u64> {
    let view = host.hub.catalog();
    let id = view.route_uri(uri, &visible(host))?;
    view.servers
        .iter()
        .any(|s| s.id == id && s.families.subscribe)
        .then_some(id)
}

/// Handshake-era `resources/subscribe`.
pub async fn subscribe(
    host: &HostServer,
    peer: &Peer<RoleServer>,
    uri: String,
) -> Result<(), McpError> {
    let id = route(host, &uri).await?;
    let view = host.hub.catalog();
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
    if host.hub.upstreams.has(peer, &uri) {
        return Ok(()); // this client already subscribed: once is enough
    }
    host.hub.hold(id, &uri).await?;
    host.hub.upstreams.subscribe(peer, uri, id);
    Ok(())
}

/// Handshake-era `resources/unsubscribe` of `peer`'s client (a URI not subscribed to is fine).
pub async fn unsubscribe(
    host: &HostServer,
    peer: &Peer<RoleServer>,
    uri: String,
) -> Result<(), McpError> {
    if let Some(id) = host.hub.upstreams.unsubscribe(peer, &uri) {
        host.hub.release(id, &uri).await;
    }
    Ok(())
}

/// The part of a 2026-07-28 `subscriptions/listen` filter the host accepts: list changes
/// as requested (rmcp drops what `capabilities` does not declare), and the resource URIs a
/// visible server takes subscriptions for.
pub fn accepted_filter(host: &HostServer, requested: &SubscriptionFilter) -> SubscriptionFilter {
    let mut accepted = SubscriptionFilter::new();
    accepted.tools_list_changed = requested.tools_list_changed;
    accepted.prompts_list_changed = requested.prompts_list_changed;
    accepted.resources_list_changed = requested.resources_list_changed;
    accepted.resource_subscriptions = requested.resource_subscriptions.as_ref().map(|uris| {
        uris.iter()
            .filter(|u| subscribable(host, u).is_some())
            .cloned()
            .collect()
    });
    accepted
}

/// Serve one `subscriptions/listen` stream: hold its resource subscriptions at the children
/// for as long as it is open.
pub async fn listen(host: &HostServer, context: rmcp::service::SubscriptionContext) {
    let uris = context
        .accepted()
        .resource_subscriptions
        .clone()
        .unwrap_or_default();
    let mut held = Vec::new();
    for uri in uris {
        match subscribable(host, &uri) {
            Some(id) => match host.hub.hold(id, &uri).await {
                Ok(()) => held.push((id, uri)),
                Err(e) => tracing::warn!("subscribing to {uri} failed: {}", e.message),
            },
            None => tracing::debug!("{uri} is no longer subscribable"),
        }
    }
    host.hub.listen(context).await;
    for (id, uri) in held {
        host.hub.release(id, &uri).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_their_expansions_only() {
        assert!(template_matches("issues://{number}", "issues://12"));
        assert!(!template_matches("issues://{number}", "issues://"));
        assert!(!template_matches("issues://{number}", "issues://1/2"));
        assert!(!template_matches("issues://{number}", "other://12"));
        assert!(template_matches("file:///{+path}", "file:///src/main.rs"));
        assert!(template_matches(
            "db://{table}/rows{?limit,offset}",
            "db://t/rows"
        ));
        assert!(template_matches(
            "db://{table}/rows{?limit,offset}",
            "db://t/rows?limit=3"
        ));
        assert!(!template_matches(
            "db://{table}/rows{?limit}",
            "db://t/rows#x"
        ));
        assert!(template_matches("x://a{/seg}", "x://a/b/c"));
        assert!(template_matches("plain://fixed", "plain://fixed"));
        assert!(!template_matches("broken://{x", "broken://{x"));
    }

    #[test]
    fn schemes_follow_rfc_3986() {
        assert_eq!(scheme_of("issues://1"), Some("issues"));
        assert_eq!(scheme_of("git+ssh://h/r"), Some("git+ssh"));
        assert_eq!(scheme_of("1abc://x"), None);
        assert_eq!(scheme_of("no-colon"), None);
    }
}
