//! An instance's disk (issue #42, N9): `/work` holds `resources.disk_mb` and no more, and
//! copies pass through the server without being held in its memory. scripts/test runs these
//! as root (a loop-mounted image) and again as uid 65534 (a tmpfs).

use std::path::Path;

use kitbag_testkit::Era;
use serde_json::json;

use super::{project, server, sh, spawn};

/// Whether this run's server can loop-mount an image (root, loop devices, mkfs.ext4): the
/// test process asks the check the server makes; with a test user the server is not root.
fn expect_image() -> bool {
    super::test_user().is_none() && kitbag_vm::disk::loop_image_unusable().is_none()
}

/// Loop devices whose backing file is under `dir`.
fn loops_backed_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/sys/block").unwrap().flatten() {
        let backing = e.path().join("loop/backing_file");
        if let Ok(f) = std::fs::read_to_string(&backing)
            && f.trim().starts_with(dir.to_str().unwrap())
        {
            out.push(f.trim().to_string());
        }
    }
    out
}

/// Mounts of this (the host's) mount namespace under `dir`.
fn host_mounts_under(dir: &Path) -> Vec<String> {
    let dir = std::fs::canonicalize(dir).unwrap();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(dir.to_str().unwrap()))
        .map(str::to_string)
        .collect()
}

/// The attack was `dd` filling the host's disk from /work (2 GiB in 1.5 s, `df` showing the
/// host's whole file system). With `disk_mb` the guest gets ENOSPC at the limit, `df` shows
/// the limit, the record says how it is held, and nothing stays mounted or attached after.
#[test]
fn work_holds_the_size_asked_for() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let dir = project();
    let mut c = server(dir.path(), &[], Era::Handshake);
    let e = c.call_err(
        "instance_spawn",
        json!({"command": ["sleep", "1000"], "resources": {"disk_mb": 4}}),
        "invalid_params",
    );
    assert!(e.text.contains("resources.disk_mb"), "{}", e.text);
    let i = spawn(
        &mut c,
        json!({"command": ["sleep", "1000"], "resources": {"disk_mb": 64}}),
    );
    let id = i["id"].as_str().unwrap().to_string();
    let disk = &i["resources"]["disk"];
    assert_eq!(disk["limit_mb"], 64, "{i}");
    assert_eq!(disk["enforced"], true, "{i}");
    let method = if expect_image() {
        "loop_image"
    } else {
        "tmpfs"
    };
    assert_eq!(disk["method"], method, "{i}");
    assert!(
        i["work_dir"].is_null(),
        "/work is not a host directory: {i}"
    );
    // Nothing is mounted where the host sees it.
    assert_eq!(host_mounts_under(dir.path()), Vec::<String>::new());

    let df = sh(&mut c, &id, "df -m /work | tail -1");
    let total: u64 = df["stdout"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("df: {df}"));
    assert!((64..=72).contains(&total), "df shows {total} MiB: {df}");

    let first = sh(
        &mut c,
        &id,
        "dd if=/dev/zero of=/work/a bs=1M count=56 2>&1",
    );
    assert_eq!(first["exit_code"], 0, "56 MiB of 64 fit: {first}");
    let fill = sh(
        &mut c,
        &id,
        "dd if=/dev/zero of=/work/b bs=1M count=2048 2>&1; echo rc=$?; du -sm /work",
    );
    let out = fill["stdout"].as_str().unwrap();
    assert!(out.contains("No space left on device"), "{fill}");
    let used: u64 = out
        .lines()
        .last()
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("du: {fill}"));
    assert!(
        used <= 72,
        "/work holds {used} MiB past a 64 MiB limit: {fill}"
    );

    let listed = c.call_ok("instance_list", json!({"instance": id}));
    let disk = &listed.structured["instances"][0]["resources"]["disk"];
    assert!(
        disk["used_mb"].as_u64().is_some_and(|u| u >= 56),
        "used_mb counts what the guest wrote: {disk}"
    );

    c.call_ok("instance_stop", json!({"instance": id}));
    assert_eq!(host_mounts_under(dir.path()), Vec::<String>::new());
    assert_eq!(
        loops_backed_under(dir.path()),
        Vec::<String>::new(),
        "a loop device outlived its instance"
    );
    c.shutdown();
}

/// A 900 MB copy out cost the server 937 MB of memory: files and trees now stream through a
/// temp file beside the target, and a host file copied in streams to the agent.
#[test]
fn copies_stream_through_the_server() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let dir = project();
    let mut c = server(dir.path(), &[], Era::Handshake);
    let i = spawn(&mut c, json!({"command": ["sleep", "1000"]}));
    let id = i["id"].as_str().unwrap().to_string();
    let made = sh(
        &mut c,
        &id,
        "head -c 314572800 /dev/zero > /work/big && mkdir -p /work/d/sub && \
         head -c 209715200 /dev/zero > /work/d/sub/large && echo small > /work/d/small",
    );
    assert_eq!(made["exit_code"], 0, "{made}");
    let big = 314_572_800u64;

    let r = c.call_ok(
        "instance_copy",
        json!({"instance": id, "direction": "out", "guest_path": "/work/big",
               "host_path": "big.out", "max_bytes": 1u64 << 30}),
    );
    assert_eq!(r.structured["bytes"], big);
    assert_eq!(
        std::fs::metadata(dir.path().join("big.out")).unwrap().len(),
        big
    );
    // An existing target is kept and refused before anything is received.
    let e = c.call_err(
        "instance_copy",
        json!({"instance": id, "direction": "out", "guest_path": "/work/d/small",
               "host_path": "big.out"}),
        "file_exists",
    );
    assert!(e.text.contains("overwrite"), "{}", e.text);
    assert_eq!(
        std::fs::metadata(dir.path().join("big.out")).unwrap().len(),
        big
    );

    let r = c.call_ok(
        "instance_copy",
        json!({"instance": id, "direction": "out", "guest_path": "/work/d",
               "host_path": "tree", "max_bytes": 1u64 << 30}),
    );
    assert_eq!(r.structured["files"], 2, "{}", r.structured);
    assert_eq!(
        std::fs::metadata(dir.path().join("tree/sub/large"))
            .unwrap()
            .len(),
        209_715_200
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("tree/small")).unwrap(),
        "small\n"
    );

    let r = c.call_ok(
        "instance_copy",
        json!({"instance": id, "direction": "in", "guest_path": "/work/back",
               "host_path": "big.out", "max_bytes": 1u64 << 30}),
    );
    assert_eq!(r.structured["bytes"], big);
    let size = sh(&mut c, &id, "stat -c %s /work/back");
    assert_eq!(size["stdout"].as_str().unwrap().trim(), big.to_string());

    // No temp file was left beside a target.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".kitbag-tmp-") || n.contains(".kitbag-bak-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let peak = kitbag_testkit::fuzz::peak_rss_mb(c.pid());
    eprintln!("the server's peak RSS after 1 GB of copies: {peak} MB");
    assert!(
        peak < 100,
        "the server's memory peaked at {peak} MB for 300 MB copies"
    );
    c.shutdown();
}
