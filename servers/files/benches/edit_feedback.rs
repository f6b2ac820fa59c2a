//! Edit feedback (issue #41 item 1): what checking a write with its language server adds
//! to the write, per server — `edit_text` through `kitbag-files --lsp` with the check on,
//! against the same edit with `check: false`, in one run. Each round introduces an error
//! and then fixes it; the bench also counts how many introduced errors the answers named
//! and how many answers were settled. The reference is what an agent does without it: run
//! the language's own checker on the broken file (`pyright`, `tsc --noEmit`, `go vet`,
//! `gcc -fsyntax-only`, `cargo check`), timed the same way.
//!
//! `cargo bench -p kitbag-files --bench edit_feedback` — servers not installed are skipped.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use kitbag_testkit::bench::{median, ms};
use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

const ROUNDS: usize = 15;

struct Case {
    name: &'static str,
    program: &'static str,
    files: &'static [(&'static str, &'static str)],
    /// The file edited, its correct text and the text that breaks it.
    edit: (&'static str, &'static str, &'static str),
    /// The language's own checker, run in the project (it must fail on the broken file).
    reference: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        name: "pyright",
        program: "pyright-langserver",
        files: &[(
            "app.py",
            "def greet(name: str) -> str:\n    return \"hi \" + name\n\n\nprint(greet(\"x\"))\n",
        )],
        edit: ("app.py", "greet(\"x\"))", "greet(1))"),
        reference: &["pyright", "app.py"],
    },
    Case {
        name: "typescript",
        program: "typescript-language-server",
        files: &[(
            "index.ts",
            "function greet(name: string): string {\n  return \"hi \" + name;\n}\n\nconsole.log(greet(\"x\"));\n",
        )],
        edit: ("index.ts", "greet(\"x\"))", "greet(1))"),
        reference: &["tsc", "--noEmit", "index.ts"],
    },
    Case {
        name: "gopls",
        program: "gopls",
        files: &[
            ("go.mod", "module demo\n\ngo 1.21\n"),
            (
                "main.go",
                "package main\n\nimport \"fmt\"\n\nfunc greet(name string) string { return \"hi \" + name }\n\nfunc main() { fmt.Println(greet(\"x\")) }\n",
            ),
        ],
        edit: ("main.go", "greet(\"x\"))", "greet(1))"),
        reference: &["go", "vet", "./..."],
    },
    Case {
        name: "clangd",
        program: "clangd",
        files: &[(
            "main.c",
            "int area(int w, int h) { return w * h; }\n\nint main(void) { return area(2, 3); }\n",
        )],
        edit: ("main.c", "area(2, 3);", "area(2);"),
        reference: &["gcc", "-fsyntax-only", "main.c"],
    },
    Case {
        name: "rust-analyzer",
        program: "rust-analyzer",
        files: &[
            (
                "Cargo.toml",
                "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
            ),
            (
                "src/main.rs",
                "fn greet(name: &str) -> String {\n    format!(\"hi {name}\")\n}\n\nfn main() {\n    println!(\"{}\", greet(\"x\"));\n}\n",
            ),
        ],
        edit: ("src/main.rs", "greet(\"x\"))", "greet(1))"),
        reference: &["cargo", "check", "--quiet"],
    },
];

fn installed(program: &str) -> bool {
    if kitbag_lsp_client::config::find_program(program).is_none() {
        return false;
    }
    // ~/.cargo/bin/rust-analyzer is a rustup proxy that exists even without the component.
    program != "rust-analyzer"
        || std::process::Command::new(program)
            .arg("--version")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// One edit: its round trip, and its `diagnostics` (null when not checked).
fn edit(c: &mut McpClient, path: &str, old: &str, new: &str, check: bool) -> (Duration, Value) {
    let (r, took) = c.timed_call_ok(
        "edit_text",
        json!({"path": path, "old_string": old, "new_string": new, "check": check}),
    );
    (took, r.structured["diagnostics"].clone())
}

struct Row {
    checked: Duration,
    unchecked: Duration,
    named: usize,
    settled: usize,
    /// The checker's run on the broken file (None: not installed).
    reference: Option<Duration>,
}

/// p50 of the reference checker's runs on the broken file; it must report the error.
fn reference(case: &Case, dir: &Path) -> Option<Duration> {
    kitbag_lsp_client::config::find_program(case.reference[0])?;
    let (path, good, bad) = case.edit;
    let file = dir.join(path);
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replacen(good, bad, 1)).unwrap();
    let run = || {
        let t = std::time::Instant::now();
        let out = std::process::Command::new(case.reference[0])
            .args(&case.reference[1..])
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "{} did not find the error",
            case.reference.join(" ")
        );
        t.elapsed()
    };
    run(); // warm: caches, cargo's metadata and build directory
    let times = (0..5).map(|_| run()).collect();
    std::fs::write(&file, text).unwrap();
    Some(median(times))
}

fn run(case: &Case) -> Row {
    let d = kitbag_testkit::bench::project(case.files);
    let mut c = McpClient::spawn(
        Path::new(env!("CARGO_BIN_EXE_kitbag-files")),
        &["--lsp"],
        d.path(),
        Era::Modern,
    );
    c.timeout = Duration::from_secs(120);
    let (path, good, bad) = case.edit;
    c.call_ok("file_read", json!({"path": path}));
    // Until the server has loaded the project: a broken edit it names, settled.
    for _ in 0..20 {
        let (_, dg) = edit(&mut c, path, good, bad, true);
        edit(&mut c, path, bad, good, true);
        if dg["settled"] == true && dg["introduced_count"].as_u64() > Some(0) {
            break;
        }
    }
    let (mut checked, mut unchecked) = (Vec::new(), Vec::new());
    let (mut named, mut settled) = (0, 0);
    for _ in 0..ROUNDS {
        let (t, dg) = edit(&mut c, path, good, bad, true);
        checked.push(t);
        named += usize::from(dg["introduced_count"].as_u64() > Some(0));
        settled += usize::from(dg["settled"] == true);
        let (t, dg) = edit(&mut c, path, bad, good, true);
        checked.push(t);
        settled += usize::from(dg["settled"] == true);
        let (t, _) = edit(&mut c, path, good, bad, false);
        unchecked.push(t);
        let (t, _) = edit(&mut c, path, bad, good, false);
        unchecked.push(t);
    }
    c.shutdown();
    Row {
        checked: median(checked),
        unchecked: median(unchecked),
        named,
        settled,
        reference: reference(case, d.path()),
    }
}

fn main() {
    println!(
        "edit_text round trip, p50 of {} edits each (release kitbag-files --lsp, warm server):",
        2 * ROUNDS
    );
    println!(
        "{:<14} {:>10} {:>10} {:>10} {:>14} {:>9}   reference: its checker",
        "server", "checked", "check off", "added", "errors named", "settled"
    );
    for case in CASES {
        if !installed(case.program) {
            println!("{:<14} not installed, skipped", case.name);
            continue;
        }
        let r = run(case);
        let reference = r.reference.map_or("not installed".to_string(), |t| {
            format!("{} ({})", ms(t), case.reference.join(" "))
        });
        kitbag_testkit::bench::summary(kitbag_testkit::bench::Summary {
            area: "edit feedback",
            measure: &format!("edit_text with its check, {} (p50)", case.name),
            kitbag: ms(r.checked),
            reference: reference.clone(),
            compared: format!(
                "+{} over check: false; {}/{ROUNDS} errors named",
                ms(r.checked.saturating_sub(r.unchecked)),
                r.named
            ),
            target: "",
            met: None,
        });
        println!(
            "{:<14} {:>10} {:>10} {:>10} {:>14} {:>9}   {reference}",
            case.name,
            ms(r.checked),
            ms(r.unchecked),
            ms(r.checked.saturating_sub(r.unchecked)),
            format!("{}/{ROUNDS}", r.named),
            format!("{}/{}", r.settled, 2 * ROUNDS),
        );
    }
}
