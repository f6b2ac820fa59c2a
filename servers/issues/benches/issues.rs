//! With 10,000 issues and 100,000 updates: `issue_list` with a search query and `issue_get`
//! of an issue with 200 updates, over MCP stdio (the real binary) side by side with the same
//! queries called in-process (the storage alone), p50 and p95, and their ratio.
//!
//! Run: `cargo bench -p kitbag-issues`.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use kitbag_issues::db::{self, Sql, StatusFilter};
use kitbag_issues::model::{IssueRecord, Status, Update, UpdateKind, Visibility};
use kitbag_testkit::{Era, McpClient};
use serde_json::json;

const ISSUES: i64 = 10_000;
const UPDATES: usize = 100_000;
const BIG_UPDATES: usize = 200;
const RUNS: usize = 300;

/// A deterministic word generator (xorshift) over a 3,000-word vocabulary with a skew,
/// so some words are common and most are rare, as in real text.
struct Words {
    state: u64,
    vocab: Vec<String>,
}

impl Words {
    fn new() -> Self {
        let syll = [
            "ka", "lo", "mi", "tar", "ven", "so", "rup", "del", "qua", "zen", "fo", "bri", "nek",
            "ost", "ul", "pra", "gim", "hal",
        ];
        let mut vocab = Vec::new();
        'outer: for a in syll {
            for b in syll {
                for c in syll {
                    vocab.push(format!("{a}{b}{c}"));
                    if vocab.len() == 3000 {
                        break 'outer;
                    }
                }
            }
        }
        Words {
            state: 0x9E37_79B9_7F4A_7C15,
            vocab,
        }
    }
    fn next(&mut self) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state
    }
    fn word(&mut self) -> &str {
        // Square of a uniform draw: low indices far more frequent.
        let u = (self.next() % 10_000) as f64 / 10_000.0;
        let i = ((u * u) * self.vocab.len() as f64) as usize;
        &self.vocab[i.min(self.vocab.len() - 1)]
    }
    fn text(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| self.word().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The policy the bench opens its temporary database under (root `/`).
fn bench_policy() -> kitbag_shared::paths::PathPolicy {
    kitbag_shared::paths::PathPolicy::new(Path::new("/"), &[], false).unwrap()
}

fn populate(path: &Path) -> (String, String) {
    let mut conn = db::Store::sqlite(db::FAMILY, db::open(&bench_policy(), path).unwrap());
    let mut w = Words::new();
    let per_issue = (UPDATES - BIG_UPDATES) / (ISSUES as usize - 1);
    let mut extra = (UPDATES - BIG_UPDATES) % (ISSUES as usize - 1);
    let mut records = Vec::with_capacity(ISSUES as usize);
    let mut seq = 0u64;
    for n in 1..=ISSUES {
        let count = if n == 1 {
            BIG_UPDATES
        } else if extra > 0 {
            extra -= 1;
            per_issue + 1
        } else {
            per_issue
        };
        let updates = (0..count)
            .map(|i| {
                seq += 1;
                let comment = i % 3 != 0;
                Update {
                    id: format!("01BENCHUPDATE{seq:013}"),
                    author: "agent:primary".into(),
                    kind: if comment {
                        UpdateKind::Comment
                    } else {
                        UpdateKind::StatusChange
                    },
                    body: comment.then(|| w.text(30)),
                    metadata: (!comment)
                        .then(|| json!({"old_status": "open", "new_status": "triaged"})),
                    visibility: Visibility::All,
                    created_at: 1_760_000_000 + seq as i64,
                }
            })
            .collect();
        records.push(IssueRecord {
            project: "bench".into(),
            id: format!("01BENCHISSUE{n:014}"),
            number: n,
            title: w.text(6),
            body: w.text(80),
            original_body: None,
            status: if n % 5 == 0 {
                Status::Resolved
            } else {
                Status::Open
            },
            assignment: None,
            created_by: "agent:primary".into(),
            created_at: 1_760_000_000 + n,
            updated_at: 1_760_000_000 + n,
            resolved_at: None,
            resolved_by: None,
            updates,
            todos: vec![],
        });
    }
    db::import(&mut conn, &records).unwrap();
    let total = conn.int("SELECT count(*) FROM issue_updates", &[]).unwrap();
    assert_eq!(total as usize, UPDATES);
    // A mid-frequency word and a two-word query.
    let vocab = Words::new().vocab;
    (vocab[300].clone(), format!("{} {}", vocab[40], vocab[900]))
}

/// A benchmark case: its name, the tool arguments, and the same work done in-process.
type Case = (String, serde_json::Value, Box<dyn Fn(&mut db::Store)>);

fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p) as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

fn measure(mut f: impl FnMut()) -> (Duration, Duration) {
    for _ in 0..20 {
        f();
    }
    let mut v = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let t = Instant::now();
        f();
        v.push(t.elapsed());
    }
    (pct(v.clone(), 0.5), pct(v, 0.95))
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("issues.db");
    let t = Instant::now();
    let (word, two) = populate(&path);
    eprintln!(
        "populated {ISSUES} issues and {UPDATES} updates in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let mut conn = db::Store::sqlite(db::FAMILY, db::open(&bench_policy(), &path).unwrap());
    let direct_hits = db::list(
        &mut conn,
        "bench",
        StatusFilter::NonTerminal,
        Some(&word),
        25,
        0,
    )
    .unwrap()
    .1;
    let mut c = McpClient::spawn(
        Path::new(env!("CARGO_BIN_EXE_kitbag-issues")),
        &["--db", path.to_str().unwrap(), "--project", "bench"],
        dir.path(),
        Era::Handshake,
    );
    let r = c.call("issue_list", json!({"search": word}));
    assert!(!r.is_error, "{}", r.text);
    assert_eq!(r.structured["total"], direct_hits);
    let g = c.call("issue_get", json!({"number": 1}));
    assert!(!g.is_error, "{}", g.text);
    assert_eq!(
        g.structured["updates"].as_array().unwrap().len(),
        BIG_UPDATES
    );

    println!("kitbag-issues: {ISSUES} issues, {UPDATES} updates, {RUNS} runs each (p50 / p95)");
    let cases: Vec<Case> = vec![
        (
            format!("issue_list search {word:?} ({direct_hits} open matches)"),
            json!({"search": word}),
            Box::new({
                let word = word.clone();
                move |conn: &mut db::Store| {
                    db::list(conn, "bench", StatusFilter::NonTerminal, Some(&word), 25, 0).unwrap();
                }
            }),
        ),
        (
            format!("issue_list search {two:?}"),
            json!({"search": two}),
            Box::new({
                let two = two.clone();
                move |conn: &mut db::Store| {
                    db::list(conn, "bench", StatusFilter::NonTerminal, Some(&two), 25, 0).unwrap();
                }
            }),
        ),
        (
            format!("issue_get #1 ({BIG_UPDATES} updates)"),
            json!({"number": 1}),
            Box::new(|conn: &mut db::Store| {
                let row = db::find(conn, "bench", 1).unwrap();
                db::updates(conn, row.seq, 0, 200).unwrap();
                db::todos(conn, row.seq).unwrap();
            }),
        ),
    ];
    for (name, args, direct) in cases {
        let tool = if name.starts_with("issue_get") {
            "issue_get"
        } else {
            "issue_list"
        };
        let (mcp50, mcp95) = measure(|| {
            let r = c.call(tool, args.clone());
            assert!(!r.is_error);
        });
        let (d50, d95) = measure(|| direct(&mut conn));
        println!(
            "  {name}\n    over MCP stdio: p50 {} p95 {}\n    in-process:     p50 {} p95 {}\n    MCP / in-process p50: {:.1}x",
            ms(mcp50),
            ms(mcp95),
            ms(d50),
            ms(d95),
            mcp50.as_secs_f64() / d50.as_secs_f64().max(1e-9)
        );
    }
    c.shutdown();
}
