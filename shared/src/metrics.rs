//! `GET /metrics`: what a served process has done, in the Prometheus text exposition format
//! (version 0.0.4), for a team's scraper. Behind the same authentication as `/mcp`.
//!
//! Two kinds of series, all plain atomics (nothing on a request's or a call's way takes a
//! lock shared with others):
//! - per listener ([`Metrics`]): requests by path and status, refusals by reason, requests
//!   in flight;
//! - per process ([`calls`]): tool calls by tool and outcome (`ok` or the error code of an
//!   `isError` result), and a latency histogram per tool, from the call's arrival to its
//!   answer — recorded by whoever answers calls (a server's router, the host's dispatch and
//!   byte path), so stdio and HTTP calls of the host both count.
//!
//! The tool table is open addressing over slots that are filled once (`OnceLock`): a lookup
//! hashes the name and reads; a new name claims an empty slot. It holds at most 512 tools —
//! more (made-up names) count under `tool="other"` — and per tool 15 outcomes, more under
//! `outcome="other"`.

use std::fmt::Write as _;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::SystemTime;

/// Upper bounds of the latency buckets, in seconds (the last is +Inf).
const BUCKETS: [f64; 15] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Distinct tool names kept; past it calls count under `tool="other"` (a client cannot grow
/// the table without bound by calling made-up names).
const MAX_TOOLS: usize = 512;
/// Slots of the tool table (a power of two, twice `MAX_TOOLS`: probes stay short).
const SLOTS: usize = 1024;
/// Outcomes kept per tool besides `ok`; more count under `outcome="other"`.
const OUTCOMES: usize = 15;

/// The paths requests are counted by.
const PATHS: [&str; 5] = ["/mcp", "/healthz", "/metrics", "/.well-known", "other"];
/// Why a request was refused before MCP.
pub const REASONS: [&str; 11] = [
    "forbidden",
    "unavailable",
    "unauthorized",
    "insufficient_scope",
    "too_large",
    // Two `Host` headers, an absolute-form target, a body that is no JSON-RPC message.
    "bad_request",
    // The connection cap or the in-flight byte budget.
    "busy",
    "body_timeout",
    // Sessions: an id not issued here, another caller's, the caps.
    "unknown_session",
    "other_caller",
    "sessions_full",
];
/// Statuses 100–599 are counted; anything else counts as 599 (none are sent).
const STATUSES: usize = 500;

/// One listener's request counters.
pub struct Metrics {
    started: SystemTime,
    in_flight: AtomicI64,
    /// PATHS × STATUSES, row-major.
    requests: Box<[AtomicU64]>,
    refusals: [AtomicU64; REASONS.len()],
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            started: SystemTime::now(),
            in_flight: AtomicI64::new(0),
            requests: (0..PATHS.len() * STATUSES)
                .map(|_| AtomicU64::new(0))
                .collect(),
            refusals: Default::default(),
        }
    }
}

impl Metrics {
    /// Count a request to `path` (one of the paths above; others count as `other`).
    pub fn request(&self, path: &str, status: u16) {
        let p = PATHS
            .iter()
            .position(|x| *x == path)
            .unwrap_or(PATHS.len() - 1);
        let s = usize::from(status.clamp(100, 599) - 100);
        self.requests[p * STATUSES + s].fetch_add(1, Ordering::Relaxed);
    }

    /// Count a refusal (one of [`REASONS`]).
    pub fn refusal(&self, reason: &str) {
        if let Some(i) = REASONS.iter().position(|r| *r == reason) {
            self.refusals[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A request begins; the guard ends it.
    /// Requests whose answer has not been produced yet.
    pub fn in_flight(&self) -> i64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    pub fn begin(self: &std::sync::Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.clone())
    }

    /// The exposition text: this listener's series, then the process's tool calls.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# HELP kitbag_http_requests_total HTTP requests answered, by path and status.\n# TYPE kitbag_http_requests_total counter\n");
        for (p, path) in PATHS.iter().enumerate() {
            for s in 0..STATUSES {
                let n = self.requests[p * STATUSES + s].load(Ordering::Relaxed);
                if n > 0 {
                    let _ = writeln!(
                        out,
                        "kitbag_http_requests_total{{path=\"{path}\",status=\"{}\"}} {n}",
                        s + 100
                    );
                }
            }
        }
        out.push_str("# HELP kitbag_http_refusals_total Requests refused before MCP, by reason.\n# TYPE kitbag_http_refusals_total counter\n");
        for (reason, n) in REASONS.iter().zip(&self.refusals) {
            let n = n.load(Ordering::Relaxed);
            if n > 0 {
                let _ = writeln!(out, "kitbag_http_refusals_total{{reason=\"{reason}\"}} {n}");
            }
        }
        out.push_str("# HELP kitbag_http_requests_in_flight Requests being answered now.\n# TYPE kitbag_http_requests_in_flight gauge\n");
        let _ = writeln!(
            out,
            "kitbag_http_requests_in_flight {}",
            self.in_flight.load(Ordering::Relaxed)
        );
        calls().render(&mut out);
        let start = self
            .started
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        out.push_str("# HELP process_start_time_seconds When this process started, in Unix seconds.\n# TYPE process_start_time_seconds gauge\n");
        let _ = writeln!(out, "process_start_time_seconds {start}");
        if let Some(rss) = resident_bytes() {
            out.push_str("# HELP process_resident_memory_bytes Resident memory.\n# TYPE process_resident_memory_bytes gauge\n");
            let _ = writeln!(out, "process_resident_memory_bytes {rss}");
        }
        out
    }
}

/// Counts a request in flight until dropped.
pub struct InFlight(std::sync::Arc<Metrics>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A label value escaped as the format asks (backslash, quote, newline).
pub fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn resident_bytes() -> Option<u64> {
    crate::proc_stat::resident_bytes(std::process::id())
}

// ---------------------------------------------------------------------------------------
// Tool calls, per process

/// This process's tool-call table.
pub fn calls() -> &'static CallTable {
    static TABLE: OnceLock<CallTable> = OnceLock::new();
    TABLE.get_or_init(CallTable::default)
}

/// One tool's counters.
struct ToolStats {
    name: Box<str>,
    ok: AtomicU64,
    /// Error codes seen, each claimed once.
    outcomes: [OnceLock<Box<str>>; OUTCOMES],
    errors: [AtomicU64; OUTCOMES],
    other_errors: AtomicU64,
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl ToolStats {
    fn new(name: &str) -> Self {
        ToolStats {
            name: name.into(),
            ok: AtomicU64::new(0),
            outcomes: Default::default(),
            errors: Default::default(),
            other_errors: AtomicU64::new(0),
            buckets: Default::default(),
            count: AtomicU64::new(0),
            sum_nanos: AtomicU64::new(0),
        }
    }

    fn record(&self, error: Option<&str>, seconds: f64) {
        match error {
            None => {
                self.ok.fetch_add(1, Ordering::Relaxed);
            }
            Some(code) => {
                let slot = self.outcomes.iter().position(|slot| {
                    // An empty slot is claimed for this code; a slot another code claimed
                    // first (at the same moment) is passed over.
                    **slot.get_or_init(|| code.into()) == *code
                });
                match slot {
                    Some(i) => self.errors[i].fetch_add(1, Ordering::Relaxed),
                    None => self.other_errors.fetch_add(1, Ordering::Relaxed),
                };
            }
        }
        // Cumulative buckets are summed when rendered: one increment per call.
        if let Some(i) = BUCKETS.iter().position(|le| seconds <= *le) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_nanos
            .fetch_add((seconds * 1e9) as u64, Ordering::Relaxed);
    }
}

/// Calls by tool: lock-free lookups, a slot claimed once per new tool name.
pub struct CallTable {
    slots: Box<[OnceLock<Box<ToolStats>>]>,
    used: AtomicUsize,
    other: ToolStats,
}

impl Default for CallTable {
    fn default() -> Self {
        CallTable {
            slots: (0..SLOTS).map(|_| OnceLock::new()).collect(),
            used: AtomicUsize::new(0),
            other: ToolStats::new("other"),
        }
    }
}

/// FNV-1a: short names, no allocation, good enough spread for linear probing.
fn hash(name: &str) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h as usize
}

impl CallTable {
    fn stats(&self, tool: &str) -> &ToolStats {
        let start = hash(tool);
        for probe in 0..SLOTS {
            let slot = &self.slots[(start + probe) & (SLOTS - 1)];
            let stats = match slot.get() {
                Some(s) => s,
                None => {
                    if self.used.load(Ordering::Relaxed) >= MAX_TOOLS {
                        return &self.other;
                    }
                    let mut claimed = false;
                    let s = slot.get_or_init(|| {
                        claimed = true;
                        Box::new(ToolStats::new(tool))
                    });
                    if claimed {
                        self.used.fetch_add(1, Ordering::Relaxed);
                    }
                    s
                }
            };
            if *stats.name == *tool {
                return stats;
            }
        }
        &self.other
    }

    /// One call of `tool` answered after `seconds`: `error` is the code of an `isError`
    /// result (None: it succeeded).
    pub fn record(&self, tool: &str, error: Option<&str>, seconds: f64) {
        self.stats(tool).record(error, seconds);
    }

    fn render(&self, out: &mut String) {
        let mut tools: Vec<&ToolStats> = self
            .slots
            .iter()
            .filter_map(|s| s.get())
            .map(|b| &**b)
            .collect();
        if self.other.count.load(Ordering::Relaxed) > 0 {
            tools.push(&self.other);
        }
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        out.push_str("# HELP kitbag_tool_calls_total Tool calls answered, by tool and outcome (ok, or the error code of an isError result).\n# TYPE kitbag_tool_calls_total counter\n");
        for t in &tools {
            let tool = label(&t.name);
            let ok = t.ok.load(Ordering::Relaxed);
            if ok > 0 {
                let _ = writeln!(
                    out,
                    "kitbag_tool_calls_total{{tool=\"{tool}\",outcome=\"ok\"}} {ok}"
                );
            }
            for (code, n) in t.outcomes.iter().zip(&t.errors) {
                if let Some(code) = code.get() {
                    let _ = writeln!(
                        out,
                        "kitbag_tool_calls_total{{tool=\"{tool}\",outcome=\"{}\"}} {}",
                        label(code),
                        n.load(Ordering::Relaxed)
                    );
                }
            }
            let other = t.other_errors.load(Ordering::Relaxed);
            if other > 0 {
                let _ = writeln!(
                    out,
                    "kitbag_tool_calls_total{{tool=\"{tool}\",outcome=\"other\"}} {other}"
                );
            }
        }
        out.push_str("# HELP kitbag_tool_call_duration_seconds Tool calls, from their arrival to their answer.\n# TYPE kitbag_tool_call_duration_seconds histogram\n");
        for t in &tools {
            let tool = label(&t.name);
            let mut cumulative = 0;
            for (le, n) in BUCKETS.iter().zip(&t.buckets) {
                cumulative += n.load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "kitbag_tool_call_duration_seconds_bucket{{tool=\"{tool}\",le=\"{le}\"}} {cumulative}"
                );
            }
            // Read once: +Inf and _count agree even while calls are being recorded (then
            // a bucket may lag by one, never exceed +Inf).
            let count = t.count.load(Ordering::Relaxed).max(cumulative);
            let _ = writeln!(
                out,
                "kitbag_tool_call_duration_seconds_bucket{{tool=\"{tool}\",le=\"+Inf\"}} {count}"
            );
            let _ = writeln!(
                out,
                "kitbag_tool_call_duration_seconds_sum{{tool=\"{tool}\"}} {}",
                t.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9
            );
            let _ = writeln!(
                out,
                "kitbag_tool_call_duration_seconds_count{{tool=\"{tool}\"}} {count}"
            );
        }
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
        let t = CallTable::default();
        t.record("file_read", None, 0.0007);
        t.record("file_read", Some("file_not_found"), 3.0);
        t.record("we\"ird", None, 0.1);
        let mut text = m.render();
        t.render(&mut text);
        assert!(text.contains("kitbag_http_requests_total{path=\"/mcp\",status=\"200\"} 2\n"));
        assert!(text.contains("kitbag_http_refusals_total{reason=\"unauthorized\"} 1\n"));
        assert!(text.contains("kitbag_tool_calls_total{tool=\"file_read\",outcome=\"ok\"} 1\n"));
        assert!(text.contains(
            "kitbag_tool_calls_total{tool=\"file_read\",outcome=\"file_not_found\"} 1\n"
        ));
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
    fn made_up_names_cannot_grow_the_tables() {
        let t = CallTable::default();
        for i in 0..(MAX_TOOLS + 50) {
            t.record(&format!("t{i}"), None, 0.001);
        }
        assert_eq!(
            t.slots.iter().filter(|s| s.get().is_some()).count(),
            MAX_TOOLS
        );
        assert_eq!(t.other.count.load(Ordering::Relaxed), 50);
        for i in 0..(OUTCOMES + 5) {
            t.record("t0", Some(&format!("code_{i}")), 0.001);
        }
        let s = t.stats("t0");
        assert_eq!(s.other_errors.load(Ordering::Relaxed), 5);
        assert_eq!(s.count.load(Ordering::Relaxed), (OUTCOMES + 5 + 1) as u64);
    }

    #[test]
    fn concurrent_recording_loses_nothing() {
        let t = std::sync::Arc::new(CallTable::default());
        let threads: Vec<_> = (0..4)
            .map(|n| {
                let t = t.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000 {
                        let tool = format!("tool_{}", i % 7);
                        let code = (i % 3 == 0).then(|| format!("code_{n}"));
                        t.record(&tool, code.as_deref(), 0.002);
                    }
                })
            })
            .collect();
        for th in threads {
            assert!(th.join().is_ok());
        }
        let total: u64 = (0..7)
            .map(|i| t.stats(&format!("tool_{i}")).count.load(Ordering::Relaxed))
            .sum();
        assert_eq!(total, 40_000);
        assert_eq!(t.used.load(Ordering::Relaxed), 7);
    }
}
