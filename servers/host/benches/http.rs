//! What MCP Streamable HTTP costs over stdio, side by side in one run: `file_read` through
//! the host on stdio vs. the host on HTTP (one keep-alive loopback connection; the byte-level
//! path on both), for both eras; and a single server (rmcp's HTTP path, no byte path).
//!
//! Run: `cargo bench -p kitbag --bench http`. Prints p50/p99; nothing here asserts on time.

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_testkit::bench::{Summary, percentile, summary};
use kitbag_testkit::http::{HttpConn, HttpServer, modern_headers, modern_request};
use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

const CALLS: usize = 1000;

fn us(d: Duration) -> String {
    format!("{:>6.0} µs", d.as_secs_f64() * 1e6)
}

fn http_call(conn: &mut HttpConn, era: Era, id: u64, args: &Value) -> Value {
    let params = json!({"name": "file_read", "arguments": args});
    let r = match era {
        Era::Modern => conn.post_mcp(
            &modern_request(id, "tools/call", params),
            &modern_headers("tools/call", Some("file_read")),
        ),
        _ => conn.post_mcp(
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}),
            &[("mcp-protocol-version", "2025-11-25")],
        ),
    };
    r.response_to(&json!(id))
}

/// stdio vs HTTP, interleaved so both see the same machine load.
fn compare(label: &str, stdio: &mut McpClient, conn: &mut HttpConn, era: Era, args: &Value) {
    for i in 0..50 {
        stdio.call("file_read", args.clone());
        http_call(conn, era, i, args);
    }
    let (mut s, mut h) = (Vec::new(), Vec::new());
    for i in 0..CALLS as u64 {
        let t = Instant::now();
        assert!(!stdio.call("file_read", args.clone()).is_error);
        s.push(t.elapsed());
        let t = Instant::now();
        let answer = http_call(conn, era, 1000 + i, args);
        h.push(t.elapsed());
        assert_eq!(answer["result"]["isError"], false, "{answer}");
    }
    let (s50, s99, h50, h99) = (
        percentile(s.clone(), 50),
        percentile(s, 99),
        percentile(h.clone(), 50),
        percentile(h, 99),
    );
    println!("{label}, file_read 20 lines, {CALLS} calls interleaved:");
    println!("  stdio: p50 {}  p99 {}", us(s50), us(s99));
    println!("  HTTP:  p50 {}  p99 {}", us(h50), us(h99));
    println!("  HTTP overhead at p50: {}", us(h50.saturating_sub(s50)));
    summary(Summary {
        area: "http",
        measure: &format!("{label}, file_read 20 lines over HTTP, p50"),
        kitbag: us(h50).trim().to_string(),
        reference: format!("stdio {}", us(s50).trim()),
        compared: format!("+{}", us(h50.saturating_sub(s50)).trim()),
        target: "",
        met: None,
    });
}

fn main() {
    let bin = Path::new(env!("CARGO_BIN_EXE_kitbag"));
    let dir = tempfile::tempdir().expect("tmp");
    let body: String = (1..=200)
        .map(|i| format!("line {i} of a small source file\n"))
        .collect();
    std::fs::write(dir.path().join("small.rs"), body).expect("w");
    let root = dir.path().to_str().expect("utf8");
    let cfg = dir.path().join("agent.json");
    let entry =
        json!({"mcp": {"files": {"command": bin, "args": ["server", "files", "--root", root]}}});
    std::fs::write(&cfg, entry.to_string()).expect("w");
    let cfg = cfg.to_str().expect("utf8");
    let args = json!({"path": "small.rs", "offset": 50, "limit": 20});

    let host_http = HttpServer::start(
        bin,
        &["--config", cfg, "serve", "--http", "127.0.0.1:0"],
        dir.path(),
        &[],
    );
    let files_http = HttpServer::start(
        bin,
        &["server", "files", "--root", root, "--http", "127.0.0.1:0"],
        dir.path(),
        &[],
    );
    for (era, label) in [(Era::Handshake, "2025-11-25"), (Era::Modern, "2026-07-28")] {
        let mut stdio = McpClient::spawn(bin, &["--config", cfg, "serve"], dir.path(), era);
        let mut conn = host_http.connect();
        compare(
            &format!("host, {label} era"),
            &mut stdio,
            &mut conn,
            era,
            &args,
        );

        let mut stdio =
            McpClient::spawn(bin, &["server", "files", "--root", root], dir.path(), era);
        let mut conn = files_http.connect();
        compare(
            &format!("single server (kitbag server files), {label} era"),
            &mut stdio,
            &mut conn,
            era,
            &args,
        );
    }
}
