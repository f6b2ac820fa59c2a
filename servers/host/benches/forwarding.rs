//! Host overhead, side by side in one run: `file_read` straight to the files server, through
//! a bare relay (this bench re-run as a process that only copies bytes between its client and
//! the server: two threads, blocking reads and writes — what any process in the way costs on
//! this machine), and through the host; and host start → every embedded server ready.
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
fn report(era: &str, size: &str, p50: &P50s, target_us: u64) {
    let (direct, hosted) = (p50.direct, p50.hosted);
    let added = hosted.saturating_sub(direct);
    let relay = p50.relay.saturating_sub(direct);
    summary(Summary {
        area: "host",
        measure: &format!("forwarding, file_read {size}, stdio, {era} era, p50"),
        kitbag: us(hosted),
        reference: format!("direct {}, bare relay +{}", us(direct), us(relay)),
        compared: format!("+{}", us(added)),
        target: &format!("≤ +{target_us} µs"),
        met: Some(added <= Duration::from_micros(target_us)),
    });
}

/// One size's medians: straight to the server, through the bare relay, through the host.
struct P50s {
    direct: Duration,
    relay: Duration,
    hosted: Duration,
}

/// `RELAY_ARG PROGRAM ARGS…`: this bench as the bare relay in front of `PROGRAM ARGS…`.
const RELAY_ARG: &str = "--as-bare-relay";

/// Copy stdin to the child and the child's stdout to stdout until stdin ends; then wait for
/// the child. Nothing is parsed or buffered beyond one read.
fn relay(program: &str, args: &[String]) {
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    let mut child = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the relayed server starts");
    let mut to_child = child.stdin.take().expect("piped");
    let mut from_child = child.stdout.take().expect("piped");
    // The raw descriptor, not std's line-buffered `Stdout`.
    let stdout = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .expect("fd 1");
    let back = std::thread::spawn(move || {
        let mut out = std::fs::File::from(stdout);
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n @ 1..) = from_child.read(&mut buf) {
            if out.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    let mut buf = vec![0u8; 1 << 16];
    let mut stdin = std::io::stdin().lock();
    while let Ok(n @ 1..) = stdin.read(&mut buf) {
        if to_child.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    drop(to_child);
    let _ = back.join();
    let _ = child.wait();
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(RELAY_ARG) {
        relay(&argv[2], &argv[3..]);
        return;
    }
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
        let me = std::env::current_exe().expect("this bench's path");
        let server = bin.to_str().expect("utf8");
        let mut relayed = McpClient::spawn(
            &me,
            &[RELAY_ARG, server, "server", "files", "--root", root],
            dir.path(),
            era,
        );
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
            relayed.call("file_read", args.clone());
            hosted.call("file_read", args.clone());
            if let Some(b) = baseline.as_mut() {
                b.call("file_read", args.clone());
            }
        }
        let (mut d, mut r, mut h, mut b) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let timed = |client: &mut McpClient, into: &mut Vec<Duration>| {
            let t = Instant::now();
            assert!(!client.call("file_read", args.clone()).is_error);
            into.push(t.elapsed());
        };
        for _ in 0..1000 {
            timed(&mut direct, &mut d);
            timed(&mut relayed, &mut r);
            timed(&mut hosted, &mut h);
            if let Some(old) = baseline.as_mut() {
                timed(old, &mut b);
            }
        }
        let small = P50s {
            direct: median(d),
            relay: median(r),
            hosted: median(h),
        };
        let dm = small.direct;
        println!("file_read 20 lines, {label} era, median of 1000 (interleaved):");
        println!("  direct to the files server: {}", us(dm));
        println!("  through a bare relay:       {}", us(small.relay));
        println!("  through the host:           {}", us(small.hosted));
        println!(
            "  forwarding overhead:        {} (a bare relay: {})",
            us(small.hosted.saturating_sub(dm)),
            us(small.relay.saturating_sub(dm))
        );
        report(label, "20 lines", &small, 20);
        // A ~25 KB answer, interleaved the same way.
        let big = json!({"path": "big.rs", "limit": 640});
        let (mut d, mut r, mut h) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..300 {
            for (client, into) in [
                (&mut direct, &mut d),
                (&mut relayed, &mut r),
                (&mut hosted, &mut h),
            ] {
                let t = Instant::now();
                assert!(!client.call("file_read", big.clone()).is_error);
                into.push(t.elapsed());
            }
        }
        let large = P50s {
            direct: median(d),
            relay: median(r),
            hosted: median(h),
        };
        println!(
            "  ~25 KB answers: direct {}, through a bare relay {}, through the host {}",
            us(large.direct),
            us(large.relay),
            us(large.hosted)
        );
        report(label, "~25 KB", &large, 40);
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
