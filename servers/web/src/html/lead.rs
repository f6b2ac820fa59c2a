//! The lead: the paragraph that sums the story up, set apart from the body. Many pages put
//! the title and the lead in a block of their own (a stage, a top column, the first of two
//! `<article>`s, the article's `<header>`) and the body in another; scoring picks the body,
//! and the lead — often the best sentence of the page — would be lost. Two places count:
//! the `<header>` around the page's `<h1>` ([`header_lead`], read before boilerplate removal
//! cuts headers out; bylines, dates and captions are no lead), and whatever little text lies
//! between the `<h1>` and the chosen block. (Benchmarks disagree here: trafilatura's
//! annotators keep a standfirst, Zyte's leave it out.)

use std::rc::Rc;

use markup5ever_rcdom::Handle;

use std::collections::HashMap;

use super::content::{Key, Stats, block_below, elements, key, marks, stats};
use super::parse::{contains, find, name, parent_of, text_of};
use super::squash;
use super::vocabulary::{BLOCKS, DROP_MARKERS};

/// Most text (characters, spaces not counted) between the title and the chosen block for
/// what lies there to be a lead rather than another part of the page.
const MAX_BETWEEN: usize = 1200;

/// Shortest paragraph taken into a lead.
const MIN_PARAGRAPH: usize = 60;

/// `md` (the chosen block's markdown) with the lead before it: `from_header` (read by
/// [`header_lead`] before headers were cut out) and what lies between the title and the
/// chosen block, each paragraph only when `md` does not already hold it.
pub(crate) fn add_lead(
    md: String,
    from_header: Vec<String>,
    body: &Handle,
    chosen: &Handle,
) -> String {
    let lead: Vec<String> = from_header
        .into_iter()
        .chain(lead_before(body, chosen))
        .filter(|p| !mostly_in(p, &md))
        .collect();
    if lead.is_empty() {
        return md;
    }
    with_lead(&md, &lead.join("\n\n"))
}

/// The lead paragraphs in the `<header>` around the page's `<h1>` (a standfirst under the
/// title), read before boilerplate removal cuts headers out; bylines, dates, captions and
/// link lines are no lead.
pub(crate) fn header_lead(body: &Handle) -> Vec<String> {
    let order = elements(body);
    let map = stats(body);
    let Some(title) = order.iter().position(|n| name(n) == "h1") else {
        return Vec::new();
    };
    let h1 = &order[title];
    let mut up = parent_of(h1);
    let header = loop {
        match up {
            Some(p) if name(&p) == "header" => break p,
            Some(p) if name(&p) != "body" => up = parent_of(&p),
            _ => return Vec::new(),
        }
    };
    let mut lead = Vec::new();
    for n in order[title + 1..]
        .iter()
        .take_while(|n| contains(&header, n))
    {
        if leaf_block(n) && !page_data(n, &header) {
            lead.extend(paragraph(n, &map).1);
        }
    }
    lead
}

/// A block of the page's data about the article — a byline, a date, an author box, a share
/// bar — by its class/id or a `<time>` in it (up to `header`).
fn page_data(n: &Handle, header: &Handle) -> bool {
    if find(n, &|c| name(c) == "time").is_some() {
        return true;
    }
    let mut at = Some(Rc::clone(n));
    while let Some(e) = at {
        if Rc::ptr_eq(&e, header) {
            return false;
        }
        let marked = marks(&e);
        if DROP_MARKERS.iter().any(|m| marked.contains(m))
            || ["date", "time", "meta", "info"]
                .iter()
                .any(|m| marked.contains(m))
        {
            return true;
        }
        at = parent_of(&e);
    }
    false
}

/// `md` with `lead` as its first paragraph (after a leading `# heading`).
pub(super) fn with_lead(md: &str, lead: &str) -> String {
    let md = md.trim_start();
    match md.strip_prefix("# ").and_then(|_| md.split_once('\n')) {
        Some((heading, rest)) => format!("{heading}\n\n{lead}\n\n{}", rest.trim_start()),
        None => format!("{lead}\n\n{md}"),
    }
}

/// Whether four fifths of `text`'s words occur in `other` (the same summary with other quote
/// marks, or split in paragraphs).
pub(super) fn mostly_in(text: &str, other: &str) -> bool {
    fn words(s: &str) -> impl Iterator<Item = String> + '_ {
        s.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
    }
    let known: std::collections::HashSet<String> = words(other).collect();
    let (mut all, mut found) = (0, 0);
    for w in words(text) {
        all += 1;
        found += usize::from(known.contains(&w));
    }
    found * 5 >= all * 4
}

/// The lead paragraphs' text, in order; empty when there is none (the title inside the chosen
/// block or after it, no `<h1>`, or too much between them).
fn lead_before(body: &Handle, chosen: &Handle) -> Vec<String> {
    let order = elements(body);
    let map = stats(body);
    let Some(title) = order.iter().position(|n| name(n) == "h1") else {
        return Vec::new();
    };
    let h1 = &order[title];
    if contains(chosen, h1) || contains(h1, chosen) {
        return Vec::new();
    }
    let Some(start) = order[title..]
        .iter()
        .position(|n| Rc::ptr_eq(n, chosen))
        .map(|at| title + at)
    else {
        return Vec::new();
    };
    let mut between = 0;
    let mut lead = Vec::new();
    for n in &order[title + 1..start] {
        if contains(h1, n) || contains(n, chosen) || !leaf_block(n) {
            continue;
        }
        let (chars, text) = paragraph(n, &map);
        between += chars;
        if between > MAX_BETWEEN {
            return Vec::new();
        }
        lead.extend(text);
    }
    lead
}

/// A block's characters (spaces not counted), and its text when it reads as a lead
/// paragraph: long enough, under a fifth of it links, no picture's caption.
fn paragraph(n: &Handle, map: &HashMap<Key, Stats>) -> (usize, Option<String>) {
    let st = map.get(&key(n)).copied().unwrap_or_default();
    let lead = st.text >= MIN_PARAGRAPH && st.link * 5 < st.text && !picture_text(n);
    let text = lead.then(|| {
        let mut text = String::new();
        text_of(n, &mut text);
        squash(&text)
    });
    (st.text, text)
}

/// Class/id words of the box a picture and its caption sit in (the picture itself is gone by
/// now: pictures never reach the text).
const PICTURE_BOX: &[&str] = &[
    "image", "img", "photo", "picture", "media", "figure", "caption", "credit",
];

/// Text in a picture's box or a `<figure>`: a caption, not a lead.
fn picture_text(n: &Handle) -> bool {
    let mut at = Some(Rc::clone(n));
    for _ in 0..3 {
        let Some(e) = at else { break };
        if name(&e) == "figure" {
            return true;
        }
        let marked = marks(&e);
        if PICTURE_BOX.iter().any(|w| marked.contains(w)) {
            return true;
        }
        at = parent_of(&e);
    }
    false
}

/// A block element with no block below it: one paragraph's worth of text.
fn leaf_block(n: &Handle) -> bool {
    BLOCKS.contains(&name(n)) && !block_below(n)
}

#[cfg(test)]
mod tests {
    use super::super::tests::story;
    use super::super::to_markdown;

    const LEAD: &str = "You can come to your own car in several ways; we explain which of them costs least, and when.";

    #[test]
    fn the_lead_beside_the_title_comes_before_the_body() {
        // The title and the lead in a stage of their own, the body in the next <article>.
        let page = format!(
            "<html><body><article class='stage'><h1>Lease or buy?</h1><div class='stage-body'><p>{LEAD}</p></div></article><article class='basis'>{}</article></body></html>",
            story("cars")
        );
        let md = to_markdown(&page).1;
        assert!(
            md.starts_with(&format!("{LEAD}\n\nParagraph 0 about cars")),
            "{md}"
        );
        assert_eq!(md.matches("several ways").count(), 1, "{md}");
    }

    #[test]
    fn a_caption_or_a_long_stretch_after_the_title_is_no_lead() {
        // A picture's caption under the title.
        let page = format!(
            "<html><body><section><h1>Sleeping astronauts</h1><div class='image top'><img src='a.jpg'><p>In this file photo, made available by the agency, two astronauts work outside the station.</p></div><div class='story'>{}</div></section></body></html>",
            story("hibernation")
        );
        let md = to_markdown(&page).1;
        assert!(!md.contains("file photo"), "{md}");
        // A whole other block of text between the title and the body.
        let notes: String = (0..100)
            .map(|i| format!("<li>Short note {i:02} here.</li>"))
            .collect();
        let page = format!(
            "<html><body><div class='top'><h1>Sleeping astronauts</h1><ul>{notes}</ul><p>A paragraph after the notes, long enough to be taken for a lead if it were one.</p></div><div class='story'>{}</div></body></html>",
            story("hibernation")
        );
        let md = to_markdown(&page).1;
        assert!(!md.contains("after the notes"), "{md}");
    }

    #[test]
    fn the_standfirst_under_the_title_in_a_header_is_the_lead() {
        let page = format!(
            "<html><body><article><header><h1>Social energy</h1><p class='byline'>By Jo Writer, energy desk of the paper, reporting from the valley about heating costs and more</p><p><time>3 May 2024</time> Updated at noon, after the minister spoke to us about the prices of the coming winter</p><p class='lead'>{LEAD}</p><p><a href='/a'>Read the whole series on heating, pellets and prices</a></p></header><div class='text'>{}</div></article></body></html>",
            story("pellets")
        );
        let md = to_markdown(&page).1;
        assert!(
            md.contains(&format!("{LEAD}\n\nParagraph 0 about pellets")),
            "{md}"
        );
        for boilerplate in ["Jo Writer", "Updated at noon", "whole series"] {
            assert!(!md.contains(boilerplate), "{boilerplate}: {md}");
        }
    }
}
