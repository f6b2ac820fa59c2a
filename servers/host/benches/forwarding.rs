//! Host overhead, side by side in one run: `file_read` straight to the files server vs.
//! through the host, and host start → every embedded server ready.
//!
//! Run: `cargo bench -p kitbag --bench forwarding`. Prints medians; nothing here asserts on
//! time. With `KITBAG_BENCH_BASELINE=/path/to/an/older/kitbag`, calls through that host are
//! interleaved with the others: a change's before and after, measured in one run.

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_testkit::bench::{Summary, median, summary, us};
use kitbag_testkit::{Era, McpClient};
use serde_json::json;

/// The summary row of one size: the host's p50 beside the direct one, against `target_us`.
fn report(era: &str, size: &str, direct: Duration, hosted: Duration, target_us: u64) {
    let added = hosted.saturating_sub(direct);
    summary(Summary {
        area: "host",
        measure: &format!("forwarding, file_read {size}, stdio, {era} era, p50"),
        kitbag: us(hosted),
        reference: format!("direct {}", us(direct)),
        compared: format!("+{}", us(added)),
        target: &format!("≤ +{target_us} µs"),
        met: Some(added <= Duration::from_micros(target_us)),
    });
}

fn main() {
    let bin = Path::new(env!("CARGO_BIN_EXE_kitbag"));
    let dir = tempfile::tempdir().expect("tmp");
    let body: String = (1..=200)
        .map(|i| format!("line {i} of a small source file\n"))
        .collect();
    std::fs::write(dir.path().join("small.rs"), body).expect("w");
    // About 25 KB of answer: the second size.
    let big: String = (1..=640)
        .map(|i| format!("line {i} of a larger source file\n"))
        .collect();
    std::fs::write(dir.path().join("big.rs"), big).expect("w");
    let root = dir.path().to_str().expect("utf8");
    let cfg = dir.path().join("agent.json");
    let entry =
        json!({"mcp": {"files": {"command": bin, "args": ["server", "files", "--root", root]}}});
    std::fs::write(&cfg, entry.to_string()).expect("w");

    let baseline = std::env::var_os("KITBAG_BENCH_BASELINE").map(std::path::PathBuf::from);
    for (era, label) in [(Era::Handshake, "2025-11-25"), (Era::Modern, "2026-07-28")] {
        let mut direct =
            McpClient::spawn(bin, &["server", "files", "--root", root], dir.path(), era);
        let mut hosted = McpClient::spawn(
            bin,
            &["--config", cfg.to_str().expect("u"), "serve"],
            dir.path(),
            era,
        );
        let mut baseline = baseline.as_ref().map(|old| {
            McpClient::spawn(
                old,
                &["--config", cfg.to_str().expect("u"), "serve"],
                dir.path(),
                era,
            )
        });
        let args = json!({"path": "small.rs", "offset": 50, "limit": 20});
        for _ in 0..50 {
            direct.call("file_read", args.clone());
            hosted.call("file_read", args.clone());
            if let Some(b) = baseline.as_mut() {
                b.call("file_read", args.clone());
            }
        }
        let (mut d, mut h, mut b) = (Vec::new(), Vec::new(), Vec::new());
        let timed = |client: &mut McpClient, into: &mut Vec<Duration>| {
            let t = Instant::now();
            assert!(!client.call("file_read", args.clone()).is_error);
            into.push(t.elapsed());
        };
        for _ in 0..1000 {
            timed(&mut direct, &mut d);
            timed(&mut hosted, &mut h);
            if let Some(old) = baseline.as_mut() {
                timed(old, &mut b);
            }
        }
        let (dm, hm) = (median(d), median(h));
        println!("file_read 20 lines, {label} era, median of 1000 (interleaved):");
        println!("  direct to the files server: {}", us(dm));
        println!("  through the host:           {}", us(hm));
        println!(
            "  forwarding overhead:        {}",
            us(hm.saturating_sub(dm))
        );
        report(label, "20 lines", dm, hm, 20);
        // A ~25 KB answer, interleaved the same way.
        let big = json!({"path": "big.rs", "limit": 640});
        let (mut d, mut h) = (Vec::new(), Vec::new());
        for _ in 0..300 {
            for (client, into) in [(&mut direct, &mut d), (&mut hosted, &mut h)] {
                let t = Instant::now();
                assert!(!client.call("file_read", big.clone()).is_error);
                into.push(t.elapsed());
            }
        }
        let (bd, bh) = (median(d), median(h));
        println!(
            "  ~25 KB answers: direct {}, through the host {}",
            us(bd),
            us(bh)
        );
        report(label, "~25 KB", bd, bh, 40);
        if !b.is_empty() {
            let bm = median(b);
            println!("  through the baseline host:  {}", us(bm));
            println!(
                "  baseline overhead:          {}",
                us(bm.saturating_sub(dm))
            );
        }
    }

    // An empty directory: no agent.json there, so the host runs its embedded default.
    let empty = tempfile::tempdir().expect("tmp");
    let mut starts = Vec::new();
    let mut tools = 0;
    for _ in 0..10 {
        let t = Instant::now();
        let mut c = McpClient::spawn(bin, &["serve"], empty.path(), Era::Handshake);
        tools = c.list_tools().len();
        starts.push(t.elapsed());
        assert!(tools >= 22, "{tools} tools");
    }
    println!(
        "host start → every embedded server ready ({} servers, {tools} tools), median of 10: {:.1} ms",
        kitbag::families::FAMILIES.len(),
        median(starts).as_secs_f64() * 1e3
    );
}
