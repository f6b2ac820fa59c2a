//! One CDP connection, whatever carries it: commands numbered, answers matched by `id`,
//! events handed on in order — to the receiver subscribed to their session, else to the
//! connection's own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kitbag_shared::lock::LockExt;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// An event: its method and params, and the session it came from (None: the browser's own).
#[derive(Debug, Clone)]
pub struct Event {
    pub method: String,
    pub params: Value,
    pub session: Option<String>,
}

/// Why a command got no result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CdpError {
    /// The other side answered with an error; its message.
    #[error("{method}: {message}")]
    Refused { method: String, message: String },
    /// The connection ended before the answer came.
    #[error("the DevTools connection closed")]
    Closed,
    /// No answer within the connection's command timeout.
    #[error("no answer to {0} in time")]
    NoReply(String),
}

type Answer = Result<Value, CdpError>;
type Pending = Arc<Mutex<HashMap<i64, (String, oneshot::Sender<Answer>)>>>;
type Subscribers = Arc<Mutex<HashMap<String, mpsc::UnboundedSender<Event>>>>;

/// The sending side: what callers hold.
pub struct Connection {
    next_id: AtomicI64,
    pending: Pending,
    subscribers: Subscribers,
    out: mpsc::UnboundedSender<String>,
    timeout: Duration,
    /// Cleared when the reader's half is dropped: nothing more will come in.
    open: Arc<AtomicBool>,
}

/// The receiving side: the transport's reader gives it every message it reads. Dropping it
/// (the transport ended) fails every command still waiting with [`CdpError::Closed`].
pub struct Inbound {
    pending: Pending,
    subscribers: Subscribers,
    events: mpsc::UnboundedSender<Event>,
    open: Arc<AtomicBool>,
}

impl Connection {
    /// A connection whose messages go out on `out` (each one JSON text, the transport frames
    /// it). Returns the reader's half and the receiver of events no session subscribed to.
    pub fn new(
        out: mpsc::UnboundedSender<String>,
        timeout: Duration,
    ) -> (Arc<Connection>, Inbound, mpsc::UnboundedReceiver<Event>) {
        let pending: Pending = Arc::default();
        let subscribers: Subscribers = Arc::default();
        let (events_tx, events) = mpsc::unbounded_channel();
        let open = Arc::new(AtomicBool::new(true));
        let connection = Arc::new(Connection {
            next_id: AtomicI64::new(1),
            pending: pending.clone(),
            subscribers: subscribers.clone(),
            out,
            timeout,
            open: open.clone(),
        });
        let inbound = Inbound {
            pending,
            subscribers,
            events: events_tx,
            open,
        };
        (connection, inbound, events)
    }

    /// Send a command (to `session`, or the browser itself) without waiting for its answer.
    pub fn send(
        &self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> oneshot::Receiver<Answer> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.locked().insert(id, (method.to_string(), tx));
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        tracing::trace!(target: "kitbag_cdp", "-> {msg}");
        if self.out.send(msg.to_string()).is_err() {
            // Dropping the sender makes the receiver say Closed.
            self.pending.locked().remove(&id);
        }
        rx
    }

    /// A command to the browser, waited for.
    pub async fn call(&self, method: &str, params: Value) -> Answer {
        self.wait(method, self.send(None, method, params)).await
    }

    /// A command to one session, waited for.
    pub async fn call_in(&self, session: &str, method: &str, params: Value) -> Answer {
        self.wait(method, self.send(Some(session), method, params))
            .await
    }

    async fn wait(&self, method: &str, rx: oneshot::Receiver<Answer>) -> Answer {
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(CdpError::Closed),
            Err(_) => Err(CdpError::NoReply(method.to_string())),
        }
    }

    /// Events of `session` from now on, in order, on their own receiver (until
    /// [`Connection::unsubscribe`]).
    pub fn subscribe(&self, session: &str) -> mpsc::UnboundedReceiver<Event> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.subscribers.locked().insert(session.to_string(), tx);
        rx
    }

    pub fn unsubscribe(&self, session: &str) {
        self.subscribers.locked().remove(session);
    }

    /// Whether the transport still carries messages both ways.
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Relaxed) && !self.out.is_closed()
    }
}

impl Inbound {
    /// One message read from the transport: an answer goes to its command, an event to its
    /// session's subscriber or the connection's receiver. What is not JSON is ignored.
    pub fn handle(&self, text: &str) {
        let Ok(v) = serde_json::from_str::<Value>(text) else {
            return;
        };
        tracing::trace!(target: "kitbag_cdp", "<- {}", text.chars().take(2000).collect::<String>());
        if let Some(id) = v["id"].as_i64() {
            let Some((method, tx)) = self.pending.locked().remove(&id) else {
                return;
            };
            let answer = match v.get("error") {
                Some(e) => Err(CdpError::Refused {
                    method,
                    message: e["message"]
                        .as_str()
                        .unwrap_or("the command was refused")
                        .to_string(),
                }),
                None => Ok(v["result"].clone()),
            };
            let _ = tx.send(answer);
        } else if let Some(method) = v["method"].as_str() {
            let session = v["sessionId"].as_str().map(str::to_string);
            let event = Event {
                method: method.to_string(),
                params: v["params"].clone(),
                session: session.clone(),
            };
            let subscriber = session.and_then(|s| self.subscribers.locked().get(&s).cloned());
            match subscriber {
                Some(tx) => {
                    let _ = tx.send(event);
                }
                None => {
                    let _ = self.events.send(event);
                }
            }
        }
    }
}

impl Drop for Inbound {
    fn drop(&mut self) {
        self.open.store(false, Ordering::Relaxed);
        self.pending.locked().clear();
        self.subscribers.locked().clear();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_meet_their_commands_and_events_their_sessions() {
        let (out, mut wire) = mpsc::unbounded_channel();
        let (c, inbound, mut browser_events) = Connection::new(out, Duration::from_secs(5));
        let mut page = c.subscribe("S1");
        let first = c.send(None, "Browser.getVersion", json!({}));
        let second = c.send(Some("S1"), "Page.navigate", json!({"url": "https://x/"}));
        let sent: Value = serde_json::from_str(&wire.recv().await.unwrap()).unwrap();
        assert_eq!(sent["method"], "Browser.getVersion");
        assert!(sent.get("sessionId").is_none());
        let sent2: Value = serde_json::from_str(&wire.recv().await.unwrap()).unwrap();
        assert_eq!(sent2["sessionId"], "S1");
        // Answers out of order still meet their commands.
        inbound.handle(&json!({"id": sent2["id"], "error": {"message": "no"}}).to_string());
        inbound.handle(&json!({"id": sent["id"], "result": {"product": "P"}}).to_string());
        inbound.handle(r#"{"method":"Page.loadEventFired","params":{},"sessionId":"S1"}"#);
        inbound.handle(r#"{"method":"Target.targetCreated","params":{"t":1}}"#);
        inbound.handle("not json");
        assert_eq!(first.await.unwrap().unwrap()["product"], "P");
        assert_eq!(
            second.await.unwrap(),
            Err(CdpError::Refused {
                method: "Page.navigate".into(),
                message: "no".into()
            })
        );
        assert_eq!(page.recv().await.unwrap().method, "Page.loadEventFired");
        assert_eq!(
            browser_events.recv().await.unwrap().method,
            "Target.targetCreated"
        );
    }

    #[tokio::test]
    async fn a_closed_transport_fails_waiting_commands() {
        let (out, _wire) = mpsc::unbounded_channel();
        let (c, inbound, _events) = Connection::new(out, Duration::from_secs(5));
        let waiting = c.send(None, "Browser.getVersion", json!({}));
        assert!(c.is_open());
        drop(inbound);
        assert!(waiting.await.is_err(), "the sender was dropped");
        assert!(!c.is_open());
        let (out, wire) = mpsc::unbounded_channel();
        let (c, _inbound, _events) = Connection::new(out, Duration::from_millis(50));
        drop(wire);
        assert_eq!(c.call("X.y", json!({})).await, Err(CdpError::Closed));
        let (out, _wire) = mpsc::unbounded_channel();
        let (c, _inbound, _events) = Connection::new(out, Duration::from_millis(50));
        assert_eq!(
            c.call("X.y", json!({})).await,
            Err(CdpError::NoReply("X.y".into()))
        );
    }
}
