//! Article bodies shipped as a template: some blog platforms (Blogger's, among them every
//! Google blog) put a post's HTML inside `<script type="text/template">` in the element marked
//! `itemprop="articleBody"` and let a script insert it. A reader without scripts sees nothing
//! there, so the template's markup is parsed and put in the script's place — only in an
//! element that says it is the article's body, never for the other templates a page carries
//! (widgets, dialogs, app views).

use std::rc::Rc;

use markup5ever_rcdom::Handle;

use super::content::article_body;
use super::parse::{attr, find, parent_of, tag, text_of};

/// Largest template read (a post's HTML; anything larger is left out).
const MAX_TEMPLATE: usize = 1 << 20;

fn is_template_script(h: &Handle) -> bool {
    tag(h).as_deref() == Some("script")
        && attr(h, "type").is_some_and(|t| {
            let t = t.trim();
            t.eq_ignore_ascii_case("text/template") || t.eq_ignore_ascii_case("text/x-template")
        })
}

/// Put the markup of each template script that is an article body's child in its place.
/// Returns how many were inlined.
pub(crate) fn inline_article_templates(doc: &Handle) -> usize {
    let mut found = Vec::new();
    let mut stack = vec![Rc::clone(doc)];
    while let Some(n) = stack.pop() {
        if is_template_script(&n) {
            if parent_of(&n).is_some_and(|p| article_body(&p)) {
                found.push(n);
            }
            continue;
        }
        stack.extend(n.children.borrow().iter().cloned());
    }
    let mut inlined = 0;
    for script in found {
        let mut markup = String::new();
        text_of(&script, &mut markup);
        if markup.len() > MAX_TEMPLATE || !markup.contains('<') {
            continue;
        }
        let Some(parent) = parent_of(&script) else {
            continue;
        };
        let fragment = super::parse::parse(&markup);
        let Some(body) = find(&fragment, &|h| tag(h).as_deref() == Some("body")) else {
            continue;
        };
        let nodes: Vec<Handle> = body.children.take();
        for n in &nodes {
            n.parent.set(Some(Rc::downgrade(&parent)));
        }
        let mut children = parent.children.borrow_mut();
        if let Some(at) = children.iter().position(|c| Rc::ptr_eq(c, &script)) {
            script.parent.set(None);
            children.splice(at..=at, nodes);
            inlined += 1;
        }
    }
    inlined
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(h: &Handle) -> String {
        let mut s = String::new();
        text_of(h, &mut s);
        s
    }

    #[test]
    fn a_template_in_an_article_body_becomes_its_markup() {
        let doc = super::super::parse::parse(
            "<body><div itemprop='articleBody'><script type='text/template'>\
             <p>First paragraph of the post.</p><p>Second &amp; last.</p></script></div>\
             <script type='text/template'><div>a widget's view</div></script></body>",
        );
        assert_eq!(inline_article_templates(&doc), 1);
        let body = find(&doc, &|h| tag(h).as_deref() == Some("div")).expect("div");
        let paras: Vec<Handle> = body.children.borrow().clone();
        assert_eq!(
            paras.len(),
            2,
            "the script's place holds the two paragraphs"
        );
        assert!(paras.iter().all(|p| tag(p).as_deref() == Some("p")));
        assert!(
            paras
                .iter()
                .all(|p| parent_of(p).is_some_and(|q| Rc::ptr_eq(&q, &body)))
        );
        assert_eq!(text(&body), "First paragraph of the post.Second & last.");
        // The template outside an article body stays a script.
        let other = find(&doc, &|h| is_template_script(h)).expect("the widget's template");
        assert!(text(&other).contains("a widget's view"));
    }

    #[test]
    fn a_template_without_markup_or_outside_an_article_body_is_left() {
        let doc = super::super::parse::parse(
            "<body><div itemprop='articleBody'><script type='text/template'>{{ post.body }}\
             </script></div><div class='post-body'><script type='text/template'><p>x</p>\
             </script></div></body>",
        );
        assert_eq!(inline_article_templates(&doc), 0);
    }

    #[test]
    fn a_blogger_post_is_extracted_from_its_template() {
        let para = "The post explains the change in detail, sentence after sentence, with the \
                    clauses and commas an article has, for a reader who reads on.";
        let html = format!(
            "<html><head><meta name='description' content='A short summary.'></head><body>\
             <div class='post'><h2>Title</h2><div class='post-body'>\
             <div class='post-content' itemprop='articleBody'><script type='text/template'>\
             <p>{para}</p><p>{para} Again.</p><p>Third: ruby <ruby>漢<rt>かん</rt>字<rt>じ</rt></ruby>.</p>\
             </script></div><noscript><p>Enable scripts.</p></noscript></div></div></body></html>"
        );
        let (_, md, _) = super::super::to_markdown(&html);
        assert!(md.contains(para), "{md}");
        assert!(md.contains("Again."), "{md}");
        assert!(md.contains("ruby 漢字."), "furigana left out: {md}");
        assert!(!md.contains("A short summary"), "{md}");
    }
}
