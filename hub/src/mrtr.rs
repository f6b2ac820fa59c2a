//! Multi round-trip requests (SEP-2322) for 2026-07-28 clients over HTTP. That era has no
//! server-to-client requests: a server that needs input answers the call with an
//! `InputRequiredResult` (`resultType: "input_required"`, `inputRequests`, `requestState`) and
//! the client calls again with `inputResponses` and the state. The children speak the
//! handshake era and ask mid-call (`elicitation/create`, `sampling/createMessage`,
//! `roots/list`), so the host translates:
//!
//! - while a 2026-07-28 call is in flight at a child, that child's requests come to the call
//!   (`Slot`) instead of to a client — when it is the child's one such call running (a
//!   child's request does not say which call it is for; calls parked for input do not count);
//! - the call answers with an `InputRequiredResult` naming what the child asked — keyed by the
//!   request's `_meta["io.kitbag/inputKey"]` when the child gives one — and the child's call
//!   is **parked**, still waiting, under an HMAC-sealed `requestState`;
//! - the retry's `inputResponses` answer the child, and the call goes on: to its result, or to
//!   another round. Responses given before they are asked for (a first call that already
//!   carries `inputResponses`) answer the child's request of that key at once.
//!
//! A parked call lives in this process: a retry reaching another replica, or coming after the
//! call expired, gets a -32602 error naming that.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use kitbag_shared::lock::LockExt;
use rmcp::ErrorData as McpError;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};

use kitbag_shared::http::Answer;

use crate::fastpath::{CancelOnDrop, Line};

/// Where a child names its request's key in `inputRequests`.
pub const KEY_META: &str = "io.kitbag/inputKey";

/// After a child's first request, how long to wait for the others it sends at once (a tool
/// that asks for three things together gets one round, not three).
const SETTLE: Duration = Duration::from_millis(25);

/// A parked call not resumed within this is dropped (its child call cancelled).
const PARKED_TTL: Duration = Duration::from_secs(300);

/// One thing a child asked for.
pub struct Ask {
    key: String,
    method: &'static str,
    params: Value,
    answer: oneshot::Sender<Result<Value, McpError>>,
}

/// What the client declared in `_meta["io.modelcontextprotocol/clientCapabilities"]`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Caps {
    pub sampling: bool,
    pub elicitation: bool,
    pub roots: bool,
}

impl Caps {
    /// From a request's raw `_meta` (absent: nothing declared).
    pub fn from_meta(meta: Option<&Value>) -> Caps {
        let caps = meta.and_then(|m| m.get("io.modelcontextprotocol/clientCapabilities"));
        let has = |k: &str| caps.and_then(|c| c.get(k)).is_some_and(Value::is_object);
        Caps {
            sampling: has("sampling"),
            elicitation: has("elicitation"),
            roots: has("roots"),
        }
    }

    fn allows(&self, method: &str) -> bool {
        match method {
            "sampling/createMessage" => self.sampling,
            "elicitation/create" => self.elicitation,
            "roots/list" => self.roots,
            _ => false,
        }
    }
}

struct SlotShared {
    tx: mpsc::UnboundedSender<Ask>,
    /// The call is parked, waiting for its client's retry.
    parked: std::sync::atomic::AtomicBool,
    caps: Caps,
    /// Responses the client gave before they were asked for, by key.
    supplied: Mutex<Map<String, Value>>,
}

/// A slot's id and what the child's requests reach, under the child's id.
type SlotEntry = (u64, Arc<SlotShared>);

/// A 2026-07-28 call's claim on its child's requests, for as long as the call runs.
pub struct Slot {
    registry: Arc<Registry>,
    /// The child (`Child::id`) whose requests this call takes.
    child: u64,
    id: u64,
    shared: Arc<SlotShared>,
    rx: mpsc::UnboundedReceiver<Ask>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut slots = self.registry.slots.locked();
        if let Some(list) = slots.get_mut(&self.child) {
            list.retain(|(id, _)| *id != self.id);
            if list.is_empty() {
                slots.remove(&self.child);
            }
        }
    }
}

/// The call itself: the line its child's answer becomes.
/// The child's answer line, with the error code of an `isError` result.
pub type CallFuture = Pin<Box<dyn Future<Output = Option<(Line, Option<String>)>> + Send>>;

/// A call that may need input: the call, its slot, and what its child asked that is not
/// answered yet.
pub struct Running {
    call: CallFuture,
    slot: Slot,
    waiting: Vec<Ask>,
    tool: String,
    /// Cancels the child's call if this is dropped before the answer (client gone, expiry).
    _stop: CancelOnDrop,
}

struct Parked {
    run: Running,
    round: u32,
    at: Instant,
}

/// The host's slots and parked calls, and the key that seals `requestState`.
pub struct Registry {
    slots: Mutex<HashMap<u64, Vec<SlotEntry>>>,
    parked: Mutex<HashMap<u64, Parked>>,
    key: ring::hmac::Key,
    next: AtomicU64,
}

/// Why a retry cannot go on (answered as a JSON-RPC -32602 error).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum StateError {
    #[error("requestState failed its integrity check: it was not issued by this host as it is")]
    Tampered,
    #[error(
        "requestState names no call waiting for input here: it expired, was answered already, or is parked on another replica; call the tool again without requestState"
    )]
    Unknown,
    #[error("requestState was issued for tool {issued:?}, not {called:?}")]
    OtherTool { issued: String, called: String },
    #[error("inputResponses.{key}: {why}")]
    BadResponse { key: String, why: String },
}

impl Default for Registry {
    fn default() -> Self {
        let mut secret = [0u8; 32];
        // The state only has to survive this process (parked calls are in memory).
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret);
        Registry {
            slots: Mutex::default(),
            parked: Mutex::default(),
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &secret),
            next: AtomicU64::new(1),
        }
    }
}

impl Registry {
    /// Claim the requests of child `child` for a call by a client with `caps`, `supplied`
    /// answering requests of those keys at once. Taken before the call is sent, so that no
    /// request of the child can come before it.
    pub fn slot(self: &Arc<Self>, child: u64, caps: Caps, supplied: Map<String, Value>) -> Slot {
        let (tx, rx) = mpsc::unbounded_channel();
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::new(SlotShared {
            tx,
            parked: Default::default(),
            caps,
            supplied: Mutex::new(supplied),
        });
        self.slots
            .locked()
            .entry(child)
            .or_default()
            .push((id, shared.clone()));
        Slot {
            registry: self.clone(),
            child,
            id,
            shared,
            rx,
        }
    }

    /// A request of child `child`: `None` when no single 2026-07-28 call is in flight at it
    /// (the handshake-era relay answers it then), else what the call's client gives.
    pub async fn ask(
        &self,
        child: u64,
        method: &'static str,
        named: Option<String>,
        params: Value,
    ) -> Option<Result<Value, McpError>> {
        let shared = {
            let slots = self.slots.locked();
            let all = slots.get(&child)?;
            // The one call running at this child (parked calls wait on what they asked);
            // else its one parked call (a request it sends before it is resumed).
            let mut running = all.iter().filter(|(_, s)| !s.parked.load(Ordering::SeqCst));
            match (running.next(), running.next(), all.as_slice()) {
                (Some((_, one)), None, _) => one.clone(),
                (None, _, [(_, one)]) => one.clone(),
                _ => return None,
            }
        };
        let key = named.unwrap_or_else(|| {
            let short = method.split('/').next().unwrap_or("input");
            format!("{short}-{}", self.next.fetch_add(1, Ordering::Relaxed))
        });
        if !shared.caps.allows(method) {
            return Some(Err(McpError::invalid_request(
                format!(
                    "{method}: the client did not declare the capability for it (io.modelcontextprotocol/clientCapabilities)"
                ),
                None,
            )));
        }
        if let Some(v) = shared.supplied.locked().remove(&key) {
            return Some(Ok(v));
        }
        let (answer, answered) = oneshot::channel();
        shared
            .tx
            .send(Ask {
                key,
                method,
                params,
                answer,
            })
            .ok()?;
        Some(answered.await.unwrap_or_else(|_| {
            Err(McpError::internal_error(
                "the call waiting for this input ended".to_string(),
                None,
            ))
        }))
    }

    fn seal(&self, id: u64, round: u32, tool: &str) -> String {
        let mut body = Vec::with_capacity(12 + tool.len());
        body.extend_from_slice(&id.to_be_bytes());
        body.extend_from_slice(&round.to_be_bytes());
        let tag = ring::hmac::sign(&self.key, &[&body[..], tool.as_bytes()].concat());
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        format!("{}.{}", b64.encode(&body), b64.encode(tag.as_ref()))
    }

    /// The parked call and round a state names, if this host sealed it for `tool`.
    fn open(&self, state: &str, tool: &str) -> Result<(u64, u32), StateError> {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (body, tag) = state.split_once('.').ok_or(StateError::Tampered)?;
        let body = b64.decode(body).map_err(|_| StateError::Tampered)?;
        let tag = b64.decode(tag).map_err(|_| StateError::Tampered)?;
        if body.len() != 12 {
            return Err(StateError::Tampered);
        }
        ring::hmac::verify(&self.key, &[&body[..], tool.as_bytes()].concat(), &tag)
            .map_err(|_| StateError::Tampered)?;
        let id = u64::from_be_bytes(body[..8].try_into().map_err(|_| StateError::Tampered)?);
        let round = u32::from_be_bytes(body[8..].try_into().map_err(|_| StateError::Tampered)?);
        Ok((id, round))
    }

    /// Park `run` and answer with what it waits for.
    fn park(&self, run: Running, round: u32, id: u64, upstream_id: &str) -> Line {
        run.slot.shared.parked.store(true, Ordering::SeqCst);
        let state = self.seal(id, round, &run.tool);
        let requests: Map<String, Value> = run
            .waiting
            .iter()
            .map(|a| {
                (
                    a.key.clone(),
                    json!({"method": a.method, "params": a.params}),
                )
            })
            .collect();
        let mut parked = self.parked.locked();
        parked.retain(|_, p| p.at.elapsed() < PARKED_TTL);
        parked.insert(
            id,
            Parked {
                run,
                round,
                at: Instant::now(),
            },
        );
        let result = json!({
            "resultType": "input_required",
            "inputRequests": requests,
            "requestState": state,
        });
        format!("{{\"jsonrpc\":\"2.0\",\"id\":{upstream_id},\"result\":{result}}}\n").into_bytes()
    }

    /// Run a new call until it answers or needs input.
    pub async fn drive(
        self: &Arc<Self>,
        call: CallFuture,
        slot: Slot,
        tool: &str,
        stop: CancelOnDrop,
        upstream_id: &str,
    ) -> Answer {
        let run = Running {
            call,
            slot,
            waiting: Vec::new(),
            tool: tool.to_owned(),
            _stop: stop,
        };
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.go_on(run, id, 0, upstream_id).await
    }

    async fn go_on(
        self: &Arc<Self>,
        mut run: Running,
        id: u64,
        round: u32,
        upstream_id: &str,
    ) -> Answer {
        loop {
            if !run.waiting.is_empty() {
                // An `InputRequiredResult`: a result, not an error.
                let body = self.park(run, round + 1, id, upstream_id);
                return Answer {
                    body,
                    ..Answer::default()
                };
            }
            tokio::select! {
                answer = &mut run.call => {
                    return match answer {
                        // Answered in the first round: the line already carries this id.
                        Some((body, error)) if round == 0 => Answer { body, error, unread: false },
                        Some((line, error)) => Answer {
                            body: with_id(&line, upstream_id),
                            error,
                            unread: false,
                        },
                        None => Answer::default(),
                    };
                }
                Some(ask) = run.slot.rx.recv() => {
                    run.waiting.push(ask);
                    while let Ok(Some(more)) = tokio::time::timeout(SETTLE, run.slot.rx.recv()).await {
                        run.waiting.push(more);
                    }
                }
            }
        }
    }

    /// A retry: the parked call `state` names gets `responses`, and goes on.
    pub async fn resume(
        self: &Arc<Self>,
        state: &str,
        tool: &str,
        responses: &Map<String, Value>,
        upstream_id: &str,
    ) -> Result<Answer, StateError> {
        let (id, round) = self.open(state, tool)?;
        let mut parked = {
            let mut all = self.parked.locked();
            match all.remove(&id) {
                Some(p) if p.round == round && p.at.elapsed() < PARKED_TTL => p,
                Some(p) => {
                    // An older round's state: the call waits for the newer one.
                    if p.round != round && p.at.elapsed() < PARKED_TTL {
                        all.insert(id, p);
                    }
                    return Err(StateError::Unknown);
                }
                None => return Err(StateError::Unknown),
            }
        };
        if parked.run.tool != tool {
            return Err(StateError::OtherTool {
                issued: parked.run.tool.clone(),
                called: tool.to_owned(),
            });
        }
        // Every response given is checked before any is passed on: a bad one changes nothing.
        let bad = parked.run.waiting.iter().find_map(|ask| {
            let v = responses.get(&ask.key)?;
            check_response(ask.method, v).err().map(|e| {
                (
                    ask.key.clone(),
                    format!("not a {} result ({e})", ask.method),
                )
            })
        });
        if let Some((key, why)) = bad {
            self.parked.locked().insert(id, parked);
            return Err(StateError::BadResponse { key, why });
        }
        let mut still = Vec::new();
        for ask in parked.run.waiting.drain(..) {
            match responses.get(&ask.key) {
                Some(v) => {
                    let _ = ask.answer.send(Ok(v.clone()));
                }
                None => still.push(ask),
            }
        }
        parked.run.waiting = still;
        parked.run.slot.shared.parked.store(false, Ordering::SeqCst);
        Ok(self.go_on(parked.run, id, round, upstream_id).await)
    }
}

/// Whether `value` is a result of the kind `method` asks for.
pub fn check_response(method: &str, value: &Value) -> Result<(), serde_json::Error> {
    #[allow(deprecated)] // sampling and roots: the handshake era's types
    match method {
        "elicitation/create" => {
            serde_json::from_value::<rmcp::model::ElicitResult>(value.clone()).map(|_| ())
        }
        "sampling/createMessage" => {
            serde_json::from_value::<rmcp::model::CreateMessageResult>(value.clone()).map(|_| ())
        }
        "roots/list" => {
            serde_json::from_value::<rmcp::model::ListRootsResult>(value.clone()).map(|_| ())
        }
        _ => Ok(()),
    }
}

/// `line` (a whole JSON-RPC response) with its id replaced: a parked call's answer goes to
/// the retry that resumed it.
fn with_id(line: &[u8], id: &str) -> Line {
    let Ok(mut v) = serde_json::from_slice::<Value>(line) else {
        return line.to_vec();
    };
    if let (Some(obj), Ok(id)) = (v.as_object_mut(), serde_json::from_str::<Value>(id)) {
        obj.insert("id".into(), id);
    }
    let mut out = v.to_string().into_bytes();
    out.push(b'\n');
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn state_is_sealed_to_its_call_round_and_tool() {
        let r = Registry::default();
        let s = r.seal(7, 2, "t");
        assert_eq!(r.open(&s, "t"), Ok((7, 2)));
        assert_eq!(r.open(&s, "other"), Err(StateError::Tampered));
        assert_eq!(
            r.open(&format!("{s}-TAMPERED"), "t"),
            Err(StateError::Tampered)
        );
        assert_eq!(r.open("garbage", "t"), Err(StateError::Tampered));
        let (body, tag) = s.split_once('.').unwrap();
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let mut raw = b64.decode(body).unwrap();
        raw[7] ^= 1; // another call's id, same tag
        assert_eq!(
            r.open(&format!("{}.{tag}", b64.encode(raw)), "t"),
            Err(StateError::Tampered)
        );
        // Another host's state is not this host's.
        assert_eq!(Registry::default().open(&s, "t"), Err(StateError::Tampered));
    }

    #[test]
    fn capabilities_come_from_the_request_meta_and_responses_are_typed() {
        let meta = json!({"io.modelcontextprotocol/clientCapabilities": {"sampling": {}}});
        let caps = Caps::from_meta(Some(&meta));
        assert!(caps.allows("sampling/createMessage"));
        assert!(!caps.allows("elicitation/create") && !caps.allows("roots/list"));
        assert_eq!(Caps::from_meta(None), Caps::default());
        assert!(
            check_response(
                "elicitation/create",
                &json!({"action": "accept", "content": {"name": "A"}})
            )
            .is_ok()
        );
        assert!(check_response("elicitation/create", &json!(12345)).is_err());
        assert!(check_response("roots/list", &json!({"roots": [{"uri": "file:///r"}]})).is_ok());
        assert!(check_response("roots/list", &json!({"roots": 3})).is_err());
    }

    #[test]
    fn a_parked_answer_takes_the_retrys_id() {
        let line = br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;
        let v: Value = serde_json::from_slice(&with_id(line, "\"r-2\"")).unwrap();
        assert_eq!(v["id"], "r-2");
        assert_eq!(v["result"], json!({"content": []}));
    }
}
