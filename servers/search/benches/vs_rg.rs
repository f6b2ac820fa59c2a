//! kitbag-search (warm, over stdio) side by side with `rg` and `fdfind` on the same tree.
//!
//! Run: `cargo bench -p kitbag-search`. Tree: `$KITBAG_BENCH_TREE`, default the cargo registry
//! sources (`~/.cargo/registry/src`, several hundred MB after a workspace build). Both tools see
//! the same files: rg gets `--no-require-git` because kitbag applies .gitignore files outside
//! git repositories too; fd 8 lacks that flag, so the glob runs compare with ignore files off. Prints medians and ratios; asserts that both found the same.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kitbag_testkit::bench::{Summary, median, ms, status_kb, summary};
use kitbag_testkit::{Era, McpClient};
use serde_json::json;

const RUNS: usize = 7;

fn dir_size_mb(p: &Path) -> u64 {
    let out = Command::new("du").arg("-sm").arg(p).output().expect("du");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn time_cmd(cmd: &str, args: &[&str], dir: &Path) -> (Duration, usize) {
    let mut times = Vec::new();
    let mut lines = 0;
    for _ in 0..RUNS {
        let t = Instant::now();
        let out = Command::new(cmd)
            .args(args)
            .current_dir(dir)
            .output()
            .expect(cmd);
        times.push(t.elapsed());
        lines = out.stdout.iter().filter(|&&b| b == b'\n').count();
    }
    (median(times), lines)
}

fn time_call(
    c: &mut McpClient,
    tool: &str,
    args: serde_json::Value,
) -> (Duration, serde_json::Value) {
    let mut times = Vec::new();
    let mut last = serde_json::Value::Null;
    for _ in 0..RUNS {
        let t = Instant::now();
        let r = c.call(tool, args.clone());
        times.push(t.elapsed());
        assert!(!r.is_error, "{}", r.text);
        last = r.structured;
    }
    (median(times), last)
}

fn main() {
    let tree: PathBuf = std::env::var_os("KITBAG_BENCH_TREE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
                .join(".cargo/registry/src")
        });
    let tree = std::fs::canonicalize(&tree).expect("bench tree");
    for tool in ["rg", "fdfind"] {
        if Command::new(tool).arg("--version").output().is_err() {
            println!("{tool} not installed (apt-get install ripgrep fd-find); skipping");
            return;
        }
    }
    println!("tree: {} ({} MB)", tree.display(), dir_size_mb(&tree));
    let bin = Path::new(env!("CARGO_BIN_EXE_kitbag-search"));
    let tree_s = tree.to_str().expect("utf8");
    let mut c = McpClient::spawn(
        bin,
        &["--root", tree_s, "--max-output-bytes", "400000000"],
        &tree,
        Era::Handshake,
    );
    // Warm both page caches and the server once.
    let _ = c.call(
        "search_grep",
        json!({"pattern": "warmup_no_such_token", "output_mode": "count"}),
    );
    let _ = Command::new("rg")
        .args(["--no-require-git", "-c", "warmup_no_such_token"])
        .current_dir(&tree)
        .output();

    let queries: [(&str, &str, Vec<&str>, serde_json::Value); 3] = [
        (
            "literal",
            "unsafe impl Send",
            vec!["-F"],
            json!({"fixed_strings": true}),
        ),
        (
            "word regex",
            r"[A-Z]+_SUSPEND",
            vec!["-w"],
            json!({"word": true}),
        ),
        (
            "case-insensitive regex",
            r"fn\s+new_with_\w+",
            vec!["-i"],
            json!({"case": "insensitive"}),
        ),
    ];
    println!(
        "\n{:<26} {:<19} {:>10} {:>10} {:>7}  results",
        "query", "mode", "kitbag", "rg", "ratio"
    );
    // The worst ratio of all queries: (ratio, query).
    let mut worst = (0.0f64, String::new());
    for (name, pattern, rg_flags, extra) in &queries {
        for (mode, rg_mode) in [("content", vec!["-n"]), ("files_with_matches", vec!["-l"])] {
            let mut args = json!({"pattern": pattern, "output_mode": mode});
            for (k, v) in extra.as_object().expect("obj") {
                args[k] = v.clone();
            }
            let (kt, res) = time_call(&mut c, "search_grep", args);
            let mut rg_args: Vec<&str> = vec!["--no-require-git"];
            rg_args.extend(rg_flags.iter().copied());
            rg_args.extend(rg_mode.iter().copied());
            rg_args.extend(["-e", pattern, "."]);
            let (rt, rg_lines) = time_cmd("rg", &rg_args, &tree);
            let ours = match mode {
                "content" => res["total_matches"].as_u64().unwrap_or(0) as usize,
                _ => res["total_files"].as_u64().unwrap_or(0) as usize,
            };
            assert_eq!(
                ours, rg_lines,
                "{name} {mode}: kitbag found {ours}, rg {rg_lines}"
            );
            let r = kt.as_secs_f64() / rt.as_secs_f64();
            println!(
                "{:<26} {:<19} {:>10} {:>10} {:>7.2}  {}",
                name,
                mode,
                ms(kt),
                ms(rt),
                r,
                ours
            );
            if r > worst.0 {
                worst = (r, format!("{name}, {mode}: {} vs rg {}", ms(kt), ms(rt)));
            }
        }
    }
    println!(
        "\nserver peak RSS during the greps: {} KB",
        status_kb(c.pid(), "VmHWM:")
    );

    println!(
        "\n{:<26} {:>10} {:>10} {:>7}  results",
        "search_glob vs fdfind", "kitbag", "fdfind", "ratio"
    );
    summary(Summary {
        area: "search",
        measure: "search_grep vs rg, worst of 6 queries",
        kitbag: worst.1,
        reference: "rg".into(),
        compared: format!("{:.2}×", worst.0),
        target: "",
        met: None,
    });
    let mut worst = (0.0f64, String::new());
    for pattern in ["Cargo.toml", "*.rs", "**/tests/*.rs"] {
        // fd 8 has no --no-require-git: compare without ignore files on both sides (-I).
        let (kt, res) = time_call(
            &mut c,
            "search_glob",
            json!({"pattern": pattern, "limit": 10000, "sort": "path", "no_ignore": true}),
        );
        let fd_args: Vec<&str> = if pattern.contains('/') {
            vec!["-I", "-t", "f", "-p", "-g", pattern, "."]
        } else {
            vec!["-I", "-t", "f", "-g", pattern, "."]
        };
        let (ft, fd_lines) = time_cmd("fdfind", &fd_args, &tree);
        let r = kt.as_secs_f64() / ft.as_secs_f64();
        println!(
            "{:<26} {:>10} {:>10} {:>7.2}  {} (fd {})",
            pattern,
            ms(kt),
            ms(ft),
            r,
            res["total"],
            fd_lines
        );
        if r > worst.0 {
            worst = (r, format!("{pattern}: {} vs fd {}", ms(kt), ms(ft)));
        }
    }
    summary(Summary {
        area: "search",
        measure: "search_glob vs fd, worst of 3 queries",
        kitbag: worst.1,
        reference: "fdfind".into(),
        compared: format!("{:.2}×", worst.0),
        target: "≤ 1.0×",
        met: Some(worst.0 <= 1.0),
    });
    println!(
        "\nserver peak RSS overall: {} KB",
        status_kb(c.pid(), "VmHWM:")
    );
}
