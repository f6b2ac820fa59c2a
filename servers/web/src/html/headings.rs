//! Headings left without a section. Cleaning takes out a related-articles list, a share bar or
//! a comment form, but the heading that introduced it ("More on this topic", "Das könnte Sie
//! auch interessieren", "Comments") often sits beside it, not inside it, and stays behind — at
//! the end of the text or just before the next heading. [`remove_marking`] marks a heading
//! whose next block was removed; [`drop_orphans`] then takes out the marked ones, and those at
//! the very end, that no text follows before the next heading of the same or a higher rank. A
//! heading no removal touched keeps its place: a standfirst `<h2>` before the first section
//! `<h2>` is no orphan.

use std::rc::Rc;

use html5ever::{Attribute, QualName, ns};
use markup5ever_rcdom::{Handle, NodeData};

use super::parse::name;

/// The attribute [`remove_marking`] leaves on a heading whose next block it removed.
const EMPTIED: &str = "data-kitbag-emptied";

/// Remove every child matching `drop`, anywhere under `root`, and mark a heading that stood
/// just before a removed block.
pub(crate) fn remove_marking(root: &Handle, drop: &mut dyn FnMut(&Handle) -> bool) {
    let mut stack = vec![Rc::clone(root)];
    while let Some(n) = stack.pop() {
        let mut before: Option<Handle> = None;
        n.children.borrow_mut().retain(|c| {
            if !matches!(c.data, NodeData::Element { .. }) {
                return true;
            }
            if drop(c) {
                if let Some(h) = before.as_ref().filter(|h| heading_rank(h).is_some()) {
                    mark(h);
                }
                return false;
            }
            before = Some(Rc::clone(c));
            true
        });
        stack.extend(n.children.borrow().iter().cloned());
    }
}

fn mark(h: &Handle) {
    if let NodeData::Element { attrs, .. } = &h.data {
        let mut attrs = attrs.borrow_mut();
        if !attrs.iter().any(|a| a.name.local.as_ref() == EMPTIED) {
            attrs.push(Attribute {
                name: QualName::new(None, ns!(), EMPTIED.into()),
                value: "".into(),
            });
        }
    }
}

fn marked(h: &Handle) -> bool {
    match &h.data {
        NodeData::Element { attrs, .. } => attrs
            .borrow()
            .iter()
            .any(|a| a.name.local.as_ref() == EMPTIED),
        _ => false,
    }
}

/// Longest label read as a heading when it is a paragraph in bold rather than an `<hN>`.
const LABEL_MAX: usize = 60;

enum Item {
    /// A heading (its rank: 2–6 for `<h2>`–`<h6>`, 7 for a bold label) and its element.
    Heading(u8, Handle),
    /// Text that is not a heading's.
    Text,
}

/// Remove every heading under `root` that was marked by a removal after it, or that ends the
/// text (but a bold statement, which signs it off), when no text follows it before the next
/// heading of the same or a higher rank. `<h1>` stays: it is the page's title, whatever
/// follows it.
pub(crate) fn drop_orphans(root: &Handle) {
    let mut items = Vec::new();
    collect(root, &mut items);
    let last_text = items.iter().rposition(|i| matches!(i, Item::Text));
    // Headings that end the text with as much to say as a paragraph (a text set in headings,
    // a run of pull quotes) are the text's end, not the titles of what was cut after it; a
    // short title among them still is one.
    let ending: usize = items[last_text.map_or(0, |t| t + 1)..]
        .iter()
        .map(|i| match i {
            Item::Heading(_, h) => text_chars(h),
            Item::Text => 0,
        })
        .sum();
    let ends_in_headings = ending >= HEADED_ENDING;
    let mut orphans = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let Item::Heading(rank, h) = item else {
            continue;
        };
        let at_end = last_text.is_none_or(|t| t < i)
            && !(ends_in_headings && text_chars(h) >= SAYING_HEADING);
        if !marked(h) && (!at_end || (*rank == 7 && bold_statement(h))) {
            continue;
        }
        let followed = items[i + 1..]
            .iter()
            .find_map(|next| match next {
                Item::Text => Some(true),
                Item::Heading(r, _) if r <= rank => Some(false),
                Item::Heading(..) => None,
            })
            .unwrap_or(false);
        if !followed {
            orphans.push(Rc::clone(h));
        }
    }
    for h in orphans {
        detach(&h);
    }
}

/// The headings and text under `n`, in document order.
fn collect(n: &Handle, items: &mut Vec<Item>) {
    let mut stack = vec![Rc::clone(n)];
    while let Some(n) = stack.pop() {
        match &n.data {
            NodeData::Text { contents } => {
                if !contents.borrow().trim().is_empty() {
                    items.push(Item::Text);
                }
            }
            NodeData::Element { .. } => {
                if let Some(rank) = heading_rank(&n) {
                    items.push(Item::Heading(rank, Rc::clone(&n)));
                } else {
                    stack.extend(n.children.borrow().iter().rev().cloned());
                }
            }
            _ => stack.extend(n.children.borrow().iter().rev().cloned()),
        }
    }
}

/// 2–6 for `<h2>`–`<h6>`; 7 for a short paragraph that is all bold (a label such as
/// "Mehr zum Thema:"); `None` for anything else, `<h1>` included.
fn heading_rank(n: &Handle) -> Option<u8> {
    match name(n) {
        "h2" => Some(2),
        "h3" => Some(3),
        "h4" => Some(4),
        "h5" => Some(5),
        "h6" => Some(6),
        "p" if bold_label(n) => Some(7),
        _ => None,
    }
}

/// A paragraph whose only content is one `<strong>`/`<b>` of at most [`LABEL_MAX`] characters.
fn bold_label(p: &Handle) -> bool {
    let children = p.children.borrow();
    let mut elements = children.iter().filter(|c| match &c.data {
        NodeData::Text { contents } => !contents.borrow().trim().is_empty(),
        NodeData::Element { .. } => true,
        _ => false,
    });
    let (Some(only), None) = (elements.next(), elements.next()) else {
        return false;
    };
    if !matches!(name(only), "strong" | "b") {
        return false;
    }
    let mut text = String::new();
    super::parse::text_of(only, &mut text);
    let len = text.trim().chars().count();
    len > 0 && len <= LABEL_MAX
}

/// Characters of headings after the last text from which they are the text's own end.
const HEADED_ENDING: usize = 200;

/// Characters from which a heading in such an ending says something itself.
const SAYING_HEADING: usize = 50;

/// Characters of text under `h`, spaces not counted.
fn text_chars(h: &Handle) -> usize {
    let mut text = String::new();
    super::parse::text_of(h, &mut text);
    text.chars().filter(|c| !c.is_whitespace()).count()
}

/// A bold label that ends as a statement does ("Be there or be square!"): at the end of a
/// text it signs the text off rather than introducing something that was cut.
fn bold_statement(p: &Handle) -> bool {
    let mut text = String::new();
    super::parse::text_of(p, &mut text);
    text.trim_end().ends_with(['.', '!'])
}

fn detach(h: &Handle) {
    let Some(parent) = h.parent.take().and_then(|w| w.upgrade()) else {
        return;
    };
    parent.children.borrow_mut().retain(|c| !Rc::ptr_eq(c, h));
}

#[cfg(test)]
mod tests {
    use super::super::to_markdown;

    #[test]
    fn a_heading_whose_list_was_cleaned_out_goes_with_it() {
        let html = r#"<html><body><article><h1>Title</h1>
            <p>The article's first paragraph, long enough to read as prose, with a comma, and more.</p>
            <h2>What happened</h2><p>A second paragraph of prose, with commas, clauses, and detail.</p>
            <h2>Mehr zum Thema</h2>
            <ul><li><a href="/a">A related story</a></li><li><a href="/b">Another related story</a></li></ul>
            <p><strong>Das könnte Sie auch interessieren:</strong></p>
            </article></body></html>"#;
        let (_, md, _) = to_markdown(html);
        assert!(md.contains("## What happened"), "{md}");
        assert!(!md.contains("Mehr zum Thema"), "{md}");
        assert!(!md.contains("interessieren"), "{md}");
    }

    #[test]
    fn a_heading_over_sub_sections_stays() {
        let html = r#"<html><body><article><h1>Title</h1>
            <p>An introduction long enough to read as prose, with a comma, and another clause.</p>
            <h2>Setup</h2><h3>On Linux</h3>
            <p>Install the package, then run it once, and check the output for errors.</p>
            <p><strong>Note:</strong> bold labels that lead their text stay too, as here.</p>
            </article></body></html>"#;
        let (_, md, _) = to_markdown(html);
        assert!(
            md.contains("## Setup") && md.contains("### On Linux"),
            "{md}"
        );
        assert!(md.contains("**Note:**"), "{md}");
    }

    #[test]
    fn a_bold_sign_off_at_the_end_stays() {
        let html = r#"<html><body><article><h1>Contest on a floating ramp</h1>
            <p>The third edition comes to the lake in August, with a floating ramp, a prize, and a party.</p>
            <p>Warm-up at eleven, the contest at noon, the awards at half past six in the evening.</p>
            <p><strong>Be there or be square!</strong></p>
            </article></body></html>"#;
        let (_, md, _) = to_markdown(html);
        assert!(md.ends_with("**Be there or be square!**"), "{md}");
        // A label at the end still goes.
        let label = html.replace("Be there or be square!", "More from the lake:");
        assert!(!to_markdown(&label).1.contains("More from"));
    }

    #[test]
    fn a_text_that_ends_in_headings_keeps_them() {
        // A poster call set in <h4>s inside a quote: no text after them, but they are the text.
        let html = r#"<html><body><article><h1>Keep our waters clean</h1>
            <p>Once more something about water, as every spring, for the children of the city:</p>
            <blockquote><h4>The poster contest for children takes place for the sixth time this year.</h4>
            <h4>Children between six and twelve are asked to take part with their colourful ideas.</h4>
            <h4>Design a poster under the motto: keep our waters clean, and send it in by April.</h4>
            <h4>The best posters hang in the city's trains and buses all through the summer.</h4></blockquote>
            </article></body></html>"#;
        let md = to_markdown(html).1;
        assert!(md.contains("send it in by April"), "{md}");
        // A short title left at the end still goes.
        let html = html.replace("</blockquote>", "</blockquote><h3>More on this topic</h3>");
        let md = to_markdown(&html).1;
        assert!(
            md.contains("sixth time") && !md.contains("More on this"),
            "{md}"
        );
    }
}
