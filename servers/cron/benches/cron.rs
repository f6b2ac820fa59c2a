//! kitbag-cron benchmarks, side by side in one run:
//! - `cron_list` round trip over MCP with 1,000 entries (p50/p90), against an in-process call
//!   of the same logic and against `cron_status`;
//! - idle wake-ups of the server process over a minute with 1,000 enabled entries (none due
//!   in the window), next to an empty server measured over the same minute.
//!
//! `KITBAG_BENCH_IDLE_SECS` shortens the idle window (default 60).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{Timelike, Utc};
use kitbag_cron::backend::Backend;
use kitbag_cron::clock::SystemClock;
use kitbag_cron::state::{CronState, Options};
use kitbag_cron::store::Store;
use kitbag_testkit::{Era, McpClient, RawClient};
use serde_json::{Value, json};

const ENTRIES: usize = 1000;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-cron"))
}

/// 1,000 enabled entries in the seed's shape, all due at least `hours_ahead` hours from now.
fn write_store(dir: &Path, hours_ahead: u32) {
    let hour = (Utc::now().hour() + hours_ahead) % 24;
    let entries: Vec<Value> = (0..ENTRIES)
        .map(|i| {
            json!({
                "id": format!("cron-{}", i + 1),
                "schedule": format!("{} {} * * *", i % 60, hour),
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
        serde_json::to_string_pretty(&json!({"next_id": ENTRIES + 1, "entries": entries}))
            .expect("json"),
    )
    .expect("write");
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn time_calls(c: &mut McpClient, tool: &str, args: Value, n: usize) -> (Duration, Duration) {
    for _ in 0..10 {
        c.call(tool, args.clone());
    }
    let mut t = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let r = c.call(tool, args.clone());
        t.push(start.elapsed());
        assert!(!r.is_error, "{tool}: {}", r.text);
    }
    t.sort();
    (percentile(&t, 0.5), percentile(&t, 0.9))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Per-thread context switches (voluntary + involuntary) and the process's CPU ticks.
fn sample(pid: u32) -> (std::collections::HashMap<String, u64>, u64) {
    let mut per_thread = std::collections::HashMap::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let mut switches = 0;
            if let Ok(s) = std::fs::read_to_string(t.path().join("status")) {
                for line in s.lines() {
                    if let Some(v) = line
                        .strip_prefix("voluntary_ctxt_switches:")
                        .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
                    {
                        switches += v.trim().parse::<u64>().unwrap_or(0);
                    }
                }
            }
            per_thread.insert(t.file_name().to_string_lossy().into_owned(), switches);
        }
    }
    let ticks = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1.to_string();
            let f: Vec<&str> = rest.split_whitespace().collect();
            // After the command name: state is field 0; utime and stime are fields 11 and 12.
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    (per_thread, ticks)
}

/// Wake-ups between two samples: switches of threads alive in both, all switches of threads
/// born meanwhile, and one per thread that exited (it woke up to exit).
fn wakeups_between(
    a: &std::collections::HashMap<String, u64>,
    b: &std::collections::HashMap<String, u64>,
) -> u64 {
    let mut n = 0;
    for (tid, after) in b {
        n += after.saturating_sub(a.get(tid).copied().unwrap_or(0));
    }
    n + a.keys().filter(|tid| !b.contains_key(*tid)).count() as u64
}

fn main() {
    // --- cron_list round trip ---
    let d = tempfile::tempdir().expect("tmp");
    write_store(d.path(), 2);
    let args = ["--root", d.path().to_str().expect("utf-8")];
    let mut c = McpClient::spawn_with_env(bin(), &args, d.path(), Era::Handshake, &[("TZ", "UTC")]);
    let n = 300;
    let (list_all_p50, list_all_p90) = time_calls(&mut c, "cron_list", json!({"limit": 1000}), n);
    let (list_page_p50, list_page_p90) = time_calls(&mut c, "cron_list", json!({}), n);
    let (status_p50, status_p90) = time_calls(&mut c, "cron_status", json!({}), n);
    // How much of the full listing is moving and parsing the answer on the client side.
    let whole = c.call("cron_list", json!({"limit": 1000}));
    let answer = serde_json::to_string(&whole.raw).expect("json");
    let mut parse = Vec::new();
    for _ in 0..50 {
        let start = Instant::now();
        let v: Value = serde_json::from_str(&answer).expect("parse");
        parse.push(start.elapsed());
        assert!(v.is_object());
    }
    parse.sort();
    let parse_p50 = percentile(&parse, 0.5);

    // The same full listing at the byte level: request written → answer line received, no
    // client-side parsing (the testkit client adds a reader thread, a parse and copies).
    let mut raw = RawClient::spawn(bin(), &args, d.path(), &[("TZ", "UTC")]);
    let mut wire = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        let len = raw.call(r#"{"name":"cron_list","arguments":{"limit":1000}}"#);
        wire.push(start.elapsed());
        assert!(len > 400_000);
    }
    drop(raw);
    wire.sort();
    let (wire_p50, wire_p90) = (percentile(&wire, 0.5), percentile(&wire, 0.9));

    // The same listing without MCP or a process boundary.
    let state = CronState::new(
        Backend::Sqlite(Store::new(
            &kitbag_shared::paths::PathPolicy::new(d.path(), &[], false).expect("policy"),
            1 << 20,
        )),
        d.path().to_path_buf(),
        Arc::new(SystemClock),
        Options {
            claude_channel: false,
            commands_enabled: true,
            writable: true,
            machine_tz: "UTC".into(),
        },
    );
    let mut inproc = Vec::with_capacity(n);
    for i in 0..n + 10 {
        let start = Instant::now();
        let r = kitbag_cron::list::list(
            &state,
            serde_json::from_value(json!({"limit": 1000})).expect("params"),
        )
        .expect("list");
        assert_eq!(r.data.total, ENTRIES);
        if i >= 10 {
            inproc.push(start.elapsed());
        }
    }
    inproc.sort();
    let inproc_p50 = percentile(&inproc, 0.5);
    drop(c);

    println!("cron_list with {ENTRIES} entries ({n} calls each, round trip over stdio):");
    println!(
        "  cron_list limit=1000 (all)    p50 {:>7.3} ms  p90 {:>7.3} ms   target p50 <= 3 ms: {}",
        ms(list_all_p50),
        ms(list_all_p90),
        if ms(list_all_p50) <= 3.0 {
            "met"
        } else {
            "MISSED"
        }
    );
    println!(
        "  the same at the byte level    p50 {:>7.3} ms  p90 {:>7.3} ms   target p50 <= 3 ms: {}",
        ms(wire_p50),
        ms(wire_p90),
        if ms(wire_p50) <= 3.0 { "met" } else { "MISSED" }
    );
    println!(
        "  cron_list default page (100)  p50 {:>7.3} ms  p90 {:>7.3} ms",
        ms(list_page_p50),
        ms(list_page_p90)
    );
    println!(
        "  cron_status                   p50 {:>7.3} ms  p90 {:>7.3} ms",
        ms(status_p50),
        ms(status_p90)
    );
    println!(
        "  full answer {} KB; the client's JSON parse of it alone p50 {:.3} ms",
        answer.len() / 1024,
        ms(parse_p50)
    );
    println!(
        "  in-process list (no MCP)      p50 {:>7.3} ms   MCP overhead x{:.2}",
        ms(inproc_p50),
        ms(list_all_p50) / ms(inproc_p50).max(1e-6)
    );

    // --- idle wake-ups ---
    let secs: u64 = std::env::var("KITBAG_BENCH_IDLE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let full = tempfile::tempdir().expect("tmp");
    write_store(full.path(), 2);
    let empty = tempfile::tempdir().expect("tmp");
    let full_args = ["--root", full.path().to_str().expect("utf-8")];
    let empty_args = ["--root", empty.path().to_str().expect("utf-8")];
    let mut busy = McpClient::spawn_with_env(
        bin(),
        &full_args,
        full.path(),
        Era::Handshake,
        &[("TZ", "UTC")],
    );
    let mut idle = McpClient::spawn_with_env(
        bin(),
        &empty_args,
        empty.path(),
        Era::Handshake,
        &[("TZ", "UTC")],
    );
    let s = busy.call("cron_status", json!({}));
    assert_eq!(s.structured["enabled_entries"], ENTRIES as u64);
    idle.call("cron_status", json!({}));
    // Let start-up settle: tokio's idle blocking-pool threads exit 10 s after their last job.
    std::thread::sleep(Duration::from_secs(12));
    let (b0, bt0) = sample(busy.pid());
    let (e0, et0) = sample(idle.pid());
    std::thread::sleep(Duration::from_secs(secs));
    let (b1, bt1) = sample(busy.pid());
    let (e1, et1) = sample(idle.pid());
    let per_min = |a: &std::collections::HashMap<String, u64>,
                   b: &std::collections::HashMap<String, u64>| {
        wakeups_between(a, b) as f64 * 60.0 / secs as f64
    };
    println!("idle server over {secs} s (context switches over all threads, CPU ticks at 100 Hz):");
    println!(
        "  {ENTRIES} enabled entries, none due  {:>6.1} wake-ups/min  {:>3} CPU ticks",
        per_min(&b0, &b1),
        bt1 - bt0
    );
    println!(
        "  no entries                       {:>6.1} wake-ups/min  {:>3} CPU ticks",
        per_min(&e0, &e1),
        et1 - et0
    );
    println!("  (a once-a-second poller would wake 60 times a minute)");
}
