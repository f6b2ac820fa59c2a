//! Bun through its own inspector (WebKit's protocol, kitbag's CDP bridge): the seed's launch
//! example (`runtime: "bun"`, a TypeScript entry point) and the usual session.
#![allow(clippy::unwrap_used)]

mod common;

use kitbag_testkit::{Era, McpClient};
use serde_json::json;

use common::{bin, bun, var};

const APP: &str = "interface User {\n  name: string;\n  role: string;\n}\n\nfunction add(a: number, b: number): number {\n  const total = a + b;\n  return total;\n}\n\nconst user: User = { name: \"alice\", role: \"admin\" };\nlet count = 41;\nconsole.log(\"start\", process.env.APP_MODE, process.argv.slice(2).join(\" \"));\nconst result = add(count, 1);\nconsole.log(\"result\", result);\n";

fn session(era: Era) {
    let Some(bun) = bun() else { return };
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("src")).unwrap();
    std::fs::write(d.path().join("src/main.ts"), APP).unwrap();
    let mut c = McpClient::spawn_with_env(bin(), &[], d.path(), era, &[("KITBAG_DAP_BUN", &bun)]);
    // The seed's example, verbatim.
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "bun", "script": "./src/main.ts",
            "args": ["--port", "3000"], "env": {"APP_MODE": "test"}, "stop_on_entry": true}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    assert_eq!(r.structured["status"], "stopped", "{:?}", r.raw);
    assert_eq!(r.structured["stopped_reason"], "entry", "{:?}", r.raw);
    assert_eq!(
        r.structured["location"]["path"], "src/main.ts",
        "{:?}",
        r.raw
    );
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "./src/main.ts", "line": 14}),
    );
    assert_eq!(r.structured["verified"], true, "{:?}", r.raw);
    let bp = r.structured["breakpoint_id"].as_i64().unwrap();
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["stopped_reason"], "breakpoint", "{:?}", r.raw);
    assert_eq!(r.structured["breakpoint_id"], bp, "{:?}", r.raw);
    assert_eq!(r.structured["location"]["line"], 14, "{:?}", r.raw);
    assert_eq!(
        r.structured["location"]["source_preview"],
        "const result = add(count, 1);"
    );
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "count"}),
    );
    assert_eq!(r.structured["result"], "41", "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "variables"}));
    assert_eq!(var(&r.structured, "count")["value"], "41", "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "variables", "expand": "user"}));
    assert_eq!(
        var(&r.structured, "user.role")["value"],
        "\"admin\"",
        "{:?}",
        r.raw
    );
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "user.role === 'admin'"}),
    );
    assert_eq!(r.structured["result"], "true", "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "nope + 1"}),
    );
    assert_eq!(r.error_code(), Some("adapter_error"), "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "step_into"}));
    assert_eq!(r.structured["location"]["line"], 7, "{:?}", r.raw);
    assert_eq!(r.structured["location"]["function"], "add");
    let r = c.call("debug", json!({"action": "variables"}));
    assert_eq!(var(&r.structured, "a")["value"], "41", "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "stack_trace"}));
    assert_eq!(r.structured["frames"][1]["line"], 14, "{:?}", r.raw);
    let kids = common::descendants(c.pid());
    // Bun 1.4 keeps a program alive while a debugger is connected and says nothing when its
    // last line has run: past the end the status stays `running` (a documented limit);
    // disconnect ends it.
    let r = c.call("debug", json!({"action": "continue", "wait_ms": 1500}));
    assert_eq!(r.structured["status"], "running", "{:?}", r.raw);
    // The output arrives through the program's pipe: give a loaded machine a moment.
    let mut r = c.call("debug", json!({"action": "output"}));
    for _ in 0..50 {
        if r.text.contains("result 42") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        r = c.call("debug", json!({"action": "output"}));
    }
    assert!(
        r.text.contains("start test --port 3000") && r.text.contains("result 42"),
        "{}",
        r.text
    );
    assert!(!r.text.contains("Bun Inspector"), "{}", r.text);
    let r = c.call("debug", json!({"action": "disconnect"}));
    assert_eq!(r.structured["disconnected"], true);
    common::all_gone(&kids);
    c.shutdown();
}

#[test]
fn bun_typescript_modern() {
    session(Era::Modern);
}

#[test]
fn bun_typescript_handshake() {
    session(Era::Handshake);
}
