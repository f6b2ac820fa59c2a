//! Step 2 of finding the main content ([`super::content`]): boilerplate blocks out — by tag,
//! ARIA role or class/id marker (navigation, headers and footers, asides, cookie banners, share
//! widgets, related links…) — unless the block holds the page's text: most of it with few
//! links (never for comments or a consent dialog), nearly all of it (an ASP.NET page's
//! `<form>`), the page's own `<main>`/`<article>`, half its text outside links when only a
//! position marks it (the page's column in a layout with a rail), prose under share or gallery
//! markers, a boxed note inside the text (a DocBook `sidebar`), or an article's body written
//! inside that article's `<header>`.

use std::collections::HashMap;

use markup5ever_rcdom::{Handle, Node};

use super::content::{
    Key, Stats, article_body, attr_lc, class_weight, elements, key, marks, stats,
};
use super::headings::remove_marking;
use super::parse::{contains, name, parent_of};
use super::share::ShareLinks;
use super::vocabulary::{
    ATTACHED_MARKERS, COMMENT_MARKERS, DIALOG_MARKERS, DROP_MARKERS, DROP_ROLES, POSITION_MARKERS,
    SOFT_DROP,
};

/// Step 2: boilerplate blocks out, unless one holds at least 40% of the text under `root` with
/// less than a third of it in links.
pub(crate) fn strip_soft(root: &Handle) {
    let map = stats(root);
    let total = map.get(&key(root)).map_or(0, |s| s.text);
    let page_prose = map.get(&key(root)).map_or(0, |s| s.text - s.link);
    // The page's own article: a semantic main-content element holding a quarter of its text.
    // A boilerplate-looking block around it is layout (`<div class="pg-right-rail-tall">`
    // wrapping a page with a rail), not boilerplate; teaser `<article>` cards are too small.
    // An element the page marks as its article's body (`itemprop="articleBody"`) is one with
    // prose of any length: a short news item inside an `<aside>` wrapper is still the article.
    let anchors: Vec<Handle> = elements(root)
        .into_iter()
        .filter(|e| {
            semantic_main(e)
                && !is_dialog(e, &marks(e))
                && map.get(&key(e)).is_some_and(|st| {
                    st.text * 4 >= total || (article_body(e) && st.prose() >= ARTICLE_BODY_PROSE)
                })
        })
        .collect();
    let share = ShareLinks::under(root);
    remove_marking(root, &mut |c| {
        let tag = name(c);
        if tag.is_empty() || matches!(tag, "body" | "html") {
            return false;
        }
        let role = attr_lc(c, "role").unwrap_or_default();
        // The class/id words read once per element, and the boilerplate markers among them.
        let marked = marks(c);
        let markers: Vec<&str> = DROP_MARKERS
            .iter()
            .copied()
            .filter(|m| marked.contains(m))
            .collect();
        let dialog = is_dialog(c, &marked);
        if semantic_main(c) && !dialog {
            return false;
        }
        if share.is_bar(c, map.get(&key(c)).map_or(0, |s| s.prose())) {
            return true;
        }
        let comments = COMMENT_MARKERS.iter().any(|m| marked.contains(m));
        let boiler = SOFT_DROP.contains(&tag)
            || DROP_ROLES.contains(&role.as_str())
            || !markers.is_empty()
            || comments;
        if !boiler {
            return false;
        }
        let st = map.get(&key(c)).copied().unwrap_or_default();
        // Readers' comments can outweigh the article they follow, a consent dialog the page
        // it covers: their size is no reason to keep them.
        let never_content = comments || dialog;
        let dominant = !never_content && st.text * 10 >= total * 4 && st.link_density() < 0.33;
        // A block holding nearly all of the page is the page, however many links it has: the
        // `<form>` an ASP.NET page wraps its whole body in.
        let whole = st.text * 10 >= total * 8;
        // A DocBook/AsciiDoc `sidebar` is a boxed note inside the text: paragraphs, few links.
        let boxed_note =
            tag == "div" && marked.contains("sidebar") && st.paras >= 2 && st.link_density() < 0.1;
        let holds_article = anchors.iter().any(|a| contains(c, a));
        // Marked only as a box with share buttons (`entry themeform share`) while holding
        // paragraph after paragraph of prose: the article, not the share bar.
        // So is one that wraps the block the page names as its content (`entry-content`
        // inside `socialicons-sticky`) when that block is nearly all of it.
        let attached_only = !comments
            && !SOFT_DROP.contains(&tag)
            && st.link_density() < 0.2
            && !markers.is_empty()
            && markers.iter().all(|m| ATTACHED_MARKERS.contains(m));
        let prose_body = attached_only
            && ((st.paras >= 4 && st.prose() >= 1000) || wraps_named_content(c, &st, &map));
        // Only a position marks it (`and-w-sidebar`, a layout with a rail) while it holds half
        // the page's text outside links: it is the page's column, not the side one.
        let page_column = !comments
            && !SOFT_DROP.contains(&tag)
            && st.paras >= 2
            && (st.text - st.link) * 2 >= page_prose
            && !markers.is_empty()
            && markers.iter().all(|m| POSITION_MARKERS.contains(m));
        let article_header = tag == "header" && is_article_body_header(c, &st, &map);
        !dominant
            && !boxed_note
            && !whole
            && !holds_article
            && !page_column
            && !prose_body
            && !article_header
    });
}

/// An `<article>`'s own `<header>` that holds nearly all of its article's text, and that
/// text is prose: the article's body (a theme that puts each section's paragraphs in its
/// header), not a title and a byline. A teaser card's header is too short to be one.
fn is_article_body_header(header: &Handle, st: &Stats, map: &HashMap<Key, Stats>) -> bool {
    if st.prose() < HEADER_BODY_PROSE || st.link_density() >= 0.2 {
        return false;
    }
    let mut up = parent_of(header);
    while let Some(p) = up {
        if name(&p) == "article" {
            return map
                .get(&key(&p))
                .is_some_and(|a| st.text * 10 >= a.text * 8);
        }
        up = parent_of(&p);
    }
    false
}

/// Whether a block inside `outer` that the page names as content (a class/id hint such as
/// `entry-content`) holds four fifths of its prose, in two paragraphs or more and
/// [`NAMED_CONTENT_PROSE`] characters (an embed's consent notice in `text-body` is shorter).
fn wraps_named_content(outer: &Handle, st: &Stats, map: &HashMap<Key, Stats>) -> bool {
    let mut stack: Vec<Handle> = outer.children.borrow().iter().cloned().collect();
    while let Some(n) = stack.pop() {
        let Some(inner) = map.get(&key(&n)) else {
            continue;
        };
        if inner.prose() * 5 < st.prose() * 4 {
            continue;
        }
        if inner.paras >= 2 && inner.prose() >= NAMED_CONTENT_PROSE && class_weight(&marks(&n)) > 0
        {
            return true;
        }
        stack.extend(n.children.borrow().iter().cloned());
    }
    false
}

/// Prose a named content block needs to keep a share box around it.
const NAMED_CONTENT_PROSE: usize = 400;

/// Prose an article's `<header>` needs to be taken for its body.
const HEADER_BODY_PROSE: usize = 400;

/// A dialog — a consent notice, a login or password box that opens over the page — is never
/// the page's text, whatever its size or its tag (`<article class="dark-modal">`). `marked`:
/// the element's [`marks`].
fn is_dialog(n: &Node, marked: &str) -> bool {
    DIALOG_MARKERS.iter().any(|m| marked.contains(m))
        || matches!(
            attr_lc(n, "role").as_deref(),
            Some("dialog" | "alertdialog")
        )
}

/// `<main>`, `<article>`, `[role=main]` or `[itemprop=articleBody]`: never dropped as
/// boilerplate themselves.
fn semantic_main(n: &Handle) -> bool {
    matches!(name(n), "main" | "article")
        || attr_lc(n, "role").is_some_and(|r| r == "main")
        || article_body(n)
}

/// Prose an `articleBody` needs to hold the page's article whatever its share of the page.
const ARTICLE_BODY_PROSE: usize = 200;
