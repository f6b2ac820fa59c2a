//! The vm family through `kitbag serve` (the embedded default): the host binary is also the
//! agent inside each instance (`kitbag __agent`), and no instance outlives the host.

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_testkit::{Era, McpClient};
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

#[test]
fn instances_through_the_host() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let mut c = McpClient::spawn(bin(), &["serve"], d.path(), Era::Handshake);
    c.timeout = Duration::from_secs(60);
    let marker = format!("kitbag-host-vm-{}", std::process::id());
    let i = c.call_ok(
        "instance_spawn",
        json!({"command": ["sh", "-c", format!("sleep 1000; : {marker}")]}),
    );
    let id = i.structured["id"].as_str().expect("id").to_string();
    let r = c.call_ok(
        "instance_exec",
        json!({"instance": id, "command": ["sh", "-c", "echo $KITBAG_INSTANCE_ID; cat /proc/2/comm"]}),
    );
    // The agent inside is kitbag-vm-agent when it was built beside the host (this workspace
    // builds it with kitbag-vm), else the host binary itself, mounted at
    // /run/kitbag-bin/kitbag-vm.
    let beside = bin().parent().expect("dir").join("kitbag-vm-agent");
    let agent = if beside.is_file() {
        "kitbag-vm-agent"
    } else {
        "kitbag-vm"
    };
    assert_eq!(r.structured["stdout"], format!("{id}\n{agent}\n"));
    assert!(
        !kitbag_testkit::pids_with_cmdline(&marker).is_empty(),
        "the main command runs"
    );
    // Copies out of an instance into the root are journaled like any kitbag write: a
    // checkpoint taken before them rewinds them (issue #39 §2).
    c.call_ok(
        "file_write",
        json!({"path": "out/report.txt", "content": "old\n"}),
    );
    c.call_ok("checkpoint", json!({"reason": "before the copies"}));
    c.call_ok(
        "instance_exec",
        json!({"instance": id, "command": ["sh", "-c",
            "echo new > /work/report.txt; mkdir -p /work/tree/sub; echo x > /work/tree/x.txt; echo y > /work/tree/sub/y.txt"]}),
    );
    c.call_ok(
        "instance_copy",
        json!({"instance": id, "direction": "out", "guest_path": "/work/report.txt",
            "host_path": "out/report.txt", "overwrite": true}),
    );
    c.call_ok(
        "instance_copy",
        json!({"instance": id, "direction": "out", "guest_path": "/work/tree", "host_path": "tree"}),
    );
    let read = |rel: &str| std::fs::read_to_string(d.path().join(rel)).ok();
    assert_eq!(read("out/report.txt").as_deref(), Some("new\n"));
    assert_eq!(read("tree/sub/y.txt").as_deref(), Some("y\n"));
    let l = c.call_ok("checkpoint_list", json!({}));
    let mut changed: Vec<String> = l.structured["changed"]
        .as_array()
        .expect("changed")
        .iter()
        .filter_map(|p| p.as_str().map(str::to_owned))
        .collect();
    changed.sort();
    assert_eq!(
        changed,
        ["out/report.txt", "tree/sub/y.txt", "tree/x.txt"],
        "{}",
        l.structured
    );
    c.call_ok("checkpoint_restore", json!({"id": 1}));
    assert_eq!(read("out/report.txt").as_deref(), Some("old\n"));
    assert_eq!(read("tree/x.txt"), None);
    assert_eq!(read("tree/sub/y.txt"), None);
    // The host exits (stdin closed): the vm server stops its instances.
    c.shutdown();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !kitbag_testkit::pids_with_cmdline(&marker).is_empty() {
        assert!(Instant::now() < deadline, "an instance outlived the host");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Seed 001: kitbag-cron inside an instance holds a keepalive lease while it has enabled
/// entries, so the instance does not pause between firings.
#[test]
fn cron_inside_an_instance_keeps_it_awake() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let mut c = McpClient::spawn(bin(), &["serve"], d.path(), Era::Handshake);
    c.timeout = Duration::from_secs(60);
    let lines = [
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "cron_create", "arguments": {"schedule": "0 0 1 1 *", "message": "new year"}}}),
    ];
    let script: String = lines.iter().map(|l| format!("'{l}' ")).collect::<String>();
    // The agent inside is the kitbag binary: `server cron` runs kitbag-cron.
    let main = format!(
        "(printf '%s\\n' {script}; sleep 1000) | /run/kitbag-bin/kitbag-vm server cron --root /work"
    );
    let i = c.call_ok(
        "instance_spawn",
        json!({"command": ["sh", "-c", main], "idle_timeout_seconds": 2}),
    );
    let id = i.structured["id"].as_str().expect("id").to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let l = c.call_ok("instance_list", json!({"instance": id}));
        let leases = l.structured["instances"][0]["leases"].clone();
        if leases.as_array().is_some_and(|a| !a.is_empty()) {
            assert!(
                leases[0]["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("kitbag-cron")),
                "{leases}"
            );
            break;
        }
        assert_eq!(
            l.structured["instances"][0]["state"], "running",
            "paused before cron held it"
        );
        assert!(
            Instant::now() < deadline,
            "no lease from kitbag-cron: {}",
            l.text
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(3));
    let l = c.call_ok("instance_list", json!({"instance": id}));
    assert_eq!(l.structured["instances"][0]["state"], "running");
    c.shutdown();
}

/// Under the embedded default there is no config file to re-read: `self_restart` says so
/// (`unsupported`) instead of answering that a reload was asked for.
#[test]
fn self_restart_without_a_config_file_says_there_is_nothing_to_reload() {
    let d = tempfile::tempdir().expect("tmp");
    let mut c = McpClient::spawn(bin(), &["serve"], d.path(), Era::Handshake);
    let r = c.call_err("self_restart", json!({}), "unsupported");
    assert!(r.text.contains("nothing to reload"), "{}", r.text);
    c.shutdown();
}

/// vm.md §4 item 28: the agent edits agent.json and calls `self_restart`; the answer arrives,
/// `tools/list_changed` follows, the new server's tools are listed, the vm server (and its
/// instance) keep running. A config that does not parse changes nothing.
#[test]
fn self_restart_reloads_the_host() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let config = d.path().join("agent.json");
    let vm = json!({"command": bin(), "args": ["server", "vm", "--root", d.path()]});
    std::fs::write(&config, json!({"mcp": {"vm": vm}}).to_string()).expect("config");
    let mut c = McpClient::spawn(
        bin(),
        &["--config", config.to_str().expect("utf8"), "serve"],
        d.path(),
        Era::Handshake,
    );
    c.timeout = Duration::from_secs(60);
    let info = c.call_ok("self_info", json!({})).structured;
    let vm_pid = info["server"]["pid"].clone();
    assert_eq!(info["host"]["pid"], c.pid(), "{info}");
    let i = c.call_ok("instance_spawn", json!({"command": ["sleep", "1000"]}));
    let id = i.structured["id"].as_str().expect("id").to_string();
    // A broken config: refused before anything is signalled.
    std::fs::write(&config, "{ not json").expect("config");
    c.call_err("self_restart", json!({}), "config_invalid");
    // The edit the agent meant: add the files server.
    let files = json!({"command": bin(), "args": ["server", "files", "--root", d.path()]});
    std::fs::write(
        &config,
        json!({"mcp": {"vm": vm, "files": files}}).to_string(),
    )
    .expect("config");
    c.take_notifications();
    let r = c.call_ok("self_restart", json!({})).structured;
    assert_eq!(r["action"], "host_reload");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let changed = c
            .take_notifications()
            .iter()
            .any(|n| n["method"] == "notifications/tools/list_changed");
        let names: Vec<String> = c
            .list_tools()
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_string))
            .collect();
        if changed && names.iter().any(|n| n == "file_read") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the reload did not bring file_read: {names:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let info = c.call_ok("self_info", json!({})).structured;
    assert_eq!(info["server"]["pid"], vm_pid, "the vm server was restarted");
    let l = c
        .call_ok("instance_list", json!({"instance": id}))
        .structured;
    assert_eq!(l["instances"][0]["state"], "running");
    c.call_ok("file_list", json!({}));
    c.shutdown();
}
