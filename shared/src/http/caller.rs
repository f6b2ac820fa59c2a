//! What checking an HTTP request yields: its caller ([`Principal`]), which travels with the
//! request to the tools, or why it is turned away ([`Refusal`]). The checks themselves are the
//! guard's (Host, Origin, framing), the static token's and OAuth's ([`super::auth`],
//! [`super::oauth`]).

use std::collections::BTreeSet;

use crate::tier::Tier;

/// The caller of one HTTP request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The token's `sub` (else `client_id`), or `static-token`.
    pub subject: String,
    /// The token names no subject (no `sub`, no `client_id`): `subject` is then made from the
    /// token itself (`unnamed:<digest>`), and sessions refuse the caller.
    pub anonymous: bool,
    /// The agent profile the token names (the host applies it; single servers have none).
    pub agent: Option<String>,
    /// The capability tiers granted; None = all (the static token).
    pub tiers: Option<BTreeSet<Tier>>,
}

impl Principal {
    pub fn allows(&self, tier: Tier) -> bool {
        self.tiers.as_ref().is_none_or(|t| t.contains(&tier))
    }
}

/// The principal of the HTTP request a tool call or list came in on (None over stdio, or
/// when no authentication is configured).
pub fn principal_of(extensions: &rmcp::model::Extensions) -> Option<&Principal> {
    extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>())
}

/// Why a request was turned away (the HTTP status says which kind).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 400: a request no client of ours sends (two `Host` headers, an absolute-form target).
    BadRequest(String),
    /// 403: a `Host` or `Origin` this server does not answer to.
    Forbidden(String),
    /// 401. `error` is RFC 6750's code (`invalid_token`), absent when no token was sent.
    Unauthorized {
        error: Option<&'static str>,
        description: String,
    },
    /// 403 `insufficient_scope`: `scope` is what the request needs.
    InsufficientScope { scope: String, description: String },
    /// 503: the token cannot be checked now (the issuer's keys are unreachable).
    Unavailable(String),
}

impl Refusal {
    pub fn invalid_token(description: impl Into<String>) -> Self {
        Refusal::Unauthorized {
            error: Some("invalid_token"),
            description: description.into(),
        }
    }
}
