//! The serving flags every binary takes ([`HttpArgs`], flattened into [`crate::CommonArgs`])
//! and the checked [`HttpOptions`] they make: where to listen, who may call, the limits.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::auth::Auth;
use super::guard::{self, Guard};
use super::limits::{self, Limits};
use super::oauth::{OAuthConfig, ResourceServer};
use super::sessions::{self, SessionLimits};
use super::{seal, tls, token};

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

    /// Request-body bytes held at once across all requests, until each is answered; a body
    /// that would pass it gets 503 with Retry-After (announced bodies before they are sent).
    #[arg(long, value_name = "BYTES", default_value_t = limits::DEFAULT_MAX_INFLIGHT_BYTES)]
    pub http_max_inflight_bytes: usize,

    /// A request body must arrive whole within this many seconds of its headers; a slower
    /// one gets 408 and its connection is closed.
    #[arg(long, value_name = "SECS", default_value_t = limits::DEFAULT_BODY_TIMEOUT_SECS)]
    pub http_body_timeout_secs: u64,

    /// A connection that sends no complete request head for this many seconds (a new one, or
    /// one kept alive between requests) is closed, and so is one whose client reads nothing
    /// of what is written to it for this long.
    #[arg(long, value_name = "SECS", default_value_t = limits::DEFAULT_IDLE_TIMEOUT_SECS)]
    pub http_idle_timeout_secs: u64,

    /// Connections served at once; one more gets 503 with Retry-After and is closed.
    #[arg(long, value_name = "N", default_value_t = limits::DEFAULT_MAX_CONNECTIONS)]
    pub http_max_connections: usize,

    /// --http-sessions: live sessions in all; past it, `initialize` gets 503 with Retry-After.
    #[arg(
        long,
        value_name = "N",
        default_value_t = sessions::DEFAULT_MAX_SESSIONS,
        requires = "http_sessions"
    )]
    pub http_max_sessions: usize,

    /// --http-sessions: live sessions per caller (token subject); past it, `initialize` gets
    /// 503 with Retry-After. Without authentication only --http-max-sessions applies.
    #[arg(
        long,
        value_name = "N",
        default_value_t = sessions::DEFAULT_MAX_SESSIONS_PER_CALLER,
        requires = "http_sessions"
    )]
    pub http_max_sessions_per_caller: usize,

    /// --http-sessions: a session without a request for this many seconds ends.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = sessions::DEFAULT_SESSION_IDLE_SECS,
        requires = "http_sessions"
    )]
    pub http_session_idle_secs: u64,

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
            http_max_inflight_bytes: limits::DEFAULT_MAX_INFLIGHT_BYTES,
            http_body_timeout_secs: limits::DEFAULT_BODY_TIMEOUT_SECS,
            http_idle_timeout_secs: limits::DEFAULT_IDLE_TIMEOUT_SECS,
            http_max_connections: limits::DEFAULT_MAX_CONNECTIONS,
            http_max_sessions: sessions::DEFAULT_MAX_SESSIONS,
            http_max_sessions_per_caller: sessions::DEFAULT_MAX_SESSIONS_PER_CALLER,
            http_session_idle_secs: sessions::DEFAULT_SESSION_IDLE_SECS,
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

/// What [`super::serve`] needs, checked.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub listen: Listen,
    pub guard: Guard,
    pub auth: Auth,
    /// Handshake-era sessions kept in this process (`--http-sessions`): their caps.
    pub sessions: Option<SessionLimits>,
    /// Sealed sessions (`--sealed-sessions`): their keys.
    pub sealed: Option<Arc<seal::SessionKeys>>,
    /// After SIGTERM: serving on with `/healthz` 503, then the grace for requests in flight.
    pub drain: Duration,
    pub grace: Duration,
    pub max_request_bytes: usize,
    /// Connections, bytes in flight, timeouts.
    pub limits: Limits,
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
            sessions: self.http_sessions.then(|| SessionLimits {
                max_total: self.http_max_sessions,
                max_per_caller: self.http_max_sessions_per_caller,
                idle: Duration::from_secs(self.http_session_idle_secs),
            }),
            sealed,
            drain: Duration::from_secs(self.drain_secs),
            grace: Duration::from_secs(self.shutdown_grace_secs),
            max_request_bytes: self.max_request_bytes,
            limits: self.limits()?,
            tls,
        }))
    }

    /// The listener's limits, each at least 1 (0 would refuse everything), and room in the
    /// in-flight budget for one body of the largest size accepted.
    fn limits(&self) -> anyhow::Result<Limits> {
        for (flag, value) in [
            ("--http-body-timeout-secs", self.http_body_timeout_secs),
            ("--http-idle-timeout-secs", self.http_idle_timeout_secs),
            ("--http-session-idle-secs", self.http_session_idle_secs),
            ("--http-max-connections", self.http_max_connections as u64),
            ("--http-max-sessions", self.http_max_sessions as u64),
            (
                "--http-max-sessions-per-caller",
                self.http_max_sessions_per_caller as u64,
            ),
        ] {
            if value == 0 {
                anyhow::bail!("{flag} 0: must be at least 1");
            }
        }
        if self.http_max_inflight_bytes < self.max_request_bytes {
            anyhow::bail!(
                "--http-max-inflight-bytes {} is less than --max-request-bytes {}: a body of the largest size accepted could never be taken",
                self.http_max_inflight_bytes,
                self.max_request_bytes
            );
        }
        Ok(Limits {
            body_timeout: Duration::from_secs(self.http_body_timeout_secs),
            idle_timeout: Duration::from_secs(self.http_idle_timeout_secs),
            max_connections: self.http_max_connections,
            max_inflight_bytes: self.http_max_inflight_bytes,
        })
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
        assert!(local.sessions.is_none());
        assert_eq!(local.limits.max_connections, 512);
    }

    #[test]
    fn limits_are_flags_with_sane_bounds() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            serving: HttpArgs,
        }
        let parse = |extra: &[&str]| {
            let mut argv = vec!["x", "--http", "127.0.0.1:0"];
            argv.extend_from_slice(extra);
            Cli::try_parse_from(argv).map(|c| c.serving)
        };
        let o = parse(&[
            "--http-sessions",
            "--http-max-sessions",
            "7",
            "--http-max-sessions-per-caller",
            "3",
            "--http-session-idle-secs",
            "9",
            "--http-body-timeout-secs",
            "2",
            "--http-max-inflight-bytes",
            "67108864",
        ])
        .expect("parse")
        .options()
        .expect("ok")
        .expect("http");
        let s = o.sessions.expect("sessions");
        assert_eq!((s.max_total, s.max_per_caller), (7, 3));
        assert_eq!(s.idle, Duration::from_secs(9));
        assert_eq!(o.limits.body_timeout, Duration::from_secs(2));
        assert!(
            parse(&["--http-max-sessions", "7"]).is_err(),
            "needs --http-sessions"
        );
        for bad in [
            &["--http-max-connections", "0"][..],
            &["--http-max-inflight-bytes", "1000"],
        ] {
            let err = parse(bad).expect("parse").options().expect_err("refused");
            assert!(err.to_string().contains(bad[0]), "{err}");
        }
    }
}
