//! Helpers shared by the language-server tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;

use kitbag_testkit::McpClient;
use serde_json::{Value, json};

pub fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-lsp"))
}

/// Whether a language server is installed; under CI a missing one fails the test.
pub fn have(program: &str) -> bool {
    let mut ok = kitbag_lsp_client::config::find_program(program).is_some();
    // ~/.cargo/bin/rust-analyzer is a rustup proxy that exists even without the component.
    if ok && program == "rust-analyzer" {
        ok = std::process::Command::new(program)
            .arg("--version")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    }
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{program} missing under CI"
        );
        eprintln!("SKIP: {program} not installed");
    }
    ok
}

/// A `code_lsp` call that must succeed: its structured result.
pub fn ok(c: &mut McpClient, args: Value) -> Value {
    c.call_ok("code_lsp", args).structured
}

pub fn server_status(c: &mut McpClient, language: &str) -> Value {
    let s = ok(c, json!({"action": "status"}));
    s["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["language"] == language)
        .cloned()
        .unwrap()
}

pub fn paths_of(list: &Value) -> Vec<String> {
    let mut v: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v.dedup();
    v
}

pub fn write(dir: &Path, files: &[(&str, &str)]) {
    for (name, text) in files {
        let p = dir.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(p, text).unwrap();
    }
}

/// After a rename of function `old` to `new`: every file in `files` calls `new(` and none
/// still calls `old(`.
pub fn assert_calls_renamed(dir: &Path, files: &[&str], old: &str, new: &str) {
    for f in files {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        assert!(
            text.contains(&format!("{new}(")) && !text.contains(&format!("{old}(")),
            "{f}: {text}"
        );
    }
}

/// Replace `from` with `to` in `file`, on disk, as an editor outside the server would.
pub fn edit_on_disk(dir: &Path, file: &str, from: &str, to: &str) {
    let text = std::fs::read_to_string(dir.join(file)).unwrap();
    assert!(text.contains(from), "{file} has no {from:?}");
    std::fs::write(dir.join(file), text.replace(from, to)).unwrap();
}

/// A rename as the very first call of a fresh `kitbag-lsp` (its language server not started
/// yet) over the project `files`: it must change every file in `changed` and leave no use of
/// `old` in them — never the declaring file alone.
pub fn first_contact_rename(files: &[(&str, &str)], rename: Value, old: &str, changed: &[&str]) {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), files);
    first_contact_rename_in(d.path(), rename, old, changed);
}

/// [`first_contact_rename`] over a project already written to `dir`.
pub fn first_contact_rename_in(dir: &Path, rename: Value, old: &str, changed: &[&str]) {
    let mut c = kitbag_testkit::McpClient::spawn(bin(), &[], dir, kitbag_testkit::Era::Modern);
    c.timeout = std::time::Duration::from_secs(120);
    let s = ok(&mut c, rename.clone());
    let new = rename["new_name"].as_str().unwrap();
    assert_eq!(s["files_changed"], changed.len(), "{s}");
    for f in changed {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        assert!(
            text.contains(new) && !text.replace(new, "").contains(old),
            "{f}: {text}"
        );
    }
}
