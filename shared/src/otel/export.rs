//! The OTLP/HTTP exporter (feature `otel`): finished spans go into a bounded queue without
//! waiting (a full queue drops the span and counts it); one task batches them — up to
//! `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, or whatever came within `OTEL_BSP_SCHEDULE_DELAY` — and
//! POSTs each batch to the traces endpoint as an `ExportTraceServiceRequest` in the OTLP JSON
//! encoding (ids as hex, 64-bit integers as strings, enums as numbers). A batch the
//! collector could not take (connection refused, 429, 502–504) is tried three times with
//! backoff, then dropped with one warning. No call ever waits for the collector.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use super::config::Config;
use super::{AttrValue, Finished, OtelError, push_hex};

enum Msg {
    Span(Box<Finished>),
    Flush(oneshot::Sender<()>),
}

static QUEUE: OnceLock<mpsc::Sender<Msg>> = OnceLock::new();

static EXPORTED: AtomicU64 = AtomicU64::new(0);
static DROPPED: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);

/// Start the exporter task (once per process; a second call changes nothing).
pub(super) fn start(config: Config) -> Result<(), OtelError> {
    if QUEUE.get().is_some() {
        return Ok(());
    }
    // Plain http:// needs no TLS; https:// goes through rustls on ring, like the OAuth
    // client's.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .timeout(config.timeout)
        .redirect(reqwest::redirect::Policy::limited(3))
        .build()
        .map_err(|e| OtelError::Client(e.to_string()))?;
    let (tx, rx) = mpsc::channel(config.max_queue);
    if QUEUE.set(tx).is_err() {
        return Ok(());
    }
    tracing::info!("exporting spans to {}", config.endpoint);
    tokio::spawn(run(rx, client, config));
    Ok(())
}

/// Queue a finished span; never waits.
pub(super) fn push(span: Finished) {
    let Some(queue) = QUEUE.get() else { return };
    if queue.try_send(Msg::Span(Box::new(span))).is_err() {
        DROPPED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Export everything queued so far, waiting at most `limit`.
pub(super) async fn flush(limit: Duration) {
    let Some(queue) = QUEUE.get() else { return };
    let (tx, rx) = oneshot::channel();
    let _ = tokio::time::timeout(limit, async {
        if queue.send(Msg::Flush(tx)).await.is_ok() {
            let _ = rx.await;
        }
    })
    .await;
}

pub(super) fn render_metrics(out: &mut String) {
    out.push_str("# HELP kitbag_otel_spans_total Spans handed to the OTLP exporter, by what became of them.\n# TYPE kitbag_otel_spans_total counter\n");
    for (outcome, n) in [
        ("exported", &EXPORTED),
        ("dropped", &DROPPED),
        ("failed", &FAILED),
    ] {
        out.push_str(&format!(
            "kitbag_otel_spans_total{{outcome=\"{outcome}\"}} {}\n",
            n.load(Ordering::Relaxed)
        ));
    }
}

async fn run(mut rx: mpsc::Receiver<Msg>, client: reqwest::Client, config: Config) {
    let mut batch: Vec<Finished> = Vec::new();
    let mut deadline: Option<tokio::time::Instant> = None;
    let mut warned = false;
    loop {
        let msg = match deadline {
            Some(at) => tokio::select! {
                m = rx.recv() => m,
                () = tokio::time::sleep_until(at) => {
                    deadline = None;
                    send(&client, &config, &mut batch, &mut warned).await;
                    continue;
                }
            },
            None => rx.recv().await,
        };
        match msg {
            None => {
                send(&client, &config, &mut batch, &mut warned).await;
                return;
            }
            Some(Msg::Span(span)) => {
                batch.push(*span);
                if batch.len() >= config.max_batch {
                    deadline = None;
                    send(&client, &config, &mut batch, &mut warned).await;
                } else if deadline.is_none() {
                    deadline = Some(tokio::time::Instant::now() + config.schedule_delay);
                }
            }
            Some(Msg::Flush(done)) => {
                deadline = None;
                send(&client, &config, &mut batch, &mut warned).await;
                let _ = done.send(());
            }
        }
    }
}

/// POST one batch; on failure retried (connection errors, 429, 502–504), then dropped.
async fn send(
    client: &reqwest::Client,
    config: &Config,
    batch: &mut Vec<Finished>,
    warned: &mut bool,
) {
    if batch.is_empty() {
        return;
    }
    let n = batch.len() as u64;
    let body = match encode(&config.resource, batch) {
        Ok(b) => Bytes::from(b),
        Err(e) => {
            tracing::warn!("encoding {n} spans failed: {e}");
            FAILED.fetch_add(n, Ordering::Relaxed);
            batch.clear();
            return;
        }
    };
    batch.clear();
    let mut why = String::new();
    for attempt in 0..3u32 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(100 << (2 * attempt))).await;
        }
        let mut request = client
            .post(config.endpoint.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body.clone());
        for (k, v) in &config.headers {
            request = request.header(k.clone(), v.clone());
        }
        match request.send().await {
            Ok(r) if r.status().is_success() => {
                EXPORTED.fetch_add(n, Ordering::Relaxed);
                *warned = false;
                return;
            }
            Ok(r) => {
                let status = r.status();
                why = format!("the collector answered {status}");
                if !matches!(status.as_u16(), 429 | 502..=504) {
                    break;
                }
            }
            Err(e) => why = e.to_string(),
        }
    }
    FAILED.fetch_add(n, Ordering::Relaxed);
    // One warning per run of failures, not one per batch.
    if !*warned {
        *warned = true;
        tracing::warn!(
            "exporting {n} spans to {} failed ({why}); spans are dropped until it works again",
            config.endpoint
        );
    }
}

// ---------------------------------------------------------------------------------------
// The OTLP JSON encoding (opentelemetry-proto's ExportTraceServiceRequest)

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Export<'a> {
    resource_spans: [ResourceSpans<'a>; 1],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResourceSpans<'a> {
    resource: Resource<'a>,
    scope_spans: [ScopeSpans<'a>; 1],
}

#[derive(Serialize)]
struct Resource<'a> {
    attributes: Vec<KeyValue<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ScopeSpans<'a> {
    scope: Scope,
    spans: Vec<SpanJson<'a>>,
}

#[derive(Serialize)]
struct Scope {
    name: &'static str,
    version: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SpanJson<'a> {
    trace_id: String,
    span_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent_span_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_state: Option<&'a str>,
    name: &'a str,
    /// SPAN_KIND_SERVER.
    kind: u8,
    start_time_unix_nano: String,
    end_time_unix_nano: String,
    attributes: Vec<KeyValue<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    links: Vec<Link>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Status<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Link {
    trace_id: String,
    span_id: String,
}

#[derive(Serialize)]
struct Status<'a> {
    /// STATUS_CODE_ERROR.
    code: u8,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
}

#[derive(Serialize)]
struct KeyValue<'a> {
    key: &'a str,
    value: AnyValue<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum AnyValue<'a> {
    StringValue(&'a str),
    /// int64 as a decimal string, as the proto3 JSON mapping writes it.
    IntValue(String),
}

fn value(v: &AttrValue) -> AnyValue<'_> {
    match v {
        AttrValue::Str(s) => AnyValue::StringValue(s),
        AttrValue::Int(i) => AnyValue::IntValue(i.to_string()),
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    push_hex(&mut s, bytes);
    s
}

/// The request body for `spans`.
pub(super) fn encode(
    resource: &[(String, AttrValue)],
    spans: &[Finished],
) -> Result<Vec<u8>, serde_json::Error> {
    let spans = spans
        .iter()
        .map(|f| SpanJson {
            trace_id: hex(&f.ctx.trace_id),
            span_id: hex(&f.ctx.span_id),
            parent_span_id: f.rec.parent.map(|p| hex(&p)),
            trace_state: f.tracestate.as_deref(),
            name: &f.rec.name,
            kind: 2,
            start_time_unix_nano: f.rec.start_unix_nanos.to_string(),
            end_time_unix_nano: f.end_unix_nanos.to_string(),
            attributes: f
                .rec
                .attrs
                .iter()
                .map(|(k, v)| KeyValue {
                    key: k,
                    value: value(v),
                })
                .collect(),
            links: f
                .rec
                .link
                .iter()
                .map(|l| Link {
                    trace_id: hex(&l.trace_id),
                    span_id: hex(&l.span_id),
                })
                .collect(),
            status: f
                .error
                .as_deref()
                .map(|message| Status { code: 2, message }),
        })
        .collect();
    let export = Export {
        resource_spans: [ResourceSpans {
            resource: Resource {
                attributes: resource
                    .iter()
                    .map(|(k, v)| KeyValue {
                        key: k,
                        value: value(v),
                    })
                    .collect(),
            },
            scope_spans: [ScopeSpans {
                scope: Scope {
                    name: "kitbag",
                    version: env!("CARGO_PKG_VERSION"),
                },
                spans,
            }],
        }],
    };
    serde_json::to_vec(&export)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::{Recording, SpanContext};
    use super::*;

    #[test]
    fn encodes_the_otlp_json_shape() {
        let span = Finished {
            ctx: SpanContext {
                trace_id: [0xab; 16],
                span_id: [0x01; 8],
                sampled: true,
            },
            tracestate: Some("k=v".into()),
            rec: Box::new(Recording {
                parent: Some([0x02; 8]),
                link: None,
                name: "tools/call file_read".into(),
                start_unix_nanos: 1_700_000_000_000_000_000,
                started: std::time::Instant::now(),
                attrs: vec![
                    ("mcp.method.name", AttrValue::Str("tools/call".into())),
                    ("client.port", AttrValue::Int(4711)),
                ],
            }),
            end_unix_nanos: 1_700_000_000_000_500_000,
            error: Some(String::new()),
        };
        let body = encode(
            &[("service.name".into(), AttrValue::Str("kitbag".into()))],
            &[span],
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let rs = &v["resourceSpans"][0];
        assert_eq!(
            rs["resource"]["attributes"][0],
            serde_json::json!({"key": "service.name", "value": {"stringValue": "kitbag"}})
        );
        let s = &rs["scopeSpans"][0]["spans"][0];
        assert_eq!(s["traceId"], "abababababababababababababababab");
        assert_eq!(s["spanId"], "0101010101010101");
        assert_eq!(s["parentSpanId"], "0202020202020202");
        assert_eq!(s["traceState"], "k=v");
        assert_eq!(s["kind"], 2);
        assert_eq!(s["startTimeUnixNano"], "1700000000000000000");
        assert_eq!(
            s["attributes"][1],
            serde_json::json!({"key": "client.port", "value": {"intValue": "4711"}})
        );
        assert_eq!(s["status"], serde_json::json!({"code": 2}));
        assert!(s.get("links").is_none());
    }
}
