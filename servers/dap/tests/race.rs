//! Issue #22 §1 for kitbag-dap: the directory of a breakpoint's source swapped for a link to
//! an outside directory, over and over, while breakpoints are set, listed and removed. kitbag
//! reads the source itself (to check the line against the file's length) through the path
//! policy's descriptors: it must always read the inside file — never the outside one, whose
//! different length would show in the answer — and change nothing outside. (What an adapter
//! opens by path is the adapter's: a documented residual.)

use std::path::Path;
use std::time::Duration;

use kitbag_testkit::race::{Swapper, diff, sentinel, snapshot};
use kitbag_testkit::{Era, McpClient};
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-dap"))
}

#[test]
fn breakpoint_sources_are_never_read_outside() {
    let root = tempfile::tempdir().expect("tmp");
    let outside = tempfile::tempdir().expect("tmp");
    let mark = sentinel();
    // Outside: three lines (line 10 does not exist there) carrying the sentinel.
    std::fs::write(
        outside.path().join("app.py"),
        format!("# {mark}\nx = 1\n# {mark}\n"),
    )
    .expect("w");
    let before = snapshot(outside.path());
    let d = root.path().join("d");
    std::fs::create_dir(&d).expect("mkdir");
    let inside: String = (1..=20).map(|i| format!("v{i} = {i}\n")).collect();
    std::fs::write(d.join("app.py"), inside).expect("w");
    std::os::unix::fs::symlink(outside.path(), root.path().join("link")).expect("ln");

    let mut c = McpClient::spawn(bin(), &[], root.path(), Era::Handshake);
    let swapper = Swapper::start(&d, &root.path().join("link"), Duration::from_secs(4));
    let (mut calls, mut set, mut outside_reads, mut leaks) = (0u64, 0u64, 0u64, 0u64);
    while swapper.running() {
        for args in [
            json!({"action": "set_breakpoint", "path": "d/app.py", "line": 10}),
            json!({"action": "list_breakpoints"}),
            json!({"action": "remove_breakpoint", "path": "d/app.py", "line": 10}),
        ] {
            let setting = args["action"] == "set_breakpoint";
            let r = c.call("debug", args);
            calls += 1;
            let answer = r.raw.to_string();
            if answer.contains(&mark) {
                leaks += 1;
            }
            // The outside file has three lines: a refusal naming them means it was read.
            if answer.contains("between 1 and 3") {
                outside_reads += 1;
            }
            if setting && !r.is_error {
                set += 1;
            }
        }
    }
    let swaps = swapper.finish();
    let changed = diff(&before, &snapshot(outside.path()));
    eprintln!(
        "dap race: {swaps} swaps, {calls} calls, {set} breakpoints set, {outside_reads} outside reads, {leaks} leaks, {} outside changes",
        changed.len()
    );
    assert!(swaps > 0 && set > 0, "no breakpoint was set");
    assert_eq!(outside_reads, 0, "the outside file was read");
    assert_eq!(leaks, 0, "an answer carried the outside file");
    assert!(changed.is_empty(), "outside changed: {changed:?}");
}
