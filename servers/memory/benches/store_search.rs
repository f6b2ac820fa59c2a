//! With 10,000 stored memories: `memory_search` and `memory_store` round trips over stdio.
//!
//! Run: `cargo bench -p kitbag-memory`. Prints medians; nothing here asserts on time. With
//! `KITBAG_BENCH_BASELINE="/path/to/an/older/kitbag-memory"` (or `"/path/to/kitbag server
//! memory"`: a command line, split on spaces), the same runs follow against that build: a
//! change's before and after, measured in one run.

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_testkit::{Era, McpClient};
use serde_json::json;

#[path = "common/words.rs"]
mod words;
use words::word;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

const WORDS: &[&str] = &[
    "deploy",
    "staging",
    "database",
    "replica",
    "frontend",
    "invoice",
    "token",
    "cache",
    "kubernetes",
    "release",
    "benchmark",
    "python",
    "rust",
    "review",
    "schema",
    "migration",
    "search",
    "index",
    "logging",
    "alerts",
];

/// A memory server on the database `db`: `server` is the program and its leading arguments.
fn spawn(server: &[String], db: &Path, cwd: &Path) -> McpClient {
    let mut args: Vec<&str> = server[1..].iter().map(String::as_str).collect();
    args.extend(["--db", db.to_str().expect("u"), "--max-total", "100000"]);
    McpClient::spawn(Path::new(&server[0]), &args, cwd, Era::Handshake)
}

/// Search p50 on 10,000 memories written with a varied vocabulary (each word in ~0.2% of them).
fn varied_corpus(server: &[String]) {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("varied.db");
    let mut c = spawn(server, &db, dir.path());
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed as usize
    };
    for i in 0..10_000usize {
        let words: Vec<String> = (0..12).map(|_| word(next() % 5832)).collect();
        let content = format!("Note {i}: {}.", words.join(" "));
        let r = c.call("memory_store", json!({"content": content}));
        assert!(!r.is_error, "{}", r.text);
    }
    let mut search = Vec::new();
    for _ in 0..300 {
        let q = format!("{} {} problem", word(next() % 5832), word(next() % 5832));
        let t = Instant::now();
        let r = c.call("memory_search", json!({"query": q}));
        search.push(t.elapsed());
        assert!(!r.is_error);
    }
    println!(
        "memory_search over 10,000 memories with a varied vocabulary, median of 300: {}",
        ms(median(search))
    );
}

fn main() {
    let this = vec![env!("CARGO_BIN_EXE_kitbag-memory").to_string()];
    let baseline: Option<Vec<String>> = std::env::var("KITBAG_BENCH_BASELINE")
        .ok()
        .map(|v| v.split_whitespace().map(str::to_string).collect())
        .filter(|v: &Vec<String>| !v.is_empty());
    for (label, server) in
        std::iter::once(("this build", this)).chain(baseline.map(|b| ("baseline", b)))
    {
        println!("== {label}: {}", server.join(" "));
        varied_corpus(&server);
        adversarial_corpus(&server);
    }
}

/// Store, search and context p50 on 10,000 memories over a 20-word vocabulary (each query term
/// in ~20% of the store).
fn adversarial_corpus(server: &[String]) {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("bench.db");
    let mut c = spawn(server, &db, dir.path());
    let t = Instant::now();
    for i in 0..10_000usize {
        let content = format!(
            "Note {i}: the {} {} needs {} before the {} (ticket {}).",
            WORDS[i % 20],
            WORDS[(i / 20) % 20],
            WORDS[(i / 400) % 20],
            WORDS[(i * 7) % 20],
            10_000 + i
        );
        let r = c.call(
            "memory_store",
            json!({"content": content, "tags": [WORDS[i % 20]]}),
        );
        assert!(!r.is_error, "{}", r.text);
    }
    println!(
        "filled 10,000 memories in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let mut search = Vec::new();
    for i in 0..300 {
        let q = format!("{} {} problem", WORDS[i % 20], WORDS[(i * 3) % 20]);
        let t = Instant::now();
        let r = c.call("memory_search", json!({"query": q}));
        search.push(t.elapsed());
        assert!(!r.is_error);
    }
    println!(
        "memory_search over 10,000 memories, median of 300: {}",
        ms(median(search))
    );
    let mut store = Vec::new();
    for i in 0..300 {
        let t = Instant::now();
        let r = c.call("memory_store", json!({"content": format!("Extra benchmark note number {i} about the {} pipeline.", WORDS[i % 20])}));
        store.push(t.elapsed());
        assert!(!r.is_error);
    }
    println!(
        "memory_store (secret scan + dedupe + insert) with 10,000 memories, median of 300: {}",
        ms(median(store))
    );
    let mut ctx = Vec::new();
    for i in 0..300 {
        let t = Instant::now();
        let r = c.call(
            "memory_context",
            json!({"query": format!("what about the {} {}?", WORDS[i % 20], WORDS[(i + 5) % 20])}),
        );
        ctx.push(t.elapsed());
        assert!(!r.is_error);
    }
    println!("memory_context, median of 300: {}", ms(median(ctx)));
}
