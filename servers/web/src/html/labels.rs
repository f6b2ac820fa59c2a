//! Lines that are only a widget's label, a picture's credit, a reading time or a teaser's
//! linked title: "Advertisement" over an ad slot, "Print recipe",
//! "Share", "Read more", "See also", "Tags" — left behind inside the article once the widget
//! they named is gone or was never text. A block whose whole text is one of these phrases (in
//! any of the languages of [`LABEL_LINES`]) goes; a phrase inside a sentence stays.

use std::rc::Rc;

use markup5ever_rcdom::{Handle, NodeData};

use super::parse::{name, text_of};
use super::squash;
use super::vocabulary::{
    BLOCKS, CREDIT_LABELS, LABEL_LINES, PICTURE_AGENCIES, READING_LABELS, READING_SUFFIXES,
    READING_UNITS, TAG_LABELS,
};

/// Inline elements a label line may be written as.
const INLINE: &[&str] = &["span", "strong", "b", "em", "small", "label", "a"];

/// The longest label, in characters (a longer block is never one).
const MAX_LABEL_CHARS: usize = 40;

/// `text` is a label: one of [`LABEL_LINES`], ignoring case, spacing and a trailing colon.
pub(crate) fn is_label(text: &str) -> bool {
    let line = squash(text);
    let line = line
        .trim_start_matches('(')
        .trim_end_matches([':', '.', '?', '!', ')', '…', '»', '›', '→'])
        .trim();
    if line.is_empty() || line.chars().count() > MAX_LABEL_CHARS {
        return false;
    }
    let lower = line.to_lowercase();
    LABEL_LINES.contains(&lower.as_str())
}

/// `text` is a picture's credit line: "Foto: dpa", "(Bild: Jane Doe)", "© iStock", or a short
/// line ending with a picture agency's name ("Getty Images", "… / picture alliance").
pub(crate) fn is_credit(text: &str) -> bool {
    let line = squash(text);
    if line.is_empty() || line.chars().count() > MAX_CREDIT_CHARS {
        return false;
    }
    let lower = line.to_lowercase();
    let opened = lower.trim_start_matches(['(', '[']).trim_start();
    let labelled = CREDIT_LABELS.iter().any(|label| {
        opened.strip_prefix(label).is_some_and(|rest| {
            // "Foto:", "Bild ©", "Photo/", "fot. …", "© …": the label, then what it credits.
            *label == "©" || label.ends_with('.') || rest.trim_start().starts_with([':', '©', '/'])
        })
    });
    if labelled {
        return true;
    }
    // An agency's name ends the line (a year or brackets may follow), a short line that is no
    // sentence.
    let end = lower.trim_end_matches(|c: char| !c.is_alphanumeric() || c.is_ascii_digit());
    line.split_whitespace().count() <= 8
        && !line.ends_with('.')
        && PICTURE_AGENCIES.iter().any(|agency| {
            end.strip_suffix(agency)
                .is_some_and(|before| before.is_empty() || !before.ends_with(char::is_alphanumeric))
        })
}

/// A heading (below `h1`) that is all a link to another page: a teaser's title ("What you need
/// to know about the virus" over a box of further reading), not a section of this page. A
/// link to a place in the page (`#…`) is a section's own.
fn is_link_heading(c: &Handle, text: &str) -> bool {
    if !matches!(name(c), "h2" | "h3" | "h4" | "h5" | "h6") {
        return false;
    }
    let total = text.chars().filter(|ch| !ch.is_whitespace()).count();
    total > 0 && linked_chars(c).is_some_and(|linked| linked * 10 >= total * 9)
}

/// The characters (not spaces) of `h`'s text inside links to anywhere but a place in the page.
fn linked_chars(h: &Handle) -> Option<usize> {
    let mut linked = 0;
    let mut stack = vec![Rc::clone(h)];
    while let Some(n) = stack.pop() {
        if name(&n) == "a" {
            let href = super::parse::attr(&n, "href").unwrap_or_default();
            if href.starts_with('#') || href.is_empty() {
                return None;
            }
            let mut t = String::new();
            text_of(&n, &mut t);
            linked += t.chars().filter(|ch| !ch.is_whitespace()).count();
            continue;
        }
        stack.extend(n.children.borrow().iter().cloned());
    }
    Some(linked)
}

/// A line "Tags: a, b, c" / "Kategorie: News" whose words after the label are links: the post's
/// tag or category list.
fn is_tag_list(c: &Handle, text: &str) -> bool {
    let Some((head, rest)) = text.split_once(':') else {
        return false;
    };
    let head = head.trim().to_lowercase();
    let rest_chars = rest
        .chars()
        .filter(|ch| !ch.is_whitespace() && *ch != ',')
        .count();
    TAG_LABELS.contains(&head.as_str())
        && rest_chars > 0
        && linked_chars(c).is_some_and(|linked| linked * 10 >= rest_chars * 9)
}

/// `text` is an estimate of the reading time: "Lesezeit: 2 Minuten", "8 minutos de lectura",
/// "11 minut czytania", "5 min read".
pub(crate) fn is_reading_time(text: &str) -> bool {
    let line = squash(text).to_lowercase();
    if line.is_empty() || line.chars().count() > MAX_LABEL_CHARS {
        return false;
    }
    let number = |w: &str| !w.is_empty() && w.chars().all(|c| c.is_ascii_digit());
    let unit = |w: &str| READING_UNITS.contains(&w.trim_end_matches('.'));
    // "Lesezeit: ca. 2 Minuten"
    for label in READING_LABELS {
        if let Some(rest) = line.strip_prefix(label) {
            let words: Vec<&str> = rest
                .trim_start_matches([':', ' '])
                .split(' ')
                .filter(|w| !matches!(*w, "ca." | "ca" | "~" | ""))
                .collect();
            return match words.as_slice() {
                [n] => number(n),
                [n, u] => number(n) && unit(u),
                _ => false,
            };
        }
    }
    // "8 minutos de lectura"
    let mut words = line.split(' ');
    let (Some(n), Some(u)) = (words.next(), words.next()) else {
        return false;
    };
    let rest = words.collect::<Vec<_>>().join(" ");
    number(n) && unit(u) && READING_SUFFIXES.contains(&rest.as_str())
}

/// The longest credit line, in characters.
const MAX_CREDIT_CHARS: usize = 90;

/// Remove the lines under `root` (blocks, and inline elements standing alone between blocks)
/// that are a label, a credit, a reading time, a teaser's linked title or a tag list. Returns
/// how many went.
pub(crate) fn drop_label_lines(root: &Handle) -> usize {
    let mut dropped = 0;
    let mut stack = vec![Rc::clone(root)];
    while let Some(n) = stack.pop() {
        // An inline element is a line of its own when every sibling is a block or blank
        // (`<div><span>See also</span><ul>…</ul></div>`).
        let alone = n.children.borrow().iter().all(|c| match &c.data {
            NodeData::Text { contents } => contents.borrow().trim().is_empty(),
            NodeData::Element { .. } => BLOCKS.contains(&name(c)) || INLINE.contains(&name(c)),
            _ => true,
        }) && n
            .children
            .borrow()
            .iter()
            .filter(|c| INLINE.contains(&name(c)))
            .count()
            == 1;
        n.children.borrow_mut().retain(|c| {
            // Code keeps every line. (`name` is "" for anything but an element.)
            let tag = name(c);
            let is_line =
                (BLOCKS.contains(&tag) || (alone && INLINE.contains(&tag))) && tag != "pre";
            if !is_line {
                return true;
            }
            let mut text = String::new();
            text_of(c, &mut text);
            if is_label(&text)
                || is_credit(&text)
                || is_reading_time(&text)
                || is_link_heading(c, &text)
                || is_tag_list(c, &text)
            {
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

    /// The labels dropped from the page's `<article>`, and the article's text left.
    fn drop_from_article(html: &str) -> (usize, String) {
        let doc = parse(html);
        let article = find(&doc, &|h| tag(h).as_deref() == Some("article")).expect("article");
        let dropped = drop_label_lines(&article);
        let mut text = String::new();
        text_of(&article, &mut text);
        (dropped, text)
    }

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
            "War der Artikel nützlich?",
            "(Noch keine Bewertungen)",
            "Verwandte Artikel",
            "Aktuellste Beiträge",
            "Most read",
            "zurück zur Listenansicht",
            "Quellen ausblenden",
            "Advert",
            "Want to join the discussion?",
            "Valorar:",
            "Valora esta noticia",
            "Kontakt:",
            "Weitere Informationen",
            "Zurück zum Newsroom",
            "Modo nocturno",
        ] {
            assert!(is_label(label), "{label}");
        }
        for text in [
            "Advertisement revenue fell by a third",
            "Print",
            "The ad said: Advertisement",
            "Most read books of the year were novels",
            "Contact us by letter: Main Street 4, Springfield",
            "",
        ] {
            assert!(!is_label(text), "{text}");
        }
    }

    #[test]
    fn a_label_written_as_a_span_goes_when_it_stands_alone() {
        let (dropped, text) = drop_from_article(
            "<body><article><div class='box'><span class='bar'>Zobacz również</span><ul><li>\
             <a href='/x'>Another story of the day</a></li></ul></div><p>Tap <span>Share</span> \
             to send it on.</p></article></body>",
        );
        assert_eq!(dropped, 1);
        assert_eq!(text, "Another story of the dayTap Share to send it on.");
    }

    #[test]
    fn a_heading_that_is_a_link_elsewhere_goes() {
        let (dropped, text) = drop_from_article(
            "<body><article><h2><a href='#part'>Part one</a></h2><p>The text of part one.</p>\
             <h3><a href='/guide'>What you need to know</a></h3><h3>Plain <a href='/x'>section</a> \
             heading</h3><p>More text.</p></article></body>",
        );
        assert_eq!(dropped, 1);
        assert_eq!(
            text,
            "Part oneThe text of part one.Plain section headingMore text."
        );
    }

    #[test]
    fn a_tag_list_goes_and_a_labelled_line_of_text_stays() {
        let (dropped, text) = drop_from_article(
            "<body><article><p>The text.</p><div>Tags: <a href='/t/a'>banks</a>, \
             <a href='/t/b'>euro crisis</a></div><p>Kategorie: Kinderbuch</p></article></body>",
        );
        assert_eq!(dropped, 1);
        assert_eq!(text, "The text.Kategorie: Kinderbuch");
    }

    #[test]
    fn reading_times_are_known() {
        for line in [
            "Lesezeit: 2 Minuten",
            "Lesedauer: 8 Min.",
            "8 minutos de lectura",
            "11\u{a0}minut czytania",
            "5 min read",
            "Reading time: ca. 4 min",
        ] {
            assert!(is_reading_time(line), "{line}");
        }
        for line in [
            "5 minutes from the station",
            "Lesezeit",
            "Read more",
            "90 min",
        ] {
            assert!(!is_reading_time(line), "{line}");
        }
    }

    #[test]
    fn credit_lines_are_known() {
        for credit in [
            "Foto: Sean Gallup/Getty Images",
            "(Bild: Dieter Stork)",
            "© shutterstock: Mark Agnor",
            "Getty Images",
            "Die Intensivstation im Klinikum / picture alliance",
            "Von David Hutzler, dpa",
            "Photo : YONHAP News",
        ] {
            assert!(is_credit(credit), "{credit}");
        }
        for text in [
            "Reuters: \"Kim Jong Un is fine\"",
            "The agency told Reuters.",
            "Stadt eröffnet Nordpark-Anlage",
            "Grandpa Jo, 54",
            "Credits and resources for the course",
        ] {
            assert!(!is_credit(text), "{text}");
        }
    }

    #[test]
    fn a_label_block_goes_and_a_sentence_with_the_word_stays() {
        let (dropped, text) = drop_from_article(
            "<body><article><p>The council voted for the bridge.</p><div class='slot'>\
             <span>Advertisement</span></div><p>Advertisement revenue fell, the paper said.</p>\
             <h2>Mehr zum Thema</h2><ul><li><a href='/a'>Drucken</a></li></ul></article></body>",
        );
        assert_eq!(dropped, 3);
        assert_eq!(
            text,
            "The council voted for the bridge.Advertisement revenue fell, the paper said."
        );
    }
}
