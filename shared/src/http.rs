//! MCP Streamable HTTP: every server (and the host) serves `/mcp` with `--http ADDR` or
//! `--unix PATH` instead of stdio.
//!
//! rmcp's `StreamableHttpService` speaks the protocol (both eras: handshake-era sessions when
//! `--http-sessions`, else stateless; 2026-07-28 always stateless, with its header checks).
//! In front of it, this module owns what is ours to decide: which paths exist, the
//! `Host`/`Origin` guard and bearer token ([`guard`]), the body cap (413), refusing a
//! non-loopback bind without a token, and an [`Intercept`] hook through which the host
//! answers plain tool calls at the byte level, as it does on stdio.

pub mod guard;
pub mod token;

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

use guard::{Guard, Refusal};

pub type HttpResponse = Response<BoxBody<Bytes, Infallible>>;

/// The one path MCP is served at (`/healthz` answers `ok` for probes).
pub const MCP_PATH: &str = "/mcp";
const SESSION_HEADER: &str = "mcp-session-id";
/// How long open requests get to finish after SIGTERM.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

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

    /// Require `Authorization: Bearer <token>`, the token read from FILE. Needed to --http on
    /// an address other than loopback.
    #[arg(long, value_name = "FILE")]
    pub auth_token_file: Option<PathBuf>,

    /// Create --auth-token-file with a new random token (mode 0600) when it does not exist.
    #[arg(long, requires = "auth_token_file")]
    pub generate_auth_token: bool,

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

    /// The largest request body accepted; a bigger one gets 413.
    #[arg(long, value_name = "BYTES", default_value_t = crate::transport::MAX_LINE_BYTES)]
    pub max_request_bytes: usize,
}

impl Default for HttpArgs {
    /// stdio: no listener.
    fn default() -> Self {
        Self {
            http: None,
            unix: None,
            auth_token_file: None,
            generate_auth_token: false,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            http_sessions: false,
            max_request_bytes: crate::transport::MAX_LINE_BYTES,
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
    pub sessions: bool,
    pub max_request_bytes: usize,
}

impl HttpArgs {
    /// The options these flags ask for; None = serve stdio.
    pub fn options(&self) -> anyhow::Result<Option<HttpOptions>> {
        let listen = match (&self.http, &self.unix) {
            (Some(addr), _) => Listen::Tcp(parse_addr(addr)?),
            (None, Some(path)) => Listen::Unix(path.clone()),
            (None, None) => {
                if self.auth_token_file.is_some() {
                    anyhow::bail!("--auth-token-file applies to --http or --unix serving");
                }
                return Ok(None);
            }
        };
        let token = match &self.auth_token_file {
            Some(path) if self.generate_auth_token => Some(token::generate(path)?),
            Some(path) => Some(token::read(path)?),
            None => None,
        };
        let loopback = match &listen {
            Listen::Tcp(addr) => addr.ip().is_loopback(),
            Listen::Unix(_) => true,
        };
        if !loopback && token.is_none() {
            anyhow::bail!(
                "--http {}: that address is reachable from other machines; serve it with --auth-token-file FILE (add --generate-auth-token to make one), or bind 127.0.0.1",
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
        Ok(Some(HttpOptions {
            listen,
            guard: Guard {
                hosts,
                origins,
                token,
            },
            sessions: self.http_sessions,
            max_request_bytes: self.max_request_bytes,
        }))
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

/// A POST answered before rmcp sees it (the host's byte-level calls). The future yields
/// the JSON-RPC response body.
pub trait Intercept: Send + Sync + 'static {
    fn intercept(&self, headers: &HeaderMap, body: &Bytes) -> Option<BoxFuture<'static, Vec<u8>>>;
}

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
        mcp_service(handler, LocalSessionManager::default(), config)
    } else {
        mcp_service(handler, NeverSessionManager::default(), config)
    };
    let front = Arc::new(Front {
        mcp,
        guard: options.guard.clone(),
        max_request_bytes: options.max_request_bytes,
        intercept,
    });
    accept_loop(front, &options.listen, cancel).await
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

struct Front {
    mcp: McpService,
    guard: Guard,
    max_request_bytes: usize,
    intercept: Option<Arc<dyn Intercept>>,
}

impl Front {
    async fn handle(&self, request: Request<Incoming>) -> HttpResponse {
        match request.uri().path() {
            "/healthz" if request.method() == Method::GET => {
                return text(StatusCode::OK, "ok\n");
            }
            MCP_PATH => {}
            _ => return text(StatusCode::NOT_FOUND, "Not Found: MCP is served at /mcp\n"),
        }
        match self.guard.check(request.headers()) {
            Ok(()) => {}
            Err(Refusal::Forbidden(why)) => return text(StatusCode::FORBIDDEN, why),
            Err(Refusal::Unauthorized(why)) => {
                let mut response = text(StatusCode::UNAUTHORIZED, why);
                response.headers_mut().insert(
                    http::header::WWW_AUTHENTICATE,
                    http::HeaderValue::from_static("Bearer realm=\"kitbag\""),
                );
                return response;
            }
        }
        let (parts, body) = request.into_parts();
        let body = if parts.method == Method::POST {
            match self.read_body(&parts.headers, body).await {
                Ok(bytes) => bytes,
                Err(response) => return response,
            }
        } else {
            Bytes::new()
        };
        if parts.method == Method::POST
            && let Some(intercept) = &self.intercept
            && plain_post(&parts.headers)
            && let Some(answer) = intercept.intercept(&parts.headers, &body)
        {
            let body = answer.await;
            return Response::builder()
                .status(StatusCode::OK)
                .header(CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from(body)).boxed())
                .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "response"));
        }
        (self.mcp)(Request::from_parts(parts, Full::new(body))).await
    }

    /// The whole body, or 413 past the cap (checked before reading when announced).
    async fn read_body(&self, headers: &HeaderMap, body: Incoming) -> Result<Bytes, HttpResponse> {
        let too_large = || {
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
    listen: &Listen,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let shutdown = crate::server::shutdown_signal();
    tokio::pin!(shutdown);
    match listen {
        Listen::Tcp(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| anyhow::anyhow!("--http {addr}: {e}"))?;
            let bound = listener.local_addr()?;
            // Printed, not logged: a script that asked for port 0 needs the port.
            eprintln!("serving MCP at http://{bound}{MCP_PATH}");
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => {
                            let _ = stream.set_nodelay(true);
                            connection(&front, &graceful, stream);
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
                        Ok((stream, _)) => connection(&front, &graceful, stream),
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
    // Open SSE streams end; requests in flight get a moment to finish.
    cancel.cancel();
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await;
    Ok(())
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
    graceful: &hyper_util::server::graceful::GracefulShutdown,
    stream: S,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let front = front.clone();
    let service = hyper::service::service_fn(move |request| {
        let front = front.clone();
        async move { Ok::<_, Infallible>(front.handle(request).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        // A client that never finishes its headers is dropped (slowloris).
        .header_read_timeout(Duration::from_secs(30))
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    let conn = graceful.watch(conn);
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
        assert!(local.guard.token.is_none());
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
