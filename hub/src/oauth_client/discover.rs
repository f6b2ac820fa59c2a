//! Where a remote MCP server's tokens come from: its protected-resource metadata (RFC 9728,
//! found through the 401's `WWW-Authenticate: Bearer resource_metadata=…` or the well-known
//! path), then its authorization server's metadata (RFC 8414, or OpenID discovery).

use serde::Deserialize;

use super::OAuthError;

/// The endpoints of one remote server's authorization.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoints {
    /// The resource the tokens are for (RFC 8707 `resource`): the server's canonical URL.
    pub resource: String,
    pub issuer: String,
    pub authorization_endpoint: Option<String>,
    pub token_endpoint: String,
    pub registration_endpoint: Option<String>,
    /// What the resource says it understands (the default scopes to ask for).
    pub scopes_supported: Vec<String>,
    /// The authorization server offers PKCE with S256 (required for the code flow).
    pub pkce_s256: bool,
    /// `client_secret_basic` (the default) or `client_secret_post`.
    pub secret_in_body: bool,
}

#[derive(Deserialize)]
struct ResourceMetadata {
    resource: String,
    #[serde(default)]
    authorization_servers: Vec<String>,
    #[serde(default)]
    scopes_supported: Vec<String>,
}

#[derive(Deserialize)]
struct ServerMetadata {
    issuer: String,
    #[serde(default)]
    authorization_endpoint: Option<String>,
    token_endpoint: String,
    #[serde(default)]
    registration_endpoint: Option<String>,
    #[serde(default)]
    code_challenge_methods_supported: Vec<String>,
    #[serde(default)]
    token_endpoint_auth_methods_supported: Vec<String>,
}

/// Discover the authorization of the MCP server at `mcp_url`, whose canonical resource is
/// `expected` (default: `mcp_url` itself).
pub async fn discover(
    http: &reqwest::Client,
    mcp_url: &str,
    expected: Option<&str>,
) -> Result<Endpoints, OAuthError> {
    // The 401's link first; then the well-known path at the address reached (the link names
    // the canonical host, which a port-forward or proxy may not resolve).
    let mut candidates: Vec<String> = challenge_metadata(http, mcp_url)
        .await
        .into_iter()
        .collect();
    let well_known = well_known_resource(mcp_url)?;
    if !candidates.contains(&well_known) {
        candidates.push(well_known);
    }
    let mut found = None;
    let mut last = None;
    for url in candidates {
        match get_json::<ResourceMetadata>(http, &url).await {
            Ok(prm) => {
                found = Some((prm, url));
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let Some((prm, metadata_url)) = found else {
        return Err(last.unwrap_or(OAuthError::Discovery {
            url: mcp_url.to_owned(),
            reason: "no protected-resource metadata".into(),
        }));
    };
    // RFC 9728 §3.3: the metadata must be about the resource the client meant to reach, or a
    // server could have tokens minted for another one.
    let expected = expected.unwrap_or(mcp_url);
    if !same_resource(&prm.resource, expected) {
        return Err(OAuthError::ResourceMismatch {
            metadata: prm.resource,
            expected: expected.to_owned(),
        });
    }
    let issuer = prm
        .authorization_servers
        .first()
        .ok_or_else(|| OAuthError::Discovery {
            url: metadata_url.clone(),
            reason: "authorization_servers is empty".into(),
        })?
        .clone();
    let mut last = None;
    for url in server_metadata_urls(&issuer)? {
        match get_json::<ServerMetadata>(http, &url).await {
            Ok(meta) => {
                // RFC 8414 §3.3: the issuer in the document is the one asked about.
                if meta.issuer.trim_end_matches('/') != issuer.trim_end_matches('/') {
                    return Err(OAuthError::Discovery {
                        url,
                        reason: format!("its issuer is {}, not {issuer}", meta.issuer),
                    });
                }
                return Ok(Endpoints {
                    resource: prm.resource,
                    issuer,
                    authorization_endpoint: meta.authorization_endpoint,
                    token_endpoint: meta.token_endpoint,
                    registration_endpoint: meta.registration_endpoint,
                    scopes_supported: prm.scopes_supported,
                    pkce_s256: meta
                        .code_challenge_methods_supported
                        .iter()
                        .any(|m| m == "S256"),
                    secret_in_body: !meta.token_endpoint_auth_methods_supported.is_empty()
                        && !meta
                            .token_endpoint_auth_methods_supported
                            .iter()
                            .any(|m| m == "client_secret_basic"),
                });
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or(OAuthError::Discovery {
        url: issuer,
        reason: "no metadata".into(),
    }))
}

/// An unauthenticated request's 401 names the metadata (MCP's authorization rules).
async fn challenge_metadata(http: &reqwest::Client, mcp_url: &str) -> Option<String> {
    let probe = serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "kitbag", "version": env!("CARGO_PKG_VERSION")}}});
    let response = http
        .post(mcp_url)
        .header("accept", "application/json, text/event-stream")
        .json(&probe)
        .send()
        .await
        .ok()?;
    if response.status() != reqwest::StatusCode::UNAUTHORIZED {
        return None;
    }
    let header = response
        .headers()
        .get_all(reqwest::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| auth_param(v, "resource_metadata"))?;
    Some(header)
}

/// A parameter of a `WWW-Authenticate` challenge (`name="value"` or `name=value`).
fn auth_param(header: &str, name: &str) -> Option<String> {
    let at = header.find(&format!("{name}="))?;
    let rest = &header[at + name.len() + 1..];
    match rest.strip_prefix('"') {
        Some(quoted) => Some(quoted.split('"').next()?.to_owned()),
        None => Some(rest.split([',', ' ']).next()?.to_owned()),
    }
}

/// `https://host/.well-known/oauth-protected-resource/path` (RFC 9728 §3.1).
fn well_known_resource(mcp_url: &str) -> Result<String, OAuthError> {
    let url = url::Url::parse(mcp_url).map_err(|e| OAuthError::Discovery {
        url: mcp_url.to_owned(),
        reason: e.to_string(),
    })?;
    let path = url.path().trim_end_matches('/');
    Ok(format!(
        "{}/.well-known/oauth-protected-resource{path}",
        url.origin().ascii_serialization()
    ))
}

/// RFC 8414's insertion of the well-known segment, then OpenID discovery (both forms).
fn server_metadata_urls(issuer: &str) -> Result<Vec<String>, OAuthError> {
    let url = url::Url::parse(issuer).map_err(|e| OAuthError::Discovery {
        url: issuer.to_owned(),
        reason: e.to_string(),
    })?;
    let origin = url.origin().ascii_serialization();
    let path = url.path().trim_end_matches('/');
    Ok(vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{origin}/.well-known/openid-configuration{path}"),
        format!("{origin}{path}/.well-known/openid-configuration"),
    ])
}

/// Two resource URLs naming the same resource (a trailing slash aside).
fn same_resource(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

async fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &str,
) -> Result<T, OAuthError> {
    let fail = |reason: String| OAuthError::Discovery {
        url: url.to_owned(),
        reason,
    };
    let response = http
        .get(url)
        .header("accept", "application/json")
        .send()
        .await
        .map_err(|e| fail(e.to_string()))?;
    if !response.status().is_success() {
        return Err(fail(format!("HTTP {}", response.status())));
    }
    let bytes = response.bytes().await.map_err(|e| fail(e.to_string()))?;
    serde_json::from_slice(&bytes).map_err(|e| fail(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenge_parameters_and_well_known_paths() {
        let h = r#"Bearer error="invalid_token", resource_metadata="https://a.test/.well-known/oauth-protected-resource/mcp""#;
        assert_eq!(
            auth_param(h, "resource_metadata").as_deref(),
            Some("https://a.test/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(
            auth_param(
                "Bearer resource_metadata=https://x/y, scope=a",
                "resource_metadata"
            )
            .as_deref(),
            Some("https://x/y")
        );
        assert_eq!(
            well_known_resource("https://a.test/team/mcp").expect("url"),
            "https://a.test/.well-known/oauth-protected-resource/team/mcp"
        );
        assert_eq!(
            server_metadata_urls("https://login.test/tenant1").expect("urls")[0],
            "https://login.test/.well-known/oauth-authorization-server/tenant1"
        );
        assert!(same_resource("https://a.test/mcp/", "https://a.test/mcp"));
        assert!(!same_resource("https://a.test/mcp", "https://b.test/mcp"));
    }
}
