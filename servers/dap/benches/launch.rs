//! Launch→first breakpoint stop and step_over round trip: kitbag-dap over MCP stdio vs the same
//! DAP exchange driven directly against debugpy (with the crate's own framing), in one run.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_dap::dap::Client;
use kitbag_testkit::{Era, McpClient};
use serde_json::json;

const PROG: &str = "x = 1\nfor i in range(100000):\n    x = x + 1\n    x = x - 1\nprint(x)\n";
const RUNS: usize = 5;
const STEPS: usize = 20;

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

async fn wait_stop(c: &Client) {
    loop {
        let n = c.notify.notified();
        if c.events.lock().unwrap().stopped.is_some() {
            return;
        }
        let _ = tokio::time::timeout(Duration::from_millis(50), n).await;
    }
}

async fn direct(dir: &Path) -> (f64, Vec<f64>) {
    let t = Instant::now();
    let prog = dir.join("loop.py");
    let c = Client::spawn("python3", &["-m".into(), "debugpy.adapter".into()], dir).unwrap();
    let to = Duration::from_secs(15);
    c.request("initialize", json!({"clientID": "bench", "adapterID": "debugpy", "linesStartAt1": true, "pathFormat": "path"}), to).await.unwrap();
    let rx = c
        .start(
            "launch",
            json!({"program": prog.to_string_lossy(), "console": "internalConsole"}),
        )
        .await
        .unwrap();
    while !c.events.lock().unwrap().initialized {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    c.request(
        "setBreakpoints",
        json!({"source": {"path": prog.to_string_lossy()}, "breakpoints": [{"line": 3}]}),
        to,
    )
    .await
    .unwrap();
    c.request("configurationDone", json!({}), to).await.unwrap();
    rx.await.unwrap();
    wait_stop(&c).await;
    let launch = t.elapsed().as_secs_f64() * 1000.0;
    let tid = c.events.lock().unwrap().stopped.as_ref().unwrap()["threadId"].clone();
    c.request(
        "setBreakpoints",
        json!({"source": {"path": prog.to_string_lossy()}, "breakpoints": []}),
        to,
    )
    .await
    .unwrap();
    let mut steps = Vec::new();
    for _ in 0..STEPS {
        let t = Instant::now();
        let before = c.events.lock().unwrap().stop_count;
        c.events.lock().unwrap().stopped = None;
        c.request("next", json!({"threadId": tid}), to)
            .await
            .unwrap();
        while c.events.lock().unwrap().stop_count == before {
            let n = c.notify.notified();
            let _ = tokio::time::timeout(Duration::from_millis(50), n).await;
        }
        c.request("stackTrace", json!({"threadId": tid, "levels": 1}), to)
            .await
            .unwrap();
        steps.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let _ = c
        .request("disconnect", json!({"terminateDebuggee": true}), to)
        .await;
    c.kill();
    (launch, steps)
}

fn kitbag(dir: &Path) -> (f64, Vec<f64>) {
    let mut c = McpClient::spawn(
        Path::new(env!("CARGO_BIN_EXE_kitbag-dap")),
        &[],
        dir,
        Era::Modern,
    );
    let t = Instant::now();
    c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": "loop.py", "line": 3}),
    );
    let r = c.call("debug", json!({"action": "launch", "program": "loop.py"}));
    assert_eq!(r.structured["status"], "stopped");
    let launch = t.elapsed().as_secs_f64() * 1000.0;
    c.call(
        "debug",
        json!({"action": "remove_breakpoint", "path": "loop.py", "line": 3}),
    );
    let mut steps = Vec::new();
    for _ in 0..STEPS {
        let t = Instant::now();
        let r = c.call("debug", json!({"action": "step_over"}));
        assert_eq!(r.structured["status"], "stopped");
        steps.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    c.call("debug", json!({"action": "disconnect"}));
    c.shutdown();
    (launch, steps)
}

fn main() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("loop.py"), PROG).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (mut kl, mut ks, mut dl, mut ds) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let (l, s) = rt.block_on(direct(d.path()));
        dl.push(l);
        ds.extend(s);
        let (l, s) = kitbag(d.path());
        kl.push(l);
        ks.extend(s);
    }
    let (kl, dl, ks, ds) = (p50(kl), p50(dl), p50(ks), p50(ds));
    println!(
        "debugpy launch→breakpoint p50: kitbag {kl:.1} ms, direct {dl:.1} ms, added {:.1} ms (x{:.2})",
        kl - dl,
        kl / dl
    );
    println!(
        "debugpy step_over p50:        kitbag {ks:.2} ms, direct {ds:.2} ms, added {:.2} ms (x{:.2})",
        ks - ds,
        ks / ds
    );
}
