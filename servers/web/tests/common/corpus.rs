//! The extraction corpus (tests/corpus: manifest.tsv, pages/<id>.html.gz, pages/<id>.gold.txt)
//! and the score every extractor gets on it.
//!
//! Score: bag-of-words token F1 against the page's gold main-content text.
//! - Tokens are maximal runs of alphanumeric characters, lower-cased; each CJK ideograph, kana or
//!   hangul syllable is a token of its own (those scripts do not separate words by spaces).
//! - Markdown syntax is stripped from markdown output first: link and image targets
//!   (`[text](url)` keeps `text`, `![alt](src)` keeps `alt`) and autolinks (`<https://…>`) are
//!   removed; every other syntax character (`#`, `*`, `|`, `` ` ``, `>`…) is not alphanumeric
//!   and so never makes a token.
//! - Precision = common tokens / output tokens, recall = common tokens / gold tokens, both over
//!   multisets (a word counted at most as often as it appears on both sides); F1 their harmonic
//!   mean; an empty output against a non-empty gold scores 0.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

pub struct Page {
    pub id: String,
    pub kind: String,
    pub html: String,
    pub gold: String,
}

/// The checked-in corpus.
pub fn checked_in() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// The corpus the benchmark and the report use: `KITBAG_EXTRACT_CORPUS` (a directory laid out
/// like tests/corpus: manifest.tsv, pages/<id>.html.gz, pages/<id>.gold.txt) or the checked-in one.
pub fn dir() -> PathBuf {
    std::env::var_os("KITBAG_EXTRACT_CORPUS").map_or_else(checked_in, PathBuf::from)
}

/// Every page of [`dir`]'s manifest.
pub fn load() -> Vec<Page> {
    load_from(&dir())
}

/// Every page of the manifest in `dir`, decoded as UTF-8 (invalid bytes replaced).
pub fn load_from(dir: &Path) -> Vec<Page> {
    let manifest = std::fs::read_to_string(dir.join("manifest.tsv")).expect("manifest.tsv");
    manifest
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut cols = line.split('\t');
            let id = cols.next().expect("id").to_string();
            let kind = cols.next().expect("kind").to_string();
            let gz = std::fs::read(dir.join(format!("pages/{id}.html.gz"))).expect("page");
            let mut raw = Vec::new();
            flate2::read::GzDecoder::new(&gz[..])
                .read_to_end(&mut raw)
                .expect("gunzip");
            let gold =
                std::fs::read_to_string(dir.join(format!("pages/{id}.gold.txt"))).expect("gold");
            Page {
                id,
                kind,
                html: String::from_utf8_lossy(&raw).into_owned(),
                gold,
            }
        })
        .collect()
}

/// Markdown → its text, as a markdown reader sees it: link and image targets, emphasis
/// markers, heading and list marks, escapes and table pipes gone; blocks on lines of their own,
/// table cells apart by a space.
pub fn strip_markdown(md: &str) -> String {
    use pulldown_cmark::{Event, Options, Parser, TagEnd};
    let mut out = String::with_capacity(md.len());
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
    for event in Parser::new_ext(md, options) {
        match event {
            Event::Text(t) | Event::Code(t) | Event::Html(t) | Event::InlineHtml(t) => {
                out.push_str(&t)
            }
            Event::SoftBreak | Event::HardBreak | Event::Rule => out.push('\n'),
            Event::End(TagEnd::TableCell) => out.push(' '),
            Event::End(
                TagEnd::Paragraph
                | TagEnd::Heading(_)
                | TagEnd::Item
                | TagEnd::CodeBlock
                | TagEnd::BlockQuote(_)
                | TagEnd::TableHead
                | TagEnd::TableRow,
            ) => out.push('\n'),
            _ => {}
        }
    }
    out
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF)
}

/// Lower-cased word tokens (see the module doc).
pub fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        if is_cjk(c) {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            out.push(c.to_string());
        } else if c.is_alphanumeric() {
            cur.extend(c.to_lowercase());
        } else if !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Score {
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
}

/// Bag-of-words precision, recall and F1 of `output` against `gold` (both plain text).
pub fn score(output: &str, gold: &str) -> Score {
    let mut bag: HashMap<String, i64> = HashMap::new();
    let gold = tokens(gold);
    for t in &gold {
        *bag.entry(t.clone()).or_default() += 1;
    }
    let out = tokens(output);
    let mut common = 0usize;
    for t in &out {
        if let Some(n) = bag.get_mut(t)
            && *n > 0
        {
            *n -= 1;
            common += 1;
        }
    }
    if out.is_empty() || gold.is_empty() || common == 0 {
        return Score::default();
    }
    let precision = common as f64 / out.len() as f64;
    let recall = common as f64 / gold.len() as f64;
    Score {
        precision,
        recall,
        f1: 2.0 * precision * recall / (precision + recall),
    }
}

/// kitbag's extraction of one page as scored: `to_markdown`'s text with markdown stripped,
/// without the `# title` line it puts first when the content has no heading of its own (that
/// line is the page's `<title>`, the result's `title` field, not extracted text — as the other
/// extractors' bodies leave the title out).
pub fn kitbag_text(html: &str) -> String {
    let (title, md, _) = kitbag_web::html::to_markdown(html);
    let body = title
        .and_then(|t| md.strip_prefix(&format!("# {t}")).map(str::to_string))
        .unwrap_or(md);
    strip_markdown(&body)
}
