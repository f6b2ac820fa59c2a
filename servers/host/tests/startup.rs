//! A child that fails to start — hangs before its handshake, never answers tools/list, or
//! answers it with an error — is marked failed within its startup timeout, and its whole
//! process group (whatever it started) is gone: nothing outlives a failed start. And an
//! embedded family started as `kitbag server FAMILY` runs on its own binary's runtime.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kitbag_testkit::{Era, McpClient, pids_with_cmdline};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

/// A Python stand-in for a broken server: starts `sleep <marker>` in its own process group,
/// then behaves as `mode` says, and never exits by itself (not even at the end of input).
fn broken_server(dir: &Path, mode: &str, marker: &str) -> PathBuf {
    let script = format!(
        r#"import json, subprocess, sys, time
subprocess.Popen(["sleep", "{marker}"])
mode = "{mode}"
for line in sys.stdin:
    msg = json.loads(line)
    if mode == "hang" or "id" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {{"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {{"tools": {{}}}},
                  "serverInfo": {{"name": "broken", "version": "0"}}}}
        print(json.dumps({{"jsonrpc": "2.0", "id": msg["id"], "result": result}}), flush=True)
    elif msg["method"] == "tools/list" and mode == "list_error":
        error = {{"code": -32603, "message": "cannot list"}}
        print(json.dumps({{"jsonrpc": "2.0", "id": msg["id"], "error": error}}), flush=True)
while True:
    time.sleep(60)
"#
    );
    let path = dir.join(format!("{mode}.py"));
    std::fs::write(&path, script).expect("w");
    path
}

#[test]
fn children_that_fail_to_start_leave_nothing_behind() {
    let d = tempfile::tempdir().expect("tmp");
    // Unique per run: `sleep` takes fractional seconds.
    let stamp = std::process::id() % 100_000;
    let modes = ["hang", "no_list", "list_error"];
    let mut mcp = serde_json::Map::new();
    let mut markers = Vec::new();
    for (i, mode) in modes.iter().enumerate() {
        let marker = format!("3000.{stamp}{i}");
        let script = broken_server(d.path(), mode, &marker);
        mcp.insert(
            (*mode).to_string(),
            json!({"command": "python3", "args": [script], "startup_timeout_sec": 2}),
        );
        markers.push(marker);
    }
    mcp.insert(
        "files".into(),
        json!({"command": bin(), "args": ["server", "files", "--root", d.path()], "lazy": false}),
    );
    let cfg = d.path().join("agent.json");
    std::fs::write(&cfg, json!({ "mcp": mcp }).to_string()).expect("w");
    let mut c = McpClient::spawn(
        bin(),
        &["--config", cfg.to_str().expect("utf-8"), "serve"],
        d.path(),
        Era::Handshake,
    );
    // The working server's tools are served whatever the others do.
    let r = c.call("host_status", json!({}));
    assert!(!r.is_error, "{}", r.text);
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        let s: Value = c.call("host_status", json!({})).structured;
        let servers = s["servers"].as_array().cloned().unwrap_or_default();
        let settled = servers
            .iter()
            .filter(|v| v["name"] != "files")
            .all(|v| v["state"] == "failed");
        if settled {
            break servers;
        }
        assert!(Instant::now() < deadline, "never settled: {s}");
        std::thread::sleep(Duration::from_millis(100));
    };
    for v in &status {
        let name = v["name"].as_str().unwrap_or("");
        let error = v["last_error"].as_str().unwrap_or("");
        match name {
            "hang" | "no_list" => assert!(error.contains("within 2 s"), "{name}: {error}"),
            "list_error" => assert!(error.contains("tools/list failed"), "{name}: {error}"),
            _ => assert_eq!(v["state"], "ready", "{v}"),
        }
    }
    assert!(!c.call("file_read", json!({"path": "agent.json"})).is_error);
    // SIGTERM to each failed child's group, SIGKILL 1.5 s later.
    let deadline = Instant::now() + Duration::from_secs(5);
    for marker in &markers {
        while !pids_with_cmdline(marker).is_empty() {
            assert!(
                Instant::now() < deadline,
                "a failed child's process ({marker}) outlived its start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    c.shutdown();
}

/// The threads of process `pid`, by name.
fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("task dir")
        .map(|t| {
            let t = t.expect("task").path();
            std::fs::read_to_string(t.join("comm"))
                .expect("comm")
                .trim()
                .to_string()
        })
        .collect()
}

#[test]
fn an_embedded_family_runs_on_its_own_binarys_runtime() {
    let d = tempfile::tempdir().expect("tmp");
    let root = d.path().to_str().expect("utf8");
    // kitbag-files answers on one thread: so does `kitbag server files` (no runtime workers,
    // and nothing yet asked of the blocking pool).
    let mut files = McpClient::spawn(
        bin(),
        &["server", "files", "--root", root],
        d.path(),
        Era::Handshake,
    );
    files.list_tools();
    assert_eq!(thread_names(files.pid()), ["kitbag"], "files");
    files.shutdown();
    // kitbag-search runs tokio's multi-threaded runtime: its workers are there.
    let mut search = McpClient::spawn(
        bin(),
        &["server", "search", "--root", root],
        d.path(),
        Era::Handshake,
    );
    search.list_tools();
    let names = thread_names(search.pid());
    assert!(
        names.iter().any(|n| n == "tokio-rt-worker"),
        "search: {names:?}"
    );
    search.shutdown();
}

/// The binary is linked with packed relative relocations (`.cargo/config.toml`): without them
/// the loader reads 3 MB of relocation entries at every start.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn the_binary_packs_its_relative_relocations() {
    let out = std::process::Command::new("readelf")
        .args(["--wide", "--dynamic"])
        .arg(bin())
        .output()
        .expect("readelf (binutils) runs");
    assert!(out.status.success(), "readelf failed: {out:?}");
    let dynamic = String::from_utf8_lossy(&out.stdout);
    assert!(
        dynamic.lines().any(|l| l.contains("(RELR)")),
        "no DT_RELR in {}:\n{dynamic}",
        bin().display()
    );
    let relocations = std::process::Command::new("readelf")
        .args(["--wide", "--section-headers"])
        .arg(bin())
        .output()
        .expect("readelf runs");
    let sections = String::from_utf8_lossy(&relocations.stdout);
    let rela = sections
        .lines()
        .find(|l| l.contains(".rela.dyn"))
        .and_then(|l| l.split_whitespace().skip_while(|w| *w != "RELA").nth(3))
        .and_then(|size| u64::from_str_radix(size, 16).ok())
        .unwrap_or(0);
    assert!(
        rela < 64 * 1024,
        ".rela.dyn still holds {rela} bytes: relative relocations were not packed"
    );
}
