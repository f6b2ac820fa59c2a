//! Who is calling: the bearer token of a request, checked against the static token
//! (`--auth-token-file`, kept as its SHA-256) or as an OAuth JWT ([`super::oauth`]), becomes a
//! [`Principal`] ([`super::caller`]) that travels with the request to the tools (`tools/list` and calls are
//! filtered by its tiers; the host applies its agent profile).
//!
//! The token itself stops here: it is not in the request handed on, so nothing downstream
//! (a child server, a log) can see it.

use std::sync::Arc;

use http::HeaderMap;
use http::header::AUTHORIZATION;
use sha2::{Digest, Sha256};

use super::caller::Refusal;
use super::oauth::ResourceServer;
use crate::caller::Principal;

/// The static bearer token, kept only as its SHA-256 (a token file may hold the digest
/// itself, `sha256:<hex>`, so the server's disk never holds the secret).
#[derive(Clone, PartialEq, Eq)]
pub struct StaticToken([u8; 32]);

impl std::fmt::Debug for StaticToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StaticToken(..)")
    }
}

impl StaticToken {
    pub fn from_secret(token: &str) -> Self {
        Self(Sha256::digest(token.as_bytes()).into())
    }

    /// `sha256:<64 hex digits>` → the digest.
    pub fn from_digest_text(text: &str) -> Option<Self> {
        let hex = text.strip_prefix("sha256:")?;
        if hex.len() != 64 {
            return None;
        }
        let mut digest = [0u8; 32];
        for (i, byte) in digest.iter_mut().enumerate() {
            *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Self(digest))
    }

    /// Compared as digests, in constant time: neither length nor content leaks.
    pub fn matches(&self, presented: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        digest
            .iter()
            .zip(&self.0)
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
    }
}

/// The authentication a server requires.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    pub token: Option<StaticToken>,
    pub oauth: Option<Arc<ResourceServer>>,
}

impl Auth {
    pub fn required(&self) -> bool {
        self.token.is_some() || self.oauth.is_some()
    }

    /// The caller, or why the request is refused. None when nothing is required.
    pub async fn principal(&self, headers: &HeaderMap) -> Result<Option<Principal>, Refusal> {
        if !self.required() {
            return Ok(None);
        }
        let Some(value) = headers.get(AUTHORIZATION) else {
            return Err(Refusal::Unauthorized {
                error: None,
                description: "send `Authorization: Bearer <token>`".into(),
            });
        };
        let presented = match value.to_str().ok().and_then(|v| v.split_once(' ')) {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest.trim(),
            _ => {
                return Err(Refusal::Unauthorized {
                    error: Some("invalid_request"),
                    description: "the Authorization scheme must be Bearer".into(),
                });
            }
        };
        if let Some(token) = &self.token
            && token.matches(presented)
        {
            return Ok(Some(Principal {
                subject: "static-token".into(),
                anonymous: false,
                agent: None,
                tiers: None,
            }));
        }
        match &self.oauth {
            Some(rs) => rs.authenticate(presented).await.map(Some),
            None => Err(Refusal::invalid_token("wrong bearer token")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tier::Tier;
    use http::HeaderValue;

    fn headers(auth: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(v) = auth {
            h.insert(AUTHORIZATION, HeaderValue::from_str(v).expect("header"));
        }
        h
    }

    #[tokio::test]
    async fn the_static_token_matches_by_digest() {
        let plain = Auth {
            token: Some(StaticToken::from_secret("s3cret-s3cret-s3cret")),
            oauth: None,
        };
        let digest: String = Sha256::digest(b"s3cret-s3cret-s3cret")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let digest = format!("sha256:{digest}");
        let hashed = Auth {
            token: StaticToken::from_digest_text(&digest),
            oauth: None,
        };
        assert!(hashed.token.is_some(), "{digest}");
        for auth in [plain, hashed] {
            let p = auth
                .principal(&headers(Some("Bearer s3cret-s3cret-s3cret")))
                .await
                .expect("ok")
                .expect("principal");
            assert!(p.allows(Tier::Exec));
            assert!(
                auth.principal(&headers(Some("bearer s3cret-s3cret-s3cret")))
                    .await
                    .is_ok()
            );
            for wrong in ["Bearer s3cret", "Basic s3cret-s3cret-s3cret", "Bearer"] {
                assert!(
                    matches!(
                        auth.principal(&headers(Some(wrong))).await,
                        Err(Refusal::Unauthorized { .. })
                    ),
                    "{wrong}"
                );
            }
            assert!(matches!(
                auth.principal(&headers(None)).await,
                Err(Refusal::Unauthorized { error: None, .. })
            ));
        }
        assert!(StaticToken::from_digest_text("sha256:abc").is_none());
        assert!(
            Auth::default()
                .principal(&headers(None))
                .await
                .expect("open")
                .is_none()
        );
    }
}
