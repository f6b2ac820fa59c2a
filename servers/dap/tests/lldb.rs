//! The real lldb-dap adapter debugging a C program compiled with -g.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use kitbag_testkit::{Era, McpClient};
use serde_json::json;

use common::{bin, disconnect_leaves_nothing, var};

const SRC: &str = "#include <stdio.h>\n\nint square(int v) {\n    int r = v * v;\n    return r;\n}\n\nint main(void) {\n    int count = 7;\n    int sq = square(count);\n    printf(\"sq=%d\\n\", sq);\n    return 3;\n}\n";

fn c_session(era: Era) {
    if !Path::new("/usr/bin/lldb-dap-19").exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "lldb-dap-19 missing under CI"
        );
        eprintln!("SKIP: lldb-dap-19 not installed");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("main.c"), SRC).unwrap();
    let st = std::process::Command::new("gcc")
        .args(["-g", "-O0", "-o", "prog", "main.c"])
        .current_dir(d.path())
        .status()
        .unwrap();
    assert!(st.success());
    let mut c = McpClient::spawn(bin(), &[], d.path(), era);
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "main.c", "line": 10}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "lldb", "program": "prog"}),
    );
    assert_eq!(r.structured["status"], "stopped", "{:?}", r.raw);
    assert_eq!(r.structured["stop"]["line"], 10, "{:?}", r.raw);
    assert_eq!(r.structured["stop"]["path"], "main.c");
    let r = c.call("debug", json!({"action": "variables"}));
    let count = var(&r.structured, "count");
    assert_eq!(count["value"], "7");
    assert_eq!(count["type"], "int");
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "count * 3"}),
    );
    assert_eq!(r.structured["data"]["result"], "21", "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "step_into"}));
    assert_eq!(r.structured["stop"]["line"], 4, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "step_over"}));
    assert_eq!(r.structured["stop"]["line"], 5, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["status"], "exited", "{:?}", r.raw);
    assert_eq!(r.structured["exit_code"], 3);
    disconnect_leaves_nothing(&mut c);
    c.shutdown();
}

#[test]
fn c_with_lldb_modern() {
    c_session(Era::Modern);
}

#[test]
fn c_with_lldb_handshake() {
    c_session(Era::Handshake);
}

/// A program lldb cannot run (a source file): the launch fails at once with lldb's reason.
#[test]
fn lldb_refused_launch_fails_fast() {
    if !Path::new("/usr/bin/lldb-dap-19").exists() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("main.c"), SRC).unwrap();
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Handshake);
    let t = std::time::Instant::now();
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "lldb", "program": "main.c"}),
    );
    assert!(r.is_error, "{:?}", r.raw);
    assert!(r.text.contains("not a valid executable"), "{}", r.text);
    assert!(
        t.elapsed() < std::time::Duration::from_secs(10),
        "took {:?}: {}",
        t.elapsed(),
        r.text
    );
    c.shutdown();
}
