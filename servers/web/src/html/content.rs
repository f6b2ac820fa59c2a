//! Finding the main content of a parsed page.
//!
//! 1. [`strip_hard`]: what is never content goes first — scripts, styles, embedded objects,
//!    controls, hidden elements.
//! 2. [`super::boilerplate::strip_soft`]: boilerplate by tag, ARIA role or class/id marker
//!    (navigation, headers and footers, asides, cookie banners, share widgets, related links…)
//!    is cut out, unless the block holds the page's text (that module says when).
//! 3. [`choose`]: every paragraph-like element (`p`, `pre`, `td`, `blockquote`, a `div` holding
//!    only inline content, a list item that is not mostly a link, …) of 25 characters or more
//!    gives points to its ancestors — one, plus
//!    one per comma, plus one per 100 characters up to three; the parent gets them whole, the
//!    grandparent half, further ancestors a third per level. A candidate's score starts from its
//!    tag and its class/id hints (`content`, `article`, `post`, `body`… up; `comment`, `sidebar`,
//!    `related`, `promo`… down; a content hint counts in full only from 1,800 characters of prose,
//!    so a small block named `…body` cannot outrank the article) and is scaled by the share of
//!    its text that is not link text. A best block inside readers' replies or teasers (`forum`,
//!    `community`, `comment…`, `teaser`) gives way to the best block outside them that scores a
//!    quarter as well with 500 characters of prose, and replies never join an article as its
//!    siblings. An article whose sections are each wrapped deep gives way to the ancestor that
//!    scores half as well with twice as many paragraphs. The best candidate is joined by
//!    its siblings that score well, share its kind of class (`post bg1` beside `post bg2`) or
//!    read as prose. Then it climbs: through wrappers that add
//!    nothing, and — when several blocks were picked (a manual's sections) — to a parent they
//!    make 80% of (headings, an introduction). Semantic wrappers (`[itemprop=articleBody]`,
//!    `[role=main]` — Sphinx's `div.body` —, `<main>`, `<article>`) win when they agree with the
//!    scores: one around the chosen part that is not much larger than it and brings no
//!    comment-like block of any size, or one inside it that holds most of its text.
//! 4. [`clean`]: inside the chosen root, blocks that are mostly links (related-story lists, tag
//!    clouds, pagers) or carry a negative hint and links are dropped, unless they hold prose —
//!    and not at all when that would leave less than a fifth of the text (a post that is a list
//!    of annotated links).
//!
//! Every walk uses an explicit stack; the statistics are one post-order pass, kept in a map.

use std::collections::HashMap;
use std::rc::Rc;

use html5ever::{QualName, ns};
use markup5ever_rcdom::{Handle, Node, NodeData};

use super::headings::remove_marking;
use super::parse::{contains, name, parent_of};
use super::vocabulary::{BLOCKS, HARD_DROP, NEGATIVE, POSITIVE, REPLY_MARKERS};

pub(super) fn attr_lc(n: &Node, key: &str) -> Option<String> {
    match &n.data {
        NodeData::Element { attrs, .. } => attrs
            .borrow()
            .iter()
            .find(|a| a.name.local.as_ref() == key)
            .map(|a| a.value.to_ascii_lowercase()),
        _ => None,
    }
}

/// `class` and `id`, lower-cased, space-separated — without the tokens that describe a state
/// or a context rather than the block ([`modifier`]).
pub(super) fn marks(n: &Node) -> String {
    let class = attr_lc(n, "class").unwrap_or_default();
    let id = attr_lc(n, "id").unwrap_or_default();
    let kept: Vec<&str> = class
        .split_whitespace()
        .chain(id.split_whitespace())
        .filter(|t| !modifier(t))
        .collect();
    kept.join(" ")
}

/// A class such as `has-sidebar`, `and-w-sidebar`, `no-ads` or `modal-enabled`: it says what the
/// block has around it or what state it is in, not what it is — a wrapper of the whole article
/// carries them (`box article modal-enabled`).
fn modifier(token: &str) -> bool {
    let parts: Vec<&str> = token.split(['-', '_']).filter(|p| !p.is_empty()).collect();
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return false;
    };
    parts.len() >= 2
        && (matches!(*first, "has" | "with" | "without" | "no" | "is" | "and")
            || matches!(
                *last,
                "enabled" | "disabled" | "open" | "active" | "visible"
            ))
}

/// Points for class/id hints: +25 for a content hint, −25 for a boilerplate hint (both may apply).
pub(crate) fn class_weight(marks: &str) -> i32 {
    let mut w = 0;
    if NEGATIVE.iter().any(|m| marks.contains(m)) {
        w -= 25;
    }
    if POSITIVE.iter().any(|m| marks.contains(m)) {
        w += 25;
    }
    w
}

/// A candidate's points for its class/id hints: a content hint counts in full only on a block
/// with some prose of its own (a `span.avlinkbody` of 90 characters is no article body).
fn hint_points(marks: &str, prose: usize) -> f64 {
    let w = class_weight(marks) as f64;
    if w > 0.0 {
        w * (prose as f64 / 1800.0).min(1.0)
    } else {
        w
    }
}

fn is_hidden(n: &Node) -> bool {
    let NodeData::Element { attrs, .. } = &n.data else {
        return false;
    };
    attrs.borrow().iter().any(|a| match a.name.local.as_ref() {
        "hidden" => true,
        "aria-hidden" => a.value.as_ref() == "true",
        "style" => {
            let v: String = a
                .value
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect::<String>()
                .to_ascii_lowercase();
            v.contains("display:none") || v.contains("visibility:hidden")
        }
        _ => false,
    })
}

/// Remove every child matching `drop`, anywhere under `root`.
fn remove_where(root: &Handle, drop: &mut dyn FnMut(&Handle) -> bool) {
    let mut stack = vec![Rc::clone(root)];
    while let Some(n) = stack.pop() {
        n.children.borrow_mut().retain(|c| !drop(c));
        stack.extend(n.children.borrow().iter().cloned());
    }
}

/// Step 1: scripts, styles, objects, controls, comments and hidden elements.
pub(crate) fn strip_hard(root: &Handle) {
    remove_where(root, &mut |c| match &c.data {
        NodeData::Comment { .. } | NodeData::ProcessingInstruction { .. } => true,
        NodeData::Element { .. } => HARD_DROP.contains(&name(c)) || is_hidden(c),
        _ => false,
    });
}

/// What one element's subtree holds.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Stats {
    /// Characters of text, whitespace not counted.
    pub text: usize,
    /// Of which inside links.
    pub link: usize,
    /// Commas (Latin, CJK and Arabic).
    pub commas: usize,
    /// Paragraph-like elements of 25 characters or more.
    pub paras: usize,
    /// Whether a block element is below (or is) this one.
    pub has_block: bool,
}

impl Stats {
    pub fn link_density(&self) -> f64 {
        if self.text == 0 {
            0.0
        } else {
            self.link as f64 / self.text as f64
        }
    }
    pub fn prose(&self) -> usize {
        self.text.saturating_sub(self.link)
    }
}

pub(super) type Key = *const Node;

pub(super) fn key(h: &Handle) -> Key {
    Rc::as_ptr(h)
}

fn is_para_like(n: &Node, st: &Stats, block_below: bool) -> bool {
    match name(n) {
        "p" | "pre" | "td" | "blockquote" | "dd" | "li" | "article" => true,
        "div" | "section" | "span" | "font" | "center" => !block_below && st.text > 0,
        _ => false,
    }
}

/// Step 2's and 3's statistics: one post-order pass over `root`.
pub(crate) fn stats(root: &Handle) -> HashMap<Key, Stats> {
    let mut map: HashMap<Key, Stats> = HashMap::new();
    let mut stack = vec![(Rc::clone(root), false)];
    while let Some((n, done)) = stack.pop() {
        if !done {
            stack.push((Rc::clone(&n), true));
            stack.extend(n.children.borrow().iter().map(|c| (Rc::clone(c), false)));
            continue;
        }
        let mut st = Stats::default();
        let mut block_below = false;
        for c in n.children.borrow().iter() {
            match &c.data {
                NodeData::Text { contents } => {
                    let t = contents.borrow();
                    st.text += t.chars().filter(|c| !c.is_whitespace()).count();
                    st.commas += t.matches([',', '，', '、', '،']).count();
                }
                NodeData::Element { .. } => {
                    if let Some(cs) = map.get(&key(c)) {
                        st.text += cs.text;
                        st.link += cs.link;
                        st.commas += cs.commas;
                        st.paras += cs.paras;
                        block_below |= cs.has_block;
                    }
                }
                _ => {}
            }
        }
        let tag = name(&n);
        if tag == "a" {
            st.link = st.text;
        }
        if is_para_like(&n, &st, block_below) && st.text >= 25 {
            st.paras += 1;
        }
        st.has_block = block_below || BLOCKS.contains(&tag);
        map.insert(key(&n), st);
    }
    map
}

/// `[itemprop=articleBody]`: the page's own word for where its article's text is.
pub(crate) fn article_body(n: &Node) -> bool {
    attr_lc(n, "itemprop").is_some_and(|v| v.contains("articlebody"))
}

/// A candidate's starting points from its tag.
fn tag_base(tag: &str) -> f64 {
    match tag {
        "div" | "article" | "main" => 5.0,
        "pre" | "td" | "blockquote" | "section" => 3.0,
        "address" | "ol" | "ul" | "dl" | "dd" | "dt" | "li" | "form" => -3.0,
        "h1" | "h2" | "h3" | "h4" | "h5" | "h6" | "th" => -5.0,
        _ => 0.0,
    }
}

/// Every element under `root` in document order.
pub(crate) fn elements(root: &Handle) -> Vec<Handle> {
    let mut out = Vec::new();
    let mut stack = vec![Rc::clone(root)];
    while let Some(n) = stack.pop() {
        if matches!(n.data, NodeData::Element { .. }) {
            out.push(Rc::clone(&n));
        }
        stack.extend(n.children.borrow().iter().rev().cloned());
    }
    out
}

/// Whether a block element (one of [`BLOCKS`]) is anywhere below `n`.
pub(crate) fn block_below(n: &Handle) -> bool {
    let mut stack: Vec<Handle> = n.children.borrow().iter().cloned().collect();
    while let Some(c) = stack.pop() {
        if BLOCKS.contains(&name(&c)) {
            return true;
        }
        stack.extend(c.children.borrow().iter().cloned());
    }
    false
}

/// What [`choose`] picked.
pub(crate) struct Choice {
    /// The content root: an element of the page, or a new `div` holding the chosen siblings.
    pub root: Handle,
    /// Characters of non-link text in it.
    pub prose: usize,
    /// Whether any paragraph scored at all (false: the page has no prose to speak of).
    pub scored: bool,
}

type Scores = HashMap<Key, (f64, Handle)>;

/// Step 3: the main content under `body` (already stripped).
pub(crate) fn choose(body: &Handle) -> Choice {
    let map = stats(body);
    let st = |h: &Handle| map.get(&key(h)).copied().unwrap_or_default();
    let all = elements(body);
    let (score, seen_para) = score_paragraphs(&all, &map);
    let final_score = |h: &Handle| {
        score.get(&key(h)).map(|(raw, _)| {
            let ld = map.get(&key(h)).map_or(0.0, |s| s.link_density());
            raw * (1.0 - ld)
        })
    };
    let best = first_best(all.iter().filter_map(|h| final_score(h).map(|sc| (sc, h))));
    let Some((best_score, best)) = best else {
        return Choice {
            prose: st(body).prose(),
            root: Rc::clone(body),
            scored: false,
        };
    };
    let (best_score, best) = clean_rival(&best, best_score, body, &all, &map, &final_score)
        .unwrap_or((best_score, best));
    // Climb while the chosen part is most of its parent (a manual's sections, a section's
    // sub-sections): the parent adds only glue — headings, an introduction, a title page.
    let mut anchor = article_ancestor(best, best_score, body, &map, &final_score);
    let mut picked = pick_siblings(&anchor, best_score, body, &map, &final_score);
    loop {
        let Some(parent) =
            parent_of(&anchor).filter(|p| !Rc::ptr_eq(&anchor, body) && !Rc::ptr_eq(p, body))
        else {
            break;
        };
        // A wrapper that adds (almost) nothing is climbed; otherwise only a body split into
        // several blocks climbs — a single block's parent is where headlines, bylines and
        // teasers live (a headline block picked beside the body is no part: parts hold 200
        // characters).
        let blocks = picked
            .iter()
            .filter(|h| score.contains_key(&key(h)) && st(h).text >= 200)
            .count();
        let picked_text: usize = picked.iter().map(|h| st(h).text).sum();
        let parent_text = st(&parent).text;
        let wrapper = picked_text * 100 >= parent_text * 97;
        if !wrapper && (blocks < 2 || picked_text * 10 < parent_text * 8) {
            break;
        }
        anchor = parent;
        picked = pick_siblings(&anchor, best_score, body, &map, &final_score);
    }
    let picked_prose: usize = picked.iter().map(|h| st(h).prose()).sum();
    // Semantic wrappers that agree with the scores.
    for s in semantic_roots(&all) {
        let sp = st(&s).prose();
        let around = contains(&s, &anchor)
            && sp * 10 <= picked_prose.max(1) * 15
            && hinted_away(&s, &anchor, &map, &|m| class_weight(m) < 0) * 4 <= picked_prose;
        let inside = !Rc::ptr_eq(&s, &anchor)
            && contains(&anchor, &s)
            && sp * 10 >= picked_prose * 6
            && picked.len() == 1;
        if around || inside {
            return Choice {
                root: s,
                prose: sp,
                scored: true,
            };
        }
    }
    let root = if picked.len() == 1 {
        Rc::clone(&picked[0])
    } else {
        let div = Node::new(NodeData::Element {
            name: QualName::new(None, ns!(html), "div".into()),
            attrs: Default::default(),
            template_contents: Default::default(),
            mathml_annotation_xml_integration_point: false,
        });
        *div.children.borrow_mut() = picked;
        div
    };
    Choice {
        root,
        prose: picked_prose,
        scored: seen_para,
    }
}

/// Every paragraph-like element's points, given to its ancestors (see the module's step 3);
/// and whether there was any paragraph at all.
fn score_paragraphs(all: &[Handle], map: &HashMap<Key, Stats>) -> (Scores, bool) {
    let st = |h: &Handle| map.get(&key(h)).copied().unwrap_or_default();
    let mut score: Scores = HashMap::new();
    let mut seen_para = false;
    for el in all {
        let s = st(el);
        let block_below = el
            .children
            .borrow()
            .iter()
            .any(|c| map.get(&key(c)).is_some_and(|cs| cs.has_block));
        // List items count when they read as prose (not a list of links: navigation, teasers).
        let para = is_para_like(el, &s, block_below)
            && s.text >= 25
            && name(el) != "article"
            && !(name(el) == "li" && s.link_density() >= 0.5);
        // Loose text straight in a container that also holds blocks (an article written as text
        // and `<br>`s beside a share bar) reads as a paragraph of that container.
        let (points, first) = if para {
            let points = 1.0 + s.commas as f64 + (s.text as f64 / 100.0).floor().min(3.0);
            (points, parent_of(el))
        } else if block_below {
            let (mut len, mut commas) = (0usize, 0usize);
            for c in el.children.borrow().iter() {
                if let NodeData::Text { contents } = &c.data {
                    let t = contents.borrow();
                    len += t.chars().filter(|c| !c.is_whitespace()).count();
                    commas += t.matches([',', '，', '、', '،']).count();
                }
            }
            if len < 25 {
                continue;
            }
            (
                1.0 + commas as f64 + (len as f64 / 100.0).floor().min(3.0),
                Some(Rc::clone(el)),
            )
        } else {
            continue;
        };
        seen_para = true;
        let mut cur = first;
        let mut level = 0;
        while let Some(anc) = cur {
            if level >= 5 || matches!(anc.data, NodeData::Document) || name(&anc) == "html" {
                break;
            }
            let entry = score.entry(key(&anc)).or_insert_with(|| {
                (
                    tag_base(name(&anc)) + hint_points(&marks(&anc), st(&anc).prose()),
                    Rc::clone(&anc),
                )
            });
            let div = match level {
                0 => 1.0,
                1 => 2.0,
                l => l as f64 * 3.0,
            };
            entry.0 += points / div;
            level += 1;
            cur = parent_of(&anc);
        }
    }
    (score, seen_para)
}

/// When the best block sits in one marked as readers' replies or teasers (comments that
/// outweigh a short article, a `forum` of replies under it, a teaser list), the best block
/// outside it without such a mark that scores at least a quarter as well with 500+ characters
/// of prose and few links: the article they follow.
fn clean_rival(
    best: &Handle,
    best_score: f64,
    body: &Handle,
    all: &[Handle],
    map: &HashMap<Key, Stats>,
    final_score: &dyn Fn(&Handle) -> Option<f64>,
) -> Option<(f64, Handle)> {
    let replies = |h: &Handle| {
        let mut cur = Some(Rc::clone(h));
        while let Some(n) = cur.filter(|n| !Rc::ptr_eq(n, body)) {
            if marked_as_replies(&n) {
                return true;
            }
            cur = parent_of(&n);
        }
        false
    };
    if !replies(best) {
        return None;
    }
    let st = |h: &Handle| map.get(&key(h)).copied().unwrap_or_default();
    first_best(
        all.iter()
            .filter(|h| !contains(h, best) && !contains(best, h))
            .filter_map(|h| final_score(h).map(|sc| (sc, h)))
            .filter(|(sc, h)| {
                *sc >= best_score * 0.25
                    && st(h).prose() >= 500
                    && st(h).link_density() < 0.2
                    && !replies(h)
            }),
    )
}

/// The highest-scoring element, the first in document order among equal scores: a score map's
/// order changes from run to run, and a page of identical blocks (a live blog's entries) must
/// extract the same each time.
fn first_best<'a>(scored: impl Iterator<Item = (f64, &'a Handle)>) -> Option<(f64, Handle)> {
    scored
        .reduce(|kept, next| if next.0 > kept.0 { next } else { kept })
        .map(|(sc, h)| (sc, Rc::clone(h)))
}

/// Whether the element's class/id marks readers' replies or teasers ([`REPLY_MARKERS`]).
fn marked_as_replies(n: &Handle) -> bool {
    replies_in(&marks(n))
}

/// Whether class/id words hold a [`REPLY_MARKERS`] fragment.
fn replies_in(marks: &str) -> bool {
    let m = marks.replace("commentary", "");
    REPLY_MARKERS.iter().any(|r| m.contains(r))
}

/// The best block, or — an article split into sections, each wrapped deep — the outermost
/// ancestor that scores at least half as well while holding twice as many paragraphs,
/// as clean of links, and no comment-like block of note.
fn article_ancestor(
    best: Handle,
    best_score: f64,
    body: &Handle,
    map: &HashMap<Key, Stats>,
    final_score: &dyn Fn(&Handle) -> Option<f64>,
) -> Handle {
    let st = |h: &Handle| map.get(&key(h)).copied().unwrap_or_default();
    let paras = st(&best).paras;
    let mut chosen = Rc::clone(&best);
    let mut cur = parent_of(&best);
    while let Some(a) = cur.filter(|a| !Rc::ptr_eq(a, body)) {
        let s = st(&a);
        if final_score(&a).is_some_and(|sc| sc >= best_score * 0.5)
            && s.paras >= paras * 2
            && s.link_density() < 0.15
            && hinted_away(&a, &best, map, &replies_in) * 10 <= s.text
        {
            chosen = Rc::clone(&a);
        }
        cur = parent_of(&a);
    }
    chosen
}

/// `anchor` and the siblings that belong with it: those that score at least a fifth of the best
/// candidate (with a bonus for sharing its class) and paragraphs that read as prose.
fn pick_siblings(
    anchor: &Handle,
    best_score: f64,
    body: &Handle,
    map: &HashMap<Key, Stats>,
    final_score: &dyn Fn(&Handle) -> Option<f64>,
) -> Vec<Handle> {
    let Some(parent) = parent_of(anchor).filter(|_| !Rc::ptr_eq(anchor, body)) else {
        return vec![Rc::clone(anchor)];
    };
    let st = |h: &Handle| map.get(&key(h)).copied().unwrap_or_default();
    let threshold = (best_score * 0.2).max(10.0);
    let anchor_class = attr_lc(anchor, "class");
    // Readers' replies beside an article are not more of it (replies beside a reply are: a
    // thread's posts).
    let anchor_replies = marked_as_replies(anchor);
    let mut picked = Vec::new();
    for sib in parent.children.borrow().iter() {
        let keep = if Rc::ptr_eq(sib, anchor) {
            true
        } else if !matches!(sib.data, NodeData::Element { .. })
            || (!anchor_replies && marked_as_replies(sib))
        {
            false
        } else {
            let s = st(sib);
            let mut sc = final_score(sib).unwrap_or(f64::MIN);
            let ld = s.link_density();
            // Same kind of block as the anchor and prose like it (a thread's next post) — not a
            // list of teasers that shares a layout class (`grid-x main-wrapper`).
            let same_kind = name(sib) == name(anchor)
                && ld < 0.3
                && alike(anchor_class.as_deref(), attr_lc(sib, "class").as_deref());
            if same_kind {
                sc += best_score * 0.2;
            }
            // The next section of the same article, wrapped as deep as the anchor's: its own
            // score is a few levels' share of its paragraphs', so its prose decides.
            if same_kind && s.paras >= 2 && s.prose() >= 400 && ld < 0.1 {
                sc = sc.max(threshold);
            }
            // Joined by its score only while it reads as prose: a list of teasers beside the
            // article (a third of it links) scores on its excerpts.
            (sc >= threshold && ld < 0.25)
                || (name(sib) == "p" && s.text > 80 && ld < 0.25)
                || (name(sib) == "p" && s.text > 0 && ld == 0.0 && {
                    let mut t = String::new();
                    super::parse::text_of(sib, &mut t);
                    t.trim_end().ends_with(['.', '!', '?', '。'])
                })
        };
        if keep {
            picked.push(Rc::clone(sib));
        }
    }
    picked
}

/// Text under `wrapper`, outside `anchor`, in blocks whose class or id is `hinted` (at
/// boilerplate: comments, related links…): what taking the wrapper instead of the anchor would
/// bring in.
fn hinted_away(
    wrapper: &Handle,
    anchor: &Handle,
    map: &HashMap<Key, Stats>,
    hinted: &dyn Fn(&str) -> bool,
) -> usize {
    let mut total = 0;
    let mut stack: Vec<Handle> = wrapper.children.borrow().iter().cloned().collect();
    while let Some(n) = stack.pop() {
        if Rc::ptr_eq(&n, anchor) || !matches!(n.data, NodeData::Element { .. }) {
            continue;
        }
        if hinted(&marks(&n)) && !contains(&n, anchor) {
            total += map.get(&key(&n)).map_or(0, |s| s.text);
            continue;
        }
        stack.extend(n.children.borrow().iter().cloned());
    }
    total
}

/// Whether two class lists mark the same kind of block: at least half of the longer one's
/// classes in common (`post bg1` and `post bg2`: a thread's posts in alternating colours).
fn alike(a: Option<&str>, b: Option<&str>) -> bool {
    let (Some(a), Some(b)) = (a, b) else {
        return false;
    };
    let a: Vec<&str> = a.split_whitespace().collect();
    let b: Vec<&str> = b.split_whitespace().collect();
    let common = a.iter().filter(|c| b.contains(c)).count();
    common > 0 && common * 2 >= a.len().max(b.len())
}

/// Semantic content wrappers, most specific first: `[itemprop=articleBody]`, `[role=main]`,
/// `<main>`, then `<article>`s by size.
fn semantic_roots(all: &[Handle]) -> Vec<Handle> {
    let mut body = Vec::new();
    let mut role = Vec::new();
    let mut main = Vec::new();
    let mut article = Vec::new();
    for el in all {
        if attr_lc(el, "itemprop").is_some_and(|v| v.split_whitespace().any(|t| t == "articlebody"))
        {
            body.push(Rc::clone(el));
        } else if attr_lc(el, "role").is_some_and(|r| r == "main") {
            role.push(Rc::clone(el));
        } else {
            match name(el) {
                "main" => main.push(Rc::clone(el)),
                "article" => article.push(Rc::clone(el)),
                _ => {}
            }
        }
    }
    body.into_iter()
        .chain(role)
        .chain(main)
        .chain(article)
        .collect()
}

/// Step 4: link lists and hinted boilerplate out of the chosen root.
pub(crate) fn clean(root: &Handle) {
    let map = stats(root);
    let rk = key(root);
    let root_text = map.get(&rk).map_or(0, |s| s.text);
    let noise = |c: &Handle| {
        let tag = name(c);
        if !matches!(
            tag,
            "div" | "section" | "ul" | "ol" | "dl" | "table" | "figure" | "aside" | "header" | "p"
        ) || key(c) == rk
        {
            return false;
        }
        let Some(s) = map.get(&key(c)) else {
            return false;
        };
        if s.text == 0 {
            // Images, spacers: htmd keeps images; keep figures, drop empty wrappers' noise.
            return false;
        }
        if s.commas >= 10 {
            return false;
        }
        let ld = s.link_density();
        let w = class_weight(&marks(c));
        (ld > 0.5 && s.prose() < 400) || (w < 0 && ld > 0.2) || (w < 0 && s.paras == 0)
    };
    // Cleaning that would leave under a fifth of what was chosen is not cleaning: the content
    // is itself a list of links (a post of annotated bookmarks, a directory page).
    let cut: usize = matching_tops(root, &noise)
        .iter()
        .map(|c| map.get(&key(c)).map_or(0, |s| s.text))
        .sum();
    if cut * 10 >= root_text * 8 {
        return;
    }
    remove_marking(root, &mut |c| noise(c));
}

/// The elements under `root` that match `pred`, not looking inside a match.
fn matching_tops(root: &Handle, pred: &dyn Fn(&Handle) -> bool) -> Vec<Handle> {
    let mut out = Vec::new();
    let mut stack: Vec<Handle> = root.children.borrow().iter().cloned().collect();
    while let Some(n) = stack.pop() {
        if !matches!(n.data, NodeData::Element { .. }) {
            continue;
        }
        if pred(&n) {
            out.push(n);
        } else {
            stack.extend(n.children.borrow().iter().cloned());
        }
    }
    out
}
