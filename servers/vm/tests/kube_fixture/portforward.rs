//! `pods/portforward` as kubectl speaks it: the `portforward.k8s.io` stream protocol over a
//! SPDY/3.1 session ([`super::spdy`]), what a kubelet serves.
//!
//! - **Transports** ([`super::transport`]): a WebSocket whose subprotocol is
//!   `SPDY/3.1+portforward.k8s.io` carrying the session's bytes in binary messages
//!   (kubectl 1.32's first try), or a plain HTTP upgrade to `SPDY/3.1` with
//!   `X-Stream-Protocol-Version: portforward.k8s.io` (its fallback, and its only way with
//!   `KUBECTL_PORT_FORWARD_WEBSOCKETS=false`).
//! - **Streams**: per forwarded connection the client opens an `error` and a `data` stream
//!   (headers `streamtype`, `port`, `requestid`; a missing `requestid` is derived from the
//!   stream id, as the kubelet does for old clients). Each is answered with SYN_REPLY; once
//!   both of a request are there, the pod's port is dialled through its agent and the data
//!   stream relayed both ways. A FIN from the client half-closes the pod connection; the pod
//!   closing sends FIN on the data stream; a failed dial writes the kubelet's message on the
//!   error stream. The error stream gets its FIN when the pair is done (the client waits
//!   for it); RST_STREAM on the data stream ends the relay.
//! - **Flow control** (SPDY/3.1: a window per stream and one for the session, 64 KiB at
//!   first): received DATA is acknowledged with WINDOW_UPDATEs (stream and session) as it is
//!   written to the pod, every half window (the session never waits on a pod: a peer that
//!   keeps to its windows has at most a window queued per stream). Sending honours the
//!   peer's windows only once the peer has shown it does flow control (a WINDOW_UPDATE, or
//!   SETTINGS with an initial window): kubectl's SPDY library (moby/spdystream) never sends
//!   WINDOW_UPDATE and ignores those it gets, and a kubelet (spdystream too) sends without
//!   waiting, so holding kubectl to 64 KiB would stall every download. For the same reason
//!   a client that overruns its receive window is counted ([`Stats::window_overruns`]), not
//!   reset.
//! - PINGs from the client (odd ids) are echoed; GOAWAY stops new streams; the fixture's
//!   end sends GOAWAY. A stream pair that never completes is left to the session's end.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use super::spdy::{
    self, Frame, HeaderCompressor, HeaderDecompressor, INITIAL_WINDOW,
    SETTINGS_INITIAL_WINDOW_SIZE, goaway, header, rst,
};

pub type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
pub type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;
/// Connect to a port inside the pod: its two halves, or why not.
pub type Dial =
    Arc<dyn Fn(u16) -> BoxFuture<'static, Result<(BoxRead, BoxWrite), String>> + Send + Sync>;

/// The largest DATA frame sent.
const CHUNK: usize = 32 * 1024;
/// Frames queued for the writer (and read ahead of the session).
const QUEUE: usize = 64;
/// Received bytes are acknowledged in steps of half the initial window.
const ACK_STEP: u64 = (INITIAL_WINDOW / 2) as u64;

/// What the fixture's SPDY sessions did (for tests: [`super::Fixture::portforward_stats`]).
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// Sessions still open.
    pub live: usize,
    /// How each session came: `"websocket"` (tunnelled) or `"upgrade"` (plain SPDY).
    pub transports: Vec<&'static str>,
    /// Stream pairs relayed (dialled or not).
    pub pairs: u64,
    pub frames_in: BTreeMap<&'static str, u64>,
    pub frames_out: BTreeMap<&'static str, u64>,
    /// Bytes client → pod and pod → client.
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// DATA frames that went past the receive window the fixture had granted.
    pub window_overruns: u64,
}

pub type SharedStats = Arc<Mutex<Stats>>;

fn stats(s: &SharedStats) -> std::sync::MutexGuard<'_, Stats> {
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The peer's windows, as the sender sees them.
struct Flow {
    state: Mutex<FlowState>,
    changed: Notify,
}

struct FlowState {
    /// The peer has shown it does flow control.
    enforced: bool,
    initial: i64,
    session: i64,
    streams: HashMap<u32, i64>,
}

impl Flow {
    fn new() -> Flow {
        Flow {
            state: Mutex::new(FlowState {
                enforced: false,
                initial: INITIAL_WINDOW,
                session: INITIAL_WINDOW,
                streams: HashMap::new(),
            }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FlowState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn open(&self, stream: u32) {
        let mut s = self.lock();
        let initial = s.initial;
        s.streams.insert(stream, initial);
    }

    fn close(&self, stream: u32) {
        self.lock().streams.remove(&stream);
        self.changed.notify_waiters();
    }

    fn update(&self, stream: u32, delta: u32) {
        let mut s = self.lock();
        s.enforced = true;
        if stream == 0 {
            s.session += i64::from(delta);
        } else if let Some(w) = s.streams.get_mut(&stream) {
            *w += i64::from(delta);
        }
        drop(s);
        self.changed.notify_waiters();
    }

    /// SETTINGS INITIAL_WINDOW_SIZE: new streams start there, open ones move by the change.
    fn set_initial(&self, value: u32) {
        let mut s = self.lock();
        s.enforced = true;
        let change = i64::from(value) - s.initial;
        s.initial = i64::from(value);
        s.streams.values_mut().for_each(|w| *w += change);
        drop(s);
        self.changed.notify_waiters();
    }

    /// Up to `want` bytes the sender may put on `stream` now (waiting for the windows when
    /// they are enforced); None once the stream is gone.
    async fn grant(&self, stream: u32, want: usize) -> Option<usize> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut s = self.lock();
                let own = *s.streams.get(&stream)?;
                let room = own.min(s.session);
                let n = if s.enforced {
                    usize::try_from(room).unwrap_or(0).min(want)
                } else {
                    want
                };
                if n > 0 {
                    s.session -= n as i64;
                    if let Some(w) = s.streams.get_mut(&stream) {
                        *w -= n as i64;
                    }
                    return Some(n);
                }
            }
            notified.await;
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Error,
    Data,
}

/// A stream the client opened.
struct StreamRt {
    kind: Kind,
    request: String,
    port: u16,
    remote_fin: bool,
    /// Bytes for the pod (dropped at the client's FIN: the pod connection half-closes).
    to_pod: Option<mpsc::UnboundedSender<Bytes>>,
    /// Their other end, until the pair starts.
    pending: Option<mpsc::UnboundedReceiver<Bytes>>,
    /// RST_STREAM from the client (or the session's end).
    reset: CancellationToken,
    /// What is left of the receive window granted (the relay grows it as it acknowledges).
    window: Arc<AtomicI64>,
}

/// The streams of one request id.
#[derive(Default)]
struct Pair {
    error: Option<u32>,
    data: Option<u32>,
}

/// Shared by the session and its relays.
#[derive(Clone)]
struct Ctx {
    out: mpsc::Sender<Frame>,
    flow: Arc<Flow>,
    stats: SharedStats,
    dial: Dial,
    who: String,
}

struct Session {
    ctx: Ctx,
    streams: HashMap<u32, StreamRt>,
    pairs: HashMap<String, Pair>,
    last_peer_stream: u32,
    gone_away: bool,
    cancel: CancellationToken,
    done: mpsc::Sender<(u32, u32)>,
}

/// A session-ending condition: GOAWAY with this status, or None (the peer is gone).
type End = Option<u32>;

/// Serve one SPDY/3.1 session on `io` until the client goes (or `cancel`).
pub async fn serve<S>(
    io: S,
    dial: Dial,
    who: String,
    stats_: SharedStats,
    cancel: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (rd, wr) = tokio::io::split(io);
    let (out, out_rx) = mpsc::channel::<Frame>(QUEUE);
    let writer = tokio::spawn(write_frames(wr, out_rx, stats_.clone()));
    let (frames_tx, mut frames) = mpsc::channel(QUEUE);
    // Its own task: a read cut short by another event would lose half a frame.
    let reader = tokio::spawn(read_frames(rd, frames_tx));
    let (done, mut done_rx) = mpsc::channel(QUEUE);
    stats(&stats_).live += 1;
    let mut s = Session {
        ctx: Ctx {
            out,
            flow: Arc::new(Flow::new()),
            stats: stats_.clone(),
            dial,
            who,
        },
        streams: HashMap::new(),
        pairs: HashMap::new(),
        last_peer_stream: 0,
        gone_away: false,
        cancel: cancel.child_token(),
        done,
    };
    let end: End = loop {
        let frame = tokio::select! {
            _ = cancel.cancelled() => break Some(goaway::OK),
            Some((e, d)) = done_rx.recv() => { s.finished(e, d); continue; }
            f = frames.recv() => f.unwrap_or(Ok(None)),
        };
        match frame {
            Ok(Some(f)) => {
                *stats(&stats_).frames_in.entry(f.name()).or_default() += 1;
                if let Err(end) = s.on_frame(f).await {
                    break end;
                }
            }
            Ok(None) | Err(spdy::Error::Io(_)) => break None,
            Err(spdy::Error::Protocol(_)) => break Some(goaway::PROTOCOL_ERROR),
        }
    };
    if let Some(status) = end {
        let last_good = s.last_peer_stream;
        let _ = s.ctx.out.send(Frame::GoAway { last_good, status }).await;
    }
    s.cancel.cancel();
    reader.abort();
    drop(s);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), writer).await;
    stats(&stats_).live -= 1;
}

/// Frames in, until the end of the connection or an error (the last item sent).
async fn read_frames<R: AsyncRead>(r: R, tx: mpsc::Sender<Result<Option<Frame>, spdy::Error>>) {
    tokio::pin!(r);
    let mut dec = HeaderDecompressor::new();
    loop {
        let f = spdy::read_frame(&mut r, &mut dec).await;
        let last = !matches!(f, Ok(Some(_)));
        if tx.send(f).await.is_err() || last {
            return;
        }
    }
}

/// The only writer of the connection: frames in queue order, one compression stream.
async fn write_frames<W: AsyncWrite>(w: W, mut rx: mpsc::Receiver<Frame>, stats_: SharedStats) {
    tokio::pin!(w);
    let mut comp = HeaderCompressor::new();
    while let Some(f) = rx.recv().await {
        *stats(&stats_).frames_out.entry(f.name()).or_default() += 1;
        if w.write_all(&spdy::encode(&f, &mut comp)).await.is_err() {
            return;
        }
        if rx.is_empty() && w.flush().await.is_err() {
            return;
        }
    }
    let _ = w.shutdown().await;
}

impl Session {
    async fn send(&self, f: Frame) {
        let _ = self.ctx.out.send(f).await;
    }

    async fn on_frame(&mut self, f: Frame) -> Result<(), End> {
        match f {
            Frame::SynStream {
                stream,
                flags,
                headers,
                ..
            } => self.open(stream, flags, &headers).await?,
            Frame::Data { stream, fin, data } => self.data(stream, fin, data).await,
            Frame::RstStream { stream, .. } => self.reset(stream),
            // Odd ids are the client's; the fixture sends no pings of its own.
            Frame::Ping { id } if id % 2 == 1 => self.send(Frame::Ping { id }).await,
            Frame::Settings { entries, .. } => {
                for (_, id, value) in entries {
                    if id == SETTINGS_INITIAL_WINDOW_SIZE {
                        self.ctx.flow.set_initial(value);
                    }
                }
            }
            Frame::WindowUpdate { stream, delta } => self.ctx.flow.update(stream, delta),
            Frame::GoAway { .. } => self.gone_away = true,
            // The fixture opens no streams, and HEADERS add nothing to port-forward.
            Frame::Ping { .. } | Frame::SynReply { .. } | Frame::Headers { .. } => {}
            Frame::Unknown { .. } => {}
        }
        Ok(())
    }

    /// SYN_STREAM: check it as the kubelet does, answer, pair it.
    async fn open(&mut self, stream: u32, flags: u8, h: &spdy::Headers) -> Result<(), End> {
        if stream.is_multiple_of(2) || stream <= self.last_peer_stream {
            return Err(Some(goaway::PROTOCOL_ERROR));
        }
        self.last_peer_stream = stream;
        let refuse = |status| Frame::RstStream { stream, status };
        if self.gone_away {
            self.send(refuse(rst::REFUSED_STREAM)).await;
            return Ok(());
        }
        let port = header(h, "port").and_then(|p| p.parse::<u16>().ok());
        let kind = match header(h, "streamtype") {
            Some("error") => Some(Kind::Error),
            Some("data") => Some(Kind::Data),
            _ => None,
        };
        let (Some(port @ 1..), Some(kind)) = (port, kind) else {
            self.send(refuse(rst::REFUSED_STREAM)).await;
            return Ok(());
        };
        let request = match header(h, "requestid") {
            Some(r) if !r.is_empty() => r.to_string(),
            _ if kind == Kind::Error => stream.to_string(),
            _ => stream.saturating_sub(2).to_string(),
        };
        let pair = self.pairs.entry(request.clone()).or_default();
        let slot = if kind == Kind::Error {
            &mut pair.error
        } else {
            &mut pair.data
        };
        if slot.is_some() {
            self.send(refuse(rst::STREAM_IN_USE)).await;
            return Ok(());
        }
        *slot = Some(stream);
        let (tx, rx) = mpsc::unbounded_channel();
        let remote_fin = flags & spdy::FLAG_FIN != 0;
        self.streams.insert(
            stream,
            StreamRt {
                kind,
                request: request.clone(),
                port,
                remote_fin,
                to_pod: (!remote_fin).then_some(tx),
                pending: Some(rx),
                reset: self.cancel.child_token(),
                window: Arc::new(AtomicI64::new(INITIAL_WINDOW)),
            },
        );
        self.ctx.flow.open(stream);
        self.send(Frame::SynReply {
            stream,
            fin: false,
            headers: Vec::new(),
        })
        .await;
        self.start_if_paired(&request);
        Ok(())
    }

    fn start_if_paired(&mut self, request: &str) {
        let Some(Pair {
            error: Some(e),
            data: Some(d),
        }) = self.pairs.get(request)
        else {
            return;
        };
        let (e, d) = (*e, *d);
        let Some(to_pod) = self.streams.get_mut(&d).and_then(|s| s.pending.take()) else {
            return;
        };
        let (Some(es), Some(ds)) = (self.streams.get(&e), self.streams.get(&d)) else {
            return;
        };
        stats(&self.ctx.stats).pairs += 1;
        let relay = Relay {
            ctx: self.ctx.clone(),
            port: ds.port,
            error: e,
            data: d,
            to_pod,
            window: ds.window.clone(),
            error_reset: es.reset.clone(),
            data_reset: ds.reset.clone(),
            done: self.done.clone(),
        };
        tokio::spawn(relay.run());
    }

    /// DATA from the client: queued for the pod (whose relay acknowledges it); what goes
    /// nowhere is acknowledged at once for the session.
    async fn data(&mut self, stream: u32, fin: bool, data: Bytes) {
        let n = data.len();
        let queued = match self.streams.get_mut(&stream) {
            Some(st) => {
                if st.window.fetch_sub(n as i64, Ordering::SeqCst) < n as i64 {
                    stats(&self.ctx.stats).window_overruns += 1;
                }
                let queued = n > 0
                    && st.kind == Kind::Data
                    && st.to_pod.as_ref().is_some_and(|tx| tx.send(data).is_ok());
                if fin {
                    st.remote_fin = true;
                    st.to_pod = None;
                }
                queued
            }
            None => {
                if stream > self.last_peer_stream {
                    self.send(Frame::RstStream {
                        stream,
                        status: rst::INVALID_STREAM,
                    })
                    .await;
                }
                false
            }
        };
        if !queued && n > 0 {
            let delta = n as u32;
            self.send(Frame::WindowUpdate { stream: 0, delta }).await;
        }
    }

    fn reset(&mut self, stream: u32) {
        if let Some(st) = self.streams.remove(&stream) {
            st.reset.cancel();
            self.ctx.flow.close(stream);
            if st.pending.is_some() {
                // Never started: its pair cannot complete any more.
                self.pairs.remove(&st.request);
            }
        }
    }

    /// A relay ended: forget its streams.
    fn finished(&mut self, error: u32, data: u32) {
        for id in [error, data] {
            if let Some(st) = self.streams.remove(&id) {
                self.pairs.remove(&st.request);
            }
            self.ctx.flow.close(id);
        }
    }
}

/// One forwarded connection: the pod's port and the data stream, both ways.
struct Relay {
    ctx: Ctx,
    port: u16,
    error: u32,
    data: u32,
    to_pod: mpsc::UnboundedReceiver<Bytes>,
    /// The data stream's receive window.
    window: Arc<AtomicI64>,
    error_reset: CancellationToken,
    data_reset: CancellationToken,
    done: mpsc::Sender<(u32, u32)>,
}

impl Relay {
    fn frame(stream: u32, fin: bool, data: impl Into<Bytes>) -> Frame {
        Frame::Data {
            stream,
            fin,
            data: data.into(),
        }
    }

    async fn run(self) {
        let Relay {
            ctx,
            port,
            error,
            data,
            to_pod,
            window,
            error_reset,
            data_reset,
            done,
        } = self;
        match (ctx.dial)(port).await {
            Err(e) => {
                let msg = format!("error forwarding port {port} to pod {}: {e}", ctx.who);
                if !error_reset.is_cancelled() {
                    let _ = ctx.out.send(Self::frame(error, true, msg)).await;
                }
                if !data_reset.is_cancelled() {
                    let _ = ctx.out.send(Self::frame(data, true, Bytes::new())).await;
                }
            }
            Ok((r, w)) => {
                let both = async {
                    let up = upload(w, to_pod, data, &window, &ctx);
                    tokio::join!(up, download(r, data, &ctx));
                };
                tokio::select! {
                    _ = both => {}
                    _ = data_reset.cancelled() => {}
                }
                if !error_reset.is_cancelled() {
                    let _ = ctx.out.send(Self::frame(error, true, Bytes::new())).await;
                }
            }
        }
        let _ = done.send((error, data)).await;
    }
}

/// Client → pod, until the client's FIN (then the pod's side is half-closed); what the pod
/// took is acknowledged for the stream and the session every [`ACK_STEP`] bytes (a peer
/// that keeps to its windows never waits for more).
async fn upload(
    mut w: BoxWrite,
    mut rx: mpsc::UnboundedReceiver<Bytes>,
    stream: u32,
    window: &AtomicI64,
    ctx: &Ctx,
) {
    let mut unacked = 0u64;
    while let Some(b) = rx.recv().await {
        if w.write_all(&b).await.is_err() {
            return;
        }
        stats(&ctx.stats).bytes_up += b.len() as u64;
        unacked += b.len() as u64;
        if unacked >= ACK_STEP {
            let delta = std::mem::take(&mut unacked) as u32;
            window.fetch_add(i64::from(delta), Ordering::SeqCst);
            for stream in [stream, 0] {
                let _ = ctx.out.send(Frame::WindowUpdate { stream, delta }).await;
            }
        }
    }
    let _ = w.shutdown().await;
}

/// Pod → client in DATA frames within the windows, then FIN.
async fn download(mut r: BoxRead, stream: u32, ctx: &Ctx) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = ctx.out.send(Relay::frame(stream, true, Bytes::new())).await;
                return;
            }
            Ok(n) => n,
        };
        let mut off = 0;
        while off < n {
            let Some(k) = ctx.flow.grant(stream, n - off).await else {
                return;
            };
            let chunk = Bytes::copy_from_slice(&buf[off..off + k]);
            if ctx
                .out
                .send(Relay::frame(stream, false, chunk))
                .await
                .is_err()
            {
                return;
            }
            stats(&ctx.stats).bytes_down += k as u64;
            off += k;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A peer that does flow control (it sent SETTINGS with a small initial window) is held
    /// to its stream and session windows; what it uploads is acknowledged.
    #[tokio::test]
    async fn windows_hold_a_peer_that_does_flow_control() {
        const SIZE: usize = 200 << 10;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let pod = tokio::spawn(async move {
            let (mut c, _) = listener.accept().await.unwrap();
            let mut got = vec![0u8; 40 << 10];
            c.read_exact(&mut got).await.unwrap();
            c.write_all(&vec![5u8; SIZE]).await.unwrap();
        });
        let dial: Dial = Arc::new(move |_| {
            Box::pin(async move {
                let (r, w) = tokio::net::TcpStream::connect(addr)
                    .await
                    .unwrap()
                    .into_split();
                Ok((Box::new(r) as BoxRead, Box::new(w) as BoxWrite))
            })
        });
        let (client, server) = tokio::io::duplex(1 << 20);
        let stats_ = SharedStats::default();
        let cancel = CancellationToken::new();
        let session = tokio::spawn(serve(server, dial, "p".into(), stats_.clone(), cancel));
        let (mut rd, mut wr) = tokio::io::split(client);
        let mut comp = HeaderCompressor::new();
        let mut send = |f: Frame| spdy::encode(&f, &mut comp);
        let open = |stream, kind: &str| Frame::SynStream {
            stream,
            associated: 0,
            priority: 0,
            flags: 0,
            headers: [("streamtype", kind), ("port", "80"), ("requestid", "0")]
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
        };
        let mut bytes = send(Frame::Settings {
            flags: 0,
            entries: vec![(0, SETTINGS_INITIAL_WINDOW_SIZE, 16 << 10)],
        });
        bytes.extend(send(open(1, "error")));
        bytes.extend(send(open(3, "data")));
        let upload = Bytes::from(vec![1u8; 40 << 10]);
        bytes.extend(send(Relay::frame(3, false, upload)));
        wr.write_all(&bytes).await.unwrap();

        let mut dec = HeaderDecompressor::new();
        let mut peer = Peer::default();
        // The stream's window (16 KiB), then — the stream's grown — the session's (64 KiB).
        peer.read_until_quiet(&mut rd, &mut dec).await;
        assert_eq!(peer.data, 16 << 10);
        assert!(peer.acks.contains(&(3, 40 << 10)) && peer.acks.contains(&(0, 40 << 10)));
        wr.write_all(&send(Frame::WindowUpdate {
            stream: 3,
            delta: 100_000,
        }))
        .await
        .unwrap();
        peer.read_until_quiet(&mut rd, &mut dec).await;
        assert_eq!(peer.data, 64 << 10);
        let more = [(0, 1 << 20), (3, 1 << 20)]
            .map(|(stream, delta)| send(Frame::WindowUpdate { stream, delta }));
        wr.write_all(&more.concat()).await.unwrap();
        peer.read_until_quiet(&mut rd, &mut dec).await;
        assert_eq!((peer.data, peer.fins.clone()), (SIZE, vec![3]));
        // The client's FIN ends the pair: then the error stream's FIN.
        let fin = send(Relay::frame(3, true, Bytes::new()));
        wr.write_all(&fin).await.unwrap();
        peer.read_until_quiet(&mut rd, &mut dec).await;
        assert_eq!(peer.fins, [3, 1]);
        pod.await.unwrap();
        drop((rd, wr));
        tokio::time::timeout(Duration::from_secs(5), session)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stats_.lock().unwrap().live, 0);
    }

    /// What the test's client saw.
    #[derive(Default)]
    struct Peer {
        data: usize,
        fins: Vec<u32>,
        acks: Vec<(u32, u32)>,
    }

    impl Peer {
        /// Frames until none came for 300 ms.
        async fn read_until_quiet<R: AsyncRead + Unpin>(
            &mut self,
            r: &mut R,
            d: &mut HeaderDecompressor,
        ) {
            let quiet = Duration::from_millis(300);
            while let Ok(f) = tokio::time::timeout(quiet, spdy::read_frame(r, d)).await {
                match f.unwrap().unwrap() {
                    Frame::Data { stream, fin, data } => {
                        self.data += if stream == 3 { data.len() } else { 0 };
                        if fin {
                            self.fins.push(stream);
                        }
                    }
                    Frame::WindowUpdate { stream, delta } => self.acks.push((stream, delta)),
                    _ => {}
                }
            }
        }
    }
}
