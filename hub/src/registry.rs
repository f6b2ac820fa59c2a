//! The hub: the child servers, their tools, and the flat list the host offers.

use kitbag_shared::lock::LockExt;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ClientRequest,
    Implementation, ProgressNotificationParam, ProgressToken, ResourceUpdatedNotificationParam,
    ServerResult, Tool,
};
use rmcp::service::{
    NotificationContext, Peer, RoleClient, RoleServer, RunningService, ServiceExt,
    SubscriptionContext, SubscriptionSink,
};
use rmcp::{ClientHandler, ErrorData as McpError};

use crate::failure::{CallFailure, RELOAD_DRAIN_LIMIT, StartFailure};
use kitbag_config::entry::{ServerEntry, ServerSpec};
use kitbag_config::settings::{DEFAULT_STARTUP_TIMEOUT, DEFAULT_TOOL_TIMEOUT};

const MAX_CRASHES: usize = 5;
const CRASH_WINDOW: Duration = Duration::from_secs(60);
const LIST_CHANGED_DEBOUNCE: Duration = Duration::from_millis(100);
/// How long the host waits at exit for its children to stop by themselves (after SIGTERM and
/// the end of their input) before SIGKILL. A shell's job kill grace fits well inside.
pub const STOP_GRACE: Duration = Duration::from_secs(5);

/// What list-changed notifications compare: the offered tools and prompts (names and
/// descriptions, in order) and the resource URIs and templates.
#[derive(Debug, Clone, PartialEq, Default)]
struct ListFingerprint {
    tools: Vec<(String, Option<String>)>,
    prompts: Vec<(String, Option<String>)>,
    resources: Vec<String>,
}

/// Which of the offered lists changed.
#[derive(Debug, Clone, Copy, Default)]
struct Changed {
    tools: bool,
    prompts: bool,
    resources: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Waiting for its first call, which starts it (its tools are known without it).
    Idle,
    Starting,
    Ready,
    Restarting,
    Failed,
    Disabled,
    /// The entry would start this host again; reported, never started (`recursion`).
    Skipped,
}

/// The client side of one child connection: forwards progress and list changes upward.
#[derive(Clone)]
pub struct ChildClient {
    pub(crate) name: String,
    /// The child's `Child::id`: progress is matched by it, not by name, because a reload
    /// can run the old and the new incarnation of one server side by side (the old one
    /// finishing its calls), and each numbers its progress tokens from 0.
    id: u64,
    hub: Weak<Hub>,
}

impl ChildClient {
    /// The hub this child belongs to, while the host runs: a request from a child of a hub
    /// that is gone answers an error.
    fn upgrade(&self) -> Result<Arc<Hub>, McpError> {
        self.hub.upgrade().ok_or_else(|| {
            McpError::internal_error(format!("server {}: the host is stopping", self.name), None)
        })
    }
}

impl ClientHandler for ChildClient {
    fn get_info(&self) -> ClientConfig {
        // The handshake era with children: every server speaks it, and the byte-level
        // path (fastpath.rs) forwards plain calls without per-request `_meta`.
        // A child's sampling and elicitation requests are relayed to the host's client
        // (relay.rs), which answers them or says it cannot.
        let mut capabilities = ClientCapabilities::default();
        capabilities.sampling = Some(Default::default());
        capabilities.elicitation = Some(Default::default());
        ClientConfig::new(
            capabilities,
            Implementation::new("kitbag", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(rmcp::model::ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    #[allow(deprecated)] // sampling: deprecated by SEP-2577, the handshake era's
    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        ctx: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, McpError> {
        let hub = self.upgrade()?;
        let key = crate::relay::input_key(&ctx);
        if let Some(r) =
            crate::relay::to_call(&hub.mrtr, self.id, "sampling/createMessage", key, &params).await
        {
            return r;
        }
        crate::relay::sampling(&hub.upstreams, &self.name, params).await
    }

    async fn create_elicitation(
        &self,
        params: rmcp::model::ElicitRequestParams,
        ctx: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, McpError> {
        let hub = self.upgrade()?;
        let key = crate::relay::input_key(&ctx);
        if let Some(r) =
            crate::relay::to_call(&hub.mrtr, self.id, "elicitation/create", key, &params).await
        {
            return r;
        }
        crate::relay::elicitation(&hub.upstreams, &self.name, params).await
    }

    #[allow(deprecated)] // roots: deprecated by SEP-2577, the handshake era's
    async fn list_roots(
        &self,
        ctx: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, McpError> {
        // Only a 2026-07-28 call's client is asked; otherwise no roots, as before.
        let Some(hub) = self.hub.upgrade() else {
            return Ok(rmcp::model::ListRootsResult::default());
        };
        let key = crate::relay::input_key(&ctx);
        let params = serde_json::json!({});
        match crate::relay::to_call(&hub.mrtr, self.id, "roots/list", key, &params).await {
            Some(r) => r,
            None => Ok(rmcp::model::ListRootsResult::default()),
        }
    }

    #[allow(deprecated)] // logging: deprecated by SEP-2577
    async fn on_logging_message(
        &self,
        params: rmcp::model::LoggingMessageNotificationParam,
        _ctx: NotificationContext<RoleClient>,
    ) {
        if let Some(hub) = self.hub.upgrade() {
            crate::relay::log(&hub.upstreams, params).await;
        }
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _ctx: NotificationContext<RoleClient>,
    ) {
        if let Some(hub) = self.hub.upgrade() {
            hub.forward_progress(self.id, params).await;
        }
    }

    async fn on_tool_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        if let Some(hub) = self.hub.upgrade() {
            hub.refresh_tools(&self.name).await;
        }
    }

    async fn on_prompt_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        if let Some(hub) = self.hub.upgrade() {
            hub.refresh_catalog(&self.name).await;
        }
    }

    async fn on_resource_list_changed(&self, _ctx: NotificationContext<RoleClient>) {
        if let Some(hub) = self.hub.upgrade() {
            hub.refresh_catalog(&self.name).await;
        }
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _ctx: NotificationContext<RoleClient>,
    ) {
        if let Some(hub) = self.hub.upgrade() {
            hub.relay_updated(&self.name, params.uri).await;
        }
    }

    /// kitbag-cron's `notifications/kitbag/cron_fired` (and Claude Code's `claude/channel`):
    /// to in-process listeners, and on to the client like any other notification.
    async fn on_custom_notification(
        &self,
        notification: rmcp::model::CustomNotification,
        _ctx: NotificationContext<RoleClient>,
    ) {
        let Some(hub) = self.hub.upgrade() else {
            return;
        };
        let _ = hub.child_events.send(ChildEvent {
            server: self.name.clone(),
            method: notification.method.clone(),
            params: notification.params.clone().unwrap_or_default(),
        });
        for peer in hub.upstreams.all() {
            let _ = peer
                .send_notification(rmcp::model::ServerNotification::CustomNotification(
                    notification.clone(),
                ))
                .await;
        }
    }
}

pub struct Child {
    /// Stable identity across reloads (indices shift when the config changes).
    pub id: u64,
    pub spec: ServerSpec,
    pub state: State,
    pub peer: Option<Peer<RoleClient>>,
    /// The byte-level link for plain calls (fastpath.rs).
    pub fast: Option<Arc<crate::fastpath::FastLink>>,
    pub tools: Vec<Tool>,
    /// Its prompts, resources and templates (catalog.rs).
    pub catalog: crate::child_catalog::ChildCatalog,
    pub pid: Option<u32>,
    pub started: Option<Instant>,
    pub ready_ms: Option<u64>,
    pub restarts: u32,
    pub last_error: Option<String>,
    crashes: VecDeque<Instant>,
    generation: u64,
    stop: Option<rmcp::service::RunningServiceCancellationToken>,
    stopping: bool,
    /// Calls in flight on this server (every incarnation), which a reload waits for.
    pub(crate) calls: Arc<Calls>,
}

/// The calls in flight on one child. A call holds a [`CallGuard`] from the moment it is
/// routed to the child until its answer is in; a reload that stops or replaces the child
/// waits for the count to reach zero (at most [`RELOAD_DRAIN_LIMIT`]).
pub struct Calls {
    in_flight: tokio::sync::watch::Sender<usize>,
    /// Set when a reload took the child out of the config: a call that then loses its
    /// server says so instead of "being restarted".
    retired: std::sync::atomic::AtomicBool,
    /// Cancelled when the reload's wait ran out: the calls still in flight answer their
    /// callers `server_unavailable` and tell the child to stop them, before the child is
    /// stopped — so whatever a child says while it shuts down (kitbag servers answer
    /// `cancelled`) cannot overtake that answer.
    cut_off: tokio_util::sync::CancellationToken,
}

impl Default for Calls {
    fn default() -> Self {
        Calls {
            in_flight: tokio::sync::watch::Sender::new(0),
            retired: std::sync::atomic::AtomicBool::new(false),
            cut_off: tokio_util::sync::CancellationToken::new(),
        }
    }
}

impl Calls {
    /// Count a call until the guard is dropped. Taken under the hub's lock while the child
    /// is still in the list, so a reload that has taken it out sees every call it must wait
    /// for, and no call starts on it afterwards.
    pub(crate) fn begin(self: &Arc<Self>) -> CallGuard {
        self.in_flight.send_modify(|n| *n += 1);
        CallGuard(self.clone())
    }

    fn in_flight(&self) -> usize {
        *self.in_flight.borrow()
    }

    /// Wait until no call is in flight; false when `limit` ran out first.
    async fn idle_within(&self, limit: Duration) -> bool {
        let mut rx = self.in_flight.subscribe();
        matches!(
            tokio::time::timeout(limit, rx.wait_for(|n| *n == 0)).await,
            Ok(Ok(_))
        )
    }
}

/// One call in flight on a child (see [`Calls`]).
pub struct CallGuard(Arc<Calls>);

impl CallGuard {
    /// Whether a reload removed or replaced the child this call is on.
    pub fn stopped_by_reload(&self) -> bool {
        self.0.retired.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Resolves when a reload gives up waiting for this call: stop waiting for the child's
    /// answer, tell the child the call is cancelled, and answer with
    /// [`stopped_by_reload_message`].
    pub fn cut_off(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.0.cut_off.cancelled()
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.0.in_flight.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Why a call is cancelled at its child when a reload cut it off.
pub const CUT_OFF_REASON: &str = "the server is being stopped by a configuration reload";

/// A tool as offered upstream.
#[derive(Debug, Clone)]
pub struct Route {
    pub child: usize,
    pub child_id: u64,
    pub original: String,
    /// Arguments the child marked private (`kitbag/private_args`): logged by size only.
    pub private_args: Arc<[String]>,
}

/// Where a byte-level call goes ([`Hub::fast_route`]).
pub struct FastRoute {
    pub link: Arc<crate::fastpath::FastLink>,
    pub private_args: Arc<[String]>,
    /// The tool's name at its server.
    pub original: String,
    pub server: String,
    pub timeout: Duration,
    pub guard: CallGuard,
}

#[derive(Default)]
pub struct FlatList {
    pub tools: Vec<Tool>,
    pub routes: BTreeMap<String, Route>,
    /// "server.tool → offered name: taken by other_server" reports.
    pub collisions: Vec<String>,
}

pub struct Hub {
    children: Mutex<Vec<Child>>,
    progress: ProgressMap,
    /// Progress notifications being forwarded right now (see `drain_progress`).
    progress_inflight: std::sync::atomic::AtomicUsize,
    /// The host's clients (stdio, HTTP sessions) and their subscriptions.
    pub(crate) upstreams: crate::upstream::Upstreams,
    /// 2026-07-28 calls that take their child's requests, and calls parked for input.
    pub(crate) mrtr: Arc<crate::mrtr::Registry>,
    /// The flat list, rebuilt only when a child's tools change (not on every call).
    flat_cache: Mutex<Option<Arc<FlatList>>>,
    next_id: std::sync::atomic::AtomicU64,
    notify_pending: Mutex<bool>,
    local_progress: Mutex<Option<tokio::sync::mpsc::UnboundedSender<ProgressNotificationParam>>>,
    /// The list as last announced (names and descriptions), to skip no-op notifications.
    last_notified: Mutex<Option<ListFingerprint>>,
    /// 2026-07-28 clients' `subscriptions/listen` streams (list changes, resource updates).
    listeners: Mutex<Vec<(u64, SubscriptionSink)>>,
    /// The merged prompts and resources, and resource subscriptions (catalog.rs).
    pub(crate) relay: crate::child_catalog::Relay,
    /// Children a reload took out of the config that are still finishing their calls; here
    /// so that `stop_all` stops them too.
    retiring: Mutex<Vec<Child>>,
    /// Bumped whenever a child leaves `Starting` (ready or failed); see `settle`.
    settled: tokio::sync::watch::Sender<u64>,
    /// `KITBAG_HOST_CONFIG` for children: the config file this host read (absolute), None
    /// for the embedded default.
    config_file: Option<std::path::PathBuf>,
    /// Custom notifications from children (e.g. kitbag-cron's `cron_fired`), for in-process
    /// listeners such as `kitbag daemon`; they also go to the upstream client.
    child_events: tokio::sync::broadcast::Sender<ChildEvent>,
    /// The tools of a server known without starting it, when it may wait for its first call.
    known: Option<KnownTools>,
    /// Whether some server may still be idle: false spares the byte path a lookup per call.
    some_idle: std::sync::atomic::AtomicBool,
    me: Weak<Hub>,
}

/// Which servers may start on their first call, and what they offer until then: `Some` for a
/// server whose tools are known without starting it (the binary's own families), None for
/// one that starts with the host.
pub type KnownTools = Arc<dyn Fn(&ServerSpec) -> Option<Known> + Send + Sync>;

/// What a server offers, known without starting it.
#[derive(Debug, Clone, Default)]
pub struct Known {
    pub tools: Vec<Tool>,
    /// The families it declares beyond tools: the host declares them at its handshake, and a
    /// prompt or resource request starts the server (`wake.rs`).
    pub families: crate::child_catalog::Families,
}

/// A custom notification a child sent.
#[derive(Debug, Clone)]
pub struct ChildEvent {
    pub server: String,
    pub method: String,
    pub params: serde_json::Value,
}

impl Child {
    /// `known`: what it offers when that is known without starting it; it then waits `Idle`
    /// for its first call.
    fn new(spec: ServerSpec, id: u64, known: Option<Known>) -> Self {
        let idle = known.is_some() && spec.error.is_none();
        Child {
            id,
            state: if spec.skipped.is_some() {
                State::Skipped
            } else if !spec.entry.enabled {
                State::Disabled
            } else if idle {
                State::Idle
            } else {
                State::Starting
            },
            last_error: spec.skipped.clone().or_else(|| spec.error.clone()),
            spec,
            peer: None,
            fast: None,
            catalog: crate::child_catalog::ChildCatalog {
                families: known.as_ref().map(|k| k.families).unwrap_or_default(),
                ..Default::default()
            },
            tools: known.map(|k| k.tools).unwrap_or_default(),
            pid: None,
            started: None,
            ready_ms: None,
            restarts: 0,
            crashes: VecDeque::new(),
            generation: 0,
            stop: None,
            stopping: false,
            calls: Arc::default(),
        }
    }

    /// Stop this child for good (reload removed it, or the host is exiting).
    fn stop(&mut self) {
        if let Some(pid) = self.detach() {
            kill_group(pid);
        }
    }

    /// Close the child's connection (it sees the end of its input and begins to exit) and
    /// hand back its process group for the caller to stop.
    fn detach(&mut self) -> Option<u32> {
        self.stopping = true;
        if let Some(stop) = self.stop.take() {
            stop.cancel();
        }
        self.peer = None;
        self.fast = None;
        self.pid.take()
    }
}

/// What a reload changed.
#[derive(Debug, Default, serde::Serialize, schemars::JsonSchema)]
pub struct ReloadReport {
    pub started: Vec<String>,
    pub stopped: Vec<String>,
    pub unchanged: Vec<String>,
}

/// Tool names every client accepts: `[A-Za-z0-9_-]`, at most 64 characters.
pub fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    s.chars().take(64).collect()
}

fn glob_match(patterns: &[String], name: &str) -> bool {
    patterns.iter().any(|p| {
        globset::Glob::new(p)
            .map(|g| g.compile_matcher().is_match(name))
            .unwrap_or(p == name)
    })
}

impl Hub {
    /// `config_file`: the absolute path of the config the servers came from (None for the
    /// embedded default), given to every child as `KITBAG_HOST_CONFIG`.
    /// `known`: the servers that start on their first call instead (None: all start now).
    pub fn new(
        specs: Vec<ServerSpec>,
        config_file: Option<std::path::PathBuf>,
        known: Option<KnownTools>,
    ) -> Arc<Hub> {
        let next_id = std::sync::atomic::AtomicU64::new(0);
        let children = specs
            .into_iter()
            .map(|spec| {
                let tools = known.as_ref().and_then(|k| k(&spec));
                Child::new(
                    spec,
                    next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                    tools,
                )
            })
            .collect::<Vec<Child>>();
        let some_idle = children.iter().any(|c| c.state == State::Idle);
        Arc::new_cyclic(|me| Hub {
            children: Mutex::new(children),
            progress: Mutex::new(HashMap::new()),
            progress_inflight: std::sync::atomic::AtomicUsize::new(0),
            upstreams: Default::default(),
            mrtr: Default::default(),
            flat_cache: Mutex::new(None),
            next_id,
            notify_pending: Mutex::new(false),
            local_progress: Mutex::new(None),
            last_notified: Mutex::new(None),
            listeners: Mutex::new(Vec::new()),
            relay: Default::default(),
            retiring: Mutex::new(Vec::new()),
            settled: tokio::sync::watch::Sender::new(0),
            config_file,
            child_events: tokio::sync::broadcast::Sender::new(256),
            some_idle: std::sync::atomic::AtomicBool::new(some_idle),
            known,
            me: me.clone(),
        })
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Child>> {
        self.children.locked()
    }

    /// Whether a server may be idle (`wake.rs`): false once none is.
    pub(crate) fn may_be_idle(&self) -> bool {
        self.some_idle.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Look again whether a server is idle (after one started, or a reload).
    pub(crate) fn note_idle(&self) {
        let any = self.lock().iter().any(|c| c.state == State::Idle);
        self.some_idle
            .store(any, std::sync::atomic::Ordering::Relaxed);
    }

    /// Children's custom notifications from now on.
    pub fn child_events(&self) -> tokio::sync::broadcast::Receiver<ChildEvent> {
        self.child_events.subscribe()
    }

    /// A request came from `peer`'s client: remember it (and release the subscriptions of
    /// clients that went away).
    pub fn set_upstream(&self, peer: Peer<RoleServer>) {
        let orphans = self.upstreams.seen(&peer);
        if orphans.is_empty() {
            return;
        }
        let Some(hub) = self.me.upgrade() else { return };
        tokio::spawn(async move {
            for (id, uri) in orphans {
                hub.release(id, &uri).await;
            }
        });
    }

    /// Start every enabled child in parallel; returns when each is ready or has failed.
    pub async fn start_all(self: &Arc<Self>) {
        let ids: Vec<u64> = self.lock().iter().map(|c| c.id).collect();
        let starts: Vec<_> = ids.into_iter().map(|id| self.clone().start(id)).collect();
        futures::future::join_all(starts).await;
        // The first list is what the client will fetch: nothing to announce.
        *self.last_notified.locked() = Some(self.fingerprint());
    }

    /// Boxed with an explicit `Send` bound: start → crash → restart → start is recursive.
    pub(crate) fn start(self: Arc<Self>, id: u64) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(async move {
            let (entry, name, generation, preset_error) = {
                let mut c = self.lock();
                let Some(child) = c.iter_mut().find(|c| c.id == id) else {
                    return;
                };
                // An idle server starts on its first call (`wake`), which marks it Starting.
                if matches!(child.state, State::Disabled | State::Skipped | State::Idle) {
                    return;
                }
                child.generation += 1;
                child.started = Some(Instant::now());
                (
                    child.spec.entry.clone(),
                    child.spec.name.clone(),
                    child.generation,
                    child.spec.error.clone(),
                )
            };
            if let Some(e) = preset_error {
                self.mark_failed(id, e);
                return;
            }
            let started = Instant::now();
            let timeout = entry
                .startup_timeout_sec
                .map(Duration::from_secs)
                .unwrap_or(DEFAULT_STARTUP_TIMEOUT);
            let client = ChildClient {
                name: name.clone(),
                id,
                hub: self.me.clone(),
            };
            let config_file = self.config_file.clone();
            // Starting means: spawned, handshake done, tools listed, catalog read — all under
            // the startup timeout. Until it is ready the child's process group is killed when
            // this future ends any other way (error, timeout, drop).
            let start = async {
                let (running, guard, link) =
                    connect(&entry, client, config_file.as_deref()).await?;
                let peer = running.peer().clone();
                peer.set_response_cache_config(rmcp::service::ClientCacheConfig::disabled())
                    .await;
                let tools = peer
                    .list_all_tools()
                    .await
                    .map_err(|e| StartFailure::ToolsList(e.to_string()))?;
                let catalog = crate::child_catalog::fetch(&name, &peer).await;
                Ok::<_, StartFailure>((running, guard, link, peer, tools, catalog))
            };
            let result = match tokio::time::timeout(timeout, start).await {
                Ok(r) => r,
                Err(_) => Err(StartFailure::Timeout {
                    secs: timeout.as_secs(),
                }),
            };
            match result {
                Ok((running, guard, link, peer, tools, catalog)) => {
                    let stop = running.cancellation_token();
                    {
                        let mut c = self.lock();
                        let current = c
                            .iter_mut()
                            .find(|c| c.id == id)
                            .filter(|c| c.generation == generation && !c.stopping);
                        let Some(child) = current else {
                            // Removed or restarted while it was starting: nobody will ever
                            // stop this process; dropping the guard stops it now.
                            drop(guard);
                            return;
                        };
                        let pid = guard.ready();
                        child.peer = Some(peer);
                        child.fast = link;
                        child.tools = tools;
                        child.catalog = catalog;
                        child.pid = pid;
                        child.state = State::Ready;
                        child.ready_ms = Some(started.elapsed().as_millis() as u64);
                        child.stop = Some(stop);
                        child.last_error = None;
                    }
                    self.settled.send_modify(|n| *n += 1);
                    self.invalidate_flat();
                    tracing::info!(server = %name, "ready in {} ms", started.elapsed().as_millis());
                    let hub = self.clone();
                    tokio::spawn(async move {
                        let _ = running.waiting().await;
                        hub.on_exit(id, generation).await;
                    });
                    // A restarted child holds none of the subscriptions its clients hold.
                    let hub = self.clone();
                    tokio::spawn(async move { hub.resubscribe(id).await });
                    self.notify_list_changed().await;
                }
                Err(e) => {
                    let login = e.awaited_login();
                    self.mark_failed(id, e.to_string());
                    if let Some(tokens) = login {
                        self.start_after_login(id, generation, tokens);
                    }
                }
            }
        })
    }

    /// A remote server waiting for `kitbag auth login`: started again once its token file
    /// appears (checked each second while it stays failed), so no reload is needed.
    fn start_after_login(self: &Arc<Self>, id: u64, generation: u64, tokens: std::path::PathBuf) {
        let hub = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let Some(hub) = hub.upgrade() else { return };
                let waiting = hub
                    .lock()
                    .iter()
                    .any(|c| c.id == id && c.generation == generation && c.state == State::Failed);
                if !waiting {
                    return;
                }
                if tokens.exists() {
                    hub.start(id).await;
                    return;
                }
            }
        });
    }

    fn mark_failed(&self, id: u64, reason: String) {
        let mut c = self.lock();
        if let Some(child) = c.iter_mut().find(|c| c.id == id) {
            tracing::warn!(server = %child.spec.name, "failed: {reason}");
            child.state = State::Failed;
            child.last_error = Some(reason);
        }
        drop(c);
        self.settled.send_modify(|n| *n += 1);
    }

    /// Wait until no child is starting — at most the longest startup timeout among them.
    /// A server a reload starts (or replaces) lists its tools only once it is ready: a call
    /// that comes in meanwhile waits here, then goes to the new server if it has the tool,
    /// or is an unknown tool. Outside a reload nothing is starting and this returns at once
    /// (crash restarts are `Restarting`, answered at once with "try again").
    pub async fn settle(&self) {
        let mut rx = self.settled.subscribe();
        let starting = |c: &Child| c.state == State::Starting;
        let limit = self
            .lock()
            .iter()
            .filter(|c| starting(c))
            .map(|c| {
                c.spec
                    .entry
                    .startup_timeout_sec
                    .map(Duration::from_secs)
                    .unwrap_or(DEFAULT_STARTUP_TIMEOUT)
            })
            .max();
        let Some(limit) = limit else { return };
        // Beyond the startup timeout: a child's first tools/list is not under it. Capped, so
        // that a config's huge `startup_timeout_sec` cannot overflow the deadline.
        let wait = limit
            .saturating_add(Duration::from_secs(5))
            .min(Duration::from_secs(24 * 3600));
        let deadline = tokio::time::Instant::now() + wait;
        // Subscribed before looking: a child that becomes ready in between still wakes us.
        while self.lock().iter().any(starting) {
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                // Out of time, or no sender (the hub is going away): answer with what is.
                _ => return,
            }
        }
    }

    /// A child went away: restart with backoff, or give up after repeated crashes.
    async fn on_exit(self: Arc<Self>, id: u64, generation: u64) {
        let delay = {
            let mut c = self.lock();
            let Some(child) = c.iter_mut().find(|c| c.id == id) else {
                return;
            };
            if child.generation != generation || child.stopping {
                return; // a deliberate stop, or an older incarnation
            }
            if let Some(pid) = child.pid.take() {
                kill_group(pid);
            }
            child.peer = None;
            child.fast = None;
            let now = Instant::now();
            child.crashes.push_back(now);
            while child
                .crashes
                .front()
                .is_some_and(|t| now.duration_since(*t) > CRASH_WINDOW)
            {
                child.crashes.pop_front();
            }
            if child.crashes.len() >= MAX_CRASHES {
                child.state = State::Failed;
                child.last_error = Some(format!(
                    "crashed {MAX_CRASHES} times within {} s; not restarted",
                    CRASH_WINDOW.as_secs()
                ));
                return;
            }
            child.state = State::Restarting;
            child.restarts += 1;
            child.last_error = Some("the server exited; restarting".into());
            // 1 s, doubling per recent crash, at most 30 s.
            Duration::from_secs((1u64 << (child.crashes.len() - 1).min(5)).min(30))
        };
        tokio::time::sleep(delay).await;
        self.start(id).await;
    }

    /// Stop every child and its process group, and wait (at most `grace`) for them to be
    /// gone: a child given time to exit stops what it started (a shell's contained jobs, a
    /// language server) — killed mid-cleanup, those would outlive the host.
    pub fn stop_all(&self, grace: Duration) {
        let mut groups: Vec<u32> = self.lock().iter_mut().filter_map(Child::detach).collect();
        let retiring = std::mem::take(&mut *self.retiring.locked());
        groups.extend(retiring.into_iter().filter_map(|mut c| c.detach()));
        let groups: Vec<i32> = groups.into_iter().map(|p| p as i32).collect();
        kitbag_shared::process::terminate_groups(&groups, grace);
    }

    /// Stop a child a reload took out of the config, once the calls in flight on it have
    /// finished (at most [`RELOAD_DRAIN_LIMIT`]; then it is stopped anyway and those calls
    /// get `server_unavailable`). It is already out of the list, so no new call reaches it.
    fn retire(self: &Arc<Self>, mut child: Child) {
        child.stopping = true;
        child
            .calls
            .retired
            .store(true, std::sync::atomic::Ordering::Release);
        let in_flight = child.calls.in_flight();
        if in_flight == 0 {
            child.stop();
            return;
        }
        let (id, name, calls) = (child.id, child.spec.name.clone(), child.calls.clone());
        tracing::info!(server = %name, "reload: stopping after its {in_flight} call(s) in flight");
        self.retiring.locked().push(child);
        let hub = self.clone();
        tokio::spawn(async move {
            if !calls.idle_within(RELOAD_DRAIN_LIMIT).await {
                tracing::warn!(
                    server = %name,
                    "reload: calls still in flight after {} s; stopping it anyway",
                    RELOAD_DRAIN_LIMIT.as_secs()
                );
                // The calls answer and cancel themselves (see `Calls::cut_off`); they need
                // no more than a turn of the runtime, the bound is for safety only.
                calls.cut_off.cancel();
                let _ = calls.idle_within(Duration::from_secs(1)).await;
            }
            let child = {
                let mut r = hub.retiring.locked();
                r.iter().position(|c| c.id == id).map(|i| r.swap_remove(i))
            };
            // None: stop_all got there first.
            if let Some(mut child) = child {
                child.stop();
            }
        });
    }

    /// Apply a new config: unchanged servers keep running, changed and new ones start,
    /// removed ones stop. The client connection is kept; `list_changed` tells it.
    ///
    /// The new list is in force at once: a call that starts after this goes to the new
    /// child of its tool, or is an unknown tool. A removed or changed child is stopped only
    /// once its calls in flight are answered (see `retire`), so a step in progress keeps its
    /// server while the next one sees the new catalog.
    pub async fn reload(self: &Arc<Self>, specs: Vec<ServerSpec>) -> ReloadReport {
        let mut report = ReloadReport::default();
        let (to_start, retired): (Vec<u64>, Vec<Child>) = {
            let mut c = self.lock();
            let mut old: Vec<Child> = std::mem::take(&mut *c);
            let mut new = Vec::with_capacity(specs.len());
            let mut to_start = Vec::new();
            for spec in specs {
                match old.iter().position(|o| {
                    o.spec.name == spec.name
                        && o.spec.entry == spec.entry
                        && o.spec.error == spec.error
                        && o.spec.skipped == spec.skipped
                }) {
                    Some(pos) => {
                        report.unchanged.push(spec.name.clone());
                        new.push(old.remove(pos));
                    }
                    None => {
                        let id = self
                            .next_id
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        report.started.push(spec.name.clone());
                        to_start.push(id);
                        let tools = self.known.as_ref().and_then(|k| k(&spec));
                        new.push(Child::new(spec, id, tools));
                    }
                }
            }
            for gone in &old {
                report.stopped.push(gone.spec.name.clone());
            }
            *c = new;
            (to_start, old)
        };
        self.invalidate_flat();
        self.note_idle();
        for gone in retired {
            self.retire(gone);
        }
        futures::future::join_all(to_start.into_iter().map(|id| self.clone().start(id))).await;
        self.notify_list_changed().await;
        report
    }

    pub async fn refresh_tools(&self, name: &str) {
        let peer = {
            let c = self.lock();
            c.iter()
                .find(|c| c.spec.name == name)
                .and_then(|c| c.peer.clone())
        };
        if let Some(peer) = peer
            && let Ok(tools) = peer.list_all_tools().await
        {
            let changed = {
                let mut c = self.lock();
                match c.iter_mut().find(|c| c.spec.name == name) {
                    Some(child) if child.tools != tools => {
                        child.tools = tools;
                        true
                    }
                    _ => false,
                }
            };
            if changed {
                self.invalidate_flat();
                self.notify_list_changed().await;
            }
        }
    }

    fn fingerprint(&self) -> ListFingerprint {
        let (prompts, resources) = self.catalog().fingerprint();
        ListFingerprint {
            tools: self
                .flat()
                .tools
                .iter()
                .map(|t| {
                    (
                        t.name.to_string(),
                        t.description.as_ref().map(|d| d.to_string()),
                    )
                })
                .collect(),
            prompts,
            resources,
        }
    }

    /// Tell the client the lists changed now (the agent policy changed what it may see).
    pub async fn notify_list_changed_now(&self) {
        let any = self.catalog().any();
        self.announce_list_changed(Changed {
            tools: true,
            prompts: any.prompts,
            resources: any.resources,
        })
        .await;
    }

    pub(crate) fn listener_sinks(&self) -> Vec<SubscriptionSink> {
        self.listeners
            .locked()
            .iter()
            .map(|(_, sink)| sink.clone())
            .collect()
    }

    /// Send `{tools,prompts,resources}/list_changed` to every handshake-era client and on
    /// every 2026-07-28 subscription stream that asked for it.
    async fn announce_list_changed(&self, changed: Changed) {
        for p in self.upstreams.all() {
            if changed.tools {
                let _ = p.notify_tool_list_changed().await;
            }
            if changed.prompts {
                let _ = p.notify_prompt_list_changed().await;
            }
            if changed.resources {
                let _ = p.notify_resource_list_changed().await;
            }
        }
        for sink in self.listener_sinks() {
            let accepted = sink.accepted().clone();
            if changed.tools && accepted.tools_list_changed == Some(true) {
                let _ = sink.notify_tool_list_changed().await;
            }
            if changed.prompts && accepted.prompts_list_changed == Some(true) {
                let _ = sink.notify_prompt_list_changed().await;
            }
            if changed.resources && accepted.resources_list_changed == Some(true) {
                let _ = sink.notify_resource_list_changed().await;
            }
        }
    }

    /// Serve one `subscriptions/listen` stream until the client cancels it.
    pub async fn listen(&self, context: SubscriptionContext) {
        let accepted = context.accepted();
        let wanted = accepted.tools_list_changed == Some(true)
            || accepted.prompts_list_changed == Some(true)
            || accepted.resources_list_changed == Some(true)
            || accepted
                .resource_subscriptions
                .as_ref()
                .is_some_and(|u| !u.is_empty());
        if !wanted {
            context.cancelled().await;
            return;
        }
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.listeners.locked().push((id, context.sink().clone()));
        context.cancelled().await;
        self.listeners.locked().retain(|(i, _)| *i != id);
    }

    /// Tell the client the list changed — debounced (several children starting or a reload
    /// produce one notification) and only when the offered list really differs.
    pub(crate) async fn notify_list_changed(&self) {
        {
            let mut pending = self.notify_pending.locked();
            if *pending {
                return; // a notification is already on its way and will see this change
            }
            *pending = true;
        }
        let Some(hub) = self.me.upgrade() else { return };
        tokio::spawn(async move {
            tokio::time::sleep(LIST_CHANGED_DEBOUNCE).await;
            *hub.notify_pending.locked() = false;
            let fingerprint = hub.fingerprint();
            let changed = {
                let mut last = hub.last_notified.locked();
                let before = last.clone().unwrap_or_default();
                *last = Some(fingerprint.clone());
                Changed {
                    tools: before.tools != fingerprint.tools,
                    prompts: before.prompts != fingerprint.prompts,
                    resources: before.resources != fingerprint.resources,
                }
            };
            if changed.tools || changed.prompts || changed.resources {
                hub.announce_list_changed(changed).await;
            }
        });
    }

    /// rmcp hands a child's notifications to spawned tasks but its response straight to the
    /// waiting call, so the last progress a child sent before its answer could arrive after
    /// it — and be dropped with the call's token mapping (the conformance suite's
    /// `tools-call-with-progress` saw 2 of 3). Before a call with a progress token is
    /// answered, the progress tasks already queued get to run and finish forwarding.
    /// rmcp gives no ordering between the two, so this is a bounded wait: the queued tasks
    /// are yielded to, then a few milliseconds (a loaded machine may start them late), then
    /// any forward still running is waited for (at most 200 ms).
    async fn drain_progress(&self) {
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        for _ in 0..200 {
            if self
                .progress_inflight
                .load(std::sync::atomic::Ordering::Acquire)
                == 0
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    async fn forward_progress(&self, child: u64, params: ProgressNotificationParam) {
        use std::sync::atomic::Ordering;
        self.progress_inflight.fetch_add(1, Ordering::AcqRel);
        self.forward_progress_now(child, params).await;
        self.progress_inflight.fetch_sub(1, Ordering::AcqRel);
    }

    async fn forward_progress_now(&self, child: u64, mut params: ProgressNotificationParam) {
        let upstream_token = {
            let map = self.progress.locked();
            map.get(&(child, params.progress_token.clone())).cloned()
        };
        let peer = self.upstreams.latest();
        let Some((token, caller)) = upstream_token else {
            return;
        };
        params.progress_token = token;
        // With an MCP client, the calling request's own peer: over HTTP every request has
        // one, and the shared upstream peer is only the latest (progress of concurrent calls
        // went to the wrong, often finished, request). Without one, the CLI's sink below.
        let peer = caller.or(peer);
        if let Some(peer) = peer {
            let _ = peer.notify_progress(params).await;
        } else if let Some(sink) = self.local_progress.locked().as_ref() {
            // No MCP client: the CLI (`kitbag call`) shows progress itself.
            let _ = sink.send(params);
        }
    }

    /// The peers of ready children that declared logging.
    pub(crate) fn logging_children(&self) -> Vec<Peer<RoleClient>> {
        self.lock()
            .iter()
            .filter(|c| c.state == State::Ready && c.catalog.families.logging)
            .filter_map(|c| c.peer.clone())
            .collect()
    }

    /// Stop delivering local progress (ends the receiver's stream).
    pub fn clear_local_progress(&self) {
        *self.local_progress.locked() = None;
    }

    /// Receive progress of calls made without an MCP client (the CLI).
    pub fn local_progress(
        &self,
    ) -> tokio::sync::mpsc::UnboundedReceiver<ProgressNotificationParam> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        *self.local_progress.locked() = Some(tx);
        rx
    }

    fn invalidate_flat(&self) {
        *self.flat_cache.locked() = None;
        self.relay.invalidate();
    }

    /// The flat, sorted, deterministic list; collisions resolved by config order.
    pub fn flat(&self) -> Arc<FlatList> {
        if let Some(f) = self.flat_cache.locked().as_ref() {
            return f.clone();
        }
        let flat = Arc::new(self.build_flat());
        *self.flat_cache.locked() = Some(flat.clone());
        flat
    }

    fn build_flat(&self) -> FlatList {
        let c = self.lock();
        let mut flat = FlatList::default();
        let mut owner: HashMap<String, String> = HashMap::new();
        for (i, child) in c.iter().enumerate() {
            let e = &child.spec.entry;
            for tool in &child.tools {
                let original = tool.name.to_string();
                if let Some(only) = &e.enabled_tools
                    && !glob_match(only, &original)
                {
                    continue;
                }
                if glob_match(&e.disabled_tools, &original) {
                    continue;
                }
                let offered = match e.aliases.get(&original) {
                    Some(a) => sanitize(a),
                    None => sanitize(&format!(
                        "{}{}",
                        e.prefix.clone().unwrap_or_default(),
                        original
                    )),
                };
                if let Some(first) = owner.get(&offered) {
                    flat.collisions.push(format!(
                        "{}.{original} → {offered}: already offered by {first}; set `prefix` or `aliases` for {}",
                        child.spec.name, child.spec.name
                    ));
                    continue;
                }
                owner.insert(offered.clone(), child.spec.name.clone());
                let private_args =
                    kitbag_shared::audit::private_args(tool.meta.as_ref().map(|m| &m.0)).into();
                let mut t = tool.clone();
                t.name = offered.clone().into();
                flat.tools.push(t);
                flat.routes.insert(
                    offered,
                    Route {
                        child: i,
                        child_id: child.id,
                        original,
                        private_args,
                    },
                );
            }
        }
        flat.tools.sort_by(|a, b| a.name.cmp(&b.name));
        flat
    }

    pub fn server_name(&self, child: usize) -> String {
        self.lock()
            .get(child)
            .map(|c| c.spec.name.clone())
            .unwrap_or_default()
    }

    /// For the byte-level path: the link, original tool name, server name and tool timeout
    /// of a tool whose server is ready, and the call's place among the server's calls in
    /// flight (hold it until the answer is in).
    pub fn fast_route(&self, name: &str) -> Option<FastRoute> {
        let route = self.route(name)?;
        let c = self.lock();
        let child = c.iter().find(|c| c.id == route.child_id)?;
        if child.state != State::Ready {
            return None;
        }
        let link = child.fast.clone().filter(|l| l.is_open())?;
        let timeout = child
            .spec
            .entry
            .tool_timeout_sec
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_TOOL_TIMEOUT);
        Some(FastRoute {
            link,
            private_args: route.private_args,
            original: route.original,
            server: child.spec.name.clone(),
            timeout,
            guard: child.calls.begin(),
        })
    }

    /// The child tool a seed's spelling of a name stands for (`file.read` → `file_read`,
    /// `kaged.issue.list` → `issue_list`, `read_file` → `file_read`; `kaged.issue` +
    /// `{"action": "list"}` → `issue_list`, its `action` removed from `arguments`).
    pub fn resolve_alias(
        &self,
        name: &str,
        arguments: &mut Option<rmcp::model::JsonObject>,
    ) -> Option<String> {
        let flat = self.flat();
        kitbag_shared::aliases::resolve_call(name, arguments, |n| flat.routes.contains_key(n))
    }

    /// Find the route for a tool name as offered, or as the child spells it (e.g. dotted).
    pub fn route(&self, name: &str) -> Option<Route> {
        let flat = self.flat();
        flat.routes
            .get(name)
            .cloned()
            .or_else(|| flat.routes.get(&sanitize(name)).cloned())
    }

    /// Forward a call; a child that is down or dies mid-call gives an error result, never a hang.
    pub async fn call(
        &self,
        route: &Route,
        arguments: Option<rmcp::model::JsonObject>,
        upstream_progress: Option<(ProgressToken, Option<Peer<RoleServer>>)>,
        cancel: tokio_util::sync::CancellationToken,
        trace: Option<kitbag_shared::otel::Propagate>,
    ) -> Result<CallToolResult, CallFailure> {
        let (connected, name, timeout, state) = {
            let c = self.lock();
            let Some(child) = c.iter().find(|c| c.id == route.child_id) else {
                return Err(CallFailure::Removed);
            };
            (
                // Counted from here, under the lock: a reload waits for this call.
                child.peer.clone().map(|peer| (peer, child.calls.begin())),
                child.spec.name.clone(),
                child
                    .spec
                    .entry
                    .tool_timeout_sec
                    .map(Duration::from_secs)
                    .unwrap_or(DEFAULT_TOOL_TIMEOUT),
                child.state.clone(),
            )
        };
        let Some((peer, guard)) = connected else {
            return Err(match state {
                State::Restarting | State::Starting => CallFailure::Restarting { name },
                _ => CallFailure::NotRunning { name },
            });
        };
        let mut params = CallToolRequestParams::new(route.original.clone());
        params.arguments = arguments;
        let mut request = ClientRequest::CallToolRequest(rmcp::model::Request::new(params));
        if let Some(trace) = &trace {
            trace.apply(rmcp::model::GetMeta::get_meta_mut(&mut request));
        }
        let options =
            rmcp::service::PeerRequestOptions::with_timeout(timeout).reset_timeout_on_progress();
        let handle = peer
            .send_cancellable_request(request, options)
            .await
            .map_err(|e| CallFailure::Service {
                name: name.clone(),
                reason: e.to_string(),
            })?;
        let key = (route.child_id, handle.progress_token.clone());
        if let Some(up) = upstream_progress {
            self.progress.locked().insert(key.clone(), up);
        }
        let id = handle.id.clone();
        // Err: the call ends here, not at the child — the client cancelled it, or a reload
        // stopped waiting for it.
        let outcome = tokio::select! {
            // An answer already in wins over a cut-off that comes at the same moment.
            biased;
            r = handle.await_response() => Ok(r),
            _ = cancel.cancelled() => Err(("cancelled by the client", CallFailure::Cancelled)),
            _ = guard.cut_off() => Err((CUT_OFF_REASON, CallFailure::StoppedByReload { name: name.clone() })),
        };
        if upstream_progress_mapped(&self.progress, &key) {
            self.drain_progress().await;
        }
        self.progress.locked().remove(&key);
        match outcome {
            Err((reason, answer)) => {
                let _ = peer
                    .notify_cancelled(rmcp::model::CancelledNotificationParam::new(
                        Some(id),
                        Some(reason.into()),
                    ))
                    .await;
                Err(answer)
            }
            Ok(Ok(ServerResult::CallToolResult(mut r))) => {
                r.result_type = Some(rmcp::model::ResultType::COMPLETE);
                Ok(r)
            }
            Ok(Ok(other)) => Err(CallFailure::Unexpected {
                name,
                result: format!("{other:?}"),
            }),
            Ok(Err(rmcp::service::ServiceError::TransportClosed)) if guard.stopped_by_reload() => {
                Err(CallFailure::StoppedByReload { name })
            }
            Ok(Err(rmcp::service::ServiceError::TransportClosed)) => {
                Err(CallFailure::Exited { name })
            }
            Ok(Err(e)) => Err(CallFailure::Service {
                name,
                reason: e.to_string(),
            }),
        }
    }
}

/// The environment variables that tell a child which host started it (`self_info` and
/// `self_restart` in kitbag-vm check `KITBAG_HOST_PID` against their parent pid before
/// signalling it).
pub const HOST_PID_VAR: &str = "KITBAG_HOST_PID";
pub const HOST_CONFIG_VAR: &str = "KITBAG_HOST_CONFIG";

/// A starting child's process group, killed when the guard is dropped before the child is
/// ready: a child that fails its handshake or tools/list, or overruns the startup timeout,
/// must not outlive the attempt (with whatever it started in its group).
pub struct StartGuard(Option<u32>);

impl StartGuard {
    /// The child is ready: its group is the hub's to stop from now on.
    pub fn ready(mut self) -> Option<u32> {
        self.0.take()
    }
}

impl Drop for StartGuard {
    fn drop(&mut self) {
        if let Some(pid) = self.0.take() {
            kill_group(pid);
        }
    }
}

async fn connect(
    entry: &ServerEntry,
    client: ChildClient,
    config_file: Option<&std::path::Path>,
) -> Result<
    (
        RunningService<RoleClient, ChildClient>,
        StartGuard,
        Option<Arc<crate::fastpath::FastLink>>,
    ),
    StartFailure,
> {
    if let Some(url) = &entry.url {
        // Remote: no process of ours, no byte-level link.
        let server = client.name.clone();
        let running = crate::remote::connect(
            &server,
            url,
            &entry.headers,
            entry.tls.as_ref(),
            entry.oauth.as_ref(),
            client,
        )
        .await?;
        return Ok((running, StartGuard(None), None));
    }
    let mut cmd = tokio::process::Command::new(&entry.command);
    cmd.args(&entry.args)
        .envs(&entry.env)
        // A host somewhere below this one (through any wrapper) refuses to start.
        .env(
            kitbag_config::recursion::DEPTH_VAR,
            (kitbag_config::recursion::depth() + 1).to_string(),
        )
        // After the entry's own variables: which host started the child is this host's to
        // say, not the config's.
        .env(HOST_PID_VAR, std::process::id().to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    match config_file {
        Some(path) => cmd.env(HOST_CONFIG_VAR, path),
        // The embedded default has no file; a value inherited from an outer environment
        // would name someone else's.
        None => cmd.env_remove(HOST_CONFIG_VAR),
    };
    if let Some(cwd) = &entry.cwd {
        cmd.current_dir(cwd);
    }
    let mut child = cmd.spawn().map_err(|source| StartFailure::Spawn {
        command: entry.command.clone(),
        source,
    })?;
    let guard = StartGuard(child.id());
    let name = client.name.clone();
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(StartFailure::NoStdio);
    };
    // The child's first stderr lines: a child that exits before the handshake said why there.
    let last_words = Arc::new(std::sync::Mutex::new(VecDeque::<String>::new()));
    if let Some(stderr) = child.stderr.take() {
        // Drain and tag the child's log lines so a chatty child never blocks on a full pipe.
        let name = name.clone();
        let last_words = last_words.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(target: "kitbag::child", server = %name, "{line}");
                // The first lines: a panic or an error is said first, a backtrace follows.
                let mut kept = last_words.locked();
                if kept.len() < 3 && !line.trim().is_empty() {
                    kept.push_back(
                        kitbag_shared::limits::truncate_str(&line, 500)
                            .0
                            .to_string(),
                    );
                }
            }
        });
    }
    // Reap the child when it exits (it is killed with its group on stop).
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    let (reader, writer, link) = crate::fastpath::wire_child(&name, stdout, stdin);
    let running = match client.serve((reader, writer)).await {
        Ok(r) => r,
        Err(e) => {
            // Give the stderr drain a moment to read what the child said before exiting.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let said = last_words.locked().clone();
            let said = Vec::from(said).join(" | ");
            return Err(StartFailure::Handshake {
                reason: e.to_string(),
                said: (!said.is_empty()).then_some(said),
            });
        }
    };
    Ok((running, guard, Some(link)))
}

/// SIGTERM the child's process group, then SIGKILL 1.5 s later if it has not exited.
pub fn kill_group(pid: u32) {
    kitbag_shared::process::terminate_group_soon(pid as i32, Duration::from_millis(1500));
}

pub fn protocol_error(msg: impl Into<String>) -> McpError {
    McpError::invalid_params(msg.into(), None)
}

/// (child id, child's token) → the caller's token and the peer of the request that made the
/// call.
type ProgressMap = Mutex<HashMap<(u64, ProgressToken), (ProgressToken, Option<Peer<RoleServer>>)>>;

fn upstream_progress_mapped(map: &ProgressMap, key: &(u64, ProgressToken)) -> bool {
    map.locked().contains_key(key)
}
