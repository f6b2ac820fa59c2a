//! The real lldb-dap adapter debugging a C program compiled with -g.
#![allow(clippy::unwrap_used)]

mod common;

use kitbag_testkit::{Era, McpClient};
use serde_json::json;

use common::{bin, disconnect_leaves_nothing, var};

const SRC: &str = "#include <stdio.h>\n\nint square(int v) {\n    int r = v * v;\n    return r;\n}\n\nint main(void) {\n    int count = 7;\n    int sq = square(count);\n    printf(\"sq=%d\\n\", sq);\n    return 3;\n}\n";

fn c_session(era: Era) {
    if !common::have_lldb_dap() {
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
    // Stop on entry (the default) is main's first line, not the loader's first instruction.
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "lldb", "script": "prog"}),
    );
    assert_eq!(r.structured["status"], "stopped", "{:?}", r.raw);
    assert_eq!(r.structured["stopped_reason"], "entry", "{:?}", r.raw);
    assert_eq!(r.structured["location"]["function"], "main", "{:?}", r.raw);
    assert_eq!(r.structured["location"]["line"], 9, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["stopped_reason"], "breakpoint", "{:?}", r.raw);
    assert_eq!(r.structured["location"]["line"], 10, "{:?}", r.raw);
    assert_eq!(r.structured["location"]["path"], "main.c");
    let r = c.call("debug", json!({"action": "variables"}));
    let count = var(&r.structured, "count");
    assert_eq!(count["value"], "7");
    assert_eq!(count["type"], "int");
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "count * 3"}),
    );
    assert_eq!(r.structured["result"], "21", "{:?}", r.raw);
    // The adapter's refusals are its own errors; the session lives on.
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "no_such_name"}),
    );
    assert_eq!(r.error_code(), Some("adapter_error"), "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "scopes", "frame_id": 40}));
    assert_eq!(
        r.structured["error"]["detail"]["field"], "frame_id",
        "{:?}",
        r.raw
    );
    let r = c.call(
        "debug",
        json!({"action": "variables", "scope": "registers"}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "step_into"}));
    assert_eq!(r.structured["location"]["line"], 4, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "step_over"}));
    assert_eq!(r.structured["location"]["line"], 5, "{:?}", r.raw);
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
    if !common::have_lldb_dap() {
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

const MEM: &str = "#include <stdio.h>\n\nint counter = 0;\n\nint bump(int v) {\n    counter += v;\n    return counter;\n}\n\nint main(void) {\n    int buf[4] = {1, 2, 3, 4};\n    for (int i = 0; i < 3; i++) {\n        bump(i + 1);\n    }\n    printf(\"counter=%d buf0=%d\\n\", counter, buf[0]);\n    return 0;\n}\n";

/// The six actions lldb-dap makes possible: memory read and write, data breakpoints (a
/// watchpoint on a global), instruction breakpoints, disassembly — and modules.
#[test]
fn lldb_memory_data_and_instruction_breakpoints() {
    if !common::have_lldb_dap() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("mem.c"), MEM).unwrap();
    let st = std::process::Command::new("gcc")
        .args(["-g", "-O0", "-o", "mem", "mem.c"])
        .current_dir(d.path())
        .status()
        .unwrap();
    assert!(st.success());
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Modern);
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "lldb", "script": "mem"}),
    );
    assert_eq!(r.structured["stopped_reason"], "entry", "{:?}", r.raw);
    assert_eq!(r.structured["location"]["line"], 11, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "step_over"}));
    assert_eq!(r.structured["location"]["line"], 12, "{:?}", r.raw);

    // Memory: read buf, write its first int, read it back through the language.
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "&buf[0]"}),
    );
    let address = r.structured["result"]
        .as_str()
        .and_then(|s| s.split_whitespace().find(|w| w.starts_with("0x")))
        .unwrap_or_else(|| panic!("{:?}", r.raw))
        .to_string();
    let r = c.call(
        "debug",
        json!({"action": "read_memory", "memory_reference": address, "count": 8}),
    );
    assert_eq!(
        r.structured["memory"]["hex"], "01 00 00 00 02 00 00 00",
        "{:?}",
        r.raw
    );
    let r = c.call(
        "debug",
        json!({"action": "read_memory", "memory_reference": address, "count": 99999}),
    );
    assert_eq!(r.structured["error"]["detail"]["field"], "count");
    let r = c.call(
        "debug",
        json!({"action": "write_memory", "memory_reference": address, "data": "not base64!"}),
    );
    assert_eq!(
        r.structured["error"]["detail"]["field"], "data",
        "{:?}",
        r.raw
    );
    let r = c.call(
        "debug",
        json!({"action": "write_memory", "memory_reference": address, "data": "CQAAAA=="}),
    );
    assert_eq!(r.structured["bytes_written"], 4, "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "buf[0]"}),
    );
    assert_eq!(r.structured["result"], "9", "{:?}", r.raw);

    // A data breakpoint on the global `counter`: stops where it is written.
    let r = c.call(
        "debug",
        json!({"action": "data_breakpoint_info", "name": "nope", "scope": "global"}),
    );
    assert_eq!(
        r.structured["error"]["detail"]["field"], "name",
        "{:?}",
        r.raw
    );
    let r = c.call(
        "debug",
        json!({"action": "data_breakpoint_info", "name": "counter", "scope": "global"}),
    );
    let data_id = r.structured["data_breakpoint"]["data_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{:?}", r.raw))
        .to_string();
    let r = c.call(
        "debug",
        json!({"action": "set_data_breakpoint", "data_id": data_id, "access_type": "write"}),
    );
    assert_eq!(r.structured["verified"], true, "{:?}", r.raw);
    let watch = r.structured["breakpoint_id"].as_i64().unwrap();
    let r = c.call("debug", json!({"action": "list_breakpoints"}));
    assert!(
        r.structured["breakpoints"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["kind"] == "data" && b["id"] == watch),
        "{:?}",
        r.raw
    );
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["status"], "stopped", "{:?}", r.raw);
    assert!(
        r.structured["stopped_reason"]
            .as_str()
            .unwrap()
            .contains("data breakpoint"),
        "{:?}",
        r.raw
    );
    assert_eq!(r.structured["breakpoint_id"], watch, "{:?}", r.raw);
    assert_eq!(r.structured["location"]["function"], "bump", "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "remove_data_breakpoint", "data_id": data_id}),
    );
    assert!(!r.is_error, "{:?}", r.raw);

    // Instructions: disassemble at the frame's instruction pointer, break on it again.
    let r = c.call("debug", json!({"action": "stack_trace"}));
    let pc = r.structured["frames"][0]["instruction_pointer"]
        .as_str()
        .unwrap_or_else(|| panic!("{:?}", r.raw))
        .to_string();
    let r = c.call(
        "debug",
        json!({"action": "disassemble", "memory_reference": pc, "count": 4}),
    );
    assert_eq!(
        r.structured["instructions"].as_array().unwrap().len(),
        4,
        "{:?}",
        r.raw
    );
    let r = c.call(
        "debug",
        json!({"action": "set_instruction_breakpoint", "memory_reference": pc}),
    );
    assert_eq!(r.structured["verified"], true, "{:?}", r.raw);
    let at_pc = r.structured["breakpoint_id"].as_i64().unwrap();
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(
        r.structured["stopped_reason"], "instruction breakpoint",
        "{:?}",
        r.raw
    );
    assert_eq!(r.structured["breakpoint_id"], at_pc, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "evaluate", "expression": "v"}));
    assert_eq!(r.structured["result"], "2", "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "remove_instruction_breakpoint", "memory_reference": pc}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "modules"}));
    assert!(
        r.structured["modules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == "mem"),
        "{:?}",
        r.raw
    );
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["status"], "exited", "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "output"}));
    assert!(r.text.contains("counter=6 buf0=9"), "{}", r.text);
    disconnect_leaves_nothing(&mut c);
    c.shutdown();
}
