//! OAuth for remote servers (`"oauth": {…}` on a `url` entry): the host finds the server's
//! authorization server (discover.rs), keeps each user's tokens in their own store
//! (store.rs), renews them — the refresh token, or the client-credentials grant — before they
//! expire and after a 401 (transport.rs carries them on every request), and `kitbag auth
//! login NAME` gets the first ones: authorization code with PKCE through a loopback redirect
//! (login.rs), the client registered on the fly (RFC 7591) when none is configured. Every
//! token request names the server as its `resource` (RFC 8707).

mod discover;
pub mod login;
mod store;
mod transport;

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

pub use discover::Endpoints;
use kitbag_config::entry::{Grant, RemoteOAuth};
pub use store::{Store, Stored};
pub use transport::OAuthHttp;

/// A token is renewed when it has less than this left.
const RENEW_BEFORE: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    #[error("oauth discovery at {url}: {reason}")]
    Discovery { url: String, reason: String },
    #[error(
        "oauth: the server's protected-resource metadata names {metadata}, not {expected} (set oauth.resource when the server is reached at another address)"
    )]
    ResourceMismatch { metadata: String, expected: String },
    #[error("oauth: not logged in to {server}: run `kitbag auth login {server}`")]
    LoginNeeded { server: String, resource: String },
    #[error("oauth: the authorization server answered {error}{}", description.as_deref().map(|d| format!(": {d}")).unwrap_or_default())]
    Token {
        error: String,
        description: Option<String>,
    },
    #[error("oauth: {0}")]
    Http(String),
    #[error("oauth: {0}")]
    Flow(String),
    #[error("oauth token store: {0}")]
    Store(#[from] std::io::Error),
}

/// A token endpoint's answer (RFC 6749 §5.1).
#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    token_type: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
    #[serde(default)]
    refresh_token: Option<String>,
    #[serde(default)]
    scope: Option<String>,
}

#[derive(Deserialize)]
struct TokenErrorResponse {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

fn now() -> u64 {
    kitbag_shared::clock::unix_secs()
}

impl Stored {
    /// More than [`RENEW_BEFORE`] left (or no expiry said).
    fn has_time_left(&self) -> bool {
        self.expires_at
            .is_none_or(|t| t > now().saturating_add(RENEW_BEFORE.as_secs()))
    }
}

/// The client a token request authenticates as.
#[derive(Debug, Clone)]
pub struct Client {
    pub id: String,
    pub secret: Option<String>,
}

/// POST a token request (`form` without the client's credentials) and read the answer.
async fn token_request(
    http: &reqwest::Client,
    ep: &Endpoints,
    client: &Client,
    mut form: Vec<(&str, String)>,
) -> Result<TokenResponse, OAuthError> {
    form.push(("resource", ep.resource.clone()));
    let mut request = http.post(&ep.token_endpoint);
    match &client.secret {
        Some(secret) if !ep.secret_in_body => {
            request = request.basic_auth(form_encode(&client.id), Some(form_encode(secret)));
        }
        Some(secret) => {
            form.push(("client_id", client.id.clone()));
            form.push(("client_secret", secret.clone()));
        }
        None => form.push(("client_id", client.id.clone())),
    }
    let body = form
        .iter()
        .map(|(k, v)| format!("{k}={}", form_encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let response = request
        .header("content-type", "application/x-www-form-urlencoded")
        .header("accept", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| OAuthError::Http(format!("{}: {e}", ep.token_endpoint)))?;
    let status = response.status();
    let bytes = response
        .bytes()
        .await
        .map_err(|e| OAuthError::Http(e.to_string()))?;
    if !status.is_success() {
        return Err(match serde_json::from_slice::<TokenErrorResponse>(&bytes) {
            Ok(e) => OAuthError::Token {
                error: e.error,
                description: e.error_description,
            },
            Err(_) => OAuthError::Http(format!("{}: HTTP {status}", ep.token_endpoint)),
        });
    }
    let token: TokenResponse = serde_json::from_slice(&bytes)
        .map_err(|e| OAuthError::Http(format!("{}: {e}", ep.token_endpoint)))?;
    if let Some(t) = &token.token_type
        && !t.eq_ignore_ascii_case("bearer")
    {
        return Err(OAuthError::Http(format!(
            "token_type {t}: only Bearer tokens are sent"
        )));
    }
    Ok(token)
}

/// `application/x-www-form-urlencoded` of one value.
fn form_encode(v: &str) -> String {
    url::form_urlencoded::byte_serialize(v.as_bytes()).collect()
}

fn stored_from(ep: &Endpoints, client: &Client, t: TokenResponse, old: Option<&Stored>) -> Stored {
    Stored {
        resource: ep.resource.clone(),
        issuer: ep.issuer.clone(),
        client_id: client.id.clone(),
        client_secret: client.secret.clone(),
        access_token: t.access_token,
        // A server that does not rotate refresh tokens keeps the old one valid.
        refresh_token: t
            .refresh_token
            .or_else(|| old.and_then(|o| o.refresh_token.clone())),
        expires_at: t.expires_in.map(|s| now().saturating_add(s)),
        scope: t.scope.or_else(|| old.and_then(|o| o.scope.clone())),
    }
}

/// The scopes to ask for: the entry's, else the resource's.
fn scope_of(cfg: &RemoteOAuth, ep: &Endpoints) -> Option<String> {
    let scopes = cfg.scopes.as_ref().unwrap_or(&ep.scopes_supported);
    (!scopes.is_empty()).then(|| scopes.join(" "))
}

/// The access tokens of one remote server, renewed as needed. Shared by every request of
/// the connection; one renewal at a time.
pub struct TokenSource {
    server: String,
    http: reqwest::Client,
    ep: Endpoints,
    cfg: RemoteOAuth,
    store: Store,
    current: tokio::sync::Mutex<Option<Stored>>,
}

impl TokenSource {
    /// Discover `url`'s authorization and load this user's tokens for it.
    pub async fn new(
        server: &str,
        url: &str,
        cfg: &RemoteOAuth,
        http: reqwest::Client,
    ) -> Result<Arc<TokenSource>, OAuthError> {
        let ep = discover::discover(&http, url, cfg.resource.as_deref()).await?;
        let store = Store::for_user()?;
        let current = store.load(&ep.resource);
        Ok(Arc::new(TokenSource {
            server: server.to_owned(),
            http,
            ep,
            cfg: cfg.clone(),
            store,
            current: tokio::sync::Mutex::new(current),
        }))
    }

    /// A token with time left, renewed first when it has little.
    pub async fn token(&self) -> Result<String, OAuthError> {
        let mut current = self.current.lock().await;
        if let Some(s) = current.as_ref().filter(|s| s.has_time_left()) {
            return Ok(s.access_token.clone());
        }
        self.renew_locked(&mut current).await
    }

    /// After a 401 for `rejected`: a new token (unless another request renewed it already).
    pub async fn renew(&self, rejected: &str) -> Result<String, OAuthError> {
        let mut current = self.current.lock().await;
        if let Some(s) = current.as_ref()
            && s.access_token != rejected
        {
            return Ok(s.access_token.clone());
        }
        self.renew_locked(&mut current).await
    }

    async fn renew_locked(&self, current: &mut Option<Stored>) -> Result<String, OAuthError> {
        // Another process of this user (a second `kitbag serve`) may have renewed it.
        if let Some(on_disk) = self.store.load(&self.ep.resource)
            && current
                .as_ref()
                .is_none_or(|c| c.access_token != on_disk.access_token)
            && on_disk.has_time_left()
        {
            let token = on_disk.access_token.clone();
            *current = Some(on_disk);
            return Ok(token);
        }
        let fresh = match self.cfg.grant {
            Grant::ClientCredentials => self.client_credentials(current.as_ref()).await?,
            Grant::AuthorizationCode => {
                let Some(old) = current.as_ref().filter(|s| s.refresh_token.is_some()) else {
                    return Err(self.login_needed());
                };
                match self.refresh(old).await {
                    Ok(s) => s,
                    // The refresh token is spent or revoked: the user logs in again.
                    Err(OAuthError::Token { error, .. }) if error == "invalid_grant" => {
                        *current = None;
                        let _ = self.store.remove(&self.ep.resource);
                        return Err(self.login_needed());
                    }
                    Err(e) => return Err(e),
                }
            }
        };
        self.store.save(&fresh)?;
        let token = fresh.access_token.clone();
        *current = Some(fresh);
        Ok(token)
    }

    fn login_needed(&self) -> OAuthError {
        OAuthError::LoginNeeded {
            server: self.server.clone(),
            resource: self.ep.resource.clone(),
        }
    }

    async fn refresh(&self, old: &Stored) -> Result<Stored, OAuthError> {
        let client = Client {
            id: old.client_id.clone(),
            secret: old.client_secret.clone(),
        };
        let mut form = vec![
            ("grant_type", "refresh_token".to_string()),
            (
                "refresh_token",
                old.refresh_token.clone().unwrap_or_default(),
            ),
        ];
        if let Some(scope) = &old.scope {
            form.push(("scope", scope.clone()));
        }
        let t = token_request(&self.http, &self.ep, &client, form).await?;
        Ok(stored_from(&self.ep, &client, t, Some(old)))
    }

    async fn client_credentials(&self, old: Option<&Stored>) -> Result<Stored, OAuthError> {
        let client = Client {
            id: self.cfg.client_id.clone().unwrap_or_default(),
            secret: self.cfg.client_secret.clone(),
        };
        let mut form = vec![("grant_type", "client_credentials".to_string())];
        if let Some(scope) = scope_of(&self.cfg, &self.ep) {
            form.push(("scope", scope));
        }
        let t = token_request(&self.http, &self.ep, &client, form).await?;
        Ok(stored_from(&self.ep, &client, t, old))
    }
}
