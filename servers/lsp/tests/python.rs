//! Drive the real `kitbag-lsp` binary against the real pyright language server.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{bin, have, ok};

use kitbag_testkit::{Era, McpClient, process_alive};
use serde_json::{Value, json};

const MODELS: &str = "class User:\n    def __init__(self, name: str) -> None:\n        self.name = name\n\n\ndef make_user(name: str) -> User:\n    \"\"\"Build a user.\"\"\"\n    return User(name)\n";
const APP: &str = "from models import User, make_user\n\n\ndef greet(u: User) -> str:\n    return \"hi \" + u.name\n\n\ncount: int = \"not a number\"\nlabel = \"é😀\"; result = greet(make_user(label))\n";
const OTHER: &str =
    "from models import User\n\n\ndef describe(u: User) -> str:\n    return u.name\n";

fn project() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("models.py"), MODELS).unwrap();
    std::fs::write(d.path().join("app.py"), APP).unwrap();
    std::fs::write(d.path().join("other.py"), OTHER).unwrap();
    std::fs::write(d.path().join("README.md"), "# demo\n").unwrap();
    d
}

fn python_pid(c: &mut McpClient) -> Option<u64> {
    let s = ok(c, json!({"action": "status"}));
    s["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["language"] == "python")
        .and_then(|s| s["pid"].as_u64())
}

fn python_status(c: &mut McpClient) -> Value {
    let s = ok(c, json!({"action": "status"}));
    s["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["language"] == "python")
        .cloned()
        .unwrap()
}

#[test]
fn bad_input_is_refused_before_any_server_starts() {
    let d = project();
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Modern);
    let cases = [
        (json!({"action": "fly"}), "action"),
        (json!({"action": "definition", "path": "app.py"}), "line"),
        (
            json!({"action": "definition", "path": "app.py", "line": 999, "character": 0}),
            "line",
        ),
        (
            json!({"action": "hover", "path": "app.py", "line": 1, "character": 500}),
            "character",
        ),
        (
            json!({"action": "rename", "path": "app.py", "line": 4, "symbol": "greet", "new_name": "not valid"}),
            "new_name",
        ),
        (
            json!({"action": "rename", "path": "app.py", "line": 4, "symbol": "greet", "new_name": "1abc"}),
            "new_name",
        ),
        (
            json!({"action": "hover", "path": "app.py", "line": 4, "symbol": "nothere"}),
            "symbol",
        ),
        (json!({"action": "symbols", "scope": "workspace"}), "query"),
        (json!({"action": "diagnostics"}), "path"),
        (
            json!({"action": "references", "path": "app.py", "line": 4, "symbol": "greet", "limit": 0}),
            "limit",
        ),
        (
            json!({"action": "diagnostics", "path": "app.py", "limit": 10001}),
            "limit",
        ),
        (
            json!({"action": "request", "language": "python", "method": "shutdown"}),
            "method",
        ),
        (json!({"action": "reload", "language": "cobol"}), "language"),
        (
            json!({"action": "hover", "path": "app.py", "line": 1, "colour": 1}),
            "colour",
        ),
    ];
    for (args, field) in cases {
        let r = c.call("code_lsp", args.clone());
        assert_eq!(r.error_code(), Some("invalid_params"), "{args}: {}", r.text);
        assert_eq!(
            r.structured["error"]["detail"]["field"], field,
            "{args}: {}",
            r.text
        );
    }
    let r = c.call(
        "code_lsp",
        json!({"action": "hover", "path": "README.md", "line": 1, "character": 0}),
    );
    assert_eq!(r.error_code(), Some("unsupported_language"), "{}", r.text);
    assert!(r.text.contains("python"), "{}", r.text);
    let r = c.call(
        "code_lsp",
        json!({"action": "hover", "path": "../outside.py", "line": 1, "character": 0}),
    );
    assert!(r.is_error);
    // Nothing was spawned by any of that.
    let s = ok(&mut c, json!({"action": "status"}));
    assert!(
        s["servers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["state"] == "not_started"),
        "{s}"
    );
    assert!(c.stdout_garbage().is_empty());
}

#[test]
fn missing_server_binary_says_how_to_install() {
    let d = project();
    let mut c = McpClient::spawn(
        bin(),
        &["--server", "python=kitbag-no-such-pyright --stdio"],
        d.path(),
        Era::Handshake,
    );
    let r = c.call(
        "code_lsp",
        json!({"action": "hover", "path": "app.py", "line": 4, "symbol": "greet"}),
    );
    assert_eq!(r.error_code(), Some("lsp_server_not_found"), "{}", r.text);
    assert!(r.text.contains("kitbag-no-such-pyright"), "{}", r.text);
    assert_eq!(
        r.structured["error"]["detail"]["command"][0],
        "kitbag-no-such-pyright"
    );
}

#[test]
fn pyright_end_to_end() {
    if !have("pyright-langserver") {
        return;
    }
    let d = project();
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Modern);
    c.timeout = Duration::from_secs(90);

    // Spawned on demand: a type error on line 8 is reported with its 1-based line.
    let s = ok(&mut c, json!({"action": "diagnostics", "path": "app.py"}));
    let diags = s["diagnostics"].as_array().unwrap();
    assert!(
        diags
            .iter()
            .any(|d| d["line"] == 8 && d["severity"] == "error" && d["path"] == "app.py"),
        "{s}"
    );
    assert_eq!(s["settled"], true, "{s}");
    let pid = python_pid(&mut c).unwrap();
    assert!(process_alive(pid as u32));

    // Definition across files, by symbol name on a line.
    let s = ok(
        &mut c,
        json!({"action": "definition", "path": "app.py", "line": 4, "symbol": "User"}),
    );
    let defs = s["definitions"].as_array().unwrap();
    assert_eq!(defs[0]["path"], "models.py", "{s}");
    assert_eq!(defs[0]["line"], 1);
    assert_eq!(defs[0]["preview"], "class User:");

    // Non-ASCII before the target: characters, not UTF-16 units, locate `greet`.
    let s = ok(
        &mut c,
        json!({"action": "definition", "path": "app.py", "line": 9, "symbol": "greet"}),
    );
    assert_eq!(s["definitions"][0]["path"], "app.py", "{s}");
    assert_eq!(s["definitions"][0]["line"], 4);
    assert_eq!(s["definitions"][0]["character"], 4);
    // The same by explicit column: `label = "é😀"; result = ` is 25 characters.
    let s = ok(
        &mut c,
        json!({"action": "definition", "path": "app.py", "line": 9, "character": 25}),
    );
    assert_eq!(s["definitions"][0]["line"], 4, "{s}");

    // References to User across the three files.
    let s = ok(
        &mut c,
        json!({"action": "references", "path": "models.py", "line": 1, "symbol": "User", "include_declaration": true}),
    );
    let files: std::collections::BTreeSet<&str> = s["references"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        files.into_iter().collect::<Vec<_>>(),
        vec!["app.py", "models.py", "other.py"],
        "{s}"
    );
    let all = s["count"].as_u64().unwrap();
    assert!(all >= 6, "{s}");
    // Paging.
    let s = ok(
        &mut c,
        json!({"action": "references", "path": "models.py", "line": 1, "symbol": "User", "include_declaration": true, "limit": 2}),
    );
    assert_eq!(s["references"].as_array().unwrap().len(), 2);
    assert_eq!(s["truncated"], true);
    assert_eq!(s["next_offset"], 2);

    // Document symbols, nested.
    let s = ok(&mut c, json!({"action": "symbols", "path": "models.py"}));
    let syms = s["symbols"].as_array().unwrap();
    assert!(
        syms.iter()
            .any(|x| x["name"] == "User" && x["kind"] == "class" && x["line"] == 1),
        "{s}"
    );
    assert!(
        syms.iter()
            .any(|x| x["name"] == "make_user" && x["kind"] == "function" && x["line"] == 6),
        "{s}"
    );
    assert!(
        syms.iter()
            .any(|x| x["name"] == "__init__" && x["container"] == "User"),
        "{s}"
    );

    // Hover.
    let s = ok(
        &mut c,
        json!({"action": "hover", "path": "app.py", "line": 9, "symbol": "make_user"}),
    );
    let content = s["content"].as_str().unwrap();
    assert!(
        content.contains("make_user") && content.contains("User"),
        "{s}"
    );
    assert!(content.contains("Build a user."), "{s}");

    // Capabilities.
    let s = ok(&mut c, json!({"action": "capabilities", "path": "app.py"}));
    assert_eq!(s["supports"]["rename"], true, "{s}");
    assert_eq!(s["position_encoding"], "utf-16");

    // A raw request.
    let s = ok(
        &mut c,
        json!({"action": "request", "path": "models.py", "method": "textDocument/documentHighlight",
            "params": {"textDocument": {"uri": kitbag_lsp_client::text::path_to_uri(&std::fs::canonicalize(d.path()).unwrap().join("models.py"))},
                "position": {"line": 0, "character": 7}}}),
    );
    assert!(s["result"].as_array().is_some_and(|a| a.len() >= 2), "{s}");
    let r = c.call(
        "code_lsp",
        json!({"action": "request", "path": "models.py", "method": "textDocument/noSuchThing", "params": {}}),
    );
    assert_eq!(r.error_code(), Some("unsupported_by_adapter"), "{}", r.text);

    // The file is edited on disk (by another server): diagnostics reflect the edit.
    std::fs::write(
        d.path().join("app.py"),
        APP.replace("count: int = \"not a number\"", "count: int = 3"),
    )
    .unwrap();
    let s = ok(&mut c, json!({"action": "diagnostics", "path": "app.py"}));
    assert!(
        !s["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["severity"] == "error"),
        "{s}"
    );

    // Rename across three files, applied to the disk.
    let s = ok(
        &mut c,
        json!({"action": "rename", "path": "models.py", "line": 1, "symbol": "User", "new_name": "AppUser"}),
    );
    assert_eq!(s["files_changed"], 3, "{s}");
    let total = s["total_edits"].as_u64().unwrap();
    assert!(total >= 6, "{s}");
    // Checked by the server that made it: a whole rename introduces nothing.
    let dg = &s["edit_diagnostics"];
    assert_eq!(
        (&dg["introduced_count"], &dg["languages"]),
        (&json!(0), &json!(["python"])),
        "{s}"
    );
    assert!(dg["remaining"].is_u64(), "{s}");
    for f in ["models.py", "app.py", "other.py"] {
        let text = std::fs::read_to_string(d.path().join(f)).unwrap();
        assert!(text.contains("AppUser"), "{f}: {text}");
        assert!(
            !text.contains(" User") && !text.contains("(User"),
            "{f}: {text}"
        );
    }
    // Journaled for checkpoints (issue #39 §2): one change per file, by the rename.
    let journal =
        std::fs::read_to_string(d.path().join(".kitbag/checkpoints/journal.jsonl")).unwrap();
    let mut renamed: Vec<String> = journal
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["tool"] == "lsp_rename")
        .map(|l| l["path"].as_str().unwrap().to_owned())
        .collect();
    renamed.sort();
    assert_eq!(renamed, ["app.py", "models.py", "other.py"], "{journal}");
    // And the server sees the renamed code: no new errors.
    let s = ok(&mut c, json!({"action": "diagnostics", "path": "."}));
    assert!(
        !s["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["severity"] == "error"),
        "{s}"
    );
    assert_eq!(s["files_checked"], 3);

    // The language server dies: the next call restarts it and succeeds.
    kitbag_shared::process::kill_tree(pid as u32);
    std::thread::sleep(Duration::from_millis(300));
    let s = ok(
        &mut c,
        json!({"action": "hover", "path": "app.py", "line": 4, "symbol": "greet"}),
    );
    assert!(s["content"].as_str().unwrap().contains("greet"), "{s}");
    let st = python_status(&mut c);
    assert_eq!(st["restarts"], 1, "{st}");
    assert_ne!(st["pid"].as_u64(), Some(pid));

    // reload starts a fresh one and resets the restart count.
    let s = ok(&mut c, json!({"action": "reload", "language": "python"}));
    let new_pid = s["pid"].as_u64().unwrap();
    let st = python_status(&mut c);
    assert_eq!(st["restarts"], 0);
    assert_eq!(st["pid"].as_u64(), Some(new_pid));

    assert!(c.stdout_garbage().is_empty());
    let server_pid = c.pid();
    c.shutdown();
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !process_alive(new_pid as u32),
        "pyright outlived kitbag-lsp"
    );
    let _ = server_pid;
}

#[test]
fn rename_outside_the_writable_mounts_changes_nothing() {
    if !have("pyright-langserver") {
        return;
    }
    let d = project();
    let mut c = McpClient::spawn(
        bin(),
        &["--allow", "rw:.", "--allow", "ro:other.py"],
        d.path(),
        Era::Handshake,
    );
    c.timeout = Duration::from_secs(90);
    let r = c.call(
        "code_lsp",
        json!({"action": "rename", "path": "models.py", "line": 1, "symbol": "User", "new_name": "AppUser"}),
    );
    assert_eq!(
        r.error_code(),
        Some("rename_scope_exceeds_cage"),
        "{}",
        r.text
    );
    assert_eq!(
        r.structured["error"]["detail"]["files"],
        json!(["other.py"])
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("models.py")).unwrap(),
        MODELS
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("app.py")).unwrap(),
        APP
    );
    // Not a renameable position.
    let r = c.call(
        "code_lsp",
        json!({"action": "rename", "path": "app.py", "line": 8, "symbol": "\"not", "new_name": "x"}),
    );
    assert_eq!(r.error_code(), Some("rename_not_possible"), "{}", r.text);
}

#[test]
fn idle_servers_stop_and_respawn() {
    if !have("pyright-langserver") {
        return;
    }
    let d = project();
    let mut c = McpClient::spawn(
        bin(),
        &["--idle-timeout", "2s", "--audit-log", "audit.jsonl"],
        d.path(),
        Era::Modern,
    );
    c.timeout = Duration::from_secs(90);
    let hover = json!({"action": "hover", "path": "app.py", "line": 4, "symbol": "greet"});
    ok(&mut c, hover.clone());
    // No timing assumptions beyond "eventually": a loaded machine may be slow to answer.
    let first = python_status(&mut c)["pid"].as_u64();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let st = python_status(&mut c);
        if st["state"] == "idle_stopped" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never stopped: {st}");
        std::thread::sleep(Duration::from_millis(200));
    }
    if let Some(first) = first {
        // It is shut down politely (shutdown, exit), which takes a moment.
        while process_alive(first as u32) {
            assert!(
                std::time::Instant::now() < deadline + Duration::from_secs(10),
                "the idle server is still running"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    ok(&mut c, hover);
    let st = python_status(&mut c);
    assert_eq!(st["spawns"], 2, "{st}");
    assert_eq!(st["restarts"], 0, "an idle stop is not a crash: {st}");
    if let (Some(a), Some(b)) = (first, st["pid"].as_u64()) {
        assert_ne!(a, b);
    }
    // The lifecycle is in the audit log: spawned, stopped for idleness, spawned again.
    let audit = std::fs::read_to_string(d.path().join("audit.jsonl")).unwrap();
    let events: Vec<(String, String)> = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"].as_str().unwrap().starts_with("lsp."))
        .map(|e| {
            (
                e["event"].as_str().unwrap().to_string(),
                e["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        events,
        vec![
            ("lsp.server_spawned".to_string(), String::new()),
            ("lsp.server_stopped".to_string(), "idle_timeout".to_string()),
            ("lsp.server_spawned".to_string(), String::new()),
        ],
        "{audit}"
    );
}

#[test]
fn a_hung_server_is_killed_and_replaced() {
    if !have("pyright-langserver") {
        return;
    }
    let d = project();
    let mut c = McpClient::spawn(bin(), &["--request-timeout", "3s"], d.path(), Era::Modern);
    c.timeout = Duration::from_secs(120);
    let args = json!({"action": "hover", "path": "app.py", "line": 4, "symbol": "greet"});
    // On a loaded machine a cold pyright may itself miss the 3 s budget: that is the
    // behaviour under test (killed, replaced), so retry until one answers.
    let answered = |c: &mut McpClient| {
        for _ in 0..10 {
            let r = c.call("code_lsp", args.clone());
            if !r.is_error {
                return r.structured;
            }
            assert_eq!(r.error_code(), Some("timeout"), "{}", r.text);
        }
        panic!("pyright never answered within 3 s");
    };
    answered(&mut c);
    let before = python_status(&mut c);
    let pid = before["pid"].as_u64().unwrap() as i32;
    // Freeze it: it stays alive but answers nothing.
    nix_stop(pid);
    let r = c.call("code_lsp", args.clone());
    assert_eq!(r.error_code(), Some("timeout"), "{}", r.text);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while process_alive(pid as u32) {
        assert!(
            std::time::Instant::now() < deadline,
            "the hung server was not killed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let s = answered(&mut c);
    assert!(s["content"].as_str().unwrap().contains("greet"), "{s}");
    let st = python_status(&mut c);
    assert!(
        st["restarts"].as_u64().unwrap() > before["restarts"].as_u64().unwrap(),
        "{st}"
    );
    assert_ne!(st["pid"].as_u64(), Some(pid as u64));
}

#[test]
fn a_slow_answer_is_not_cut_short_by_the_idle_timer() {
    if !have("pyright-langserver") {
        return;
    }
    let d = project();
    let mut c = McpClient::spawn(
        bin(),
        &[
            "--idle-timeout",
            "1s",
            "--request-timeout",
            "60s",
            "--audit-log",
            "audit.jsonl",
        ],
        d.path(),
        Era::Modern,
    );
    c.timeout = Duration::from_secs(120);
    let hover = json!({"action": "hover", "path": "app.py", "line": 4, "symbol": "greet"});
    ok(&mut c, hover.clone());
    let pid = python_status(&mut c)["pid"].as_u64().unwrap() as i32;
    // Frozen for three idle periods while a call waits on it, then let go: the call must
    // get its answer from the same server.
    nix_stop(pid);
    let resume = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(3));
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &pid.to_string()])
            .status();
    });
    let s = ok(&mut c, hover);
    resume.join().unwrap();
    assert!(s["content"].as_str().unwrap().contains("greet"), "{s}");
    let st = python_status(&mut c);
    assert_eq!(st["pid"].as_u64(), Some(pid as u64), "{st}");
    assert_eq!(st["spawns"], 1, "{st}");
    let audit = std::fs::read_to_string(d.path().join("audit.jsonl")).unwrap();
    assert!(!audit.contains("lsp.server_stopped"), "{audit}");
}

fn nix_stop(pid: i32) {
    let ok = std::process::Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

#[test]
fn definitions_outside_the_readable_mounts_carry_path_and_line_only() {
    if !have("pyright-langserver") {
        return;
    }
    let d = project();
    std::fs::create_dir(d.path().join("pkg")).unwrap();
    std::fs::rename(d.path().join("app.py"), d.path().join("pkg/app.py")).unwrap();
    std::fs::write(
        d.path().join("pyrightconfig.json"),
        "{\"extraPaths\": [\".\"]}\n",
    )
    .unwrap();
    let mut c = McpClient::spawn(bin(), &["--allow", "rw:pkg"], d.path(), Era::Modern);
    c.timeout = Duration::from_secs(90);
    let s = ok(
        &mut c,
        json!({"action": "definition", "path": "pkg/app.py", "line": 4, "symbol": "User"}),
    );
    let def = &s["definitions"][0];
    assert_eq!(def["path"], "models.py", "{s}");
    assert_eq!(def["line"], 1);
    assert_eq!(def["outside_cage"], true);
    assert!(def.get("preview").is_none(), "{s}");
    // Inside the mount, previews are shown.
    let s = ok(
        &mut c,
        json!({"action": "definition", "path": "pkg/app.py", "line": 9, "symbol": "greet"}),
    );
    assert_eq!(
        s["definitions"][0]["preview"], "def greet(u: User) -> str:",
        "{s}"
    );
    // The file itself must be readable.
    let r = c.call(
        "code_lsp",
        json!({"action": "hover", "path": "models.py", "line": 1, "character": 6}),
    );
    assert_eq!(r.error_code(), Some("capability_denied"), "{}", r.text);
}

/// The seed's rename shape as the first call of a fresh pyright: every importer changes.
#[test]
fn the_first_rename_is_whole() {
    if !have("pyright-langserver") {
        return;
    }
    common::first_contact_rename(
        &[
            (
                "models.py",
                "class User:\n    def __init__(self, name: str) -> None:\n        self.name = name\n",
            ),
            (
                "app.py",
                "from models import User\n\n\ndef make(name: str) -> User:\n    return User(name)\n",
            ),
            (
                "auth.py",
                "from models import User\n\n\ndef login(u: User) -> bool:\n    return bool(u.name)\n",
            ),
        ],
        json!({"action": "rename", "path": "models.py", "line": 1, "symbol": "User", "new_name": "AppUser"}),
        "User",
        &["models.py", "app.py", "auth.py"],
    );
}

/// Ask with defaults: the answer holds the result budget and says its `list` was cut; then ask
/// for the page at `next_offset`. Returns the first answer, and the line of its last entry and
/// of the second page's first.
fn two_pages(c: &mut McpClient, ask: Value, list: &str) -> (Value, u64, u64) {
    use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
    let line_of = |v: &Value| v["line"].as_u64().unwrap();
    let first = ok(c, ask.clone());
    assert!(
        json_len(&first) < RESULT_BUDGET_BYTES,
        "{list}: {}",
        json_len(&first)
    );
    assert_eq!(first["truncated"], true, "{list}");
    let shown = first[list].as_array().unwrap();
    let next = first["next_offset"].as_u64().unwrap();
    assert_eq!(next, shown.len() as u64, "{list}");
    let mut more = ask;
    more["offset"] = json!(next);
    let second = ok(c, more);
    let lines = (line_of(shown.last().unwrap()), line_of(&second[list][0]));
    (first, lines.0, lines.1)
}

/// Issue #37's result budget, worst cases under defaults: 150 references on lines of 190
/// emoji, 120 undefined 1,500-character names, 60 functions with 2,000-character names, and
/// the raw documentSymbol answer of that file. Each default call stays under 40,000 bytes of
/// structuredContent, says it was cut, and its `next_offset` continues exactly where it
/// stopped. (Before: references ≈ 90 KB, diagnostics ≈ 150 KB, symbols ≈ 100 KB, the raw
/// answer up to 256 KB.)
#[test]
fn default_results_stay_within_the_budget() {
    use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
    if !have("pyright-langserver") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let emoji = "😀".repeat(190);
    let mut refs = String::from("def f() -> int:\n    return 1\n\n\n");
    for i in 0..150 {
        refs.push_str(&format!("x{i:03} = f()  # {emoji}\n"));
    }
    let mut undefined = String::new();
    for i in 0..120 {
        undefined.push_str(&format!("print(u{i:03}{})\n", "z".repeat(1500)));
    }
    let mut names = String::new();
    for i in 0..60 {
        names.push_str(&format!(
            "def s{i:03}{}() -> None:\n    pass\n\n\n",
            "n".repeat(2000)
        ));
    }
    std::fs::write(d.path().join("refs.py"), refs).unwrap();
    std::fs::write(d.path().join("undefined.py"), undefined).unwrap();
    std::fs::write(d.path().join("names.py"), names).unwrap();
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Modern);
    c.timeout = Duration::from_secs(90);
    // Each list: the page ends at the last entry that fits, the next starts right after it.
    let (first, last, next) = two_pages(
        &mut c,
        json!({"action": "references", "path": "refs.py", "line": 1, "symbol": "f"}),
        "references",
    );
    assert_eq!(first["count"], 150);
    assert_eq!(next, last + 1, "references");
    let (_, last, next) = two_pages(
        &mut c,
        json!({"action": "diagnostics", "path": "undefined.py"}),
        "diagnostics",
    );
    assert_eq!(next, last + 1, "diagnostics");
    let (_, last, next) = two_pages(
        &mut c,
        json!({"action": "symbols", "path": "names.py"}),
        "symbols",
    );
    assert_eq!(next, last + 4, "symbols: a function every four lines");

    // request: the raw answer's JSON text in pages that join up to the whole answer.
    let uri = url::Url::from_file_path(d.path().canonicalize().unwrap().join("names.py"))
        .unwrap()
        .to_string();
    let ask = json!({"action": "request", "path": "names.py", "method": "textDocument/documentSymbol",
        "params": {"textDocument": {"uri": uri}}});
    let (mut text, mut at, mut pages) = (String::new(), 0, 0);
    loop {
        let mut call = ask.clone();
        if at > 0 {
            call["offset"] = json!(at);
        }
        let page = ok(&mut c, call);
        assert!(json_len(&page) < RESULT_BUDGET_BYTES, "{}", json_len(&page));
        assert!(page.get("result").is_none(), "too long to come whole");
        text.push_str(page["result_text"].as_str().unwrap());
        pages += 1;
        match page["next_offset"].as_u64() {
            Some(n) => {
                assert_eq!(page["truncated"], true);
                assert_eq!(
                    n as usize,
                    text.len(),
                    "the next page starts where this ended"
                );
                at = n;
            }
            None => break,
        }
    }
    assert!(pages > 2, "{pages}");
    let whole: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(whole.as_array().unwrap().len(), 60);
    c.shutdown();
}

/// Issue #37: `status` listed every open file of every server — 60 files four directories of
/// 200 characters deep made ~52 KB. The list is now cut to the budget, with the count of all
/// open files and a flag.
#[test]
fn status_holds_the_open_files_to_the_budget() {
    use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
    if !have("pyright-langserver") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let deep: String = (0..4).map(|i| format!("{i}{}/", "d".repeat(200))).collect();
    let files: Vec<String> = (0..60).map(|i| format!("{deep}f{i:02}.py")).collect();
    for f in &files {
        common::write(d.path(), &[(f.as_str(), "x = 1\n")]);
    }
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Modern);
    c.timeout = Duration::from_secs(90);
    for f in &files {
        ok(&mut c, json!({"action": "symbols", "path": f}));
    }
    let s = ok(&mut c, json!({"action": "status"}));
    assert!(json_len(&s) < RESULT_BUDGET_BYTES, "{}", json_len(&s));
    let py = python_status(&mut c);
    assert_eq!(py["open_files_count"], 60);
    assert_eq!(py["open_files_truncated"], true);
    let shown: Vec<&str> = py["open_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(!shown.is_empty() && shown.len() < 60, "{}", shown.len());
    assert_eq!(shown, files[..shown.len()], "the first, in order");
    c.shutdown();
}
