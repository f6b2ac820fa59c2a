//! The vm family through `kitbag serve` (the embedded default): the host binary is also the
//! agent inside each instance (`kitbag __agent`), and no instance outlives the host.

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_testkit::{Era, McpClient, process_alive};
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag"))
}

fn have_bwrap() -> bool {
    let ok = std::process::Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "--unshare-all", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "bubblewrap is required under CI=true"
        );
        eprintln!("SKIP: bubblewrap cannot create namespaces here");
    }
    ok
}

/// Processes whose command line carries `needle`.
fn with_cmdline(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if std::fs::read(e.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
            && process_alive(pid)
        {
            out.push(pid);
        }
    }
    out
}

#[test]
fn instances_through_the_host() {
    if !have_bwrap() {
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
    // The agent inside is the host binary itself, mounted at /run/kitbag-bin/kitbag-vm.
    assert_eq!(r.structured["stdout"], format!("{id}\nkitbag-vm\n"));
    assert!(!with_cmdline(&marker).is_empty(), "the main command runs");
    // The host exits (stdin closed): the vm server stops its instances.
    c.shutdown();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !with_cmdline(&marker).is_empty() {
        assert!(Instant::now() < deadline, "an instance outlived the host");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Seed 001: kitbag-cron inside an instance holds a keepalive lease while it has enabled
/// entries, so the instance does not pause between firings.
#[test]
fn cron_inside_an_instance_keeps_it_awake() {
    if !have_bwrap() {
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
