//! What tracing costs on the byte path, side by side in one run: `file_read` (20 lines)
//! through the host over stdio (a raw line client) and over HTTP (one keep-alive loopback
//! connection), with
//! - `off`: no endpoint (what every user without a collector runs);
//! - `host`: the host exporting its spans (`--otlp-endpoint`, to a loopback OTLP sink);
//! - `host+child`: host and child exporting (`OTEL_EXPORTER_OTLP_ENDPOINT`, which the child
//!   inherits): the whole trace;
//! - `before` (when `KITBAG_BENCH_BASELINE` names a kitbag binary built without this code):
//!   the same calls through it, for what `off` costs over no tracing code at all.
//!
//! Calls are interleaved (one per configuration in turn, each round starting with the next
//! configuration), so all see the same load and none always goes first. Then the
//! work `off` adds per call, in process: the enabled test, the pass-through check and the
//! call's count and latency.
//!
//! Run: `cargo bench -p kitbag --bench otel`. Prints p50/p99; nothing here asserts on time.

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_testkit::RawClient;
use kitbag_testkit::http::{HttpConn, HttpServer};
use kitbag_testkit::otlp::Sink;
use serde_json::json;

const CALLS: usize = 2000;
const WARM: usize = 100;
const PARAMS: &str =
    r#"{"name":"file_read","arguments":{"path":"small.rs","offset":50,"limit":20}}"#;

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p) as usize]
}

fn us(d: Duration) -> String {
    format!("{:>6.1} µs", d.as_secs_f64() * 1e6)
}

fn signed_us(a: Duration, b: Duration) -> String {
    format!("{:+.1} µs", (a.as_secs_f64() - b.as_secs_f64()) * 1e6)
}

struct Config<'a> {
    label: &'static str,
    bin: &'a Path,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
}

fn http_call(conn: &mut HttpConn, id: u64) {
    let body = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{PARAMS}}}"
    );
    let body: serde_json::Value = serde_json::from_str(&body).expect("json");
    let r = conn.post_mcp(&body, &[("mcp-protocol-version", "2025-11-25")]);
    assert!(r.text().contains("line 51"), "{}", r.text());
}

fn report(what: &str, labels: &[&str], mut times: Vec<Vec<Duration>>) {
    println!("{what}, {CALLS} calls per configuration, interleaved:");
    let off = labels.iter().position(|l| *l == "off").unwrap_or(0);
    let off50 = pct(&mut times[off], 0.5);
    let off99 = pct(&mut times[off], 0.99);
    for (label, t) in labels.iter().zip(times.iter_mut()) {
        let (p50, p99) = (pct(t, 0.5), pct(t, 0.99));
        println!(
            "  {label:<11} p50 {}  p99 {}   vs off: p50 {}  p99 {}",
            us(p50),
            us(p99),
            signed_us(p50, off50),
            signed_us(p99, off99)
        );
    }
}

fn main() {
    let bin = Path::new(env!("CARGO_BIN_EXE_kitbag"));
    let baseline = std::env::var("KITBAG_BENCH_BASELINE").ok();
    let dir = tempfile::tempdir().expect("tmp");
    let body: String = (1..=200)
        .map(|i| format!("line {i} of a small source file\n"))
        .collect();
    std::fs::write(dir.path().join("small.rs"), body).expect("w");
    let root = dir.path().to_str().expect("utf8");
    let sink = Sink::start();

    let config_for = |b: &Path, name: &str| {
        let cfg = dir.path().join(format!("agent-{name}.json"));
        let entry =
            json!({"mcp": {"files": {"command": b, "args": ["server", "files", "--root", root]}}});
        std::fs::write(&cfg, entry.to_string()).expect("w");
        cfg.to_str().expect("utf8").to_string()
    };
    let cfg = config_for(bin, "now");
    let quiet = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", String::new()),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", String::new()),
        ("OTEL_SDK_DISABLED", String::new()),
    ];
    let mut traced = quiet.clone();
    traced[0].1 = sink.url();
    let mut configs = Vec::new();
    let before_bin = baseline.as_deref().map(Path::new);
    if let Some(b) = before_bin {
        configs.push(Config {
            label: "before",
            bin: b,
            args: vec!["--config".into(), config_for(b, "before"), "serve".into()],
            env: quiet.clone(),
        });
    }
    configs.push(Config {
        label: "off",
        bin,
        args: vec!["--config".into(), cfg.clone(), "serve".into()],
        env: quiet.clone(),
    });
    configs.push(Config {
        label: "host",
        bin,
        args: vec![
            "--config".into(),
            cfg.clone(),
            "serve".into(),
            "--otlp-endpoint".into(),
            sink.url(),
        ],
        env: quiet.clone(),
    });
    configs.push(Config {
        label: "host+child",
        bin,
        args: vec!["--config".into(), cfg.clone(), "serve".into()],
        env: traced,
    });
    let labels: Vec<&str> = configs.iter().map(|c| c.label).collect();

    // stdio
    let mut clients: Vec<RawClient> = configs
        .iter()
        .map(|c| {
            let args: Vec<&str> = c.args.iter().map(String::as_str).collect();
            let env: Vec<(&str, &str)> = c.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            RawClient::spawn(c.bin, &args, dir.path(), &env)
        })
        .collect();
    for _ in 0..WARM {
        for c in &mut clients {
            c.call(PARAMS);
        }
    }
    let n = clients.len();
    let mut times = vec![Vec::with_capacity(CALLS); n];
    for round in 0..CALLS {
        // Each round starts with the next configuration: the first call of a round is a few
        // µs quicker (measured with one binary in two places), so no configuration keeps it.
        for k in (0..n).map(|k| (k + round) % n) {
            let c = &mut clients[k];
            let start = Instant::now();
            c.call(PARAMS);
            times[k].push(start.elapsed());
            assert!(
                memchr_contains(c.line(), b"line 51"),
                "{}",
                String::from_utf8_lossy(c.line())
            );
        }
    }
    report(
        "stdio, byte path, handshake era",
        &labels,
        std::mem::take(&mut times),
    );
    drop(clients);

    // HTTP
    let servers: Vec<HttpServer> = configs
        .iter()
        .map(|c| {
            let mut args: Vec<&str> = c.args.iter().map(String::as_str).collect();
            args.extend(["--http", "127.0.0.1:0"]);
            let env: Vec<(&str, &str)> = c.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            HttpServer::start(c.bin, &args, dir.path(), &env)
        })
        .collect();
    let mut conns: Vec<HttpConn> = servers.iter().map(HttpServer::connect).collect();
    for i in 0..WARM as u64 {
        for c in &mut conns {
            http_call(c, i);
        }
    }
    let n = conns.len();
    let mut times = vec![Vec::with_capacity(CALLS); n];
    for round in 0..CALLS {
        for k in (0..n).map(|k| (k + round) % n) {
            let start = Instant::now();
            http_call(&mut conns[k], 1000 + round as u64);
            times[k].push(start.elapsed());
        }
    }
    report(
        "HTTP, byte path, handshake era, one keep-alive connection",
        &labels,
        times,
    );
    drop(conns);
    drop(servers);
    let received = sink.received();
    let spans = received
        .iter()
        .map(|r| memchr::memmem::find_iter(&r.body, b"\"spanId\"").count())
        .sum::<usize>();
    println!(
        "the sink received {} exports, {spans} spans",
        received.len()
    );

    // In process: what `off` adds to each call.
    let n = 1_000_000u32;
    let line =
        format!("{{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{PARAMS}}}");
    let kitbag_hub::fastpath::Upstream::Call(call) = kitbag_hub::fastpath::classify(&line) else {
        panic!("a plain call");
    };
    let start = Instant::now();
    let mut sink_bits = 0usize;
    for i in 0..n {
        if kitbag_shared::otel::enabled() {
            sink_bits += 1;
        }
        sink_bits += usize::from(call.passthrough().is_some());
        kitbag_shared::metrics::calls().record("file_read", None, f64::from(i % 1000) * 1e-6);
    }
    let per = start.elapsed() / n;
    println!(
        "in process, per call with tracing off: enabled test + pass-through check + count and latency: {per:?} ({sink_bits})"
    );
}

fn memchr_contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}
