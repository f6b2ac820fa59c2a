//! Per language server: cold start (first call → first useful answer) and warm
//! `hover` / `definition` p50, through kitbag-lsp over MCP stdio and against the same
//! language server driven directly (the crate's own JSON-RPC client), in one run.
//!
//! `cargo bench -p kitbag-lsp --bench roundtrip` — servers that are not installed are skipped.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_lsp_client::rpc::Rpc;
use kitbag_lsp_client::text::path_to_uri;
use kitbag_testkit::{Era, McpClient};
use serde_json::{Value, json};

const WARM: usize = 40;

struct Case {
    name: &'static str,
    command: &'static [&'static str],
    language_id: &'static str,
    files: &'static [(&'static str, &'static str)],
    /// File, 0-based line, character (ASCII lines, so units = characters) of a call site.
    at: (&'static str, usize, usize),
}

const CASES: &[Case] = &[
    Case {
        name: "pyright",
        command: &["pyright-langserver", "--stdio"],
        language_id: "python",
        files: &[
            (
                "models.py",
                "class User:\n    def __init__(self, name: str) -> None:\n        self.name = name\n\n\ndef make_user(name: str) -> User:\n    \"\"\"Build a user.\"\"\"\n    return User(name)\n",
            ),
            (
                "app.py",
                "from models import make_user\n\nuser = make_user(\"kit\")\nprint(user.name)\n",
            ),
        ],
        at: ("app.py", 2, 9),
    },
    Case {
        name: "clangd",
        command: &["clangd"],
        language_id: "c",
        files: &[
            (
                "shapes.h",
                "#ifndef SHAPES_H\n#define SHAPES_H\nint area(int w, int h);\n#endif\n",
            ),
            (
                "shapes.c",
                "#include \"shapes.h\"\nint area(int w, int h) { return w * h; }\n",
            ),
            (
                "main.c",
                "#include \"shapes.h\"\nint main(void) {\n    int a = area(2, 3);\n    return a;\n}\n",
            ),
        ],
        at: ("main.c", 2, 13),
    },
    Case {
        name: "rust-analyzer",
        command: &["rust-analyzer"],
        language_id: "rust",
        files: &[
            (
                "Cargo.toml",
                "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
            ),
            (
                "src/shapes.rs",
                "/// Area.\npub fn area(w: u32, h: u32) -> u32 {\n    w * h\n}\n",
            ),
            (
                "src/main.rs",
                "mod shapes;\n\nfn main() {\n    let a = shapes::area(2, 3);\n    println!(\"{a}\");\n}\n",
            ),
        ],
        at: ("src/main.rs", 3, 20),
    },
];

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

fn useful(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Array(a) => !a.is_empty(),
        _ => true,
    }
}

/// (cold ms, warm hover p50 ms, warm definition p50 ms)
async fn direct(case: &Case, root: &Path) -> (f64, f64, f64) {
    let t = Instant::now();
    let cmd: Vec<String> = case.command.iter().map(|s| s.to_string()).collect();
    let uri = path_to_uri(root);
    let (rpc, _child) = Rpc::spawn(&cmd, root, json!({}), uri.clone()).unwrap();
    let to = Duration::from_secs(60);
    rpc.request(
        "initialize",
        json!({"processId": std::process::id(), "rootUri": uri,
            "workspaceFolders": [{"uri": uri, "name": "bench"}],
            "capabilities": {"window": {"workDoneProgress": true},
                "textDocument": {"hover": {"contentFormat": ["markdown"]}}}}),
        to,
    )
    .await
    .unwrap();
    rpc.notify("initialized", json!({})).await.unwrap();
    let file = root.join(case.at.0);
    let text = std::fs::read_to_string(&file).unwrap();
    let furi = path_to_uri(&file);
    rpc.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": furi, "languageId": case.language_id, "version": 1, "text": text}}),
    )
    .await
    .unwrap();
    let tdp = json!({"textDocument": {"uri": furi},
        "position": {"line": case.at.1, "character": case.at.2}});
    loop {
        let r = rpc.request("textDocument/hover", tdp.clone(), to).await;
        if r.as_ref().is_ok_and(useful) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cold = ms(t);
    let (mut hovers, mut defs) = (Vec::new(), Vec::new());
    for _ in 0..WARM {
        let t = Instant::now();
        rpc.request("textDocument/hover", tdp.clone(), to)
            .await
            .unwrap();
        hovers.push(ms(t));
        let t = Instant::now();
        rpc.request("textDocument/definition", tdp.clone(), to)
            .await
            .unwrap();
        defs.push(ms(t));
    }
    let _ = rpc
        .request("shutdown", Value::Null, Duration::from_secs(3))
        .await;
    kitbag_shared::process::kill_tree(rpc.pid);
    (cold, p50(hovers), p50(defs))
}

fn kitbag(case: &Case, root: &Path) -> (f64, f64, f64) {
    let mut c = McpClient::spawn(
        Path::new(env!("CARGO_BIN_EXE_kitbag-lsp")),
        &[],
        root,
        Era::Modern,
    );
    c.timeout = Duration::from_secs(120);
    let args = json!({"action": "hover", "path": case.at.0, "line": case.at.1 + 1,
        "character": case.at.2});
    let t = Instant::now();
    loop {
        let r = c.call("code_lsp", args.clone());
        if !r.is_error && r.structured["found"] == true {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let cold = ms(t);
    let mut def_args = args.clone();
    def_args["action"] = json!("definition");
    let (mut hovers, mut defs) = (Vec::new(), Vec::new());
    for _ in 0..WARM {
        let t = Instant::now();
        let r = c.call("code_lsp", args.clone());
        assert!(!r.is_error, "{}", r.text);
        hovers.push(ms(t));
        let t = Instant::now();
        let r = c.call("code_lsp", def_args.clone());
        assert!(!r.is_error, "{}", r.text);
        defs.push(ms(t));
    }
    c.shutdown();
    (cold, p50(hovers), p50(defs))
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    for case in CASES {
        if kitbag_lsp_client::config::find_program(case.command[0]).is_none() {
            println!("{}: not installed, skipped", case.name);
            continue;
        }
        let d = kitbag_testkit::bench::project(case.files);
        let root = std::fs::canonicalize(d.path()).unwrap();
        // Warm the OS caches (and rust-analyzer's cargo metadata) once before measuring.
        rt.block_on(direct(case, &root));
        let (dc, dh, dd) = rt.block_on(direct(case, &root));
        let (kc, kh, kd) = kitbag(case, &root);
        println!(
            "{:<14} cold: kitbag {kc:7.1} ms, direct {dc:7.1} ms (added {:+.1} ms)",
            case.name,
            kc - dc
        );
        println!(
            "{:<14} hover p50: kitbag {kh:6.2} ms, direct {dh:6.2} ms (added {:+.2} ms)",
            "",
            kh - dh
        );
        println!(
            "{:<14} definition p50: kitbag {kd:6.2} ms, direct {dd:6.2} ms (added {:+.2} ms)",
            "",
            kd - dd
        );
    }
    open_documents_check();
}

/// What the pre-request sync costs per open document: the re-read and hash it used to do for
/// every one, against the metadata check that now spares it for settled, untouched files.
fn open_documents_check() {
    use kitbag_lsp_client::stamp::Stamp;
    let d = tempfile::tempdir().unwrap();
    let line = "value = compute(argument_one, argument_two)  # a typical line\n";
    let paths: Vec<_> = (0..300)
        .map(|i| {
            let p = d.path().join(format!("module_{i}.py"));
            std::fs::write(&p, line.repeat(320)).unwrap(); // ~20 KB each
            p
        })
        .collect();
    // Let the files settle (the check trusts only files unchanged for 2 s).
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let stamps: Vec<Stamp> = paths
        .iter()
        .map(|p| Stamp::of(&std::fs::metadata(p).unwrap()))
        .collect();
    let (mut reread, mut checked) = (Vec::new(), Vec::new());
    for _ in 0..50 {
        let t = Instant::now();
        for p in &paths {
            let bytes = std::fs::read(p).unwrap();
            std::hint::black_box(xxhash_rust::xxh3::xxh3_64(&bytes));
        }
        reread.push(ms(t));
        let t = Instant::now();
        let unchanged = paths
            .iter()
            .zip(&stamps)
            .filter(|(p, s)| std::fs::metadata(p).is_ok_and(|m| s.unchanged(&m)))
            .count();
        checked.push(ms(t));
        assert_eq!(unchanged, paths.len());
    }
    println!(
        "sync before each request, 300 open documents of 20 KB: re-read + hash {:.2} ms, metadata check {:.2} ms (p50 of 50)",
        p50(reread),
        p50(checked)
    );
}
