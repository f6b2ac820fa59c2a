//! Attach to a running debugpy listener (the program calls `debugpy.listen` on a port it
//! picks), break into it, detach.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use kitbag_testkit::{Era, McpClient};
use serde_json::json;

use common::{KillOnDrop, bin, have_debugpy};

fn attach(era: Era) {
    if !have_debugpy() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    // debugpy picks the port and says it: a port chosen here and freed could be taken by
    // another test's listener before debugpy binds it.
    std::fs::write(
        d.path().join("spin.py"),
        "import time\nimport debugpy\n\n_, port = debugpy.listen((\"127.0.0.1\", 0))\nprint(port, flush=True)\ndebugpy.wait_for_client()\nn = 0\nwhile True:\n    n += 1\n    time.sleep(0.01)\n",
    )
    .unwrap();
    let mut debuggee = KillOnDrop(
        std::process::Command::new("python3")
            .arg("spin.py")
            .current_dir(d.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let port = listening_port(&mut debuggee.0);
    let mut c = McpClient::spawn(bin(), &[], d.path(), era);
    let r = c.call("debug", json!({"action": "attach", "port": port}));
    assert!(!r.is_error, "{:?}", r.raw);
    assert_eq!(r.structured["status"], "running", "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "threads"}));
    assert!(
        !r.structured["threads"].as_array().unwrap().is_empty(),
        "{:?}",
        r.raw
    );
    let r = c.call("debug", json!({"action": "pause"}));
    assert_eq!(r.structured["status"], "stopped", "{:?}", r.raw);
    assert_eq!(r.structured["stopped_reason"], "pause");
    let r = c.call("debug", json!({"action": "scopes"}));
    assert!(
        !r.structured["scopes"].as_array().unwrap().is_empty(),
        "{:?}",
        r.raw
    );
    // A pause may land in any thread's frame (debugpy's own threads included), so the
    // expression must not depend on which frame is on top.
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
    std::thread::sleep(Duration::from_millis(500));
    // Detach leaves the debuggee running.
    assert!(
        debuggee.0.try_wait().unwrap().is_none(),
        "attach target should survive a detach"
    );
    drop(debuggee);
    c.shutdown();
}

#[test]
fn attach_modern() {
    attach(Era::Modern);
}

#[test]
fn attach_handshake() {
    attach(Era::Handshake);
}

/// The port the debuggee printed on its first line of output (the script above prints it once
/// debugpy listens).
fn listening_port(child: &mut std::process::Child) -> u16 {
    use std::io::BufRead;
    let out = child.stdout.take().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(out).read_line(&mut line).unwrap();
    line.trim()
        .parse()
        .unwrap_or_else(|_| panic!("debugpy's port, got {line:?}"))
}
