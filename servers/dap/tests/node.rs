//! Node.js through its own inspector (kitbag's CDP bridge): JavaScript, TypeScript run
//! through Node 22's type stripping, a tsc build with source maps, attach — with the seed's
//! parameter names.
#![allow(clippy::unwrap_used)]

mod common;

use kitbag_testkit::{Era, McpClient};
use serde_json::json;

use common::{bin, disconnect_leaves_nothing, names, node22, var};

const APP: &str = "function add(a, b) {\n  const total = a + b;\n  return total;\n}\n\nconst user = { name: \"alice\", role: \"admin\", address: { city: \"Oslo\" } };\nlet count = 41;\nconsole.log(\"start\", process.env.APP_MODE);\nconst result = add(count, 1);\nconsole.log(\"result\", result);\n";

fn client(dir: &std::path::Path, era: Era, node: &str) -> McpClient {
    McpClient::spawn_with_env(bin(), &[], dir, era, &[("KITBAG_DAP_NODE", node)])
}

fn javascript(era: Era) {
    let Some(node) = node22() else { return };
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("app.js"), APP).unwrap();
    let mut c = client(d.path(), era, &node);
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "node", "script": "app.js",
            "env": {"APP_MODE": "test"}, "stop_on_entry": true}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    assert_eq!(r.structured["status"], "stopped", "{:?}", r.raw);
    assert_eq!(r.structured["stopped_reason"], "entry", "{:?}", r.raw);
    assert_eq!(r.structured["location"]["path"], "app.js", "{:?}", r.raw);
    assert_eq!(r.structured["threads"][0]["id"], 1);
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "app.js", "line": 9}),
    );
    assert_eq!(r.structured["verified"], true, "{:?}", r.raw);
    let bp = r.structured["breakpoint_id"].as_i64().unwrap();
    let r = c.call("debug", json!({"action": "continue", "thread_id": 1}));
    assert_eq!(r.structured["stopped_reason"], "breakpoint", "{:?}", r.raw);
    assert_eq!(r.structured["breakpoint_id"], bp, "{:?}", r.raw);
    assert_eq!(r.structured["location"]["line"], 9);
    assert_eq!(
        r.structured["location"]["source_preview"],
        "const result = add(count, 1);"
    );

    let r = c.call(
        "debug",
        json!({"action": "variables", "frame_id": 0, "scope": "local"}),
    );
    assert_eq!(var(&r.structured, "count")["value"], "41", "{:?}", r.raw);
    assert_eq!(var(&r.structured, "count")["type"], "number");
    let u = var(&r.structured, "user");
    assert_eq!(u["expandable"], true);
    assert!(
        u["value"]
            .as_str()
            .unwrap()
            .starts_with("{name: \"alice\", role: \"admin\""),
        "{u}"
    );
    let r = c.call("debug", json!({"action": "variables", "expand": "user"}));
    assert_eq!(
        var(&r.structured, "user.name")["value"],
        "\"alice\"",
        "{:?}",
        r.raw
    );
    assert_eq!(var(&r.structured, "user.name")["type"], "string");
    assert_eq!(var(&r.structured, "user.address")["expandable"], true);
    let r = c.call(
        "debug",
        json!({"action": "variables", "expand": "user.address"}),
    );
    assert_eq!(var(&r.structured, "user.address.city")["value"], "\"Oslo\"");
    let r = c.call(
        "debug",
        json!({"action": "variables", "scope": "global", "filter": "process"}),
    );
    assert!(names(&r).contains(&"process".to_string()), "{:?}", r.raw);

    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "user.role === 'admin'", "frame_id": 0, "context": "watch"}),
    );
    assert_eq!(r.structured["result"], "true", "{:?}", r.raw);
    assert_eq!(r.structured["type"], "boolean");
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "count * 2"}),
    );
    assert_eq!(r.structured["result"], "82");
    // watch is side-effect-free: an assignment is refused (the session lives on) ...
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "count = 5"}),
    );
    assert_eq!(r.error_code(), Some("adapter_error"), "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "nope + 1"}),
    );
    assert_eq!(r.error_code(), Some("adapter_error"), "{:?}", r.raw);
    assert!(r.text.contains("ReferenceError"), "{}", r.text);
    // A frame past the stack names the field; the session lives on.
    let r = c.call("debug", json!({"action": "variables", "frame_id": 99}));
    assert_eq!(
        r.structured["error"]["detail"]["field"], "frame_id",
        "{:?}",
        r.raw
    );
    let r = c.call(
        "debug",
        json!({"action": "variables", "expand": "user.nope"}),
    );
    assert_eq!(
        r.structured["error"]["detail"]["field"], "expand",
        "{:?}",
        r.raw
    );
    // ... repl may change state.
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "count = 41", "context": "repl"}),
    );
    assert!(!r.is_error, "{:?}", r.raw);

    let r = c.call("debug", json!({"action": "step_into", "thread_id": 1}));
    assert_eq!(r.structured["stopped_reason"], "step", "{:?}", r.raw);
    assert_eq!(r.structured["location"]["line"], 2, "{:?}", r.raw);
    assert_eq!(r.structured["location"]["function"], "add");
    let r = c.call(
        "debug",
        json!({"action": "stack_trace", "thread_id": 1, "levels": 10}),
    );
    let frames = r.structured["frames"].as_array().unwrap();
    assert_eq!(frames[0]["id"], 0);
    assert_eq!(frames[0]["name"], "add");
    assert_eq!(frames[1]["line"], 9, "{:?}", r.raw);
    assert_eq!(frames[1]["path"], "app.js");
    let r = c.call("debug", json!({"action": "variables"}));
    assert_eq!(var(&r.structured, "a")["value"], "41", "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "variables", "frame_id": 1}));
    assert_eq!(var(&r.structured, "count")["value"], "41", "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "step_over"}));
    assert_eq!(r.structured["location"]["line"], 3, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "step_out"}));
    assert_eq!(r.structured["location"]["path"], "app.js", "{:?}", r.raw);
    assert!(
        r.structured["location"]["line"].as_i64().unwrap() >= 9,
        "{:?}",
        r.raw
    );
    // Node runs in-process-adapter mode: the program is the only child.
    let kids = common::descendants(c.pid());
    assert!(!kids.is_empty());
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["status"], "exited", "{:?}", r.raw);
    assert_eq!(r.structured["exit_code"], 0);
    let r = c.call("debug", json!({"action": "output"}));
    assert!(
        r.text.contains("start test") && r.text.contains("result 42"),
        "{}",
        r.text
    );
    assert!(!r.text.contains("Debugger"), "{}", r.text);
    let r = c.call("debug", json!({"action": "disconnect"}));
    assert_eq!(r.structured["disconnected"], true);
    common::all_gone(&kids);
    assert!(c.stdout_garbage().is_empty());
    c.shutdown();
}

#[test]
fn node_javascript_modern() {
    javascript(Era::Modern);
}

#[test]
fn node_javascript_handshake() {
    javascript(Era::Handshake);
}

const TS: &str = "interface Point {\n  x: number;\n  y: number;\n}\n\nfunction area(p: Point): number {\n  return p.x * p.y;\n}\n\nlet total: number = 0;\nfor (let i = 0; i < 6; i++) {\n  total += area({ x: i, y: 2 });\n}\nconsole.log(\"total\", total);\nthrow new Error(\"boom \" + total);\n";

/// TypeScript run by Node 22's type stripping: breakpoints set before launch, a condition,
/// a hit count, a logpoint, an uncaught exception.
#[test]
fn node_typescript_breakpoints_and_exception() {
    let Some(node) = node22() else { return };
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("app.ts"), TS).unwrap();
    let mut c = client(d.path(), Era::Modern, &node);
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "app.ts", "line": 7, "condition": "p.x === 3"}),
    );
    let cond = r.structured["breakpoint_id"].as_i64().unwrap();
    c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "app.ts", "line": 12, "log_message": "i={i} total={total}"}),
    );
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "node", "script": "app.ts", "stop_on_entry": false}),
    );
    assert_eq!(r.structured["stopped_reason"], "breakpoint", "{:?}", r.raw);
    assert_eq!(r.structured["breakpoint_id"], cond, "{:?}", r.raw);
    assert_eq!(r.structured["location"]["path"], "app.ts");
    assert_eq!(r.structured["location"]["line"], 7);
    assert_eq!(r.structured["location"]["function"], "area");
    let r = c.call("debug", json!({"action": "variables", "expand": "p"}));
    assert_eq!(var(&r.structured, "p.x")["value"], "3", "{:?}", r.raw);
    // Swap the condition for a hit count: from its 2nd hit on (x = 4 is the 1st, x = 5).
    c.call(
        "debug",
        json!({"action": "remove_breakpoint", "path": "app.ts", "line": 7}),
    );
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "app.ts", "line": 7, "hit_count": 2}),
    );
    assert_eq!(r.structured["verified"], true, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["stopped_reason"], "breakpoint", "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "evaluate", "expression": "p.x"}));
    assert_eq!(r.structured["result"], "5", "{:?}", r.raw);
    c.call(
        "debug",
        json!({"action": "remove_breakpoint", "path": "app.ts", "line": 7}),
    );
    // The uncaught throw stops the program with its message.
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["stopped_reason"], "exception", "{:?}", r.raw);
    assert!(r.text.contains("boom 30"), "{}", r.text);
    assert_eq!(r.structured["location"]["line"], 15, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "output"}));
    assert!(r.text.contains("i=0 total=0"), "{}", r.text);
    assert!(r.text.contains("i=5 total=20"), "{}", r.text);
    disconnect_leaves_nothing(&mut c);
    c.shutdown();
}

/// A tsc build with source maps: breakpoints in the TypeScript source bind in the built
/// JavaScript, and stops are shown in the source.
#[test]
fn node_source_mapped_build() {
    let Some(node) = node22() else { return };
    let Some(tsc) = kitbag_dap::config::locate("tsc") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "tsc missing under CI"
        );
        eprintln!("SKIP: tsc not installed");
        return;
    };
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("src")).unwrap();
    std::fs::write(
        d.path().join("src/app.ts"),
        TS.replace("throw new Error(\"boom \" + total);\n", ""),
    )
    .unwrap();
    let st = std::process::Command::new(tsc)
        .args([
            "--sourceMap",
            "--outDir",
            "dist",
            "--target",
            "es2020",
            "--module",
            "commonjs",
            "src/app.ts",
        ])
        .current_dir(d.path())
        .status()
        .unwrap();
    assert!(st.success());
    let mut c = client(d.path(), Era::Modern, &node);
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "node", "script": "dist/app.js"}),
    );
    assert_eq!(r.structured["stopped_reason"], "entry", "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "src/app.ts", "line": 7}),
    );
    assert_eq!(r.structured["verified"], true, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["stopped_reason"], "breakpoint", "{:?}", r.raw);
    assert_eq!(
        r.structured["location"]["path"], "src/app.ts",
        "{:?}",
        r.raw
    );
    assert_eq!(r.structured["location"]["line"], 7);
    assert_eq!(
        r.structured["location"]["source_preview"],
        "  return p.x * p.y;"
    );
    let r = c.call("debug", json!({"action": "stack_trace"}));
    assert_eq!(
        r.structured["frames"][1]["path"], "src/app.ts",
        "{:?}",
        r.raw
    );
    assert_eq!(r.structured["frames"][1]["line"], 12);
    let r = c.call("debug", json!({"action": "loaded_sources"}));
    assert!(
        r.structured["sources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["path"] == "src/app.ts"),
        "{:?}",
        r.raw
    );
    disconnect_leaves_nothing(&mut c);
    c.shutdown();
}

/// Attach to `node --inspect`, break in, detach: the program keeps running.
#[test]
fn node_attach() {
    let Some(node) = node22() else { return };
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("spin.js"),
        "let n = 0;\nsetInterval(() => {\n  n += 1;\n}, 5);\n",
    )
    .unwrap();
    let (mut target, url) = common::inspected(&node, "spin.js", d.path());
    let port = common::port_of(&url);
    let mut c = client(d.path(), Era::Modern, &node);
    common::attach_detach_then_end(
        &mut c,
        &json!({"action": "attach", "runtime": "node", "port": port, "host": "localhost"}),
        &mut target,
    );
    c.shutdown();
}

/// The server killed outright (SIGKILL, no cleanup of its own): Node, paused under the
/// inspector, dies with it (parent-death signal) instead of waiting forever.
#[test]
fn node_dies_with_a_killed_server() {
    let Some(node) = node22() else { return };
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("app.js"), APP).unwrap();
    let mut c = client(d.path(), Era::Modern, &node);
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "node", "script": "app.js"}),
    );
    assert_eq!(r.structured["stopped_reason"], "entry", "{:?}", r.raw);
    let kids = common::descendants(c.pid());
    assert!(!kids.is_empty());
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &c.pid().to_string()])
        .status();
    common::all_gone(&kids);
}

/// The seed's fixture shape: src/main.ts imports src/auth.ts. As ES modules, the import runs
/// first and Node's start-up pause is inside auth.ts; `stop_on_entry` stops at the script's
/// own first statement all the same. In a function that captures nothing, `scope: "closure"`
/// is an empty list (seed 004). The program's exit code is reported.
#[test]
fn node_stops_on_entry_in_the_script_not_its_imports() {
    let Some(node) = node22() else { return };
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("src")).unwrap();
    std::fs::write(
        d.path().join("src/main.ts"),
        "import { check } from \"./auth.ts\";\n\nconst token: string = \"t0k\";\nconst ok = check(token);\nconsole.log(\"ok\", ok);\nprocess.exit(3);\n",
    )
    .unwrap();
    std::fs::write(
        d.path().join("src/auth.ts"),
        "// auth\nconsole.log(\"auth loaded\");\n\nexport function check(token: string): boolean {\n  return token.length > 0;\n}\n",
    )
    .unwrap();
    let mut c = client(d.path(), Era::Modern, &node);
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "node", "script": "./src/main.ts"}),
    );
    assert_eq!(r.structured["stopped_reason"], "entry", "{:?}", r.raw);
    assert_eq!(
        r.structured["location"]["path"], "src/main.ts",
        "{:?}",
        r.raw
    );
    assert_eq!(r.structured["location"]["line"], 3, "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "src/auth.ts", "line": 5}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["stopped_reason"], "breakpoint", "{:?}", r.raw);
    assert_eq!(r.structured["location"]["path"], "src/auth.ts");
    let r = c.call("debug", json!({"action": "variables", "scope": "closure"}));
    assert!(!r.is_error, "{:?}", r.raw);
    assert_eq!(r.structured["variables"], json!([]), "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["status"], "exited", "{:?}", r.raw);
    assert_eq!(r.structured["exit_code"], 3, "{:?}", r.raw);
    c.shutdown();
}

/// A function declared above the script's first statement: the entry stop is on that
/// statement, before any top-level code ran — not in the function's body, where a
/// breakpoint at line 0 binds (and is hit only once the top-level code has run).
#[test]
fn node_entry_is_before_the_top_level_code_when_a_function_comes_first() {
    let Some(node) = node22() else { return };
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("m.mjs"),
        "// entry\nimport { k } from \"./lib.mjs\";\nfunction later() { return k; }\nconsole.log(\"top-level ran\");\nlater();\n",
    )
    .unwrap();
    std::fs::write(d.path().join("lib.mjs"), "export const k = 1;\n").unwrap();
    let mut c = client(d.path(), Era::Modern, &node);
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "node", "script": "m.mjs"}),
    );
    assert_eq!(r.structured["stopped_reason"], "entry", "{:?}", r.raw);
    assert_eq!(r.structured["location"]["path"], "m.mjs", "{:?}", r.raw);
    assert_eq!(r.structured["location"]["line"], 4, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "output"}));
    assert!(!r.text.contains("top-level ran"), "{}", r.text);
    c.shutdown();
}

/// A program that ends while it loads (an import that does not resolve) answers with its
/// exit code and what it printed — not a bare "the connection closed".
#[test]
fn node_program_that_fails_to_load_says_why() {
    let Some(node) = node22() else { return };
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("main.mjs"),
        "import { x } from \"./missing.mjs\";\nconsole.log(x);\n",
    )
    .unwrap();
    let mut c = client(d.path(), Era::Modern, &node);
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "node", "script": "main.mjs"}),
    );
    assert_eq!(r.error_code(), Some("dap_session_ended"), "{:?}", r.raw);
    assert!(r.text.contains("exited with code 1"), "{}", r.text);
    assert!(
        r.text.contains("ERR_MODULE_NOT_FOUND") || r.text.contains("Cannot find module"),
        "{}",
        r.text
    );
    c.shutdown();
}

/// A Node older than 22.6 (the machine's own node, when it is one) asked to run TypeScript
/// answers before anything starts, naming the version found and the one needed.
#[test]
fn node_too_old_for_typescript_says_so() {
    let Some(old) = std::process::Command::new("node")
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    else {
        eprintln!("SKIP: no node on PATH");
        return;
    };
    let mut parts = old.trim_start_matches('v').split('.');
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    if major == 0 || major > 22 || (major == 22 && minor >= 6) {
        eprintln!("SKIP: the node on PATH ({old}) strips types");
        return;
    }
    let node = String::from_utf8_lossy(
        &std::process::Command::new("sh")
            .args(["-c", "command -v node"])
            .output()
            .unwrap()
            .stdout,
    )
    .trim()
    .to_string();
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("app.ts"), "const n: number = 1;\n").unwrap();
    let mut c = client(d.path(), Era::Modern, &node);
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "node", "script": "app.ts"}),
    );
    assert_eq!(r.error_code(), Some("runtime_too_old"), "{:?}", r.raw);
    let detail = &r.structured["error"]["detail"];
    assert_eq!(detail["version_needed"], "22.6");
    assert_eq!(detail["version_found"], format!("{major}.{minor}"));
    assert!(r.text.contains("22.6"), "{}", r.text);
    assert!(
        common::descendants(c.pid()).is_empty(),
        "nothing was started"
    );
    c.shutdown();
}
