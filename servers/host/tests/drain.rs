//! Graceful drain (issue #19): on SIGTERM a `kitbag serve --http` replica answers `/healthz`
//! with 503 for `--drain-secs` while it still serves (a Service takes it out meanwhile), then
//! stops accepting; calls in flight — byte path and rmcp path alike — get their answers, and
//! the process exits leaving no child behind.

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_testkit::http::{HttpConn, HttpServer};
use serde_json::{Value, json};

const LEGACY: (&str, &str) = ("mcp-protocol-version", "2025-11-25");

fn kitbag() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn call(id: u64, command: &str, progress: bool) -> Value {
    let mut params = json!({"name": "shell_bash", "arguments": {"command": command}});
    if progress {
        // A progress token takes the call off the byte path (rmcp answers it).
        params["_meta"] = json!({"progressToken": id});
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

#[test]
fn sigterm_drains_then_finishes_calls_in_flight() {
    let dir = tempfile::tempdir().expect("tmp");
    let exe = kitbag().to_str().expect("utf-8");
    let config = json!({"mcp": {"shell": {"command": exe, "args": ["server", "shell", "--root", "."], "lazy": false}}});
    std::fs::write(dir.path().join("agent.json"), config.to_string()).expect("config");
    let mut server = HttpServer::start(
        kitbag(),
        &["serve", "--http", "127.0.0.1:0", "--drain-secs", "1"],
        dir.path(),
        &[],
    );
    let pid = server.child.id();
    let children = kitbag_testkit::child_pids(pid);
    assert!(!children.is_empty(), "the host runs its shell server");

    // Two slow calls in flight: one on the byte path, one through rmcp.
    let in_flight: Vec<_> = [(1u64, false), (2, true)]
        .into_iter()
        .map(|(id, progress)| {
            let mut conn = server.connect();
            std::thread::spawn(move || {
                let r = conn.post_mcp(
                    &call(id, "sleep 2; echo finished-late", progress),
                    &[LEGACY],
                );
                (r.status, r.text())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(400));
    let sent = Instant::now();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    std::thread::sleep(Duration::from_millis(200));

    // Draining: the probe says 503, yet new requests are still answered.
    let mut probe = server.connect();
    let health = probe.send("GET", "/healthz", &[], b"").expect("healthz");
    assert_eq!(health.status, 503, "{}", health.text());
    let mut late = server.connect();
    let r = late.post_mcp(&call(3, "echo still-served", false), &[LEGACY]);
    assert!(r.text().contains("still-served"), "{}", r.text());

    for t in in_flight {
        let (status, text) = t.join().expect("caller");
        assert_eq!(status, 200, "{text}");
        assert!(
            text.contains("finished-late"),
            "an in-flight call finished: {text}"
        );
    }
    // Then it exits by itself, cleanly, with no child left.
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = server.child.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < deadline, "still running after the drain");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    assert!(
        sent.elapsed() >= Duration::from_secs(1),
        "it served through the drain"
    );
    std::thread::sleep(Duration::from_millis(200));
    let left: Vec<u32> = children
        .into_iter()
        .filter(|p| kitbag_testkit::process_alive(*p))
        .collect();
    assert!(left.is_empty(), "children outlived the host: {left:?}");
    let endpoint = server.endpoint.clone();
    assert!(HttpConn::open(&endpoint).is_err(), "the listener is closed");
}
