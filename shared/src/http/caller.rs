//! What checking an HTTP request yields: its caller ([`crate::caller::Principal`]), which travels with the
//! request to the tools, or why it is turned away ([`Refusal`]). The checks themselves are the
//! guard's (Host, Origin, framing), the static token's and OAuth's ([`super::auth`],
//! [`super::oauth`]).

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
