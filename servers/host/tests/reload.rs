//! The host's children, with real servers (kitbag's own files) behind the host: every child
//! learns which host started it (`KITBAG_HOST_PID`, `KITBAG_HOST_CONFIG`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn project() -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tmp");
    std::fs::write(d.path().join("a.txt"), "alpha\nbeta\n").expect("w");
    d
}

fn files_entry(root: &Path) -> Value {
    json!({"command": bin(), "args": ["server", "files", "--root", root]})
}

fn write_config(path: &Path, servers: Value) {
    std::fs::write(path, json!({ "mcp": servers }).to_string()).expect("write config");
}

fn status(c: &mut McpClient) -> Value {
    c.call_ok("host_status", json!({})).structured
}

/// The pid of server `name` as `host_status` reports it (None while it has none).
fn pid_of(c: &mut McpClient, name: &str) -> Option<u32> {
    status(c)["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .find(|s| s["name"] == name)
        .and_then(|s| s["pid"].as_u64())
        .map(|p| p as u32)
}

/// A process's environment at its start, from /proc.
fn environ(pid: u32) -> HashMap<String, String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).expect("read environ");
    raw.split(|b| *b == 0)
        .filter_map(|kv| {
            let kv = String::from_utf8_lossy(kv);
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

#[test]
fn children_are_told_the_host_pid_and_the_config_path() {
    let d = project();
    let config = d.path().join("agent.json");
    // The entry's own attempt to set the variable does not win: it is the host's to say.
    let mut files = files_entry(d.path());
    files["env"] = json!({"KITBAG_HOST_PID": "1"});
    write_config(&config, json!({ "files": files }));
    let expected_config = std::fs::canonicalize(&config).expect("canonical");
    // Values inherited from an outer environment are replaced, never passed through.
    let stale = [
        ("KITBAG_HOST_PID", "1"),
        ("KITBAG_HOST_CONFIG", "/elsewhere/agent.json"),
    ];
    // Named with a relative --config, and found as ./agent.json: an absolute path either way.
    let runs: [&[&str]; 2] = [&["--config", "agent.json", "serve"], &["serve"]];
    for args in runs {
        let mut c = McpClient::spawn_with_env(bin(), args, d.path(), Era::Handshake, &stale);
        let child = pid_of(&mut c, "files").expect("files pid");
        let env = environ(child);
        assert_eq!(
            env.get("KITBAG_HOST_PID"),
            Some(&c.pid().to_string()),
            "{args:?}"
        );
        assert_eq!(
            env.get("KITBAG_HOST_CONFIG").map(PathBuf::from),
            Some(expected_config.clone()),
            "{args:?}"
        );
        assert_eq!(env.get("KITBAG_HOST_DEPTH").map(String::as_str), Some("1"));
        // A server a reload starts is told the same.
        let mut second = files_entry(d.path());
        second["prefix"] = json!("b_");
        write_config(&config, json!({"files": files, "second": second}));
        let r = c.call_ok("host_reload", json!({}));
        assert_eq!(r.structured["started"], json!(["second"]));
        let env = environ(pid_of(&mut c, "second").expect("second pid"));
        assert_eq!(env.get("KITBAG_HOST_PID"), Some(&c.pid().to_string()));
        assert_eq!(
            env.get("KITBAG_HOST_CONFIG").map(PathBuf::from),
            Some(expected_config.clone())
        );
        write_config(&config, json!({ "files": files }));
        c.shutdown();
    }
    // The embedded default has no file: no KITBAG_HOST_CONFIG at all.
    let empty = tempfile::tempdir().expect("tmp");
    let mut c = McpClient::spawn_with_env(bin(), &["serve"], empty.path(), Era::Handshake, &stale);
    let pids: Vec<u32> = status(&mut c)["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .filter_map(|s| s["pid"].as_u64().map(|p| p as u32))
        .collect();
    assert!(pids.len() >= 5, "the embedded servers run: {pids:?}");
    for pid in pids {
        let env = environ(pid);
        assert_eq!(env.get("KITBAG_HOST_PID"), Some(&c.pid().to_string()));
        assert_eq!(env.get("KITBAG_HOST_CONFIG"), None, "child {pid}");
    }
}
