//! One inspector connection: CDP over a WebSocket. Commands and their answers, and events in
//! order, are kitbag-cdp's [`Connection`]; this module carries its messages over the socket.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use kitbag_cdp::Connection;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;

use super::failure::{AdapterFailure, AdapterResult};

pub use kitbag_cdp::Event;

/// How long one inspector command may take.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(15);

pub struct Cdp {
    connection: Arc<Connection>,
    /// Asks the writer to close the socket.
    close: mpsc::UnboundedSender<()>,
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
        let (out, mut out_rx) = mpsc::unbounded_channel::<String>();
        let (close, mut close_rx) = mpsc::unbounded_channel::<()>();
        let (connection, inbound, events) = Connection::new(out, COMMAND_TIMEOUT);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    // Commands already queued go out before the close.
                    biased;
                    m = out_rx.recv() => match m {
                        Some(text) => {
                            if sink.send(Message::text(text)).await.is_err() {
                                break;
                            }
                        }
                        None => break,
                    },
                    _ = close_rx.recv() => break,
                }
            }
            let _ = sink.close().await;
        });
        tokio::spawn(async move {
            while let Some(Ok(m)) = stream.next().await {
                if let Some(fd) = &quick_ack {
                    let _ = rustix::net::sockopt::set_tcp_quickack(fd, true);
                }
                match m {
                    Message::Text(t) => inbound.handle(&t),
                    Message::Binary(b) => inbound.handle(&String::from_utf8_lossy(&b)),
                    Message::Close(_) => break,
                    _ => continue,
                }
            }
            // The socket is gone: dropping `inbound` fails every waiting command.
        });
        Ok((Arc::new(Cdp { connection, close }), events))
    }

    /// Send a command without waiting for its answer.
    pub fn send(
        &self,
        method: &str,
        params: Value,
    ) -> oneshot::Receiver<Result<Value, kitbag_cdp::CdpError>> {
        self.connection.send(None, method, params)
    }

    /// Send a command and wait for its answer.
    pub async fn call(&self, method: &str, params: Value) -> AdapterResult<Value> {
        Ok(self.connection.call(method, params).await?)
    }

    /// Close the socket (the runtime then sees the debugger detach).
    pub fn close(&self) {
        let _ = self.close.send(());
    }
}
