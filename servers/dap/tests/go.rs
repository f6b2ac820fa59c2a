//! The real Delve adapter (`dlv dap`) debugging a Go program.
#![allow(clippy::unwrap_used)]

mod common;

use kitbag_testkit::{Era, McpClient};
use serde_json::json;

use common::{bin, delve_headless, disconnect_leaves_nothing, have_dlv, var};

const SRC: &str = "package main\n\nimport \"os\"\n\nfunc square(v int) int {\n\tr := v * v\n\treturn r\n}\n\nfunc main() {\n\tcount := 7\n\tsq := square(count)\n\tprintln(\"sq\", sq)\n\tos.Exit(3)\n}\n";

/// A Go module holding `main.go`.
fn go_project(src: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("main.go"), src).unwrap();
    std::fs::write(d.path().join("go.mod"), "module example.com/t\n\ngo 1.19\n").unwrap();
    d
}

fn go_session(era: Era, runtime: &str, config: Option<&str>) {
    if !have_dlv() {
        return;
    }
    let d = go_project(SRC);
    let mut args = Vec::new();
    if let Some(toml) = config {
        std::fs::write(d.path().join("dap.toml"), toml).unwrap();
        args = vec!["--config", "dap.toml"];
    }
    let mut c = McpClient::spawn(bin(), &args, d.path(), era);
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "main.go", "line": 12}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    // Stop on entry (the default) is main.main's first line, not the runtime's start-up.
    // A --config runtime of another name gets the adapter's own stopOnEntry (Delve's is
    // before any Go code): that one launches without.
    let builtin = runtime == "go";
    let mut r = c.call(
        "debug",
        json!({"action": "launch", "runtime": runtime, "script": "main.go", "stop_on_entry": builtin}),
    );
    if builtin {
        assert_eq!(r.structured["status"], "stopped", "{:?}", r.raw);
        assert_eq!(r.structured["stopped_reason"], "entry", "{:?}", r.raw);
        assert_eq!(
            r.structured["location"]["function"], "main.main",
            "{:?}",
            r.raw
        );
        assert_eq!(r.structured["location"]["path"], "main.go");
        r = c.call("debug", json!({"action": "continue"}));
    }
    assert_eq!(r.structured["stopped_reason"], "breakpoint", "{:?}", r.raw);
    assert_eq!(r.structured["location"]["line"], 12, "{:?}", r.raw);
    assert_eq!(r.structured["location"]["path"], "main.go");
    let r = c.call("debug", json!({"action": "variables"}));
    let count = var(&r.structured, "count");
    assert_eq!(count["value"], "7");
    assert_eq!(count["type"], "int");
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "count * 3"}),
    );
    assert_eq!(r.structured["result"], "21", "{:?}", r.raw);
    // Go stops on the function's own line when stepping in.
    let r = c.call("debug", json!({"action": "step_into"}));
    assert_eq!(
        r.structured["location"]["function"], "main.square",
        "{:?}",
        r.raw
    );
    assert_eq!(r.structured["location"]["line"], 5, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "step_over"}));
    assert_eq!(r.structured["location"]["line"], 6, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "step_over"}));
    assert_eq!(r.structured["location"]["line"], 7, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "variables"}));
    assert_eq!(var(&r.structured, "v")["value"], "7");
    assert_eq!(var(&r.structured, "r")["value"], "49");
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["status"], "exited", "{:?}", r.raw);
    // Delve 1.20 sends no `exited` event, so no exit code; when one comes it must be right.
    assert!(
        r.structured["exit_code"].is_null() || r.structured["exit_code"] == 3,
        "{:?}",
        r.raw
    );
    // The program's own output (println writes to stderr) reaches `output`.
    let mut printed = String::new();
    for _ in 0..50 {
        let o = c.call("debug", json!({"action": "output"}));
        printed = o.text.clone();
        if printed.contains("sq 49") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(printed.contains("sq 49"), "{printed}");
    disconnect_leaves_nothing(&mut c);
    // Delve builds the program beside its source; nothing of that build is left there.
    let left: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("__debug_bin"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    c.shutdown();
}

#[test]
fn go_with_delve_handshake() {
    go_session(Era::Handshake, "go", None);
}

#[test]
fn go_with_delve_modern() {
    go_session(Era::Modern, "go", None);
}

/// A configured `go` adapter that names no transport still dials in (the runtime's default),
/// and an explicit `transport = "client-addr"` works for any runtime name.
#[test]
fn go_with_configured_delve() {
    go_session(
        Era::Handshake,
        "go",
        Some("[dap.adapters.go]\ncommand = [\"dlv\", \"dap\"]\n"),
    );
    go_session(
        Era::Handshake,
        "golang",
        Some(
            "[dap.adapters.golang]\ncommand = [\"dlv\", \"dap\"]\ntransport = \"client-addr\"\n\
             [dap.adapters.golang.launch]\nmode = \"debug\"\n",
        ),
    );
}

const SPIN: &str = "package main\n\nimport \"time\"\n\nfunc main() {\n\tn := 0\n\tfor {\n\t\tn++\n\t\ttime.Sleep(10 * time.Millisecond)\n\t}\n}\n";

/// Attach to a program already running under a headless Delve server, break in, detach.
fn attach(era: Era) {
    if !have_dlv() {
        return;
    }
    let d = go_project(SPIN);
    let (mut server, port) = delve_headless(d.path());
    // A breakpoint set before attaching is hit once the attach resumes the program (it waits
    // halted: a server started with --continue runs on its own, and Delve 1.20 then never
    // answers a `pause`).
    let mut c = McpClient::spawn(bin(), &[], d.path(), era);
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "main.go", "line": 8}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "attach", "runtime": "go", "port": port, "wait_ms": 5000}),
    );
    assert_eq!(r.structured["status"], "stopped", "{:?}", r.raw);
    assert_eq!(r.structured["location"]["path"], "main.go", "{:?}", r.raw);
    assert_eq!(r.structured["location"]["line"], 8, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "variables"}));
    assert_eq!(var(&r.structured, "n")["type"], "int", "{:?}", r.raw);
    // Without the breakpoint it runs on until paused.
    let r = c.call(
        "debug",
        json!({"action": "remove_breakpoint", "path": "main.go", "line": 8}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "continue", "wait_ms": 300}));
    assert_eq!(r.structured["status"], "running", "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "pause"}));
    assert_eq!(r.structured["status"], "stopped", "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "2 + 3"}),
    );
    assert_eq!(r.structured["result"], "5", "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "disconnect", "terminate_debuggee": false}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    assert!(r.text.contains("detached"), "{}", r.text);
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(
        server.0.try_wait().unwrap().is_none(),
        "the Delve server and its program should survive a detach"
    );
    c.shutdown();
    // The test's own cleanup: Delve and the program it started go together.
    let program = kitbag_testkit::child_pids(server.0.id());
    assert!(!program.is_empty(), "Delve runs the program as its child");
    drop(server);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while program.iter().any(|&p| kitbag_testkit::process_alive(p)) {
        assert!(
            std::time::Instant::now() < deadline,
            "the debuggee outlived its Delve server"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn go_attach_handshake() {
    attach(Era::Handshake);
}

#[test]
fn go_attach_modern() {
    attach(Era::Modern);
}

/// A program that does not compile: the launch fails with the compiler's message, and no
/// adapter is left behind.
#[test]
fn go_build_error_is_reported() {
    if !have_dlv() {
        return;
    }
    let d = go_project("package main\n\nfunc main() {\n\tx := undefinedName + 1\n}\n");
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Handshake);
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "go", "program": "main.go", "stop_on_entry": false}),
    );
    assert!(r.is_error, "{:?}", r.raw);
    assert!(r.text.contains("undefinedName"), "{}", r.text);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        common::descendants(c.pid()).is_empty(),
        "an adapter outlived the failed launch"
    );
    let r = c.call("debug", json!({"action": "status"}));
    assert!(!r.is_error, "{:?}", r.raw);
    c.shutdown();
}

/// The client goes away mid-session without `disconnect`: Delve, the program and the build
/// are all gone, and nothing was ever built into the project.
#[test]
fn go_client_gone_leaves_nothing() {
    if !have_dlv() {
        return;
    }
    let d = go_project(SRC);
    // The server's temporary directory, to see the build land there and go away.
    let tmp = tempfile::tempdir().unwrap();
    let tmp_s = tmp.path().to_str().unwrap();
    let mut c =
        McpClient::spawn_with_env(bin(), &[], d.path(), Era::Handshake, &[("TMPDIR", tmp_s)]);
    c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "main.go", "line": 12}),
    );
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "go", "program": "main.go", "stop_on_entry": false}),
    );
    assert_eq!(r.structured["status"], "stopped", "{:?}", r.raw);
    let names = |dir: &std::path::Path| -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    let mut project = names(d.path());
    project.sort();
    assert_eq!(project, ["go.mod", "main.go"], "built into the project");
    let build_dirs = |dir: &std::path::Path| -> Vec<String> {
        names(dir)
            .into_iter()
            .filter(|n| n.starts_with("kitbag-dap-go-"))
            .collect()
    };
    assert_eq!(build_dirs(tmp.path()).len(), 1, "{:?}", names(tmp.path()));
    let kids = common::descendants(c.pid());
    assert!(!kids.is_empty());
    c.shutdown();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while kids.iter().any(|&p| kitbag_testkit::process_alive(p)) {
        assert!(
            std::time::Instant::now() < deadline,
            "Delve or the program survived the client"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // The server exits with its client and takes the build directory with it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while !build_dirs(tmp.path()).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "build directory left: {:?}",
            build_dirs(tmp.path())
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

const STRUCTS: &str = "package main\n\ntype Point struct {\n\tX, Y int\n\tTag  string\n}\n\nfunc area(p Point) int {\n\treturn p.X * p.Y\n}\n\nfunc main() {\n\tp := Point{X: 2, Y: 3, Tag: \"box\"}\n\ta := area(p)\n\tprintln(a)\n}\n";

/// More of the tool over Delve: a function breakpoint, threads, the stack, scopes, a struct
/// expanded, step out.
#[test]
fn go_function_breakpoint_stack_and_structs() {
    if !have_dlv() {
        return;
    }
    let d = go_project(STRUCTS);
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Handshake);
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "main.go", "line": 14}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "go", "program": "main.go", "stop_on_entry": false}),
    );
    assert_eq!(r.structured["location"]["line"], 14, "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "set_function_breakpoint", "name": "main.area"}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "variables", "depth": 2}));
    let p = var(&r.structured, "p");
    assert_eq!(p["type"], "main.Point", "{p}");
    let fields = p["children"].as_array().unwrap_or_else(|| panic!("{p}"));
    let field = |n: &str| {
        fields
            .iter()
            .find(|f| f["name"] == n)
            .unwrap_or_else(|| panic!("{p}"))["value"]
            .clone()
    };
    assert_eq!(field("p.X"), "2");
    assert_eq!(field("p.Tag"), "\"box\"");
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(
        r.structured["location"]["function"], "main.area",
        "{:?}",
        r.raw
    );
    let r = c.call("debug", json!({"action": "stack_trace"}));
    let frames = r.structured["frames"]
        .as_array()
        .unwrap_or_else(|| panic!("{:?}", r.raw));
    assert!(frames.len() >= 2, "{:?}", r.raw);
    assert_eq!(frames[0]["name"], "main.area", "{:?}", r.raw);
    assert_eq!(frames[1]["name"], "main.main", "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "threads"}));
    assert!(
        !r.structured["threads"].as_array().unwrap().is_empty(),
        "{:?}",
        r.raw
    );
    let r = c.call("debug", json!({"action": "scopes"}));
    assert!(
        !r.structured["scopes"].as_array().unwrap().is_empty(),
        "{:?}",
        r.raw
    );
    let r = c.call("debug", json!({"action": "step_out"}));
    assert_eq!(
        r.structured["location"]["function"], "main.main",
        "{:?}",
        r.raw
    );
    assert_eq!(r.structured["location"]["line"], 14, "{:?}", r.raw);
    disconnect_leaves_nothing(&mut c);
    c.shutdown();
}
