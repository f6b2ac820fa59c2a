//! One child server: its state, the client handler that hears it, the calls in flight on it,
//! and how it is spawned (a process in its own group) or connected (a remote URL).

use super::{ChildEvent, HOST_CONFIG_VAR, HOST_PID_VAR, Hub, Known};

use kitbag_shared::lock::LockExt;
use std::collections::VecDeque;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use rmcp::model::{
    ClientCapabilities, ClientConfig, Implementation, ProgressNotificationParam,
    ResourceUpdatedNotificationParam,
};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService, ServiceExt};
use rmcp::{ClientHandler, ErrorData as McpError};

use crate::failure::StartFailure;
use kitbag_config::entry::{ServerEntry, ServerSpec};

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
    pub(super) id: u64,
    pub(super) hub: Weak<Hub>,
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
        if let Some(r) = crate::relay::to_call(
            &hub.mrtr,
            self.id,
            "elicitation/create",
            key.clone(),
            &params,
        )
        .await
        {
            return r;
        }
        if let Some(operator) = hub.operator() {
            return crate::relay::to_operator(operator, &self.name, key, params).await;
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
    pub tools: super::Tools,
    /// Its prompts, resources and templates (catalog.rs).
    pub catalog: crate::child_catalog::ChildCatalog,
    pub pid: Option<u32>,
    pub started: Option<Instant>,
    pub ready_ms: Option<u64>,
    pub restarts: u32,
    pub last_error: Option<String>,
    pub(super) crashes: VecDeque<Instant>,
    pub(super) generation: u64,
    pub(super) stop: Option<rmcp::service::RunningServiceCancellationToken>,
    pub(super) stopping: bool,
    /// Calls in flight on this server (every incarnation), which a reload waits for.
    pub(crate) calls: Arc<Calls>,
    /// Stopped after this long without a call, back to `Idle` (see `idle.rs`).
    pub(super) idle_stop: Option<Duration>,
    /// Known without starting it, but started with the host all the same (in the
    /// background, see [`super::Known::start_now`]).
    pub(super) start_now: bool,
}

/// The calls in flight on one child. A call holds a [`CallGuard`] from the moment it is
/// routed to the child until its answer is in; a reload that stops or replaces the child
/// waits for the count to reach zero (at most [`RELOAD_DRAIN_LIMIT`]).
pub struct Calls {
    pub(super) in_flight: tokio::sync::watch::Sender<usize>,
    /// Set when a reload took the child out of the config: a call that then loses its
    /// server says so instead of "being restarted".
    pub(super) retired: std::sync::atomic::AtomicBool,
    /// Cancelled when the reload's wait ran out: the calls still in flight answer their
    /// callers `server_unavailable` and tell the child to stop them, before the child is
    /// stopped — so whatever a child says while it shuts down (kitbag servers answer
    /// `cancelled`) cannot overtake that answer.
    pub(super) cut_off: tokio_util::sync::CancellationToken,
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

    pub(super) fn in_flight(&self) -> usize {
        *self.in_flight.borrow()
    }

    /// Wait until no call is in flight; false when `limit` ran out first.
    pub(super) async fn idle_within(&self, limit: Duration) -> bool {
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

impl Child {
    /// `known`: what it offers when that is known without starting it; it then waits `Idle`
    /// for its first call.
    pub(super) fn new(spec: ServerSpec, id: u64, known: Option<Known>) -> Self {
        let idle = known.is_some() && spec.error.is_none();
        // The entry's own `idle_stop_secs` (0: never), else what the host knows of the
        // server's family. Any server may have one: once started, its tools are known, so it
        // can wait for its next call.
        let idle_stop = spec
            .entry
            .idle_stop_secs
            .map(Duration::from_secs)
            .or_else(|| known.as_ref().and_then(|k| k.idle_stop))
            .filter(|d| !d.is_zero());
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
                templates: known
                    .as_ref()
                    .map(|k| k.templates.clone())
                    .unwrap_or_default(),
                ..Default::default()
            },
            idle_stop,
            start_now: known.as_ref().is_some_and(|k| k.start_now),
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
    pub(super) fn stop(&mut self) {
        if let Some(pid) = self.detach() {
            kill_group(pid);
        }
    }

    /// Close the child's connection (it sees the end of its input and begins to exit) and
    /// hand back its process group for the caller to stop.
    pub(super) fn detach(&mut self) -> Option<u32> {
        self.stopping = true;
        if let Some(stop) = self.stop.take() {
            stop.cancel();
        }
        self.peer = None;
        self.fast = None;
        self.pid.take()
    }
}

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

pub(super) async fn connect(
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
    let framing = if kitbag_config::recursion::runs_own_server(entry) {
        crate::fastpath::Framing::Known
    } else {
        crate::fastpath::Framing::Parse
    };
    let stdin = kitbag_shared::stdin::PolledWriter::child_stdin(stdin)
        .map_err(|_| StartFailure::NoStdio)?;
    let (stdin, _writer) = crate::line_out::direct(stdin, std::future::pending());
    // Its answers end the host's poll before sleeping (kitbag_shared::busy_poll).
    let watch = kitbag_shared::busy_poll::watch(&stdout);
    let (reader, writer, link) =
        crate::fastpath::wire_child(&name, stdout, stdin, framing, Some(watch));
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
