//! `GET /metrics`: what a served process has done, in the Prometheus text exposition format
//! (version 0.0.4), for a team's scraper. Behind the same authentication as `/mcp`.
//!
//! Counted in front of MCP, so every binary gets the same series: requests by path and
//! status, refusals by reason, requests in flight, and per tool the calls and a latency
//! histogram measured until the answer's last byte (an SSE stream's end, not its headers).

use crate::lock::LockExt;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::{Body, Frame, SizeHint};

/// Upper bounds of the latency buckets, in seconds (the last is +Inf).
const BUCKETS: [f64; 15] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Distinct tool names kept; past it calls count under `tool="other"` (a client cannot grow
/// the table without bound by calling made-up names).
const MAX_TOOLS: usize = 512;

#[derive(Default)]
struct Histogram {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        for (i, le) in BUCKETS.iter().enumerate() {
            if seconds <= *le {
                self.buckets[i] += 1;
            }
        }
        self.count += 1;
        self.sum += seconds;
    }
}

#[derive(Default)]
struct Tables {
    /// (path, status) → requests.
    requests: BTreeMap<(&'static str, u16), u64>,
    /// reason → refusals.
    refusals: BTreeMap<&'static str, u64>,
    /// tool → latency (its count is the number of calls).
    tools: BTreeMap<String, Histogram>,
}

pub struct Metrics {
    started: SystemTime,
    in_flight: AtomicI64,
    tables: Mutex<Tables>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            started: SystemTime::now(),
            in_flight: AtomicI64::new(0),
            tables: Mutex::default(),
        }
    }
}

impl Metrics {
    fn tables(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.locked()
    }

    pub fn request(&self, path: &'static str, status: u16) {
        *self.tables().requests.entry((path, status)).or_default() += 1;
    }

    pub fn refusal(&self, reason: &'static str) {
        *self.tables().refusals.entry(reason).or_default() += 1;
    }

    pub fn tool_call(&self, tool: &str, seconds: f64) {
        let mut t = self.tables();
        let key = if t.tools.contains_key(tool) || t.tools.len() < MAX_TOOLS {
            tool.to_string()
        } else {
            "other".to_string()
        };
        t.tools.entry(key).or_default().observe(seconds);
    }

    /// A request begins; the guard ends it.
    pub fn begin(self: &std::sync::Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let t = self.tables();
        out.push_str("# HELP kitbag_http_requests_total HTTP requests answered, by path and status.\n# TYPE kitbag_http_requests_total counter\n");
        for ((path, status), n) in &t.requests {
            out.push_str(&format!(
                "kitbag_http_requests_total{{path=\"{path}\",status=\"{status}\"}} {n}\n"
            ));
        }
        out.push_str("# HELP kitbag_http_refusals_total Requests refused before MCP, by reason.\n# TYPE kitbag_http_refusals_total counter\n");
        for (reason, n) in &t.refusals {
            out.push_str(&format!(
                "kitbag_http_refusals_total{{reason=\"{reason}\"}} {n}\n"
            ));
        }
        out.push_str("# HELP kitbag_http_requests_in_flight Requests being answered now.\n# TYPE kitbag_http_requests_in_flight gauge\n");
        out.push_str(&format!(
            "kitbag_http_requests_in_flight {}\n",
            self.in_flight.load(Ordering::Relaxed)
        ));
        out.push_str("# HELP kitbag_tool_call_duration_seconds Tool calls over HTTP, until the answer's last byte.\n# TYPE kitbag_tool_call_duration_seconds histogram\n");
        for (tool, h) in &t.tools {
            let tool = label(tool);
            for (le, n) in BUCKETS.iter().zip(h.buckets) {
                out.push_str(&format!(
                    "kitbag_tool_call_duration_seconds_bucket{{tool=\"{tool}\",le=\"{le}\"}} {n}\n"
                ));
            }
            out.push_str(&format!(
                "kitbag_tool_call_duration_seconds_bucket{{tool=\"{tool}\",le=\"+Inf\"}} {}\n",
                h.count
            ));
            out.push_str(&format!(
                "kitbag_tool_call_duration_seconds_sum{{tool=\"{tool}\"}} {}\n",
                h.sum
            ));
            out.push_str(&format!(
                "kitbag_tool_call_duration_seconds_count{{tool=\"{tool}\"}} {}\n",
                h.count
            ));
        }
        drop(t);
        let start = self
            .started
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        out.push_str("# HELP process_start_time_seconds When this process started, in Unix seconds.\n# TYPE process_start_time_seconds gauge\n");
        out.push_str(&format!("process_start_time_seconds {start}\n"));
        if let Some(rss) = resident_bytes() {
            out.push_str("# HELP process_resident_memory_bytes Resident memory.\n# TYPE process_resident_memory_bytes gauge\n");
            out.push_str(&format!("process_resident_memory_bytes {rss}\n"));
        }
        out
    }
}

/// A label value escaped as the format asks (backslash, quote, newline).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Counts a request in flight until dropped.
pub struct InFlight(std::sync::Arc<Metrics>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body that records a tool call's duration when its last byte has gone (or the
/// client went away).
pub struct Timed {
    inner: BoxBody<Bytes, Infallible>,
    done: Option<(std::sync::Arc<Metrics>, String, Instant)>,
}

impl Timed {
    pub fn wrap(
        inner: BoxBody<Bytes, Infallible>,
        metrics: std::sync::Arc<Metrics>,
        tool: String,
        started: Instant,
    ) -> BoxBody<Bytes, Infallible> {
        Timed {
            inner,
            done: Some((metrics, tool, started)),
        }
        .boxed()
    }

    fn finish(&mut self) {
        if let Some((metrics, tool, started)) = self.done.take() {
            metrics.tool_call(&tool, started.elapsed().as_secs_f64());
        }
    }
}

impl Drop for Timed {
    fn drop(&mut self) {
        self.finish();
    }
}

impl Body for Timed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) {
            self.finish();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histograms() {
        let m = Metrics::default();
        m.request("/mcp", 200);
        m.request("/mcp", 200);
        m.request("/mcp", 401);
        m.refusal("unauthorized");
        m.tool_call("file_read", 0.0007);
        m.tool_call("file_read", 3.0);
        m.tool_call("we\"ird", 0.1);
        let text = m.render();
        assert!(text.contains("kitbag_http_requests_total{path=\"/mcp\",status=\"200\"} 2\n"));
        assert!(text.contains("kitbag_http_refusals_total{reason=\"unauthorized\"} 1\n"));
        assert!(text.contains(
            "kitbag_tool_call_duration_seconds_bucket{tool=\"file_read\",le=\"0.001\"} 1\n"
        ));
        assert!(
            text.contains(
                "kitbag_tool_call_duration_seconds_bucket{tool=\"file_read\",le=\"5\"} 2\n"
            )
        );
        assert!(text.contains("kitbag_tool_call_duration_seconds_count{tool=\"file_read\"} 2\n"));
        assert!(text.contains("tool=\"we\\\"ird\""));
    }

    #[test]
    fn made_up_tool_names_cannot_grow_the_table() {
        let m = Metrics::default();
        for i in 0..(MAX_TOOLS + 50) {
            m.tool_call(&format!("t{i}"), 0.001);
        }
        let t = m.tables();
        assert_eq!(t.tools.len(), MAX_TOOLS + 1);
        assert_eq!(t.tools["other"].count, 50);
    }
}
