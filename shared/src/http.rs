//! MCP Streamable HTTP: every server (and the host) serves `/mcp` with `--http ADDR` or
//! `--unix PATH` instead of stdio.
//!
//! rmcp's `StreamableHttpService` speaks the protocol (both eras: handshake-era sessions when
//! `--http-sessions`, else stateless; 2026-07-28 always stateless, with its header checks).
//! In front of it, this module owns what is ours to decide: which paths exist, the
//! `Host`/`Origin` guard ([`guard`]), who is calling ([`auth`]: the static bearer token or an
//! OAuth JWT, [`oauth`], [`jwt`]) and the tiers their token grants, the body cap (413),
//! refusing a non-loopback bind without authentication, and an [`Intercept`] hook through
//! which the host answers plain tool calls at the byte level, as it does on stdio.

pub mod auth;
pub mod guard;
pub mod jwt;
pub mod metrics;
pub mod oauth;
pub mod seal;
pub mod tls;
pub mod token;
mod trace;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{
    SessionManager, StreamableHttpServerConfig, StreamableHttpService,
};
use tokio_util::sync::CancellationToken;

pub use auth::{Auth, Principal, principal_of};
use guard::{Guard, Refusal};
use oauth::{OAuthConfig, ResourceServer};

use crate::tier::Tier;

pub type HttpResponse = Response<BoxBody<Bytes, Infallible>>;

/// The one path MCP is served at (`/healthz` answers `ok` for probes, `/metrics` counts).
pub const MCP_PATH: &str = "/mcp";
pub const METRICS_PATH: &str = "/metrics";
const SESSION_HEADER: &str = "mcp-session-id";

/// The serving flags every binary takes (flattened into [`crate::CommonArgs`]).
#[derive(Debug, Clone, clap::Args)]
pub struct HttpArgs {
    /// Serve MCP Streamable HTTP at http://ADDR/mcp instead of stdio (127.0.0.1:8080; port 0
    /// picks a free one). The address served is printed to stderr.
    #[arg(long, value_name = "ADDR", conflicts_with = "unix")]
    pub http: Option<String>,

    /// Serve MCP Streamable HTTP on a Unix socket at PATH (mode 0600: this user only).
    #[arg(long, value_name = "PATH")]
    pub unix: Option<PathBuf>,

    /// Require `Authorization: Bearer <token>`, the token read from FILE (the token, or its
    /// digest as `sha256:<hex>`). Needed to --http on an address other than loopback, unless
    /// --oauth-issuer is given.
    #[arg(long, value_name = "FILE")]
    pub auth_token_file: Option<PathBuf>,

    /// Create --auth-token-file with a new random token (mode 0600) when it does not exist.
    #[arg(long, requires = "auth_token_file")]
    pub generate_auth_token: bool,

    /// Accept OAuth 2.1 bearer JWTs issued by this authorization server (its issuer URL);
    /// their signature is checked against its published keys.
    #[arg(
        long,
        value_name = "URL",
        env = "KITBAG_OAUTH_ISSUER",
        requires = "oauth_resource"
    )]
    pub oauth_issuer: Option<String>,

    /// This server's canonical URL as clients reach it (`https://host/mcp`): the audience
    /// tokens must name, published in /.well-known/oauth-protected-resource.
    #[arg(
        long,
        value_name = "URL",
        env = "KITBAG_OAUTH_RESOURCE",
        requires = "oauth_issuer"
    )]
    pub oauth_resource: Option<String>,

    /// The issuer's JWK set (default: found through its metadata).
    #[arg(
        long,
        value_name = "URL",
        env = "KITBAG_OAUTH_JWKS_URL",
        requires = "oauth_issuer"
    )]
    pub oauth_jwks_url: Option<String>,

    /// Prefix of the scopes that grant the tiers read, write, exec and external
    /// (`kitbag:` → `kitbag:read`, …).
    #[arg(long, value_name = "PREFIX", default_value = "")]
    pub oauth_scope_prefix: String,

    /// The token claim naming the agent profile that applies to its calls (the host's
    /// `agents`).
    #[arg(long, value_name = "CLAIM", default_value = "kitbag_agent")]
    pub oauth_agent_claim: String,

    /// A scope every token must carry (repeatable); without it, 403 insufficient_scope.
    #[arg(long = "oauth-required-scope", value_name = "SCOPE")]
    pub oauth_required_scopes: Vec<String>,

    /// A token naming a key not yet seen fetches the issuer's keys again at most once per
    /// this many seconds (the issuer rotated its keys).
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub oauth_key_refresh_secs: u64,

    /// Serve HTTPS with this certificate (PEM, the chain from the server's own first).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Mutual TLS: only clients presenting a certificate this CA (PEM) signed get in — a
    /// gateway reaching its runner. Counts as authentication for a non-loopback bind.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,

    /// Also answer requests naming this Host, `name` or `name:port` (repeatable).
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,

    /// Also accept browser requests from this Origin, `scheme://host[:port|:*]` (repeatable;
    /// pages on this machine are accepted by default).
    #[arg(long = "allowed-origin", value_name = "ORIGIN")]
    pub allowed_origins: Vec<String>,

    /// Keep handshake-era sessions (Mcp-Session-Id, a GET stream, DELETE). Default:
    /// stateless, so any replica can answer any request.
    #[arg(long)]
    pub http_sessions: bool,

    /// Sessions for handshake-era clients that any replica can open: the Mcp-Session-Id
    /// issued at `initialize` is sealed (AES-256-GCM over caller, agent, protocol, client
    /// capabilities, expiry); no session store, no affinity. Requests stay stateless.
    #[arg(long, conflicts_with = "http_sessions")]
    pub sealed_sessions: bool,

    /// The keys sealed sessions use: one secret per line (≥ 32 characters), the first seals,
    /// all open (rotation). Every replica gets the same file. Without it, a key of this
    /// process only.
    #[arg(long, value_name = "FILE", requires = "sealed_sessions")]
    pub session_key_file: Option<PathBuf>,

    /// How long a sealed session lasts.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 86_400,
        requires = "sealed_sessions"
    )]
    pub session_ttl_secs: u64,

    /// After SIGTERM, keep serving this long with `/healthz` answering 503, so a load
    /// balancer takes this replica out before it stops accepting connections.
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    pub drain_secs: u64,

    /// Once no new connection is accepted, how long requests in flight get to finish.
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    pub shutdown_grace_secs: u64,

    /// The largest request body accepted; a bigger one gets 413.
    #[arg(long, value_name = "BYTES", default_value_t = crate::transport::MAX_LINE_BYTES)]
    pub max_request_bytes: usize,

    /// Export a span per MCP request over OTLP/HTTP to this collector (its base URL, as
    /// OTEL_EXPORTER_OTLP_ENDPOINT: /v1/traces is added). Stdio or HTTP serving alike; the
    /// OTEL_* variables configure the rest.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
}

impl Default for HttpArgs {
    /// stdio: no listener.
    fn default() -> Self {
        Self {
            http: None,
            unix: None,
            auth_token_file: None,
            generate_auth_token: false,
            oauth_issuer: None,
            oauth_resource: None,
            oauth_jwks_url: None,
            oauth_scope_prefix: String::new(),
            oauth_agent_claim: "kitbag_agent".into(),
            oauth_required_scopes: Vec::new(),
            oauth_key_refresh_secs: 30,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            http_sessions: false,
            sealed_sessions: false,
            session_key_file: None,
            session_ttl_secs: 86_400,
            drain_secs: 0,
            shutdown_grace_secs: 5,
            max_request_bytes: crate::transport::MAX_LINE_BYTES,
            otlp_endpoint: None,
        }
    }
}

/// Where to listen.
#[derive(Debug, Clone)]
pub enum Listen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// What [`serve`] needs, checked.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub listen: Listen,
    pub guard: Guard,
    pub auth: Auth,
    pub sessions: bool,
    /// Sealed sessions (`--sealed-sessions`): their keys.
    pub sealed: Option<Arc<seal::SessionKeys>>,
    /// After SIGTERM: serving on with `/healthz` 503, then the grace for requests in flight.
    pub drain: Duration,
    pub grace: Duration,
    pub max_request_bytes: usize,
    /// HTTPS (and with a client CA, mutual TLS) on the TCP listener.
    pub tls: Option<Tls>,
}

/// The TLS acceptor, as options carry it.
#[derive(Clone)]
pub struct Tls(pub tokio_rustls::TlsAcceptor);

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls(..)")
    }
}

impl HttpArgs {
    /// The options these flags ask for; None = serve stdio.
    pub fn options(&self) -> anyhow::Result<Option<HttpOptions>> {
        let listen = match (&self.http, &self.unix) {
            (Some(addr), _) => Listen::Tcp(parse_addr(addr)?),
            (None, Some(path)) => Listen::Unix(path.clone()),
            (None, None) => {
                if self.auth_token_file.is_some() || self.oauth_issuer.is_some() {
                    anyhow::bail!(
                        "--auth-token-file and --oauth-issuer apply to --http or --unix serving"
                    );
                }
                return Ok(None);
            }
        };
        let auth = self.auth()?;
        let loopback = match &listen {
            Listen::Tcp(addr) => addr.ip().is_loopback(),
            Listen::Unix(_) => true,
        };
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(Tls(tls::acceptor(
                cert,
                key,
                self.tls_client_ca.as_deref(),
            )?)),
            _ => None,
        };
        if !loopback && !auth.required() && self.tls_client_ca.is_none() {
            anyhow::bail!(
                "--http {}: that address is reachable from other machines; serve it with --auth-token-file FILE (add --generate-auth-token to make one), --oauth-issuer or --tls-client-ca, or bind 127.0.0.1",
                self.http.as_deref().unwrap_or_default()
            );
        }
        // Loopback: only loopback names, so a rebound DNS name is refused. Elsewhere the
        // token is the guard; the names are the operator's to list.
        let mut hosts = self.allowed_hosts.clone();
        // An empty list accepts any Host: only right beyond loopback with no names given.
        if loopback || !hosts.is_empty() {
            hosts.extend(guard::LOOPBACK_HOSTS.map(String::from));
        }
        let mut origins = guard::local_origins();
        origins.extend(self.allowed_origins.iter().cloned());
        let sealed = if self.sealed_sessions {
            let ttl = Duration::from_secs(self.session_ttl_secs);
            Some(Arc::new(seal::SessionKeys::load(
                self.session_key_file.as_deref(),
                ttl,
            )?))
        } else {
            None
        };
        Ok(Some(HttpOptions {
            listen,
            guard: Guard { hosts, origins },
            auth,
            sessions: self.http_sessions,
            sealed,
            drain: Duration::from_secs(self.drain_secs),
            grace: Duration::from_secs(self.shutdown_grace_secs),
            max_request_bytes: self.max_request_bytes,
            tls,
        }))
    }
}

impl HttpArgs {
    /// The static token and the OAuth resource server these flags configure.
    fn auth(&self) -> anyhow::Result<Auth> {
        let token = match &self.auth_token_file {
            Some(path) if self.generate_auth_token => Some(token::generate(path)?),
            Some(path) => Some(token::read(path)?),
            None => None,
        };
        let oauth = match (&self.oauth_issuer, &self.oauth_resource) {
            (Some(issuer), Some(resource)) => Some(Arc::new(ResourceServer::new(OAuthConfig {
                issuer: issuer.clone(),
                resource: resource.clone(),
                jwks_url: self.oauth_jwks_url.clone(),
                scope_prefix: self.oauth_scope_prefix.clone(),
                agent_claim: self.oauth_agent_claim.clone(),
                required_scopes: self.oauth_required_scopes.clone(),
                min_refresh: std::time::Duration::from_secs(self.oauth_key_refresh_secs),
            })?)),
            (None, None) => None,
            _ => anyhow::bail!("--oauth-issuer and --oauth-resource go together"),
        };
        Ok(Auth {
            token: token.map(|t| token::parse(&t)),
            oauth,
        })
    }
}

/// `IP:PORT`, `localhost:PORT` or `:PORT` (loopback).
fn parse_addr(text: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let port = text
        .strip_prefix("localhost:")
        .or_else(|| text.strip_prefix(':'))
        .and_then(|p| p.parse::<u16>().ok());
    match port {
        Some(port) => Ok(SocketAddr::from(([127, 0, 0, 1], port))),
        None => anyhow::bail!(
            "--http {text}: expected IP:PORT (127.0.0.1:8080, [::1]:8080, 0.0.0.0:8080), localhost:PORT or :PORT"
        ),
    }
}

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
        .with_legacy_session_mode(options.sessions)
        .with_json_response(true)
        .with_cancellation_token(cancel.clone())
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_max_request_body_bytes(options.max_request_bytes);
    let mcp = if options.sessions {
        mcp_service(handler.clone(), LocalSessionManager::default(), config)
    } else {
        mcp_service(handler.clone(), NeverSessionManager::default(), config)
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
        intercept,
        sealed: options.sealed.clone(),
        draining: std::sync::atomic::AtomicBool::new(false),
    });
    accept_loop(front, &options, cancel).await
}

fn mcp_service<H, M>(handler: H, sessions: M, config: StreamableHttpServerConfig) -> McpService
where
    H: rmcp::ServerHandler + Clone + Send + Sync + 'static,
    M: SessionManager,
{
    let service =
        StreamableHttpService::new(move || Ok(handler.clone()), Arc::new(sessions), config);
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
    metrics: Arc<metrics::Metrics>,
    guard: Guard,
    auth: Auth,
    tier_of: TierOf,
    max_request_bytes: usize,
    intercept: Option<Arc<dyn Intercept>>,
    sealed: Option<Arc<seal::SessionKeys>>,
    /// SIGTERM came: `/healthz` says 503 while requests are still served.
    draining: std::sync::atomic::AtomicBool,
}

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
        let response = self.answer(request, peer).await;
        self.metrics.request(path, response.status().as_u16());
        response
    }

    async fn answer(&self, request: Request<Incoming>, peer: Peer) -> HttpResponse {
        let path = request.uri().path();
        let oauth = self.auth.oauth.as_ref();
        match path {
            "/healthz" if request.method() == Method::GET => {
                if self.draining.load(std::sync::atomic::Ordering::Relaxed) {
                    return text(StatusCode::SERVICE_UNAVAILABLE, "draining\n");
                }
                return text(StatusCode::OK, "ok\n");
            }
            METRICS_PATH if request.method() == Method::GET => {
                return self.metrics_page(request.headers()).await;
            }
            MCP_PATH => {}
            _ if oauth.is_some_and(|rs| path == rs.metadata_path || path == oauth::WELL_KNOWN) => {}
            _ => {
                return text(StatusCode::NOT_FOUND, "Not Found: MCP is served at /mcp\n");
            }
        }
        if let Err(refusal) = self.guard.check(request.headers()) {
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
        let principal = match self.auth.principal(request.headers()).await {
            Ok(p) => p,
            Err(refusal) => return self.refuse(refusal),
        };
        let (mut parts, body) = request.into_parts();
        // The credential stops here: nothing handed on (children, logs) can see it.
        parts.headers.remove(http::header::AUTHORIZATION);
        if let Some(keys) = &self.sealed
            && let Err(refusal) = seal::admit(keys, &mut parts, principal.as_ref())
        {
            return seal::refusal_response(&refusal);
        }
        let body = if parts.method == Method::POST {
            match self.read_body(&parts.headers, body).await {
                Ok(bytes) => bytes,
                Err(response) => return response,
            }
        } else {
            Bytes::new()
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
        let response = (self.mcp)(Request::from_parts(parts, Full::new(body))).await;
        if let Some((keys, capabilities)) = initialize {
            let response =
                seal::issue_on_initialize(keys, response, principal.as_ref(), capabilities).await;
            return (response, None);
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

    /// The whole body, or 413 past the cap (checked before reading when announced).
    async fn read_body(&self, headers: &HeaderMap, body: Incoming) -> Result<Bytes, HttpResponse> {
        let too_large = || {
            self.metrics.refusal("too_large");
            text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "Payload Too Large: a request body may carry at most {} bytes",
                    self.max_request_bytes
                ),
            )
        };
        let announced = headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if announced.is_some_and(|n| n > self.max_request_bytes as u64) {
            return Err(too_large());
        }
        match Limited::new(body, self.max_request_bytes).collect().await {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
            Err(e) => Err(text(
                StatusCode::BAD_REQUEST,
                format!("Bad Request: reading the body failed: {e}"),
            )),
        }
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
    let json_body = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| essence(v).eq_ignore_ascii_case("application/json"));
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

fn text(status: StatusCode, body: impl Into<String>) -> HttpResponse {
    let mut response = Response::new(Full::new(Bytes::from(body.into())).boxed());
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

async fn accept_loop(
    front: Arc<Front>,
    options: &HttpOptions,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let tls = options.tls.clone().map(|t| t.0);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    // SIGTERM, then the drain: still accepting, `/healthz` 503 (a Service's endpoints drop
    // this pod meanwhile, so no new connection is refused).
    let shutdown = async {
        crate::server::shutdown_signal().await;
        front
            .draining
            .store(true, std::sync::atomic::Ordering::Relaxed);
        if !options.drain.is_zero() {
            tracing::info!(
                "draining for {:?} before closing the listener",
                options.drain
            );
            tokio::time::sleep(options.drain).await;
        }
    };
    tokio::pin!(shutdown);
    match &options.listen {
        Listen::Tcp(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| anyhow::anyhow!("--http {addr}: {e}"))?;
            let bound = listener.local_addr()?;
            let scheme = if tls.is_some() { "https" } else { "http" };
            // Printed, not logged: a script that asked for port 0 needs the port.
            eprintln!("serving MCP at {scheme}://{bound}{MCP_PATH}");
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, addr)) => {
                            let _ = stream.set_nodelay(true);
                            let peer = Peer { transport: "tcp", addr: Some(addr) };
                            match &tls {
                                None => connection(&front, graceful.watcher(), stream, peer),
                                Some(tls) => tls_connection(
                                    &front,
                                    graceful.watcher(),
                                    tls.clone(),
                                    stream,
                                    peer,
                                ),
                            }
                        }
                        Err(e) => {
                            // Out of descriptors and the like: wait, do not spin.
                            tracing::warn!("accept failed: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    },
                    () = &mut shutdown => break,
                }
            }
        }
        Listen::Unix(path) => {
            let listener = bind_unix(path)?;
            eprintln!("serving MCP at unix:{} (path {MCP_PATH})", path.display());
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => {
                            let peer = Peer { transport: "unix", addr: None };
                            connection(&front, graceful.watcher(), stream, peer);
                        }
                        Err(e) => {
                            tracing::warn!("accept failed: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    },
                    () = &mut shutdown => break,
                }
            }
            let _ = std::fs::remove_file(path);
        }
    }
    // Requests in flight (their answers not produced yet) get the grace to finish; then open
    // SSE streams end, and what is still being written gets a moment.
    let deadline = tokio::time::Instant::now() + options.grace;
    while front.metrics.in_flight() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(1), graceful.shutdown()).await;
    Ok(())
}

/// The TLS handshake on a task of its own (a slow client holds up nobody), then HTTP.
fn tls_connection(
    front: &Arc<Front>,
    watcher: hyper_util::server::graceful::Watcher,
    tls: tokio_rustls::TlsAcceptor,
    stream: tokio::net::TcpStream,
    peer: Peer,
) {
    let front = front.clone();
    tokio::spawn(async move {
        match tokio::time::timeout(tls::HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
            Ok(Ok(stream)) => connection(&front, watcher, stream, peer),
            // A client without an accepted certificate, or not speaking TLS.
            Ok(Err(e)) => tracing::debug!("TLS handshake refused: {e}"),
            Err(_) => tracing::debug!("TLS handshake timed out"),
        }
    });
}

/// A socket only this user can reach; a stale socket file (nobody listening) is replaced.
fn bind_unix(path: &std::path::Path) -> anyhow::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            anyhow::bail!("--unix {}: exists and is not a socket", path.display());
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            anyhow::bail!(
                "--unix {}: another server is listening there",
                path.display()
            );
        }
        std::fs::remove_file(path)?;
    }
    // Created under a tight umask, then set explicitly: no window where others can connect.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = tokio::net::UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let listener = bound.map_err(|e| anyhow::anyhow!("--unix {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

fn connection<S>(
    front: &Arc<Front>,
    watcher: hyper_util::server::graceful::Watcher,
    stream: S,
    peer: Peer,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let front = front.clone();
    let service = hyper::service::service_fn(move |request| {
        let front = front.clone();
        async move { Ok::<_, Infallible>(front.handle(request, peer).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        // A client that never finishes its headers is dropped (slowloris).
        .header_read_timeout(Duration::from_secs(30))
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    let conn = watcher.watch(conn);
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("HTTP connection ended: {e}");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_non_loopback_needs_a_token() {
        assert_eq!(
            parse_addr(":8080").expect("port").to_string(),
            "127.0.0.1:8080"
        );
        assert_eq!(parse_addr("localhost:0").expect("host").port(), 0);
        assert!(parse_addr("[::1]:9").expect("v6").ip().is_loopback());
        assert!(parse_addr("example.com:80").is_err());
        let args = |http: &str| HttpArgs {
            http: Some(http.into()),
            ..HttpArgs::default()
        };
        let err = args("0.0.0.0:8080")
            .options()
            .expect_err("needs a token")
            .to_string();
        assert!(err.contains("--auth-token-file"), "{err}");
        let local = args("127.0.0.1:0").options().expect("ok").expect("http");
        assert!(local.guard.hosts.iter().any(|h| h == "localhost"));
        assert!(!local.auth.required());
    }

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
