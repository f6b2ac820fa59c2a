//! When `render: "auto"` renders: the page's HTML reads as (almost) nothing while it carries
//! scripts — the empty `<div id="root">` of a single-page app, filled in by JavaScript.

/// Below this many characters of extracted text (whitespace and markdown marks not counted)
/// a page says too little to be the page itself.
pub const TINY_TEXT_CHARS: usize = 200;

/// Whether `html`, whose main content extracted as `text`, is an app shell worth rendering.
pub fn looks_like_app_shell(html: &[u8], text: &str) -> bool {
    let words = text
        .chars()
        .filter(|c| c.is_alphanumeric())
        .take(TINY_TEXT_CHARS)
        .count();
    words < TINY_TEXT_CHARS && has_script(html)
}

fn has_script(html: &[u8]) -> bool {
    html.windows(7).any(|w| w.eq_ignore_ascii_case(b"<script"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_root_with_scripts_is_a_shell_and_an_article_is_not() {
        let spa = r#"<html><head><script type="module" src="/app.js"></script></head><body><div id="root"></div><noscript>You need to enable JavaScript to run this app.</noscript></body></html>"#;
        assert!(looks_like_app_shell(
            spa.as_bytes(),
            "You need to enable JavaScript to run this app."
        ));
        let upper = "<HTML><BODY><DIV ID=app></DIV><SCRIPT SRC=x.js></SCRIPT></BODY></HTML>";
        assert!(looks_like_app_shell(upper.as_bytes(), ""));
        // Short but scriptless: nothing more would come of rendering it.
        assert!(!looks_like_app_shell(
            b"<html><body><p>Gone.</p></body></html>",
            "Gone."
        ));
        let article = "word ".repeat(100);
        assert!(!looks_like_app_shell(
            "<html><body><script>track()</script><article>…</article></body></html>".as_bytes(),
            &article
        ));
    }
}
