//! `shell_bash` round trips over stdio, and the server's cold start.
//!
//! Run: `cargo bench -p kitbag-shell`. Prints medians; nothing here asserts on time.

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_testkit::{Era, McpClient};
use serde_json::json;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let bin = Path::new(env!("CARGO_BIN_EXE_kitbag-shell"));
    let dir = tempfile::tempdir().expect("tmp");
    let mut cold = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        let mut c = McpClient::spawn(bin, &[], dir.path(), Era::Handshake);
        assert!(!c.list_tools().is_empty());
        cold.push(t.elapsed());
    }
    println!(
        "kitbag-shell cold start (spawn → initialize → tools/list), median of 20: {}",
        ms(median(cold))
    );
    let mut c = McpClient::spawn(bin, &[], dir.path(), Era::Handshake);
    let mut runs = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        let r = c.call("shell_bash", json!({"command": "true"}));
        runs.push(t.elapsed());
        assert_eq!(r.structured["exit_code"], 0);
    }
    println!(
        "shell_bash `true` round trip, median of 200: {}",
        ms(median(runs))
    );
    // The same command spawned directly, for scale.
    let mut direct = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        let s = std::process::Command::new("/bin/sh")
            .args(["-c", "true"])
            .status()
            .expect("sh");
        direct.push(t.elapsed());
        assert!(s.success());
    }
    println!(
        "/bin/sh -c true spawned directly (no PTY), median of 200: {}",
        ms(median(direct))
    );
}
