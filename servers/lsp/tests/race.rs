//! Issue #22 §1 for `code_lsp`: a directory inside the root swapped for a symbolic link to
//! outside, over and over, while documents under it are opened, synced, hashed, searched and
//! moved. No answer may carry outside content or names, and the outside directory must end
//! byte-for-byte as it started. clangd serves the C files (the cheapest server the suite
//! already uses; it starts in well under a second and needs nothing but the file).
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::time::Duration;

use common::{bin, have};
use kitbag_testkit::race::{Swapper, diff, sentinel, snapshot};
use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

const RUN: Duration = Duration::from_secs(5);

#[test]
fn symlink_swap_never_reaches_outside() {
    if !have("clangd") {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let mark = sentinel();
    let o = outside.path();
    // The outside directory has the same names as inside, every one carrying the mark (a
    // function named after it, so symbols, hover and previews would show it).
    let outside_c =
        format!("int {mark}(void) {{ return 2; }}\nint inside_fn(void) {{ return {mark}(); }}\n");
    for name in ["a.c", "move-src.c"] {
        std::fs::write(o.join(name), &outside_c).unwrap();
    }
    std::fs::write(o.join(format!("{mark}.c")), &outside_c).unwrap();
    let before = snapshot(o);

    let d = root.path().join("d");
    std::fs::create_dir(&d).unwrap();
    let inside_c = "int helper(void) { return 1; }\nint inside_fn(void) { return helper(); }\n";
    std::fs::write(d.join("a.c"), inside_c).unwrap();
    symlink(o, root.path().join("link")).unwrap();

    let mut c = McpClient::spawn(bin(), &[], root.path(), Era::Handshake);
    c.timeout = Duration::from_secs(90);
    // Start clangd before the race, so the time goes to calls rather than to its start.
    let first = c.call("code_lsp", json!({"action": "symbols", "path": "d/a.c"}));
    assert!(!first.is_error, "{}", first.text);

    let swapper = Swapper::start(&d, &root.path().join("link"), RUN);
    let (mut calls, mut ok, mut leaks) = (0u64, 0u64, 0u64);
    let mut codes: BTreeMap<String, u64> = BTreeMap::new();
    let mut leaked_by: BTreeMap<String, u64> = BTreeMap::new();
    let mut i = 0u64;
    while swapper.running() {
        i += 1;
        let steps: Vec<Value> = vec![
            json!({"action": "symbols", "path": "d/a.c"}),
            json!({"action": "hover", "path": "d/a.c", "line": 2, "symbol": "inside_fn"}),
            json!({"action": "definition", "path": "d/a.c", "line": 2, "symbol": "helper"}),
            json!({"action": "references", "path": "d/a.c", "line": 2, "symbol": "inside_fn"}),
            json!({"action": "diagnostics", "path": "d/a.c", "wait_ms": 200}),
            json!({"action": "diagnostics", "path": "d", "wait_ms": 200}),
            json!({"action": "status"}),
        ];
        for args in steps {
            let action = args["action"].as_str().unwrap_or("").to_string();
            let r = c.call("code_lsp", args);
            calls += 1;
            ok += u64::from(!r.is_error);
            *codes
                .entry(r.error_code().unwrap_or("ok").to_string())
                .or_default() += 1;
            if r.raw.to_string().contains(&mark) || r.text.contains(&mark) {
                leaks += 1;
                *leaked_by.entry(action).or_default() += 1;
            }
        }
        // A move under the swapped directory: made inside (or refused), never outside.
        std::fs::write(root.path().join(format!("src{i}.c")), inside_c).unwrap();
        let r = c.call(
            "code_lsp",
            json!({"action": "rename_file", "path": format!("src{i}.c"), "new_path": format!("d/moved{i}.c")}),
        );
        calls += 1;
        ok += u64::from(!r.is_error);
        *codes
            .entry(r.error_code().unwrap_or("ok").to_string())
            .or_default() += 1;
        if r.raw.to_string().contains(&mark) {
            leaks += 1;
            *leaked_by.entry("rename_file".into()).or_default() += 1;
        }
    }
    let swaps = swapper.finish();
    let after = snapshot(o);
    let changed = diff(&before, &after);
    eprintln!(
        "race: {swaps} swaps, {i} rounds, {calls} calls ({ok} succeeded; {codes:?}), {leaks} answers with outside content or names {leaked_by:?}, {} outside entries changed",
        changed.len()
    );
    assert!(swaps > 0 && ok > 0, "no call succeeded: {codes:?}");
    assert_eq!(leaks, 0, "answers leaked outside content: {leaked_by:?}");
    assert!(
        changed.is_empty(),
        "the outside directory changed: {}",
        changed.join(", ")
    );
    // Healthy afterwards: the document reads as what is inside.
    let r = c.call("code_lsp", json!({"action": "symbols", "path": "d/a.c"}));
    assert!(!r.is_error, "{}", r.text);
    assert!(r.text.contains("helper"), "{}", r.text);
}
