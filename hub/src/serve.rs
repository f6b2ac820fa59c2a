//! The host as an MCP server: the flat list of every child's tools plus `host_status`.

use kitbag_shared::lock::LockExt;
use std::sync::Arc;
use std::time::Instant;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, GetPromptRequestParams,
    GetPromptResponse, Implementation, JsonObject, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ServerConfig, SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::json;

use crate::access::Access;
use crate::host_tools::{self, RELOAD_TOOL, STATUS_TOOL};
use crate::ledger::error_result;
use crate::pipeline::{CallMeta, OwnTools, Pipeline};
use crate::registry::Hub;
use kitbag_shared::tier::{self, Tier};

/// Re-reads the configuration (for `host_reload` and SIGHUP).
pub type ConfigLoader = Arc<dyn Fn() -> anyhow::Result<kitbag_config::Config> + Send + Sync>;

#[derive(Clone)]
pub struct HostServer {
    pub hub: Arc<Hub>,
    pub started: Instant,
    /// The agent policies in force (`--agent`, and every profile for HTTP callers whose
    /// token names their agent). Replaced on reload.
    pub access: Access,
    /// One JSON line per call (`--audit-log`).
    pub audit: Option<kitbag_shared::audit::AuditLog>,
    pub loader: Option<ConfigLoader>,
    /// The top-level settings in force (environment > agent.json > default).
    pub settings: Arc<std::sync::Mutex<Vec<kitbag_config::settings::Setting>>>,
    /// Every tool listed, or the three discovery tools (`--tools lazy`).
    pub tools_mode: crate::lazy::ToolsMode,
    /// The declared workflows (`workflow_*`; replaced on reload).
    pub workflows: Arc<crate::workflow_tools::Workflows>,
    /// Subagent jobs (`agent_job_*`), made at the first start.
    pub jobs: Arc<crate::job_tools::HostJobs>,
}

/// Build the host's own tools. Each is built once and cloned after: generating their schemas
/// is work, and the list is asked for on every `tools/list` and every refusal check. A host
/// calls this off its main thread while it starts, so its first `tools/list` finds them built.
pub fn prepare_own_tools() {
    host_tools::status_tool();
    host_tools::reload_tool();
    crate::delegate_tool::tool();
    crate::job_tools::tools();
    crate::workflow_tools::tools();
    crate::lazy::tools();
}

impl HostServer {
    /// What a tool call goes through, on either transport (pipeline.rs).
    pub fn pipeline(&self) -> Pipeline<'_> {
        Pipeline {
            hub: &self.hub,
            access: &self.access,
            audit: self.audit.as_ref(),
            own: self,
        }
    }

    /// Run the tool `name`, as any caller's call runs (pipeline.rs).
    pub async fn dispatch(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        meta: CallMeta,
    ) -> Result<CallToolResult, McpError> {
        self.pipeline().call(name, arguments, meta).await
    }

    /// Every server's state and each agent session's use.
    pub fn status(&self) -> host_tools::StatusResult {
        host_tools::status(&self.hub, self.settings.locked().clone())
    }

    /// What this caller's prompt and resource requests may see.
    pub(crate) fn catalog_scope(&self) -> crate::catalog::Scope<'_> {
        crate::catalog::Scope {
            hub: &self.hub,
            policy: self.access.policy(),
        }
    }

    /// The tier the tool offered as `name` needs (None: no such tool).
    pub fn tier_of(&self, name: &str) -> Option<Tier> {
        match name {
            STATUS_TOOL => return Some(tier::of_tool(&host_tools::status_tool())),
            RELOAD_TOOL => return Some(tier::of_tool(&host_tools::reload_tool())),
            crate::delegate_tool::DELEGATE_TOOL => {
                return Some(tier::of_tool(&crate::delegate_tool::tool()));
            }
            n if crate::job_tools::TOOLS.contains(&n) && self.jobs_listed() => {
                return crate::job_tools::tools()
                    .iter()
                    .find(|t| t.name == n)
                    .map(tier::of_tool);
            }
            n if self.workflows.owns(n) => {
                return crate::workflow_tools::tools()
                    .iter()
                    .find(|t| t.name == n)
                    .map(tier::of_tool);
            }
            _ => {}
        }
        crate::access::offered(&self.hub.flat(), name, tier::of_tool)
    }

    /// Re-read the config and apply it.
    pub async fn reload(
        &self,
    ) -> Result<crate::registry::ReloadReport, crate::failure::ReloadFailure> {
        use crate::failure::ReloadFailure;
        let Some(loader) = &self.loader else {
            return Err(ReloadFailure::NoConfig);
        };
        let cfg = loader().map_err(ReloadFailure::Unreadable)?;
        // The agent's profile is re-read too; an agent removed from the file is an error.
        let agent = self.access.configured_agent();
        let policy = kitbag_config::policy::for_agent(&cfg, agent.as_deref())
            .map_err(ReloadFailure::Agent)?;
        self.access
            .set_agents(kitbag_config::policy::Agents::new(&cfg));
        {
            let mut s = self.settings.locked();
            *s = cfg.settings.clone();
        }
        let before: Vec<String> = self.tools().iter().map(|t| t.name.to_string()).collect();
        self.access.set_configured(policy);
        self.workflows.set(&cfg);
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
                Ok(crate::own_answer::structured(text, &found))
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
                Ok(crate::own_answer::structured(text, &found))
            })())),
            _ => None,
        }
    }

    pub fn tools(&self) -> Vec<Tool> {
        let mut tools: Vec<Tool> = self
            .hub
            .flat()
            .tools()
            .iter()
            .filter(|t| self.access.visible(t))
            .cloned()
            .chain(self.own_listed())
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools
    }

    /// The host's own tools this caller sees.
    fn own_listed(&self) -> Vec<Tool> {
        let mut tools = Vec::new();
        let status = host_tools::status_tool();
        if self.access.permit_own(&status, true).is_ok() {
            tools.push(status);
        }
        let reload = host_tools::reload_tool();
        if self.loader.is_some() && self.access.visible(&reload) {
            tools.push(reload);
        }
        let delegate = crate::delegate_tool::tool();
        if self.access.visible(&delegate) {
            tools.push(delegate);
        }
        if self.jobs_listed() {
            tools.extend(
                crate::job_tools::tools()
                    .into_iter()
                    .filter(|t| self.access.visible(t)),
            );
        }
        if self.workflows.any() {
            tools.extend(
                crate::workflow_tools::tools()
                    .into_iter()
                    .filter(|t| self.access.visible(t)),
            );
        }
        tools
    }

    /// The `tools/list` result as JSON text — the same list as [`Self::listed_tools`], with
    /// each compiled-in catalog's tools spliced in as their text (nothing parsed or
    /// serialized for them). None when a policy or the caller's tiers decide what is seen,
    /// or in lazy mode: then the list is built from `Tool`s.
    pub fn listed_json(&self) -> Option<String> {
        if self.tools_mode != crate::lazy::ToolsMode::Full || !self.access.sees_all() {
            return None;
        }
        let flat = self.hub.flat();
        let own: Vec<(String, String)> = self
            .own_listed()
            .into_iter()
            .filter_map(|t| Some((t.name.to_string(), serde_json::to_string(&t).ok()?)))
            .collect();
        let mut texts = flat.tools_text();
        texts.extend(own.iter().map(|(n, t)| (n.as_str(), t.as_str().into())));
        texts.sort_by(|a, b| a.0.cmp(b.0));
        let size = texts.iter().map(|(_, t)| t.len() + 1).sum::<usize>();
        let mut out = String::with_capacity(size + 16);
        out.push_str("{\"tools\":[");
        for (i, (_, text)) in texts.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(text);
        }
        out.push_str("]}");
        Some(out)
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
        // Resource subscriptions are held at their servers: those start now.
        if context
            .accepted()
            .resource_subscriptions
            .as_ref()
            .is_some_and(|uris| !uris.is_empty())
        {
            self.hub.wake_catalogs().await;
        }
        crate::catalog::listen(&self.catalog_scope(), context).await;
        Ok(())
    }

    // Prompts and resources of the children: catalog.rs.

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        self.hub.wake_catalogs().await;
        Ok(ListPromptsResult::with_all_items(
            crate::catalog::list_prompts(&self.catalog_scope()),
        ))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        self.hub.wake_catalogs().await;
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
        self.hub.wake_catalogs().await;
        Ok(ListResourcesResult::with_all_items(
            crate::catalog::list_resources(&self.catalog_scope()).await,
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        self.hub.wake_catalogs().await;
        Ok(ListResourceTemplatesResult::with_all_items(
            crate::catalog::list_resource_templates(&self.catalog_scope()),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.hub.wake_catalogs().await;
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
        self.hub.wake_catalogs().await;
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
        Ok(crate::access::as_caller_sync(caller, || {
            ListToolsResult::with_all_items(self.listed_tools())
        }))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let caller = kitbag_shared::http::principal_of(&context.extensions).cloned();
        crate::access::as_caller(caller, self.call_tool_as_caller(request, context)).await
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
        let meta = CallMeta {
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

/// `host_status` and `host_reload`, answered by the host itself.
impl OwnTools for HostServer {
    fn owns(&self, name: &str) -> bool {
        name == STATUS_TOOL
            || (name == RELOAD_TOOL && self.loader.is_some())
            || name == crate::delegate_tool::DELEGATE_TOOL
            // The name first: `owns` runs for every call, the model lookup only for these.
            || (crate::job_tools::TOOLS.contains(&name) && self.jobs_listed())
            || self.workflows.owns(name)
    }

    fn call_own<'a>(
        &'a self,
        name: &'a str,
        arguments: Option<JsonObject>,
        meta: CallMeta,
    ) -> futures::future::BoxFuture<'a, CallToolResult> {
        Box::pin(async move {
            if self.workflows.owns(name) {
                return self.workflow_call(name, arguments);
            }
            if crate::job_tools::TOOLS.contains(&name) {
                if let Some(refused) = self.refusal_among(crate::job_tools::tools(), name) {
                    return refused;
                }
                return crate::job_tools::call(&self.jobs, name, arguments).await;
            }
            if name == crate::delegate_tool::DELEGATE_TOOL {
                if let Some(refused) = self.refusal_among(vec![crate::delegate_tool::tool()], name)
                {
                    return refused;
                }
                return crate::delegate_tool::call(self, arguments, meta).await;
            }
            // Neither takes a parameter: an unexpected one is a typed error naming it, as on
            // every server's own tools.
            if let Err(e) = kitbag_shared::server::decode_args::<host_tools::NoParams>(
                arguments.unwrap_or_default(),
            ) {
                return e.into_call_result();
            }
            if name == STATUS_TOOL {
                self.status_call()
            } else {
                self.reload_call().await
            }
        })
    }
}

impl HostServer {
    /// Whether the subagent job tools are offered: only when a model can be reached.
    fn jobs_listed(&self) -> bool {
        kitbag_agent::model_available(&self.settings.locked())
    }

    /// Why this caller may not call the host's own tool `name`, one of `tools` (`unknown_tool`,
    /// or the policy's and tiers' code); `None` when it may.
    fn refusal_among(&self, tools: Vec<Tool>, name: &str) -> Option<CallToolResult> {
        let Some(tool) = tools.into_iter().find(|t| t.name == name) else {
            return Some(error_result("unknown_tool", format!("no tool {name}")));
        };
        let refused = self.access.permit_own(&tool, false).err()?;
        Some(error_result(refused.0, refused.1))
    }

    fn workflow_call(&self, name: &str, arguments: Option<JsonObject>) -> CallToolResult {
        if let Some(refused) = self.refusal_among(crate::workflow_tools::tools(), name) {
            return refused;
        }
        let caller = format!(
            "agent:{}",
            self.access
                .configured_agent()
                .unwrap_or_else(|| "primary".to_string())
        );
        let host: Arc<dyn kitbag_agent::host::ToolHost> = Arc::new(self.clone());
        crate::workflow_tools::call(&self.workflows, host, &caller, name, arguments)
    }

    fn status_call(&self) -> CallToolResult {
        if let Err((code, message)) = self.access.permit_own(&host_tools::status_tool(), true) {
            return error_result(code, message);
        }
        let status = self.status();
        crate::own_answer::structured(host_tools::status_text(&status), &status)
    }

    async fn reload_call(&self) -> CallToolResult {
        if let Err((code, message)) = self.access.permit_own(&host_tools::reload_tool(), false) {
            return error_result(code, message);
        }
        match self.reload().await {
            Ok(report) => crate::own_answer::structured(host_tools::reload_text(&report), &report),
            // Every reload failure is the configuration's (unreadable, no file, an agent gone).
            Err(e) => error_result("config_invalid", e.to_string()),
        }
    }
}
