//! Launch→first breakpoint stop and step_over round trip: kitbag-dap over MCP stdio vs the same
//! DAP exchange driven directly against the adapter (with the crate's own framing), in one run,
//! for debugpy, for lldb-dap on a C program built with `cc -g`, and for Delve on a Go program
//! (built by Delve on each launch, both sides). `KITBAG_BENCH_ONLY=debugpy|lldb-dap|delve`
//! runs one of them.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_dap::dap::{Client, RunState};
use kitbag_testkit::{Era, McpClient};
use serde_json::json;

const PROG: &str = "x = 1\nfor i in range(100000):\n    x = x + 1\n    x = x - 1\nprint(x)\n";
const C_PROG: &str = "#include <stdio.h>\n\nint main(void) {\n    for (long i = 0; i < 100000; i++) {\n        volatile long x = i;\n        x = x + 1;\n    }\n    puts(\"done\");\n    return 0;\n}\n";
const GO_PROG: &str = "package main\n\nfunc main() {\n\tx := 0\n\tfor i := 0; i < 100000; i++ {\n\t\tx = x + i\n\t\tx = x - i\n\t}\n\tprintln(x)\n}\n";
const LLDB_DAP: &str = "/usr/bin/lldb-dap-22";
const RUNS: usize = 11;
const STEPS: usize = 10;

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The thread of the next stop (the program must stop, not end, within the request timeout).
async fn wait_stop(c: &Client) -> i64 {
    match c.events().settle(Duration::from_secs(15)).await {
        RunState::Stopped(stop) => stop.thread_id().unwrap(),
        other => panic!("expected a stop, got {other:?}"),
    }
}

/// One adapter under test: how to start it directly and how kitbag names it.
struct Case {
    label: &'static str,
    runtime: &'static str,
    /// Root-relative program to launch and source file / line of the breakpoint.
    program: &'static str,
    source: &'static str,
    line: i64,
    command: String,
    args: Vec<String>,
    adapter_id: &'static str,
    launch: serde_json::Value,
    /// The adapter dials in (`--client-addr`, Delve) instead of speaking on stdio.
    dial_in: bool,
}

async fn direct(dir: &Path, case: &Case) -> (f64, Vec<f64>) {
    let t = Instant::now();
    let src = dir.join(case.source);
    let to = Duration::from_secs(15);
    let c = if case.dial_in {
        Client::spawn_dialing_in(&case.command, &case.args, dir, to)
            .await
            .unwrap()
    } else {
        Client::spawn(&case.command, &case.args, dir).unwrap()
    };
    c.request("initialize", json!({"clientID": "bench", "adapterID": case.adapter_id, "linesStartAt1": true, "columnsStartAt1": true, "pathFormat": "path", "supportsVariableType": true}), to).await.unwrap();
    let rx = c.start("launch", case.launch.clone()).await.unwrap();
    assert!(c.events().started(Instant::now() + to).await);
    // The same configuration kitbag sends (its launch also stops on uncaught exceptions),
    // both requests in flight at once.
    let bp = c
        .start(
            "setBreakpoints",
            json!({"source": {"path": src.to_string_lossy()}, "breakpoints": [{"line": case.line}]}),
        )
        .await
        .unwrap();
    let exc = c
        .start("setExceptionBreakpoints", json!({"filters": ["uncaught"]}))
        .await
        .unwrap();
    bp.await.unwrap();
    exc.await.unwrap();
    c.request("configurationDone", json!({}), to).await.unwrap();
    let resp = rx.await.unwrap();
    assert_eq!(resp["success"], true, "{resp}");
    let tid = wait_stop(&c).await;
    // Where it stopped: what kitbag's launch answer reports too.
    let top = c
        .request("stackTrace", json!({"threadId": tid, "levels": 1}), to)
        .await
        .unwrap();
    assert_eq!(top["stackFrames"][0]["line"], case.line, "{top}");
    let launch = t.elapsed().as_secs_f64() * 1000.0;
    c.request(
        "setBreakpoints",
        json!({"source": {"path": src.to_string_lossy()}, "breakpoints": []}),
        to,
    )
    .await
    .unwrap();
    let mut steps = Vec::new();
    for _ in 0..STEPS {
        let t = Instant::now();
        let mark = c.events().stop_mark();
        c.request("next", json!({"threadId": tid}), to)
            .await
            .unwrap();
        c.events().resumed(mark);
        wait_stop(&c).await;
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

fn kitbag(dir: &Path, case: &Case) -> (f64, Vec<f64>) {
    let mut c = McpClient::spawn(
        Path::new(env!("CARGO_BIN_EXE_kitbag-dap")),
        &[],
        dir,
        Era::Modern,
    );
    let t = Instant::now();
    let r = c.call(
        "debug",
        json!({"action": "set_breakpoint", "path": case.source, "line": case.line}),
    );
    assert!(!r.is_error, "{:?}", r.raw);
    let r = c.call(
        "debug",
        json!({"action": "launch", "runtime": case.runtime, "script": case.program, "stop_on_entry": false}),
    );
    assert_eq!(r.structured["status"], "stopped", "{:?}", r.raw);
    assert_eq!(r.structured["location"]["line"], case.line, "{:?}", r.raw);
    let launch = t.elapsed().as_secs_f64() * 1000.0;
    c.call(
        "debug",
        json!({"action": "remove_breakpoint", "path": case.source, "line": case.line}),
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

fn measure(rt: &tokio::runtime::Runtime, dir: &Path, case: &Case) {
    let (mut kl, mut ks, mut dl, mut ds) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // One discarded warm-up of each side (cold caches, .pyc writes), then alternate which
    // side goes first so neither always runs right after the other's teardown.
    rt.block_on(direct(dir, case));
    kitbag(dir, case);
    for run in 0..RUNS {
        for side in [run % 2, 1 - run % 2] {
            if side == 0 {
                let (l, s) = rt.block_on(direct(dir, case));
                dl.push(l);
                ds.extend(s);
            } else {
                let (l, s) = kitbag(dir, case);
                kl.push(l);
                ks.extend(s);
            }
        }
    }
    // Launch times swing by hundreds of ms with the box's load; the median of the per-run
    // differences (each pair run back to back) is steadier than the difference of medians.
    let paired = p50(kl.iter().zip(&dl).map(|(k, d)| k - d).collect());
    let (kl, dl, ks, ds) = (p50(kl), p50(dl), p50(ks), p50(ds));
    let name = case.label;
    println!(
        "{name} launch→breakpoint p50: kitbag {kl:.1} ms, direct {dl:.1} ms, added {:.1} ms (x{:.2}); paired p50 added {paired:.1} ms",
        kl - dl,
        kl / dl
    );
    println!(
        "{name} step_over p50:        kitbag {ks:.2} ms, direct {ds:.2} ms, added {:.2} ms (x{:.2})",
        ks - ds,
        ks / ds
    );
}

fn main() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("loop.py"), PROG).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let only = std::env::var("KITBAG_BENCH_ONLY").unwrap_or_default();
    let py = d.path().join("loop.py");
    let python = Case {
        label: "debugpy",
        runtime: "python",
        program: "loop.py",
        source: "loop.py",
        line: 3,
        command: "python3".into(),
        args: vec!["-m".into(), "debugpy.adapter".into()],
        adapter_id: "debugpy",
        launch: json!({"program": py.to_string_lossy(), "cwd": d.path().to_string_lossy(), "console": "internalConsole", "justMyCode": true, "stopOnEntry": false}),
        dial_in: false,
    };
    if only.is_empty() || only == "debugpy" {
        measure(&rt, d.path(), &python);
    }
    if only.is_empty() || only == "lldb-dap" {
        lldb_case(&rt, d.path());
    }
    if only.is_empty() || only == "delve" {
        delve_case(&rt, d.path());
    }
}

fn lldb_case(rt: &tokio::runtime::Runtime, dir: &Path) {
    if !Path::new(LLDB_DAP).is_file() {
        println!("lldb-dap: SKIP ({LLDB_DAP} not installed)");
        return;
    }
    std::fs::write(dir.join("loop.c"), C_PROG).unwrap();
    let st = std::process::Command::new("cc")
        .args(["-g", "-O0", "-o", "loop", "loop.c"])
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(st.success(), "cc failed");
    let exe = dir.join("loop");
    let c = Case {
        label: "lldb-dap",
        runtime: "lldb",
        program: "loop",
        source: "loop.c",
        line: 5,
        command: LLDB_DAP.into(),
        args: vec![],
        adapter_id: "lldb-dap",
        launch: json!({"program": exe.to_string_lossy(), "args": [], "cwd": dir.to_string_lossy(), "stopOnEntry": false}),
        dial_in: false,
    };
    measure(rt, dir, &c);
}

fn delve_case(rt: &tokio::runtime::Runtime, dir: &Path) {
    let Some(dlv) = kitbag_dap::config::locate("dlv") else {
        println!("delve: SKIP (dlv not installed)");
        return;
    };
    std::fs::write(dir.join("loop.go"), GO_PROG).unwrap();
    std::fs::write(dir.join("go.mod"), "module example.com/loop\n\ngo 1.19\n").unwrap();
    let out = tempfile::tempdir().unwrap();
    let c = Case {
        label: "delve",
        runtime: "go",
        program: "loop.go",
        source: "loop.go",
        line: 6,
        command: dlv.to_string_lossy().into_owned(),
        args: vec!["dap".into()],
        adapter_id: "go",
        launch: json!({"mode": "debug", "program": dir.join("loop.go").to_string_lossy(), "args": [], "cwd": dir.to_string_lossy(), "output": out.path().join("debug_bin")}),
        dial_in: true,
    };
    measure(rt, dir, &c);
}
