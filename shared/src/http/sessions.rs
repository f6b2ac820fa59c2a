//! Handshake-era sessions kept in this process (`--http-sessions`, rmcp's
//! `LocalSessionManager`): each bound to the caller that initialized it and counted.
//!
//! rmcp keeps the sessions but knows nothing of callers: any request naming a session id
//! would be served in it. So every session id rmcp hands out passes through here on its way
//! to the client and is recorded with its owner; a request naming a session is admitted only
//! for that owner (another caller: 403, as with sealed sessions; an id never issued: 404),
//! and a new session past the cap — per caller, and in total — is closed at once and answered
//! 503 with `Retry-After`. Registering the id rmcp actually issued, rather than recognizing
//! `initialize` bodies in front of it, leaves no body that creates a session unseen.
//!
//! A session ends when its client DELETEs it or after `--http-session-idle-secs` without a
//! request (rmcp's keep-alive); ended sessions are dropped from the record when the next
//! session is counted.
//!
//! A token naming no subject is every such token at once, so it owns no session: its
//! `initialize` is refused (403). Without authentication every request is the same caller:
//! only the total cap applies.

use crate::lock::LockExt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::StatusCode;
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use crate::caller::Principal;

pub const DEFAULT_MAX_SESSIONS: usize = 1_000;
pub const DEFAULT_MAX_SESSIONS_PER_CALLER: usize = 100;
pub const DEFAULT_SESSION_IDLE_SECS: u64 = 300;
/// Sessions free up as clients end them or go idle: minutes, not seconds.
const FULL_RETRY_AFTER_SECS: u64 = 30;

/// The caps on live sessions.
#[derive(Debug, Clone)]
pub struct SessionLimits {
    pub max_total: usize,
    /// Per subject (tokens of one subject naming different agents count together).
    pub max_per_caller: usize,
    /// A session without a request for this long ends.
    pub idle: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            max_total: DEFAULT_MAX_SESSIONS,
            max_per_caller: DEFAULT_MAX_SESSIONS_PER_CALLER,
            idle: Duration::from_secs(DEFAULT_SESSION_IDLE_SECS),
        }
    }
}

/// Why a request is not served in the session it names, or a session not opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionRefusal {
    /// Never issued here, closed, or (sealed) not sealed by any key held (HTTP 404, so
    /// clients initialize again).
    #[error("session not found: initialize a new session")]
    Unknown,
    #[error("session expired: initialize a new session")]
    Expired,
    /// Opened by another principal or agent (HTTP 403).
    #[error("this session belongs to another caller: initialize your own session")]
    OtherCaller,
    /// The token names no subject (no `sub`, no `client_id`): nothing tells its holder from
    /// any other such holder (HTTP 403).
    #[error(
        "this token names no subject (`sub` or `client_id`): sessions are bound to their caller, so it gets none"
    )]
    Anonymous,
    /// The cap on live sessions is reached (HTTP 503 with `Retry-After`).
    #[error("too many sessions ({0}): end one (DELETE) or retry later")]
    Full(&'static str),
}

impl SessionRefusal {
    fn status(&self) -> StatusCode {
        match self {
            SessionRefusal::Unknown | SessionRefusal::Expired => StatusCode::NOT_FOUND,
            SessionRefusal::OtherCaller | SessionRefusal::Anonymous => StatusCode::FORBIDDEN,
            SessionRefusal::Full(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The reason `/metrics` counts it under.
    pub(super) fn reason(&self) -> &'static str {
        match self {
            SessionRefusal::Unknown | SessionRefusal::Expired => "unknown_session",
            SessionRefusal::OtherCaller | SessionRefusal::Anonymous => "other_caller",
            SessionRefusal::Full(_) => "sessions_full",
        }
    }
}

/// The refusal as MCP clients expect it: a JSON-RPC error (`id` the request's, when known)
/// under the status that says what to do — 404 initialize again, 403 not yours, 503 later.
pub(super) fn refusal_response(
    refusal: &SessionRefusal,
    id: Option<serde_json::Value>,
) -> super::HttpResponse {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id.unwrap_or(serde_json::Value::Null),
        "error": {"code": -32001, "message": refusal.to_string()},
    });
    let mut response = super::text(refusal.status(), body.to_string());
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    if matches!(refusal, SessionRefusal::Full(_)) {
        headers.insert(http::header::RETRY_AFTER, FULL_RETRY_AFTER_SECS.into());
    }
    response
}

/// Who a session belongs to: the caller that initialized it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Owner {
    /// None: no authentication configured.
    subject: Option<String>,
    agent: Option<String>,
}

impl Owner {
    fn of(principal: Option<&Principal>) -> Result<Owner, SessionRefusal> {
        match principal {
            None => Ok(Owner {
                subject: None,
                agent: None,
            }),
            Some(p) if p.anonymous => Err(SessionRefusal::Anonymous),
            Some(p) => Ok(Owner {
                subject: Some(p.subject.clone()),
                agent: p.agent.clone(),
            }),
        }
    }
}

/// rmcp's session store and who owns each of its sessions.
pub(super) struct Sessions {
    manager: Arc<LocalSessionManager>,
    owners: Mutex<HashMap<Arc<str>, Owner>>,
    limits: SessionLimits,
}

impl Sessions {
    pub(super) fn new(limits: SessionLimits) -> Self {
        let mut manager = LocalSessionManager::default();
        manager.session_config.keep_alive = Some(limits.idle);
        Sessions {
            manager: Arc::new(manager),
            owners: Mutex::default(),
            limits,
        }
    }

    /// The store rmcp's service keeps its sessions in.
    pub(super) fn manager(&self) -> Arc<LocalSessionManager> {
        self.manager.clone()
    }

    /// A request naming a session (`Mcp-Session-Id`) is its owner's; one naming none passes.
    pub(super) fn admit(
        &self,
        headers: &http::HeaderMap,
        principal: Option<&Principal>,
    ) -> Result<(), SessionRefusal> {
        let Some(id) = headers.get(super::SESSION_HEADER) else {
            return Ok(());
        };
        let owner = self
            .owners
            .locked()
            .get(id.to_str().unwrap_or_default())
            .cloned()
            .ok_or(SessionRefusal::Unknown)?;
        match Owner::of(principal) {
            Ok(caller) if caller == owner => Ok(()),
            _ => Err(SessionRefusal::OtherCaller),
        }
    }

    /// rmcp's answer to a request that named no session: when it opened one, the session is
    /// recorded as the caller's — or, past a cap or for a caller who cannot own one, closed
    /// again, and the answer is to be the refusal.
    pub(super) async fn on_answer(
        &self,
        response: super::HttpResponse,
        principal: Option<&Principal>,
    ) -> Result<super::HttpResponse, SessionRefusal> {
        let Some(id) = response
            .headers()
            .get(super::SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(Arc::<str>::from)
        else {
            return Ok(response);
        };
        let recorded = match Owner::of(principal) {
            Ok(owner) => self.record(&id, owner).await,
            Err(refusal) => Err(refusal),
        };
        if let Err(refusal) = recorded {
            drop(response);
            if let Err(e) = self.manager.close_session(&id).await {
                tracing::debug!("closing refused session {id}: {e}");
            }
            tracing::info!("session refused: {refusal}");
            return Err(refusal);
        }
        Ok(response)
    }

    /// A session DELETEd with success: forgotten now, not at the next count.
    pub(super) fn forget(&self, id: &http::HeaderValue) {
        if let Ok(id) = id.to_str() {
            self.owners.locked().remove(id);
        }
    }

    /// Record `id` as `owner`'s if the caps allow it.
    async fn record(&self, id: &Arc<str>, owner: Owner) -> Result<(), SessionRefusal> {
        // Held while counting: a session rmcp opens meanwhile waits for it, so every session
        // recorded is among the live ones seen here (rmcp stores it before answering).
        let live = self.manager.sessions.read().await;
        let mut owners = self.owners.locked();
        // Ended sessions (DELETE, idle, a failed handshake) are no longer counted.
        owners.retain(|id, _| live.contains_key(id));
        if owners.len() >= self.limits.max_total {
            return Err(SessionRefusal::Full("the server's limit"));
        }
        if owner.subject.is_some()
            && owners
                .values()
                .filter(|o| o.subject == owner.subject)
                .count()
                >= self.limits.max_per_caller
        {
            return Err(SessionRefusal::Full("this caller's limit"));
        }
        owners.insert(id.clone(), owner);
        Ok(())
    }
}

/// The `id` of a JSON-RPC request body (for the error answering it).
pub(super) fn request_id(body: &[u8]) -> Option<serde_json::Value> {
    #[derive(serde::Deserialize)]
    struct Request {
        id: Option<serde_json::Value>,
    }
    serde_json::from_slice::<Request>(body).ok()?.id
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(subject: &str, anonymous: bool) -> Principal {
        Principal {
            subject: subject.into(),
            anonymous,
            agent: None,
            tiers: None,
        }
    }

    #[test]
    fn owners_are_subject_and_agent_and_a_subjectless_token_is_none() {
        let alice = Owner::of(Some(&caller("alice", false))).expect("alice");
        assert_ne!(alice, Owner::of(Some(&caller("bob", false))).expect("bob"));
        let mut reader = caller("alice", false);
        reader.agent = Some("reader".into());
        assert_ne!(alice, Owner::of(Some(&reader)).expect("reader"));
        assert_eq!(
            Owner::of(Some(&caller("unnamed", true))),
            Err(SessionRefusal::Anonymous)
        );
        assert!(Owner::of(None).expect("open").subject.is_none());
    }

    #[tokio::test]
    async fn requests_are_admitted_for_their_sessions_owner_only() {
        let sessions = Sessions::new(SessionLimits::default());
        let id: Arc<str> = "s-1".into();
        sessions.owners.lock().expect("lock").insert(
            id.clone(),
            Owner::of(Some(&caller("alice", false))).expect("alice"),
        );
        let mut h = http::HeaderMap::new();
        assert_eq!(sessions.admit(&h, None), Ok(()), "no session named");
        h.insert(super::super::SESSION_HEADER, "s-1".parse().expect("h"));
        assert_eq!(sessions.admit(&h, Some(&caller("alice", false))), Ok(()));
        for other in [
            Some(caller("bob", false)),
            Some(caller("unnamed", true)),
            None,
        ] {
            assert_eq!(
                sessions.admit(&h, other.as_ref()),
                Err(SessionRefusal::OtherCaller)
            );
        }
        h.insert(super::super::SESSION_HEADER, "s-2".parse().expect("h"));
        assert_eq!(
            sessions.admit(&h, Some(&caller("alice", false))),
            Err(SessionRefusal::Unknown)
        );
    }

    #[test]
    fn refusals_say_what_to_do() {
        let r = refusal_response(
            &SessionRefusal::Full("this caller's limit"),
            request_id(br#"{"jsonrpc":"2.0","id":7,"method":"initialize"}"#),
        );
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            r.headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok()),
            Some("30")
        );
        assert_eq!(
            refusal_response(&SessionRefusal::Anonymous, None).status(),
            StatusCode::FORBIDDEN
        );
        assert_eq!(request_id(b"{"), None);
    }
}
