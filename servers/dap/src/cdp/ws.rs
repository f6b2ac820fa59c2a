//! One inspector connection: CDP commands over a WebSocket, answers correlated by `id`,
//! events handed to the adapter in order.

use kitbag_shared::lock::LockExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;

use super::failure::{AdapterFailure, AdapterResult};

/// How long one inspector command may take.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(15);

type Pending = Arc<Mutex<HashMap<i64, oneshot::Sender<AdapterResult<Value>>>>>;

/// A CDP event: method and params.
pub type Event = (String, Value);

pub struct Cdp {
    next_id: AtomicI64,
    pending: Pending,
    out: mpsc::UnboundedSender<Message>,
}

impl Cdp {
    /// Connect to `ws_url`; events arrive on the returned receiver until the socket closes
    /// (then the receiver ends). `unref`: ask Bun not to keep the program alive for this
    /// session (its `Ref-Event-Loop: 0` header), so a program that ran its last line exits.
    pub async fn connect(
        ws_url: &str,
        unref: bool,
    ) -> AdapterResult<(Arc<Cdp>, mpsc::UnboundedReceiver<Event>)> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let mut request =
            ws_url
                .into_client_request()
                .map_err(|source| AdapterFailure::Connect {
                    url: ws_url.to_string(),
                    source,
                })?;
        if unref {
            request.headers_mut().insert(
                "Ref-Event-Loop",
                tokio_tungstenite::tungstenite::http::HeaderValue::from_static("0"),
            );
        }
        let (socket, _) =
            // Nagle off: each command is one small frame awaiting its answer.
            tokio::time::timeout(COMMAND_TIMEOUT, tokio_tungstenite::connect_async_with_config(request, None, true))
                .await
                .map_err(|_| AdapterFailure::ConnectTimeout(ws_url.to_string()))?
                .map_err(|source| AdapterFailure::Connect { url: ws_url.to_string(), source })?;
        // Inspector servers write an answer and then an event (`resumed`, then `paused`)
        // with Nagle on: the event waits for our ACK, which the kernel delays ~40 ms. A quick
        // ACK after each message read lets it through at once. (A duplicate of the socket's
        // descriptor, to set the option from the reader.)
        let quick_ack = match socket.get_ref() {
            tokio_tungstenite::MaybeTlsStream::Plain(tcp) => {
                std::os::fd::AsFd::as_fd(tcp).try_clone_to_owned().ok()
            }
            _ => None,
        };
        let (mut sink, mut stream) = socket.split();
        let (out, mut out_rx) = mpsc::unbounded_channel::<Message>();
        let (events_tx, events) = mpsc::unbounded_channel::<Event>();
        let pending: Pending = Arc::default();
        tokio::spawn(async move {
            while let Some(m) = out_rx.recv().await {
                let closing = matches!(m, Message::Close(_));
                if sink.send(m).await.is_err() || closing {
                    break;
                }
            }
            let _ = sink.close().await;
        });
        let reader_pending = pending.clone();
        tokio::spawn(async move {
            while let Some(Ok(m)) = stream.next().await {
                if let Some(fd) = &quick_ack {
                    let _ = rustix::net::sockopt::set_tcp_quickack(fd, true);
                }
                let text = match m {
                    Message::Text(t) => t.to_string(),
                    Message::Binary(b) => String::from_utf8_lossy(&b).into_owned(),
                    Message::Close(_) => break,
                    _ => continue,
                };
                let Ok(v) = serde_json::from_str::<Value>(&text) else {
                    continue;
                };
                tracing::trace!(target: "kitbag_dap::cdp", "<- {}", text.chars().take(2000).collect::<String>());
                if let Some(id) = v["id"].as_i64() {
                    let tx = reader_pending.locked().remove(&id);
                    if let Some(tx) = tx {
                        let answer = match v.get("error") {
                            Some(e) => Err(AdapterFailure::Refused(
                                e["message"]
                                    .as_str()
                                    .unwrap_or("the inspector refused the command")
                                    .to_string(),
                            )),
                            None => Ok(v["result"].clone()),
                        };
                        let _ = tx.send(answer);
                    }
                } else if let Some(method) = v["method"].as_str() {
                    let _ = events_tx.send((method.to_string(), v["params"].clone()));
                }
            }
            // The socket is gone: every waiting command fails now.
            reader_pending.locked().clear();
        });
        Ok((
            Arc::new(Cdp {
                next_id: AtomicI64::new(1),
                pending,
                out,
            }),
            events,
        ))
    }

    /// Send a command without waiting for its answer.
    pub fn send(&self, method: &str, params: Value) -> oneshot::Receiver<AdapterResult<Value>> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = oneshot::channel();
        self.pending.locked().insert(id, tx);
        let msg = json!({"id": id, "method": method, "params": params});
        tracing::trace!(target: "kitbag_dap::cdp", "-> {msg}");
        if self.out.send(Message::text(msg.to_string())).is_err() {
            self.pending.locked().remove(&id);
        }
        rx
    }

    /// Send a command and wait for its answer.
    pub async fn call(&self, method: &str, params: Value) -> AdapterResult<Value> {
        let rx = self.send(method, params);
        match tokio::time::timeout(COMMAND_TIMEOUT, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(AdapterFailure::Closed),
            Err(_) => Err(AdapterFailure::NoReply(method.to_string())),
        }
    }

    /// Close the socket (the runtime then sees the debugger detach).
    pub fn close(&self) {
        let _ = self.out.send(Message::Close(None));
    }
}
