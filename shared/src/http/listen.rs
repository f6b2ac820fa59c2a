//! The listener: accepting connections (TCP, with TLS when configured, or a Unix socket),
//! serving each with hyper up to `--http-max-connections` at once, and the shutdown sequence
//! after SIGTERM (drain, grace).
//!
//! A connection past the cap is not left waiting in the backlog (its client would only see a
//! timeout) nor served (each holds a descriptor: 1,100 stalled ones once starved a process of
//! its 1,024): it is answered 503 with `Retry-After` and closed, within two seconds. Only so
//! many are being answered so at once; beyond those, a connection is closed unanswered.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::limits::WriteDeadline;
use super::{Front, HttpOptions, Listen, MCP_PATH, Peer, tls};

/// Connections past the cap being answered 503 at once.
const REFUSING: usize = 64;
/// How long answering one of them may take, TLS handshake included.
const REFUSAL_DEADLINE: Duration = Duration::from_secs(2);

/// The connection slots: one per connection served, and those for refusing more.
struct Slots {
    served: Arc<Semaphore>,
    refusing: Arc<Semaphore>,
}

impl Slots {
    fn new(max_connections: usize) -> Self {
        Slots {
            served: Arc::new(Semaphore::new(max_connections.min(Semaphore::MAX_PERMITS))),
            refusing: Arc::new(Semaphore::new(REFUSING)),
        }
    }

    /// A slot for a new connection, held until it ends; None when all are taken.
    fn take(&self) -> Option<OwnedSemaphorePermit> {
        self.served.clone().try_acquire_owned().ok()
    }
}

pub(super) async fn accept_loop(
    front: Arc<Front>,
    options: &HttpOptions,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let tls = options.tls.clone().map(|t| t.0);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    // SIGTERM, then the drain: still accepting, `/healthz` 503 (a Service's endpoints drop
    // this pod meanwhile, so no new connection is refused).
    let shutdown = async {
        crate::runtime::shutdown_signal().await;
        front
            .draining
            .store(true, std::sync::atomic::Ordering::Relaxed);
        if !options.drain.is_zero() {
            tracing::info!(
                "draining for {:?} before closing the listener",
                options.drain
            );
            tokio::time::sleep(options.drain).await;
        }
    };
    tokio::pin!(shutdown);
    let slots = Slots::new(options.limits.max_connections);
    match &options.listen {
        Listen::Tcp(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| anyhow::anyhow!("--http {addr}: {e}"))?;
            let bound = listener.local_addr()?;
            let scheme = if tls.is_some() { "https" } else { "http" };
            // Printed, not logged: a script that asked for port 0 needs the port.
            eprintln!("serving MCP at {scheme}://{bound}{MCP_PATH}");
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, addr)) => {
                            let _ = stream.set_nodelay(true);
                            let peer = Peer { transport: "tcp", addr: Some(addr) };
                            match (slots.take(), &tls) {
                                (None, tls) => refuse(&front, &slots, stream, tls.clone()),
                                (Some(slot), None) => {
                                    connection(&front, graceful.watcher(), stream, peer, slot);
                                }
                                (Some(slot), Some(tls)) => tls_connection(
                                    &front,
                                    graceful.watcher(),
                                    tls.clone(),
                                    stream,
                                    peer,
                                    slot,
                                ),
                            }
                        }
                        Err(e) => {
                            // Out of descriptors and the like: wait, do not spin.
                            tracing::warn!("accept failed: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    },
                    () = &mut shutdown => break,
                }
            }
        }
        Listen::Unix(path) => {
            let listener = bind_unix(path)?;
            eprintln!("serving MCP at unix:{} (path {MCP_PATH})", path.display());
            loop {
                tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => {
                            let peer = Peer { transport: "unix", addr: None };
                            match slots.take() {
                                None => refuse(&front, &slots, stream, None),
                                Some(slot) => {
                                    connection(&front, graceful.watcher(), stream, peer, slot);
                                }
                            }
                        }
                        Err(e) => {
                            tracing::warn!("accept failed: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    },
                    () = &mut shutdown => break,
                }
            }
            let _ = tokio::fs::remove_file(path).await;
        }
    }
    // Requests in flight (their answers not produced yet) get the grace to finish; then open
    // SSE streams end, and what is still being written gets a moment.
    let deadline = tokio::time::Instant::now() + options.grace;
    while front.metrics.in_flight() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cancel.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(1), graceful.shutdown()).await;
    Ok(())
}

/// The TLS handshake on a task of its own (a slow client holds up nobody), then HTTP.
fn tls_connection(
    front: &Arc<Front>,
    watcher: hyper_util::server::graceful::Watcher,
    tls: tokio_rustls::TlsAcceptor,
    stream: tokio::net::TcpStream,
    peer: Peer,
    slot: OwnedSemaphorePermit,
) {
    let front = front.clone();
    tokio::spawn(async move {
        match tokio::time::timeout(tls::HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
            Ok(Ok(stream)) => connection(&front, watcher, stream, peer, slot),
            // A client without an accepted certificate, or not speaking TLS.
            Ok(Err(e)) => tracing::debug!("TLS handshake refused: {e}"),
            Err(_) => tracing::debug!("TLS handshake timed out"),
        }
    });
}

/// A socket only this user can reach; a stale socket file (nobody listening) is replaced.
fn bind_unix(path: &std::path::Path) -> anyhow::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            anyhow::bail!("--unix {}: exists and is not a socket", path.display());
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            anyhow::bail!(
                "--unix {}: another server is listening there",
                path.display()
            );
        }
        std::fs::remove_file(path)?;
    }
    // Created under a tight umask, then set explicitly: no window where others can connect.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = tokio::net::UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let listener = bound.map_err(|e| anyhow::anyhow!("--unix {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Serve one connection; its slot is given back when it ends.
fn connection<S>(
    front: &Arc<Front>,
    watcher: hyper_util::server::graceful::Watcher,
    stream: S,
    peer: Peer,
    slot: OwnedSemaphorePermit,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let idle = front.limits.idle_timeout;
    let front = front.clone();
    let service = hyper::service::service_fn(move |request| {
        let front = front.clone();
        async move { Ok::<_, Infallible>(front.handle(request, peer).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        // A client that never finishes its headers — on a new connection, or between requests
        // on a kept-alive one — is dropped (slowloris, idle keep-alive), and so is one that
        // stops reading what is written to it. The body has its own deadline
        // (`limits::read_body`).
        .header_read_timeout(idle)
        .serve_connection(
            hyper_util::rt::TokioIo::new(WriteDeadline::new(stream, idle)),
            service,
        );
    let conn = watcher.watch(conn);
    tokio::spawn(async move {
        let _slot = slot;
        if let Err(e) = conn.await {
            tracing::debug!("HTTP connection ended: {e}");
        }
    });
}

/// A connection past the cap: 503 with `Retry-After` to its first request, then closed — or,
/// when [`REFUSING`] are being answered already, closed at once.
fn refuse<S>(front: &Arc<Front>, slots: &Slots, stream: S, tls: Option<tokio_rustls::TlsAcceptor>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    front.metrics.refusal("busy");
    let Ok(permit) = slots.refusing.clone().try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        let _permit = permit;
        let answer = async move {
            match tls {
                None => answer_busy(stream).await,
                Some(tls) => {
                    if let Ok(stream) = tls.accept(stream).await {
                        answer_busy(stream).await;
                    }
                }
            }
        };
        let _ = tokio::time::timeout(REFUSAL_DEADLINE, answer).await;
    });
}

async fn answer_busy<S>(stream: S)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(|_request| async {
        Ok::<_, Infallible>(super::busy(
            "the server is serving as many connections as it takes (--http-max-connections); retry shortly",
        ))
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive(false)
        .header_read_timeout(REFUSAL_DEADLINE)
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
        .await;
    if let Err(e) = served {
        tracing::debug!("refused connection: {e}");
    }
}
