//! The OAuth 2.1 resource server (MCP authorization, RFC 9728): kitbag publishes which
//! authorization server issues its tokens, and accepts a request when its bearer JWT was
//! signed by that issuer's published keys for this resource (audience), is in date, and grants
//! the scopes asked for. Scopes name capability tiers ([`crate::tier`]); a claim may name the
//! agent profile the host applies.
//!
//! The issuer's keys are fetched from its JWK set (found through its RFC 8414 / OpenID
//! metadata unless given), kept for their cache lifetime, and fetched again — at most every
//! [`MIN_REFRESH`] — when a token names a key not yet seen (the issuer rotated).

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;
use serde_json::{Value, json};

use super::caller::Refusal;
use super::jwt::{self, Jwk, JwtError};
use crate::caller::Principal;
use crate::lock::RwLockExt;
use crate::tier::Tier;

/// A key set is kept this long unless the issuer's Cache-Control says otherwise.
const DEFAULT_KEYS_TTL: Duration = Duration::from_secs(600);
/// Bounds on the issuer's max-age.
const KEYS_TTL_RANGE: (Duration, Duration) =
    (Duration::from_secs(60), Duration::from_secs(24 * 3600));
/// By default, a token naming an unknown key fetches the set again at most this often (a
/// flood of made-up kids must not become a flood of requests to the issuer).
pub const MIN_REFRESH: Duration = Duration::from_secs(30);
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_DOCUMENT_BYTES: usize = 1 << 20;
/// Tolerated clock skew.
const LEEWAY_SECS: u64 = 60;

/// The OAuth settings (`--oauth-*`).
#[derive(Debug, Clone)]
pub struct OAuthConfig {
    /// The authorization server's issuer identifier; tokens' `iss` must equal it.
    pub issuer: String,
    /// This server's canonical URL (the `/mcp` endpoint clients use); tokens' `aud`.
    pub resource: String,
    /// The issuer's JWK set; found through its metadata when None.
    pub jwks_url: Option<String>,
    /// Prepended to the tier names to make the scopes tokens carry (`""`: `read`, `write`,
    /// `exec`, `external`; `"kitbag:"`: `kitbag:read`, …).
    pub scope_prefix: String,
    /// The claim naming the agent profile.
    pub agent_claim: String,
    /// Scopes every request needs, besides tiers.
    pub required_scopes: Vec<String>,
    /// At most one fetch of the key set per this long for unknown keys ([`MIN_REFRESH`]).
    pub min_refresh: Duration,
}

impl OAuthConfig {
    /// Checks that the URLs are usable: https, or http on a loopback address only.
    pub fn check(&self) -> anyhow::Result<()> {
        check_url("--oauth-issuer", &self.issuer)?;
        check_url("--oauth-resource", &self.resource)?;
        match &self.jwks_url {
            Some(url) => check_url("--oauth-jwks-url", url),
            None => Ok(()),
        }
    }

    /// The scope that grants `tier`.
    pub fn scope_of(&self, tier: Tier) -> String {
        format!("{}{}", self.scope_prefix, tier.as_str())
    }
}

/// `url` is https, or http on a loopback address; `what` names it in the error.
fn check_url(what: &str, url: &str) -> anyhow::Result<()> {
    let parsed =
        url::Url::parse(url).map_err(|e| anyhow::anyhow!("{what} {url}: not a URL ({e})"))?;
    let loopback = match parsed.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    let secure = parsed.scheme() == "https" || (parsed.scheme() == "http" && loopback);
    if !secure || parsed.fragment().is_some() {
        anyhow::bail!(
            "{what} {url}: expected an https:// URL without a fragment (http:// only on a loopback address)"
        );
    }
    Ok(())
}

/// Where the protected-resource metadata is served (RFC 9728 §3.1: the well-known prefix
/// between the authority and the resource's path), as a path on this server and as a URL.
pub fn metadata_location(resource: &str) -> (String, String) {
    let Ok(url) = url::Url::parse(resource) else {
        return (WELL_KNOWN.into(), WELL_KNOWN.into());
    };
    let path = url.path().trim_end_matches('/');
    let local = format!("{WELL_KNOWN}{path}");
    let mut full = url.clone();
    full.set_path(&local);
    full.set_query(None);
    (local, full.to_string())
}

pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

struct KeySet {
    keys: Vec<Jwk>,
    fetched: Option<Instant>,
    ttl: Duration,
    last_attempt: Option<Instant>,
}

pub struct ResourceServer {
    pub config: OAuthConfig,
    /// Path and URL of the metadata document.
    pub metadata_path: String,
    pub metadata_url: String,
    keys: RwLock<Arc<KeySet>>,
    /// One fetch at a time; others wait for its result.
    fetching: tokio::sync::Mutex<()>,
    client: reqwest::Client,
}

impl std::fmt::Debug for ResourceServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceServer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ResourceServer {
    pub fn new(config: OAuthConfig) -> anyhow::Result<Self> {
        config.check()?;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| anyhow::anyhow!("the HTTP client for the issuer's keys: {e}"))?;
        let (metadata_path, metadata_url) = metadata_location(&config.resource);
        Ok(Self {
            config,
            metadata_path,
            metadata_url,
            keys: RwLock::new(Arc::new(KeySet {
                keys: Vec::new(),
                fetched: None,
                ttl: DEFAULT_KEYS_TTL,
                last_attempt: None,
            })),
            fetching: tokio::sync::Mutex::new(()),
            client,
        })
    }

    /// The protected-resource metadata document (RFC 9728 §2).
    pub fn metadata(&self) -> Value {
        let mut scopes: Vec<String> = Tier::ALL.iter().map(|t| self.config.scope_of(*t)).collect();
        scopes.extend(self.config.required_scopes.iter().cloned());
        json!({
            "resource": self.config.resource,
            "authorization_servers": [self.config.issuer],
            "scopes_supported": scopes,
            "bearer_methods_supported": ["header"],
            "resource_name": "kitbag",
        })
    }

    /// Fetch the keys now (at start, so the first request does not wait); a failure is
    /// logged and retried when a token arrives.
    pub async fn warm(&self) {
        if let Err(e) = self.refresh(true).await {
            tracing::warn!("OAuth: the issuer's keys could not be fetched yet: {e}");
        }
    }

    /// Who `token` speaks for, or why it is refused.
    pub async fn authenticate(&self, token: &str) -> Result<Principal, Refusal> {
        let invalid = |e: JwtError| Refusal::invalid_token(e.to_string());
        let decoded = jwt::decode(token).map_err(invalid)?;
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let expect = jwt::Expect {
            issuer: &self.config.issuer,
            audience: &self.config.resource,
            now,
            leeway: LEEWAY_SECS,
        };
        let mut keys = self.current().await?;
        let claims = match decoded.verify(&keys.keys, &expect) {
            Err(JwtError::UnknownKey(_)) => {
                // Perhaps rotated: fetch again (rate-limited) and try once more.
                if self.refresh(false).await.is_ok() {
                    keys = self.keys.read_locked().clone();
                }
                decoded.verify(&keys.keys, &expect)
            }
            other => other,
        }
        .map_err(invalid)?;
        let mut principal = self.principal(&claims)?;
        if principal.anonymous {
            principal.subject = unnamed_subject(token);
        }
        Ok(principal)
    }

    /// Claims → principal; the required scopes are checked here.
    fn principal(&self, claims: &serde_json::Map<String, Value>) -> Result<Principal, Refusal> {
        let scopes = jwt::scopes(claims);
        let missing: Vec<&String> = self
            .config
            .required_scopes
            .iter()
            .filter(|s| !scopes.contains(s))
            .collect();
        if !missing.is_empty() {
            return Err(Refusal::InsufficientScope {
                scope: self.config.required_scopes.join(" "),
                description: format!(
                    "the token lacks scope {}",
                    missing
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        let tiers: BTreeSet<Tier> = scopes
            .iter()
            .filter_map(|s| s.strip_prefix(self.config.scope_prefix.as_str()))
            .filter_map(Tier::parse)
            .collect();
        let text = |name: &str| {
            claims
                .get(name)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(String::from)
        };
        let subject = text("sub").or_else(|| text("client_id"));
        Ok(Principal {
            anonymous: subject.is_none(),
            // Made from the token by `authenticate`, which has it.
            subject: subject.unwrap_or_default(),
            agent: text(&self.config.agent_claim),
            tiers: Some(tiers),
        })
    }

    /// The key set, fetched first when there is none or it is past its lifetime.
    async fn current(&self) -> Result<Arc<KeySet>, Refusal> {
        let keys = self.keys.read_locked().clone();
        let stale = keys.fetched.is_none_or(|t| t.elapsed() > keys.ttl);
        if !stale {
            return Ok(keys);
        }
        match self.refresh(false).await {
            Ok(()) => Ok(self.keys.read_locked().clone()),
            // Old keys stay usable while the issuer is unreachable.
            Err(_) if !keys.keys.is_empty() => Ok(keys),
            Err(e) => Err(Refusal::Unavailable(format!(
                "the issuer's signing keys could not be fetched: {e}"
            ))),
        }
    }

    /// Fetch the key set unless another fetch just happened (`force` skips that wait).
    async fn refresh(&self, force: bool) -> anyhow::Result<()> {
        let _one = self.fetching.lock().await;
        let before = self.keys.read_locked().clone();
        let min = self.config.min_refresh;
        if !force && before.last_attempt.is_some_and(|t| t.elapsed() < min) {
            return if before.keys.is_empty() {
                anyhow::bail!("the last fetch failed less than {min:?} ago")
            } else {
                Ok(())
            };
        }
        let fetched = self.fetch_keys().await;
        let mut next = KeySet {
            keys: before.keys.clone(),
            fetched: before.fetched,
            ttl: before.ttl,
            last_attempt: Some(Instant::now()),
        };
        let result = match fetched {
            Ok((keys, ttl)) => {
                next.keys = keys;
                next.fetched = Some(Instant::now());
                next.ttl = ttl;
                Ok(())
            }
            Err(e) => Err(e),
        };
        *self.keys.write_locked() = Arc::new(next);
        result
    }

    async fn fetch_keys(&self) -> anyhow::Result<(Vec<Jwk>, Duration)> {
        let url = match &self.config.jwks_url {
            Some(url) => url.clone(),
            None => self.discover_jwks_url().await?,
        };
        let (body, ttl) = self.get(&url).await?;
        let keys = jwt::parse_jwks(&body).map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
        if keys.is_empty() {
            anyhow::bail!("{url}: the key set has no signing key this server can use");
        }
        Ok((keys, ttl))
    }

    /// The issuer's `jwks_uri`, from its RFC 8414 metadata, else its OpenID configuration.
    async fn discover_jwks_url(&self) -> anyhow::Result<String> {
        #[derive(Deserialize)]
        struct Metadata {
            issuer: Option<String>,
            jwks_uri: Option<String>,
        }
        let issuer = url::Url::parse(&self.config.issuer)?;
        let path = issuer.path().trim_end_matches('/');
        let mut oauth = issuer.clone();
        oauth.set_path(&format!("/.well-known/oauth-authorization-server{path}"));
        let openid = format!(
            "{}/.well-known/openid-configuration",
            self.config.issuer.trim_end_matches('/')
        );
        let mut errors = Vec::new();
        for url in [oauth.to_string(), openid] {
            match self.get(&url).await {
                Ok((body, _)) => {
                    let meta: Metadata = serde_json::from_slice(&body).map_err(|e| {
                        anyhow::anyhow!("{url}: not authorization-server metadata: {e}")
                    })?;
                    if meta.issuer.as_deref() != Some(self.config.issuer.as_str()) {
                        anyhow::bail!(
                            "{url}: names issuer {:?}, not {}",
                            meta.issuer,
                            self.config.issuer
                        );
                    }
                    let jwks = meta
                        .jwks_uri
                        .ok_or_else(|| anyhow::anyhow!("{url}: no jwks_uri"))?;
                    check_url(&format!("{url}: jwks_uri"), &jwks)?;
                    return Ok(jwks);
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        anyhow::bail!(
            "no metadata found for issuer {} ({}); give --oauth-jwks-url",
            self.config.issuer,
            errors.join("; ")
        )
    }

    /// GET a JSON document (bounded), with its cache lifetime.
    async fn get(&self, url: &str) -> anyhow::Result<(Vec<u8>, Duration)> {
        let mut response = self
            .client
            .get(url)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
        if !response.status().is_success() {
            anyhow::bail!("{url}: HTTP {}", response.status());
        }
        let ttl = response
            .headers()
            .get("cache-control")
            .and_then(|v| v.to_str().ok())
            .and_then(max_age)
            .map_or(DEFAULT_KEYS_TTL, |t| {
                t.clamp(KEYS_TTL_RANGE.0, KEYS_TTL_RANGE.1)
            });
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| anyhow::anyhow!("{url}: {e}"))?
        {
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                anyhow::bail!("{url}: larger than {MAX_DOCUMENT_BYTES} bytes");
            }
            body.extend_from_slice(&chunk);
        }
        Ok((body, ttl))
    }
}

/// `max-age=N` of a Cache-Control value.
fn max_age(value: &str) -> Option<Duration> {
    value.split(',').find_map(|d| {
        let (k, v) = d.trim().split_once('=')?;
        (k.trim().eq_ignore_ascii_case("max-age"))
            .then(|| v.trim().parse::<u64>().ok().map(Duration::from_secs))
            .flatten()
    })
}

/// The subject of a token that names none (no `sub`, no `client_id`): `unnamed:` and the first
/// 16 hex digits of the token's SHA-256. What is bound to a caller — a parked input-required
/// call (the host's `requestState`) — is then bound to this very token, not shared by every
/// token without a subject; sessions still refuse such callers (`anonymous`).
pub fn unnamed_subject(token: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(token.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("unnamed:{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> OAuthConfig {
        OAuthConfig {
            issuer: "https://as.example".into(),
            resource: "https://kitbag.example/team/mcp".into(),
            jwks_url: None,
            scope_prefix: "kitbag:".into(),
            agent_claim: "kitbag_agent".into(),
            required_scopes: vec!["mcp".into()],
            min_refresh: MIN_REFRESH,
        }
    }

    #[test]
    fn metadata_sits_at_the_well_known_path_of_the_resource() {
        let (path, url) = metadata_location("https://kitbag.example/team/mcp");
        assert_eq!(path, "/.well-known/oauth-protected-resource/team/mcp");
        assert_eq!(
            url,
            "https://kitbag.example/.well-known/oauth-protected-resource/team/mcp"
        );
        let rs = ResourceServer::new(config()).expect("rs");
        let doc = rs.metadata();
        assert_eq!(doc["resource"], "https://kitbag.example/team/mcp");
        assert_eq!(doc["authorization_servers"][0], "https://as.example");
        assert_eq!(doc["scopes_supported"][2], "kitbag:exec");
    }

    #[test]
    fn only_https_or_loopback_http() {
        let with = |issuer: &str| OAuthConfig {
            issuer: issuer.into(),
            ..config()
        };
        assert!(with("http://127.0.0.1:9/").check().is_ok());
        assert!(with("http://localhost:9").check().is_ok());
        assert!(with("http://as.example").check().is_err());
        assert!(with("https://as.example/#x").check().is_err());
        assert!(with("not a url").check().is_err());
    }

    #[test]
    fn claims_become_a_principal_and_required_scopes_are_enforced() {
        let rs = ResourceServer::new(config()).expect("rs");
        let claims = |v: Value| v.as_object().cloned().expect("object");
        let p = rs
            .principal(&claims(
                json!({"sub": "ada", "scope": "mcp kitbag:read kitbag:exec read",
                "kitbag_agent": "reviewer"}),
            ))
            .expect("principal");
        assert_eq!((p.subject.as_str(), p.anonymous), ("ada", false));
        assert_eq!(p.agent.as_deref(), Some("reviewer"));
        let client = rs
            .principal(&claims(json!({"client_id": "ci", "scope": "mcp"})))
            .expect("principal");
        assert_eq!((client.subject.as_str(), client.anonymous), ("ci", false));
        for nobody in [json!({"scope": "mcp"}), json!({"sub": "", "scope": "mcp"})] {
            let p = rs.principal(&claims(nobody)).expect("principal");
            assert!(p.anonymous, "no subject is nobody in particular");
        }
        // Two tokens without a subject are two callers: nothing bound to one reaches the other.
        let (a, b) = (unnamed_subject("token-a"), unnamed_subject("token-b"));
        assert!(a.starts_with("unnamed:") && a.len() == "unnamed:".len() + 16);
        assert_ne!(a, b);
        assert_eq!(a, unnamed_subject("token-a"));
        assert_eq!(p.tiers, Some(BTreeSet::from([Tier::Read, Tier::Exec])));
        let refused = rs.principal(&claims(json!({"sub": "ada", "scope": "kitbag:read"})));
        assert!(
            matches!(refused, Err(Refusal::InsufficientScope { ref scope, .. }) if scope == "mcp")
        );
    }

    #[test]
    fn cache_control_max_age() {
        assert_eq!(
            max_age("public, max-age=300"),
            Some(Duration::from_secs(300))
        );
        assert_eq!(max_age("no-store"), None);
    }
}
