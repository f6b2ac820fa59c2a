//! Issue #22 §1 for `shell_bash`'s `cwd`: a directory inside the root swapped for a symbolic
//! link to outside, over and over, while commands are started in it. Each command must start
//! in the directory that was checked (inside the root) — never in the outside one — and write
//! only there: no answer may carry the outside sentinel or path, and the outside directory
//! must end byte-for-byte as it started.

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use kitbag_testkit::race::{Swapper, diff, sentinel, snapshot};
use kitbag_testkit::{Era, McpClient};
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-shell"))
}

const RUN: Duration = Duration::from_secs(4);

#[test]
fn symlink_swap_never_starts_outside() {
    let root = tempfile::tempdir().expect("tmp");
    let outside = tempfile::tempdir().expect("tmp");
    let mark = sentinel();
    let o = outside.path();
    std::fs::write(o.join("f.txt"), format!("{mark}\n")).expect("w");
    // The outside directory's own path carries the mark too, so `pwd -P` there would show it.
    let o_marked = o.join(&mark);
    std::fs::create_dir(&o_marked).expect("mkdir");
    std::fs::write(o_marked.join("f.txt"), format!("{mark}\n")).expect("w");
    let before = snapshot(o);

    let d = root.path().join("d");
    std::fs::create_dir(&d).expect("mkdir");
    std::fs::write(d.join("f.txt"), "inside\n").expect("w");
    symlink(&o_marked, root.path().join("link")).expect("ln");

    let mut c = McpClient::spawn(bin(), &[], root.path(), Era::Handshake);
    let swapper = Swapper::start(&d, &root.path().join("link"), RUN);
    let (mut calls, mut ok, mut leaks, mut inside) = (0u64, 0u64, 0u64, 0u64);
    let mut codes: BTreeMap<String, u64> = BTreeMap::new();
    let mut i = 0u64;
    while swapper.running() {
        i += 1;
        // Reads and a write relative to the working directory, and where the shell is.
        let command = format!("pwd -P; cat f.txt; echo {i} > w.txt");
        let r = c.call("shell_bash", json!({"command": command, "cwd": "d"}));
        calls += 1;
        ok += u64::from(!r.is_error);
        *codes
            .entry(r.error_code().unwrap_or("ok").to_string())
            .or_default() += 1;
        if r.raw.to_string().contains(&mark) || r.text.contains(&mark) {
            leaks += 1;
        }
        if !r.is_error && r.text.contains("inside") {
            inside += 1;
        }
    }
    let swaps = swapper.finish();
    let after = snapshot(o);
    let changed = diff(&before, &after);
    eprintln!(
        "race: {swaps} swaps, {calls} calls ({ok} succeeded, {inside} of them read the inside file; {codes:?}), {leaks} answers with the outside path or content, {} outside entries changed",
        changed.len()
    );
    assert!(swaps > 0 && inside > 0, "no call ran inside: {codes:?}");
    assert_eq!(leaks, 0, "commands ran outside the root");
    assert!(
        changed.is_empty(),
        "the outside directory changed: {}",
        changed.join(", ")
    );
    // The last write landed inside.
    assert!(d.join("w.txt").exists());
}
