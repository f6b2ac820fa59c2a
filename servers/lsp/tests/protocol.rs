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

/// A language server that offers one code action of three edits, each inserting 30,000
/// quotes (180 KB escaped in all): more than the result budget by itself.
const HUGE_ACTION_SERVER: &str = r#"
import json, sys
def read():
    length = 0
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            sys.exit(0)
        if line in (b"\r\n", b"\n"):
            break
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return json.loads(sys.stdin.buffer.read(length))
def send(msg):
    body = json.dumps(msg).encode()
    sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    sys.stdout.buffer.flush()
while True:
    m = read()
    if "id" not in m or "method" not in m:
        if m.get("method") == "exit":
            sys.exit(0)
        continue
    result = None
    if m["method"] == "initialize":
        result = {"capabilities": {"codeActionProvider": True, "textDocumentSync": 1}}
    elif m["method"] == "textDocument/codeAction":
        uri = m["params"]["textDocument"]["uri"]
        at = {"line": 0, "character": 0}
        edits = [{"range": {"start": at, "end": at}, "newText": '"' * 30000} for _ in range(3)]
        result = [{"title": "quote everything", "kind": "quickfix",
                   "edit": {"changes": {uri: edits}}}]
    send({"jsonrpc": "2.0", "id": m["id"], "result": result})
"#;

/// Issue #37: one code action larger than the budget by itself was returned whole (~180 KB);
/// it is now cut itself — the edits that fit, the last with its texts cut — and says how many
/// edits it has.
#[test]
fn a_code_action_larger_than_the_budget_is_cut_itself() {
    use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
    if !have("python3") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        &[
            ("huge.py", HUGE_ACTION_SERVER),
            (
                "lsp.toml",
                "[lsp.servers.huge]\ncommand = [\"python3\", \"huge.py\"]\nextensions = [\"hg\"]\n",
            ),
            ("a.hg", "x\n"),
        ],
    );
    let mut c = McpClient::spawn(bin(), &["--config", "lsp.toml"], d.path(), Era::Modern);
    c.timeout = Duration::from_secs(60);
    let r = ok(
        &mut c,
        json!({"action": "code_actions", "path": "a.hg", "line": 1, "include_diagnostics": false}),
    );
    assert!(json_len(&r) < RESULT_BUDGET_BYTES, "{}", json_len(&r));
    assert_eq!(r["count"], 1);
    let a = &r["actions"][0];
    assert_eq!(a["title"], "quote everything");
    assert_eq!(a["edits_total"], 3, "says it was cut");
    let edits = a["edits"].as_array().unwrap();
    assert!(!edits.is_empty() && edits.len() <= 3);
    let last = edits.last().unwrap()["new"].as_str().unwrap();
    assert!(
        last.ends_with("… [cut]") && last.starts_with("\"\"\""),
        "{last}"
    );
    assert!(
        json_len(&r) > RESULT_BUDGET_BYTES * 3 / 4,
        "the room is used"
    );
    assert_eq!(c.shutdown(), Some(0));
}
