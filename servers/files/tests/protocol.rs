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

#[test]
fn catalog() {
    let d = fixture();
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Handshake);
    let path = workspace_root(env!("CARGO_MANIFEST_DIR")).join("manifests/files/tools.json");
    assert_catalog_matches(&mut c, &path);
}
