//! HTML → clean markdown of the main content.
//!
//! The page is parsed once; the main content root is chosen (`<main>`, `<article>`,
//! `[role=main]`, else `<body>`), boilerplate subtrees (scripts, styles, navigation, footers,
//! asides, forms, cookie and consent banners, share widgets) are cut out of the tree, and the
//! rest is converted with htmd.

use std::rc::Rc;

use htmd::HtmlToMarkdown;
use markup5ever_rcdom::{Handle, NodeData};

const DROP_TAGS: &[&str] = &[
    "script", "style", "noscript", "template", "iframe", "svg", "canvas", "nav", "footer", "aside",
    "form", "button", "dialog", "select", "input", "object", "embed",
];

/// Class/id fragments of boilerplate blocks.
const DROP_MARKERS: &[&str] = &[
    "cookie",
    "consent",
    "gdpr",
    "banner",
    "advert",
    "ads-",
    "-ads",
    "promo",
    "newsletter",
    "subscribe",
    "share",
    "social",
    "popup",
    "modal",
    "sidebar",
    "breadcrumb",
    "navbar",
    "menu",
    "related",
    "comments",
    "skip-link",
];

const DROP_ROLES: &[&str] = &[
    "navigation",
    "banner",
    "contentinfo",
    "complementary",
    "dialog",
    "alertdialog",
    "search",
];

fn tag(h: &Handle) -> Option<String> {
    match &h.data {
        NodeData::Element { name, .. } => Some(name.local.to_string()),
        _ => None,
    }
}

fn attr(h: &Handle, key: &str) -> Option<String> {
    match &h.data {
        NodeData::Element { attrs, .. } => attrs
            .borrow()
            .iter()
            .find(|a| a.name.local.as_ref() == key)
            .map(|a| a.value.to_string()),
        _ => None,
    }
}

fn find(h: &Handle, pred: &dyn Fn(&Handle) -> bool) -> Option<Handle> {
    if pred(h) {
        return Some(h.clone());
    }
    for c in h.children.borrow().iter() {
        if let Some(f) = find(c, pred) {
            return Some(f);
        }
    }
    None
}

fn text_of(h: &Handle, out: &mut String) {
    if let NodeData::Text { contents } = &h.data {
        out.push_str(&contents.borrow());
    }
    for c in h.children.borrow().iter() {
        text_of(c, out);
    }
}

fn is_boilerplate(h: &Handle, root_is_body: bool) -> bool {
    let Some(t) = tag(h) else { return false };
    if DROP_TAGS.contains(&t.as_str()) || (root_is_body && t == "header") {
        return true;
    }
    if attr(h, "hidden").is_some() || attr(h, "aria-hidden").is_some_and(|v| v == "true") {
        return true;
    }
    if attr(h, "role").is_some_and(|r| DROP_ROLES.contains(&r.to_ascii_lowercase().as_str())) {
        return true;
    }
    let marks = format!(
        "{} {}",
        attr(h, "class").unwrap_or_default().to_ascii_lowercase(),
        attr(h, "id").unwrap_or_default().to_ascii_lowercase()
    );
    // Never drop the page's main wrappers by marker alone.
    !matches!(t.as_str(), "main" | "article" | "body" | "html")
        && DROP_MARKERS.iter().any(|m| marks.contains(m))
}

fn prune(h: &Handle, root_is_body: bool) {
    h.children
        .borrow_mut()
        .retain(|c| !is_boilerplate(c, root_is_body));
    for c in h.children.borrow().iter() {
        prune(c, root_is_body);
    }
}

/// The page title and its main content as markdown.
pub fn to_markdown(html: &str) -> (Option<String>, String) {
    let converter = HtmlToMarkdown::builder()
        .skip_tags(DROP_TAGS.to_vec())
        .build();
    let Ok(doc) = converter.html_to_tree(html) else {
        return (None, String::new());
    };
    let title = find(&doc, &|h| tag(h).as_deref() == Some("title")).map(|t| {
        let mut s = String::new();
        text_of(&t, &mut s);
        s.split_whitespace().collect::<Vec<_>>().join(" ")
    });
    let main = find(&doc, &|h| tag(h).as_deref() == Some("main"))
        .or_else(|| find(&doc, &|h| attr(h, "role").is_some_and(|r| r == "main")))
        .or_else(|| find(&doc, &|h| tag(h).as_deref() == Some("article")));
    let (root, root_is_body) = match main {
        Some(m) => (m, false),
        None => (
            find(&doc, &|h| tag(h).as_deref() == Some("body")).unwrap_or_else(|| Rc::clone(&doc)),
            true,
        ),
    };
    prune(&root, root_is_body);
    let mut md = converter.tree_to_markdown(&root);
    // Collapse runs of blank lines left by removed blocks.
    while md.contains("\n\n\n") {
        md = md.replace("\n\n\n", "\n\n");
    }
    let title = title.filter(|t| !t.is_empty());
    if let Some(t) = &title
        && !md.trim_start().starts_with('#')
    {
        md = format!("# {t}\n\n{md}");
    }
    (title, md.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_content_drops_boilerplate() {
        let html = r#"<html><head><title>Rust 2026 Roadmap</title><style>body{}</style></head><body>
            <nav><a href="/">Home</a><a href="/blog">Blog</a></nav>
            <div class="cookie-banner">We use cookies. <button>Accept</button></div>
            <main><h1>The Roadmap</h1><p>Three goals: <a href="https://example.org/a">faster builds</a> and more.</p>
            <ul><li>one</li><li>two</li></ul><pre><code>fn main() {}</code></pre>
            <table><tr><th>Area</th><th>Owner</th></tr><tr><td>Compiler</td><td>T-compiler</td></tr></table>
            <div class="share-buttons">Share on X</div></main>
            <script>track()</script><footer>© 2026 Example</footer></body></html>"#;
        let (title, md) = to_markdown(html);
        assert_eq!(title.as_deref(), Some("Rust 2026 Roadmap"));
        assert!(md.starts_with("# The Roadmap"), "{md}");
        assert!(
            md.contains("[faster builds](https://example.org/a)"),
            "{md}"
        );
        assert!(md.contains("one") && md.contains("fn main() {}"), "{md}");
        assert!(md.contains("Compiler") && md.contains("T-compiler"), "{md}");
        for gone in [
            "Home",
            "cookies",
            "Share on X",
            "track()",
            "© 2026",
            "body{}",
        ] {
            assert!(!md.contains(gone), "{gone} should be dropped: {md}");
        }
    }
}
