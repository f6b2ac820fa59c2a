//! What can go wrong talking to a model, typed so that the loop can tell a retry from a
//! configuration mistake and print a message a user can act on.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LlmError {
    /// Nothing usable was configured (no key, an unknown provider prefix).
    #[error("{0}")]
    Config(String),
    /// 401/403: the key was refused.
    #[error("{provider} refused the API key ({key_var}) with HTTP {status}: {message}")]
    Auth {
        provider: &'static str,
        key_var: &'static str,
        status: u16,
        message: String,
    },
    /// 429 after every retry.
    #[error("{provider} rate limit (HTTP 429) after {attempts} attempts: {message}")]
    RateLimited {
        provider: &'static str,
        attempts: u32,
        message: String,
    },
    /// 529 / `overloaded_error` after every retry.
    #[error("{provider} is overloaded after {attempts} attempts: {message}")]
    Overloaded {
        provider: &'static str,
        attempts: u32,
        message: String,
    },
    /// 5xx after every retry.
    #[error("{provider} server error (HTTP {status}) after {attempts} attempts: {message}")]
    Server {
        provider: &'static str,
        status: u16,
        attempts: u32,
        message: String,
    },
    /// 4xx other than auth and rate limits: the request itself is wrong (or too long).
    #[error("{provider} rejected the request (HTTP {status}, {kind}): {message}")]
    Rejected {
        provider: &'static str,
        status: u16,
        kind: String,
        message: String,
    },
    /// An `error` event in the middle of a stream that was not worth retrying.
    #[error("{provider} stream error ({kind}): {message}")]
    Stream {
        provider: &'static str,
        kind: String,
        message: String,
    },
    /// No answer, or no byte of the stream, within the deadline.
    #[error("{provider}: {what} after {after:?}")]
    Timeout {
        provider: &'static str,
        what: &'static str,
        after: Duration,
    },
    /// The connection failed or broke.
    #[error("{provider}: network error: {message}")]
    Network {
        provider: &'static str,
        message: String,
    },
    /// The stream did not follow the wire format (bad JSON, a delta for a block never
    /// started, the stream ending before its final event).
    #[error("{provider}: malformed stream: {message}")]
    Protocol {
        provider: &'static str,
        message: String,
    },
}

impl LlmError {
    /// A short stable name for logs and session records.
    pub fn code(&self) -> &'static str {
        match self {
            LlmError::Config(_) => "config",
            LlmError::Auth { .. } => "auth",
            LlmError::RateLimited { .. } => "rate_limited",
            LlmError::Overloaded { .. } => "overloaded",
            LlmError::Server { .. } => "server_error",
            LlmError::Rejected { .. } => "rejected",
            LlmError::Stream { .. } => "stream_error",
            LlmError::Timeout { .. } => "timeout",
            LlmError::Network { .. } => "network",
            LlmError::Protocol { .. } => "protocol",
        }
    }
}
