//! Attach to a running `python -m debugpy --listen` process, break into it, detach.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use kitbag_testkit::{Era, McpClient};
use serde_json::json;

use common::{KillOnDrop, bin, free_port, have_debugpy, wait_listening};

fn attach(era: Era) {
    if !have_debugpy() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("spin.py"),
        "import time\nn = 0\nwhile True:\n    n += 1\n    time.sleep(0.01)\n",
    )
    .unwrap();
    let port = free_port();
    let mut debuggee = KillOnDrop(
        std::process::Command::new("python3")
            .args([
                "-m",
                "debugpy",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--wait-for-client",
                "spin.py",
            ])
            .current_dir(d.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(&mut debuggee, port, Duration::from_secs(15));
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
