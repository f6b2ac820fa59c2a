//! One streamed model call over HTTP, with retries: 408/409/429/5xx/529, connection failures,
//! silent streams and in-stream `overloaded`/`api_error` events are tried again after a backoff
//! (or the server's `Retry-After`); an auth failure or a rejected request is not.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use serde::Deserialize;
use serde_json::Value;

use crate::anthropic;
use crate::config::{Endpoint, Limits, Provider};
use crate::decode::{ErrorBody, StreamError, prefix};
use crate::error::LlmError;
use crate::openai;
use crate::sse::SseParser;
use crate::types::{Request, Response, StreamEvent};

pub struct Client {
    http: reqwest::Client,
    endpoint: Endpoint,
    limits: Limits,
}

/// A failed attempt and whether another is worth making.
struct Failure {
    error: LlmError,
    retry: bool,
    retry_after: Option<Duration>,
}

impl Failure {
    fn fatal(error: LlmError) -> Self {
        Self {
            error,
            retry: false,
            retry_after: None,
        }
    }

    fn transient(error: LlmError) -> Self {
        Self {
            error,
            retry: true,
            retry_after: None,
        }
    }
}

impl Client {
    pub fn new(endpoint: Endpoint, limits: Limits) -> Result<Self, LlmError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .connect_timeout(limits.connect_timeout)
            .build()
            .map_err(|e| LlmError::Config(format!("HTTP client: {e}")))?;
        Ok(Self {
            http,
            endpoint,
            limits,
        })
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    fn provider_name(&self) -> &'static str {
        self.endpoint.spec.provider.name()
    }

    /// The body this client sends for `req` (also what the tests compare with the vendor
    /// SDKs' requests).
    pub fn request_body(&self, req: &Request) -> Value {
        match self.endpoint.spec.provider {
            Provider::Anthropic => anthropic::request_body(req),
            Provider::OpenAi => openai::request_body(req, self.endpoint.dialect),
        }
    }

    /// Run `req`, streaming progress to `on_event`, retrying what is worth retrying. Dropping
    /// the future cancels the call (the connection is closed).
    pub async fn stream(
        &self,
        req: &Request,
        on_event: &mut (dyn FnMut(StreamEvent<'_>) + Send),
    ) -> Result<Response, LlmError> {
        let body = serde_json::to_vec(&self.request_body(req))
            .map_err(|e| LlmError::Config(format!("request body: {e}")))?;
        let mut attempt = 1;
        loop {
            match self.attempt(&body, on_event).await {
                Ok(r) => return Ok(r),
                Err(f) if f.retry && attempt < self.limits.max_attempts => {
                    let wait = self.backoff(attempt, f.retry_after);
                    let reason = with_attempts(f.error, attempt).to_string();
                    tracing::warn!(attempt, wait_ms = wait.as_millis() as u64, %reason, "model call failed; retrying");
                    on_event(StreamEvent::Retry {
                        attempt,
                        wait_ms: wait.as_millis() as u64,
                        reason: &reason,
                    });
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                Err(f) => return Err(with_attempts(f.error, attempt)),
            }
        }
    }

    fn backoff(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(d) = retry_after {
            return d.min(Duration::from_secs(60));
        }
        let doubled = self
            .limits
            .backoff
            .saturating_mul(1 << (attempt - 1).min(16));
        let capped = doubled.min(self.limits.max_backoff);
        // 75–100 % of the step, so that many clients hitting one limit spread out.
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        capped.mul_f64(0.75 + 0.25 * f64::from(nanos % 1000) / 1000.0)
    }

    async fn attempt(
        &self,
        body: &[u8],
        on_event: &mut (dyn FnMut(StreamEvent<'_>) + Send),
    ) -> Result<Response, Failure> {
        let provider = self.provider_name();
        let mut rb = self
            .http
            .post(self.endpoint.url())
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .body(body.to_vec());
        match (self.endpoint.spec.provider, &self.endpoint.api_key) {
            (Provider::Anthropic, key) => {
                rb = rb.header("anthropic-version", anthropic::API_VERSION);
                if let Some(k) = key {
                    rb = rb.bearer_auth(k);
                }
            }
            (Provider::OpenAi, Some(k)) => rb = rb.bearer_auth(k),
            (Provider::OpenAi, None) => {}
        }
        let sent = tokio::time::timeout(self.limits.response_timeout, rb.send()).await;
        let resp = match sent {
            Err(_) => {
                return Err(Failure::transient(LlmError::Timeout {
                    provider,
                    what: "no response",
                    after: self.limits.response_timeout,
                }));
            }
            Ok(Err(e)) => {
                return Err(Failure::transient(LlmError::Network {
                    provider,
                    message: error_chain(&e),
                }));
            }
            Ok(Ok(r)) => r,
        };
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(self.http_failure(resp).await);
        }
        self.read_stream(resp, on_event).await
    }

    async fn http_failure(&self, resp: reqwest::Response) -> Failure {
        let provider = self.provider_name();
        let status = resp.status().as_u16();
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let retry_after = header("retry-after")
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64);
        let should_retry = header("x-should-retry");
        let text = tokio::time::timeout(Duration::from_secs(10), resp.text())
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        let (kind, message) = error_body(&text);
        let error = match status {
            401 | 403 => LlmError::Auth {
                provider,
                key_var: self.endpoint.spec.provider.key_var(),
                status,
                message,
            },
            429 => LlmError::RateLimited {
                provider,
                attempts: 0,
                message,
            },
            529 => LlmError::Overloaded {
                provider,
                attempts: 0,
                message,
            },
            _ if kind == "overloaded_error" => LlmError::Overloaded {
                provider,
                attempts: 0,
                message,
            },
            500..=599 => LlmError::Server {
                provider,
                status,
                attempts: 0,
                message,
            },
            _ => LlmError::Rejected {
                provider,
                status,
                kind,
                message,
            },
        };
        let retry = match should_retry.as_deref() {
            Some("true") => true,
            Some("false") => false,
            _ => matches!(status, 408 | 409 | 429) || status >= 500,
        };
        Failure {
            error,
            retry,
            retry_after,
        }
    }

    async fn read_stream(
        &self,
        resp: reqwest::Response,
        on_event: &mut (dyn FnMut(StreamEvent<'_>) + Send),
    ) -> Result<Response, Failure> {
        let provider = self.provider_name();
        let mut decoder = Decoder::new(self.endpoint.spec.provider);
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        let mut body = resp.bytes_stream();
        loop {
            let next = tokio::time::timeout(self.limits.idle_timeout, body.next()).await;
            let chunk = match next {
                Err(_) => {
                    return Err(Failure::transient(LlmError::Timeout {
                        provider,
                        what: "the stream went silent",
                        after: self.limits.idle_timeout,
                    }));
                }
                Ok(None) => None,
                Ok(Some(Err(e))) => {
                    return Err(Failure::transient(LlmError::Network {
                        provider,
                        message: error_chain(&e),
                    }));
                }
                Ok(Some(Ok(c))) => Some(c),
            };
            let fed = match &chunk {
                Some(c) => parser.feed(c, &mut events),
                None => parser.finish(&mut events),
            };
            fed.map_err(|e| {
                Failure::fatal(LlmError::Protocol {
                    provider,
                    message: e.to_string(),
                })
            })?;
            for ev in events.drain(..) {
                if let Some(err) = decoder.event(&ev.data, on_event).map_err(Failure::fatal)? {
                    return Err(stream_failure(provider, err));
                }
            }
            if chunk.is_none() {
                return decoder.finish().map_err(Failure::fatal);
            }
        }
    }
}

enum Decoder {
    Anthropic(anthropic::Decoder),
    OpenAi(openai::Decoder),
}

impl Decoder {
    fn new(p: Provider) -> Self {
        match p {
            Provider::Anthropic => Decoder::Anthropic(anthropic::Decoder::new()),
            Provider::OpenAi => Decoder::OpenAi(openai::Decoder::new()),
        }
    }

    fn event(
        &mut self,
        data: &str,
        on_event: &mut (dyn FnMut(StreamEvent<'_>) + Send),
    ) -> Result<Option<StreamError>, LlmError> {
        match self {
            Decoder::Anthropic(d) => d.event(data, on_event),
            Decoder::OpenAi(d) => d.event(data, on_event),
        }
    }

    fn finish(self) -> Result<Response, LlmError> {
        match self {
            Decoder::Anthropic(d) => d.finish(),
            Decoder::OpenAi(d) => d.finish(),
        }
    }
}

/// An `error` event mid-stream: overload and internal errors are retried.
fn stream_failure(provider: &'static str, e: StreamError) -> Failure {
    match e.kind.as_str() {
        "overloaded_error" => Failure::transient(LlmError::Overloaded {
            provider,
            attempts: 0,
            message: e.message,
        }),
        "api_error" | "server_error" | "internal_server_error" | "rate_limit_error" => {
            Failure::transient(LlmError::Stream {
                provider,
                kind: e.kind,
                message: e.message,
            })
        }
        _ => Failure::fatal(LlmError::Stream {
            provider,
            kind: e.kind,
            message: e.message,
        }),
    }
}

fn with_attempts(e: LlmError, n: u32) -> LlmError {
    match e {
        LlmError::RateLimited {
            provider, message, ..
        } => LlmError::RateLimited {
            provider,
            attempts: n,
            message,
        },
        LlmError::Overloaded {
            provider, message, ..
        } => LlmError::Overloaded {
            provider,
            attempts: n,
            message,
        },
        LlmError::Server {
            provider,
            status,
            message,
            ..
        } => LlmError::Server {
            provider,
            status,
            attempts: n,
            message,
        },
        other => other,
    }
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: ErrorBody,
}

/// The error's kind and message from either vendor's error body (`{"type":"error","error":
/// {"type","message"}}` or `{"error":{"message","type","code"}}`); anything else is quoted.
fn error_body(text: &str) -> (String, String) {
    match serde_json::from_str::<ErrorEnvelope>(text) {
        Ok(env) => (env.error.kind(), env.error.message),
        Err(_) => ("error".into(), prefix(text.trim()).to_owned()),
    }
}

/// reqwest's error with its causes (the useful part is usually a cause: "connection refused").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_vendors_error_bodies_are_read() {
        assert_eq!(
            error_body(
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            ),
            ("overloaded_error".into(), "Overloaded".into())
        );
        assert_eq!(
            error_body(
                r#"{"error":{"message":"Incorrect API key","type":"invalid_request_error","code":"invalid_api_key"}}"#
            ),
            ("invalid_request_error".into(), "Incorrect API key".into())
        );
        assert_eq!(
            error_body(
                r#"{"error":{"message":"slow down","type":null,"code":"rate_limit_exceeded"}}"#
            ),
            ("rate_limit_exceeded".into(), "slow down".into())
        );
        assert_eq!(
            error_body("<html>bad gateway</html>"),
            ("error".into(), "<html>bad gateway</html>".into())
        );
    }
}
