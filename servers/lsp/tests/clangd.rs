//! Drive the real `kitbag-lsp` binary against clangd on a small C project.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{assert_calls_renamed, bin, edit_on_disk, have, ok, paths_of, server_status, write};
use kitbag_testkit::{Era, McpClient, process_alive};
use serde_json::json;

const HEADER: &str = "#ifndef SHAPES_H\n#define SHAPES_H\nstruct point { int x; int y; };\nint area(struct point p);\n#endif\n";
const SHAPES: &str = "#include \"shapes.h\"\n\nint area(struct point p) { return p.x * p.y; }\n";
const MAIN: &str = "#include \"shapes.h\"\n\nint main(void) {\n    struct point p = {2, 3};\n    /* é😀 */ int a = area(p);\n    int bad = p.z;\n    return a + bad;\n}\n";

fn project() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(d.path()).unwrap();
    let cdb = json!([
        {"directory": root, "file": root.join("main.c"), "arguments": ["cc", "-c", "main.c"]},
        {"directory": root, "file": root.join("shapes.c"), "arguments": ["cc", "-c", "shapes.c"]}
    ]);
    write(
        d.path(),
        &[
            ("shapes.h", HEADER),
            ("shapes.c", SHAPES),
            ("main.c", MAIN),
            ("compile_commands.json", &cdb.to_string()),
        ],
    );
    d
}

#[test]
fn clangd_end_to_end() {
    if !have("clangd") {
        return;
    }
    let d = project();
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Handshake);
    c.timeout = Duration::from_secs(90);

    // The error on line 6 (no member z), with its 1-based line; clangd speaks UTF-8 here.
    let s = ok(&mut c, json!({"action": "diagnostics", "path": "."}));
    let diags = s["diagnostics"].as_array().unwrap();
    assert!(
        diags
            .iter()
            .any(|d| d["path"] == "main.c" && d["line"] == 6 && d["severity"] == "error"),
        "{s}"
    );
    assert_eq!(s["files_checked"], 3, "{s}");
    let st = server_status(&mut c, "c");
    assert!(process_alive(st["pid"].as_u64().unwrap() as u32));

    // Definition across files, past non-ASCII text on the line (`    /* é😀 */ int a = `
    // is 21 characters but 25 UTF-8 bytes).
    let s = ok(
        &mut c,
        json!({"action": "definition", "path": "main.c", "line": 5, "character": 22}),
    );
    let caps = ok(&mut c, json!({"action": "capabilities", "path": "main.c"}));
    assert_eq!(caps["position_encoding"], "utf-8", "{caps}");
    let def = &s["definitions"][0];
    assert!(
        def["path"] == "shapes.c" || def["path"] == "shapes.h",
        "{s}"
    );
    let s2 = ok(
        &mut c,
        json!({"action": "definition", "path": "main.c", "line": 5, "symbol": "area"}),
    );
    assert_eq!(s2["definitions"], s["definitions"]);

    // References across the three files.
    let s = ok(
        &mut c,
        json!({"action": "references", "path": "shapes.h", "line": 4, "symbol": "area", "include_declaration": true}),
    );
    assert_eq!(
        paths_of(&s["references"]),
        vec!["main.c", "shapes.c", "shapes.h"],
        "{s}"
    );
    let call = s["references"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == "main.c")
        .unwrap();
    assert_eq!(call["character"], 21, "{s}");

    // Hover and document symbols.
    let s = ok(
        &mut c,
        json!({"action": "hover", "path": "main.c", "line": 5, "symbol": "area"}),
    );
    assert!(s["content"].as_str().unwrap().contains("int area"), "{s}");
    let s = ok(&mut c, json!({"action": "symbols", "path": "shapes.h"}));
    let names: Vec<&str> = s["symbols"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"point") && names.contains(&"area"), "{s}");

    // Rename across the three files.
    let s = ok(
        &mut c,
        json!({"action": "rename", "path": "shapes.h", "line": 4, "symbol": "area", "new_name": "surface"}),
    );
    assert_eq!(s["files_changed"], 3, "{s}");
    assert_calls_renamed(
        d.path(),
        &["shapes.h", "shapes.c", "main.c"],
        "area",
        "surface",
    );

    // Fix the error on disk: the next diagnostics call sees the edit.
    edit_on_disk(d.path(), "main.c", "p.z", "p.y");
    let s = ok(
        &mut c,
        json!({"action": "diagnostics", "path": "main.c", "severity": "error"}),
    );
    assert_eq!(s["count"], 0, "{s}");
    assert!(c.stdout_garbage().is_empty());
}

/// A rename as the first call of a fresh clangd: the header and both sources change.
#[test]
fn the_first_rename_is_whole() {
    if !have("clangd") {
        return;
    }
    let d = project();
    common::first_contact_rename_in(
        d.path(),
        json!({"action": "rename", "path": "shapes.h", "line": 4, "symbol": "area", "new_name": "surface"}),
        "area",
        &["shapes.h", "shapes.c", "main.c"],
    );
}
