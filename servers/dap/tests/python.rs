//! Drive the real `kitbag-dap` binary over stdio against the real debugpy adapter.
#![allow(clippy::unwrap_used)]

mod common;

use kitbag_testkit::{Era, McpClient, process_alive};
use serde_json::json;

use common::{bin, descendants, disconnect_leaves_nothing, have_debugpy};

const PROG: &str = "def add(a, b):\n    total = a + b\n    return total\n\n\ncfg = {\"name\": \"kit\", \"size\": 3}\ncount = 41\nlabel = \"hello\"\nprint(\"start\", flush=True)\nresult = add(count, 1)\nprint(\"result\", result, flush=True)\n";

fn session(era: Era) {
    if !have_debugpy() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("app.py"), PROG).unwrap();
    let mut c = McpClient::spawn(bin(), &[], d.path(), era);
    // No session yet.
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.error_code(), Some("dap_session_ended"), "{:?}", r.raw);
    // Bad input.
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "app.py", "line": 999}),
    );
    assert_eq!(r.error_code(), Some("invalid_params"));
    assert_eq!(r.structured["error"]["detail"]["field"], "line");
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "cobol", "program": "app.py"}),
    );
    assert_eq!(r.structured["error"]["detail"]["field"], "runtime");
    let r = c.call(
        "debug",
        json!({"action": "launch", "program": "/etc/passwd"}),
    );
    assert!(r.is_error);
    let r = c.call("debug", json!({"action": "fly"}));
    assert_eq!(r.error_code(), Some("invalid_params"));

    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "app.py", "line": 10}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "python", "program": "app.py"}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    assert_eq!(r.structured["status"], "stopped", "{:?}", r.raw);
    assert_eq!(r.structured["stop"]["reason"], "breakpoint");
    assert_eq!(r.structured["stop"]["line"], 10);
    assert_eq!(r.structured["stop"]["path"], "app.py");
    assert_eq!(r.structured["stop"]["preview"], "result = add(count, 1)");

    let r = c.call("debug", json!({"action": "launch", "program": "app.py"}));
    assert_eq!(r.error_code(), Some("session_active"));

    let r = c.call("debug", json!({"action": "variables"}));
    assert!(!r.is_error, "{:?}", r.raw);
    let vars = r.structured["data"]["variables"]
        .as_array()
        .unwrap()
        .clone();
    let find = |n: &str| {
        vars.iter()
            .find(|v| v["name"] == n)
            .cloned()
            .unwrap_or_else(|| panic!("{n} in {vars:?}"))
    };
    assert_eq!(find("count")["value"], "41");
    assert_eq!(find("count")["type"], "int");
    assert_eq!(find("label")["value"], "'hello'");
    assert_eq!(find("label")["type"], "str");
    let cfg = find("cfg");
    assert_eq!(cfg["type"], "dict");
    let reference = cfg["variables_reference"].as_i64().unwrap();
    assert!(reference > 0);
    let r = c.call("debug", json!({"action": "variables", "expand": reference}));
    let inner = r.structured["data"]["variables"].as_array().unwrap();
    assert!(
        inner
            .iter()
            .any(|v| v["name"] == "'name'" && v["value"] == "'kit'"),
        "{inner:?}"
    );

    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "count * 2"}),
    );
    assert_eq!(r.structured["data"]["result"], "82", "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "nope_name"}),
    );
    assert!(
        r.structured["data"]["error"]
            .as_str()
            .unwrap()
            .contains("NameError"),
        "{:?}",
        r.raw
    );

    // The repl context runs statements; watch would refuse an assignment.
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "zz = count + 1", "context": "repl"}),
    );
    assert!(r.structured["data"]["error"].is_null(), "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "evaluate", "expression": "zz"}));
    assert_eq!(r.structured["data"]["result"], "42", "{:?}", r.raw);

    let r = c.call("debug", json!({"action": "step_into"}));
    assert_eq!(r.structured["stop"]["line"], 2, "{:?}", r.raw);
    assert_eq!(r.structured["stop"]["function"], "add");
    // Inside add(): locals by default, the module's names under `scope: globals`.
    let r = c.call("debug", json!({"action": "variables"}));
    let names = |r: &kitbag_testkit::ToolCall| -> Vec<String> {
        r.structured["data"]["variables"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(names(&r).contains(&"a".to_string()), "{:?}", r.raw);
    assert!(!names(&r).contains(&"cfg".to_string()), "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "variables", "scope": "globals"}));
    assert!(names(&r).contains(&"cfg".to_string()), "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "variables", "scope": "registers"}),
    );
    assert_eq!(r.error_code(), Some("invalid_params"), "{}", r.text);
    assert_eq!(r.structured["error"]["detail"]["field"], "scope");
    let r = c.call("debug", json!({"action": "step_over"}));
    assert_eq!(r.structured["stop"]["line"], 3, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "step_out"}));
    assert_eq!(r.structured["stop"]["line"], 10, "{:?}", r.raw);

    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["status"], "exited", "{:?}", r.raw);
    assert_eq!(r.structured["exit_code"], 0);
    let r = c.call("debug", json!({"action": "output"}));
    assert!(
        r.text.contains("start") && r.text.contains("result 42"),
        "{}",
        r.text
    );

    disconnect_leaves_nothing(&mut c);
    assert!(c.stdout_garbage().is_empty());
    assert_eq!(c.shutdown(), Some(0));
}

#[test]
fn python_session_modern() {
    session(Era::Modern);
}

#[test]
fn python_session_handshake() {
    session(Era::Handshake);
}

#[test]
fn conditional_logpoint_exception_and_client_disconnect() {
    if !have_debugpy() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("loop.py"),
        "for i in range(10):\n    x = i * i\n    print(\"x\", x)\nraise ValueError(\"boom\")\n",
    )
    .unwrap();
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Modern);
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "loop.py", "line": 3, "condition": "i == 7"}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "set_breakpoint", "path": "loop.py", "line": 2, "log_message": "LOG i={i}"}));
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "launch", "program": "loop.py"}));
    assert_eq!(r.structured["stop"]["line"], 3, "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "disassemble", "memory_reference": "0x0"}),
    );
    assert_eq!(
        r.error_code(),
        Some("unsupported_by_adapter"),
        "{:?}",
        r.raw
    );
    assert_eq!(
        r.structured["error"]["detail"]["capability"],
        "supportsDisassembleRequest"
    );
    let r = c.call(
        "debug",
        json!({"action": "custom_request", "command": "threads"}),
    );
    assert!(
        r.structured["data"]["threads"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "{:?}",
        r.raw
    );
    let r = c.call(
        "debug",
        json!({"action": "set_exception_breakpoints", "filters": ["uncaught"]}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "evaluate", "expression": "i"}));
    assert_eq!(r.structured["data"]["result"], "7");
    let r = c.call(
        "debug",
        json!({"action": "remove_breakpoint", "path": "loop.py", "line": 3}),
    );
    assert!(!r.is_error);
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["stop"]["reason"], "exception", "{:?}", r.raw);
    assert!(r.text.contains("boom"), "{}", r.text);
    let r = c.call("debug", json!({"action": "output"}));
    assert!(r.text.contains("LOG i=5"), "{}", r.text);
    let kids = descendants(c.pid());
    assert!(!kids.is_empty());
    // Client goes away without disconnect: everything must die.
    c.shutdown();
    std::thread::sleep(std::time::Duration::from_millis(800));
    for p in kids {
        assert!(!process_alive(p), "process {p} survived client disconnect");
    }
}

const NESTED: &str = "data = {\"user\": {\"name\": \"kit\", \"tags\": [\"a\", \"b\"], \"address\": {\"city\": \"Oslo\", \"geo\": {\"lat\": 59}}}, \"n\": 1}\ntotal = 0; big = {k: k for k in range(80)}; grid = [[r] * 60 for r in range(20)]\nfor i in range(10):\n    total += i\nprint(\"total\", total, flush=True)\n";

fn child<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["children"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no child {name} in {v}"))
}

#[test]
fn hit_count_and_nested_variables() {
    if !have_debugpy() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("nested.py"), NESTED).unwrap();
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Modern);
    // Bad hit counts name the field.
    for bad in [json!(""), json!(0), json!(-2), json!(true)] {
        let r = c.call(
            "debug",
            json!({"action": "set_breakpoint", "path": "nested.py", "line": 4, "hit_count": bad}),
        );
        assert_eq!(r.error_code(), Some("invalid_params"), "{bad}: {:?}", r.raw);
        assert_eq!(
            r.structured["error"]["detail"]["field"], "hit_count",
            "{bad}"
        );
        assert!(r.text.contains("hit count"), "{bad}: {}", r.text);
    }
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "nested.py", "line": 4, "hit_count": "3"}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "list_breakpoints"}));
    assert_eq!(r.structured["data"]["breakpoints"][0]["hit_count"], "3");
    let r = c.call("debug", json!({"action": "launch", "program": "nested.py"}));
    assert_eq!(r.structured["status"], "stopped", "{:?}", r.raw);
    assert_eq!(r.structured["stop"]["line"], 4, "{:?}", r.raw);
    // The third pass through the loop body: i == 2, total == 0 + 1.
    let r = c.call("debug", json!({"action": "variables", "filter": "i"}));
    let vars = r.structured["data"]["variables"].as_array().unwrap();
    let i = vars.iter().find(|v| v["name"] == "i").unwrap();
    assert_eq!(i["value"], "2", "{vars:?}");
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "total"}),
    );
    assert_eq!(r.structured["data"]["result"], "1");

    // Nested values in one call.
    for bad in [0, 5, 99] {
        let r = c.call("debug", json!({"action": "variables", "depth": bad}));
        assert_eq!(r.error_code(), Some("invalid_params"), "{bad}");
        assert_eq!(r.structured["error"]["detail"]["field"], "depth");
    }
    let r = c.call(
        "debug",
        json!({"action": "variables", "filter": "data", "depth": 3}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let vars = r.structured["data"]["variables"].as_array().unwrap();
    let data = vars.iter().find(|v| v["name"] == "data").unwrap();
    assert_eq!(data["type"], "dict");
    assert_eq!(child(data, "'n'")["value"], "1");
    let user = child(data, "'user'");
    assert_eq!(user["type"], "dict");
    assert_eq!(child(user, "'name'")["value"], "'kit'");
    let tags = child(user, "'tags'");
    assert_eq!(tags["type"], "list");
    // Level 3 is the last: its values are listed, not expanded.
    assert!(tags.get("children").is_none(), "{tags}");
    assert!(child(user, "'address'").get("children").is_none());
    assert!(r.text.contains("    'name': str = 'kit'"), "{}", r.text);
    assert_eq!(r.structured["data"]["nested_truncated"], false);
    // One more level reaches the address's fields and the list's items.
    let r = c.call(
        "debug",
        json!({"action": "variables", "filter": "data", "depth": 4}),
    );
    let vars = r.structured["data"]["variables"].as_array().unwrap();
    let data = vars.iter().find(|v| v["name"] == "data").unwrap();
    let user = child(data, "'user'");
    assert_eq!(child(child(user, "'address'"), "'city'")["value"], "'Oslo'");
    assert_eq!(child(child(user, "'tags'"), "1")["value"], "'b'");
    let geo = child(child(user, "'address'"), "'geo'");
    assert!(geo.get("children").is_none(), "{geo}");
    // Bounds: at most 50 children per value, 500 nested values in all.
    let r = c.call(
        "debug",
        json!({"action": "variables", "filter": "big", "depth": 2}),
    );
    let big = &r.structured["data"]["variables"][0];
    assert_eq!(big["name"], "big", "{:?}", r.raw);
    assert_eq!(big["children"].as_array().unwrap().len(), 50, "{big}");
    assert!(big["children_omitted"].as_u64().unwrap() >= 30, "{big}");
    assert!(r.text.contains("more"), "{}", r.text);
    let r = c.call(
        "debug",
        json!({"action": "variables", "filter": "grid", "depth": 3}),
    );
    assert_eq!(
        r.structured["data"]["nested_truncated"], true,
        "{:?}",
        r.raw
    );
    let rows = r.structured["data"]["variables"][0]["children"]
        .as_array()
        .unwrap()
        .clone();
    let nested: usize = rows.len()
        + rows
            .iter()
            .map(|row| row["children"].as_array().map_or(0, Vec::len))
            .sum::<usize>();
    assert_eq!(nested, 500, "{rows:?}");
    // Depth 1 is the old flat answer.
    let r = c.call("debug", json!({"action": "variables", "filter": "data"}));
    let vars = r.structured["data"]["variables"].as_array().unwrap();
    assert!(vars[0].get("children").is_none());

    // hit_count "3" stops once: the rest of the loop runs to the end.
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["status"], "exited", "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "output"}));
    assert!(r.text.contains("total 45"), "{}", r.text);
    c.call("debug", json!({"action": "disconnect"}));
    c.shutdown();
}

#[test]
fn catalog() {
    let d = tempfile::tempdir().unwrap();
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Handshake);
    let path =
        kitbag_testkit::workspace_root(env!("CARGO_MANIFEST_DIR")).join("manifests/dap/tools.json");
    kitbag_testkit::assert_catalog_matches(&mut c, &path);
    c.shutdown();
}
