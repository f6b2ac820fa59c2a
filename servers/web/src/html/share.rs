//! Share bars found by where their links go, not by their class: a block whose links open
//! social networks' share dialogs is a share bar in any language and any theme. Its buttons go
//! with the hard strip; what this finds is the label beside them ("Diesen Artikel teilen",
//! "Partager", "Share this story") that would otherwise stay at the end of the text.

use std::collections::HashMap;
use std::rc::Rc;

use markup5ever_rcdom::{Handle, Node};

use super::parse::{attr, name, parent_of};

/// URL fragments of share dialogs (and of mail links that carry a subject: "send by mail").
const SHARE_TARGETS: &[&str] = &[
    "facebook.com/share",
    "facebook.com/dialog/share",
    "twitter.com/intent",
    "twitter.com/share",
    "x.com/intent",
    "linkedin.com/share",
    "linkedin.com/cws/share",
    "pinterest.com/pin/create",
    "reddit.com/submit",
    "api.whatsapp.com/send",
    "whatsapp://send",
    "wa.me/?",
    "t.me/share",
    "telegram.me/share",
    "xing.com/spi/shares",
    "xing.com/social/share",
    "tumblr.com/share",
    "vk.com/share",
    "bsky.app/intent",
    "mailto:?",
];

/// Most non-link text a share bar holds: its label.
const LABEL_MAX: usize = 100;

/// How many share-dialog links each element holds (elements without any are absent).
pub(crate) struct ShareLinks(HashMap<*const Node, usize>);

impl ShareLinks {
    /// Count the share links under `root`.
    pub(crate) fn under(root: &Handle) -> Self {
        let mut counts = HashMap::new();
        let mut stack = vec![Rc::clone(root)];
        while let Some(n) = stack.pop() {
            if name(&n) == "a"
                && attr(&n, "href").is_some_and(|h| {
                    let h = h.to_ascii_lowercase();
                    SHARE_TARGETS.iter().any(|t| h.contains(t))
                })
            {
                let mut cur = Some(Rc::clone(&n));
                while let Some(c) = cur {
                    *counts.entry(Rc::as_ptr(&c)).or_insert(0) += 1;
                    cur = parent_of(&c);
                }
            }
            stack.extend(n.children.borrow().iter().cloned());
        }
        ShareLinks(counts)
    }

    /// Whether `n`, holding `prose` characters outside links, is a share bar: two share links
    /// or more and no more text than a label.
    pub(crate) fn is_bar(&self, n: &Handle, prose: usize) -> bool {
        !matches!(name(n), "body" | "html" | "main" | "article")
            && prose <= LABEL_MAX
            && self.0.get(&Rc::as_ptr(n)).is_some_and(|&k| k >= 2)
    }
}

#[cfg(test)]
mod tests {
    use super::super::to_markdown;

    #[test]
    fn a_label_beside_share_links_goes_with_them() {
        let html = r#"<html><body><article><h1>Title</h1>
            <p>The article's only paragraph, long enough to read as prose, with commas, and more.</p>
            <div class="x1"><span>Diesen Artikel teilen</span>
              <a href="https://www.facebook.com/sharer/sharer.php?u=x">f</a>
              <a href="https://twitter.com/intent/tweet?url=x">t</a></div>
            <p>Links to <a href="https://facebook.com/ourpage">our page</a> and
              <a href="https://twitter.com/us">our feed</a> in text are no share bar.</p>
            </article></body></html>"#;
        let (_, md, _) = to_markdown(html);
        assert!(!md.contains("teilen"), "{md}");
        assert!(md.contains("our page"), "{md}");
    }
}
