//! The same store on both backends, side by side in one run: 100,000 memories with a varied
//! vocabulary (each word in ~0.2% of them), loaded with `import`, then `memory_search` and
//! `memory_store` round trips over stdio on the SQLite file and on a private PostgreSQL (a
//! fresh cluster on a Unix socket, fsync off — the bench measures the queries, not the disk).
//!
//! Run: `cargo bench -p kitbag-memory --bench backends`. Prints medians; asserts nothing on
//! time. Without PostgreSQL installed only the SQLite line is printed, with a SKIPPED line.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kitbag_testkit::pg::PgServer;
use kitbag_testkit::{Era, McpClient};
use serde_json::json;

#[path = "common/words.rs"]
mod words;
use words::word;

const MEMORIES: usize = 100_000;
const SEARCHES: usize = 300;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 as usize
    }
}

/// The export format, one memory per line.
fn write_corpus(path: &Path) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).expect("corpus"));
    for i in 0..MEMORIES {
        let words: Vec<String> = (0..12).map(|_| word(rng.next() % 5832)).collect();
        let rec = json!({
            "id": format!("01BENCH{i:019}"),
            "content": format!("Note {i}: {}.", words.join(" ")),
            "tags": [word(rng.next() % 40)],
            "scope": "project",
            "created_at": format!("2026-{:02}-{:02}T10:00:00.000Z", 1 + i % 12, 1 + i % 28),
            "last_used_at": "2026-11-01T10:00:00.000Z",
            "use_count": 0,
        });
        writeln!(out, "{rec}").expect("write");
    }
}

struct Figures {
    import: Duration,
    search: Duration,
    store: Duration,
}

fn run(name: &str, store_args: &[String], corpus: &Path, dir: &Path) -> Figures {
    let bin = Path::new(env!("CARGO_BIN_EXE_kitbag-memory"));
    let t = Instant::now();
    let st = Command::new(bin)
        .args(store_args)
        .args(["--max-total", "1000000", "import"])
        .arg(corpus)
        .current_dir(dir)
        .status()
        .expect("import");
    assert!(st.success(), "{name}: import failed");
    let import = t.elapsed();
    let mut args: Vec<&str> = store_args.iter().map(String::as_str).collect();
    args.extend(["--max-total", "1000000"]);
    let mut c = McpClient::spawn(bin, &args, dir, Era::Handshake);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut search = Vec::with_capacity(SEARCHES);
    for _ in 0..SEARCHES {
        let q = format!(
            "{} {} problem",
            word(rng.next() % 5832),
            word(rng.next() % 5832)
        );
        let t = Instant::now();
        let r = c.call("memory_search", json!({"query": q}));
        search.push(t.elapsed());
        assert!(!r.is_error, "{}", r.text);
    }
    let mut store = Vec::with_capacity(SEARCHES);
    for i in 0..SEARCHES {
        let t = Instant::now();
        let r = c.call(
            "memory_store",
            json!({"content": format!("bench write {i}: {} {}", word(rng.next() % 5832), word(rng.next() % 5832))}),
        );
        store.push(t.elapsed());
        assert!(!r.is_error, "{}", r.text);
    }
    Figures {
        import,
        search: median(search),
        store: median(store),
    }
}

fn main() {
    let dir = tempfile::tempdir().expect("tmp");
    let corpus = dir.path().join("corpus.jsonl");
    write_corpus(&corpus);
    let db = dir.path().join("bench.db");
    let sqlite = run(
        "sqlite",
        &["--db".into(), db.to_str().expect("utf8").into()],
        &corpus,
        dir.path(),
    );
    let pg = PgServer::start().map(|server| {
        let url = server.database("bench");
        let figures = run(
            "postgres",
            &["--database-url".into(), url],
            &corpus,
            dir.path(),
        );
        (server, figures)
    });
    println!("{MEMORIES} memories, varied vocabulary; medians of {SEARCHES} calls over stdio");
    println!(
        "{:<12} {:>12} {:>16} {:>16}",
        "backend", "import", "memory_search", "memory_store"
    );
    let line = |name: &str, f: &Figures| {
        println!(
            "{name:<12} {:>12} {:>16} {:>16}",
            format!("{:.1} s", f.import.as_secs_f64()),
            ms(f.search),
            ms(f.store)
        );
    };
    line("sqlite", &sqlite);
    match &pg {
        Some((_, f)) => line("postgresql", f),
        None => println!("*** SKIPPED postgresql: no PostgreSQL server installed ***"),
    }
}
