//! Drive the real `kitbag-files` binary over stdio in both protocol eras.

use std::path::Path;

use kitbag_testkit::{Era, McpClient, assert_catalog_matches, workspace_root};
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-files"))
}

fn fixture() -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tmp");
    std::fs::write(d.path().join("a.txt"), "alpha\nbeta\n").expect("write");
    d
}

fn read_in_era(era: Era) {
    let d = fixture();
    let mut c = McpClient::spawn(bin(), &[], d.path(), era);
    assert_eq!(c.server_info["name"], "kitbag-files");
    let names: Vec<String> = c
        .list_tools()
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_string())
        .collect();
    assert!(names.contains(&"file_read".to_string()), "{names:?}");
    let r = c.call("file_read", json!({"path": "a.txt"}));
    assert!(!r.is_error, "{:?}", r.raw);
    assert_eq!(r.text, "1: alpha\n2: beta");
    assert_eq!(r.structured["total_lines"], 2);
    let r = c.call("file_read", json!({"path": "a.txt", "nope": true}));
    assert!(r.is_error);
    assert_eq!(r.error_code(), Some("invalid_params"));
    assert_eq!(r.structured["error"]["detail"]["field"], "nope");
    assert!(
        c.stdout_garbage().is_empty(),
        "stdout must carry only JSON-RPC"
    );
    assert_eq!(c.shutdown(), Some(0), "stdin closed → clean exit");
}

#[test]
fn handshake_era() {
    read_in_era(Era::Handshake);
}

#[test]
fn modern_era() {
    read_in_era(Era::Modern);
}

#[test]
fn unknown_tool_is_a_protocol_error() {
    let d = fixture();
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Handshake);
    let r = c.request(
        "tools/call",
        json!({"name": "no_such_tool", "arguments": {}}),
    );
    assert!(r.get("error").is_some(), "{r}");
}

/// The seeds' names for this server's tools (`file.read`, seed 000's `read_file` and
/// `write_file`) are resolved in `tools/call`; `tools/list` keeps kitbag's names.
#[test]
fn seed_tool_names_resolve_in_calls() {
    let d = fixture();
    for era in [Era::Handshake, Era::Modern] {
        let mut c = McpClient::spawn(bin(), &[], d.path(), era);
        assert!(
            c.list_tools()
                .iter()
                .all(|t| t["name"] != "read_file" && t["name"] != "file.read")
        );
        let direct = c.call_ok("file_read", json!({"path": "a.txt"}));
        for alias in ["file.read", "read_file"] {
            let r = c.call_ok(alias, json!({"path": "a.txt"}));
            assert_eq!(r.structured, direct.structured, "{alias}");
        }
        let r = c.request(
            "tools/call",
            json!({"name": "file.nothing", "arguments": {}}),
        );
        assert!(r.get("error").is_some(), "{r}");
    }
}

#[test]
fn catalog() {
    let d = fixture();
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Handshake);
    let path = workspace_root(env!("CARGO_MANIFEST_DIR")).join("manifests/files/tools.json");
    assert_catalog_matches(&mut c, &path);
}

#[test]
fn adopts_the_clients_first_root_without_root_flag() {
    let launch_dir = fixture();
    let project = tempfile::tempdir().expect("tmp");
    std::fs::write(
        project.path().join("only-here.txt"),
        "from the client's root\n",
    )
    .expect("w");
    let mut c = McpClient::spawn_with_roots(bin(), &[], launch_dir.path(), &[project.path()]);
    // roots/list is asked after `initialized`; the first call may race it, so poll briefly.
    let mut last = None;
    for _ in 0..50 {
        let r = c.call("file_read", json!({"path": "only-here.txt"}));
        if !r.is_error {
            last = Some(r);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let r = last.expect("the client's root was never adopted");
    assert_eq!(r.text, "1: from the client's root");
    // An explicit --root wins over the client's roots.
    let mut pinned = McpClient::spawn_with_roots(
        bin(),
        &["--root", launch_dir.path().to_str().expect("utf8")],
        launch_dir.path(),
        &[project.path()],
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(
        pinned
            .call("file_read", json!({"path": "only-here.txt"}))
            .error_code(),
        Some("file_not_found")
    );
    assert!(!pinned.call("file_read", json!({"path": "a.txt"})).is_error);
}

#[test]
fn audit_log_records_calls_and_denials() {
    let d = fixture();
    let log = d.path().join("audit/events.jsonl");
    let log_arg = log.to_str().expect("utf8").to_string();
    let mut c = McpClient::spawn(
        bin(),
        &["--audit-log", &log_arg, "--allow", "ro:."],
        d.path(),
        Era::Handshake,
    );
    assert!(!c.call("file_read", json!({"path": "a.txt"})).is_error);
    let big = "x".repeat(100_000);
    assert_eq!(
        c.call("file_create", json!({"path": "b.txt", "content": big}))
            .error_code(),
        Some("capability_denied")
    );
    c.shutdown();
    let events: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .expect("audit log written")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().expect("event"))
        .collect();
    assert_eq!(
        kinds,
        [
            "tool.called",
            "tool.completed",
            "tool.called",
            "tool.denied",
            "tool.completed"
        ]
    );
    assert_eq!(events[1]["success"], true);
    assert!(events[1]["duration_ms"].as_f64().is_some());
    assert_eq!(events[3]["code"], "capability_denied");
    assert_eq!(events[4]["error_code"], "capability_denied");
    // Large arguments are cut in the log.
    assert!(events[2]["params"]["content"].as_str().expect("s").len() < 1000);
}
