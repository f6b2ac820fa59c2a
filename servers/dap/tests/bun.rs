//! Bun through its own inspector (WebKit's protocol, kitbag's CDP bridge): the seed's launch
//! example (`runtime: "bun"`, a TypeScript entry point) and the usual session, the stop on
//! entry in a script that imports another module, `watch` that cannot change the program,
//! and attach to a `bun --inspect` process.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::process::CommandExt;

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
    // watch (the default) never changes the program: JavaScriptCore has no side-effect check,
    // so an assignment, an increment or a call is refused before it runs, naming
    // `expression`; `a` is as it was. repl may change it: the program prints 10 + 1.
    for expr in ["a = 5", "a++", "Math.random()", "b += 1"] {
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
    // The built-in string and array reads pass (seed 004's `user.permissions.includes('write')`
    // form), once the paused program shows each is the built-in one; a method of that name on
    // anything else is refused before any of the expression runs.
    for (expr, want) in [
        ("user.role.startsWith('ad')", "true"),
        ("[1, 41].includes(a)", "true"),
    ] {
        let r = c.call("debug", json!({"action": "evaluate", "expression": expr}));
        assert_eq!(r.structured["result"], want, "{expr}: {:?}", r.raw);
    }
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "user.includes('x')"}),
    );
    assert_eq!(r.error_code(), Some("invalid_params"), "{:?}", r.raw);
    assert_eq!(r.structured["error"]["detail"]["field"], "expression");
    let r = c.call("debug", json!({"action": "evaluate", "expression": "a"}));
    assert_eq!(r.structured["result"], "41", "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "a = 10", "context": "repl"}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let kids = common::descendants(c.pid());
    // Past its last line the program has exited, with its exit code (kitbag's session asks
    // Bun not to keep the program alive for the debugger).
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["status"], "exited", "{:?}", r.raw);
    assert_eq!(r.structured["exit_code"], 0, "{:?}", r.raw);
    // The output arrives through the program's pipe: give a loaded machine a moment.
    let mut r = c.call("debug", json!({"action": "output"}));
    for _ in 0..50 {
        if r.text.contains("result 11") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        r = c.call("debug", json!({"action": "output"}));
    }
    assert!(
        r.text.contains("start test --port 3000") && r.text.contains("result 11"),
        "{}",
        r.text
    );
    assert!(!r.text.contains("Bun Inspector"), "{}", r.text);
    common::all_gone(&kids);
    let r = c.call("debug", json!({"action": "status"}));
    assert_eq!(r.structured["status"], "exited", "{:?}", r.raw);
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

/// The seed's fixture shape: src/main.ts imports src/auth.ts. ES modules run their imports
/// first, and the runtime's first pause is inside auth.ts; `stop_on_entry` stops at the
/// script's own first line all the same (the import has run by then). A program that ends
/// with a code reports it.
pub const MAIN_TS: &str = "import { check } from \"./auth.ts\";\n\nconst token: string = \"t0k\";\nconst ok = check(token);\nconsole.log(\"ok\", ok);\nprocess.exit(3);\n";
pub const AUTH_TS: &str = "// auth\nconsole.log(\"auth loaded\");\n\nexport function check(token: string): boolean {\n  return token.length > 0;\n}\n";

#[test]
fn bun_stops_on_entry_in_the_script_not_its_imports() {
    let Some(bun) = bun() else { return };
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("src")).unwrap();
    std::fs::write(d.path().join("src/main.ts"), MAIN_TS).unwrap();
    std::fs::write(d.path().join("src/auth.ts"), AUTH_TS).unwrap();
    let mut c = bun_client(d.path(), &bun);
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "bun", "script": "./src/main.ts"}),
    );
    assert_eq!(r.structured["stopped_reason"], "entry", "{:?}", r.raw);
    assert_eq!(
        r.structured["location"]["path"], "src/main.ts",
        "{:?}",
        r.raw
    );
    assert_eq!(r.structured["location"]["line"], 1, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "step_over"}));
    assert_eq!(
        r.structured["location"]["path"], "src/main.ts",
        "{:?}",
        r.raw
    );
    let r = c.call("debug", json!({"action": "continue"}));
    assert_eq!(r.structured["status"], "exited", "{:?}", r.raw);
    assert_eq!(r.structured["exit_code"], 3, "{:?}", r.raw);
    c.shutdown();
}

/// A program that runs until it is stopped: what the attach tests attach to.
fn write_spin(dir: &std::path::Path) {
    std::fs::write(
        dir.join("spin.ts"),
        "let n: number = 0;\nsetInterval(() => {\n  n += 1;\n}, 5);\n",
    )
    .unwrap();
}

/// kitbag-dap with this Bun, in `dir`.
fn bun_client(dir: &std::path::Path, bun: &str) -> McpClient {
    McpClient::spawn_with_env(bin(), &[], dir, Era::Modern, &[("KITBAG_DAP_BUN", bun)])
}

/// Attach to `bun --inspect=127.0.0.1:0`: Bun lists no targets (404 on /json/list) and serves
/// only the random path it printed, so attach by port alone names `url`; attach by that `url`
/// breaks in, detaches leaving it running, and a second attach's plain disconnect ends it
/// (seed 004: terminate_debuggee defaults to true after an attach too).
#[test]
fn bun_attach() {
    let Some(bun) = bun() else { return };
    let d = tempfile::tempdir().unwrap();
    write_spin(d.path());
    let (mut target, url) = common::inspected(&bun, "spin.ts", d.path());
    let port = common::port_of(&url);
    let mut c = bun_client(d.path(), &bun);
    let r = c.call(
        "debug",
        json!({"action": "attach", "runtime": "bun", "port": port, "host": "localhost"}),
    );
    assert_eq!(r.error_code(), Some("invalid_params"), "{:?}", r.raw);
    assert_eq!(
        r.structured["error"]["detail"]["field"], "url",
        "{:?}",
        r.raw
    );
    common::attach_detach_then_end(
        &mut c,
        &json!({"action": "attach", "runtime": "bun", "url": url}),
        &mut target,
    );
    c.shutdown();
}

/// Seed 004's attach by port alone, to a Bun whose output goes to a log file (a program started
/// in the background): the address Bun printed there is read back, and the attach runs.
#[test]
fn bun_attach_by_port_reads_the_printed_address_from_the_programs_log() {
    let Some(bun) = bun() else { return };
    let d = tempfile::tempdir().unwrap();
    write_spin(d.path());
    let log = std::fs::File::create(d.path().join("app.log")).unwrap();
    let mut target = common::KillOnDrop(
        std::process::Command::new(&bun)
            .args(["--inspect=127.0.0.1:0", "spin.ts"])
            .current_dir(d.path())
            .process_group(0)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let mut url = None;
    kitbag_testkit::wait_until("bun printed its address", 15, || {
        let text = std::fs::read_to_string(d.path().join("app.log")).unwrap_or_default();
        url = text
            .split_whitespace()
            .find(|w| w.starts_with("ws://"))
            .map(String::from);
        url.is_some()
    });
    let port = common::port_of(&url.unwrap());
    let mut c = bun_client(d.path(), &bun);
    common::attach_detach_then_end(
        &mut c,
        &json!({"action": "attach", "runtime": "bun", "port": port, "host": "localhost"}),
        &mut target,
    );
    c.shutdown();
}
