//! Who is calling: the [`Principal`] an authenticated request carries to the tools (over HTTP;
//! a stdio client is trusted as the user who started the server and has none).

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
#[cfg(feature = "serving")]
pub fn principal_of(extensions: &rmcp::model::Extensions) -> Option<&Principal> {
    extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>())
}

/// Without HTTP serving there is no authenticated caller.
#[cfg(not(feature = "serving"))]
pub fn principal_of(_extensions: &rmcp::model::Extensions) -> Option<&Principal> {
    None
}
