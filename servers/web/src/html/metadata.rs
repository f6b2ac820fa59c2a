//! What a page says about itself in its metadata — schema.org JSON-LD `articleBody` and
//! `description`, `og:description`, `<meta name=description>` — and its use: the text of a page
//! whose body holds no prose of its own (a video, a script-rendered page), and the lead of a
//! thin body that leaves its own summary out.

use std::rc::Rc;

use markup5ever_rcdom::Handle;

use super::content::Choice;
use super::lead::{mostly_in, with_lead};
use super::parse::{attr, find, tag, text_of};
use super::squash;

/// Largest JSON-LD block read for metadata.
const MAX_JSON_LD: usize = 1 << 20;

/// Prose (non-link characters) under which the body is taken to hold no article of its own.
const THIN_PROSE: usize = 250;

/// Text found in the page's metadata.
#[derive(Default, Debug)]
pub(super) struct Meta {
    /// schema.org `articleBody` (the whole text of an article, when a site puts it there).
    article_body: Option<String>,
    /// The longest of JSON-LD `description`, `og:description`, `<meta name=description>`.
    description: Option<String>,
}

/// The shortest metadata description put before a thin body's text.
const SUMMARY_CHARS: usize = 80;

fn longer(a: Option<String>, b: String) -> Option<String> {
    match a {
        Some(a) if a.len() >= b.len() => Some(a),
        _ if b.is_empty() => None,
        _ => Some(b),
    }
}

/// `articleBody` and `description` strings anywhere in a JSON-LD value (iteratively).
fn json_ld(v: serde_json::Value, meta: &mut Meta) {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Array(a) => stack.extend(a),
            serde_json::Value::Object(o) => {
                for (k, v) in o {
                    match (k.as_str(), v) {
                        ("articleBody", serde_json::Value::String(s)) => {
                            meta.article_body = longer(meta.article_body.take(), squash(&s));
                        }
                        ("description", serde_json::Value::String(s)) => {
                            meta.description = longer(meta.description.take(), squash(&s));
                        }
                        (_, v @ (serde_json::Value::Array(_) | serde_json::Value::Object(_))) => {
                            stack.push(v)
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
}

/// Metadata text, read before scripts are stripped.
pub(super) fn read(doc: &Handle) -> Meta {
    let mut meta = Meta::default();
    let mut stack = vec![Rc::clone(doc)];
    while let Some(n) = stack.pop() {
        match tag(&n).as_deref() {
            Some("meta") => {
                let key = attr(&n, "property")
                    .or_else(|| attr(&n, "name"))
                    .unwrap_or_default()
                    .to_ascii_lowercase();
                if matches!(
                    key.as_str(),
                    "og:description" | "description" | "twitter:description"
                ) {
                    let content: Option<String> = attr(&n, "content");
                    if let Some(c) = content {
                        meta.description = longer(meta.description.take(), squash(&c));
                    }
                }
            }
            Some("script")
                if attr(&n, "type")
                    .is_some_and(|t| t.eq_ignore_ascii_case("application/ld+json")) =>
            {
                let mut s = String::new();
                text_of(&n, &mut s);
                if s.len() <= MAX_JSON_LD
                    && let Ok(v) = serde_json::from_str::<serde_json::Value>(s.trim())
                {
                    json_ld(v, &mut meta);
                }
            }
            _ => {}
        }
        stack.extend(n.children.borrow().iter().cloned());
    }
    meta
}

/// `md`, the chosen block's markdown, with what the metadata adds: its text instead of a body
/// without prose of its own, when it says more; its summary before a thin body's text that
/// leaves the summary out (a video page's description under its player).
pub(super) fn fill_in(mut md: String, meta: &Meta, choice: &Choice, body: &Handle) -> String {
    // A body without prose of its own: the metadata's text, when it says more.
    let fallback = match (&meta.article_body, &meta.description) {
        (Some(b), _) if b.len() > 2 * choice.prose.max(THIN_PROSE / 2) => Some(b),
        (_, Some(d)) if (!choice.scored || choice.prose < THIN_PROSE) && d.len() > choice.prose => {
            Some(d)
        }
        _ => None,
    };
    if let Some(text) = fallback {
        let heading = find(&choice.root, &|h| tag(h).as_deref() == Some("h1"))
            .or_else(|| find(body, &|h| tag(h).as_deref() == Some("h1")))
            .map(|h| {
                let mut s = String::new();
                text_of(&h, &mut s);
                squash(&s)
            })
            .filter(|h| !h.is_empty());
        md = match heading {
            Some(h) => format!("# {h}\n\n{text}"),
            None => text.clone(),
        };
    }
    // The summary goes first, below the heading.
    if fallback.is_none()
        && choice.prose < THIN_PROSE
        && let Some(d) = &meta.description
        && d.len() >= SUMMARY_CHARS
        && !mostly_in(d, &md)
    {
        md = with_lead(&md, d);
    }
    md
}
