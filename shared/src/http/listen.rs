//! The listener: accepting connections (TCP, with TLS when configured, or a Unix socket),
//! serving each with hyper, and the shutdown sequence after SIGTERM (drain, grace).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Front, HttpOptions, Listen, MCP_PATH, Peer, tls};

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
        crate::server::shutdown_signal().await;
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
                            match &tls {
                                None => connection(&front, graceful.watcher(), stream, peer),
                                Some(tls) => tls_connection(
                                    &front,
                                    graceful.watcher(),
                                    tls.clone(),
                                    stream,
                                    peer,
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
                            connection(&front, graceful.watcher(), stream, peer);
                        }
                        Err(e) => {
                            tracing::warn!("accept failed: {e}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    },
                    () = &mut shutdown => break,
                }
            }
            let _ = std::fs::remove_file(path);
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
) {
    let front = front.clone();
    tokio::spawn(async move {
        match tokio::time::timeout(tls::HANDSHAKE_TIMEOUT, tls.accept(stream)).await {
            Ok(Ok(stream)) => connection(&front, watcher, stream, peer),
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

fn connection<S>(
    front: &Arc<Front>,
    watcher: hyper_util::server::graceful::Watcher,
    stream: S,
    peer: Peer,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let front = front.clone();
    let service = hyper::service::service_fn(move |request| {
        let front = front.clone();
        async move { Ok::<_, Infallible>(front.handle(request, peer).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        // A client that never finishes its headers is dropped (slowloris).
        .header_read_timeout(Duration::from_secs(30))
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    let conn = watcher.watch(conn);
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("HTTP connection ended: {e}");
        }
    });
}
