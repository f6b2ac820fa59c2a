//! Drive the real `kitbag-lsp` binary against gopls on a small Go module.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{assert_calls_renamed, bin, edit_on_disk, have, ok, paths_of, server_status, write};
use kitbag_testkit::{Era, McpClient, process_alive};
use serde_json::json;

const GO_MOD: &str = "module example.com/shapes\n\ngo 1.19\n";
const SHAPES: &str = "package main\n\n// Point is a place on the grid.\ntype Point struct {\n\tX int\n\tY int\n}\n\n// Area multiplies the coordinates.\nfunc Area(p Point) int {\n\treturn p.X * p.Y\n}\n";
const MAIN: &str = "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tp := Point{X: 2, Y: 3}\n\t/* é😀 */ a := Area(p)\n\tvar bad int = \"text\"\n\tfmt.Println(a, bad)\n}\n";

#[test]
fn gopls_end_to_end() {
    if !have("gopls") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        &[("go.mod", GO_MOD), ("shapes.go", SHAPES), ("main.go", MAIN)],
    );
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Handshake);
    c.timeout = Duration::from_secs(90);

    // The type error on line 8, 1-based.
    let s = ok(&mut c, json!({"action": "diagnostics", "path": "main.go"}));
    let diags = s["diagnostics"].as_array().unwrap();
    assert!(
        diags
            .iter()
            .any(|d| d["path"] == "main.go" && d["line"] == 8 && d["severity"] == "error"),
        "{s}"
    );
    let st = server_status(&mut c, "go");
    assert!(process_alive(st["pid"].as_u64().unwrap() as u32));

    // Definition across files, past non-ASCII text on the line: `Area` starts at character 15
    // (0-based, after `\t/* é😀 */ a := `), which is UTF-16 unit 16 for gopls (the emoji is two).
    let s = ok(
        &mut c,
        json!({"action": "definition", "path": "main.go", "line": 7, "character": 15}),
    );
    let caps = ok(&mut c, json!({"action": "capabilities", "path": "main.go"}));
    assert_eq!(caps["position_encoding"], "utf-16", "{caps}");
    assert_eq!(s["definitions"][0]["path"], "shapes.go", "{s}");
    assert_eq!(s["definitions"][0]["line"], 10, "{s}");
    let s2 = ok(
        &mut c,
        json!({"action": "definition", "path": "main.go", "line": 7, "symbol": "Area"}),
    );
    assert_eq!(s2["definitions"], s["definitions"]);

    // References across both files.
    let s = ok(
        &mut c,
        json!({"action": "references", "path": "shapes.go", "line": 10, "symbol": "Area", "include_declaration": true}),
    );
    assert_eq!(
        paths_of(&s["references"]),
        vec!["main.go", "shapes.go"],
        "{s}"
    );
    let call = s["references"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["path"] == "main.go")
        .unwrap();
    assert_eq!(call["character"], 15, "{s}");

    // Hover and document symbols.
    let s = ok(
        &mut c,
        json!({"action": "hover", "path": "main.go", "line": 7, "symbol": "Area"}),
    );
    assert!(
        s["content"]
            .as_str()
            .unwrap()
            .contains("func Area(p Point) int"),
        "{s}"
    );
    let s = ok(&mut c, json!({"action": "symbols", "path": "shapes.go"}));
    let names: Vec<&str> = s["symbols"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"Point") && names.contains(&"Area"), "{s}");

    // Rename across both files.
    let s = ok(
        &mut c,
        json!({"action": "rename", "path": "shapes.go", "line": 10, "symbol": "Area", "new_name": "Surface"}),
    );
    assert_eq!(s["files_changed"], 2, "{s}");
    assert_calls_renamed(d.path(), &["shapes.go", "main.go"], "Area", "Surface");

    // Fix the error on disk: the next diagnostics call sees the edit.
    edit_on_disk(
        d.path(),
        "main.go",
        "var bad int = \"text\"",
        "var bad int = 4",
    );
    let s = ok(
        &mut c,
        json!({"action": "diagnostics", "path": "main.go", "severity": "error"}),
    );
    assert_eq!(s["count"], 0, "{s}");
    assert!(c.stdout_garbage().is_empty());
}

/// A rename as the first call of a fresh gopls: every file of the package that uses the name.
#[test]
fn the_first_rename_is_whole() {
    if !have("gopls") {
        return;
    }
    common::first_contact_rename(
        &[
            ("go.mod", GO_MOD),
            (
                "types.go",
                "package main\n\n// A person who logs in.\ntype User struct {\n\tName string\n}\n",
            ),
            (
                "main.go",
                "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tu := User{Name: \"root\"}\n\tfmt.Println(login(u))\n}\n",
            ),
            (
                "auth.go",
                "package main\n\nfunc login(u User) bool {\n\treturn u.Name != \"\"\n}\n",
            ),
        ],
        json!({"action": "rename", "path": "types.go", "line": 4, "symbol": "User", "new_name": "AppUser"}),
        "User",
        &["types.go", "main.go", "auth.go"],
    );
}
