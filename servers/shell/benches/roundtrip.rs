//! `shell_bash` round trips over stdio, the server's cold start, and what each containment
//! layer (issue #22 §4) costs per command.
//!
//! Run: `cargo bench -p kitbag-shell`. Prints medians; nothing here asserts on time.

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_testkit::bench::{Summary, median, ms, ratio, summary};
use kitbag_testkit::{Era, McpClient};
use serde_json::json;

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
    versus_bash(&mut c);
    containment(bin, dir.path());
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

/// `shell_bash true` under each containment layer the machine offers (`KITBAG_CONTAIN`), the
/// servers called in turn so that load drifts hit every layer alike.
fn containment(bin: &Path, dir: &Path) {
    let modes = [
        ("auto", "auto"),
        ("cgroup-v1", "cgroup-v1"),
        ("subreaper", "subreaper"),
    ];
    let mut clients: Vec<(String, McpClient, Vec<Duration>)> = Vec::new();
    for (label, mode) in modes {
        let mut c =
            McpClient::spawn_with_env(bin, &[], dir, Era::Handshake, &[("KITBAG_CONTAIN", mode)]);
        let r = c.call("shell_bash", json!({"command": "true"}));
        let kind = r.structured["containment"]
            .as_str()
            .unwrap_or("?")
            .to_string();
        // Two settings may land on the same layer (no cgroup v1 here): measure it once.
        if clients.iter().any(|(k, _, _)| k == &kind) {
            continue;
        }
        eprintln!("KITBAG_CONTAIN={label}: {kind}");
        clients.push((kind, c, Vec::new()));
    }
    for _ in 0..300 {
        for (_, c, times) in clients.iter_mut() {
            let t = Instant::now();
            let r = c.call("shell_bash", json!({"command": "true"}));
            times.push(t.elapsed());
            assert_eq!(r.structured["exit_code"], 0);
        }
    }
    for (kind, _, times) in clients {
        println!(
            "shell_bash `true` contained by {kind}, median of 300 (interleaved): {}",
            ms(median(times))
        );
    }
}

/// `shell_bash true` against `bash -c true` spawned directly by this process, called in turn
/// so that load drifts hit both alike (issue #43: target ≤ 1.2×). The round trip is timed as
/// a client sees it (request written → answer read and parsed); the test client's outputSchema
/// validation, which `McpClient::call` adds, is timed apart.
fn versus_bash(c: &mut McpClient) {
    let (mut ours, mut bash, mut validated) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..300 {
        let t = Instant::now();
        let r = c.request(
            "tools/call",
            json!({"name": "shell_bash", "arguments": {"command": "true"}}),
        );
        ours.push(t.elapsed());
        assert_eq!(r["result"]["structuredContent"]["exit_code"], 0, "{r}");
        let t = Instant::now();
        let s = std::process::Command::new("bash")
            .args(["-c", "true"])
            .status()
            .expect("bash");
        bash.push(t.elapsed());
        assert!(s.success());
        let t = Instant::now();
        let r = c.call("shell_bash", json!({"command": "true"}));
        validated.push(t.elapsed());
        assert_eq!(r.structured["exit_code"], 0);
    }
    let (ours, bash) = (median(ours), median(bash));
    let (r, shown) = ratio(ours, bash);
    println!(
        "interleaved, median of 300: shell_bash `true` {}, `bash -c true` {} (ratio {r:.2}); \
         shell_bash through McpClient::call (+ outputSchema validation) {}",
        ms(ours),
        ms(bash),
        ms(median(validated))
    );
    summary(Summary {
        area: "shell",
        measure: "shell_bash true, round trip p50",
        kitbag: ms(ours),
        reference: format!("bash -c true {}", ms(bash)),
        compared: shown,
        target: "≤ 1.2×",
        met: Some(r <= 1.2),
    });
}
