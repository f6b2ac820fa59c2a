//! Serving a set of tools over MCP.
//!
//! A server declares its tools with [`ToolRouter::tool`]: a definition (name, description,
//! annotations), a parameter type (decoded strictly, unknown fields rejected) and an async
//! function returning a [`Reply`] or a [`ToolError`]. [`McpServer`] implements rmcp's
//! `ServerHandler` for any router, so a server's `lib.rs` only wires tools.

use crate::lock::RwLockExt;
use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use futures::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock as Content,
    GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation, JsonObject,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, ServerCapabilities, ServerConfig,
    SubscribeRequestParams, SubscriptionFilter, Tool, ToolAnnotations, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, RoleServer, SubscriptionContext};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::audit::AuditLog;
use crate::error::{ErrorCode, ToolError, ToolResult};
use crate::flags::CommonArgs;
use crate::paths::PathPolicy;
use crate::runtime::shutdown_signal;

/// What a tool returns on success: the structured object and the text a model reads.
pub struct Reply<O> {
    pub data: O,
    pub text: String,
}

impl<O> Reply<O> {
    pub fn new(data: O, text: impl Into<String>) -> Self {
        Self {
            data,
            text: text.into(),
        }
    }
}

/// How a tool presents itself in `tools/list`.
#[derive(Debug, Clone)]
pub struct ToolDef {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
    pub open_world: bool,
    /// Runs programs (a shell command, a debuggee, an instance): tier `exec`.
    pub exec: bool,
    /// Extra `_meta` entries (e.g. `kitbag/principal_scope`).
    pub meta: Option<JsonObject>,
    /// Arguments whose values are never logged ([`crate::audit::PRIVATE_ARGS_META`]).
    pub private_args: &'static [&'static str],
}

impl ToolDef {
    /// A tool that only reads (readOnlyHint true).
    pub const fn read(name: &'static str, title: &'static str, description: &'static str) -> Self {
        Self {
            name,
            title,
            description,
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
            exec: false,
            meta: None,
            private_args: &[],
        }
    }

    /// A tool that changes things; set `destructive`/`idempotent` as true of it.
    pub const fn write(name: &'static str, title: &'static str, description: &'static str) -> Self {
        Self {
            name,
            title,
            description,
            read_only: false,
            destructive: false,
            idempotent: false,
            open_world: false,
            exec: false,
            meta: None,
            private_args: &[],
        }
    }

    /// Arguments whose values must never reach a log (audit, debug): listed in the tool's
    /// `_meta` so that a host relaying the call keeps them out of its log too.
    pub const fn private_args(mut self, fields: &'static [&'static str]) -> Self {
        self.private_args = fields;
        self
    }

    pub const fn destructive(mut self) -> Self {
        self.destructive = true;
        self
    }
    pub const fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }
    pub const fn open_world(mut self) -> Self {
        self.open_world = true;
        self
    }
    /// The tool runs programs: it needs the `exec` tier.
    pub const fn exec(mut self) -> Self {
        self.exec = true;
        self
    }

    /// What the tool can do to the world ([`crate::tier`]), declared in its `_meta`.
    pub const fn tier(&self) -> crate::tier::Tier {
        use crate::tier::Tier;
        if self.exec {
            Tier::Exec
        } else if self.open_world {
            Tier::External
        } else if self.read_only {
            Tier::Read
        } else {
            Tier::Write
        }
    }
    pub fn with_meta(mut self, meta: Value) -> Self {
        if let Value::Object(m) = meta {
            self.meta = Some(m);
        }
        self
    }
}

/// Tool names valid for every client and both the Anthropic and OpenAI APIs.
pub fn is_valid_tool_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some('a'..='z'))
        && name.len() <= 48
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Per-call context handed to a tool: cancellation, progress, the path policy.
#[derive(Clone)]
pub struct CallCtx {
    pub cancel: CancellationToken,
    pub request_id: String,
    policy: Arc<PathPolicy>,
    peer: Option<Peer<RoleServer>>,
    progress_token: Option<ProgressToken>,
    /// What the client can answer mid-call, and what a 2026-07-28 retry already answered.
    input: Option<Arc<crate::elicit::Input>>,
}

impl CallCtx {
    /// A context for calling tool logic directly (tests, benchmarks, the CLI).
    pub fn detached(policy: Arc<PathPolicy>) -> Self {
        Self {
            cancel: CancellationToken::new(),
            request_id: "local".into(),
            policy,
            peer: None,
            progress_token: None,
            input: None,
        }
    }

    /// Ask the operator through the client (MCP elicitation, form mode): `message` and a
    /// form of `schema`, whose answer comes back typed. `key` names the question across a
    /// 2026-07-28 retry (see `elicit.rs`).
    pub async fn elicit(
        &self,
        key: &str,
        message: &str,
        schema: &Value,
    ) -> ToolResult<rmcp::model::ElicitResult> {
        crate::elicit::ask(
            self.input.as_deref(),
            self.peer.as_ref(),
            key,
            message,
            schema,
        )
        .await
    }

    pub fn policy(&self) -> &Arc<PathPolicy> {
        &self.policy
    }

    /// The connected client, for server-initiated notifications.
    pub fn peer(&self) -> Option<&Peer<RoleServer>> {
        self.peer.as_ref()
    }

    pub fn wants_progress(&self) -> bool {
        self.progress_token.is_some() && self.peer.is_some()
    }

    /// Send `notifications/progress` if the request asked for it. Never fails the tool.
    pub async fn progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        if let (Some(peer), Some(token)) = (&self.peer, &self.progress_token) {
            let mut param = ProgressNotificationParam::new(token.clone(), progress);
            if let Some(t) = total {
                param = param.with_total(t);
            }
            if let Some(m) = message {
                param = param.with_message(m);
            }
            if let Err(e) = peer.notify_progress(param).await {
                tracing::debug!("progress notification failed: {e}");
            }
        }
    }

    /// A handle to send the client log messages after this call has answered (a background
    /// job's end); `None` without a connected client.
    pub fn client_log(&self) -> Option<ClientLog> {
        Some(ClientLog {
            peer: self.peer.clone()?,
            runtime: tokio::runtime::Handle::try_current().ok()?,
        })
    }

    /// `Err(cancelled)` once the client cancelled this request.
    pub fn check_cancelled(&self) -> ToolResult<()> {
        if self.cancel.is_cancelled() {
            Err(ToolError::new(
                ErrorCode::Cancelled,
                "the request was cancelled",
            ))
        } else {
            Ok(())
        }
    }
}

/// Sends `notifications/message` to a client, from any thread. The notification is
/// deprecated by SEP-2577, but it is what handshake-era clients show; best effort: a client
/// gone or not listening loses it.
#[derive(Clone)]
pub struct ClientLog {
    peer: Peer<RoleServer>,
    runtime: tokio::runtime::Handle,
}

impl ClientLog {
    pub fn new(peer: Peer<RoleServer>, runtime: tokio::runtime::Handle) -> ClientLog {
        ClientLog { peer, runtime }
    }

    pub fn info(&self, logger: &str, data: serde_json::Value) {
        #[allow(deprecated)]
        self.send(rmcp::model::LoggingLevel::Info, logger, data);
    }

    pub fn warning(&self, logger: &str, data: serde_json::Value) {
        #[allow(deprecated)]
        self.send(rmcp::model::LoggingLevel::Warning, logger, data);
    }

    #[allow(deprecated)]
    fn send(&self, level: rmcp::model::LoggingLevel, logger: &str, data: serde_json::Value) {
        let param =
            rmcp::model::LoggingMessageNotificationParam::new(level, data).with_logger(logger);
        let peer = self.peer.clone();
        self.runtime.spawn(async move {
            if let Err(e) = peer.notify_logging_message(param).await {
                tracing::debug!("log notification failed: {e}");
            }
        });
    }
}

type Handler<S> = Arc<
    dyn Fn(Arc<S>, JsonObject, CallCtx) -> BoxFuture<'static, ToolResult<CallToolResult>>
        + Send
        + Sync,
>;

struct Entry<S> {
    tool: Tool,
    handler: Handler<S>,
}

/// The tools of one server.
pub struct ToolRouter<S> {
    entries: Vec<Entry<S>>,
    index: HashMap<String, usize>,
}

impl<S: Send + Sync + 'static> Default for ToolRouter<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S: Send + Sync + 'static> ToolRouter<S> {
    pub fn new() -> Self {
        Self {
            entries: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// Register a tool. Panics at start-up (never at call time) on an invalid or duplicate
    /// name or a schema whose root is not an object: those are programming errors.
    pub fn tool<P, O, F, Fut>(mut self, def: ToolDef, f: F) -> Self
    where
        P: DeserializeOwned + JsonSchema + 'static,
        O: Serialize + JsonSchema + 'static,
        F: Fn(Arc<S>, P, CallCtx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ToolResult<Reply<O>>> + Send + 'static,
    {
        assert!(
            is_valid_tool_name(def.name),
            "invalid tool name {}",
            def.name
        );
        assert!(
            !self.index.contains_key(def.name),
            "duplicate tool {}",
            def.name
        );
        let input = match crate::schema::input_schema::<P>() {
            Ok(s) => s,
            Err(e) => panic!("tool {}: {e}", def.name),
        };
        let output = crate::schema::output_schema_for::<O>(def.name);
        assert_eq!(
            output.get("type"),
            Some(&json!("object")),
            "tool {}: outputSchema root must be an object",
            def.name
        );
        let annotations = ToolAnnotations::with_title(def.title)
            .read_only(def.read_only)
            .destructive(def.destructive)
            .idempotent(def.idempotent)
            .open_world(def.open_world);
        let mut tool = Tool::new(def.name, def.description, input)
            .with_raw_output_schema(Arc::new(output))
            .with_title(def.title)
            .with_annotations(annotations);
        let mut meta = def.meta.clone().unwrap_or_default();
        meta.insert(crate::tier::TIER_META.into(), json!(def.tier().as_str()));
        if !def.private_args.is_empty() {
            meta.insert(
                crate::audit::PRIVATE_ARGS_META.into(),
                json!(def.private_args),
            );
        }
        if !meta.is_empty() {
            tool = tool.with_meta(rmcp::model::MetaObject(meta));
        }
        let f = Arc::new(f);
        let handler: Handler<S> = Arc::new(move |state, args, ctx| {
            let f = f.clone();
            Box::pin(async move {
                let params: P = decode_args(args)?;
                let reply = f(state, params, ctx).await?;
                let structured = serde_json::to_value(&reply.data)
                    .map_err(|e| ToolError::internal(format!("result encoding failed: {e}")))?;
                let mut result = CallToolResult::success(vec![Content::text(reply.text)]);
                result.structured_content = Some(structured);
                Ok(result)
            })
        });
        self.index.insert(def.name.to_string(), self.entries.len());
        self.entries.push(Entry { tool, handler });
        self
    }

    /// Register a tool whose result is built by hand (any content blocks, no output schema):
    /// for a server whose answers are more than text plus a structured object (the
    /// conformance fixture's image, audio and embedded-resource results). Same name checks as
    /// [`ToolRouter::tool`]; the arguments arrive as the raw object.
    pub fn raw_tool<F, Fut>(mut self, tool: Tool, f: F) -> Self
    where
        F: Fn(Arc<S>, JsonObject, CallCtx) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ToolResult<CallToolResult>> + Send + 'static,
    {
        let name = tool.name.to_string();
        assert!(is_valid_tool_name(&name), "invalid tool name {name}");
        assert!(!self.index.contains_key(&name), "duplicate tool {name}");
        let f = Arc::new(f);
        let handler: Handler<S> = Arc::new(move |state, args, ctx| {
            let f = f.clone();
            Box::pin(async move { f(state, args, ctx).await })
        });
        self.index.insert(name, self.entries.len());
        self.entries.push(Entry { tool, handler });
        self
    }

    /// Every tool definition, sorted by name (deterministic `tools/list`).
    pub fn list(&self) -> Vec<Tool> {
        let mut tools: Vec<Tool> = self.entries.iter().map(|e| e.tool.clone()).collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools
    }

    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.index.get(name).map(|&i| &self.entries[i].tool)
    }

    /// Run a tool by name; `None` if there is no such tool.
    pub async fn call(
        &self,
        state: Arc<S>,
        name: &str,
        args: JsonObject,
        ctx: CallCtx,
    ) -> Option<ToolResult<CallToolResult>> {
        use futures::FutureExt;
        let i = *self.index.get(name)?;
        let handler = self.entries[i].handler.clone();
        let cancel = ctx.cancel.clone();
        // A bug in a tool must cost that call, not the answer: a panic becomes an `internal`
        // error result instead of a request that is never answered.
        let fut = std::panic::AssertUnwindSafe(handler(state, args, ctx)).catch_unwind();
        Some(tokio::select! {
            r = fut => r.unwrap_or_else(|panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown".into());
                tracing::error!(tool = name, "tool panicked: {what}");
                Err(ToolError::internal(format!("the tool failed unexpectedly ({what}); this is a bug in the server — the call did nothing more")))
            }),
            _ = cancel.cancelled() => Err(ToolError::new(ErrorCode::Cancelled, "the request was cancelled")),
        })
    }
}

/// Run blocking work (file system, SQLite, process waits) off the async runtime.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> ToolResult<T> + Send + 'static,
) -> ToolResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ToolError::internal(format!("worker failed: {e}")))?
}

/// Decode tool arguments strictly, naming the offending field on failure.
pub fn decode_args<P: DeserializeOwned>(args: JsonObject) -> ToolResult<P> {
    let value = Value::Object(args);
    serde_path_to_error::deserialize::<_, P>(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let field = if path == "." {
            field_from_message(&inner)
        } else {
            path
        };
        ToolError::new(ErrorCode::InvalidParams, format!("{field}: {inner}"))
            .with_detail(json!({ "field": field }))
    })
}

/// serde names a missing or unknown field only in its message; pull it out.
fn field_from_message(msg: &str) -> String {
    for prefix in ["missing field `", "unknown field `"] {
        if let Some(rest) = msg.strip_prefix(prefix)
            && let Some(end) = rest.find('`')
        {
            return rest[..end].to_string();
        }
    }
    "arguments".to_string()
}

/// Optional MCP surfaces beyond tools (resources, prompts, notifications).
pub trait Extras<S>: Send + Sync + 'static {
    fn capabilities(&self, _caps: &mut ServerCapabilities) {}
    fn on_connected(&self, _state: Arc<S>, _peer: Peer<RoleServer>) {}
    fn list_resources(
        &self,
        _state: Arc<S>,
    ) -> BoxFuture<'static, Result<ListResourcesResult, McpError>> {
        Box::pin(async { Ok(ListResourcesResult::default()) })
    }
    fn read_resource(
        &self,
        _state: Arc<S>,
        req: ReadResourceRequestParams,
    ) -> BoxFuture<'static, Result<ReadResourceResult, McpError>> {
        Box::pin(async move {
            Err(McpError::resource_not_found(
                format!("no resource {}", req.uri),
                None,
            ))
        })
    }
    fn list_resource_templates(
        &self,
        _state: Arc<S>,
    ) -> BoxFuture<'static, Result<ListResourceTemplatesResult, McpError>> {
        Box::pin(async { Ok(ListResourceTemplatesResult::default()) })
    }
    /// Handshake era `resources/subscribe`: `peer` is the client to notify about `uri`.
    /// Declare `resources.subscribe` in [`Extras::capabilities`] when implementing it.
    fn subscribe(
        &self,
        _state: Arc<S>,
        _uri: String,
        _peer: Peer<RoleServer>,
    ) -> Result<(), McpError> {
        Err(McpError::invalid_request(
            "this server offers no resource subscriptions",
            None,
        ))
    }
    /// Handshake era `resources/unsubscribe`.
    fn unsubscribe(&self, _state: Arc<S>, _uri: String) -> Result<(), McpError> {
        Err(McpError::invalid_request(
            "this server offers no resource subscriptions",
            None,
        ))
    }
    /// 2026-07-28 `subscriptions/listen`: the part of `requested` this server accepts
    /// (`None`: not offered).
    /// By default a listen stream is accepted with nothing to deliver (a server whose lists
    /// never change): the client's `listen` works instead of failing with -32601.
    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::new())
    }
    /// 2026-07-28 `subscriptions/listen`: run one subscription until it is cancelled; send
    /// through `context.sink()`.
    fn listen(
        &self,
        _state: Arc<S>,
        context: SubscriptionContext,
    ) -> BoxFuture<'static, Result<(), McpError>> {
        Box::pin(async move {
            context.cancelled().await;
            Ok(())
        })
    }
    fn list_prompts(
        &self,
        _state: Arc<S>,
    ) -> BoxFuture<'static, Result<ListPromptsResult, McpError>> {
        Box::pin(async { Ok(ListPromptsResult::default()) })
    }
    fn get_prompt(
        &self,
        _state: Arc<S>,
        req: GetPromptRequestParams,
    ) -> BoxFuture<'static, Result<GetPromptResult, McpError>> {
        Box::pin(async move {
            Err(McpError::invalid_params(
                format!("no prompt {}", req.name),
                None,
            ))
        })
    }
}

struct NoExtras;
impl<S> Extras<S> for NoExtras {}

/// Name, version and instructions reported in `serverInfo`.
#[derive(Debug, Clone)]
pub struct Identity {
    pub name: &'static str,
    pub version: &'static str,
    pub instructions: &'static str,
}

/// An MCP server over a tool router and its state.
pub struct McpServer<S> {
    identity: Identity,
    state: Arc<S>,
    router: Arc<ToolRouter<S>>,
    policy: Arc<RwLock<Arc<PathPolicy>>>,
    /// No `--root` was given: adopt the client's first root when it offers roots.
    root_from_client: bool,
    audit: Option<AuditLog>,
    extras: Arc<dyn Extras<S>>,
}

impl<S> Clone for McpServer<S> {
    fn clone(&self) -> Self {
        Self {
            identity: self.identity.clone(),
            state: self.state.clone(),
            router: self.router.clone(),
            policy: self.policy.clone(),
            root_from_client: self.root_from_client,
            audit: self.audit.clone(),
            extras: self.extras.clone(),
        }
    }
}

impl<S: Send + Sync + 'static> McpServer<S> {
    pub fn new(identity: Identity, state: S, router: ToolRouter<S>, policy: PathPolicy) -> Self {
        Self {
            identity,
            state: Arc::new(state),
            router: Arc::new(router),
            policy: Arc::new(RwLock::new(Arc::new(policy))),
            root_from_client: false,
            audit: None,
            extras: Arc::new(NoExtras),
        }
    }

    /// Apply the common flags: audit log, and root adoption when `--root` is absent.
    pub fn with_common_args(mut self, args: &CommonArgs) -> anyhow::Result<Self> {
        self.root_from_client = args.root.is_none();
        if let Some(p) = &args.audit_log {
            self.audit = Some(AuditLog::open(p)?);
        }
        Ok(self)
    }

    pub fn with_audit(mut self, audit: Option<AuditLog>) -> Self {
        self.audit = audit;
        self
    }

    pub fn with_extras(mut self, extras: impl Extras<S>) -> Self {
        self.extras = Arc::new(extras);
        self
    }

    pub fn state(&self) -> &Arc<S> {
        &self.state
    }

    pub fn router(&self) -> &ToolRouter<S> {
        &self.router
    }

    pub fn policy(&self) -> Arc<PathPolicy> {
        self.policy.read_locked().clone()
    }

    /// Run a tool with audit events, as a `tools/call` would.
    pub async fn dispatch(&self, name: &str, args: JsonObject, ctx: CallCtx) -> CallToolResult {
        let started = Instant::now();
        let args_value = Value::Object(args.clone());
        if let Some(a) = &self.audit {
            let private = self
                .router
                .get(name)
                .map(|t| crate::audit::private_args(t.meta.as_ref().map(|m| &m.0)))
                .unwrap_or_default();
            a.called(name, &ctx.request_id, &args_value, &private);
        }
        let request_id = ctx.request_id.clone();
        let outcome = match self.router.call(self.state.clone(), name, args, ctx).await {
            Some(r) => r,
            None => Err(ToolError::new(
                ErrorCode::UnknownTool,
                format!("no tool named {name}"),
            )),
        };
        let seconds = started.elapsed().as_secs_f64();
        let ms = seconds * 1000.0;
        let calls = crate::metrics::calls();
        match outcome {
            Ok(result) => {
                let code = (result.is_error == Some(true)).then(|| {
                    result
                        .structured_content
                        .as_ref()
                        .and_then(|s| s.get("error")?.get("code")?.as_str())
                        .unwrap_or("tool_error")
                });
                calls.record(name, code, seconds);
                if let Some(a) = &self.audit {
                    a.completed(name, &request_id, ms, None);
                }
                result
            }
            Err(err) => {
                calls.record(name, Some(&err.code.to_string()), seconds);
                if let Some(a) = &self.audit {
                    let code = err.code.to_string();
                    if matches!(
                        err.code,
                        ErrorCode::CapabilityDenied | ErrorCode::PrincipalScopeViolation
                    ) {
                        a.denied(name, &request_id, &code, &err.detail);
                    }
                    a.completed(name, &request_id, ms, Some(&code));
                }
                err.into_call_result()
            }
        }
    }

    fn ctx_for(&self, context: &RequestContext<RoleServer>) -> CallCtx {
        CallCtx {
            cancel: context.ct.clone(),
            request_id: request_id_string(&context.id),
            policy: self.policy(),
            peer: Some(context.peer.clone()),
            progress_token: context.meta.get_progress_token(),
            input: None,
        }
    }

    /// What the call's client can answer mid-call: in 2026-07-28 by `input_required` and a
    /// retry (its capabilities in the request's `_meta`), else by a request on the connection.
    fn input_for(
        context: &RequestContext<RoleServer>,
        responses: Option<rmcp::model::InputResponses>,
        state: Option<&str>,
    ) -> crate::elicit::Input {
        let modern = context
            .protocol_version()
            .or_else(|| context.meta.protocol_version())
            .is_some_and(|v| v.as_str() >= rmcp::model::ProtocolVersion::V_2026_07_28.as_str());
        let capable = if modern {
            context
                .meta
                .client_capabilities()
                .is_some_and(|c| c.elicitation.is_some())
        } else {
            context
                .peer
                .peer_info()
                .is_some_and(|i| i.capabilities.elicitation.is_some())
        };
        let mut input = crate::elicit::Input::new(modern, capable, responses.unwrap_or_default());
        input.add_earlier(state);
        input
    }

    #[allow(deprecated)] // roots are deprecated by SEP-2577 but still offered by most clients
    async fn adopt_client_root(&self, peer: &Peer<RoleServer>) {
        let supports_roots = peer
            .peer_info()
            .is_some_and(|info| info.capabilities.roots.is_some());
        if !self.root_from_client || !supports_roots {
            return;
        }
        match peer.list_roots().await {
            Ok(roots) => {
                let Some(first) = roots.roots.first() else {
                    return;
                };
                let Some(path) = first.uri.strip_prefix("file://") else {
                    return;
                };
                let current = self.policy();
                match current.with_root(&PathBuf::from(path)) {
                    Ok(p) => {
                        tracing::info!("adopted client root {path}");
                        *self.policy.write_locked() = Arc::new(p);
                    }
                    Err(e) => tracing::warn!("client root {path} unusable: {e}"),
                }
            }
            Err(e) => tracing::debug!("roots/list failed: {e}"),
        }
    }
}

fn request_id_string(id: &rmcp::model::RequestId) -> String {
    match serde_json::to_value(id) {
        Ok(Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

impl<S: Send + Sync + 'static> McpServer<S> {
    /// -32601 for a method of a family this server does not declare: a server without
    /// prompts must not answer `prompts/list` with an empty list (the conformance suite's
    /// `sep-2575-server-declares-prompts-in-discover` takes an answer as handling prompts).
    fn offers(
        &self,
        method: &str,
        declared: impl Fn(&ServerCapabilities) -> bool,
    ) -> Result<(), McpError> {
        if declared(&self.get_info().capabilities) {
            Ok(())
        } else {
            Err(McpError::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                format!("{method}: this server offers none"),
                None,
            ))
        }
    }
}

impl<S: Send + Sync + 'static> ServerHandler for McpServer<S> {
    fn get_info(&self) -> ServerConfig {
        let mut caps = ServerCapabilities::builder().enable_tools().build();
        self.extras.capabilities(&mut caps);
        ServerConfig::new(caps)
            .with_server_info(Implementation::new(
                self.identity.name,
                self.identity.version,
            ))
            .with_instructions(self.identity.instructions)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut tools = self.router.list();
        // Over HTTP, a token lists only the tools its tiers grant.
        if let Some(caller) = crate::caller::principal_of(&context.extensions) {
            tools.retain(|t| caller.allows(crate::tier::of_tool(t)));
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        let resolved = crate::aliases::resolve(name, None, |n| self.router.get(n).is_some());
        self.router
            .get(resolved.as_ref().map_or(name, |a| a.name.as_str()))
            .cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let mut arguments = request.arguments;
        // A seed's spelling of a tool name (`file.read`, `kaged.issue.list`, `read_file`).
        let name: Cow<'static, str> =
            match crate::aliases::resolve_call(&request.name, &mut arguments, |n| {
                self.router.get(n).is_some()
            }) {
                Some(resolved) => resolved.into(),
                None => request.name.clone(),
            };
        if self.router.get(&name).is_none() {
            return Err(McpError::invalid_params(
                format!("unknown tool `{name}`; call tools/list for the available tools"),
                None,
            ));
        }
        if let Some(caller) = crate::caller::principal_of(&context.extensions)
            && let Some(tool) = self.router.get(&name)
            && let tier = crate::tier::of_tool(tool)
            && !caller.allows(tier)
        {
            return Ok(ToolError::new(
                ErrorCode::CapabilityDenied,
                format!("{name} needs the `{tier}` tier, which the caller's token does not grant"),
            )
            .into_call_result()
            .into());
        }
        let input = Arc::new(Self::input_for(
            &context,
            request.input_responses,
            request.request_state.as_deref(),
        ));
        let mut ctx = self.ctx_for(&context);
        ctx.input = Some(input.clone());
        let args = arguments.unwrap_or_default();
        let result = self.dispatch(&name, args, ctx).await;
        // A 2026-07-28 call that asked for input answers with the question, not an error.
        if let Some(requests) = input.input_requests() {
            let asked = rmcp::model::InputRequiredResult::new(Some(requests), input.state());
            return Ok(CallToolResponse::InputRequired(asked));
        }
        Ok(result.into())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.adopt_client_root(&context.peer).await;
        self.extras
            .on_connected(self.state.clone(), context.peer.clone());
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.offers("resources/list", |c| c.resources.is_some())?;
        self.extras.list_resources(self.state.clone()).await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.offers("resources/read", |c| c.resources.is_some())?;
        self.extras
            .read_resource(self.state.clone(), request)
            .await
            .map(ReadResourceResponse::Complete)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        self.offers("resources/templates/list", |c| c.resources.is_some())?;
        self.extras
            .list_resource_templates(self.state.clone())
            .await
    }

    #[allow(deprecated)] // legacy-only in 2026-07-28, still what handshake-era clients send
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.extras
            .subscribe(self.state.clone(), request.uri, context.peer.clone())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.extras.unsubscribe(self.state.clone(), request.uri)
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        self.extras.accepted_subscription_filter(requested)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        self.extras.listen(self.state.clone(), context).await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        self.offers("prompts/list", |c| c.prompts.is_some())?;
        self.extras.list_prompts(self.state.clone()).await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        self.offers("prompts/get", |c| c.prompts.is_some())?;
        self.extras
            .get_prompt(self.state.clone(), request)
            .await
            .map(GetPromptResponse::Complete)
    }
}

/// Serve as the flags ask: MCP Streamable HTTP with `--http`/`--unix`, else stdio.
#[cfg(feature = "serving")]
pub async fn serve<S: Send + Sync + 'static>(
    mut server: McpServer<S>,
    args: &CommonArgs,
) -> anyhow::Result<()> {
    let options = args.serving.options()?;
    crate::otel::init(args.serving.otlp_endpoint.as_deref(), server.identity.name)?;
    let served = match options {
        Some(options) => {
            // Many clients share one HTTP server: none of them chooses its root.
            server.root_from_client = false;
            crate::http::serve(server, options, None).await
        }
        None => serve_stdio(server).await,
    };
    // The last spans go out before the process does.
    crate::otel::shutdown(OTEL_FLUSH_LIMIT).await;
    served
}

/// Serve over stdio (built without HTTP serving).
#[cfg(not(feature = "serving"))]
pub async fn serve<S: Send + Sync + 'static>(
    server: McpServer<S>,
    _args: &CommonArgs,
) -> anyhow::Result<()> {
    serve_stdio(server).await
}

/// How long a server's last spans may take to reach the collector at exit.
pub const OTEL_FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Serve over stdin/stdout until the client closes stdin (or SIGTERM/SIGINT arrives).
pub async fn serve_stdio<S: Send + Sync + 'static>(server: McpServer<S>) -> anyhow::Result<()> {
    widen_stdout_pipe();
    // Heard from now on, the handshake included.
    let mut stop = Box::pin(shutdown_signal());
    let serving = server
        // Non-blocking pipes when stdin/stdout are FIFOs (how clients launch servers): no
        // blocking-pool hand-off per message; a socket or terminal read through the reactor.
        .serve({
            let (stdin, stdout) = crate::stdin::stdio();
            crate::transport::LineTransport::new(stdin, stdout).traced(crate::otel::Conn::pipe())
        });
    let running = tokio::select! {
        running = serving => running,
        // Told to stop before the handshake ended: nothing is running yet.
        () = &mut stop => return Ok(()),
    };
    let running = match running {
        Ok(r) => r,
        Err(e) => return handshake_failed(e),
    };
    let cancel = running.cancellation_token();
    tokio::spawn(async move {
        stop.await;
        cancel.cancel();
    });
    let _ = running.waiting().await;
    Ok(())
}

/// A handshake that did not happen. A client that closes stdin before saying anything (a
/// probe, a proxy starting a backend it never uses) is not an error: nothing to answer, a
/// quiet exit. Anything else is.
pub fn handshake_failed(e: rmcp::service::ServerInitializeError) -> anyhow::Result<()> {
    match e {
        rmcp::service::ServerInitializeError::ConnectionClosed(_) => {
            tracing::debug!("stdin closed before initialize: nothing to serve");
            Ok(())
        }
        e => Err(anyhow::anyhow!("MCP handshake failed: {e}")),
    }
}

/// Lets a large answer (a 100 KB file read) go out in one write: with the default 64 KB
/// pipe it took two write/wake-up cycles between server and client. Best effort: stdout may
/// not be a pipe, or the user's pipe budget may be spent.
pub fn widen_stdout_pipe() {
    let _ = nix::fcntl::fcntl(
        std::io::stdout(),
        nix::fcntl::FcntlArg::F_SETPIPE_SZ(1 << 20),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct P {
        name: String,
        #[serde(default)]
        count: Option<u32>,
    }

    #[derive(Serialize, JsonSchema)]
    struct O {
        echoed: String,
    }

    fn router() -> ToolRouter<()> {
        ToolRouter::new()
            .tool(
                ToolDef::read("echo_name", "Echo", "Echo the name."),
                |_s: Arc<()>, p: P, _ctx: CallCtx| async move {
                    Ok(Reply::new(
                        O {
                            echoed: p.name.clone(),
                        },
                        format!("{} x{}", p.name, p.count.unwrap_or(1)),
                    ))
                },
            )
            .tool(
                ToolDef::read("slow_wait", "Wait", "Wait until cancelled."),
                |_s: Arc<()>, _p: P, _ctx: CallCtx| async move {
                    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
                    Ok(Reply::new(
                        O {
                            echoed: String::new(),
                        },
                        "",
                    ))
                },
            )
    }

    fn ctx() -> CallCtx {
        let dir = std::env::temp_dir();
        CallCtx::detached(Arc::new(PathPolicy::new(&dir, &[], true).expect("policy")))
    }

    fn args(v: Value) -> JsonObject {
        match v {
            Value::Object(m) => m,
            _ => JsonObject::new(),
        }
    }

    #[tokio::test]
    async fn decodes_strictly_and_names_fields() {
        let r = router();
        let ok = r
            .call(
                Arc::new(()),
                "echo_name",
                args(json!({"name": "a", "count": 2})),
                ctx(),
            )
            .await;
        let ok = ok.expect("tool exists").expect("ok");
        assert_eq!(ok.structured_content, Some(json!({"echoed": "a"})));
        for (bad, field) in [
            (json!({"name": "a", "extra": 1}), "extra"),
            (json!({}), "name"),
            (json!({"name": 5}), "name"),
            (json!({"name": "a", "count": -1}), "count"),
        ] {
            let e = r
                .call(Arc::new(()), "echo_name", args(bad.clone()), ctx())
                .await
                .expect("exists");
            let e = e.expect_err("must fail");
            assert_eq!(e.code, ErrorCode::InvalidParams, "{bad}");
            assert_eq!(e.detail["field"], field, "{bad}: {}", e.message);
        }
        assert!(
            r.call(Arc::new(()), "nope", JsonObject::new(), ctx())
                .await
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_panicking_tool_answers_internal() {
        let r = ToolRouter::<()>::new().tool(
            ToolDef::read("boom_now", "Boom", "Panics."),
            |_s: Arc<()>, _p: P, _ctx: CallCtx| async move {
                if true {
                    panic!("index out of range");
                }
                Ok(Reply::new(
                    O {
                        echoed: String::new(),
                    },
                    "",
                ))
            },
        );
        let out = r
            .call(Arc::new(()), "boom_now", args(json!({"name": "x"})), ctx())
            .await
            .expect("tool exists");
        let e = out.expect_err("a panic is an error result");
        assert_eq!(e.code, ErrorCode::Internal);
        assert!(e.message.contains("index out of range"), "{}", e.message);
    }

    #[tokio::test]
    async fn cancellation_stops_a_tool() {
        let r = router();
        let c = ctx();
        let cancel = c.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            cancel.cancel();
        });
        let started = std::time::Instant::now();
        let e = r
            .call(Arc::new(()), "slow_wait", args(json!({"name": "x"})), c)
            .await
            .expect("exists");
        assert_eq!(e.expect_err("cancelled").code, ErrorCode::Cancelled);
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }

    #[test]
    fn tool_list_is_sorted_and_names_valid() {
        let names: Vec<String> = router().list().iter().map(|t| t.name.to_string()).collect();
        assert_eq!(names, ["echo_name", "slow_wait"]);
        assert!(is_valid_tool_name("file_read"));
        for bad in ["File", "file.read", "1x", "", &"a".repeat(49), "a-b"] {
            assert!(!is_valid_tool_name(bad), "{bad}");
        }
    }
}
