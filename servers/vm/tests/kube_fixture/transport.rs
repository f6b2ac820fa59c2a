//! The two ways a SPDY port-forward session reaches the fixture, as kubectl 1.32 tries them
//! (seen with `kubectl port-forward -v=8`):
//!
//! 1. `GET …/portforward` as a WebSocket with the subprotocol `SPDY/3.1+portforward.k8s.io`
//!    (kubectl's PortForwardWebsockets, on by default): the session's bytes travel in binary
//!    messages, split anywhere; a Close (1000) ends it. This is what the API server offers a
//!    client, translating to SPDY towards the kubelet.
//! 2. When that upgrade fails (or with `KUBECTL_PORT_FORWARD_WEBSOCKETS=false`): `POST
//!    …/portforward` with `Connection: Upgrade`, `Upgrade: SPDY/3.1` and
//!    `X-Stream-Protocol-Version: portforward.k8s.io`, answered by a 101 naming the same,
//!    after which the connection is the session.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_util::sync::CancellationToken;

use super::Inner;
use super::http::{Resp, full};
use super::portforward::{self, Dial, SharedStats};
use super::store::{ApiError, ApiResult};

/// The stream protocol inside the session.
pub const PROTOCOL: &str = "portforward.k8s.io";
/// The WebSocket subprotocol of a tunnelled session.
pub const TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";

const PROTOCOL_HEADER: &str = "x-stream-protocol-version";

/// A plain HTTP upgrade to SPDY (not a WebSocket).
pub fn is_spdy_upgrade(req: &Request<Incoming>) -> bool {
    req.headers()
        .get_all(hyper::header::UPGRADE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().starts_with("spdy/"))
}

fn record(stats: &SharedStats, how: &'static str) {
    stats
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .transports
        .push(how);
}

/// Answer a SPDY upgrade with 101 and serve the session on the connection. The protocol is
/// negotiated as the kubelet's handshake does: none offered is accepted, others are 403.
pub fn upgrade_spdy(
    inner: &Arc<Inner>,
    mut req: Request<Incoming>,
    dial: Dial,
    who: String,
) -> ApiResult<Resp> {
    let offered: Vec<String> = req
        .headers()
        .get_all(PROTOCOL_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|s| s.trim().to_string()))
        .filter(|s| !s.is_empty())
        .collect();
    if !offered.is_empty() && !offered.iter().any(|p| p == PROTOCOL) {
        return Err(ApiError::new(
            403,
            "Forbidden",
            format!(
                "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server supports [{PROTOCOL:?}]"
            ),
        ));
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    let (stats, cancel) = (inner.portforward.clone(), inner.cancel.clone());
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        record(&stats, "upgrade");
        portforward::serve(TokioIo::new(upgraded), dial, who, stats, cancel).await;
    });
    let mut resp = Response::new(full(Bytes::new()));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    for (name, value) in [
        ("connection", "Upgrade"),
        ("upgrade", "SPDY/3.1"),
        (PROTOCOL_HEADER, PROTOCOL),
    ] {
        h.insert(name, hyper::header::HeaderValue::from_static(value));
    }
    Ok(resp)
}

fn normal_close() -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    }))
}

/// Serve a session whose bytes come and go in the WebSocket's binary messages.
pub async fn tunnel<S>(
    ws: WebSocketStream<S>,
    dial: Dial,
    who: String,
    stats: SharedStats,
    cancel: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    record(&stats, "websocket");
    let (here, there) = tokio::io::duplex(256 * 1024);
    let session = tokio::spawn(portforward::serve(there, dial, who, stats, cancel));
    let (mut sink, mut messages) = ws.split();
    let (mut rd, mut wr) = tokio::io::split(here);
    let inbound = async {
        while let Some(msg) = messages.next().await {
            match msg {
                Ok(Message::Binary(b)) => {
                    if wr.write_all(&b).await.is_err() {
                        break;
                    }
                }
                Ok(Message::Close(_)) | Err(_) => break,
                // Pings are answered by tungstenite; text carries no SPDY.
                Ok(_) => {}
            }
        }
        // The session sees the end of its connection.
        let _ = wr.shutdown().await;
    };
    let outbound = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let msg = Message::Binary(Bytes::copy_from_slice(&buf[..n]));
                    if sink.send(msg).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = sink.send(normal_close()).await;
    };
    tokio::pin!(inbound, outbound);
    // Whichever side ends first, the other gets a moment to finish (the session's GOAWAY
    // and the Close out; the client's Close in).
    tokio::select! {
        _ = &mut inbound => { let _ = tokio::time::timeout(Duration::from_secs(5), &mut outbound).await; }
        _ = &mut outbound => { let _ = tokio::time::timeout(Duration::from_secs(2), &mut inbound).await; }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), session).await;
}
