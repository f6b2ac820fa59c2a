//! `kitbag auth login|status|logout`: a person's tokens for the remote servers of the config
//! whose entries have `oauth`. Login is the authorization-code flow with PKCE (S256) and a
//! loopback redirect (RFC 8252): the URL to open goes to stderr (and to the browser when one
//! can be started), the redirect lands on a one-shot listener on 127.0.0.1, and the tokens go
//! to the user's store.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{
    Client, Endpoints, OAuthError, Store, discover, now, scope_of, stored_from, token_request,
};
use kitbag_config::Config;
use kitbag_config::entry::{Grant, RemoteOAuth};

/// How long the redirect is waited for.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(300);

/// `kitbag auth` actions.
#[derive(Debug, clap::Subcommand)]
pub enum AuthCommand {
    /// Log in to a remote server of the config (its entry has `oauth`).
    Login {
        server: String,
        /// Only print the URL to open (no browser is started).
        #[arg(long)]
        no_browser: bool,
    },
    /// Each OAuth server of the config: logged in or not, until when.
    Status,
    /// Forget the tokens of a remote server.
    Logout { server: String },
}

/// Run `kitbag auth …`; the exit code.
pub async fn command(cfg: &Config, action: &AuthCommand) -> anyhow::Result<i32> {
    let store = Store::for_user()?;
    let http = http_client();
    match action {
        AuthCommand::Login { server, no_browser } => {
            let (url, oauth) = oauth_entry(cfg, server)?;
            let stored = login(&http, &store, server, &url, &oauth, !no_browser).await?;
            eprintln!(
                "logged in to {server}{}; tokens kept in {}",
                stored
                    .scope
                    .map(|s| format!(" (scope {s})"))
                    .unwrap_or_default(),
                store.dir().display()
            );
            Ok(0)
        }
        AuthCommand::Status => {
            for spec in &cfg.servers {
                let (Some(url), Some(oauth)) = (&spec.entry.url, &spec.entry.oauth) else {
                    continue;
                };
                let resource = oauth.resource.clone().unwrap_or_else(|| url.clone());
                let state = match store.load(&resource) {
                    None => "not logged in".to_string(),
                    Some(s) => match (s.expires_at, &s.refresh_token) {
                        (Some(t), None) if t <= now() => "expired".into(),
                        (Some(t), _) if t > now() => {
                            format!("logged in, token valid {} s more", t - now())
                        }
                        (_, Some(_)) => "logged in (renewed when used)".into(),
                        _ => "logged in".into(),
                    },
                };
                println!("{}\t{state}", spec.name);
            }
            Ok(0)
        }
        AuthCommand::Logout { server } => {
            let (url, oauth) = oauth_entry(cfg, server)?;
            let resource = oauth.resource.clone().unwrap_or(url);
            let removed = store.remove(&resource)?;
            eprintln!(
                "{server}: {}",
                if removed {
                    "tokens removed"
                } else {
                    "no tokens were kept"
                }
            );
            Ok(0)
        }
    }
}

pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        // Redirects are not followed: every OAuth answer is read as it is.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_default()
}

/// The entry `server`: its URL and `oauth`, with the authorization-code grant.
fn oauth_entry(cfg: &Config, server: &str) -> anyhow::Result<(String, RemoteOAuth)> {
    let Some(spec) = cfg.servers.iter().find(|s| s.name == server) else {
        let names: Vec<&str> = cfg
            .servers
            .iter()
            .filter(|s| s.entry.oauth.is_some())
            .map(|s| s.name.as_str())
            .collect();
        anyhow::bail!("no server {server:?} in the config (servers with oauth: {names:?})");
    };
    if let Some(e) = &spec.error {
        anyhow::bail!("{server}: {e}");
    }
    match (&spec.entry.url, &spec.entry.oauth) {
        (Some(url), Some(oauth)) if oauth.grant == Grant::AuthorizationCode => {
            Ok((url.clone(), oauth.clone()))
        }
        (Some(_), Some(_)) => anyhow::bail!(
            "{server}: its grant is client_credentials: the host gets its tokens itself, no login"
        ),
        _ => anyhow::bail!("{server}: not a remote server with `oauth` in its entry"),
    }
}

/// The whole login: discovery, the client (configured or registered), the browser round,
/// the code exchanged, the tokens stored.
pub async fn login(
    http: &reqwest::Client,
    store: &Store,
    server: &str,
    url: &str,
    cfg: &RemoteOAuth,
    open_browser: bool,
) -> Result<super::Stored, OAuthError> {
    let ep = discover::discover(http, url, cfg.resource.as_deref()).await?;
    let authorize = ep.authorization_endpoint.clone().ok_or_else(|| {
        OAuthError::Flow("the authorization server has no authorization_endpoint".into())
    })?;
    if !ep.pkce_s256 {
        // MCP's authorization rules: no PKCE, no code flow.
        return Err(OAuthError::Flow(
            "the authorization server does not offer PKCE with S256 (code_challenge_methods_supported)".into(),
        ));
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(OAuthError::Store)?;
    let port = listener.local_addr().map_err(OAuthError::Store)?.port();
    let redirect = format!("http://127.0.0.1:{port}/callback");
    let client = match &cfg.client_id {
        Some(id) => Client {
            id: id.clone(),
            secret: cfg.client_secret.clone(),
        },
        None => register(http, &ep, &redirect).await?,
    };
    let verifier = random_b64(32)?;
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    let state = random_b64(16)?;
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    query
        .append_pair("response_type", "code")
        .append_pair("client_id", &client.id)
        .append_pair("redirect_uri", &redirect)
        .append_pair("code_challenge", &challenge)
        .append_pair("code_challenge_method", "S256")
        .append_pair("state", &state)
        .append_pair("resource", &ep.resource);
    if let Some(scope) = scope_of(cfg, &ep) {
        query.append_pair("scope", &scope);
    }
    let sep = if authorize.contains('?') { '&' } else { '?' };
    let link = format!("{authorize}{sep}{}", query.finish());
    eprintln!("To log in to {server}, open:\n{link}");
    if open_browser {
        open(&link);
    }
    let code = tokio::time::timeout(LOGIN_TIMEOUT, redirected(&listener, &state))
        .await
        .map_err(|_| {
            OAuthError::Flow(format!("no redirect within {} s", LOGIN_TIMEOUT.as_secs()))
        })??;
    let form = vec![
        ("grant_type", "authorization_code".to_string()),
        ("code", code),
        ("redirect_uri", redirect),
        ("code_verifier", verifier),
    ];
    let t = token_request(http, &ep, &client, form).await?;
    let stored = stored_from(&ep, &client, t, None);
    store.save(&stored)?;
    Ok(stored)
}

/// RFC 7591 dynamic registration of a public client with this redirect.
async fn register(
    http: &reqwest::Client,
    ep: &Endpoints,
    redirect: &str,
) -> Result<Client, OAuthError> {
    let Some(endpoint) = &ep.registration_endpoint else {
        return Err(OAuthError::Flow(
            "the authorization server offers no registration: set oauth.client_id in the entry"
                .into(),
        ));
    };
    #[derive(serde::Deserialize)]
    struct Registered {
        client_id: String,
        #[serde(default)]
        client_secret: Option<String>,
    }
    let body = serde_json::json!({
        "client_name": "kitbag",
        "redirect_uris": [redirect],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    });
    let response = http
        .post(endpoint)
        .json(&body)
        .send()
        .await
        .map_err(|e| OAuthError::Http(format!("{endpoint}: {e}")))?;
    let status = response.status();
    let bytes = response
        .bytes()
        .await
        .map_err(|e| OAuthError::Http(e.to_string()))?;
    if !status.is_success() {
        return Err(OAuthError::Flow(format!(
            "registration at {endpoint}: HTTP {status}: {}",
            String::from_utf8_lossy(&bytes)
                .chars()
                .take(300)
                .collect::<String>()
        )));
    }
    let r: Registered = serde_json::from_slice(&bytes)
        .map_err(|e| OAuthError::Flow(format!("registration at {endpoint}: {e}")))?;
    Ok(Client {
        id: r.client_id,
        secret: r.client_secret,
    })
}

/// Wait for the browser's redirect to `/callback`: the code, once `state` matches.
async fn redirected(listener: &tokio::net::TcpListener, state: &str) -> Result<String, OAuthError> {
    loop {
        let (mut conn, _) = listener.accept().await.map_err(OAuthError::Store)?;
        let mut buf = vec![0u8; 16 * 1024];
        let mut len = 0;
        // The request line and headers: enough to read the query.
        while len < buf.len() && !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
            match tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf[len..])).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
                Ok(Ok(n)) => len += n,
            }
        }
        let head = String::from_utf8_lossy(&buf[..len]).to_string();
        let target = head.split_whitespace().nth(1).unwrap_or("/").to_string();
        let Some(query) = target.strip_prefix("/callback?") else {
            let _ = reply(&mut conn, "404 Not Found", "Not the login redirect.").await;
            continue;
        };
        let pairs: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
        let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        if get("state").as_deref() != Some(state) {
            // Not our request (a stale tab, a forged link): ignored, keep waiting.
            let _ = reply(
                &mut conn,
                "400 Bad Request",
                "This login link is not the current one.",
            )
            .await;
            continue;
        }
        if let Some(error) = get("error") {
            let _ = reply(
                &mut conn,
                "200 OK",
                "Login refused. You can close this tab.",
            )
            .await;
            return Err(OAuthError::Token {
                error,
                description: get("error_description"),
            });
        }
        let Some(code) = get("code") else {
            let _ = reply(&mut conn, "400 Bad Request", "No code in the redirect.").await;
            continue;
        };
        let _ = reply(
            &mut conn,
            "200 OK",
            "Logged in to kitbag. You can close this tab.",
        )
        .await;
        return Ok(code);
    }
}

async fn reply(conn: &mut tokio::net::TcpStream, status: &str, text: &str) -> std::io::Result<()> {
    let response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
    conn.write_all(response.as_bytes()).await
}

/// `bytes` random bytes, base64url (PKCE verifier: 32 bytes → 43 characters).
fn random_b64(bytes: usize) -> Result<String, OAuthError> {
    use ring::rand::SecureRandom;
    let mut raw = vec![0u8; bytes];
    ring::rand::SystemRandom::new()
        .fill(&mut raw)
        .map_err(|_| OAuthError::Flow("the system's random source failed".into()))?;
    Ok(URL_SAFE_NO_PAD.encode(raw))
}

/// Start the user's browser on `link` when there is a display (best effort; the URL is
/// printed either way).
fn open(link: &str) {
    let graphical = std::env::var_os("DISPLAY").is_some()
        || std::env::var_os("WAYLAND_DISPLAY").is_some()
        || std::env::var_os("BROWSER").is_some();
    if !graphical {
        return;
    }
    let program = std::env::var("BROWSER").unwrap_or_else(|_| "xdg-open".into());
    let _ = std::process::Command::new(program)
        .arg(link)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map(|mut child| std::thread::spawn(move || child.wait()));
}
