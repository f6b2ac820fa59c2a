//! Round trips over stdio against the real release binary, side by side with the official
//! Node filesystem server when it is installed (`npm i -g @modelcontextprotocol/server-filesystem`).
//!
//! Run: `cargo bench -p kitbag-files`. Prints medians; nothing here asserts on time.

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_testkit::bench::{Summary, status_kb as rss_kb, summary};
use kitbag_testkit::{Era, McpClient, RawClient};
use serde_json::json;

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn fmt(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        format!("{:.0} µs", d.as_secs_f64() * 1e6)
    } else {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    }
}

fn cold_start(bin: &Path, args: &[&str], cwd: &Path, n: usize) -> Duration {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let mut c = McpClient::spawn(bin, args, cwd, Era::Handshake);
        let tools = c.list_tools();
        times.push(t.elapsed());
        assert!(!tools.is_empty());
        drop(c);
    }
    percentile(&mut times, 0.5)
}

/// The pause between paced calls.
const PACE: Duration = Duration::from_millis(1);
/// Set when this binary runs as the pipe-floor peer: the size of the line it answers with.
const ECHO_ENV: &str = "KITBAG_BENCH_ECHO_BYTES";

/// Round trips of one call, first with the client pausing [`PACE`] before each, then
/// back-to-back.
struct Timings {
    paced: Vec<Duration>,
    back_to_back: Vec<Duration>,
}

impl Timings {
    fn measure(client: &mut RawClient, params: &str, n: usize) -> Timings {
        let mut round = |gap: Duration| -> Vec<Duration> {
            (0..n)
                .map(|_| {
                    std::thread::sleep(gap);
                    let t = Instant::now();
                    client.call(params);
                    t.elapsed()
                })
                .collect()
        };
        let paced = round(PACE);
        Timings {
            paced,
            back_to_back: round(Duration::ZERO),
        }
    }

    /// `p50 paced / p50 back-to-back`.
    fn p50s(&mut self) -> String {
        format!(
            "p50 {} / {}",
            fmt(percentile(&mut self.paced, 0.5)),
            fmt(percentile(&mut self.back_to_back, 0.5))
        )
    }
}

/// Answer every request line (one with an `"id"`) with one ready-made line of `size` bytes.
fn echo_peer(size: usize) {
    use std::io::{BufRead, Write};
    let mut answer = br#"{"jsonrpc":"2.0","id":0,"result":{"x":""#.to_vec();
    answer.resize(size.saturating_sub(4).max(answer.len()), b'x');
    answer.extend_from_slice(b"\"}}\n");
    // The same pipe the server gets, so the floor compares like with like.
    kitbag_shared::server::widen_stdout_pipe();
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { return };
        if line.contains("\"id\"") && (out.write_all(&answer).is_err() || out.flush().is_err()) {
            return;
        }
    }
}

/// Round trips against [`echo_peer`] answering `size` bytes.
fn pipe_floor(root: &Path, size: usize) -> Timings {
    let me = std::env::current_exe().expect("exe");
    let bytes = size.to_string();
    let mut peer = RawClient::spawn(&me, &[], root, &[(ECHO_ENV, &bytes)]);
    assert!(peer.call("{}") >= size);
    Timings::measure(&mut peer, "{}", 1000)
}

fn main() {
    if let Some(size) = std::env::var(ECHO_ENV).ok().and_then(|v| v.parse().ok()) {
        echo_peer(size);
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_kitbag-files"));
    let dir = tempfile::tempdir().expect("tmp");
    let root = dir.path();
    let two_k: String = (1..=2000)
        .map(|i| format!("line {i}: some typical source text, fn foo_{i}() {{ bar(); }}\n"))
        .collect();
    std::fs::write(root.join("two_k.rs"), &two_k).expect("w");
    let mut mb = String::new();
    let mut i = 0;
    while mb.len() < 1 << 20 {
        i += 1;
        mb.push_str(&format!(
            "let value_{i} = compute({i}); // filler text to reach a megabyte\n"
        ));
    }
    mb.push_str("const MARKER: &str = \"alpha\";\n");
    std::fs::write(root.join("one_mb.rs"), &mb).expect("w");

    println!("kitbag-files benchmarks (release binary, stdio round trips)\n");
    let cold = cold_start(bin, &[], root, 20);
    println!(
        "cold start (spawn → initialize → tools/list), median of 20: {}",
        fmt(cold)
    );

    let mut c = McpClient::spawn(bin, &[], root, Era::Handshake);
    let idle_rss = rss_kb(c.pid(), "VmRSS:");
    let mut reads = Vec::new();
    for _ in 0..500 {
        let t = Instant::now();
        let r = c.call("file_read", json!({"path": "two_k.rs"}));
        reads.push(t.elapsed());
        assert!(!r.is_error);
    }
    let read_p50 = percentile(&mut reads, 0.5);
    let read_p90 = percentile(&mut reads, 0.9);
    println!(
        "file_read 2,000-line file (50 KB answer), through the test client (reader thread, parse, copies): p50 {}  p90 {}",
        fmt(read_p50),
        fmt(read_p90)
    );
    let mut small = Vec::new();
    for _ in 0..500 {
        let t = Instant::now();
        let r = c.call(
            "file_read",
            json!({"path": "two_k.rs", "offset": 1000, "limit": 20}),
        );
        small.push(t.elapsed());
        assert!(!r.is_error);
    }
    println!(
        "file_read 20 lines of the same file: p50 {}",
        fmt(percentile(&mut small, 0.5))
    );
    // What the client side alone costs: parsing one 50 KB-content answer.
    let answer =
        serde_json::to_string(&c.call("file_read", json!({"path": "two_k.rs"})).raw).expect("json");
    let mut parse = Vec::new();
    for _ in 0..500 {
        let t = Instant::now();
        std::hint::black_box(serde_json::from_str::<serde_json::Value>(&answer).expect("parse"));
        parse.push(t.elapsed());
    }
    println!(
        "  of which the test client's JSON parse of the {} KB answer: p50 {}",
        answer.len() / 1024,
        fmt(percentile(&mut parse, 0.5))
    );

    // What the server's own encoding of that answer costs: serde_json vs kitbag's json_out
    // (same bytes, faster string escaping).
    let answer_value: serde_json::Value = serde_json::from_str(&answer).expect("parse");
    let (mut by_serde, mut by_ours) = (Vec::new(), Vec::new());
    for _ in 0..500 {
        let t = Instant::now();
        std::hint::black_box(serde_json::to_vec(&answer_value).expect("encode"));
        by_serde.push(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(kitbag_shared::json_out::to_vec(&answer_value).expect("encode"));
        by_ours.push(t.elapsed());
    }
    assert_eq!(
        serde_json::to_vec(&answer_value).expect("encode"),
        kitbag_shared::json_out::to_vec(&answer_value).expect("encode")
    );
    println!(
        "  encoding the answer: serde_json p50 {}, json_out p50 {}",
        fmt(percentile(&mut by_serde, 0.5)),
        fmt(percentile(&mut by_ours, 0.5))
    );

    // The same round trip measured at the byte level: request written → the whole response
    // line received, without the test client's JSON parse (a client's own cost).
    let whole = r#"{"name":"file_read","arguments":{"path":"two_k.rs"}}"#;
    let twenty = r#"{"name":"file_read","arguments":{"path":"two_k.rs","offset":1000,"limit":20}}"#;
    let mut raw = RawClient::spawn(bin, &[], root, &[]);
    let answer_bytes = raw.call(whole);
    let mut wire_parsed = Vec::new();
    for _ in 0..300 {
        let t = Instant::now();
        let n = raw.call(whole);
        // A client that also parses the answer (once, straight from the bytes).
        let v: serde_json::Value = serde_json::from_slice(raw.line()).expect("json");
        wire_parsed.push(t.elapsed());
        assert!(n > 50_000 && v["result"]["structuredContent"]["truncated"] == true);
    }
    // Paced: the client waits between calls, as every real client does (a model thinks for
    // seconds between tool calls). Back-to-back calls are also shown; on a VM they swing with
    // how the two processes land on CPUs, for two trivial processes too (the floor below).
    let mut wire = Timings::measure(&mut raw, whole, 1000);
    let mut wire_small = Timings::measure(&mut raw, twenty, 1000);
    drop(raw);
    // The floor: the same client against a peer that does nothing but answer each request
    // with a ready-made line of the same size (this bench binary, re-run as that peer).
    let mut floor = pipe_floor(root, answer_bytes);
    println!(
        "wire round trip (request written → response received, no client parse), paced {} ms / back-to-back:",
        PACE.as_millis()
    );
    println!(
        "  file_read whole file ({} KB answer): {}",
        answer_bytes / 1024,
        wire.p50s()
    );
    println!("  file_read 20 lines: {}", wire_small.p50s());
    println!(
        "  the pipe floor (a peer answering with a ready-made {} KB line): {}",
        answer_bytes / 1024,
        floor.p50s()
    );
    println!(
        "  whole file with the client also parsing the answer from the bytes (back-to-back): p50 {}",
        fmt(percentile(&mut wire_parsed, 0.5)),
    );

    c.call("file_read", json!({"path": "one_mb.rs", "limit": 1}));
    let mut edits = Vec::new();
    for k in 0..200 {
        let (a, b) = if k % 2 == 0 {
            ("alpha", "omega")
        } else {
            ("omega", "alpha")
        };
        let t = Instant::now();
        let r = c.call("edit_text", json!({"path": "one_mb.rs", "old_string": format!("MARKER: &str = \"{a}\""), "new_string": format!("MARKER: &str = \"{b}\"")}));
        edits.push(t.elapsed());
        assert!(!r.is_error, "{}", r.text);
    }
    println!(
        "edit_text on a 1 MB file (atomic write + diff): p50 {}  p90 {}",
        fmt(percentile(&mut edits, 0.5)),
        fmt(percentile(&mut edits, 0.9))
    );
    println!(
        "RSS: idle after handshake {} KB; after the runs {} KB (peak {} KB)",
        idle_rss,
        rss_kb(c.pid(), "VmRSS:"),
        rss_kb(c.pid(), "VmHWM:")
    );
    drop(c);

    // The same work in-process (no MCP, no JSON): what the round trip adds on top.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let policy = kitbag_shared::PathPolicy::new(root, &[], false).expect("policy");
    let state = kitbag_files::FilesState::new(10 << 20);
    let mut inproc = Vec::new();
    for _ in 0..500 {
        let t = Instant::now();
        let p = kitbag_files::read::ReadParams {
            path: "two_k.rs".into(),
            offset: None,
            limit: None,
        };
        let r = kitbag_files::read::run(&state, &policy, p).expect("read");
        inproc.push(t.elapsed());
        std::hint::black_box(r);
    }
    println!(
        "  in-process read::run (same file): p50 {}",
        fmt(percentile(&mut inproc, 0.5))
    );
    let p = kitbag_files::read::ReadParams {
        path: "one_mb.rs".into(),
        offset: None,
        limit: Some(1),
    };
    kitbag_files::read::run(&state, &policy, p).expect("read");
    let (shared, policy_arc) = (std::sync::Arc::new(state), std::sync::Arc::new(policy));
    let mut inproc = Vec::new();
    for k in 0..100 {
        let (a, b) = if k % 2 == 0 {
            ("alpha", "omega")
        } else {
            ("omega", "alpha")
        };
        let args = json!({"path": "one_mb.rs", "old_string": format!("MARKER: &str = \"{a}\""), "new_string": format!("MARKER: &str = \"{b}\"")});
        let p: kitbag_files::edit::EditParams = serde_json::from_value(args).expect("params");
        let t = Instant::now();
        let r = rt
            .block_on(kitbag_files::edit::run(
                shared.clone(),
                policy_arc.clone(),
                p,
            ))
            .expect("edit");
        inproc.push(t.elapsed());
        std::hint::black_box(r);
    }
    println!(
        "  in-process edit::run (same edit): p50 {}",
        fmt(percentile(&mut inproc, 0.5))
    );

    // The official reference server, same machine, same run.
    let node = which("mcp-server-filesystem");
    match node {
        Some(node) => {
            let root_s = root.to_str().expect("utf8");
            let cold_node = cold_start(&node, &[root_s], root, 20);
            let mut n = McpClient::spawn(&node, &[root_s], root, Era::Handshake);
            std::thread::sleep(Duration::from_millis(300));
            let node_rss = rss_kb(n.pid(), "VmRSS:");
            let path = root.join("two_k.rs");
            let mut reads = Vec::new();
            for _ in 0..200 {
                let t = Instant::now();
                let r = n.call("read_text_file", json!({"path": path}));
                reads.push(t.elapsed());
                assert!(!r.is_error, "{}", r.text);
            }
            let node_p50 = percentile(&mut reads, 0.5);
            println!("\n@modelcontextprotocol/server-filesystem (Node), same run:");
            println!(
                "cold start median of 20: {}  (kitbag is {:.0}x faster)",
                fmt(cold_node),
                cold_node.as_secs_f64() / cold.as_secs_f64()
            );
            println!(
                "read_text_file 2,000 lines p50: {}  (kitbag file_read is {:.1}x faster)",
                fmt(node_p50),
                node_p50.as_secs_f64() / read_p50.as_secs_f64()
            );
            println!(
                "idle RSS: {} KB  (kitbag uses {:.1}x less)",
                node_rss,
                node_rss as f64 / idle_rss.max(1) as f64
            );
            let rows = [
                (
                    "cold start to tools/list",
                    fmt(cold),
                    fmt(cold_node),
                    cold_node.as_secs_f64() / cold.as_secs_f64(),
                ),
                (
                    "file_read 2,000 lines, p50",
                    fmt(read_p50),
                    fmt(node_p50),
                    node_p50.as_secs_f64() / read_p50.as_secs_f64(),
                ),
                (
                    "idle RSS",
                    format!("{idle_rss} KB"),
                    format!("{node_rss} KB"),
                    node_rss as f64 / idle_rss.max(1) as f64,
                ),
            ];
            for (measure, ours, theirs, times) in rows {
                summary(Summary {
                    area: "files",
                    measure,
                    kitbag: ours,
                    reference: format!("official Node server {theirs}"),
                    compared: format!("{times:.1}× better"),
                    target: "",
                    met: None,
                });
            }
        }
        None => println!(
            "\n(mcp-server-filesystem not installed: `npm i -g @modelcontextprotocol/server-filesystem` to compare)"
        ),
    }
}

fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}
