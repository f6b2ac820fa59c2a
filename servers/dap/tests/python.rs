//! Drive the real `kitbag-dap` binary over stdio against the real debugpy adapter, with seed
//! 004's parameter names and examples as written.
#![allow(clippy::unwrap_used)]

mod common;

use kitbag_testkit::{Era, McpClient, process_alive};
use serde_json::json;

use common::{bin, descendants, disconnect_leaves_nothing, have_debugpy, names, var};

const PROG: &str = "import os\n\ndef add(a, b):\n    total = a + b\n    return total\n\ncfg = {\"name\": \"kit\", \"size\": 3}\ncount = 41\nlabel = \"hello\"\nprint(\"start\", os.environ.get(\"APP_MODE\"), flush=True)\nresult = add(count, 1)\nprint(\"result\", result, flush=True)\n";

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
    // Bad input names the field.
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "app.py", "line": 999}),
    );
    assert_eq!(r.error_code(), Some("invalid_params"));
    assert_eq!(r.structured["error"]["detail"]["field"], "line");
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "cobol", "script": "app.py"}),
    );
    assert_eq!(r.structured["error"]["detail"]["field"], "runtime");
    let r = c.call(
        "debug",
        json!({"action": "launch", "script": "app.py", "env": {"BAD-NAME": "1"}}),
    );
    assert_eq!(
        r.structured["error"]["detail"]["field"], "env",
        "{:?}",
        r.raw
    );
    let r = c.call(
        "debug",
        json!({"action": "launch", "script": "/etc/passwd"}),
    );
    assert!(r.is_error);
    let r = c.call("debug", json!({"action": "fly"}));
    assert_eq!(r.error_code(), Some("invalid_params"));

    // The seed's launch, verbatim in shape: it stops on entry by default.
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "python", "script": "app.py",
            "args": ["--port", "3000"], "env": {"APP_MODE": "test"}, "stop_on_entry": true}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let s = &r.structured;
    assert_eq!(s["action"], "launch");
    assert_eq!(s["status"], "stopped", "{:?}", r.raw);
    assert_eq!(s["stopped_reason"], "entry", "{:?}", r.raw);
    assert_eq!(s["location"]["path"], "app.py");
    assert_eq!(s["location"]["line"], 1);
    assert_eq!(s["location"]["source_preview"], "import os");
    assert!(s["debug_session_id"].as_str().unwrap().starts_with("dap_"));
    let thread = s["threads"][0]["id"].as_i64().unwrap();
    assert_eq!(s["thread_id"], thread);
    let r = c.call("debug", json!({"action": "launch", "script": "app.py"}));
    assert_eq!(r.error_code(), Some("session_active"));

    // A breakpoint set in the live session is verified at once.
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "app.py", "line": 11}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    assert_eq!(r.structured["verified"], true, "{:?}", r.raw);
    assert_eq!(r.structured["actual_line"], 11);
    assert_eq!(r.structured["path"], "app.py");
    let bp = r.structured["breakpoint_id"].as_i64().unwrap();
    let r = c.call("debug", json!({"action": "list_breakpoints"}));
    assert_eq!(r.structured["breakpoints"][0]["id"], bp);
    assert_eq!(r.structured["breakpoints"][0]["verified"], true);
    assert_eq!(r.structured["breakpoints"][0]["line"], 11);
    let r = c.call("debug", json!({"action": "continue", "thread_id": thread}));
    assert_eq!(r.structured["status"], "stopped", "{:?}", r.raw);
    assert_eq!(r.structured["stopped_reason"], "breakpoint");
    assert_eq!(r.structured["breakpoint_id"], bp, "{:?}", r.raw);
    assert_eq!(r.structured["location"]["line"], 11);
    assert_eq!(
        r.structured["location"]["source_preview"],
        "result = add(count, 1)"
    );

    // The seed's variables call; values, types, expandable.
    let r = c.call(
        "debug",
        json!({"action": "variables", "frame_id": 0, "scope": "local"}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    assert_eq!(var(&r.structured, "count")["value"], "41");
    assert_eq!(var(&r.structured, "count")["type"], "int");
    assert_eq!(var(&r.structured, "count")["expandable"], false);
    assert_eq!(var(&r.structured, "label")["value"], "'hello'");
    assert_eq!(var(&r.structured, "cfg")["expandable"], true);
    // expand by name: the children are named by their path.
    let r = c.call("debug", json!({"action": "variables", "expand": "cfg"}));
    assert!(!r.is_error, "{:?}", r.raw);
    assert_eq!(var(&r.structured, "cfg.name")["value"], "'kit'");
    assert_eq!(var(&r.structured, "cfg.size")["value"], "3");
    let r = c.call(
        "debug",
        json!({"action": "variables", "expand": "cfg.name"}),
    );
    assert_eq!(
        r.structured["error"]["detail"]["field"], "expand",
        "{:?}",
        r.raw
    );
    assert!(r.text.contains("no children"), "{}", r.text);
    let r = c.call("debug", json!({"action": "variables", "expand": "nope"}));
    assert_eq!(r.structured["error"]["detail"]["field"], "expand");

    // The seed's evaluate.
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "count * 2", "frame_id": 0, "context": "watch"}),
    );
    assert_eq!(r.structured["result"], "82", "{:?}", r.raw);
    assert_eq!(r.structured["type"], "int");
    // A bad expression is the adapter's refusal, not the end of the session.
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "nope_name"}),
    );
    assert_eq!(r.error_code(), Some("adapter_error"), "{:?}", r.raw);
    assert!(r.text.contains("NameError"), "{}", r.text);
    // A frame that does not exist names the field; the session lives on.
    let r = c.call("debug", json!({"action": "variables", "frame_id": 7}));
    assert_eq!(r.error_code(), Some("invalid_params"), "{:?}", r.raw);
    assert_eq!(r.structured["error"]["detail"]["field"], "frame_id");
    // watch (the default) never changes the program: debugpy has no such check of its own,
    // so a call, an assignment or an augmented assignment is refused before it runs (naming
    // `expression`, pointing to repl), and the dict is as it was.
    for expr in [
        "cfg.setdefault('k', 1)",
        "count = 5",
        "count += 1",
        "[*cfg]",
    ] {
        let r = c.call("debug", json!({"action": "evaluate", "expression": expr}));
        assert_eq!(
            r.error_code(),
            Some("invalid_params"),
            "{expr}: {:?}",
            r.raw
        );
        assert_eq!(r.structured["error"]["detail"]["field"], "expression");
        assert!(r.text.contains("repl"), "{}", r.text);
    }
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "'k' in cfg or count != 41"}),
    );
    assert_eq!(r.structured["result"], "False", "{:?}", r.raw);
    // repl may: the call runs and the dict grows.
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "cfg.setdefault('k', 1)", "context": "repl"}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "cfg['k']"}),
    );
    assert_eq!(r.structured["result"], "1", "{:?}", r.raw);
    // The repl context runs statements; watch would refuse an assignment.
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "zz = count + 1", "context": "repl"}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "evaluate", "expression": "zz"}));
    assert_eq!(r.structured["result"], "42", "{:?}", r.raw);

    let r = c.call("debug", json!({"action": "step_into", "thread_id": thread}));
    assert_eq!(r.structured["stopped_reason"], "step", "{:?}", r.raw);
    assert_eq!(r.structured["location"]["line"], 4, "{:?}", r.raw);
    assert_eq!(r.structured["location"]["function"], "add");
    assert_eq!(
        r.structured["location"]["source_preview"],
        "    total = a + b"
    );
    // The seed's stack_trace: frame ids count from the top.
    let r = c.call(
        "debug",
        json!({"action": "stack_trace", "thread_id": thread, "levels": 10}),
    );
    let frames = r.structured["frames"].as_array().unwrap();
    assert_eq!(frames[0]["id"], 0, "{:?}", r.raw);
    assert_eq!(frames[0]["name"], "add");
    assert_eq!(frames[0]["line"], 4);
    assert_eq!(frames[1]["id"], 1);
    assert_eq!(frames[1]["name"], "<module>");
    assert_eq!(frames[1]["path"], "app.py");
    assert_eq!(r.structured["total_frames"], frames.len());
    let r = c.call("debug", json!({"action": "stack_trace", "levels": 1}));
    assert_eq!(r.structured["frames"].as_array().unwrap().len(), 1);
    assert_eq!(r.structured["total_frames"], 2, "{:?}", r.raw);
    // frame_id 1 is the caller: the module's names.
    let r = c.call("debug", json!({"action": "variables", "frame_id": 1}));
    assert_eq!(var(&r.structured, "count")["value"], "41", "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "label", "frame_id": 1}),
    );
    assert_eq!(r.structured["result"], "'hello'", "{:?}", r.raw);
    // Inside add(): locals by default, the module's names under `scope: global`.
    let r = c.call("debug", json!({"action": "variables"}));
    assert!(names(&r).contains(&"a".to_string()), "{:?}", r.raw);
    assert!(!names(&r).contains(&"cfg".to_string()), "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "variables", "scope": "global"}));
    assert!(names(&r).contains(&"cfg".to_string()), "{:?}", r.raw);
    // A global expands by name from inside a function.
    let r = c.call("debug", json!({"action": "variables", "expand": "cfg"}));
    assert_eq!(var(&r.structured, "cfg.size")["value"], "3", "{:?}", r.raw);
    // No closure scope in this frame: an empty list (seed 004); an unknown scope is an error.
    let r = c.call_ok("debug", json!({"action": "variables", "scope": "closure"}));
    assert_eq!(r.structured["variables"], json!([]), "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "variables", "scope": "registers"}),
    );
    assert_eq!(r.error_code(), Some("invalid_params"), "{}", r.text);
    assert_eq!(r.structured["error"]["detail"]["field"], "scope");
    // The seed's example verbatim: thread 1 is the main thread, whatever debugpy numbers it.
    let r = c.call("debug", json!({"action": "step_over", "thread_id": 1}));
    assert_eq!(r.structured["location"]["line"], 5, "{:?}", r.raw);
    assert_eq!(r.structured["thread_id"], thread, "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "stack_trace", "thread_id": 424242}),
    );
    assert_eq!(
        r.structured["error"]["detail"]["field"], "thread_id",
        "{:?}",
        r.raw
    );
    let r = c.call("debug", json!({"action": "step_out"}));
    assert_eq!(r.structured["location"]["line"], 11, "{:?}", r.raw);

    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["status"], "exited", "{:?}", r.raw);
    assert_eq!(r.structured["exit_code"], 0);
    let r = c.call("debug", json!({"action": "output"}));
    assert!(
        r.text.contains("start test") && r.text.contains("result 42"),
        "{}",
        r.text
    );
    let r = c.call("debug", json!({"action": "step_over"}));
    assert_eq!(r.error_code(), Some("dap_session_ended"), "{:?}", r.raw);

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

/// Breakpoints set before launch, `stop_on_entry: false`, the seed's disconnect answer, and
/// the audit events.
#[test]
fn breakpoints_before_launch_and_audit_events() {
    if !have_debugpy() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("app.py"), PROG).unwrap();
    let log = d.path().join("audit.jsonl");
    let log_s = log.to_string_lossy().to_string();
    let mut c = McpClient::spawn(bin(), &["--audit-log", &log_s], d.path(), Era::Modern);
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "app.py", "line": 4}),
    );
    // No session yet: kept, sent at launch.
    assert_eq!(r.structured["verified"], false, "{:?}", r.raw);
    let bp = r.structured["breakpoint_id"].as_i64().unwrap();
    let r = c.call(
        "debug",
        json!({"action": "launch", "script": "app.py", "stop_on_entry": false, "cwd": "."}),
    );
    assert_eq!(r.structured["stopped_reason"], "breakpoint", "{:?}", r.raw);
    assert_eq!(r.structured["breakpoint_id"], bp);
    assert_eq!(r.structured["location"]["line"], 4);
    let session = r.structured["debug_session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = c.call("debug", json!({"action": "list_breakpoints"}));
    assert_eq!(
        r.structured["breakpoints"][0]["verified"], true,
        "{:?}",
        r.raw
    );
    let r = c.call(
        "debug",
        json!({"action": "disconnect", "terminate_debuggee": true}),
    );
    assert_eq!(r.structured["disconnected"], true, "{:?}", r.raw);
    assert_eq!(r.structured["debuggee_terminated"], true);
    c.shutdown();
    let events: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &serde_json::Value| e["event"].as_str().unwrap().starts_with("debug."))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "debug.session_started",
            "debug.breakpoint_hit",
            "debug.session_ended"
        ],
        "{events:?}"
    );
    assert!(events.iter().all(|e| e["debug_session_id"] == session));
    assert_eq!(events[1]["breakpoint_id"], bp);
    assert_eq!(events[1]["line"], 4);
    assert_eq!(events[2]["reason"], "disconnect");
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
    let r = c.call(
        "debug",
        json!({"action": "launch", "program": "loop.py", "stop_on_entry": false}),
    );
    assert_eq!(r.structured["location"]["line"], 3, "{:?}", r.raw);
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
    for action in [
        "set_instruction_breakpoint",
        "write_memory",
        "data_breakpoint_info",
    ] {
        let r = c.call(
            "debug",
            json!({"action": action, "memory_reference": "0x0", "name": "i", "data": "AA=="}),
        );
        assert_eq!(
            r.error_code(),
            Some("unsupported_by_adapter"),
            "{action}: {:?}",
            r.raw
        );
    }
    let r = c.call(
        "debug",
        json!({"action": "custom_request", "command": "threads"}),
    );
    assert!(
        r.structured["body"]["threads"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "{:?}",
        r.raw
    );
    let r = c.call(
        "debug",
        json!({"action": "custom_request", "command": "noSuchRequest"}),
    );
    assert_eq!(r.error_code(), Some("adapter_error"), "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "set_exception_breakpoints", "filters": ["nope"]}),
    );
    assert_eq!(r.structured["error"]["detail"]["field"], "filters");
    let r = c.call(
        "debug",
        json!({"action": "set_exception_breakpoints", "filters": ["uncaught"]}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "evaluate", "expression": "i"}));
    assert_eq!(r.structured["result"], "7");
    let r = c.call(
        "debug",
        json!({"action": "remove_breakpoint", "path": "loop.py", "line": 3}),
    );
    assert!(!r.is_error);
    let r = c.call(
        "debug",
        json!({"action": "remove_breakpoint", "path": "loop.py", "line": 3}),
    );
    assert_eq!(r.structured["error"]["detail"]["field"], "line");
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["stopped_reason"], "exception", "{:?}", r.raw);
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
        assert!(r.text.contains("hit_count"), "{bad}: {}", r.text);
    }
    // The seed's hit_count: break after N hits — on the 3rd and every later one.
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "nested.py", "line": 4, "hit_count": 3}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "list_breakpoints"}));
    assert_eq!(r.structured["breakpoints"][0]["hit_count"], "3");
    let r = c.call(
        "debug",
        json!({"action": "launch", "script": "nested.py", "stop_on_entry": false}),
    );
    assert_eq!(r.structured["status"], "stopped", "{:?}", r.raw);
    assert_eq!(r.structured["location"]["line"], 4, "{:?}", r.raw);
    // The third pass through the loop body: i == 2, total == 0 + 1.
    let r = c.call("debug", json!({"action": "variables", "filter": "i"}));
    assert_eq!(var(&r.structured, "i")["value"], "2", "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "total"}),
    );
    assert_eq!(r.structured["result"], "1");

    // Nested values in one call, named by their paths.
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
    let data = var(&r.structured, "data");
    assert_eq!(data["type"], "dict");
    assert_eq!(child(data, "data.n")["value"], "1");
    let user = child(data, "data.user");
    assert_eq!(user["type"], "dict");
    assert_eq!(child(user, "data.user.name")["value"], "'kit'");
    let tags = child(user, "data.user.tags");
    assert_eq!(tags["type"], "list");
    // Level 3 is the last: its values are listed, not expanded.
    assert!(tags.get("children").is_none(), "{tags}");
    assert!(
        r.text.contains("    data.user.name: str = 'kit'"),
        "{}",
        r.text
    );
    assert_eq!(r.structured["nested_truncated"], false);
    let r = c.call(
        "debug",
        json!({"action": "variables", "filter": "data", "depth": 4}),
    );
    let user = child(var(&r.structured, "data"), "data.user");
    assert_eq!(
        child(child(user, "data.user.address"), "data.user.address.city")["value"],
        "'Oslo'"
    );
    assert_eq!(
        child(child(user, "data.user.tags"), "data.user.tags[1]")["value"],
        "'b'"
    );
    // expand by dotted path, with depth.
    let r = c.call(
        "debug",
        json!({"action": "variables", "expand": "data.user.address", "depth": 2}),
    );
    assert_eq!(
        var(&r.structured, "data.user.address.city")["value"],
        "'Oslo'",
        "{:?}",
        r.raw
    );
    let geo = var(&r.structured, "data.user.address.geo");
    assert_eq!(child(geo, "data.user.address.geo.lat")["value"], "59");
    let r = c.call(
        "debug",
        json!({"action": "variables", "expand": "data['user'].tags"}),
    );
    assert_eq!(
        var(&r.structured, "data.user.tags[0]")["value"],
        "'a'",
        "{:?}",
        r.raw
    );
    // Bounds: at most 50 children per value, 500 nested values in all.
    let r = c.call(
        "debug",
        json!({"action": "variables", "filter": "big", "depth": 2}),
    );
    let big = &r.structured["variables"][0];
    assert_eq!(big["name"], "big", "{:?}", r.raw);
    assert_eq!(big["children"].as_array().unwrap().len(), 50, "{big}");
    assert!(big["children_omitted"].as_u64().unwrap() >= 30, "{big}");
    let r = c.call(
        "debug",
        json!({"action": "variables", "filter": "grid", "depth": 3}),
    );
    assert_eq!(r.structured["nested_truncated"], true, "{:?}", r.raw);
    let rows = r.structured["variables"][0]["children"]
        .as_array()
        .unwrap()
        .clone();
    let nested: usize = rows.len()
        + rows
            .iter()
            .map(|row| row["children"].as_array().map_or(0, Vec::len))
            .sum::<usize>();
    assert_eq!(nested, 500, "{rows:?}");
    // Paging.
    let r = c.call(
        "debug",
        json!({"action": "variables", "expand": "big", "limit": 30}),
    );
    assert_eq!(r.structured["variables"].as_array().unwrap().len(), 30);
    assert_eq!(r.structured["next_offset"], 30, "{:?}", r.raw);
    assert!(r.structured["total"].as_u64().unwrap() >= 80);

    // From the 3rd hit on: the 4th pass stops too.
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["stopped_reason"], "breakpoint", "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "evaluate", "expression": "i"}));
    assert_eq!(r.structured["result"], "3", "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "remove_breakpoint", "path": "nested.py", "line": 4}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
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

/// The number after `tag` in `text` (`L00042` → 42).
fn tag_numbers(text: &str, tag: char) -> Vec<usize> {
    text.split(tag)
        .skip(1)
        .filter_map(|s| s.get(..5).and_then(|d| d.parse().ok()))
        .collect()
}

/// Issue #37's result budget, worst cases under defaults: 3,000 lines of quotes printed,
/// 150 locals of 1,000 quote characters, a 25-deep
/// recursion through a function with a 1,200-character (4-byte UTF-8) name. Each default
/// call stays under 40,000 bytes of structuredContent, says it was cut, and its paging field
/// continues exactly where it stopped. (Before: output 500 chunks ≈ 210 KB, variables
/// ≈ 200 KB, stack_trace ≈ 96 KB.) debugpy lists only the modules its frames ran in: modules
/// and loaded_sources are held by `page_on`, unit-tested in `src/debug/memory.rs`.
#[test]
fn default_results_stay_within_the_budget() {
    use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
    if !have_debugpy() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let mut prog = String::new();
    let deep = "\u{20000}".repeat(1200);
    prog.push_str(&format!(
        "\ndef {deep}(n):\n    if n == 0:\n        return 0\n    return {deep}(n - 1)\n\n"
    ));
    prog.push_str("def main():\n    for i in range(3000):\n        print(f\"L{i:05} \" + '\"' * 200, flush=True)\n");
    for i in 0..150 {
        prog.push_str(&format!("    v{i:03} = 'V{i:05}' + '\"' * 1000\n"));
    }
    let stop_vars = prog.lines().count() + 1;
    prog.push_str(&format!("    {deep}(25)\n\nmain()\n"));
    let stop_deep = prog.lines().position(|l| l.contains("return 0")).unwrap() + 1;
    std::fs::write(d.path().join("big.py"), &prog).unwrap();
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Modern);
    for line in [stop_vars, stop_deep] {
        let r = c.call(
            "debug",
            json!({"action": "set_breakpoint", "path": "big.py", "line": line}),
        );
        assert!(!r.is_error, "{:?}", r.raw);
    }
    let r = c.call(
        "debug",
        json!({"action": "launch", "script": "big.py", "stop_on_entry": false, "wait_ms": 60000}),
    );
    assert_eq!(r.structured["location"]["line"], stop_vars, "{:?}", r.raw);

    // output: the cursor stops after the last chunk shown; the next page goes on from it.
    let text_of = |r: &kitbag_testkit::ToolCall| {
        r.structured["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["text"].as_str().unwrap().to_string())
            .collect::<String>()
    };
    let first = c.call("debug", json!({"action": "output"}));
    assert!(json_len(&first.structured) < RESULT_BUDGET_BYTES);
    assert_eq!(first.structured["truncated"], true, "{}", first.text);
    let cursor = first.structured["cursor"].as_u64().unwrap();
    assert_eq!(
        cursor,
        first.structured["output"].as_array().unwrap().len() as u64
    );
    let second = c.call("debug", json!({"action": "output", "offset": cursor}));
    assert!(json_len(&second.structured) < RESULT_BUDGET_BYTES);
    // The chunk before the cursor is the first page's last; the one at it, the second's first.
    let before = c.call("debug", json!({"action": "output", "offset": cursor - 1}));
    assert_eq!(
        before.structured["output"][0],
        first.structured["output"][cursor as usize - 1]
    );
    assert_eq!(
        before.structured["output"][1],
        second.structured["output"][0]
    );
    let (a, b) = (
        tag_numbers(&text_of(&first), 'L'),
        tag_numbers(&text_of(&second), 'L'),
    );
    assert_eq!(a[0], 0);
    assert!(b[0] > *a.last().unwrap(), "{a:?} then {b:?}");

    // variables: next_offset after the last value shown.
    let first = c.call("debug", json!({"action": "variables"}));
    assert!(json_len(&first.structured) < RESULT_BUDGET_BYTES);
    let shown = names(&first);
    let next = first.structured["next_offset"].as_u64().unwrap();
    assert_eq!(next, shown.len() as u64);
    let second = c.call("debug", json!({"action": "variables", "offset": next}));
    let more = names(&second);
    let last: usize = shown.last().unwrap()[1..].parse().unwrap();
    assert_eq!(
        more[0],
        format!("v{:03}", last + 1),
        "{shown:?} then {more:?}"
    );

    // stack_trace: 20 default levels of a long-named function, cut; offset goes on.
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["location"]["line"], stop_deep, "{:?}", r.raw);
    let first = c.call("debug", json!({"action": "stack_trace"}));
    assert!(json_len(&first.structured) < RESULT_BUDGET_BYTES);
    assert_eq!(first.structured["truncated"], true);
    let frames = first.structured["frames"].as_array().unwrap().len() as u64;
    assert!((1..20).contains(&frames), "{frames}");
    let next = first.structured["next_offset"].as_u64().unwrap();
    assert_eq!(next, frames);
    let second = c.call("debug", json!({"action": "stack_trace", "offset": next}));
    assert_eq!(second.structured["frames"][0]["id"], next);
    assert_ne!(
        second.structured["frames"][0]["adapter_frame_id"],
        first.structured["frames"][frames as usize - 1]["adapter_frame_id"]
    );
    c.call("debug", json!({"action": "disconnect"}));
    c.shutdown();
}

/// Issue #37's result budget for `list_breakpoints`: 120 breakpoints, each with a
/// 20,000-character condition of quotes (40,000 bytes as JSON) and a log message of control
/// characters (6 bytes each as JSON) — ≈ 19 MB uncut. The listing bounds each field and cuts
/// the list at the last entry that fits, with `truncated`, `total` and a `next_offset` that
/// goes on exactly there. (No session needed: breakpoints are kept until a launch.)
#[test]
fn list_breakpoints_stays_within_the_budget() {
    use kitbag_shared::limits::{RESULT_BUDGET_BYTES, json_len};
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("many.py"), "x = 1\n".repeat(120)).unwrap();
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Modern);
    let condition = "\"".repeat(20_000);
    let log = "\u{1}".repeat(20_000);
    for line in 1..=120 {
        let r = c.call(
            "debug",
            json!({"action": "set_breakpoint", "path": "many.py", "line": line,
                "condition": condition, "log_message": log}),
        );
        assert!(!r.is_error, "{:?}", r.raw);
    }
    let ids = |r: &kitbag_testkit::ToolCall| -> Vec<i64> {
        r.structured["breakpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["id"].as_i64().unwrap())
            .collect()
    };
    let first = c.call("debug", json!({"action": "list_breakpoints"}));
    let size = json_len(&first.structured);
    assert!(size < RESULT_BUDGET_BYTES, "{size} bytes");
    assert_eq!(first.structured["truncated"], true);
    assert_eq!(first.structured["total"], 120);
    let shown = ids(&first);
    assert!(!shown.is_empty());
    let b = &first.structured["breakpoints"][0];
    assert!(b["condition"].as_str().unwrap().ends_with("[truncated]"));
    assert!(b["log_message"].as_str().unwrap().ends_with("[truncated]"));
    let next = first.structured["next_offset"].as_u64().unwrap();
    assert_eq!(next, shown.len() as u64);
    let second = c.call(
        "debug",
        json!({"action": "list_breakpoints", "offset": next}),
    );
    assert!(json_len(&second.structured) < RESULT_BUDGET_BYTES);
    let more = ids(&second);
    assert!(
        !more.iter().any(|id| shown.contains(id)),
        "{shown:?} then {more:?}"
    );
    // Paged to the end, every breakpoint is listed once.
    let mut all = shown;
    all.extend(more);
    let mut offset = second.structured["next_offset"].as_u64();
    while let Some(o) = offset {
        let r = c.call("debug", json!({"action": "list_breakpoints", "offset": o}));
        all.extend(ids(&r));
        offset = r.structured["next_offset"].as_u64();
    }
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 120);
    c.shutdown();
}
