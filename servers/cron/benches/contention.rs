//! `cron_create` under contention (issue #22 §5): 8 real `kitbag-cron` processes on one
//! store pre-filled to 3,000 entries, each creating entries as fast as its client can; p50,
//! p90, p99, max latency and failures over all processes.
//!
//! Set `KITBAG_BENCH_OLD_BIN` to another build's `kitbag-cron` (e.g. the commit before the
//! SQLite store) to run it side by side on the same workload, in the same run:
//!
//! ```sh
//! git archive <rev> | tar -x -C /tmp/cron-old
//! cargo build --release -p kitbag-cron --manifest-path /tmp/cron-old/Cargo.toml
//! KITBAG_BENCH_OLD_BIN=$CARGO_TARGET_DIR/release/kitbag-cron cargo bench -p kitbag-cron --bench contention
//! ```
//! (copy the old binary aside first when both builds share a target directory).
//!
//! `KITBAG_BENCH_PROCS` (8), `KITBAG_BENCH_PREFILL` (3000) and `KITBAG_BENCH_CALLS` (calls
//! per process, 100) change the workload.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use chrono::{Timelike, Utc};
use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A schedule that does not fire during the run.
fn far_schedule(i: usize) -> String {
    format!("{} {} * * *", i % 60, (Utc::now().hour() + 12) % 24)
}

/// `n` entries in the shape every version reads (`cron.json`; the SQLite store imports it).
fn prefill(dir: &Path, n: usize) {
    let entries: Vec<Value> = (0..n)
        .map(|i| {
            json!({
                "id": format!("cron-{}", i + 1),
                "schedule": far_schedule(i),
                "message": format!("Entry {i}: check the service and report anything unusual."),
                "session": format!("bench-{}", i % 10),
                "enabled": true,
                "timezone": "UTC",
                "created_at": Utc::now().to_rfc3339(),
            })
        })
        .collect();
    std::fs::create_dir_all(dir.join(".kitbag")).expect("dir");
    std::fs::write(
        dir.join(".kitbag/cron.json"),
        serde_json::to_string_pretty(&json!({"next_id": n + 1, "entries": entries})).expect("json"),
    )
    .expect("write");
}

struct Outcome {
    latencies: Vec<Duration>,
    failures: Vec<String>,
    wall: Duration,
    entries_after: u64,
}

fn run(bin: &Path, procs: usize, prefill_n: usize, calls: usize) -> Outcome {
    let d = tempfile::tempdir().expect("tmp");
    prefill(d.path(), prefill_n);
    let root = d.path().to_str().expect("utf-8").to_string();
    let mut clients: Vec<McpClient> = (0..procs)
        .map(|_| {
            let mut c = McpClient::spawn_with_env(
                bin,
                &["--root", &root],
                d.path(),
                Era::Handshake,
                &[("TZ", "UTC")],
            );
            c.timeout = Duration::from_secs(120);
            c
        })
        .collect();
    // Every process has read the store (the new one imports cron.json here, once).
    for c in &mut clients {
        let s = c.call("cron_status", json!({}));
        assert!(!s.is_error, "{}", s.text);
        assert_eq!(s.structured["total_entries"], prefill_n as u64);
    }
    let gate = Arc::new(Barrier::new(procs + 1));
    let threads: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(p, mut c)| {
            let gate = gate.clone();
            std::thread::spawn(move || {
                let mut lat = Vec::with_capacity(calls);
                let mut failed = Vec::new();
                gate.wait();
                for i in 0..calls {
                    let args = json!({
                        "schedule": far_schedule(p * calls + i),
                        "message": format!("bench p{p} call {i}"),
                        "timezone": "UTC",
                    });
                    let t = Instant::now();
                    let r = c.call("cron_create", args);
                    lat.push(t.elapsed());
                    if r.is_error {
                        failed.push(r.error_code().unwrap_or("?").to_string());
                    }
                }
                (c, lat, failed)
            })
        })
        .collect();
    gate.wait();
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut failures = Vec::new();
    let mut clients = Vec::new();
    for t in threads {
        let (c, lat, failed) = t.join().expect("client thread");
        latencies.extend(lat);
        failures.extend(failed);
        clients.push(c);
    }
    let wall = started.elapsed();
    let s = clients[0].call("cron_status", json!({}));
    let entries_after = s.structured["total_entries"].as_u64().unwrap_or(0);
    for c in clients {
        c.shutdown();
    }
    latencies.sort();
    Outcome {
        latencies,
        failures,
        wall,
        entries_after,
    }
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)].as_secs_f64() * 1000.0
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let procs = env_usize("KITBAG_BENCH_PROCS", 8).max(1);
    let prefill_n = env_usize("KITBAG_BENCH_PREFILL", 3000);
    let calls = env_usize("KITBAG_BENCH_CALLS", 100).max(1);
    let mut impls: Vec<(String, PathBuf)> = Vec::new();
    if let Ok(old) = std::env::var("KITBAG_BENCH_OLD_BIN") {
        impls.push((format!("before ({old})"), PathBuf::from(old)));
    }
    impls.push((
        "this build".to_string(),
        PathBuf::from(env!("CARGO_BIN_EXE_kitbag-cron")),
    ));
    println!(
        "cron_create, {procs} processes on one store, {prefill_n} entries before, {calls} calls per process"
    );
    let mut rows = Vec::new();
    for (name, bin) in &impls {
        let o = run(bin, procs, prefill_n, calls);
        let mut codes: Vec<String> = o.failures.clone();
        codes.sort();
        codes.dedup();
        rows.push(format!(
            "| {name} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {}{} | {:.0} | {} → {} |",
            o.latencies.len(),
            pct(&o.latencies, 0.5),
            pct(&o.latencies, 0.9),
            pct(&o.latencies, 0.99),
            pct(&o.latencies, 1.0),
            o.failures.len(),
            if codes.is_empty() {
                String::new()
            } else {
                format!(" ({})", codes.join(", "))
            },
            o.latencies.len() as f64 / o.wall.as_secs_f64(),
            prefill_n,
            o.entries_after,
        ));
    }
    println!(
        "| build | calls | p50 ms | p90 ms | p99 ms | max ms | failed | creates/s | entries |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
}
