//! search_grep, search_glob, search_ast and edit_ast against the real binary.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

fn bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_kitbag-search"))
}

struct Fx(tempfile::TempDir);

impl Fx {
    fn new(files: &[(&str, &str)]) -> Self {
        let fx = Fx(tempfile::tempdir().expect("tmp"));
        for (p, c) in files {
            fx.write(p, c.as_bytes());
        }
        fx
    }
    fn p(&self, rel: &str) -> PathBuf {
        self.0.path().join(rel)
    }
    fn write(&self, rel: &str, c: &[u8]) {
        let p = self.p(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, c).expect("write");
    }
    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.p(rel)).expect("read")
    }
    fn client(&self, args: &[&str]) -> McpClient {
        McpClient::spawn(bin(), args, self.0.path(), Era::Handshake)
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|s| s.as_str().expect("str").to_string())
        .collect()
}

fn project() -> Fx {
    Fx::new(&[
        (".gitignore", "build/\n*.log\n"),
        (
            "src/main.ts",
            "// TODO: handle errors\nconsole.log(\"server started\");\nconst x = 1;\n",
        ),
        (
            "src/util.ts",
            "export const a = 1; // TODO later\nconsole.log(a, b);\n",
        ),
        ("src/legacy.js", "// TODO: remove\nconsole.log('old');\n"),
        ("src/auth.test.ts", "test('auth', () => {});\n"),
        ("src/db.test.ts", "test('db', () => {});\n"),
        ("build/out.ts", "// TODO generated\n"),
        ("debug.log", "TODO in a log\n"),
        (".secret/notes.ts", "// TODO hidden\n"),
        (
            "lib/core.rs",
            "fn main() {\n    let v = compute().unwrap();\n    println!(\"{}\", v);\n}\n",
        ),
    ])
}

#[test]
fn grep_matches_filters_and_ignores() {
    let fx = project();
    fx.write("assets/logo.bin", b"TODO\0\x01\x02binary TODO");
    let mut c = fx.client(&[]);
    let r = c.call_ok(
        "search_grep",
        json!({"pattern": "TODO", "output_mode": "content"}),
    );
    let lines: Vec<&str> = r.text.lines().collect();
    assert_eq!(
        lines,
        [
            "src/legacy.js:1:// TODO: remove",
            "src/main.ts:1:// TODO: handle errors",
            "src/util.ts:1:export const a = 1; // TODO later"
        ],
        "gitignored, hidden and binary files are skipped; results sorted"
    );
    assert_eq!(r.structured["matches"][1]["file"], "src/main.ts");
    assert_eq!(r.structured["matches"][1]["line"], 1);
    let r = c.call_ok("search_grep", json!({"pattern": "TODO", "include": "*.ts"}));
    assert_eq!(
        strings(&r.structured["files"]),
        ["src/main.ts", "src/util.ts"]
    );
    let r = c.call_ok(
        "search_grep",
        json!({"pattern": "TODO", "include": ["*.ts", "*.js", "!util.ts"]}),
    );
    assert_eq!(
        strings(&r.structured["files"]),
        ["src/legacy.js", "src/main.ts"]
    );
    let r = c.call_ok("search_grep", json!({"pattern": "TODO", "type": "js"}));
    assert_eq!(strings(&r.structured["files"]), ["src/legacy.js"]);
    let r = c.call_ok(
        "search_grep",
        json!({"pattern": "TODO", "hidden": true, "no_ignore": true}),
    );
    let files = strings(&r.structured["files"]);
    for f in [".secret/notes.ts", "build/out.ts", "debug.log"] {
        assert!(files.contains(&f.to_string()), "{f} in {files:?}");
    }
    assert!(
        !files.iter().any(|f| f.ends_with(".bin")),
        "binary skipped even with no_ignore"
    );
    let r = c.call_ok(
        "search_grep",
        json!({"pattern": "todo", "output_mode": "count"}),
    );
    assert_eq!(
        r.structured["counts"][0],
        json!({"file": "src/legacy.js", "count": 1}),
        "smart case: lowercase is insensitive"
    );
    let r = c.call_ok(
        "search_grep",
        json!({"pattern": "Todo", "output_mode": "count"}),
    );
    assert_eq!(
        r.structured["total_files"], 0,
        "smart case: an uppercase letter makes it sensitive"
    );
    let r = c.call_ok(
        "search_grep",
        json!({"pattern": "todo", "case": "sensitive"}),
    );
    assert_eq!(r.structured["total_files"], 0);
    let r = c.call_ok(
        "search_grep",
        json!({"pattern": "console.log(a", "fixed_strings": true}),
    );
    assert_eq!(strings(&r.structured["files"]), ["src/util.ts"]);
    let r = c.call_ok(
        "search_grep",
        json!({"pattern": "a", "word": true, "path": "src/util.ts", "output_mode": "content"}),
    );
    assert_eq!(r.structured["total_matches"], 2);
    let r = c.call_ok("search_grep", json!({"pattern": "unwrap\\(\\);\\n\\s+println", "multiline": true, "output_mode": "content"}));
    assert_eq!(r.structured["matches"][0]["line"], 2);
    let r = c.call_ok(
        "search_grep",
        json!({"pattern": "unwrap", "path": "lib", "output_mode": "content", "context": 1}),
    );
    assert_eq!(
        r.text,
        "lib/core.rs-1-fn main() {\nlib/core.rs:2:    let v = compute().unwrap();\nlib/core.rs-3-    println!(\"{}\", v);"
    );
}

#[test]
fn grep_pages_are_disjoint_and_consecutive() {
    let fx = Fx::new(&[]);
    for i in 0..30 {
        fx.write(
            &format!("f{i:02}.txt"),
            format!("needle {i}\nhay\nneedle again {i}\n").as_bytes(),
        );
    }
    let mut c = fx.client(&[]);
    let all = c.call_ok(
        "search_grep",
        json!({"pattern": "needle", "output_mode": "content"}),
    );
    let all: Vec<Value> = all.structured["matches"].as_array().expect("m").clone();
    assert_eq!(all.len(), 60);
    let mut paged = Vec::new();
    let mut offset = 0;
    loop {
        let r = c.call_ok("search_grep", json!({"pattern": "needle", "output_mode": "content", "head_limit": 7, "offset": offset}));
        let page = r.structured["matches"].as_array().expect("m").clone();
        paged.extend(page.clone());
        if r.structured["truncated"] != true {
            break;
        }
        assert_eq!(page.len(), 7);
        assert_eq!(r.structured["truncated_reason"], "head_limit");
        offset = r.structured["next_offset"].as_u64().expect("next");
    }
    assert_eq!(paged, all, "pages reassemble the whole answer exactly");
    let files = c.call_ok(
        "search_grep",
        json!({"pattern": "needle", "head_limit": 10, "offset": 25}),
    );
    assert_eq!(
        strings(&files.structured["files"]),
        ["f25.txt", "f26.txt", "f27.txt", "f28.txt", "f29.txt"]
    );
}

#[test]
fn grep_output_cap_and_time_budget() {
    let fx = Fx::new(&[]);
    for i in 0..400 {
        let body: String = (0..50)
            .map(|l| format!("line {l} of file {i} with some words to match\n"))
            .collect();
        fx.write(&format!("d{}/f{i}.txt", i % 10), body.as_bytes());
    }
    let mut c = fx.client(&["--max-output-bytes", "4096"]);
    let r = c.call_ok(
        "search_grep",
        json!({"pattern": "words", "output_mode": "content"}),
    );
    assert_eq!(r.structured["truncated"], true);
    assert_eq!(r.structured["truncated_reason"], "output_cap");
    assert!(r.text.len() < 4096 + 300, "{}", r.text.len());
    assert!(r.text.contains("offset="));
    // At the default cap every mode's structured result stays under the 50 KB at which Claude
    // Code swaps a result for a preview — with context lines and text JSON must escape, too.
    let mut dflt = fx.client(&[]);
    for args in [
        json!({"pattern": "words", "output_mode": "content"}),
        json!({"pattern": "words", "output_mode": "content", "context": 3}),
        json!({"pattern": "words", "output_mode": "files_with_matches"}),
        json!({"pattern": "words", "output_mode": "count"}),
    ] {
        let r = dflt.call_ok("search_grep", args.clone());
        let size = r.structured.to_string().len();
        assert!(size < 45 * 1024, "{args}: {size} bytes");
    }
    fx.write(
        "q/quotes.txt",
        "\"words\" \\ \t \"\\\"\n".repeat(3000).as_bytes(),
    );
    let r = dflt.call_ok(
        "search_grep",
        json!({"pattern": "words", "output_mode": "content", "path": "q"}),
    );
    let size = r.structured.to_string().len();
    assert!(size < 45 * 1024, "escaped text: {size} bytes");
    // A 1 ms budget cannot walk 400 files: the answer is partial and says so.
    let mut slow = fx.client(&["--search-timeout-ms", "1"]);
    let r = slow.call_ok(
        "search_grep",
        json!({"pattern": "(\\w+\\s+){3}match", "output_mode": "count"}),
    );
    assert_eq!(r.structured["truncated"], true);
    assert_eq!(r.structured["truncated_reason"], "time_budget");
    assert!(r.structured["files_searched"].as_u64().expect("n") < 400);
    assert!(r.text.contains("budget"));
}

#[test]
fn grep_progress_and_cancellation() {
    let fx = Fx::new(&[]);
    let words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau\n";
    let body = words.repeat(400);
    for i in 0..1500 {
        fx.write(&format!("t{}/f{i}.txt", i % 20), body.as_bytes());
    }
    let mut c = fx.client(&["--progress-interval-ms", "5"]);
    // Slow enough to take a while on every machine: a backtracking-free but busy pattern.
    let slow = json!({"pattern": "(?i)(\\w+\\s+){8}zzz", "output_mode": "count"});
    let r = c.call_with_progress("search_grep", slow.clone(), "tok-1");
    assert!(!r.is_error, "{}", r.text);
    let progress: Vec<Value> = c
        .take_notifications()
        .into_iter()
        .filter(|n| n["method"] == "notifications/progress")
        .collect();
    assert!(!progress.is_empty(), "progress notifications while walking");
    assert_eq!(progress[0]["params"]["progressToken"], "tok-1");
    assert!(
        progress[0]["params"]["message"]
            .as_str()
            .expect("message")
            .contains("files searched")
    );
    // Cancel an in-flight search: the server stops it and keeps serving.
    let id = c.send_request(
        "tools/call",
        json!({"name": "search_grep", "arguments": slow}),
    );
    std::thread::sleep(Duration::from_millis(50));
    c.notify(
        "notifications/cancelled",
        json!({"requestId": id, "reason": "test"}),
    );
    let started = std::time::Instant::now();
    let r = c.call_ok(
        "search_grep",
        json!({"pattern": "alpha", "path": "t0/f0.txt", "output_mode": "count"}),
    );
    assert_eq!(r.structured["counts"][0]["count"], 400);
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn glob_finds_tests_newest_first() {
    let fx = project();
    let mut c = fx.client(&[]);
    let r = c.call_ok(
        "search_glob",
        json!({"pattern": "**/*.test.ts", "sort": "path"}),
    );
    assert_eq!(
        strings(&r.structured["files"]),
        ["src/auth.test.ts", "src/db.test.ts"]
    );
    let f = std::fs::File::options()
        .write(true)
        .open(fx.p("src/auth.test.ts"))
        .expect("open");
    f.set_modified(std::time::SystemTime::now() + Duration::from_secs(60))
        .expect("touch");
    let r = c.call_ok("search_glob", json!({"pattern": "*.test.ts"}));
    assert_eq!(
        strings(&r.structured["files"]),
        ["src/auth.test.ts", "src/db.test.ts"],
        "newest first"
    );
    let r = c.call_ok("search_glob", json!({"pattern": "*.ts", "limit": 2}));
    assert_eq!(r.structured["count"], 2);
    assert_eq!(
        r.structured["total"], 4,
        "build/ is ignored and .secret is hidden"
    );
    assert_eq!(r.structured["truncated"], true);
    let r = c.call_ok(
        "search_glob",
        json!({"pattern": "*.ts", "hidden": true, "no_ignore": true}),
    );
    assert_eq!(r.structured["total"], 6);
    let r = c.call_ok("search_glob", json!({"pattern": "src/*.js", "path": "."}));
    assert_eq!(strings(&r.structured["files"]), ["src/legacy.js"]);
}

#[test]
fn ast_search_captures() {
    let fx = project();
    let mut c = fx.client(&[]);
    let r = c.call_ok(
        "search_ast",
        json!({"pattern": "console.log($MSG)", "lang": "typescript", "paths": ["src"]}),
    );
    assert_eq!(r.structured["count"], 1);
    let m = &r.structured["matches"][0];
    assert_eq!(m["file"], "src/main.ts");
    assert_eq!(m["line"], 2);
    assert_eq!(m["meta_variables"]["MSG"], "\"server started\"");
    let r = c.call_ok(
        "search_ast",
        json!({"pattern": "console.log($$$ARGS)", "lang": "ts", "context": 1}),
    );
    let util = r.structured["matches"]
        .as_array()
        .expect("m")
        .iter()
        .find(|m| m["file"] == "src/util.ts")
        .expect("util")
        .clone();
    assert_eq!(
        util["meta_variables"]["ARGS"],
        json!(["a", "b"]),
        "separators dropped"
    );
    assert_eq!(
        util["context_before"],
        json!(["export const a = 1; // TODO later"])
    );
    let r = c.call_ok(
        "search_ast",
        json!({"pattern": "$X.unwrap()", "paths": "lib"}),
    );
    assert_eq!(
        r.structured["lang"], "rust",
        "inferred from the only language present"
    );
    assert_eq!(
        r.structured["matches"][0]["meta_variables"]["X"],
        "compute()"
    );
    // A minified one-line file cannot flood the context.
    fx.write(
        "min/big.js",
        format!(
            "{}console.log(1);{}",
            "var a=1;".repeat(5000),
            "var b=2;".repeat(5000)
        )
        .as_bytes(),
    );
    let r = c.call_ok(
        "search_ast",
        json!({"pattern": "console.log($A)", "paths": "min", "context": 2}),
    );
    assert!(r.text.len() < 6000, "{}", r.text.len());
}

#[test]
fn edit_ast_preview_apply_limits_and_inference() {
    let fx = Fx::new(&[
        (
            "src/a.ts",
            "console.log(\"one\");\nconsole.log(\"two\");\nconsole.log(\"three\");\n",
        ),
        ("src/b.ts", "console.log(\"b\");\n"),
        ("other/c.ts", "console.log(\"c\");\n"),
    ]);
    let before_a = fx.read("src/a.ts");
    let mut c = fx.client(&[]);
    let rw = json!({"console.log($MSG)": "logger.debug($MSG)"});
    let r = c.call_ok("edit_ast", json!({"rewrites": rw, "path": "src"}));
    assert_eq!(r.structured["applied"], false);
    assert_eq!(r.structured["total_replacements"], 4);
    assert_eq!(r.structured["changes"][0]["after"], "logger.debug(\"one\")");
    assert_eq!(fx.read("src/a.ts"), before_a, "dry run writes nothing");
    let preview_diff = r.structured["file_changes"][0]["diff"].clone();
    // Single-file path: only that file.
    let r = c.call_ok(
        "edit_ast",
        json!({"rewrites": rw, "path": "src/b.ts", "dry_run": false}),
    );
    assert_eq!(r.structured["files_touched"], 1);
    assert_eq!(fx.read("src/b.ts"), "logger.debug(\"b\");\n");
    assert_eq!(fx.read("other/c.ts"), "console.log(\"c\");\n");
    // Caps.
    let r = c.call_ok(
        "edit_ast",
        json!({"rewrites": rw, "path": "src/a.ts", "max_replacements": 1}),
    );
    assert_eq!(r.structured["total_replacements"], 1);
    assert_eq!(r.structured["limit_reached"], true);
    let r = c.call_ok("edit_ast", json!({"rewrites": rw, "max_files": 1}));
    assert_eq!(r.structured["files_touched"], 1);
    assert_eq!(r.structured["limit_reached"], true);
    // Apply writes exactly the previewed bytes.
    let r = c.call_ok(
        "edit_ast",
        json!({"rewrites": rw, "path": "src/a.ts", "dry_run": false}),
    );
    assert_eq!(r.structured["applied"], true);
    assert_eq!(r.structured["file_changes"][0]["diff"], preview_diff);
    assert_eq!(
        fx.read("src/a.ts"),
        "logger.debug(\"one\");\nlogger.debug(\"two\");\nlogger.debug(\"three\");\n"
    );
    // Language inference: mixed extensions need `lang`; uniform ones infer it.
    fx.write("mixed/x.ts", b"console.log(1);\n");
    fx.write("mixed/y.js", b"console.log(2);\n");
    let e = c
        .call_err(
            "edit_ast",
            json!({"rewrites": rw, "path": "mixed"}),
            "invalid_params",
        )
        .expect_field("lang");
    assert!(
        e.text.contains("javascript") && e.text.contains("typescript"),
        "{}",
        e.text
    );
    let r = c.call_ok(
        "edit_ast",
        json!({"rewrites": rw, "path": "mixed", "lang": "javascript"}),
    );
    assert_eq!(r.structured["total_replacements"], 1);
    c.call_err(
        "edit_ast",
        json!({"rewrites": {"console.log(": "x"}, "lang": "typescript"}),
        "invalid_pattern",
    );
    c.call_err(
        "edit_ast",
        json!({"rewrites": rw, "path": "../../etc"}),
        "capability_denied",
    )
    .expect_field("path");
}

#[test]
fn edit_ast_failure_leaves_every_file_unchanged() {
    let fx = Fx::new(&[("a/one.py", "print(1)\n"), ("b/two.py", "print(2)\n")]);
    // An immutable file cannot be replaced, even by root: the second rename fails.
    let locked = fx.p("b/two.py");
    let status = std::process::Command::new("chattr")
        .arg("+i")
        .arg(&locked)
        .status();
    if !status.is_ok_and(|s| s.success()) {
        assert!(
            std::env::var("CI").is_err(),
            "chattr +i is needed for this test under CI"
        );
        eprintln!("SKIP edit_ast_failure_leaves_every_file_unchanged: chattr +i unsupported here");
        return;
    }
    let mut c = fx.client(&[]);
    let r = c.call(
        "edit_ast",
        json!({"rewrites": {"print($X)": "log($X)"}, "dry_run": false}),
    );
    let _ = std::process::Command::new("chattr")
        .arg("-i")
        .arg(&locked)
        .status();
    assert!(r.is_error, "{}", r.text);
    assert_eq!(r.error_code(), Some("io_error"));
    assert_eq!(
        fx.read("a/one.py"),
        "print(1)\n",
        "the first file was rolled back"
    );
    assert_eq!(fx.read("b/two.py"), "print(2)\n");
    let leftovers: Vec<_> = std::fs::read_dir(fx.p("a"))
        .expect("ls")
        .map(|e| e.expect("e").file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "no temp files left: {leftovers:?}");
}

#[test]
fn caged_server_marks_outside_and_refuses_apply() {
    let fx = project();
    let mut c = fx.client(&["--allow", "ro:src"]);
    let r = c.call_ok(
        "search_grep",
        json!({"pattern": "TODO|unwrap", "output_mode": "content"}),
    );
    let core = r.structured["matches"]
        .as_array()
        .expect("m")
        .iter()
        .find(|m| m["file"] == "lib/core.rs")
        .expect("core")
        .clone();
    assert_eq!(core["outside_cage"], true);
    assert!(
        core.get("content").is_none(),
        "no text outside the cage: {core}"
    );
    let main = r.structured["matches"]
        .as_array()
        .expect("m")
        .iter()
        .find(|m| m["file"] == "src/main.ts")
        .expect("main")
        .clone();
    assert!(main.get("outside_cage").is_none());
    assert!(main["content"].as_str().is_some());
    let r = c.call_ok(
        "search_ast",
        json!({"pattern": "$X.unwrap()", "paths": "lib"}),
    );
    assert_eq!(r.structured["matches"][0]["outside_cage"], true);
    assert!(r.structured["matches"][0].get("content").is_none());
    let rw = json!({"console.log($MSG)": "logger.debug($MSG)"});
    c.call_ok(
        "edit_ast",
        json!({"rewrites": rw, "path": "src", "lang": "typescript"}),
    );
    c.call_err(
        "edit_ast",
        json!({"rewrites": rw, "path": "src", "lang": "typescript", "dry_run": false}),
        "capability_denied",
    )
    .expect_field("path");
    assert!(fx.read("src/main.ts").contains("console.log"));
}

#[test]
fn bad_input_is_typed() {
    let fx = project();
    let mut c = fx.client(&[]);
    let e = c
        .call_err("search_grep", json!({"pattern": "foo("}), "invalid_pattern")
        .expect_field("pattern");
    assert!(
        e.text.contains("unclosed") || e.text.contains("regex"),
        "{}",
        e.text
    );
    c.call_err("search_grep", json!({"pattern": ""}), "invalid_params")
        .expect_field("pattern");
    c.call_err(
        "search_grep",
        json!({"pattern": "x", "type": "klingon"}),
        "invalid_params",
    )
    .expect_field("type");
    c.call_err(
        "search_grep",
        json!({"pattern": "x", "head_limit": 0}),
        "invalid_params",
    )
    .expect_field("head_limit");
    c.call_err(
        "search_grep",
        json!({"pattern": "x", "offset": -1}),
        "invalid_params",
    )
    .expect_field("offset");
    c.call_err(
        "search_grep",
        json!({"pattern": "x", "context": 2, "before": 1, "output_mode": "content"}),
        "invalid_params",
    )
    .expect_field("context");
    c.call_err(
        "search_grep",
        json!({"pattern": "x", "context": 2}),
        "invalid_params",
    )
    .expect_field("context");
    c.call_err(
        "search_grep",
        json!({"pattern": "x", "output_mode": "lines"}),
        "invalid_params",
    )
    .expect_field("output_mode");
    c.call_err(
        "search_grep",
        json!({"pattern": "x", "path": "../"}),
        "capability_denied",
    )
    .expect_field("path");
    c.call_err(
        "search_grep",
        json!({"pattern": "x", "path": "nope"}),
        "file_not_found",
    )
    .expect_field("path");
    c.call_err(
        "search_grep",
        json!({"pattern": "x", "include": "a[b"}),
        "invalid_params",
    )
    .expect_field("include");
    c.call_err("search_glob", json!({"pattern": "a[b"}), "invalid_pattern")
        .expect_field("pattern");
    // Oversize patterns are refused before any work (87,000 `*` used to panic unanswered; a
    // 50 MB regex reached 5.2 GB before the engine refused it), and not echoed back whole.
    let r = c
        .call_err(
            "search_glob",
            json!({"pattern": "*".repeat(87_000)}),
            "invalid_params",
        )
        .expect_field("pattern");
    assert!(r.text.len() < 300, "{}", r.text.len());
    c.call_err(
        "search_grep",
        json!({"pattern": "a".repeat(2 << 20)}),
        "invalid_params",
    )
    .expect_field("pattern");
    c.call_err(
        "search_glob",
        json!({"pattern": "*", "limit": -5}),
        "invalid_params",
    )
    .expect_field("limit");
    c.call_err(
        "search_ast",
        json!({"pattern": "foo(", "lang": "rust"}),
        "invalid_pattern",
    )
    .expect_field("pattern");
    c.call_err(
        "search_ast",
        json!({"pattern": "foo()", "lang": "cobol"}),
        "invalid_params",
    )
    .expect_field("lang");
    c.call_err(
        "search_ast",
        json!({"pattern": "foo()", "lang": "rust", "limit": 0}),
        "invalid_params",
    )
    .expect_field("limit");
    c.call_err("edit_ast", json!({"rewrites": {}}), "invalid_params")
        .expect_field("rewrites");
    c.call_err(
        "edit_ast",
        json!({"rewrites": {"a($X)": 5}, "lang": "rust"}),
        "invalid_params",
    )
    .expect_field("rewrites.a($X)");
    c.call_err(
        "edit_ast",
        json!({"rewrites": {"a($X)": "b($X)"}, "lang": "rust", "max_files": 0}),
        "invalid_params",
    )
    .expect_field("max_files");
}

#[test]
fn case_insensitive_grep_with_the_literal_prefilter_misses_nothing() {
    let fx = Fx::new(&[
        ("a.rs", "fn NEW_WITH_capacity() {}\nfn new_without() {}\n"),
        ("b.rs", "let x = 1;\n    fn   New_With_Size(n: usize) {}\n"),
        ("c.rs", "fn new_with() {}\n"),
        // The Kelvin sign folds to k: the prefilter must not lose this line.
        ("d.txt", "\u{212A}elvin_mark here\nkelvin_mark there\n"),
        ("e.txt", "nothing to see\n"),
    ]);
    let mut c = fx.client(&[]);
    let r = c.call_ok(
        "search_grep",
        json!({"pattern": r"fn\s+new_with_\w+", "case": "insensitive", "output_mode": "content"}),
    );
    let lines: Vec<String> = r
        .text
        .lines()
        .map(|l| l.splitn(3, ':').take(2).collect::<Vec<_>>().join(":"))
        .collect();
    assert_eq!(lines, vec!["a.rs:1", "b.rs:2"], "{}", r.text);
    // Smart case: all-lowercase pattern → insensitive.
    let r = c.call_ok(
        "search_grep",
        json!({"pattern": "kelvin_mark", "output_mode": "count"}),
    );
    assert_eq!(r.structured["total_matches"], 2, "{}", r.text);
    // Fixed strings go through the same path.
    let r = c.call_ok(
        "search_grep",
        json!({"pattern": "new_with_s", "fixed_strings": true, "case": "insensitive"}),
    );
    assert_eq!(strings(&r.structured["files"]), vec!["b.rs"], "{}", r.text);
}

/// The compact JSON size of a result's `structuredContent`, as the issue #37 budget counts it.
fn structured_len(r: &kitbag_testkit::ToolCall) -> usize {
    kitbag_shared::limits::json_len(&r.structured)
}

#[test]
fn grep_default_page_holds_the_budget() {
    use kitbag_shared::limits::RESULT_BUDGET_BYTES;
    let fx = Fx::new(&[]);
    // Multiline matches of 250 lines each: JSON carries each newline as two bytes.
    let block = format!("{}y\n", "x\n".repeat(250));
    fx.write("blank/b.txt", block.repeat(240).as_bytes());
    let mut c = fx.client(&[]);
    let args = json!({"pattern": "(x\\n){250}", "multiline": true, "output_mode": "content"});
    let r = c.call_ok("search_grep", args.clone());
    assert!(
        structured_len(&r) < RESULT_BUDGET_BYTES,
        "grep: {}",
        structured_len(&r)
    );
    assert_eq!(r.structured["truncated"], true);
    let shown = r.structured["returned"].as_u64().expect("returned");
    assert_eq!(r.structured["next_offset"], shown);
    let mut next = args;
    next["offset"] = json!(shown);
    let more = c.call_ok("search_grep", next);
    // Blocks of 251 lines: the next page's first match is block `shown`.
    assert_eq!(more.structured["matches"][0]["line"], shown * 251 + 1);
}

#[test]
fn glob_default_page_holds_the_budget() {
    use kitbag_shared::limits::RESULT_BUDGET_BYTES;
    let fx = Fx::new(&[]);
    // 300 files with long names in a long-named directory.
    let dir = "d".repeat(240);
    for i in 0..300 {
        fx.write(&format!("{dir}/{i:03}-{}.log", "n".repeat(200)), b"x\n");
    }
    let mut c = fx.client(&[]);
    let r = c.call_ok("search_glob", json!({"pattern": "*.log", "sort": "path"}));
    assert!(
        structured_len(&r) < RESULT_BUDGET_BYTES,
        "glob: {}",
        structured_len(&r)
    );
    assert_eq!(r.structured["truncated"], true);
    let files = strings(&r.structured["files"]);
    assert!(files.len() < 100, "cut by bytes before the default limit");
    assert_eq!(r.structured["next_offset"], files.len() as u64);
    let more = c.call_ok(
        "search_glob",
        json!({"pattern": "*.log", "sort": "path", "offset": files.len()}),
    );
    let next = strings(&more.structured["files"]);
    assert!(
        next[0].starts_with(&format!("{dir}/{:03}-", files.len())),
        "{}",
        next[0]
    );
}

#[test]
fn search_ast_default_page_holds_the_budget() {
    use kitbag_shared::limits::RESULT_BUDGET_BYTES;
    // 300 functions of ~1,500 characters each.
    let body: String = (0..300)
        .map(|i| format!("fn f{i:03}() {{ {} }}\n", "let x = \"q\"; ".repeat(110)))
        .collect();
    let fx = Fx::new(&[("rs/big.rs", &body)]);
    let mut c = fx.client(&[]);
    let r = c.call_ok("search_ast", json!({"pattern": "fn $N() { $$$B }"}));
    assert!(
        structured_len(&r) < RESULT_BUDGET_BYTES,
        "search_ast: {}",
        structured_len(&r)
    );
    assert_eq!(r.structured["truncated"], true);
    let count = r.structured["count"].as_u64().expect("count");
    assert!(count < 100, "cut by bytes before the default limit");
    assert_eq!(r.structured["next_offset"], count);
    let more = c.call_ok(
        "search_ast",
        json!({"pattern": "fn $N() { $$$B }", "offset": count}),
    );
    assert_eq!(
        more.structured["matches"][0]["meta_variables"]["N"],
        format!("f{count:03}")
    );
    assert_eq!(more.structured["matches"][0]["line"], count + 1);
}

#[test]
fn edit_ast_default_dry_run_holds_the_budget() {
    use kitbag_shared::limits::RESULT_BUDGET_BYTES;
    let fx = Fx::new(&[]);
    // A call to rewrite five times in each of 300 files.
    for i in 0..300 {
        let calls = "old_call(\"a\", \"b\");\n".repeat(5);
        fx.write(
            &format!("ts/f{i:03}.ts"),
            format!("// {i}\n{calls}").as_bytes(),
        );
    }
    let mut c = fx.client(&[]);
    let rw = json!({"old_call($A, $B)": "new_call($B, $A)"});
    let r = c.call_ok("edit_ast", json!({"rewrites": rw, "path": "ts"}));
    assert!(
        structured_len(&r) < RESULT_BUDGET_BYTES,
        "edit_ast: {}",
        structured_len(&r)
    );
    assert_eq!(r.structured["total_replacements"], 1500);
    assert_eq!(r.structured["changes_truncated"], true);
    let changes = r.structured["changes"].as_array().expect("changes");
    let next = r.structured["next_offset"].as_u64().expect("next_offset");
    assert_eq!(next, changes.len() as u64);
    let listed: u64 = r.structured["file_changes"]
        .as_array()
        .expect("file_changes")
        .iter()
        .map(|f| f["count"].as_u64().expect("count"))
        .sum();
    assert_eq!(listed, next, "the diffs cover the changes listed");
    let last = changes.last().expect("a change");
    let more = c.call_ok(
        "edit_ast",
        json!({"rewrites": rw, "path": "ts", "offset": next}),
    );
    let first = &more.structured["changes"][0];
    // Five calls a file, on lines 2-6: the next page starts at the change after the last one.
    let at = |c: &Value| {
        let file = c["path"].as_str().expect("path").to_string();
        (file, c["start_line"].as_u64().expect("line"))
    };
    let (lf, ll) = at(last);
    let expect = if ll == 6 {
        let n: u32 = lf[lf.len() - 6..lf.len() - 3].parse().expect("n");
        (format!("ts/f{:03}.ts", n + 1), 2)
    } else {
        (lf, ll + 1)
    };
    assert_eq!(at(first), expect);
    assert!(
        fx.read("ts/f000.ts").contains("old_call"),
        "a dry run writes nothing"
    );
}

/// Edit feedback (issue #41 item 1): with `--lsp`, an applied `edit_ast` names the error its
/// rewrite introduced, from pyright; a dry run is not checked.
#[test]
fn edit_ast_reports_what_the_rewrite_broke() {
    let installed = kitbag_testkit::clients::on_path("pyright-langserver");
    if !kitbag_testkit::clients::require(installed, "pyright-langserver is not installed") {
        return;
    }
    let d = tempfile::tempdir().expect("tmp");
    let app = "def greet(name: str) -> str:\n    return \"hi \" + name\n\n\nprint(greet(\"x\"))\n";
    std::fs::write(d.path().join("app.py"), app).expect("w");
    let mut c = McpClient::spawn(
        bin(),
        &kitbag_testkit::clients::PATIENT_EDIT_CHECK,
        d.path(),
        Era::Modern,
    );
    c.timeout = Duration::from_secs(90);
    let rewrite =
        json!({"rewrites": {"greet($A)": "greet(1)"}, "path": "app.py", "lang": "python"});
    let r = c.call_ok("edit_ast", rewrite.clone());
    assert!(
        r.structured.get("diagnostics").is_none(),
        "a dry run: {}",
        r.structured
    );
    let mut apply = rewrite;
    apply["dry_run"] = json!(false);
    let r = c.call_ok("edit_ast", apply);
    assert_eq!(r.structured["applied"], true);
    let dg = &r.structured["diagnostics"];
    assert_eq!(dg["settled"], true, "{dg}");
    assert_eq!(dg["introduced_count"], 1, "{dg}");
    assert_eq!(
        (&dg["introduced"][0]["line"], &dg["introduced"][0]["code"]),
        (&json!(5), &json!("reportArgumentType")),
        "{dg}"
    );
    assert!(r.text.contains("+ app.py:5:"), "{}", r.text);
    c.shutdown();
}
