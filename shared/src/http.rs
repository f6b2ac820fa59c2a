//! MCP Streamable HTTP: every server (and the host) serves `/mcp` with `--http ADDR` or
//! `--unix PATH` instead of stdio.
//!
//! rmcp's `StreamableHttpService` speaks the protocol (both eras: handshake-era sessions when
//! `--http-sessions`, else stateless; 2026-07-28 always stateless, with its header checks).
//! In front of it, this module owns what is ours to decide: which paths exist, the
//! `Host`/`Origin` guard ([`guard`]), who is calling ([`auth`]: the static bearer token or an
//! OAuth JWT, [`oauth`], [`jwt`]) and the tiers their token grants, the body cap (413), the
//! listener's limits ([`limits`]: connections, bytes in flight, body and idle timeouts),
//! whose each session is ([`sessions`], [`seal`]), refusing a non-loopback bind without
//! authentication, and an [`Intercept`] hook through which the host answers plain tool calls
//! at the byte level, as it does on stdio.

mod args;
pub mod auth;
pub mod caller;
pub mod guard;
pub mod jwt;
pub mod limits;
mod listen;
pub mod oauth;
pub mod seal;
pub mod sessions;
pub mod tls;
pub mod token;
mod trace;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{
    SessionManager, StreamableHttpServerConfig, StreamableHttpService,
};
use tokio_util::sync::CancellationToken;

pub use crate::caller::{Principal, principal_of};
pub use args::{HttpArgs, HttpOptions, Listen, Tls};
pub use auth::Auth;
use guard::{Guard, Refusal};
use limits::{BodyError, Budget, Held};
use listen::accept_loop;
use sessions::Sessions;

use crate::tier::Tier;

pub type HttpResponse = Response<BoxBody<Bytes, Infallible>>;

/// The one path MCP is served at (`/healthz` answers `ok` for probes, `/metrics` counts).
pub const MCP_PATH: &str = "/mcp";
pub const METRICS_PATH: &str = "/metrics";
const SESSION_HEADER: &str = "mcp-session-id";

/// An intercepted call's answer: the JSON-RPC response body, and the error code of an
/// `isError` result (for its span's `error.type`).
#[derive(Debug, Default)]
pub struct Answer {
    pub body: Vec<u8>,
    pub error: Option<String>,
    /// The intercept did not read how the call ended (a JSON-RPC error it wrote, an answer
    /// relayed as it came): the span reads it from `body`.
    pub unread: bool,
}

impl Answer {
    /// An answer whose outcome the span reads from the body.
    pub fn unread(body: Vec<u8>) -> Self {
        Answer {
            body,
            error: None,
            unread: true,
        }
    }
}

/// A POST answered before rmcp sees it (the host's byte-level calls).
pub trait Intercept: Send + Sync + 'static {
    /// `trace` is the context of the request's span (when tracing): what the call should
    /// hand on to whoever answers it.
    fn intercept(
        &self,
        headers: &HeaderMap,
        body: &Bytes,
        principal: Option<&Principal>,
        trace: Option<&crate::otel::Propagate>,
    ) -> Option<BoxFuture<'static, Answer>>;

    /// The tier `tool` needs (None: no such tool), for the scope check in front of every
    /// call: the host's tools are not the handler's to look up by name.
    fn tier_of(&self, tool: &str) -> Option<Tier>;

    /// More series for `/metrics` (the host's children).
    fn render_metrics(&self, _out: &mut String) {}

    /// Ready what a call of `tool` needs before [`Intercept::intercept`] sees it (the host:
    /// start the tool's server if it waits for its first call).
    fn prepare(&self, _tool: &str) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

/// The tier a tool needs (None: no such tool; MCP answers that).
type TierOf = Arc<dyn Fn(&str) -> Option<Tier> + Send + Sync>;

type McpService =
    Arc<dyn Fn(Request<Full<Bytes>>) -> BoxFuture<'static, HttpResponse> + Send + Sync>;

/// Serve `handler` over HTTP until SIGTERM/SIGINT.
pub async fn serve<H>(
    handler: H,
    options: HttpOptions,
    intercept: Option<Arc<dyn Intercept>>,
) -> anyhow::Result<()>
where
    H: rmcp::ServerHandler + Clone + Send + Sync + 'static,
{
    let cancel = CancellationToken::new();
    // Host/Origin are checked in front (one place, also for intercepted calls).
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(options.sessions.is_some())
        .with_json_response(true)
        .with_cancellation_token(cancel.clone())
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_max_request_body_bytes(options.max_request_bytes);
    let sessions = options.sessions.clone().map(Sessions::new);
    let mcp = match &sessions {
        Some(sessions) => mcp_service(handler.clone(), sessions.manager(), config),
        None => mcp_service(
            handler.clone(),
            Arc::new(NeverSessionManager::default()),
            config,
        ),
    };
    if let Some(rs) = &options.auth.oauth {
        rs.warm().await;
    }
    let tier_of: TierOf = match &intercept {
        Some(intercept) => {
            let intercept = intercept.clone();
            Arc::new(move |name| intercept.tier_of(name))
        }
        None => {
            let handler = handler.clone();
            Arc::new(move |name| handler.get_tool(name).map(|t| crate::tier::of_tool(&t)))
        }
    };
    let front = Arc::new(Front {
        mcp,
        metrics: Arc::default(),
        guard: options.guard.clone(),
        auth: options.auth.clone(),
        tier_of,
        max_request_bytes: options.max_request_bytes,
        limits: options.limits.clone(),
        budget: Budget::new(options.limits.max_inflight_bytes),
        intercept,
        sealed: options.sealed.clone(),
        sessions,
        draining: std::sync::atomic::AtomicBool::new(false),
    });
    accept_loop(front, &options, cancel).await
}

fn mcp_service<H, M>(handler: H, sessions: Arc<M>, config: StreamableHttpServerConfig) -> McpService
where
    H: rmcp::ServerHandler + Clone + Send + Sync + 'static,
    M: SessionManager,
{
    let service = StreamableHttpService::new(move || Ok(handler.clone()), sessions, config);
    Arc::new(move |request| {
        let service = service.clone();
        Box::pin(async move { service.handle(request).await })
    })
}

/// Where a connection comes from (`network.transport`, `client.address`).
#[derive(Clone, Copy)]
struct Peer {
    transport: &'static str,
    addr: Option<SocketAddr>,
}

struct Front {
    mcp: McpService,
    metrics: Arc<crate::metrics::Metrics>,
    guard: Guard,
    auth: Auth,
    tier_of: TierOf,
    max_request_bytes: usize,
    limits: limits::Limits,
    /// Request-body bytes held now, across all requests.
    budget: Budget,
    intercept: Option<Arc<dyn Intercept>>,
    sealed: Option<Arc<seal::SessionKeys>>,
    /// `--http-sessions`: whose each session is, and the caps.
    sessions: Option<Sessions>,
    /// SIGTERM came: `/healthz` says 503 while requests are still served.
    draining: std::sync::atomic::AtomicBool,
}

/// A body a refusal left unread is read to its end (and dropped) when it is at most this
/// long and arrives within [`DRAIN_DEADLINE`]; otherwise the connection is closed.
const DRAIN_MAX_BYTES: usize = 64 * 1024;
const DRAIN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(1);

impl Front {
    /// One request, counted by path and status while in flight.
    async fn handle(&self, request: Request<Incoming>, peer: Peer) -> HttpResponse {
        let _in_flight = self.metrics.begin();
        let path = match request.uri().path() {
            MCP_PATH => MCP_PATH,
            "/healthz" => "/healthz",
            METRICS_PATH => METRICS_PATH,
            p if p.starts_with("/.well-known/") => "/.well-known",
            _ => "other",
        };
        let (parts, body) = request.into_parts();
        let mut unread = Some(body);
        let mut response = self.answer(parts, &mut unread, peer).await;
        self.metrics.request(path, response.status().as_u16());
        // A refusal made before the body was read leaves it on the connection: hyper drains
        // what has arrived already, and closes the connection when more is still on its way
        // — which a client reusing it (httpx sends the head and the body apart) meets as a
        // disconnect on its next request. So a small body is read to its end here, and a
        // connection whose body is not (too large, too slow) is closed and the client told
        // (RFC 9112 §9.6).
        let clean = match unread {
            Some(body) => limits::drain_body(body, DRAIN_MAX_BYTES, DRAIN_DEADLINE).await,
            None => true,
        };
        if !clean {
            response.headers_mut().insert(
                http::header::CONNECTION,
                http::HeaderValue::from_static("close"),
            );
        }
        response
    }

    /// The answer to one request; its body is taken out of `unread` when it is read (a body
    /// left there is drained by [`Front::handle`]).
    async fn answer(
        &self,
        mut parts: http::request::Parts,
        unread: &mut Option<Incoming>,
        peer: Peer,
    ) -> HttpResponse {
        if let Err(refusal) = guard::check_framing(&parts.uri, &parts.headers) {
            return self.refuse(refusal);
        }
        let path = parts.uri.path().to_string();
        let path = path.as_str();
        let oauth = self.auth.oauth.as_ref();
        match path {
            "/healthz" if parts.method == Method::GET => {
                if self.draining.load(std::sync::atomic::Ordering::Relaxed) {
                    return text(StatusCode::SERVICE_UNAVAILABLE, "draining\n");
                }
                return text(StatusCode::OK, "ok\n");
            }
            METRICS_PATH if parts.method == Method::GET => {
                return self.metrics_page(&parts.headers).await;
            }
            MCP_PATH => {}
            _ if oauth.is_some_and(|rs| path == rs.metadata_path || path == oauth::WELL_KNOWN) => {}
            _ => {
                return text(StatusCode::NOT_FOUND, "Not Found: MCP is served at /mcp\n");
            }
        }
        if let Err(refusal) = self.guard.check(&parts.headers) {
            return self.refuse(refusal);
        }
        if path != MCP_PATH
            && let Some(rs) = oauth
        {
            // The protected-resource metadata: public, so clients learn where to log in.
            let mut response = text(StatusCode::OK, rs.metadata().to_string());
            response.headers_mut().insert(
                CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            return response;
        }
        let principal = match self.auth.principal(&parts.headers).await {
            Ok(p) => p,
            Err(refusal) => return self.refuse(refusal),
        };
        // The credential stops here: nothing handed on (children, logs) can see it.
        parts.headers.remove(http::header::AUTHORIZATION);
        let admitted = match (&self.sealed, &self.sessions) {
            (Some(keys), _) => seal::admit(keys, &mut parts, principal.as_ref()),
            (None, Some(sessions)) => sessions.admit(&parts.headers, principal.as_ref()),
            (None, None) => Ok(()),
        };
        if let Err(refusal) = admitted {
            self.metrics.refusal(refusal.reason());
            return sessions::refusal_response(&refusal, None);
        }
        // The body's bytes count against the listener's budget until the answer is made.
        let mut held = self.budget.hold();
        let body = match unread.take() {
            Some(body) if parts.method == Method::POST => {
                match self.read_body(&parts.headers, body, &mut held).await {
                    Ok(bytes) => bytes,
                    // Cut off while it was read: the rest is not read on this connection.
                    Err(mut response) => {
                        response.headers_mut().insert(
                            http::header::CONNECTION,
                            http::HeaderValue::from_static("close"),
                        );
                        return response;
                    }
                }
            }
            // A GET or DELETE: its body (there should be none) is drained by `handle`.
            other => {
                *unread = other;
                Bytes::new()
            }
        };
        // The request's span (when tracing): opened here, ended with the answer.
        let span = (crate::otel::enabled() && parts.method == Method::POST)
            .then(|| trace::start(&parts.headers, &body, peer.transport, peer.addr))
            .flatten();
        let hand_on = span.as_ref().map(|(s, _)| s.propagate());
        // A client that hangs up drops this future: its span ends as cancelled.
        let mut guard = trace::EndOnDrop(span);
        let (response, known) = self.mcp_answer(parts, body, principal, hand_on).await;
        let Some((span, id)) = guard.0.take() else {
            return response;
        };
        let status = response.status();
        match known {
            _ if !status.is_success() => span.end(crate::otel::Outcome::Http(status.as_u16())),
            // The byte path said how the call ended.
            Some(None) => span.end(crate::otel::Outcome::Ok),
            Some(Some(code)) => span.end(crate::otel::Outcome::ToolError(&code)),
            // rmcp's answer: read as it goes out.
            None => {
                let sse = response
                    .headers()
                    .get(CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| essence(v).eq_ignore_ascii_case("text/event-stream"));
                let (parts, body) = response.into_parts();
                return Response::from_parts(parts, trace::Traced::wrap(body, span, id, sse));
            }
        }
        response
    }

    /// The answer to a request to `/mcp` that passed the guard and authentication.
    async fn mcp_answer(
        &self,
        mut parts: http::request::Parts,
        body: Bytes,
        principal: Option<Principal>,
        trace: Option<crate::otel::Propagate>,
    ) -> (HttpResponse, Option<Option<String>>) {
        let oauth = self.auth.oauth.as_ref();
        let tool = called_tool(&body);
        if let Some(p) = &principal
            && p.tiers.is_some()
            && let Some(name) = &tool
            && let Some(tier) = (self.tier_of)(name)
            && !p.allows(tier)
        {
            let scope = oauth.map_or_else(|| tier.to_string(), |rs| rs.config.scope_of(tier));
            let refusal = Refusal::InsufficientScope {
                description: format!("{name} needs the `{tier}` tier: scope {scope}"),
                scope,
            };
            return (self.refuse(refusal), None);
        }
        if parts.method == Method::POST
            && let Some(intercept) = &self.intercept
            && let Some(name) = &tool
        {
            intercept.prepare(name).await;
        }
        if parts.method == Method::POST
            && let Some(intercept) = &self.intercept
            && plain_post(&parts.headers)
            && let Some(answer) =
                intercept.intercept(&parts.headers, &body, principal.as_ref(), trace.as_ref())
        {
            let answer = answer.await;
            let response = Response::builder()
                .status(StatusCode::OK)
                .header(CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(answer.body)).boxed())
                .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "response"));
            return (response, (!answer.unread).then_some(answer.error));
        }
        // A handshake-era client starting a sealed session.
        let initialize = self
            .sealed
            .as_ref()
            .filter(|_| parts.method == Method::POST)
            .and_then(|keys| Some((keys, seal::initialize_capabilities(&body)?)));
        if let Some(p) = &principal {
            parts.extensions.insert(p.clone());
        }
        // The handler hands this on to whoever it asks (the host: its child).
        if let Some(trace) = trace {
            parts.extensions.insert(trace);
        }
        let json_body = parts.method == Method::POST && json_content(&parts.headers);
        // A session this request may open (it names none), or one it may end.
        let (method, session) = (
            parts.method.clone(),
            parts.headers.get(SESSION_HEADER).cloned(),
        );
        // rmcp answers a JSON body it cannot read as a message 415, as if the media type were
        // wrong: what is wrong is the JSON, and JSON-RPC has a code for it. That answer reads
        // the body again, so a small one is kept for it; a large one is not held through the
        // whole call (its memory would count twice) but checked to be JSON first.
        if json_body
            && body.len() > KEEP_FOR_ERRORS
            && serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_err()
        {
            self.metrics.refusal("bad_request");
            return (not_a_message(Some(&body)), None);
        }
        let kept = (body.len() <= KEEP_FOR_ERRORS).then(|| body.clone());
        let response = (self.mcp)(Request::from_parts(parts, Full::new(body))).await;
        if json_body && response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
            self.metrics.refusal("bad_request");
            return (not_a_message(kept.as_deref()), None);
        }
        if let Some((keys, capabilities)) = initialize {
            let response =
                seal::issue_on_initialize(keys, response, principal.as_ref(), capabilities).await;
            return (response, None);
        }
        if let Some(sessions) = &self.sessions {
            match (method, session) {
                (Method::POST, None) => {
                    return match sessions.on_answer(response, principal.as_ref()).await {
                        Ok(response) => (response, None),
                        Err(refusal) => {
                            self.metrics.refusal(refusal.reason());
                            let id = kept.as_deref().and_then(sessions::request_id);
                            (sessions::refusal_response(&refusal, id), None)
                        }
                    };
                }
                (Method::DELETE, Some(id)) if response.status().is_success() => {
                    sessions.forget(&id);
                }
                _ => {}
            }
        }
        (response, None)
    }

    /// `/metrics`: the same guard and authentication as `/mcp` (a scraper presents the
    /// bearer token).
    async fn metrics_page(&self, headers: &HeaderMap) -> HttpResponse {
        if let Err(refusal) = self.guard.check(headers) {
            return self.refuse(refusal);
        }
        if let Err(refusal) = self.auth.principal(headers).await {
            return self.refuse(refusal);
        }
        let mut page = self.metrics.render();
        if let Some(intercept) = &self.intercept {
            intercept.render_metrics(&mut page);
        }
        crate::otel::render_metrics(&mut page);
        let mut response = text(StatusCode::OK, page);
        response.headers_mut().insert(
            CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        response
    }

    /// The answer to a refused request, with the challenge RFC 6750 / RFC 9728 ask for.
    fn refuse(&self, refusal: Refusal) -> HttpResponse {
        self.metrics.refusal(match &refusal {
            Refusal::BadRequest(_) => "bad_request",
            Refusal::Forbidden(_) => "forbidden",
            Refusal::Unavailable(_) => "unavailable",
            Refusal::Unauthorized { .. } => "unauthorized",
            Refusal::InsufficientScope { .. } => "insufficient_scope",
        });
        let metadata = self
            .auth
            .oauth
            .as_ref()
            .map(|rs| format!(", resource_metadata=\"{}\"", rs.metadata_url))
            .unwrap_or_default();
        let (status, challenge, body) = match refusal {
            Refusal::BadRequest(why) => return text(StatusCode::BAD_REQUEST, why),
            Refusal::Forbidden(why) => return text(StatusCode::FORBIDDEN, why),
            Refusal::Unavailable(why) => {
                let mut response = text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("Service Unavailable: {why}"),
                );
                response.headers_mut().insert(
                    http::header::RETRY_AFTER,
                    http::HeaderValue::from_static("5"),
                );
                return response;
            }
            Refusal::Unauthorized { error, description } => (
                StatusCode::UNAUTHORIZED,
                match error {
                    Some(code) => format!(
                        "Bearer realm=\"kitbag\"{metadata}, error=\"{code}\", error_description=\"{}\"",
                        quoted(&description)
                    ),
                    None => format!("Bearer realm=\"kitbag\"{metadata}"),
                },
                format!("Unauthorized: {description}"),
            ),
            Refusal::InsufficientScope { scope, description } => (
                StatusCode::FORBIDDEN,
                format!(
                    "Bearer realm=\"kitbag\"{metadata}, error=\"insufficient_scope\", scope=\"{}\", error_description=\"{}\"",
                    quoted(&scope),
                    quoted(&description)
                ),
                format!("Forbidden: {description}"),
            ),
        };
        let mut response = text(status, body);
        if let Ok(value) = http::HeaderValue::from_str(&challenge) {
            response
                .headers_mut()
                .insert(http::header::WWW_AUTHENTICATE, value);
        }
        response
    }

    /// The whole body, under the listener's limits: 413 past the cap (checked before reading
    /// when announced), 503 when the bytes in flight are at their budget, 408 when it does not
    /// arrive in time (the connection is then closed: its unread rest is not waited for).
    async fn read_body(
        &self,
        headers: &HeaderMap,
        body: Incoming,
        held: &mut Held<'_>,
    ) -> Result<Bytes, HttpResponse> {
        let announced = headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let read = limits::read_body(
            body,
            announced,
            self.max_request_bytes,
            self.limits.body_timeout,
            held,
        );
        read.await.map_err(|e| match e {
            BodyError::TooLarge(_) => {
                self.metrics.refusal("too_large");
                text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("Payload Too Large: {e}"),
                )
            }
            BodyError::Busy => {
                self.metrics.refusal("busy");
                busy(&e.to_string())
            }
            BodyError::Timeout(_) => {
                self.metrics.refusal("body_timeout");
                let mut response =
                    text(StatusCode::REQUEST_TIMEOUT, format!("Request Timeout: {e}"));
                response.headers_mut().insert(
                    http::header::CONNECTION,
                    http::HeaderValue::from_static("close"),
                );
                response
            }
            BodyError::Read(_) => text(StatusCode::BAD_REQUEST, format!("Bad Request: {e}")),
        })
    }
}

/// The tool a `tools/call` body names (one request object; a batch is left to MCP, which
/// refuses it, and to the tool-level check).
fn called_tool(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Call<'a> {
        #[serde(borrow)]
        method: std::borrow::Cow<'a, str>,
        params: Option<Params<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Params<'a> {
        #[serde(borrow)]
        name: std::borrow::Cow<'a, str>,
    }
    let call: Call<'_> = serde_json::from_slice(body).ok()?;
    (call.method == "tools/call").then(|| call.params.map(|p| p.name.into_owned()))?
}

/// Text for a quoted-string of a challenge: no quotes, backslashes or control characters.
fn quoted(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '"' | '\\' => '\'',
            c if c.is_control() || !c.is_ascii() => ' ',
            c => c,
        })
        .take(300)
        .collect()
}

/// A POST rmcp would take as it is: JSON in, JSON and SSE accepted, no session to check.
fn plain_post(headers: &HeaderMap) -> bool {
    if headers.contains_key(SESSION_HEADER) {
        return false;
    }
    let json_body = json_content(headers);
    let (mut json, mut sse) = (false, false);
    for value in headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
    {
        for entry in value.split(',') {
            if entry.split(';').skip(1).any(|p| {
                p.split_once('=').is_some_and(|(k, v)| {
                    k.trim().eq_ignore_ascii_case("q")
                        && v.trim().parse::<f32>().is_ok_and(|q| q <= 0.0)
                })
            }) {
                continue;
            }
            json |= essence(entry).eq_ignore_ascii_case("application/json");
            sse |= essence(entry).eq_ignore_ascii_case("text/event-stream");
        }
    }
    json_body && json && sse
}

fn essence(media_type: &str) -> &str {
    media_type.split(';').next().unwrap_or("").trim()
}

fn json_content(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| essence(v).eq_ignore_ascii_case("application/json"))
}

/// Bodies up to this size are kept while rmcp answers, to answer its 415 from them.
const KEEP_FOR_ERRORS: usize = 64 * 1024;

/// 400 for a JSON body that is no JSON-RPC message, with the error stdio would answer it with
/// (-32700 when the JSON cannot be decoded, -32600 when it is no message; its id when one can
/// be read). Without the body (a large one, not kept): -32600, id null — it was JSON.
fn not_a_message(body: Option<&[u8]>) -> HttpResponse {
    let answer = match body {
        Some(body) => crate::transport::unreadable_answer(body),
        None => serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": -32600, "message": "Invalid request: not a JSON-RPC request, notification or response"},
        })
        .to_string()
        .into_bytes(),
    };
    let mut response = Response::new(Full::new(Bytes::from(answer)).boxed());
    *response.status_mut() = StatusCode::BAD_REQUEST;
    response.headers_mut().insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// 503 with `Retry-After`, the connection closed after it: the server is at a limit that
/// frees up as requests in flight are answered.
fn busy(why: &str) -> HttpResponse {
    let mut response = text(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("Service Unavailable: {why}"),
    );
    let headers = response.headers_mut();
    headers.insert(
        http::header::RETRY_AFTER,
        limits::BUSY_RETRY_AFTER_SECS.into(),
    );
    headers.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    response
}

fn text(status: StatusCode, body: impl Into<String>) -> HttpResponse {
    let mut response = Response::new(Full::new(Bytes::from(body.into())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_posts_may_be_intercepted() {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, "application/json".parse().expect("h"));
        h.insert(
            ACCEPT,
            "application/json, text/event-stream".parse().expect("h"),
        );
        assert!(plain_post(&h));
        h.insert(
            ACCEPT,
            "application/json;q=0, text/event-stream"
                .parse()
                .expect("h"),
        );
        assert!(!plain_post(&h), "json refused by q=0");
        h.insert(
            ACCEPT,
            "application/json, text/event-stream".parse().expect("h"),
        );
        h.insert(SESSION_HEADER, "abc".parse().expect("h"));
        assert!(!plain_post(&h), "a session is rmcp's to check");
    }
}
