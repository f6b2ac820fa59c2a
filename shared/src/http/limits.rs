//! What clients together may hold of a listener: connections, request-body bytes in flight,
//! the time a request body may take to arrive, and the time a client may leave its answer
//! unread. Each limit is one number (a flag of
//! [`super::HttpArgs`]); past it the client is told to come back (503 with `Retry-After`, or
//! 408 for a body that stalls) instead of the process growing or a descriptor staying taken.
//!
//! Why both a per-request and a total cap: `--max-request-bytes` alone bounds one body, but
//! sixty concurrent 31 MiB bodies are 4.6 GB; the in-flight budget bounds them all together.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;

/// The limits of one listener.
#[derive(Debug, Clone)]
pub struct Limits {
    /// From the end of a request's headers to the last byte of its body.
    pub body_timeout: Duration,
    /// A connection that sends no complete request head for this long is closed (between
    /// requests on a kept-alive connection too), and so is one whose client reads nothing of
    /// what is written to it for this long ([`WriteDeadline`]).
    pub idle_timeout: Duration,
    /// Connections served at once; one past it is answered 503 and closed.
    pub max_connections: usize,
    /// Request-body bytes held at once across all requests, from arrival until the request
    /// is answered; a body that would take more is answered 503.
    pub max_inflight_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            body_timeout: Duration::from_secs(DEFAULT_BODY_TIMEOUT_SECS),
            idle_timeout: Duration::from_secs(DEFAULT_IDLE_TIMEOUT_SECS),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_inflight_bytes: DEFAULT_MAX_INFLIGHT_BYTES,
        }
    }
}

pub const DEFAULT_BODY_TIMEOUT_SECS: u64 = 30;
pub const DEFAULT_IDLE_TIMEOUT_SECS: u64 = 30;
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
pub const DEFAULT_MAX_INFLIGHT_BYTES: usize = 256 * 1024 * 1024;

/// What `Retry-After` says when a connection or the byte budget is full: both free up as the
/// requests in flight are answered, usually within a second.
pub const BUSY_RETRY_AFTER_SECS: u64 = 1;

/// Request-body bytes held now, across every request of the listener.
#[derive(Debug)]
pub struct Budget {
    used: AtomicUsize,
    cap: usize,
}

impl Budget {
    pub fn new(cap: usize) -> Self {
        Budget {
            used: AtomicUsize::new(0),
            cap,
        }
    }

    /// An empty hold on the budget, grown as a body arrives, given back when dropped.
    pub fn hold(&self) -> Held<'_> {
        Held {
            budget: self,
            bytes: 0,
        }
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

/// Bytes one request holds of the [`Budget`].
#[derive(Debug)]
pub struct Held<'a> {
    budget: &'a Budget,
    bytes: usize,
}

impl Held<'_> {
    /// Take `n` more bytes; false (nothing taken) when that would pass the cap.
    #[must_use]
    pub fn grow(&mut self, n: usize) -> bool {
        let cap = self.budget.cap;
        let taken = self
            .budget
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|total| *total <= cap)
            })
            .is_ok();
        if taken {
            self.bytes += n;
        }
        taken
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// Why a body was not read whole.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("a request body may carry at most {0} bytes")]
    TooLarge(usize),
    #[error("the server holds as many request bytes as it takes at once; retry shortly")]
    Busy,
    #[error("the request body did not arrive within {0:?}")]
    Timeout(Duration),
    #[error("reading the body failed: {0}")]
    Read(String),
}

/// Read a body no one wants to its end, dropping it as it comes: true when it ended within
/// `max` bytes and `deadline` (the connection can take the next request), false when it did
/// not (too long, too slow, broken: the connection is to be closed).
pub async fn drain_body<B>(body: B, max: usize, deadline: Duration) -> bool
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
{
    let drain = async move {
        let mut body = body;
        let mut seen = 0usize;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return false };
            if let Ok(data) = frame.into_data() {
                seen += data.len();
                if seen > max {
                    return false;
                }
            }
        }
        true
    };
    tokio::time::timeout(deadline, drain).await.unwrap_or(false)
}

/// The whole body: at most `max` bytes (an announced `Content-Length` above it is refused
/// before a byte is read), each byte taken from `held` before it is kept (an announced length
/// is taken at once, so a body that cannot fit is refused before it is sent), all of it
/// within `timeout` of the call — a client that stops sending gets no more time than one that
/// trickles.
pub async fn read_body<B>(
    body: B,
    announced: Option<u64>,
    max: usize,
    timeout: Duration,
    held: &mut Held<'_>,
) -> Result<Bytes, BodyError>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    if announced.is_some_and(|n| n > max as u64) {
        return Err(BodyError::TooLarge(max));
    }
    // The announced length is at most `max`, a usize.
    let announced = announced.and_then(|n| usize::try_from(n).ok());
    if let Some(n) = announced
        && !held.grow(n)
    {
        return Err(BodyError::Busy);
    }
    let read = async move {
        let mut body = body;
        let mut out = BytesMut::with_capacity(announced.unwrap_or(0));
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| BodyError::Read(e.to_string()))?;
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            if data.len() > max - out.len() {
                return Err(BodyError::TooLarge(max));
            }
            // hyper holds a body to its Content-Length: only a chunked body grows here.
            if out.len() + data.len() > announced.unwrap_or(0) && !held.grow(data.len()) {
                return Err(BodyError::Busy);
            }
            out.extend_from_slice(&data);
        }
        Ok(out.freeze())
    };
    tokio::time::timeout(timeout, read)
        .await
        .unwrap_or(Err(BodyError::Timeout(timeout)))
}

/// A connection's stream whose writes may not stall longer than a limit: a client that reads
/// nothing of its answer (or of its event stream) for that long gets its connection closed,
/// where hyper alone would wait for it for good, holding the answer's memory and a connection
/// slot. Time spent with nothing to write (a long tool call, a quiet event stream) is not
/// counted: only a write the socket will not take.
pub struct WriteDeadline<S> {
    inner: S,
    limit: Duration,
    /// Running since the socket first refused a write that is still waiting.
    stalled: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteDeadline<S> {
    pub fn new(inner: S, limit: Duration) -> Self {
        WriteDeadline {
            inner,
            limit,
            stalled: None,
        }
    }

    /// A write's outcome, the stall timer started or cleared by it.
    fn watch<T>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        poll: std::task::Poll<std::io::Result<T>>,
    ) -> std::task::Poll<std::io::Result<T>> {
        use std::future::Future;
        use std::task::Poll;
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the client read nothing for {limit:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for WriteDeadline<S> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let poll = std::pin::Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watch(cx, poll)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let poll = std::pin::Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let poll = std::pin::Pin::new(&mut this.inner).poll_flush(cx);
        this.watch(cx, poll)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let poll = std::pin::Pin::new(&mut this.inner).poll_shutdown(cx);
        this.watch(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{Full, StreamBody};

    #[test]
    fn the_budget_is_shared_and_given_back() {
        let budget = Budget::new(100);
        let mut a = budget.hold();
        assert!(a.grow(60));
        let mut b = budget.hold();
        assert!(!b.grow(41), "past the cap");
        assert!(b.grow(40));
        assert_eq!(budget.used(), 100);
        drop(a);
        assert_eq!(budget.used(), 40);
        assert!(b.grow(60));
        drop(b);
        assert_eq!(budget.used(), 0);
        assert!(!budget.hold().grow(usize::MAX), "no overflow");
    }

    #[tokio::test]
    async fn bodies_are_read_under_the_caps() {
        let budget = Budget::new(10);
        let secs = Duration::from_secs(5);
        let body = |s: &'static str| Full::new(Bytes::from_static(s.as_bytes()));
        let mut held = budget.hold();
        let got = read_body(body("hello"), Some(5), 8, secs, &mut held)
            .await
            .expect("read");
        assert_eq!((&got[..], budget.used()), (&b"hello"[..], 5));
        let mut other = budget.hold();
        assert!(matches!(
            read_body(body("hello!"), Some(6), 8, secs, &mut other).await,
            Err(BodyError::Busy)
        ));
        assert!(matches!(
            read_body(body("far too long"), Some(12), 8, secs, &mut other).await,
            Err(BodyError::TooLarge(8))
        ));
        // Chunked (no length): taken as it comes.
        assert!(matches!(
            read_body(body("chunked"), None, 8, secs, &mut other).await,
            Err(BodyError::Busy)
        ));
        drop(held);
        let got = read_body(body("chunked"), None, 8, secs, &mut other)
            .await
            .expect("read");
        assert_eq!((&got[..], budget.used()), (&b"chunked"[..], 7));
    }

    #[tokio::test]
    async fn a_reader_that_stops_reading_fails_the_write_in_time() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (server, mut client) = tokio::io::duplex(64);
        let mut server = WriteDeadline::new(server, Duration::from_millis(100));
        // Read while the client reads: no limit applies to a slow answer that is taken.
        let reader = tokio::spawn(async move {
            let mut got = vec![0u8; 256];
            client.read_exact(&mut got).await.map(|_| client)
        });
        server.write_all(&[7u8; 256]).await.expect("taken");
        let _client = reader.await.expect("join").expect("read");
        // Now nobody reads: the write fails once the pipe is full and the limit passes.
        let started = std::time::Instant::now();
        let err = server.write_all(&[7u8; 1024]).await.expect_err("stalled");
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_stalled_body_times_out() {
        let budget = Budget::new(100);
        let stalled = StreamBody::new(futures::stream::pending::<
            Result<hyper::body::Frame<Bytes>, std::convert::Infallible>,
        >());
        let started = std::time::Instant::now();
        let result = read_body(
            stalled,
            Some(10),
            100,
            Duration::from_millis(50),
            &mut budget.hold(),
        )
        .await;
        assert!(matches!(result, Err(BodyError::Timeout(_))), "{result:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(budget.used(), 0, "given back");
    }
}
