//! Every file tool, driven over stdio against the real binary.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use kitbag_testkit::{Era, McpClient};
use serde_json::json;

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-files"))
}

struct Fx {
    root: tempfile::TempDir,
    outside: tempfile::TempDir,
}

impl Fx {
    fn new() -> Self {
        let root = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("tmp");
        std::fs::write(outside.path().join("secret.txt"), "top secret\n").expect("w");
        Fx { root, outside }
    }
    fn p(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }
    fn write(&self, rel: &str, content: impl AsRef<[u8]>) {
        let p = self.p(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, content).expect("write");
    }
    fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.p(rel)).expect("read")
    }
    fn client(&self) -> McpClient {
        self.client_with(&[])
    }
    fn client_with(&self, args: &[&str]) -> McpClient {
        McpClient::spawn(bin(), args, self.root.path(), Era::Handshake)
    }
}

#[test]
fn read_happy_path_and_window() {
    let fx = Fx::new();
    let body: String = (1..=100).map(|i| format!("line {i}\n")).collect();
    fx.write("hundred.txt", &body);
    let mut c = fx.client();
    let r = c.call_ok(
        "file_read",
        json!({"path": "hundred.txt", "offset": 10, "limit": 11}),
    );
    let lines: Vec<&str> = r.structured["content"]
        .as_str()
        .expect("content")
        .lines()
        .collect();
    assert_eq!(lines.len(), 11);
    assert_eq!(lines[0], "10: line 10");
    assert_eq!(lines[10], "20: line 20");
    assert_eq!(r.structured["total_lines"], 100);
    assert_eq!(r.structured["truncated"], true);
    assert_eq!(r.structured["next_offset"], 21);
    assert!(r.text.contains("offset=21"));
    let whole = c.call_ok("file_read", json!({"path": "./hundred.txt"}));
    assert_eq!(whole.structured["truncated"], false);
    assert_eq!(
        whole.structured["content"]
            .as_str()
            .expect("c")
            .lines()
            .count(),
        100
    );
}

#[test]
fn read_binary_directory_and_long_lines() {
    let fx = Fx::new();
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    png.extend(std::iter::repeat_n(0u8, 100));
    fx.write("img/logo.png", &png);
    fx.write("img/sub/x.txt", "x");
    fx.write("long.txt", format!("{}\nshort\n", "y".repeat(5000)));
    let mut c = fx.client();
    let r = c.call_ok("file_read", json!({"path": "img/logo.png"}));
    assert_eq!(r.structured["type"], "binary");
    assert_eq!(r.structured["size"], png.len());
    assert_eq!(r.structured["mime"], "image/png");
    let r = c.call_ok("file_read", json!({"path": "img"}));
    assert_eq!(r.structured["type"], "directory");
    assert_eq!(r.structured["content"], "logo.png\nsub/");
    let r = c.call_ok("file_read", json!({"path": "long.txt"}));
    assert_eq!(r.structured["long_lines_cut"], 1);
    let first = r.structured["content"]
        .as_str()
        .expect("c")
        .lines()
        .next()
        .expect("line")
        .to_string();
    assert!(
        first.len() < 2100 && first.contains("line truncated"),
        "{}",
        &first[..80]
    );
    c.call_err(
        "file_read",
        json!({"path": "missing.txt"}),
        "file_not_found",
    );
}

#[test]
fn ten_megabyte_file_pages() {
    let fx = Fx::new();
    let mut body = String::with_capacity(11 << 20);
    let mut n = 0;
    while body.len() < 10 << 20 {
        n += 1;
        body.push_str(&format!(
            "{n:08} the quick brown fox jumps over the lazy dog {}\n",
            "z".repeat(60)
        ));
    }
    fx.write("big.log", &body);
    let mut c = fx.client();
    let r = c.call_ok(
        "file_read",
        json!({"path": "big.log", "offset": n - 4, "limit": 10}),
    );
    assert_eq!(r.structured["total_lines"], n);
    let content = r.structured["content"].as_str().expect("c");
    assert_eq!(content.lines().count(), 5);
    assert!(content.starts_with(&format!("{}: {:08}", n - 4, n - 4)));
    assert_eq!(r.structured["truncated"], false);
    // The default window stops at the cap and says where to continue; the serialized
    // structured result stays under the 50 KB at which Claude Code swaps a result for a preview.
    let r = c.call_ok("file_read", json!({"path": "big.log"}));
    assert_eq!(r.structured["truncated"], true);
    assert!(r.structured.to_string().len() < 45 * 1024);
    // Text that JSON escapes heavily (quotes, backslashes, tabs) is charged as escaped.
    std::fs::write(
        fx.p("quotes.txt"),
        "\"\\\t\"\\\t\"\\\t\"\\\n".repeat(20_000),
    )
    .expect("w");
    let r = c.call_ok("file_read", json!({"path": "quotes.txt"}));
    assert_eq!(r.structured["truncated"], true);
    assert!(
        r.structured.to_string().len() < 45 * 1024,
        "{}",
        r.structured.to_string().len()
    );
    let next = r.structured["next_offset"].as_u64().expect("next");
    let r2 = c.call_ok(
        "file_read",
        json!({"path": "big.log", "offset": next, "limit": 1}),
    );
    assert!(
        r2.structured["content"]
            .as_str()
            .expect("c")
            .starts_with(&format!("{next}: {next:08}"))
    );
}

#[test]
fn write_requires_read_and_detects_changes() {
    let fx = Fx::new();
    fx.write("a.txt", "one\n");
    let mut c = fx.client();
    c.call_err(
        "file_write",
        json!({"path": "a.txt", "content": "two\n"}),
        "file_not_read",
    );
    assert_eq!(fx.read("a.txt"), b"one\n");
    c.call_ok("file_read", json!({"path": "a.txt"}));
    // A touch alone is not a change: content hashes are compared, not mtimes.
    let f = std::fs::File::options()
        .append(true)
        .open(fx.p("a.txt"))
        .expect("open");
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
        .expect("touch");
    c.call_ok("file_write", json!({"path": "a.txt", "content": "two\n"}));
    assert_eq!(fx.read("a.txt"), b"two\n");
    // Our own write counts as a read: writing again is allowed.
    c.call_ok("file_write", json!({"path": "a.txt", "content": "three\n"}));
    std::fs::write(fx.p("a.txt"), "changed behind our back\n").expect("w");
    c.call_err(
        "file_write",
        json!({"path": "a.txt", "content": "four\n"}),
        "file_changed_since_read",
    );
    assert_eq!(fx.read("a.txt"), b"changed behind our back\n");
    // A new file needs no read; parents are created.
    let r = c.call_ok(
        "file_write",
        json!({"path": "./a/b/c/new.ts", "content": "export {}\n"}),
    );
    assert_eq!(r.structured["created"], true);
    assert_eq!(fx.read("a/b/c/new.ts"), b"export {}\n");
}

#[test]
fn edit_refuses_a_file_changed_since_it_was_read() {
    let fx = Fx::new();
    fx.write("a.txt", "one\ntwo\nthree\n");
    let mut c = fx.client();
    c.call_ok("file_read", json!({"path": "a.txt"}));
    // Another program inserts a line: line 2 is no longer "two".
    fx.write("a.txt", "zero\none\ntwo\nthree\n");
    for edit in [
        json!({"path": "a.txt", "start_line": 2, "new_string": "TWO"}),
        json!({"path": "a.txt", "old_string": "two", "new_string": "TWO"}),
        json!({"path": "a.txt", "start_line": 2, "new_string": "TWO", "dry_run": true}),
    ] {
        let r = c
            .call_err("edit_text", edit, "file_changed_since_read")
            .expect_field("path");
        assert!(r.text.contains("read it again"), "{}", r.text);
    }
    assert_eq!(fx.read("a.txt"), b"zero\none\ntwo\nthree\n");
    // Read again: the edit lands on the lines the caller saw.
    c.call_ok("file_read", json!({"path": "a.txt"}));
    c.call_ok(
        "edit_text",
        json!({"path": "a.txt", "start_line": 3, "new_string": "TWO"}),
    );
    assert_eq!(fx.read("a.txt"), b"zero\none\nTWO\nthree\n");
    // Its own edit counts as a read: the next edit needs no new read.
    c.call_ok(
        "edit_text",
        json!({"path": "a.txt", "old_string": "zero", "new_string": "ZERO"}),
    );
    assert_eq!(fx.read("a.txt"), b"ZERO\none\nTWO\nthree\n");
}

#[test]
fn write_keeps_permissions() {
    let fx = Fx::new();
    fx.write("run.sh", "#!/bin/sh\necho hi\n");
    std::fs::set_permissions(fx.p("run.sh"), std::fs::Permissions::from_mode(0o754))
        .expect("chmod");
    let mut c = fx.client();
    c.call_ok("file_read", json!({"path": "run.sh"}));
    c.call_ok(
        "file_write",
        json!({"path": "run.sh", "content": "#!/bin/sh\necho bye\n"}),
    );
    c.call_ok(
        "edit_text",
        json!({"path": "run.sh", "old_string": "bye", "new_string": "ciao"}),
    );
    let mode = std::fs::metadata(fx.p("run.sh"))
        .expect("m")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o754);
    assert_eq!(fx.read("run.sh"), b"#!/bin/sh\necho ciao\n");
}

#[test]
fn create_refuses_existing() {
    let fx = Fx::new();
    fx.write("exists.txt", "keep");
    let mut c = fx.client();
    c.call_err(
        "file_create",
        json!({"path": "exists.txt", "content": "x"}),
        "file_exists",
    );
    assert_eq!(fx.read("exists.txt"), b"keep");
    let r = c.call_ok(
        "file_create",
        json!({"path": "src/utils/helpers.ts", "content": "export {}\n"}),
    );
    assert_eq!(r.structured["bytes_written"], 10);
    assert_eq!(fx.read("src/utils/helpers.ts"), b"export {}\n");
}

#[test]
fn edit_exact_multiple_missing() {
    let fx = Fx::new();
    fx.write(
        "m.ts",
        "const port = 3000;\nlet a = 1;\nlet a = 1;\nlet a = 1;\n",
    );
    let mut c = fx.client();
    c.call_err(
        "edit_text",
        json!({"path": "m.ts", "old_string": "3000", "new_string": "8080"}),
        "file_not_read",
    );
    c.call_ok("file_read", json!({"path": "m.ts"}));
    let r = c.call_ok("edit_text", json!({"path": "m.ts", "old_string": "const port = 3000;", "new_string": "const port = 8080;"}));
    assert_eq!(r.structured["replacements"], 1);
    assert!(
        r.structured["diff"]
            .as_str()
            .expect("diff")
            .contains("-const port = 3000;\n+const port = 8080;")
    );
    let r = c.call_err(
        "edit_text",
        json!({"path": "m.ts", "old_string": "let a = 1;", "new_string": "let a = 2;"}),
        "multiple_matches",
    );
    assert_eq!(r.structured["error"]["detail"]["lines"], json!([2, 3, 4]));
    assert_eq!(r.structured["error"]["detail"]["count"], 3);
    c.call_ok("edit_text", json!({"path": "m.ts", "old_string": "let a = 1;", "new_string": "let b = 1;", "occurrence": 3}));
    c.call_ok("edit_text", json!({"path": "m.ts", "old_string": "let a = 1;", "new_string": "let c = 1;", "replace_all": true}));
    assert_eq!(
        fx.read("m.ts"),
        b"const port = 8080;\nlet c = 1;\nlet c = 1;\nlet b = 1;\n"
    );
    let r = c.call_err(
        "edit_text",
        json!({"path": "m.ts", "old_string": "letb=1;", "new_string": "x"}),
        "old_string_not_found",
    );
    assert_eq!(r.structured["error"]["detail"]["closest"]["start_line"], 4);
    c.call_err(
        "edit_text",
        json!({"path": "m.ts", "old_string": "nothing like it at all", "new_string": "x"}),
        "old_string_not_found",
    );
    c.call_err(
        "edit_text",
        json!({"path": "m.ts", "old_string": "let b", "new_string": "let b"}),
        "no_change",
    );
}

#[test]
fn edit_keeps_crlf_bom_final_newline_and_dollar() {
    let fx = Fx::new();
    fx.write("crlf.txt", "alpha\r\nbeta\r\ngamma\r\n");
    fx.write("bom.txt", b"\xEF\xBB\xBFname = 1\nother = 2\n");
    fx.write("nofinal.txt", "a\nb");
    fx.write("dollar.txt", "price = X\n");
    let mut c = fx.client();
    for f in ["crlf.txt", "bom.txt", "nofinal.txt", "dollar.txt"] {
        c.call_ok("file_read", json!({"path": f}));
    }
    c.call_ok("edit_text", json!({"path": "crlf.txt", "old_string": "beta\ngamma", "new_string": "BETA\nGAMMA\ndelta"}));
    assert_eq!(fx.read("crlf.txt"), b"alpha\r\nBETA\r\nGAMMA\r\ndelta\r\n");
    c.call_ok(
        "edit_text",
        json!({"path": "bom.txt", "old_string": "name = 1", "new_string": "name = 10"}),
    );
    assert_eq!(fx.read("bom.txt"), b"\xEF\xBB\xBFname = 10\nother = 2\n");
    c.call_ok(
        "edit_text",
        json!({"path": "nofinal.txt", "start_line": 2, "new_string": "B"}),
    );
    assert_eq!(fx.read("nofinal.txt"), b"a\nB");
    c.call_ok(
        "edit_text",
        json!({"path": "dollar.txt", "old_string": "X", "new_string": "$1.00 ($$) ${x} $&"}),
    );
    assert_eq!(fx.read("dollar.txt"), b"price = $1.00 ($$) ${x} $&\n");
}

#[test]
fn edit_line_range_array_and_rollback() {
    let fx = Fx::new();
    fx.write("f.txt", "1\n2\n3\n4\n5\n");
    let mut c = fx.client();
    c.call_ok("file_read", json!({"path": "f.txt"}));
    let r = c.call_ok("edit_text", json!({"path": "f.txt", "start_line": 2, "end_line": 3, "new_string": "two-three", "dry_run": true}));
    assert_eq!(r.structured["applied"], false);
    assert!(
        r.structured["diff"]
            .as_str()
            .expect("d")
            .contains("+two-three")
    );
    assert_eq!(
        fx.read("f.txt"),
        b"1\n2\n3\n4\n5\n",
        "dry run writes nothing"
    );
    c.call_ok(
        "edit_text",
        json!({"path": "f.txt", "edits": [
            {"start_line": 5, "new_string": "five"},
            {"start_line": 1, "end_line": 2, "new_string": "one\ntwo"}
        ]}),
    );
    assert_eq!(fx.read("f.txt"), b"one\ntwo\n3\n4\nfive\n");
    // The second edit fails: nothing is applied.
    let r = c.call_err(
        "edit_text",
        json!({"path": "f.txt", "edits": [
            {"old_string": "one", "new_string": "ONE"},
            {"old_string": "does not exist", "new_string": "x"}
        ]}),
        "old_string_not_found",
    );
    assert_eq!(r.structured["error"]["detail"]["edit_index"], 1);
    assert_eq!(fx.read("f.txt"), b"one\ntwo\n3\n4\nfive\n");
    let r = c.call_ok(
        "edit_text",
        json!({"path": "f.txt", "edits": [
            {"old_string": "one", "new_string": "ONE"},
            {"old_string": "ONE\ntwo", "new_string": "ONE\nTWO"}
        ]}),
    );
    assert_eq!(r.structured["replacements"], 2);
    assert_eq!(fx.read("f.txt"), b"ONE\nTWO\n3\n4\nfive\n");
}

#[test]
fn bad_input_is_typed_and_changes_nothing() {
    let fx = Fx::new();
    fx.write("f.txt", "a\nb\n");
    fx.write("latin1.txt", b"caf\xe9\n");
    let mut c = fx.client_with(&["--max-content-bytes", "1000"]);
    c.call_ok("file_read", json!({"path": "f.txt"}));
    c.call_ok("file_read", json!({"path": "latin1.txt"}));
    let cases = [
        ("file_read", json!({"path": ""}), "path"),
        ("file_read", json!({"path": "a\u{0}b"}), "path"),
        ("file_read", json!({"path": "x/".repeat(2100)}), "path"),
        ("file_read", json!({"path": "f.txt", "offset": 0}), "offset"),
        (
            "file_read",
            json!({"path": "f.txt", "offset": -3}),
            "offset",
        ),
        ("file_read", json!({"path": "f.txt", "limit": 0}), "limit"),
        ("file_read", json!({"path": 7}), "path"),
        ("file_read", json!({}), "path"),
        (
            "edit_text",
            json!({"path": "f.txt", "start_line": 2, "end_line": 1, "new_string": "x"}),
            "start_line",
        ),
        (
            "edit_text",
            json!({"path": "f.txt", "edits": [{"old_string": "a", "new_string": "b"}, {"start_line": 1, "new_string": "c"}]}),
            "edits",
        ),
        (
            "edit_text",
            json!({"path": "f.txt", "old_string": "a", "new_string": "b", "edits": []}),
            "edits",
        ),
        (
            "edit_text",
            json!({"path": "f.txt", "old_string": "a", "new_string": "b", "occurrence": 0}),
            "occurrence",
        ),
        (
            "edit_text",
            json!({"path": "f.txt", "old_string": "", "new_string": "b"}),
            "old_string",
        ),
        (
            "edit_text",
            json!({"path": "f.txt", "old_string": "a"}),
            "new_string",
        ),
        (
            "file_write",
            json!({"path": "f.txt", "content": "x".repeat(1001)}),
            "content",
        ),
        (
            "file_create",
            json!({"path": "new.txt", "content": "x".repeat(1001)}),
            "content",
        ),
        ("file_list", json!({"limit": -1}), "limit"),
        ("file_delete", json!({"path": "."}), "path"),
    ];
    for (tool, args, field) in cases {
        let r = c.call(tool, args.clone());
        assert!(r.is_error, "{tool} {args}");
        assert_eq!(
            r.error_code(),
            Some("invalid_params"),
            "{tool} {args}: {}",
            r.text
        );
        assert_eq!(
            r.structured["error"]["detail"]["field"], field,
            "{tool} {args}: {}",
            r.text
        );
    }
    let r = c.call_err(
        "edit_text",
        json!({"path": "latin1.txt", "old_string": "caf", "new_string": "x"}),
        "encoding_unsupported",
    );
    assert!(r.text.contains("UTF-8"));
    assert_eq!(fx.read("f.txt"), b"a\nb\n");
    assert_eq!(fx.read("latin1.txt"), b"caf\xe9\n");
    assert!(!fx.p("new.txt").exists());
}

#[test]
fn escapes_and_symlinks_refused_for_read_and_write() {
    let fx = Fx::new();
    fx.write("inside.txt", "in\n");
    std::fs::create_dir_all(fx.p("dir")).expect("mkdir");
    symlink(fx.outside.path().join("secret.txt"), fx.p("link.txt")).expect("ln");
    symlink(fx.outside.path(), fx.p("dir/out")).expect("ln");
    let outside_abs = fx.outside.path().join("secret.txt");
    let outside_abs = outside_abs.to_str().expect("utf8");
    let mut c = fx.client();
    for path in [
        "../secret.txt",
        "dir/../../x",
        outside_abs,
        "link.txt",
        "dir/out/secret.txt",
        "/etc/passwd",
    ] {
        c.call_err("file_read", json!({"path": path}), "capability_denied");
        c.call_err(
            "file_write",
            json!({"path": path, "content": "pwned"}),
            "capability_denied",
        );
        c.call_err(
            "edit_text",
            json!({"path": path, "old_string": "top", "new_string": "x"}),
            "capability_denied",
        );
    }
    // Creating a file through a symlinked directory that leaves the root.
    c.call_err(
        "file_create",
        json!({"path": "dir/out/planted.txt", "content": "x"}),
        "capability_denied",
    );
    c.call_err(
        "file_write",
        json!({"path": "dir/out/planted.txt", "content": "x"}),
        "capability_denied",
    );
    assert!(!fx.outside.path().join("planted.txt").exists());
    assert_eq!(
        std::fs::read(fx.outside.path().join("secret.txt")).expect("r"),
        b"top secret\n"
    );
    // An absolute path inside the root is fine.
    let inside_abs = fx.p("inside.txt");
    let r = c.call_ok(
        "file_read",
        json!({"path": inside_abs.to_str().expect("utf8")}),
    );
    assert_eq!(r.structured["path"], "inside.txt");
    // Deleting the link removes the link, never its target.
    c.call_ok("file_delete", json!({"path": "link.txt"}));
    assert!(fx.outside.path().join("secret.txt").exists());
}

#[test]
fn ro_mount_allows_read_refuses_edit() {
    let fx = Fx::new();
    fx.write("src/lib.rs", "pub fn a() {}\n");
    fx.write("out/keep.txt", "k");
    let mut c = fx.client_with(&["--allow", "ro:src", "--allow", "rw:out"]);
    c.call_ok("file_read", json!({"path": "src/lib.rs"}));
    let r = c.call_err(
        "edit_text",
        json!({"path": "src/lib.rs", "old_string": "a()", "new_string": "b()"}),
        "capability_denied",
    );
    assert_eq!(r.structured["error"]["detail"]["needed"], "rw");
    c.call_err(
        "file_create",
        json!({"path": "src/new.rs", "content": ""}),
        "capability_denied",
    );
    c.call_err(
        "file_read",
        json!({"path": "README.md"}),
        "capability_denied",
    );
    c.call_ok(
        "file_create",
        json!({"path": "out/new.txt", "content": "n"}),
    );
    assert_eq!(fx.read("src/lib.rs"), b"pub fn a() {}\n");
    let mut ro = fx.client_with(&["--read-only"]);
    ro.call_ok("file_read", json!({"path": "out/keep.txt"}));
    ro.call_err(
        "file_delete",
        json!({"path": "out/keep.txt"}),
        "capability_denied",
    );
}

#[test]
fn list_move_delete() {
    let fx = Fx::new();
    fx.write(".gitignore", "target/\n*.log\n");
    fx.write("src/main.rs", "fn main() {}\n");
    fx.write("src/deep/mod.rs", "\n");
    fx.write("target/debug/bin", "x");
    fx.write("app.log", "log");
    fx.write(".hidden/x", "h");
    let mut c = fx.client();
    let r = c.call_ok("file_list", json!({}));
    let names: Vec<&str> = r.structured["entries"]
        .as_array()
        .expect("e")
        .iter()
        .map(|e| e["path"].as_str().expect("p"))
        .collect();
    assert_eq!(names, vec!["src"], "hidden and ignored entries skipped");
    let r = c.call_ok("file_list", json!({"recursive": true}));
    let names: Vec<&str> = r.structured["entries"]
        .as_array()
        .expect("e")
        .iter()
        .map(|e| e["path"].as_str().expect("p"))
        .collect();
    assert_eq!(
        names,
        vec!["src", "src/deep", "src/deep/mod.rs", "src/main.rs"]
    );
    let r = c.call_ok(
        "file_list",
        json!({"recursive": true, "no_ignore": true, "hidden": true, "limit": 3}),
    );
    assert_eq!(r.structured["truncated"], true);
    assert_eq!(r.structured["next_offset"], 3);
    assert_eq!(r.structured["entries"][0]["path"], ".gitignore");

    c.call_ok(
        "file_move",
        json!({"source": "src/main.rs", "destination": "bin/app/main.rs"}),
    );
    assert!(fx.p("bin/app/main.rs").exists() && !fx.p("src/main.rs").exists());
    fx.write("other.rs", "o");
    c.call_err(
        "file_move",
        json!({"source": "other.rs", "destination": "bin/app/main.rs"}),
        "file_exists",
    );
    let r = c.call_ok(
        "file_move",
        json!({"source": "other.rs", "destination": "bin/app/main.rs", "overwrite": true}),
    );
    assert_eq!(r.structured["overwritten"], true);
    assert_eq!(fx.read("bin/app/main.rs"), b"o");
    c.call_err(
        "file_move",
        json!({"source": "nope", "destination": "x"}),
        "file_not_found",
    );

    let r = c.call_err("file_delete", json!({"path": "src"}), "invalid_params");
    assert_eq!(r.structured["error"]["detail"]["field"], "recursive");
    assert!(fx.p("src/deep/mod.rs").exists());
    c.call_ok("file_delete", json!({"path": "src", "recursive": true}));
    assert!(!fx.p("src").exists());
    c.call_ok("file_delete", json!({"path": "app.log"}));
    c.call_err("file_delete", json!({"path": "app.log"}), "file_not_found");
}

#[test]
fn concurrent_edits_serialize() {
    let fx = Fx::new();
    let body: String = (0..40).map(|i| format!("k{i} = 0\n")).collect();
    fx.write("cfg.txt", &body);
    let mut c = fx.client();
    c.call_ok("file_read", json!({"path": "cfg.txt"}));
    // Fire 40 edits without waiting; each must apply on top of the others.
    let ids: Vec<u64> = (0..40)
        .map(|i| {
            c.send_request(
                "tools/call",
                json!({"name": "edit_text", "arguments": {"path": "cfg.txt", "old_string": format!("k{i} = 0\n"), "new_string": format!("k{i} = 1\n")}}),
            )
        })
        .collect();
    for id in ids {
        let r = McpClient::to_tool_call(c.wait_response(id));
        assert!(!r.is_error, "{}", r.text);
    }
    let expect: String = (0..40).map(|i| format!("k{i} = 1\n")).collect();
    assert_eq!(String::from_utf8(fx.read("cfg.txt")).expect("utf8"), expect);
}

/// The compact JSON size of a result's `structuredContent`, as the issue #37 budget counts it.
fn structured_len(r: &kitbag_testkit::ToolCall) -> usize {
    kitbag_shared::limits::json_len(&r.structured)
}

#[test]
fn read_default_page_holds_the_budget() {
    use kitbag_shared::limits::RESULT_BUDGET_BYTES;
    let fx = Fx::new();
    // 5 MB of short plain lines: nothing to escape, so every byte counts once.
    let line = "let value = compute(first, second, third); // plain text";
    let body: String = (0..5 * 1024 * 1024 / (line.len() + 1))
        .map(|_| format!("{line}\n"))
        .collect();
    fx.write("big.txt", &body);
    let mut c = fx.client();
    let first = c.call_ok("file_read", json!({"path": "big.txt"}));
    assert!(
        structured_len(&first) < RESULT_BUDGET_BYTES,
        "{}",
        structured_len(&first)
    );
    assert_eq!(first.structured["truncated"], true);
    let next = first.structured["next_offset"]
        .as_u64()
        .expect("next_offset");
    assert_eq!(
        next,
        first.structured["end_line"].as_u64().expect("end") + 1
    );
    let second = c.call_ok("file_read", json!({"path": "big.txt", "offset": next}));
    assert_eq!(second.structured["start_line"], next);
    let head = second.structured["content"].as_str().expect("content");
    assert!(head.starts_with(&format!("{next}: {line}\n")));
}

/// 3,000 entries with 200-character names.
fn many_entries(fx: &Fx) {
    for i in 0..3000 {
        fx.write(&format!("many/{i:04}-{}", "n".repeat(200)), "x");
    }
}

#[test]
fn read_directory_default_page_holds_the_budget() {
    use kitbag_shared::limits::RESULT_BUDGET_BYTES;
    let fx = Fx::new();
    many_entries(&fx);
    let mut c = fx.client();
    let dir = c.call_ok("file_read", json!({"path": "many"}));
    assert!(
        structured_len(&dir) < RESULT_BUDGET_BYTES,
        "{}",
        structured_len(&dir)
    );
    assert_eq!(dir.structured["truncated"], true);
    let names: Vec<&str> = dir.structured["content"]
        .as_str()
        .expect("content")
        .lines()
        .collect();
    let next = dir.structured["next_offset"].as_u64().expect("next_offset");
    assert_eq!(next, names.len() as u64 + 1);
    let more = c.call_ok("file_read", json!({"path": "many", "offset": next}));
    let first_more = more.structured["content"].as_str().expect("content");
    assert!(first_more.starts_with(&format!("{:04}-", names.len())));
}

#[test]
fn list_default_page_holds_the_budget() {
    use kitbag_shared::limits::RESULT_BUDGET_BYTES;
    let fx = Fx::new();
    many_entries(&fx);
    let mut c = fx.client();
    let list = c.call_ok("file_list", json!({"path": "many"}));
    assert!(
        structured_len(&list) < RESULT_BUDGET_BYTES,
        "{}",
        structured_len(&list)
    );
    assert_eq!(list.structured["truncated"], true);
    let shown = list.structured["entries"]
        .as_array()
        .expect("entries")
        .len();
    assert_eq!(list.structured["next_offset"], shown as u64);
    let page2 = c.call_ok("file_list", json!({"path": "many", "offset": shown}));
    let p2 = page2.structured["entries"][0]["path"]
        .as_str()
        .expect("path");
    assert!(p2.starts_with(&format!("many/{shown:04}-")), "{p2}");
}

#[test]
fn edit_text_diff_holds_the_budget_escaped() {
    use kitbag_shared::limits::RESULT_BUDGET_BYTES;
    let fx = Fx::new();
    // Every byte of the diff is one JSON escapes: raw 32 KB would serialize to ~64 KB.
    let body: String = (0..2000).map(|_| "\"\"\"\"\"\"\"\"q\n").collect();
    fx.write("quotes.txt", &body);
    let mut c = fx.client();
    c.call_ok("file_read", json!({"path": "quotes.txt"}));
    let r = c.call_ok(
        "edit_text",
        json!({"path": "quotes.txt", "old_string": "q", "new_string": "Q", "replace_all": true}),
    );
    assert!(
        structured_len(&r) < RESULT_BUDGET_BYTES,
        "{}",
        structured_len(&r)
    );
    assert_eq!(r.structured["diff_truncated"], true);
    assert_eq!(r.structured["replacements"], 2000);
    // Not unique: the error lists the first lines only, and says how many there are.
    c.call_ok("file_read", json!({"path": "quotes.txt"}));
    let e = c.call(
        "edit_text",
        json!({"path": "quotes.txt", "old_string": "Q", "new_string": "q"}),
    );
    assert!(e.is_error);
    assert_eq!(e.structured["error"]["detail"]["count"], 2000);
    assert_eq!(
        e.structured["error"]["detail"]["lines"]
            .as_array()
            .expect("lines")
            .len(),
        100
    );
}
