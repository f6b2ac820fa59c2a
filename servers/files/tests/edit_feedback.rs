//! Edit feedback (issue #41 item 1): `kitbag-files --lsp` answers every write with the
//! diagnostics it introduced and fixed, from a real language server (pyright here), each
//! answer checked against the tool's outputSchema by the test client.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use kitbag_testkit::clients::{on_path, require};
use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-files"))
}

const APP: &str = "\
def greet(name: str) -> str:
    return \"hi \" + name


print(missing_before)
";

const USE: &str = "\
from app import greet

print(greet(\"x\"))
";

fn messages(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|d| {
            format!(
                "{}:{}: {}",
                d["path"].as_str().unwrap(),
                d["line"],
                d["message"].as_str().unwrap()
            )
        })
        .collect()
}

fn start(dir: &Path) -> McpClient {
    McpClient::spawn(
        bin(),
        &kitbag_testkit::clients::PATIENT_EDIT_CHECK,
        dir,
        Era::Modern,
    )
}

#[test]
fn writes_report_what_they_introduced_and_fixed() {
    if !require(
        on_path("pyright-langserver"),
        "pyright-langserver is not installed",
    ) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("app.py"), APP).unwrap();
    std::fs::write(d.path().join("use.py"), USE).unwrap();
    let mut c = start(d.path());
    c.call_ok("file_read", json!({"path": "app.py"}));
    c.call_ok("file_read", json!({"path": "use.py"}));

    // Two lines on top move the old problem down: it is not introduced. A wrong argument is.
    let r = c.call_ok(
        "edit_text",
        json!({"path": "app.py", "old_string": "def greet", "new_string": "import os\n\n\ndef greet"}),
    );
    let dg = &r.structured["diagnostics"];
    assert_eq!(dg["settled"], true, "{dg}");
    assert_eq!(dg["introduced_count"], 0, "{dg}");
    assert_eq!(dg["remaining"], 1, "{dg}");
    assert_eq!(dg["languages"], json!(["python"]));
    assert!(
        r.text.contains("diagnostics: none introduced"),
        "{}",
        r.text
    );

    let r = c.call_ok(
        "edit_text",
        json!({"path": "app.py", "old_string": "print(missing_before)", "new_string": "print(missing_before)\nprint(greet(1))"}),
    );
    let dg = &r.structured["diagnostics"];
    assert_eq!(dg["settled"], true, "{dg}");
    assert_eq!(dg["introduced_count"], 1, "{dg}");
    let new = &dg["introduced"][0];
    assert_eq!(
        (new["path"].as_str(), new["line"].as_u64()),
        (Some("app.py"), Some(9)),
        "{dg}"
    );
    assert_eq!(new["severity"], "error");
    assert_eq!(new["code"], "reportArgumentType", "{dg}");
    assert_eq!(dg["fixed_count"], 0, "{dg}");
    assert!(r.text.contains("+ app.py:9:"), "{}", r.text);

    // Fixing the old problem: one fixed, nothing introduced.
    let r = c.call_ok(
        "edit_text",
        json!({"path": "app.py", "old_string": "print(missing_before)\n", "new_string": ""}),
    );
    let dg = &r.structured["diagnostics"];
    assert_eq!(dg["introduced_count"], 0, "{dg}");
    assert_eq!(
        messages(&dg["fixed"]),
        ["app.py:8: \"missing_before\" is not defined"],
        "{dg}"
    );

    // A patch renaming the function breaks its caller in another open file.
    let patch = "*** Begin Patch\n*** Update File: app.py\n@@\n-def greet(name: str) -> str:\n+def salute(name: str) -> str:\n@@\n-print(greet(1))\n+print(salute(\"1\"))\n*** End Patch\n";
    let r = c.call_ok("edit_patch", json!({"patch": patch}));
    let dg = &r.structured["diagnostics"];
    assert_eq!(dg["settled"], true, "{dg}");
    let introduced = messages(&dg["introduced"]);
    assert!(
        introduced.len() == 1
            && introduced[0].starts_with("use.py:1: ")
            && introduced[0].contains("greet"),
        "{dg}"
    );
    assert_eq!(
        dg["fixed_count"], 1,
        "the wrong argument went with the rename: {dg}"
    );

    // A new file: everything in it is new.
    let r = c.call_ok(
        "file_create",
        json!({"path": "extra.py", "content": "value: int = \"text\"\n"}),
    );
    let dg = &r.structured["diagnostics"];
    assert_eq!(dg["introduced_count"], 1, "{dg}");
    assert_eq!(dg["introduced"][0]["path"], "extra.py");

    // Asked not to check: no diagnostics, and no wait.
    c.call_ok("file_read", json!({"path": "extra.py"}));
    let r = c.call_ok(
        "file_write",
        json!({"path": "extra.py", "content": "value: int = 2\n", "check": false}),
    );
    assert!(
        r.structured.get("diagnostics").is_none(),
        "{}",
        r.structured
    );
    // A file no server is configured for has no check either.
    let r = c.call_ok("file_create", json!({"path": "notes.txt", "content": "x"}));
    assert!(
        r.structured.get("diagnostics").is_none(),
        "{}",
        r.structured
    );
    let servers = descendants(c.pid());
    assert!(
        !servers.is_empty(),
        "pyright runs as a child of the files server"
    );
    c.shutdown();
    assert_gone(&servers);
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Every process below `root`.
fn descendants(root: u32) -> Vec<u32> {
    let all: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            Some((pid, parent_of(pid)?))
        })
        .collect();
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(all.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out.remove(0);
    out
}

/// The language servers a files server started end with it (zombies count as gone).
fn assert_gone(pids: &[u32]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                    !s.rsplit(')')
                        .next()
                        .unwrap_or("")
                        .trim_start()
                        .starts_with('Z')
                })
            })
            .collect();
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "left running: {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn without_lsp_no_write_waits_or_reports() {
    let d = tempfile::tempdir().unwrap();
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Modern);
    let r = c.call_ok("file_create", json!({"path": "a.py", "content": "x = y\n"}));
    assert!(
        r.structured.get("diagnostics").is_none(),
        "{}",
        r.structured
    );
}

/// Right or silent on first contact: with no time to wait, a cold server has not described
/// the file before or after the edit — the answer claims nothing (a pre-existing error is
/// not "introduced") and says it did not settle.
#[test]
fn a_cold_server_with_no_wait_claims_nothing() {
    if !require(
        on_path("pyright-langserver"),
        "pyright-langserver is not installed",
    ) {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("app.py"), APP).unwrap();
    let mut c = McpClient::spawn(
        bin(),
        &["--lsp", "--check-wait-ms", "0"],
        d.path(),
        Era::Handshake,
    );
    // The read starts the server in the background; the edit comes at once.
    c.call_ok("file_read", json!({"path": "app.py"}));
    let r = c.call_ok(
        "edit_text",
        json!({"path": "app.py", "old_string": "def greet", "new_string": "# hello\ndef greet"}),
    );
    let dg = &r.structured["diagnostics"];
    assert_eq!(dg["settled"], false, "{dg}");
    assert_eq!(dg["introduced_count"], 0, "the old error is not new: {dg}");
    assert_eq!(dg["fixed_count"], 0, "{dg}");
    assert!(
        dg["note"]
            .as_str()
            .is_some_and(|n| n.contains("not compared") && n.contains("app.py")),
        "{dg}"
    );
    c.shutdown();
}
