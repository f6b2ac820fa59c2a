//! The real `kitbag-search` binary over stdio, both protocol eras.

use std::path::Path;

use kitbag_testkit::{Era, McpClient, assert_catalog_matches, workspace_root};
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-search"))
}

fn each_era(era: Era) {
    let d = tempfile::tempdir().expect("tmp");
    std::fs::write(d.path().join("a.py"), "def main():\n    print('hi')\n").expect("w");
    let mut c = McpClient::spawn(bin(), &[], d.path(), era);
    assert_eq!(c.server_info["name"], "kitbag-search");
    let names: Vec<String> = c
        .list_tools()
        .iter()
        .map(|t| t["name"].as_str().expect("n").to_string())
        .collect();
    assert_eq!(
        names,
        ["edit_ast", "search_ast", "search_glob", "search_grep"]
    );
    let r = c.call(
        "search_grep",
        json!({"pattern": "print", "output_mode": "content"}),
    );
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.text, "a.py:2:    print('hi')");
    let r = c.call("search_ast", json!({"pattern": "print($X)"}));
    assert_eq!(r.structured["matches"][0]["meta_variables"]["X"], "'hi'");
    assert!(c.stdout_garbage().is_empty());
    assert_eq!(c.shutdown(), Some(0));
}

#[test]
fn handshake_era() {
    each_era(Era::Handshake);
}

#[test]
fn modern_era() {
    each_era(Era::Modern);
}

#[test]
fn catalog() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Handshake);
    assert_catalog_matches(
        &mut c,
        &workspace_root(env!("CARGO_MANIFEST_DIR")).join("manifests/search/tools.json"),
    );
}
