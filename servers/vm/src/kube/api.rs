//! The Kubernetes REST API, as much of it as the backend uses: JSON objects by path, merge
//! patches, deletes with options, and watches (newline-separated events on one long
//! response). Errors keep the API server's `metav1.Status` (code, reason, message), so a
//! caller can tell a missing object (404) from a conflict (409) or an expired watch (410).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde::Deserialize;
use serde_json::Value;

use super::config::{Auth, ClusterConfig};
use super::tls;
use crate::error::{VmError, VmResult};

/// A failed API call.
#[derive(Debug, Clone)]
pub enum KubeError {
    /// The server answered with an error status (its `metav1.Status` when it sent one).
    Status {
        code: u16,
        reason: String,
        message: String,
    },
    /// The server could not be reached, or the connection broke.
    Transport(String),
    /// The answer was not what the API promises.
    Decode(String),
}

impl KubeError {
    pub fn code(&self) -> Option<u16> {
        match self {
            KubeError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl std::fmt::Display for KubeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KubeError::Status {
                code,
                reason,
                message,
            } => write!(f, "{code} {reason}: {message}"),
            KubeError::Transport(m) => write!(f, "cannot reach the API server: {m}"),
            KubeError::Decode(m) => write!(f, "unexpected answer from the API server: {m}"),
        }
    }
}

impl std::error::Error for KubeError {}

impl From<KubeError> for VmError {
    fn from(e: KubeError) -> VmError {
        VmError::engine(e.to_string())
    }
}

pub type KubeResult<T> = Result<T, KubeError>;

/// One watch event (`ERROR` events carry a Status as their object).
#[derive(Debug, Clone, Deserialize)]
pub struct WatchEvent {
    #[serde(rename = "type")]
    pub kind: String,
    pub object: Value,
}

/// A client for one cluster and namespace.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    pub cfg: Arc<ClusterConfig>,
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl Api {
    pub fn new(cfg: ClusterConfig) -> VmResult<Api> {
        // reqwest is built without a default crypto provider, even for plain HTTP.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let tls = if cfg.server.starts_with("https://") {
            Some(Arc::new(tls::client_config(&cfg)?))
        } else {
            None
        };
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("kitbag-vm/", env!("CARGO_PKG_VERSION")));
        if let Some(t) = &tls {
            builder = builder.tls_backend_preconfigured((**t).clone());
        }
        let http = builder
            .build()
            .map_err(|e| VmError::engine(format!("the Kubernetes client: {e}")))?;
        Ok(Api {
            http,
            cfg: Arc::new(cfg),
            tls,
        })
    }

    pub fn namespace(&self) -> &str {
        &self.cfg.namespace
    }

    /// The `Authorization` header value, read now (a token file may have rotated).
    pub fn authorization(&self) -> Option<String> {
        use base64::Engine as _;
        match &self.cfg.auth {
            Auth::Bearer(t) => Some(format!("Bearer {t}")),
            Auth::BearerFile(p) => std::fs::read_to_string(p)
                .ok()
                .map(|t| format!("Bearer {}", t.trim())),
            Auth::Basic(u, p) => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
            )),
            Auth::None | Auth::ClientCert { .. } => None,
        }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut rb = self
            .http
            .request(method, format!("{}{path}", self.cfg.server))
            .header("Accept", "application/json");
        if let Some(a) = self.authorization() {
            rb = rb.header("Authorization", a);
        }
        rb
    }

    async fn send(&self, rb: reqwest::RequestBuilder) -> KubeResult<Value> {
        let resp = rb
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| KubeError::Transport(transport_message(&e)))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| KubeError::Transport(e.to_string()))?;
        if (200..300).contains(&status) {
            return serde_json::from_slice(&bytes).map_err(|e| KubeError::Decode(e.to_string()));
        }
        Err(status_error(status, &bytes))
    }

    pub async fn get(&self, path: &str) -> KubeResult<Value> {
        self.send(self.request(reqwest::Method::GET, path)).await
    }

    pub async fn create(&self, path: &str, body: &Value) -> KubeResult<Value> {
        self.send(json_body(self.request(reqwest::Method::POST, path), body))
            .await
    }

    /// A JSON merge patch (RFC 7386).
    pub async fn merge_patch(&self, path: &str, patch: &Value) -> KubeResult<Value> {
        let body = serde_json::to_vec(patch).map_err(|e| KubeError::Decode(e.to_string()))?;
        self.send(
            self.request(reqwest::Method::PATCH, path)
                .header("Content-Type", "application/merge-patch+json")
                .body(body),
        )
        .await
    }

    /// Delete with a grace period, children in the background. A missing object is not an
    /// error: deleting is idempotent.
    pub async fn delete(&self, path: &str, grace_seconds: u64) -> KubeResult<()> {
        let options = serde_json::json!({
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "gracePeriodSeconds": grace_seconds,
            "propagationPolicy": "Background",
        });
        match self
            .send(json_body(
                self.request(reqwest::Method::DELETE, path),
                &options,
            ))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some(404) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Watch `path` (a collection, narrowed by `query`) from `resource_version`; each event
    /// goes to `on_event` until it returns false, the server ends the watch, or it fails.
    /// An `ERROR` event becomes `Err(Status)` (410 Expired: list again and start over).
    pub async fn watch(
        &self,
        path: &str,
        query: &str,
        resource_version: &str,
        timeout: Duration,
        mut on_event: impl FnMut(WatchEvent) -> bool,
    ) -> KubeResult<()> {
        let url = format!(
            "{path}?watch=true&allowWatchBookmarks=true&resourceVersion={resource_version}&timeoutSeconds={}{}{query}",
            timeout.as_secs().max(1),
            if query.is_empty() { "" } else { "&" }
        );
        let resp = self
            .request(reqwest::Method::GET, &url)
            .send()
            .await
            .map_err(|e| KubeError::Transport(transport_message(&e)))?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let bytes = resp.bytes().await.unwrap_or_default();
            return Err(status_error(status, &bytes));
        }
        let mut body = resp.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| KubeError::Transport(e.to_string()))?;
            buf.extend_from_slice(&chunk);
            while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let event: WatchEvent = serde_json::from_slice(&line)
                    .map_err(|e| KubeError::Decode(format!("watch event: {e}")))?;
                if event.kind == "ERROR" {
                    let bytes = serde_json::to_vec(&event.object).unwrap_or_default();
                    let code = event.object["code"].as_u64().unwrap_or(500) as u16;
                    return Err(status_error(code, &bytes));
                }
                if !on_event(event) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

fn json_body(rb: reqwest::RequestBuilder, body: &Value) -> reqwest::RequestBuilder {
    rb.header("Content-Type", "application/json")
        .body(serde_json::to_vec(body).unwrap_or_default())
}

/// The API's error for an answer: its `metav1.Status` when the body is one.
pub fn status_error(code: u16, body: &[u8]) -> KubeError {
    let status: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let text = |k: &str| status[k].as_str().map(str::to_string);
    KubeError::Status {
        code,
        reason: text("reason").unwrap_or_else(|| {
            reqwest::StatusCode::from_u16(code)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("Error")
                .replace(' ', "")
        }),
        message: text("message").unwrap_or_else(|| {
            String::from_utf8_lossy(body)
                .trim()
                .chars()
                .take(300)
                .collect()
        }),
    }
}

fn transport_message(e: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    msg
}

/// Percent-encode a query value (label and field selectors contain `=`, `,` and `!`).
pub fn q(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_bodies_become_typed_errors() {
        let body = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"pods \"x\" not found","reason":"NotFound","code":404}"#;
        match status_error(404, body) {
            KubeError::Status {
                code,
                reason,
                message,
            } => {
                assert_eq!((code, reason.as_str()), (404, "NotFound"));
                assert_eq!(message, "pods \"x\" not found");
            }
            other => panic!("{other:?}"),
        }
        match status_error(503, b"upstream down") {
            KubeError::Status {
                reason, message, ..
            } => {
                assert_eq!(reason, "ServiceUnavailable");
                assert_eq!(message, "upstream down");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(q("a=b,c!=d"), "a%3Db%2Cc%21%3Dd");
    }
}
