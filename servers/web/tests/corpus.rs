//! kitbag's main-content extraction over the checked-in corpus (tests/corpus: real news, blog,
//! documentation, forum, video and portal pages with gold text; see manifest.tsv). A floor, so
//! that a change to the extractor that loses quality fails here. The side-by-side comparison
//! with trafilatura is `cargo bench -p kitbag-web --bench extract`.

#[path = "common/corpus.rs"]
mod corpus;

/// Mean token F1 over the corpus must stay at or above this (reached: see the README).
const MEAN_F1_FLOOR: f64 = 0.95;
/// No page may fall below this F1.
const PAGE_F1_FLOOR: f64 = 0.5;

#[test]
fn corpus_extraction_quality_floor() {
    let pages = corpus::load_from(&corpus::checked_in());
    assert!(pages.len() >= 40, "corpus has {} pages", pages.len());
    let mut sum = 0.0;
    let mut low = Vec::new();
    for p in &pages {
        let s = corpus::score(&corpus::kitbag_text(&p.html), &p.gold);
        sum += s.f1;
        if s.f1 < PAGE_F1_FLOOR {
            low.push(format!("{} ({}): F1 {:.3}", p.id, p.kind, s.f1));
        }
    }
    let mean = sum / pages.len() as f64;
    println!("mean F1 {mean:.4} over {} pages", pages.len());
    assert!(low.is_empty(), "pages under {PAGE_F1_FLOOR}: {low:#?}");
    assert!(mean >= MEAN_F1_FLOOR, "mean F1 {mean:.4} < {MEAN_F1_FLOOR}");
}

#[test]
fn scoring_strips_markdown_and_counts_multisets() {
    let md = "# Title\n\nSee [the docs](https://x.example/a_(b)) and ![a cat](/c.png) <https://y.example/z>.\n\n| A | B |\n|---|---|\n| `x` | **y** |";
    assert_eq!(
        corpus::tokens(&corpus::strip_markdown(md)),
        [
            "title", "see", "the", "docs", "and", "a", "cat", "https", "y", "example", "z", "a",
            "b", "x", "y"
        ]
    );
    // Text as a reader sees it, for metrics that match substrings: no bracket left before a
    // link's text, no space after it, escapes undone.
    assert_eq!(
        corpus::strip_markdown("Wenn [Helmut Kohl](https://x.example/k), _so_ Konsument\\*innen"),
        "Wenn Helmut Kohl, so Konsument*innen\n"
    );
    assert_eq!(corpus::tokens("東京 Tower"), ["東", "京", "tower"]);
    let s = corpus::score("a a b", "a b b c");
    assert!((s.precision - 2.0 / 3.0).abs() < 1e-9 && (s.recall - 0.5).abs() < 1e-9);
    assert_eq!(corpus::score("", "a").f1, 0.0);
}

/// `cargo test -p kitbag-web --test corpus report -- --ignored --nocapture`: kitbag's score on
/// every page of the corpus (`KITBAG_EXTRACT_CORPUS` picks another), worst first, for working on
/// the extractor without the Python side of the benchmark.
#[test]
#[ignore]
fn report() {
    let pages = corpus::load();
    let mut rows: Vec<(f64, f64, f64, &str, &str)> = pages
        .iter()
        .map(|p| {
            let s = corpus::score(&corpus::kitbag_text(&p.html), &p.gold);
            (s.f1, s.precision, s.recall, p.id.as_str(), p.kind.as_str())
        })
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (f1, p, r, id, kind) in &rows {
        println!("{f1:.3} P {p:.3} R {r:.3}  {id} ({kind})");
    }
    let mean = rows.iter().map(|r| r.0).sum::<f64>() / rows.len().max(1) as f64;
    println!("mean F1 {mean:.4} over {} pages", rows.len());
}

/// `KITBAG_CORPUS_PAGE=<id> cargo test -p kitbag-web --test corpus show_page -- --ignored
/// --nocapture`: one page's extraction and score, for working on the extractor.
#[test]
#[ignore]
fn show_page() {
    let id = std::env::var("KITBAG_CORPUS_PAGE").unwrap_or_default();
    for p in corpus::load().iter().filter(|p| p.id == id) {
        let md = kitbag_web::html::to_markdown(&p.html).1;
        let s = corpus::score(&corpus::strip_markdown(&md), &p.gold);
        println!(
            "{md}\n\n== {} ({}): F1 {:.3} P {:.3} R {:.3}",
            p.id, p.kind, s.f1, s.precision, s.recall
        );
    }
}
