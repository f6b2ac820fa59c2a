//! Lines that are only a widget's label: "Advertisement" over an ad slot, "Print recipe",
//! "Share", "Read more", "See also", "Tags" — left behind inside the article once the widget
//! they named is gone or was never text. A block whose whole text is one of these phrases (in
//! any of the languages of [`LABEL_LINES`]) goes; a phrase inside a sentence stays.

use std::rc::Rc;

use markup5ever_rcdom::{Handle, NodeData};

use super::parse::{name, text_of};
use super::vocabulary::{BLOCKS, LABEL_LINES};

/// The longest label, in characters (a longer block is never one).
const MAX_LABEL_CHARS: usize = 40;

/// `text` is a label: one of [`LABEL_LINES`], ignoring case, spacing and a trailing colon.
pub(crate) fn is_label(text: &str) -> bool {
    let words: Vec<&str> = text.split_whitespace().collect();
    let line = words.join(" ");
    let line = line.trim_end_matches([':', '.', '…', '»', '›', '→']).trim();
    if line.is_empty() || line.chars().count() > MAX_LABEL_CHARS {
        return false;
    }
    let lower = line.to_lowercase();
    LABEL_LINES.contains(&lower.as_str())
}

/// Remove the blocks under `root` whose whole text is a label. Returns how many went.
pub(crate) fn drop_label_lines(root: &Handle) -> usize {
    let mut dropped = 0;
    let mut stack = vec![Rc::clone(root)];
    while let Some(n) = stack.pop() {
        n.children.borrow_mut().retain(|c| {
            let is_line = matches!(c.data, NodeData::Element { .. })
                && (BLOCKS.contains(&name(c)) || matches!(name(c), "p" | "li"));
            if !is_line {
                return true;
            }
            let mut text = String::new();
            text_of(c, &mut text);
            if is_label(&text) {
                dropped += 1;
                return false;
            }
            true
        });
        stack.extend(n.children.borrow().iter().cloned());
    }
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::html::parse::{find, parse, tag};

    #[test]
    fn labels_in_several_languages_are_known() {
        for label in [
            "Advertisement",
            "ANZEIGE",
            "Rezept drucken",
            "Mehr zum Thema:",
            "Zobacz również",
            "Read more »",
            "  Share  ",
        ] {
            assert!(is_label(label), "{label}");
        }
        for text in [
            "Advertisement revenue fell by a third",
            "Print",
            "The ad said: Advertisement",
            "",
        ] {
            assert!(!is_label(text), "{text}");
        }
    }

    #[test]
    fn a_label_block_goes_and_a_sentence_with_the_word_stays() {
        let doc = parse(
            "<body><article><p>The council voted for the bridge.</p><div class='slot'>\
             <span>Advertisement</span></div><p>Advertisement revenue fell, the paper said.</p>\
             <h2>Mehr zum Thema</h2><ul><li><a href='/a'>Drucken</a></li></ul></article></body>",
        );
        let article = find(&doc, &|h| tag(h).as_deref() == Some("article")).expect("article");
        assert_eq!(drop_label_lines(&article), 3);
        let mut text = String::new();
        text_of(&article, &mut text);
        assert_eq!(
            text,
            "The council voted for the bridge.Advertisement revenue fell, the paper said."
        );
    }
}
