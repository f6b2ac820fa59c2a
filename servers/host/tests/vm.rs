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
