//! Exposed ports: a loopback listener owned by the server per exposed guest port; each
//! connection resumes a paused instance, asks the agent to dial the guest port inside the
//! instance, and relays bytes both ways. Open connections hold the idle timer.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::VmState;
use crate::proto::{self, Answer, Request};

/// Start relaying `listener`'s connections into `guest_port` of instance `id`.
pub fn serve(
    state: Arc<VmState>,
    id: String,
    guest_port: u16,
    listener: TcpListener,
    connections: Arc<AtomicUsize>,
    close: CancellationToken,
) {
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = close.cancelled() => break,
                a = listener.accept() => a,
            };
            let Ok((tcp, _)) = accepted else { continue };
            let _ = tcp.set_nodelay(true);
            let state = state.clone();
            let id = id.clone();
            let connections = connections.clone();
            let close = close.clone();
            tokio::spawn(async move {
                connections.fetch_add(1, Ordering::Relaxed);
                tokio::select! {
                    _ = close.cancelled() => {}
                    _ = relay(&state, &id, guest_port, tcp) => {}
                }
                connections.fetch_sub(1, Ordering::Relaxed);
                if let Some(i) = state.lock().get_mut(&id) {
                    i.touch();
                }
            });
        }
    });
}

async fn relay(state: &Arc<VmState>, id: &str, guest_port: u16, mut tcp: TcpStream) {
    // A connection to a paused instance resumes it before dialing (a dial into a frozen
    // instance would hang).
    let Ok((_, sandbox, _)) = state.sandbox(id, false, &None) else {
        return;
    };
    let Ok(stream) = sandbox.agent().await else {
        return;
    };
    // One buffered stream both ways: bytes read ahead past the answer belong to the guest
    // stream, and the relay below starts with them.
    let mut agent = tokio::io::BufReader::new(stream);
    if proto::write_line(&mut agent, &Request::Connect { port: guest_port })
        .await
        .is_err()
    {
        return;
    }
    let answer: Answer = match proto::read_line(&mut agent).await {
        Ok(a) => a,
        Err(_) => return,
    };
    if !answer.ok {
        // Nothing listens on the guest port: the client sees the connection close.
        return;
    }
    let _ = tokio::io::copy_bidirectional_with_sizes(
        &mut tcp,
        &mut agent,
        proto::RELAY_BUF,
        proto::RELAY_BUF,
    )
    .await;
}

/// Whether something accepts on the guest port now (asked through the agent).
pub async fn guest_listening(sandbox: &crate::engine::Engine, guest_port: u16) -> bool {
    let Ok(stream) = sandbox.agent().await else {
        return false;
    };
    matches!(proto::request(stream, &Request::Connect { port: guest_port }).await, Ok(a) if a.ok)
}
