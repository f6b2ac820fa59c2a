//! Remote servers: a config entry with `url` instead of `command` is an MCP server reached
//! over Streamable HTTP (either protocol era; rmcp's client). It joins the flat list, policy,
//! audit and restart rules like a local child; only the byte-level path is local-only.
//!
//! This is how a laptop's `kitbag serve` reaches a team's workspace runner
//! (`kitbag serve --http` elsewhere): `{"url": "https://runner/mcp",
//! "headers": {"Authorization": "Bearer ${RUNNER_TOKEN}"}}`.

use std::collections::{BTreeMap, HashMap};

use http::{HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use kitbag_config::entry::EntryError;

/// Up to this many calls to one remote server are in flight at once (rmcp queues the rest).
const MAX_CONCURRENT_POSTS: usize = 32;

/// Why a remote server could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error(transparent)]
    Entry(#[from] EntryError),
    #[error("headers.Authorization: only `Bearer <token>` is sent to a remote server")]
    NotBearer,
    #[error("tls.{field} {path}: {reason}")]
    TlsFile {
        field: &'static str,
        path: String,
        reason: String,
    },
    #[error("tls: {0}")]
    Tls(String),
    #[error(transparent)]
    OAuth(#[from] crate::oauth_client::OAuthError),
    /// `url` with any credentials in it removed.
    #[error("MCP handshake with {url} failed: {reason}")]
    Handshake { url: String, reason: String },
}

/// Handshake with the server at `url`, sending `headers` with every request (and, with
/// `oauth`, the user's token for it). `server` names the entry (the token store's key);
/// `client` answers the server's requests.
pub async fn connect<H: rmcp::ClientHandler>(
    server: &str,
    url: &str,
    headers: &BTreeMap<String, String>,
    tls: Option<&kitbag_config::entry::RemoteTls>,
    oauth: Option<&kitbag_config::entry::RemoteOAuth>,
    client: H,
) -> Result<RunningService<RoleClient, H>, RemoteError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (bearer, custom) = split_headers(headers)?;
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_string())
        .max_concurrent_requests(MAX_CONCURRENT_POSTS)
        .reinit_on_expired_session(true)
        .custom_headers(custom);
    if let Some(token) = bearer {
        config = config.auth_header(token);
    }
    let http = match tls {
        None => reqwest::Client::new(),
        Some(tls) => http_client(tls)?,
    };
    let handshake = |e: String| RemoteError::Handshake {
        url: redact(url),
        reason: e,
    };
    match oauth {
        None => client
            .serve(StreamableHttpClientTransport::with_client(http, config))
            .await
            .map_err(|e| handshake(e.to_string())),
        Some(oauth) => {
            let tokens = crate::oauth_client::TokenSource::new(
                server,
                url,
                oauth,
                crate::oauth_client::login::http_client(),
            )
            .await?;
            // Fail with the reason (log in first) rather than a bare 401 at the handshake.
            tokens.token().await?;
            let transport = crate::oauth_client::OAuthHttp {
                inner: http,
                tokens,
            };
            client
                .serve(StreamableHttpClientTransport::with_client(
                    transport, config,
                ))
                .await
                .map_err(|e| handshake(e.to_string()))
        }
    }
}

/// An HTTP client trusting `tls.ca` (else the system's roots) and presenting `tls.cert`.
fn http_client(tls: &kitbag_config::entry::RemoteTls) -> Result<reqwest::Client, RemoteError> {
    let read = |field: &'static str, path: &str| {
        std::fs::read(path).map_err(|e| RemoteError::TlsFile {
            field,
            path: path.to_owned(),
            reason: e.to_string(),
        })
    };
    let mut builder = reqwest::Client::builder();
    if let Some(ca) = &tls.ca {
        let pem = read("ca", ca)?;
        let certs =
            reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| RemoteError::TlsFile {
                field: "ca",
                path: ca.clone(),
                reason: e.to_string(),
            })?;
        if certs.is_empty() {
            return Err(RemoteError::TlsFile {
                field: "ca",
                path: ca.clone(),
                reason: "no PEM certificate in it".into(),
            });
        }
        builder = builder.tls_certs_only(certs);
    }
    if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
        let mut pem = read("cert", cert)?;
        pem.push(b'\n');
        pem.extend(read("key", key)?);
        let identity = reqwest::Identity::from_pem(&pem).map_err(|e| RemoteError::TlsFile {
            field: "cert",
            path: cert.clone(),
            reason: e.to_string(),
        })?;
        builder = builder.identity(identity);
    }
    builder.build().map_err(|e| RemoteError::Tls(e.to_string()))
}

/// The bearer token (rmcp sends it itself) and the other headers, checked.
fn split_headers(
    headers: &BTreeMap<String, String>,
) -> Result<(Option<String>, HashMap<HeaderName, HeaderValue>), RemoteError> {
    let mut bearer = None;
    let mut custom = HashMap::new();
    for (name, value) in headers {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| EntryError::BadHeaderName { name: name.clone() })?;
        if header == http::header::AUTHORIZATION {
            match value.split_once(' ') {
                Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => {
                    bearer = Some(token.trim().to_string());
                    continue;
                }
                _ => {
                    return Err(RemoteError::NotBearer);
                }
            }
        }
        let value = HeaderValue::from_str(value)
            .map_err(|_| EntryError::BadHeaderValue { name: name.clone() })?;
        custom.insert(header, value);
    }
    Ok((bearer, custom))
}

pub use kitbag_shared::audit::redact_url as redact;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_goes_to_rmcp_and_other_headers_are_checked() {
        let headers = BTreeMap::from([
            ("Authorization".to_string(), "Bearer abc.def".to_string()),
            ("X-Tenant".to_string(), "team-a".to_string()),
        ]);
        let (bearer, custom) = split_headers(&headers).expect("ok");
        assert_eq!(bearer.as_deref(), Some("abc.def"));
        assert_eq!(custom.len(), 1);
        let basic = BTreeMap::from([("authorization".to_string(), "Basic eDp5".to_string())]);
        assert!(split_headers(&basic).is_err());
        let bad = BTreeMap::from([("bad header".to_string(), "x".to_string())]);
        assert!(split_headers(&bad).is_err());
        assert_eq!(
            redact("https://u:p@runner.example/mcp"),
            "https://runner.example/mcp"
        );
    }
}
