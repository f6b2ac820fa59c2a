//! Drive the real `kitbag-lsp` binary against rust-analyzer on a small Cargo project.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{assert_calls_renamed, bin, edit_on_disk, have, ok, paths_of, write};
use kitbag_testkit::{Era, McpClient};
use serde_json::json;

const MAIN: &str = "mod shapes;\nmod util;\n\nfn main() {\n    let s = shapes::Square { side: 3 };\n    let label = \"é😀\"; let a = shapes::area(&s);\n    let n: i32 = \"text\";\n    util::show(a, label, n);\n}\n";
const SHAPES: &str = "pub struct Square {\n    pub side: u32,\n}\n\n/// The area of a square.\npub fn area(s: &Square) -> u32 {\n    s.side * s.side\n}\n\npub trait Shape {\n    fn corners(&self) -> u32;\n}\n\nimpl Shape for Square {\n    fn corners(&self) -> u32 {\n        4\n    }\n}\n";
const UTIL: &str = "pub fn show(a: u32, label: &str, n: i32) {\n    println!(\"{label} {a} {n} {}\", crate::shapes::area(&crate::shapes::Square { side: 1 }));\n}\n";

#[test]
fn rust_analyzer_end_to_end() {
    if !have("rust-analyzer") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        &[
            (
                "Cargo.toml",
                "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
            ),
            ("src/main.rs", MAIN),
            ("src/shapes.rs", SHAPES),
            ("src/util.rs", UTIL),
        ],
    );
    let mut c = McpClient::spawn(bin(), &[], d.path(), Era::Modern);
    c.timeout = Duration::from_secs(180);

    // The type error on line 7, once rust-analyzer has loaded the project. A result that
    // says the server had not gone quiet (`settled: false`) asks to be called again: on a
    // loaded machine rust-analyzer's first load can outlast one wait.
    let mut s = json!(null);
    for _ in 0..3 {
        s = ok(
            &mut c,
            json!({"action": "diagnostics", "path": "src/main.rs", "wait_ms": 90000}),
        );
        if s["settled"] != false {
            break;
        }
    }
    assert!(
        s["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["line"] == 7 && d["severity"] == "error"),
        "{s}"
    );

    // Definition across files, by symbol after non-ASCII text on the line.
    let s = ok(
        &mut c,
        json!({"action": "definition", "path": "src/main.rs", "line": 6, "symbol": "area"}),
    );
    assert_eq!(s["definitions"][0]["path"], "src/shapes.rs", "{s}");
    assert_eq!(s["definitions"][0]["line"], 6);
    assert_eq!(s["definitions"][0]["character"], 7);

    let s = ok(
        &mut c,
        json!({"action": "references", "path": "src/shapes.rs", "line": 6, "symbol": "area", "include_declaration": true}),
    );
    assert_eq!(
        paths_of(&s["references"]),
        vec!["src/main.rs", "src/shapes.rs", "src/util.rs"],
        "{s}"
    );

    let s = ok(
        &mut c,
        json!({"action": "hover", "path": "src/main.rs", "line": 6, "symbol": "area"}),
    );
    let content = s["content"].as_str().unwrap();
    assert!(
        content.contains("pub fn area") && content.contains("The area of a square."),
        "{s}"
    );

    let s = ok(
        &mut c,
        json!({"action": "symbols", "path": "src/shapes.rs"}),
    );
    let syms = s["symbols"].as_array().unwrap();
    assert!(
        syms.iter()
            .any(|x| x["name"] == "Square" && x["kind"] == "struct"),
        "{s}"
    );
    assert!(
        syms.iter()
            .any(|x| x["name"] == "side" && x["container"] == "Square"),
        "{s}"
    );

    let s = ok(
        &mut c,
        json!({"action": "rename", "path": "src/shapes.rs", "line": 6, "symbol": "area", "new_name": "surface"}),
    );
    assert_eq!(s["files_changed"], 3, "{s}");
    assert_calls_renamed(
        d.path(),
        &["src/main.rs", "src/shapes.rs", "src/util.rs"],
        "area",
        "surface",
    );

    // Fix the type error on disk: diagnostics follow.
    edit_on_disk(
        d.path(),
        "src/main.rs",
        "let n: i32 = \"text\";",
        "let n: i32 = 7;",
    );
    let s = ok(
        &mut c,
        json!({"action": "diagnostics", "path": "src/main.rs", "severity": "error", "wait_ms": 90000}),
    );
    assert_eq!(s["count"], 0, "{s}");
    assert!(c.stdout_garbage().is_empty());
}

/// A rename as the first call of a fresh rust-analyzer (before it has indexed the crate):
/// every module that uses the name changes.
#[test]
fn the_first_rename_is_whole() {
    if !have("rust-analyzer") {
        return;
    }
    common::first_contact_rename(
        &[
            (
                "Cargo.toml",
                "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
            ),
            (
                "src/types.rs",
                "pub struct User {\n    pub name: String,\n}\n",
            ),
            (
                "src/auth.rs",
                "use crate::types::User;\n\npub fn login(u: &User) -> bool {\n    !u.name.is_empty()\n}\n",
            ),
            (
                "src/main.rs",
                "mod auth;\nmod types;\n\nuse types::User;\n\nfn main() {\n    let u = User { name: \"root\".into() };\n    println!(\"{}\", auth::login(&u));\n}\n",
            ),
        ],
        json!({"action": "rename", "path": "src/types.rs", "line": 1, "symbol": "User", "new_name": "AppUser"}),
        "User",
        &["src/types.rs", "src/auth.rs", "src/main.rs"],
    );
}
