//! The host as an MCP server: the flat list of every child's tools plus `host_status`.

use kitbag_shared::lock::{LockExt, RwLockExt};
use std::sync::Arc;
use std::time::Instant;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, GetPromptRequestParams,
    GetPromptResponse, Implementation, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ServerConfig, SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde::Serialize;
use serde_json::json;

use crate::fastpath;
use crate::hub::{Hub, State};
use kitbag_shared::http::Principal;
use kitbag_shared::tier::{self, Tier};

pub const STATUS_TOOL: &str = "host_status";
pub const RELOAD_TOOL: &str = "host_reload";

/// Re-reads the configuration (for `host_reload` and SIGHUP).
pub type ConfigLoader = Arc<dyn Fn() -> anyhow::Result<kitbag_config::Config> + Send + Sync>;

tokio::task_local! {
    /// The caller of the HTTP request being served: its token's agent and tiers decide what
    /// it may list and call (`kitbag_shared::http::auth`). Unset over stdio and for the loop.
    static CALLER: Option<Principal>;
}

/// Run `work` as `caller`'s request.
pub async fn as_caller<F: std::future::Future>(caller: Option<Principal>, work: F) -> F::Output {
    CALLER.scope(caller, work).await
}

/// [`as_caller`] for synchronous work (the byte path's start).
pub fn as_caller_sync<R>(caller: Option<Principal>, work: impl FnOnce() -> R) -> R {
    CALLER.sync_scope(caller, work)
}

fn caller() -> Option<Principal> {
    CALLER.try_with(Clone::clone).ok().flatten()
}

#[derive(Clone)]
pub struct HostServer {
    pub hub: Arc<Hub>,
    pub started: Instant,
    /// The agent profile in force (`--agent`); None = every tool. Replaced on reload.
    pub policy: Arc<std::sync::RwLock<Option<Arc<kitbag_config::policy::Policy>>>>,
    /// Every profile of the config, for HTTP callers whose token names their agent.
    pub agents: Arc<std::sync::RwLock<kitbag_config::policy::Agents>>,
    /// One JSON line per call (`--audit-log`).
    pub audit: Option<kitbag_shared::audit::AuditLog>,
    pub loader: Option<ConfigLoader>,
    /// The top-level settings in force (environment > agent.json > default).
    pub settings: Arc<std::sync::Mutex<Vec<kitbag_config::settings::Setting>>>,
    /// Every tool listed, or the three discovery tools (`--tools lazy`).
    pub tools_mode: crate::lazy::ToolsMode,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ServerStatus {
    pub name: String,
    pub state: State,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    pub uptime_secs: u64,
    pub restarts: u32,
    pub tools: usize,
    /// Prompts, resources and resource templates offered from this server (collisions
    /// left out).
    pub prompts: usize,
    pub resources: usize,
    pub resource_templates: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct StatusResult {
    pub servers: Vec<ServerStatus>,
    pub tools: usize,
    /// Tool-name, prompt-name and resource-URI collisions (the first configured server
    /// keeps the name or URI).
    pub collisions: Vec<String>,
    /// Top-level settings with where each value came from (env, file, default).
    pub settings: Vec<kitbag_config::settings::Setting>,
    /// Calls forwarded at the byte level (fastpath.rs) since start.
    pub byte_level_calls: u64,
    /// The agent's sessions in `.kitbag/sessions` of the working directory, with their token
    /// totals (`kitbag run`, `chat`, `daemon`).
    pub sessions: Vec<kitbag_agent::record::SessionTotals>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusParams {}

impl HostServer {
    pub fn status(&self) -> StatusResult {
        let flat = self.hub.flat();
        let catalog = self.hub.catalog();
        let c = self.hub.children.locked();
        let servers = c
            .iter()
            .map(|ch| ServerStatus {
                name: ch.spec.name.clone(),
                state: ch.state.clone(),
                pid: ch.pid,
                uptime_secs: if ch.state == State::Ready {
                    ch.started.map_or(0, |s| s.elapsed().as_secs())
                } else {
                    0
                },
                restarts: ch.restarts,
                tools: flat
                    .routes
                    .values()
                    .filter(|r| c.get(r.child).is_some_and(|x| x.spec.name == ch.spec.name))
                    .count(),
                prompts: catalog
                    .prompts
                    .iter()
                    .filter(|(id, _)| *id == ch.id)
                    .count(),
                resources: catalog
                    .resources
                    .iter()
                    .filter(|(id, _)| *id == ch.id)
                    .count(),
                resource_templates: catalog
                    .templates
                    .iter()
                    .filter(|(id, _)| *id == ch.id)
                    .count(),
                ready_ms: ch.ready_ms,
                last_error: ch.last_error.clone(),
            })
            .collect();
        StatusResult {
            servers,
            tools: flat.tools.len() + 1,
            collisions: flat
                .collisions
                .iter()
                .chain(&catalog.collisions)
                .cloned()
                .collect(),
            settings: self.settings.lock().map(|s| s.clone()).unwrap_or_default(),
            byte_level_calls: fastpath::forwarded(),
            sessions: std::env::current_dir()
                .map(|d| kitbag_agent::session::all_totals(&d))
                .unwrap_or_default(),
        }
    }

    pub(crate) fn status_tool() -> Tool {
        let input = kitbag_shared::schema::input_schema::<StatusParams>().unwrap_or_default();
        Tool::new(
            STATUS_TOOL,
            "Report every server the host runs: state (ready, restarting, failed), pid, uptime, restarts, tool count and last error, plus tool-name collisions.",
            input,
        )
        .with_raw_output_schema(std::sync::Arc::new(kitbag_shared::schema::output_schema_for::<StatusResult>("host_status")))
        .with_annotations(rmcp::model::ToolAnnotations::with_title("Host status").read_only(true).open_world(false))
    }

    /// The agent policy of this call: the caller's token's agent, else `--agent`'s.
    pub(crate) fn policy(&self) -> Option<Arc<kitbag_config::policy::Policy>> {
        if let Some(agent) = caller().and_then(|c| c.agent) {
            return Some(self.agents.read_locked().policy(&agent));
        }
        self.policy.read().map(|p| p.clone()).unwrap_or_default()
    }

    /// What this caller's prompt and resource requests may see.
    pub(crate) fn catalog_scope(&self) -> crate::catalog::Scope<'_> {
        crate::catalog::Scope {
            hub: &self.hub,
            policy: self.policy(),
        }
    }

    /// Ok when the caller's token grants the tier `tool` needs (always over stdio).
    pub(crate) fn tier_permits(
        tool: &Tool,
        caller: Option<&Principal>,
    ) -> Result<(), kitbag_config::policy::Denial> {
        let Some(caller) = caller else { return Ok(()) };
        let tier = tier::of_tool(tool);
        if caller.allows(tier) {
            return Ok(());
        }
        let granted: Vec<&str> = caller
            .tiers
            .iter()
            .flatten()
            .map(|t: &Tier| t.as_str())
            .collect();
        Err((
            "capability_denied",
            format!(
                "{} needs the `{tier}` tier; the caller's token grants {}",
                tool.name,
                if granted.is_empty() {
                    "none".to_string()
                } else {
                    granted.join(", ")
                }
            ),
        ))
    }

    /// The tier the tool offered as `name` needs (None: no such tool).
    pub fn tier_of(&self, name: &str) -> Option<Tier> {
        match name {
            STATUS_TOOL => return Some(tier::of_tool(&Self::status_tool())),
            RELOAD_TOOL => return Some(tier::of_tool(&Self::reload_tool())),
            _ => {}
        }
        self.offered(name, tier::of_tool)
    }

    pub(crate) fn agent_name(&self) -> Option<String> {
        self.policy().map(|p| p.agent.clone())
    }

    /// Check a call against the agent policy; Err is the error result to return.
    pub fn permit(&self, name: &str) -> Result<(), kitbag_config::policy::Denial> {
        let policy = self.policy();
        let caller = caller();
        if policy.is_none() && caller.is_none() {
            return Ok(());
        }
        self.offered(name, |tool| {
            Self::tier_permits(tool, caller.as_ref())?;
            policy.map_or(Ok(()), |p| p.check(tool))
        })
        .unwrap_or(Ok(()))
    }

    /// `look` at the child tool a call names (its offered name, or the name sanitized as
    /// the flat list offers it); None when no child offers it.
    fn offered<R>(&self, name: &str, look: impl FnOnce(&Tool) -> R) -> Option<R> {
        let flat = self.hub.flat();
        let offered = if flat.routes.contains_key(name) {
            name.to_string()
        } else {
            crate::hub::sanitize(name)
        };
        flat.tools.iter().find(|t| t.name == offered).map(look)
    }

    /// A host tool (`host_status`, `host_reload`) for this call's caller: the tier its token
    /// grants, and the agent policy unless `policy_exempt`.
    pub(crate) fn permit_own(
        &self,
        tool: &Tool,
        policy_exempt: bool,
    ) -> Result<(), kitbag_config::policy::Denial> {
        Self::tier_permits(tool, caller().as_ref())?;
        match self.policy() {
            Some(p) if !policy_exempt || p.is_unknown() => p.check(tool),
            _ => Ok(()),
        }
    }

    /// Whether this call's caller may see and call `tool` (agent policy and tiers).
    pub(crate) fn visible(&self, tool: &Tool) -> bool {
        self.policy().is_none_or(|p| p.check(tool).is_ok())
            && Self::tier_permits(tool, caller().as_ref()).is_ok()
    }

    pub(crate) fn reload_tool() -> Tool {
        let input = kitbag_shared::schema::input_schema::<StatusParams>().unwrap_or_default();
        Tool::new(
            RELOAD_TOOL,
            "Re-read the host's configuration (the --config file, else agent.json) and apply it without dropping this connection: new and changed servers start and take every new call, unchanged ones keep running, and removed or changed ones stop once the calls they are answering finish (at most 5 s). A config that cannot be read changes nothing. Edit the config file first, then call this. SIGHUP does the same.",
            input,
        )
        .with_raw_output_schema(std::sync::Arc::new(kitbag_shared::schema::output_schema_for::<crate::hub::ReloadReport>("host_reload")))
        .with_annotations(rmcp::model::ToolAnnotations::with_title("Reload host config").read_only(false).destructive(false).idempotent(true).open_world(false))
    }

    /// Re-read the config and apply it.
    pub async fn reload(&self) -> Result<crate::hub::ReloadReport, crate::failure::ReloadFailure> {
        use crate::failure::ReloadFailure;
        let Some(loader) = &self.loader else {
            return Err(ReloadFailure::NoConfig);
        };
        let cfg = loader().map_err(ReloadFailure::Unreadable)?;
        // The agent's profile is re-read too; an agent removed from the file is an error.
        let agent = self.policy.read_locked().as_ref().map(|p| p.agent.clone());
        let policy = kitbag_config::policy::for_agent(&cfg, agent.as_deref())
            .map_err(ReloadFailure::Agent)?;
        *self.agents.write_locked() = kitbag_config::policy::Agents::new(&cfg);
        if let Ok(mut s) = self.settings.lock() {
            *s = cfg.settings.clone();
        }
        let before: Vec<String> = self.tools().iter().map(|t| t.name.to_string()).collect();
        if let Ok(mut p) = self.policy.write() {
            *p = policy;
        }
        let report = self.hub.reload(cfg.servers).await;
        let after: Vec<String> = self.tools().iter().map(|t| t.name.to_string()).collect();
        if before != after {
            self.hub.notify_list_changed_now().await;
        }
        Ok(report)
    }

    /// What `tools/list` offers: every tool, or in lazy mode the discovery tools and the
    /// host's own.
    pub fn listed_tools(&self) -> Vec<Tool> {
        if self.tools_mode == crate::lazy::ToolsMode::Full {
            return self.tools();
        }
        let mut tools: Vec<Tool> = self
            .tools()
            .into_iter()
            .filter(|t| t.name == STATUS_TOOL || t.name == RELOAD_TOOL)
            .chain(crate::lazy::tools())
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools
    }

    /// The discovery tools' own calls; `None` for any other name.
    async fn call_lazy(&self, request: &CallToolRequestParams) -> Option<CallToolResult> {
        use crate::lazy;
        if self.tools_mode != lazy::ToolsMode::Lazy {
            return None;
        }
        let args = request.arguments.clone().unwrap_or_default();
        let decoded = |r: Result<CallToolResult, kitbag_shared::ToolError>| {
            r.unwrap_or_else(|e| e.into_call_result())
        };
        match request.name.as_ref() {
            lazy::SEARCH_TOOL => Some(decoded((|| {
                let p: lazy::SearchParams = kitbag_shared::server::decode_args(args)?;
                let limit = p.limit.unwrap_or(10);
                if !(1..=50).contains(&limit) {
                    return Err(kitbag_shared::ToolError::invalid_field(
                        "limit",
                        format!("is {limit}; give 1 to 50"),
                    ));
                }
                let found = lazy::search(&self.tools(), &p.query, limit as usize);
                let mut text = format!("{} tools match", found.matched);
                for t in &found.tools {
                    text.push_str(&format!("\n{}: {}", t.name, t.summary));
                }
                let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
                r.structured_content = serde_json::to_value(&found).ok();
                Ok(r)
            })())),
            lazy::SCHEMA_TOOL => Some(decoded((|| {
                let p: lazy::SchemaParams = kitbag_shared::server::decode_args(args)?;
                let tools = self.tools();
                let Some(t) = tools.iter().find(|t| t.name == p.name) else {
                    return Err(kitbag_shared::ToolError::new(
                        kitbag_shared::ErrorCode::UnknownTool,
                        format!("no tool named `{}`; tool_search finds tools", p.name),
                    )
                    .with_detail(json!({"field": "name"})));
                };
                let found = lazy::SchemaResult {
                    name: t.name.to_string(),
                    description: t.description.as_deref().unwrap_or("").to_string(),
                    input_schema: (*t.input_schema).clone(),
                };
                let text = format!(
                    "{}\n{}\narguments: {}",
                    found.name,
                    found.description,
                    serde_json::Value::Object(found.input_schema.clone())
                );
                let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
                r.structured_content = serde_json::to_value(&found).ok();
                Ok(r)
            })())),
            _ => None,
        }
    }

    pub fn tools(&self) -> Vec<Tool> {
        let mut tools: Vec<Tool> = self
            .hub
            .flat()
            .tools
            .iter()
            .filter(|t| self.visible(t))
            .cloned()
            .collect();
        let status = Self::status_tool();
        if self.permit_own(&status, true).is_ok() {
            tools.push(status);
        }
        let reload = Self::reload_tool();
        if self.loader.is_some() && self.visible(&reload) {
            tools.push(reload);
        }
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools
    }
}

/// The trace context a request forwarded to a child carries: this request's span (the
/// transport opened it), or, when the host is not tracing, the client's own context.
fn trace_of(context: &RequestContext<RoleServer>) -> Option<kitbag_shared::otel::Propagate> {
    kitbag_shared::otel::propagate_of(&context.extensions)
        .cloned()
        .or_else(|| kitbag_shared::otel::Propagate::from_meta(&context.meta))
}

fn request_id(id: &rmcp::model::RequestId) -> String {
    match serde_json::to_value(id) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(v) => v.to_string(),
        Err(_) => String::new(),
    }
}

pub fn error_result(code: &str, message: String) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(format!(
        "error [{code}]: {message}"
    ))]);
    r.structured_content = Some(json!({"error": {"code": code, "message": message}}));
    r
}

impl ServerHandler for HostServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(crate::catalog::capabilities(&self.catalog_scope()))
            .with_server_info(Implementation::new("kitbag", env!("CARGO_PKG_VERSION")))
            .with_instructions("kitbag offers the tools of several MCP servers as one list; host_status reports on them.")
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.hub.set_upstream(context.peer.clone());
    }

    /// 2026-07-28 clients learn of list changes (reloads, restarts) on a listen stream.
    fn accepted_subscription_filter(
        &self,
        requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(crate::catalog::accepted_filter(
            &self.catalog_scope(),
            requested,
        ))
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), McpError> {
        crate::catalog::listen(&self.catalog_scope(), context).await;
        Ok(())
    }

    // Prompts and resources of the children: catalog.rs.

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Ok(ListPromptsResult::with_all_items(
            crate::catalog::list_prompts(&self.catalog_scope()),
        ))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        crate::catalog::get_prompt(
            &self.catalog_scope(),
            request,
            context.ct.clone(),
            trace_of(&context),
        )
        .await
        .map(Into::into)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Ok(ListResourcesResult::with_all_items(
            crate::catalog::list_resources(&self.catalog_scope()).await,
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(
            crate::catalog::list_resource_templates(&self.catalog_scope()),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        crate::catalog::read_resource(
            &self.catalog_scope(),
            request,
            context.ct.clone(),
            trace_of(&context),
        )
        .await
        .map(Into::into)
    }

    #[allow(deprecated)] // legacy-only in 2026-07-28, still what handshake-era clients send
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.hub.set_upstream(context.peer.clone());
        crate::catalog::subscribe(&self.catalog_scope(), &context.peer, request.uri).await
    }

    #[allow(deprecated)] // logging: deprecated by SEP-2577, still the handshake era's
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.hub.set_upstream(context.peer.clone());
        crate::relay::set_level(self.hub.logging_children(), request).await;
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        crate::catalog::unsubscribe(&self.catalog_scope(), &context.peer, request.uri).await
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.hub.set_upstream(context.peer.clone());
        let caller = kitbag_shared::http::principal_of(&context.extensions).cloned();
        Ok(as_caller_sync(caller, || {
            ListToolsResult::with_all_items(self.listed_tools())
        }))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let caller = kitbag_shared::http::principal_of(&context.extensions).cloned();
        as_caller(caller, self.call_tool_as_caller(request, context)).await
    }
}

impl HostServer {
    async fn call_tool_as_caller(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.hub.set_upstream(context.peer.clone());
        if let Some(r) = self.call_lazy(&request).await {
            return Ok(r.into());
        }
        if request.name == crate::lazy::CALL_TOOL && self.tools_mode == crate::lazy::ToolsMode::Lazy
        {
            // tool_call: the named tool, called as if directly (policy, audit, progress).
            let p: crate::lazy::CallParams = match kitbag_shared::server::decode_args(
                request.arguments.clone().unwrap_or_default(),
            ) {
                Ok(p) => p,
                Err(e) => return Ok(e.into_call_result().into()),
            };
            if p.name == crate::lazy::CALL_TOOL {
                return Ok(error_result(
                    "invalid_params",
                    "name: tool_call cannot call itself".into(),
                )
                .into());
            }
            request.name = p.name.into();
            request.arguments = p.arguments;
        }
        // Progress goes back to this request's own peer: over HTTP every request has its
        // own (the hub's upstream peer is just the latest one).
        let trace = trace_of(&context);
        let meta = crate::dispatch::CallMeta {
            request_id: request_id(&context.id),
            progress: context
                .meta
                .get_progress_token()
                .map(|t| (t, Some(context.peer.clone()))),
            ct: context.ct.clone(),
            trace,
        };
        self.dispatch(&request.name, request.arguments, meta)
            .await
            .map(Into::into)
    }
}

/// Serve over stdin/stdout: plain tool calls take the byte-level path (fastpath.rs),
/// everything else goes through rmcp.
pub async fn serve_stdio(host: HostServer) -> anyhow::Result<()> {
    use rmcp::ServiceExt;
    let (stdin, stdout) = rmcp::transport::stdio_pipes();
    let (out_tx, out_rx) = tokio::sync::mpsc::unbounded_channel();
    let (finish_tx, finish_rx) = tokio::sync::oneshot::channel::<()>();
    let writer = fastpath::spawn_writer_until(stdout, out_rx, async move {
        let _ = finish_rx.await;
    });
    let (to_rmcp, rmcp_rx) = tokio::sync::mpsc::unbounded_channel();
    // One bound on requests in flight for the connection, both paths counted.
    let budget = kitbag_shared::budget::RequestBudget::default();
    // One set of spans too: the byte path's and rmcp's (which also learns the protocol
    // version the handshake agreed on).
    let conn = kitbag_shared::otel::Conn::pipe();
    let demux = tokio::spawn(upstream_demux(
        host.clone(),
        stdin,
        to_rmcp,
        out_tx.clone(),
        budget.clone(),
        conn.clone(),
    ));
    let running = host
        .serve(
            kitbag_shared::transport::LineTransport::new(
                fastpath::ChannelReader::new(rmcp_rx),
                fastpath::LineWriter::new(out_tx),
            )
            .with_budget(budget)
            .traced(conn),
        )
        .await
        .map_err(|e| anyhow::anyhow!("MCP handshake failed: {e}"))?;
    // SIGINT/SIGTERM end the session like stdin EOF: the caller then stops every child.
    let cancel = running.cancellation_token();
    let signalled = tokio_util::sync::CancellationToken::new();
    tokio::spawn({
        let signalled = signalled.clone();
        async move {
            kitbag_shared::runtime::shutdown_signal().await;
            signalled.cancel();
            cancel.cancel();
        }
    });
    let _ = running.waiting().await;
    // At stdin EOF the demux first lets the calls in flight finish (bounded); on a signal
    // the client wants us gone now.
    if !signalled.is_cancelled() {
        let _ = tokio::time::timeout(DRAIN_LIMIT, demux).await;
    }
    // Whatever answers are queued go out before the host exits.
    let _ = finish_tx.send(());
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), writer).await;
    Ok(())
}

async fn upstream_demux<R: tokio::io::AsyncRead + Unpin>(
    host: HostServer,
    stdin: R,
    to_rmcp: tokio::sync::mpsc::UnboundedSender<fastpath::Line>,
    out: tokio::sync::mpsc::UnboundedSender<fastpath::Line>,
    budget: kitbag_shared::budget::RequestBudget,
    conn: Arc<kitbag_shared::otel::Conn>,
) {
    let mut r = tokio::io::BufReader::with_capacity(1 << 16, stdin);
    let mut line = Vec::new();
    // Handshake-era calls take the byte-level path once `initialize` was seen; 2026-07-28
    // calls say so in their own `_meta` (their answers get `resultType`).
    let mut handshake = false;
    let inflight = Arc::new(fastpath::InFlight::new(budget.clone()));
    loop {
        // Backpressure: no more reading while the connection's requests in flight are at
        // the bound; the client's writes block in the pipe instead of piling up here.
        budget.wait_for_room().await;
        line.clear();
        match read_line_capped(&mut r, &mut line).await {
            LineRead::End => {
                // The client is done sending, not receiving: answer what is in flight first.
                drain(&inflight, DRAIN_LIMIT).await;
                break;
            }
            LineRead::TooLong => {
                let head = String::from_utf8_lossy(&line);
                if let Some(found) = kitbag_shared::salvage::salvage_prefix(&head)
                    && found.method.is_some()
                    && let Some(id) = found.valid_id()
                {
                    let _ = out.send(fastpath::protocol_error_line(
                        id,
                        -32600,
                        &format!(
                            "Invalid request: the message is longer than {} bytes, the most one message may carry",
                            kitbag_shared::transport::MAX_LINE_BYTES
                        ),
                    ));
                }
                continue;
            }
            LineRead::Line => {}
        }
        let handled = match std::str::from_utf8(&line) {
            Err(_) => false,
            Ok(text) => match fastpath::classify(text.trim_end()) {
                fastpath::Upstream::Initialize => {
                    handshake = true;
                    false
                }
                fastpath::Upstream::Discover => {
                    handshake = false;
                    false
                }
                fastpath::Upstream::Call(call) if handshake || call.modern => {
                    host.call_fast(call, &out, &inflight, &conn)
                }
                fastpath::Upstream::Refuse(answer) => out.send(answer).is_ok(),
                fastpath::Upstream::Cancelled(id) => match inflight.remove(&id) {
                    Some((link, child_id)) => {
                        link.cancel(&child_id, "cancelled by the client");
                        true
                    }
                    None => false,
                },
                _ => false,
            },
        };
        if !handled && to_rmcp.send(std::mem::take(&mut line)).is_err() {
            break;
        }
    }
}

/// How long calls in flight at stdin EOF may take to finish before the host exits anyway.
const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

async fn drain(inflight: &fastpath::InFlight, limit: std::time::Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    while !inflight.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

enum LineRead {
    Line,
    /// Longer than the cap: `line` holds its first 64 KB, the rest was read and dropped.
    TooLong,
    End,
}

/// Read one line into `line`, never holding more than the transport's line cap.
async fn read_line_capped<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    line: &mut Vec<u8>,
) -> LineRead {
    use tokio::io::AsyncBufReadExt;
    const HEAD: usize = 64 * 1024;
    let max = kitbag_shared::transport::MAX_LINE_BYTES;
    let mut too_long = false;
    loop {
        let chunk = match r.fill_buf().await {
            Ok([]) | Err(_) => {
                return if too_long || line.is_empty() {
                    LineRead::End
                } else {
                    LineRead::Line
                };
            }
            Ok(chunk) => chunk,
        };
        let (take, done) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !too_long {
            line.extend_from_slice(&chunk[..take]);
            if line.len() > max {
                too_long = true;
                line.truncate(HEAD);
            }
        }
        r.consume(take);
        if done {
            return if too_long {
                LineRead::TooLong
            } else {
                LineRead::Line
            };
        }
    }
}

/// A plain call sent to its child at the byte level, its answer not yet in.
pub struct FastPending {
    pub link: Arc<fastpath::FastLink>,
    pub child_id: String,
    rx: tokio::sync::oneshot::Receiver<fastpath::Reply>,
    server: String,
    timeout: std::time::Duration,
    upstream_id: String,
    modern: bool,
    /// Held until the answer is in: a reload stops this call's server only after that.
    guard: crate::hub::CallGuard,
    audit: Option<(
        kitbag_shared::audit::AuditLog,
        serde_json::Value,
        Option<String>,
        String,
    )>,
    started: Instant,
    /// The tool as the client named it (metrics).
    tool: String,
    /// The call's span, when this path owns it (stdio; over HTTP the front does).
    span: Option<kitbag_shared::otel::Span>,
}

impl HostServer {
    /// Send a plain call to its child as bytes, `trace` in its `_meta`; None leaves it to
    /// rmcp (host tools, denied calls, a server not ready).
    pub fn start_fast(
        &self,
        call: &fastpath::FastCall<'_>,
        trace: Option<&kitbag_shared::otel::Propagate>,
    ) -> Option<FastPending> {
        let name = call.name.as_ref();
        if name == STATUS_TOOL || name == RELOAD_TOOL || self.permit(name).is_err() {
            return None;
        }
        let crate::hub::FastRoute {
            link,
            private_args,
            original,
            server,
            timeout,
            guard,
        } = self.hub.fast_route(name)?;
        let (child_id, rx) = link.call(&original, call.arguments, trace)?;
        let audit = self.audit.clone().map(|a| {
            let params = call
                .arguments
                .and_then(|a| serde_json::from_str::<serde_json::Value>(a.get()).ok())
                .unwrap_or_else(|| json!({}));
            let params = kitbag_shared::audit::redact_private(&params, &private_args);
            (a, params, self.agent_name(), name.to_string())
        });
        Some(FastPending {
            link,
            child_id,
            rx,
            server,
            timeout,
            upstream_id: call.id.get().to_string(),
            modern: call.modern,
            guard,
            audit,
            started: Instant::now(),
            tool: name.to_string(),
            span: None,
        })
    }

    /// Forward a plain stdio call as bytes; false leaves it to rmcp.
    fn call_fast(
        &self,
        call: fastpath::FastCall<'_>,
        out: &tokio::sync::mpsc::UnboundedSender<fastpath::Line>,
        inflight: &Arc<fastpath::InFlight>,
        conn: &kitbag_shared::otel::Conn,
    ) -> bool {
        let upstream_id = call.id.get();
        // Keyed by the id's value, so a cancellation spelling it differently still matches.
        let key = serde_json::from_str::<serde_json::Value>(upstream_id)
            .map(|v| v.to_string())
            .unwrap_or_else(|_| upstream_id.to_string());
        if inflight.contains(&key) {
            // Two answers with one id could not be told apart: the second is refused.
            let _ = out.send(fastpath::protocol_error_line(
                upstream_id,
                -32600,
                "Invalid request: a request with this id is still in progress",
            ));
            return true;
        }
        // The call's span (when tracing), its context handed to the child; else the
        // client's own context passes through.
        let span = kitbag_shared::otel::enabled().then(|| {
            let id = call.id_text();
            let version = conn.protocol_version();
            let request = kitbag_shared::otel::Request {
                method: "tools/call",
                id: id.as_deref(),
                tool: Some(&call.name),
                traceparent: call.traceparent.as_deref(),
                tracestate: call.tracestate.as_deref(),
                baggage: call.baggage.as_deref(),
                protocol_version: if call.modern {
                    Some(fastpath::MODERN_VERSION)
                } else {
                    version.as_deref()
                },
                ..kitbag_shared::otel::Request::default()
            };
            let via = kitbag_shared::otel::Via {
                transport: conn.transport,
                ..kitbag_shared::otel::Via::default()
            };
            kitbag_shared::otel::Span::start(&request, &via)
        });
        let trace = match &span {
            Some(span) => Some(span.propagate()),
            None => call.passthrough(),
        };
        // Left to rmcp: its transport opens the span there (this one is dropped unrecorded).
        let Some(mut pending) = self.start_fast(&call, trace.as_ref()) else {
            return false;
        };
        pending.span = span;
        inflight.insert(key.clone(), pending.link.clone(), pending.child_id.clone());
        let (out, inflight) = (out.clone(), inflight.clone());
        tokio::spawn(async move {
            // A call the client cancelled meanwhile is owed no answer.
            if let Some((line, _)) = pending.answer(|| inflight.remove(&key).is_some()).await {
                let _ = out.send(line);
            }
        });
        true
    }
}

impl FastPending {
    /// Wait for the child's answer (bounded by the server's timeout) and render the
    /// response, with the error code of an `isError` result. `claim` says whether the
    /// answer is still wanted; a timeout is answered regardless, and the child is told to
    /// stop.
    pub async fn answer(
        mut self,
        claim: impl FnOnce() -> bool,
    ) -> Option<(fastpath::Line, Option<String>)> {
        let (upstream_id, modern, server) = (&self.upstream_id, self.modern, &self.server);
        // None: a reload stopped waiting for this call (see `Calls::cut_off`).
        let outcome = tokio::select! {
            // An answer already in wins over a cut-off that comes at the same moment.
            biased;
            r = tokio::time::timeout(self.timeout, &mut self.rx) => Some(r),
            _ = self.guard.cut_off() => None,
        };
        let wanted = claim();
        let Some(outcome) = outcome else {
            self.link.cancel(&self.child_id, crate::hub::CUT_OFF_REASON);
            if !wanted {
                self.finish(None, true);
                return None;
            }
            let line = fastpath::error_line(
                upstream_id,
                "server_unavailable",
                &crate::failure::stopped_by_reload_message(server),
                modern,
            );
            let code = Some("server_unavailable".to_string());
            self.finish(code.clone(), false);
            return Some((line, code));
        };
        let (line, code) = match outcome {
            Ok(Ok(reply)) => {
                if !wanted {
                    self.finish(None, true);
                    return None;
                }
                let code = fastpath::result_error_code(&reply);
                let line = match &reply {
                    fastpath::Reply::Error(e) => fastpath::error_line(
                        upstream_id,
                        "server_unavailable",
                        &format!("server {server}: {}", e.get()),
                        modern,
                    ),
                    r => fastpath::response_line(upstream_id, r, modern),
                };
                (line, code)
            }
            Ok(Err(_)) => {
                if !wanted {
                    self.finish(None, true);
                    return None;
                }
                let msg = if self.guard.stopped_by_reload() {
                    crate::failure::stopped_by_reload_message(server)
                } else {
                    format!(
                        "server {server} exited during the call; it is being restarted — the call did not complete"
                    )
                };
                (
                    fastpath::error_line(upstream_id, "server_unavailable", &msg, modern),
                    Some("server_unavailable".to_string()),
                )
            }
            Err(_) => {
                self.link.cancel(&self.child_id, "timed out in the host");
                let msg = format!(
                    "server {server} did not answer within {} s",
                    self.timeout.as_secs()
                );
                (
                    fastpath::error_line(upstream_id, "timeout", &msg, modern),
                    Some("timeout".to_string()),
                )
            }
        };
        self.finish(code.clone(), false);
        Some((line, code))
    }

    /// The call is over: its audit line, its count and latency, its span (`cancelled`: the
    /// client gave up on it, so it counts nowhere but the span).
    fn finish(&mut self, code: Option<String>, cancelled: bool) {
        if let Some(span) = self.span.take() {
            span.end(match (&code, cancelled) {
                (_, true) => kitbag_shared::otel::Outcome::Cancelled,
                (Some(code), false) => kitbag_shared::otel::Outcome::ToolError(code),
                (None, false) => kitbag_shared::otel::Outcome::Ok,
            });
        }
        if cancelled {
            return;
        }
        kitbag_shared::http::metrics::calls().record(
            &self.tool,
            code.as_deref(),
            self.started.elapsed().as_secs_f64(),
        );
        self.audit_call(code);
    }

    /// The call's audit line (`--audit-log`), with its error code if it failed.
    fn audit_call(&mut self, code: Option<String>) {
        if let Some((a, params, agent, tool)) = self.audit.take() {
            a.event(
                "tool.call",
                json!({
                    "agent": agent,
                    "server": self.server,
                    "tool": tool,
                    "request_id": self.upstream_id.trim_matches('"'),
                    "duration_ms": self.started.elapsed().as_secs_f64() * 1000.0,
                    "ok": code.is_none(),
                    "error_code": code,
                    "params": kitbag_shared::audit::redact(&params),
                }),
            );
        }
    }
}
