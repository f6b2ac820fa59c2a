//! Parsing: html5ever into an rcdom tree without a parse-error log, with start tags past
//! [`PARSE_DEPTH`] levels kept from the tree builder, then [`flatten_deep`] unwrapping what is
//! nested deeper than [`MAX_DEPTH`]. Also the small tree helpers the other modules use.
//!
//! Every walk here uses an explicit stack. htmd's converter recurses once per level of nesting,
//! which is why the tree is flattened before it gets there: no page, however deep, can overflow the
//! stack, and the text of the deepest elements is still returned.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use html5ever::interface::{ElementFlags, NodeOrText, QuirksMode, TreeSink};
use html5ever::tendril::StrTendril;
use html5ever::tokenizer::{
    BufferQueue, TagKind, TagToken, Token, TokenSink, TokenSinkResult, Tokenizer,
};
use html5ever::tree_builder::TreeBuilder;
use html5ever::{Attribute, ExpandedName, LocalName, QualName, TokenizerResult};
use markup5ever_rcdom::{Handle, Node, NodeData, RcDom};

/// Levels of element nesting kept (the document node is level 0). Deeper elements are unwrapped:
/// their text and childless elements stay, in order, as children of the element at this level.
/// htmd needs roughly 1–2 KB of stack per level (more in debug builds); 256 levels fit easily in
/// a 2 MB thread stack.
pub const MAX_DEPTH: usize = 256;

/// Depth past which start tags (and their matching end tags) are not given to the tree builder
/// at all. html5ever scans its stack of open elements for most start tags (`<div>` looks for an
/// open `<p>` down to the bottom), which is quadratic in the depth: 50,000 nested `<div>` took
/// minutes. Kept above [`MAX_DEPTH`] so that [`flatten_deep`] decides what a deep page keeps.
pub(crate) const PARSE_DEPTH: usize = 2 * MAX_DEPTH;

const VOID_TAGS: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
    "wbr",
];

/// The local name of an element ("" for other nodes).
pub(crate) fn name(n: &Node) -> &str {
    match &n.data {
        NodeData::Element { name, .. } => &name.local,
        _ => "",
    }
}

/// The parent of a node, if it has one still alive.
pub(crate) fn parent_of(h: &Handle) -> Option<Handle> {
    let w = h.parent.take();
    h.parent.set(w.clone());
    w.and_then(|w| w.upgrade())
}

/// Whether `inner` is `outer` or below it.
pub(crate) fn contains(outer: &Handle, inner: &Handle) -> bool {
    let mut cur = Some(Rc::clone(inner));
    while let Some(n) = cur {
        if Rc::ptr_eq(&n, outer) {
            return true;
        }
        cur = parent_of(&n);
    }
    false
}

pub(crate) fn tag(h: &Handle) -> Option<String> {
    match &h.data {
        NodeData::Element { name, .. } => Some(name.local.to_string()),
        _ => None,
    }
}

pub(crate) fn attr(h: &Handle, key: &str) -> Option<String> {
    match &h.data {
        NodeData::Element { attrs, .. } => attrs
            .borrow()
            .iter()
            .find(|a| a.name.local.as_ref() == key)
            .map(|a| a.value.to_string()),
        _ => None,
    }
}

/// The first node in document order matching `pred`.
pub(crate) fn find(h: &Handle, pred: &dyn Fn(&Handle) -> bool) -> Option<Handle> {
    let mut stack = vec![Rc::clone(h)];
    while let Some(n) = stack.pop() {
        if pred(&n) {
            return Some(n);
        }
        stack.extend(n.children.borrow().iter().rev().cloned());
    }
    None
}

pub(crate) fn text_of(h: &Handle, out: &mut String) {
    let mut stack = vec![Rc::clone(h)];
    while let Some(n) = stack.pop() {
        if let NodeData::Text { contents } = &n.data {
            out.push_str(&contents.borrow());
        }
        stack.extend(n.children.borrow().iter().rev().cloned());
    }
}

/// Elements whose end separates words: when one is unwrapped a space takes its place.
pub(crate) fn is_block(h: &Handle) -> bool {
    tag(h).is_some_and(|t| {
        matches!(
            t.as_str(),
            "address"
                | "article"
                | "blockquote"
                | "br"
                | "dd"
                | "div"
                | "dl"
                | "dt"
                | "figcaption"
                | "figure"
                | "h1"
                | "h2"
                | "h3"
                | "h4"
                | "h5"
                | "h6"
                | "header"
                | "hr"
                | "li"
                | "main"
                | "ol"
                | "p"
                | "pre"
                | "section"
                | "table"
                | "td"
                | "th"
                | "tr"
                | "ul"
        )
    })
}

/// Unwrap every element nested deeper than `max_depth` (the document is depth 0): the element at
/// `max_depth` gets, in document order, the text nodes and childless elements of its whole
/// subtree, with a space after each unwrapped block. Returns how many elements were unwrapped.
pub fn flatten_deep(doc: &Handle, max_depth: usize) -> usize {
    let mut unwrapped = 0;
    let mut stack = vec![(Rc::clone(doc), 0usize)];
    while let Some((node, depth)) = stack.pop() {
        if depth < max_depth {
            stack.extend(
                node.children
                    .borrow()
                    .iter()
                    .map(|c| (Rc::clone(c), depth + 1)),
            );
            continue;
        }
        if node
            .children
            .borrow()
            .iter()
            .all(|c| c.children.borrow().is_empty())
        {
            continue;
        }
        let kids = std::mem::take(&mut *node.children.borrow_mut());
        let mut pending: Vec<Handle> = kids.into_iter().rev().collect();
        let mut flat = Vec::new();
        while let Some(n) = pending.pop() {
            let grand = std::mem::take(&mut *n.children.borrow_mut());
            if grand.is_empty() {
                n.parent.set(Some(Rc::downgrade(&node)));
                flat.push(n);
                continue;
            }
            unwrapped += 1;
            if is_block(&n) {
                pending.push(Node::new(NodeData::Text {
                    contents: RefCell::new(StrTendril::from(" ")),
                }));
            }
            pending.extend(grand.into_iter().rev());
        }
        *node.children.borrow_mut() = flat;
    }
    unwrapped
}

/// rcdom without its parse-error log. RcDom keeps every parse error in a `Vec`, two or three per
/// NUL byte of a NUL-filled body (about 100 bytes of memory per input byte); nothing here reads
/// them.
/// It also keeps an estimate of the tree builder's current depth for [`DepthGuard`].
struct QuietDom(RcDom, Cell<usize>);

/// Levels above `h` (the document is 0), counted up to `limit`.
fn depth(h: &Handle, limit: usize) -> usize {
    let parent = |n: &Handle| {
        let w = n.parent.take();
        n.parent.set(w.clone());
        w.and_then(|w| w.upgrade())
    };
    let (mut d, mut cur) = (0, parent(h));
    while let Some(p) = cur {
        d += 1;
        if d >= limit {
            break;
        }
        cur = parent(&p);
    }
    d
}

impl TreeSink for QuietDom {
    type Handle = Handle;
    type Output = Handle;
    type ElemName<'a> = ExpandedName<'a>;

    fn finish(self) -> Handle {
        Rc::clone(&self.0.document)
    }
    fn parse_error(&self, _msg: Cow<'static, str>) {}
    fn get_document(&self) -> Handle {
        self.0.get_document()
    }
    fn elem_name<'a>(&'a self, target: &'a Handle) -> ExpandedName<'a> {
        self.0.elem_name(target)
    }
    fn create_element(&self, name: QualName, attrs: Vec<Attribute>, flags: ElementFlags) -> Handle {
        self.0.create_element(name, attrs, flags)
    }
    fn create_comment(&self, text: StrTendril) -> Handle {
        self.0.create_comment(text)
    }
    fn create_pi(&self, target: StrTendril, data: StrTendril) -> Handle {
        self.0.create_pi(target, data)
    }
    fn append(&self, parent: &Handle, child: NodeOrText<Handle>) {
        let d = depth(parent, PARSE_DEPTH + 1);
        self.1.set(match child {
            NodeOrText::AppendNode(_) => d + 1,
            NodeOrText::AppendText(_) => d,
        });
        self.0.append(parent, child)
    }
    fn pop(&self, node: &Handle) {
        self.1.set(depth(node, PARSE_DEPTH + 1).saturating_sub(1));
    }
    fn append_based_on_parent_node(
        &self,
        element: &Handle,
        prev_element: &Handle,
        child: NodeOrText<Handle>,
    ) {
        self.0
            .append_based_on_parent_node(element, prev_element, child)
    }
    fn append_doctype_to_document(
        &self,
        name: StrTendril,
        public_id: StrTendril,
        system_id: StrTendril,
    ) {
        self.0
            .append_doctype_to_document(name, public_id, system_id)
    }
    fn get_template_contents(&self, target: &Handle) -> Handle {
        self.0.get_template_contents(target)
    }
    fn same_node(&self, x: &Handle, y: &Handle) -> bool {
        self.0.same_node(x, y)
    }
    fn set_quirks_mode(&self, mode: QuirksMode) {
        self.0.set_quirks_mode(mode)
    }
    fn append_before_sibling(&self, sibling: &Handle, new_node: NodeOrText<Handle>) {
        self.0.append_before_sibling(sibling, new_node)
    }
    fn add_attrs_if_missing(&self, target: &Handle, attrs: Vec<Attribute>) {
        self.0.add_attrs_if_missing(target, attrs)
    }
    fn remove_from_parent(&self, target: &Handle) {
        self.0.remove_from_parent(target)
    }
    fn reparent_children(&self, node: &Handle, new_parent: &Handle) {
        self.0.reparent_children(node, new_parent)
    }
    fn is_mathml_annotation_xml_integration_point(&self, handle: &Handle) -> bool {
        self.0.is_mathml_annotation_xml_integration_point(handle)
    }
    // `maybe_clone_an_option_into_selectedcontent` keeps the trait's no-op: rcdom's copies an
    // `<option>` subtree recursively (and searches the whole `<select>` for every selected option)
    // to render a `<selectedcontent>`, which adds nothing to the text.
}

/// Characters that only hint at where a line may break or words join — a soft hyphen
/// (`&shy;`, put between the syllables of long German words), a zero-width space, a word
/// joiner, a zero-width no-break space. Rendered, they are nothing; left in the text they
/// split words for a reader that matches or tokenizes it ("Mit\u{ad}tel\u{ad}al\u{ad}ter").
/// The joiners that change how a script or an emoji is drawn (U+200C, U+200D) stay.
const INVISIBLE: [char; 4] = ['\u{ad}', '\u{200b}', '\u{2060}', '\u{feff}'];

/// `text` without [`INVISIBLE`] characters; None when it holds none.
fn without_invisible(text: &StrTendril) -> Option<StrTendril> {
    if text.is_ascii() || !text.contains(INVISIBLE) {
        return None;
    }
    let kept: String = text.chars().filter(|c| !INVISIBLE.contains(c)).collect();
    Some(StrTendril::from(kept))
}

/// Between the tokenizer and the tree builder: past [`PARSE_DEPTH`] a start tag of a non-void
/// element is dropped (its text still arrives, one level up), and so is the end tag that matches
/// it, so the elements around stay as they were.
struct DepthGuard {
    tb: TreeBuilder<Handle, QuietDom>,
    dropped: RefCell<HashMap<LocalName, usize>>,
}

impl TokenSink for DepthGuard {
    type Handle = Handle;

    fn process_token(&self, token: Token, line_number: u64) -> TokenSinkResult<Handle> {
        if let Token::CharacterTokens(text) = &token
            && let Some(visible) = without_invisible(text)
        {
            return self
                .tb
                .process_token(Token::CharacterTokens(visible), line_number);
        }
        if let TagToken(tag) = &token {
            let mut dropped = self.dropped.borrow_mut();
            match tag.kind {
                TagKind::StartTag
                    if !tag.self_closing
                        && self.tb.sink.1.get() >= PARSE_DEPTH
                        && !VOID_TAGS.contains(&tag.name.as_ref()) =>
                {
                    *dropped.entry(tag.name.clone()).or_default() += 1;
                    return TokenSinkResult::Continue;
                }
                TagKind::EndTag => {
                    if let Some(n) = dropped.get_mut(&tag.name)
                        && *n > 0
                    {
                        *n -= 1;
                        return TokenSinkResult::Continue;
                    }
                }
                TagKind::StartTag => {}
            }
        }
        self.tb.process_token(token, line_number)
    }

    fn end(&self) {
        self.tb.end()
    }

    fn adjusted_current_node_present_but_not_in_html_namespace(&self) -> bool {
        self.tb
            .adjusted_current_node_present_but_not_in_html_namespace()
    }
}

/// Parse a whole document; no recursion, no error log, no quadratic depth.
pub(crate) fn parse(html: &str) -> Handle {
    let sink = QuietDom(RcDom::default(), Cell::new(0));
    let doc = Rc::clone(&sink.0.document);
    let guard = DepthGuard {
        tb: TreeBuilder::new(sink, Default::default()),
        dropped: RefCell::default(),
    };
    let tokenizer = Tokenizer::new(guard, Default::default());
    let input = BufferQueue::default();
    input.push_back(StrTendril::from(html));
    // A script's end or a `<meta charset>` pauses the tokenizer (to run the script, to switch
    // decoders); neither applies here, so carry on until the input is used up.
    while !matches!(tokenizer.feed(&input), TokenizerResult::Done) {}
    tokenizer.end();
    doc
}
