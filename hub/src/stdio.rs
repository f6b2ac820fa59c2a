//! The host's stdio front: one reader of stdin that sends plain tool calls down the
//! pipeline's byte transport (`byte_call.rs`) and everything else to rmcp, and one writer
//! of stdout shared by both.

use std::sync::Arc;

use crate::asking;
use crate::fastpath;
use crate::line_out::{self, LineOut};
use crate::serve::HostServer;

/// Serve over stdin/stdout: plain tool calls take the byte-level path (fastpath.rs),
/// everything else goes through rmcp.
pub async fn serve_stdio(host: HostServer) -> anyhow::Result<()> {
    use rmcp::ServiceExt;
    let (stdin, stdout) = kitbag_shared::stdin::stdio();
    // A request arriving ends the host's poll before sleeping (kitbag_shared::busy_poll).
    let _watch = kitbag_shared::busy_poll::watch(std::io::stdin());
    let (finish_tx, finish_rx) = tokio::sync::oneshot::channel::<()>();
    let finish = async move {
        let _ = finish_rx.await;
    };
    // Answers are written by the task that has them (line_out.rs) where stdout allows.
    let (out, writer) = match kitbag_shared::stdin::polled_stdout() {
        Some(direct) => line_out::direct(direct, finish),
        None => line_out::queued(stdout, finish),
    };
    let (to_rmcp, rmcp_rx) = tokio::sync::mpsc::unbounded_channel();
    // One bound on requests in flight for the connection, both paths counted.
    let budget = kitbag_shared::budget::RequestBudget::default();
    // One set of spans too: the byte path's and rmcp's (which also learns the protocol
    // version the handshake agreed on).
    let conn = kitbag_shared::otel::Conn::pipe();
    let demux = tokio::spawn(upstream_demux(
        host.clone(),
        stdin,
        to_rmcp,
        out.clone(),
        budget.clone(),
        conn.clone(),
    ));
    // Signals are heard from now on, the handshake included.
    let mut stop = Box::pin(kitbag_shared::runtime::shutdown_signal());
    let serving = host.serve(
        kitbag_shared::transport::LineTransport::new(
            fastpath::ChannelReader::new(rmcp_rx),
            fastpath::LineWriter::new(out),
        )
        .with_budget(budget)
        .traced(conn),
    );
    let running = tokio::select! {
        running = serving => running,
        // Told to stop before the handshake ended: the caller stops whatever started.
        () = &mut stop => return Ok(()),
    };
    let running = match running {
        Ok(r) => r,
        Err(e) => return kitbag_shared::server::handshake_failed(e),
    };
    // SIGINT/SIGTERM end the session like stdin EOF: the caller then stops every child.
    let cancel = running.cancellation_token();
    let signalled = tokio_util::sync::CancellationToken::new();
    tokio::spawn({
        let signalled = signalled.clone();
        async move {
            stop.await;
            signalled.cancel();
            cancel.cancel();
        }
    });
    let _ = running.waiting().await;
    // At stdin EOF the demux first lets the calls in flight finish (bounded); on a signal
    // the client wants us gone now.
    if !signalled.is_cancelled() {
        let _ = tokio::time::timeout(DRAIN_LIMIT, demux).await;
    }
    // Whatever answers are queued go out before the host exits.
    let _ = finish_tx.send(());
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), writer).await;
    Ok(())
}

async fn upstream_demux<R: tokio::io::AsyncRead + Unpin>(
    host: HostServer,
    stdin: R,
    to_rmcp: tokio::sync::mpsc::UnboundedSender<fastpath::Line>,
    out: LineOut,
    budget: kitbag_shared::budget::RequestBudget,
    conn: Arc<kitbag_shared::otel::Conn>,
) {
    let mut r = tokio::io::BufReader::with_capacity(1 << 16, stdin);
    let mut line = Vec::new();
    // Handshake-era calls take the byte-level path once `initialize` was seen; 2026-07-28
    // calls say so in their own `_meta` (their answers get `resultType`).
    let mut handshake = false;
    let inflight = Arc::new(fastpath::InFlight::new(budget.clone()));
    loop {
        // Backpressure: no more reading while the connection's requests in flight are at
        // the bound; the client's writes block in the pipe instead of piling up here.
        budget.wait_for_room().await;
        line.clear();
        match read_line_capped(&mut r, &mut line).await {
            LineRead::End => {
                // The client is done sending, not receiving: answer what is in flight first.
                drain(&inflight, DRAIN_LIMIT).await;
                break;
            }
            LineRead::TooLong => {
                let head = String::from_utf8_lossy(&line);
                if let Some(found) = kitbag_shared::salvage::salvage_prefix(&head)
                    && found.method.is_some()
                    && let Some(id) = found.valid_id()
                {
                    let _ = out.send(fastpath::protocol_error_line(
                        id,
                        -32600,
                        &format!(
                            "Invalid request: the message is longer than {} bytes, the most one message may carry",
                            kitbag_shared::transport::MAX_LINE_BYTES
                        ),
                    ));
                }
                continue;
            }
            LineRead::Line => {}
        }
        let handled = match std::str::from_utf8(&line) {
            Err(_) => false,
            Ok(text) => match fastpath::classify(text.trim_end()) {
                fastpath::Upstream::Initialize => {
                    handshake = true;
                    false
                }
                fastpath::Upstream::Discover => {
                    handshake = false;
                    false
                }
                fastpath::Upstream::Call(call) if handshake || call.modern => {
                    // A server waiting for its first call starts first: the byte path
                    // needs it running.
                    host.hub
                        .wake_route(call.name.as_ref(), crate::wake::INLINE_WAKE_LIMIT)
                        .await;
                    // A 2026-07-28 client that can be asked: the child's questions become
                    // an `InputRequiredResult` (asking.rs).
                    let asks = call.modern && asking::may_ask(text);
                    call_fast(&host, call, asks.then_some(text), &out, &inflight, &conn)
                }
                // Answered here, after rmcp's answer to the handshake (a client that sent
                // both at once waits for that first), unless a span must record it: the
                // list's compiled-in catalogs go out as their text (`listed_json`).
                fastpath::Upstream::ListTools(id)
                    if handshake
                        && !kitbag_shared::otel::enabled()
                        && conn.handshake_answered(HANDSHAKE_WAIT).await =>
                {
                    match host.listed_json() {
                        Some(result) => {
                            tracing::debug!("tools/list answered from the catalogs' text");
                            let result =
                                fastpath::Reply::Result(fastpath::RawResult::whole(result));
                            out.send(fastpath::response_line(id.get(), &result, false))
                                .is_ok()
                        }
                        None => false,
                    }
                }
                fastpath::Upstream::Other if asking::may_be_retry(text) => {
                    retry(&host, text.trim_end(), &out, &inflight)
                }
                fastpath::Upstream::Refuse(answer) => out.send(answer).is_ok(),
                fastpath::Upstream::Cancelled(id) => match inflight.remove(&id) {
                    Some((link, child_id)) => {
                        link.cancel(&child_id, "cancelled by the client");
                        true
                    }
                    None => false,
                },
                _ => false,
            },
        };
        if !handled && to_rmcp.send(std::mem::take(&mut line)).is_err() {
            break;
        }
    }
}

/// How long a `tools/list` sent right behind `initialize` waits for its answer to go out
/// before rmcp takes the list instead (a refused handshake never answers).
const HANDSHAKE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long calls in flight at stdin EOF may take to finish before the host exits anyway.
const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

async fn drain(inflight: &fastpath::InFlight, limit: std::time::Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    while !inflight.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

enum LineRead {
    Line,
    /// Longer than the cap: `line` holds its first 64 KB, the rest was read and dropped.
    TooLong,
    End,
}

/// Read one line into `line`, never holding more than the transport's line cap.
async fn read_line_capped<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    line: &mut Vec<u8>,
) -> LineRead {
    use tokio::io::AsyncBufReadExt;
    const HEAD: usize = 64 * 1024;
    let max = kitbag_shared::transport::MAX_LINE_BYTES;
    let mut too_long = false;
    loop {
        let chunk = match r.fill_buf().await {
            Ok([]) | Err(_) => {
                return if too_long || line.is_empty() {
                    LineRead::End
                } else {
                    LineRead::Line
                };
            }
            Ok(chunk) => chunk,
        };
        let (take, done) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !too_long {
            line.extend_from_slice(&chunk[..take]);
            if line.len() > max {
                too_long = true;
                line.truncate(HEAD);
            }
        }
        r.consume(take);
        if done {
            return if too_long {
                LineRead::TooLong
            } else {
                LineRead::Line
            };
        }
    }
}

/// Forward a plain stdio call as bytes; false leaves it to rmcp.
/// A SEP-2322 retry of a 2026-07-28 call: its parked call resumes, or a call starts with
/// its answers given in advance. False: not one (rmcp answers the line).
fn retry(host: &HostServer, text: &str, out: &LineOut, inflight: &Arc<fastpath::InFlight>) -> bool {
    let Some(call) = asking::input_call(host, text, None, None, &|_| true, GONE) else {
        return false;
    };
    match call {
        asking::InputCall::Start(asking) => {
            let key = inflight_key(&asking.id);
            answer_asking(asking, key, out, inflight);
        }
        asking::InputCall::Resume(answer) => {
            let out = out.clone();
            tokio::spawn(async move {
                let _ = out.send(answer.await.body);
            });
        }
    }
    true
}

/// A call's key among those in flight: its id's value, so a cancellation spelling it
/// differently still matches.
fn inflight_key(upstream_id: &str) -> String {
    serde_json::from_str::<serde_json::Value>(upstream_id)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| upstream_id.to_string())
}

/// Why a child's call is cancelled when the host stops waiting for it.
const GONE: &str = "the host's stdio client went away";

/// Send an asking call's answer unless the client cancelled it meanwhile.
fn answer_asking(
    asking: asking::Asking,
    key: String,
    out: &LineOut,
    inflight: &Arc<fastpath::InFlight>,
) {
    inflight.insert(key.clone(), asking.link.clone(), asking.child_id.clone());
    let (out, inflight) = (out.clone(), inflight.clone());
    tokio::spawn(async move {
        let answer = asking.answer.await;
        if inflight.remove(&key).is_some() {
            let _ = out.send(answer.body);
        }
    });
}

/// `asking`: the call's line, when its child's questions go to the client (asking.rs).
fn call_fast(
    host: &HostServer,
    call: fastpath::FastCall<'_>,
    asking: Option<&str>,
    out: &LineOut,
    inflight: &Arc<fastpath::InFlight>,
    conn: &kitbag_shared::otel::Conn,
) -> bool {
    let upstream_id = call.id.get();
    let key = inflight_key(upstream_id);
    if inflight.contains(&key) {
        // Two answers with one id could not be told apart: the second is refused.
        let _ = out.send(fastpath::protocol_error_line(
            upstream_id,
            -32600,
            "Invalid request: a request with this id is still in progress",
        ));
        return true;
    }
    // The call's span (when tracing), its context handed to the child; else the
    // client's own context passes through.
    let span = kitbag_shared::otel::enabled().then(|| {
        let id = call.id_text();
        let version = conn.protocol_version();
        let request = kitbag_shared::otel::Request {
            method: "tools/call",
            id: id.as_deref(),
            tool: Some(&call.name),
            traceparent: call.traceparent.as_deref(),
            tracestate: call.tracestate.as_deref(),
            baggage: call.baggage.as_deref(),
            protocol_version: if call.modern {
                Some(fastpath::MODERN_VERSION)
            } else {
                version.as_deref()
            },
            ..kitbag_shared::otel::Request::default()
        };
        let via = kitbag_shared::otel::Via {
            transport: conn.transport,
            ..kitbag_shared::otel::Via::default()
        };
        kitbag_shared::otel::Span::start(&request, &via)
    });
    let trace = match &span {
        Some(span) => Some(span.propagate()),
        None => call.passthrough(),
    };
    if let Some(text) = asking {
        let meta = asking::request_meta(text);
        let from = asking::From {
            principal: None,
            trace: trace.as_ref(),
            span,
            gone: GONE,
        };
        let Some(call) = asking::modern_call(host, &call, &meta, serde_json::Map::new(), from)
        else {
            return false;
        };
        answer_asking(call, key, out, inflight);
        return true;
    }
    // Left to rmcp: its transport opens the span there (this one is dropped unrecorded).
    let Some(pending) = host.pipeline().start_bytes(&call, trace.as_ref()) else {
        return false;
    };
    let pending = pending.with_span(span);
    inflight.insert(key.clone(), pending.link.clone(), pending.child_id.clone());
    let (out, inflight) = (out.clone(), inflight.clone());
    tokio::spawn(async move {
        // A call the client cancelled meanwhile is owed no answer.
        if let Some((line, _)) = pending.answer(|| inflight.remove(&key).is_some()).await {
            let _ = out.send(line);
        }
    });
    true
}
