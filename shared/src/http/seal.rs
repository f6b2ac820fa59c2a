//! Sealed sessions for handshake-era clients (`--sealed-sessions`): the `Mcp-Session-Id` a
//! client gets from `initialize` *is* the session — caller, agent, protocol revision, the
//! client's capabilities and an expiry under AES-256-GCM — so any replica holding the key
//! opens it. No session store, no affinity; a session presented with another caller's token
//! is refused. Requests stay stateless underneath (rmcp's stateless service answers them).
//!
//! Keys come from `--session-key-file`: one secret per line (≥ 32 characters, e.g.
//! `openssl rand -hex 32`), each hashed to a 256-bit key. The first line seals; every line
//! opens, so a key is rotated by adding the new one on top and dropping the old one after the
//! session lifetime.

use std::path::Path;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use super::sessions::SessionRefusal;
use crate::caller::Principal;

/// Prefix of a sealed id (the format's version).
const PREFIX: &str = "ks1.";
/// Bound into every seal: an id sealed for anything else never opens as a session.
const AAD: &[u8] = b"kitbag-session-v1";
/// Shortest secret line accepted in a key file.
const MIN_SECRET_CHARS: usize = 32;
/// Longest session id looked at (a real one is a few hundred bytes).
const MAX_ID_CHARS: usize = 8 * 1024;

/// What a sealed session id holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SealedSession {
    /// The caller's subject (None: no authentication configured).
    #[serde(rename = "sub")]
    pub subject: Option<String>,
    /// The agent profile the caller's token named.
    pub agent: Option<String>,
    /// The protocol revision `initialize` agreed.
    #[serde(rename = "v")]
    pub protocol: String,
    /// The client's declared capabilities.
    #[serde(rename = "caps")]
    pub capabilities: serde_json::Value,
    /// Seconds since the Unix epoch after which the session is over.
    #[serde(rename = "exp")]
    pub expires: u64,
}

/// The keys sessions are sealed with.
pub struct SessionKeys {
    /// The first seals; all open.
    keys: Vec<LessSafeKey>,
    ttl: Duration,
    rng: SystemRandom,
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SessionKeys({} keys, ttl {:?})",
            self.keys.len(),
            self.ttl
        )
    }
}

impl SessionKeys {
    /// Keys from `path`'s secret lines; with no file, one random key (sessions then open only
    /// on this process: fine for one replica).
    pub fn load(path: Option<&Path>, ttl: Duration) -> anyhow::Result<Self> {
        let secrets = match path {
            Some(path) => read_secrets(path)?,
            None => {
                let secret = crate::random::hex(32)
                    .map_err(|e| anyhow::anyhow!("reading /dev/urandom for a session key: {e}"))?;
                tracing::info!(
                    "--sealed-sessions without --session-key-file: a key of this process only (replicas need a shared key file)"
                );
                vec![secret]
            }
        };
        Ok(Self::from_secrets(&secrets, ttl))
    }

    fn from_secrets(secrets: &[String], ttl: Duration) -> Self {
        let keys = secrets
            .iter()
            .filter_map(|s| {
                let digest = Sha256::digest(s.as_bytes());
                UnboundKey::new(&AES_256_GCM, &digest)
                    .ok()
                    .map(LessSafeKey::new)
            })
            .collect();
        SessionKeys {
            keys,
            ttl,
            rng: SystemRandom::new(),
        }
    }

    /// A new session for `principal`, valid for the configured lifetime. None for a token
    /// naming no subject: every such token would open it, so it gets no session (its requests
    /// are answered statelessly all the same).
    pub fn issue(
        &self,
        principal: Option<&Principal>,
        protocol: &str,
        capabilities: serde_json::Value,
    ) -> Option<String> {
        if principal.is_some_and(|p| p.anonymous) {
            return None;
        }
        let session = SealedSession {
            subject: principal.map(|p| p.subject.clone()),
            agent: principal.and_then(|p| p.agent.clone()),
            protocol: protocol.to_owned(),
            capabilities,
            expires: now_secs().saturating_add(self.ttl.as_secs()),
        };
        self.seal(&session)
    }

    /// `session` as an id: `ks1.` + base64url(nonce ‖ ciphertext ‖ tag). None only when the
    /// system's random source fails.
    pub fn seal(&self, session: &SealedSession) -> Option<String> {
        let key = self.keys.first()?;
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut data = serde_json::to_vec(session).ok()?;
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(AAD),
            &mut data,
        )
        .ok()?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        Some(format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(out)))
    }

    /// The session `id` seals, if it is one of `principal`'s and still current.
    pub fn open(
        &self,
        id: &str,
        principal: Option<&Principal>,
    ) -> Result<SealedSession, SessionRefusal> {
        let session = self.unseal(id).ok_or(SessionRefusal::Unknown)?;
        if session.expires <= now_secs() {
            return Err(SessionRefusal::Expired);
        }
        let subject = principal.map(|p| p.subject.as_str());
        let agent = principal.and_then(|p| p.agent.as_deref());
        if principal.is_some_and(|p| p.anonymous)
            || session.subject.as_deref() != subject
            || session.agent.as_deref() != agent
        {
            return Err(SessionRefusal::OtherCaller);
        }
        Ok(session)
    }

    fn unseal(&self, id: &str) -> Option<SealedSession> {
        if id.len() > MAX_ID_CHARS {
            return None;
        }
        let raw = URL_SAFE_NO_PAD.decode(id.strip_prefix(PREFIX)?).ok()?;
        if raw.len() < NONCE_LEN {
            return None;
        }
        let (nonce, sealed) = raw.split_at(NONCE_LEN);
        self.keys.iter().find_map(|key| {
            let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
            let mut data = sealed.to_vec();
            let plain = key.open_in_place(nonce, Aad::from(AAD), &mut data).ok()?;
            serde_json::from_slice(plain).ok()
        })
    }
}

/// Checks a request's sealed session: a request without one passes as it is (sessions are
/// optional); one whose session opens loses the header (the stateless service and the byte
/// path answer it), gets the session's protocol revision when it names none, and carries the
/// session in its extensions.
pub(super) fn admit(
    keys: &SessionKeys,
    parts: &mut http::request::Parts,
    principal: Option<&Principal>,
) -> Result<(), SessionRefusal> {
    let Some(id) = parts.headers.remove(super::SESSION_HEADER) else {
        return Ok(());
    };
    let session = keys.open(id.to_str().unwrap_or_default(), principal)?;
    if !parts.headers.contains_key(PROTOCOL_HEADER)
        && let Ok(v) = http::HeaderValue::from_str(&session.protocol)
    {
        parts.headers.insert(PROTOCOL_HEADER, v);
    }
    parts.extensions.insert(session);
    Ok(())
}

const PROTOCOL_HEADER: &str = "mcp-protocol-version";

/// A handshake-era `initialize` request's client capabilities (None: not one).
pub(super) fn initialize_capabilities(body: &[u8]) -> Option<serde_json::Value> {
    #[derive(Deserialize)]
    struct Init {
        method: String,
        #[serde(default)]
        params: Option<InitParams>,
    }
    #[derive(Deserialize)]
    struct InitParams {
        #[serde(default)]
        capabilities: Option<serde_json::Value>,
    }
    // Cheap test first: almost every request is something else.
    memchr::memmem::find(body, b"\"initialize\"")?;
    let init: Init = serde_json::from_slice(body).ok()?;
    (init.method == "initialize").then(|| {
        init.params
            .and_then(|p| p.capabilities)
            .unwrap_or_else(|| serde_json::json!({}))
    })
}

/// `initialize`'s successful answer with a new sealed session id (the protocol revision read
/// from the answer); any other answer as it is.
pub(super) async fn issue_on_initialize(
    keys: &SessionKeys,
    response: super::HttpResponse,
    principal: Option<&Principal>,
    capabilities: serde_json::Value,
) -> super::HttpResponse {
    use http_body_util::BodyExt;
    if response.status() != http::StatusCode::OK {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // An initialize answer is a few hundred bytes, already complete.
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(never) => match never {},
    };
    let protocol = negotiated_protocol(&bytes);
    if let Some(id) = protocol.and_then(|v| keys.issue(principal, &v, capabilities))
        && let Ok(v) = http::HeaderValue::from_str(&id)
    {
        parts.headers.insert(super::SESSION_HEADER, v);
    }
    http::Response::from_parts(parts, http_body_util::Full::new(bytes).boxed())
}

/// `result.protocolVersion` of an initialize answer (JSON, or the data of an SSE event).
fn negotiated_protocol(body: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let json = if text.trim_start().starts_with('{') {
        vec![text]
    } else {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .collect()
    };
    json.into_iter().find_map(|j| {
        let v: serde_json::Value = serde_json::from_str(j.trim()).ok()?;
        Some(v.pointer("/result/protocolVersion")?.as_str()?.to_owned())
    })
}

fn now_secs() -> u64 {
    crate::clock::unix_secs()
}

/// The secret lines of a key file (blank lines and `#` comments skipped).
fn read_secrets(path: &Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("--session-key-file {}: {e}", path.display()))?;
    let secrets: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    if let Some((i, _)) = secrets
        .iter()
        .enumerate()
        .find(|(_, s)| s.len() < MIN_SECRET_CHARS || s.chars().any(char::is_whitespace))
    {
        anyhow::bail!(
            "--session-key-file {}: secret {} is shorter than {MIN_SECRET_CHARS} characters or has spaces (make one with `openssl rand -hex 32`)",
            path.display(),
            i + 1
        );
    }
    if secrets.is_empty() {
        anyhow::bail!(
            "--session-key-file {}: no secret in it (one per line, the first seals; make one with `openssl rand -hex 32`)",
            path.display()
        );
    }
    Ok(secrets)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(secrets: &[&str]) -> SessionKeys {
        let secrets: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
        SessionKeys::from_secrets(&secrets, Duration::from_secs(60))
    }

    fn alice(agent: Option<&str>) -> Principal {
        Principal {
            subject: "alice".into(),
            anonymous: false,
            agent: agent.map(String::from),
            tiers: None,
        }
    }

    const A: &str = "0123456789abcdef0123456789abcdef-a";
    const B: &str = "0123456789abcdef0123456789abcdef-b";

    #[test]
    fn a_session_opens_for_its_caller_on_any_holder_of_the_key() {
        let caps = serde_json::json!({"sampling": {}});
        let id = keys(&[A])
            .issue(Some(&alice(Some("reader"))), "2025-11-25", caps.clone())
            .expect("seal");
        assert!(id.starts_with(PREFIX));
        assert!(
            id.bytes().all(|b| (0x21..=0x7e).contains(&b)),
            "visible ASCII"
        );
        // Another process with the same key file.
        let s = keys(&[A])
            .open(&id, Some(&alice(Some("reader"))))
            .expect("open");
        assert_eq!(
            (s.protocol.as_str(), s.capabilities, s.subject.as_deref()),
            ("2025-11-25", caps, Some("alice"))
        );
    }

    #[test]
    fn another_caller_a_tampered_id_and_a_foreign_key_are_refused() {
        let k = keys(&[A]);
        let id = k
            .issue(Some(&alice(None)), "2025-11-25", serde_json::json!({}))
            .expect("seal");
        let bob = Principal {
            subject: "bob".into(),
            ..alice(None)
        };
        assert_eq!(k.open(&id, Some(&bob)), Err(SessionRefusal::OtherCaller));
        assert_eq!(
            k.open(&id, Some(&alice(Some("writer")))),
            Err(SessionRefusal::OtherCaller),
            "the same subject with another agent"
        );
        assert_eq!(k.open(&id, None), Err(SessionRefusal::OtherCaller));
        // A token naming no subject gets no session and opens none.
        let nobody = Principal {
            subject: "unnamed".into(),
            anonymous: true,
            ..alice(None)
        };
        assert_eq!(
            k.issue(Some(&nobody), "2025-11-25", serde_json::json!({})),
            None
        );
        let sealed_for_nobody = k
            .seal(&SealedSession {
                subject: Some("unnamed".into()),
                agent: None,
                protocol: "2025-11-25".into(),
                capabilities: serde_json::json!({}),
                expires: now_secs() + 60,
            })
            .expect("seal");
        assert_eq!(
            k.open(&sealed_for_nobody, Some(&nobody)),
            Err(SessionRefusal::OtherCaller)
        );
        // Every single-character change breaks the seal.
        for i in PREFIX.len()..id.len() {
            let mut bytes = id.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let altered = String::from_utf8(bytes).expect("ascii");
            if altered != id {
                assert!(k.open(&altered, Some(&alice(None))).is_err(), "at {i}");
            }
        }
        assert_eq!(
            keys(&[B]).open(&id, Some(&alice(None))),
            Err(SessionRefusal::Unknown)
        );
        for junk in ["", "ks1.", "ks1.!!", "abc", &"x".repeat(MAX_ID_CHARS + 1)] {
            assert_eq!(k.open(junk, None), Err(SessionRefusal::Unknown), "{junk}");
        }
    }

    #[test]
    fn rotation_seals_with_the_first_key_and_opens_with_every_key() {
        let old = keys(&[A])
            .issue(None, "2025-06-18", serde_json::json!({}))
            .expect("seal");
        let rotated = keys(&[B, A]);
        assert!(
            rotated.open(&old, None).is_ok(),
            "an old session still opens"
        );
        let new = rotated
            .issue(None, "2025-06-18", serde_json::json!({}))
            .expect("seal");
        assert!(
            keys(&[B]).open(&new, None).is_ok(),
            "sealed with the new key"
        );
        assert_eq!(keys(&[A]).open(&new, None), Err(SessionRefusal::Unknown));
    }

    #[test]
    fn an_expired_session_is_refused() {
        let k = keys(&[A]);
        let id = k
            .seal(&SealedSession {
                subject: None,
                agent: None,
                protocol: "2025-11-25".into(),
                capabilities: serde_json::json!({}),
                expires: now_secs() - 1,
            })
            .expect("seal");
        assert_eq!(k.open(&id, None), Err(SessionRefusal::Expired));
    }

    #[test]
    fn initialize_is_recognized_and_its_version_read() {
        let init = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"roots":{}},"clientInfo":{"name":"c","version":"1"}}}"#;
        assert_eq!(
            initialize_capabilities(init),
            Some(serde_json::json!({"roots": {}}))
        );
        let call =
            br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"initialize"}}"#;
        assert_eq!(initialize_capabilities(call), None);
        let answer = br#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18"}}"#;
        assert_eq!(negotiated_protocol(answer).as_deref(), Some("2025-06-18"));
        let sse = b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":\"2025-11-25\"}}\n\n";
        assert_eq!(negotiated_protocol(sse).as_deref(), Some("2025-11-25"));
    }

    #[test]
    fn key_files_need_long_secrets() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("keys");
        std::fs::write(&path, "# rotated 2026-11\nshort\n").expect("write");
        let err = read_secrets(&path).expect_err("short").to_string();
        assert!(err.contains("secret 1") && err.contains("32"), "{err}");
        std::fs::write(&path, "# only a comment\n\n").expect("write");
        assert!(read_secrets(&path).is_err());
        std::fs::write(&path, format!("{B}\n# old\n{A}\n")).expect("write");
        assert_eq!(read_secrets(&path).expect("keys").len(), 2);
    }
}
