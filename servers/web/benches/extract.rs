//! Main-content extraction quality and speed, side by side: kitbag's `html::to_markdown`,
//! trafilatura (defaults, plain text) and the official MCP fetch server's extractor
//! (readabilipy + markdownify), over the corpus in tests/corpus, in one run.
//!
//! Run: `cargo bench -p kitbag-web --bench extract`. The Python extractors come from
//! testkit/web-py/.venv (pinned by testkit/web-py/requirements.txt, installed by scripts/test);
//! without it only kitbag's figures are printed, with a SKIPPED line. Scoring (token F1 of the
//! text against each page's gold main content, markdown syntax stripped) is in
//! tests/common/corpus.rs. Times are in-process extraction of an already decoded page, the median
//! of 3 runs per page; p50 is over the pages. Then the public benchmarks whose clones
//! `KITBAG_EXTRACT_CORPORA` holds, each scored by its own metric (`extract/public.rs`).

#[path = "../tests/common/corpus.rs"]
mod corpus;
#[path = "extract/public.rs"]
mod public;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use corpus::Score;

struct Run {
    name: &'static str,
    /// Per page (corpus order): score and extraction time in ms.
    pages: Vec<Option<(Score, f64)>>,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn kitbag(pages: &[corpus::Page]) -> Run {
    let pages = pages
        .iter()
        .map(|p| {
            let mut times = Vec::new();
            for _ in 0..3 {
                let t = Instant::now();
                std::hint::black_box(kitbag_web::html::to_markdown(&p.html));
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
            let s = corpus::score(&corpus::kitbag_text(&p.html), &p.gold);
            Some((s, median(times)))
        })
        .collect();
    Run {
        name: "kitbag",
        pages,
    }
}

fn python(pages: &[corpus::Page]) -> Option<Vec<Run>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testkit/web-py");
    let py = root.join(".venv/bin/python");
    if !py.exists() {
        println!(
            "*** SKIPPED trafilatura and mcp-server-fetch: {} is missing (run scripts/test, or python3 -m venv testkit/web-py/.venv && testkit/web-py/.venv/bin/pip install -r testkit/web-py/requirements.txt) ***",
            py.display()
        );
        return None;
    }
    // The Python side takes minutes (readabilipy's pure-Python path is slow on large pages);
    // KITBAG_BENCH_REUSE=1 reuses the last run's output while working on kitbag's side.
    let saved = root.join(".venv/last-extract.jsonl");
    let stdout = match std::fs::read_to_string(&saved) {
        Ok(s) if std::env::var_os("KITBAG_BENCH_REUSE").is_some() => {
            println!("(reusing {} — KITBAG_BENCH_REUSE is set)", saved.display());
            s
        }
        _ => {
            let out = Command::new(&py)
                .arg(root.join("extract.py"))
                .arg(corpus::dir())
                .output()
                .expect("run extract.py");
            if !out.status.success() {
                println!(
                    "*** SKIPPED trafilatura and mcp-server-fetch: extract.py failed: {} ***",
                    String::from_utf8_lossy(&out.stderr)
                );
                return None;
            }
            let s = String::from_utf8_lossy(&out.stdout).into_owned();
            let _ = std::fs::write(&saved, &s);
            s
        }
    };
    let mut by_id = BTreeMap::new();
    for line in stdout.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        by_id.insert(v["id"].as_str().unwrap_or_default().to_string(), v);
    }
    let mut runs = Vec::new();
    for (name, key) in [
        ("trafilatura", "trafilatura"),
        ("mcp-server-fetch", "fetch"),
    ] {
        let scored = pages
            .iter()
            .map(|p| {
                let v = by_id.get(&p.id)?;
                let text = v.get(key)?.as_str()?;
                let ms = v.get(format!("{key}_ms"))?.as_f64()?;
                let text = if key == "fetch" {
                    corpus::strip_markdown(text)
                } else {
                    text.to_string()
                };
                Some((corpus::score(&text, &p.gold), ms))
            })
            .collect::<Vec<_>>();
        if scored.iter().any(Option::is_some) {
            runs.push(Run {
                name,
                pages: scored,
            });
        }
    }
    Some(runs)
}

fn mean(it: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = it.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 { f64::NAN } else { s / n as f64 }
}

fn main() {
    let pages = corpus::load();
    let mut kinds: Vec<&str> = pages.iter().map(|p| p.kind.as_str()).collect();
    kinds.sort();
    kinds.dedup();
    println!("corpus: {} pages ({})", pages.len(), {
        kinds
            .iter()
            .map(|k| format!("{k} {}", pages.iter().filter(|p| p.kind == *k).count()))
            .collect::<Vec<_>>()
            .join(", ")
    });
    let mut runs = vec![kitbag(&pages)];
    runs.extend(python(&pages).unwrap_or_default());

    println!(
        "\n{:<18} {:>7} {:>9} {:>7} {:>10} {:>6}",
        "extractor", "mean F1", "precision", "recall", "p50 ms", "pages"
    );
    for r in &runs {
        let got: Vec<_> = r.pages.iter().flatten().collect();
        println!(
            "{:<18} {:>7.3} {:>9.3} {:>7.3} {:>10.2} {:>6}",
            r.name,
            mean(got.iter().map(|(s, _)| s.f1)),
            mean(got.iter().map(|(s, _)| s.precision)),
            mean(got.iter().map(|(s, _)| s.recall)),
            median(got.iter().map(|(_, t)| *t).collect()),
            got.len()
        );
    }
    print!("\nmean F1 per kind   ");
    for k in &kinds {
        print!(" {k:>7}");
    }
    println!();
    for r in &runs {
        print!("{:<18}", r.name);
        for k in &kinds {
            let m = mean(
                pages
                    .iter()
                    .zip(&r.pages)
                    .filter(|(p, _)| p.kind == *k)
                    .filter_map(|(_, s)| s.map(|(s, _)| s.f1)),
            );
            print!(" {m:>7.3}");
        }
        println!();
    }
    let f1 = |r: &Run, i: usize| r.pages[i].map(|(s, _)| s.f1);
    let mut order: Vec<usize> = (0..pages.len()).collect();
    order.sort_by(|&a, &b| {
        f64::total_cmp(
            &f1(&runs[0], a).unwrap_or(0.0),
            &f1(&runs[0], b).unwrap_or(0.0),
        )
    });
    println!("\nworst pages for kitbag (F1 P R; others' F1)");
    for &i in order.iter().take(12) {
        let Some((s, _)) = runs[0].pages[i] else {
            continue;
        };
        let others: Vec<String> = runs[1..]
            .iter()
            .map(|r| format!("{} {:.3}", r.name, f1(r, i).unwrap_or(f64::NAN)))
            .collect();
        println!(
            "  {:<34} {:<7} {:.3} {:.3} {:.3}   {}",
            pages[i].id,
            pages[i].kind,
            s.f1,
            s.precision,
            s.recall,
            others.join("  ")
        );
    }
    if let Some(t) = runs.iter().find(|r| r.name == "trafilatura") {
        let collapsed: Vec<&str> = (0..pages.len())
            .filter(|&i| f1(&runs[0], i).unwrap_or(0.0) < 0.5 && f1(t, i).unwrap_or(0.0) > 0.9)
            .map(|i| pages[i].id.as_str())
            .collect();
        println!(
            "\npages where kitbag < 0.5 and trafilatura > 0.9: {}",
            if collapsed.is_empty() {
                "none".to_string()
            } else {
                collapsed.join(", ")
            }
        );
        let wins = (0..pages.len())
            .filter(|&i| f1(&runs[0], i).unwrap_or(0.0) >= f1(t, i).unwrap_or(0.0))
            .count();
        println!(
            "pages where kitbag ≥ trafilatura: {wins} of {}",
            pages.len()
        );
    }
    public::run();
}
