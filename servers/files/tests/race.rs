//! Issue #22 §1: a directory inside the root swapped for a symbolic link to outside, over and
//! over, while every file tool works on paths under it. No answer may carry outside content or
//! names, and the outside directory must end byte-for-byte as it started.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use kitbag_testkit::race::{Swapper, diff, sentinel, snapshot};
use kitbag_testkit::{Era, McpClient, ToolCall};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-files"))
}

const RUN: Duration = Duration::from_secs(4);

#[test]
fn symlink_swap_never_reaches_outside() {
    let root = tempfile::tempdir().expect("tmp");
    let outside = tempfile::tempdir().expect("tmp");
    let mark = sentinel();
    // The outside directory holds the same names the tools use inside, each carrying the mark,
    // plus a file named after it (a listing that leaks names would show it).
    let o = outside.path();
    for name in ["f.txt", "victim.txt", "move-src.txt"] {
        std::fs::write(o.join(name), format!("{mark}\nsecond line\n")).expect("w");
    }
    std::fs::create_dir(o.join("victimdir")).expect("mkdir");
    std::fs::write(o.join("victimdir/x.txt"), format!("{mark}\n")).expect("w");
    std::fs::write(o.join(format!("{mark}.txt")), format!("{mark}\n")).expect("w");
    let before = snapshot(o);

    let d = root.path().join("d");
    std::fs::create_dir(&d).expect("mkdir");
    std::fs::write(d.join("f.txt"), "inside\nsecond line\n").expect("w");
    symlink(o, root.path().join("link")).expect("ln");

    let mut c = McpClient::spawn(bin(), &[], root.path(), Era::Handshake);
    let swapper = Swapper::start(&d, &root.path().join("link"), RUN);
    let (mut calls, mut leaks, mut ok) = (0u64, 0u64, 0u64);
    let mut codes: std::collections::BTreeMap<String, u64> = Default::default();
    let mut leaked_by: std::collections::BTreeMap<String, u64> = Default::default();
    let mut ok_by: std::collections::BTreeMap<String, u64> = Default::default();
    let mut check = |tool: &str, r: ToolCall| {
        calls += 1;
        ok += u64::from(!r.is_error);
        *ok_by.entry(tool.to_string()).or_default() += u64::from(!r.is_error);
        *codes
            .entry(r.error_code().unwrap_or("ok").to_string())
            .or_default() += 1;
        if r.raw.to_string().contains(&mark) || r.text.contains(&mark) {
            leaks += 1;
            *leaked_by.entry(tool.to_string()).or_default() += 1;
        }
    };
    let mut i = 0u64;
    while swapper.running() {
        i += 1;
        let steps: Vec<(&str, Value)> = vec![
            ("file_read", json!({"path": "d/f.txt"})),
            ("file_read", json!({"path": "d"})),
            (
                "file_write",
                json!({"path": "d/f.txt", "content": format!("inside {i}\nsecond line\n")}),
            ),
            (
                "file_write",
                json!({"path": format!("d/new/w{i}.txt"), "content": "w"}),
            ),
            (
                "file_create",
                json!({"path": format!("d/made/c{i}.txt"), "content": "c"}),
            ),
            ("file_read", json!({"path": "d/f.txt"})),
            (
                "edit_text",
                json!({"path": "d/f.txt", "start_line": 1, "end_line": 1, "new_string": format!("edited {i}")}),
            ),
            (
                "edit_patch",
                json!({"patch": format!("*** Begin Patch\n*** Update File: d/f.txt\n@@\n second line\n+patched {i}\n*** Add File: d/patched/p{i}.txt\n+p\n*** End Patch\n")}),
            ),
            (
                "edit_patch",
                json!({"patch": format!("--- a/d/f.txt\n+++ b/d/f.txt\n@@ -2,2 +2,2 @@\n second line\n-patched {i}\n+unified {i}\n")}),
            ),
            (
                "file_create",
                json!({"path": "d/move-src.txt", "content": "m"}),
            ),
            (
                "file_move",
                json!({"source": "d/move-src.txt", "destination": format!("d/moved/m{i}.txt")}),
            ),
            ("file_delete", json!({"path": "d/victim.txt"})),
            (
                "file_delete",
                json!({"path": "d/victimdir", "recursive": true}),
            ),
            ("file_delete", json!({"path": format!("d/made/c{i}.txt")})),
            (
                "file_list",
                json!({"path": "d", "recursive": true, "hidden": true}),
            ),
            ("file_list", json!({"path": ".", "recursive": true})),
        ];
        for (tool, args) in steps {
            let r = c.call(tool, args);
            check(tool, r);
        }
    }
    let swaps = swapper.finish();
    let after = snapshot(o);
    let changed = diff(&before, &after);
    eprintln!(
        "race: {swaps} swaps, {calls} calls ({ok} succeeded; {codes:?}), {leaks} answers with outside content or names {leaked_by:?}, {} outside entries changed",
        changed.len()
    );
    // Some calls must have got through, or the test proves nothing.
    assert!(swaps > 0 && ok > 0, "no call succeeded: {codes:?}");
    assert!(
        ok_by.get("edit_patch").is_some_and(|&n| n > 0),
        "edit_patch never applied between swaps: {ok_by:?}"
    );
    assert_eq!(leaks, 0, "answers leaked outside content: {leaked_by:?}");
    assert!(
        changed.is_empty(),
        "the outside directory changed: {}",
        changed
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    );
    // The server is still healthy: a plain read works once the swapping stopped.
    let r = c.call("file_list", json!({"path": "."}));
    assert!(!r.is_error, "{}", r.text);
}
