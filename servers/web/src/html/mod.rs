//! HTML → clean markdown of the main content.
//!
//! The page is parsed once ([`parse`]: html5ever into an rcdom tree, parse errors not recorded,
//! invisible break hints dropped, the tree flattened below [`MAX_DEPTH`] levels of nesting).
//! Captions written without `<figcaption>` go first ([`captions`]); the main content is then
//! found by [`boilerplate`] (blocks stripped by tag, role, class/id vocabulary, and share bars by
//! where their links go ([`share`]), unless they hold the page's text) and [`content`]
//! (paragraphs scored into their containers, semantic wrappers checked against the scores, link
//! lists cleaned out, headings whose section was cut out dropped ([`headings`])) and converted
//! with htmd; a [`lead`] the page sets beside its title, apart from the chosen block, goes
//! before it. An article body shipped as a template for a script to insert is read as markup
//! first ([`template`]). A page whose body holds no prose (a video or a script-rendered page)
//! falls back to its [`metadata`] — schema.org JSON-LD `articleBody` / `description`,
//! `og:description`, `<meta name=description>` —, and a thin body that leaves out the page's
//! summary gets it as its lead. The text comes in Unicode's composed form (NFC).

mod boilerplate;
mod captions;
mod content;
mod headings;
mod labels;
mod lead;
mod listing;
mod metadata;
mod notices;
mod parse;
mod share;
mod template;
mod vocabulary;

use std::rc::Rc;

use htmd::HtmlToMarkdown;

pub use parse::{MAX_DEPTH, flatten_deep};
use parse::{find, tag, text_of};

/// `s` with every run of whitespace one space, none at the ends.
pub(super) fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The page title and its main content as markdown.
///
/// The third value counts the elements unwrapped because they were nested deeper than
/// [`MAX_DEPTH`] (0 for any ordinary page).
pub fn to_markdown(html: &str) -> (Option<String>, String, usize) {
    let converter = HtmlToMarkdown::builder()
        .skip_tags(vocabulary::HARD_DROP.to_vec())
        .build();
    let doc = parse::parse(html);
    template::inline_article_templates(&doc);
    let unwrapped = flatten_deep(&doc, MAX_DEPTH);
    let title = find(&doc, &|h| tag(h).as_deref() == Some("title")).map(|t| {
        let mut s = String::new();
        text_of(&t, &mut s);
        squash(&s)
    });
    let meta = metadata::read(&doc);
    let body =
        find(&doc, &|h| tag(h).as_deref() == Some("body")).unwrap_or_else(|| Rc::clone(&doc));
    captions::drop_captions(&body);
    content::strip_hard(&body);
    let header_lead = lead::header_lead(&body);
    boilerplate::strip_soft(&body);
    let choice = listing::prefer_article(&body, content::choose(&body));
    content::clean(&choice.root);
    labels::drop_label_lines(&choice.root);
    headings::drop_orphans(&choice.root);
    let md = notices::drop_php_notices(&converter.tree_to_markdown(&choice.root));
    let md = lead::add_lead(md, header_lead, &body, &choice.root);
    let mut md = metadata::fill_in(md, &meta, &choice, &body);
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
    (title.map(|t| composed(&t)), composed(md.trim()), unwrapped)
}

/// `text` in Unicode's composed form (NFC): "ü" as one character, not "u" and a combining
/// diaeresis, as a reader searching or comparing the text expects.
fn composed(text: &str) -> String {
    use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick};
    match is_nfc_quick(text.chars()) {
        IsNormalized::Yes => text.to_string(),
        _ => text.nfc().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_article_in_deeply_wrapped_sections_is_read_whole() {
        // Each section wraps its paragraphs five levels deep, a figure between them: the
        // paragraphs' points do not reach a section, so its prose has to join it.
        let part = |n: u32| {
            let p = format!(
                "<p>Section {n} of the article goes on, with commas, clauses, and the detail an \
                 article has, sentence after sentence, for the reader, who reads on to the \
                 end of it.</p>"
            );
            format!(
                "<section class=\"outer slice\"><div><div><div><div><div class=\"copy\">\
                 {p}{p}{p}{p}</div></div></div></div></div></section><figure><img src=\"x.png\"></figure>"
            )
        };
        let parts: String = (1..=3).map(part).collect();
        // Links beside the sections, in the same parent: the sections are not most of it.
        let links: String = (1..=30)
            .map(|n| format!("<li><a href=\"/t{n}\">Topic number {n} of the site</a></li>"))
            .collect();
        let html = format!(
            "<html><body><div class=\"post\">{parts}<ul class=\"x\">{links}</ul></div></body></html>"
        );
        let md = to_markdown(&html).1;
        for n in 1..=3 {
            assert!(md.contains(&format!("Section {n} of")), "{md}");
        }
    }

    #[test]
    fn equal_blocks_extract_the_same_every_time() {
        // Two blocks that score the same (same lengths, same commas, other words): the pick
        // must not follow a hash map's order.
        let entry = |word: &str| {
            format!(
                "<div class=\"e\"><p>{word}: an entry of the live blog, with commas, clauses, \
                 and words enough to read as a paragraph of prose.</p></div>"
            )
        };
        let html = format!(
            "<html><body><div>{}</div><div>{}</div></body></html>",
            entry("Alpha"),
            entry("Bravo")
        );
        let first = to_markdown(&html).1;
        for _ in 0..50 {
            assert_eq!(to_markdown(&html).1, first);
        }
        assert!(first.contains("Alpha"), "{first}");
    }

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
        let (title, md, unwrapped) = to_markdown(html);
        assert_eq!(unwrapped, 0);
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

    /// Far deeper than htmd could walk on a 2 MB stack (the test thread's), each kind of element.
    #[test]
    fn deep_nesting_is_flattened_not_recursed() {
        let kinds = [
            "b",
            "div",
            "span",
            "i",
            "a href=\"/x\"",
            "blockquote",
            "ul><li",
            "em",
            "section",
            "code",
            "p",
            "table><tr><td",
            "strong",
        ];
        for open in kinds {
            let html = format!(
                "<html><head><title>t</title></head><body>{}innermost words</body></html>",
                format!("<{open}>").repeat(5_000)
            );
            let (_, md, unwrapped) = to_markdown(&html);
            assert!(md.contains("innermost words"), "<{open}>: {md:.200}");
            // A new <a> or <p> closes the open one, so those never nest.
            assert_eq!(unwrapped > 0, !open.starts_with(['a', 'p']), "<{open}>");
        }
        let mixed: String = (0..6000)
            .map(|i| format!("<div><span>level {i} </span><b>"))
            .collect();
        let (_, md, unwrapped) = to_markdown(&format!("<body>{mixed}bottom text</body>"));
        assert!(unwrapped > 0);
        assert!(md.contains("bottom text"), "{md:.200}");
        assert!(md.contains("level 5999"), "deep text kept in order");
        let five = md.find("level 5").unwrap_or(usize::MAX);
        assert!(five < md.find("level 5999").unwrap_or(0));
    }

    #[test]
    fn flattening_keeps_text_order_and_separates_blocks() {
        let html = format!(
            "<body>{}<p>one</p><p>two<b>three</b></p>four</body>",
            "<div>".repeat(MAX_DEPTH)
        );
        let (_, md, unwrapped) = to_markdown(&html);
        assert!(unwrapped > 0);
        assert!(md.contains("one two"), "{md:.400}");
        assert!(md.contains("twothree") && md.contains("four"), "{md:.400}");
        // Just under the limit nothing is unwrapped.
        let html = format!("<body>{}<p>x</p></body>", "<div>".repeat(MAX_DEPTH - 5));
        assert_eq!(to_markdown(&html).2, 0);
    }

    #[test]
    fn meta_charset_and_scripts_do_not_stop_the_parse() {
        let html = "<html><head><meta charset=\"utf-8\"><title>t</title><script>x()</script></head><body><p>after</p></body></html>";
        assert_eq!(to_markdown(html).1, "# t\n\nafter");
    }

    #[test]
    fn nul_bytes_do_not_break_the_text() {
        let html = format!("<body><p>a{}b</p></body>", "\0".repeat(10_000));
        let (_, md, _) = to_markdown(&html);
        assert_eq!(md, "ab");
    }

    #[test]
    fn the_text_comes_composed() {
        // "Größe" written with combining marks, and a Bengali letter whose composed form NFC
        // takes apart (U+09DF is excluded from composition).
        let html = "<title>Gro\u{308}\u{df}e</title><body><p>Gro\u{308}\u{df}e \u{9df}</p></body>";
        let (title, md, _) = to_markdown(html);
        assert_eq!(title.as_deref(), Some("Größe"));
        assert_eq!(md, "# Größe\n\nGröße \u{9af}\u{9bc}");
    }

    #[test]
    fn invisible_break_hints_leave_the_text() {
        // A soft hyphen written out and as an entity, a zero-width space, a word joiner; the
        // zero-width joiner of an emoji sequence stays.
        let html = "<body><p>Mit\u{ad}tel&shy;al\u{200b}ter&#x2060;lich \u{1f469}\u{200d}\u{1f52c}</p></body>";
        let (_, md, _) = to_markdown(html);
        assert_eq!(md, "Mittelalterlich \u{1f469}\u{200d}\u{1f52c}");
    }

    fn para(n: usize, words: &str) -> String {
        (0..n)
            .map(|i| format!("<p>{words} number {i}, with commas, and enough words to count.</p>"))
            .collect()
    }

    #[test]
    fn sphinx_body_beats_a_long_sidebar() {
        let links: String = (0..200)
            .map(|i| format!("<li><a href=\"/m{i}.html\">module {i}</a></li>"))
            .collect();
        let html = format!(
            "<body><div class=\"document\"><div class=\"documentwrapper\"><div class=\"body\" role=\"main\"><h1>json</h1>{}</div></div></div><div class=\"sphinxsidebar\" role=\"navigation\"><ul>{links}</ul></div></body>",
            para(6, "Encoding basic Python object hierarchies")
        );
        let (_, md, _) = to_markdown(&html);
        assert!(
            md.contains("Encoding basic Python object hierarchies number 5"),
            "{md}"
        );
        assert!(!md.contains("module 7"), "{md}");
    }

    #[test]
    fn a_teaser_article_does_not_hide_the_story() {
        let html = format!(
            "<body><article class=\"card\"><a href=\"/x\"><h3>Watch live now</h3></a></article><div class=\"story-body\"><h1>Storm</h1>{}</div><div class=\"more\"><a href=\"/1\">One more story</a> <a href=\"/2\">Another story</a></div></body>",
            para(5, "The storm closed the coast road")
        );
        let (_, md, _) = to_markdown(&html);
        assert!(md.contains("closed the coast road number 4"), "{md}");
        assert!(
            !md.contains("Watch live") && !md.contains("Another story"),
            "{md}"
        );
    }

    #[test]
    fn loose_text_beside_blocks_is_a_paragraph() {
        let text = "The council registered two break-ins overnight, the vans were damaged, and the police came. ".repeat(3);
        let html = format!(
            "<body><div class=\"col\"><ul>{}</ul></div><div class=\"col\"><p class=\"title\">Break-ins</p>{text}<br><br><div class=\"row\"><a href=\"/s\">Share</a></div></div></body>",
            "<li><a href=\"/a\">Archive month</a></li>".repeat(30)
        );
        let (_, md, _) = to_markdown(&html);
        assert!(md.contains("registered two break-ins"), "{md}");
        assert!(!md.contains("Archive month"), "{md}");
    }

    #[test]
    fn a_page_without_prose_falls_back_to_its_metadata() {
        let desc = "In this talk we follow one request through the kernel, from the interrupt to the read call, and look at where the time goes.";
        let html = format!(
            "<html><head><title>Packets - Video</title><script type=\"application/ld+json\">{{\"@type\":\"VideoObject\",\"description\":\"{desc}\"}}</script></head><body><nav><a href=\"/\">Home</a></nav><h1>Packets</h1><ul><li><a href=\"/v1\">Up next: ray tracing</a></li></ul></body></html>"
        );
        let (_, md, _) = to_markdown(&html);
        assert_eq!(md, format!("# Packets\n\n{desc}"));
    }

    #[test]
    fn a_thin_page_leads_with_its_summary_when_it_leaves_it_out() {
        let desc = "New York is the centre of the pandemic in the US. Sport has come to a halt, the leagues grieve, and nobody knows what comes next.";
        let page = |controls: &str, body: &str| {
            format!(
                "<html><head><meta name='description' content='{desc}'></head><body><div class='player'><h1>Sport in times of Corona</h1><p>{controls}</p></div>{body}</body></html>"
            )
        };
        // The description sits in a caption box under the player, cut out as a caption; what
        // is left is the player's own controls.
        let controls = "Saved to your list! Removed from your list! Rated! Rating removed! Copy the embed code to your clipboard, please mind the terms of use of the broadcaster and its partners, and share it with care.";
        let caption = format!("<div class='item-caption'><p>{desc}</p></div>");
        let md = to_markdown(&page(controls, &caption)).1;
        assert!(
            md.starts_with(&format!("# Sport in times of Corona\n\n{desc}\n\nSaved to")),
            "{md}"
        );
        // Already in the text, with other quote marks and split in two: not repeated.
        let split = desc.replacen(". ", ".</p><p>", 1).replace("US", "U’S");
        let body = format!(
            "<div><p>{split}</p><p>The leagues meet again on Monday to talk about the season.</p></div>"
        );
        let md = to_markdown(&page("Saved! Rated!", &body)).1;
        assert_eq!(md.matches("centre of the pandemic").count(), 1, "{md}");
    }

    #[test]
    fn a_manual_split_in_sections_comes_whole() {
        // AsciiDoc: every section is its own block; the best one alone is a fraction of the page.
        let sections: String = (0..6)
            .map(|i| {
                format!(
                    "<div class=\"sect1\"><h2>Part {i}</h2><div class=\"sectionbody\"><div class=\"paragraph\">{}</div></div></div>",
                    para(2 + i % 3, &format!("Section {i} explains the workflow"))
                )
            })
            .collect();
        let html = format!(
            "<body><div id=\"header\"><h1>gitworkflows(7)</h1></div><div id=\"content\">{sections}</div><div id=\"footer\"><a href=\"/\">Last updated</a></div></body>"
        );
        let (_, md, _) = to_markdown(&html);
        for i in 0..6 {
            assert!(md.contains(&format!("Section {i} explains")), "{md}");
            assert!(md.contains(&format!("Part {i}")), "{md}");
        }
    }

    #[test]
    fn posts_in_alternating_colours_are_one_thread() {
        let post = |bg: u8, text: &str| {
            format!(
                "<div class=\"post has-profile bg{bg}\"><div class=\"postbody\"><div class=\"content\">{text}</div></div></div><hr>"
            )
        };
        let html = format!(
            "<body><div id=\"page-body\"><h2>Boot fails</h2>{}{}{}</div></body>",
            post(2, &"After the update the board never boots from the drive, only from the card, and the log is empty. ".repeat(4)),
            post(1, "Add the retries setting to the bootloader configuration and it will find the drive."),
            post(2, "That fixed it, thank you, boot time is back to eight seconds.")
        );
        let (_, md, _) = to_markdown(&html);
        assert!(
            md.contains("retries setting") && md.contains("That fixed it"),
            "{md}"
        );
    }

    #[test]
    fn an_article_wrapper_that_brings_comments_is_not_taken() {
        let comments = para(3, "I disagree with the prosecutor, said a reader");
        let html = format!(
            "<body><article><h3>Prosecutor weighs appeal</h3><div class=\"cuerpo\">{}</div><div id=\"comment_form_container\"><h2>Comment</h2>{comments}</div></article></body>",
            para(8, "The prosecutor met his superior in Madrid")
        );
        let (_, md, _) = to_markdown(&html);
        assert!(md.contains("met his superior in Madrid number 7"), "{md}");
        assert!(!md.contains("said a reader"), "{md}");
    }

    #[test]
    fn a_boxed_note_inside_the_text_stays() {
        let html = format!(
            "<body><div class=\"section\"><h2>6.2. apt-get</h2>{}<div class=\"sidebar\"><p class=\"title\">TIP</p>{}</div>{}</div><div class=\"sidebar\"><ul>{}</ul></div></body>",
            para(3, "APT is a vast project"),
            para(2, "Incremental index updates save bandwidth"),
            para(2, "The sources list names the repositories"),
            "<li><a href=\"/x\">Another chapter</a></li>".repeat(20)
        );
        let (_, md, _) = to_markdown(&html);
        assert!(
            md.contains("Incremental index updates save bandwidth number 1"),
            "{md}"
        );
        assert!(!md.contains("Another chapter"), "{md}");
    }

    #[test]
    fn class_hints_weigh_both_ways() {
        assert_eq!(content::class_weight("entry-content"), 25);
        assert_eq!(content::class_weight("sidebar widget"), -25);
        assert_eq!(content::class_weight("post-comments"), 0);
        assert_eq!(content::class_weight("row col-md-9"), 0);
    }

    /// A story of several long paragraphs, each containing `word`.
    pub(super) fn story(word: &str) -> String {
        (0..5)
            .map(|i| format!("<p>Paragraph {i} about {word}, which goes on for a while, with commas, clauses and enough words to count as prose in anybody's reading.</p>"))
            .collect()
    }

    #[test]
    fn wrappers_that_only_look_like_boilerplate_keep_the_article() {
        let nav: String = (0..40)
            .map(|i| format!("<li><a href='/s{i}'>Section number {i}</a></li>"))
            .collect();
        // The ASP.NET page: everything inside one <form>, link-heavy menus included.
        let page = format!(
            "<html><body><form id='f'><ul>{nav}</ul><div class='body'>{}</div></form></body></html>",
            story("herons")
        );
        assert!(
            to_markdown(&page).1.contains("Paragraph 4 about herons"),
            "form"
        );
        // A state class on the article box is not a modal, a context class not a sidebar.
        for class in ["box article modal-enabled", "main has-sidebar"] {
            let page = format!(
                "<html><body><ul>{nav}</ul><div class='{class}'>{}</div></body></html>",
                story("otters")
            );
            assert!(
                to_markdown(&page).1.contains("Paragraph 4 about otters"),
                "{class}"
            );
        }
    }

    #[test]
    fn comments_images_captions_and_bylines_stay_out() {
        let comments: String = (0..12)
            .map(|i| format!("<div class='comment'><p>Comment {i} from a reader who has a lot to say about this, at length, with commas, and then some more words.</p></div>"))
            .collect();
        let page = format!(
            "<html><body><article><p class='byline'>By Jo Writer</p><figure><img src='/b.jpg' alt='a crane'><figcaption>Photo: agency</figcaption></figure><p><img src='/a.jpg' alt='a heron'> The heron stood in the shallows for an hour, still, patient, and then it struck.</p>{}<div class='widget-custom-cta-letter'><h5>A word to our loyal readers</h5><p>Support us and make a difference for readers everywhere, every day, with a gift of any size.</p></div><div><a class='recipe-print-button'>Print the story</a> <a class='pin-btn'>Save it on a board</a></div><span class='post-ratings'><strong>Did you like it?</strong> (rated by nobody so far)</span><p class='autor'>Patricio Candia | Palma de Mallorca | 08/01/2014</p><div class='entry-utility'>This entry was posted in General. Bookmark the permalink.</div><p class='field-lizenz'>This text is published under a Creative Commons licence.</p><div class='column community-notice'>This post gives the author's opinion, not necessarily the editors'.</div><div class='recipe-slider'><h4>Similar dishes for you to try out</h4><ul><li>Roast chicken with lemon and thyme</li><li>Chicken soup with noodles</li></ul></div></article><div class='comments-area'>{comments}</div></body></html>",
            story("herons")
        );
        let md = to_markdown(&page).1;
        assert!(md.contains("Paragraph 4 about herons"), "{md}");
        for gone in [
            "Comment 3",
            "a.jpg",
            "a heron",
            "Photo: agency",
            "Jo Writer",
            "loyal readers",
            "Print the story",
            "on a board",
            "nobody so far",
            "Candia",
            "This entry was posted",
            "Creative Commons",
            "not necessarily the editors",
            "Similar dishes",
        ] {
            assert!(!md.contains(gone), "{gone} in {md}");
        }
    }

    #[test]
    fn a_tiny_block_with_a_content_class_does_not_outrank_the_article() {
        // Each paragraph in its own wrapper (the article's points spread over levels) and a
        // 90-character audio link whose class holds "body".
        let paras: String = (0..4)
            .map(|i| format!("<div class='paragraph'><p>Paragraph {i} of the report, which goes on, with commas, clauses, and the detail a report has, sentence after sentence, for the reader who reads on to its end, and then a little more of it.</p></div>"))
            .collect();
        let page = format!(
            "<html><body><div class='box'>{paras}</div><div class='player'><span class='avlinkbody'><p>Listen, audio, one minute, here and now.</p><p>Play, pause, stop, rewind, and more.</p></span><ul><li><a href='/a.mp3'>Download the audio file</a></li><li><a href='/feed'>Subscribe to the podcast feed</a></li></ul></div></body></html>"
        );
        let md = to_markdown(&page).1;
        for i in 0..4 {
            assert!(md.contains(&format!("Paragraph {i} of the report")), "{md}");
        }
    }

    #[test]
    fn a_post_that_is_a_list_of_links_is_not_cleaned_away() {
        let items: String = (0..8)
            .map(|i| format!("<li><p class='link'><a href='https://example.org/{i}'>Headline number {i} of the bookmarked stories</a></p><p>via <a href='https://example.org'>example.org</a></p></li>"))
            .collect();
        let page = format!(
            "<html><body><article><h1>Links of the day</h1><div class='entry-content'><ul>{items}</ul></div></article></body></html>"
        );
        let md = to_markdown(&page).1;
        for i in 0..8 {
            assert!(md.contains(&format!("Headline number {i}")), "{md}");
        }
    }

    #[test]
    fn a_long_consent_dialog_is_not_content() {
        let notice: String = (0..5)
            .map(|i| format!("<p>Notice {i}: we and our partners store and read information on your device, with cookies, identifiers, and similar means, to measure, to personalise, and to advertise.</p>"))
            .collect();
        let page = format!(
            "<html><body><div class='post'><p>The council met on Monday, and after a long debate, with many voices, it voted for the new bridge.</p><p>Work starts in spring, the mayor said, and the old ferry runs until the bridge opens to traffic.</p><p>The bridge will carry two lanes, a cycle path and a footway, and it should open in three years.</p></div><div DIALOG><div class='cmplz-body'>{notice}</div></div></body></html>"
        );
        // Known by its role, or by its class.
        for dialog in ["role='dialog' class='box'", "class='cmplz-cookiebanner'"] {
            let page = page.replace("DIALOG", dialog);
            let md = to_markdown(&page).1;
            assert!(md.contains("voted for the new bridge"), "{dialog}: {md}");
            assert!(!md.contains("Notice 3"), "{dialog}: {md}");
        }
    }

    #[test]
    fn a_login_box_is_not_content_even_as_an_article() {
        // A video page: two sentences of its own, and the account dialogs the player's page
        // carries, each an `<article>`, with more text than the page.
        let messages: String = (0..4)
            .map(|i| format!("<p>Message {i}: your password must be at least eight characters long, with a capital letter, a digit and a special character, or the account cannot be created.</p>"))
            .collect();
        let page = format!(
            "<html><body><div class='player-page'><h1>Sport in times of Corona</h1><p>The leagues stopped their seasons in March, and the players went home, as the clubs decided together.</p><p>When they play again, the video explains, and what the clubs lose meanwhile.</p></div><article DIALOG><div class='inner'>{messages}</div></article></body></html>"
        );
        for dialog in ["class='password-modal dark-modal'", "class='login-popup'"] {
            let md = to_markdown(&page.replace("DIALOG", dialog)).1;
            assert!(md.contains("the players went home"), "{dialog}: {md}");
            assert!(!md.contains("Message 2"), "{dialog}: {md}");
        }
    }

    #[test]
    fn a_short_article_body_inside_an_aside_is_the_article() {
        // A news agency's item of one paragraph, wrapped in the site's `<aside>` frame, on a
        // page whose menus and teasers hold most of the text.
        let teasers: String = (0..12)
            .map(|i| format!("<li><a href='/t{i}'>Teaser {i}: another story from the region, the city and the county</a></li>"))
            .collect();
        let page = format!(
            "<html><body><nav><ul>{teasers}</ul></nav><main><aside class='frame direct-content'><section><article><div itemprop='articleBody'><p>Frankfurt (dpa) - For a novel about the old republic the author received this year's book prize. The jury called it the best new book of the year, told in fragments from the view of a thirteen-year-old. The prize has been given since 2005 and is the most important award of the trade, the academy said.</p></div></article></section></aside></main><footer><ul>{teasers}</ul></footer></body></html>"
        );
        let md = to_markdown(&page).1;
        assert!(md.contains("received this year's book prize"), "{md}");
        assert!(!md.contains("Teaser 3"), "{md}");
    }

    #[test]
    fn a_text_block_marked_for_its_pictures_or_share_buttons_stays() {
        // The body's paragraphs sit in a block whose class names what a theme attaches to it
        // (a lightbox gallery for its pictures, share buttons); a real share bar beside it.
        let paras: String = (0..8)
            .map(|i| format!("<p>Paragraph {i} of the press release: the relief agency, with its volunteers, helps more people each year, as droughts, floods and storms grow, and it says so in detail.</p>"))
            .collect();
        for marked in ["o-media js-lightbox-gallery", "entry themeform share"] {
            // The site's link lists hold more text than the release: the block is not most
            // of the page.
            let links: String = (0..60)
                .map(|i| format!("<li><a href='/topic/{i}'>Topic {i}: relief work, volunteering and first aid courses</a></li>"))
                .collect();
            let page = format!(
                "<html><body><div class='page-body'><h1>Press release</h1><div class='{marked}'>{paras}</div><div class='share'><a href='https://www.facebook.com/sharer.php?u=x'>Facebook</a> <a href='https://twitter.com/intent/tweet?url=x'>Twitter</a></div></div><aside><ul>{links}</ul></aside></body></html>"
            );
            let md = to_markdown(&page).1;
            assert!(
                md.contains("Paragraph 3 of the press release"),
                "{marked}: {md}"
            );
            assert!(!md.contains("Facebook"), "{marked}: {md}");
        }
    }

    #[test]
    fn a_share_box_around_the_named_content_keeps_it() {
        // A short post (four paragraphs) in `entry-content`, which the theme wraps in its
        // sticky share icons' box, which holds a quarter of the page's text.
        let paras: String = (0..4)
            .map(|i| format!("<p>Paragraph {i} of the post: we were at the climate march yesterday, with thousands of people, and we will be there again, as the plan explains.</p>"))
            .collect();
        let links: String = (0..20)
            .map(|i| format!("<li><a href='/topic/{i}'>Topic {i}: meetings, motions and local elections</a></li>"))
            .collect();
        let page = format!(
            "<html><body><nav><ul>{links}</ul></nav><div class='wrap'><h1>We support the march</h1><div id='socialicons-sticky'><div class='entry-content'>{paras}</div></div></div><footer><p>The local chapter meets every second Thursday at the town hall, room 4, at eight in the evening; guests are welcome, and so are questions by letter or by phone.</p></footer></body></html>"
        );
        let md = to_markdown(&page).1;
        assert!(md.contains("Paragraph 2 of the post"), "{md}");
        // A consent notice for an embed in a `social-embed` box stays out: `text-…` classes
        // name a typeface, and the notice is too short to be the page's content.
        let embed = "<div class='social-embed'><div class='px-4 text-center text-white'><h3>Recommended content</h3><p class='text-body-l'>Here you find external content from a picture service that adds to the article; one click shows it.</p><p>I agree that external content is shown to me, so personal data may go to third parties.</p></div></div>";
        let page = format!(
            "<html><body><article><h1>Boots</h1>{}{embed}</article></body></html>",
            story("boots")
        );
        let md = to_markdown(&page).1;
        assert!(
            md.contains("Paragraph 4 about boots") && !md.contains("I agree"),
            "{md}"
        );
    }

    #[test]
    fn a_comment_list_outweighing_the_post_stays_out() {
        let comments: String = (0..10)
            .map(|i| format!("<li><p>Reader {i} writes: I disagree, and at length, because the post, as far as I can tell, leaves out what matters most here, and then some.</p><cite>Comment by Reader {i}</cite></li>"))
            .collect();
        let page = format!(
            "<html><body><div id='content'><div class='post'><div class='storycontent'>{}</div></div><h2>10 Comments</h2><ol id='commentlist'>{comments}</ol></div></body></html>",
            story("pseudonyms")
        );
        let md = to_markdown(&page).1;
        assert!(md.contains("Paragraph 4 about pseudonyms"), "{md}");
        assert!(!md.contains("Reader 3 writes"), "{md}");
    }

    #[test]
    fn an_article_of_separately_wrapped_sections_comes_whole() {
        // Each section's paragraphs sit in a column of a row: the best block is one section's
        // column, and the article around the sections scores near it.
        let section = |n: u32| {
            let paras: String = (0..3)
                .map(|i| format!("<p>Section {n}, paragraph {i}: the industry recovers, orders grow, and suppliers hire again, as the report explains in detail.</p>"))
                .collect();
            format!(
                "<section id='block-{n}'><div class='row'><div class='col'>{paras}</div></div></section>"
            )
        };
        let sections: String = (1..=4).map(section).collect();
        let nav: String = (0..20)
            .map(|i| format!("<li><a href='/n{i}'>Navigation entry {i}</a></li>"))
            .collect();
        let page = format!(
            "<html><body><div class='wrap'><ul>{nav}</ul><div class='blocks'>{sections}</div></div></body></html>"
        );
        let md = to_markdown(&page).1;
        for n in 1..=4 {
            assert!(md.contains(&format!("Section {n}, paragraph 2")), "{md}");
        }
    }

    #[test]
    fn an_article_written_inside_its_header_is_read() {
        // Each section an <article> whose paragraphs sit in its <header>; beside them an
        // embed's notice, the only prose outside a header.
        let sections: String = ["herons", "egrets", "storks"]
            .iter()
            .map(|w| {
                format!(
                    "<section><article><header><h2>On {w}</h2>{}</header></article></section>",
                    story(w)
                )
            })
            .collect();
        let notice = "<div class='box'><div>To protect your data, loading the content of an external provider was blocked. If you want to see it, agree to the terms below; you can withdraw your consent at any time, as the privacy page explains.</div></div>";
        let page = format!("<html><body><main>{sections}{notice}</main></body></html>");
        let md = to_markdown(&page).1;
        for w in ["herons", "egrets", "storks"] {
            assert!(md.contains(&format!("Paragraph 4 about {w}")), "{md}");
        }
        // An article header of a title and a byline is still left out.
        let page = format!(
            "<html><body><article><header><h1>Herons</h1><p>Posted by Jo Writer on 3 May, in Birds, Wetlands and Rivers</p></header>{}</article></body></html>",
            story("herons")
        );
        let md = to_markdown(&page).1;
        assert!(
            md.contains("Paragraph 4 about herons") && !md.contains("Jo Writer"),
            "{md}"
        );
    }

    #[test]
    fn replies_outweighing_a_short_article_stay_out() {
        let article: String = (0..4)
            .map(|i| format!("<p>Paragraph {i} of the column: the architect, now old, looks back, with doubt, with pride, and with the patience of someone who built for others all his life.</p>"))
            .collect();
        let replies: String = (0..24)
            .map(|i| format!("<li><p>Reply {i}: thank you for this text, it moved me, and I agree with most of it.</p></li>"))
            .collect();
        // A SPIP blog: the replies in a `forum` list after the text; a taz page: the article and
        // its readers' page side by side, the second marked `community`.
        let layouts = [
            format!(
                "<div id='content'><div class='texte'>{article}</div><div class='divforum'><ul class='forum'>{replies}</ul></div></div>"
            ),
            format!(
                "<div id='pages'><div class='full page n1'><div class='sect'><article>{article}</article></div></div><div class='full community page n2'><div class='sect'><ul>{replies}</ul></div></div></div>"
            ),
        ];
        for layout in layouts {
            let md = to_markdown(&format!("<html><body>{layout}</body></html>")).1;
            assert!(md.contains("Paragraph 3 of the column"), "{md}");
            assert!(!md.contains("Reply 7"), "{md}");
        }
    }

    #[test]
    fn a_comment_form_is_not_part_of_the_article() {
        // Its box is marked `post` as well as `comment`: the hints cancel, so only the comment
        // vocabulary keeps it out of the page's `<main>`.
        let page = format!(
            "<html><body><main><div class='cuerpo'>{}</div><div class='box post_formulario sf_comment_form_container_624c'><h3>Comentar</h3><p>Normas de uso: the comments are the opinion of their authors, not of this newspaper, which may remove them.</p></div></main></body></html>",
            story("ferries")
        );
        let md = to_markdown(&page).1;
        assert!(md.contains("Paragraph 4 about ferries"), "{md}");
        assert!(!md.contains("Normas de uso"), "{md}");
    }
}
