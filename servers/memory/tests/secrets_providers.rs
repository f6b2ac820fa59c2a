//! The secret detector against the broad corpus (issue #21): ≥ 150 fake credentials in ≥ 40
//! providers' formats, written into notes the way people write them, and ≥ 100 benign notes
//! built to look like secrets. Goal: ≥ 95 % caught, ≤ 5 % false positives; this corpus is
//! held to more — every secret caught, at most one false positive.

mod corpus;

use std::collections::BTreeSet;

use kitbag_memory::secrets::scan;

#[test]
fn broad_corpus_rates() {
    let secrets = corpus::secrets();
    let benign = corpus::benign();
    let providers: BTreeSet<&str> = secrets.iter().map(|s| s.provider).collect();
    assert!(secrets.len() >= 150, "{} secrets", secrets.len());
    assert!(providers.len() >= 40, "{} providers", providers.len());
    assert!(benign.len() >= 100, "{} benign notes", benign.len());
    let missed: Vec<(&str, &str)> = secrets
        .iter()
        .filter(|s| scan(&s.text).is_none())
        .map(|s| (s.provider, s.text.as_str()))
        .collect();
    let false_pos: Vec<(&str, &'static str)> = benign
        .iter()
        .filter_map(|n| scan(n).map(|f| (n.as_str(), f.rule)))
        .collect();
    println!(
        "{} providers; secrets caught {} / {} ({:.1} %); benign refused {} / {} ({:.1} %)",
        providers.len(),
        secrets.len() - missed.len(),
        secrets.len(),
        100.0 * (secrets.len() - missed.len()) as f64 / secrets.len() as f64,
        false_pos.len(),
        benign.len(),
        100.0 * false_pos.len() as f64 / benign.len() as f64
    );
    assert!(missed.is_empty(), "missed: {missed:#?}");
    assert!(false_pos.len() <= 1, "false positives: {false_pos:#?}");
}
