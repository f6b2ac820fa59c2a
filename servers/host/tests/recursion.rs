//! The host never starts itself: a client's `.mcp.json` listing `kitbag serve` is not read,
//! self-referencing entries are skipped, and a host under a host (through any wrapper) refuses.
//! Every run is watched by counting the processes that carry a per-test tag in their
//! environment: a fork bomb would pass any bound here within a second.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

const TAG_VAR: &str = "KITBAG_RECURSION_TEST_TAG";

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

/// Processes whose environment holds `TAG_VAR=tag` (every descendant inherits it).
fn tagged(tag: &str) -> usize {
    let needle = format!("{TAG_VAR}={tag}");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read(e.path().join("environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|kv| kv == needle.as_bytes()))
        })
        .count()
}

/// Run `kitbag ARGS` in `dir` under a process-count watch; returns the output and the most
/// tagged processes seen at once. Fails as soon as the count passes `bound`, killing them.
fn watched(dir: &Path, args: &[&str], bound: usize) -> (Output, usize) {
    let tag = format!("{}-{}", std::process::id(), fastrand_tag());
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (tag, done, peak) = (tag.clone(), done.clone(), peak.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let n = tagged(&tag);
                peak.fetch_max(n, Ordering::Relaxed);
                if n > bound {
                    kill_tagged(&tag);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let out = Command::new(bin())
        .args(args)
        .current_dir(dir)
        .env(TAG_VAR, &tag)
        .env_remove("KITBAG_CONFIG")
        .env_remove("KITBAG_HOST_DEPTH")
        .output()
        .expect("run kitbag");
    done.store(true, Ordering::Relaxed);
    watcher.join().expect("watcher");
    let peak = peak.load(Ordering::Relaxed);
    // Nothing the run started is left behind.
    let deadline = Instant::now() + Duration::from_secs(5);
    while tagged(&tag) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = tagged(&tag);
    kill_tagged(&tag);
    assert!(
        peak <= bound,
        "{peak} processes at once: the host started itself"
    );
    assert_eq!(left, 0, "processes outlived `kitbag {}`", args.join(" "));
    (out, peak)
}

fn kill_tagged(tag: &str) {
    let needle = format!("{TAG_VAR}={tag}");
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if std::fs::read(e.path().join("environ"))
            .is_ok_and(|env| env.split(|&b| b == 0).any(|kv| kv == needle.as_bytes()))
        {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

fn fastrand_tag() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn write(dir: &Path, name: &str, v: Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string_pretty(&v).expect("json")).expect("write");
    p
}

/// Claude Code's `claude mcp add -s project kitbag -- kitbag serve` writes exactly this.
fn claude_project_file(dir: &Path) {
    write(
        dir,
        ".mcp.json",
        json!({"mcpServers": {"kitbag": {"type": "stdio", "command": bin(), "args": ["serve"], "env": {}}}}),
    );
}

#[test]
fn a_project_mcp_json_listing_kitbag_is_not_read() {
    let d = tempfile::tempdir().expect("tmp");
    claude_project_file(d.path());
    // The embedded default: the host plus its ten servers, never more.
    let (out, peak) = watched(d.path(), &["tools", "--json"], 12);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    let names: Vec<&str> = v["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"file_read") && names.contains(&"cron_list"));
    assert!(peak >= 1, "the watch saw the host ({peak})");
    // Listing starts no server (each waits for its first call); a call starts one (and
    // lasts long enough for the watch to see it).
    let (out, peak) = watched(
        d.path(),
        &["call", "shell_bash", r#"{"command": "sleep 0.3"}"#],
        12,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        peak >= 2,
        "the watch saw the host and the server its call started ({peak})"
    );
}

#[test]
fn self_references_are_skipped_and_a_nested_host_refuses() {
    let d = tempfile::tempdir().expect("tmp");
    let exe = bin().to_string_lossy().into_owned();
    let dir = bin().parent().expect("dir").to_string_lossy().into_owned();
    let cfg = write(
        d.path(),
        "imported.json",
        json!({"mcpServers": {
            "direct": {"command": exe, "args": ["serve"]},
            "bare": {"command": exe},
            "by_path": {"command": "kitbag", "args": ["--log-level", "warn", "serve"],
                        "env": {"PATH": format!("/nonexistent:{dir}")}},
            "wrapped": {"command": "sh", "args": ["-c", format!("exec '{exe}' serve")]},
            "wrapped_twice": {"command": "sh", "args": ["-c", format!("'{exe}' --config '{}' serve; exit 3", d.path().join("imported.json").display())]},
            "files": {"command": exe, "args": ["server", "files", "--root", d.path()]}
        }}),
    );
    let cfg_arg = cfg.to_string_lossy().into_owned();
    // host + files + two refusing wrappers (sh and the kitbag it starts) at most.
    let (out, _) = watched(d.path(), &["--config", &cfg_arg, "doctor"], 8);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no line for {name} in:\n{text}"))
            .to_string()
    };
    for name in ["direct", "bare", "by_path"] {
        let l = line(name);
        assert!(l.starts_with("skip"), "{l}");
        assert!(l.contains("runs kitbag itself as a host"), "{l}");
    }
    for name in ["wrapped", "wrapped_twice"] {
        let l = line(name);
        assert!(l.starts_with("FAIL"), "{l}");
        assert!(
            l.contains("refusing to start a kitbag host inside another"),
            "{l}"
        );
    }
    assert!(line("files").starts_with("ok"), "{}", line("files"));
    assert_eq!(out.status.code(), Some(1), "the wrappers are problems");

    // host_status reports the skipped entries too.
    let mut c = McpClient::spawn(
        bin(),
        &["--config", &cfg_arg, "serve"],
        d.path(),
        Era::Handshake,
    );
    let r = c.call_ok("host_status", json!({}));
    let servers = r.structured["servers"].as_array().expect("servers").clone();
    let state = |name: &str| {
        servers
            .iter()
            .find(|s| s["name"] == name)
            .map(|s| s["state"].as_str().unwrap_or("").to_string())
    };
    assert_eq!(state("direct").as_deref(), Some("skipped"));
    // A kitbag family: it waits for its first call.
    assert_eq!(state("files").as_deref(), Some("idle"));
    assert!(!c.list_tools().is_empty());
}

#[test]
fn a_host_started_by_a_host_refuses_at_once() {
    let d = tempfile::tempdir().expect("tmp");
    let out = Command::new(bin())
        .args(["serve"])
        .current_dir(d.path())
        .env("KITBAG_HOST_DEPTH", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "stdout stays clean");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("KITBAG_HOST_DEPTH=1"), "{err}");
    // Single servers under a host are what a host is for.
    let out = Command::new(bin())
        .args(["server", "files", "--help"])
        .env("KITBAG_HOST_DEPTH", "1")
        .output()
        .expect("run");
    assert!(out.status.success());
}
