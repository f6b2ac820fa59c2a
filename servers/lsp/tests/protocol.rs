//! Protocol-level behaviour of `kitbag-lsp`: both eras, the catalog, client roots.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{bin, have, ok, server_status, write};
use kitbag_testkit::{Era, McpClient, assert_catalog_matches, workspace_root};
use serde_json::json;

#[test]
fn catalog_and_both_eras() {
    for era in [Era::Handshake, Era::Modern] {
        let d = tempfile::tempdir().unwrap();
        let mut c = McpClient::spawn(bin(), &[], d.path(), era);
        let path = workspace_root(env!("CARGO_MANIFEST_DIR")).join("manifests/lsp/tools.json");
        assert_catalog_matches(&mut c, &path);
        let s = ok(&mut c, json!({"action": "status"}));
        assert_eq!(s["servers"].as_array().unwrap().len(), 5, "{s}");
        assert!(c.stdout_garbage().is_empty());
        assert_eq!(c.shutdown(), Some(0));
    }
}

#[test]
fn config_file_overrides_a_language() {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        &[
            (
                "lsp.toml",
                "[lsp.servers.python]\ncommand = [\"kitbag-custom-pyright\", \"--stdio\"]\n\n[lsp.servers.zig]\ncommand = [\"zls\"]\nextensions = [\"zig\"]\n",
            ),
            ("a.py", "x = 1\n"),
        ],
    );
    let mut c = McpClient::spawn(bin(), &["--config", "lsp.toml"], d.path(), Era::Modern);
    let st = server_status(&mut c, "python");
    assert_eq!(st["command"][0], "kitbag-custom-pyright");
    assert_eq!(server_status(&mut c, "zig")["command"][0], "zls");
    let r = c.call(
        "code_lsp",
        json!({"action": "hover", "path": "a.py", "line": 1, "character": 0}),
    );
    assert_eq!(r.error_code(), Some("lsp_server_not_found"), "{}", r.text);
    // A bad config file stops start-up with a message naming the field.
    write(
        d.path(),
        &[("bad.toml", "[lsp.servers.python]\ncomand = [\"x\"]\n")],
    );
    let out = std::process::Command::new(bin())
        .args(["--config", "bad.toml"])
        .current_dir(d.path())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("comand"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn servers_are_rooted_at_the_clients_root() {
    if !have("pyright-langserver") {
        return;
    }
    let launch_dir = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    write(
        project.path(),
        &[
            ("lib.py", "def helper() -> int:\n    return 1\n"),
            ("main.py", "from lib import helper\n\nhelper()\n"),
        ],
    );
    let mut c = McpClient::spawn_with_roots(bin(), &[], launch_dir.path(), &[project.path()]);
    c.timeout = Duration::from_secs(90);
    let mut answer = None;
    for _ in 0..50 {
        let r = c.call(
            "code_lsp",
            json!({"action": "definition", "path": "main.py", "line": 3, "symbol": "helper"}),
        );
        if !r.is_error {
            answer = Some(r.structured);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = answer.expect("the client's root was never adopted");
    assert_eq!(s["definitions"][0]["path"], "lib.py", "{s}");
    assert_eq!(s["definitions"][0]["line"], 1);
}
