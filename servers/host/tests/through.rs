//! Issue #22's single-server hardening tests again, through `kitbag serve`: the symlink-swap
//! race against files and search, a page nested 50,000 levels deep for web, and commands that
//! leave their process group for shell. What a user runs is the host; it must hold there too.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kitbag_testkit::race::{Swapper, diff, sentinel, snapshot};
use kitbag_testkit::{Era, McpClient, pids_with_cmdline};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

/// `kitbag serve` with only the given families, each with `--root root` and `extra` args.
fn host(root: &Path, families: &[(&str, &[&str])]) -> McpClient {
    let mut mcp = serde_json::Map::new();
    for (family, extra) in families {
        let mut args = vec![json!("server"), json!(family), json!("--root"), json!(root)];
        args.extend(extra.iter().map(|a| json!(a)));
        mcp.insert(
            (*family).to_string(),
            // Started with the host: the tests compare its pid before and after calls.
            json!({"command": bin(), "args": args, "lazy": false}),
        );
    }
    let cfg: PathBuf = root.join("agent.json");
    std::fs::write(&cfg, json!({ "mcp": mcp }).to_string()).expect("w");
    McpClient::spawn(
        bin(),
        &["--config", cfg.to_str().expect("utf-8"), "serve"],
        root,
        Era::Handshake,
    )
}

#[test]
fn symlink_swap_race_through_the_host() {
    let root = tempfile::tempdir().expect("tmp");
    let outside = tempfile::tempdir().expect("tmp");
    let mark = sentinel();
    std::fs::write(outside.path().join("f.txt"), format!("{mark}\n")).expect("w");
    let before = snapshot(outside.path());
    let d = root.path().join("d");
    std::fs::create_dir(&d).expect("mkdir");
    std::fs::write(d.join("f.txt"), "inside\n").expect("w");
    symlink(outside.path(), root.path().join("link")).expect("ln");
    let mut c = host(root.path(), &[("files", &[]), ("search", &[])]);
    let swapper = Swapper::start(&d, &root.path().join("link"), Duration::from_secs(4));
    let (mut calls, mut ok, mut leaks) = (0u64, 0u64, 0u64);
    let mut i = 0u64;
    while swapper.running() {
        i += 1;
        let (tool, args) = match i % 4 {
            0 => ("file_read", json!({"path": "d/f.txt"})),
            1 => (
                "search_grep",
                json!({"pattern": "SENTINEL|inside", "path": "d", "output_mode": "content"}),
            ),
            2 => (
                "file_write",
                json!({"path": "d/new.txt", "content": format!("{i}\n")}),
            ),
            _ => ("file_list", json!({"path": "d"})),
        };
        let r = c.call(tool, args);
        calls += 1;
        ok += u64::from(!r.is_error);
        if r.raw.to_string().contains(&mark) {
            leaks += 1;
        }
    }
    let swaps = swapper.finish();
    let changed = diff(&before, &snapshot(outside.path()));
    eprintln!(
        "race through the host: {swaps} swaps, {calls} calls ({ok} succeeded), {leaks} leaks, {} outside changes",
        changed.len()
    );
    assert!(swaps > 0 && ok > 0);
    assert_eq!(leaks, 0, "an answer carried the outside file");
    assert!(changed.is_empty(), "outside changed: {changed:?}");
}

#[test]
fn a_deeply_nested_page_through_the_host() {
    let root = tempfile::tempdir().expect("tmp");
    let page = format!(
        "<!DOCTYPE html><html><body>{}innermost b</body></html>",
        "<b>".repeat(50_000)
    );
    let port = kitbag_testkit::http::serve_page(page.into_bytes());
    let mut c = host(root.path(), &[("web", &["--allow-host", "127.0.0.1"])]);
    let status = |c: &mut McpClient| -> Value {
        let s = c.call("host_status", json!({}));
        s.structured["servers"][0].clone()
    };
    let pid = status(&mut c)["pid"].clone();
    let url = format!("http://127.0.0.1:{port}/deep");
    for _ in 0..3 {
        let r = c.call("web_fetch", json!({"url": url}));
        assert!(!r.is_error, "{}", r.text);
        assert!(r.text.contains("innermost b"), "{}", r.text);
    }
    let after = status(&mut c);
    assert_eq!(after["pid"], pid, "the web child was restarted: {after}");
    assert_eq!(after["restarts"], 0, "{after}");
}

/// `sleep <marker>` processes still alive.
fn left(marker: &str) -> Vec<u32> {
    pids_with_cmdline(marker)
}

fn wait_none_left(marker: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !left(marker).is_empty() {
        assert!(
            Instant::now() < deadline,
            "{what}: {:?} still running",
            left(marker)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn commands_that_leave_their_process_group_through_the_host() {
    let root = tempfile::tempdir().expect("tmp");
    let mut c = host(root.path(), &[("shell", &[])]);
    let stamp = std::process::id() % 100_000;
    // A daemon started with setsid -f, and a python child in its own process group.
    let t1 = format!("3100.{stamp}1");
    let r = c.call(
        "shell_bash",
        json!({"command": format!("setsid -f sleep {t1}; sleep 0.3; echo started")}),
    );
    assert!(!r.is_error, "{}", r.text);
    wait_none_left(&t1, "setsid -f after the call");
    let t2 = format!("3100.{stamp}2");
    let py = format!(
        "python3 -c 'import os,time; os.setpgid(0,0); time.sleep({t2})' & sleep 0.3; echo started"
    );
    let r = c.call("shell_bash", json!({ "command": py }));
    assert!(!r.is_error, "{}", r.text);
    wait_none_left(&t2, "setpgid after the call");
    // A background job whose setsid child would outlive the host.
    let t3 = format!("3100.{stamp}3");
    let r = c.call(
        "shell_bash",
        json!({"command": format!("setsid sleep {t3} & sleep 600"), "background": true}),
    );
    assert!(!r.is_error, "{}", r.text);
    let deadline = Instant::now() + Duration::from_secs(5);
    while left(&t3).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!left(&t3).is_empty(), "the background job started");
    c.shutdown();
    wait_none_left(&t3, "a background job's setsid child after the host exited");
}
