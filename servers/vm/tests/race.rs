//! Issue #22 §1 for kitbag-vm: a directory inside the root swapped for a symbolic link to
//! outside, over and over, while `instance_copy` moves files and directories between the host
//! paths under it and an instance, and instances are spawned with it mounted. No instance may
//! see the outside sentinel, no answer may carry it, and the outside directory must end as it
//! started.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use kitbag_testkit::race::{Swapper, diff, sentinel, snapshot};
use kitbag_testkit::{Era, McpClient};
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-vm"))
}

#[test]
fn copies_and_mounts_never_reach_outside_through_a_swapped_link() {
    if !kitbag_testkit::bwrap_usable() {
        return;
    }
    let root = tempfile::tempdir().expect("tmp");
    let outside = tempfile::tempdir().expect("tmp");
    let mark = sentinel();
    let o = outside.path();
    std::fs::write(o.join("f.txt"), format!("{mark}\n")).expect("w");
    std::fs::create_dir(o.join("tree")).expect("mkdir");
    std::fs::write(o.join("tree/x.txt"), format!("{mark}\n")).expect("w");
    let before = snapshot(o);

    let d = root.path().join("d");
    std::fs::create_dir_all(d.join("tree")).expect("mkdir");
    std::fs::write(d.join("f.txt"), "inside\n").expect("w");
    std::fs::write(d.join("tree/x.txt"), "inside\n").expect("w");
    symlink(o, root.path().join("link")).expect("ln");

    let mut c = McpClient::spawn(bin(), &[], root.path(), Era::Handshake);
    c.timeout = Duration::from_secs(60);
    let inst = c.call_ok("instance_spawn", json!({})).structured;
    let id = inst["id"].as_str().expect("id").to_string();

    let swapper = Swapper::start(&d, &root.path().join("link"), Duration::from_secs(4));
    let (mut calls, mut ok, mut leaks, mut spawned) = (0u64, 0u64, 0u64, 0u64);
    let mut spawn_errors = std::collections::BTreeMap::new();
    let mut i = 0u64;
    while swapper.running() {
        i += 1;
        let steps = vec![
            json!({"instance": id, "direction": "in", "host_path": "d/f.txt", "guest_path": format!("/tmp/in{i}"), "overwrite": true}),
            json!({"instance": id, "direction": "in", "host_path": "d/tree", "guest_path": format!("/tmp/tree{i}"), "overwrite": true}),
            json!({"instance": id, "direction": "out", "guest_path": "/etc/hostname", "host_path": format!("d/out{i}.txt"), "overwrite": true}),
            json!({"instance": id, "direction": "out", "guest_path": format!("/tmp/in{i}"), "host_path": "d/f.txt", "overwrite": true}),
        ];
        for args in steps {
            let r = c.call("instance_copy", args);
            calls += 1;
            ok += u64::from(!r.is_error);
            if r.raw.to_string().contains(&mark) {
                leaks += 1;
            }
        }
        // What reached the guest: never the outside content.
        let r = c.call(
            "instance_exec",
            json!({"instance": id, "command": ["sh", "-c", format!("cat /tmp/in{i} /tmp/tree{i}/x.txt 2>/dev/null; true")]}),
        );
        calls += 1;
        if r.raw.to_string().contains(&mark) {
            leaks += 1;
        }
        // A mount of the swapped directory: spawned only with the inside directory.
        if i.is_multiple_of(5) {
            let r = c.call(
                "instance_spawn",
                json!({"mounts": [{"host": "d", "guest": "/data/d"}]}),
            );
            calls += 1;
            if r.is_error {
                *spawn_errors
                    .entry(r.error_code().unwrap_or("?").to_string())
                    .or_insert(0u64) += 1;
            } else {
                spawned += 1;
                let mid = r.structured["id"].as_str().expect("id").to_string();
                let seen = c.call(
                    "instance_exec",
                    json!({"instance": mid, "command": ["sh", "-c", "cat /data/d/f.txt /data/d/tree/x.txt 2>/dev/null; true"]}),
                );
                if seen.raw.to_string().contains(&mark) {
                    leaks += 1;
                }
                let stop = c.call(
                    "instance_stop",
                    json!({"instance": mid, "grace_seconds": 1}),
                );
                assert!(!stop.is_error, "{}", stop.text);
            }
        }
    }
    let swaps = swapper.finish();
    c.shutdown();
    let changed = diff(&before, &snapshot(o));
    eprintln!(
        "kitbag-vm race: {swaps} swaps, {calls} calls ({ok} copies succeeded, {spawned} mounted spawns, refused: {spawn_errors:?}), {leaks} leaks, {} outside entries changed",
        changed.len()
    );
    assert!(swaps > 100, "the swapper barely ran");
    assert!(ok > 0, "no copy succeeded: the test proves nothing");
    assert_eq!(
        leaks, 0,
        "the outside sentinel reached an answer or an instance"
    );
    assert!(changed.is_empty(), "outside changed: {changed:?}");
}
