//! Captions written without `<figcaption>`: a box holding a picture and one short line of
//! text beside it (`<div class="imginline"><img><span>Figure: the glacier…</span></div>`). The
//! picture never reaches the text, and its line, left alone among the paragraphs, reads as one
//! of them. Found before pictures are stripped: afterwards nothing tells the line from a
//! paragraph.

use std::rc::Rc;

use markup5ever_rcdom::{Handle, NodeData};

use super::content::block_below;
use super::parse::{name, text_of};

/// Longest caption, in characters (spaces not counted).
const MAX_CAPTION: usize = 300;

/// Remove every caption line under `root` (see the module doc).
pub(crate) fn drop_captions(root: &Handle) {
    let mut stack = vec![Rc::clone(root)];
    while let Some(n) = stack.pop() {
        if let Some(caption) = caption_of(&n) {
            n.children.borrow_mut().retain(|c| !Rc::ptr_eq(c, &caption));
            continue;
        }
        stack.extend(n.children.borrow().iter().cloned());
    }
}

/// The caption line of `n` when `n` is a box of exactly a picture and one short line.
fn caption_of(n: &Handle) -> Option<Handle> {
    if !matches!(name(n), "div" | "span") {
        return None;
    }
    let children = n.children.borrow();
    let mut elements = Vec::new();
    for c in children.iter() {
        match &c.data {
            NodeData::Text { contents } if !contents.borrow().trim().is_empty() => return None,
            NodeData::Element { .. } => elements.push(Rc::clone(c)),
            _ => {}
        }
    }
    let [a, b] = elements.as_slice() else {
        return None;
    };
    let (picture, line) = if is_picture(a) { (a, b) } else { (b, a) };
    if !is_picture(picture) || !matches!(name(line), "span" | "p" | "em" | "small" | "i") {
        return None;
    }
    let mut text = String::new();
    text_of(line, &mut text);
    let chars = text.chars().filter(|c| !c.is_whitespace()).count();
    (chars > 0 && chars <= MAX_CAPTION && !block_below(line)).then(|| Rc::clone(line))
}

/// A picture, or a link or wrapper holding only a picture (no text).
fn is_picture(n: &Handle) -> bool {
    match name(n) {
        "img" | "picture" => true,
        "a" | "span" | "div" => {
            let mut text = String::new();
            text_of(n, &mut text);
            text.trim().is_empty()
                && n.children
                    .borrow()
                    .iter()
                    .any(|c| matches!(name(c), "img" | "picture"))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::super::to_markdown;

    #[test]
    fn a_line_beside_a_picture_is_its_caption() {
        let paras: String = (0..4)
            .map(|i| format!("<p>Paragraph {i} on snow depth: stations, satellites and terrain, combined in one model, as the text explains.</p>"))
            .collect();
        let page = format!(
            "<html><body><article>{paras}<div class='imginline'><img src='/a.png'><span>Figure: the glacier compared, our model left, the observation right.</span></div><div><a href='/b.png'><img src='/b.png'></a><em>Photo: snow classes near the pass</em></div><p><img src='/c.png'> A paragraph that starts with a small picture stays, however short it is.</p></article></body></html>"
        );
        let md = to_markdown(&page).1;
        assert!(md.contains("Paragraph 3 on snow depth"), "{md}");
        assert!(
            md.contains("A paragraph that starts with a small picture stays"),
            "{md}"
        );
        assert!(
            !md.contains("glacier compared") && !md.contains("snow classes"),
            "{md}"
        );
    }
}
