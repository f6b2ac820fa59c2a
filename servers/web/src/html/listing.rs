//! A chosen block that is a list of other posts. A blog page can put its article in one
//! `<article>` and, below it, a box of teasers — each an `<article>` of its own with an excerpt.
//! The teasers together hold more text than a short article, so they can outscore it. When the
//! chosen block holds three `<article>`s or more and an `<article>` outside it reads as a whole
//! article, that one is the page's content.

use std::rc::Rc;

use markup5ever_rcdom::Handle;

use super::content::{Choice, elements, stats};
use super::parse::{contains, name};

/// Least prose (characters outside links) of the article that replaces a list.
const ARTICLE_PROSE: usize = 400;

/// The article beside a list of teasers, when `choice` is such a list (see the module doc).
pub(crate) fn prefer_article(body: &Handle, choice: Choice) -> Choice {
    let articles: Vec<Handle> = elements(body)
        .into_iter()
        .filter(|e| name(e) == "article")
        .collect();
    let inside = articles
        .iter()
        .filter(|a| !Rc::ptr_eq(a, &choice.root) && contains(&choice.root, a))
        .count();
    if inside < 3 {
        return choice;
    }
    let map = stats(body);
    let outside = articles.iter().find(|a| {
        !contains(a, &choice.root)
            && !contains(&choice.root, a)
            && map.get(&Rc::as_ptr(a)).is_some_and(|st| {
                st.text.saturating_sub(st.link) >= ARTICLE_PROSE && st.link_density() < 0.2
            })
    });
    match outside {
        Some(a) => {
            let st = map.get(&Rc::as_ptr(a)).copied().unwrap_or_default();
            Choice {
                root: Rc::clone(a),
                prose: st.text.saturating_sub(st.link),
                scored: true,
            }
        }
        None => choice,
    }
}

#[cfg(test)]
mod tests {
    use super::super::to_markdown;

    #[test]
    fn the_article_beside_a_box_of_teasers_is_the_content() {
        // Eight teasers with commas enough to outscore the post: without the rule, they win.
        let teaser = |n: u32| {
            format!(
                "<article class=\"post\"><p>Teaser {n} excerpt, about another post, with a list: \
                 red, green, blue, yellow, and more, of the kind an excerpt quotes, cut off, \
                 mid-sentence, then a link, as listings do, on and on…</p>\
                 <a href=\"/p{n}\">more</a></article>"
            )
        };
        let teasers: String = (1..=8).map(teaser).collect();
        let html = format!(
            "<html><body><div id=\"primary\"><div><article class=\"post\"><h1>The post</h1>\
             <p>The post's own text, which is the content of this page, with commas, and more \
             words than a teaser has, and then a second sentence follows it, as prose does.</p>\
             <p>A second paragraph of the post, with detail, and clauses, and a conclusion \
             that closes the article for the reader who came for it, at the end.</p>\
             <p>A third paragraph, since an article is longer than any teaser beside it, and it \
             reads on: one more sentence, with a comma, before it ends.</p>\
             <p>And a fourth, for the length an article has: it goes on about its subject, \
             with a comma or two, until the point is made and the reader is done.</p></article></div>\
             <div><article class=\"post box\">{teasers}</article></div></div></body></html>"
        );
        let (_, md, _) = to_markdown(&html);
        assert!(md.contains("The post's own text"), "{md}");
        assert!(!md.contains("Teaser 1"), "{md}");
    }
}
